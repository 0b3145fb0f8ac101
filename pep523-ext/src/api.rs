//! The library API for Python: `argstash.inject`, `eject`, `backtrace` and `run`
//! (through `argstash._native`), calling the `injector` crate directly.
//!
//! Errors are Python exceptions carrying the library's message and its hint
//! worded in Python terms (`stack_args=N`, `argstash.eject(pid, [...])`), one
//! subclass of `argstash.Error` per kind a caller may want to catch. Every call
//! that stops a process, reads its stacks or waits releases the GIL.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use injector::names::split_signature;
use injector::names::SymbolError;
use injector::render::{backtrace_json, backtrace_text, View};
use injector::{
    Backtrace, EjectOptions, EjectWhat, FuncSpec, Hint, HookTarget, InstallOptions, Pid,
    ReportReason, RequestOption, RunError, RunEvent, RunOptions, Running, SessionError,
    UNNAMED_CODE_ADVICE,
};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;

create_exception!(
    argstash,
    Error,
    PyException,
    "An argstash operation failed; the message says why and what to do."
);
create_exception!(
    argstash,
    NoSuchProcess,
    Error,
    "No such process (or the pid names a thread)."
);
create_exception!(
    argstash,
    NotPermitted,
    Error,
    "This process may not trace the target (ptrace rights, init, itself)."
);
create_exception!(
    argstash,
    ProcessExited,
    Error,
    "The process ended while the operation ran, or before it."
);
create_exception!(
    argstash,
    AlreadyHooked,
    Error,
    "The function is already hooked."
);
create_exception!(argstash, NotHooked, Error, "The function is not hooked.");
create_exception!(
    argstash,
    SymbolNotFound,
    Error,
    "No function (or module) of that name in the process."
);
create_exception!(
    argstash,
    AmbiguousSymbol,
    Error,
    "Several functions (or modules) have that name."
);
create_exception!(
    argstash,
    NotPython,
    Error,
    "The process is not a CPython argstash can read (python=True)."
);
create_exception!(
    argstash,
    CannotHook,
    Error,
    "The function cannot be hooked safely (its code, its stack arguments, no room)."
);
create_exception!(
    argstash,
    CommandNotFound,
    Error,
    "run(): the command was not found (a shell exits 127)."
);
create_exception!(
    argstash,
    NotExecutable,
    Error,
    "run(): the command cannot be executed (a shell exits 126)."
);

/// Adds the exception classes, the functions and `Process` to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("NoSuchProcess", py.get_type::<NoSuchProcess>())?;
    m.add("NotPermitted", py.get_type::<NotPermitted>())?;
    m.add("ProcessExited", py.get_type::<ProcessExited>())?;
    m.add("AlreadyHooked", py.get_type::<AlreadyHooked>())?;
    m.add("NotHooked", py.get_type::<NotHooked>())?;
    m.add("SymbolNotFound", py.get_type::<SymbolNotFound>())?;
    m.add("AmbiguousSymbol", py.get_type::<AmbiguousSymbol>())?;
    m.add("NotPython", py.get_type::<NotPython>())?;
    m.add("CannotHook", py.get_type::<CannotHook>())?;
    m.add("CommandNotFound", py.get_type::<CommandNotFound>())?;
    m.add("NotExecutable", py.get_type::<NotExecutable>())?;
    m.add_function(wrap_pyfunction!(inject, m)?)?;
    m.add_function(wrap_pyfunction!(eject, m)?)?;
    m.add_function(wrap_pyfunction!(backtrace, m)?)?;
    m.add_function(wrap_pyfunction!(_spawn, m)?)?;
    m.add_class::<Process>()?;
    Ok(())
}

/// A hint worded for a Python caller, as a clause appended to the message.
fn hint_text(hint: &Hint) -> String {
    match hint {
        Hint::EjectFirst { function, .. } => {
            format!(": eject it first with argstash.eject(pid, [{function:?}])")
        }
        Hint::GiveStackWindow { max } => format!(
            "; give the window yourself with stack_args=N (N incoming 8-byte stack words, at most {max})"
        ),
        Hint::PickByAddress => ", or give one function's entry address (an int) instead of the name".into(),
        Hint::UseEntry { entry } => format!(": give its entry {entry:#x} instead"),
        Hint::WriteOneAlone { names, .. } => {
            let names: Vec<String> = names.iter().map(|f| format!("{f:?}")).collect();
            format!("\n  to hook one of them, give one of these: [{}]", names.join(", "))
        }
        Hint::NameImplementation => "; hook the implementation instead, by its own name (`nm` the module's debug file) or its address".into(),
        Hint::HookImplementations { functions, unnamed } => {
            let mut text = String::new();
            if !functions.is_empty() {
                let names: Vec<String> = functions.iter().map(|f| format!("{f:?}")).collect();
                text.push_str(&format!("\n  hook these instead: [{}]", names.join(", ")));
            }
            if *unnamed {
                text.push_str("\n  ");
                text.push_str(UNNAMED_CODE_ADVICE);
            }
            text
        }
        Hint::LeaveOut {
            option: RequestOption::FloatArgs,
        } => "; leave out float_args=True".into(),
        Hint::LeaveOut {
            option: RequestOption::Python,
        } => "; leave out python=True".into(),
        Hint::AcceptUnwindLoss { .. } => "; try again later".into(),
        Hint::GiveKernelCore | Hint::GiveCoreNotProgram => String::new(),
    }
}

