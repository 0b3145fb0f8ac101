//! Why a ptrace session could not attach, control or let go of a process:
//! [`SessionError`], [`Refusal`] and their messages.

use crate::memory::MemoryError;
use crate::ptrace::errno_text;
use nix::errno::Errno;
use std::fmt;
use std::io;
use std::time::Duration;

/// Errors attaching to, controlling or detaching from a process.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// There is no such process.
    #[error("no process with pid {pid}: check the pid (ps -p {pid})")]
    NoSuchProcess {
        /// The pid asked for.
        pid: i32,
    },
    /// There is no such thread in the process.
    #[error("no thread {tid} in process {pid}: list them with ls /proc/{pid}/task")]
    NoSuchThread {
        /// The process.
        pid: i32,
        /// The thread asked for.
        tid: i32,
    },
    /// The id names a thread, not a process.
    #[error("{tid} is a thread of process {pid}, not a process: pass {pid}")]
    NotAProcess {
        /// The thread id given.
        tid: i32,
        /// Its process.
        pid: i32,
    },
    /// Pid 1 is refused before anything touches it.
    #[error("refusing to attach to pid 1 (init): stopping it can hang the system")]
    Init,
    /// Our own process is refused (ptrace cannot trace its own thread group).
    #[error("refusing to attach to pid {pid}: it is this process itself")]
    OwnProcess {
        /// Our pid.
        pid: i32,
    },
    /// A kernel thread has no user space.
    #[error("pid {pid} ({name}) is a kernel thread: nothing to hook")]
    KernelThread {
        /// The pid.
        pid: i32,
        /// Its name (`comm`).
        name: String,
    },
    /// The kernel refused to let us trace or inspect the process.
    #[error("{}", refusal_message(*.pid, .reason))]
    NotPermitted {
        /// The process.
        pid: i32,
        /// Why.
        reason: Refusal,
    },
    /// A thread asked to stop did not stop in time: it is held in the kernel
    /// (an uninterruptible wait) and nothing was done to the process.
    #[error(
        "thread {tid} of process {pid} did not stop within {} s of being asked to (state {state}): \
         it is held in an uninterruptible wait in the kernel (a vfork parent, a stuck file \
         system or device); nothing was changed; try again once it has left that wait \
         (/proc/{pid}/task/{tid}/wchan names it)",
        .waited.as_secs()
    )]
    NoStop {
        /// The process.
        pid: i32,
        /// The thread.
        tid: i32,
        /// How long it was waited for.
        waited: Duration,
        /// Its state letter in `/proc` at the deadline (`D`: uninterruptible).
        state: char,
    },
    /// The process went away while we worked on it.
    #[error("process {pid} exited during the operation")]
    Exited {
        /// The process.
        pid: i32,
    },
    /// A ptrace (or waitpid) request failed.
    #[error("ptrace {op} on thread {tid} failed: {source}")]
    Ptrace {
        /// The request, e.g. `PTRACE_GETREGS`.
        op: &'static str,
        /// The thread.
        tid: i32,
        /// The errno.
        source: nix::Error,
    },
    /// A wait reported something this session never asked for.
    #[error("thread {tid} reported an unexpected state: {state}")]
    Unexpected {
        /// The thread.
        tid: i32,
        /// What it reported, or what it did not.
        state: UnexpectedState,
    },
    /// The thread is not held by this session.
    #[error("thread {tid} is not stopped in this session")]
    NotStopped {
        /// The thread.
        tid: i32,
    },
    /// Reading `/proc` failed for another reason than the process being gone.
    #[error("cannot read {path}: {source}")]
    Proc {
        /// The file.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// A system call run inside the target returned an error.
    #[error("remote {name} in process {pid} failed: {}", errno_text(*.errno))]
    RemoteSyscall {
        /// The process.
        pid: i32,
        /// The system call's name (or `syscall N`).
        name: String,
        /// Its number.
        nr: i64,
        /// The positive errno it returned.
        errno: i32,
    },
    /// No executable mapping holds a `syscall` instruction and writing one is not safe.
    #[error("process {pid} has no `syscall` instruction (0f 05) in any executable mapping, and writing one at a thread's RIP needs every thread stopped (use attach_all)")]
    NoSyscallGadget {
        /// The process.
        pid: i32,
    },
    /// The address given as a `syscall` gadget does not hold `0f 05`.
    #[error("no `syscall` instruction (0f 05) at 0x{addr:x} in process {pid}")]
    BadGadget {
        /// The process.
        pid: i32,
        /// The address.
        addr: u64,
    },
    /// The stopped thread is not running 64-bit code.
    #[error("thread {tid} is not executing 64-bit code (cs=0x{cs:x}): remote system calls support x86-64 processes only")]
    Not64Bit {
        /// The thread.
        tid: i32,
        /// Its code segment selector.
        cs: u64,
    },
    /// Reading or writing target memory failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

/// Why the kernel refused to let us trace or inspect a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Another tracer (a debugger) holds the process or one of its threads.
    TracedBy {
        /// The thread it holds, when that is not the leader.
        thread: Option<i32>,
        /// The tracer's pid.
        tracer: i32,
        /// The tracer's command name (`?` when unreadable).
        tracer_name: String,
    },
    /// `PTRACE_SEIZE` failed with EPERM although we are root: a security module
    /// (SELinux, AppArmor, Yama) or kernel lockdown forbids it.
    Policy,
    /// `PTRACE_SEIZE` failed with EPERM: we are neither root nor the process owner.
    NotOwner,
    /// The kernel hides the process's executable (and so its memory) from us.
    Hidden {
        /// The process's command name.
        name: String,
        /// `EACCES` or `EPERM`.
        errno: Errno,
    },
}

