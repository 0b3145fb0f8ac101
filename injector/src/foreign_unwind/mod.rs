//! Making hooked frames unwindable by other tools: libgcc's in-process unwinder (C++
//! exceptions, `backtrace()`), perf, and gdb.
//!
//! Each arena created by this build has a read-write *unwind area*
//! ([`trampolines::unwind_area`]) holding, per hook, the `.eh_frame` bytes that describe
//! its trampoline and relocated prologue ([`trampolines::x86_64::hook_eh_frame`]) and
//! the storage libgcc links into its list of registered objects.
//!
//! - Install, inside the stop: [`map_area`] and [`init_area`] for every new arena,
//!   [`write_slot`] for every hook.
//! - Install, after the stop: [`register`] calls `__register_frame_info(eh_frame,
//!   object)` in the target (libgcc's own function, found in `libgcc_s.so.1` or the
//!   executable) on one thread while the others keep running, so a lock held by
//!   another thread is released in time. The thread is borrowed only at a proved safe
//!   point ([`crate::ptrace::safe_point`]); when none is found within the wait allowed, the
//!   call is skipped and the report says so. A call that does not return within
//!   [`CALL_TIMEOUT`] is never abandoned half-way: the thread is released to finish it
//!   by itself ([`crate::ptrace::call`]). With [`RemoteCalls::Off`] nothing runs in the
//!   target at all. It also adds `START SIZE argstash_trampoline.NAME` lines to
//!   `/tmp/perf-PID.map`.
//! - Eject, after the stop: [`unregister`] calls `__deregister_frame_info(eh_frame)`
//!   and removes the perf map lines, keeping other tools' lines.
//!
//! A process without libgcc's unwinder (a plain C program without `libgcc_s`) has no
//! in-process unwinder to feed: that is reported, not an error.

//! # Layout
//!
//! This module sequences the work; each other unwinder is fed by its own child,
//! all of them built on the same lower layer, so dependencies point one way:
//!
//! ```text
//! mod.rs ─> libgcc, gdb_jit, perf_jit, perf_map, symbol_file
//!             └─> slots (unwind area and slots), calls (borrowed threads),
//!                 files (/tmp paths), report (UnwindReport)
//! ```

mod calls;
mod files;
pub mod gdb_jit;
mod libgcc;
pub mod perf_jit;
mod perf_map;
mod report;
mod slots;
mod symbol_file;

#[cfg(test)]
mod tests;

pub use calls::{CallPolicy, RemoteCalls, UnprotectedHooks};
pub use libgcc::{find_unwinder, Unwinder};
pub use report::UnwindReport;
pub use slots::{hook_of, init_area, map_area, read_area, write_slot, UnwindHook};
pub use symbol_file::refresh_symbol_file;

use trampolines::unwind_area::{FLAG_GDB_JIT, FLAG_PERF_JIT, FLAG_PERF_MAP};

use crate::error::Error;
use crate::memory::ProcessMemory;
use crate::ptrace::gadgets::Gadgets;
use calls::Borrower;
use reader::symbols::ProcessSymbols;
use slots::read_slot;

/// The target's functions that other unwinders are fed through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unwinders {
    /// libgcc's frame registration, when the process has libgcc's unwinder.
    pub libgcc: Option<Unwinder>,
    /// `dlopen`/`dlclose`, to load the GDB JIT helper.
    pub loader: Option<gdb_jit::Loader>,
    /// The module whose unwinder can raise exceptions (`_Unwind_RaiseException`):
    /// a C++ exception (or a thread's cancellation) can then cross a hooked frame.
    pub raiser: Option<String>,
}

/// Finds libgcc's registration functions and the dynamic loader's entry points.
pub fn find_unwinders(symbols: &ProcessSymbols) -> Unwinders {
    let libgcc = find_unwinder(symbols);
    Unwinders {
        raiser: find_raiser(symbols, libgcc.as_ref()),
        libgcc,
        loader: gdb_jit::find_loader(symbols),
    }
}

