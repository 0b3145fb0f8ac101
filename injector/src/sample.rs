//! Sampling a live process's stacks again and again (a profiler's loop): one warm
//! unwinding context for the whole run; each thread held only for as long as it
//! takes to copy its registers, its stack and (for CPython) its Python frame
//! chain. Unwinding happens after the thread runs again. The threads of a round
//! are asked to stop together ([`Round::sample_many`]), so that their waits for
//! a CPU overlap, and each is let go as soon as it is copied.
//!
//! A thread blocked in a system call (x86-64) is read without a stop, as
//! `bt` reads it (`crate::unstopped`): its call is not interrupted.
//!
//! The cost of one sample does not grow with the number of threads: a sample
//! seizes, copies and releases its own thread and looks at no other. Listing the
//! threads ([`Sampler::threads`]) and refreshing the mappings
//! ([`Sampler::refresh`]) are the caller's, once per round.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use reader::debuginfo::{DebugSearch, DwarfCache};
use reader::ids::{Pid, Tid};
use reader::memory::{Memory, PageCache, StackSnapshot};
use reader::process_view::{Detail, ProcessView};
use reader::procfs::MapEntry;
use reader::python::PythonStack;
use reader::python::{StackReader, ThreadRead};
use reader::unwind::{stack_range, Capture, DwarfRegisters, Frame, StopReason};

use crate::error::Error;
use crate::memory::ProcessMemory;
use crate::ptrace::session::Session;
use crate::ptrace::session_error::SessionError;
use crate::ptrace::wait::process_ended;
use crate::target::{live_state, load_symbols};

/// How a [`Sampler`] unwinds.
#[derive(Debug, Clone, Default)]
pub struct SampleOptions {
    /// Add what DWARF says to each frame (named, typed arguments of hooked
    /// frames, inlined functions, source lines). Costs argstash CPU after the
    /// thread runs again, never stop time.
    pub annotate: bool,
    /// Where separate debug files are looked for.
    pub debug_search: DebugSearch,
    /// Where DWARF parses are shared and kept (memory only by default;
    /// [`DwarfCache::from_env`] adds the user's on-disk cache).
    pub dwarf_cache: DwarfCache,
}

/// One thread's stack at one instant.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The thread.
    pub tid: Tid,
    /// Native frames, innermost first (no trampoline frames).
    pub frames: Vec<Frame>,
    /// The thread's Python frames placed among `frames`, when it runs CPython code.
    pub python: Option<PythonStack>,
    /// Why unwinding stopped before the outermost frame, if it did.
    pub truncated: Option<StopReason>,
    /// How long the thread was held: from the moment argstash saw it stopped
    /// until it was released (the copy of registers, stack and Python frames).
    pub stopped: Duration,
    /// How long the thread took to stop after it was asked to (it runs on
    /// meanwhile: the kernel stops it at its next return to user space).
    pub latency: Duration,
    /// Bytes of stack copied.
    pub stack_bytes: usize,
    /// The thread stopped on its way out of a system call (`orig_rax` holds a
    /// system call number): it was in the kernel, or preempted at the return
    /// (off the CPU), when asked to stop. See `docs/BENCHMARKS.md` on why an
    /// on-CPU profile leaves these out.
    pub at_syscall: bool,
    /// Whether the thread stayed on its CPU from the moment it was asked to stop
    /// (or from the start of the round, see [`Round::since_round_start`]) until
    /// it stopped, so that it stopped where it was running. `Some(false)`: it
    /// was waiting for a CPU at some point, and stopped where the scheduler had
    /// taken it off or had just put it back, places that are not a fair pick of
    /// where its CPU time goes (with lazy preemption, mostly just after a system
    /// call). `None` when the kernel keeps no scheduler statistics.
    pub on_cpu: Option<bool>,
    /// How the thread was read: stopped, or (blocked in a system call, x86-64)
    /// without a stop, its call undisturbed (see [`crate::Capture`]).
    pub capture: Capture,
    /// When the Python frames in [`Self::python`] were read, and so how far
    /// their pairing with the native frames can be trusted.
    pub python_read: PythonRead,
}

