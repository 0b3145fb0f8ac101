//! A ptrace session: every thread (or one thread) of a process held in a ptrace-stop,
//! and released exactly as it was found.
//!
//! # Protocol
//!
//! * Threads are taken with `PTRACE_SEIZE` (never `PTRACE_ATTACH`, so no `SIGSTOP` is
//!   ever sent) and stopped with `PTRACE_INTERRUPT`; `waitpid(tid, __WALL)` collects the
//!   stop. `/proc/PID/task` is re-read until a pass finds no new thread. With
//!   `PTRACE_O_TRACECLONE`, a thread cloned by an already seized thread is traced
//!   automatically and starts in a `PTRACE_EVENT_STOP`.
//! * A wait reports one of: the interrupt (`PTRACE_EVENT_STOP` with `SIGTRAP`); a
//!   group-stop (`PTRACE_EVENT_STOP` with the stop signal: the process was stopped by
//!   job control and stays stopped after detach); a clone event (the thread is taken out
//!   of `clone` and re-stopped, so that every held thread sits at the same place: in the
//!   kernel's signal path, on its way back to user space, with final registers); or a
//!   signal-delivery-stop (a real signal arrived): its `siginfo` is saved, the thread
//!   stays in that stop, and detach re-delivers exactly that signal.
//! * Detach clears whatever ptrace traps are still pending (`__ptrace_unlink` clears
//!   `JOBCTL_TRAP_MASK`), re-instates a group-stop, and passes the saved signal (or 0).
//!
//! The stop window is kept short: all new threads are seized first, then all are
//! interrupted, then all are waited for; `/proc` is read again only to look for
//! threads created meanwhile.

use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::ptrace::{self, Options};
use nix::unistd::Pid;

use super::seize::{is_root, list_tasks, precheck, proc_exists, seize, traced_by, Prechecked};
use super::session_error::{Refusal, SessionError, UnexpectedState};
use super::wait::{
    raw_detach, reap, thread_is_dead, try_wait, wait_tid_within, Step, Waited, EVENT_STOP,
    STOP_DEADLINE,
};
use crate::arch::{Arch, ProcessArch};
use crate::memory::ProcessMemory;
use crate::ptrace::requeue::{SignalFate, SignalOutcome};
use reader::procfs::{self};

/// How a held thread was found when it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadStop {
    /// Stopped by our `PTRACE_INTERRUPT` (or the first stop of a thread cloned meanwhile).
    Interrupted,
    /// In a job-control stop (the process was stopped by `signal`); it stays stopped after detach.
    GroupStop {
        /// The stop signal (`SIGSTOP`, `SIGTSTP`, `SIGTTIN` or `SIGTTOU`).
        signal: i32,
    },
    /// Held with a real `signal` that arrived while stopping; it is re-delivered at detach.
    Signal {
        /// The signal number.
        signal: i32,
    },
}

/// What [`Session::detach_reporting`] hands back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Released {
    /// How long the threads were stopped.
    pub held: Duration,
    /// Each real signal taken from a thread while it was held, and how it got back.
    pub signals: Vec<SignalOutcome>,
}

/// The kind of ptrace-stop a thread is in right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Current {
    /// A `PTRACE_EVENT_STOP` (interrupt or group-stop).
    Event,
    /// A signal-delivery-stop: a real signal, or the `SIGTRAP` of our own single-step.
    SignalStop,
    /// A syscall-entry or -exit stop of a remote system call (only between its steps).
    SyscallStop,
}

/// One held thread.
pub(crate) struct Tracee {
    /// Thread id.
    pub(crate) tid: i32,
    /// How it was found.
    pub(crate) found: ThreadStop,
    /// The stop it is in now.
    pub(crate) current: Current,
    /// A real signal taken from the thread, re-delivered at detach.
    pub(crate) signal: Option<libc::siginfo_t>,
    /// Further real signals (rare: they arrive while we single-step), re-queued at detach.
    pub(crate) extra: Vec<libc::siginfo_t>,
    /// Resumed since it was stopped, so the kernel's idea of its current siginfo changed.
    pub(crate) resumed: bool,
}

/// All (or one) of a process's threads held in a ptrace-stop.
///
/// ptrace binds a tracee to the tracer *thread*: every request for this session must come
/// from the OS thread that created it, so `Session` is neither `Send` nor `Sync`. Give
/// each session a dedicated thread when an async runtime is involved. Dropping a session
/// detaches (best effort); [`Session::detach`] reports errors and the stop window.
///
/// ```compile_fail
/// fn needs_send<T: Send>() {}
/// needs_send::<injector::session::Session>();
/// ```
pub struct Session {
    pub(crate) pid: i32,
    pub(crate) threads: Vec<Tracee>,
    pub(crate) all_threads: bool,
    /// At release, look at the process's other threads only when a held one
    /// died (see [`Session::set_quick_release`]).
    quick_release: bool,
    stopped_at: Instant,
    detached: bool,
    /// `None`: not searched yet; `Some(None)`: searched, nothing found.
    pub(crate) gadget: Option<Option<u64>>,
    /// libc's `syscall; ret` and `__restore_rt`, for self-restoring borrowed runs
    /// (`None`: not searched yet; `Some(None)`: not available).
    pub(crate) sigreturn: Option<Option<crate::ptrace::sigframe::SigreturnGadgets>>,
    /// Gadgets in libc: the caller's cache ([`Session::set_gadgets`]) and what this session found.
    pub(crate) gadgets: crate::ptrace::gadgets::Gadgets,
    /// The process's architecture: the caller's ([`Session::set_arch`]), or read once when first needed.
    arch: std::cell::OnceCell<Arch>,
    /// The thread remote system calls ran on last.
    pub(crate) syscall_tid: Option<i32>,
    memory: Option<ProcessMemory>,
    /// How each signal taken from a thread got back, filled in at release.
    signals: Vec<SignalOutcome>,
    /// Seized threads whose stop has not been collected yet (only non-empty on error paths).
    pending: HashSet<i32>,
    /// How long a thread asked to stop may take ([`STOP_DEADLINE`]).
    stop_deadline: Duration,
    /// Clone events seen while attaching (diagnostics and tests).
    pub(crate) clone_events: usize,
    /// The process ignores SIGTRAP (SIG_IGN), so remote system calls avoid single-steps.
    pub(crate) sigtrap_ignored: bool,
    /// When the process started (clock ticks since boot), with the pid its identity.
    pub(crate) start_time: u64,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("pid", &self.pid)
            .field("tids", &self.tids())
            .field("all_threads", &self.all_threads)
            .field("detached", &self.detached)
            .finish()
    }
}

