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

pub mod gdb_jit;
pub mod perf_jit;

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::Duration;

use trampolines::arena::{ArenaHeader, HookRecord, HEADER_LEN};
use trampolines::unwind_area::{
    unwind_area_of, UnwindArea, UnwindSlot, ARENA_HEADER_UNWIND_AT, FLAG_PERF_MAP, MAX_EH_FRAME,
    UNWIND_HEADER_LEN, UNWIND_SLOT_LEN,
};
use trampolines::x86_64::{hook_eh_frame, HookCode, HookCodeRanges};

use crate::error::Error;
use crate::memory::{Memory, ProcessMemory, WriteMemory};
use crate::ptrace::call::RemoteCallError;
use crate::ptrace::gadgets::Gadgets;
use crate::ptrace::session::Session;
use reader::symbols::{FuncSpec, ProcessSymbols};

/// How long one registration call may take before it is abandoned.
pub const CALL_TIMEOUT: Duration = Duration::from_millis(500);

/// How long [`register`] and [`unregister`] look for a thread at a safe point by default.
pub const SAFE_POINT_WAIT: Duration = Duration::from_millis(500);

/// `registered` value of a slot whose registration call was released unfinished: it
/// may or may not complete, so it is never deregistered (the area is never unmapped).
const REGISTRATION_PENDING: u64 = u64::MAX;

/// Whether argstash may run functions of the target after the stop (libgcc's frame
/// registration, the loader's `dlopen`/`dlclose` for the gdb JIT helper).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RemoteCalls {
    /// Only on a thread proved to be at a safe point ([`crate::ptrace::safe_point`]), found
    /// within the wait allowed; otherwise the call is skipped and reported.
    #[default]
    AtSafePoints,
    /// Never: no code of the target runs (no C++ exception support through hooks, no
    /// gdb JIT helper; the symbol file and perf files are still written).
    Off,
}

/// How [`register`] and [`unregister`] may run code in the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallPolicy {
    /// Whether calls run at all.
    pub calls: RemoteCalls,
    /// How long to look for a thread at a safe point.
    pub wait: Duration,
}

impl Default for CallPolicy {
    fn default() -> Self {
        CallPolicy {
            calls: RemoteCalls::AtSafePoints,
            wait: SAFE_POINT_WAIT,
        }
    }
}

/// libgcc's registration functions in the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unwinder {
    /// Module holding them.
    pub module: String,
    /// `__register_frame_info`.
    pub register: u64,
    /// `__deregister_frame_info`.
    pub deregister: u64,
}

/// One hook as registration needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnwindHook {
    /// Function name.
    pub name: String,
    /// The arena's unwind area.
    pub area: UnwindArea,
    /// Slot index.
    pub slot: u32,
    /// Trampoline address and length.
    pub trampoline: (u64, u32),
    /// Relocated prologue address and length.
    pub relocated: (u64, u32),
}

/// What [`register`] or [`unregister`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnwindReport {
    /// Hooks whose `.eh_frame` is registered with (or was removed from) the in-process unwinder.
    pub registered: usize,
    /// The module providing the in-process unwinder, when there is one.
    pub unwinder: Option<String>,
    /// Why some hooks are not (un)registered, for logs and `list`.
    pub notes: Vec<String>,
    /// The perf map file written or cleaned.
    pub perf_map: Option<PathBuf>,
    /// The perf jitdump (`/tmp/jit-PID.dump`) written and mapped, or unmapped and removed.
    pub perf_jitdump: Option<PathBuf>,
    /// Part of `elapsed` spent on the perf jitdump (writing it, remote open/mmap/close or munmap).
    pub perf_jitdump_elapsed: Duration,
    /// The gdb symbol file describing the active hooks (`add-symbol-file PATH`), if any are left.
    pub symbol_file: Option<PathBuf>,
    /// Hooks linked into (or unlinked from) the target's GDB JIT descriptor.
    pub gdb_jit: usize,
    /// Time spent on all of it (after the stop; only a borrowed thread is held meanwhile).
    pub elapsed: Duration,
}

/// The target's functions that other unwinders are fed through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unwinders {
    /// libgcc's frame registration, when the process has libgcc's unwinder.
    pub libgcc: Option<Unwinder>,
    /// `dlopen`/`dlclose`, to load the GDB JIT helper.
    pub loader: Option<crate::foreign_unwind::gdb_jit::Loader>,
}