/// The module through which the process can throw an exception that ends it when
/// an unwinder meets a frame it cannot describe, if any: one that defines C++'s
/// `__cxa_throw` (libstdc++, or a static C++ runtime), or a shared unwinder that
/// defines `_Unwind_RaiseException` (libgcc_s, libunwind: loaded by C++ and Rust
/// programs). A static C program also contains `_Unwind_RaiseException` (glibc
/// links libgcc's unwinder for thread cancellation), but C code cannot throw, and
/// a cancellation that meets an undescribed frame ends the thread, not the program.
pub fn find_raiser(symbols: &ProcessSymbols, libgcc: Option<&Unwinder>) -> Option<String> {
    const RAISE: &str = "_Unwind_RaiseException";
    let shared_unwinder = |path: &str| {
        let name = path.rsplit('/').next().unwrap_or(path);
        name.starts_with("libgcc_s") || name.starts_with("libunwind")
    };
    symbols
        .find_function("__cxa_throw")
        .map(|r| r.module_path)
        .or_else(|| {
            libgcc
                .filter(|u| shared_unwinder(&u.module))
                .and_then(|u| {
                    symbols
                        .resolve(&reader::symbols::FuncSpec::Qualified {
                            module: u.module.clone(),
                            name: RAISE.into(),
                        })
                        .ok()
                })
                .or_else(|| symbols.find_function(RAISE))
                .map(|r| r.module_path)
                .filter(|m| shared_unwinder(m))
        })
}

/// Registers every hook's `.eh_frame` with the target's unwinder and writes perf map lines.
///
/// Never fails the install: what could not be done is described in the report's notes.
///
/// Borrowed threads run through `gadgets` (found before, kept by the caller) and
/// add what they find to it.
pub fn register(
    pid: i32,
    unwinders: &Unwinders,
    hooks: &[UnwindHook],
    policy: CallPolicy,
    gadgets: &mut Gadgets,
) -> UnwindReport {
    let started = std::time::Instant::now();
    let mut report = register_timed(pid, unwinders, hooks, policy, gadgets);
    report.elapsed = started.elapsed();
    report
}

fn register_timed(
    pid: i32,
    unwinders: &Unwinders,
    hooks: &[UnwindHook],
    policy: CallPolicy,
    gadgets: &mut Gadgets,
) -> UnwindReport {
    let unwinder = unwinders.libgcc.as_ref();
    let mut report = UnwindReport {
        unwinder: unwinder.map(|u| u.module.clone()),
        ..Default::default()
    };
    if hooks.is_empty() {
        return report;
    }
    let mem = match ProcessMemory::open(pid) {
        Ok(m) => m,
        Err(e) => {
            report.notes.push(e.to_string());
            return report;
        }
    };
    sweep_stale_files();
    perf_map::add(pid, &mem, hooks, &mut report);
    let jit_started = std::time::Instant::now();
    perf_jit::register(pid, &mem, hooks, &mut report, gadgets);
    report.perf_jitdump_elapsed = jit_started.elapsed();
    refresh_symbol_file(pid, &mem, &mut report);
    let mut borrower = Borrower::new(pid, policy, gadgets);
    gdb_jit::register(
        pid,
        &mem,
        unwinders.loader.as_ref(),
        hooks,
        &mut report,
        &mut borrower,
    );
    libgcc::register(&mem, unwinder, hooks, &mut report, &mut borrower);
    report
}

/// Registers the hooks' `.eh_frame` with libgcc only, on a thread borrowed at a safe
/// point: the part of [`register`] that must be done before the hooks' jumps are
/// written, so that an exception thrown through a hooked function always finds it.
/// The report counts the hooks registered and says why the others are not.
pub fn register_exceptions(
    pid: i32,
    unwinder: &Unwinder,
    hooks: &[UnwindHook],
    policy: CallPolicy,
    gadgets: &mut Gadgets,
) -> UnwindReport {
    let started = std::time::Instant::now();
    let mut report = UnwindReport {
        unwinder: Some(unwinder.module.clone()),
        ..Default::default()
    };
    match ProcessMemory::open(pid) {
        Ok(mem) => {
            let mut borrower = Borrower::new(pid, policy, gadgets);
            libgcc::register(&mem, Some(unwinder), hooks, &mut report, &mut borrower);
        }
        Err(e) => report.notes.push(e.to_string()),
    }
    report.elapsed = started.elapsed();
    report
}

