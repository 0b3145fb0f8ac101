//! The wire types back to the injector's types: what a client does with a reply.
//! The inverse of [`crate::to_wire`]: a value sent comes back equal (to the
//! microsecond for durations; a reason unwinding stopped comes back as its text,
//! [`StopReason::Text`]).
//!
//! Nothing is made up on the way back: a report key the daemon did not send, or a
//! name this build does not know, is a [`FromWireError`] naming it.

use std::borrow::Cow;
use std::path::PathBuf;
use std::time::Duration;

use injector::names::{ArgSource, ArgValue};
use injector::pyframes::Placement;
use injector::pyframes::{param_kind_name, InterpreterLabel};
use injector::pyframes::{FrameOwner, ParamKind};
use injector::pyframes::{PairedBy, PyFrame, PyParam, PyValue, PythonStack, StackFrame};
use injector::{
    Backtrace, Capture, Frame, FrameKind, Hint, HookInfo, HookState, HookUnwindStatus,
    InlinedFrame, Pid, RequestOption, StashedArgs, StopReason, ThreadBacktrace, Tid,
};

use crate::{ErrorHint, HookEntry, Param, OPT_FLOAT_ARGS, OPT_PYTHON};

/// A reply this build cannot read back without making something up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FromWireError {
    /// A report lacks a key this build needs.
    #[error(
        "argstashd sent {what} without `{key}`: it is older than this argstash; \
         run the argstashd of the same version"
    )]
    MissingKey {
        /// What was read.
        what: &'static str,
        /// The missing key.
        key: &'static str,
    },
    /// A name this build does not know.
    #[error(
        "argstashd sent {what} `{value}`, which this argstash does not know; \
         run the argstashd of the same version"
    )]
    Unknown {
        /// What kind of name.
        what: &'static str,
        /// The name sent.
        value: String,
    },
}

/// Shorthand for results of this module.
pub type Result<T> = std::result::Result<T, FromWireError>;

fn key<T>(what: &'static str, key: &'static str, v: Option<T>) -> Result<T> {
    v.ok_or(FromWireError::MissingKey { what, key })
}

