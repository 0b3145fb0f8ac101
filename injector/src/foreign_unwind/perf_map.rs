//! Naming hook code for perf: `START SIZE argstash_trampoline.NAME` lines (and
//! `argstash_prologue.NAME`) in `/tmp/perf-PID.map`, added at install and removed
//! at eject while other tools' lines are kept. A slot's `FLAG_PERF_MAP` says
//! whether its lines were written.

use std::path::Path;

use reader::shared_file;

use trampolines::unwind_area::FLAG_PERF_MAP;

use super::files::{perf_map_owners, perf_map_path};
use super::report::UnwindReport;
use super::slots::{read_slot, set_flags, UnwindHook};
use crate::memory::WriteMemory;

/// Prefix of the symbol naming a hook's trampoline.
const TRAMPOLINE_PREFIX: &str = "argstash_trampoline.";
/// Prefix of the symbol naming a hook's relocated prologue.
const PROLOGUE_PREFIX: &str = "argstash_prologue.";

/// The perf map lines of one hook.
pub fn lines(hook: &UnwindHook) -> Vec<String> {
    vec![
        format!(
            "{:x} {:x} {TRAMPOLINE_PREFIX}{}",
            hook.trampoline.0, hook.trampoline.1, hook.name
        ),
        format!(
            "{:x} {:x} {PROLOGUE_PREFIX}{}",
            hook.relocated.0, hook.relocated.1, hook.name
        ),
    ]
}

/// `text` without the lines in `remove`; `None` when no line is left.
fn without_lines(text: &str, remove: &[String]) -> Option<String> {
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !remove.iter().any(|r| r == l))
        .collect();
    (!kept.is_empty()).then(|| kept.join("\n") + "\n")
}

/// True when every line of a perf map names argstash code (the file is ours alone).
pub(crate) fn only_ours(text: &str) -> bool {
    text.lines().all(|l| {
        l.contains(&format!(" {TRAMPOLINE_PREFIX}")) || l.contains(&format!(" {PROLOGUE_PREFIX}"))
    })
}

/// Appends the lines of `hooks` to the perf map of `pid`.
pub(crate) fn add(
    pid: i32,
    mem: &dyn WriteMemory,
    hooks: &[UnwindHook],
    report: &mut UnwindReport,
) {
    add_to(
        &perf_map_path(pid),
        &perf_map_owners(pid),
        mem,
        hooks,
        report,
    )
}

/// Largest perf map read back (a JIT's map can be long; ours are a few lines per hook).
const MAX_MAP: u64 = 64 << 20;

pub(super) fn add_to(
    path: &Path,
    owners: &[u32],
    mem: &dyn WriteMemory,
    hooks: &[UnwindHook],
    report: &mut UnwindReport,
) {
    let mut text = String::new();
    for hook in hooks {
        for line in lines(hook) {
            text.push_str(&line);
            text.push('\n');
        }
    }
    match shared_file::append_or_create(path, owners, 0o644, text.as_bytes()) {
        Ok(()) => {
            for hook in hooks {
                if let Ok(s) = read_slot(mem, hook) {
                    let _ = set_flags(mem, hook, s.flags | FLAG_PERF_MAP);
                }
            }
            report.perf_map = Some(path.to_path_buf());
        }
        Err(e) => report.notes.push(format!("perf map not written: {e}")),
    }
}

/// Removes the lines of `hooks` (those whose slot says they were written) from the
/// perf map of `pid`, and the file once no line is left.
pub(crate) fn remove(
    pid: i32,
    mem: &dyn WriteMemory,
    hooks: &[UnwindHook],
    report: &mut UnwindReport,
) {
    remove_from(
        &perf_map_path(pid),
        &perf_map_owners(pid),
        mem,
        hooks,
        report,
    )
}

pub(super) fn remove_from(
    path: &Path,
    owners: &[u32],
    mem: &dyn WriteMemory,
    hooks: &[UnwindHook],
    report: &mut UnwindReport,
) {
    let ours: Vec<&UnwindHook> = hooks
        .iter()
        .filter(|h| matches!(read_slot(mem, h), Ok(s) if s.flags & FLAG_PERF_MAP != 0))
        .collect();
    if ours.is_empty() {
        return;
    }
    let text = match shared_file::read(path, owners, MAX_MAP) {
        Ok(Some(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Ok(None) => return,
        Err(e) => {
            report.notes.push(format!("perf map not cleaned: {e}"));
            return;
        }
    };
    let remove: Vec<String> = ours.iter().flat_map(|h| lines(h)).collect();
    let result = match without_lines(&text, &remove) {
        None => shared_file::remove_ours(path, owners, MAX_MAP, |b| {
            std::str::from_utf8(b).is_ok_and(only_ours)
        })
        .map(|_| ()),
        Some(kept) => shared_file::replace(path, kept.as_bytes(), 0o644, owners),
    };
    match result {
        Ok(()) => {
            for hook in ours {
                if let Ok(s) = read_slot(mem, hook) {
                    let _ = set_flags(mem, hook, s.flags & !FLAG_PERF_MAP);
                }
            }
            report.perf_map = Some(path.to_path_buf());
        }
        Err(e) => report.notes.push(format!("perf map not cleaned: {e}")),
    }
}