/// Deregisters from libgcc the hooks of `hooks` whose registration it confirmed,
/// on a thread borrowed at a safe point (an install taken back after its
/// registration). Returns what was done.
pub fn deregister_exceptions(
    pid: i32,
    hooks: &[UnwindHook],
    policy: CallPolicy,
    gadgets: &mut Gadgets,
) -> UnwindReport {
    let mut report = UnwindReport::default();
    match ProcessMemory::open(pid) {
        Ok(mem) => {
            let mut borrower = Borrower::new(pid, policy, gadgets);
            libgcc::deregister(&mem, hooks, &mut report, &mut borrower);
        }
        Err(e) => report.notes.push(e.to_string()),
    }
    report
}

/// Hooks of `hooks` whose registration with libgcc is not confirmed (not made,
/// or made by a call that was released unfinished).
pub fn unregistered(pid: i32, hooks: &[UnwindHook]) -> Vec<UnwindHook> {
    let Ok(mem) = ProcessMemory::open(pid) else {
        return hooks.to_vec();
    };
    hooks
        .iter()
        .filter(|h| {
            !matches!(read_slot(&mem, h), Ok(s) if s.registered != 0
                && s.registered != slots::REGISTRATION_PENDING)
        })
        .cloned()
        .collect()
}

/// True when libgcc may hold any of `hooks` (registered, or a registration that
/// was released unfinished): their unwind information must then stay mapped.
pub fn any_registered(pid: i32, hooks: &[UnwindHook]) -> bool {
    let Ok(mem) = ProcessMemory::open(pid) else {
        return true;
    };
    hooks
        .iter()
        .any(|h| !matches!(read_slot(&mem, h), Ok(s) if s.registered == 0))
}

/// Deregisters the hooks' `.eh_frame` from the target's unwinder and removes their perf map lines.
///
/// Borrowed threads run through `gadgets`, as for [`register`].
///
/// Hooks in `still_live` (a thread can still return into their trampoline) keep
/// their libgcc registration: their code and unwind information stay mapped and
/// unchanged, and their slots are never reused, so this is harmless.
pub fn unregister(
    pid: i32,
    hooks: &[UnwindHook],
    still_live: &[UnwindHook],
    policy: CallPolicy,
    gadgets: &mut Gadgets,
) -> UnwindReport {
    let started = std::time::Instant::now();
    let mut report = unregister_timed(pid, hooks, still_live, policy, gadgets);
    report.elapsed = started.elapsed();
    report
}

fn unregister_timed(
    pid: i32,
    hooks: &[UnwindHook],
    still_live: &[UnwindHook],
    policy: CallPolicy,
    gadgets: &mut Gadgets,
) -> UnwindReport {
    let mut report = UnwindReport::default();
    if hooks.is_empty() {
        return report;
    }
    let mem = match ProcessMemory::open(pid) {
        Ok(m) => m,
        Err(e) => {
            report.notes.push(e.to_string());
            // A process that is gone leaves files only we can remove.
            perf_jit::remove_if_dead(pid as u32, &perf_jit::jitdump_path(pid));
            return report;
        }
    };
    let mut borrower = Borrower::new(pid, policy, gadgets);
    let (kept, done): (Vec<UnwindHook>, Vec<UnwindHook>) =
        hooks.iter().cloned().partition(|h| still_live.contains(h));
    let kept_registered = kept
        .iter()
        .filter(|h| matches!(read_slot(&mem, h), Ok(s) if s.registered != 0))
        .count();
    if kept_registered > 0 {
        report.notes.push(format!(
            "{kept_registered} hooks stay registered with libgcc: a thread can still return \
             through their trampoline (their code and unwind information stay mapped and \
             unchanged)"
        ));
    }
    libgcc::deregister(&mem, &done, &mut report, &mut borrower);
    gdb_jit::unregister(pid, &mem, hooks, &mut report, &mut borrower);
    perf_map::remove(pid, &mem, hooks, &mut report);
    let jit_started = std::time::Instant::now();
    perf_jit::unregister(pid, &mem, &mut report, borrower.gadgets());
    report.perf_jitdump_elapsed = jit_started.elapsed();
    refresh_symbol_file(pid, &mem, &mut report);
    report
}

/// Where one hook's unwind information is registered (for `list`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookUnwindStatus {
    /// Function name.
    pub name: String,
    /// Arena address.
    pub arena: u64,
    /// Slot in the arena.
    pub slot: u32,
    /// The arena has an unwind area and the hook an `.eh_frame`.
    pub described: bool,
    /// Registered with the in-process unwinder (libgcc).
    pub libgcc: bool,
    /// Linked into the GDB JIT descriptor.
    pub gdb_jit: bool,
    /// Has lines in `/tmp/perf-PID.map`.
    pub perf_map: bool,
    /// Described in the perf jitdump `/tmp/jit-PID.dump`, which is mapped in the process.
    pub perf_jit: bool,
}

