//! The text `argstash bt` prints.

use reader::args::ArgValue;
use reader::procfs::x86_64_syscall_name;
use reader::python::{PairedBy, StackFrame};
use reader::unwind::{Backtrace, Capture, Frame, FrameKind, ThreadBacktrace};

use super::{rows, Row, View};

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

/// `name=display` as gdb prints one argument.
fn arg_text(a: &ArgValue) -> String {
    let name = a.name.as_deref().or(a.register.as_deref()).unwrap_or("?");
    format!("{name}={}", a.display)
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

/// `stashed by hook NAME`: how a frame whose stash a hook of another function
/// left (a tail call, an unnamed `.cold` part; [`Frame::foreign_hook`]) is
/// marked, NAME demangled as the frames' names are. `bt` and `record` share it.
pub fn stashed_by(hook: &str) -> String {
    format!("stashed by hook {}", reader::symbols::shown_name(hook))
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
    // `[stashed by hook NAME]` when the hooked function is not the frame's (a tail
    // call, or an unnamed `.cold` part); NAME demangled as the frames' names are.
    let stashed = match f.foreign_hook() {
        Some(hook) => stashed_by(hook),
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

/// `[py] outer (depth=0, name='zed') at /srv/app.py:27`, with how it was paired
/// when that is not exact.
fn python_text(f: &StackFrame) -> String {
    let how = match f.placement.map(|p| p.paired_by) {
        Some(PairedBy::Stash | PairedBy::EntryFrame) => "",
        Some(PairedBy::Order) => " [paired by order]",
        None => " [no evaluator frame found]",
    };
    match f.interpreter {
        Some(i) => format!("[py] {}{how} [{i}]", f.frame),
        None => format!("[py] {}{how}", f.frame),
    }
}

/// The text lines of one thread.
pub fn thread_lines(t: &ThreadBacktrace, view: View) -> Vec<String> {
    let how = match t.capture {
        Capture::Stopped => format!("stopped {} us", t.stopped.as_micros()),
        Capture::Kernel => "sampled by the kernel".to_string(),
        Capture::WithoutStop { syscall } => match x86_64_syscall_name(syscall) {
            Some(name) => format!("read without a stop, blocked in {name}"),
            None => format!("read without a stop, blocked in system call {syscall}"),
        },
    };
    let mut lines = vec![format!("Thread {} \"{}\" ({how}):", t.tid, t.name)];
    let rows = rows(t, view);
    let mut index = 0;
    for (row, _) in &rows {
        match row {
            Row::Native(f) => {
                lines.extend(frame_lines(index, f));
                index += frame_line_count(f);
            }
            Row::Python(f) => {
                lines.push(format!("#{index:<2} {}", python_text(f)));
                index += 1;
            }
        }
    }
    if view == View::Python && rows.is_empty() {
        lines.push("   (no Python frames)".to_string());
    }
    if view != View::Python {
        if let Some(why) = &t.truncated {
            lines.push(format!("   (unwinding stopped: {why})"));
        }
    }
    if view != View::Native {
        for note in t.python.iter().flat_map(|p| &p.notes) {
            lines.push(format!("   (python: {note})"));
        }
    }
    lines
}

/// Every thread's lines, threads separated by an empty line, ending with a newline.
pub fn backtrace_text(bt: &Backtrace, view: View) -> String {
    let mut out = String::new();
    for (n, t) in bt.threads.iter().enumerate() {
        if n > 0 {
            out.push('\n');
        }
        for line in thread_lines(t, view) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}
