//! Unwinding a stack from a [`Memory`]: the frame model, stash frames, and one
//! algorithm over a per-architecture step.
//!
//! The unwinder reads memory only through [`Memory`] and takes registers as
//! values, so the same code serves a live process (`injector` stops a thread,
//! copies its registers and stack into a [`crate::memory::StackSnapshot`],
//! resumes it and unwinds the copy) and a core file ([`crate::core`]).
//!
//! [`Unwinder`] is the one entry, for x86-64 and i386 processes alike. The
//! algorithm (`walk`: the frame loop, stash frames, trampolines, relocated
//! prologues, the frame limit; `annotate`: source lines, DWARF and stashed
//! arguments, tail calls) is written once over `ArchUnwind`, which each
//! architecture implements in a folder of its own with the same files: `mod.rs`
//! (registers, argument values), `step.rs` (ordinary frames by CFI),
//! `trampoline.rs` (stash frames, stepping out of a trampoline). As in
//! framehop, what a step builds from the modules (CFI index) lives in the
//! unwinder and is built once, and the step's scratch space and rule cache
//! (`Cache`) are kept across backtraces.
//!
//! A frame whose return address is some hook's `after_call` address is a stash
//! frame: its base is the hooked function's CFA plus the layout's call offset, so
//! it is read deterministically (no scanning), and its arguments are attached to
//! the hooked function's frame.

mod annotate;
mod cfa;
pub use cfa::{CfaRule, ModuleCfa};
mod cfi;
mod frame;
pub mod i386;
mod walk;
pub mod x86_64;

#[cfg(test)]
mod tests;

use std::cell::RefCell;

use trampolines::arena::{Arena, HookRecord};

pub use frame::{
    Backtrace, BacktraceOptions, Capture, Frame, FrameKind, InlinedFrame, StashSlot, StashedArgs,
    StopReason, ThreadBacktrace,
};

use crate::args::{ArgValue, FrameState, FunctionInfo};
use crate::debuginfo::{DebugSearch, DwarfCache, ModuleDebug, ModulesDebug};
use crate::memory::Memory;
use crate::procfs::MapEntry;
use crate::symbols::ProcessSymbols;

/// Most frames unwound per thread.
pub const MAX_FRAMES: usize = 256;
/// Most stack bytes copied per thread while it is stopped.
pub const STACK_COPY: u64 = 256 * 1024;

/// A thread's registers by DWARF register number of its architecture (x86-64:
/// rax 0, rdx 1, rcx 2, rbx 3, rsi 4, rdi 5, rbp 6, rsp 7, r8-r15, rip 16;
/// i386: eax 0, ecx 1, edx 2, ebx 3, esp 4, ebp 5, esi 6, edi 7, eip 8).
pub type DwarfRegisters = [Option<u64>; 17];

/// The instruction set of the process being unwound (the workspace's one
/// [`trampolines::Arch`]).
pub use trampolines::Arch;

/// The registers of a thread of architecture `arch` stopped under ptrace
/// (`PTRACE_GETREGS` gives the 64-bit layout for 32-bit tracees too, with
/// `eip` in `rip` and so on), by DWARF number.
pub fn dwarf_registers(arch: Arch, r: &libc::user_regs_struct) -> DwarfRegisters {
    match arch {
        Arch::X86_64 => x86_64::dwarf_registers(r),
        Arch::I386 => i386::dwarf_registers(r),
    }
}

/// The registers of an x86-64 thread read without a stop: only its stack
/// pointer `sp` and instruction pointer `pc` (see [`Capture::WithoutStop`]).
/// The unwinder steps such frames by CFI alone until a frame restores the
/// frame pointer, and stops with [`StopReason::RegisterUnknown`] where a rule
/// needs a register it does not know.
pub fn sp_pc_registers(sp: u64, pc: u64) -> DwarfRegisters {
    let mut regs = [None; 17];
    regs[7] = Some(sp);
    regs[16] = Some(pc);
    regs
}

/// An address a frame is at: where it stopped, or where its callee returns to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CodeAddress {
    /// The instruction about to run (the innermost frame, a relocated prologue).
    Instruction(u64),
    /// A return address: the call is the instruction before it.
    Return(u64),
}

impl CodeAddress {
    /// The address whose unwind rule and symbol apply (a return address minus one).
    pub(crate) fn lookup(self) -> u64 {
        match self {
            CodeAddress::Instruction(a) => a,
            CodeAddress::Return(a) => a.wrapping_sub(1),
        }
    }
}

/// A frame stepped to its caller.
#[derive(Debug, Clone)]
pub(crate) struct Stepped<R> {
    /// The caller's registers.
    pub(crate) caller: R,
    /// The frame's canonical frame address, when the step knows it exactly.
    pub(crate) cfa: Option<u64>,
}

/// What unwinding knows of a process besides a thread's registers.
pub(crate) struct Scope {
    pub(crate) symbols: ProcessSymbols,
    pub(crate) arenas: Vec<Arena>,
    /// Debug info per module, loaded on first use.
    pub(crate) debug: ModulesDebug,
}

