//! The D-Bus objects: the manager, one object per hook, and the per-process state
//! that the target's arena headers keep true.

use std::collections::HashMap;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use argstash_dbus::{Error, ErrorKind, HookEntry, Thread, MANAGER_PATH};
use argstash_dbus::{OPT_ALWAYS_STOP, OPT_PYTHON};
use argstash_dbus::{
    OPT_FLOAT_ARGS, OPT_FUNCTION_STACK_ARGS, OPT_SHOW_TRAMPOLINES, OPT_SIGNATURES, OPT_STACK_ARGS,
};
use async_io::{Async, Timer};
use futures_lite::future;
use injector::reader::args::{parse_params, split_function, Signature};
use injector::reader::symbols::FuncSpec;
use injector::reader::unwind::BacktraceOptions;
use injector::SessionError;
use injector::{
    eject, install, list, EjectOptions, EjectReport, EjectWhat, HookInfo, HookTarget,
    InstallOptions, InstallReport, Pid, Tid,
};
use trampolines::arena::HookState;
use zbus::fdo::DBusProxy;
use zbus::message::Header;
use zbus::names::{BusName, UniqueName};
use zbus::object_server::SignalEmitter;
use zbus::zvariant::{OwnedObjectPath, OwnedValue};
use zbus::{interface, Connection};

use crate::auth::{may_trace, may_trace_owned, owner_of, peer, Caller, Owner};
use crate::hints;
use crate::readers::ReaderCache;
use crate::worker::Workers;
use argstash_dbus::to_wire;

/// How often a watcher checks that its process still has its arenas (exec).
const EXEC_CHECK: Duration = Duration::from_secs(1);

/// Most callers whose uid is remembered at once.
const MAX_CALLERS: usize = 1024;

/// What the daemon knows of one process with arenas.
struct Proc {
    /// Active hooks by object path, as last read from the arena headers.
    hooks: HashMap<OwnedObjectPath, HookInfo>,
    /// Start time (clock ticks after boot), to tell a reused pid apart.
    start: u64,
    /// Who owned the process when it was first tracked: who may see its signals.
    owner: Option<Owner>,
}

/// A signal of the manager object, about one process.
enum Signal {
    /// `HookInstalled`.
    Installed(OwnedObjectPath),
    /// `HookRemoved`.
    Removed(OwnedObjectPath),
    /// `ProcessExited`, with the hooks it took with it.
    Exited(Vec<OwnedObjectPath>),
}

/// State shared by every object.
pub struct Shared {
    /// One worker thread per pid.
    pub workers: Workers,
    procs: Mutex<HashMap<i32, Proc>>,
    /// Serialises object-tree updates.
    sync_lock: async_lock::Mutex<()>,
    state_dir: PathBuf,
    dbus: OnceLock<DBusProxy<'static>>,
    /// Identities of callers by unique name (a unique name is never reused on a bus).
    callers: Mutex<HashMap<String, Caller>>,
    /// Readers reused by `Backtrace`.
    pub readers: ReaderCache,
    /// Signals waiting to be sent, in order, off the callers' path.
    signals: OnceLock<async_channel::Sender<(i32, Option<Owner>, Signal)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn invalid(msg: String) -> Error {
    Error::new(ErrorKind::InvalidArgs, msg)
}

/// The hooks an `Eject*` call names; `all_method` is the method to call for all.
fn functions_to_eject(functions: &[String], all_method: &str) -> Result<EjectWhat, Error> {
    if functions.is_empty() {
        return Err(invalid(format!(
            "name at least one function to eject (or call {all_method})"
        )));
    }
    Ok(EjectWhat::Functions(
        functions.iter().map(|f| FuncSpec::parse(f)).collect(),
    ))
}

fn pid_arg(pid: u32) -> Result<i32, Error> {
    i32::try_from(pid).map_err(|_| invalid(format!("{pid} is not a valid pid")))
}

impl Shared {
    /// No processes known yet; hints go to `state_dir`.
    pub fn new(workers: Workers, state_dir: PathBuf, readers: ReaderCache) -> Arc<Shared> {
        Arc::new(Shared {
            workers,
            procs: Mutex::new(HashMap::new()),
            sync_lock: async_lock::Mutex::new(()),
            state_dir,
            dbus: OnceLock::new(),
            callers: Mutex::new(HashMap::new()),
            readers,
            signals: OnceLock::new(),
        })
    }

