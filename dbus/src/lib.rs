//! The D-Bus contract of `argstashd`, shared by the daemon and its clients.
//!
//! This crate exists so that the server (`argstashd`) and every Rust client (the
//! `argstash` CLI with `--bus`, tests, other tools) agree on one definition of the
//! interface: the well-known bus name, the object paths, the error names, the
//! option keys, the wire types and the zbus `#[proxy]` client traits. It holds no
//! server logic. Beside the wire types it holds the conversions between them and
//! the injector's types, both ways ([`to_wire`] for the daemon, [`from_wire`] for
//! clients), so a value that crosses the bus comes back as the value that was sent
//! (the round-trip tests in `round_trip.rs` check every type that crosses).
//!
//! Wire types are plain structs: `busctl` prints them as readable tuples, and each
//! maps field for field to the CLI's `--json` output (see [`Frame`], [`HookEntry`]).

pub mod from_wire;
#[cfg(test)]
mod round_trip;
pub mod to_wire;

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use zbus::message::{Header, Message};
use zbus::names::ErrorName;
use zbus::proxy;
use zbus::zvariant::{DeserializeDict, OwnedObjectPath, SerializeDict, Type, Value};
use zbus::DBusError;

/// Well-known bus name of the daemon.
pub const BUS_NAME: &str = "org.argstash.Injector1";
/// Object path of the manager object.
pub const MANAGER_PATH: &str = "/org/argstash/Injector1";
/// Interface of the manager object.
pub const MANAGER_INTERFACE: &str = "org.argstash.Injector1";
/// Parent path of the hook objects.
pub const HOOKS_PATH: &str = "/org/argstash/Injector1/hooks";
/// Interface of each hook object.
pub const HOOK_INTERFACE: &str = "org.argstash.Hook1";
/// Prefix of the daemon's own error names.
pub const ERROR_PREFIX: &str = "org.argstash.Error";

/// `Inject` option: incoming stack words to copy (`q`, `u` or `i`; 0 to 16); like
/// the CLI's `--stack-args N`, it overrides the window argstash would choose, 0 included.
pub const OPT_STACK_ARGS: &str = "stack-args";
/// `Inject` option: incoming stack words to copy by function (`a{sq}`, 0 to 16 each,
/// e.g. `{"ngx_http_process_request": 0}`), the CLI's `--stack-args NAME=N`; it wins
/// over `stack-args` for that function, and every name must be among the functions.
pub const OPT_FUNCTION_STACK_ARGS: &str = "function-stack-args";
/// `Inject` option: also stash xmm0-xmm7 (`b`), the CLI's `--float-args`.
pub const OPT_FLOAT_ARGS: &str = "float-args";
/// `Inject` option: C parameter lists by function (`a{ss}`, e.g. `{"bar": "int n, const char *s"}`),
/// as the CLI's `--func 'bar(int n, const char *s)'`; a function may also carry its
/// list in its name (`bar(int, char *)`).
pub const OPT_SIGNATURES: &str = "signatures";
/// `Inject` option: also hook CPython's frame evaluator (`b`), the CLI's `--python`.
pub const OPT_PYTHON: &str = "python";
/// `Backtrace` option: include trampoline frames (`b`).
pub const OPT_SHOW_TRAMPOLINES: &str = "show-trampolines";
/// `Backtrace` option: stop every thread, even one blocked in a system call
/// (`b`), the CLI's `bt --always-stop`.
pub const OPT_ALWAYS_STOP: &str = "always-stop";

/// Object path of the hook in `slot` of the arena at `arena` in process `pid`.
pub fn hook_path(pid: u32, arena: u64, slot: u32) -> OwnedObjectPath {
    OwnedObjectPath::try_from(format!("{HOOKS_PATH}/p{pid}_{arena:x}_{slot}"))
        .expect("hook paths are built from valid path characters")
}