impl Scope {
    /// The hook whose trampoline or relocated prologue holds `pc`.
    pub(crate) fn hook_at(&self, pc: u64) -> Option<&HookRecord> {
        hook_at(&self.arenas, pc)
    }

    /// The debug info of the module containing runtime address `addr`, loaded on first use.
    pub(crate) fn debug_for(&self, addr: u64) -> Option<&ModuleDebug> {
        self.debug.for_addr(&self.symbols, addr)
    }
}

/// What one architecture contributes to the shared unwinding algorithm.
///
/// The implementing value is built once per unwinding context from the
/// process's modules (its CFI index); [`ArchUnwind::Cache`] is the scratch
/// space its steps share, kept across backtraces.
pub(crate) trait ArchUnwind: Sized {
    /// The registers carried from a frame to its caller.
    type Regs: Clone;
    /// Scratch space and rule caches of the steps.
    type Cache: Default;
    /// Whether callers' call sites give entry values (`x@entry`) to frames.
    const ENTRY_VALUES: bool;

    /// Indexes the CFI of the process's modules.
    fn new(symbols: &ProcessSymbols) -> Self;
    /// The innermost frame's registers.
    fn initial(regs: &DwarfRegisters) -> Self::Regs;
    /// The pc of the frame with these registers.
    fn pc(regs: &Self::Regs) -> u64;
    /// The stack pointer of the frame with these registers.
    fn sp(regs: &Self::Regs) -> u64;
    /// What DWARF location evaluation knows of the frame (looked up at `lookup`).
    fn frame_state(regs: &Self::Regs, lookup: u64) -> FrameState;
    /// Steps an ordinary frame (or a relocated prologue, as its original code) at
    /// `at` to its caller; `Ok(None)` when it has none.
    fn step(
        &self,
        cache: &mut Self::Cache,
        at: CodeAddress,
        regs: &Self::Regs,
        mem: &dyn Memory,
    ) -> Result<Option<Stepped<Self::Regs>>, StopReason>;
    /// Reads the stash frame of `hook`, returned to by the hooked function whose
    /// registers (after its return) are `regs`: the arguments, and the hooked
    /// function's caller.
    fn read_stash(
        hook: &HookRecord,
        regs: &Self::Regs,
        mem: &dyn Memory,
    ) -> Result<(StashedArgs, Stepped<Self::Regs>), StopReason>;
    /// Steps out of `hook`'s trampoline, where the thread stopped.
    fn step_in_trampoline(
        hook: &HookRecord,
        regs: &Self::Regs,
        mem: &dyn Memory,
    ) -> Option<Stepped<Self::Regs>>;
    /// Whether unwinding goes on to `caller` (stepped from `callee`, out of a
    /// trampoline or not); `Ok(false)` at the outermost frame.
    fn goes_on(
        scope: &Scope,
        callee: &Self::Regs,
        caller: &Self::Regs,
        first: bool,
        from_trampoline: bool,
    ) -> Result<bool, StopReason>;
    /// The stashed values of a hooked function described by `info`.
    fn stashed_values(info: &FunctionInfo, stash: &StashedArgs, mem: &dyn Memory) -> Vec<ArgValue>;
    /// The stashed values named by a user signature (`info` from it).
    fn signature_values(
        info: &FunctionInfo,
        stash: &StashedArgs,
        mem: &dyn Memory,
    ) -> Vec<ArgValue>;
}

/// One architecture's unwinder state: its CFI index and its steps' cache.
struct ArchState<A: ArchUnwind> {
    arch: A,
    cache: RefCell<A::Cache>,
}

impl<A: ArchUnwind> ArchState<A> {
    fn new(symbols: &ProcessSymbols) -> ArchState<A> {
        ArchState {
            arch: A::new(symbols),
            cache: RefCell::new(A::Cache::default()),
        }
    }

    fn walk(
        &self,
        scope: &Scope,
        regs: &DwarfRegisters,
        mem: &dyn Memory,
        show_trampolines: bool,
        annotated: bool,
    ) -> (Vec<Frame>, Option<StopReason>) {
        let mut cache = self.cache.borrow_mut();
        let walker = walk::Walker {
            arch: &self.arch,
            scope,
            mem,
        };
        let (mut frames, states, stop) =
            walker.frames(&mut cache, A::initial(regs), show_trampolines);
        if annotated {
            annotate::annotate::<A>(scope, &mut frames, &states, mem);
        }
        (frames, stop)
    }
}

/// The per-architecture half of an [`Unwinder`].
enum Archs {
    X86_64(ArchState<x86_64::X86_64>),
    I386(ArchState<i386::I386>),
}

/// The unwinding context of one process, for any architecture: modules,
/// symbols, arenas, debug info and the CFI index, built once and kept across
/// backtraces.
pub struct Unwinder {
    scope: Scope,
    arch: Archs,
}

