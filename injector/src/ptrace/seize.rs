//! Before a session holds a thread: the checks that refuse a target (gone, a
//! kernel thread, traced by another, not permitted) and `PTRACE_SEIZE` itself.

use super::session_error::{Refusal, SessionError};
use nix::errno::Errno;
use nix::sys::ptrace::{self, Options};
use nix::unistd::Pid;
use reader::procfs::{self, Status};
use std::time::Duration;

pub(super) fn proc_exists(pid: i32) -> bool {
    procfs::exists(pid)
}

/// Lists `/proc/PID/task` (fresh each time: threads come and go).
pub(super) fn list_tasks(pid: i32) -> Result<Vec<i32>, SessionError> {
    procfs::read_task_ids(pid).map_err(|source| {
        if procfs::is_gone(&source) {
            SessionError::Exited { pid }
        } else {
            SessionError::Proc {
                path: format!("/proc/{pid}/task"),
                source,
            }
        }
    })
}

/// What [`precheck`] read about the process.
pub(super) struct Prechecked {
    pub(super) status: Status,
    /// From `/proc/PID/stat` (clock ticks since boot): tells a reused pid apart.
    pub(super) start_time: u64,
}

/// Refuses what must never be stopped, before touching the process; returns its status.
///
/// Read fresh at every attach, right before the first seize: the tracer, the
/// state and the thread count decide whether the process may be stopped at all,
/// and `SigIgn` how remote system calls run, so none of them may come from an
/// earlier reading.
pub(super) fn precheck(pid: i32) -> Result<Prechecked, SessionError> {
    if pid == 1 {
        return Err(SessionError::Init);
    }
    if pid <= 0 {
        return Err(SessionError::NoSuchProcess { pid });
    }
    let own = std::process::id() as i32;
    if pid == own {
        return Err(SessionError::OwnProcess { pid });
    }
    let st = match procfs::read_status(pid) {
        Ok(s) => s,
        Err(e) if procfs::is_gone(&e) => return Err(SessionError::NoSuchProcess { pid }),
        Err(source) => {
            return Err(SessionError::Proc {
                path: format!("/proc/{pid}/status"),
                source,
            })
        }
    };
    if st.tgid == 1 {
        return Err(SessionError::Init);
    }
    if st.tgid == own {
        return Err(SessionError::OwnProcess { pid: own });
    }
    if st.tgid != pid && st.tgid > 0 {
        return Err(SessionError::NotAProcess {
            tid: pid,
            pid: st.tgid,
        });
    }
    let zombie = matches!(st.state, 'Z' | 'X');
    if zombie && st.threads <= 1 {
        return Err(SessionError::Exited { pid });
    }
    let stat = procfs::read_stat(pid).ok();
    if stat.as_ref().is_some_and(procfs::Stat::is_kernel_thread) {
        return Err(SessionError::KernelThread { pid, name: st.name });
    }
    // The leader held by this very thread, in another of its sessions, is no
    // refusal: a profiler asks the leader and its siblings to stop together
    // (`argstash record`'s batches), and a check of the process's tracer then
    // used to refuse every thread asked after the leader.
    let this_thread = nix::unistd::gettid().as_raw();
    if st.tracer != 0 && st.tracer != this_thread {
        return Err(SessionError::NotPermitted {
            pid,
            reason: traced_by(pid, None, st.tracer),
        });
    }
    Ok(Prechecked {
        status: st,
        start_time: stat.map_or(0, |s| s.start_time),
    })
}

/// `PTRACE_SEIZE`, retried briefly when EPERM comes with no tracer to blame.
///
/// Another tracer that detaches between our seize and our read of
/// `TracerPid` (a profiler sampling thread by thread does) would otherwise be
/// misreported as a security module refusing us. On EPERM it returns the
/// last tracer seen on the thread (0: none), for [`Session::refused`]. A real
/// refusal only costs the few retries.
pub(super) fn seize(pid: i32, tid: i32, options: Options) -> Result<(), (Errno, i32)> {
    const RETRIES: u32 = 4;
    let mut attempt = 0;
    loop {
        match ptrace::seize(Pid::from_raw(tid), options) {
            Ok(()) => return Ok(()),
            Err(Errno::EPERM) => {
                let tracer = procfs::read_task_status(pid, tid).map_or(0, |st| st.tracer);
                if tracer != 0 || attempt == RETRIES {
                    return Err((Errno::EPERM, tracer));
                }
                std::thread::sleep(Duration::from_micros(200 << attempt));
                attempt += 1;
            }
            Err(e) => return Err((e, 0)),
        }
    }
}

pub(super) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    euid == 0
}

pub(super) fn traced_by(pid: i32, tid: Option<i32>, tracer: i32) -> Refusal {
    let tracer_name = procfs::read_comm(tracer).unwrap_or_else(|_| "?".into());
    Refusal::TracedBy {
        thread: tid.filter(|t| *t != pid),
        tracer,
        tracer_name,
    }
}