/// When a sample's Python frames were read. CPython keeps its frames in heap
/// memory, not on the native stack, so a sampler that does not stop the
/// thread reads them after the sample was taken, while the thread runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PythonRead {
    /// Read while the thread was stopped, with its registers and stack (the
    /// ptrace sampler), or blocked in a system call: exact.
    #[default]
    Stopped,
    /// Read right after the kernel's sample while the thread ran on, and
    /// consistent with the sample's copied stack (see
    /// [`crate::KernelSampler`]): the same evaluator calls, every Python frame
    /// placed, the innermost Python frame's address held in the sample.
    AfterSample,
    /// Read after the kernel's sample but inconsistent with it (the thread had
    /// moved on): the sample's Python frames were left out, its native frames kept.
    MovedOn,
}

impl PythonRead {
    /// A short, stable name (`exact`, `after-sample`, `moved-on`).
    pub fn name(self) -> &'static str {
        match self {
            PythonRead::Stopped => "exact",
            PythonRead::AfterSample => "after-sample",
            PythonRead::MovedOn => "moved-on",
        }
    }
}

/// Why a sample was not taken.
#[derive(Debug, thiserror::Error)]
pub enum Lost {
    /// The thread exited between listing and stopping it.
    #[error("the thread exited before it could be stopped")]
    ThreadGone,
    /// The whole process is gone.
    #[error("the process exited")]
    ProcessGone,
    /// The thread left its CPU since the round began (see
    /// [`Round::since_round_start`]): not stopped, as its sample would not be a
    /// fair pick of where its CPU time goes.
    #[error("the thread was put back on a CPU since the round began")]
    Rescheduled,
    /// Stopping or reading the thread failed (another tracer, a ptrace error).
    #[error("{0}")]
    Failed(Error),
}

impl Lost {
    /// A short, stable name of the reason (for counting lost samples by reason).
    pub fn reason(&self) -> &'static str {
        match self {
            Lost::ThreadGone => "thread exited",
            Lost::ProcessGone => "process exited",
            Lost::Rescheduled => "rescheduled",
            Lost::Failed(Error::Session(SessionError::NotPermitted { .. })) => "not permitted",
            Lost::Failed(Error::Session(_)) => "ptrace failed",
            Lost::Failed(_) => "read failed",
        }
    }
}

/// Takes samples of one process's threads with one warm unwinding context.
pub struct Sampler {
    pid: i32,
    /// Symbols, unwinder, Python interpreter and arenas, refreshed by [`Self::refresh`].
    view: ProcessView,
    mem: ProcessMemory,
    /// The memory the Python frames are read through: one system call a page,
    /// cleared for each thread (its own handle, so nothing else reads stale pages).
    py_mem: PageCache<ProcessMemory>,
    opts: SampleOptions,
}

impl Sampler {
    /// Checks the target and loads its symbols, unwind tables and hooks (the slow
    /// part, done once; the target keeps running meanwhile).
    pub fn new(pid: Pid, opts: SampleOptions) -> Result<Sampler, Error> {
        let pid = pid.as_raw();
        crate::target::check_target(pid, crate::target::Access::Stop)?;
        let state = live_state(pid)?;
        let mem = ProcessMemory::open(pid)?;
        let view = ProcessView::build(
            state,
            &mem,
            opts.debug_search.clone(),
            opts.dwarf_cache.clone(),
            load_symbols(pid),
        )?;
        Ok(Sampler {
            pid,
            view,
            mem,
            py_mem: PageCache::new(ProcessMemory::open(pid)?),
            opts,
        })
    }

