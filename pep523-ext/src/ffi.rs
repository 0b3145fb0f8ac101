//! The PEP 523 API of CPython 3.11 and 3.13-3.15, and the layout facts this module relies on.
//!
//! Checked in each version's own headers (Debian's python3.1X-dev): the API is the
//! same in all four. `_PyFrameEvalFunction` is
//! `PyObject *(*)(PyThreadState *, struct _PyInterpreterFrame *, int throwflag)`
//! (`cpython/pystate.h`; 3.15 unchanged), and `_PyInterpreterState_GetEvalFrameFunc`
//! / `_PyInterpreterState_SetEvalFrameFunc` are exported with it. These are
//! private (underscore) API outside the limited API, which is why there is no abi3
//! build: the module is built once per minor version (`ffi::BUILT_FOR`).
//!
//! Function pointers cross this boundary as `usize`: a pointer-sized integer is
//! passed and returned exactly like a function pointer in the SysV x86-64 ABI,
//! and every comparison and record here wants the address anyway.

/// The CPython minor version this build is for ("3.14"), from pyo3's build configuration.
pub const BUILT_FOR: &str = env!("ARGSTASH_PYTHON_BUILT_FOR");

// Free-threaded CPython (3.13t and later) has a larger object header, so the
// offset below is wrong there, and its eval-function switch is not serialised by
// a GIL. The package refuses such an interpreter at import (`_support.py`); a
// build for one stops here.
#[cfg(Py_GIL_DISABLED)]
compile_error!(
    "argstash's PEP 523 hook does not support free-threaded CPython (built with Py_GIL_DISABLED): build it for the default (GIL) build"
);

use pyo3::ffi::{PyInterpreterState, PyObject};

extern "C" {
    /// The interpreter's frame-evaluation function; `_PyEval_EvalFrameDefault` when none is set.
    fn _PyInterpreterState_GetEvalFrameFunc(interp: *mut PyInterpreterState) -> usize;
    /// Sets it; CPython stores NULL when given `_PyEval_EvalFrameDefault` (3.11-3.15).
    fn _PyInterpreterState_SetEvalFrameFunc(interp: *mut PyInterpreterState, eval_frame: usize);
    /// CPython's own frame evaluator (only its address is used).
    fn _PyEval_EvalFrameDefault();
}

/// Offset of `f_frame` (the `_PyInterpreterFrame *` a frame object runs) in
/// `PyFrameObject` (`struct _frame`, `internal/pycore_frame.h`): after
/// `PyObject_HEAD` (16 bytes in a GIL build) and `f_back`, in 3.11, 3.13, 3.14 and
/// 3.15 alike. Checked against each interpreter's own struct by the tests (the C
/// fixture's `frame_address`, compiled with that version's headers).
pub const FRAME_F_FRAME: usize = 24;

/// The interpreter of the calling thread.
///
/// # Safety
/// The caller holds the GIL.
pub unsafe fn interpreter() -> *mut PyInterpreterState {
    // SAFETY: the caller holds the GIL, so the thread has a current interpreter.
    unsafe { pyo3::ffi::PyInterpreterState_Get() }
}

/// Address of the interpreter's current frame-evaluation function (the default's when unset).
///
/// # Safety
/// `interp` is a live interpreter and the caller holds its GIL.
pub unsafe fn eval_frame(interp: *mut PyInterpreterState) -> usize {
    // SAFETY: per this function's contract; the call only reads `interp->eval_frame`.
    unsafe { _PyInterpreterState_GetEvalFrameFunc(interp) }
}

/// Makes `function` the interpreter's frame-evaluation function.
///
/// # Safety
/// `interp` is a live interpreter, the caller holds its GIL, and `function` is the
/// default's address or code with the `_PyFrameEvalFunction` signature that stays
/// mapped for as long as any thread may call it.
pub unsafe fn set_eval_frame(interp: *mut PyInterpreterState, function: usize) {
    // SAFETY: per this function's contract; the call stores one pointer in `interp`.
    unsafe { _PyInterpreterState_SetEvalFrameFunc(interp, function) }
}

/// Address of `_PyEval_EvalFrameDefault`.
pub fn default_eval_frame() -> usize {
    _PyEval_EvalFrameDefault as *const () as usize
}

/// The `_PyInterpreterFrame` a frame object runs, or `None` for another object.
///
/// # Safety
/// `frame` is a live object and the caller holds the GIL.
pub unsafe fn interpreter_frame(frame: *mut PyObject) -> Option<usize> {
    // SAFETY: `frame` is a live object (contract), so its type can be read.
    if unsafe { pyo3::ffi::PyFrame_Check(frame) } == 0 {
        return None;
    }
    // SAFETY: a frame object of a GIL build (3.11, 3.13-3.15) holds its `f_frame`
    // pointer at this offset.
    Some(unsafe { *(frame as *const u8).add(FRAME_F_FRAME).cast::<usize>() })
}
