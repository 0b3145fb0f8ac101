//! `--bus`: the same subcommands, sent through `argstashd` over D-Bus.
//!
//! Results come back as the `argstash-dbus` wire types and are turned into the
//! injector's types, then printed by the same functions as the standalone CLI's
//! results, so `inject`, `eject`, `list` and `bt` print exactly what it prints.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use argstash_dbus::{HookEntry, Injector1ProxyBlocking, Param};
use argstash_dbus::{
    OPT_ALWAYS_STOP, OPT_FLOAT_ARGS, OPT_FUNCTION_STACK_ARGS, OPT_SHOW_TRAMPOLINES, OPT_STACK_ARGS,
};
use injector::reader::args::{ArgSource, ArgValue};
use injector::{
    Backtrace, Capture, Frame, FrameKind, InlinedFrame, StashedArgs, StopReason, ThreadBacktrace,
};
use injector::{EjectReport, HookInfo, InstallReport};
use injector::{HookUnwindStatus, UnwindReport};
use trampolines::arena::HookState;
use zbus::blocking::{connection, Connection};
use zbus::zvariant::Value;

use crate::{output, Command};

/// Connects to `system`, `session` or a D-Bus address.
fn connect(bus: &str) -> Result<Connection> {
    let conn = match bus {
        "system" => Connection::system(),
        "session" => Connection::session(),
        addr => connection::Builder::address(addr)
            .with_context(|| format!("bad bus address `{addr}`"))?
            .build(),
    };
    // zbus's message already names its cause: print it once.
    conn.map_err(|e| anyhow::anyhow!("cannot connect to the {bus} bus: {e}"))
}

fn pid_arg(pid: injector::Pid) -> Result<u32> {
    u32::try_from(pid.as_raw()).with_context(|| format!("{pid} is not a valid pid"))
}

fn hook_info(e: &HookEntry) -> HookInfo {
    HookInfo {
        name: e.function.clone(),
        module: e.module.clone(),
        function: e.address,
        patch_addr: e.patch_address,
        patch_len: e.patch_len as usize,
        trampoline: e.trampoline,
        arena: e.arena,
        slot: e.slot,
        stack_words: e.stack_words,
        variadic: e.variadic,
        xmm: e.xmm,
        state: match e.state.as_str() {
            "active" => HookState::Active,
            "ejected" => HookState::Ejected,
            _ => HookState::Free,
        },
        installed_ns: e.installed_ns,
        signature: (!e.signature.is_empty()).then(|| e.signature.clone()),
        // Known at install only, as in the standalone listing.
        window_source: None,
    }
}

fn path(s: Option<String>) -> Option<std::path::PathBuf> {
    s.filter(|s| !s.is_empty()).map(std::path::PathBuf::from)
}

fn micros(us: Option<u64>) -> Duration {
    Duration::from_micros(us.unwrap_or(0))
}

/// The injector's unwind report back from its wire form, every field named (no
/// `..`): a field added to the injector's report does not compile here until it
/// is carried, so `--bus` cannot print less than the standalone CLI.
fn unwind_report(u: argstash_dbus::UnwindReport) -> UnwindReport {
    UnwindReport {
        registered: u.registered.unwrap_or(0) as usize,
        unwinder: u.unwinder,
        notes: u.notes.unwrap_or_default(),
        perf_map: path(u.perf_map),
        perf_jitdump: path(u.perf_jitdump),
        perf_jitdump_elapsed: micros(u.perf_jitdump_elapsed_us),
        symbol_file: path(u.symbol_file),
        gdb_jit: u.gdb_jit.unwrap_or(0) as usize,
        elapsed: micros(u.elapsed_us),
    }
}

/// What an install did, back from `InjectWithReport`.
fn install_report(r: argstash_dbus::InstallReport) -> InstallReport {
    let sources = r.window_sources.unwrap_or_default();
    InstallReport {
        hooks: r
            .hooks
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, e)| HookInfo {
                window_source: sources
                    .get(i)
                    .and_then(|s| injector::WindowSource::from_name(s)),
                ..hook_info(e)
            })
            .collect(),
        stopped: micros(r.stopped_us),
        threads: r.threads.unwrap_or(0) as usize,
        new_arenas: r.new_arenas.unwrap_or_default(),
        moved_threads: r.moved_threads.unwrap_or_default(),
        unwind: unwind_report(r.unwind.unwrap_or_default()),
        // Not printed, not carried.
        rip_census: Default::default(),
        signals: signals(r.signals),
    }
}

