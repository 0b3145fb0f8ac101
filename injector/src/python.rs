//! The Python hook: CPython's frame evaluator `_PyEval_EvalFrameDefault`, hooked
//! like any function with the ordinary stash trampoline (`inject --python`).
//!
//! Its stash holds `(tstate, frame, throwflag)`, so a backtrace pairs each native
//! evaluator frame with exactly the Python frames it runs (see
//! [`reader::python::StackReader`]). Nothing runs in the interpreter and no PEP 523
//! slot is touched, so CPython keeps inlining Python-to-Python calls.
//!
//! The PEP 523 extension (`pep523-ext`, `import argstash`) records *call-through*
//! hooks in the same arenas; they name the evaluator too but patch nothing.
//! [`HookInfo::is_call_through`] and [`HookInfo::is_python`] tell the two apart.

use reader::procfs::read_maps;
use reader::python::{Interpreter, EVAL_FRAME_FUNCTION};
use reader::symbols::{FuncSpec, ProcessSymbols};

use crate::error::{Error, PythonHookRefusal};
use crate::hooks::{HookInfo, HookTarget};
use crate::memory::ProcessMemory;
use crate::target::{check_target, Access};
use reader::ids::Pid;

/// The hook `inject --python` installs in process `pid`: on the evaluator of its
/// CPython, in libpython or in the executable; give it to [`crate::install`].
///
/// Reads only (maps, symbols, a few words of memory): a process that is not a
/// CPython, or whose version has no known layout, is refused before anything
/// touches it ([`Error::Python`]); so is a CPython 3.12 or later, whose
/// backtraces pair exactly without the hook ([`Error::PythonHookRefused`]).
pub fn python_hook(pid: Pid) -> Result<HookTarget, Error> {
    let pid = pid.as_raw();
    check_target(pid, Access::Stop)?;
    let maps = read_maps(pid).map_err(|source| Error::Proc {
        path: format!("/proc/{pid}/maps"),
        source,
    })?;
    let symbols = ProcessSymbols::load(pid, &maps)?;
    let mem = ProcessMemory::open(pid)?;
    // The version decides first: from 3.12 the hook is refused whatever the reader
    // can do with that version's frames.
    let located =
        reader::python::locate(&symbols, &mem).map_err(|source| Error::Python { pid, source })?;
    let attached = Interpreter::attach(&symbols, &mem);
    if let Some(reason) = PythonHookRefusal::for_version(located.version) {
        return Err(Error::PythonHookRefused {
            pid,
            version: located.version,
            reason,
            unreadable: attached.err(),
        });
    }
    let interp = attached.map_err(|source| Error::Python { pid, source })?;
    Ok(HookTarget::new(FuncSpec::Qualified {
        module: interp.module().to_string(),
        name: EVAL_FRAME_FUNCTION.to_string(),
    }))
}

impl HookInfo {
    /// A call-through hook (the PEP 523 extension's): reached through a function
    /// pointer its owner set, nothing patched, nothing argstash can eject.
    pub fn is_call_through(&self) -> bool {
        self.patch_addr == 0 && self.patch_len == 0
    }

    /// The Python hook: a patched entry of CPython's frame evaluator (`inject --python`).
    pub fn is_python(&self) -> bool {
        !self.is_call_through() && self.name == EVAL_FRAME_FUNCTION
    }
}
