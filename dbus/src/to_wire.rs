//! The injector's results and errors in their D-Bus form: what the daemon sends.
//! [`crate::from_wire`] is the way back.
//!
//! Every library struct is taken apart field by field (no `..`): a field added to
//! the injector's types does not compile here until it is carried, so a client
//! cannot silently get less than the library gave.

use crate::{
    hook_path, Arg, Error, ErrorHint, ErrorKind, Frame, HookEntry, HookUnwind, Inlined, Param,
    Thread, UnwindStatus, OPT_FLOAT_ARGS, OPT_PYTHON, OPT_STACK_ARGS,
};
use injector::names::SymbolError;
use injector::names::{ArgValue, SignatureError};
use injector::pyframes::FrameOwner;
use injector::HookInfo;
use injector::{Backtrace, FrameKind};
use injector::{Hint, RequestOption, UNNAMED_CODE_ADVICE};
use injector::{Refusal, SessionError};
use trampolines::arena::HookState;
use zbus::zvariant::OwnedObjectPath;

/// The named D-Bus error for an injector error about process `pid`: the message the
/// CLI prints, with the error's hint worded for D-Bus callers (and sent typed).
pub fn error(pid: i32, e: injector::Error) -> Error {
    use injector::Error as E;
    let kind = match &e {
        E::Session(s) => match s {
            SessionError::NoSuchProcess { .. }
            | SessionError::NoSuchThread { .. }
            | SessionError::NotAProcess { .. }
            | SessionError::Exited { .. } => ErrorKind::NoSuchProcess,
            SessionError::NotPermitted {
                reason: Refusal::TracedBy { .. },
                ..
            } => ErrorKind::Busy,
            SessionError::NotPermitted { .. }
            | SessionError::Init
            | SessionError::OwnProcess { .. }
            | SessionError::KernelThread { .. } => ErrorKind::NotPermitted,
            _ => ErrorKind::Failed,
        },
        E::Symbol(s) => match s {
            SymbolError::NotFound { .. }
            | SymbolError::ModuleNotFound { .. }
            | SymbolError::AddressNotInFunction { .. } => ErrorKind::FunctionNotFound,
            SymbolError::Ambiguous { .. } | SymbolError::AmbiguousName { .. } => {
                ErrorKind::Ambiguous
            }
            SymbolError::ZeroSize { .. } => ErrorKind::Unsafe,
            SymbolError::BadName { .. } => ErrorKind::InvalidArgs,
            _ => ErrorKind::Failed,
        },
        E::Plan { .. } | E::Codegen { .. } | E::Changed { .. } | E::ThreadInPatch { .. } => {
            ErrorKind::Unsafe
        }
        E::AlreadyHooked { .. } => ErrorKind::AlreadyHooked,
        E::NotHooked { .. } => ErrorKind::NotHooked,
        E::Duplicate { .. } => ErrorKind::InvalidArgs,
        E::Signature(SignatureError::Syntax { .. } | SignatureError::TooLong { .. }) => {
            ErrorKind::InvalidArgs
        }
        E::Unsupported32Bit { .. } => ErrorKind::NotPermitted,
        E::PythonHookRefused { .. } => ErrorKind::InvalidArgs,
        E::Proc { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
            ErrorKind::NotPermitted
        }
        _ => ErrorKind::Failed,
    };
    let text = message(&e);
    match e.hint() {
        Some(hint) => {
            let worded = format!("{text}{}", hint_text(pid, &hint));
            match wire_hint(&hint, text) {
                Some(wire) => Error::with_hint(kind, worded, wire),
                None => Error::new(kind, worded),
            }
        }
        None => Error::new(kind, text),
    }
}

