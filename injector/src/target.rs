//! The target process as an operation sees it: cheap checks before anything
//! touches it ([`check_target`]), and the context an operation reads once at its
//! start and passes down ([`ProcessInfo`]); what a [`reader::process_view::ProcessView`] of a live
//! process is built from ([`live_state`], [`load_symbols`]).

use std::io;

use reader::process_view::ProcessState;
use reader::procfs::{self, MapEntry, Stat};
use reader::symbols::ProcessSymbols;

use crate::arch::{Arch, ProcessArch};
use crate::error::Error;
use crate::ptrace::gadgets::Gadgets;
use crate::ptrace::session::Session;
use crate::ptrace::session_error::{Refusal, SessionError};
use nix::errno::Errno;

/// The state of live process `pid` that a view of it is built from and
/// checked against (its mappings, start time and architecture).
pub(crate) fn live_state(pid: i32) -> Result<ProcessState, Error> {
    ProcessState::live(pid, Arch::of_process(pid)).map_err(|source| Error::Proc {
        path: format!("/proc/{pid}/maps"),
        source,
    })
}

/// Loads the symbols of live process `pid` for a view of it.
pub(crate) fn load_symbols(pid: i32) -> impl FnOnce(&[MapEntry]) -> Result<ProcessSymbols, Error> {
    move |maps| Ok(ProcessSymbols::load(pid, maps)?)
}

/// What an operation will do to the target, which decides what is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Only reads its memory and `/proc` files (`list`): pid 1 is fine.
    Read,
    /// Stops its threads with ptrace (inject, eject, bt): pid 1 is refused.
    Stop,
}

/// Refuses pids that must not or cannot be hooked, before any ptrace call.
///
/// Rejects a missing pid, pid 1 (for [`Access::Stop`]), kernel threads, a
/// process the caller may not inspect. 32-bit (i386) processes pass: see [`crate::arch`].
pub fn check_target(pid: i32, access: Access) -> Result<(), Error> {
    Checked::read(pid, access).map(drop)
}

/// What the checks read: `/proc/PID/stat` and the opened executable.
struct Checked {
    stat: Option<Stat>,
    exe: Option<std::fs::File>,
}

impl Checked {
    fn read(pid: i32, access: Access) -> Result<Checked, Error> {
        if pid <= 0 || !procfs::exists(pid) {
            return Err(SessionError::NoSuchProcess { pid }.into());
        }
        if pid == 1 && access == Access::Stop {
            return Err(SessionError::Init.into());
        }
        // `/proc/PID/stat` is readable by anyone, whoever owns the process; its
        // second field is the `comm` name.
        let stat = procfs::read_stat(pid).ok();
        let name = || stat.as_ref().map_or("", |s| s.comm.trim()).to_string();
        if stat.as_ref().is_some_and(Stat::is_kernel_thread) {
            return Err(SessionError::KernelThread { pid, name: name() }.into());
        }
        let exe = match procfs::open_exe(pid) {
            Ok(file) => Some(file),
            // The kernel hides another user's (or a non-dumpable) process's
            // executable and memory alike: ptrace would be refused the same way.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
                return Err(SessionError::NotPermitted {
                    pid,
                    reason: Refusal::Hidden {
                        name: name(),
                        errno: if e.raw_os_error() == Some(libc::EACCES) {
                            Errno::EACCES
                        } else {
                            Errno::EPERM
                        },
                    },
                }
                .into());
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SessionError::NoSuchProcess { pid }.into());
            }
            // A zombie's exe link is gone (ENOENT above) or unreadable in other
            // ways; the session reports those precisely.
            Err(_) => None,
        };
        Ok(Checked { stat, exe })
    }
}

/// What one operation (install, eject, list) needs to know about its target,
/// read once at its start, right after the checks of [`check_target`], and
/// passed down so that data flows one way.
///
/// Everything here is read while the process runs and stays true for the
/// operation: the architecture and identity of a process do not change, and its
/// code mappings do not change under a loaded module. What must be fresh is read
/// again where it is used, and only that:
///
/// - the thread list, each thread's state and tracer, and the ignored signals:
///   read by [`Session::attach_all`] as it stops the process (threads come and
///   go; another tracer may attach; the signal dispositions decide how remote
///   system calls run);
/// - the arenas' records and the bytes about to be patched: read back inside
///   the stop by the commit (another argstash may have changed them);
/// - the maps, only when a system call must be searched for inside the stop
///   (through a live thread: a gadget found before it is used when it can be).
#[derive(Debug, Clone)]
pub struct ProcessInfo {
    /// The process id.
    pub pid: i32,
    /// Its architecture, from its executable's ELF class.
    pub arch: Arch,
    /// Its command name (`comm`).
    pub comm: String,
    /// Its address space (`/proc/PID/maps`).
    pub maps: Vec<MapEntry>,
    /// Code that remote system calls and calls run through, found before a stop
    /// and kept for every session of the operation.
    pub gadgets: Gadgets,
}

impl ProcessInfo {
    /// Checks `pid` for `access` ([`check_target`]) and reads its context.
    pub fn read(pid: i32, access: Access) -> Result<ProcessInfo, Error> {
        let checked = Checked::read(pid, access)?;
        let maps = procfs::read_maps(pid).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                Error::Session(SessionError::NoSuchProcess { pid })
            } else {
                Error::Proc {
                    path: format!("/proc/{pid}/maps"),
                    source: e,
                }
            }
        })?;
        let arch = Arch::of_class(checked.exe.as_ref().and_then(procfs::exe_class));
        let (comm, start_time) = checked.stat.map_or((String::new(), 0), |s| {
            (s.comm.trim().to_string(), s.start_time)
        });
        Ok(ProcessInfo {
            pid,
            arch,
            comm,
            maps,
            gadgets: Gadgets::new(pid, start_time),
        })
    }

    /// Stops every thread, the session told the architecture and given the gadgets
    /// found so far (nothing of this context is read again inside the stop).
    pub fn stop_all(&self) -> Result<Session, SessionError> {
        let mut session = Session::attach_all(self.pid)?;
        session.set_arch(self.arch);
        session.set_gadgets(&self.gadgets);
        Ok(session)
    }

    /// Keeps the gadgets `session` found, for the next session of the operation.
    pub fn keep_gadgets(&mut self, session: &Session) {
        if session.gadgets().owner() == self.gadgets.owner() {
            self.gadgets = session.gadgets().clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_of_a_process() {
        let pid = std::process::id() as i32;
        let info = ProcessInfo::read(pid, Access::Read).unwrap();
        assert_eq!(info.arch, Arch::X86_64);
        assert_eq!(info.comm, procfs::read_comm(pid).unwrap());
        let start_time = procfs::read_stat(pid).unwrap().start_time;
        let here = context_of_a_process as fn() as usize as u64;
        assert!(info.maps.iter().any(|m| m.contains(here)));
        assert_eq!(info.gadgets.owner(), (pid, start_time));
        assert!(matches!(
            ProcessInfo::read(-3, Access::Read),
            Err(Error::Session(SessionError::NoSuchProcess { pid: -3 }))
        ));
        assert!(matches!(
            ProcessInfo::read(1, Access::Stop),
            Err(Error::Session(SessionError::Init))
        ));
    }
}