    /// The process sampled.
    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.pid)
    }

    /// Re-reads the mappings (a library loaded or unloaded since: symbols are
    /// reloaded, DWARF parses kept) and the hooks' arenas (after an install or
    /// an eject). Returns whether the symbols were reloaded.
    pub fn refresh(&mut self) -> Result<bool, Error> {
        let state = live_state(self.pid)?;
        let done = self
            .view
            .refresh(state, &self.mem, load_symbols(self.pid))?;
        Ok(done.reloaded())
    }

    /// The process's threads now (one read of `/proc/PID/task`).
    pub fn threads(&self) -> Result<Vec<Tid>, Lost> {
        match reader::procfs::read_task_ids(self.pid) {
            Ok(t) if !t.is_empty() => Ok(t.into_iter().map(Tid::from_raw).collect()),
            _ if process_ended(self.pid) => Err(Lost::ProcessGone),
            Ok(_) => Err(Lost::ProcessGone),
            Err(source) => Err(Lost::Failed(Error::Proc {
                path: format!("/proc/{}/task", self.pid),
                source,
            })),
        }
    }

    /// The mappings read last ([`Self::refresh`]).
    pub(crate) fn maps(&self) -> &[MapEntry] {
        self.view.maps()
    }

    /// The live process's memory (code, the hooks' arenas).
    pub(crate) fn memory(&self) -> &ProcessMemory {
        &self.mem
    }

    /// Unwinds registers `regs` over `mem` as a sample is (trampoline frames
    /// left out; annotated with DWARF when `annotate`).
    pub(crate) fn unwind_with(
        &self,
        regs: &DwarfRegisters,
        mem: &dyn Memory,
        annotate: bool,
    ) -> (Vec<Frame>, Option<StopReason>) {
        self.view.frames(regs, mem, detail(annotate))
    }

    /// Problems met while loading debug info (e.g. a debug file of another build).
    pub fn debug_warnings(&self) -> Vec<String> {
        self.view.debug_warnings()
    }

    /// Saves what symbolization learned into the on-disk cache of
    /// [`SampleOptions::dwarf_cache`], if it has one, for the next run.
    pub fn save_debug_answers(&self) {
        self.view.save_debug_answers();
    }

    /// The function at `lookup` (a frame's lookup address) by its module's
    /// debug info, MiniDebugInfo symbols else DWARF: how `bt` names a frame the
    /// symbol tables do not cover (libc's internals, with libc6-dbg).
    pub fn debug_name(&self, lookup: u64) -> Option<String> {
        let d = self.view.unwinder().debug_for(lookup)?;
        if let Some((s, _)) = d.mini_symbol(lookup) {
            return Some(reader::debuginfo::demangle(&s.name));
        }
        d.frames(lookup).last()?.function.clone()
    }

    /// Whether the process runs a CPython whose frames can be read.
    pub fn is_python(&self) -> bool {
        self.view.python().interpreter().is_some()
    }

    /// Whether thread `tid` is off the CPU (asleep, waiting, stopped): an
    /// on-CPU profile skips it without stopping it (one read of its `stat`).
    pub fn is_idle(&self, tid: Tid) -> bool {
        reader::procfs::read_stat(tid.as_raw()).is_ok_and(|st| st.state != 'R')
    }

    /// The CPU thread `tid` runs on or is queued on now (one read of its `stat`).
    pub fn cpu_of(&self, tid: Tid) -> Option<u32> {
        reader::procfs::read_stat(tid.as_raw()).ok()?.cpu
    }

    /// The Python frame chain of each thread of `tids` as it is now (the
    /// threads run on meanwhile), `None` for a process without CPython.
    pub(crate) fn read_python_now(&self, tids: &[Tid]) -> Option<Vec<ThreadRead>> {
        if !self.is_python() {
            return None;
        }
        let mut reader = self.view.python().reader(&self.py_mem);
        Some(
            tids.iter()
                .map(|t| {
                    self.py_mem.clear();
                    reader.read(t.as_raw())
                })
                .collect(),
        )
    }

    /// The view the samples are unwound with.
    pub(crate) fn view(&self) -> &ProcessView {
        &self.view
    }

    /// Starts a round of samples: Python code objects decoded during the round
    /// are decoded once.
    pub fn round(&self) -> Round<'_> {
        Round {
            sampler: self,
            python: self.view.python().reader(&self.py_mem),
            slices: HashMap::new(),
        }
    }
}