/// A hint in D-Bus terms (methods, option keys, function strings), as a clause
/// appended to the message.
fn hint_text(pid: i32, hint: &Hint) -> String {
    match hint {
        Hint::EjectFirst {
            function,
            arena,
            slot,
        } => format!(
            ": eject it first with the Eject method of {}, or Eject naming `{function}`",
            hook_path(pid as u32, *arena, *slot).as_str()
        ),
        Hint::GiveStackWindow { max } => format!(
            "; give the window yourself with the Inject option `{OPT_STACK_ARGS}` (incoming \
             8-byte stack words, 0 to {max})"
        ),
        Hint::PickByAddress => {
            ", or give a function's entry address (0xADDR) to pick one function".to_string()
        }
        Hint::UseEntry { entry } => format!(": give {entry:#x} as the function"),
        Hint::WriteOneAlone { read_as, names } => {
            let named: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
            let list = match named.as_slice() {
                [] => String::new(),
                [one] => one.clone(),
                [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
            };
            match (read_as, names.len()) {
                (None, _) => format!("\n  hook one alone: give as the function {list}"),
                (Some(_), 1) => format!("\n  to hook it, give as the function {list}"),
                (Some(_), _) => {
                    format!("\n  to hook one of them, give as the function {list}")
                }
            }
        }
        Hint::NameImplementation => "; hook the implementation instead, by its own name (`nm` \
             the module's debug file) or its entry address (0xADDR)"
            .to_string(),
        Hint::HookImplementations { functions, unnamed } => {
            let mut text = String::new();
            if !functions.is_empty() {
                let named: Vec<String> = functions.iter().map(|f| format!("`{f}`")).collect();
                text.push_str(&format!(
                    "\n  hook {} instead: give {}",
                    if functions.len() == 1 {
                        "that"
                    } else {
                        "those"
                    },
                    named.join(", ")
                ));
            }
            if *unnamed {
                text.push_str("\n  ");
                text.push_str(UNNAMED_CODE_ADVICE);
            }
            text
        }
        Hint::LeaveOut { option } => {
            format!("; leave out the Inject option `{}`", option_key(*option))
        }
        Hint::AcceptUnwindLoss { retry: true } => {
            "; try again later (a thread may be at a safe point then): the daemon never \
             hooks such a function unprotected"
                .to_string()
        }
        Hint::AcceptUnwindLoss { retry: false } => {
            "; the daemon never hooks such a function unprotected".to_string()
        }
        // Core files are read by the client itself, never through the daemon.
        Hint::GiveKernelCore => {
            "; give the core the kernel wrote (see /proc/sys/kernel/core_pattern)".to_string()
        }
        Hint::GiveCoreNotProgram => "; give the core file (and this file as the executable if \
             it is the program that crashed)"
            .to_string(),
    }
}

/// The `Inject` option key of a request option.
fn option_key(option: RequestOption) -> &'static str {
    match option {
        RequestOption::FloatArgs => OPT_FLOAT_ARGS,
        RequestOption::Python => OPT_PYTHON,
    }
}

/// A hint in its wire form, after `text` (the message without it); `None` for
/// hints about core files, which no daemon call reads.
pub(crate) fn wire_hint(hint: &Hint, text: String) -> Option<ErrorHint> {
    use crate::{
        HINT_EJECT_FIRST, HINT_GIVE_STACK_WINDOW, HINT_HOOK_IMPLEMENTATIONS, HINT_LEAVE_OUT,
        HINT_NAME_IMPLEMENTATION, HINT_PICK_BY_ADDRESS, HINT_USE_ENTRY, HINT_WRITE_ONE_ALONE,
    };
    let mut wire = ErrorHint {
        text: Some(text),
        ..Default::default()
    };
    let kind = match hint {
        Hint::EjectFirst {
            function,
            arena,
            slot,
        } => {
            wire.function = Some(function.clone());
            wire.arena = Some(*arena);
            wire.slot = Some(*slot);
            HINT_EJECT_FIRST
        }
        Hint::GiveStackWindow { max } => {
            wire.max = Some(*max);
            HINT_GIVE_STACK_WINDOW
        }
        Hint::PickByAddress => HINT_PICK_BY_ADDRESS,
        Hint::UseEntry { entry } => {
            wire.entry = Some(*entry);
            HINT_USE_ENTRY
        }
        Hint::NameImplementation => HINT_NAME_IMPLEMENTATION,
        Hint::WriteOneAlone { read_as, names } => {
            wire.read_as = read_as.clone();
            wire.functions = Some(names.clone());
            HINT_WRITE_ONE_ALONE
        }
        Hint::HookImplementations { functions, unnamed } => {
            wire.functions = Some(functions.clone());
            wire.unnamed = Some(*unnamed);
            HINT_HOOK_IMPLEMENTATIONS
        }
        Hint::LeaveOut { option } => {
            wire.option = Some(option_key(*option).to_string());
            HINT_LEAVE_OUT
        }
        Hint::GiveKernelCore | Hint::GiveCoreNotProgram | Hint::AcceptUnwindLoss { .. } => {
            return None
        }
    };
    wire.kind = Some(kind.to_string());
    Some(wire)
}

/// The error and its causes, as the CLI prints them, without repeating a cause
/// that the message already contains.
fn message(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        source = s.source();
    }
    msg
}

/// The object path of a hook.
pub fn path_of(pid: i32, h: &HookInfo) -> OwnedObjectPath {
    hook_path(pid as u32, h.arena, h.slot)
}

