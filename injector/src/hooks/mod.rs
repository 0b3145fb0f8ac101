//! Installing, ejecting and listing hooks in a live process.
//!
//! An install is a transaction in three phases, each a type:
//!
//! 1. `plan.rs`: while the process runs, read its context once
//!    ([`crate::target::ProcessInfo`]), resolve each function, read and analyse
//!    its bytes, decide its stack window and choose an arena slot (a `Plan`),
//!    then generate every hook's code for its slot (a `Prepared` install).
//! 2. Stop every thread ([`crate::ptrace::session::Session`]).
//! 3. `commit.rs`: map the new arenas, re-check what the plan read, write code and
//!    records, move threads out of the bytes to overwrite, patch, read everything
//!    back; every change goes through one `Transaction` (`undo.rs`), a guard that
//!    takes them all back if the commit does not finish. Then let the process go,
//!    and register the hooks' unwind information ([`crate::foreign_unwind`]).
//!
//! [`eject()`] removes hooks the same way; [`list()`] only reads the arenas.

pub mod arena;
pub(crate) mod commit;
mod eject;
mod landing;
mod list;
pub(crate) mod plan;
pub(crate) mod undo;
pub mod window;

#[cfg(test)]
mod tests;

use crate::ptrace::requeue::{take_journal, SignalOutcome};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use trampolines::arena::{ArenaHeader, HookRecord, HookState};

use crate::arch::Arch;
use crate::error::{Error, UnprotectedReason};
use crate::foreign_unwind::{UnprotectedHooks, UnwindReport};
use crate::hooks::commit::Committed;
use crate::hooks::eject::Ejection;
use crate::hooks::plan::{Plan, Prepared};
use crate::memory::ProcessMemory;
use crate::ptrace::session::Session;
use crate::target::{Access, ProcessInfo};
use reader::arena::discover;
use reader::ids::Pid;
use reader::symbols::FuncSpec;

pub use list::list;

/// Options for [`install`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InstallOptions {
    /// Incoming stack words to copy for callees that read stack-passed arguments;
    /// 0 (unless `force_stack_words`) lets each function's code (or, later, its
    /// signature) decide, see `window`.
    pub stack_words: u16,
    /// Copy exactly `stack_words` even when it is 0 (the user said `--stack-args 0`).
    pub force_stack_words: bool,
    /// Stash xmm0-xmm7 for every hooked function (`--float-args`).
    pub float_args: bool,
    /// Whether and how functions of the target may run after the stop (unwind
    /// registration with libgcc, the gdb JIT helper).
    pub calls: crate::foreign_unwind::CallPolicy,
}

impl InstallOptions {
    /// The window the user asked for, if any.
    pub fn requested_window(&self) -> Option<u16> {
        (self.stack_words > 0 || self.force_stack_words).then_some(self.stack_words)
    }
}

/// One hook as reported to callers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookInfo {
    /// Function name.
    pub name: String,
    /// Module path.
    pub module: String,
    /// Function entry.
    pub function: u64,
    /// First patched byte.
    pub patch_addr: u64,
    /// Bytes patched.
    pub patch_len: usize,
    /// Trampoline address.
    pub trampoline: u64,
    /// Arena address.
    pub arena: u64,
    /// Slot in the arena.
    pub slot: u32,
    /// Copied stack words.
    pub stack_words: u16,
    /// The function is variadic (its window is the configured size, not a measurement).
    pub variadic: bool,
    /// The stash frame holds xmm0-xmm7 too.
    pub xmm: bool,
    /// Lifecycle state.
    pub state: HookState,
    /// Install time, Unix nanoseconds.
    pub installed_ns: u64,
    /// The parameter list the user gave for this function (`int, const char *`), if any.
    pub signature: Option<String>,
    /// Where the stack window came from (known at install only; `None` in listings).
    pub window_source: Option<crate::hooks::window::WindowSource>,
}

impl HookInfo {
    fn new(arena: &ArenaHeader, slot: u32, r: &HookRecord) -> HookInfo {
        HookInfo {
            name: r.name.clone(),
            module: r.module.clone(),
            function: r.function,
            patch_addr: r.patch_addr,
            patch_len: r.patch_len(),
            trampoline: r.trampoline,
            arena: arena.base,
            slot,
            stack_words: r.stack_words,
            variadic: r.variadic,
            xmm: r.xmm,
            state: r.state,
            installed_ns: r.installed_ns,
            signature: None,
            window_source: None,
        }
    }
}

