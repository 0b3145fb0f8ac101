//! Waiting for traced threads and reading what the wait says: stops, exits,
//! deadlines, and whether a process or thread is gone or going.

use super::session_error::{SessionError, UnexpectedState};
use nix::errno::Errno;
use reader::procfs::{self};
use std::ffi::c_void;
use std::time::{Duration, Instant};

/// `PTRACE_EVENT_STOP` (the interrupt, a group-stop, or a new traced thread's first stop).
pub(crate) const EVENT_STOP: i32 = 128;

/// What `waitpid` said about one thread.
pub(crate) enum Waited {
    /// It exited or was killed (or is no longer ours to wait for).
    Gone,
    /// It is in a ptrace-stop.
    Stop { sig: i32, event: i32, raw: i32 },
}

/// What recording one wait's result left to do.
pub(super) enum Step {
    /// The thread is recorded (stopped) or gone.
    Done,
    /// It reported a clone event and was let through: wait for it again.
    Again,
}

/// One look at `tid` without blocking: `None` while it has nothing to report.
/// The exit of a child of this process is left to its parent (see [`wait_tid`]).
pub(super) fn try_wait(tid: i32) -> Result<Option<Waited>, SessionError> {
    loop {
        if exited_child_of_ours(tid) {
            return Ok(Some(Waited::Gone));
        }
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid only writes the status word through the pointer, which points
        // to a live local.
        let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
        if r == tid {
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                return Ok(Some(Waited::Gone));
            }
            if libc::WIFSTOPPED(status) {
                return Ok(Some(Waited::Stop {
                    sig: libc::WSTOPSIG(status),
                    event: (status >> 16) & 0xff,
                    raw: status,
                }));
            }
            return Err(SessionError::Unexpected {
                tid,
                state: UnexpectedState::Wait(status),
            });
        }
        if r < 0 {
            match Errno::last() {
                Errno::EINTR => continue,
                Errno::ECHILD => return Ok(Some(Waited::Gone)),
                source => {
                    return Err(SessionError::Ptrace {
                        op: "waitpid",
                        tid,
                        source,
                    })
                }
            }
        }
        return Ok(None);
    }
}

/// Blocks until `tid` changes state; [`Waited::Gone`] when it died and cannot report.
///
/// A plain blocking `waitpid` can hang forever when the process is killed: a traced
/// thread-group leader that is a zombie is not reported while other threads of its
/// group are still unreaped, and those may be ours to reap later (or the real
/// parent's). So the wait polls (spinning briefly, then sleeping up to 1 ms) and,
/// between polls, treats a thread that `/proc` shows as a zombie, dead or gone as
/// [`Waited::Gone`].
///
/// The exit of a process of which this process is also the parent (a program
/// `argstash record -- CMD` started) is left to be collected: its exit status
/// is the parent's, and the tracer's wait would consume it.
pub(crate) fn wait_tid(tid: i32) -> Result<Waited, SessionError> {
    Ok(wait_tid_within(tid, None)?.expect("no deadline"))
}

/// How long a thread that was asked to stop (`PTRACE_INTERRUPT`) may take: one
/// that takes longer is held in an uninterruptible wait in the kernel, where it
/// may stay for ever (a vfork parent until its child execs or exits).
pub(crate) const STOP_DEADLINE: Duration = Duration::from_secs(10);

/// [`wait_tid`], giving up after `limit` (when given): `None` then.
pub(crate) fn wait_tid_within(
    tid: i32,
    limit: Option<Duration>,
) -> Result<Option<Waited>, SessionError> {
    let started = Instant::now();
    // A real-time caller (`argstash record`'s sampler) sleeps from the start: a
    // yield would not let the tracee, a normal thread, run on this CPU, and
    // such a thread sleeps without timer slack, so short naps stay short.
    // SAFETY: sched_getscheduler takes a pid (0: the calling thread), no pointer.
    let spin = match unsafe { libc::sched_getscheduler(0) } {
        libc::SCHED_FIFO | libc::SCHED_RR => Duration::ZERO,
        _ => Duration::from_micros(200),
    };
    let mut nap = Duration::from_micros(5);
    let mut next_check = started;
    loop {
        if let Some(waited) = try_wait(tid)? {
            return Ok(Some(waited));
        }
        let now = Instant::now();
        if now >= next_check {
            if thread_is_dead(tid) {
                return Ok(Some(Waited::Gone));
            }
            if limit.is_some_and(|l| now - started >= l) {
                return Ok(None);
            }
            next_check = now + Duration::from_millis(2);
        }
        if now - started < spin {
            std::thread::yield_now();
        } else {
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(1));
        }
    }
}