/// A hook record as `ListHooks` returns it.
///
/// A hook's window source is known at install only: [`install_report`] carries
/// it beside the entries (`window_sources`).
pub fn hook_entry(pid: i32, h: &HookInfo) -> HookEntry {
    let HookInfo {
        name,
        module,
        function,
        patch_addr,
        patch_len,
        trampoline,
        arena,
        slot,
        stack_words,
        variadic,
        xmm,
        state,
        installed_ns,
        signature,
        window_source: _,
    } = h;
    let path = if *state == HookState::Active {
        path_of(pid, h)
    } else {
        OwnedObjectPath::try_from("/").expect("root path")
    };
    HookEntry {
        path,
        pid: pid as u32,
        function: name.clone(),
        module: module.clone(),
        address: *function,
        patch_address: *patch_addr,
        patch_len: count(*patch_len),
        trampoline: *trampoline,
        arena: *arena,
        slot: *slot,
        stack_words: *stack_words,
        state: state.name().to_string(),
        installed_ns: *installed_ns,
        variadic: *variadic,
        xmm: *xmm,
        signature: signature.clone().unwrap_or_default(),
        demangled: injector::names::shown_name(name),
    }
}

fn path_text(p: &Option<std::path::PathBuf>) -> Option<String> {
    p.as_ref().map(|p| p.display().to_string())
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// An unwind report in its wire form.
///
/// Every field is named (no `..`): a field added to the injector's report does not
/// compile here until it is carried, so `--bus` cannot silently print less than the
/// standalone CLI. Notes are carried as they are, whatever they say.
pub fn unwind_report(u: &injector::UnwindReport) -> crate::UnwindReport {
    let injector::UnwindReport {
        registered,
        unwinder,
        notes,
        perf_map,
        perf_jitdump,
        perf_jitdump_elapsed,
        symbol_file,
        gdb_jit,
        elapsed,
    } = u;
    crate::UnwindReport {
        registered: Some(count(*registered)),
        unwinder: unwinder.clone(),
        notes: Some(notes.clone()),
        perf_map: path_text(perf_map),
        perf_jitdump: path_text(perf_jitdump),
        perf_jitdump_elapsed_us: Some(micros(*perf_jitdump_elapsed)),
        symbol_file: path_text(symbol_file),
        gdb_jit: Some(count(*gdb_jit)),
        elapsed_us: Some(micros(*elapsed)),
    }
}

/// An install report as `InjectWithReport` returns it (every field named, as in [`unwind_report`]).
pub fn install_report(pid: i32, r: &injector::InstallReport) -> crate::InstallReport {
    let injector::InstallReport {
        hooks,
        stopped,
        threads,
        new_arenas,
        moved_threads,
        unwind,
        rip_census,
        signals,
    } = r;
    crate::InstallReport {
        hooks: Some(hooks.iter().map(|h| hook_entry(pid, h)).collect()),
        window_sources: Some(
            hooks
                .iter()
                .map(|h| {
                    h.window_source
                        .map(|s| s.name())
                        .unwrap_or_default()
                        .to_string()
                })
                .collect(),
        ),
        stopped_us: Some(micros(*stopped)),
        threads: Some(count(*threads)),
        new_arenas: Some(new_arenas.clone()),
        moved_threads: Some(moved_threads.clone()),
        unwind: Some(unwind_report(unwind)),
        signals: Some(signal_entries(signals)),
        rip_census: Some(rip_census_of(rip_census)),
    }
}

/// Where the stopped threads were, as the wire carries it.
fn rip_census_of(c: &injector::RipCensus) -> crate::RipCensus {
    let injector::RipCensus {
        in_patch,
        in_relocated,
        in_trampoline,
    } = c;
    crate::RipCensus {
        in_patch: count(*in_patch),
        in_relocated: count(*in_relocated),
        in_trampoline: count(*in_trampoline),
    }
}

/// The signals a report gives back, as the wire carries them.
pub fn signal_entries(signals: &[injector::SignalOutcome]) -> Vec<crate::SignalEntry> {
    signals
        .iter()
        .map(|o| {
            let injector::SignalOutcome {
                tid,
                signal,
                code,
                fate,
            } = o;
            crate::SignalEntry {
                tid: *tid,
                signal: *signal,
                code: *code,
                fate: fate.name().to_string(),
                errno: match fate {
                    injector::SignalFate::Lost { errno } => *errno,
                    _ => 0,
                },
            }
        })
        .collect()
}

/// An eject report as `EjectWithReport` returns it (every field named, as in [`unwind_report`]).
pub fn eject_report(pid: i32, r: &injector::EjectReport) -> crate::EjectReport {
    let injector::EjectReport {
        hooks,
        stopped,
        moved_threads,
        rip_census,
        unwind,
        signals,
    } = r;
    crate::EjectReport {
        hooks: Some(hooks.iter().map(|h| hook_entry(pid, h)).collect()),
        stopped_us: Some(micros(*stopped)),
        moved_threads: Some(moved_threads.clone()),
        unwind: Some(unwind_report(unwind)),
        signals: Some(signal_entries(signals)),
        rip_census: Some(rip_census_of(rip_census)),
    }
}

/// The unwind rows of `list` as `UnwindStatus` returns them.
pub fn unwind_status(status: &[injector::HookUnwindStatus], has_libgcc: bool) -> UnwindStatus {
    UnwindStatus {
        has_libgcc: Some(has_libgcc),
        hooks: Some(
            status
                .iter()
                .map(|s| {
                    let injector::HookUnwindStatus {
                        name,
                        arena,
                        slot,
                        described,
                        libgcc,
                        gdb_jit,
                        perf_map,
                        perf_jit,
                    } = s;
                    HookUnwind {
                        function: name.clone(),
                        arena: *arena,
                        slot: *slot,
                        described: *described,
                        libgcc: *libgcc,
                        gdb_jit: *gdb_jit,
                        perf_map: *perf_map,
                        perf_jit: *perf_jit,
                    }
                })
                .collect(),
        ),
    }
}

/// A named, typed argument in its wire form.
fn param(a: &ArgValue) -> Param {
    let ArgValue {
        name,
        ty,
        display,
        source,
        register,
        value,
    } = a;
    Param {
        name: name.clone().unwrap_or_default(),
        type_name: ty.clone().unwrap_or_default(),
        display: display.clone(),
        source: source.map(|s| s.name()).unwrap_or_default().to_string(),
        register: register.clone().unwrap_or_default(),
        has_value: value.is_some(),
        value: value.unwrap_or(0),
    }
}

/// One frame in its wire form: the same fields, in the same order, as `bt --json`.
fn frame(index: usize, f: &injector::Frame) -> Frame {
    let injector::Frame {
        pc,
        function,
        offset,
        module,
        kind,
        stash,
        source_function,
        file,
        line,
        inlined,
        args,
        stack,
    } = f;
    let slots = stash.as_ref().map(|s| s.slots()).unwrap_or_default();
    let wire_args = slots
        .into_iter()
        .map(|slot| Arg {
            // A stashed register that holds a known parameter carries its name and type.
            param: f.stashed_param(&slot.name).map(param).unwrap_or_default(),
            register: slot.name,
            value: slot.value as u64,
            value_high: (slot.value >> 64) as u64,
        })
        .collect();
    let (stack_start, stack_end) = stack.unwrap_or((0, 0));
    Frame {
        index: count(index),
        pc: *pc,
        function: function.clone().unwrap_or_default(),
        offset: *offset,
        module: module.clone().unwrap_or_default(),
        hooked: stash.is_some(),
        kind: frame_kind_name(*kind).to_string(),
        stash_frame: stash.as_ref().map(|s| s.frame).unwrap_or(0),
        args: wire_args,
        variadic: stash.as_ref().is_some_and(|s| s.variadic),
        source_function: source_function.clone().unwrap_or_default(),
        file: file.clone().unwrap_or_default(),
        line: line.unwrap_or(0),
        params: args.iter().map(param).collect(),
        inlined: inlined
            .iter()
            .map(|i| {
                let injector::InlinedFrame {
                    function,
                    file,
                    line,
                    args,
                } = i;
                Inlined {
                    function: function.clone().unwrap_or_default(),
                    file: file.clone().unwrap_or_default(),
                    line: line.unwrap_or(0),
                    params: args.iter().map(param).collect(),
                }
            })
            .collect(),
        hook: stash.as_ref().map(|s| s.hook.clone()).unwrap_or_default(),
        hook_address: stash.as_ref().map(|s| s.function).unwrap_or(0),
        stack_start,
        stack_end,
    }
}

/// The wire name of a frame kind (`Frame::kind`).
pub(crate) fn frame_kind_name(kind: FrameKind) -> &'static str {
    match kind {
        FrameKind::Normal => "normal",
        FrameKind::Trampoline => "trampoline",
        FrameKind::Relocated => "relocated",
    }
}

