//! The injector's top-level error: what went wrong, for which function, and a
//! [`Hint`] at how to fix it that each front end words in its own syntax.

use thiserror::Error;
use trampolines::x86_64::{Unsure, MAX_STACK_WORDS};
use trampolines::{CodegenError, FormatError, PlanError};

use crate::memory::MemoryError;
use crate::ptrace::session_error::SessionError;
use reader::core::CoreError;
use reader::symbols::SymbolError;

pub use reader::hint::{Hint, RequestOption, UNNAMED_CODE_ADVICE};

/// Everything an injector operation can fail with.
#[derive(Debug, Error)]
pub enum Error {
    /// The process ended (exited or was killed) while the operation ran.
    #[error("process {pid} exited during {operation} (it ended or was killed meanwhile); nothing of argstash is left to undo in it")]
    ExitedDuring {
        /// The process.
        pid: i32,
        /// What argstash was doing.
        operation: Operation,
    },
    /// A C++ exception could cross the functions, and their unwind information
    /// could not be made findable by the program's unwinder before the jump:
    /// hooking them could end the program, so nothing was hooked.
    #[error(
        "not hooking {}: the process can throw exceptions ({raiser} is loaded) and {reason}, \
         so a C++ exception thrown through {} would end the program (std::terminate); \
         nothing was changed",
        .functions.join(", "),
        if .functions.len() == 1 { "it" } else { "them" }
    )]
    Unprotected {
        /// The functions, as `name in module`.
        functions: Vec<String>,
        /// The module whose unwinder raises exceptions.
        raiser: String,
        /// Why their unwind information could not be registered first.
        reason: UnprotectedReason,
    },
    /// Attaching, stopping or resuming the process failed.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// Reading or writing target memory failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// A function could not be found or named unambiguously.
    #[error(transparent)]
    Symbol(#[from] SymbolError),
    /// The function's entry cannot be patched safely.
    #[error("cannot hook {function}: {source}")]
    Plan {
        /// The function, as `name in module`.
        function: String,
        /// Why.
        source: PlanError,
    },
    /// Code for the hook could not be generated.
    #[error("cannot hook {function}: {source}")]
    Codegen {
        /// The function, as `name in module`.
        function: String,
        /// Why.
        source: CodegenError,
    },
    /// An arena in the target is malformed.
    #[error("arena at 0x{addr:x} in the target is unreadable: {source}")]
    Format {
        /// Arena address.
        addr: u64,
        /// Why.
        source: FormatError,
    },
    /// A user-given signature cannot be used.
    #[error(transparent)]
    Signature(#[from] reader::args::SignatureError),
    /// The function is hooked already ([`Hint::EjectFirst`]).
    #[error("{function} is already hooked (hook #{slot} in the arena at 0x{arena:x}, trampoline 0x{trampoline:x})")]
    AlreadyHooked {
        /// The function, as `name in module`.
        function: String,
        /// Its plain name.
        name: String,
        /// Slot of the existing hook.
        slot: u32,
        /// Arena of the existing hook.
        arena: u64,
        /// Its trampoline.
        trampoline: u64,
    },
    /// The same function was named twice in one request.
    #[error("{function} is named more than once in this request")]
    Duplicate {
        /// The function.
        function: String,
    },
    /// Eject of a function that has no active hook.
    #[error("{function} is not hooked{}", hooked_list(.hooked))]
    NotHooked {
        /// The function.
        function: String,
        /// Functions that are hooked.
        hooked: Vec<String>,
    },
    /// No room for an arena near the module.
    #[error("no free address within ±2 GiB of {module} for the trampoline arena (a rel32 jump must reach it); free some address space near the module or hook a function in another module")]
    NoArenaSpace {
        /// The module.
        module: String,
    },
    /// No room for an arena near the module, and the prologue cannot take the absolute jump.
    #[error("no free address within ±2 GiB of {module} for the trampoline arena, and {function} cannot take the 14-byte absolute jump used instead: {reason}; free some address space near the module or hook another function")]
    NoArenaSpaceFar {
        /// The module.
        module: String,
        /// The function.
        function: String,
        /// Why the 14-byte patch cannot be used.
        reason: FarJumpRefusal,
    },
    /// Every attempt to map an arena near the module failed in the target.
    #[error("cannot map the trampoline arena near {module}: mmap in the target failed ({cause}); check the target's address-space limit (RLIMIT_AS) and vm.max_map_count")]
    ArenaMapFailed {
        /// The module.
        module: String,
        /// The last mmap failure.
        #[source]
        cause: SessionError,
    },
    /// Reading back what was written did not match.
    #[error("verification failed at 0x{addr:x} ({what}): the target's memory did not take the write; nothing was left patched")]
    Verify {
        /// Address checked.
        addr: u64,
        /// What was being verified.
        what: &'static str,
    },
    /// The bytes at a patch site (or a record) changed under us.
    #[error("{change}; another tool may have patched it: leaving it alone")]
    Changed {
        /// What changed.
        change: Change,
    },
    /// A thread stands where it cannot be moved.
    #[error("thread {tid} is executing inside the patched bytes of {function} at 0x{rip:x} and cannot be moved: try again")]
    ThreadInPatch {
        /// The thread.
        tid: i32,
        /// The function.
        function: String,
        /// Its instruction pointer.
        rip: u64,
    },
    /// The incoming stack words a function reads cannot be bounded from its code
    /// ([`Hint::GiveStackWindow`]).
    #[error("cannot hook {function}: how many stack words to copy for it is unknown ({reason})")]
    StackWindowUnknown {
        /// The function, as `name in module`.
        function: String,
        /// Why the analysis is unsure.
        reason: UnsureWindow,
    },
    /// A function reads more incoming stack words than a trampoline copies.
    #[error("cannot hook {function}: it reads {words} incoming stack words, more than the 16 a trampoline copies; hooking it would break its arguments")]
    StackWindowTooLarge {
        /// The function, as `name in module`.
        function: String,
        /// Words it reads.
        words: u16,
    },
    /// The target is a 32-bit process and an option asked for does not apply to it
    /// ([`Hint::LeaveOut`]).
    #[error(
        "process {pid} ({name}) is a 32-bit (i386) process: {} is not supported for 32-bit targets",
        unsupported_32bit(*.option)
    )]
    Unsupported32Bit {
        /// The pid.
        pid: i32,
        /// Its command name.
        name: String,
        /// The option.
        option: RequestOption,
    },
    /// A core file could not be read.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// Reading /proc failed.
    #[error("cannot read {path}: {source}")]
    Proc {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// `inject --python` on a process whose CPython evaluator cannot be hooked
    /// (not a CPython, or a version without a known layout).
    #[error(
        "cannot hook the Python evaluator of process {pid}: {source}{}",
        python_advice(source)
    )]
    Python {
        /// The process.
        pid: i32,
        /// Why.
        source: reader::python::PythonError,
    },
    /// `inject --python` on a CPython whose evaluator the hook has nothing to add
    /// to; nothing was changed.
    #[error(
        "not hooking the Python evaluator of process {pid} (CPython {version}): {reason}; \
         nothing was changed{}",
        unreadable.as_ref().map(|e| format!(" (besides, {e})")).unwrap_or_default()
    )]
    PythonHookRefused {
        /// The process.
        pid: i32,
        /// The interpreter's version.
        version: reader::python::PythonVersion,
        /// Why.
        reason: PythonHookRefusal,
        /// Why this reader cannot read that version's frames either, if it cannot
        /// (e.g. no layout for it yet).
        unreadable: Option<reader::python::PythonError>,
    },
}

