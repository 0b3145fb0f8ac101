//! The D-Bus objects: the manager, one object per hook, and the per-process state
//! that the target's arena headers keep true.

use std::collections::HashMap;
use std::sync::Arc;

use argstash_dbus::{Error, HookEntry, Thread};
use injector::names::FuncSpec;
use injector::{list, EjectWhat, HookInfo, Pid};
use zbus::message::Header;
use zbus::object_server::SignalEmitter;
use zbus::zvariant::{OwnedObjectPath, OwnedValue};
use zbus::{interface, Connection};

use super::requests::{backtrace_options, functions_to_eject, pid_arg};
use super::shared::{lock, same_process, Shared};
use crate::auth::may_trace;
use argstash_dbus::to_wire;

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
    pub(crate) async fn hook_installed(
        emitter: &SignalEmitter<'_>,
        hook: OwnedObjectPath,
    ) -> zbus::Result<()>;

    /// A hook object went away (ejected, or its process exec'd).
    #[zbus(signal)]
    pub(crate) async fn hook_removed(
        emitter: &SignalEmitter<'_>,
        hook: OwnedObjectPath,
    ) -> zbus::Result<()>;

    /// A tracked process exited; `hooks` are the objects it took with it.
    #[zbus(signal)]
    pub(crate) async fn process_exited(
        emitter: &SignalEmitter<'_>,
        pid: u32,
        hooks: Vec<OwnedObjectPath>,
    ) -> zbus::Result<()>;
}

/// One active hook, at its `argstash_dbus::hook_path`.
pub struct Hook {
    pub(crate) shared: Arc<Shared>,
    pub(crate) pid: i32,
    pub(crate) info: HookInfo,
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