/// A backtrace as `Backtrace` returns it: the `threads` of `bt --json`.
pub fn threads(bt: &Backtrace) -> Vec<Thread> {
    bt.threads.iter().map(thread).collect()
}

/// One thread in its wire form.
fn thread(t: &injector::ThreadBacktrace) -> Thread {
    let injector::ThreadBacktrace {
        tid,
        name,
        frames,
        truncated,
        stopped,
        python,
        capture,
    } = t;
    Thread {
        tid: tid.as_raw() as u32,
        name: name.clone(),
        stopped_us: micros(*stopped),
        without_stop: capture.without_stop(),
        syscall: capture.syscall().unwrap_or(0),
        truncated: truncated
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        frames: frames
            .iter()
            .enumerate()
            .map(|(i, f)| frame(i, f))
            .collect(),
        has_python: python.is_some(),
        python: python
            .iter()
            .flat_map(|p| &p.frames)
            .map(py_frame)
            .collect(),
        python_notes: python.as_ref().map(|p| p.notes.clone()).unwrap_or_default(),
    }
}

/// The wire name of a Python frame's owner (`PyFrame::owner`).
pub(crate) fn owner_name(owner: FrameOwner) -> String {
    match owner {
        FrameOwner::Thread => "thread".to_string(),
        FrameOwner::Generator => "generator".to_string(),
        FrameOwner::Other(raw) => raw.to_string(),
    }
}