/// The Python exception for an injector error: its kind's class, the message and hint.
fn py_err(e: &injector::Error) -> PyErr {
    let text = match e.hint() {
        Some(h) => format!("{e}{}", hint_text(&h)),
        None => e.to_string(),
    };
    use injector::Error as E;
    match e {
        E::Session(
            SessionError::NoSuchProcess { .. }
            | SessionError::NoSuchThread { .. }
            | SessionError::NotAProcess { .. },
        ) => NoSuchProcess::new_err(text),
        E::Session(
            SessionError::NotPermitted { .. }
            | SessionError::Init
            | SessionError::OwnProcess { .. }
            | SessionError::KernelThread { .. },
        ) => NotPermitted::new_err(text),
        E::ExitedDuring { .. } | E::Session(SessionError::Exited { .. }) => {
            ProcessExited::new_err(text)
        }
        E::AlreadyHooked { .. } => AlreadyHooked::new_err(text),
        E::NotHooked { .. } => NotHooked::new_err(text),
        E::Symbol(SymbolError::NotFound { .. } | SymbolError::ModuleNotFound { .. }) => {
            SymbolNotFound::new_err(text)
        }
        E::Symbol(SymbolError::Ambiguous { .. } | SymbolError::AmbiguousModule { .. }) => {
            AmbiguousSymbol::new_err(text)
        }
        E::Python { .. } => NotPython::new_err(text),
        E::Plan { .. }
        | E::Codegen { .. }
        | E::NoArenaSpace { .. }
        | E::NoArenaSpaceFar { .. }
        | E::StackWindowUnknown { .. }
        | E::StackWindowTooLarge { .. }
        | E::ThreadInPatch { .. } => CannotHook::new_err(text),
        _ => Error::new_err(text),
    }
}

/// The Python exception for a failed `run`.
fn run_err(e: &RunError) -> PyErr {
    match e {
        RunError::Install(inner) => py_err(inner),
        RunError::NotFound { .. } => CommandNotFound::new_err(e.to_string()),
        RunError::NotExecutable { .. } => NotExecutable::new_err(e.to_string()),
        RunError::Setuid { .. } | RunError::AlreadyTraced { .. } => {
            NotPermitted::new_err(e.to_string())
        }
        RunError::EndedEarly { .. } | RunError::Ended { .. } => {
            ProcessExited::new_err(e.to_string())
        }
        _ => Error::new_err(e.to_string()),
    }
}

/// A pid from Python, checked.
fn pid_of(pid: i64) -> PyResult<Pid> {
    i32::try_from(pid)
        .ok()
        .filter(|p| *p > 0)
        .map(Pid::from_raw)
        .ok_or_else(|| PyValueError::new_err(format!("{pid} is not a process id")))
}

/// Hook targets from Python: names (`"foo"`, `"libm.so.6!cos"`, `"foo(int a)"`) or addresses.
fn targets_of(funcs: &Bound<'_, PyAny>) -> PyResult<Vec<HookTarget>> {
    let items: Vec<Bound<'_, PyAny>> = if funcs.is_instance_of::<pyo3::types::PyString>() {
        vec![funcs.clone()]
    } else {
        funcs.try_iter()?.collect::<PyResult<_>>()?
    };
    let mut targets = Vec::with_capacity(items.len());
    for item in items {
        if let Ok(addr) = item.extract::<u64>() {
            targets.push(HookTarget::new(FuncSpec::Addr(addr)));
            continue;
        }
        let spec: String = item.extract().map_err(|_| {
            PyValueError::new_err("each function is a name (str) or an entry address (int)")
        })?;
        let (name, signature) =
            split_signature(&spec).map_err(|e| Error::new_err(format!("{spec}: {e}")))?;
        targets.push(HookTarget {
            function: FuncSpec::parse(name),
            signature,
            stack_words: None,
        });
    }
    Ok(targets)
}

/// Install options from the keyword arguments.
fn install_options(stack_args: Option<u16>, float_args: bool) -> InstallOptions {
    InstallOptions {
        stack_words: stack_args.unwrap_or(0),
        force_stack_words: stack_args.is_some(),
        float_args,
        ..InstallOptions::default()
    }
}