/// Finds libgcc's registration functions and the dynamic loader's entry points.
pub fn find_unwinders(symbols: &ProcessSymbols) -> Unwinders {
    Unwinders {
        libgcc: find_unwinder(symbols),
        loader: crate::foreign_unwind::gdb_jit::find_loader(symbols),
    }
}

/// Finds `__register_frame_info` / `__deregister_frame_info` (libgcc_s first, then any module).
pub fn find_unwinder(symbols: &ProcessSymbols) -> Option<Unwinder> {
    let find = |name: &str| {
        symbols
            .resolve(&FuncSpec::Qualified {
                module: "libgcc_s".into(),
                name: name.into(),
            })
            .or_else(|_| symbols.resolve(&FuncSpec::Name(name.into())))
            .ok()
    };
    let register = find("__register_frame_info")?;
    let deregister = find("__deregister_frame_info")?;
    if register.module_path != deregister.module_path {
        return None;
    }
    Some(Unwinder {
        module: register.module_path,
        register: register.addr,
        deregister: deregister.addr,
    })
}

/// Maps the memory of a new unwind area for `arena` (inside the stop), not yet initialised.
pub fn map_area(session: &mut Session, arena: &ArenaHeader) -> Result<UnwindArea, Error> {
    let len = UnwindArea::new(0, arena.base, arena.capacity).len();
    let base = session.remote_mmap(
        0,
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
    )?;
    Ok(UnwindArea::new(base, arena.base, arena.capacity))
}

/// Writes the header of the unwind area `area` mapped by [`map_area`] and points the arena header at it.
pub fn init_area(
    mem: &dyn WriteMemory,
    arena: &ArenaHeader,
    area: &UnwindArea,
) -> Result<(), Error> {
    mem.write(area.base, &area.encode_header())?;
    mem.write(
        arena.base + ARENA_HEADER_UNWIND_AT as u64,
        &area.base.to_le_bytes(),
    )?;
    Ok(())
}

/// The unwind area of `arena`, if it has a valid one.
pub fn read_area(mem: &dyn Memory, arena: &ArenaHeader) -> Option<UnwindArea> {
    let head = mem.read_vec(arena.base, HEADER_LEN).ok()?;
    let at = unwind_area_of(&head);
    if at == 0 {
        return None;
    }
    let bytes = mem.read_vec(at, UNWIND_HEADER_LEN).ok()?;
    UnwindArea::decode_header(at, arena.base, &bytes).ok()
}

/// The `.eh_frame` bytes for a generated hook, if they fit a slot.
pub fn eh_frame_for(code: &HookCode) -> Result<Vec<u8>, String> {
    let unwind = hook_eh_frame(&HookCodeRanges {
        trampoline: code.trampoline.address,
        trampoline_len: code.trampoline.code.len() as u32,
        offsets: code.trampoline.offsets,
        relocated: code.relocated.address,
        relocated_code: &code.relocated.code,
    })
    .map_err(|e| e.to_string())?;
    if unwind.eh_frame.len() > MAX_EH_FRAME {
        return Err(format!(
            ".eh_frame of {} bytes does not fit its {MAX_EH_FRAME}-byte slot",
            unwind.eh_frame.len()
        ));
    }
    Ok(unwind.eh_frame)
}

/// Writes a hook's unwind slot (inside the stop); `None` when its arena has no unwind area
/// or the hook cannot be described.
pub fn write_slot(
    mem: &dyn WriteMemory,
    arena: &ArenaHeader,
    code: &HookCode,
) -> Result<Option<UnwindArea>, Error> {
    let Some(area) = read_area(mem, arena) else {
        return Ok(None);
    };
    let Ok(eh_frame) = eh_frame_for(code) else {
        return Ok(None);
    };
    let slot = UnwindSlot {
        registered: 0,
        flags: 0,
        eh_frame,
    };
    let bytes = slot.encode().map_err(|source| Error::Format {
        addr: area.base,
        source,
    })?;
    mem.write(area.slot_addr(code.slot), &bytes)?;
    Ok(Some(area))
}