/// Unwind status of every active hook of `pid`, and whether the process has libgcc's unwinder.
pub fn list_status(pid: reader::ids::Pid) -> Result<(Vec<HookUnwindStatus>, bool), Error> {
    let pid = pid.as_raw();
    use trampolines::arena::HookState;
    let maps = reader::procfs::read_maps(pid).map_err(|source| Error::Proc {
        path: format!("/proc/{pid}/maps"),
        source,
    })?;
    let has_libgcc = maps.iter().any(|m| m.path.contains("libgcc_s"));
    let mem = ProcessMemory::open(pid)?;
    let jit_mapped = perf_jit::marker_mapping(pid).is_some();
    let mut out = Vec::new();
    for a in reader::arena::discover(&maps, &mem)? {
        let area = read_area(&mem, &a.header);
        for (slot, r) in a.hooks().filter(|(_, r)| r.state == HookState::Active) {
            let s = area
                .and_then(|area| read_slot(&mem, &hook_of(area, slot, r)).ok())
                .unwrap_or_default();
            out.push(HookUnwindStatus {
                name: r.name.clone(),
                arena: a.header.base,
                slot,
                described: !s.eh_frame.is_empty(),
                libgcc: s.registered != 0,
                gdb_jit: s.flags & FLAG_GDB_JIT != 0,
                perf_map: s.flags & FLAG_PERF_MAP != 0,
                perf_jit: jit_mapped && s.flags & FLAG_PERF_JIT != 0,
            });
        }
    }
    Ok((out, has_libgcc))
}

/// Removes our /tmp files (symbol files, gdb helpers, jitdumps, perf maps with only
/// our lines) left by processes that died hooked.
///
/// Only files whose process no longer exists are removed (a live process with that
/// pid, even a reused one, keeps them), and only once the file itself proves
/// argstash wrote it: a regular file of ours with one link, opened without
/// following a link or blocking, whose content is what argstash writes there.
/// The name alone proves nothing: anyone can create `/tmp/perf-N.map`.
pub(crate) fn sweep_stale_files() {
    sweep_dir(std::path::Path::new("/tmp"));
}

/// What a file of ours in /tmp is, from its name: its pid and the proof its
/// content must give.
type Proof = fn(&[u8]) -> bool;

fn stale_candidate(name: &str) -> Option<(u32, Proof, u64)> {
    let pid = |prefix: &str, suffix: &str| {
        name.strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(suffix))
            .and_then(|p| p.parse::<u32>().ok())
    };
    fn perf_map_ours(b: &[u8]) -> bool {
        !b.is_empty() && std::str::from_utf8(b).is_ok_and(perf_map::only_ours)
    }
    fn dump_ours(b: &[u8]) -> bool {
        perf_jit::code_load_names(b).is_ok_and(|n| n.iter().all(|n| n == perf_jit::CODE_NAME))
    }
    if let Some(p) = pid("argstash-jit-", ".so") {
        return Some((p, gdb_jit::is_helper, gdb_jit::MAX_HELPER));
    }
    if let Some(p) = pid("argstash-", ".elf") {
        return Some((p, symbol_file::is_symbol_file, symbol_file::MAX_SYMBOL_FILE));
    }
    if let Some(p) = pid("perf-", ".map") {
        return Some((p, perf_map_ours, 64 << 20));
    }
    if let Some(p) = pid("jit-", ".dump") {
        return Some((p, dump_ours, 256 << 20));
    }
    None
}

fn sweep_dir(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let me = [reader::shared_file::own_uid()];
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((pid, proof, max)) = name.to_str().and_then(stale_candidate) else {
            continue;
        };
        // Cheap checks on the name's metadata first (never opens anything):
        // only our regular files are worth opening.
        let plausible = entry.metadata().is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            m.file_type().is_file() && m.uid() == me[0] && m.nlink() == 1
        });
        if !plausible || reader::procfs::exists(pid as i32) {
            continue;
        }
        let _ = reader::shared_file::remove_ours(&entry.path(), &me, max, proof);
    }
}