/// A JSON value as a Python object (dicts, lists, ints, floats, str, None).
fn to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => pyo3::types::PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_pyobject(py)?.into_any(),
            (_, Some(i)) => i.into_pyobject(py)?.into_any(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => s.into_pyobject(py)?.into_any(),
        Value::Array(a) => {
            let list = PyList::empty(py);
            for x in a {
                list.append(to_py(py, x)?)?;
            }
            list.into_any()
        }
        Value::Object(o) => {
            let dict = PyDict::new(py);
            for (k, x) in o {
                dict.set_item(k, to_py(py, x)?)?;
            }
            dict.into_any()
        }
    })
}

/// A backtrace as Python sees it: the `bt --json` dict, or `bt`'s text.
fn render_bt<'py>(py: Python<'py>, bt: &Backtrace, text: bool) -> PyResult<Bound<'py, PyAny>> {
    if text {
        Ok(backtrace_text(bt, View::All).into_pyobject(py)?.into_any())
    } else {
        to_py(py, &backtrace_json(bt, View::All))
    }
}

/// Hooks `funcs` in process `pid` (as `argstash inject`); returns the hooked names.
#[pyfunction]
#[pyo3(signature = (pid, funcs, *, stack_args=None, float_args=false, python=false))]
fn inject(
    py: Python<'_>,
    pid: i64,
    funcs: &Bound<'_, PyAny>,
    stack_args: Option<u16>,
    float_args: bool,
    python: bool,
) -> PyResult<Vec<String>> {
    let pid = pid_of(pid)?;
    let mut targets = targets_of(funcs)?;
    let opts = install_options(stack_args, float_args);
    let report = py.detach(move || -> Result<_, injector::Error> {
        if python {
            targets.push(injector::python_hook(pid)?);
        }
        injector::install(pid, &targets, &opts)
    });
    let report = report.map_err(|e| py_err(&e))?;
    Ok(report.hooks.iter().map(|h| h.name.clone()).collect())
}

/// Removes hooks from process `pid`: those of `funcs`, or every one (as `argstash eject`).
#[pyfunction]
#[pyo3(signature = (pid, funcs=None, *, python=false))]
fn eject(
    py: Python<'_>,
    pid: i64,
    funcs: Option<&Bound<'_, PyAny>>,
    python: bool,
) -> PyResult<usize> {
    let pid = pid_of(pid)?;
    let what = match funcs {
        None if !python => EjectWhat::All,
        _ => {
            let mut specs: Vec<FuncSpec> = match funcs {
                Some(f) => targets_of(f)?.into_iter().map(|t| t.function).collect(),
                None => Vec::new(),
            };
            if python {
                specs.push(FuncSpec::Name(
                    injector::pyframes::EVAL_FRAME_FUNCTION.to_string(),
                ));
            }
            EjectWhat::Functions(specs)
        }
    };
    let opts = EjectOptions {
        what,
        calls: Default::default(),
    };
    let report = py
        .detach(move || injector::eject(pid, &opts))
        .map_err(|e| py_err(&e))?;
    Ok(report.hooks.len())
}

/// Every thread's stack of process `pid` with stashed arguments and Python frames:
/// the `bt --json` dict, or with `text=True` the text `argstash bt` prints.
#[pyfunction]
#[pyo3(signature = (pid, *, text=false))]
fn backtrace<'py>(py: Python<'py>, pid: i64, text: bool) -> PyResult<Bound<'py, PyAny>> {
    let pid = pid_of(pid)?;
    let bt = py
        .detach(move || injector::backtrace(pid, &Default::default()))
        .map_err(|e| py_err(&e))?;
    render_bt(py, &bt, text)
}

/// A descriptor for the child's stdio: inherited, or a duplicate of `fd`.
fn stdio_of(fd: Option<i32>) -> PyResult<Stdio> {
    let Some(fd) = fd else {
        return Ok(Stdio::inherit());
    };
    if fd < 0 {
        return Err(PyValueError::new_err(format!(
            "{fd} is not a file descriptor"
        )));
    }
    // SAFETY: the caller passes a descriptor it keeps open for the duration of this
    // call; it is only borrowed to duplicate it.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let owned: OwnedFd = borrowed
        .try_clone_to_owned()
        .map_err(pyo3::exceptions::PyOSError::new_err)?;
    Ok(Stdio::from(owned))
}

