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

use reader::debuginfo::{DebugSearch, DwarfCache, ModuleDebug};
use reader::ids::{Pid, Tid};
use reader::memory::{Memory, PageCache, StackSnapshot};
use reader::process_view::{Detail, ProcessView, Refresh};
use reader::python::ProcessPython;
use reader::symbols::ProcessSymbols;
use reader::unwind::stack_range;
pub use reader::unwind::{
    Backtrace, BacktraceOptions, Capture, Frame, FrameKind, InlinedFrame, StashSlot, StashedArgs,
    StopReason, ThreadBacktrace,
};

use crate::error::Error;
use crate::memory::ProcessMemory;
use crate::ptrace::session::Session;
use crate::ptrace::session_error::SessionError;
use crate::target::{live_state, load_symbols};

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

/// Reads backtraces of one process again and again, keeping its
/// [`ProcessView`] (parsed symbols and unwind tables) between calls (for
/// long-running readers such as the daemon).
///
/// Every call refreshes the view: the hooks are re-read from the arenas in the
/// target (the source of truth), and the symbols are reloaded when the view is
/// stale (the rule is [`reader::process_view`]'s: the code mappings or the
/// process changed). 64-bit and 32-bit processes are served alike.
pub struct ProcessReader {
    pid: i32,
    view: Option<ProcessView>,
    search: DebugSearch,
    dwarf: DwarfCache,
}

impl ProcessReader {
    /// A reader for `pid`; symbols are loaded by the first backtrace. Its DWARF
    /// parses are its own (see [`Self::set_dwarf_cache`]).
    pub fn new(pid: Pid) -> ProcessReader {
        ProcessReader {
            pid: pid.as_raw(),
            view: None,
            search: DebugSearch::default(),
            dwarf: DwarfCache::new(),
        }
    }

    /// Shares DWARF parses with every other user of `cache` (a daemon's
    /// readers of many processes parse libc's once).
    pub fn set_dwarf_cache(&mut self, cache: DwarfCache) {
        if let Some(v) = self.view.as_mut() {
            v.set_dwarf_cache(cache.clone());
        }
        self.dwarf = cache;
    }

    /// Problems met while loading debug info (e.g. a debug file of another build).
    pub fn debug_warnings(&self) -> Vec<String> {
        self.view
            .as_ref()
            .map(ProcessView::debug_warnings)
            .unwrap_or_default()
    }

