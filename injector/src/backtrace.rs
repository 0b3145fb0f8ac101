//! Backtraces of a live process: stop one thread at a time for as long as it takes
//! to copy its registers and stack, resume it, then unwind the copy with the
//! [`reader::unwind`] unwinder of the process's architecture.
//!
//! A thread of an x86-64 process blocked in a system call is not stopped: its
//! stack is copied while the kernel shows it blocked ([`crate::unstopped`]), and
//! unwound from its stack and instruction pointers ([`Capture::WithoutStop`]).
//! It is stopped after all when that read cannot be exact (it woke during the
//! copy) or a frame needs a register only a stop gives; and always with
//! [`BacktraceOptions::always_stop`].

use reader::arena::discover;
use reader::debuginfo::{DebugSearch, DwarfCache, ModuleDebug};
use reader::ids::{Pid, Tid};
use reader::memory::{Memory, PageCache, StackSnapshot};
use reader::procfs::{read_maps, MapEntry};
use reader::python::ProcessPython;
use reader::symbols::ProcessSymbols;
use reader::unwind::{stack_range, Unwinder};
pub use reader::unwind::{
    Backtrace, BacktraceOptions, Capture, Frame, FrameKind, InlinedFrame, StashSlot, StashedArgs,
    StopReason, ThreadBacktrace,
};

use crate::arch::{Arch, ProcessArch};
use crate::error::Error;
use crate::memory::ProcessMemory;
use crate::ptrace::session::Session;
use crate::ptrace::session_error::SessionError;

fn thread_name(pid: i32, tid: i32) -> String {
    reader::procfs::read_task_comm(pid, tid).unwrap_or_default()
}

/// The thread ids of a process.
pub fn thread_ids(pid: i32) -> Result<Vec<i32>, Error> {
    reader::procfs::read_task_ids(pid).map_err(|source| Error::Proc {
        path: format!("/proc/{pid}/task"),
        source,
    })
}

/// The file-backed executable mappings: when they are unchanged, so are the
/// symbols and unwind tables parsed from them.
fn code_key(maps: &[MapEntry]) -> Vec<(u64, u64, u64, u64, String)> {
    maps.iter()
        .filter(|m| m.perms.exec && m.is_file())
        .map(|m| (m.start, m.end, m.offset, m.inode, m.path.clone()))
        .collect()
}

/// Start time of a process (field 22 of `/proc/PID/stat`): tells a reused pid apart.
fn start_time(pid: i32) -> Option<u64> {
    reader::procfs::read_stat(pid).ok().map(|s| s.start_time)
}

/// Reads backtraces of one process again and again, keeping its parsed symbols and
/// unwind tables between calls (for long-running readers such as the daemon).
///
/// Every call revalidates: the hooks are re-read from the arenas in the target
/// (the source of truth), and the symbols are reloaded when the code mappings or
/// the process (a reused pid) changed. 64-bit and 32-bit processes are served alike.
pub struct ProcessReader {
    pid: i32,
    started: Option<u64>,
    key: Vec<(u64, u64, u64, u64, String)>,
    unwind: Option<Unwinder>,
    search: DebugSearch,
    dwarf: DwarfCache,
    /// The interpreter, found again whenever the symbols are reloaded.
    python: ProcessPython,
}

impl ProcessReader {
    /// A reader for `pid`; symbols are loaded by the first backtrace. Its DWARF
    /// parses are its own (see [`Self::set_dwarf_cache`]).
    pub fn new(pid: Pid) -> ProcessReader {
        ProcessReader {
            pid: pid.as_raw(),
            started: None,
            key: Vec::new(),
            unwind: None,
            search: DebugSearch::default(),
            dwarf: DwarfCache::new(),
            python: ProcessPython::NotPython,
        }
    }

    /// Shares DWARF parses with every other user of `cache` (a daemon's
    /// readers of many processes parse libc's once).
    pub fn set_dwarf_cache(&mut self, cache: DwarfCache) {
        if let Some(u) = self.unwind.as_mut() {
            u.set_dwarf_cache(cache.clone());
        }
        self.dwarf = cache;
    }

    /// Problems met while loading debug info (e.g. a debug file of another build).
    pub fn debug_warnings(&self) -> Vec<String> {
        self.unwind
            .as_ref()
            .map(Unwinder::debug_warnings)
            .unwrap_or_default()
    }