/// One hook as `ListHooks` returns it; the fields of the CLI's `list --json` hook objects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct HookEntry {
    /// The hook's object (`/` for an ejected record, which has no object).
    pub path: OwnedObjectPath,
    /// Process id.
    pub pid: u32,
    /// Function name.
    pub function: String,
    /// Module path.
    pub module: String,
    /// Function entry address.
    pub address: u64,
    /// First patched byte.
    pub patch_address: u64,
    /// Bytes patched.
    pub patch_len: u32,
    /// Trampoline address.
    pub trampoline: u64,
    /// Arena address.
    pub arena: u64,
    /// Slot in the arena.
    pub slot: u32,
    /// Copied stack words.
    pub stack_words: u16,
    /// `active` or `ejected`.
    pub state: String,
    /// Install time, Unix nanoseconds.
    pub installed_ns: u64,
    /// The function is variadic (its stack window is a configured size).
    pub variadic: bool,
    /// The hook stashes xmm0-xmm7.
    pub xmm: bool,
    /// The parameter list the hook was installed with, empty when none was given.
    pub signature: String,
    /// The function's name as `list` shows it: a C++ name demangled with its
    /// parameter list, a Rust path without its hash, else `function`.
    pub demangled: String,
}

/// One stashed argument: an `args[]` element of `bt --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct Arg {
    /// Register name (`rdi`, `eax`, `xmm0`, ...) or `stack+N` for a copied stack word.
    pub register: String,
    /// Its value (for an xmm register, the low 64 bits).
    pub value: u64,
    /// The high 64 bits of an xmm register, 0 otherwise.
    pub value_high: u64,
    /// The parameter it holds, if known (empty otherwise).
    pub param: Param,
}

/// A named, typed argument: a `params[]` element of `bt --json` (unknown strings are empty).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, Type)]
pub struct Param {
    /// Parameter name.
    pub name: String,
    /// Type name.
    pub type_name: String,
    /// The value as gdb prints it (or `<optimized out>`).
    pub display: String,
    /// `stash`, `dwarf`, or empty when there is no value.
    pub source: String,
    /// The register (or `stack+N`) the value was stashed from.
    pub register: String,
    /// True when `value` holds the raw value.
    pub has_value: bool,
    /// The raw value, zero-extended (when `has_value`).
    pub value: u64,
}

/// A function inlined at a frame's pc: an `inlined[]` element of `bt --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct Inlined {
    /// Function name, empty when unknown.
    pub function: String,
    /// Source file, empty when unknown.
    pub file: String,
    /// Source line, 0 when unknown.
    pub line: u32,
    /// Its arguments (from DWARF).
    pub params: Vec<Param>,
}

/// One frame: a `frames[]` element of `bt --json` (absent strings are empty, absent addresses 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct Frame {
    /// Position in the stack, innermost 0.
    pub index: u32,
    /// Program counter.
    pub pc: u64,
    /// Function name, empty when unknown.
    pub function: String,
    /// Offset of `pc` in the function.
    pub offset: u64,
    /// Module path, empty when unknown.
    pub module: String,
    /// True when the frame has stashed arguments.
    pub hooked: bool,
    /// `normal`, `trampoline` or `relocated`.
    pub kind: String,
    /// Address of the stash frame, 0 when not hooked.
    pub stash_frame: u64,
    /// Stashed arguments.
    pub args: Vec<Arg>,
    /// The hooked function is variadic (its stack words are a configured window).
    pub variadic: bool,
    /// The function's name in DWARF, empty when unknown.
    pub source_function: String,
    /// Source file of the pc, empty when unknown.
    pub file: String,
    /// Source line, 0 when unknown.
    pub line: u32,
    /// Named, typed arguments (from DWARF or a signature).
    pub params: Vec<Param>,
    /// Functions inlined at the pc, innermost first.
    pub inlined: Vec<Inlined>,
    /// Name of the hooked function whose stash this frame carries (`hook` in
    /// `bt --json`); it differs from `function` when the hooked function
    /// tail-called this one. Empty when not hooked.
    pub hook: String,
    /// Entry address of that hooked function, 0 when not hooked or unknown.
    pub hook_address: u64,
    /// Start of the stack the frame occupies (its stack pointer), 0 when unknown.
    pub stack_start: u64,
    /// End of the stack the frame occupies (its canonical frame address), 0 when unknown.
    pub stack_end: u64,
}

