//! argstash's live-process library: hook functions of a running process so that
//! their arguments stay recoverable, and read stacks back with those arguments.
//!
//! A hook patches a function's entry with a jump to a small generated trampoline
//! that pushes the argument registers into a self-describing stash frame and then
//! *calls* the function. While that call is live its arguments sit on the stack,
//! so any unwind (this crate's, gdb's, perf's, a crash reporter's) finds them.
//!
//! The few things a caller needs are here at the top:
//!
//! | Operation | Function | Options | Result |
//! |---|---|---|---|
//! | hook functions | [`install`] | [`InstallOptions`], [`HookTarget`] | [`InstallReport`] |
//! | remove hooks | [`eject`] | [`EjectOptions`] | [`EjectReport`] |
//! | list hooks | [`list`] | | [`HookInfo`] |
//! | read every thread's stack | [`backtrace`], [`ProcessReader`] (warm, for repeated reads) | [`BacktraceOptions`] | [`Backtrace`] |
//! | read a core file's stacks | [`backtrace_core`] on a [`CoreFile`] | [`BacktraceOptions`] | [`CoreBacktrace`] |
//! | hooks ejected when dropped | [`HookGuard::install`] | [`InstallOptions`] | [`HookGuard`] |
//! | start a command hooked, report its crashes | [`run::spawn`] | [`RunOptions`] | [`Running`], [`RunEvent`] |
//! | print a backtrace as `bt` does (text, JSON) | [`render::backtrace_text`], [`render::backtrace_json`] | [`render::View`] | `String`, `serde_json::Value` |
//!
//! Every operation checks its target first, does the slow work (symbols, code
//! generation) before stopping the process, stops every thread only for the
//! patch itself, and leaves the process exactly as it was when it fails; errors
//! are [`Error`], whose [`Error::hint`] says what the caller can do.
//!
//! Reading without ptrace (symbols, DWARF, argument types, unwinding from any
//! [`Memory`], core files, CPython frames) is the `reader` crate. It is not
//! re-exported: what the front ends need of it is here, in [`names`] (function
//! names, signatures, argument values), [`pyframes`] (CPython frames) and
//! [`process`] (`/proc` files, symbols, files in shared directories), beside
//! the backtrace and core types at the top.
//!
//! # Example
//!
//! Hook `clock_nanosleep` in a running `sleep`, see the hook, read its stack, and
//! take the hook out again (needs ptrace rights over the child, as the tests have):
//!
//! ```
//! use injector::{backtrace, eject, install, list, BacktraceOptions, EjectOptions, HookTarget, InstallOptions, Pid};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut child = std::process::Command::new("sleep").arg("30").spawn()?;
//! let pid = Pid::try_from(child.id())?;
//! # std::thread::sleep(std::time::Duration::from_millis(200));
//!
//! let report = install(pid, &["clock_nanosleep"], &InstallOptions::default())?;
//! println!("threads stopped for {:?}", report.stopped);
//! assert_eq!(list(pid)?.len(), 1);
//!
//! for thread in backtrace(pid, &BacktraceOptions::default())?.threads {
//!     for frame in &thread.frames {
//!         println!("{} {}", thread.tid, frame.function.as_deref().unwrap_or("??"));
//!     }
//! }
//!
//! eject(pid, &EjectOptions::all())?;
//! child.kill()?;
//! # child.wait()?;
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod arch;
mod backtrace;
mod error;
mod foreign_unwind;
mod guard;
mod hooks;
mod kernel_sampler;
mod memory;
mod ptrace;
mod python;
mod sample;
mod target;
mod unstopped;

