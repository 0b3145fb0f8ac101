//! The frame model: what an unwind produces, and why it stopped early.

use std::time::Duration;

use trampolines::error::FrameError;

use crate::args::ArgValue;
use crate::debugfile::DebugSearch;
use crate::ids::{Pid, Tid};

/// Options of a backtrace (of a live process or a core file).
#[derive(Debug, Clone, Default)]
pub struct BacktraceOptions {
    /// Only this thread.
    pub tid: Option<Tid>,
    /// Include trampoline frames.
    pub show_trampolines: bool,
    /// Where to look for separate debug files (default: `/usr/lib/debug`).
    pub debug_search: DebugSearch,
    /// Stop every thread to read it, even one blocked in a system call (which is
    /// otherwise read without a stop; see [`Capture`]). Live processes only.
    pub always_stop: bool,
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
    /// The stack the frame occupies, `[sp, cfa)`: from its stack pointer up to
    /// its canonical frame address (its caller's stack pointer at the call), when
    /// the unwind stepped past it. What the frame keeps on the stack (locals, a
    /// CPython evaluator's entry frame) lies inside.
    pub stack: Option<(u64, u64)>,
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

    /// This frame as the Python pairing sees it: whether it runs CPython's
    /// evaluator and, when that function's hook stashed its arguments, the
    /// `frame` argument ([`crate::python::EVAL_FRAME_ARG`]).
    pub fn python_eval(&self) -> crate::python::NativeEval {
        let eval = crate::python::EVAL_FRAME_FUNCTION;
        // A split function's cold part (`NAME.cold`) runs in the same frame.
        let is_eval = self.kind != FrameKind::Trampoline
            && self.function.as_deref().is_some_and(|f| {
                f == eval || f.strip_prefix(eval).is_some_and(|r| r.starts_with('.'))
            });
        let stashed_frame = self
            .stash
            .as_ref()
            .filter(|s| is_eval && s.hook == eval)
            .and_then(|s| s.registers.get(crate::python::EVAL_FRAME_ARG))
            .map(|(_, v)| *v);
        crate::python::NativeEval {
            is_eval,
            stashed_frame,
            stack: self.stack,
        }
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
    pub tid: Tid,
    /// Thread name (`comm`).
    pub name: String,
    /// Frames, innermost first.
    pub frames: Vec<Frame>,
    /// Why unwinding stopped early, if it did.
    pub truncated: Option<StopReason>,
    /// How long the thread was stopped.
    pub stopped: Duration,
    /// The thread's Python frames, placed among `frames`, when it runs CPython code.
    pub python: Option<crate::python::PythonStack>,
    /// How its registers and stack were taken: in a stop, or without one.
    pub capture: Capture,
}

/// How a thread's registers and stack were taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Capture {
    /// Every register was read: the thread was held in a ptrace stop while its
    /// registers and stack were copied (or it is a core file's thread).
    #[default]
    Stopped,
    /// Read without a stop while it was blocked in system call `syscall`: the
    /// kernel's record of its stack and instruction pointers, and a copy of its
    /// stack taken while it provably did not run. The innermost frame's other
    /// registers are unknown, so arguments a frame keeps only in a register no
    /// frame saved read as `<optimized out>`.
    WithoutStop {
        /// The system call it was blocked in (x86-64 numbers).
        syscall: u64,
    },
    /// Sampled by the kernel (`perf_event_open`) without a stop: every user
    /// register at the sample, and a copy of the top of the stack (frames past
    /// the copy are not unwound).
    Kernel,
}

impl Capture {
    /// True when the thread was not stopped.
    pub fn without_stop(self) -> bool {
        matches!(self, Capture::WithoutStop { .. })
    }

    /// The system call a thread read without a stop was blocked in.
    pub fn syscall(self) -> Option<u64> {
        match self {
            Capture::WithoutStop { syscall } => Some(syscall),
            Capture::Stopped | Capture::Kernel => None,
        }
    }
}

/// A process's backtrace.
#[derive(Debug, Clone)]
pub struct Backtrace {
    /// Process id.
    pub pid: Pid,
    /// Threads, in `/proc/PID/task` order.
    pub threads: Vec<ThreadBacktrace>,
}

/// Why unwinding stopped before the thread's outermost frame.
///
/// The text ([`std::fmt::Display`]) is what `argstash bt` prints after
/// "unwinding stopped:" and what the D-Bus interface carries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StopReason {
    /// The frame limit ([`super::MAX_FRAMES`] unwind steps) was reached.
    #[error("stopped after {steps} unwind steps ({shown} frames shown; each hooked call takes two steps)")]
    FrameLimit {
        /// Unwind steps taken.
        steps: usize,
        /// Frames unwound by then (trampolines are steps but not always frames).
        shown: usize,
    },
    /// A stash frame's bytes could not be read.
    #[error("cannot read the stash frame at 0x{base:x}: {reason}")]
    StashUnreadable {
        /// The stash frame's base.
        base: u64,
        /// The memory error.
        reason: String,
    },
    /// The bytes where a hook's stash frame belongs are not one.
    #[error("bad stash frame for {hook}: {error}")]
    BadStash {
        /// The hook's name.
        hook: String,
        /// What is wrong with the bytes.
        error: FrameError,
    },
    /// Stack memory the step needed could not be read.
    #[error("Could not read stack memory at 0x{addr:x}")]
    Unreadable {
        /// The address.
        addr: u64,
    },
    /// Following the frame-pointer chain led to a lower stack address.
    #[error("Frame pointer unwinding moved backwards")]
    FramePointerMovedBackwards,
    /// A step left both the pc and the stack pointer as they were.
    #[error("Neither the code address nor the stack pointer changed, would loop")]
    DidNotAdvance,
    /// A step's address arithmetic overflowed.
    #[error("Unwinding caused integer overflow")]
    Overflow,
    /// A step found a null return address.
    #[error("Return address is null")]
    NullReturnAddress,
    /// A reason another process reported as text (the daemon's D-Bus replies
    /// carry reasons as their text).
    #[error("{0}")]
    Text(String),
    /// A frame's step needs a register the read did not give (a thread read
    /// without a stop: only its stack and instruction pointers are known).
    #[error("the frame at 0x{pc:x} needs {register}, unknown without a stop")]
    RegisterUnknown {
        /// The register's name.
        register: &'static str,
        /// The frame's pc.
        pc: u64,
    },
    /// A caller's stack pointer is not above its callee's.
    #[error("the stack pointer did not grow (0x{caller_sp:x} after 0x{callee_sp:x})")]
    StackDidNotGrow {
        /// The caller's stack pointer.
        caller_sp: u64,
        /// The callee's stack pointer.
        callee_sp: u64,
    },
}

impl From<framehop::Error> for StopReason {
    fn from(e: framehop::Error) -> StopReason {
        match e {
            framehop::Error::CouldNotReadStack(addr) => StopReason::Unreadable { addr },
            framehop::Error::FramepointerUnwindingMovedBackwards => {
                StopReason::FramePointerMovedBackwards
            }
            framehop::Error::DidNotAdvance => StopReason::DidNotAdvance,
            framehop::Error::IntegerOverflow => StopReason::Overflow,
            framehop::Error::ReturnAddressIsNull => StopReason::NullReturnAddress,
        }
    }
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