    /// Remembers the bus connection's `org.freedesktop.DBus` proxy (for credentials).
    pub async fn connect(self: &Arc<Self>, conn: &Connection) -> zbus::Result<()> {
        let proxy = DBusProxy::builder(conn)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await?;
        let _ = self.dbus.set(proxy);
        // One task sends the signals, in the order they were raised, so that a
        // method's reply never waits for them (each needs the list of bus peers).
        let (tx, rx) = async_channel::unbounded();
        if self.signals.set(tx).is_ok() {
            let shared = self.clone();
            let c = conn.clone();
            conn.executor()
                .spawn(
                    async move {
                        while let Ok((pid, owner, signal)) = rx.recv().await {
                            shared.send_signal(&c, pid, owner.as_ref(), signal).await;
                        }
                    },
                    "signal sender",
                )
                .detach();
        }
        Ok(())
    }

    /// Checks that the caller may act on `pid`; returns the process's start time,
    /// which the worker checks again right before acting (a reused pid is refused).
    async fn authorize(&self, hdr: &Header<'_>, pid: i32) -> Result<Option<u64>, Error> {
        let who = self.caller(hdr).await?;
        let start = hints::start_time(pid);
        may_trace(who, pid)?;
        if hints::start_time(pid) != start {
            return Err(to_wire::error(
                pid,
                SessionError::NoSuchProcess { pid }.into(),
            ));
        }
        Ok(start)
    }

    /// The identity of the connection that sent `hdr`.
    async fn caller(&self, hdr: &Header<'_>) -> Result<Caller, Error> {
        let sender = hdr.sender().ok_or_else(|| {
            Error::new(
                ErrorKind::AccessDenied,
                "the call has no sender: cannot tell who is asking",
            )
        })?;
        self.peer(sender).await
    }

    /// The identity of the bus peer with unique name `name`, asked of the bus
    /// once per name (a unique name is never reused on a bus).
    async fn peer(&self, name: &UniqueName<'_>) -> Result<Caller, Error> {
        if let Some(who) = lock(&self.callers).get(name.as_str()) {
            return Ok(*who);
        }
        let dbus = self
            .dbus
            .get()
            .ok_or_else(|| Error::new(ErrorKind::Failed, "not connected yet"))?;
        let who = peer(dbus, name).await?;
        let mut callers = lock(&self.callers);
        if callers.len() >= MAX_CALLERS {
            callers.clear();
        }
        callers.insert(name.to_string(), who);
        Ok(who)
    }

    /// Queues `signal` about process `pid` (owned by `owner`, as read while it was tracked).
    fn signal(&self, pid: i32, owner: Option<Owner>, signal: Signal) {
        if let Some(tx) = self.signals.get() {
            let _ = tx.try_send((pid, owner, signal));
        }
    }

    /// Sends `signal` about process `pid` to each bus peer that may trace it:
    /// root, or its owner. Signals go to each peer by name rather than to the
    /// whole bus, so a hook's existence is shown to no one who could not see it
    /// with `ListHooks`.
    async fn send_signal(
        &self,
        conn: &Connection,
        pid: i32,
        owner: Option<&Owner>,
        signal: Signal,
    ) {
        let Some(dbus) = self.dbus.get() else {
            return;
        };
        let Ok(names) = dbus.list_names().await else {
            return;
        };
        let me = conn.unique_name().map(|n| n.as_str().to_string());
        for name in names {
            let BusName::Unique(name) = name.inner() else {
                continue;
            };
            if Some(name.as_str()) == me.as_deref() {
                continue;
            }
            // A peer that left meanwhile, or whose identity cannot be told, gets nothing.
            let Ok(who) = self.peer(name).await else {
                continue;
            };
            let allowed =
                who.uid == 0 || owner.is_some_and(|o| may_trace_owned(who, pid, o).is_ok());
            if !allowed {
                continue;
            }
            let Ok(emitter) = SignalEmitter::new(conn, MANAGER_PATH) else {
                return;
            };
            let emitter = emitter.set_destination(BusName::Unique(name.clone()));
            let _ = match &signal {
                Signal::Installed(path) => Manager::hook_installed(&emitter, path.clone()).await,
                Signal::Removed(path) => Manager::hook_removed(&emitter, path.clone()).await,
                Signal::Exited(paths) => {
                    Manager::process_exited(&emitter, pid as u32, paths.clone()).await
                }
            };
        }
    }

    /// Active hooks and the processes that have them, counting only processes
    /// `who` may trace (all of them for the daemon itself, `None`).
    fn counts(&self, who: Option<Caller>) -> (u32, Vec<u32>) {
        let procs = lock(&self.procs);
        let mut n = 0;
        let mut pids = Vec::new();
        for (pid, p) in procs.iter().filter(|(_, p)| !p.hooks.is_empty()) {
            if who.is_none_or(|w| may_trace(w, *pid).is_ok()) {
                n += p.hooks.len() as u32;
                pids.push(*pid as u32);
            }
        }
        pids.sort_unstable();
        (n, pids)
    }