/// A round of samples over the threads (see [`Sampler::round`]).
pub struct Round<'a> {
    sampler: &'a Sampler,
    python: StackReader<'a>,
    /// How many times each thread had been put on a CPU when the round began.
    slices: HashMap<Tid, u64>,
}

impl Round<'_> {
    /// For an on-CPU profile of several threads: a thread counts as on its CPU
    /// only if it has not been put on a CPU again since this call (one read of
    /// each thread's `schedstat`). Taking a sample lets the thread's CPU go to
    /// another thread, which resumes where it was preempted (with lazy
    /// preemption, mostly just after a system call); sampling that one right
    /// after would pick places near its resumption point. A thread already
    /// rescheduled when its turn comes is not stopped at all
    /// ([`Lost::Rescheduled`]).
    pub fn since_round_start(&mut self, tids: &[Tid]) {
        for &tid in tids {
            if let Some(st) = reader::procfs::read_schedstat(tid.as_raw()) {
                self.slices.insert(tid, st.slices);
            }
        }
    }

    /// Stops thread `tid`, copies its registers, stack and Python frame chain,
    /// lets it run again, then unwinds the copy.
    pub fn sample(&mut self, tid: Tid) -> Result<Sample, Lost> {
        let annotate = self.sampler.opts.annotate;
        self.take(tid, annotate, true)
    }

    /// [`Self::sample`], annotated with DWARF or not whatever the sampler's
    /// options say, and taken even if the thread was rescheduled since the round
    /// began (a caller that learns parameter names once per hooked function
    /// annotates a second sample of a thread it has just sampled).
    pub fn sample_with(&mut self, tid: Tid, annotate: bool) -> Result<Sample, Lost> {
        self.take(tid, annotate, false)
    }

    /// Samples several threads at once (`tids`, of this round): each is asked
    /// to stop, all before any is waited for, and each is copied and let go as
    /// soon as it has stopped. A thread that was running stops at once; one
    /// that waited for a CPU stops when it gets one, which the others' stops
    /// make quick, instead of one wait after another. With
    /// [`Self::since_round_start`], a thread put on a CPU again since the round
    /// began is let go right after its stop, uncopied ([`Lost::Rescheduled`]).
    /// The results come in the order of the stops.
    pub fn sample_many(&mut self, tids: &[Tid]) -> Vec<(Tid, Result<Sample, Lost>)> {
        let annotate = self.sampler.opts.annotate;
        self.many(tids, annotate, true)
    }

    fn many(
        &mut self,
        tids: &[Tid],
        annotate: bool,
        since_start: bool,
    ) -> Vec<(Tid, Result<Sample, Lost>)> {
        let mut done: Vec<(Tid, Result<Copied, Lost>)> = Vec::with_capacity(tids.len());
        let mut waiting = Vec::with_capacity(tids.len());
        let mut unstopped = Vec::new();
        for &tid in tids {
            if let Some(sample) = self.without_stop(tid, annotate) {
                unstopped.push((tid, Ok(sample)));
                continue;
            }
            match self.request(tid, since_start) {
                Ok(asked) => waiting.push(asked),
                Err(lost) => done.push((tid, Err(lost))),
            }
            // The threads asked first have often stopped by now: held no longer
            // than needed, while the rest are asked.
            self.poll_pass(&mut waiting, &mut done, false);
        }
        let mut next_dead_check = Instant::now() + Duration::from_millis(2);
        let mut nap = Duration::from_micros(5);
        while !waiting.is_empty() {
            let check_dead = Instant::now() >= next_dead_check;
            if check_dead {
                next_dead_check = Instant::now() + Duration::from_millis(2);
            }
            if self.poll_pass(&mut waiting, &mut done, check_dead) {
                nap = Duration::from_micros(5);
            } else {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_micros(500));
            }
        }
        unstopped.extend(
            done.into_iter()
                .map(|(tid, copied)| (tid, copied.map(|c| self.unwind(c, annotate).0))),
        );
        unstopped
    }

    /// Samples thread `tid` without stopping it, if it is blocked in a system
    /// call and the read is exact (see `crate::unstopped`); `None` when it must
    /// be stopped.
    fn without_stop(&mut self, tid: Tid, annotate: bool) -> Option<Sample> {
        let s = self.sampler;
        if s.view.arch() != reader::unwind::Arch::X86_64 {
            return None;
        }
        let raw = tid.as_raw();
        let python = &mut self.python;
        let py_mem = &s.py_mem;
        let blocked = crate::unstopped::read_blocked(s.pid, raw, s.view.maps(), &s.mem, || {
            py_mem.clear();
            python.read(raw)
        })?;
        let copied = Copied {
            tid,
            regs: reader::unwind::sp_pc_registers(blocked.sp, blocked.pc),
            start: blocked.start,
            bytes: blocked.bytes,
            python: blocked.extra,
            stopped: Duration::ZERO,
            latency: Duration::ZERO,
            at_syscall: true,
            on_cpu: Some(false),
            capture: Capture::WithoutStop {
                syscall: blocked.syscall,
            },
        };
        match self.unwind(copied, annotate) {
            (_, true) => None,
            (sample, false) => Some(sample),
        }
    }

    /// One look at every thread in `waiting`: those that stopped are copied,
    /// let go and moved to `done`. Returns whether any was.
    fn poll_pass(
        &mut self,
        waiting: &mut Vec<Asked>,
        done: &mut Vec<(Tid, Result<Copied, Lost>)>,
        check_dead: bool,
    ) -> bool {
        let pid = self.sampler.pid;
        let mut progressed = false;
        let mut k = 0;
        while k < waiting.len() {
            match waiting[k].session.poll_attach(check_dead) {
                Ok(false) => k += 1,
                Ok(true) => {
                    let asked = waiting.swap_remove(k);
                    let tid = asked.tid;
                    done.push((tid, self.copy(asked)));
                    progressed = true;
                }
                Err(e) => {
                    let asked = waiting.swap_remove(k);
                    done.push((asked.tid, Err(lost(pid, e))));
                    progressed = true;
                }
            }
        }
        progressed
    }

    fn take(&mut self, tid: Tid, annotate: bool, since_start: bool) -> Result<Sample, Lost> {
        match self.many(&[tid], annotate, since_start).pop() {
            Some((_, result)) => result,
            None => Err(Lost::ThreadGone),
        }
    }

    /// Asks thread `tid` to stop (see [`Self::sample_many`]); a thread already
    /// rescheduled since the round began is not asked, when `since_start`.
    fn request(&mut self, tid: Tid, since_start: bool) -> Result<Asked, Lost> {
        let pid = self.sampler.pid;
        let raw = tid.as_raw();
        let asked = Instant::now();
        let now = reader::procfs::read_schedstat(raw).map(|st| st.slices);
        let marked = since_start
            .then(|| self.slices.get(&tid).copied())
            .flatten();
        let before = marked.or(now);
        if before.is_some() && now.is_some() && before != now {
            return Err(Lost::Rescheduled);
        }
        match Session::request_thread(pid, raw) {
            Ok(session) => Ok(Asked {
                tid,
                session,
                asked,
                before,
                only_fair: marked.is_some(),
            }),
            Err(e) => Err(lost(pid, e)),
        }
    }

    /// Copies a stopped thread's registers, stack and Python frames and lets it
    /// go; the copy is unwound later ([`Self::unwind`]), when no thread of the
    /// batch is held any more.
    fn copy(&mut self, asked: Asked) -> Result<Copied, Lost> {
        let s = self.sampler;
        let (pid, raw) = (s.pid, asked.tid.as_raw());
        let Asked {
            tid,
            mut session,
            asked,
            before,
            only_fair,
        } = asked;
        session.set_quick_release();
        let held = Instant::now();
        let latency = held - asked;
        let regs = match session.regs(raw) {
            Ok(r) => r,
            Err(e) => {
                let _ = session.detach();
                return Err(lost(pid, e));
            }
        };
        // A system call number (small, non-negative) in orig_rax/orig_eax; -1 or an
        // interrupt's negated vector otherwise. Read as 32 bits for i386 tracees.
        let at_syscall = (regs.orig_rax as i32) >= 0;
        // Put on a CPU again between the two reads: it was off its CPU when asked.
        let on_cpu = match (before, reader::procfs::read_schedstat(raw)) {
            (Some(b), Some(a)) => Some(a.slices == b),
            _ => None,
        };
        if only_fair && on_cpu == Some(false) {
            let _ = session.detach();
            return Err(Lost::Rescheduled);
        }
        let (start, end) = stack_range(s.view.maps(), regs.rsp);
        let mut bytes = vec![0u8; end.saturating_sub(start) as usize];
        let copied = s.mem.read(start, &mut bytes);
        s.py_mem.clear();
        let py_read = self.python.read(raw);
        if let Err(e) = session.detach() {
            return Err(lost(pid, e));
        }
        let stopped = held.elapsed();
        if copied.is_err() {
            bytes.clear();
        }
        Ok(Copied {
            tid,
            regs: reader::unwind::dwarf_registers(s.view.arch(), &regs),
            start,
            bytes,
            python: py_read,
            stopped,
            latency,
            at_syscall,
            on_cpu,
            capture: Capture::Stopped,
        })
    }

    /// Unwinds a copy taken by [`Self::copy`] or [`Self::without_stop`]; true
    /// when a frame needed a register the copy does not have.
    fn unwind(&self, copied: Copied, annotate: bool) -> (Sample, bool) {
        let s = self.sampler;
        let stack_bytes = copied.bytes.len();
        let snapshot = StackSnapshot::new(copied.start, copied.bytes, &s.mem);
        let thread = s
            .view
            .unwind_thread(&copied.regs, &snapshot, copied.python, detail(annotate));
        let needs_stop = matches!(thread.truncated, Some(StopReason::RegisterUnknown { .. }));
        let sample = Sample {
            tid: copied.tid,
            python: thread.python,
            frames: thread.frames,
            truncated: thread.truncated,
            stopped: copied.stopped,
            latency: copied.latency,
            stack_bytes,
            at_syscall: copied.at_syscall,
            on_cpu: copied.on_cpu,
            capture: copied.capture,
            python_read: PythonRead::Stopped,
        };
        (sample, needs_stop)
    }
}