/// Why `inject --python` declines a CPython evaluator it could patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum PythonHookRefusal {
    /// Since 3.12 each call of the evaluator keeps its entry frame as a local
    /// variable on its own C stack, linked into the thread's frame chain, so a
    /// backtrace pairs every native evaluator frame with its Python frames exactly
    /// from memory alone, including frames that started before any hook; the hook
    /// would add a patch and its cost, and nothing a backtrace uses.
    #[error(
        "since CPython 3.12 each evaluator call keeps its entry frame on its own C stack, \
         so a backtrace pairs native and Python frames exactly without a hook (\"paired_by\": \
         \"entry-frame\"), even for calls that began before any inject"
    )]
    EntryFrameOnStack,
}

impl PythonHookRefusal {
    /// Why the evaluator of CPython `version` is not hooked, if it is not: every
    /// version from 3.12 (only 3.11 needs the hook for exact pairing).
    pub fn for_version(version: reader::python::PythonVersion) -> Option<PythonHookRefusal> {
        (version.major > 3 || (version.major == 3 && version.minor >= 12))
            .then_some(PythonHookRefusal::EntryFrameOnStack)
    }
}

/// What still works when the Python hook is refused.
fn python_advice(e: &reader::python::PythonError) -> &'static str {
    match e {
        reader::python::PythonError::NotPython { .. } => {
            "; hook native functions by name instead (--func); `argstash bt` shows its native frames"
        }
        // The message already says that native frames are shown.
        reader::python::PythonError::NoLayout { .. } => "",
        _ => "; `argstash bt` still shows its native frames",
    }
}

