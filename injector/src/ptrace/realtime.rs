//! The tracer thread's scheduling while it holds a process stopped: real-time
//! (`SCHED_FIFO`, lowest priority) when permitted.
//!
//! On a machine whose CPUs are all busy, each thread released by a detach is
//! woken and may preempt the tracer of normal priority, which then waits for a
//! whole time slice (3-4 ms measured here) before it detaches the next thread,
//! with that thread still stopped. A real-time tracer is not preempted by the
//! threads it wakes, so the stop ends when its own work does. It never spins
//! while real-time: [`super::session`]'s waits sleep for a `SCHED_FIFO` caller,
//! and the kernel's real-time throttling (95% of a CPU) bounds it regardless.
//! `argstash record`'s sampling thread uses the same guard while it samples.

/// The calling thread runs `SCHED_FIFO` (lowest real-time priority) until this is
/// dropped; then its former policy and priority come back.
pub struct Realtime {
    policy: libc::c_int,
    param: libc::sched_param,
}

impl Realtime {
    /// Switches the calling thread to `SCHED_FIFO`; `None` (nothing changed) when
    /// that is not permitted (no `CAP_SYS_NICE`, or an `RLIMIT_RTPRIO` of 0) or it
    /// is real-time already.
    pub fn enter() -> Option<Realtime> {
        // SAFETY: pid 0 is the calling thread; sched_getscheduler takes no pointer.
        let policy = unsafe { libc::sched_getscheduler(0) };
        if policy < 0 || policy == libc::SCHED_FIFO || policy == libc::SCHED_RR {
            return None;
        }
        let mut param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread; the kernel writes `param`, a live local.
        if unsafe { libc::sched_getparam(0, &mut param) } != 0 {
            return None;
        }
        let fifo = libc::sched_param { sched_priority: 1 };
        // SAFETY: pid 0 is the calling thread; `fifo` is a live sched_param.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &fifo) } != 0 {
            return None;
        }
        Some(Realtime { policy, param })
    }
}

impl Drop for Realtime {
    fn drop(&mut self) {
        // SAFETY: pid 0 is the calling thread; `param` was filled by sched_getparam.
        unsafe { libc::sched_setscheduler(0, self.policy, &self.param) };
    }
}
