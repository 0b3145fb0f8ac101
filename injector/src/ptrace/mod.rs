//! Driving a live process over ptrace: attach sessions, remote system calls, remote
//! function calls, the self-restoring signal frame they run under (with the machine's
//! XSAVE layout), and the proof
//! that a thread may be borrowed for them.
//!
//! Everything here must be called from the OS thread that attached (ptrace binds a
//! tracee to the tracer thread).

pub mod call;
pub mod gadgets;
pub mod realtime;
pub mod regs;
pub mod requeue;
pub mod safe_point;
pub mod seize;
pub mod session;
pub mod session_error;
pub mod sigframe;
pub mod syscall;
pub mod wait;
pub mod xsave;

/// `EINVAL (Invalid argument)` for errno 22.
pub(crate) fn errno_text(errno: i32) -> String {
    let e = nix::errno::Errno::from_raw(errno);
    format!("{e:?} ({})", e.desc())
}