/// True when `tid` is a child process of this process that has exited and
/// waits to be collected (looked at without collecting it).
pub(super) fn exited_child_of_ours(tid: i32) -> bool {
    // SAFETY: siginfo_t is plain data; all zeroes means "nothing reported".
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes only `info`, a live local; WNOWAIT leaves the child
    // reportable.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            tid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: waitid filled `info` (si_pid 0 when nothing was reported).
    r == 0
        && unsafe { info.si_pid() } == tid
        && matches!(
            info.si_code,
            libc::CLD_EXITED | libc::CLD_KILLED | libc::CLD_DUMPED
        )
        // Reported to a tracer too: only a real child is left alone.
        && is_own_child_process(tid)
}

/// True when `tid` is a process (a thread-group leader) whose parent is this
/// process: its exit status is ours to collect as its parent, not as its
/// tracer. A thread of it that is not the leader is only ever the tracer's to
/// reap (it reports to its parent through the leader).
pub(super) fn is_own_child_process(tid: i32) -> bool {
    procfs::read_status(tid).is_ok_and(|st| st.tgid == tid)
        && procfs::read_stat(tid).is_ok_and(|st| st.ppid == std::process::id() as i32)
}

/// True when every thread of `pid` is gone or a zombie: the process has ended.
pub fn process_ended(pid: i32) -> bool {
    match procfs::read_task_ids(pid) {
        Ok(tids) => tids.into_iter().all(thread_is_dead),
        Err(_) => true,
    }
}

/// True when `pid` is going away: every thread of it has started to exit (the
/// kernel's `PF_EXITING`: a killed process shows it while it lets its memory go,
/// before its threads are zombies; none of them runs user code again) or is gone.
pub(crate) fn process_exiting(pid: i32) -> bool {
    match procfs::read_task_ids(pid) {
        Ok(tids) => tids
            .into_iter()
            .all(|t| procfs::read_stat(t).map_or(true, |st| st.is_exiting())),
        Err(_) => true,
    }
}

/// True when some thread of `pid` is exiting or gone (its group leader too):
/// the process may be going away, or only that thread.
pub(crate) fn some_thread_exiting(pid: i32) -> bool {
    match procfs::read_task_ids(pid) {
        Ok(tids) => tids
            .into_iter()
            .any(|t| procfs::read_stat(t).map_or(true, |st| st.is_exiting())),
        Err(_) => true,
    }
}

/// True when `/proc` shows thread `tid` as a zombie, dead, or not at all.
pub(crate) fn thread_is_dead(tid: i32) -> bool {
    procfs::read_stat(tid).map_or(true, |st| st.is_dead())
}

/// Reaps a thread that died while traced, without blocking for long.
///
/// Not the group leader of a process of which this process is also the parent
/// (a program that `argstash record -- CMD` started): its exit status is then
/// the parent's to collect, and a reap here would lose it.
pub(super) fn reap(tid: i32) {
    if is_own_child_process(tid) {
        return;
    }
    for _ in 0..50 {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid only writes the status word through the pointer, which points
        // to a live local.
        let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
        if r != 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `PTRACE_DETACH` with any signal number (nix's `detach` cannot pass real-time signals).
pub(super) fn raw_detach(tid: i32, sig: i32) -> Result<(), Errno> {
    // SAFETY: PTRACE_DETACH dereferences no pointer; the signal number travels in the
    // data argument by value.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_DETACH,
            tid,
            std::ptr::null_mut::<c_void>(),
            sig as libc::c_long as *mut c_void,
        )
    };
    Errno::result(r).map(drop)
}
