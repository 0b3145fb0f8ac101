//! Reading a thread blocked in a system call without stopping it.
//!
//! A ptrace stop is not free for the program: it interrupts the system call the
//! thread is blocked in, and a call that had already done part of its work
//! returns that part (a short `write` into a pipe, a short `read`), which a
//! program may treat as an error. A thread blocked in a system call runs no user
//! code, and the kernel shows where it left user space without a stop:
//! `/proc/PID/task/TID/syscall` gives its stack and instruction pointers.
//!
//! [`read_blocked`] reads that line and the thread's run counts, copies the
//! stack from the stack pointer, then reads both again: unchanged, the thread
//! did not run between the two reads (any run starts with a slice on a CPU and
//! ends with a context switch), so the copy is exactly its stack at the stack
//! and instruction pointers read. Only those two registers are known; the
//! unwinder steps the innermost frame (normally just after the `syscall`
//! instruction of a libc wrapper) by CFI from the pc, and the caller falls back
//! to a stop when a frame needs a register that only a stop gives
//! ([`reader::unwind::StopReason::RegisterUnknown`]).

use reader::memory::Memory;
use reader::procfs::{
    read_task_run_count, read_task_status, read_task_syscall_state, MapEntry, TaskSyscall,
};
use reader::unwind::stack_range;

use crate::memory::ProcessMemory;

/// A blocked thread's stack, copied without a stop.
pub(crate) struct Blocked<T> {
    /// The system call it is blocked in.
    pub(crate) syscall: u64,
    /// Its user stack pointer.
    pub(crate) sp: u64,
    /// Its user instruction pointer.
    pub(crate) pc: u64,
    /// Where the copy starts (`sp`).
    pub(crate) start: u64,
    /// The stack from `sp` (see [`stack_range`]).
    pub(crate) bytes: Vec<u8>,
    /// What `during` read in the same window.
    pub(crate) extra: T,
}

/// Copies thread `tid`'s stack (and whatever `during` reads, e.g. its Python
/// frames) if it is blocked in a system call and provably stays there, without
/// running, for the whole copy; `None` otherwise (running, not in a system
/// call, woken during the copy, gone, stack unreadable): the caller stops it.
/// A thread another tracer (a debugger) holds is left to the caller too, which
/// refuses it as it refuses any traced thread: a backtrace does not succeed or
/// fail by which threads happen to be blocked.
pub(crate) fn read_blocked<T>(
    pid: i32,
    tid: i32,
    maps: &[MapEntry],
    mem: &ProcessMemory,
    during: impl FnOnce() -> T,
) -> Option<Blocked<T>> {
    if read_task_status(pid, tid).ok()?.tracer != 0 {
        return None;
    }
    let runs = read_task_run_count(pid, tid)?;
    let line = read_task_syscall_state(pid, tid)?;
    let TaskSyscall::Blocked { nr, sp, pc, .. } = line else {
        return None;
    };
    let (start, end) = stack_range(maps, sp);
    let mut bytes = vec![0u8; end.saturating_sub(start) as usize];
    mem.read(start, &mut bytes).ok()?;
    let extra = during();
    // The line first, then the counts: a thread that ran after the first reads
    // either runs now (the line says `running` or another place) or has been
    // switched out since (a count moved).
    if read_task_syscall_state(pid, tid)? != line || read_task_run_count(pid, tid)? != runs {
        return None;
    }
    Some(Blocked {
        syscall: nr,
        sp,
        pc,
        start,
        bytes,
        extra,
    })
}