/// The hook described by `record` in slot `slot` of an arena whose unwind area is `area`.
pub fn hook_of(area: UnwindArea, slot: u32, record: &HookRecord) -> UnwindHook {
    UnwindHook {
        name: record.name.clone(),
        area,
        slot,
        trampoline: (record.trampoline, record.trampoline_len),
        relocated: (record.relocated, record.relocated_len),
    }
}

pub(crate) fn read_slot(mem: &dyn Memory, hook: &UnwindHook) -> Result<UnwindSlot, Error> {
    let bytes = mem.read_vec(hook.area.slot_addr(hook.slot), UNWIND_SLOT_LEN)?;
    UnwindSlot::decode(&bytes).map_err(|source| Error::Format {
        addr: hook.area.base,
        source,
    })
}

fn set_registered(mem: &dyn WriteMemory, hook: &UnwindHook, value: u64) -> Result<(), Error> {
    mem.write(hook.area.slot_addr(hook.slot), &value.to_le_bytes())?;
    Ok(())
}

/// [`set_registered`] inside a borrowed-thread closure, whose errors are call errors.
fn mark_registered(
    mem: &dyn WriteMemory,
    hook: &UnwindHook,
    value: u64,
    tid: i32,
) -> Result<(), RemoteCallError> {
    set_registered(mem, hook, value).map_err(|e| {
        RemoteCallError::Session(crate::ptrace::session::SessionError::Unexpected {
            tid,
            status: e.to_string(),
        })
    })
}

pub(crate) fn set_flags(mem: &dyn WriteMemory, hook: &UnwindHook, flags: u32) -> Result<(), Error> {
    mem.write(hook.area.slot_addr(hook.slot) + 12, &flags.to_le_bytes())?;
    Ok(())
}

/// Threads of `pid`, the best to borrow for a call first: those asleep in a system
/// call other than `futex` or a memory-management one (unlikely to hold a user-space
/// lock), then those running user code, then the rest.
pub(crate) fn call_candidates(pid: i32) -> Vec<i32> {
    let Ok(tids) = reader::procfs::read_task_ids(pid) else {
        return vec![pid];
    };
    let mut tids: Vec<(u8, i32)> = tids
        .into_iter()
        .map(|tid| {
            let nr = reader::procfs::read_task_syscall(pid, tid);
            // A thread waiting for a futex, or inside malloc's own mmap/brk, may hold a lock.
            let risky = [
                libc::SYS_futex,
                libc::SYS_mmap,
                libc::SYS_munmap,
                libc::SYS_brk,
                libc::SYS_mremap,
                libc::SYS_madvise,
                libc::SYS_mprotect,
            ];
            let rank = match nr {
                Some(n) if risky.contains(&n) => 2,
                Some(n) if n >= 0 => 0,
                _ => 1,
            };
            (rank, tid)
        })
        .collect();
    tids.sort();
    tids.into_iter().map(|(_, t)| t).collect()
}

/// Runs `call` on one stopped thread (the others keep running), for raw system calls
/// only: they take no user-space lock, so any thread will do.
pub(crate) fn with_any_thread(
    pid: i32,
    gadgets: &mut Gadgets,
    call: impl FnOnce(&mut Session, i32) -> Result<(), RemoteCallError>,
) -> Result<(), String> {
    let mut last = String::from("no thread could be stopped");
    for tid in call_candidates(pid) {
        let mut session = match Session::attach_thread(pid, tid) {
            Ok(s) => s,
            Err(e) => {
                last = e.to_string();
                continue;
            }
        };
        session.set_gadgets(gadgets);
        let result = call(&mut session, tid);
        keep_gadgets(gadgets, &session);
        let detached = session.detach();
        return match result {
            Ok(()) => detached.map(drop).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
    }
    Err(last)
}

/// Why a call in the target was not made or not finished.
#[derive(Debug)]
pub(crate) enum CallSkipped {
    /// [`RemoteCalls::Off`].
    Off,
    /// No thread was at a safe point in time.
    NoSafePoint(crate::ptrace::safe_point::NoSafePoint),
    /// The call did not return in time; the thread finishes it by itself.
    Released(RemoteCallError),
    /// Something else failed (the thread was restored).
    Failed(String),
}

impl std::fmt::Display for CallSkipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallSkipped::Off => write!(f, "calls in the target are turned off"),
            CallSkipped::NoSafePoint(e) => write!(f, "{e}"),
            CallSkipped::Released(e) => write!(f, "{e}"),
            CallSkipped::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// Takes back the gadgets a session found (see [`crate::ptrace::gadgets`]).
fn keep_gadgets(gadgets: &mut Gadgets, session: &Session) {
    if session.gadgets().owner() == gadgets.owner() {
        *gadgets = session.gadgets().clone();
    }
}

/// Lends threads of one process, each only at a safe point, for calls in the target.
pub(crate) struct Borrower<'g> {
    pid: i32,
    policy: CallPolicy,
    /// The caller's gadgets, given to every borrowed session.
    gadgets: &'g mut Gadgets,
    /// Built on first use: unwinding context, module roles, memory.
    ctx: Option<(
        reader::unwind::x86_64::Unwind,
        crate::ptrace::safe_point::Guard,
        ProcessMemory,
    )>,
}