    /// The process this reader serves.
    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.pid)
    }

    /// Takes out the loaded debug info of modules with more than `max_bytes` of
    /// DWARF (a long-lived caller's memory bound; symbols and unwind tables stay).
    pub fn take_debug_over(&mut self, max_bytes: usize) -> Vec<ModuleDebug> {
        self.unwind
            .as_mut()
            .map_or_else(Vec::new, |u| u.take_debug_over(max_bytes))
    }

    /// Takes a backtrace, reusing the cached symbols when they are still valid.
    ///
    /// Separate debug files are looked for where `opts.debug_search` says; a
    /// change of it applies to modules whose debug info is not loaded yet.
    pub fn backtrace(&mut self, opts: &BacktraceOptions) -> Result<Backtrace, Error> {
        crate::target::check_target(self.pid, crate::target::Access::Stop)?;
        self.read(opts, Stopper::Attach)
    }

    /// Takes a backtrace of a process whose every thread the calling thread
    /// already holds in a ptrace-stop (a supervisor such as [`crate::spawn`]'s):
    /// registers are read through that trace, nothing is attached or resumed.
    pub(crate) fn backtrace_held(&mut self, opts: &BacktraceOptions) -> Result<Backtrace, Error> {
        self.read(opts, Stopper::Held)
    }

    fn read(&mut self, opts: &BacktraceOptions, stopper: Stopper) -> Result<Backtrace, Error> {
        let pid = self.pid;
        if opts.debug_search != self.search {
            self.search = opts.debug_search.clone();
            if let Some(u) = self.unwind.as_mut() {
                u.set_debug_search(self.search.clone());
            }
        }
        let arch = Arch::of_process(pid);
        let maps = read_maps(pid).map_err(|source| Error::Proc {
            path: format!("/proc/{pid}/maps"),
            source,
        })?;
        let key = code_key(&maps);
        let started = start_time(pid);
        let mem = ProcessMemory::open(pid)?;
        // A replaced context lives until this call ends, so the debug info it
        // parsed is shared with the new one instead of parsed again.
        let (unwind, _previous, fresh) = match self.unwind.take() {
            Some(u) if key == self.key && started == self.started => (u, None, false),
            previous => {
                let symbols = ProcessSymbols::load(pid, &maps)?;
                self.python = ProcessPython::attach(&symbols, &mem);
                let mut u = Unwinder::new(arch, symbols, Vec::new());
                u.set_debug_search(self.search.clone());
                u.set_dwarf_cache(self.dwarf.clone());
                (u, previous, true)
            }
        };
        let unwind = self.unwind.insert(unwind);
        self.key = key;
        self.started = started;
        unwind.set_arenas(discover(&maps, &mem)?);
        // Fresh symbols: the largest tables the unwind will need are read on the
        // other CPU while the threads are stopped and copied.
        let likely = match fresh {
            true => likely_modules(pid, unwind.symbols(), &self.python),
            false => Vec::new(),
        };
        let python = &self.python;
        let bt = std::thread::scope(|scope| {
            if !likely.is_empty() {
                let symbols = unwind.symbols();
                let paths: Vec<&str> = likely.iter().map(String::as_str).collect();
                scope.spawn(move || symbols.read_tables(&paths));
            }
            read_threads(pid, &maps, &mem, unwind, python, opts, stopper)
        });
        // What this backtrace learned from DWARF serves the next process's too.
        unwind.save_debug_answers();
        bt
    }
}

/// The modules whose symbol tables nearly every backtrace of `pid` needs: the
/// Python interpreter's module, the executable and the C library.
fn likely_modules(pid: i32, symbols: &ProcessSymbols, python: &ProcessPython) -> Vec<String> {
    let mut paths: Vec<String> = Vec::new();
    if let Some(i) = python.interpreter() {
        paths.push(i.module().to_string());
    }
    if let Some(exe) = reader::procfs::read_exe_link(pid)
        .ok()
        .and_then(|p| p.to_str().map(str::to_string))
    {
        paths.push(exe);
    }
    let libc = symbols.modules.iter().find(|m| {
        m.soname
            .as_deref()
            .is_some_and(|s| s.starts_with("libc.so"))
    });
    paths.extend(libc.map(|m| m.path.clone()));
    paths
}

/// How [`read_threads`] gets each thread still.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stopper {
    /// Attach to each thread in turn, and let it go after the copy.
    Attach,
    /// Every thread is already held by the calling thread's ptrace.
    Held,
}

/// Takes a backtrace of every thread (or `opts.tid`) of a live process, stopping
/// each thread only while its registers and stack are copied.
pub fn backtrace(pid: Pid, opts: &BacktraceOptions) -> Result<Backtrace, Error> {
    ProcessReader::new(pid).backtrace(opts)
}