impl Session {
    fn new(pid: i32, all_threads: bool, checked: &Prechecked) -> Session {
        Session {
            pid,
            threads: Vec::new(),
            all_threads,
            quick_release: false,
            stopped_at: Instant::now(),
            detached: false,
            gadget: None,
            sigreturn: None,
            gadgets: crate::ptrace::gadgets::Gadgets::new(pid, checked.start_time),
            arch: std::cell::OnceCell::new(),
            syscall_tid: None,
            memory: None,
            signals: Vec::new(),
            pending: HashSet::new(),
            stop_deadline: STOP_DEADLINE,
            clone_events: 0,
            sigtrap_ignored: checked.status.ignores(libc::SIGTRAP),
            start_time: checked.start_time,
            _not_send: PhantomData,
        }
    }

    /// Stops every thread of `pid`, looping until no new thread appears.
    ///
    /// A thread that does not stop within [`STOP_DEADLINE`] fails it with
    /// [`SessionError::NoStop`], the others let go as they were.
    pub fn attach_all(pid: i32) -> Result<Session, SessionError> {
        Session::attach_all_within(pid, STOP_DEADLINE)
    }

    /// [`Session::attach_all`], each thread given `deadline` to stop.
    pub(crate) fn attach_all_within(pid: i32, deadline: Duration) -> Result<Session, SessionError> {
        let status = precheck(pid)?;
        let mut s = Session::new(pid, true, &status);
        s.stop_deadline = deadline;
        s.attach_loop()?;
        if s.threads.is_empty() {
            return Err(SessionError::Exited { pid });
        }
        Ok(s)
    }

    /// Stops only thread `tid` of `pid` (for reading one stack); the others keep running.
    pub fn attach_thread(pid: i32, tid: i32) -> Result<Session, SessionError> {
        let mut s = Session::request_thread(pid, tid)?;
        s.wait_attach(
            tid,
            &mut HashSet::from([tid]),
            &mut Vec::new(),
            &mut HashSet::new(),
        )?;
        if s.threads.is_empty() {
            return Err(if proc_exists(pid) {
                SessionError::NoSuchThread { pid, tid }
            } else {
                SessionError::Exited { pid }
            });
        }
        Ok(s)
    }