/// The signals a report gave back, from the wire.
fn signals(entries: Option<Vec<argstash_dbus::SignalEntry>>) -> Vec<injector::SignalOutcome> {
    entries
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| {
            Some(injector::SignalOutcome {
                tid: e.tid,
                signal: e.signal,
                code: e.code,
                fate: injector::SignalFate::from_name(&e.fate, e.errno)?,
            })
        })
        .collect()
}

/// What an eject did, back from `EjectWithReport`/`EjectAllWithReport`.
fn eject_report(r: argstash_dbus::EjectReport) -> EjectReport {
    EjectReport {
        hooks: r.hooks.unwrap_or_default().iter().map(hook_info).collect(),
        stopped: micros(r.stopped_us),
        moved_threads: r.moved_threads.unwrap_or_default(),
        // Not printed, not carried.
        rip_census: Default::default(),
        unwind: unwind_report(r.unwind.unwrap_or_default()),
        signals: signals(r.signals),
    }
}

/// The unwind rows of `list`, back from `UnwindStatus`.
fn unwind_status(s: argstash_dbus::UnwindStatus) -> (Vec<HookUnwindStatus>, bool) {
    let rows = s
        .hooks
        .unwrap_or_default()
        .into_iter()
        .map(|h| HookUnwindStatus {
            name: h.function,
            arena: h.arena,
            slot: h.slot,
            described: h.described,
            libgcc: h.libgcc,
            gdb_jit: h.gdb_jit,
            perf_map: h.perf_map,
            perf_jit: h.perf_jit,
        })
        .collect();
    (rows, s.has_libgcc.unwrap_or(false))
}

/// The injector's static name for a register or stack slot the wire names
/// (`rdi`, `eax`, `stack+N`); `None` for anything else.
///
/// Names are interned: the set is small and bounded (argument registers of both
/// architectures and `stack+N` for N <= 256), so each is leaked at most once.
fn register(name: &str) -> Option<&'static str> {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    const REGISTERS: [&str; 9] = ["rdi", "rsi", "rdx", "rcx", "r8", "r9", "eax", "edx", "ecx"];
    if let Some(r) = REGISTERS.into_iter().find(|r| *r == name) {
        return Some(r);
    }
    let offset: u16 = name.strip_prefix("stack+")?.parse().ok()?;
    if offset == 0 || offset > 256 || name != format!("stack+{offset}") {
        return None;
    }
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES.get_or_init(Default::default).lock().ok()?;
    if let Some(n) = names.get(name) {
        return Some(n);
    }
    let leaked: &'static str = Box::leak(name.to_string().into_boxed_str());
    names.insert(leaked);
    Some(leaked)
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// A named, typed argument back from its wire form.
fn arg_value(p: &Param) -> ArgValue {
    ArgValue {
        name: non_empty(&p.name),
        ty: non_empty(&p.type_name),
        display: p.display.clone(),
        source: match p.source.as_str() {
            "stash" => Some(ArgSource::Stash),
            "dwarf" => Some(ArgSource::Dwarf),
            _ => None,
        },
        register: non_empty(&p.register),
        value: p.has_value.then_some(p.value),
    }
}

fn frame(f: &argstash_dbus::Frame) -> Frame {
    // Registers and copied stack words print alike (`name=value`, in wire order),
    // so every non-xmm slot goes to `registers`; that also holds i386's `stack+N`.
    let stash = f.hooked.then(|| StashedArgs {
        registers: f
            .args
            .iter()
            .filter_map(|a| Some((register(&a.register)?, a.value)))
            .collect(),
        stack: Vec::new(),
        xmm: f
            .args
            .iter()
            .filter(|a| a.register.starts_with("xmm"))
            .map(|a| u128::from(a.value) | (u128::from(a.value_high) << 64))
            .collect(),
        variadic: f.variadic,
        frame: f.stash_frame,
        function: 0,
        hook: f.hook.clone(),
    });
    Frame {
        pc: f.pc,
        function: non_empty(&f.function),
        offset: f.offset,
        module: non_empty(&f.module),
        kind: match f.kind.as_str() {
            "trampoline" => FrameKind::Trampoline,
            "relocated" => FrameKind::Relocated,
            _ => FrameKind::Normal,
        },
        stash,
        source_function: non_empty(&f.source_function),
        file: non_empty(&f.file),
        line: (f.line != 0).then_some(f.line),
        inlined: f
            .inlined
            .iter()
            .map(|i| InlinedFrame {
                function: non_empty(&i.function),
                file: non_empty(&i.file),
                line: (i.line != 0).then_some(i.line),
                args: i.params.iter().map(arg_value).collect(),
            })
            .collect(),
        args: f.params.iter().map(arg_value).collect(),
        // Only the pairing needs it, and it was done by the daemon.
        stack: None,
    }
}