impl Unwinder {
    /// Builds the context of an `arch` process from its symbols (with their
    /// sections) and arenas; DWARF parses are its own (see [`Self::set_dwarf_cache`]).
    pub fn new(arch: Arch, symbols: ProcessSymbols, arenas: Vec<Arena>) -> Unwinder {
        let state = match arch {
            Arch::X86_64 => Archs::X86_64(ArchState::new(&symbols)),
            Arch::I386 => Archs::I386(ArchState::new(&symbols)),
        };
        let debug = ModulesDebug::new(symbols.modules.len(), DwarfCache::new());
        Unwinder {
            scope: Scope {
                symbols,
                arenas,
                debug,
            },
            arch: state,
        }
    }

    /// The symbols of the process's modules.
    pub fn symbols(&self) -> &ProcessSymbols {
        &self.scope.symbols
    }

    /// The architecture unwound.
    pub fn arch(&self) -> Arch {
        match self.arch {
            Archs::X86_64(_) => Arch::X86_64,
            Archs::I386(_) => Arch::I386,
        }
    }

    /// Replaces the hooks' arenas (re-read from the target before each backtrace).
    pub fn set_arenas(&mut self, arenas: Vec<Arena>) {
        self.scope.arenas = arenas;
    }

    /// Sets where separate debug files are looked for (forgets debug info loaded so far).
    pub fn set_debug_search(&mut self, search: DebugSearch) {
        self.scope.debug.set_search(search);
    }

    /// Shares DWARF parses through `cache` (forgets debug info loaded so far).
    pub fn set_dwarf_cache(&mut self, cache: DwarfCache) {
        self.scope.debug.set_cache(cache);
    }

    /// The debug info of the module containing runtime address `addr`, loaded on first use.
    pub fn debug_for(&self, addr: u64) -> Option<&ModuleDebug> {
        self.scope.debug_for(addr)
    }

    /// Takes out the loaded debug info of every module holding more than
    /// `max_bytes` of DWARF (see [`ModulesDebug::take_over`]).
    pub fn take_debug_over(&mut self, max_bytes: usize) -> Vec<ModuleDebug> {
        self.scope.debug.take_over(max_bytes)
    }

    /// Saves the symbolization answers found so far for the next run
    /// ([`ModuleDebug::save_answers`]).
    pub fn save_debug_answers(&self) {
        self.scope.debug.save_answers();
    }

    /// Problems met while loading debug info so far (e.g. a debug file of another build).
    pub fn debug_warnings(&self) -> Vec<String> {
        self.scope.debug.warnings()
    }

    /// The hook records known to this context.
    pub fn hooks(&self) -> impl Iterator<Item = &HookRecord> {
        self.scope
            .arenas
            .iter()
            .flat_map(|a| a.hooks().map(|(_, r)| r))
    }

    /// Unwinds one thread from its registers (the pc, stack and frame pointers
    /// are required), reading memory from `mem`, then adds source lines and
    /// arguments; says why unwinding stopped early, if it did.
    pub fn unwind(
        &self,
        regs: &DwarfRegisters,
        mem: &dyn Memory,
        show_trampolines: bool,
    ) -> (Vec<Frame>, Option<StopReason>) {
        self.run(regs, mem, show_trampolines, true)
    }

    /// The frames of one thread named by ELF symbols only (no source lines or
    /// arguments: cheap), trampolines included, and why unwinding stopped early.
    pub fn walk(
        &self,
        regs: &DwarfRegisters,
        mem: &dyn Memory,
    ) -> (Vec<Frame>, Option<StopReason>) {
        self.run(regs, mem, true, false)
    }

    fn run(
        &self,
        regs: &DwarfRegisters,
        mem: &dyn Memory,
        show_trampolines: bool,
        annotated: bool,
    ) -> (Vec<Frame>, Option<StopReason>) {
        match &self.arch {
            Archs::X86_64(a) => a.walk(&self.scope, regs, mem, show_trampolines, annotated),
            Archs::I386(a) => a.walk(&self.scope, regs, mem, show_trampolines, annotated),
        }
    }
}

/// The user-given signature stored with the hook of the function at `entry`.
pub fn hook_signature(arenas: &[Arena], entry: u64) -> Option<&str> {
    arenas.iter().find_map(|a| {
        a.hooks()
            .find(|(_, r)| r.function == entry)
            .and_then(|(slot, _)| a.signature(slot))
    })
}

/// The hook whose trampoline or relocated prologue holds `pc`, in any of `arenas`.
pub fn hook_at(arenas: &[Arena], pc: u64) -> Option<&HookRecord> {
    arenas
        .iter()
        .flat_map(|a| a.hooks().map(|(_, r)| r))
        .find(|r| r.in_trampoline(pc) || r.in_relocated(pc))
}

/// The stack bytes to copy from a stopped thread: from its stack pointer to the end
/// of that mapping, at most [`STACK_COPY`].
pub fn stack_range(maps: &[MapEntry], rsp: u64) -> (u64, u64) {
    let end = maps
        .iter()
        .find(|m| m.contains(rsp))
        .map_or(rsp + 4096, |m| m.end);
    (rsp, end.min(rsp + STACK_COPY))
}