/// One thread: a `threads[]` element of `bt --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct Thread {
    /// Thread id.
    pub tid: u32,
    /// Thread name (`comm`).
    pub name: String,
    /// How long the thread was stopped, microseconds (0 when read without a stop).
    pub stopped_us: u64,
    /// The thread was blocked in a system call and read without a stop (only
    /// its stack and instruction pointers known): `without_stop` of `bt --json`.
    pub without_stop: bool,
    /// The system call it was blocked in, when read without a stop (x86-64
    /// numbers; 0 otherwise): `syscall` of `bt --json`.
    pub syscall: u64,
    /// Why unwinding stopped early, empty when it did not.
    pub truncated: String,
    /// Frames, innermost first.
    pub frames: Vec<Frame>,
    /// The thread runs CPython code: `python` and `python_notes` are its Python side.
    pub has_python: bool,
    /// Its Python frames, innermost first (placed among `frames` by `eval_frame`).
    pub python: Vec<PyFrame>,
    /// What did not fit or could not be read of its Python side.
    pub python_notes: Vec<String>,
}

/// One Python frame of a thread: a `"kind": "python"` element of `bt --json`'s frames.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct PyFrame {
    /// Qualified name of its code (`Outer.method`).
    pub function: String,
    /// Its code's file name.
    pub file: String,
    /// The current line, 0 when the code has none.
    pub line: i32,
    /// Its parameters with their values now.
    pub params: Vec<PyParam>,
    /// `stash` or `order`: how it was matched to its evaluator frame; empty when none was.
    pub paired_by: String,
    /// Index in the thread's `frames` (native only) of the evaluator frame that runs it, -1 when none.
    pub eval_frame: i32,
    /// Address of its `_PyInterpreterFrame`.
    pub frame: u64,
    /// A C-level evaluator call started at this frame.
    pub entry: bool,
    /// Address of its code object.
    pub code: u64,
    /// The first line of its code (`co_firstlineno`).
    pub first_line: i32,
    /// 3.12+: address of the entry frame its C-level evaluator call keeps right
    /// after it, 0 when there is none.
    pub entry_frame: u64,
    /// Who owns its memory: `thread`, `generator`, or the raw owner value in decimal.
    pub owner: String,
    /// Still being set up (CPython hides such frames).
    pub incomplete: bool,
    /// Why `params` is empty or short, empty when nothing was wrong.
    pub params_note: String,
    /// Its interpreter's `PyInterpreterState` address when the process has
    /// several (subinterpreters), 0 otherwise: `interpreter.state` of `bt --json`.
    pub interpreter: u64,
    /// That interpreter's id (0: the main one), -1 when unknown or not shown.
    pub interpreter_id: i64,
}

/// One parameter of a Python frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct PyParam {
    /// Its name.
    pub name: String,
    /// The type of its value (`int`, `MyClass`).
    pub type_name: String,
    /// The value as argstash shows it (`'zed'`, `True`, `<list object at 0x..., len 2>`).
    pub display: String,
    /// `positional-only`, `positional`, `keyword-only`, `varargs` or `varkeywords`.
    pub kind: String,
}

/// What other unwinders (libgcc, gdb, perf) were told about the hooks at an
/// install, or what was taken back at an eject: the injector's unwind report.
///
/// A dictionary (`a{sv}`, keys in kebab-case: `registered`, `unwinder`, `notes`,
/// ...) so that keys can be added without breaking older clients, which ignore
/// keys they do not know; a key an older daemon does not send reads as `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq, SerializeDict, DeserializeDict, Type)]
#[zvariant(signature = "a{sv}", rename_all = "kebab-case")]
pub struct UnwindReport {
    /// Hooks (un)registered with the in-process unwinder.
    pub registered: Option<u32>,
    /// The module providing the in-process unwinder, when there is one.
    pub unwinder: Option<String>,
    /// Why some hooks are not (un)registered, or what was skipped and how to get it.
    pub notes: Option<Vec<String>>,
    /// The perf map file written or cleaned.
    pub perf_map: Option<String>,
    /// The perf jitdump written and mapped, or unmapped and removed.
    pub perf_jitdump: Option<String>,
    /// Microseconds spent on the perf jitdump.
    pub perf_jitdump_elapsed_us: Option<u64>,
    /// The gdb symbol file describing the active hooks.
    pub symbol_file: Option<String>,
    /// Hooks linked into (or unlinked from) the target's GDB JIT descriptor.
    pub gdb_jit: Option<u32>,
    /// Microseconds spent on all of it.
    pub elapsed_us: Option<u64>,
}