/// What [`install`] did.
#[derive(Debug, Clone)]
pub struct InstallReport {
    /// The new hooks.
    pub hooks: Vec<HookInfo>,
    /// How long the target's threads were stopped.
    pub stopped: Duration,
    /// Threads stopped.
    pub threads: usize,
    /// Arenas created for this install.
    pub new_arenas: Vec<u64>,
    /// Threads moved out of patched bytes into relocated code.
    pub moved_threads: Vec<i32>,
    /// Registration of the hooks' unwind information with other unwinders.
    pub unwind: crate::foreign_unwind::UnwindReport,
    /// Where the stopped threads' RIPs were, relative to the hooks installed.
    pub rip_census: RipCensus,
    /// Real signals that arrived while threads were held, and how each got back.
    pub signals: Vec<SignalOutcome>,
}

/// How many stopped threads had their RIP in each part of the hooks being
/// installed or ejected, counted inside the stop window.
///
/// At install, `in_patch` threads are moved into the relocated prologue (the
/// new hooks' trampolines and relocated prologues have not run yet, so those
/// counts are 0). At eject, `in_relocated` threads are moved back to the
/// original bytes; threads in a trampoline or on the patch's first byte are
/// left where they are (the trampoline stays mapped; the entry is restored).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RipCensus {
    /// RIP in the patched bytes: at install strictly after their first byte
    /// (inside instructions about to be overwritten); at eject anywhere in them.
    pub in_patch: usize,
    /// RIP inside a relocated prologue.
    pub in_relocated: usize,
    /// RIP inside a trampoline.
    pub in_trampoline: usize,
}

/// What [`eject`] did.
#[derive(Debug, Clone)]
pub struct EjectReport {
    /// The hooks that were ejected.
    pub hooks: Vec<HookInfo>,
    /// How long the target's threads were stopped.
    pub stopped: Duration,
    /// Threads moved from relocated code back to the original function.
    pub moved_threads: Vec<i32>,
    /// Where the stopped threads' RIPs were, relative to the hooks ejected.
    pub rip_census: RipCensus,
    /// Removal of the hooks' unwind information from other unwinders.
    pub unwind: crate::foreign_unwind::UnwindReport,
    /// Real signals that arrived while threads were held, and how each got back.
    pub signals: Vec<SignalOutcome>,
}

/// Which hooks [`eject`] removes.
#[derive(Debug, Clone)]
pub enum EjectWhat {
    /// Every active hook.
    All,
    /// The hooks of these functions.
    Functions(Vec<FuncSpec>),
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// One function to hook, and optionally its parameter list.
#[derive(Debug, Clone, PartialEq)]
pub struct HookTarget {
    /// The function (`name`, `module!name` or an address).
    pub function: FuncSpec,
    /// Its parameter list (`int, const char *`, see [`reader::args::split_signature`]),
    /// stored with the hook so that a later backtrace types the stashed values
    /// without DWARF.
    pub signature: Option<reader::args::Signature>,
    /// Incoming stack words to copy for this function alone (`--stack-args NAME=N`),
    /// over [`InstallOptions::stack_words`] and the analysis.
    pub stack_words: Option<u16>,
}

impl HookTarget {
    /// Hooks `function`, typed from DWARF when it has any.
    pub fn new(function: FuncSpec) -> HookTarget {
        HookTarget {
            function,
            signature: None,
            stack_words: None,
        }
    }