impl<'g> Borrower<'g> {
    /// A borrower for `pid` under `policy`, lending sessions the caller's `gadgets`.
    pub(crate) fn new(pid: i32, policy: CallPolicy, gadgets: &'g mut Gadgets) -> Borrower<'g> {
        Borrower {
            pid,
            policy,
            gadgets,
            ctx: None,
        }
    }

    /// The caller's gadgets (for sessions opened without a borrower meanwhile).
    pub(crate) fn gadgets(&mut self) -> &mut Gadgets {
        self.gadgets
    }

    fn context(
        &mut self,
    ) -> Result<
        &(
            reader::unwind::x86_64::Unwind,
            crate::ptrace::safe_point::Guard,
            ProcessMemory,
        ),
        String,
    > {
        if self.ctx.is_none() {
            let pid = self.pid;
            let maps = reader::procfs::read_maps(pid).map_err(|e| e.to_string())?;
            let symbols = ProcessSymbols::load(pid, &maps).map_err(|e| e.to_string())?;
            let exe = reader::procfs::read_exe_link(pid)
                .ok()
                .and_then(|p| p.to_str().map(str::to_string));
            let guard = crate::ptrace::safe_point::Guard::new(&symbols, exe.as_deref());
            let mem = ProcessMemory::open(pid).map_err(|e| e.to_string())?;
            let arenas = reader::arena::discover(&maps, &mem).map_err(|e| e.to_string())?;
            let unwind = reader::unwind::x86_64::Unwind::new(symbols, arenas);
            self.ctx = Some((unwind, guard, mem));
        }
        Ok(self.ctx.as_ref().expect("just built"))
    }

    /// Runs `call` on a thread borrowed at a safe point (the others keep running).
    pub(crate) fn with_thread(
        &mut self,
        call: impl FnOnce(&mut Session, i32) -> Result<(), RemoteCallError>,
    ) -> Result<(), CallSkipped> {
        if self.policy.calls == RemoteCalls::Off {
            return Err(CallSkipped::Off);
        }
        let (pid, wait) = (self.pid, self.policy.wait);
        let (unwind, guard, mem) = self.context().map_err(CallSkipped::Failed)?;
        let (mut session, tid) =
            crate::ptrace::safe_point::borrow_at_safe_point(pid, unwind, guard, mem, wait)
                .map_err(CallSkipped::NoSafePoint)?;
        session.set_gadgets(self.gadgets);
        let result = call(&mut session, tid);
        keep_gadgets(self.gadgets, &session);
        let detached = session.detach();
        match result {
            Ok(()) => detached
                .map(drop)
                .map_err(|e| CallSkipped::Failed(e.to_string())),
            Err(e @ RemoteCallError::Released { .. }) => Err(CallSkipped::Released(e)),
            Err(e) => Err(CallSkipped::Failed(e.to_string())),
        }
    }
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

/// The note for a registration call that was not made or not finished.
fn skipped_note(what: &str, count: usize, why: &CallSkipped, consequence: &str) -> String {
    match why {
        CallSkipped::Off => {
            format!("{what} skipped for {count} hooks (calls in the target are off): {consequence}")
        }
        CallSkipped::NoSafePoint(e) => format!(
            "{what} skipped for {count} hooks: {e}; running code there could corrupt the \
             program's heap or deadlock it: {consequence} (eject and inject again to retry)"
        ),
        CallSkipped::Released(e) => format!("{what} for {count} hooks not confirmed: {e}"),
        CallSkipped::Failed(e) => format!("{what} failed for {count} hooks: {e}"),
    }
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
    perf_map_add(pid, &mem, hooks, &mut report);
    let jit_started = std::time::Instant::now();
    crate::foreign_unwind::perf_jit::register(pid, &mem, hooks, &mut report, gadgets);
    report.perf_jitdump_elapsed = jit_started.elapsed();
    refresh_symbol_file(pid, &mem, &mut report);
    let mut borrower = Borrower::new(pid, policy, gadgets);
    crate::foreign_unwind::gdb_jit::register(
        pid,
        &mem,
        unwinders.loader.as_ref(),
        hooks,
        &mut report,
        &mut borrower,
    );
    let Some(unwinder) = unwinder else {
        report.notes.push(
            "no in-process unwinder to register with (the process has not loaded libgcc_s): \
             C++ exceptions and backtrace() are not in use there"
                .into(),
        );
        return report;
    };
    let todo: Vec<&UnwindHook> = hooks
        .iter()
        .filter(
            |h| matches!(read_slot(&mem, h), Ok(s) if s.registered == 0 && !s.eh_frame.is_empty()),
        )
        .collect();
    if todo.is_empty() {
        return report;
    }
    let mut done = 0usize;
    let outcome = borrower.with_thread(|session, tid| {
        for hook in &todo {
            // Marked first: a call released unfinished must never be deregistered.
            let mark = |value: u64| mark_registered(&mem, hook, value, tid);
            mark(REGISTRATION_PENDING)?;
            let called = session.remote_call(
                tid,
                unwinder.register,
                "__register_frame_info",
                &[
                    hook.area.eh_frame_addr(hook.slot),
                    hook.area.object_addr(hook.slot),
                ],
                CALL_TIMEOUT,
            );
            match called {
                Ok(()) => mark(unwinder.deregister)?,
                Err(e @ RemoteCallError::Released { .. }) => return Err(e),
                Err(e) => {
                    mark(0)?;
                    return Err(e);
                }
            }
            done += 1;
        }
        Ok(())
    });
    report.registered = done;
    if let Err(why) = outcome {
        report.notes.push(skipped_note(
            &format!("registration with {}", unwinder.module),
            todo.len() - done,
            &why,
            "a C++ exception thrown through those hooked functions would end the program \
             (std::terminate)",
        ));
    }
    report
}

/// Deregisters the hooks' `.eh_frame` from the target's unwinder and removes their perf map lines.
///
/// Borrowed threads run through `gadgets`, as for [`register`].
pub fn unregister(
    pid: i32,
    hooks: &[UnwindHook],
    policy: CallPolicy,
    gadgets: &mut Gadgets,
) -> UnwindReport {
    let started = std::time::Instant::now();
    let mut report = unregister_timed(pid, hooks, policy, gadgets);
    report.elapsed = started.elapsed();
    report
}

fn unregister_timed(
    pid: i32,
    hooks: &[UnwindHook],
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
            crate::foreign_unwind::perf_jit::remove_if_dead(
                pid as u32,
                &crate::foreign_unwind::perf_jit::jitdump_path(pid),
            );
            return report;
        }
    };
    let mut pending = 0;
    let todo: Vec<(&UnwindHook, u64)> = hooks
        .iter()
        .filter_map(|h| match read_slot(&mem, h) {
            Ok(s) if s.registered == REGISTRATION_PENDING => {
                pending += 1;
                None
            }
            Ok(s) if s.registered != 0 => Some((h, s.registered)),
            _ => None,
        })
        .collect();
    if pending > 0 {
        report.notes.push(format!(
            "{pending} hooks stay registered with libgcc (their registration was never \
             confirmed; the unwind information stays mapped, so this is harmless)"
        ));
    }
    let mut borrower = Borrower::new(pid, policy, gadgets);
    let mut done = 0usize;
    if !todo.is_empty() {
        let outcome = borrower.with_thread(|session, tid| {
            for (hook, deregister) in &todo {
                // Cleared first: a deregistration released unfinished is not retried.
                mark_registered(&mem, hook, 0, tid)?;
                let called = session.remote_call(
                    tid,
                    *deregister,
                    "__deregister_frame_info",
                    &[hook.area.eh_frame_addr(hook.slot)],
                    CALL_TIMEOUT,
                );
                if let Err(e) = called {
                    if !matches!(e, RemoteCallError::Released { .. }) {
                        let _ = set_registered(&mem, hook, *deregister);
                    }
                    return Err(e);
                }
                done += 1;
            }
            Ok(())
        });
        if let Err(why) = outcome {
            report.notes.push(skipped_note(
                "deregistration from libgcc",
                todo.len() - done,
                &why,
                "their unwind information stays registered and mapped (harmless: the \
                 trampolines stay mapped too)",
            ));
        }
    }
    report.registered = done;
    crate::foreign_unwind::gdb_jit::unregister(pid, &mem, hooks, &mut report, &mut borrower);
    perf_map_remove(pid, &mem, hooks, &mut report);
    let jit_started = std::time::Instant::now();
    crate::foreign_unwind::perf_jit::unregister(pid, &mem, &mut report, borrower.gadgets());
    report.perf_jitdump_elapsed = jit_started.elapsed();
    refresh_symbol_file(pid, &mem, &mut report);
    report
}