/// What `InjectWithReport` did: everything the CLI's `inject` prints (`a{sv}`,
/// keys in kebab-case; see [`UnwindReport`] on adding keys).
#[derive(Debug, Clone, Default, PartialEq, SerializeDict, DeserializeDict, Type)]
#[zvariant(signature = "a{sv}", rename_all = "kebab-case")]
pub struct InstallReport {
    /// The new hooks, as `ListHooks` lists them.
    pub hooks: Option<Vec<HookEntry>>,
    /// Where each new hook's stack window came from, in the order of `hooks`:
    /// `user`, `signature`, `code` or `variadic-default` (empty when unknown).
    pub window_sources: Option<Vec<String>>,
    /// Microseconds the target's threads were stopped.
    pub stopped_us: Option<u64>,
    /// Threads stopped.
    pub threads: Option<u32>,
    /// Arenas created for this install.
    pub new_arenas: Option<Vec<u64>>,
    /// Threads moved out of the patched bytes.
    pub moved_threads: Option<Vec<i32>>,
    /// Registration of the hooks' unwind information with other unwinders.
    pub unwind: Option<UnwindReport>,
    /// Real signals that arrived while threads were held, and how each got back.
    pub signals: Option<Vec<SignalEntry>>,
    /// Where the stopped threads' instruction pointers were, relative to the new hooks.
    pub rip_census: Option<RipCensus>,
}

/// Where the stopped threads' instruction pointers were, relative to the hooks
/// installed or ejected (the injector's `RipCensus`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct RipCensus {
    /// In the patched bytes.
    pub in_patch: u32,
    /// Inside a relocated prologue.
    pub in_relocated: u32,
    /// Inside a trampoline.
    pub in_trampoline: u32,
}

/// One real signal a stop took from a thread, and how it got back to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct SignalEntry {
    /// The thread it was taken from.
    pub tid: i32,
    /// The signal number.
    pub signal: i32,
    /// Its `si_code` when it was taken.
    pub code: i32,
    /// `redelivered`, `requeued` (both exact), `info-dropped`, `resent`, `merged` or `lost`.
    pub fate: String,
    /// For `lost`: the errno of the last attempt to queue it again (else 0).
    pub errno: i32,
}

/// What `EjectWithReport` or `EjectAllWithReport` did: everything the CLI's
/// `eject` prints (`a{sv}`, keys in kebab-case).
#[derive(Debug, Clone, Default, PartialEq, SerializeDict, DeserializeDict, Type)]
#[zvariant(signature = "a{sv}", rename_all = "kebab-case")]
pub struct EjectReport {
    /// The hooks ejected (their records as they were before the eject).
    pub hooks: Option<Vec<HookEntry>>,
    /// Microseconds the target's threads were stopped.
    pub stopped_us: Option<u64>,
    /// Threads moved from relocated code back to the original function.
    pub moved_threads: Option<Vec<i32>>,
    /// Removal of the hooks' unwind information from other unwinders.
    pub unwind: Option<UnwindReport>,
    /// Real signals that arrived while threads were held, and how each got back.
    pub signals: Option<Vec<SignalEntry>>,
    /// Where the stopped threads' instruction pointers were, relative to the ejected hooks.
    pub rip_census: Option<RipCensus>,
}

/// Which other unwinders know about one active hook: a `hooks` element of [`UnwindStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type)]
pub struct HookUnwind {
    /// Function name.
    pub function: String,
    /// Arena address.
    pub arena: u64,
    /// Slot in the arena.
    pub slot: u32,
    /// The arena has an unwind area and the hook an `.eh_frame`.
    pub described: bool,
    /// Registered with the in-process unwinder (libgcc).
    pub libgcc: bool,
    /// Linked into the GDB JIT descriptor.
    pub gdb_jit: bool,
    /// Has lines in `/tmp/perf-PID.map`.
    pub perf_map: bool,
    /// Described in the mapped perf jitdump.
    pub perf_jit: bool,
}

/// What `UnwindStatus` returns: the unwind rows of the CLI's `list` (`a{sv}`).
#[derive(Debug, Clone, Default, PartialEq, SerializeDict, DeserializeDict, Type)]
#[zvariant(signature = "a{sv}", rename_all = "kebab-case")]
pub struct UnwindStatus {
    /// The process has libgcc's in-process unwinder loaded.
    pub has_libgcc: Option<bool>,
    /// One row per active hook.
    pub hooks: Option<Vec<HookUnwind>>,
}