/// How much a sample's unwind tells: DWARF annotations (no trampoline frames)
/// or symbol names only.
pub(crate) fn detail(annotate: bool) -> Detail {
    match annotate {
        true => Detail::Annotated {
            show_trampolines: false,
        },
        false => Detail::Names,
    }
}

/// A stopped thread's copy, taken while it was held.
struct Copied {
    tid: Tid,
    /// Its registers by DWARF number (only sp and pc when read without a stop).
    regs: DwarfRegisters,
    /// Where the stack copy starts.
    start: u64,
    bytes: Vec<u8>,
    python: ThreadRead,
    stopped: Duration,
    latency: Duration,
    at_syscall: bool,
    on_cpu: Option<bool>,
    capture: Capture,
}

/// A thread asked to stop and not yet copied.
struct Asked {
    tid: Tid,
    session: Session,
    asked: Instant,
    /// Its `schedstat` slices when the round began (or when asked).
    before: Option<u64>,
    /// Only a fair sample is wanted (see [`Round::since_round_start`]).
    only_fair: bool,
}

/// Sorts a failure to stop or read a thread into a reason.
fn lost(pid: i32, e: SessionError) -> Lost {
    match e {
        SessionError::NoSuchThread { .. } if !process_ended(pid) => Lost::ThreadGone,
        SessionError::NoSuchThread { .. }
        | SessionError::NoSuchProcess { .. }
        | SessionError::Exited { .. } => Lost::ProcessGone,
        e if process_ended(pid) => {
            drop(e);
            Lost::ProcessGone
        }
        e => Lost::Failed(e.into()),
    }
}
