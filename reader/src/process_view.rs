//! One view of a process: what a backtrace needs of it (its mappings, symbols,
//! Python interpreter, the unwinder with its caches, the hooks' arenas), built
//! once and kept while it holds, over any [`Memory`] (a live process's, a core
//! file's; each thread is unwound over its own stack snapshot).
//!
//! Live backtraces (`injector`'s `ProcessReader`, which the daemon caches), the
//! sampler and core files all hold a [`ProcessView`]; none assembles the parts
//! itself.
//!
//! # When a view is stale: the rule
//!
//! A view is built from a [`ProcessState`] (the architecture, the process's
//! start time, its mappings). It is **stale** when a newer state differs from
//! the one it was built from in any of:
//!
//! - the architecture;
//! - the start time (a pid reused by another process);
//! - the file-backed executable mappings, compared by address range, file
//!   offset, inode and path: a library loaded (`dlopen`) or unloaded, an
//!   `exec` (a new executable and loader), a file replaced on disk and mapped
//!   again.
//!
//! A stale view is rebuilt by [`ProcessView::refresh`]: symbols and unwind
//! tables are loaded again, the Python interpreter is looked for again, and
//! DWARF parses are shared with the old view through the [`DwarfCache`]. Nothing
//! else makes a view stale; in particular data mappings (heap, stacks, new
//! threads) do not. Two things are re-read on *every* refresh instead, stale or
//! not, because they change without the code changing: the mappings themselves
//! (for stack ranges) and the hooks' arenas (an install or an eject; the arenas
//! in the target are the source of truth).

use crate::arena::{discover, ArenaError};
use crate::debuginfo::{DebugSearch, DwarfCache, ModuleDebug};
use crate::memory::Memory;
use crate::procfs::MapEntry;
use crate::python::ThreadRead;
use crate::python::{ProcessPython, PythonStack};
use crate::symbols::ProcessSymbols;
use crate::unwind::{Arch, DwarfRegisters, Frame, FrameKind, StopReason, Unwinder};

/// A process at one moment, as far as the staleness rule looks at it.
#[derive(Debug, Clone)]
pub struct ProcessState {
    /// The instruction set of its executable.
    pub arch: Arch,
    /// Its start time (`/proc/PID/stat` field 22), `None` when unknown or fixed
    /// (a core file).
    pub started: Option<u64>,
    /// Its mappings.
    pub maps: Vec<MapEntry>,
}

impl ProcessState {
    /// Reads the mappings and start time of live process `pid` (an `arch` process).
    pub fn live(pid: i32, arch: Arch) -> std::io::Result<ProcessState> {
        Ok(ProcessState {
            arch,
            maps: crate::procfs::read_maps(pid)?,
            started: crate::procfs::read_stat(pid).ok().map(|s| s.start_time),
        })
    }
}

/// One file-backed executable mapping, as the rule compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CodeMapping {
    start: u64,
    end: u64,
    offset: u64,
    inode: u64,
    path: String,
}

/// What a view's symbols and unwind tables were built from (see the module's rule).
#[derive(Debug, Clone, PartialEq, Eq)]
struct BuiltFrom {
    arch: Arch,
    started: Option<u64>,
    code: Vec<CodeMapping>,
}

impl BuiltFrom {
    fn of(state: &ProcessState) -> BuiltFrom {
        BuiltFrom {
            arch: state.arch,
            started: state.started,
            code: state
                .maps
                .iter()
                .filter(|m| m.perms.exec && m.is_file())
                .map(|m| CodeMapping {
                    start: m.start,
                    end: m.end,
                    offset: m.offset,
                    inode: m.inode,
                    path: m.path.clone(),
                })
                .collect(),
        }
    }
}

/// What [`ProcessView::refresh`] did.
#[must_use = "a reloaded view's retired parts share their DWARF parses while they live"]
pub enum Refresh {
    /// The view held; only the mappings and arenas were read again.
    Kept,
    /// The view was stale and was rebuilt.
    Reloaded(Retired),
}