/// What kind of failure an [`Error::Service`] is; each has its own D-Bus error name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// `org.argstash.Error.NoSuchProcess`: no such process or thread.
    NoSuchProcess,
    /// `org.argstash.Error.NotPermitted`: the kernel or a policy refuses the target.
    NotPermitted,
    /// `org.argstash.Error.FunctionNotFound`: no function (or module) by that name.
    FunctionNotFound,
    /// `org.argstash.Error.Ambiguous`: several functions match the name.
    Ambiguous,
    /// `org.argstash.Error.AlreadyHooked`: the function is hooked already.
    AlreadyHooked,
    /// `org.argstash.Error.NotHooked`: eject of a function without an active hook.
    NotHooked,
    /// `org.argstash.Error.Unsafe`: the function cannot be patched safely.
    Unsafe,
    /// `org.argstash.Error.Busy`: the target is traced by someone else or did not stop in time.
    Busy,
    /// `org.argstash.Error.Failed`: anything else.
    Failed,
    /// `org.freedesktop.DBus.Error.AccessDenied`: the caller may not touch the target.
    AccessDenied,
    /// `org.freedesktop.DBus.Error.InvalidArgs`: a bad option or argument.
    InvalidArgs,
}

impl ErrorKind {
    /// Every kind.
    pub const ALL: [ErrorKind; 11] = [
        ErrorKind::NoSuchProcess,
        ErrorKind::NotPermitted,
        ErrorKind::FunctionNotFound,
        ErrorKind::Ambiguous,
        ErrorKind::AlreadyHooked,
        ErrorKind::NotHooked,
        ErrorKind::Unsafe,
        ErrorKind::Busy,
        ErrorKind::Failed,
        ErrorKind::AccessDenied,
        ErrorKind::InvalidArgs,
    ];

    /// The D-Bus error name.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::NoSuchProcess => "org.argstash.Error.NoSuchProcess",
            ErrorKind::NotPermitted => "org.argstash.Error.NotPermitted",
            ErrorKind::FunctionNotFound => "org.argstash.Error.FunctionNotFound",
            ErrorKind::Ambiguous => "org.argstash.Error.Ambiguous",
            ErrorKind::AlreadyHooked => "org.argstash.Error.AlreadyHooked",
            ErrorKind::NotHooked => "org.argstash.Error.NotHooked",
            ErrorKind::Unsafe => "org.argstash.Error.Unsafe",
            ErrorKind::Busy => "org.argstash.Error.Busy",
            ErrorKind::Failed => "org.argstash.Error.Failed",
            ErrorKind::AccessDenied => "org.freedesktop.DBus.Error.AccessDenied",
            ErrorKind::InvalidArgs => "org.freedesktop.DBus.Error.InvalidArgs",
        }
    }

    /// The kind with this D-Bus error name, if any.
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `ErrorHint::kind`: eject the function's hook first (`function`, `arena`, `slot`).
pub const HINT_EJECT_FIRST: &str = "eject-first";
/// `ErrorHint::kind`: give the stack window with [`OPT_STACK_ARGS`] (0 to `max`).
pub const HINT_GIVE_STACK_WINDOW: &str = "give-stack-window";
/// `ErrorHint::kind`: pick one of the same-named functions by its entry address.
pub const HINT_PICK_BY_ADDRESS: &str = "pick-by-address";
/// `ErrorHint::kind`: give the function's entry address `entry` instead.
pub const HINT_USE_ENTRY: &str = "use-entry";
/// `ErrorHint::kind`: hook an indirect function's implementation by its own name or address.
pub const HINT_NAME_IMPLEMENTATION: &str = "name-implementation";
/// `ErrorHint::kind`: hook the implementations in `functions` instead (`unnamed`:
/// some have no symbol, and only debug symbols can name them).
pub const HINT_HOOK_IMPLEMENTATIONS: &str = "hook-implementations";
/// `ErrorHint::kind`: several functions go by the name given: give one of
/// `functions` alone instead (`read-as`: what could be read of a malformed name,
/// which names those functions).
pub const HINT_WRITE_ONE_ALONE: &str = "write-one-alone";
/// `ErrorHint::kind`: leave out the option `option` (an `Inject` option key).
pub const HINT_LEAVE_OUT: &str = "leave-out";

