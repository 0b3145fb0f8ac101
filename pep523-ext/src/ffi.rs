//! The PEP 523 API of CPython 3.11, and the layout facts this module relies on.
//!
//! Function pointers cross this boundary as `usize`: a pointer-sized integer is
//! passed and returned exactly like a function pointer in the SysV x86-64 ABI,
//! and every comparison and record here wants the address anyway.

use pyo3::ffi::{PyInterpreterState, PyObject};

extern "C" {
    /// The interpreter's frame-evaluation function; `_PyEval_EvalFrameDefault` when none is set.
    fn _PyInterpreterState_GetEvalFrameFunc(interp: *mut PyInterpreterState) -> usize;
    /// Sets it; CPython 3.11 stores NULL when given `_PyEval_EvalFrameDefault`.
    fn _PyInterpreterState_SetEvalFrameFunc(interp: *mut PyInterpreterState, eval_frame: usize);
    /// CPython's own frame evaluator (only its address is used).
    fn _PyEval_EvalFrameDefault();
}

/// Offset of `f_frame` (the `_PyInterpreterFrame *` a frame object runs) in 3.11's
/// `PyFrameObject`: after `PyObject_HEAD` (16 bytes) and `f_back`. Checked against
/// the interpreter's own struct by the tests (the C fixture's `frame_address`).
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
    // SAFETY: a 3.11 frame object holds its `f_frame` pointer at this offset.
    Some(unsafe { *(frame as *const u8).add(FRAME_F_FRAME).cast::<usize>() })
}