    /// Seizes thread `tid` of `pid` and asks it to stop, without waiting:
    /// [`Session::poll_attach`] collects the stop. A profiler asks every thread
    /// of a round at once, so that the threads waiting for a CPU stop (as soon as
    /// they get one) while it copies the others.
    pub(crate) fn request_thread(pid: i32, tid: i32) -> Result<Session, SessionError> {
        let status = precheck(pid)?;
        if tid <= 0 || !procfs::task_exists(pid, tid) {
            return Err(SessionError::NoSuchThread { pid, tid });
        }
        let mut s = Session::new(pid, false, &status);
        match seize(pid, tid, Options::empty()) {
            Ok(()) => {}
            Err((Errno::ESRCH, _)) => return Err(SessionError::NoSuchThread { pid, tid }),
            Err((Errno::EPERM, seen)) => {
                s.refused(tid, seen)?;
                return Err(SessionError::NoSuchThread { pid, tid });
            }
            Err((source, _)) => {
                return Err(SessionError::Ptrace {
                    op: "PTRACE_SEIZE",
                    tid,
                    source,
                })
            }
        }
        // From here on, dropping the session collects the stop and lets it go.
        s.pending.insert(tid);
        s.stopped_at = Instant::now();
        match ptrace::interrupt(Pid::from_raw(tid)) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(source) => {
                return Err(SessionError::Ptrace {
                    op: "PTRACE_INTERRUPT",
                    tid,
                    source,
                })
            }
        }
        Ok(s)
    }

    /// For a session of [`Session::request_thread`]: whether the thread has
    /// stopped (and is now held), without blocking. An error when it ended;
    /// `check_dead` also asks `/proc` whether it died unreported (a traced
    /// thread of a killed process may never report).
    pub(crate) fn poll_attach(&mut self, check_dead: bool) -> Result<bool, SessionError> {
        let Some(&tid) = self.pending.iter().next() else {
            return Ok(!self.threads.is_empty());
        };
        let waited = match try_wait(tid)? {
            Some(w) => w,
            None if check_dead && thread_is_dead(tid) => Waited::Gone,
            None => return Ok(false),
        };
        let mut known = HashSet::from([tid]);
        match self.take_stop(
            tid,
            Ok(waited),
            &mut known,
            &mut Vec::new(),
            &mut HashSet::new(),
        )? {
            Step::Again => Ok(false),
            Step::Done if self.threads.is_empty() => Err(if proc_exists(self.pid) {
                SessionError::NoSuchThread { pid: self.pid, tid }
            } else {
                SessionError::Exited { pid: self.pid }
            }),
            Step::Done => {
                self.stopped_at = Instant::now();
                Ok(true)
            }
        }
    }

    /// Seize, interrupt and wait for threads until a pass over `/proc/PID/task` finds none new.
    fn attach_loop(&mut self) -> Result<(), SessionError> {
        let pid = self.pid;
        let mut known: HashSet<i32> = HashSet::new();
        let mut first = true;
        loop {
            let fresh: Vec<i32> = list_tasks(pid)?
                .into_iter()
                .filter(|t| known.insert(*t))
                .collect();
            if fresh.is_empty() {
                return Ok(());
            }
            let mut seized = Vec::with_capacity(fresh.len());
            let mut waitlist = Vec::new();
            let mut failure = None;
            for tid in fresh {
                match seize(pid, tid, Options::PTRACE_O_TRACECLONE) {
                    Ok(()) => {
                        self.pending.insert(tid);
                        seized.push(tid);
                    }
                    Err((Errno::ESRCH, _)) => {}
                    // Already ours when a seized thread cloned it; otherwise someone else's.
                    Err((Errno::EPERM, seen)) => match ptrace::interrupt(Pid::from_raw(tid)) {
                        Ok(()) => {
                            self.pending.insert(tid);
                            waitlist.push(tid);
                        }
                        Err(_) => {
                            if let Err(e) = self.refused(tid, seen) {
                                failure = Some(e);
                                break;
                            }
                        }
                    },
                    Err((source, _)) => {
                        failure = Some(SessionError::Ptrace {
                            op: "PTRACE_SEIZE",
                            tid,
                            source,
                        });
                        break;
                    }
                }
            }
            if first {
                self.stopped_at = Instant::now();
                first = false;
            }
            for tid in seized {
                match ptrace::interrupt(Pid::from_raw(tid)) {
                    // ESRCH: it is exiting; the wait collects the exit.
                    Ok(()) | Err(Errno::ESRCH) => waitlist.push(tid),
                    Err(source) => {
                        failure.get_or_insert(SessionError::Ptrace {
                            op: "PTRACE_INTERRUPT",
                            tid,
                            source,
                        });
                    }
                }
            }
            // Wait in ascending order: the leader first, like the listing.
            waitlist.reverse();
            let mut cloned = HashSet::new();
            while let Some(tid) = waitlist.pop() {
                if let Err(e) = self.wait_attach(tid, &mut known, &mut waitlist, &mut cloned) {
                    failure.get_or_insert(e);
                }
            }
            if let Some(e) = failure {
                return Err(e);
            }
        }
    }

    /// [`SessionError::NoStop`] for thread `tid`, which did not stop within the deadline.
    pub(crate) fn no_stop(&self, tid: i32) -> SessionError {
        SessionError::NoStop {
            pid: self.pid,
            tid,
            waited: self.stop_deadline,
            state: procfs::read_task_status(self.pid, tid).map_or('?', |s| s.state),
        }
    }

    /// Explains an EPERM from `PTRACE_SEIZE`; a zombie or vanished thread is skipped (`Ok`).
    ///
    /// `seen` is a tracer [`seize`] saw on the thread (0: none): it is named
    /// even if it has detached since.
    fn refused(&self, tid: i32, seen: i32) -> Result<(), SessionError> {
        let pid = self.pid;
        let st = match procfs::read_task_status(pid, tid) {
            Ok(s) => s,
            Err(_) => return Ok(()),
        };
        if matches!(st.state, 'Z' | 'X') {
            return Ok(());
        }
        let tracer = if st.tracer != 0 { st.tracer } else { seen };
        let reason = if tracer != 0 {
            traced_by(pid, Some(tid), tracer)
        } else if is_root() {
            Refusal::Policy
        } else {
            Refusal::NotOwner
        };
        Err(SessionError::NotPermitted { pid, reason })
    }

    /// Waits for a seized thread's stop and records it; handles clone events.
    fn wait_attach(
        &mut self,
        tid: i32,
        known: &mut HashSet<i32>,
        waitlist: &mut Vec<i32>,
        cloned: &mut HashSet<i32>,
    ) -> Result<(), SessionError> {
        loop {
            let waited = match wait_tid_within(tid, Some(self.stop_deadline)) {
                Ok(Some(w)) => Ok(w),
                // Still seized, with the stop pending: the session's release
                // (or, failing that, the end of this tracer thread) lets it go.
                Ok(None) => return Err(self.no_stop(tid)),
                Err(e) => Err(e),
            };
            if let Step::Done = self.take_stop(tid, waited, known, waitlist, cloned)? {
                return Ok(());
            }
        }
    }

    /// Records what a wait for seized thread `tid` returned: its stop, its end,
    /// or a clone event (let through: [`Step::Again`], wait again).
    fn take_stop(
        &mut self,
        tid: i32,
        waited: Result<Waited, SessionError>,
        known: &mut HashSet<i32>,
        waitlist: &mut Vec<i32>,
        cloned: &mut HashSet<i32>,
    ) -> Result<Step, SessionError> {
        let child = Pid::from_raw(tid);
        // Whatever happens next, the thread is no longer running unseen.
        self.pending.remove(&tid);
        let (sig, event, raw) = match waited? {
            Waited::Gone => return Ok(Step::Done),
            Waited::Stop { sig, event, raw } => (sig, event, raw),
        };
        let mut tracee = Tracee {
            tid,
            found: ThreadStop::Interrupted,
            current: Current::Event,
            signal: None,
            extra: Vec::new(),
            resumed: false,
        };
        match event {
            0 => {
                tracee.found = ThreadStop::Signal { signal: sig };
                tracee.current = Current::SignalStop;
                let info = ptrace::getsiginfo(child);
                tracee.signal = info.ok();
                self.threads.push(tracee);
                return info
                    .map(|_| Step::Done)
                    .map_err(|e| self.ptrace_error("PTRACE_GETSIGINFO", tid, e));
            }
            EVENT_STOP if sig == libc::SIGTRAP => {}
            EVENT_STOP
                if matches!(
                    sig,
                    libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
                ) =>
            {
                tracee.found = ThreadStop::GroupStop { signal: sig }
            }
            libc::PTRACE_EVENT_CLONE => {
                self.clone_events += 1;
                if let Ok(new) = ptrace::getevent(child) {
                    let new = new as i32;
                    if known.insert(new) {
                        self.pending.insert(new);
                        cloned.insert(new);
                        waitlist.push(new);
                    }
                }
                // Let clone return, and stop again on the way to user space.
                let step = ptrace::interrupt(child)
                    .map_err(|e| ("PTRACE_INTERRUPT", e))
                    .and_then(|()| ptrace::cont(child, None).map_err(|e| ("PTRACE_CONT", e)));
                if let Err((op, e)) = step {
                    // Still stopped in the clone event: keep it so that detach releases it.
                    self.threads.push(tracee);
                    return Err(self.ptrace_error(op, tid, e));
                }
                self.pending.insert(tid);
                return Ok(Step::Again);
            }
            _ => {
                self.threads.push(tracee);
                return Err(SessionError::Unexpected {
                    tid,
                    state: UnexpectedState::Wait(raw),
                });
            }
        }
        if cloned.contains(&tid) && !procfs::task_exists(self.pid, tid) {
            // A new process cloned without SIGCHLD, traced through TRACECLONE: let it go.
            let _ = ptrace::detach(child, None);
            return Ok(Step::Done);
        }
        self.threads.push(tracee);
        Ok(Step::Done)
    }

    /// Maps ESRCH on a vanished process to [`SessionError::Exited`].
    pub(crate) fn ptrace_error(&self, op: &'static str, tid: i32, source: Errno) -> SessionError {
        if source == Errno::ESRCH && !proc_exists(self.pid) {
            SessionError::Exited { pid: self.pid }
        } else {
            SessionError::Ptrace { op, tid, source }
        }
    }

    /// Index of a held thread.
    pub(crate) fn index(&self, tid: i32) -> Result<usize, SessionError> {
        self.threads
            .iter()
            .position(|t| t.tid == tid)
            .ok_or(SessionError::NotStopped { tid })
    }

    /// The process.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The process's architecture (`/proc/PID/exe` is read once per session, unless
    /// the caller said it with [`Session::set_arch`]).
    pub fn arch(&self) -> Arch {
        *self.arch.get_or_init(|| Arch::of_process(self.pid))
    }

    /// Tells the session the process's architecture, as the caller's context read
    /// it, so that nothing is read for it inside the stop (an executable does not
    /// change while its process lives). Ignored once the session knows it.
    pub fn set_arch(&mut self, arch: Arch) {
        let _ = self.arch.set(arch);
    }

    /// The stopped threads, in the order they were stopped.
    pub fn tids(&self) -> Vec<i32> {
        self.threads.iter().map(|t| t.tid).collect()
    }

    /// How thread `tid` was found when it stopped (None if not held).
    pub fn stop_state(&self, tid: i32) -> Option<ThreadStop> {
        self.threads.iter().find(|t| t.tid == tid).map(|t| t.found)
    }

    /// For a profiler's sample of one thread, taken many times a second: its
    /// release looks at the process's other threads only when the held thread
    /// died, so that a sample's cost does not grow with the number of threads.
    pub(crate) fn set_quick_release(&mut self) {
        self.quick_release = true;
    }

    /// True when the session holds every thread (from [`Session::attach_all`]).
    pub fn holds_all_threads(&self) -> bool {
        self.all_threads
    }

    /// The general-purpose registers of a stopped thread.
    pub fn regs(&self, tid: i32) -> Result<libc::user_regs_struct, SessionError> {
        self.index(tid)?;
        ptrace::getregs(Pid::from_raw(tid)).map_err(|e| self.ptrace_error("PTRACE_GETREGS", tid, e))
    }

    /// Sets the general-purpose registers of a stopped thread.
    pub fn set_regs(
        &mut self,
        tid: i32,
        regs: &libc::user_regs_struct,
    ) -> Result<(), SessionError> {
        self.index(tid)?;
        ptrace::setregs(Pid::from_raw(tid), *regs)
            .map_err(|e| self.ptrace_error("PTRACE_SETREGS", tid, e))
    }

    /// The target's memory, with the `PTRACE_POKEDATA` fallback bound to a held thread (opened once).
    pub fn memory(&mut self) -> Result<&ProcessMemory, SessionError> {
        if self.memory.is_none() {
            let tid = self
                .threads
                .first()
                .map(|t| t.tid)
                .ok_or(SessionError::Exited { pid: self.pid })?;
            self.memory =
                Some(ProcessMemory::open_thread(self.pid, tid)?.with_ptrace_fallback(tid));
        }
        self.memory
            .as_ref()
            .ok_or(SessionError::Exited { pid: self.pid })
    }

    /// When the first thread was interrupted (for measuring the stop window).
    pub fn stopped_at(&self) -> Instant {
        self.stopped_at
    }

    /// Lets every thread go as it was found; returns how long threads were stopped.
    pub fn detach(self) -> Result<Duration, SessionError> {
        self.detach_reporting().map(|r| r.held)
    }

    /// Lets every thread go as it was found; says how long threads were stopped and
    /// how each signal taken from them got back ([`Released::signals`]).
    pub fn detach_reporting(mut self) -> Result<Released, SessionError> {
        let held = self.release()?;
        Ok(Released {
            held,
            signals: std::mem::take(&mut self.signals),
        })
    }

    fn release(&mut self) -> Result<Duration, SessionError> {
        if self.detached {
            return Ok(Duration::ZERO);
        }
        self.detached = true;
        self.memory = None;
        let threads = std::mem::take(&mut self.threads);
        let mut first_err = None;
        self.release_pending();
        for t in &threads {
            if let Err(e) = self.detach_one(t) {
                first_err.get_or_insert(e);
            }
        }
        // A killed process: a traced group leader is reportable (and reaped by us,
        // which hands it back to its parent) only after every other thread was,
        // including those a wait already counted as gone.
        let mut dead: Vec<i32> = threads.iter().map(|t| t.tid).collect();
        // Every other session looks at all threads, and so also reaps a dead
        // thread an earlier session of this tracer could not (a group leader is
        // reportable only after its siblings). A profiler's sample
        // ([`Session::set_quick_release`]) looks only when its own thread died, so
        // that its cost stays the same whatever the number of threads.
        if !self.quick_release || dead.iter().any(|t| thread_is_dead(*t)) {
            if let Ok(tids) = list_tasks(self.pid) {
                dead.extend(tids);
            }
        }
        dead.sort_unstable();
        dead.dedup();
        dead.retain(|t| thread_is_dead(*t));
        dead.sort_by_key(|t| *t == self.pid);
        for tid in dead {
            reap(tid);
        }
        let held = self.stopped_at.elapsed();
        crate::ptrace::requeue::journal(self.pid, &self.signals);
        match first_err {
            Some(e) => Err(e),
            None => Ok(held),
        }
    }

    /// Seized threads whose stop was never collected (an error cut the attach short):
    /// collect the stop, then let them go with whatever signal they stopped for.
    fn release_pending(&mut self) {
        let mut todo: Vec<i32> = self.pending.drain().collect();
        while let Some(tid) = todo.pop() {
            let _ = ptrace::interrupt(Pid::from_raw(tid));
            // A thread that does not stop in time cannot be detached (only a
            // stopped tracee can): it stays seized until this tracer thread ends,
            // which detaches it and drops the pending stop.
            if let Ok(Some(Waited::Stop { sig, event, .. })) =
                wait_tid_within(tid, Some(self.stop_deadline))
            {
                if event == libc::PTRACE_EVENT_CLONE {
                    if let Ok(new) = ptrace::getevent(Pid::from_raw(tid)) {
                        todo.push(new as i32);
                    }
                }
                let _ = raw_detach(tid, if event == 0 { sig } else { 0 });
            }
        }
    }

    fn detach_one(&mut self, t: &Tracee) -> Result<(), SessionError> {
        let child = Pid::from_raw(t.tid);
        let mut sig = 0;
        let mut requeue: Vec<&libc::siginfo_t> = Vec::new();
        let mut failed = None;
        if let Some(info) = &t.signal {
            if t.current == Current::SignalStop {
                if t.resumed {
                    if let Err(e) = ptrace::setsiginfo(child, info) {
                        // Still detach; the signal then arrives with a synthesised siginfo.
                        failed = Some(self.ptrace_error("PTRACE_SETSIGINFO", t.tid, e));
                    }
                }
                sig = info.si_signo;
                self.signals.push(SignalOutcome {
                    tid: t.tid,
                    signal: sig,
                    code: info.si_code,
                    fate: if failed.is_some() {
                        SignalFate::InfoDropped
                    } else {
                        SignalFate::Redelivered
                    },
                });
            } else {
                // Not in a signal-delivery-stop: a signal passed to DETACH would be ignored.
                requeue.push(info);
            }
        }
        requeue.extend(t.extra.iter());
        for info in requeue {
            let outcome = crate::ptrace::requeue::requeue(self.pid, t.tid, info);
            self.signals.push(outcome);
        }
        for _ in 0..3 {
            let Err(errno) = raw_detach(t.tid, sig) else {
                return failed.map_or(Ok(()), Err);
            };
            match errno {
                Errno::ESRCH => {
                    // Either it died (reap it) or it is ours but running: stop it and retry.
                    if ptrace::interrupt(child).is_err() {
                        reap(t.tid);
                        return failed.map_or(Ok(()), Err);
                    }
                    match wait_tid_within(t.tid, Some(self.stop_deadline))? {
                        Some(Waited::Gone) => return failed.map_or(Ok(()), Err),
                        Some(Waited::Stop { sig: s, event, .. }) => {
                            sig = if event == 0 { s } else { 0 }
                        }
                        // It runs on, seized, until this tracer thread ends.
                        None => return Err(self.no_stop(t.tid)),
                    }
                }
                source => {
                    return Err(SessionError::Ptrace {
                        op: "PTRACE_DETACH",
                        tid: t.tid,
                        source,
                    })
                }
            }
        }
        Err(SessionError::Unexpected {
            tid: t.tid,
            state: UnexpectedState::DetachKeptFailing,
        })
    }

    /// Resumes a held thread until its next stop (tests: turns a pending signal into a signal-delivery-stop).
    #[cfg(test)]
    pub(crate) fn resume_until_stop(&mut self, tid: i32) -> Result<(), SessionError> {
        let i = self.index(tid)?;
        ptrace::cont(Pid::from_raw(tid), None)
            .map_err(|e| self.ptrace_error("PTRACE_CONT", tid, e))?;
        self.threads.remove(i);
        self.pending.insert(tid);
        self.wait_attach(
            tid,
            &mut HashSet::from([tid]),
            &mut Vec::new(),
            &mut HashSet::new(),
        )
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

/// The caller's cache of syscall gadgets ([`Gadgets`](crate::ptrace::gadgets::Gadgets)).
impl Session {
    /// Uses the gadgets a caller found before (those of another process are ignored).
    pub fn set_gadgets(&mut self, gadgets: &crate::ptrace::gadgets::Gadgets) {
        if gadgets.owner() == (self.pid, self.start_time) {
            self.gadgets = gadgets.clone();
        }
    }

    /// The gadgets this session knows, including those it found: for the caller to keep.
    pub fn gadgets(&self) -> &crate::ptrace::gadgets::Gadgets {
        &self.gadgets
    }
}

/// A test program: SIGUSR1 (SA_SIGINFO) and SIGTRAP handlers that print what
/// arrived; main sleeps in clock_nanosleep, or blocks in read(stdin) with argument "read".
#[cfg(test)]
pub(crate) const SIGNALS: &str = r#"
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static void put(const char *s, long v) {
char buf[64]; int n = 0;
while (*s) buf[n++] = *s++;
if (v < 0) { buf[n++] = '-'; v = -v; }
char d[24]; int k = 0;
do { d[k++] = '0' + v % 10; v /= 10; } while (v);
while (k) buf[n++] = d[--k];
buf[n++] = '\n';
write(1, buf, n);
}
static volatile int usr1;
static void on_usr1(int sig, siginfo_t *si, void *uc) {
usr1++;
put("usr1 code=", si->si_code);
put("usr1 value=", si->si_value.sival_int);
}
static void on_trap(int sig) { write(1, "TRAP\n", 5); }
int main(int argc, char **argv) {
struct sigaction sa;
memset(&sa, 0, sizeof sa);
sa.sa_sigaction = on_usr1;
sa.sa_flags = SA_SIGINFO | SA_RESTART;
sigaction(SIGUSR1, &sa, 0);
signal(SIGTRAP, on_trap);
int reader = argc > 1 && !strcmp(argv[1], "read");
printf("ready\n");
fflush(stdout);
char line[64];
for (;;) {
    if (reader) {
        ssize_t n = read(0, line, sizeof line - 1);
        if (n <= 0) break;
        line[n] = 0;
    } else {
        struct timespec ts = {0, 5000000};
        clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, 0);
        continue;
    }
    if (!strncmp(line, "count", 5)) put("count=", usr1);
    if (!strncmp(line, "quit", 4)) break;
}
return 0;
}
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptrace::wait::{is_own_child_process, wait_tid};
    use argstash_tests::{
        sigqueue, thread_ids, thread_status, wait_all_blocked, wait_for, Target, OUTPUT_TIMEOUT,
    };
    use std::ffi::c_void;

    /// N worker threads: half sleep in clock_nanosleep loops, half spin; "ready" once each
    /// has run; "stop" joins them and reports how many sleeps failed. Main waits on stdin.
    const THREADS: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static volatile int stop;