/// Stops each thread just long enough to copy its registers and stack, then unwinds the copy.
fn read_threads(
    pid: i32,
    maps: &[MapEntry],
    mem: &ProcessMemory,
    unwind: &Unwinder,
    python: &ProcessPython,
    opts: &BacktraceOptions,
    stopper: Stopper,
) -> Result<Backtrace, Error> {
    // Python frames are many small reads in a few pages: one system call a page.
    let pages = PageCache::new(mem);
    let mut py = python.reader(&pages);
    let tids = match opts.tid.map(Tid::as_raw) {
        Some(t) => {
            if !thread_ids(pid)?.contains(&t) {
                return Err(SessionError::NoSuchThread { pid, tid: t }.into());
            }
            vec![t]
        }
        None => thread_ids(pid)?,
    };
    let mut threads = Vec::new();
    let unstopped =
        stopper == Stopper::Attach && !opts.always_stop && unwind.arch() == Arch::X86_64;
    for tid in tids {
        if unstopped {
            if let Some(t) = read_unstopped(pid, tid, maps, mem, unwind, &pages, &mut py, opts) {
                threads.push(t);
                continue;
            }
        }
        let (session, regs) = match stopper {
            Stopper::Held => match nix::sys::ptrace::getregs(nix::unistd::Pid::from_raw(tid)) {
                Ok(regs) => (None, regs),
                // A thread that is not held (it exited, or was never ours) is left out.
                Err(_) if opts.tid.is_none() => continue,
                Err(source) => {
                    return Err(SessionError::Ptrace {
                        op: "PTRACE_GETREGS",
                        tid,
                        source,
                    }
                    .into())
                }
            },
            Stopper::Attach => match Session::attach_thread(pid, tid) {
                Ok(s) => {
                    let regs = s.regs(tid)?;
                    (Some(s), regs)
                }
                // The thread exited between listing and stopping it.
                Err(
                    SessionError::NoSuchProcess { .. }
                    | SessionError::Exited { .. }
                    | SessionError::NoSuchThread { .. },
                ) if opts.tid.is_none() => continue,
                Err(e) => return Err(e.into()),
            },
        };
        let (start, end) = stack_range(maps, regs.rsp);
        let mut bytes = vec![0u8; (end - start) as usize];
        let copied = mem.read(start, &mut bytes);
        // The Python frames are read in the same stop, so they match the stack
        // copy; pages cached while another thread was held may have changed.
        pages.clear();
        let py_read = py.read(tid);
        let stopped = match session {
            Some(s) => s.detach()?,
            None => std::time::Duration::ZERO,
        };
        if copied.is_err() {
            bytes.clear();
        }
        let snapshot = StackSnapshot::new(start, bytes, mem);
        let regs = reader::unwind::dwarf_registers(unwind.arch(), &regs);
        let (frames, truncated) = unwind.unwind(&regs, &snapshot, opts.show_trampolines);
        let native: Vec<_> = frames.iter().map(Frame::python_eval).collect();
        threads.push(ThreadBacktrace {
            tid: Tid::from_raw(tid),
            name: thread_name(pid, tid),
            python: py_read.assemble(&native),
            frames,
            truncated,
            stopped,
            capture: Capture::Stopped,
        });
    }
    Ok(Backtrace {
        pid: Pid::from_raw(pid),
        threads,
    })
}

/// Reads thread `tid` without stopping it, if it is blocked in a system call
/// and the read is exact: `None` when it must be stopped (it is running, woke
/// during the copy, or a frame needs a register that only a stop gives).
#[allow(clippy::too_many_arguments)]
fn read_unstopped(
    pid: i32,
    tid: i32,
    maps: &[MapEntry],
    mem: &ProcessMemory,
    unwind: &Unwinder,
    pages: &PageCache<&ProcessMemory>,
    py: &mut reader::python::stack::StackReader<'_>,
    opts: &BacktraceOptions,
) -> Option<ThreadBacktrace> {
    let blocked = crate::unstopped::read_blocked(pid, tid, maps, mem, || {
        pages.clear();
        py.read(tid)
    })?;
    let snapshot = StackSnapshot::new(blocked.start, blocked.bytes, mem);
    let regs = reader::unwind::sp_pc_registers(blocked.sp, blocked.pc);
    let (frames, truncated) = unwind.unwind(&regs, &snapshot, opts.show_trampolines);
    if matches!(truncated, Some(StopReason::RegisterUnknown { .. })) {
        return None;
    }
    let native: Vec<_> = frames.iter().map(Frame::python_eval).collect();
    Some(ThreadBacktrace {
        tid: Tid::from_raw(tid),
        name: thread_name(pid, tid),
        python: blocked.extra.assemble(&native),
        frames,
        truncated,
        stopped: std::time::Duration::ZERO,
        capture: Capture::WithoutStop {
            syscall: blocked.syscall,
        },
    })
}
