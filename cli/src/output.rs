//! Text and JSON rendering of injector results.

use injector::reader::args::ArgValue;
use injector::{EjectReport, HookInfo, InstallReport};
use injector::{Frame, FrameKind};
use serde_json::{json, Value};

/// A value as a person reads it: small numbers in decimal, the rest in hex.
pub fn display_value(v: u64) -> String {
    let signed = v as i64;
    if v < 0x10000 {
        v.to_string()
    } else if (-0x10000..0).contains(&signed) {
        signed.to_string()
    } else {
        format!("0x{v:x}")
    }
}

fn micros(d: std::time::Duration) -> String {
    format!("{} us", d.as_micros())
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
}

/// Prints, per active hook, which other unwinders know about it.
pub fn print_unwind_status(status: &[injector::HookUnwindStatus], has_libgcc: bool) {
    if status.is_empty() {
        return;
    }
    if !has_libgcc {
        println!("no in-process unwinder (libgcc_s is not loaded): nothing to register C++ unwinding with");
    }
    for s in status {
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
}

fn hook_json(h: &HookInfo) -> Value {
    json!({
        "function": h.name,
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
            Some(sig) => format!("{}({sig})", h.name),
            None => h.name.clone(),
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

fn arg_json(a: &ArgValue) -> Value {
    json!({
        "name": a.name,
        "type": a.ty,
        "display": a.display,
        "source": a.source.map(|s| s.name()),
        "register": a.register,
        "value": a.value,
    })
}

/// `name=display` as gdb prints one argument.
fn arg_text(a: &ArgValue) -> String {
    let name = a.name.as_deref().or(a.register.as_deref()).unwrap_or("?");
    format!("{name}={}", a.display)
}

/// One native frame in JSON (see [`crate::python_output`] for the `frames` list).
pub(crate) fn frame_json(index: usize, f: &Frame) -> Value {
    let slots = f.stash.as_ref().map(|s| s.slots()).unwrap_or_default();
    let args: Vec<Value> = slots
        .iter()
        .map(|slot| {
            let low = slot.value as u64;
            let mut a = json!({ "register": slot.name, "value": low });
            if slot.xmm {
                a["double"] = json!(f64::from_bits(low));
                a["raw"] = json!(format!("0x{:032x}", slot.value));
            }
            // A stashed register that holds a known parameter carries its name and type too.
            if let Some(p) = f.stashed_param(&slot.name) {
                a["name"] = json!(p.name);
                a["type"] = json!(p.ty);
                a["display"] = json!(p.display);
                a["source"] = json!("stash");
            }
            a
        })
        .collect();
    let mut v = json!({
        "index": index,
        "pc": format!("0x{:x}", f.pc),
        "function": f.function,
        "offset": f.offset,
        "module": f.module,
        "hooked": f.stash.is_some(),
        "variadic": f.stash.as_ref().is_some_and(|s| s.variadic),
        "args": args,
    });
    if f.kind != FrameKind::Normal {
        v["kind"] = json!(match f.kind {
            FrameKind::Trampoline => "trampoline",
            FrameKind::Relocated => "relocated",
            FrameKind::Normal => "normal",
        });
    }
    if let Some(s) = &f.stash {
        v["stash_frame"] = json!(format!("0x{:x}", s.frame));
        v["hook"] = json!(s.hook);
    }
    v["source_function"] = json!(f.source_function);
    v["file"] = json!(f.file);
    v["line"] = json!(f.line);
    v["params"] = json!(f.args.iter().map(arg_json).collect::<Vec<_>>());
    v["inlined"] = json!(f
        .inlined
        .iter()
        .map(|i| json!({
            "function": i.function,
            "file": i.file,
            "line": i.line,
            "params": i.args.iter().map(arg_json).collect::<Vec<_>>(),
        }))
        .collect::<Vec<_>>());
    v
}

/// Renders one frame as gdb does: one line per inlined function (innermost first,
/// each numbered as a frame), then the frame itself.
pub fn frame_lines(first_index: usize, f: &Frame) -> Vec<String> {
    let mut lines = Vec::new();
    let mut index = first_index;
    for (n, i) in f.inlined.iter().enumerate() {
        let args: Vec<String> = i.args.iter().map(arg_text).collect();
        let at = match (&i.file, i.line) {
            (Some(file), Some(line)) => format!(" at {}:{line}", short_file(file)),
            _ => String::new(),
        };
        let pc = if n == 0 {
            format!("0x{:016x} in ", f.pc)
        } else {
            String::new()
        };
        lines.push(format!(
            "#{index:<2} {pc}{} ({}){at}",
            i.function.as_deref().unwrap_or("??"),
            args.join(", ")
        ));
        index += 1;
    }
    let mut own = frame_text(index, f);
    if !f.inlined.is_empty() {
        // gdb prints the address only on the innermost line of a pc.
        own = own.replacen(&format!("0x{:016x} in ", f.pc), "", 1);
    }
    lines.push(own);
    lines
}

/// How many numbered lines [`frame_lines`] prints for `f`.
pub fn frame_line_count(f: &Frame) -> usize {
    1 + f.inlined.len()
}

/// Source file as gdb prints it in a backtrace (the name as the compiler recorded it, without directories).
fn short_file(file: &str) -> &str {
    file.rsplit('/').next().unwrap_or(file)
}

/// Renders one frame as gdb does.
pub fn frame_text(index: usize, f: &Frame) -> String {
    let name = f
        .source_function
        .as_deref()
        .or(f.function.as_deref())
        .unwrap_or("??");
    let at = match (&f.file, f.line) {
        (Some(file), Some(line)) => format!(" at {}:{line}", short_file(file)),
        _ => String::new(),
    };
    // `[stashed by hook NAME]` when the hooked function is not the frame's (a tail call).
    let stashed = match f.foreign_hook() {
        Some(hook) => format!("stashed by hook {hook}"),
        None => "stashed".to_string(),
    };
    let args = match &f.stash {
        Some(_) if !f.args.is_empty() => {
            let parts: Vec<String> = f.args.iter().map(arg_text).collect();
            format!("({}) [{stashed}]", parts.join(", "))
        }
        None if !f.args.is_empty() => {
            let parts: Vec<String> = f.args.iter().map(arg_text).collect();
            format!("({})", parts.join(", "))
        }
        Some(s) => {
            let parts: Vec<String> = s
                .slots()
                .iter()
                .map(|slot| {
                    let low = slot.value as u64;
                    if slot.xmm {
                        format!("{}={} [0x{low:x}]", slot.name, f64::from_bits(low))
                    } else {
                        format!("{}={}", slot.name, display_value(low))
                    }
                })
                .collect();
            let variadic = if s.variadic { ", variadic" } else { "" };
            format!("({}) [{stashed}{variadic}]", parts.join(", "))
        }
        None => "()".to_string(),
    };
    let place = match (&f.module, f.kind) {
        (_, FrameKind::Trampoline) => " [argstash trampoline]".to_string(),
        (_, FrameKind::Relocated) if !at.is_empty() => format!(" [relocated prologue]{at}"),
        (Some(m), FrameKind::Relocated) => format!(" [relocated prologue] from {m}"),
        (_, _) if !at.is_empty() => at,
        (Some(m), _) => format!(" from {m}"),
        (None, _) => String::new(),
    };
    format!("#{index:<2} 0x{:016x} in {name} {args}{place}", f.pc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_naturally() {
        assert_eq!(display_value(28), "28");
        assert_eq!(display_value(u64::MAX), "-1");
        assert_eq!(display_value(0x7ffd_1234_5678), "0x7ffd12345678");
    }
}
