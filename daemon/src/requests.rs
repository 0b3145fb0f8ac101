//! A D-Bus call's arguments read into the library's requests: pids, function
//! lists, inject and backtrace options; each bad value is an `InvalidArgs`
//! error that names it.

use argstash_dbus::{Error, ErrorKind};
use argstash_dbus::{OPT_ALWAYS_STOP, OPT_PYTHON};
use argstash_dbus::{
    OPT_FLOAT_ARGS, OPT_FUNCTION_STACK_ARGS, OPT_SHOW_TRAMPOLINES, OPT_SIGNATURES, OPT_STACK_ARGS,
};
use injector::names::FuncSpec;
use injector::names::{parse_params, split_function, Signature};
use injector::BacktraceOptions;
use injector::{EjectWhat, InstallOptions, Tid};
use std::collections::HashMap;
use zbus::zvariant::OwnedValue;

pub(super) fn invalid(msg: String) -> Error {
    Error::new(ErrorKind::InvalidArgs, msg)
}

/// The hooks an `Eject*` call names; `all_method` is the method to call for all.
pub(super) fn functions_to_eject(
    functions: &[String],
    all_method: &str,
) -> Result<EjectWhat, Error> {
    if functions.is_empty() {
        return Err(invalid(format!(
            "name at least one function to eject (or call {all_method})"
        )));
    }
    Ok(EjectWhat::Functions(
        functions.iter().map(|f| FuncSpec::parse(f)).collect(),
    ))
}

pub(super) fn pid_arg(pid: u32) -> Result<i32, Error> {
    i32::try_from(pid).map_err(|_| invalid(format!("{pid} is not a valid pid")))
}

/// What an `Inject` call asks for, read from its options.
pub(super) struct InjectRequest {
    /// Install options.
    pub(crate) opts: InstallOptions,
    /// `signatures` option: parameter list by function name, as given.
    pub(crate) signatures: HashMap<String, String>,
    /// `python` option: also hook CPython's frame evaluator.
    pub(crate) python: bool,
    /// `function-stack-args` option: stack window by function name, as given.
    pub(crate) windows: HashMap<String, u16>,
}

pub(super) fn inject_options(
    options: &HashMap<String, OwnedValue>,
) -> Result<InjectRequest, Error> {
    let mut opts = InstallOptions::default();
    let mut signatures = HashMap::new();
    let mut python = false;
    let mut windows = HashMap::new();
    for (k, v) in options {
        match k.as_str() {
            OPT_STACK_ARGS => {
                let n: u64 = if let Ok(n) = u16::try_from(v) {
                    n.into()
                } else if let Ok(n) = u32::try_from(v) {
                    n.into()
                } else if let Ok(n) = i32::try_from(v) {
                    u64::try_from(n).unwrap_or(u64::MAX)
                } else if let Ok(n) = u64::try_from(v) {
                    n
                } else {
                    return Err(invalid(format!(
                        "option {OPT_STACK_ARGS} must be an integer (q, u or i), not {}",
                        v.value_signature()
                    )));
                };
                if n > 16 {
                    return Err(invalid(format!(
                        "option {OPT_STACK_ARGS} must be 0 to 16, not {n}"
                    )));
                }
                opts.stack_words = n as u16;
                // As with `--stack-args 0`: the caller's number wins, 0 included.
                opts.force_stack_words = true;
            }
            OPT_FLOAT_ARGS => {
                opts.float_args = bool::try_from(v).map_err(|_| {
                    invalid(format!(
                        "option {OPT_FLOAT_ARGS} must be a boolean (b), not {}",
                        v.value_signature()
                    ))
                })?;
            }
            OPT_PYTHON => {
                python = bool::try_from(v).map_err(|_| {
                    invalid(format!(
                        "option {OPT_PYTHON} must be a boolean (b), not {}",
                        v.value_signature()
                    ))
                })?;
            }
            OPT_SIGNATURES => {
                signatures = HashMap::<String, String>::try_from(
                    v.try_clone()
                        .map_err(|e| invalid(format!("option {OPT_SIGNATURES}: {e}")))?,
                )
                .map_err(|_| {
                    invalid(format!(
                        "option {OPT_SIGNATURES} must map function names to parameter lists \
                         (a{{ss}}, e.g. {{\"bar\": \"int n, const char *s\"}}), not {}",
                        v.value_signature()
                    ))
                })?;
            }
            OPT_FUNCTION_STACK_ARGS => {
                windows = HashMap::<String, u16>::try_from(
                    v.try_clone()
                        .map_err(|e| invalid(format!("option {OPT_FUNCTION_STACK_ARGS}: {e}")))?,
                )
                .map_err(|_| {
                    invalid(format!(
                        "option {OPT_FUNCTION_STACK_ARGS} must map function names to stack \
                         words (a{{sq}}, e.g. {{\"bar\": 2}}), not {}",
                        v.value_signature()
                    ))
                })?;
                if let Some((name, n)) = windows.iter().find(|(_, n)| **n > 16) {
                    return Err(invalid(format!(
                        "option {OPT_FUNCTION_STACK_ARGS} gives `{name}` {n} stack words; \
                         give 0 to 16"
                    )));
                }
            }
            other => {
                return Err(invalid(format!(
                    "unknown Inject option `{other}` (known: {OPT_STACK_ARGS}, \
                     {OPT_FUNCTION_STACK_ARGS}, {OPT_FLOAT_ARGS}, {OPT_SIGNATURES}, {OPT_PYTHON})"
                )))
            }
        }
    }
    Ok(InjectRequest {
        opts,
        signatures,
        python,
        windows,
    })
}

