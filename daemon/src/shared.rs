//! The daemon's state shared by its D-Bus objects: the processes with arenas,
//! their hooks and owners, the callers it has authorised, and the watchers and
//! signals that keep the published objects true to the targets.

use crate::auth::{may_trace, peer, Caller, Owner};
use crate::hints;
use crate::readers::ReaderCache;
use crate::worker::Workers;
use argstash_dbus::to_wire;
use argstash_dbus::{Error, ErrorKind};
use injector::HookInfo;
use injector::SessionError;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use zbus::fdo::DBusProxy;
use zbus::message::Header;
use zbus::names::UniqueName;
use zbus::zvariant::OwnedObjectPath;

/// Most callers whose uid is remembered at once.
pub(super) const MAX_CALLERS: usize = 1024;

/// What the daemon knows of one process with arenas.
pub(super) struct Proc {
    /// Active hooks by object path, as last read from the arena headers.
    pub(crate) hooks: HashMap<OwnedObjectPath, HookInfo>,
    /// Start time (clock ticks after boot), to tell a reused pid apart.
    pub(crate) start: u64,
    /// Who owned the process when it was first tracked: who may see its signals.
    pub(crate) owner: Option<Owner>,
}

/// A signal of the manager object, about one process.
pub(super) enum Signal {
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
    pub(crate) procs: Mutex<HashMap<i32, Proc>>,
    /// Serialises object-tree updates.
    pub(crate) sync_lock: async_lock::Mutex<()>,
    pub(crate) state_dir: PathBuf,
    pub(crate) dbus: OnceLock<DBusProxy<'static>>,
    /// Identities of callers by unique name (a unique name is never reused on a bus).
    pub(crate) callers: Mutex<HashMap<String, Caller>>,
    /// Readers reused by `Backtrace`.
    pub readers: ReaderCache,
    /// Signals waiting to be sent, in order, off the callers' path.
    pub(crate) signals: OnceLock<async_channel::Sender<(i32, Option<Owner>, Signal)>>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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

    /// Checks that the caller may act on `pid`; returns the process's start time,
    /// which the worker checks again right before acting (a reused pid is refused).
    pub(crate) async fn authorize(&self, hdr: &Header<'_>, pid: i32) -> Result<Option<u64>, Error> {
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
    pub(crate) async fn caller(&self, hdr: &Header<'_>) -> Result<Caller, Error> {
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
    pub(crate) async fn peer(&self, name: &UniqueName<'_>) -> Result<Caller, Error> {
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
    pub(crate) fn signal(&self, pid: i32, owner: Option<Owner>, signal: Signal) {
        if let Some(tx) = self.signals.get() {
            let _ = tx.try_send((pid, owner, signal));
        }
    }

    /// Active hooks and the processes that have them, counting only processes
    /// `who` may trace (all of them for the daemon itself, `None`).
    pub(crate) fn counts(&self, who: Option<Caller>) -> (u32, Vec<u32>) {
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
    pub(crate) async fn property_caller(
        &self,
        hdr: Option<Header<'_>>,
    ) -> zbus::fdo::Result<Option<Caller>> {
        let Some(hdr) = hdr else {
            return Ok(None);
        };
        self.caller(&hdr)
            .await
            .map(Some)
            .map_err(|e| zbus::fdo::Error::Failed(e.to_string()))
    }

    /// Refuses a hook property read to a caller that may not trace the hooked process.
    pub(crate) async fn may_read_hook(
        &self,
        hdr: Option<Header<'_>>,
        pid: i32,
    ) -> zbus::fdo::Result<()> {
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

    pub(crate) fn write_hints(&self) {
        let entries: Vec<(i32, u64)> = lock(&self.procs)
            .iter()
            .map(|(pid, p)| (*pid, p.start))
            .collect();
        if let Err(e) = hints::write(&self.state_dir, &entries) {
            eprintln!("argstashd: cannot write the hint file: {e:#}");
        }
    }

    /// False when an arena of a tracked hook of `pid` is no longer mapped (the process exec'd).
    pub(crate) fn arenas_mapped(&self, pid: i32) -> bool {
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
}

/// Fails when `pid` is no longer the process that was authorised (it exited, or the pid was reused).
pub(super) fn same_process(pid: i32, start: Option<u64>) -> Result<(), injector::Error> {
    if hints::start_time(pid) == start && start.is_some() {
        Ok(())
    } else {
        Err(SessionError::NoSuchProcess { pid }.into())
    }
}
