//! `argstash._native`: a PEP 523 frame-evaluation function that is an argstash
//! stash trampoline (the Python side is `python/argstash/__init__.py`).
//!
//! [`install`] builds, in this process, the same call-through stash trampoline
//! that `argstash bt` rediscovers in any process (`trampolines::x86_64::call_through`,
//! arena format `trampolines::arena`) and makes it the interpreter's
//! frame-evaluation function. The trampoline stashes `tstate`, `frame` and
//! `throwflag` (rdi, rsi, rdx) in a stash frame and calls what was set before it:
//! another tool's PEP 523 function, or `_PyEval_EvalFrameDefault`. The hook
//! record's `function` is that target; the record has no patch bytes. So every
//! eval frame of a hooked process shows its arguments in `argstash bt --json`
//! (`"hooked": true`), with nothing special in the reader.
//!
//! The module also carries the library API for other processes (`api.rs`:
//! `argstash.inject`, `eject`, `backtrace`, `run`), which calls the `injector`
//! crate in this process.
//!
//! Tested on CPython 3.11 (a shared libpython and Debian's static one) and on
//! Debian's 3.13, 3.14 and 3.15 (default GIL builds); the module refuses to load on
//! any other version, and the package refuses free-threaded builds before loading
//! it (`python/argstash/_support.py`). It uses private API
//! (`_PyInterpreterState_SetEvalFrameFunc`) and the layout of `PyFrameObject`, so
//! there is no abi3 build: one build per minor version, each against that
//! version's full ABI (see `ffi`).
//!
//! # Why a workspace member
//!
//! It shares the workspace's lock file, target directory and `trampolines` build
//! (one resolution of dynasmrt and iced-x86, no second copy of the code
//! generator), and `cargo clippy --workspace --all-targets` lints it with the rest.
//! What breaks test binaries of pyo3 crates is the `extension-module` feature (it
//! leaves libpython's symbols undefined): here it is a crate feature that only
//! maturin turns on (`pyproject.toml`), so `cargo build --workspace` links the
//! cdylib against libpython like any embedding would. The crate has no Rust test
//! target (`test = false`): its behaviour is only observable inside a running
//! interpreter, so its tests are pytest (`pep523-ext/tests`); the code generation
//! it uses is unit-tested in `trampolines`.
//!
//! # Concurrency
//!
//! Every entry point runs with the GIL held, and the interpreter reads its
//! eval-frame pointer only with the GIL held, so switching it is atomic for every
//! Python thread, started before or after. The state lock below is only ever taken
//! with the GIL held, so `os.fork()` (which holds the GIL) never copies it locked.

mod api;
mod arena;
mod ffi;