pub(super) fn refusal_message(pid: i32, reason: &Refusal) -> String {
    match reason {
        Refusal::TracedBy {
            thread,
            tracer,
            tracer_name,
        } => {
            let who = match thread {
                Some(t) => format!("thread {t} of process {pid}"),
                None => format!("process {pid}"),
            };
            format!(
                "{who} is already traced by PID {tracer} ({tracer_name}): detach that debugger first"
            )
        }
        Refusal::Policy => format!(
            "ptrace of process {pid} was refused (EPERM) although we are root: a security \
             module (SELinux, AppArmor, Yama) or kernel lockdown forbids it"
        ),
        Refusal::NotOwner => format!(
            "ptrace of process {pid} was refused (EPERM): run as root or as the process owner"
        ),
        Refusal::Hidden { name, errno } => format!(
            "access to process {pid} ({name}) was refused ({errno:?}): run as root or as the \
             process owner"
        ),
    }
}

/// What a thread reported that a session did not ask for, or what it failed to report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnexpectedState {
    /// A wait status (decoded in the message).
    Wait(i32),
    /// No single-step trap came after `steps` steps over a remote system call.
    NoStepTrap {
        /// Steps made.
        steps: usize,
    },
    /// No syscall-exit stop came after `resumptions` resumptions.
    NoSyscallExit {
        /// Resumptions made.
        resumptions: usize,
    },
    /// `PTRACE_DETACH` kept failing with ESRCH on a thread that is not gone.
    DetachKeptFailing,
}

impl fmt::Display for UnexpectedState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnexpectedState::Wait(status) => f.write_str(&describe_status(*status)),
            UnexpectedState::NoStepTrap { steps } => write!(
                f,
                "no single-step trap after {steps} steps over the system call"
            ),
            UnexpectedState::NoSyscallExit { resumptions } => {
                write!(f, "no syscall-exit stop after {resumptions} resumptions")
            }
            UnexpectedState::DetachKeptFailing => {
                f.write_str("PTRACE_DETACH kept failing with ESRCH")
            }
        }
    }
}

/// Human-readable wait status.
pub(crate) fn describe_status(status: i32) -> String {
    if libc::WIFEXITED(status) {
        format!("exited with code {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("killed by {}", signal_name(libc::WTERMSIG(status)))
    } else if libc::WIFSTOPPED(status) {
        let event = (status >> 16) & 0xff;
        format!(
            "stopped by {} (ptrace event {event}, raw status 0x{status:x})",
            signal_name(libc::WSTOPSIG(status))
        )
    } else {
        format!("raw wait status 0x{status:x}")
    }
}

/// `SIGUSR1` for 10; real-time signals as `SIGRTMIN+n`.
pub(crate) fn signal_name(sig: i32) -> String {
    match nix::sys::signal::Signal::try_from(sig) {
        Ok(s) => s.as_str().to_string(),
        Err(_) if sig >= libc::SIGRTMIN() => format!("SIGRTMIN+{}", sig - libc::SIGRTMIN()),
        Err(_) => format!("signal {sig}"),
    }
}
