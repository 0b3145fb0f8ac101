//! The live-process side of argstash.
//!
//! Attaches to a running process over ptrace, finds functions by symbol, places an
//! arena of trampolines near them, patches function entries, and reads stacks back
//! with the stashed arguments. The library is the product; the `argstash` binary and
//! the daemon are thin drivers of the same API:
//!
//! - [`hooks::install`], [`hooks::eject`], [`hooks::list`]
//! - [`backtrace::backtrace`], and [`core::backtrace_core`] for core files
//!
//! Every operation checks its target first ([`target::check_target`]), does slow work
//! (symbols, code generation) before stopping the process, and leaves the process
//! exactly as it was when it fails.

pub mod abi;
pub mod arch;
pub mod arena;
pub mod args;
pub mod args_i386;
pub mod backtrace;
pub mod backtrace_i386;
pub mod core;
pub mod debuginfo;
pub mod error;
pub mod foreign_unwind;
pub mod gdb_jit;
pub mod hooks;
pub mod maps;
pub mod memory;
pub mod perf_jit;
pub mod remote;
pub mod remote_call;
pub mod safe_point;
pub mod session;
pub mod sigframe;
pub mod symbols;
pub mod target;

pub use error::Error;