    /// Stores `signature` with the hook.
    pub fn with_signature(mut self, signature: reader::args::Signature) -> HookTarget {
        self.signature = Some(signature);
        self
    }
}

impl From<FuncSpec> for HookTarget {
    fn from(function: FuncSpec) -> HookTarget {
        HookTarget::new(function)
    }
}

impl From<&str> for HookTarget {
    /// Parses `name`, `module!name` or `0xADDR` as [`FuncSpec::parse`] does.
    fn from(text: &str) -> HookTarget {
        HookTarget::new(FuncSpec::parse(text))
    }
}

/// Hooks every function in `targets` in process `pid`, in one stop.
///
/// All or nothing: when any function cannot be hooked, none is and the process
/// is left as it was.
///
/// `targets` may be [`HookTarget`]s, [`FuncSpec`]s or names (`&str`).
pub fn install<T: Clone + Into<HookTarget>>(
    pid: Pid,
    targets: &[T],
    opts: &InstallOptions,
) -> Result<InstallReport, Error> {
    let pid = pid.as_raw();
    let targets: Vec<HookTarget> = targets.iter().cloned().map(Into::into).collect();
    let specs: Vec<FuncSpec> = targets.iter().map(|t| t.function.clone()).collect();
    let signatures: Vec<Option<reader::args::Signature>> =
        targets.iter().map(|t| t.signature.clone()).collect();
    // Entries an earlier, failed operation on this process left behind.
    drop(take_journal(pid));
    let windows: Vec<Option<u16>> = targets.iter().map(|t| t.stack_words).collect();
    let report = install_inner(pid, &specs, &signatures, &windows, opts);
    let signals = take_journal(pid);
    report
        .map(|r| InstallReport { signals, ..r })
        .map_err(|e| crate::error::exited_during(pid, crate::error::Operation::Inject, e))
}

fn install_inner(
    pid: i32,
    specs: &[FuncSpec],
    signatures: &[Option<reader::args::Signature>],
    windows: &[Option<u16>],
    opts: &InstallOptions,
) -> Result<InstallReport, Error> {
    for sig in signatures.iter().flatten() {
        if sig.text().len() > trampolines::arena::MAX_SIGNATURE {
            return Err(Error::Signature(reader::args::SignatureError::TooLong {
                text: sig.text().to_string(),
                len: sig.text().len(),
                max: trampolines::arena::MAX_SIGNATURE,
            }));
        }
    }
    let mut ctx = ProcessInfo::read(pid, Access::Stop)?;
    let mem = ProcessMemory::open(pid)?;
    let mut prepared = Plan::new(&ctx, &mem, specs, signatures, windows, opts)?.prepare(now_ns())?;
    let protection = Protection::decide(ctx.arch, &prepared.unwinders, opts.calls);
    if let Protection::Impossible { raiser, reason } = &protection {
        if opts.calls.unprotected == UnprotectedHooks::Refuse {
            return Err(unprotected(&prepared, raiser, reason.clone()));
        }
    }
    // Search for a `syscall` instruction now, not inside the stop.
    let gadget = if prepared.creates_arenas() {
        ctx.gadgets.find(ctx.arch, &ctx.maps, &mem)
    } else {
        None
    };

    // Stop the world, not to be preempted by the threads released at the end.
    let realtime = crate::ptrace::realtime::Realtime::enter();
    let mut session = ctx.stop_all()?;
    if let Some(addr) = gadget {
        session.set_syscall_gadget(addr)?;
    }
    let (done, stopped, threads, early) = match &protection {
        Protection::Register { unwinder, raiser } => {
            let unwinder = unwinder.clone();
            let raiser = raiser.clone();
            install_protected(
                &mut ctx,
                &mem,
                &mut prepared,
                session,
                &unwinder,
                &raiser,
                opts,
            )?
        }
        Protection::NotNeeded | Protection::Impossible { .. } => {
            let result = prepared.commit(&mut session, &mem);
            ctx.keep_gadgets(&session);
            let threads = session.tids().len();
            let done = match result {
                Ok(done) => done,
                Err(e) => {
                    let _ = session.detach();
                    return Err(e);
                }
            };
            (done, session.detach()?, threads, None)
        }
    };
    drop(realtime);
    let mut unwind = register(
        &mut ctx,
        &mem,
        &prepared.unwinders,
        &done.unwind_hooks,
        opts,
    );
    if let Some(early) = early {
        unwind.registered += early.registered;
        unwind.elapsed += early.elapsed;
        unwind.notes.splice(0..0, early.notes);
    }
    if let Protection::Impossible { raiser, reason } = &protection {
        unwind.notes.push(format!(
            "hooked without protection, as asked: {}",
            unprotected(&prepared, raiser, reason.clone())
                .to_string()
                .trim_start_matches("not hooking ")
                .replace("; nothing was changed", "")
        ));
    }
    if ctx.arch == Arch::I386 {
        unwind.notes.push(
            "32-bit process: no unwind information is generated for i386 trampolines \
             yet, so gdb, perf and C++ exceptions do not unwind through them"
                .to_string(),
        );
    }
    Ok(InstallReport {
        hooks: done.hooks,
        stopped,
        threads,
        new_arenas: done.new_arenas,
        moved_threads: done.moved_threads,
        rip_census: done.census,
        unwind,
        signals: Vec::new(),
    })
}

/// Whether the hooks of an install must have their unwind information registered
/// with the program's unwinder before their jumps are written.
///
/// The rule (docs/DESIGN.md, "Exceptions through hooks"): a process whose modules
/// define `_Unwind_RaiseException` can throw (C++ exceptions, and a thread's
/// cancellation unwinds the same way), and an exception can then cross any hooked
/// function. Such hooks are activated only after libgcc knows their code; where
/// that cannot be done they are refused unless the caller accepts the risk.
enum Protection {
    /// Nothing in the process raises exceptions (a C program without libgcc's
    /// unwinder): no unwinder would look for the hooks' unwind information.
    NotNeeded,
    /// Register with `unwinder` first, then write the jumps.
    Register {
        unwinder: crate::foreign_unwind::Unwinder,
        raiser: String,
    },
    /// Exceptions are possible and the registration cannot be made.
    Impossible {
        raiser: String,
        reason: UnprotectedReason,
    },
}

impl Protection {
    fn decide(
        arch: Arch,
        unwinders: &crate::foreign_unwind::Unwinders,
        policy: crate::foreign_unwind::CallPolicy,
    ) -> Protection {
        let Some(raiser) = unwinders.raiser.clone() else {
            return Protection::NotNeeded;
        };
        let reason = if arch == Arch::I386 {
            UnprotectedReason::NoUnwindInfo32
        } else if policy.calls == crate::foreign_unwind::RemoteCalls::Off {
            UnprotectedReason::CallsOff
        } else if let Some(unwinder) = unwinders.libgcc.clone() {
            return Protection::Register { unwinder, raiser };
        } else {
            UnprotectedReason::NoRegistration
        };
        Protection::Impossible { raiser, reason }
    }
}

/// The refusal of an install whose hooks could end the program through an exception.
fn unprotected(prepared: &Prepared, raiser: &str, reason: UnprotectedReason) -> Error {
    Error::Unprotected {
        functions: prepared.hooks.iter().map(|h| h.planned.label()).collect(),
        raiser: raiser.to_string(),
        reason,
    }
}

/// An install in two stops around the registration of the hooks' unwind
/// information (`session` holds the first): stage the code and unwind slots, let
/// the process go, register on a thread at a safe point, stop again and write the
/// jumps. Where the registration is not confirmed for every hook and the caller
/// does not accept that, everything staged is taken back (or, if libgcc may still
/// hold some of it, kept unused) and the install fails.
fn install_protected(
    ctx: &mut ProcessInfo,
    mem: &ProcessMemory,
    prepared: &mut Prepared,
    mut session: Session,
    unwinder: &crate::foreign_unwind::Unwinder,
    raiser: &str,
    opts: &InstallOptions,
) -> Result<(Committed, Duration, usize, Option<UnwindReport>), Error> {
    let staged = prepared.stage(&mut session, mem);
    ctx.keep_gadgets(&session);
    let (staged, unwind_hooks) = match staged {
        Ok(s) => s,
        Err(e) => {
            let _ = session.detach();
            return Err(e);
        }
    };
    let mut stopped = match session.detach() {
        Ok(d) => d,
        Err(e) => {
            // Nothing runs the staged code: leave it unused rather than stop again.
            staged.keep();
            return Err(e.into());
        }
    };
    ctx.gadgets.find(ctx.arch, &ctx.maps, mem);
    let described = unwind_hooks.len() == prepared.hooks.len();
    let early = described.then(|| {
        crate::foreign_unwind::register_exceptions(
            ctx.pid,
            unwinder,
            &unwind_hooks,
            opts.calls,
            &mut ctx.gadgets,
        )
    });
    let missing = crate::foreign_unwind::unregistered(ctx.pid, &unwind_hooks);
    let refused = if !described {
        Some(UnprotectedReason::NotRegistered(
            "the unwind information of some hooks could not be generated".into(),
        ))
    } else if !missing.is_empty() {
        let notes = early
            .as_ref()
            .map(|r| r.notes.join("; "))
            .unwrap_or_default();
        Some(UnprotectedReason::NotRegistered(if notes.is_empty() {
            format!("{} hooks not registered", missing.len())
        } else {
            notes
        }))
    } else {
        None
    };
    if let Some(reason) = refused {
        if opts.calls.unprotected == UnprotectedHooks::Refuse {
            take_back(ctx, mem, prepared, staged, &unwind_hooks, opts)?;
            return Err(unprotected(prepared, raiser, reason));
        }
    }
    let mut session = ctx.stop_all()?;
    let threads = session.tids().len();
    let result = prepared.activate(&mut session, mem, staged, unwind_hooks.clone());
    ctx.keep_gadgets(&session);
    match result {
        Ok(done) => {
            stopped += session.detach()?;
            Ok((done, stopped, threads, early))
        }
        Err(failed) => {
            let (e, staged) = *failed;
            let _ = session.detach();
            take_back(ctx, mem, prepared, staged, &unwind_hooks, opts)?;
            Err(e)
        }
    }
}

/// Takes back a staged install that will not be activated: its registrations are
/// undone where libgcc confirms them, and the staged code and unwind slots are
/// removed, or kept unused (ejected records) while libgcc may still read them.
fn take_back(
    ctx: &mut ProcessInfo,
    mem: &ProcessMemory,
    prepared: &Prepared,
    staged: undo::Suspended,
    unwind_hooks: &[crate::foreign_unwind::UnwindHook],
    opts: &InstallOptions,
) -> Result<(), Error> {
    let pid = ctx.pid;
    if crate::foreign_unwind::any_registered(pid, unwind_hooks) {
        crate::foreign_unwind::deregister_exceptions(
            pid,
            unwind_hooks,
            opts.calls,
            &mut ctx.gadgets,
        );
    }
    let mut session = ctx.stop_all()?;
    let kept = crate::foreign_unwind::any_registered(pid, unwind_hooks);
    let result = if kept {
        prepared.retire(&mut session, mem, staged)
    } else {
        Prepared::unstage(&mut session, mem, staged);
        Ok(())
    };
    ctx.keep_gadgets(&session);
    session.detach()?;
    result
}

/// The hooks of `hooks` whose trampoline a stopped thread of `session` is inside
/// or can still return into: its instruction pointer is in the trampoline, or a
/// word of its stack between its stack pointer and the end of the stack's mapping
/// (or the first unreadable page before it) holds an address inside it (a stale word
/// only delays a deregistration).
fn live_in_stacks(
    session: &Session,
    mem: &ProcessMemory,
    maps: &[reader::procfs::MapEntry],
    hooks: &[crate::foreign_unwind::UnwindHook],
) -> Vec<crate::foreign_unwind::UnwindHook> {
    /// The most of one thread's stack that is scanned (a deeper stack counts as live).
    const MAX_SCAN: u64 = 64 << 20;
    let inside = |w: u64| {
        hooks
            .iter()
            .position(|h| (h.trampoline.0..h.trampoline.0 + u64::from(h.trampoline.1)).contains(&w))
    };
    let mut live = vec![false; hooks.len()];
    for tid in session.tids() {
        let Ok(regs) = session.regs(tid) else {
            // Cannot tell: keep every registration.
            return hooks.to_vec();
        };
        if let Some(i) = inside(regs.rip) {
            live[i] = true;
        }
        let sp = regs.rsp & !7;
        let Some(stack) = maps.iter().find(|m| m.start <= sp && sp < m.end) else {
            return hooks.to_vec();
        };
        if stack.end - sp > MAX_SCAN {
            return hooks.to_vec();
        }
        let scanned = stack_words(mem, sp, stack.end, |w| {
            if let Some(i) = inside(w) {
                live[i] = true;
            }
        });
        if !scanned {
            return hooks.to_vec();
        }
    }
    hooks
        .iter()
        .zip(live)
        .filter(|(_, l)| *l)
        .map(|(h, _)| h.clone())
        .collect()
}

/// Calls `visit` with every 8-byte word from `sp` (8-aligned) up to `end`, or up to
/// the first page that cannot be read: a thread's frames lie in readable memory from
/// its stack pointer up, and the pages after them may be another thread's stack guard
/// (glibc 2.42+ installs guards with `MADV_GUARD_INSTALL`, inside the same mapping as
/// the stacks, so two threads' stacks and a guard between them are one mapping).
/// False when even the page holding `sp` cannot be read (nothing can be told).
fn stack_words(
    mem: &dyn crate::memory::Memory,
    sp: u64,
    end: u64,
    mut visit: impl FnMut(u64),
) -> bool {
    const CHUNK: u64 = 64 << 10;
    const PAGE: u64 = 4096;
    let mut buf = vec![0u8; CHUNK as usize];
    let mut at = sp;
    while at < end {
        // Whole chunks first; a chunk that fails is read page by page up to the failure.
        let n = (end - at).min(CHUNK);
        let mut len = n;
        if mem.read(at, &mut buf[..n as usize]).is_err() {
            len = 0;
            while len < n {
                let page_end = ((at + len) / PAGE + 1) * PAGE;
                let step = page_end.min(at + n) - (at + len);
                let slice = &mut buf[len as usize..(len + step) as usize];
                if mem.read(at + len, slice).is_err() {
                    break;
                }
                len += step;
            }
            if len == 0 && at == sp {
                return false;
            }
        }
        for w in buf[..len as usize].chunks_exact(8) {
            visit(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        if len < n {
            break;
        }
        at += n;
    }
    true
}

/// Registers the new hooks' unwind information, after the stop; the gadgets the
/// borrowed threads run through are found first, while the process runs.
fn register(
    ctx: &mut ProcessInfo,
    mem: &ProcessMemory,
    unwinders: &crate::foreign_unwind::Unwinders,
    hooks: &[crate::foreign_unwind::UnwindHook],
    opts: &InstallOptions,
) -> crate::foreign_unwind::UnwindReport {
    if ctx.arch == Arch::X86_64 && !hooks.is_empty() {
        ctx.gadgets.find(ctx.arch, &ctx.maps, mem);
    }
    crate::foreign_unwind::register(ctx.pid, unwinders, hooks, opts.calls, &mut ctx.gadgets)
}

/// Options for [`eject`]: which hooks, and how deregistration may run code in the target.
#[derive(Debug, Clone)]
pub struct EjectOptions {
    /// Which hooks to remove.
    pub what: EjectWhat,
    /// Whether and how functions of the target may run to deregister the hooks'
    /// unwind information (libgcc, the gdb JIT helper).
    pub calls: crate::foreign_unwind::CallPolicy,
}

impl EjectOptions {
    /// Every active hook, with the default call policy.
    pub fn all() -> EjectOptions {
        EjectOptions {
            what: EjectWhat::All,
            calls: Default::default(),
        }
    }

    /// The hooks of `functions`, with the default call policy.
    pub fn functions(functions: Vec<FuncSpec>) -> EjectOptions {
        EjectOptions {
            what: EjectWhat::Functions(functions),
            calls: Default::default(),
        }
    }
}

/// Removes hooks: restores the original bytes exactly and marks the records ejected.
///
/// Trampoline code is never unmapped: a thread may still return into it.
pub fn eject(pid: Pid, opts: &EjectOptions) -> Result<EjectReport, Error> {
    let pid = pid.as_raw();
    drop(take_journal(pid));
    let report = eject_inner(pid, &opts.what, opts.calls);
    let signals = take_journal(pid);
    report
        .map(|r| EjectReport { signals, ..r })
        .map_err(|e| crate::error::exited_during(pid, crate::error::Operation::Eject, e))
}

fn eject_inner(
    pid: i32,
    what: &EjectWhat,
    calls: crate::foreign_unwind::CallPolicy,
) -> Result<EjectReport, Error> {
    let mut ctx = ProcessInfo::read(pid, Access::Stop)?;
    let mem = ProcessMemory::open(pid)?;
    let arenas = discover(&ctx.maps, &mem)?;
    let ejection = Ejection::choose(pid, ctx.arch, arenas, what)?;
    if ejection.is_empty() {
        return Ok(EjectReport {
            hooks: Vec::new(),
            stopped: Duration::ZERO,
            moved_threads: Vec::new(),
            rip_census: RipCensus::default(),
            unwind: Default::default(),
            signals: Vec::new(),
        });
    }
    let unwind_hooks = ejection.unwind_hooks(&mem);

    let mut session = ctx.stop_all()?;
    let result = ejection.commit(&mut session, &mem);
    // Read while every thread is stopped: a hook whose trampoline a thread can
    // still return into keeps its unwind information registered (an exception
    // thrown below it must still get through it).
    let still_live = live_in_stacks(&session, &mem, &ctx.maps, &unwind_hooks);
    ctx.keep_gadgets(&session);
    let done = match result {
        Ok(done) => done,
        Err(e) => {
            let _ = session.detach();
            return Err(e);
        }
    };
    let stopped = session.detach()?;
    if ctx.arch == Arch::X86_64 && !unwind_hooks.is_empty() {
        ctx.gadgets.find(ctx.arch, &ctx.maps, &mem);
    }
    let unwind =
        crate::foreign_unwind::unregister(pid, &unwind_hooks, &still_live, calls, &mut ctx.gadgets);
    Ok(EjectReport {
        hooks: done.hooks,
        stopped,
        moved_threads: done.moved_threads,
        rip_census: done.census,
        unwind,
        signals: Vec::new(),
    })
}