/// Replaces `path` with `bytes` through a fresh temporary file `tmp` (never following a
/// symbolic link planted in /tmp), so readers see the old or the new file, never a mix.
pub(crate) fn replace_file(
    path: &std::path::Path,
    tmp: &std::path::Path,
    bytes: &[u8],
) -> std::io::Result<()> {
    let _ = std::fs::remove_file(tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(tmp)
        .and_then(|mut f| f.write_all(bytes));
    match written.and_then(|()| std::fs::rename(tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(tmp);
            Err(e)
        }
    }
}

/// Path of the perf map file of `pid`.
pub fn perf_map_path(pid: i32) -> PathBuf {
    PathBuf::from(format!("/tmp/perf-{pid}.map"))
}

/// The perf map lines of one hook.
pub fn perf_map_lines(hook: &UnwindHook) -> Vec<String> {
    vec![
        format!(
            "{:x} {:x} argstash_trampoline.{}",
            hook.trampoline.0, hook.trampoline.1, hook.name
        ),
        format!(
            "{:x} {:x} argstash_prologue.{}",
            hook.relocated.0, hook.relocated.1, hook.name
        ),
    ]
}

fn perf_map_add(pid: i32, mem: &dyn WriteMemory, hooks: &[UnwindHook], report: &mut UnwindReport) {
    let path = perf_map_path(pid);
    let mut text = String::new();
    for hook in hooks {
        for line in perf_map_lines(hook) {
            text.push_str(&line);
            text.push('\n');
        }
    }
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    match written {
        Ok(()) => {
            for hook in hooks {
                if let Ok(s) = read_slot(mem, hook) {
                    let _ = set_flags(mem, hook, s.flags | FLAG_PERF_MAP);
                }
            }
            report.perf_map = Some(path);
        }
        Err(e) => report
            .notes
            .push(format!("cannot write {}: {e}", path.display())),
    }
}

fn perf_map_remove(
    pid: i32,
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
    let path = perf_map_path(pid);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    let remove: Vec<String> = ours.iter().flat_map(|h| perf_map_lines(h)).collect();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !remove.iter().any(|r| r == l))
        .collect();
    let result = if kept.is_empty() {
        std::fs::remove_file(&path)
    } else {
        let tmp = path.with_extension(format!("map.argstash-{}", std::process::id()));
        replace_file(&path, &tmp, (kept.join("\n") + "\n").as_bytes())
    };
    match result {
        Ok(()) => {
            for hook in ours {
                if let Ok(s) = read_slot(mem, hook) {
                    let _ = set_flags(mem, hook, s.flags & !FLAG_PERF_MAP);
                }
            }
            report.perf_map = Some(path);
        }
        Err(e) => report
            .notes
            .push(format!("cannot rewrite {}: {e}", path.display())),
    }
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
pub fn list_status(pid: i32) -> Result<(Vec<HookUnwindStatus>, bool), Error> {
    use trampolines::arena::HookState;
    let maps = reader::procfs::read_maps(pid).map_err(|source| Error::Proc {
        path: format!("/proc/{pid}/maps"),
        source,
    })?;
    let has_libgcc = maps.iter().any(|m| m.path.contains("libgcc_s"));
    let mem = ProcessMemory::open(pid)?;
    let jit_mapped = crate::foreign_unwind::perf_jit::marker_mapping(pid).is_some();
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
                gdb_jit: s.flags & trampolines::unwind_area::FLAG_GDB_JIT != 0,
                perf_map: s.flags & FLAG_PERF_MAP != 0,
                perf_jit: jit_mapped && s.flags & trampolines::unwind_area::FLAG_PERF_JIT != 0,
            });
        }
    }
    Ok((out, has_libgcc))
}