/// Starts `argv` with `hooks` in place before its `main` (the engine of `argstash.run`).
#[pyfunction]
#[pyo3(signature = (argv, hooks, *, stack_args=None, float_args=false, python=false, on_crash=true, env=None, cwd=None, stdin=None, stdout=None, stderr=None))]
#[allow(clippy::too_many_arguments)]
fn _spawn(
    py: Python<'_>,
    argv: Vec<String>,
    hooks: &Bound<'_, PyAny>,
    stack_args: Option<u16>,
    float_args: bool,
    python: bool,
    on_crash: bool,
    env: Option<Vec<(String, String)>>,
    cwd: Option<String>,
    stdin: Option<i32>,
    stdout: Option<i32>,
    stderr: Option<i32>,
) -> PyResult<Process> {
    let Some((program, args)) = argv.split_first() else {
        return Err(PyValueError::new_err(
            "argv is empty: give the command to run",
        ));
    };
    let targets = targets_of(hooks)?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    if let Some(env) = env {
        cmd.env_clear().envs(env);
    }
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    cmd.stdin(stdio_of(stdin)?)
        .stdout(stdio_of(stdout)?)
        .stderr(stdio_of(stderr)?);
    let opts = RunOptions {
        install: install_options(stack_args, float_args),
        python,
        on_crash,
        ..RunOptions::default()
    };
    let running = py
        .detach(move || injector::run::spawn(cmd, &targets, opts))
        .map_err(|e| run_err(&e))?;
    Ok(Process {
        hooks: running.hooks().iter().map(|h| h.name.clone()).collect(),
        inner: running,
    })
}

/// Python's returncode for an exit status: the exit code, or minus the signal.
fn returncode(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| -s))
        .unwrap_or(-1)
}

/// A command started with hooks in place, under argstash's supervisor thread.
#[pyclass(module = "argstash._native", frozen)]
pub struct Process {
    inner: Running,
    hooks: Vec<String>,
}

#[pymethods]
impl Process {
    /// The command's process id.
    #[getter]
    fn pid(&self) -> i32 {
        self.inner.pid().as_raw()
    }

    /// The functions hooked before its `main`.
    #[getter]
    fn hooks(&self) -> Vec<String> {
        self.hooks.clone()
    }

    /// Waits for the command to end (at most `timeout` seconds); its returncode, or None.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<i32>> {
        let status = match timeout {
            None => Some(py.detach(|| self.inner.wait())),
            Some(t) => {
                let t = Duration::try_from_secs_f64(t.max(0.0))
                    .map_err(|e| PyValueError::new_err(format!("timeout {t}: {e}")))?;
                py.detach(|| self.inner.wait_timeout(t))
            }
        };
        Ok(status.map(returncode))
    }

    /// The returncode if the command has ended, else None.
    fn poll(&self) -> Option<i32> {
        self.inner.try_wait().map(returncode)
    }

    /// Sends signal `sig` (through a pidfd: never to a reused pid).
    fn send_signal(&self, sig: i32) -> PyResult<()> {
        self.inner
            .signal(sig)
            .map_err(pyo3::exceptions::PyOSError::new_err)
    }

    /// Every thread's stack now (the `bt --json` dict, or `bt`'s text with `text=True`).
    #[pyo3(signature = (*, text=false))]
    fn backtrace<'py>(&self, py: Python<'py>, text: bool) -> PyResult<Bound<'py, PyAny>> {
        let bt = py
            .detach(|| self.inner.backtrace())
            .map_err(|e| run_err(&e))?;
        render_bt(py, &bt, text)
    }

    /// The reports the supervisor took since the last call (crashes: every thread's
    /// stack taken before the fatal signal took effect), as dicts with `pid`,
    /// `reason` ("crash", "signal", "requested", "exec"), `signal`, `tid`, `text`,
    /// `backtrace` (the `bt --json` dict) and `error`.
    fn take_reports<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let mut out = Vec::new();
        for event in self.inner.take_events() {
            let d = PyDict::new(py);
            match event {
                RunEvent::Report(r) => {
                    d.set_item("pid", r.pid.as_raw())?;
                    let (reason, signal, tid) = match r.reason {
                        ReportReason::Crash { signal, tid } => ("crash", Some(signal), Some(tid)),
                        ReportReason::Signal { signal, tid } => ("signal", Some(signal), Some(tid)),
                        ReportReason::Requested => ("requested", None, None),
                    };
                    d.set_item("reason", reason)?;
                    d.set_item("signal", signal)?;
                    d.set_item("tid", tid.map(|t| t.as_raw()))?;
                    match &r.backtrace {
                        Ok(bt) => {
                            d.set_item("text", backtrace_text(bt, View::All))?;
                            d.set_item("backtrace", to_py(py, &backtrace_json(bt, View::All))?)?;
                            d.set_item("error", py.None())?;
                        }
                        Err(e) => {
                            d.set_item("text", py.None())?;
                            d.set_item("backtrace", py.None())?;
                            d.set_item("error", e.to_string())?;
                        }
                    }
                }
                RunEvent::Exec { pid, program } => {
                    d.set_item("pid", pid.as_raw())?;
                    d.set_item("reason", "exec")?;
                    d.set_item("program", program)?;
                }
            }
            out.push(d);
        }
        Ok(out)
    }
}