static volatile long errors, started;
static void *sleeper(void *a) {
    int first = 1;
    while (!stop) {
        struct timespec ts = {0, 2000000};
        if (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL)) __sync_fetch_and_add(&errors, 1);
        if (first) __sync_fetch_and_add(&started, 1), first = 0;
    }
    return 0;
}
static void *spinner(void *a) {
    __sync_fetch_and_add(&started, 1);
    while (!stop) {}
    return 0;
}
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    int spinners = argc > 2 ? atoi(argv[2]) : n / 2;
    pthread_t t[512];
    for (int i = 0; i < n; i++) pthread_create(&t[i], 0, i < spinners ? spinner : sleeper, 0);
    while (started < n) usleep(1000);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "stop", 4)) break;
    }
    stop = 1;
    for (int i = 0; i < n; i++) pthread_join(t[i], 0);
    printf("errors=%ld\n", errors);
    fflush(stdout);
    return 0;
}
"#;

    fn assert_released(pid: i32) {
        for tid in thread_ids(pid) {
            let (state, tracer) = thread_status(pid, tid);
            assert_eq!(tracer, 0, "thread {tid} still traced");
            assert!(
                state == 'S' || state == 'R',
                "thread {tid} in state {state} after detach"
            );
        }
    }

    #[test]
    fn attach_all_sees_every_thread_and_output_is_unaffected() {
        let mut child = Target::spawn_source("threads", THREADS, &["8"]);
        let pid = child.pid();
        for _ in 0..20 {
            let s = Session::attach_all(pid).unwrap();
            let mut tids = s.tids();
            tids.sort_unstable();
            assert_eq!(tids, thread_ids(pid));
            assert_eq!(tids.len(), 9);
            for &tid in &tids {
                let (state, tracer) = thread_status(pid, tid);
                assert_eq!(state, 't', "thread {tid} not in tracing stop");
                // TracerPid names the tracer *thread*.
                assert_eq!(tracer, nix::unistd::gettid().as_raw());
                assert!(matches!(s.stop_state(tid), Some(ThreadStop::Interrupted)));
            }
            let held = s.detach().unwrap();
            assert!(held < Duration::from_secs(1));
            assert_released(pid);
        }
        child.write_stdin("stop\n");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "errors=0");
        assert_eq!(
            child
                .end_input_and_wait(OUTPUT_TIMEOUT)
                .and_then(|s| s.code()),
            Some(0)
        );
    }

    #[test]
    fn refusals() {
        assert!(matches!(Session::attach_all(1), Err(SessionError::Init)));
        assert!(matches!(
            Session::attach_thread(1, 1),
            Err(SessionError::Init)
        ));
        let own = std::process::id() as i32;
        assert!(matches!(
            Session::attach_all(own),
            Err(SessionError::OwnProcess { .. })
        ));
        let max: i32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let missing = (2..max).rev().find(|p| !proc_exists(*p)).unwrap();
        let e = Session::attach_all(missing).unwrap_err();
        assert!(
            matches!(e, SessionError::NoSuchProcess { pid } if pid == missing),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            format!("no process with pid {missing}: check the pid (ps -p {missing})")
        );
        assert!(matches!(
            Session::attach_all(-5),
            Err(SessionError::NoSuchProcess { .. })
        ));
        if std::fs::read_to_string("/proc/2/comm").is_ok_and(|c| c.trim() == "kthreadd") {
            let e = Session::attach_all(2).unwrap_err();
            assert!(
                matches!(e, SessionError::KernelThread { pid: 2, ref name } if name == "kthreadd"),
                "{e}"
            );
            assert!(e.to_string().contains("kernel thread: nothing to hook"));
        }
        // A thread id is not a process id.
        let child = Target::spawn_source("thr2", THREADS, &["2"]);
        let tid = *thread_ids(child.pid()).last().unwrap();
        let e = Session::attach_all(tid).unwrap_err();
        assert!(
            matches!(e, SessionError::NotAProcess { tid: t, pid } if t == tid && pid == child.pid()),
            "{e}"
        );
        let e = Session::attach_thread(child.pid(), missing).unwrap_err();
        assert!(matches!(e, SessionError::NoSuchThread { .. }), "{e}");
    }

    /// Seizes the pid or tid in argv[1] (without stopping it) and idles.
    const TRACER: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (ptrace(PTRACE_SEIZE, atoi(argv[1]), 0, 0)) { perror("seize"); return 1; }
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
}
"#;

    #[test]
    fn already_traced_names_the_tracer() {
        let mut target = Target::spawn_source("traced", THREADS, &["3"]);
        let pid = target.pid();
        // The whole process (its leader) traced: refused before touching anything.
        {
            let tracer = Target::spawn_source("trc", TRACER, &[&pid.to_string()]);
            let e = Session::attach_all(pid).unwrap_err();
            let SessionError::NotPermitted { pid: p, ref reason } = e else {
                panic!("{e}")
            };
            assert_eq!(p, pid);
            assert!(
                matches!(reason, Refusal::TracedBy { thread: None, tracer: t, .. } if *t == tracer.pid()),
                "{reason:?}"
            );
            let comm = std::fs::read_to_string(format!("/proc/{}/comm", tracer.pid())).unwrap();
            assert_eq!(
                e.to_string(),
                format!(
                    "process {pid} is already traced by PID {} ({}): detach that debugger first",
                    tracer.pid(),
                    comm.trim()
                )
            );
        }
        wait_for("the first tracer is gone", || {
            thread_status(pid, pid).1 == 0
        });
        // Only one non-leader thread traced: found while seizing; the others are let go.
        {
            let victim = *thread_ids(pid).last().unwrap();
            let tracer = Target::spawn_source("trc", TRACER, &[&victim.to_string()]);
            let e = Session::attach_all(pid).unwrap_err();
            assert!(
                e.to_string().contains(&format!(
                    "thread {victim} of process {pid} is already traced by PID {}",
                    tracer.pid()
                )),
                "{e}"
            );
            for tid in thread_ids(pid).into_iter().filter(|t| *t != victim) {
                assert_eq!(thread_status(pid, tid).1, 0);
            }
            let e = Session::attach_thread(pid, victim).unwrap_err();
            assert!(matches!(e, SessionError::NotPermitted { .. }), "{e}");
        }
        wait_for("the second tracer is gone", || {
            thread_ids(pid)
                .iter()
                .all(|t| thread_status(pid, *t).1 == 0)
        });
        Session::attach_all(pid).unwrap().detach().unwrap();
        assert_released(pid);
        target.write_stdin("stop\n");
        assert_eq!(target.expect_line(OUTPUT_TIMEOUT), "errors=0");
    }

    #[test]
    fn signal_sent_while_stopped_is_delivered_once_after_detach() {
        let child = Target::spawn_source("sig", SIGNALS, &[]);
        let pid = child.pid();
        let s = Session::attach_all(pid).unwrap();
        sigqueue(pid, libc::SIGUSR1, 42);
        // Pending in the process while it is held; nothing printed.
        assert!(child.next_line(Duration::from_millis(50)).is_none());
        s.detach().unwrap();
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "usr1 code=-1");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "usr1 value=42");
        assert!(
            child.next_line(Duration::from_millis(100)).is_none(),
            "a second delivery or a stray SIGTRAP"
        );
        assert_released(pid);
    }

    #[test]
    fn signal_delivery_stop_is_kept_and_redelivered() {
        let child = Target::spawn_source("sigd", SIGNALS, &[]);
        let pid = child.pid();
        let mut s = Session::attach_all(pid).unwrap();
        sigqueue(pid, libc::SIGUSR1, 7);
        s.resume_until_stop(pid).unwrap();
        assert_eq!(
            s.stop_state(pid),
            Some(ThreadStop::Signal {
                signal: libc::SIGUSR1
            })
        );
        // An extra interrupt left pending over the detach must not stop the thread again.
        ptrace::interrupt(Pid::from_raw(pid)).unwrap();
        s.detach().unwrap();
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "usr1 code=-1");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "usr1 value=7");
        assert!(child.next_line(Duration::from_millis(100)).is_none());
        assert_released(pid);
    }

    /// A vfork parent waits for its child in the kernel, where an interrupt does
    /// not stop it: the attach gives up after its deadline with a typed error,
    /// and once the attaching thread is gone the parent is untraced and runs on.
    #[test]
    fn a_thread_that_never_stops_fails_the_attach_after_its_deadline() {
        const VFORK_PARENT: &str = r#"
#include <stdio.h>
#include <unistd.h>
int main(void) {
    printf("ready\n");
    fflush(stdout);
    if (vfork() == 0) {
        sleep(60);
        _exit(0);
    }
    printf("child done\n");
    fflush(stdout);
    return 0;
}
"#;
        let child = Target::spawn_source("vfork_parent", VFORK_PARENT, &[]);
        let pid = child.pid();
        let start = Instant::now();
        while procfs::read_stat(pid).map_or(true, |s| s.state != 'D') {
            assert!(start.elapsed() < Duration::from_secs(10), "never in vfork");
            std::thread::sleep(Duration::from_millis(1));
        }
        let deadline = Duration::from_millis(300);
        let attached =
            std::thread::spawn(move || Session::attach_all_within(pid, deadline).map(drop))
                .join()
                .unwrap();
        match attached {
            Err(SessionError::NoStop {
                pid: p,
                tid,
                waited,
                state,
            }) => {
                assert_eq!((p, tid, waited, state), (pid, pid, deadline, 'D'));
            }
            other => panic!("expected NoStop, got {other:?}"),
        }
        assert_eq!(thread_status(pid, pid).1, 0, "left traced");
        // The vfork child's end lets the parent go on, unstopped.
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
        let vforked: i32 = children.split_whitespace().next().unwrap().parse().unwrap();
        // SAFETY: kill(2) of the test program's vfork child, found just above.
        unsafe { libc::kill(vforked, libc::SIGKILL) };
        assert_eq!(
            child.next_line(Duration::from_secs(10)).as_deref(),
            Some("child done")
        );
    }

    #[test]
    fn pending_interrupt_is_cleared_at_detach() {
        let mut child = Target::spawn_source("pend", SIGNALS, &["read"]);
        let pid = child.pid();
        wait_all_blocked(pid);
        let s = Session::attach_all(pid).unwrap();
        // A second PTRACE_INTERRUPT while already in the interrupt stop stays pending.
        ptrace::interrupt(Pid::from_raw(pid)).unwrap();
        s.detach().unwrap();
        wait_all_blocked(pid);
        assert_released(pid);
        child.write_stdin("count\n");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "count=0");
        assert!(
            child.next_line(Duration::from_millis(100)).is_none(),
            "stray SIGTRAP"
        );
        // And the next session starts from a clean state.
        let s = Session::attach_all(pid).unwrap();
        assert_eq!(s.stop_state(pid), Some(ThreadStop::Interrupted));
        s.detach().unwrap();
        child.write_stdin("quit\n");
        assert_eq!(
            child
                .end_input_and_wait(OUTPUT_TIMEOUT)
                .and_then(|s| s.code()),
            Some(0)
        );
    }

    #[test]
    fn stopped_process_stays_stopped() {
        let mut child = Target::spawn_source("stopd", THREADS, &["4", "0"]);
        let pid = child.pid();
        nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGSTOP).unwrap();
        wait_for("every thread is stopped", || {
            thread_ids(pid)
                .iter()
                .all(|t| thread_status(pid, *t).0 == 'T')
        });
        for _ in 0..3 {
            let s = Session::attach_all(pid).unwrap();
            assert_eq!(s.tids().len(), 5);
            for tid in s.tids() {
                assert_eq!(
                    s.stop_state(tid),
                    Some(ThreadStop::GroupStop {
                        signal: libc::SIGSTOP
                    })
                );
            }
            s.detach().unwrap();
            // Woken by the detach, each thread goes back into the group-stop.
            wait_for("every thread is stopped again", || {
                thread_ids(pid)
                    .iter()
                    .all(|t| thread_status(pid, *t) == ('T', 0))
            });
        }
        std::thread::sleep(Duration::from_millis(50));
        for tid in thread_ids(pid) {
            assert_eq!(
                thread_status(pid, tid),
                ('T', 0),
                "thread {tid} after a while"
            );
        }
        nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGCONT).unwrap();
        child.write_stdin("stop\n");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "errors=0");
    }

    #[test]
    fn attach_thread_stops_only_that_thread() {
        let mut child = Target::spawn_source("one", THREADS, &["4", "0"]);
        let pid = child.pid();
        let tid = thread_ids(pid)[2];
        let s = Session::attach_thread(pid, tid).unwrap();
        assert_eq!(s.tids(), vec![tid]);
        assert!(!s.holds_all_threads());
        assert_eq!(thread_status(pid, tid).0, 't');
        assert_eq!(thread_status(pid, pid).1, 0);
        let r = s.regs(tid).unwrap();
        assert_eq!(r.orig_rax, libc::SYS_clock_nanosleep as u64);
        assert!(matches!(s.regs(pid), Err(SessionError::NotStopped { .. })));
        s.detach().unwrap();
        assert_released(pid);
        child.write_stdin("stop\n");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "errors=0");
    }

    #[test]
    fn threads_can_be_asked_while_this_thread_holds_the_leader() {
        let mut child = Target::spawn_source("batch", THREADS, &["4", "0"]);
        let pid = child.pid();
        let others: Vec<i32> = thread_ids(pid).into_iter().filter(|t| *t != pid).collect();
        // The leader first, then its siblings, all asked before any stop is
        // collected: what a profiler's batch does.
        let mut asked = vec![Session::request_thread(pid, pid).unwrap()];
        for &tid in &others {
            asked.push(Session::request_thread(pid, tid).unwrap_or_else(|e| {
                panic!("thread {tid} refused while this thread holds the leader: {e}")
            }));
        }
        for s in &mut asked {
            while !s.poll_attach(false).unwrap() {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        for s in asked {
            s.detach().unwrap();
        }
        assert_released(pid);
        // Another tracer holding the process is still a refusal (a test thread
        // of ours is "another tracer" here: tracing is per thread).
        let holder = std::thread::spawn(move || {
            Session::attach_thread(pid, pid).map(|s| {
                std::thread::sleep(Duration::from_millis(200));
                s.detach()
            })
        });
        std::thread::sleep(Duration::from_millis(50));
        let refused = Session::request_thread(pid, others[0]);
        assert!(
            matches!(refused, Err(SessionError::NotPermitted { .. })),
            "{:?}",
            refused.map(|_| ())
        );
        holder.join().unwrap().unwrap().unwrap();
        assert_released(pid);
        child.write_stdin("stop\n");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "errors=0");
    }

    #[test]
    fn a_childs_exit_status_is_left_to_its_parent() {
        use std::os::unix::process::ExitStatusExt;
        let mut child = Target::spawn_source("own", THREADS, &["4", "0"]);
        let pid = child.pid();
        let worker = thread_ids(pid)[2];
        // Only the process itself is ours to collect as its parent; its other
        // threads are the tracer's to reap.
        assert!(is_own_child_process(pid));
        assert!(!is_own_child_process(worker));
        assert!(!is_own_child_process(1));
        // A traced child killed while held: the wait says it is gone and leaves
        // its exit status where its parent finds it.
        let s = Session::attach_thread(pid, pid).unwrap();
        // SAFETY: kill takes two integers; the pid is our own unreaped child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        assert!(matches!(wait_tid(pid), Ok(Waited::Gone)));
        drop(s);
        let status = child
            .end_input_and_wait(OUTPUT_TIMEOUT)
            .expect("its status, not taken by the wait");
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }

    /// Four threads that create and join short-lived threads as fast as they can.
    const CHURN: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static volatile int stop;
static volatile long made, failed;
static void *leaf(void *a) { return a; }
static void *maker(void *a) {
    while (!stop) {
        pthread_t t;
        if (pthread_create(&t, 0, leaf, (void *)1)) { __sync_fetch_and_add(&failed, 1); continue; }
        void *r = 0;
        pthread_join(t, &r);
        if (r != (void *)1) __sync_fetch_and_add(&failed, 1);
        __sync_fetch_and_add(&made, 1);
    }
    return 0;
}
int main(void) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], 0, maker, 0);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin) && strncmp(line, "stop", 4)) {}
    stop = 1;
    for (int i = 0; i < 4; i++) pthread_join(t[i], 0);
    printf("failed=%ld made>0=%d\n", failed, made > 0);
    fflush(stdout);
    return 0;
}
"#;

    #[test]
    fn thread_churn() {
        let mut child = Target::spawn_source("churn", CHURN, &[]);
        let pid = child.pid();
        let mut clones = 0;
        for _ in 0..300 {
            let mut s = Session::attach_all(pid).unwrap();
            clones += s.clone_events;
            if clones % 4 == 1 {
                let a = s
                    .remote_mmap(
                        0,
                        4096,
                        libc::PROT_READ,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    )
                    .unwrap();
                s.remote_munmap(a, 4096).unwrap();
            }
            // Everything alive in the group is held.
            for tid in thread_ids(pid) {
                let (state, _) = thread_status(pid, tid);
                assert!(
                    s.tids().contains(&tid) || state == 'Z' || state == 'X',
                    "thread {tid} ({state}) not held"
                );
            }
            s.detach().unwrap();
        }
        eprintln!("thread_churn: {clones} clone events in 300 sessions");
        child.write_stdin("stop\n");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "failed=0 made>0=1");
        assert_eq!(
            child
                .end_input_and_wait(OUTPUT_TIMEOUT)
                .and_then(|s| s.code()),
            Some(0)
        );
    }

    /// Counts queued real-time signals and sums their values; main reads stdin.
    const RTSIG: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