/// What a caller can do about a failed call, in terms of its request: the second
/// argument of an error reply (`a{sv}`, keys in kebab-case), sent when the daemon
/// knows. The first argument, the message, already says it in D-Bus terms; a
/// client with its own syntax (the CLI's flags) rewords it from `kind` and the
/// keys that kind names, after `text`. Clients ignore kinds and keys they do not know.
#[derive(Debug, Clone, Default, PartialEq, Eq, SerializeDict, DeserializeDict, Type)]
#[zvariant(signature = "a{sv}", rename_all = "kebab-case")]
pub struct ErrorHint {
    /// Which hint (`HINT_*`).
    pub kind: Option<String>,
    /// The message without the hint.
    pub text: Option<String>,
    /// A function name.
    pub function: Option<String>,
    /// An arena address.
    pub arena: Option<u64>,
    /// A slot in that arena.
    pub slot: Option<u32>,
    /// The largest value allowed.
    pub max: Option<u16>,
    /// A function's entry address.
    pub entry: Option<u64>,
    /// Functions to give instead, as `MODULE!NAME` or as names that name them alone.
    pub functions: Option<Vec<String>>,
    /// What could be read of a malformed function name.
    pub read_as: Option<String>,
    /// Some of the code has no symbol.
    pub unnamed: Option<bool>,
    /// An option key.
    pub option: Option<String>,
}

/// An error of an `argstashd` call: a named service error, or a transport error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The daemon refused or failed the call.
    #[error("{message}")]
    Service {
        /// Which error.
        kind: ErrorKind,
        /// Human-readable message, its hint worded for D-Bus callers.
        message: String,
        /// The hint, typed, when the daemon gave one.
        hint: Option<Box<ErrorHint>>,
    },
    /// Talking to the bus failed, or the reply carried an unknown error.
    #[error(transparent)]
    ZBus(zbus::Error),
}

impl Error {
    /// A service error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error::Service {
            kind,
            message: message.into(),
            hint: None,
        }
    }

    /// A service error of `kind` whose message ends with a hint that `hint` types.
    pub fn with_hint(kind: ErrorKind, message: impl Into<String>, hint: ErrorHint) -> Error {
        Error::Service {
            kind,
            message: message.into(),
            hint: Some(Box::new(hint)),
        }
    }

    /// The typed hint, when the daemon gave one.
    pub fn hint(&self) -> Option<&ErrorHint> {
        match self {
            Error::Service { hint, .. } => hint.as_deref(),
            Error::ZBus(_) => None,
        }
    }

    /// The service error kind, `None` for transport errors.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Error::Service { kind, .. } => Some(*kind),
            Error::ZBus(_) => None,
        }
    }
}

impl From<zbus::Error> for Error {
    fn from(e: zbus::Error) -> Error {
        let known = match &e {
            zbus::Error::MethodError(name, desc, reply) => {
                ErrorKind::from_name(name.as_str()).map(|k| {
                    // A second argument, when there is one, is the typed hint.
                    let hint = reply
                        .body()
                        .deserialize::<(String, ErrorHint)>()
                        .ok()
                        .map(|(_, hint)| Box::new(hint));
                    (k, desc.clone().unwrap_or_default(), hint)
                })
            }
            zbus::Error::FDO(f) => {
                let f: &zbus::fdo::Error = f;
                ErrorKind::from_name(DBusError::name(f).as_str()).map(|k| {
                    let message = DBusError::description(f).unwrap_or_default().to_string();
                    (k, message, None)
                })
            }
            _ => None,
        };
        match known {
            Some((kind, message, hint)) => Error::Service {
                kind,
                message,
                hint,
            },
            None => Error::ZBus(e),
        }
    }
}

impl From<zbus::fdo::Error> for Error {
    fn from(e: zbus::fdo::Error) -> Error {
        Error::from(zbus::Error::FDO(Box::new(e)))
    }
}

impl DBusError for Error {
    fn create_reply(&self, call: &Header<'_>) -> zbus::Result<Message> {
        match self {
            Error::Service {
                message,
                hint: None,
                ..
            } => Message::error(call, self.name())?.build(&(message.as_str(),)),
            Error::Service {
                message,
                hint: Some(hint),
                ..
            } => Message::error(call, self.name())?.build(&(message.as_str(), hint.as_ref())),
            Error::ZBus(e) => Message::error(call, self.name())?.build(&(e.to_string(),)),
        }
    }