    /// The caller of a property read (`None` when the daemon reads its own property).
    async fn property_caller(&self, hdr: Option<Header<'_>>) -> zbus::fdo::Result<Option<Caller>> {
        let Some(hdr) = hdr else {
            return Ok(None);
        };
        self.caller(&hdr)
            .await
            .map(Some)
            .map_err(|e| zbus::fdo::Error::Failed(e.to_string()))
    }

    /// Refuses a hook property read to a caller that may not trace the hooked process.
    async fn may_read_hook(&self, hdr: Option<Header<'_>>, pid: i32) -> zbus::fdo::Result<()> {
        match self.property_caller(hdr).await? {
            Some(who) if who.uid != 0 => match may_trace(who, pid) {
                Err(e) if e.kind() == Some(ErrorKind::AccessDenied) => {
                    Err(zbus::fdo::Error::AccessDenied(e.to_string()))
                }
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }

    fn write_hints(&self) {
        let entries: Vec<(i32, u64)> = lock(&self.procs)
            .iter()
            .map(|(pid, p)| (*pid, p.start))
            .collect();
        if let Err(e) = hints::write(&self.state_dir, &entries) {
            eprintln!("argstashd: cannot write the hint file: {e:#}");
        }
    }

    async fn properties_changed(&self, conn: &Connection) {
        if let Ok(iface) = conn
            .object_server()
            .interface::<_, Manager>(MANAGER_PATH)
            .await
        {
            let m = iface.get().await;
            let e = iface.signal_emitter();
            // Without values: each caller sees its own (filtered) values on Get.
            let _ = m.hook_count_invalidate(e).await;
            let _ = m.pids_invalidate(e).await;
        }
    }

    /// Brings the hook objects of `pid` in line with a fresh read of its arenas.
    pub async fn sync(
        self: &Arc<Self>,
        conn: &Connection,
        pid: i32,
        listed: Result<Vec<HookInfo>, injector::Error>,
    ) {
        let Ok(listed) = listed else {
            // Gone or unreadable: the pidfd watcher reports an exit.
            return;
        };
        let _g = self.sync_lock.lock().await;
        let (added, removed, is_new, owner) = {
            let mut procs = lock(&self.procs);
            if listed.is_empty() {
                // No arenas (never hooked, or exec'd): nothing to track.
                let (removed, owner) = procs
                    .remove(&pid)
                    .map(|p| (p.hooks.into_keys().collect(), p.owner))
                    .unwrap_or_default();
                (Vec::new(), removed, false, owner)
            } else {
                let fresh: HashMap<OwnedObjectPath, HookInfo> = listed
                    .into_iter()
                    // Call-through hooks (the PEP 523 extension's) are the process's own.
                    .filter(|h| h.state == HookState::Active && !h.is_call_through())
                    .map(|h| (to_wire::path_of(pid, &h), h))
                    .collect();
                let is_new = !procs.contains_key(&pid);
                let p = procs.entry(pid).or_insert_with(|| Proc {
                    hooks: HashMap::new(),
                    start: hints::start_time(pid).unwrap_or(0),
                    owner: owner_of(pid),
                });
                let removed: Vec<OwnedObjectPath> = p
                    .hooks
                    .keys()
                    .filter(|k| !fresh.contains_key(*k))
                    .cloned()
                    .collect();
                let added: Vec<(OwnedObjectPath, HookInfo)> = fresh
                    .iter()
                    .filter(|(k, _)| !p.hooks.contains_key(*k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                p.hooks = fresh;
                (added, removed, is_new, p.owner)
            }
        };
        let server = conn.object_server();
        let changed = is_new || !added.is_empty() || !removed.is_empty();
        for path in removed {
            let _ = server.remove::<Hook, _>(&path).await;
            self.signal(pid, owner, Signal::Removed(path));
        }
        for (path, info) in added {
            let hook = Hook {
                shared: self.clone(),
                pid,
                info,
            };
            let _ = server.at(&path, hook).await;
            self.signal(pid, owner, Signal::Installed(path));
        }
        if is_new {
            self.watch(conn, pid);
        }
        drop(_g);
        if changed {
            self.write_hints();
            self.properties_changed(conn).await;
        }
    }

    /// Watches `pid` with a pidfd; its exit drops its state and emits `ProcessExited`.
    ///
    /// Every [`EXEC_CHECK`] the watcher also checks that the arenas are still mapped:
    /// after an `exec` they are gone, and so are the hooks (`HookRemoved`).
    fn watch(self: &Arc<Self>, conn: &Connection, pid: i32) {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let shared = self.clone();
        let c = conn.clone();
        let pidfd = if fd < 0 {
            None
        } else {
            // SAFETY: `fd` was just returned by pidfd_open and is owned by nobody else.
            Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
        };
        conn.executor()
            .spawn(
                async move {
                    if let Some(fd) = pidfd {
                        let fd = match Async::new(fd) {
                            Ok(a) => a,
                            Err(e) => {
                                eprintln!("argstashd: cannot watch process {pid}: {e}");
                                return;
                            }
                        };
                        loop {
                            let exited = future::or(
                                async {
                                    let _ = fd.readable().await;
                                    true
                                },
                                async {
                                    Timer::after(EXEC_CHECK).await;
                                    false
                                },
                            )
                            .await;
                            if exited {
                                break;
                            }
                            if !shared.arenas_mapped(pid) {
                                let listed = shared
                                    .workers
                                    .run(pid, "revalidation", move || list(Pid::from_raw(pid)))
                                    .await;
                                if let Ok(listed) = listed {
                                    shared.sync(&c, pid, listed).await;
                                }
                            }
                            if !lock(&shared.procs).contains_key(&pid) {
                                // Untracked (exec'd without arenas): a later Inject watches anew.
                                return;
                            }
                        }
                    }
                    shared.exited(&c, pid).await;
                },
                "pidfd watcher",
            )
            .detach();
    }

    /// False when an arena of a tracked hook of `pid` is no longer mapped (the process exec'd).
    fn arenas_mapped(&self, pid: i32) -> bool {
        let arenas: Vec<u64> = match lock(&self.procs).get(&pid) {
            Some(p) => p.hooks.values().map(|h| h.arena).collect(),
            None => return true,
        };
        if arenas.is_empty() {
            return true;
        }
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            return true;
        };
        let ranges: Vec<(u64, u64)> = maps
            .lines()
            .filter_map(|l| {
                let (a, b) = l.split_whitespace().next()?.split_once('-')?;
                Some((
                    u64::from_str_radix(a, 16).ok()?,
                    u64::from_str_radix(b, 16).ok()?,
                ))
            })
            .collect();
        arenas
            .iter()
            .all(|a| ranges.iter().any(|(lo, hi)| lo <= a && a < hi))
    }

    async fn exited(&self, conn: &Connection, pid: i32) {
        let g = self.sync_lock.lock().await;
        let Some(p) = lock(&self.procs).remove(&pid) else {
            return;
        };
        let paths: Vec<OwnedObjectPath> = p.hooks.into_keys().collect();
        let server = conn.object_server();
        for path in &paths {
            let _ = server.remove::<Hook, _>(path).await;
        }
        self.signal(pid, p.owner, Signal::Exited(paths));
        drop(g);
        self.workers.forget(pid);
        self.write_hints();
        self.properties_changed(conn).await;
    }

    /// Re-reads the processes named in the hint file, keeping those whose arenas check out.
    pub async fn restore(self: &Arc<Self>, conn: &Connection) {
        let hinted = hints::read(&self.state_dir);
        for (pid, start) in hinted {
            if hints::start_time(pid) != Some(start) {
                continue;
            }
            // Reading arenas needs no ptrace stop, so a hung target cannot delay the start.
            let listed = blocking::unblock(move || list(Pid::from_raw(pid))).await;
            if let Err(e) = &listed {
                eprintln!("argstashd: cannot re-read process {pid}: {e}");
            }
            self.sync(conn, pid, listed).await;
        }
        self.write_hints();
    }

    async fn eject_and_sync(
        self: &Arc<Self>,
        conn: &Connection,
        pid: i32,
        start: Option<u64>,
        what: EjectWhat,
    ) -> Result<EjectReport, Error> {
        let (res, listed) = self
            .workers
            .run(pid, "Eject", move || {
                if let Err(e) = same_process(pid, start) {
                    return (Err(e), Err(SessionError::NoSuchProcess { pid }.into()));
                }
                let opts = EjectOptions {
                    what,
                    calls: Default::default(),
                };
                let r = eject(Pid::from_raw(pid), &opts);
                (r, list(Pid::from_raw(pid)))
            })
            .await?;
        self.sync(conn, pid, listed).await;
        res.map_err(|e| to_wire::error(pid, e))
    }

    /// Installs the hooks an `Inject` call asks for and brings the hook objects in line.
    async fn inject_and_sync(
        self: &Arc<Self>,
        hdr: &Header<'_>,
        conn: &Connection,
        pid: u32,
        functions: Vec<String>,
        options: HashMap<String, OwnedValue>,
    ) -> Result<(i32, InstallReport), Error> {
        let pid = pid_arg(pid)?;
        let start = self.authorize(hdr, pid).await?;
        let InjectRequest {
            opts,
            signatures,
            python,
            mut windows,
        } = inject_options(&options)?;
        if functions.is_empty() && !python {
            return Err(invalid(format!(
                "name at least one function to hook, or give the option {OPT_PYTHON}"
            )));
        }
        let (specs, signatures) = inject_specs(&functions, signatures)?;
        let mut targets: Vec<HookTarget> = Vec::new();
        for ((function, signature), f) in specs.into_iter().zip(signatures).zip(&functions) {
            let name = split_function(f).map_or(f.as_str(), |(name, _)| name);
            targets.push(HookTarget {
                function,
                signature,
                stack_words: windows.remove(name),
            });
        }
        if let Some(extra) = windows.keys().next() {
            return Err(invalid(format!(
                "option {OPT_FUNCTION_STACK_ARGS} names `{extra}`, which is not among the \
                 functions to hook"
            )));
        }
        let (res, listed) = self
            .workers
            .run(pid, "Inject", move || {
                if let Err(e) = same_process(pid, start) {
                    return (Err(e), Err(SessionError::NoSuchProcess { pid }.into()));
                }
                if python {
                    match injector::python_hook(Pid::from_raw(pid)) {
                        Ok(target) => targets.push(target),
                        Err(e) => return (Err(e), list(Pid::from_raw(pid))),
                    }
                }
                let r = install(Pid::from_raw(pid), &targets, &opts);
                (r, list(Pid::from_raw(pid)))
            })
            .await?;
        self.sync(conn, pid, listed).await;
        Ok((pid, res.map_err(|e| to_wire::error(pid, e))?))
    }
}

/// Fails when `pid` is no longer the process that was authorised (it exited, or the pid was reused).
fn same_process(pid: i32, start: Option<u64>) -> Result<(), injector::Error> {
    if hints::start_time(pid) == start && start.is_some() {
        Ok(())
    } else {
        Err(SessionError::NoSuchProcess { pid }.into())
    }
}

/// What an `Inject` call asks for, read from its options.
struct InjectRequest {
    /// Install options.
    opts: InstallOptions,
    /// `signatures` option: parameter list by function name, as given.
    signatures: HashMap<String, String>,
    /// `python` option: also hook CPython's frame evaluator.
    python: bool,
    /// `function-stack-args` option: stack window by function name, as given.
    windows: HashMap<String, u16>,
}

fn inject_options(options: &HashMap<String, OwnedValue>) -> Result<InjectRequest, Error> {
    let mut opts = InstallOptions::default();
    let mut signatures = HashMap::new();
    let mut python = false;
    let mut windows = HashMap::new();
    for (k, v) in options {
        match k.as_str() {
            OPT_STACK_ARGS => {
                let n: u64 = if let Ok(n) = u16::try_from(v) {
                    n.into()
                } else if let Ok(n) = u32::try_from(v) {
                    n.into()
                } else if let Ok(n) = i32::try_from(v) {
                    u64::try_from(n).unwrap_or(u64::MAX)
                } else if let Ok(n) = u64::try_from(v) {
                    n
                } else {
                    return Err(invalid(format!(
                        "option {OPT_STACK_ARGS} must be an integer (q, u or i), not {}",
                        v.value_signature()
                    )));
                };
                if n > 16 {
                    return Err(invalid(format!(
                        "option {OPT_STACK_ARGS} must be 0 to 16, not {n}"
                    )));
                }
                opts.stack_words = n as u16;
                // As with `--stack-args 0`: the caller's number wins, 0 included.
                opts.force_stack_words = true;
            }
            OPT_FLOAT_ARGS => {
                opts.float_args = bool::try_from(v).map_err(|_| {
                    invalid(format!(
                        "option {OPT_FLOAT_ARGS} must be a boolean (b), not {}",
                        v.value_signature()
                    ))
                })?;
            }
            OPT_PYTHON => {
                python = bool::try_from(v).map_err(|_| {
                    invalid(format!(
                        "option {OPT_PYTHON} must be a boolean (b), not {}",
                        v.value_signature()
                    ))
                })?;
            }
            OPT_SIGNATURES => {
                signatures = HashMap::<String, String>::try_from(
                    v.try_clone()
                        .map_err(|e| invalid(format!("option {OPT_SIGNATURES}: {e}")))?,
                )
                .map_err(|_| {
                    invalid(format!(
                        "option {OPT_SIGNATURES} must map function names to parameter lists \
                         (a{{ss}}, e.g. {{\"bar\": \"int n, const char *s\"}}), not {}",
                        v.value_signature()
                    ))
                })?;
            }
            OPT_FUNCTION_STACK_ARGS => {
                windows = HashMap::<String, u16>::try_from(
                    v.try_clone()
                        .map_err(|e| invalid(format!("option {OPT_FUNCTION_STACK_ARGS}: {e}")))?,
                )
                .map_err(|_| {
                    invalid(format!(
                        "option {OPT_FUNCTION_STACK_ARGS} must map function names to stack \
                         words (a{{sq}}, e.g. {{\"bar\": 2}}), not {}",
                        v.value_signature()
                    ))
                })?;
                if let Some((name, n)) = windows.iter().find(|(_, n)| **n > 16) {
                    return Err(invalid(format!(
                        "option {OPT_FUNCTION_STACK_ARGS} gives `{name}` {n} stack words; \
                         give 0 to 16"
                    )));
                }
            }
            other => {
                return Err(invalid(format!(
                    "unknown Inject option `{other}` (known: {OPT_STACK_ARGS}, \
                     {OPT_FUNCTION_STACK_ARGS}, {OPT_FLOAT_ARGS}, {OPT_SIGNATURES}, {OPT_PYTHON})"
                )))
            }
        }
    }
    Ok(InjectRequest {
        opts,
        signatures,
        python,
        windows,
    })
}

/// The functions of an `Inject` call with their signatures: from the name
/// (`bar(int, char *)`, as on the CLI) or from the `signatures` option, not both.
fn inject_specs(
    functions: &[String],
    mut signatures: HashMap<String, String>,
) -> Result<(Vec<FuncSpec>, Vec<Option<Signature>>), Error> {
    let mut specs = Vec::new();
    let mut sigs = Vec::new();
    for f in functions {
        let (name, inline) = split_function(f).map_err(|e| invalid(e.to_string()))?;
        let sig = match (inline, signatures.remove(name)) {
            (Some(_), Some(_)) => {
                return Err(invalid(format!(
                    "`{name}` has a signature in its name and in the {OPT_SIGNATURES} option; give it once"
                )))
            }
            (Some(sig), None) => Some(sig),
            (None, Some(list)) => Some(parse_params(&list).map_err(|why| {
                invalid(format!(
                    "cannot read the parameter list `{list}` of `{name}` in option \
                     {OPT_SIGNATURES}: {why}; {}",
                    why.reason.advice()
                ))
            })?),
            (None, None) => None,
        };
        specs.push(FuncSpec::parse(name));
        sigs.push(sig);
    }
    if let Some(extra) = signatures.keys().next() {
        return Err(invalid(format!(
            "option {OPT_SIGNATURES} names `{extra}`, which is not among the functions to hook"
        )));
    }
    Ok((specs, sigs))
}

fn backtrace_options(
    tid: u32,
    options: &HashMap<String, OwnedValue>,
) -> Result<BacktraceOptions, Error> {
    let mut opts = BacktraceOptions {
        tid: if tid == 0 {
            None
        } else {
            Some(Tid::try_from(tid).map_err(|_| invalid(format!("{tid} is not a valid tid")))?)
        },
        ..BacktraceOptions::default()
    };
    for (k, v) in options {
        match k.as_str() {
            OPT_SHOW_TRAMPOLINES => {
                opts.show_trampolines = bool::try_from(v).map_err(|_| {
                    invalid(format!(
                        "option {OPT_SHOW_TRAMPOLINES} must be a boolean (b)"
                    ))
                })?;
            }
            OPT_ALWAYS_STOP => {
                opts.always_stop = bool::try_from(v).map_err(|_| {
                    invalid(format!("option {OPT_ALWAYS_STOP} must be a boolean (b)"))
                })?;
            }
            other => {
                return Err(invalid(format!(
                    "unknown Backtrace option `{other}` (known: {OPT_SHOW_TRAMPOLINES}, \
                     {OPT_ALWAYS_STOP})"
                )))
            }
        }
    }
    Ok(opts)
}

/// The manager object at [`MANAGER_PATH`].
pub struct Manager {
    /// Shared state.
    pub shared: Arc<Shared>,
}

#[interface(name = "org.argstash.Injector1")]
impl Manager {
    /// Hooks `functions` (NAME, MODULE!NAME or 0xADDR) in `pid`; returns the new hook objects.
    async fn inject(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        pid: u32,
        functions: Vec<String>,
        options: HashMap<String, OwnedValue>,
    ) -> Result<Vec<OwnedObjectPath>, Error> {
        let (pid, report) = self
            .shared
            .inject_and_sync(&hdr, conn, pid, functions, options)
            .await?;
        Ok(report
            .hooks
            .iter()
            .map(|h| to_wire::path_of(pid, h))
            .collect())
    }

    /// Like `Inject`, and returns what the install did: the new hooks, where each
    /// stack window came from, the stop, and the unwind registration with its notes.
    async fn inject_with_report(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        pid: u32,
        functions: Vec<String>,
        options: HashMap<String, OwnedValue>,
    ) -> Result<argstash_dbus::InstallReport, Error> {
        let (pid, report) = self
            .shared
            .inject_and_sync(&hdr, conn, pid, functions, options)
            .await?;
        Ok(to_wire::install_report(pid, &report))
    }

    /// Removes the hooks of `functions` in `pid`; returns how many were removed.
    async fn eject(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        pid: u32,
        functions: Vec<String>,
    ) -> Result<u32, Error> {
        let pid = pid_arg(pid)?;
        let start = self.shared.authorize(&hdr, pid).await?;
        let what = functions_to_eject(&functions, "EjectAll")?;
        let report = self.shared.eject_and_sync(conn, pid, start, what).await?;
        Ok(report.hooks.len() as u32)
    }

    /// Like `Eject`, and returns what the eject did.
    async fn eject_with_report(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        pid: u32,
        functions: Vec<String>,
    ) -> Result<argstash_dbus::EjectReport, Error> {
        let pid = pid_arg(pid)?;
        let start = self.shared.authorize(&hdr, pid).await?;
        let what = functions_to_eject(&functions, "EjectAllWithReport")?;
        let report = self.shared.eject_and_sync(conn, pid, start, what).await?;
        Ok(to_wire::eject_report(pid, &report))
    }

    /// Like `EjectAll`, and returns what the eject did.
    async fn eject_all_with_report(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        pid: u32,
    ) -> Result<argstash_dbus::EjectReport, Error> {
        let pid = pid_arg(pid)?;
        let start = self.shared.authorize(&hdr, pid).await?;
        let report = self
            .shared
            .eject_and_sync(conn, pid, start, EjectWhat::All)
            .await?;
        Ok(to_wire::eject_report(pid, &report))
    }

    /// Which other unwinders (libgcc, gdb JIT, perf) know each active hook of `pid`.
    async fn unwind_status(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        pid: u32,
    ) -> Result<argstash_dbus::UnwindStatus, Error> {
        let pid = pid_arg(pid)?;
        let start = self.shared.authorize(&hdr, pid).await?;
        let (status, has_libgcc) = self
            .shared
            .workers
            .run(pid, "UnwindStatus", move || {
                same_process(pid, start)?;
                injector::unwind_status(Pid::from_raw(pid))
            })
            .await?
            .map_err(|e| to_wire::error(pid, e))?;
        Ok(to_wire::unwind_status(&status, has_libgcc))
    }

    /// Removes every active hook in `pid`; returns how many were removed.
    async fn eject_all(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        pid: u32,
    ) -> Result<u32, Error> {
        let pid = pid_arg(pid)?;
        let start = self.shared.authorize(&hdr, pid).await?;
        let report = self
            .shared
            .eject_and_sync(conn, pid, start, EjectWhat::All)
            .await?;
        Ok(report.hooks.len() as u32)
    }

    /// Lists the hooks recorded in `pid` (0: every tracked process the caller may see).
    async fn list_hooks(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        pid: u32,
    ) -> Result<Vec<HookEntry>, Error> {
        if pid != 0 {
            let pid = pid_arg(pid)?;
            let start = self.shared.authorize(&hdr, pid).await?;
            let listed = self
                .shared
                .workers
                .run(pid, "ListHooks", move || {
                    same_process(pid, start)?;
                    list(Pid::from_raw(pid))
                })
                .await?;
            let entries = match &listed {
                Ok(hooks) => Ok(hooks.iter().map(|h| to_wire::hook_entry(pid, h)).collect()),
                Err(_) => Err(()),
            };
            match entries {
                Ok(entries) => {
                    self.shared.sync(conn, pid, listed).await;
                    Ok(entries)
                }
                Err(()) => Err(to_wire::error(pid, listed.unwrap_err())),
            }
        } else {
            let who = self.shared.caller(&hdr).await?;
            let mut pids: Vec<i32> = lock(&self.shared.procs).keys().copied().collect();
            pids.sort_unstable();
            let mut out = Vec::new();
            for pid in pids {
                if may_trace(who, pid).is_err() {
                    continue;
                }
                // Reading arenas needs no ptrace stop: do not queue behind a stuck worker.
                if let Ok(hooks) = blocking::unblock(move || list(Pid::from_raw(pid))).await {
                    out.extend(hooks.iter().map(|h| to_wire::hook_entry(pid, h)));
                }
            }
            Ok(out)
        }
    }

    /// Unwinds thread `tid` of `pid` (0: every thread) with stashed arguments.
    async fn backtrace(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        pid: u32,
        tid: u32,
        options: HashMap<String, OwnedValue>,
    ) -> Result<Vec<Thread>, Error> {
        let pid = pid_arg(pid)?;
        let start = self.shared.authorize(&hdr, pid).await?;
        let opts = backtrace_options(tid, &options)?;
        let shared = self.shared.clone();
        let bt = self
            .shared
            .workers
            .run(pid, "Backtrace", move || {
                same_process(pid, start)?;
                shared.readers.backtrace(pid, start, &opts)
            })
            .await?
            .map_err(|e| to_wire::error(pid, e))?;
        Ok(to_wire::threads(&bt))
    }

    /// The daemon's version.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    /// Active hooks in the tracked processes the caller may trace.
    #[zbus(property(emits_changed_signal = "invalidates"))]
    async fn hook_count(&self, #[zbus(header)] hdr: Option<Header<'_>>) -> zbus::fdo::Result<u32> {
        let who = self.shared.property_caller(hdr).await?;
        Ok(self.shared.counts(who).0)
    }

    /// Processes with active hooks that the caller may trace.
    #[zbus(property(emits_changed_signal = "invalidates"))]
    async fn pids(&self, #[zbus(header)] hdr: Option<Header<'_>>) -> zbus::fdo::Result<Vec<u32>> {
        let who = self.shared.property_caller(hdr).await?;
        Ok(self.shared.counts(who).1)
    }

    /// A hook object appeared.
    #[zbus(signal)]
    async fn hook_installed(emitter: &SignalEmitter<'_>, hook: OwnedObjectPath)
        -> zbus::Result<()>;

    /// A hook object went away (ejected, or its process exec'd).
    #[zbus(signal)]
    async fn hook_removed(emitter: &SignalEmitter<'_>, hook: OwnedObjectPath) -> zbus::Result<()>;

    /// A tracked process exited; `hooks` are the objects it took with it.
    #[zbus(signal)]
    async fn process_exited(
        emitter: &SignalEmitter<'_>,
        pid: u32,
        hooks: Vec<OwnedObjectPath>,
    ) -> zbus::Result<()>;
}

/// One active hook, at its `argstash_dbus::hook_path`.
pub struct Hook {
    shared: Arc<Shared>,
    pid: i32,
    info: HookInfo,
}

#[interface(name = "org.argstash.Hook1")]
impl Hook {
    /// Removes this hook.
    async fn eject(
        &self,
        #[zbus(header)] hdr: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<(), Error> {
        let start = self.shared.authorize(&hdr, self.pid).await?;
        let what = EjectWhat::Functions(vec![FuncSpec::Addr(self.info.function)]);
        self.shared
            .eject_and_sync(conn, self.pid, start, what)
            .await?;
        Ok(())
    }

    /// Process id.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn pid(&self, #[zbus(header)] hdr: Option<Header<'_>>) -> zbus::fdo::Result<u32> {
        self.shared.may_read_hook(hdr, self.pid).await?;
        Ok(self.pid as u32)
    }

    /// Function name.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn function(&self, #[zbus(header)] hdr: Option<Header<'_>>) -> zbus::fdo::Result<String> {
        self.shared.may_read_hook(hdr, self.pid).await?;
        Ok(self.info.name.clone())
    }

    /// Module path.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn module(&self, #[zbus(header)] hdr: Option<Header<'_>>) -> zbus::fdo::Result<String> {
        self.shared.may_read_hook(hdr, self.pid).await?;
        Ok(self.info.module.clone())
    }

    /// Function entry address.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn address(&self, #[zbus(header)] hdr: Option<Header<'_>>) -> zbus::fdo::Result<u64> {
        self.shared.may_read_hook(hdr, self.pid).await?;
        Ok(self.info.function)
    }

    /// `active` while the object exists (ejected hooks have no object).
    #[zbus(property(emits_changed_signal = "const"))]
    async fn state(&self, #[zbus(header)] hdr: Option<Header<'_>>) -> zbus::fdo::Result<String> {
        self.shared.may_read_hook(hdr, self.pid).await?;
        Ok(self.info.state.name().to_string())
    }

    /// Install time, Unix nanoseconds.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn installed_at(
        &self,
        #[zbus(header)] hdr: Option<Header<'_>>,
    ) -> zbus::fdo::Result<u64> {
        self.shared.may_read_hook(hdr, self.pid).await?;
        Ok(self.info.installed_ns)
    }
}
