//! Text and JSON rendering of injector results, whichever interface produced
//! them (`ops::Local` or `bus::Bus`). Backtraces are rendered by
//! [`injector::render`] (native and Python frames interleaved, or one side only
//! with `--python` / `--native`).

pub use injector::render::View;
use injector::{Backtrace, EjectReport, HookInfo, InstallReport};
use serde_json::{json, Value};

fn micros(d: std::time::Duration) -> String {
    format!("{} us", d.as_micros())
}

/// Prints a backtrace as text or one JSON object, showing the frames `view` asks for.
pub fn print_backtrace(bt: &Backtrace, json: bool, view: View) {
    if json {
        println!("{}", injector::render::backtrace_json(bt, view));
    } else {
        print!("{}", injector::render::backtrace_text(bt, view));
    }
}

/// Prints what an install did.
pub fn print_install(r: &InstallReport) {
    for h in &r.hooks {
        println!(
            "hooked {} in {} at 0x{:x} ({} bytes patched at 0x{:x}, trampoline 0x{:x}, stack window {} words{}{}{})",
            h.name,
            h.module,
            h.function,
            h.patch_len,
            h.patch_addr,
            h.trampoline,
            h.stack_words,
            h.window_source
                .map(|s| format!(" from {}", s.name()))
                .unwrap_or_default(),
            if h.variadic {
                ", variadic: configured window (--stack-args N)"
            } else {
                ""
            },
            if h.xmm { ", xmm0-7 stashed" } else { "" }
        );
    }
    for a in &r.new_arenas {
        println!("created arena at 0x{a:x}");
    }
    if !r.moved_threads.is_empty() {
        println!(
            "moved threads {:?} out of the patched bytes",
            r.moved_threads
        );
    }
    println!(
        "target stopped for {} ({} threads)",
        micros(r.stopped),
        r.threads
    );
    print_unwind(&r.unwind, "registered");
    print_signals(&r.signals);
}

/// A signal's name: `SIGUSR1`, `SIGRTMIN+3`.
fn signal_name(signal: i32) -> String {
    let rtmin = libc::SIGRTMIN();
    if signal >= rtmin {
        return format!("SIGRTMIN+{}", signal - rtmin);
    }
    nix::sys::signal::Signal::try_from(signal)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {signal}"))
}

/// Notes for the signals held threads got that did not get back exactly as sent.
fn print_signals(signals: &[injector::SignalOutcome]) {
    for o in signals.iter().filter(|o| !o.fate.is_exact()) {
        println!(
            "note: {} (si_code {}) arrived at thread {} while it was held: {}",
            signal_name(o.signal),
            o.code,
            o.tid,
            o.fate.consequence()
        );
    }
}

/// Prints, per active hook, which other unwinders know about it.
pub fn print_unwind_status(
    status: &[injector::HookUnwindStatus],
    has_libgcc: bool,
    hooks: &[HookInfo],
) {
    if status.is_empty() {
        return;
    }
    if !has_libgcc {
        println!("no in-process unwinder (libgcc_s is not loaded): nothing to register C++ unwinding with");
    }
    for s in status {
        let call_through = hooks
            .iter()
            .any(|h| h.arena == s.arena && h.slot == s.slot && h.is_call_through());
        if call_through {
            // The extension maps its own arena, with no unwind area: nothing to register.
            println!(
                "unwind   {:<24} pep523-ext: the extension's own trampoline, no unwind info (argstash bt reads its frames from the arena; libgcc, gdb and perf are not told about it)",
                s.name
            );
            continue;
        }
        if !s.described {
            println!("unwind   {:<24} none (arena of an older argstash)", s.name);
            continue;
        }
        let yes = |b: bool| if b { "yes" } else { "no" };
        println!(
            "unwind   {:<24} libgcc {:<3}  gdb JIT {:<3}  perf map {:<3}  perf jitdump {}",
            s.name,
            yes(s.libgcc),
            yes(s.gdb_jit),
            yes(s.perf_map),
            yes(s.perf_jit)
        );
    }
}