impl Error {
    /// What the caller can do about this error, if the error knows.
    pub fn hint(&self) -> Option<Hint> {
        match self {
            Error::AlreadyHooked {
                name, arena, slot, ..
            } => Some(Hint::EjectFirst {
                function: name.clone(),
                arena: *arena,
                slot: *slot,
            }),
            Error::StackWindowUnknown { .. } => Some(Hint::GiveStackWindow {
                max: MAX_STACK_WORDS,
            }),
            Error::Unsupported32Bit { option, .. } => Some(Hint::LeaveOut { option: *option }),
            Error::PythonHookRefused { .. } => Some(Hint::LeaveOut {
                option: RequestOption::Python,
            }),
            Error::Symbol(e) => e.hint(),
            Error::Unprotected { reason, .. } => Some(Hint::AcceptUnwindLoss {
                retry: reason.may_pass(),
            }),
            Error::Core(e) => e.hint(),
            _ => None,
        }
    }
}

/// What an option that 32-bit targets do not support does, and why it does not apply.
fn unsupported_32bit(option: RequestOption) -> &'static str {
    match option {
        RequestOption::FloatArgs => {
            "stashing floating-point arguments (i386 passes floating-point arguments on the \
             stack, which the window copies)"
        }
        RequestOption::Python => "hooking the CPython evaluator",
    }
}

/// Why a hook's unwind information could not be registered before its jump.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UnprotectedReason {
    /// The process has no `__register_frame_info` to register with.
    #[error("it has no __register_frame_info to register the hooks' unwind information with")]
    NoRegistration,
    /// The caller turned calls in the target off.
    #[error("running code in the target (the registration call) is turned off")]
    CallsOff,
    /// 32-bit trampolines get no unwind information yet.
    #[error("no unwind information is generated for 32-bit trampolines yet")]
    NoUnwindInfo32,
    /// The registration was tried and not done (no thread at a safe point in time, a
    /// call that failed or did not return).
    #[error("registering the hooks' unwind information first failed: {0}")]
    NotRegistered(String),
    /// Another part of the install failed after the registration, whose unwind
    /// information could not be taken back; said with the cause.
    #[error("{0}")]
    Other(String),
}

impl UnprotectedReason {
    /// True when trying again later may succeed (a thread may be at a safe point then).
    pub fn may_pass(&self) -> bool {
        matches!(self, UnprotectedReason::NotRegistered(_))
    }
}

/// Why the 14-byte absolute jump cannot patch a function.
#[derive(Debug, Error)]
pub enum FarJumpRefusal {
    /// Its prologue cannot be relocated for the longer patch.
    #[error(transparent)]
    Plan(PlanError),
    /// The hook's code could not be generated for the far arena.
    #[error(transparent)]
    Codegen(CodegenError),
}

/// When the bytes found at a patch site were last known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// Read and analysed before the stop (install).
    Read,
    /// Written by the hook (eject).
    Hooked,
}