/// Runs `command` through the daemon on `bus`.
pub fn run(bus: &str, command: Command) -> Result<()> {
    let conn = connect(bus)?;
    let proxy = Injector1ProxyBlocking::builder(&conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()?;
    match command {
        Command::Inject(a) => {
            let pid = pid_arg(a.pid)?;
            let mut funcs = a.funcs.clone();
            funcs.extend(a.addr.iter().map(|x| format!("0x{x:x}")));
            let names: Vec<&str> = funcs.iter().map(String::as_str).collect();
            let mut opts = HashMap::new();
            if a.stash.float_args {
                opts.insert(OPT_FLOAT_ARGS, Value::from(true));
            }
            let func_names: Vec<&str> = a
                .funcs
                .iter()
                .map(|f| {
                    injector::reader::args::split_function(f).map_or(f.as_str(), |(name, _)| name)
                })
                .collect();
            let windows: HashMap<String, u16> =
                a.stash.function_windows(&func_names)?.into_iter().collect();
            if !windows.is_empty() {
                opts.insert(OPT_FUNCTION_STACK_ARGS, Value::from(windows));
            }
            if let Some(n) = a.stash.global_window() {
                opts.insert(OPT_STACK_ARGS, Value::from(n));
            }
            if a.python > 0 {
                opts.insert(argstash_dbus::OPT_PYTHON, Value::from(true));
            }
            let report = proxy.inject_with_report(pid, &names, opts)?;
            output::print_install(&install_report(report));
        }
        Command::Eject(a) => {
            let pid = pid_arg(a.pid)?;
            let report = if a.all {
                proxy.eject_all_with_report(pid)?
            } else {
                let mut names: Vec<&str> = a.funcs.iter().map(String::as_str).collect();
                if a.python > 0 {
                    names.push(injector::reader::python::EVAL_FRAME_FUNCTION);
                }
                proxy.eject_with_report(pid, &names)?
            };
            output::print_eject(&eject_report(report));
        }
        Command::List(a) => {
            let hooks: Vec<HookInfo> = proxy
                .list_hooks(pid_arg(a.pid)?)?
                .iter()
                .map(hook_info)
                .collect();
            output::print_list(a.pid, &hooks, a.json);
            if !a.json {
                // As standalone: the rows are extra, a failure to read them is not an error.
                if let Ok(status) = proxy.unwind_status(pid_arg(a.pid)?) {
                    let (status, has_libgcc) = unwind_status(status);
                    output::print_unwind_status(&status, has_libgcc, &hooks);
                }
            }
        }
        Command::Bt(a) => {
            let Some(pid) = a.pid else {
                bail!("`bt --core` reads the core file here, not through the daemon: drop --bus");
            };
            let tid = match a.tid {
                Some(t) => {
                    u32::try_from(t.as_raw()).with_context(|| format!("{t} is not a valid tid"))?
                }
                None => 0,
            };
            let mut opts = HashMap::new();
            opts.insert(OPT_SHOW_TRAMPOLINES, Value::from(a.show_trampolines));
            if a.always_stop {
                opts.insert(OPT_ALWAYS_STOP, Value::from(true));
            }
            let threads = proxy.backtrace(pid_arg(pid)?, tid, opts)?;
            let bt = Backtrace {
                pid,
                threads: threads
                    .iter()
                    .map(|t| ThreadBacktrace {
                        tid: injector::Tid::from_raw(t.tid as i32),
                        name: t.name.clone(),
                        frames: t.frames.iter().map(frame).collect(),
                        truncated: (!t.truncated.is_empty())
                            .then(|| StopReason::Text(t.truncated.clone())),
                        stopped: Duration::from_micros(t.stopped_us),
                        python: crate::python_output::from_wire(t),
                        capture: match t.without_stop {
                            true => Capture::WithoutStop { syscall: t.syscall },
                            false => Capture::Stopped,
                        },
                    })
                    .collect(),
            };
            let view = crate::bt_view(&a);
            crate::python_output::print_backtrace(&bt, a.json, view);
        }
        Command::Demo => bail!("`demo` runs standalone only: drop --bus"),
        Command::Run(_) => bail!("`run` starts the command itself: drop --bus"),
        Command::Record(_) => bail!(
            "`record` runs standalone only: drop --bus (a sampling loop stops the target \
             hundreds of times a second and must run next to it)"
        ),
    }
    Ok(())
}
