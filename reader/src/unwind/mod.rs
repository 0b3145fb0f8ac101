//! Unwinding a stack from a [`Memory`]: the frame model, stash frames, and one
//! unwinder per architecture.
//!
//! The unwinders read memory only through [`Memory`] and take registers as values,
//! so the same code serves a live process (`injector` stops a thread, copies its
//! registers and stack into a [`crate::memory::StackSnapshot`], resumes it and
//! unwinds the copy) and a core file ([`crate::core`]).
//!
//! A frame whose return address is some hook's `after_call` address is a stash
//! frame: its base is the hooked function's CFA plus the layout's call offset, so
//! it is read deterministically (no scanning), and its arguments are attached to
//! the hooked function's frame.

pub mod i386;
pub mod x86_64;

use std::time::Duration;

use trampolines::arena::{Arena, HookRecord};

use crate::args::{dwarf_values, ArgValue, FrameState};
use crate::debuginfo::ModuleDebug;
use crate::memory::Memory;
use crate::procfs::MapEntry;
use crate::symbols::ProcessSymbols;

/// Most frames unwound per thread.
pub const MAX_FRAMES: usize = 256;
/// Most stack bytes copied per thread while it is stopped.
pub const STACK_COPY: u64 = 256 * 1024;

/// Options for [`backtrace`].
#[derive(Debug, Clone, Copy, Default)]
pub struct BacktraceOptions {
    /// Only this thread.
    pub tid: Option<i32>,
    /// Include trampoline frames.
    pub show_trampolines: bool,
}

/// What kind of code a frame's pc is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FrameKind {
    /// Ordinary code of a module.
    #[default]
    Normal,
    /// A trampoline in an arena.
    Trampoline,
    /// A relocated prologue in an arena (shown as its original function).
    Relocated,
}

/// Argument values read from a stash frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StashedArgs {
    /// The six integer argument registers, first argument first, with their names.
    pub registers: Vec<(&'static str, u64)>,
    /// Copied stack words (arguments 7 and up), if the hook copies any.
    pub stack: Vec<u64>,
    /// Stashed xmm0-xmm7 (low byte first), if the hook stashes them.
    pub xmm: Vec<u128>,
    /// The hooked function is variadic (the stack words are a configured window).
    pub variadic: bool,
    /// Address of the stash frame.
    pub frame: u64,
    /// Entry address of the hooked function (0 when unknown).
    pub function: u64,
    /// Name of the hooked function (the hook's name, as `list` shows it). It differs
    /// from the frame's function when the hooked function tail-called that one.
    pub hook: String,
}

/// One stashed value, as readers list them: see [`StashedArgs::slots`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StashSlot {
    /// Register name, `stack+N` for a copied stack word, or `xmmN`.
    pub name: String,
    /// The value (128 bits for an xmm register, zero-extended otherwise).
    pub value: u128,
    /// True for an xmm register.
    pub xmm: bool,
}

impl StashedArgs {
    /// Every stashed value in the order readers show them: the registers, the
    /// copied stack words (`stack+8`, `stack+16`, ...), then the xmm registers.
    pub fn slots(&self) -> Vec<StashSlot> {
        let int = |name: String, v: u64| StashSlot {
            name,
            value: u128::from(v),
            xmm: false,
        };
        let mut out: Vec<StashSlot> = self
            .registers
            .iter()
            .map(|(r, v)| int(r.to_string(), *v))
            .collect();
        out.extend(
            self.stack
                .iter()
                .enumerate()
                .map(|(i, v)| int(format!("stack+{}", 8 * (i + 1)), *v)),
        );
        out.extend(self.xmm.iter().enumerate().map(|(i, v)| StashSlot {
            name: format!("xmm{i}"),
            value: *v,
            xmm: true,
        }));
        out
    }
}

/// A function inlined at a frame's pc (gdb shows each as a frame of its own).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InlinedFrame {
    /// Function name (demangled).
    pub function: Option<String>,
    /// Source file of the pc (innermost) or of the call into the next inner function.
    pub file: Option<String>,
    /// Source line, as for `file`.
    pub line: Option<u32>,
    /// Arguments recovered from DWARF at this pc.
    pub args: Vec<ArgValue>,
}

/// One frame of a backtrace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Frame {
    /// The pc (for frames after the first, the return address).
    pub pc: u64,
    /// Function name, if a symbol covers the pc.
    pub function: Option<String>,
    /// Offset of the pc from the function's start.
    pub offset: u64,
    /// Module path, if the pc is in a mapped file.
    pub module: Option<String>,
    /// Kind of code.
    pub kind: FrameKind,
    /// Arguments from the stash frame, for hooked functions.
    pub stash: Option<StashedArgs>,
    /// The function's name in DWARF (e.g. `__GI___nanosleep` for the symbol
    /// `nanosleep`, `ns::Widget::poke` for a C++ method), as gdb shows it.
    pub source_function: Option<String>,
    /// Source file (from DWARF) of the pc, or of the call site of `inlined`'s outermost.
    pub file: Option<String>,
    /// Source line, as for `file`.
    pub line: Option<u32>,
    /// Functions inlined at the pc, innermost first (the frame itself is the outermost).
    pub inlined: Vec<InlinedFrame>,
    /// Named, typed arguments (from DWARF or a user signature); empty when unknown.
    pub args: Vec<ArgValue>,
}