/// What changed under argstash between reading and writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A function's entry holds other bytes than expected.
    Entry {
        /// The function.
        function: String,
        /// When the expected bytes were known.
        since: Since,
        /// The bytes expected.
        expected: Vec<u8>,
        /// The bytes found.
        found: Vec<u8>,
    },
    /// An arena's records changed (another argstash used it meanwhile).
    ArenaRecords {
        /// The arena's address.
        arena: u64,
    },
    /// A hook's record changed.
    Record {
        /// The hooked function.
        function: String,
    },
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::Entry {
                function,
                since,
                expected,
                found,
            } => {
                let when = match since {
                    Since::Read => "read",
                    Since::Hooked => "hooked",
                };
                write!(
                    f,
                    "the entry of {function} changed since it was {when} (expected {}, found {})",
                    hex(expected),
                    hex(found)
                )
            }
            Change::ArenaRecords { arena } => write!(
                f,
                "the entry of the arena at 0x{arena:x} changed since it was read (expected the \
                 records read before stopping, found records changed by another argstash)"
            ),
            Change::Record { function } => write!(
                f,
                "the entry of {function} changed since it was read (expected its record, found \
                 a changed record)"
            ),
        }
    }
}

/// Why the code analysis cannot bound a function's stack window, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsureWindow {
    /// The tail-called function where the analysis was unsure (`None`: the hooked
    /// function itself).
    pub tail_called: Option<String>,
    /// What the analysis met.
    pub why: Unsure,
    /// The instruction at `why`'s address in NASM syntax, when it could be read and decoded.
    pub instruction: Option<String>,
}

impl std::fmt::Display for UnsureWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.tail_called {
            None => write!(f, "{}", self.why)?,
            Some(name) => write!(f, "{name}, which it tail-calls: {}", self.why)?,
        }
        match &self.instruction {
            Some(ins) => write!(f, ": `{ins}`"),
            None => Ok(()),
        }
    }
}

fn hooked_list(hooked: &[String]) -> String {
    if hooked.is_empty() {
        "; the process has no active hooks".to_string()
    } else {
        format!("; hooked functions: {}", hooked.join(", "))
    }
}

/// Hex rendering of bytes for messages.
fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// An operation on a process, for errors that name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Installing hooks.
    Inject,
    /// Removing hooks.
    Eject,
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Operation::Inject => "inject",
            Operation::Eject => "eject",
        })
    }
}

/// `error`, or [`Error::ExitedDuring`] when the process ended meanwhile (whatever
/// failed first then only reflects the process vanishing under the operation).
pub fn exited_during(pid: i32, operation: Operation, error: Error) -> Error {
    let refusal = matches!(
        error,
        Error::Session(crate::ptrace::session_error::SessionError::NoSuchProcess { .. })
    );
    if refusal || pid <= 0 {
        return error;
    }
    // A SIGKILLed process loses its address space (its memory reads fail, and
    // its maps read empty, so a symbol lookup finds no function at all) a
    // moment before /proc shows its threads as zombies: give the kernel that
    // moment when the error, or the process itself (a thread with PF_EXITING),
    // says it is going away.
    let wait = if looks_gone(&error) || crate::ptrace::wait::some_thread_exiting(pid) {
        std::time::Duration::from_millis(200)
    } else {
        std::time::Duration::ZERO
    };
    let deadline = std::time::Instant::now() + wait;
    loop {
        if crate::ptrace::wait::process_ended(pid) {
            return Error::ExitedDuring { pid, operation };
        }
        if std::time::Instant::now() >= deadline {
            // Every thread past the point of no return (a large address space
            // takes long to let go): the process is ending, whatever failed.
            if wait > std::time::Duration::ZERO && crate::ptrace::wait::process_exiting(pid) {
                return Error::ExitedDuring { pid, operation };
            }
            return error;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Whether `error` is what an operation meets when its process is being torn down:
/// any failed memory access (a killed process's address space goes away as ESRCH,
/// EIO, or reads of nothing) or a thread found exited. A live process's genuine
/// memory error only waits those 200 ms before it is returned as it was.
fn looks_gone(error: &Error) -> bool {
    matches!(
        error,
        Error::Memory(_)
            | Error::Session(crate::ptrace::session_error::SessionError::Exited { .. })
    )
}

impl From<reader::arena::ArenaError> for Error {
    fn from(e: reader::arena::ArenaError) -> Error {
        match e {
            reader::arena::ArenaError::Memory(e) => Error::Memory(e),
            reader::arena::ArenaError::Format { addr, source } => Error::Format { addr, source },
        }
    }
}
