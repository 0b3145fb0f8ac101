//! Cheap checks on a target pid before anything touches it.

use std::io;

use crate::error::Error;
use crate::ptrace::session::{stat_flags_and_start, Refusal, SessionError, PF_KTHREAD};
use nix::errno::Errno;

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
    if pid <= 0 || std::fs::metadata(format!("/proc/{pid}")).is_err() {
        return Err(SessionError::NoSuchProcess { pid }.into());
    }
    if pid == 1 && access == Access::Stop {
        return Err(SessionError::Init.into());
    }
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string();
    // `/proc/PID/stat` is readable by anyone, whoever owns the process.
    if stat_flags_and_start(pid).is_some_and(|(flags, _)| flags & PF_KTHREAD != 0) {
        return Err(SessionError::KernelThread { pid, name }.into());
    }
    let exe = format!("/proc/{pid}/exe");
    match std::fs::File::open(&exe) {
        Ok(_) => {}
        // The kernel hides another user's (or a non-dumpable) process's
        // executable and memory alike: ptrace would be refused the same way.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
            return Err(SessionError::NotPermitted {
                pid,
                reason: Refusal::Hidden {
                    name,
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
        Err(_) => {}
    }
    Ok(())
}