    fn name(&self) -> ErrorName<'_> {
        match self {
            Error::Service { kind, .. } => ErrorName::from_static_str_unchecked(kind.name()),
            Error::ZBus(_) => ErrorName::from_static_str_unchecked("org.argstash.Error.Failed"),
        }
    }

    fn description(&self) -> Option<&str> {
        match self {
            Error::Service { message, .. } => Some(message),
            Error::ZBus(_) => None,
        }
    }
}

/// Options dictionary (`a{sv}`) of `Inject` and `Backtrace`.
pub type Options<'a> = HashMap<&'a str, Value<'a>>;

/// The manager object: inject, eject, list and unwind.
#[proxy(
    interface = "org.argstash.Injector1",
    default_service = "org.argstash.Injector1",
    default_path = "/org/argstash/Injector1",
    gen_blocking = true
)]
pub trait Injector1 {
    /// Hooks `functions` (NAME, MODULE!NAME or 0xADDR) in `pid`; returns the new hook objects.
    fn inject(
        &self,
        pid: u32,
        functions: &[&str],
        options: Options<'_>,
    ) -> Result<Vec<OwnedObjectPath>, Error>;

    /// Like `Inject`, and returns what the install did (the CLI's `inject` output).
    fn inject_with_report(
        &self,
        pid: u32,
        functions: &[&str],
        options: Options<'_>,
    ) -> Result<InstallReport, Error>;

    /// Removes the hooks of `functions` in `pid`; returns how many were removed.
    fn eject(&self, pid: u32, functions: &[&str]) -> Result<u32, Error>;

    /// Like `Eject`, and returns what the eject did (the CLI's `eject` output).
    fn eject_with_report(&self, pid: u32, functions: &[&str]) -> Result<EjectReport, Error>;

    /// Like `EjectAll`, and returns what the eject did (the CLI's `eject --all` output).
    fn eject_all_with_report(&self, pid: u32) -> Result<EjectReport, Error>;

    /// Which other unwinders (libgcc, gdb JIT, perf) know each active hook of `pid`.
    fn unwind_status(&self, pid: u32) -> Result<UnwindStatus, Error>;

    /// Removes every active hook in `pid`; returns how many were removed.
    fn eject_all(&self, pid: u32) -> Result<u32, Error>;

    /// Lists the hooks recorded in `pid` (0: every process with hooks the caller may see).
    fn list_hooks(&self, pid: u32) -> Result<Vec<HookEntry>, Error>;

    /// Unwinds thread `tid` of `pid` (0: every thread) with stashed arguments.
    fn backtrace(&self, pid: u32, tid: u32, options: Options<'_>) -> Result<Vec<Thread>, Error>;

    /// The daemon's version.
    #[zbus(property)]
    fn version(&self) -> zbus::Result<String>;

    /// Active hooks in every process the daemon tracks.
    #[zbus(property)]
    fn hook_count(&self) -> zbus::Result<u32>;

    /// Processes with active hooks.
    #[zbus(property)]
    fn pids(&self) -> zbus::Result<Vec<u32>>;

    /// A hook object appeared.
    #[zbus(signal)]
    fn hook_installed(&self, hook: OwnedObjectPath) -> zbus::Result<()>;

    /// A hook object went away (ejected, or its process exec'd).
    #[zbus(signal)]
    fn hook_removed(&self, hook: OwnedObjectPath) -> zbus::Result<()>;

    /// A tracked process exited; `hooks` are the objects it took with it.
    #[zbus(signal)]
    fn process_exited(&self, pid: u32, hooks: Vec<OwnedObjectPath>) -> zbus::Result<()>;
}

/// One hook object under [`HOOKS_PATH`].
#[proxy(
    interface = "org.argstash.Hook1",
    default_service = "org.argstash.Injector1",
    gen_blocking = true
)]
pub trait Hook1 {
    /// Removes this hook.
    fn eject(&self) -> Result<(), Error>;

    /// Process id.
    #[zbus(property)]
    fn pid(&self) -> zbus::Result<u32>;

    /// Function name.
    #[zbus(property)]
    fn function(&self) -> zbus::Result<String>;

    /// Module path.
    #[zbus(property)]
    fn module(&self) -> zbus::Result<String>;

    /// Function entry address.
    #[zbus(property)]
    fn address(&self) -> zbus::Result<u64>;

    /// `active` or `ejected`.
    #[zbus(property)]
    fn state(&self) -> zbus::Result<String>;

