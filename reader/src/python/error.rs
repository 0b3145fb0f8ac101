//! What can go wrong finding and reading a CPython interpreter in a target.

use thiserror::Error;

use crate::memory::MemoryError;
use crate::symbols::SymbolError;

use super::debug_offsets::OffsetsProblem;
use super::release::PythonVersion;

/// Why a process's CPython state cannot be read.
#[derive(Debug, Error)]
pub enum PythonError {
    /// No mapped module has CPython's frame evaluator (`_PyEval_EvalFrameDefault`).
    #[error(
        "process {pid} is not a CPython interpreter (no module defines _PyEval_EvalFrameDefault)"
    )]
    NotPython {
        /// The process.
        pid: i32,
    },
    /// The interpreter module was found but a data symbol the reader needs is missing.
    #[error("{module} looks like CPython but does not export {symbol}")]
    MissingSymbol {
        /// Path of the module with the evaluator.
        module: String,
        /// The symbol (`_PyRuntime`).
        symbol: &'static str,
    },
    /// The interpreter's version could be found neither in memory nor in a file name.
    #[error("cannot tell the CPython version of {module}: no Py_Version symbol and no version in its file name")]
    UnknownVersion {
        /// Path of the module with the evaluator.
        module: String,
    },
    /// A 32-bit interpreter: the tables describe 64-bit builds only.
    #[error("{module} is a 32-bit CPython; only 64-bit layouts are known")]
    Not64Bit {
        /// Path of the module with the evaluator.
        module: String,
    },
    /// The version has no layout table.
    #[error("{}", no_layout_message(.version, .known, *.debug_offsets))]
    NoLayout {
        /// The version found.
        version: PythonVersion,
        /// The versions whose layouts this reader knows (`3.11, 3.13, ...`).
        known: &'static str,
        /// The interpreter publishes `_Py_DebugOffsets`, but the order of their
        /// fields in this version is not known (it is never guessed).
        debug_offsets: bool,
    },
    /// The interpreter's `_Py_DebugOffsets` (3.13+) cannot be used.
    #[error("CPython {version}: its _Py_DebugOffsets (at _PyRuntime, 0x{runtime:x}) cannot be used: {problem}; only native frames can be shown")]
    DebugOffsets {
        /// The version found (from `Py_Version` or the file name).
        version: PythonVersion,
        /// Address of `_PyRuntime`.
        runtime: u64,
        /// What is wrong.
        problem: OffsetsProblem,
    },
    /// The interpreter's file (the executable or libpython) was deleted or
    /// replaced on disk after the process mapped it, and cannot be read as mapped.
    #[error("the CPython interpreter cannot be read: {source}; only native frames can be shown")]
    FileReplaced {
        /// Why the mapped file cannot be read, with the fix.
        #[source]
        source: std::sync::Arc<SymbolError>,
    },
    /// Reading the interpreter's global state failed.
    #[error("cannot read CPython's runtime state: {0}")]
    Memory(#[from] MemoryError),
}

fn no_layout_message(version: &PythonVersion, known: &str, debug_offsets: bool) -> String {
    let mut s = format!(
        "CPython {version} has no known memory layout (known: {known}); only native frames can be shown"
    );
    if debug_offsets {
        s.push_str(" (it publishes _Py_DebugOffsets, but their order of fields in this version is not known here, and is never guessed)");
    }
    s
}