impl Frame {
    /// The hook's name when it is not the name of the frame's function: the hooked
    /// function tail-called (jumped to) the function the pc is in, so the frame shows
    /// the callee with the hooked function's stashed arguments. `None` for frames
    /// without a stash and when the hook is the frame's function (by its symbol,
    /// DWARF or demangled name).
    pub fn foreign_hook(&self) -> Option<&str> {
        let hook = self.stash.as_ref()?.hook.as_str();
        if hook.is_empty() {
            return None;
        }
        let demangled = crate::debuginfo::demangle(hook);
        let same = [self.function.as_deref(), self.source_function.as_deref()]
            .into_iter()
            .flatten()
            .any(|name| name == hook || name == demangled);
        (!same).then_some(hook)
    }

    /// The named parameter whose value was stashed from `register` (a [`StashSlot`] name).
    pub fn stashed_param(&self, register: &str) -> Option<&ArgValue> {
        self.args.iter().find(|p| {
            p.source == Some(crate::args::ArgSource::Stash)
                && p.register.as_deref() == Some(register)
        })
    }
}

/// One thread's backtrace.
#[derive(Debug, Clone)]
pub struct ThreadBacktrace {
    /// Thread id.
    pub tid: i32,
    /// Thread name (`comm`).
    pub name: String,
    /// Frames, innermost first.
    pub frames: Vec<Frame>,
    /// Why unwinding stopped early, if it did.
    pub truncated: Option<String>,
    /// How long the thread was stopped.
    pub stopped: Duration,
}

/// A process's backtrace.
#[derive(Debug, Clone)]
pub struct Backtrace {
    /// Process id.
    pub pid: i32,
    /// Threads, in `/proc/PID/task` order.
    pub threads: Vec<ThreadBacktrace>,
}

/// Names `f` from `debug` at the frame's lookup pc (`st.pc`): the demangled (or
/// MiniDebugInfo) function, source function, file, line and inlined calls with
/// their DWARF arguments. Returns the physical function's source frame, if any.
pub(crate) fn add_source(
    f: &mut Frame,
    debug: Option<&ModuleDebug>,
    st: &FrameState,
    mem: &dyn Memory,
) -> Option<crate::debuginfo::SourceFrame> {
    let mut source = debug.map(|d| d.frames(st.pc)).unwrap_or_default();
    let physical = source.pop();
    // MiniDebugInfo is the module's full symbol table: it wins over `.dynsym`.
    match (&f.function, debug.and_then(|d| d.mini_symbol(st.pc))) {
        (_, Some((s, off))) if f.kind == FrameKind::Normal => {
            f.function = Some(crate::debuginfo::demangle(&s.name));
            f.offset = off + (f.pc - st.pc);
        }
        (Some(name), _) => f.function = Some(crate::debuginfo::demangle(name)),
        (None, _) => {}
    }
    if let Some(p) = &physical {
        f.source_function = p.function.clone();
        f.file = p.file.clone();
        f.line = p.line;
    }
    let info = physical.as_ref().and_then(|p| p.info.as_ref());
    let frame_base = info.map(|i| i.frame_base.clone()).unwrap_or_default();
    f.inlined = source
        .into_iter()
        .map(|s| InlinedFrame {
            args: s
                .info
                .as_ref()
                .map(|i| dwarf_values(i, &frame_base, st, mem))
                .unwrap_or_default(),
            function: s.function,
            file: s.file,
            line: s.line,
        })
        .collect();
    physical
}

/// The hooked function's own description, when the frame holding `stash` is
/// another function (`frame_info`'s entry is not the hook's): the hooked function
/// tail-called it, and the stashed registers hold the hooked function's
/// parameters, not the frame's. `None` when `frame_info` is the right one (or
/// nothing better is known): then the frame's own description names the values.
pub(crate) fn hooked_info<'d>(
    stash: &StashedArgs,
    frame_info: Option<&crate::args::FunctionInfo>,
    debug_for: impl Fn(u64) -> Option<&'d ModuleDebug>,
) -> Option<crate::args::FunctionInfo> {
    if stash.function == 0 {
        return None;
    }
    match frame_info.and_then(|i| i.entry) {
        Some(entry) if entry == stash.function => None,
        _ => debug_for(stash.function)?
            .function_info(stash.function)
            .filter(|i| i.entry == Some(stash.function)),
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

/// A frame at `pc` named by the ELF symbol covering `lookup` (the pc, or a return
/// address minus one), without debug info.
pub(crate) fn symbolize(symbols: &ProcessSymbols, pc: u64, lookup: u64, kind: FrameKind) -> Frame {
    let (function, offset, module) = match symbols.lookup(lookup) {
        Some((m, s, off)) => (
            Some(s.name.clone()),
            off + (pc - lookup),
            Some(m.path.clone()),
        ),
        None => (None, 0, symbols.module_for(lookup).map(|m| m.path.clone())),
    };
    Frame {
        pc,
        function,
        offset,
        module,
        kind,
        ..Frame::default()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_list_registers_then_stack_words_then_xmm() {
        let s = StashedArgs {
            registers: vec![("rdi", 1), ("rsi", 2)],
            stack: vec![3, 4],
            xmm: vec![(5u128 << 64) | 6],
            variadic: false,
            frame: 0,
            function: 0,
            hook: String::new(),
        };
        let slots: Vec<(String, u128, bool)> = s
            .slots()
            .into_iter()
            .map(|x| (x.name, x.value, x.xmm))
            .collect();
        assert_eq!(
            slots,
            [
                ("rdi".to_string(), 1, false),
                ("rsi".to_string(), 2, false),
                ("stack+8".to_string(), 3, false),
                ("stack+16".to_string(), 4, false),
                ("xmm0".to_string(), (5u128 << 64) | 6, true),
            ]
        );
    }
}