impl Refresh {
    /// Whether the symbols were reloaded.
    pub fn reloaded(&self) -> bool {
        matches!(self, Refresh::Reloaded(_))
    }
}

/// The parts of a view that a rebuild replaced: keep them until the next
/// backtrace is done, so that the debug info they parsed is shared with the new
/// view (through the [`DwarfCache`]) instead of parsed again.
pub struct Retired {
    _unwind: Box<Unwinder>,
}

/// How much an unwind of one thread tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Source lines, inlined functions, DWARF-typed arguments; trampoline
    /// frames shown when `show_trampolines`.
    Annotated {
        /// Keep the hooks' trampoline frames.
        show_trampolines: bool,
    },
    /// ELF symbol names only (cheap, a profiler's), trampoline frames left out.
    Names,
}

/// One thread unwound by [`ProcessView::unwind_thread`].
#[derive(Debug, Clone)]
pub struct UnwoundThread {
    /// Native frames, innermost first.
    pub frames: Vec<Frame>,
    /// Why unwinding stopped before the outermost frame, if it did.
    pub truncated: Option<StopReason>,
    /// The thread's Python frames placed among `frames`, when it runs CPython code.
    pub python: Option<PythonStack>,
}

/// What a backtrace needs of one process, kept across backtraces while the
/// staleness rule (see the module) says it holds.
pub struct ProcessView {
    built_from: BuiltFrom,
    maps: Vec<MapEntry>,
    unwind: Unwinder,
    python: ProcessPython,
    search: DebugSearch,
    dwarf: DwarfCache,
}

impl ProcessView {
    /// Builds the view of a process in `state`: symbols from `load` (given the
    /// mappings), the Python interpreter and the arenas read from `mem`; separate
    /// debug files looked for where `search` says, DWARF parses shared through `dwarf`.
    pub fn build<E: From<ArenaError>>(
        state: ProcessState,
        mem: &dyn Memory,
        search: DebugSearch,
        dwarf: DwarfCache,
        load: impl FnOnce(&[MapEntry]) -> Result<ProcessSymbols, E>,
    ) -> Result<ProcessView, E> {
        let symbols = load(&state.maps)?;
        let (unwind, python) = assemble(state.arch, symbols, mem, &search, &dwarf);
        let mut view = ProcessView {
            built_from: BuiltFrom::of(&state),
            maps: Vec::new(),
            unwind,
            python,
            search,
            dwarf,
        };
        view.read_arenas(state.maps, mem)?;
        Ok(view)
    }

    /// Whether a view built from `state` would differ from this one: the rule of
    /// the module's documentation.
    pub fn is_stale(&self, state: &ProcessState) -> bool {
        BuiltFrom::of(state) != self.built_from
    }

    /// Brings the view up to `state`: rebuilt (symbols from `load`) when stale;
    /// the mappings and the arenas (read from `mem`) taken anew in any case.
    pub fn refresh<E: From<ArenaError>>(
        &mut self,
        state: ProcessState,
        mem: &dyn Memory,
        load: impl FnOnce(&[MapEntry]) -> Result<ProcessSymbols, E>,
    ) -> Result<Refresh, E> {
        let now = BuiltFrom::of(&state);
        let done = if now != self.built_from {
            // What the retired parts learned is saved before they go.
            self.unwind.save_debug_answers();
            let symbols = load(&state.maps)?;
            let (unwind, python) = assemble(state.arch, symbols, mem, &self.search, &self.dwarf);
            self.python = python;
            self.built_from = now;
            Refresh::Reloaded(Retired {
                _unwind: Box::new(std::mem::replace(&mut self.unwind, unwind)),
            })
        } else {
            Refresh::Kept
        };
        self.read_arenas(state.maps, mem)?;
        Ok(done)
    }

