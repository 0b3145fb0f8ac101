//! What the caller of a failed operation can do about it: the [`Hint`] an error
//! offers.
//!
//! Errors state facts. What the caller can do about them depends on how the
//! caller talks to argstash: the command line has flags, the D-Bus service has
//! methods and options. So an error does not spell the fix in anyone's syntax: it
//! offers a typed [`Hint`], and each front end words the hint in its own terms
//! (the `argstash` CLI renders `--addr 0x401136`, `argstashd` renders "give
//! 0x401136 as the function"). A leaf module: errors of every layer use it.

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
    /// Several functions go by the name as written: give one of them alone, written
    /// as in `names`. For a name that cannot be read (`parse(long`), `read_as` is
    /// what could be read of it (`parse`) and `names` the functions that names.
    WriteOneAlone {
        /// What was read of a malformed name; `None` when the name was read whole.
        read_as: Option<String>,
        /// How to write each function alone (a demangled name, path or mangled
        /// name, or `MODULE!MANGLED`), in the order the message lists them.
        names: Vec<String>,
    },
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
    /// The hook could end the program through a C++ exception: accept that
    /// explicitly to hook it anyway, or (when `retry`) try again later.
    AcceptUnwindLoss {
        /// Trying again may succeed (a thread may be at a safe point then).
        retry: bool,
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
    /// Hook the CPython evaluator (`inject --python`).
    Python,
}

/// Advice for code no symbol names, the same in every front end; ends the wording
/// of [`Hint::HookImplementations`] when `unnamed` is set.
pub const UNNAMED_CODE_ADVICE: &str = "code that no symbol names cannot be bounded for a hook: \
     install the module's debug symbols (for glibc, libc6-dbg) to name it";