// What the front ends need of the reader, and no more (the reader crate itself is
// not re-exported: its modules are the injector's business).
/// Function names, signatures and argument values as people write and read them.
pub mod names {
    pub use reader::args::{
        parse_params, split_function, split_signature, ArgSource, ArgValue, Signature,
        SignatureError, SyntaxReason,
    };
    pub use reader::debuginfo::demangle;
    pub use reader::symbols::{shown_name, AddressPlace, FuncSpec, IfuncTarget, SymbolError};
}
/// CPython frames as backtraces and samples carry them.
pub mod pyframes {
    pub use reader::python::{param_kind_from_name, param_kind_name, InterpreterLabel};
    pub use reader::python::{FrameOwner, ParamKind};
    pub use reader::python::{Merged, Placement};
    pub use reader::python::{
        PairedBy, PyFrame, PyParam, PyValue, PythonStack, StackFrame, EVAL_FRAME_FUNCTION,
    };
}
/// A process's `/proc` files and symbols, and files in shared directories opened safely.
pub mod process {
    pub use reader::procfs::{read_maps, read_task_comm};
    pub use reader::shared_file;
    pub use reader::symbols::ProcessSymbols;
}
pub use reader::core::CoreError;
pub use reader::ids::{IdError, Pid, Tid};

// Hooks.
pub use hooks::arena::ARENA_CAPACITY;
pub use hooks::window::WindowSource;
pub use hooks::{
    eject, install, list, EjectOptions, EjectReport, EjectWhat, HookInfo, HookTarget,
    InstallOptions, InstallReport, RipCensus,
};
pub use reader::args::Signature;
pub use reader::symbols::FuncSpec;
pub use trampolines::arena::HookState;

// Python: the native hook on CPython's frame evaluator.
pub use python::python_hook;

// Other unwinders fed through hooks (libgcc, gdb, perf).
pub use foreign_unwind::{
    list_status as unwind_status, CallPolicy, HookUnwindStatus, RemoteCalls, UnprotectedHooks,
    UnwindReport,
};

// Backtraces.
pub use backtrace::{
    backtrace, Backtrace, BacktraceOptions, Capture, Frame, FrameKind, InlinedFrame, ProcessReader,
    StashSlot, StashedArgs, StopReason, ThreadBacktrace,
};
// Sampling (a profiler's loop over one warm reader).
pub use kernel_sampler::{
    perf_event_paranoid, KernelError, KernelRecord, KernelSampler, KernelStats,
    STACK_COPY as KERNEL_STACK_COPY,
};
pub use reader::core::{
    backtrace_core, backtrace_core_cached, CoreBacktrace, CoreFile, CoreOptions,
};
pub use reader::coredump;
pub use reader::debugfile::DebugSearch;
pub use reader::debuginfo::DwarfCache;
pub use sample::{Lost, PythonRead, Round, Sample, SampleOptions, Sampler};

// Errors.
pub use error::{
    Change, Error, FarJumpRefusal, Hint, Operation, PythonHookRefusal, RequestOption, Since,
    UnprotectedReason, UnsureWindow, UNNAMED_CODE_ADVICE,
};
pub use ptrace::call::RemoteCallError;
pub use ptrace::session_error::{Refusal, SessionError, UnexpectedState};

// Lower level: a process's memory, and a ptrace session on it.
pub use memory::{Memory, MemoryError, ProcessMemory, WriteMemory};
pub use ptrace::realtime::Realtime;
pub use ptrace::requeue::{SignalFate, SignalOutcome};
pub use ptrace::session::{Released, Session};
pub use ptrace::xsave::{LayoutError, XsaveLayout};

/// True when every thread of `pid` is gone or a zombie: the process has ended.
pub fn process_ended(pid: Pid) -> bool {
    ptrace::wait::process_ended(pid.as_raw())
}

// Hooks ejected on drop.
pub use guard::HookGuard;

// Starting a command with hooks in place (`argstash run`).
pub mod run;
pub use run::{Report, ReportReason, RunError, RunEvent, RunOptions, Running};

// Rendering backtraces as `argstash bt` prints them (text and JSON).
pub mod render;

/// The hint of `error` when it is one of the library's errors (injector, `run` or
/// reader): front ends holding a type-erased error (an `anyhow` chain) ask this.
/// At the crate root because it knows every module's errors.
pub fn hint_of(error: &(dyn std::error::Error + 'static)) -> Option<Hint> {
    if let Some(e) = error.downcast_ref::<Error>() {
        e.hint()
    } else if let Some(run::RunError::Install(e)) = error.downcast_ref() {
        e.hint()
    } else if let Some(e) = error.downcast_ref::<reader::symbols::SymbolError>() {
        e.hint()
    } else if let Some(e) = error.downcast_ref::<reader::core::CoreError>() {
        e.hint()
    } else {
        None
    }
}
