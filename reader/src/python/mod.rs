//! Reading CPython's state from a target's memory: threads, Python frames, their
//! arguments, and the pairing with native evaluator frames.
//!
//! Pure reading, like the rest of the crate: everything goes through a
//! [`Memory`] and the process's [`ProcessSymbols`], so a live process and a core
//! file read alike. The pieces, each in a file of its own:
//!
//! - `version`: which module is the interpreter (libpython or the executable),
//!   its version, `_PyRuntime` and the builtin type objects.
//! - `debug_offsets`: the interpreter's own `_Py_DebugOffsets` (3.13+), parsed
//!   and checked.
//! - `layout`: every layout fact: a whole table for 3.11; for 3.13, 3.14 and
//!   3.15 the debug offsets plus a small table of what they do not carry.
//! - `threads`: interpreters and thread states, each with its OS thread id and
//!   innermost frame.
//! - `frames`: a frame chain outward, with names, files, lines (`linetable`)
//!   and arguments (`value`).
//! - `pair`: which native `_PyEval_EvalFrameDefault` frame runs which Python frames.
//! - `stack`: one thread's Python frames placed among its native frames (what `bt` shows).
//!
//! A backtrace of a Python process, per OS thread:
//!
//! ```no_run
//! # use reader::python::{Interpreter, NativeEval};
//! # fn bt(symbols: &reader::symbols::ProcessSymbols, mem: &dyn reader::memory::Memory,
//! #       tid: u64, native: &[NativeEval]) -> Result<(), reader::python::PythonError> {
//! let interp = Interpreter::attach(symbols, mem)?;
//! let walk = interp.threads(mem)?;
//! let mut frames = interp.frame_reader(mem);
//! if let Some(frame) = walk.for_tid(tid).and_then(|t| t.current_frame) {
//!     let chain = frames.chain(frame, 512);
//!     let pairing = chain.pair_with(native);
//!     for m in pairing.interleave(native.len()) { /* print */ }
//! }
//! # Ok(()) }
//! ```
//!
//! The native side names an evaluator frame by its function,
//! [`EVAL_FRAME_FUNCTION`]; a hook's stash of it holds `(tstate, frame,
//! throwflag)`, so the `frame` pointer is stashed argument [`EVAL_FRAME_ARG`].

mod debug_offsets;
mod error;
mod frames;
mod layout;
mod linetable;
mod pair;
mod release;
mod stack;
mod threads;
mod value;
mod version;

#[cfg(test)]
mod testmem;

// The modules are private; what a caller needs of them is here.
pub use debug_offsets::{
    probe as probe_debug_offsets, DebugOffsets, MAX_LEN as DEBUG_OFFSETS_MAX_LEN,
};
pub use error::PythonError;
pub use frames::{ChainEnd, FrameChain, FrameOwner, FrameReader, ParamKind, PyFrame, PyParam};
pub use layout::{facts_for, Layout, PY311};
pub use pair::{pair, Merged, NativeEval, PairedBy, Pairing, Placement, PyLink};
pub use stack::{
    param_kind_from_name, param_kind_name, InterpreterLabel, ProcessPython, PythonStack,
    StackFrame, StackReader, ThreadRead,
};
pub use threads::{walk_threads, ThreadState, ThreadWalk};
pub use value::{Objects, PyValue};
pub use version::{locate, BuiltinTypes, PythonVersion, VersionSource, EVAL_FRAME_FUNCTION};

use crate::memory::Memory;
use crate::symbols::ProcessSymbols;

use version::Located;

/// Index of the `frame` argument among `_PyEval_EvalFrameDefault`'s arguments
/// (`tstate`, `frame`, `throwflag`).
pub const EVAL_FRAME_ARG: usize = 1;

/// A CPython interpreter found in a process, with the layout to read it.
#[derive(Debug, Clone)]
pub struct Interpreter {
    located: Located,
    layout: Box<Layout>,
}

impl Interpreter {
    /// Finds the interpreter in a process and picks its layout.
    ///
    /// Fails with [`PythonError::NotPython`] when no module has CPython's
    /// evaluator, [`PythonError::NoLayout`] (naming the version) when the version
    /// has no table, [`PythonError::DebugOffsets`] when a 3.13+ interpreter's own
    /// offsets are missing, disagree with its version, or fail a check.
    pub fn attach(symbols: &ProcessSymbols, mem: &dyn Memory) -> Result<Interpreter, PythonError> {
        let located = version::locate(symbols, mem)?;
        let exact = located.version_source == version::VersionSource::PyVersion;
        let layout = layout::layout_for(mem, located.runtime, located.version, exact)?;
        Ok(Interpreter {
            located,
            layout: Box::new(layout),
        })
    }

    /// The interpreter's version.
    pub fn version(&self) -> PythonVersion {
        self.located.version
    }

    /// Path of the module holding the interpreter (libpython or the executable).
    pub fn module(&self) -> &str {
        &self.located.module
    }

    /// Runtime address of `_PyEval_EvalFrameDefault` (the function to hook).
    pub fn eval_frame_addr(&self) -> u64 {
        self.located.eval_frame
    }

    /// Everything found about the interpreter (addresses, version source).
    pub fn located(&self) -> &Located {
        &self.located
    }

    /// The layout in use.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Every interpreter's thread states, with their OS thread ids and innermost frames.
    pub fn threads(&self, mem: &dyn Memory) -> Result<ThreadWalk, PythonError> {
        threads::walk_threads(mem, &self.layout, self.located.runtime)
    }

    /// A frame reader for `mem`; keep it for all threads of one backtrace (it
    /// decodes each code object once).
    pub fn frame_reader<'a>(&'a self, mem: &'a dyn Memory) -> FrameReader<'a> {
        let objects = Objects::new(mem, &self.layout, &self.located.types);
        FrameReader::new(mem, &self.layout, objects)
    }

    /// Reads the frame chain from `frame` outward, at most `limit` frames.
    pub fn frames(&self, mem: &dyn Memory, frame: u64, limit: usize) -> FrameChain {
        self.frame_reader(mem).chain(frame, limit)
    }

    /// Shows the object at `obj` as Python's `repr` would (within limits).
    pub fn value(&self, mem: &dyn Memory, obj: u64) -> PyValue {
        Objects::new(mem, &self.layout, &self.located.types).value(obj)
    }
}

impl FrameChain {
    /// The frames as the pairing sees them.
    pub fn links(&self) -> Vec<PyLink> {
        self.frames
            .iter()
            .map(|f| PyLink {
                addr: f.addr,
                is_entry: f.is_entry,
                entry_frame: f.entry_frame,
            })
            .collect()
    }

    /// Pairs this chain with one thread's native frames (innermost first).
    pub fn pair_with(&self, native: &[NativeEval]) -> Pairing {
        pair(native, &self.links(), self.end == ChainEnd::Root)
    }
}