    /// Install time, Unix nanoseconds.
    #[zbus(property)]
    fn installed_at(&self) -> zbus::Result<u64>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_names_round_trip() {
        for k in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_name(k.name()), Some(k));
        }
        let e = Error::new(ErrorKind::Busy, "try later");
        assert_eq!(e.name().as_str(), "org.argstash.Error.Busy");
        assert_eq!(e.to_string(), "try later");
    }

    #[test]
    fn a_hint_travels_as_the_second_argument_of_the_error_reply() {
        let call = Message::method_call(MANAGER_PATH, "Inject")
            .unwrap()
            .destination(BUS_NAME)
            .unwrap()
            .build(&())
            .unwrap();
        let hint = ErrorHint {
            kind: Some(HINT_USE_ENTRY.into()),
            text: Some("0x1001 is inside f+0x1".into()),
            entry: Some(0x1000),
            ..Default::default()
        };
        let sent = Error::with_hint(
            ErrorKind::FunctionNotFound,
            "0x1001 is inside f+0x1: give 0x1000",
            hint.clone(),
        );
        let reply = sent.create_reply(&call.header()).unwrap();
        let got = Error::from(zbus::Error::from(reply));
        assert_eq!(got.kind(), Some(ErrorKind::FunctionNotFound));
        // Clients that know nothing of hints still read the message first.
        assert_eq!(got.to_string(), "0x1001 is inside f+0x1: give 0x1000");
        assert_eq!(got.hint(), Some(&hint));
        // A reply without one reads as no hint.
        let plain = Error::new(ErrorKind::Busy, "try later")
            .create_reply(&call.header())
            .unwrap();
        let got = Error::from(zbus::Error::from(plain));
        assert_eq!((got.kind(), got.hint()), (Some(ErrorKind::Busy), None));
    }

    #[test]
    fn reports_are_dictionaries_that_tolerate_unknown_and_missing_keys() {
        use zbus::zvariant::{serialized::Context, to_bytes, LE};
        assert_eq!(UnwindReport::SIGNATURE.to_string(), "a{sv}");
        assert_eq!(InstallReport::SIGNATURE.to_string(), "a{sv}");
        assert_eq!(EjectReport::SIGNATURE.to_string(), "a{sv}");
        assert_eq!(UnwindStatus::SIGNATURE.to_string(), "a{sv}");
        let report = InstallReport {
            stopped_us: Some(12),
            new_arenas: Some(vec![0x7f00]),
            unwind: Some(UnwindReport {
                notes: Some(vec!["skipped".into()]),
                registered: Some(1),
                ..Default::default()
            }),
            ..Default::default()
        };
        let ctxt = Context::new_dbus(LE, 0);
        let bytes = to_bytes(ctxt, &report).unwrap();
        let back: InstallReport = bytes.deserialize().unwrap().0;
        assert_eq!(back, report);
        // A newer daemon's key is ignored; a key it does not send reads as None.
        let mut dict: HashMap<&str, Value> = HashMap::new();
        dict.insert("stopped-us", Value::from(5u64));
        dict.insert("some-future-key", Value::from("x"));
        let bytes = to_bytes(ctxt, &dict).unwrap();
        let back: EjectReport = bytes.deserialize().unwrap().0;
        assert_eq!(back.stopped_us, Some(5));
        assert_eq!(back.hooks, None);
    }

    #[test]
    fn signatures_are_readable_structs() {
        let param = "(sssssbt)";
        assert_eq!(Param::SIGNATURE.to_string(), param);
        assert_eq!(Arg::SIGNATURE.to_string(), format!("(stt{param})"));
        assert_eq!(Inlined::SIGNATURE.to_string(), format!("(ssua{param})"));
        let frame = format!("(utstsbsta(stt{param})bssua{param}a(ssua{param})sttt)");
        assert_eq!(Frame::SIGNATURE.to_string(), frame);
        let py_frame = "(ssia(ssss)sitbtitsbstx)";
        assert_eq!(PyFrame::SIGNATURE.to_string(), py_frame);
        assert_eq!(
            Thread::SIGNATURE.to_string(),
            format!("(ustbtsa{frame}ba{py_frame}as)")
        );
        assert_eq!(HookEntry::SIGNATURE.to_string(), "(oussttuttuqstbbss)");
        assert_eq!(
            hook_path(42, 0x7f00, 3).as_str(),
            "/org/argstash/Injector1/hooks/p42_7f00_3"
        );
    }
}