    fn read_arenas(&mut self, maps: Vec<MapEntry>, mem: &dyn Memory) -> Result<(), ArenaError> {
        self.maps = maps;
        self.unwind.set_arenas(discover(&self.maps, mem)?);
        Ok(())
    }

    /// Sets where separate debug files are looked for; a change applies to
    /// modules whose debug info is not loaded yet (loaded debug info is forgotten).
    pub fn set_debug_search(&mut self, search: &DebugSearch) {
        if *search != self.search {
            self.search = search.clone();
            self.unwind.set_debug_search(search.clone());
        }
    }

    /// Shares DWARF parses with every other user of `cache` (a daemon's views
    /// of many processes parse libc's once).
    pub fn set_dwarf_cache(&mut self, cache: DwarfCache) {
        self.unwind.set_dwarf_cache(cache.clone());
        self.dwarf = cache;
    }

    /// The architecture of the process.
    pub fn arch(&self) -> Arch {
        self.unwind.arch()
    }

    /// The mappings read last.
    pub fn maps(&self) -> &[MapEntry] {
        &self.maps
    }

    /// The symbols of the process's modules.
    pub fn symbols(&self) -> &ProcessSymbols {
        self.unwind.symbols()
    }

    /// The CPython interpreter of the process, if it runs one.
    pub fn python(&self) -> &ProcessPython {
        &self.python
    }

    /// The unwinder (symbols, CFI index, arenas, debug info).
    pub fn unwinder(&self) -> &Unwinder {
        &self.unwind
    }

    /// Problems met while loading debug info (e.g. a debug file of another build).
    pub fn debug_warnings(&self) -> Vec<String> {
        self.unwind.debug_warnings()
    }

    /// Takes out the loaded debug info of modules with more than `max_bytes` of
    /// DWARF (a long-lived caller's memory bound; symbols and unwind tables stay).
    pub fn take_debug_over(&mut self, max_bytes: usize) -> Vec<ModuleDebug> {
        self.unwind.take_debug_over(max_bytes)
    }

    /// Saves what was learned from DWARF for the next run (see
    /// [`Unwinder::save_debug_answers`]).
    pub fn save_debug_answers(&self) {
        self.unwind.save_debug_answers();
    }

    /// The native frames of one thread from its registers `regs`, reading its
    /// stack from `mem`, and why unwinding stopped early, if it did.
    pub fn frames(
        &self,
        regs: &DwarfRegisters,
        mem: &dyn Memory,
        detail: Detail,
    ) -> (Vec<Frame>, Option<StopReason>) {
        match detail {
            Detail::Annotated { show_trampolines } => {
                self.unwind.unwind(regs, mem, show_trampolines)
            }
            Detail::Names => {
                let (mut f, t) = self.unwind.walk(regs, mem);
                f.retain(|f| f.kind != FrameKind::Trampoline);
                (f, t)
            }
        }
    }

    /// One thread unwound ([`Self::frames`]), its Python frames (`python`, read
    /// while its stack was copied) placed among the native ones.
    pub fn unwind_thread(
        &self,
        regs: &DwarfRegisters,
        mem: &dyn Memory,
        python: ThreadRead,
        detail: Detail,
    ) -> UnwoundThread {
        let (frames, truncated) = self.frames(regs, mem, detail);
        let native: Vec<_> = frames.iter().map(Frame::python_eval).collect();
        UnwoundThread {
            python: python.assemble(&native),
            frames,
            truncated,
        }
    }
}

/// The unwinder and Python locator of a process with `symbols`.
fn assemble(
    arch: Arch,
    symbols: ProcessSymbols,
    mem: &dyn Memory,
    search: &DebugSearch,
    dwarf: &DwarfCache,
) -> (Unwinder, ProcessPython) {
    let python = ProcessPython::attach(&symbols, mem);
    let mut unwind = Unwinder::new(arch, symbols, Vec::new());
    unwind.set_debug_search(search.clone());
    unwind.set_dwarf_cache(dwarf.clone());
    (unwind, python)
}