/// Prints what happened to the hooks' unwind information (libgcc, perf map).
fn print_unwind(u: &injector::UnwindReport, verb: &str) {
    if let Some(m) = &u.unwinder {
        println!("unwind info {verb} with {m} for {} hooks", u.registered);
    } else if u.registered > 0 {
        println!("unwind info {verb} for {} hooks", u.registered);
    }
    if let Some(p) = &u.perf_map {
        println!("perf map: {}", p.display());
    }
    if let Some(p) = &u.perf_jitdump {
        if verb == "removed" {
            println!("perf jitdump: {} unmapped and removed", p.display());
        } else {
            println!(
                "perf jitdump: {} (perf record -k 1 ...; run perf inject --jit before eject)",
                p.display()
            );
        }
    }
    if u.gdb_jit > 0 {
        println!("gdb JIT interface: {verb} {} hooks", u.gdb_jit);
    }
    if let Some(p) = &u.symbol_file {
        println!(
            "gdb symbols: {} (in gdb: add-symbol-file {})",
            p.display(),
            p.display()
        );
    }
    for note in &u.notes {
        println!("note: {note}");
    }
}

/// Prints what an eject did.
pub fn print_eject(r: &EjectReport) {
    if r.hooks.is_empty() {
        println!("no active hooks: nothing to eject");
        return;
    }
    for h in &r.hooks {
        println!(
            "ejected {} in {} (original {} bytes restored at 0x{:x})",
            h.name, h.module, h.patch_len, h.patch_addr
        );
    }
    println!("target stopped for {}", micros(r.stopped));
    print_unwind(&r.unwind, "removed");
    print_signals(&r.signals);
}

fn hook_json(h: &HookInfo) -> Value {
    json!({
        "function": h.name,
        "demangled": injector::names::shown_name(&h.name),
        "module": h.module,
        "address": format!("0x{:x}", h.function),
        "patch_address": format!("0x{:x}", h.patch_addr),
        "patch_len": h.patch_len,
        "trampoline": format!("0x{:x}", h.trampoline),
        "arena": format!("0x{:x}", h.arena),
        "slot": h.slot,
        "stack_words": h.stack_words,
        "variadic": h.variadic,
        "xmm": h.xmm,
        "state": h.state.name(),
        "installed_ns": h.installed_ns,
        "signature": h.signature,
        "python": h.is_python(),
        "call_through": h.is_call_through(),
    })
}

/// Prints the hooks of a process.
pub fn print_list(pid: injector::Pid, hooks: &[HookInfo], json: bool) {
    if json {
        println!(
            "{}",
            json!({ "pid": pid.as_raw(), "hooks": hooks.iter().map(hook_json).collect::<Vec<_>>() })
        );
        return;
    }
    if hooks.is_empty() {
        println!("process {pid} has no argstash hooks");
        return;
    }
    println!(
        "{:<8} {:<24} {:<18} {:>5} {:<18} {:>5} {:<12}  module",
        "state", "function", "address", "patch", "trampoline", "stack", "args"
    );
    for h in hooks {
        let name = match &h.signature {
            Some(sig) => format!("{}({sig})", injector::names::shown_name(&h.name)),
            None => injector::names::shown_name(&h.name),
        };
        let kind = match (h.variadic, h.xmm) {
            _ if h.is_call_through() => "pep523-ext",
            _ if h.is_python() => "python",
            (true, true) => "variadic+xmm",
            (true, false) => "variadic",
            (false, true) => "xmm",
            (false, false) => "-",
        };
        println!(
            "{:<8} {:<24} 0x{:<16x} {:>5} 0x{:<16x} {:>5} {:<12}  {}",
            h.state.name(),
            name,
            h.function,
            h.patch_len,
            h.trampoline,
            h.stack_words,
            kind,
            h.module
        );
    }
    if hooks.iter().any(|h| h.is_call_through()) {
        println!("(pep523-ext: the `argstash` Python extension's PEP 523 hook, calling the evaluator; nothing is patched and only the process removes it, with argstash.uninstall())");
    }
    if hooks.iter().any(|h| h.variadic) {
        println!("(variadic: the stack window is a configured size, --stack-args N, default 8; arguments beyond it are not stashed)");
    }
}