    /// The process this reader serves.
    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.pid)
    }

    /// Takes out the loaded debug info of modules with more than `max_bytes` of
    /// DWARF (a long-lived caller's memory bound; symbols and unwind tables stay).
    pub fn take_debug_over(&mut self, max_bytes: usize) -> Vec<ModuleDebug> {
        self.view
            .as_mut()
            .map_or_else(Vec::new, |v| v.take_debug_over(max_bytes))
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
        self.search = opts.debug_search.clone();
        let state = live_state(pid)?;
        let mem = ProcessMemory::open(pid)?;
        // A replaced view's parts live until this call ends, so the debug info
        // they parsed is shared with the new one instead of parsed again.
        let (view, _retired, fresh) = match self.view.take() {
            Some(mut v) => {
                v.set_debug_search(&self.search);
                match v.refresh(state, &mem, load_symbols(pid)) {
                    Ok(Refresh::Kept) => (v, None, false),
                    Ok(Refresh::Reloaded(retired)) => (v, Some(retired), true),
                    Err(e) => {
                        self.view = Some(v);
                        return Err(e);
                    }
                }
            }
            None => {
                let v = ProcessView::build(
                    state,
                    &mem,
                    self.search.clone(),
                    self.dwarf.clone(),
                    load_symbols(pid),
                )?;
                (v, None, true)
            }
        };
        let view = &*self.view.insert(view);
        // Fresh symbols: the largest tables the unwind will need are read on the
        // other CPU while the threads are stopped and copied.
        let likely = match fresh {
            true => likely_modules(pid, view.symbols(), view.python()),
            false => Vec::new(),
        };
        let bt = std::thread::scope(|scope| {
            if !likely.is_empty() {
                let symbols = view.symbols();
                let paths: Vec<&str> = likely.iter().map(String::as_str).collect();
                scope.spawn(move || symbols.read_tables(&paths));
            }
            read_threads(pid, &mem, view, opts, stopper)
        });
        // What this backtrace learned from DWARF serves the next process's too.
        view.save_debug_answers();
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

/// How much a backtrace's unwind of each thread tells.
fn detail(opts: &BacktraceOptions) -> Detail {
    Detail::Annotated {
        show_trampolines: opts.show_trampolines,
    }
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
    mem: &ProcessMemory,
    view: &ProcessView,
    opts: &BacktraceOptions,
    stopper: Stopper,
) -> Result<Backtrace, Error> {
    let maps = view.maps();
    // Python frames are many small reads in a few pages: one system call a page.
    let pages = PageCache::new(mem);
    let mut py = view.python().reader(&pages);
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
    let unstopped = stopper == Stopper::Attach
        && !opts.always_stop
        && view.arch() == reader::unwind::Arch::X86_64;
    for tid in tids {
        if unstopped {
            if let Some(t) = read_unstopped(pid, tid, mem, view, &pages, &mut py, opts) {
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
        let regs = reader::unwind::dwarf_registers(view.arch(), &regs);
        let thread = view.unwind_thread(&regs, &snapshot, py_read, detail(opts));
        threads.push(ThreadBacktrace {
            tid: Tid::from_raw(tid),
            name: thread_name(pid, tid),
            python: thread.python,
            frames: thread.frames,
            truncated: thread.truncated,
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
fn read_unstopped(
    pid: i32,
    tid: i32,
    mem: &ProcessMemory,
    view: &ProcessView,
    pages: &PageCache<&ProcessMemory>,
    py: &mut reader::python::StackReader<'_>,
    opts: &BacktraceOptions,
) -> Option<ThreadBacktrace> {
    let blocked = crate::unstopped::read_blocked(pid, tid, view.maps(), mem, || {
        pages.clear();
        py.read(tid)
    })?;
    let snapshot = StackSnapshot::new(blocked.start, blocked.bytes, mem);
    let regs = reader::unwind::sp_pc_registers(blocked.sp, blocked.pc);
    let (frames, truncated) = view.frames(&regs, &snapshot, detail(opts));
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

#[cfg(test)]
mod tests {
    //! The staleness rule of [`ProcessView`] against a real process: a library
    //! loaded after the first backtrace is seen, and its frames are named.

    use super::*;
    use argstash_tests::{build_source, wait_all_blocked, Target, OUTPUT_TIMEOUT, SOURCE_FLAGS};
    use std::process::Command;

    /// The library the fixture loads late; its function blocks in `read`.
    const LIB: &str = r#"
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) int argstash_view_late_wait(void) {
    char buf[16];
    puts("in lib");
    fflush(stdout);
    return (int)read(0, buf, sizeof buf);
}
"#;

    /// Waits for a line, then `dlopen`s the library named by its argument and
    /// calls into it.
    const MAIN: &str = r#"
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char buf[16];
    puts("ready");
    fflush(stdout);
    if (read(0, buf, sizeof buf) <= 0) return 2;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { printf("dlopen: %s\n", dlerror()); fflush(stdout); return 1; }
    int (*f)(void) = (int (*)(void))dlsym(h, "argstash_view_late_wait");
    return f ? f() : 3;
}
"#;

    /// Builds the late library in the temp dir.
    fn build_lib() -> std::path::PathBuf {
        let dir = std::env::temp_dir();
        let base = format!("as-view-late-{}", std::process::id());
        let src = dir.join(format!("{base}.c"));
        let lib = dir.join(format!("lib{base}.so"));
        std::fs::write(&src, LIB).unwrap();
        let out = Command::new("cc")
            .args(["-O1", "-g", "-shared", "-fPIC", "-o"])
            .arg(&lib)
            .arg(&src)
            .output()
            .expect("cc runs");
        let _ = std::fs::remove_file(&src);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        lib
    }

    /// Where `nm` says `name` lies in `lib` (value, size), independent of our ELF reader.
    fn nm_symbol(lib: &std::path::Path, name: &str) -> (u64, u64) {
        let out = Command::new("nm")
            .args(["-S", "--defined-only"])
            .arg(lib)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.split_whitespace().nth(3) == Some(name))
            .unwrap_or_else(|| panic!("nm lists no {name}:\n{text}"));
        let mut w = line.split_whitespace();
        let value = u64::from_str_radix(w.next().unwrap(), 16).unwrap();
        let size = u64::from_str_radix(w.next().unwrap(), 16).unwrap();
        (value, size)
    }

    /// The load base of `lib` in `pid`, from `/proc/PID/maps` as text.
    fn load_base(pid: i32, lib: &std::path::Path) -> u64 {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        let lib = lib.to_str().unwrap();
        let line = maps
            .lines()
            .find(|l| l.ends_with(lib) && l.split_whitespace().nth(2) == Some("00000000"))
            .unwrap_or_else(|| panic!("{lib} is not mapped:\n{maps}"));
        u64::from_str_radix(line.split('-').next().unwrap(), 16).unwrap()
    }

    fn named(bt: &Backtrace, name: &str) -> Vec<Frame> {
        bt.threads
            .iter()
            .flat_map(|t| t.frames.iter())
            .filter(|f| f.function.as_deref() == Some(name))
            .cloned()
            .collect()
    }

    #[test]
    fn a_library_loaded_after_the_first_backtrace_makes_the_view_stale_and_is_named() {
        let lib = build_lib();
        let mut child = Target::spawn_source("view-late", MAIN, &[lib.to_str().unwrap()]);
        let pid = child.pid();
        wait_all_blocked(pid);

        let mut reader = ProcessReader::new(Pid::from_raw(pid));
        let first = reader.backtrace(&BacktraceOptions::default()).unwrap();
        assert!(!named(&first, "main").is_empty(), "{first:?}");
        assert!(named(&first, "argstash_view_late_wait").is_empty());

        // The view on its own: data mappings aside, nothing has changed yet.
        let mem = ProcessMemory::open(pid).unwrap();
        let mut view = ProcessView::build(
            live_state(pid).unwrap(),
            &mem,
            DebugSearch::default(),
            DwarfCache::new(),
            load_symbols(pid),
        )
        .unwrap();
        assert!(!view.is_stale(&live_state(pid).unwrap()));

        child.write_stdin("load\n");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "in lib");
        wait_all_blocked(pid);

        // The rule notices the new library, and a refresh names its code.
        let (value, size) = nm_symbol(&lib, "argstash_view_late_wait");
        let entry = load_base(pid, &lib) + value;
        let now = live_state(pid).unwrap();
        assert!(view.is_stale(&now));
        assert!(view.symbols().lookup(entry).is_none());
        let refreshed = view.refresh(now, &mem, load_symbols(pid)).unwrap();
        assert!(refreshed.reloaded());
        let (module, symbol, offset) = view.symbols().lookup(entry).expect("named after refresh");
        assert_eq!(symbol.name, "argstash_view_late_wait");
        assert_eq!((module.path.as_str(), offset), (lib.to_str().unwrap(), 0));
        assert!(!view.is_stale(&live_state(pid).unwrap()));
        assert!(!view
            .refresh(live_state(pid).unwrap(), &mem, load_symbols(pid))
            .unwrap()
            .reloaded());

        // The reader kept from before sees the library in its next backtrace.
        let second = reader.backtrace(&BacktraceOptions::default()).unwrap();
        let frames = named(&second, "argstash_view_late_wait");
        assert_eq!(frames.len(), 1, "{second:?}");
        let f = &frames[0];
        assert_eq!(f.module.as_deref(), lib.to_str());
        assert!(
            f.pc > entry && f.pc <= entry + size,
            "{:#x} not in {entry:#x}+{size:#x}",
            f.pc
        );
        assert_eq!(f.offset, f.pc - entry);

        child.write_stdin("done\n");
        let _ = std::fs::remove_file(&lib);
    }

    /// Blocks in a function of its own, then (on a line) `exec`s the program
    /// named by its argument.
    const BEFORE_EXEC: &str = r#"
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) int argstash_view_before_exec(void) {
    char buf[16];
    return (int)read(0, buf, sizeof buf);
}
int main(int argc, char **argv) {
    puts("ready");
    fflush(stdout);
    if (argstash_view_before_exec() <= 0) return 2;
    execl(argv[1], argv[1], (char *)0);
    return 1;
}
"#;

    /// What the first program becomes.
    const AFTER_EXEC: &str = r#"
#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) int argstash_view_after_exec(void) {
    char buf[16];
    puts("execed");
    fflush(stdout);
    return (int)read(0, buf, sizeof buf);
}
int main(void) { return argstash_view_after_exec(); }
"#;

    #[test]
    fn an_exec_makes_the_view_stale_and_the_new_program_is_named() {
        let after = build_source("view-after-exec", AFTER_EXEC, SOURCE_FLAGS);
        let mut child =
            Target::spawn_source("view-before-exec", BEFORE_EXEC, &[after.to_str().unwrap()]);
        let pid = child.pid();
        wait_all_blocked(pid);
        let mut reader = ProcessReader::new(Pid::from_raw(pid));
        let first = reader.backtrace(&BacktraceOptions::default()).unwrap();
        assert_eq!(
            named(&first, "argstash_view_before_exec").len(),
            1,
            "{first:?}"
        );

        child.write_stdin("go\n");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "execed");
        wait_all_blocked(pid);
        let second = reader.backtrace(&BacktraceOptions::default()).unwrap();
        let frames = named(&second, "argstash_view_after_exec");
        assert_eq!(frames.len(), 1, "{second:?}");
        assert_eq!(frames[0].module.as_deref(), after.to_str());
        let (value, size) = nm_symbol(&after, "argstash_view_after_exec");
        let entry = load_base(pid, &after) + value;
        let pc = frames[0].pc;
        assert!(
            pc > entry && pc <= entry + size,
            "{pc:#x} not in {entry:#x}+{size:#x}"
        );
        assert!(named(&second, "argstash_view_before_exec").is_empty());
        child.write_stdin("done\n");
        let _ = std::fs::remove_file(&after);
    }
}
