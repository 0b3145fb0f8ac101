//! The hooks a recording installs first (`--func`, `--python`) and ejects at the
//! end: only those it installed itself; a function hooked before stays hooked.
//!
//! A program argstash has just started may not have loaded the code to hook yet
//! (a library, libpython): its hooks are tried again, while sampling goes on,
//! for up to [`START_WAIT`].

use std::time::{Duration, Instant};

use anyhow::Result;
use injector::{
    eject, install, python_hook, CallPolicy, EjectOptions, EjectWhat, Error, FuncSpec, HookInfo,
    HookTarget, InstallOptions, Pid, RemoteCalls,
};

/// How long the hooks of a started program are retried.
pub const START_WAIT: Duration = Duration::from_secs(3);

/// The hooks of one recording.
pub struct Hooks {
    pid: Pid,
    pending: Vec<HookTarget>,
    python: bool,
    /// `None`: a running process, no retry.
    deadline: Option<Instant>,
    ours: Vec<HookInfo>,
    notes: Vec<String>,
}

fn names(t: &HookTarget, name: &str) -> bool {
    match &t.function {
        FuncSpec::Name(n) | FuncSpec::Qualified { name: n, .. } => n == name,
        FuncSpec::Addr(_) => false,
    }
}

impl Hooks {
    /// The hooks `funcs` (as `--func` takes them) and, with `python`, CPython's evaluator.
    pub fn new(pid: Pid, funcs: &[String], python: bool, spawned: bool) -> Result<Hooks> {
        let mut pending = Vec::new();
        for f in funcs {
            let (name, signature) = injector::names::split_function(f)?;
            pending.push(HookTarget {
                function: FuncSpec::parse(name),
                signature,
                stack_words: None,
            });
        }
        Ok(Hooks {
            pid,
            pending,
            python,
            deadline: spawned.then(|| Instant::now() + START_WAIT),
            ours: Vec::new(),
            notes: Vec::new(),
        })
    }

    /// Installs what is still to install; true when hooks were installed (the
    /// sampler must re-read the arenas). A failure is an error once retrying is over.
    pub fn poll(&mut self) -> Result<bool> {
        if self.pending.is_empty() && !self.python {
            return Ok(false);
        }
        let mut targets = self.pending.clone();
        if self.python {
            match python_hook(self.pid) {
                Ok(t) => targets.push(t),
                // Exact pairing needs no hook there: record without it, saying why.
                Err(Error::PythonHookRefused {
                    version,
                    reason,
                    unreadable,
                    ..
                }) => {
                    self.python = false;
                    self.notes.push(format!(
                        "--python installs no hook in CPython {version}: {reason}{}",
                        unreadable
                            .map(|e| format!(" (besides, {e})"))
                            .unwrap_or_default()
                    ));
                }
                Err(e) => return self.retry_or(e),
            }
        }
        loop {
            if targets.is_empty() {
                self.pending.clear();
                self.python = false;
                return Ok(false);
            }
            match install(self.pid, &targets, &InstallOptions::default()) {
                Ok(report) => {
                    self.ours.extend(report.hooks);
                    self.pending.clear();
                    self.python = false;
                    return Ok(true);
                }
                Err(Error::AlreadyHooked { name, .. }) => {
                    self.notes.push(format!(
                        "{name} was hooked before this recording: its hook is used and left in place"
                    ));
                    targets.retain(|t| !names(t, &name));
                }
                Err(e) => return self.retry_or(e),
            }
        }
    }

    fn retry_or(&mut self, e: Error) -> Result<bool> {
        use injector::names::SymbolError as S;
        // Code the program has not loaded yet may come; a name that is ambiguous or
        // malformed stays so, and is refused at once (a short recording would
        // otherwise end before the retries do, never saying why nothing was hooked).
        let lasting = matches!(
            &e,
            Error::Symbol(
                S::AmbiguousName { .. }
                    | S::BadName { .. }
                    | S::Ambiguous { .. }
                    | S::AmbiguousModule { .. }
            )
        );
        match self.deadline {
            Some(d) if Instant::now() < d && !lasting => Ok(false),
            _ => Err(e.into()),
        }
    }

    /// Ejects the hooks this recording installed (`alive`: the process still
    /// runs). `hurry`: no waiting for a safe point to deregister unwind
    /// information. Returns notes for the user.
    pub fn eject(self, alive: bool, hurry: bool) -> Vec<String> {
        let mut notes = self.notes;
        if self.ours.is_empty() || !alive {
            return notes;
        }
        let specs: Vec<FuncSpec> = self
            .ours
            .iter()
            .map(|h| FuncSpec::Addr(h.function))
            .collect();
        let mut calls = CallPolicy::default();
        if hurry {
            calls.calls = RemoteCalls::Off;
        }
        let what = self
            .ours
            .iter()
            .map(|h| h.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        match eject(
            self.pid,
            &EjectOptions {
                what: EjectWhat::Functions(specs),
                calls,
            },
        ) {
            Ok(_) => {}
            Err(e) => notes.push(format!(
                "could not eject the hooks this recording installed ({what}): {e}; \
                 remove them with argstash eject --pid {} --func NAME",
                self.pid
            )),
        }
        notes
    }
}
