//! The reader's top-level error: what could not be read, and where; and the
//! [`Hint`] an error gives about what the caller can do.
//!
//! Errors state facts. What the caller can do about them depends on how the
//! caller talks to argstash: the command line has flags, the D-Bus service has
//! methods and options. So an error does not spell the fix in anyone's syntax: it
//! offers a typed [`Hint`], and each front end words the hint in its own terms
//! (the `argstash` CLI renders `--addr 0x401136`, `argstashd` renders "give
//! 0x401136 as the function").

use thiserror::Error;
use trampolines::FormatError;

use crate::core::CoreError;
use crate::memory::MemoryError;
use crate::symbols::SymbolError;

/// Everything a reader operation can fail with.
#[derive(Debug, Error)]
pub enum Error {
    /// Reading target memory failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// A module's symbols could not be read, or a name could not be resolved.
    #[error(transparent)]
    Symbol(#[from] SymbolError),
    /// An arena in the target is malformed.
    #[error("arena at 0x{addr:x} in the target is unreadable: {source}")]
    Format {
        /// Arena address.
        addr: u64,
        /// Why.
        source: FormatError,
    },
    /// A core file could not be read.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// Reading a file under /proc failed.
    #[error("cannot read {path}: {source}")]
    Proc {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

impl Error {
    /// What the caller can do about this error, if the error knows.
    pub fn hint(&self) -> Option<Hint> {
        match self {
            Error::Symbol(e) => e.hint(),
            Error::Core(e) => e.hint(),
            Error::Memory(_) | Error::Format { .. } | Error::Proc { .. } => None,
        }
    }
}

/// What the caller of a failed operation can do about it, in terms of the request
/// it made. Front ends word it in their own syntax, each as a clause appended to
/// the error's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hint {
    /// Eject the function's existing hook before hooking it again.
    EjectFirst {
        /// The function's name, as the eject request can give it.
        function: String,
        /// Arena of the existing hook.
        arena: u64,
        /// Its slot in the arena.
        slot: u32,
    },
    /// The stack window cannot be found from the code: give it with the request
    /// (incoming 8-byte stack words to copy, 0 to `max`).
    GiveStackWindow {
        /// The most words a trampoline copies.
        max: u16,
    },
    /// Several functions have the name: besides a module, one can be picked by its
    /// entry address.
    PickByAddress,
    /// The address is inside a function: hook its entry, at `entry`, instead.
    UseEntry {
        /// The function's entry address.
        entry: u64,
    },
    /// An indirect function whose chosen implementation is unknown: hook the
    /// implementation by its own name or its address.
    NameImplementation,
    /// An indirect function: hook the implementations the process calls instead.
    HookImplementations {
        /// The named implementations, each as `MODULE!NAME`.
        functions: Vec<String>,
        /// Some implementations have no symbol: only debug symbols can name them
        /// (see [`UNNAMED_CODE_ADVICE`]).
        unnamed: bool,
    },
    /// An option of the request does not apply to the target: leave it out.
    LeaveOut {
        /// The option.
        option: RequestOption,
    },
    /// The file is not ELF: the core the kernel wrote is what should be given.
    GiveKernelCore,
    /// The file is a program or library: give the core as the core, and this file
    /// as the executable if it is the program that crashed.
    GiveCoreNotProgram,
}

/// An option of an install request, for hints that name one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestOption {
    /// Stash xmm0-xmm7 (floating-point arguments).
    FloatArgs,
}

/// Advice for code no symbol names, the same in every front end; ends the wording
/// of [`Hint::HookImplementations`] when `unnamed` is set.
pub const UNNAMED_CODE_ADVICE: &str = "code that no symbol names cannot be bounded for a hook: \
     install the module's debug symbols (for glibc, libc6-dbg) to name it";
