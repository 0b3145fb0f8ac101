//! The operations the subcommands run on a target, behind one interface:
//! [`Local`] calls the injector in this process, [`crate::bus::Bus`] asks
//! argstashd over D-Bus (`--bus`). Both return the injector's types, which
//! `main.rs` dispatches once and `output.rs` prints, so `--bus` prints what the
//! standalone command prints.

use anyhow::Result;
use injector::{
    Backtrace, BacktraceOptions, DebugSearch, DwarfCache, EjectOptions, EjectReport, EjectWhat,
    FuncSpec, HookInfo, HookTarget, HookUnwindStatus, InstallReport, Pid, ProcessReader,
};

use crate::args::{BtArgs, EjectArgs, InjectArgs};

/// What runs here only, whatever the interface: each is refused through the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standalone {
    /// `bt --core` and `bt --coredump`: the core is read where it is.
    Core,
    /// `demo`.
    Demo,
    /// `run`.
    Run,
    /// `record`.
    Record,
}

/// The operations on a live target, as the subcommands ask for them.
pub trait Operations {
    /// `inject`: hooks the functions `a` names.
    fn inject(&self, a: &InjectArgs) -> Result<InstallReport>;
    /// `eject`: removes the hooks `a` names.
    fn eject(&self, a: &EjectArgs) -> Result<EjectReport>;
    /// `list`: the hook records of `pid`.
    fn list(&self, pid: Pid) -> Result<Vec<HookInfo>>;
    /// `list`'s unwind rows: which other unwinders know each active hook, and
    /// whether libgcc's unwinder is loaded.
    fn unwind_status(&self, pid: Pid) -> Result<(Vec<HookUnwindStatus>, bool)>;
    /// `bt --pid`: every thread's backtrace (or `a.tid`'s), with the warnings
    /// about debug information to print before it.
    fn backtrace(&self, pid: Pid, a: &BtArgs) -> Result<(Backtrace, Vec<String>)>;
    /// Whether `what` can run through this interface; an error saying why not.
    fn allows(&self, what: Standalone) -> Result<()>;
}

/// The injector, called in this process.
pub struct Local;

impl Operations for Local {
    fn inject(&self, a: &InjectArgs) -> Result<InstallReport> {
        let mut targets: Vec<HookTarget> = Vec::new();
        let mut names = Vec::new();
        for f in &a.funcs {
            let (name, signature) = injector::names::split_function(f)?;
            names.push(name);
            targets.push(HookTarget {
                function: FuncSpec::parse(name),
                signature,
                stack_words: None,
            });
        }
        for (name, n) in a.stash.function_windows(&names)? {
            for (t, _) in targets.iter_mut().zip(&names).filter(|(_, m)| **m == name) {
                t.stack_words = Some(n);
            }
        }
        targets.extend(a.addr.iter().map(|x| HookTarget::new(FuncSpec::Addr(*x))));
        if a.python > 0 {
            targets.push(injector::python_hook(a.pid)?);
        }
        Ok(injector::install(
            a.pid,
            &targets,
            &a.stash.install_options(),
        )?)
    }

    fn eject(&self, a: &EjectArgs) -> Result<EjectReport> {
        let what = if a.all {
            EjectWhat::All
        } else {
            let mut specs: Vec<FuncSpec> = a.funcs.iter().map(|f| FuncSpec::parse(f)).collect();
            if a.python > 0 {
                specs.push(FuncSpec::Name(
                    injector::pyframes::EVAL_FRAME_FUNCTION.to_string(),
                ));
            }
            EjectWhat::Functions(specs)
        };
        let options = EjectOptions {
            what,
            calls: a.calls.policy(),
        };
        Ok(injector::eject(a.pid, &options)?)
    }

    fn list(&self, pid: Pid) -> Result<Vec<HookInfo>> {
        Ok(injector::list(pid)?)
    }

    fn unwind_status(&self, pid: Pid) -> Result<(Vec<HookUnwindStatus>, bool)> {
        Ok(injector::unwind_status(pid)?)
    }

    fn backtrace(&self, pid: Pid, a: &BtArgs) -> Result<(Backtrace, Vec<String>)> {
        let mut reader = ProcessReader::new(pid);
        reader.set_dwarf_cache(DwarfCache::from_env());
        let bt = reader.backtrace(&bt_options(a))?;
        let warnings = reader.debug_warnings();
        // The process exits after printing: skip freeing megabytes of parsed debug info.
        std::mem::forget(reader);
        Ok((bt, warnings))
    }

    fn allows(&self, _: Standalone) -> Result<()> {
        Ok(())
    }
}

/// The library's backtrace options for `bt`'s flags.
pub fn bt_options(a: &BtArgs) -> BacktraceOptions {
    let mut opts = BacktraceOptions {
        tid: a.tid,
        show_trampolines: a.show_trampolines,
        always_stop: a.always_stop,
        ..BacktraceOptions::default()
    };
    if !a.debug_dirs.is_empty() {
        opts.debug_search = DebugSearch {
            dirs: a.debug_dirs.clone(),
            root: None,
        };
    }
    opts
}