/// One Python frame in its wire form.
fn py_frame(f: &injector::pyframes::StackFrame) -> crate::PyFrame {
    use injector::pyframes::param_kind_name;
    let injector::pyframes::StackFrame {
        frame,
        placement,
        interpreter,
    } = f;
    let injector::pyframes::PyFrame {
        addr,
        code,
        qualname,
        file,
        line,
        first_line,
        is_entry,
        entry_frame,
        owner,
        incomplete,
        params,
        params_note,
    } = frame;
    crate::PyFrame {
        function: qualname.clone(),
        file: file.clone(),
        line: line.unwrap_or(0),
        params: params
            .iter()
            .map(|p| crate::PyParam {
                name: p.name.clone(),
                type_name: p.value.type_name.clone(),
                display: p.value.display.clone(),
                kind: param_kind_name(p.kind).to_string(),
            })
            .collect(),
        paired_by: placement
            .map(|p| p.paired_by.to_string())
            .unwrap_or_default(),
        eval_frame: placement
            .and_then(|p| i32::try_from(p.eval_frame).ok())
            .unwrap_or(-1),
        frame: *addr,
        entry: *is_entry,
        code: *code,
        first_line: *first_line,
        entry_frame: entry_frame.unwrap_or(0),
        owner: owner_name(*owner),
        incomplete: *incomplete,
        params_note: params_note.as_deref().unwrap_or_default().to_string(),
        interpreter: interpreter.map_or(0, |i| i.addr),
        interpreter_id: interpreter.and_then(|i| i.id).unwrap_or(-1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HINT_EJECT_FIRST;

    #[test]
    fn a_hint_is_worded_for_dbus_and_sent_typed() {
        let e = injector::Error::AlreadyHooked {
            function: "bar in /prog".into(),
            name: "bar".into(),
            slot: 2,
            arena: 0x7f00,
            trampoline: 0x7f40,
        };
        let text = e.to_string();
        let sent = error(42, e);
        assert_eq!(sent.kind(), Some(ErrorKind::AlreadyHooked));
        assert_eq!(
            sent.to_string(),
            format!(
                "{text}: eject it first with the Eject method of \
                 /org/argstash/Injector1/hooks/p42_7f00_2, or Eject naming `bar`"
            )
        );
        assert!(!sent.to_string().contains("--"), "no command-line syntax");
        let hint = sent.hint().unwrap();
        assert_eq!(hint.kind.as_deref(), Some(HINT_EJECT_FIRST));
        assert_eq!(hint.text.as_deref(), Some(text.as_str()));
        assert_eq!(
            (hint.function.as_deref(), hint.arena, hint.slot),
            (Some("bar"), Some(0x7f00), Some(2))
        );
        // No hint: the message alone.
        let plain = error(42, SessionError::NoSuchProcess { pid: 42 }.into());
        assert_eq!(plain.kind(), Some(ErrorKind::NoSuchProcess));
        assert!(plain.hint().is_none());
    }

    #[test]
    fn a_process_traced_by_someone_else_is_busy_other_refusals_are_not_permitted() {
        let refused =
            |reason| error(7, SessionError::NotPermitted { pid: 7, reason }.into()).kind();
        let traced = Refusal::TracedBy {
            thread: None,
            tracer: 99,
            tracer_name: "gdb".into(),
        };
        assert_eq!(refused(traced), Some(ErrorKind::Busy));
        assert_eq!(refused(Refusal::NotOwner), Some(ErrorKind::NotPermitted));
        assert_eq!(refused(Refusal::Policy), Some(ErrorKind::NotPermitted));
    }
}