/// Removes our /tmp files (symbol files, gdb helpers, perf maps with only our lines)
/// left by processes that died hooked.
///
/// Only files whose process no longer exists are removed; a live process with that pid
/// (even a reused one) keeps them.
fn sweep_stale_files() {
    let Ok(dir) = std::fs::read_dir("/tmp") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let pid = name
            .strip_prefix("argstash-jit-")
            .and_then(|r| r.strip_suffix(".so"))
            .or_else(|| {
                name.strip_prefix("argstash-")
                    .and_then(|r| r.strip_suffix(".elf"))
            })
            .and_then(|p| p.parse::<u32>().ok());
        // A perf map of a dead process holding nothing but our lines is ours too.
        let perf_pid = name
            .strip_prefix("perf-")
            .and_then(|r| r.strip_suffix(".map"))
            .and_then(|p| p.parse::<u32>().ok())
            .filter(|_| {
                std::fs::read_to_string(entry.path()).is_ok_and(|t| {
                    t.lines().all(|l| {
                        l.contains(" argstash_trampoline.") || l.contains(" argstash_prologue.")
                    })
                })
            });
        if let Some(pid) = name
            .strip_prefix("jit-")
            .and_then(|r| r.strip_suffix(".dump"))
            .and_then(|p| p.parse::<u32>().ok())
        {
            crate::foreign_unwind::perf_jit::remove_if_dead(pid, &entry.path());
        }
        if let Some(pid) = pid.or(perf_pid) {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// Path of the gdb symbol file of `pid` (load it with `add-symbol-file PATH`).
pub fn symbol_file_path(pid: i32) -> PathBuf {
    PathBuf::from(format!("/tmp/argstash-{pid}.elf"))
}

/// Rewrites the gdb symbol file from the active hooks in the target (removes it when none are left).
pub fn refresh_symbol_file(pid: i32, mem: &dyn Memory, report: &mut UnwindReport) {
    use trampolines::arena::{HookState, SLOT_LEN};
    use trampolines::symbol_file::{symbol_file, SymbolFileHook};
    let path = symbol_file_path(pid);
    let arenas = reader::procfs::read_maps(pid)
        .ok()
        .and_then(|maps| reader::arena::discover(&maps, mem).ok())
        .unwrap_or_default();
    let mut hooks = Vec::new();
    let mut eh_frame_addr = 0;
    for a in &arenas {
        let Some(area) = read_area(mem, &a.header) else {
            continue;
        };
        for (slot, r) in a.hooks().filter(|(_, r)| r.state == HookState::Active) {
            let Ok(s) = read_slot(mem, &hook_of(area, slot, r)) else {
                continue;
            };
            if s.eh_frame.is_empty() {
                continue;
            }
            if eh_frame_addr == 0 {
                eh_frame_addr = area.eh_frame_addr(slot);
            }
            hooks.push(SymbolFileHook {
                name: r.name.clone(),
                code: (a.header.slot_addr(slot), SLOT_LEN as u64),
                trampoline: (r.trampoline, u64::from(r.trampoline_len)),
                relocated: (r.relocated, u64::from(r.relocated_len)),
                eh_frame: s.eh_frame,
            });
        }
    }
    let result = if hooks.is_empty() {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    } else {
        let tmp = path.with_extension(format!("elf.tmp{}", std::process::id()));
        replace_file(&path, &tmp, &symbol_file(&hooks, eh_frame_addr))
    };
    match result {
        Ok(()) => report.symbol_file = (!hooks.is_empty()).then_some(path),
        Err(e) => report
            .notes
            .push(format!("cannot write {}: {e}", path.display())),
    }
}