/// The functions of an `Inject` call with their signatures: from the name
/// (`bar(int, char *)`, as on the CLI) or from the `signatures` option, not both.
pub(super) fn inject_specs(
    functions: &[String],
    mut signatures: HashMap<String, String>,
) -> Result<(Vec<FuncSpec>, Vec<Option<Signature>>), Error> {
    let mut specs = Vec::new();
    let mut sigs = Vec::new();
    for f in functions {
        let (name, inline) = split_function(f).map_err(|e| invalid(e.to_string()))?;
        let sig = match (inline, signatures.remove(name)) {
            (Some(_), Some(_)) => {
                return Err(invalid(format!(
                    "`{name}` has a signature in its name and in the {OPT_SIGNATURES} option; give it once"
                )))
            }
            (Some(sig), None) => Some(sig),
            (None, Some(list)) => Some(parse_params(&list).map_err(|why| {
                invalid(format!(
                    "cannot read the parameter list `{list}` of `{name}` in option \
                     {OPT_SIGNATURES}: {why}; {}",
                    why.reason.advice()
                ))
            })?),
            (None, None) => None,
        };
        specs.push(FuncSpec::parse(name));
        sigs.push(sig);
    }
    if let Some(extra) = signatures.keys().next() {
        return Err(invalid(format!(
            "option {OPT_SIGNATURES} names `{extra}`, which is not among the functions to hook"
        )));
    }
    Ok((specs, sigs))
}

pub(super) fn backtrace_options(
    tid: u32,
    options: &HashMap<String, OwnedValue>,
) -> Result<BacktraceOptions, Error> {
    let mut opts = BacktraceOptions {
        tid: if tid == 0 {
            None
        } else {
            Some(Tid::try_from(tid).map_err(|_| invalid(format!("{tid} is not a valid tid")))?)
        },
        ..BacktraceOptions::default()
    };
    for (k, v) in options {
        match k.as_str() {
            OPT_SHOW_TRAMPOLINES => {
                opts.show_trampolines = bool::try_from(v).map_err(|_| {
                    invalid(format!(
                        "option {OPT_SHOW_TRAMPOLINES} must be a boolean (b)"
                    ))
                })?;
            }
            OPT_ALWAYS_STOP => {
                opts.always_stop = bool::try_from(v).map_err(|_| {
                    invalid(format!("option {OPT_ALWAYS_STOP} must be a boolean (b)"))
                })?;
            }
            other => {
                return Err(invalid(format!(
                    "unknown Backtrace option `{other}` (known: {OPT_SHOW_TRAMPOLINES}, \
                     {OPT_ALWAYS_STOP})"
                )))
            }
        }
    }
    Ok(opts)
}