use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::exceptions::{PyImportError, PyOSError, PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use trampolines::arena::HookState;
use trampolines::HookMeta;

use arena::Hook;

/// The (major, minor) versions this module was tested on (3.12: no interpreter could be obtained).
pub const TESTED: &[(u8, u8)] = &[(3, 11), (3, 13), (3, 14), (3, 15)];

/// Everything that can go wrong, each with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `uninstall()` without a matching `install()`.
    #[error("argstash is not installed (install() was not called, or uninstall() already ran); nothing changed")]
    NotInstalled,
    /// Another PEP 523 function replaced ours after `install()`.
    #[error("another PEP 523 frame-evaluation function ({current}) was set over argstash's after install(); {action} would drop it: remove it first (nothing changed)")]
    Overridden {
        /// Name and address of the current function.
        current: String,
        /// What was refused.
        action: &'static str,
    },
    /// Mapping or protecting the arena failed.
    #[error("cannot map the trampoline: {0}")]
    Map(#[from] region::Error),
    /// The page size is not the one the arena format is laid out for.
    #[error("page size {0} is not supported (the arena format needs 4096)")]
    PageSize(usize),
    /// The code generator refused.
    #[error("cannot generate the trampoline: {0}")]
    Codegen(#[from] trampolines::CodegenError),
    /// A record could not be encoded.
    #[error("cannot write the hook record: {0}")]
    Format(#[from] trampolines::FormatError),
}

impl From<Error> for PyErr {
    fn from(e: Error) -> PyErr {
        match e {
            Error::Map(_) | Error::PageSize(_) => PyOSError::new_err(e.to_string()),
            _ => PyRuntimeError::new_err(e.to_string()),
        }
    }
}

/// The hook currently installed by us.
#[derive(Debug, Clone, Copy)]
struct Active {
    /// Index into [`State::hooks`].
    hook: usize,
    /// The eval-frame function that was set before ours (restored by `uninstall`).
    previous: usize,
}

/// Every trampoline built in this process (one per distinct target, reused) and the active one.
#[derive(Debug)]
struct State {
    hooks: Vec<Hook>,
    active: Option<Active>,
}

static STATE: Mutex<State> = Mutex::new(State {
    hooks: Vec::new(),
    active: None,
});

/// The state; the GIL token proves the caller holds the GIL (see "Concurrency").
fn state(_py: Python<'_>) -> MutexGuard<'static, State> {
    STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// glibc's `dladdr1` flag asking for the symbol's table entry (`<dlfcn.h>`).
const RTLD_DL_SYMENT: libc::c_int = 1;

/// The symbol at exactly `addr` and its size, from the dynamic symbol tables.
fn symbol_at(addr: usize) -> Option<(String, u64)> {
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let mut sym: *mut libc::Elf64_Sym = std::ptr::null_mut();
    // SAFETY: dladdr1 only reads the loader's tables; `info` and `sym` are valid out-pointers.
    let found = unsafe {
        libc::dladdr1(
            addr as *const libc::c_void,
            &mut info,
            (&mut sym as *mut *mut libc::Elf64_Sym).cast(),
            RTLD_DL_SYMENT,
        )
    };
    if found == 0 || info.dli_sname.is_null() || info.dli_saddr as usize != addr {
        return None;
    }
    // SAFETY: dladdr1 succeeded, so `dli_sname` is a NUL-terminated string it owns.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_sname) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: with RTLD_DL_SYMENT, a non-null `sym` points at the symbol's table entry.
    let size = if sym.is_null() {
        0
    } else {
        unsafe { (*sym).st_size }
    };
    Some((name, size))
}

/// Path of the file mapped at `addr`, from `/proc/self/maps`.
fn module_of(addr: usize) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    maps.lines()
        .find_map(|line| {
            let mut fields = line.split_whitespace();
            let (start, end) = fields.next()?.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            let path = fields.nth(4)?;
            (start <= addr && addr < end).then(|| path.to_string())
        })
        .unwrap_or_default()
}

/// "NAME at 0xADDR in MODULE", as far as known.
fn describe(addr: usize) -> String {
    let name = symbol_at(addr).map_or_else(|| "an unnamed function".into(), |(n, _)| n);
    match module_of(addr) {
        m if m.is_empty() => format!("{name} at 0x{addr:x}"),
        m => format!("{name} at 0x{addr:x} in {m}"),
    }
}

/// The record's description of a trampoline calling `target`.
fn meta_for(target: usize) -> HookMeta {
    let (name, size) = symbol_at(target).unwrap_or_else(|| (format!("0x{target:x}"), 0));
    HookMeta {
        name,
        module: module_of(target),
        function_size: size,
        installed_ns: now_ns(),
        variadic: false,
    }
}

/// Sets argstash's frame-evaluation function; True if it installed, False if it already was.
///
/// The trampoline calls the function that was set before (another tool's PEP 523
/// hook, or CPython's default). Raises RuntimeError if our hook is installed but
/// another tool set its own over it since.
#[pyfunction]
fn install(py: Python<'_>) -> PyResult<bool> {
    let mut state = state(py);
    // SAFETY: `py` proves the GIL is held.
    let interp = unsafe { ffi::interpreter() };
    // SAFETY: the current interpreter, GIL held.
    let current = unsafe { ffi::eval_frame(interp) };
    if let Some(active) = state.active {
        if current == state.hooks[active.hook].entry() {
            return Ok(false);
        }
        return Err(Error::Overridden {
            current: describe(current),
            action: "installing argstash again on top",
        }
        .into());
    }
    let stamp = now_ns();
    // One of our own trampolines, set back by someone else: adopt it.
    if let Some(i) = state.hooks.iter().position(|h| h.entry() == current) {
        state.hooks[i].set_state(HookState::Active, stamp)?;
        let previous = state.hooks[i].target();
        state.active = Some(Active { hook: i, previous });
        return Ok(false);
    }
    let hook = match state.hooks.iter().position(|h| h.target() == current) {
        Some(i) => {
            state.hooks[i].set_state(HookState::Active, stamp)?;
            i
        }
        None => {
            state
                .hooks
                .push(Hook::create(current as u64, &meta_for(current))?);
            state.hooks.len() - 1
        }
    };
    // SAFETY: GIL held; the trampoline has the eval-frame signature (it passes every
    // argument register through to `current`, which has it) and is never unmapped.
    unsafe { ffi::set_eval_frame(interp, state.hooks[hook].entry()) };
    state.active = Some(Active {
        hook,
        previous: current,
    });
    Ok(true)
}

/// Puts back the frame-evaluation function that `install()` replaced.
///
/// Raises RuntimeError, changing nothing, when argstash is not installed or when
/// another tool set its own PEP 523 function over argstash's since. The
/// trampoline stays mapped (frames running now may still return into it).
#[pyfunction]
fn uninstall(py: Python<'_>) -> PyResult<()> {
    let mut state = state(py);
    let active = state.active.ok_or(Error::NotInstalled)?;
    // SAFETY: `py` proves the GIL is held.
    let interp = unsafe { ffi::interpreter() };
    // SAFETY: the current interpreter, GIL held.
    let current = unsafe { ffi::eval_frame(interp) };
    if current != state.hooks[active.hook].entry() {
        return Err(Error::Overridden {
            current: describe(current),
            action: "uninstalling argstash",
        }
        .into());
    }
    state.hooks[active.hook].set_state(HookState::Ejected, 0)?;
    // SAFETY: GIL held; `previous` was the interpreter's own function before ours.
    unsafe { ffi::set_eval_frame(interp, active.previous) };
    state.active = None;
    Ok(())
}

/// True while argstash's trampoline is the interpreter's frame-evaluation function.
#[pyfunction]
fn installed(py: Python<'_>) -> bool {
    let state = state(py);
    // SAFETY: `py` proves the GIL is held; the current interpreter.
    let current = unsafe { ffi::eval_frame(ffi::interpreter()) };
    state
        .active
        .is_some_and(|a| state.hooks[a.hook].entry() == current)
}

/// Addresses of the active (or last) hook, for tests and tools: arena, record,
/// trampoline, after_call, target, target name, previous; None before any install.
#[pyfunction]
fn _hook_info(py: Python<'_>) -> PyResult<Option<Bound<'_, PyDict>>> {
    let state = state(py);
    let (hook, previous) = match state.active {
        Some(a) => (&state.hooks[a.hook], Some(a.previous)),
        None => match state.hooks.last() {
            Some(h) => (h, None),
            None => return Ok(None),
        },
    };
    let d = PyDict::new(py);
    d.set_item("arena", hook.header.base)?;
    d.set_item("record", hook.header.record_addr(0))?;
    d.set_item("trampoline", hook.code.trampoline.address)?;
    d.set_item("after_call", hook.code.trampoline.after_call())?;
    d.set_item("target", hook.code.target)?;
    d.set_item("target_name", hook.code.record.name.clone())?;
    d.set_item("state", hook.code.record.state.name())?;
    d.set_item("previous", previous)?;
    d.set_item("default", ffi::default_eval_frame())?;
    d.set_item("arenas", state.hooks.len())?;
    Ok(Some(d))
}

/// Address of the `_PyInterpreterFrame` a frame object runs: the `frame` argument
/// its eval call received, which the trampoline stashes (debug helper for tests).
#[pyfunction]
fn _frame_address(frame: &Bound<'_, PyAny>) -> PyResult<usize> {
    // SAFETY: `frame` is a live object borrowed with the GIL held.
    unsafe { ffi::interpreter_frame(frame.as_ptr()) }
        .ok_or_else(|| PyTypeError::new_err("_frame_address() takes a frame object"))
}

/// Stash frames for every Python eval call, readable by `argstash bt` (CPython 3.11, 3.13-3.15).
#[pymodule(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let v = m.py().version_info();
    // A module built for one minor version never loads into another (the file name
    // carries the version tag), but a hand-copied one could: refuse it by name.
    if !TESTED.contains(&(v.major, v.minor)) || format!("{}.{}", v.major, v.minor) != ffi::BUILT_FOR
    {
        return Err(PyImportError::new_err(format!(
            "this argstash._native was built for CPython {}; this is {}.{}.{} (tested: {})",
            ffi::BUILT_FOR,
            v.major,
            v.minor,
            v.patch,
            TESTED
                .iter()
                .map(|(major, minor)| format!("{major}.{minor}"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    m.add_function(wrap_pyfunction!(install, m)?)?;
    m.add_function(wrap_pyfunction!(uninstall, m)?)?;
    m.add_function(wrap_pyfunction!(installed, m)?)?;
    m.add_function(wrap_pyfunction!(_hook_info, m)?)?;
    m.add_function(wrap_pyfunction!(_frame_address, m)?)?;
    m.add("TESTED_VERSIONS", TESTED.to_vec())?;
    api::register(m)?;
    Ok(())
}
