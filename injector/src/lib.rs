//! The live-process side of argstash.
//!
//! Attaches to a running process over ptrace, finds functions by symbol, places an
//! arena of trampolines near them, patches function entries, and reads stacks back
//! with the stashed arguments. Reading without ptrace (symbols, DWARF, unwinding,
//! core files) is the [`reader`] crate. The library is the product; the `argstash`
//! binary and the daemon are thin drivers of the same API:
//!
//! - [`hooks::install`], [`hooks::eject`], [`hooks::list`]
//! - [`backtrace::backtrace`], and [`reader::core::backtrace_core`] for core files
//!
//! Every operation checks its target first ([`target::check_target`]), does slow work
//! (symbols, code generation) before stopping the process, and leaves the process
//! exactly as it was when it fails.

pub mod arch;
pub mod backtrace;
pub mod error;
pub mod foreign_unwind;
pub mod hooks;
pub mod memory;
pub mod ptrace;
pub mod python;
pub mod target;

pub use error::Error;
pub use reader;