fn unknown<T>(what: &'static str, value: &str) -> Result<T> {
    Err(FromWireError::Unknown {
        what,
        value: value.to_string(),
    })
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn micros(us: u64) -> Duration {
    Duration::from_micros(us)
}

fn path(s: Option<String>) -> Option<PathBuf> {
    s.map(PathBuf::from)
}

/// A hook record back from its `ListHooks` form. Its window source is known at
/// install only, so it is `None` here, as in the library's own listing;
/// [`install_report`] sets it from the report's `window_sources`.
pub fn hook_info(e: &HookEntry) -> Result<HookInfo> {
    let HookEntry {
        path: _,
        pid: _,
        function,
        module,
        address,
        patch_address,
        patch_len,
        trampoline,
        arena,
        slot,
        stack_words,
        state,
        installed_ns,
        variadic,
        xmm,
        signature,
        demangled: _,
    } = e;
    let state = [HookState::Free, HookState::Active, HookState::Ejected]
        .into_iter()
        .find(|s| s.name() == state)
        .map_or_else(|| unknown("the hook state", state), Ok)?;
    Ok(HookInfo {
        name: function.clone(),
        module: module.clone(),
        function: *address,
        patch_addr: *patch_address,
        patch_len: *patch_len as usize,
        trampoline: *trampoline,
        arena: *arena,
        slot: *slot,
        stack_words: *stack_words,
        variadic: *variadic,
        xmm: *xmm,
        state,
        installed_ns: *installed_ns,
        signature: non_empty(signature),
        window_source: None,
    })
}

/// The injector's unwind report back from its wire form.
pub fn unwind_report(u: crate::UnwindReport) -> Result<injector::UnwindReport> {
    const WHAT: &str = "an unwind report";
    let crate::UnwindReport {
        registered,
        unwinder,
        notes,
        perf_map,
        perf_jitdump,
        perf_jitdump_elapsed_us,
        symbol_file,
        gdb_jit,
        elapsed_us,
    } = u;
    Ok(injector::UnwindReport {
        registered: key(WHAT, "registered", registered)? as usize,
        unwinder,
        notes: key(WHAT, "notes", notes)?,
        perf_map: path(perf_map),
        perf_jitdump: path(perf_jitdump),
        perf_jitdump_elapsed: micros(key(
            WHAT,
            "perf-jitdump-elapsed-us",
            perf_jitdump_elapsed_us,
        )?),
        symbol_file: path(symbol_file),
        gdb_jit: key(WHAT, "gdb-jit", gdb_jit)? as usize,
        elapsed: micros(key(WHAT, "elapsed-us", elapsed_us)?),
    })
}

fn rip_census(c: crate::RipCensus) -> injector::RipCensus {
    let crate::RipCensus {
        in_patch,
        in_relocated,
        in_trampoline,
    } = c;
    injector::RipCensus {
        in_patch: in_patch as usize,
        in_relocated: in_relocated as usize,
        in_trampoline: in_trampoline as usize,
    }
}

/// What an install did, back from `InjectWithReport`.
pub fn install_report(r: crate::InstallReport) -> Result<injector::InstallReport> {
    const WHAT: &str = "an install report";
    let crate::InstallReport {
        hooks,
        window_sources,
        stopped_us,
        threads,
        new_arenas,
        moved_threads,
        unwind,
        signals: wire_signals,
        rip_census: census,
    } = r;
    let entries = key(WHAT, "hooks", hooks)?;
    let sources = key(WHAT, "window-sources", window_sources)?;
    if sources.len() != entries.len() {
        return unknown(
            "window sources for a different number of hooks",
            &sources.join(","),
        );
    }
    let hooks = entries
        .iter()
        .zip(&sources)
        .map(|(e, source)| {
            let window_source = match source.as_str() {
                "" => None,
                s => Some(
                    injector::WindowSource::from_name(s)
                        .map_or_else(|| unknown("the window source", s), Ok)?,
                ),
            };
            Ok(HookInfo {
                window_source,
                ..hook_info(e)?
            })
        })
        .collect::<Result<_>>()?;
    Ok(injector::InstallReport {
        hooks,
        stopped: micros(key(WHAT, "stopped-us", stopped_us)?),
        threads: key(WHAT, "threads", threads)? as usize,
        new_arenas: key(WHAT, "new-arenas", new_arenas)?,
        moved_threads: key(WHAT, "moved-threads", moved_threads)?,
        unwind: unwind_report(key(WHAT, "unwind", unwind)?)?,
        rip_census: rip_census(key(WHAT, "rip-census", census)?),
        signals: signals(key(WHAT, "signals", wire_signals)?)?,
    })
}

/// The signals a report gave back.
pub fn signals(entries: Vec<crate::SignalEntry>) -> Result<Vec<injector::SignalOutcome>> {
    entries
        .into_iter()
        .map(|e| {
            let crate::SignalEntry {
                tid,
                signal,
                code,
                fate,
                errno,
            } = e;
            Ok(injector::SignalOutcome {
                tid,
                signal,
                code,
                fate: injector::SignalFate::from_name(&fate, errno)
                    .map_or_else(|| unknown("the signal fate", &fate), Ok)?,
            })
        })
        .collect()
}

/// What an eject did, back from `EjectWithReport`/`EjectAllWithReport`.
pub fn eject_report(r: crate::EjectReport) -> Result<injector::EjectReport> {
    const WHAT: &str = "an eject report";
    let crate::EjectReport {
        hooks,
        stopped_us,
        moved_threads,
        unwind,
        signals: wire_signals,
        rip_census: census,
    } = r;
    Ok(injector::EjectReport {
        hooks: key(WHAT, "hooks", hooks)?
            .iter()
            .map(hook_info)
            .collect::<Result<_>>()?,
        stopped: micros(key(WHAT, "stopped-us", stopped_us)?),
        moved_threads: key(WHAT, "moved-threads", moved_threads)?,
        rip_census: rip_census(key(WHAT, "rip-census", census)?),
        unwind: unwind_report(key(WHAT, "unwind", unwind)?)?,
        signals: signals(key(WHAT, "signals", wire_signals)?)?,
    })
}

/// The unwind rows of `list` and whether libgcc is loaded, back from `UnwindStatus`.
pub fn unwind_status(s: crate::UnwindStatus) -> Result<(Vec<HookUnwindStatus>, bool)> {
    const WHAT: &str = "an unwind status";
    let crate::UnwindStatus { has_libgcc, hooks } = s;
    let rows = key(WHAT, "hooks", hooks)?
        .into_iter()
        .map(|h| {
            let crate::HookUnwind {
                function,
                arena,
                slot,
                described,
                libgcc,
                gdb_jit,
                perf_map,
                perf_jit,
            } = h;
            HookUnwindStatus {
                name: function,
                arena,
                slot,
                described,
                libgcc,
                gdb_jit,
                perf_map,
                perf_jit,
            }
        })
        .collect();
    Ok((rows, key(WHAT, "has-libgcc", has_libgcc)?))
}

/// A hint back from its wire form; `None` for a kind this build does not know
/// (clients ignore those and print the daemon's own wording).
pub fn hint(wire: &ErrorHint) -> Option<Hint> {
    use crate::{
        HINT_EJECT_FIRST, HINT_GIVE_STACK_WINDOW, HINT_HOOK_IMPLEMENTATIONS, HINT_LEAVE_OUT,
        HINT_NAME_IMPLEMENTATION, HINT_PICK_BY_ADDRESS, HINT_USE_ENTRY, HINT_WRITE_ONE_ALONE,
    };
    Some(match wire.kind.as_deref()? {
        HINT_EJECT_FIRST => Hint::EjectFirst {
            function: wire.function.clone()?,
            arena: wire.arena?,
            slot: wire.slot?,
        },
        HINT_GIVE_STACK_WINDOW => Hint::GiveStackWindow { max: wire.max? },
        HINT_PICK_BY_ADDRESS => Hint::PickByAddress,
        HINT_USE_ENTRY => Hint::UseEntry { entry: wire.entry? },
        HINT_WRITE_ONE_ALONE => Hint::WriteOneAlone {
            read_as: wire.read_as.clone(),
            names: wire.functions.clone()?,
        },
        HINT_NAME_IMPLEMENTATION => Hint::NameImplementation,
        HINT_HOOK_IMPLEMENTATIONS => Hint::HookImplementations {
            functions: wire.functions.clone()?,
            unnamed: wire.unnamed?,
        },
        HINT_LEAVE_OUT => Hint::LeaveOut {
            option: match wire.option.as_deref()? {
                OPT_FLOAT_ARGS => RequestOption::FloatArgs,
                OPT_PYTHON => RequestOption::Python,
                _ => return None,
            },
        },
        _ => return None,
    })
}

/// Labels of an i386 stash's copied stack words, as the reader names them
/// (`stack+4`, ...: offsets from the hooked function's entry `esp`).
const I386_STACK_LABELS: [&str; trampolines::i386::MAX_STACK_WORDS as usize] = [
    "stack+4", "stack+8", "stack+12", "stack+16", "stack+20", "stack+24", "stack+28", "stack+32",
    "stack+36", "stack+40", "stack+44", "stack+48", "stack+52", "stack+56", "stack+60", "stack+64",
];

/// The reader's own name for a stashed register: x86-64's argument registers,
/// i386's stashed registers, and (`i386`) its stack word labels.
fn register_name(name: &str, i386: bool) -> Option<&'static str> {
    let x86_64 = trampolines::x86_64::ARGUMENT_REGS.map(|r| r.name());
    let regs32 = trampolines::i386::STASHED_REGS.map(|r| r.name());
    let stack32: &[&'static str] = if i386 { &I386_STACK_LABELS } else { &[] };
    x86_64
        .into_iter()
        .chain(regs32)
        .chain(stack32.iter().copied())
        .find(|r| *r == name)
}

/// A frame's stashed arguments back from the flat list `Frame::args` (registers,
/// stack words, xmm registers: [`StashedArgs::slots`]).
fn stash(f: &crate::Frame) -> Result<Option<StashedArgs>> {
    if !f.hooked {
        return Ok(None);
    }
    // i386 stashes eax, edx and ecx, and names its stack words among them.
    let regs32 = trampolines::i386::STASHED_REGS.map(|r| r.name());
    let i386 = f.args.iter().any(|a| regs32.contains(&a.register.as_str()));
    let mut stash = StashedArgs {
        registers: Vec::new(),
        stack: Vec::new(),
        xmm: Vec::new(),
        variadic: f.variadic,
        frame: f.stash_frame,
        function: f.hook_address,
        hook: f.hook.clone(),
    };
    for a in &f.args {
        if a.register == format!("xmm{}", stash.xmm.len()) {
            stash
                .xmm
                .push(u128::from(a.value) | (u128::from(a.value_high) << 64));
        } else if let Some(name) = register_name(&a.register, i386) {
            stash.registers.push((name, a.value));
        } else if !i386 && a.register == format!("stack+{}", 8 * (stash.stack.len() + 1)) {
            stash.stack.push(a.value);
        } else {
            return unknown("the stashed register", &a.register);
        }
    }
    Ok(Some(stash))
}

/// A named, typed argument back from its wire form.
fn arg_value(p: &Param) -> Result<ArgValue> {
    let Param {
        name,
        type_name,
        display,
        source,
        register,
        has_value,
        value,
    } = p;
    let source = match source.as_str() {
        "" => None,
        s => Some(
            [ArgSource::Stash, ArgSource::Dwarf]
                .into_iter()
                .find(|k| k.name() == s)
                .map_or_else(|| unknown("the argument source", s), Ok)?,
        ),
    };
    Ok(ArgValue {
        name: non_empty(name),
        ty: non_empty(type_name),
        display: display.clone(),
        source,
        register: non_empty(register),
        value: has_value.then_some(*value),
    })
}

fn frame_kind(name: &str) -> Result<FrameKind> {
    [
        FrameKind::Normal,
        FrameKind::Trampoline,
        FrameKind::Relocated,
    ]
    .into_iter()
    .find(|k| crate::to_wire::frame_kind_name(*k) == name)
    .map_or_else(|| unknown("the frame kind", name), Ok)
}

/// One frame back from its wire form.
fn frame(f: &crate::Frame) -> Result<Frame> {
    let crate::Frame {
        index: _,
        pc,
        function,
        offset,
        module,
        hooked: _,
        kind,
        stash_frame: _,
        args: _,
        variadic: _,
        source_function,
        file,
        line,
        params,
        inlined,
        hook: _,
        hook_address: _,
        stack_start,
        stack_end,
    } = f;
    Ok(Frame {
        pc: *pc,
        function: non_empty(function),
        offset: *offset,
        module: non_empty(module),
        kind: frame_kind(kind)?,
        stash: stash(f)?,
        source_function: non_empty(source_function),
        file: non_empty(file),
        line: (*line != 0).then_some(*line),
        inlined: inlined
            .iter()
            .map(|i| {
                Ok(InlinedFrame {
                    function: non_empty(&i.function),
                    file: non_empty(&i.file),
                    line: (i.line != 0).then_some(i.line),
                    args: i.params.iter().map(arg_value).collect::<Result<_>>()?,
                })
            })
            .collect::<Result<_>>()?,
        args: params.iter().map(arg_value).collect::<Result<_>>()?,
        stack: (*stack_start != 0 || *stack_end != 0).then_some((*stack_start, *stack_end)),
    })
}

fn param_kind(name: &str) -> Result<ParamKind> {
    [
        ParamKind::PositionalOnly,
        ParamKind::Positional,
        ParamKind::KeywordOnly,
        ParamKind::VarArgs,
        ParamKind::VarKeywords,
    ]
    .into_iter()
    .find(|k| param_kind_name(*k) == name)
    .map_or_else(|| unknown("the Python parameter kind", name), Ok)
}

fn owner(name: &str) -> Result<FrameOwner> {
    match name {
        "thread" => Ok(FrameOwner::Thread),
        "generator" => Ok(FrameOwner::Generator),
        raw => raw
            .parse()
            .map(FrameOwner::Other)
            .or_else(|_| unknown("the Python frame owner", raw)),
    }
}

fn placement(f: &crate::PyFrame) -> Result<Option<Placement>> {
    let paired_by = match f.paired_by.as_str() {
        "" if f.eval_frame == -1 => return Ok(None),
        "stash" => PairedBy::Stash,
        "order" => PairedBy::Order,
        "entry-frame" => PairedBy::EntryFrame,
        other => return unknown("the Python pairing", other),
    };
    let eval_frame = usize::try_from(f.eval_frame).map_or_else(
        |_| unknown("the evaluator frame", &f.eval_frame.to_string()),
        Ok,
    )?;
    Ok(Some(Placement {
        eval_frame,
        paired_by,
    }))
}

/// One Python frame back from its wire form.
fn py_frame(f: &crate::PyFrame) -> Result<StackFrame> {
    let crate::PyFrame {
        function,
        file,
        line,
        params,
        paired_by: _,
        eval_frame: _,
        frame,
        entry,
        code,
        first_line,
        entry_frame,
        owner: wire_owner,
        incomplete,
        params_note,
        interpreter,
        interpreter_id,
    } = f;
    Ok(StackFrame {
        frame: PyFrame {
            addr: *frame,
            code: *code,
            qualname: function.clone(),
            file: file.clone(),
            line: (*line != 0).then_some(*line),
            first_line: *first_line,
            is_entry: *entry,
            entry_frame: (*entry_frame != 0).then_some(*entry_frame),
            owner: owner(wire_owner)?,
            incomplete: *incomplete,
            params: params
                .iter()
                .map(|p| {
                    Ok(PyParam {
                        name: p.name.clone(),
                        kind: param_kind(&p.kind)?,
                        value: PyValue {
                            type_name: p.type_name.clone(),
                            display: p.display.clone(),
                        },
                    })
                })
                .collect::<Result<_>>()?,
            params_note: non_empty(params_note).map(Cow::Owned),
        },
        placement: placement(f)?,
        interpreter: (*interpreter != 0).then_some(InterpreterLabel {
            addr: *interpreter,
            id: (*interpreter_id >= 0).then_some(*interpreter_id),
        }),
    })
}

/// One thread back from its wire form.
fn thread(t: &crate::Thread) -> Result<ThreadBacktrace> {
    let crate::Thread {
        tid,
        name,
        stopped_us,
        without_stop,
        syscall,
        truncated,
        frames,
        has_python,
        python,
        python_notes,
    } = t;
    let python = match has_python {
        true => Some(PythonStack {
            frames: python.iter().map(py_frame).collect::<Result<_>>()?,
            notes: python_notes.clone(),
        }),
        false => None,
    };
    Ok(ThreadBacktrace {
        tid: Tid::from_raw(*tid as i32),
        name: name.clone(),
        frames: frames.iter().map(frame).collect::<Result<_>>()?,
        truncated: non_empty(truncated).map(StopReason::Text),
        stopped: micros(*stopped_us),
        python,
        capture: match without_stop {
            true => Capture::WithoutStop { syscall: *syscall },
            false => Capture::Stopped,
        },
    })
}

/// A backtrace of `pid` back from what `Backtrace` returned.
pub fn backtrace(pid: Pid, threads: &[crate::Thread]) -> Result<Backtrace> {
    Ok(Backtrace {
        pid,
        threads: threads.iter().map(thread).collect::<Result<_>>()?,
    })
}
