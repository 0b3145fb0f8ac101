//! Keeping what the daemon publishes true to the targets: hook objects added and
//! removed as arenas change, watchers that notice an exit or an exec, the
//! signals and property changes callers see, and inject/eject followed by that sync.

use std::collections::HashMap;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use argstash_dbus::OPT_FUNCTION_STACK_ARGS;
use argstash_dbus::OPT_PYTHON;
use argstash_dbus::{Error, MANAGER_PATH};
use async_io::{Async, Timer};
use futures_lite::future;
use injector::names::split_function;
use injector::SessionError;
use injector::{
    eject, install, list, EjectOptions, EjectReport, EjectWhat, HookInfo, HookTarget,
    InstallReport, Pid,
};
use trampolines::arena::HookState;
use zbus::fdo::DBusProxy;
use zbus::message::Header;
use zbus::names::BusName;
use zbus::object_server::SignalEmitter;
use zbus::zvariant::{OwnedObjectPath, OwnedValue};
use zbus::Connection;

use crate::auth::{may_trace_owned, owner_of, Owner};
use crate::hints;
use crate::requests::{inject_options, inject_specs, invalid, pid_arg, InjectRequest};
use crate::service::{Hook, Manager};
use crate::shared::{lock, same_process, Proc, Shared, Signal};
use argstash_dbus::to_wire;

/// How often a watcher checks that its process still has its arenas (exec).
const EXEC_CHECK: Duration = Duration::from_secs(1);

impl Shared {
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

    /// Sends `signal` about process `pid` to each bus peer that may trace it:
    /// root, or its owner. Signals go to each peer by name rather than to the
    /// whole bus, so a hook's existence is shown to no one who could not see it
    /// with `ListHooks`.
    pub(crate) async fn send_signal(
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

    pub(crate) async fn properties_changed(&self, conn: &Connection) {
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
    pub(crate) fn watch(self: &Arc<Self>, conn: &Connection, pid: i32) {
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

    pub(crate) async fn exited(&self, conn: &Connection, pid: i32) {
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

    pub(crate) async fn eject_and_sync(
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
    pub(crate) async fn inject_and_sync(
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