static volatile long count, sum;
static void on_rt(int sig, siginfo_t *si, void *uc) { count++; sum += si->si_value.sival_int; }
static void on_trap(int sig) { write(1, "TRAP\n", 5); }
int main(void) {
    /* The kernel counts queued signals per user, machine-wide, against the
       receiver's RLIMIT_SIGPENDING. A flood of this process under root's default
       limit (~96k) would use up root's whole budget, and every other signal root
       queues meanwhile would lose its siginfo (what failed the siginfo tests of
       this file 2-3 times in 30 runs). A low limit here bounds the flood. */
    struct rlimit rl = {4096, 4096};
    setrlimit(RLIMIT_SIGPENDING, &rl);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_rt;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGRTMIN, &sa, 0);
    signal(SIGTRAP, on_trap);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        printf("count=%ld sum=%ld\n", count, sum);
        fflush(stdout);
    }
    return 0;
}
"#;

    /// Real-time signals (never merged) arrive while sessions come and go, some with
    /// remote system calls: every signal is delivered exactly once, with its value.
    #[test]
    fn queued_signals_survive_many_sessions() {
        let mut child = Target::spawn_source("rtsig", RTSIG, &[]);
        let pid = child.pid();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sender = {
            let stop = stop.clone();
            std::thread::spawn(move || flood(pid, stop))
        };
        let mut held_signals = 0;
        for i in 0..300 {
            let mut s = Session::attach_all(pid).unwrap();
            if matches!(s.stop_state(pid), Some(ThreadStop::Signal { .. })) {
                held_signals += 1;
            }
            if i % 3 == 0 {
                let a = s
                    .remote_mmap(
                        0,
                        4096,
                        libc::PROT_READ,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    )
                    .unwrap();
                s.remote_munmap(a, 4096).unwrap();
            }
            s.detach().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (sent, sum) = sender.join().unwrap();
        eprintln!("queued_signals_survive_many_sessions: {sent} signals, {held_signals} sessions found the thread in a signal-delivery-stop");
        let want = format!("count={sent} sum={sum}");
        let mut last = String::new();
        for _ in 0..200 {
            child.write_stdin("?\n");
            last = child.expect_line(OUTPUT_TIMEOUT);
            if last == want {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(last, want);
        assert!(
            child.next_line(Duration::from_millis(50)).is_none(),
            "stray SIGTRAP"
        );
    }

    /// Whether the process's user has as many signals queued as its limit (`SigQ`).
    fn queue_full(pid: i32) -> bool {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("SigQ:"))
            .and_then(|q| q.trim().split_once('/'))
            .is_some_and(|(u, l)| u.parse::<u64>().ok() >= l.parse::<u64>().ok())
    }

    /// Floods `pid` with SIGRTMIN until `stop`; returns (sent, sum of values).
    fn flood(pid: i32, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> (i64, i64) {
        let (mut sent, mut sum) = (0i64, 0i64);
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let value = (sent % 1000) as i32;
            let v = libc::sigval {
                sival_ptr: value as usize as *mut c_void,
            };
            // SAFETY: sigqueue takes integers and a sigval by value.
            if unsafe { libc::sigqueue(pid, libc::SIGRTMIN(), v) } == 0 {
                sent += 1;
                sum += value as i64;
            } else {
                std::thread::yield_now();
            }
        }
        (sent, sum)
    }

    /// The conditions under which a queued signal lost its siginfo: another thread of
    /// this process traces a target flooded with real-time signals while this thread
    /// holds a second process and queues it a signal. Every signal keeps its siginfo,
    /// and every signal the flooded target's sessions took is given back exactly.
    #[test]
    fn siginfo_survives_a_flood_traced_by_another_thread() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let mut flooded = Target::spawn_source("flooded", RTSIG, &[]);
        let fpid = flooded.pid();
        let stop = Arc::new(AtomicBool::new(false));
        let full = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let sender = {
            let stop = stop.clone();
            std::thread::spawn(move || flood(fpid, stop))
        };
        let tracer = {
            let (stop, full) = (stop.clone(), full.clone());
            std::thread::spawn(move || {
                let (mut sessions, mut given_back) = (0, 0);
                while !stop.load(Ordering::Relaxed) {
                    let s = Session::attach_all(fpid).unwrap();
                    if queue_full(fpid) {
                        full.fetch_add(1, Ordering::Relaxed);
                    }
                    let released = s.detach_reporting().unwrap();
                    for o in &released.signals {
                        assert!(o.fate.is_exact(), "{o:?}");
                    }
                    given_back += released.signals.len();
                    sessions += 1;
                }
                (sessions, given_back)
            })
        };
        let child = Target::spawn_source("sigflood", SIGNALS, &[]);
        let pid = child.pid();
        // At least 30 rounds, and on until the flood has filled its queue at least once
        // (the state that took siginfo away from other signals).
        let start = std::time::Instant::now();
        let mut i = 0;
        while i < 30
            || (full.load(Ordering::Relaxed) == 0 && start.elapsed() < Duration::from_secs(20))
        {
            i += 1;
            let s = Session::attach_all(pid).unwrap();
            sigqueue(pid, libc::SIGUSR1, i);
            s.detach().unwrap();
            assert_eq!(
                child.expect_line(OUTPUT_TIMEOUT),
                "usr1 code=-1",
                "round {i}"
            );
            assert_eq!(child.expect_line(OUTPUT_TIMEOUT), format!("usr1 value={i}"));
        }
        stop.store(true, Ordering::Relaxed);
        let (sent, sum) = sender.join().unwrap();
        let (sessions, given_back) = tracer.join().unwrap();
        let full = full.load(Ordering::Relaxed);
        eprintln!(
            "siginfo_survives_a_flood: {i} rounds, {sent} flood signals, {sessions} sessions on \
             the flooded target ({full} with its queue full, {given_back} signals given back)"
        );
        assert!(sessions > 0 && full > 0, "the flood never filled its queue");
        let want = format!("count={sent} sum={sum}");
        let mut last = String::new();
        for _ in 0..400 {
            flooded.write_stdin("?\n");
            last = flooded.expect_line(OUTPUT_TIMEOUT);
            if last == want {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(last, want);
        assert_released(pid);
    }

    #[test]
    fn drop_detaches() {
        let mut child = Target::spawn_source("drop", THREADS, &["2"]);
        {
            let _s = Session::attach_all(child.pid()).unwrap();
        }
        assert_released(child.pid());
        child.write_stdin("stop\n");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "errors=0");
    }
}
