//! Installing, ejecting and listing hooks in a live process.
//!
//! Install does all slow work first (maps, symbols, reading and analysing the
//! function, choosing arena slots, generating code) and only then stops the
//! process. Inside the stop it re-checks what could have changed, writes code and
//! records, moves threads out of the bytes it overwrites, patches, verifies by
//! reading back, and resumes. Any failure inside the stop undoes every write.

pub mod arena;
pub mod window;

use std::collections::HashSet;
use std::ops::Range;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use trampolines::arena::{Arena, ArenaHeader, HookRecord, HookState, RECORD_LEN};
use trampolines::x86_64::analysis::returns_twice_by_name;
use trampolines::x86_64::{
    plan_patch_in, FunctionContext, HookCode, HookMeta, PatchPlan, JMP_ABS_LEN, JMP_REL32_LEN,
    MAX_PATCH_LEN,
};

use crate::arch::{jump_patch, Arch, ArchPlan};
use crate::error::{Change, Error, FarJumpRefusal, RequestOption, Since};
use crate::hooks::arena::{
    anywhere_candidates, placement_candidates_below, within_reach, ARENA_CAPACITY,
};
use crate::memory::{Memory, ProcessMemory, WriteMemory};
use crate::ptrace::session::Session;
use reader::arena::{discover, read_arena};
use reader::procfs::{read_maps, MapEntry};
use reader::symbols::{FuncSpec, ProcessSymbols, Resolved};

/// Options for [`install`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InstallOptions {
    /// Incoming stack words to copy for callees that read stack-passed arguments;
    /// 0 (unless `force_stack_words`) lets each function's code (or, later, its
    /// signature) decide, see [`crate::hooks::window`].
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
}

/// Which hooks [`eject`] removes.
#[derive(Debug, Clone)]
pub enum EjectWhat {
    /// Every active hook.
    All,
    /// The hooks of these functions.
    Functions(Vec<FuncSpec>),
}

fn maps_of(pid: i32) -> Result<Vec<MapEntry>, Error> {
    if pid <= 0 {
        return Err(crate::ptrace::session::SessionError::NoSuchProcess { pid }.into());
    }
    read_maps(pid).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::Session(crate::ptrace::session::SessionError::NoSuchProcess { pid })
        } else {
            Error::Proc {
                path: format!("/proc/{pid}/maps"),
                source: e,
            }
        }
    })
}

/// Lists every hook recorded in the target's arenas (active and ejected).
pub fn list(pid: i32) -> Result<Vec<HookInfo>, Error> {
    crate::target::check_target(pid, crate::target::Access::Read)?;
    let maps = maps_of(pid)?;
    let mem = ProcessMemory::open(pid)?;
    let arenas = discover(&maps, &mem)?;
    Ok(arenas
        .iter()
        .flat_map(|a| {
            a.hooks().map(|(slot, r)| HookInfo {
                signature: a.signature(slot).map(str::to_string),
                ..HookInfo::new(&a.header, slot, r)
            })
        })
        .collect())
}

/// The live bytes from `end` (just past a function) up to the next function
/// symbol of `module`, at most [`MAX_PATCH_LEN`], inside the same executable
/// mapping: room a short function may borrow when it is dead fill.
fn padding_after(mem: &dyn Memory, module: Option<&reader::symbols::Module>, end: u64) -> Vec<u8> {
    let Some(module) = module else {
        return Vec::new();
    };
    let Some(exec) = module.exec_ranges.iter().find(|r| r.contains(&end)) else {
        return Vec::new();
    };
    let next = module
        .symbols()
        .iter()
        .map(|s| s.addr)
        .find(|&a| a >= end)
        .unwrap_or(exec.end)
        .min(exec.end);
    let len = usize::try_from(next - end).unwrap_or(0).min(MAX_PATCH_LEN);
    mem.read_vec(end, len).unwrap_or_default()
}

/// Plans the patch of the function at `addr` (bytes `code`, followed by
/// `padding`) patching at least `min_len` bytes; jump tables are read from
/// the module's file.
fn plan_with(
    symbols: &ProcessSymbols,
    addr: u64,
    code: &[u8],
    padding: &[u8],
    returns_twice: bool,
    min_len: usize,
) -> Result<PatchPlan, trampolines::error::PlanError> {
    let module = symbols.module_for(addr);
    let read_file = |at: u64, len: usize| -> Option<Vec<u8>> {
        module?.file_bytes(at, len as u64).map(<[u8]>::to_vec)
    };
    let ctx = FunctionContext {
        padding,
        returns_twice,
        read_file: Some(&read_file),
        min_len,
    };
    plan_patch_in(addr, code, &ctx)
}

/// A free slot of arena `a` not yet `taken` by this install.
fn free_slot(a: &Arena, taken: &HashSet<u32>) -> Option<u32> {
    a.records
        .iter()
        .enumerate()
        .find(|(s, r)| r.state == HookState::Free && !taken.contains(&(*s as u32)))
        .map(|(s, _)| s as u32)
}

/// DWARF of the modules holding functions being hooked, loaded at most once per
/// module and only for modules whose functions have no user signature.
#[derive(Default)]
struct ModuleDwarf {
    loaded: Vec<(String, reader::debuginfo::ModuleDebug)>,
    narrow: Vec<(String, reader::debuginfo::EntryDebug)>,
}

impl ModuleDwarf {
    /// The narrow reader of `m`'s DWARF (see [`reader::debuginfo::EntryDebug`]).
    fn entry_for(&mut self, m: &reader::symbols::Module) -> &mut reader::debuginfo::EntryDebug {
        let i = match self.narrow.iter().position(|(p, _)| *p == m.path) {
            Some(i) => i,
            None => {
                let debug = reader::debuginfo::EntryDebug::load(
                    std::path::Path::new(&m.path),
                    m.bias,
                    &reader::debuginfo::DebugSearch::default(),
                );
                self.narrow.push((m.path.clone(), debug));
                self.narrow.len() - 1
            }
        };
        &mut self.narrow[i].1
    }

    fn for_module(&mut self, m: &reader::symbols::Module) -> &reader::debuginfo::ModuleDebug {
        let i = match self.loaded.iter().position(|(p, _)| *p == m.path) {
            Some(i) => i,
            None => {
                let debug = reader::debuginfo::ModuleDebug::load_dwarf(
                    std::path::Path::new(&m.path),
                    m.bias,
                    &reader::debuginfo::DebugSearch::default(),
                );
                self.loaded.push((m.path.clone(), debug));
                self.loaded.len() - 1
            }
        };
        &self.loaded[i].1
    }
}

/// Where the arguments of `resolved` arrive, from the user's signature or else
/// from its module's DWARF; `None` (the code decides) when neither is known
/// with certainty (see [`crate::hooks::window::placement_of`]).
fn known_placement(
    debug: &mut ModuleDwarf,
    symbols: &ProcessSymbols,
    resolved: &Resolved,
    user: Option<&reader::args::Signature>,
) -> Option<trampolines::x86_64::ArgPlacement> {
    if let Some(placement) =
        user.and_then(|s| crate::hooks::window::placement_of(&s.to_function_info(None)))
    {
        return Some(placement);
    }
    // GCC clones (`f.isra.0`, `f.constprop.0`, `f.part.0`) take other
    // parameters than the function their DWARF describes.
    if resolved.name.contains('.') {
        return None;
    }
    let module = symbols.module_for(resolved.addr)?;
    if !module.path.starts_with('/') {
        return None;
    }
    // Only the unit covering the function is read when the DWARF has an address
    // index; everything otherwise (libc's is 10 MB inflated).
    let narrow = debug.entry_for(module);
    if !narrow.has_dwarf() {
        return None;
    }
    let info = match narrow.function_info(resolved.addr) {
        reader::debuginfo::EntryInfo::Found(info) => info,
        reader::debuginfo::EntryInfo::NotDescribed => return None,
        reader::debuginfo::EntryInfo::Unknown => {
            let md = debug.for_module(module);
            if !md.has_dwarf() {
                return None;
            }
            md.function_info(resolved.addr)?
        }
    };
    if info.entry != Some(resolved.addr) {
        return None;
    }
    crate::hooks::window::placement_of(&info)
}

/// One planned hook, before the stop.
struct Planned {
    resolved: Resolved,
    plan: ArchPlan,
    window: crate::hooks::window::WindowPlan,
    module_range: Range<u64>,
    target: ArenaChoice,
    code: Option<HookCode>,
    /// The function's bytes and the bytes after it, kept to plan again for a far arena.
    bytes: Vec<u8>,
    padding: Vec<u8>,
    returns_twice: bool,
    /// No arena fits within ±2 GiB: patched with the 14-byte absolute jump.
    far: bool,
    /// The user's parameter list, stored in the arena's signature table.
    signature: String,
}

impl Planned {
    fn label(&self) -> String {
        format!("{} in {}", self.resolved.name, self.resolved.module_path)
    }
}

/// Where a planned hook goes: an existing arena, or the `n`th arena created by this install.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArenaChoice {
    Existing(usize, u32),
    New(usize, u32),
}

struct NewArena {
    candidates: Vec<u64>,
    chosen: usize,
    used: u32,
}

impl NewArena {
    fn header(&self) -> ArenaHeader {
        ArenaHeader::new(self.candidates[self.chosen], ARENA_CAPACITY)
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Hooks every function in `specs` in process `pid` in one stop.
pub fn install(
    pid: i32,
    specs: &[FuncSpec],
    opts: &InstallOptions,
) -> Result<InstallReport, Error> {
    install_with_signatures(pid, specs, &[], opts)
}

/// Like [`install`], also storing `signatures[i]` (a parameter list such as
/// `int, const char *`, see [`reader::args::split_signature`]) with the hook of
/// `specs[i]`, so a later `bt` can type the stashed values without DWARF.
pub fn install_with_signatures(
    pid: i32,
    specs: &[FuncSpec],
    signatures: &[Option<reader::args::Signature>],
    opts: &InstallOptions,
) -> Result<InstallReport, Error> {
    install_inner(pid, specs, signatures, opts)
        .map_err(|e| crate::error::exited_during(pid, crate::error::Operation::Inject, e))
}

fn install_inner(
    pid: i32,
    specs: &[FuncSpec],
    signatures: &[Option<reader::args::Signature>],
    opts: &InstallOptions,
) -> Result<InstallReport, Error> {
    for sig in signatures.iter().flatten() {
        if sig.text.len() > trampolines::arena::MAX_SIGNATURE {
            return Err(Error::Signature(reader::args::SignatureError::TooLong {
                text: sig.text.clone(),
                len: sig.text.len(),
                max: trampolines::arena::MAX_SIGNATURE,
            }));
        }
    }
    crate::target::check_target(pid, crate::target::Access::Stop)?;
    let maps = maps_of(pid)?;
    let mem = ProcessMemory::open(pid)?;
    let symbols = ProcessSymbols::load(pid, &maps)?;
    let mut arenas = discover(&maps, &mem)?;
    let arch = Arch::of_process(pid);
    if arch == Arch::I386 && opts.float_args {
        return Err(Error::Unsupported32Bit {
            pid,
            name: std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .unwrap_or_default()
                .trim()
                .to_string(),
            option: RequestOption::FloatArgs,
        });
    }
    let unwinders = match arch {
        Arch::X86_64 => crate::foreign_unwind::find_unwinders(&symbols),
        Arch::I386 => Default::default(),
    };

    // Resolve and analyse every function.
    let mut planned: Vec<Planned> = Vec::new();
    let mut debug = ModuleDwarf::default();
    let mut seen = HashSet::new();
    for (i, spec) in specs.iter().enumerate() {
        let signature = signatures
            .get(i)
            .and_then(|s| s.as_ref())
            .map(|s| s.text.clone())
            .unwrap_or_default();
        let resolved = symbols.resolve_for_hook(spec, &mem)?;
        let label = format!("{} in {}", resolved.name, resolved.module_path);
        if !seen.insert(resolved.addr) {
            return Err(Error::Duplicate { function: label });
        }
        if let Some((arena, slot, r)) = arenas.iter().find_map(|a| {
            a.active_for(resolved.addr)
                .map(|(slot, r)| (a.header.base, slot, r))
        }) {
            return Err(Error::AlreadyHooked {
                function: label,
                name: resolved.name.clone(),
                slot,
                arena,
                trampoline: r.trampoline,
            });
        }
        let size = usize::try_from(resolved.size)
            .unwrap_or(usize::MAX)
            .min(1 << 20);
        let code = mem.read_vec(resolved.addr, size)?;
        let module = symbols.module_for(resolved.addr);
        let padding = padding_after(&mem, module, resolved.addr + code.len() as u64);
        let returns_twice = module.is_some_and(|m| {
            m.symbols()
                .iter()
                .filter(|s| s.addr == resolved.addr)
                .any(|s| returns_twice_by_name(&s.name))
        }) || returns_twice_by_name(&resolved.name);
        let plan = match arch {
            Arch::X86_64 => plan_with(
                &symbols,
                resolved.addr,
                &code,
                &padding,
                returns_twice,
                JMP_REL32_LEN,
            )
            .map(ArchPlan::X86_64),
            Arch::I386 => ArchPlan::new(arch, resolved.addr, &code, &mem),
        }
        .map_err(|source| Error::Plan {
            function: label.clone(),
            source,
        })?;
        let window = match arch {
            Arch::X86_64 => {
                let verdict = crate::hooks::window::analyse_code(
                    &mem,
                    &symbols,
                    resolved.addr,
                    resolved.size,
                )?;
                let user = signatures.get(i).and_then(|s| s.as_ref());
                let placement = known_placement(&mut debug, &symbols, &resolved, user);
                crate::hooks::window::decide_window(
                    opts.requested_window(),
                    placement.as_ref(),
                    &verdict,
                    opts.float_args,
                )
                .map_err(|refusal| match refusal {
                    crate::hooks::window::WindowRefusal::Unsure(reason) => {
                        Error::StackWindowUnknown {
                            function: label.clone(),
                            reason,
                        }
                    }
                    crate::hooks::window::WindowRefusal::TooLarge(words) => {
                        Error::StackWindowTooLarge {
                            function: label.clone(),
                            words,
                        }
                    }
                })?
            }
            // Every cdecl argument is on the stack: copy the i386 default window or more.
            Arch::I386 => crate::hooks::window::WindowPlan {
                words: arch.stack_words(opts.stack_words),
                variadic: false,
                xmm: false,
                source: crate::hooks::window::WindowSource::User,
            },
        };
        let module_range = symbols
            .module_for(resolved.addr)
            .map(|m| m.range.clone())
            .unwrap_or(resolved.addr..resolved.addr + resolved.size);
        planned.push(Planned {
            resolved,
            plan,
            window,
            module_range,
            target: ArenaChoice::Existing(0, 0),
            code: None,
            bytes: code,
            padding,
            returns_twice,
            far: false,
            signature,
        });
    }

    // Choose arenas and slots.
    let mut taken: Vec<HashSet<u32>> = vec![HashSet::new(); arenas.len()];
    let mut new_arenas: Vec<NewArena> = Vec::new();
    let arena_len = ArenaHeader::new(0, ARENA_CAPACITY).arena_len;
    for p in planned.iter_mut() {
        let existing = arenas.iter().enumerate().find_map(|(i, a)| {
            let range = a.header.base..a.header.base + a.header.arena_len;
            if !within_reach(&range, &p.module_range) {
                return None;
            }
            free_slot(a, &taken[i]).map(|s| (i, s))
        });
        if let Some((i, slot)) = existing {
            taken[i].insert(slot);
            p.target = ArenaChoice::Existing(i, slot);
            continue;
        }
        let reusable = new_arenas.iter().position(|n| {
            let base = n.candidates[n.chosen];
            n.used < ARENA_CAPACITY && within_reach(&(base..base + arena_len), &p.module_range)
        });
        let index = match reusable {
            Some(i) => i,
            None => {
                let mut occupied = maps.clone();
                for n in &new_arenas {
                    let h = n.header();
                    occupied.push(MapEntry {
                        start: h.base,
                        end: h.base + h.arena_len,
                        ..maps[0].clone()
                    });
                }
                let near = placement_candidates_below(
                    &occupied,
                    &p.module_range,
                    arena_len,
                    arch.address_limit(),
                );
                if near.is_empty() && arch != Arch::X86_64 {
                    return Err(Error::NoArenaSpace {
                        module: p.resolved.module_path.clone(),
                    });
                }
                if near.is_empty() {
                    // Nothing free within ±2 GiB: any arena will do, reached by
                    // the 14-byte absolute jump, if the prologue allows it.
                    p.plan = plan_with(
                        &symbols,
                        p.resolved.addr,
                        &p.bytes,
                        &p.padding,
                        p.returns_twice,
                        JMP_ABS_LEN,
                    )
                    .map(ArchPlan::X86_64)
                    .map_err(|e| Error::NoArenaSpaceFar {
                        module: p.resolved.module_path.clone(),
                        function: p.resolved.name.clone(),
                        reason: FarJumpRefusal::Plan(e),
                    })?;
                    p.far = true;
                    let existing = arenas
                        .iter()
                        .enumerate()
                        .find_map(|(i, a)| free_slot(a, &taken[i]).map(|s| (i, s)));
                    if let Some((i, slot)) = existing {
                        taken[i].insert(slot);
                        p.target = ArenaChoice::Existing(i, slot);
                        continue;
                    }
                    match new_arenas.iter().position(|n| n.used < ARENA_CAPACITY) {
                        Some(i) => i,
                        None => {
                            let anywhere = anywhere_candidates(&occupied, arena_len);
                            if anywhere.is_empty() {
                                return Err(Error::NoArenaSpace {
                                    module: p.resolved.module_path.clone(),
                                });
                            }
                            new_arenas.push(NewArena {
                                candidates: anywhere,
                                chosen: 0,
                                used: 0,
                            });
                            new_arenas.len() - 1
                        }
                    }
                } else {
                    new_arenas.push(NewArena {
                        candidates: near,
                        chosen: 0,
                        used: 0,
                    });
                    new_arenas.len() - 1
                }
            }
        };
        p.target = ArenaChoice::New(index, new_arenas[index].used);
        new_arenas[index].used += 1;
    }

    // Generate code now, outside the stop.
    let installed_ns = now_ns();
    let generate = |p: &Planned, header: &ArenaHeader, slot: u32| -> Result<HookCode, Error> {
        let meta = HookMeta {
            name: p.resolved.name.clone(),
            module: p.resolved.module_path.clone(),
            function_size: p.resolved.size,
            installed_ns,
            variadic: p.window.variadic,
        };
        p.plan
            .build(header, slot, p.window.words, p.window.xmm, &meta)
            .map_err(|source| {
                if p.far {
                    Error::NoArenaSpaceFar {
                        module: p.resolved.module_path.clone(),
                        function: p.resolved.name.clone(),
                        reason: FarJumpRefusal::Codegen(source),
                    }
                } else {
                    Error::Codegen {
                        function: p.label(),
                        source,
                    }
                }
            })
    };
    for p in planned.iter_mut() {
        let (header, slot) = match p.target {
            ArenaChoice::Existing(i, slot) => (arenas[i].header, slot),
            ArenaChoice::New(i, slot) => (new_arenas[i].header(), slot),
        };
        p.code = Some(generate(p, &header, slot)?);
    }

    // Search for a `syscall` instruction now, not inside the stop.
    let gadget = if new_arenas.is_empty() {
        None
    } else {
        crate::ptrace::syscall::find_syscall_gadget(pid)?
    };

    // Stop the world.
    let mut session = Session::attach_all(pid)?;
    if let Some(addr) = gadget {
        session.set_syscall_gadget(addr)?;
    }
    let mut undo = Undo::default();
    let mut census = RipCensus::default();
    let mut unwind_hooks = Vec::new();
    let result = (|| -> Result<(Vec<HookInfo>, Vec<i32>), Error> {
        // Create the new arenas, regenerating code if the first spot is gone.
        for (i, n) in new_arenas.iter_mut().enumerate() {
            let len = n.header().arena_len;
            let mut created = false;
            let mut last_error = None;
            while n.chosen < n.candidates.len() {
                let want = n.candidates[n.chosen];
                let got = session.remote_mmap(
                    want,
                    len,
                    libc::PROT_READ | libc::PROT_EXEC,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                );
                match got {
                    Ok(addr) if addr == want => {
                        created = true;
                        break;
                    }
                    Ok(other) => {
                        // A kernel without MAP_FIXED_NOREPLACE put it elsewhere.
                        let _ = session.remote_munmap(other, len);
                        n.chosen += 1;
                    }
                    Err(e) => {
                        last_error = Some(e);
                        n.chosen += 1;
                    }
                }
            }
            if !created {
                let module = planned
                    .iter()
                    .find(|p| matches!(p.target, ArenaChoice::New(j, _) if j == i))
                    .map(|p| p.resolved.module_path.clone())
                    .unwrap_or_default();
                // EEXIST only means the spot was taken meanwhile; anything else is the cause.
                return Err(match last_error {
                    Some(e)
                        if !matches!(
                            e,
                            crate::ptrace::session::SessionError::RemoteSyscall {
                                errno: libc::EEXIST,
                                ..
                            }
                        ) =>
                    {
                        Error::ArenaMapFailed { module, cause: e }
                    }
                    _ => Error::NoArenaSpace { module },
                });
            }
            let header = n.header();
            undo.arenas.push((header.base, len));
            mem.write(header.base, &header.encode())?;
            // i386 hooks get no unwind area yet: their CFI is not generated.
            if arch == Arch::X86_64 {
                let area = crate::foreign_unwind::create_area(&mut session, &mem, &header)?;
                undo.arenas.push((area.base, area.len()));
            }
            if n.chosen != 0 {
                for p in planned
                    .iter_mut()
                    .filter(|p| matches!(p.target, ArenaChoice::New(j, _) if j == i))
                {
                    let ArenaChoice::New(_, slot) = p.target else {
                        continue;
                    };
                    p.code = Some(generate(p, &header, slot)?);
                }
            }
        }
        // Re-read existing arenas: another tool may have used them since.
        for (i, a) in arenas.iter_mut().enumerate() {
            if !planned
                .iter()
                .any(|p| matches!(p.target, ArenaChoice::Existing(j, _) if j == i))
            {
                continue;
            }
            let fresh = read_arena(&mem, &a.header)?;
            if fresh != *a {
                return Err(Error::Changed {
                    change: Change::ArenaRecords {
                        arena: a.header.base,
                    },
                });
            }
        }
        // The entries must still hold what was analysed.
        for p in &planned {
            let now = mem.read_vec(p.plan.patch_addr(), p.plan.patch_len())?;
            if now != p.plan.original() {
                return Err(Error::Changed {
                    change: Change::Entry {
                        function: p.label(),
                        since: Since::Read,
                        expected: p.plan.original().to_vec(),
                        found: now,
                    },
                });
            }
        }
        // Code and records first, then the patches.
        for p in &planned {
            let code = p.code.as_ref().expect("generated above");
            let arena = arena_header(&arenas, &new_arenas, p.target);
            mem.write(arena.slot_addr(code.slot), &code.slot_bytes())?;
            let record = code.record.encode().map_err(|source| Error::Format {
                addr: arena.base,
                source,
            })?;
            undo.records.push(arena.record_addr(code.slot));
            // Every record gets its signature entry written (empty when none), so a
            // slot never shows a stale one.
            match arena.signature_addr(code.slot) {
                Some(at) => {
                    let entry =
                        trampolines::arena::encode_signature(&p.signature).map_err(|source| {
                            Error::Format {
                                addr: arena.base,
                                source,
                            }
                        })?;
                    mem.write(at, &entry)?;
                }
                None if !p.signature.is_empty() => {
                    return Err(Error::Signature(reader::args::SignatureError::OldArena {
                        arena: arena.base,
                    }))
                }
                None => {}
            }
            mem.write(arena.record_addr(code.slot), &record)?;
            if let Some(area) = crate::foreign_unwind::write_slot(&mem, &arena, code)? {
                unwind_hooks.push(crate::foreign_unwind::hook_of(
                    area,
                    code.slot,
                    &code.record,
                ));
            }
        }
        // Threads inside bytes about to be overwritten continue in the relocated copy.
        let mut moves = Vec::new();
        for tid in session.tids() {
            let regs = session.regs(tid)?;
            for p in &planned {
                let code = p.code.as_ref().expect("generated above");
                if code.record.in_trampoline(regs.rip) {
                    census.in_trampoline += 1;
                }
                if code.record.in_relocated(regs.rip) {
                    census.in_relocated += 1;
                }
                if code.record.inside_patch(regs.rip) {
                    census.in_patch += 1;
                    let Some(to) = code.record.original_to_relocated(regs.rip) else {
                        return Err(Error::ThreadInPatch {
                            tid,
                            function: p.label(),
                            rip: regs.rip,
                        });
                    };
                    moves.push((tid, regs, to));
                }
            }
        }
        for p in &planned {
            let code = p.code.as_ref().expect("generated above");
            undo.patches
                .push((p.plan.patch_addr(), p.plan.original().to_vec()));
            mem.write(p.plan.patch_addr(), &code.patch)?;
        }
        // Verify by reading back.
        for p in &planned {
            let code = p.code.as_ref().expect("generated above");
            let arena = arena_header(&arenas, &new_arenas, p.target);
            if mem.read_vec(p.plan.patch_addr(), code.patch.len())? != code.patch {
                return Err(Error::Verify {
                    addr: p.plan.patch_addr(),
                    what: "patch",
                });
            }
            let slot = code.slot_bytes();
            if mem.read_vec(arena.slot_addr(code.slot), slot.len())? != slot {
                return Err(Error::Verify {
                    addr: arena.slot_addr(code.slot),
                    what: "trampoline",
                });
            }
        }
        let mut moved = Vec::new();
        for (tid, mut regs, to) in moves {
            regs.rip = to;
            session.set_regs(tid, &regs)?;
            moved.push(tid);
        }
        let infos = planned
            .iter()
            .map(|p| {
                let code = p.code.as_ref().expect("generated above");
                HookInfo {
                    signature: (!p.signature.is_empty()).then(|| p.signature.clone()),
                    window_source: Some(p.window.source),
                    ..HookInfo::new(
                        &arena_header(&arenas, &new_arenas, p.target),
                        code.slot,
                        &code.record,
                    )
                }
            })
            .collect();
        Ok((infos, moved))
    })();
    let threads = session.tids().len();
    match result {
        Ok((hooks, moved_threads)) => {
            let stopped = session.detach()?;
            let new_arenas = new_arenas.iter().map(|n| n.header().base).collect();
            let mut unwind =
                crate::foreign_unwind::register(pid, &unwinders, &unwind_hooks, opts.calls);
            if arch == Arch::I386 {
                unwind.notes.push(
                    "32-bit process: no unwind information is generated for i386 trampolines \
                     yet, so gdb, perf and C++ exceptions do not unwind through them"
                        .to_string(),
                );
            }
            Ok(InstallReport {
                hooks,
                stopped,
                threads,
                new_arenas,
                moved_threads,
                rip_census: census,
                unwind,
            })
        }
        Err(e) => {
            undo.run(&mut session, &mem);
            let _ = session.detach();
            Err(e)
        }
    }
}

fn arena_header(arenas: &[Arena], new_arenas: &[NewArena], choice: ArenaChoice) -> ArenaHeader {
    match choice {
        ArenaChoice::Existing(i, _) => arenas[i].header,
        ArenaChoice::New(i, _) => new_arenas[i].header(),
    }
}

/// Writes to take back when an install fails inside the stop.
#[derive(Default)]
struct Undo {
    patches: Vec<(u64, Vec<u8>)>,
    records: Vec<u64>,
    arenas: Vec<(u64, u64)>,
}

impl Undo {
    fn run(&self, session: &mut Session, mem: &dyn WriteMemory) {
        for (addr, original) in self.patches.iter().rev() {
            let _ = mem.write(*addr, original);
        }
        for addr in &self.records {
            let _ = mem.write(*addr, &[0u8; RECORD_LEN]);
        }
        for (base, len) in &self.arenas {
            let _ = session.remote_munmap(*base, *len);
        }
    }
}

/// How well `spec` names the hooked function of `r`, `None` if it does not; the
/// module of a `MODULE!NAME` is matched as symbol resolution matches it (path,
/// file name or soname, prefix at a name boundary), and only the best-matching
/// hooks count, so `libz.so.1!f` picks the module whose soname it is.
fn spec_match(
    pid: i32,
    spec: &FuncSpec,
    r: &HookRecord,
    sonames: &mut Vec<(String, Option<String>)>,
) -> Option<reader::symbols::ModuleMatch> {
    use reader::symbols::ModuleMatch;
    match spec {
        FuncSpec::Name(n) => (r.name == *n).then_some(ModuleMatch::Path),
        FuncSpec::Qualified { module, name } => {
            if r.name != *name {
                return None;
            }
            let soname = match sonames.iter().find(|(p, _)| *p == r.module) {
                Some((_, so)) => so.clone(),
                None => {
                    let so = reader::symbols::soname_of(pid, &r.module);
                    sonames.push((r.module.clone(), so.clone()));
                    so
                }
            };
            reader::symbols::module_match(&r.module, soname.as_deref(), module).or_else(|| {
                (module.contains('/') && reader::symbols::same_file_in(pid, module, &r.module))
                    .then_some(ModuleMatch::Path)
            })
        }
        FuncSpec::Addr(a) => (r.function == *a).then_some(ModuleMatch::Path),
    }
}

/// Removes hooks: restores the original bytes exactly and marks the records ejected.
///
/// Trampoline code is never unmapped: a thread may still return into it.
pub fn eject(pid: i32, what: &EjectWhat) -> Result<EjectReport, Error> {
    eject_with_policy(pid, what, crate::foreign_unwind::CallPolicy::default())
}

/// [`eject`], with a policy for the calls in the target that deregistration makes.
pub fn eject_with_policy(
    pid: i32,
    what: &EjectWhat,
    calls: crate::foreign_unwind::CallPolicy,
) -> Result<EjectReport, Error> {
    eject_inner(pid, what, calls)
        .map_err(|e| crate::error::exited_during(pid, crate::error::Operation::Eject, e))
}

fn eject_inner(
    pid: i32,
    what: &EjectWhat,
    calls: crate::foreign_unwind::CallPolicy,
) -> Result<EjectReport, Error> {
    crate::target::check_target(pid, crate::target::Access::Stop)?;
    let maps = maps_of(pid)?;
    let mem = ProcessMemory::open(pid)?;
    let arenas = discover(&maps, &mem)?;
    let arch = Arch::of_process(pid);
    let active: Vec<(usize, u32)> = arenas
        .iter()
        .enumerate()
        .flat_map(|(i, a)| {
            a.hooks()
                .filter(|(_, r)| r.state == HookState::Active)
                .map(move |(s, _)| (i, s))
        })
        .collect();
    let record = |(i, s): (usize, u32)| &arenas[i].records[s as usize];
    let chosen: Vec<(usize, u32)> = match what {
        EjectWhat::All => active.clone(),
        EjectWhat::Functions(specs) => {
            let mut chosen = Vec::new();
            let mut sonames = Vec::new();
            for spec in specs {
                let matched: Vec<((usize, u32), reader::symbols::ModuleMatch)> = active
                    .iter()
                    .filter_map(|h| Some((*h, spec_match(pid, spec, record(*h), &mut sonames)?)))
                    .collect();
                let best = matched.iter().map(|(_, how)| *how).min();
                let hits: Vec<(usize, u32)> = matched
                    .iter()
                    .filter(|(_, how)| Some(*how) == best)
                    .map(|(h, _)| *h)
                    .collect();
                match hits.len() {
                    0 => {
                        return Err(Error::NotHooked {
                            function: spec.to_string(),
                            hooked: active
                                .iter()
                                .map(|h| format!("{} ({})", record(*h).name, record(*h).module))
                                .collect(),
                        })
                    }
                    1 => chosen.push(hits[0]),
                    _ => {
                        return Err(reader::symbols::SymbolError::Ambiguous {
                            name: spec.to_string(),
                            candidates: hits
                                .iter()
                                .map(|h| {
                                    format!(
                                        "{} in {} (0x{:x})",
                                        record(*h).name,
                                        record(*h).module,
                                        record(*h).function
                                    )
                                })
                                .collect(),
                        }
                        .into())
                    }
                }
            }
            chosen
        }
    };
    if chosen.is_empty() {
        return Ok(EjectReport {
            hooks: Vec::new(),
            stopped: Duration::ZERO,
            moved_threads: Vec::new(),
            rip_census: RipCensus::default(),
            unwind: Default::default(),
        });
    }
    let unwind_hooks: Vec<crate::foreign_unwind::UnwindHook> = chosen
        .iter()
        .filter_map(|(i, s)| {
            let area = crate::foreign_unwind::read_area(&mem, &arenas[*i].header)?;
            Some(crate::foreign_unwind::hook_of(
                area,
                *s,
                &arenas[*i].records[*s as usize],
            ))
        })
        .collect();

    let mut session = Session::attach_all(pid)?;
    let mut restored: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut census = RipCensus::default();
    let result = (|| -> Result<(Vec<HookInfo>, Vec<i32>), Error> {
        let mut infos = Vec::new();
        // Check everything before writing anything.
        for (i, s) in &chosen {
            let a = &arenas[*i];
            let fresh = HookRecord::decode(&mem.read_vec(a.header.record_addr(*s), RECORD_LEN)?)
                .map_err(|source| Error::Format {
                    addr: a.header.base,
                    source,
                })?;
            let r = record((*i, *s));
            if fresh != *r {
                return Err(Error::Changed {
                    change: Change::Record {
                        function: r.name.clone(),
                    },
                });
            }
            let expected =
                jump_patch(arch, r.patch_addr, r.trampoline, r.patch_len()).map_err(|source| {
                    Error::Codegen {
                        function: r.name.clone(),
                        source,
                    }
                })?;
            let now = mem.read_vec(r.patch_addr, r.patch_len())?;
            // Original bytes under an active record: an argstash killed between writing
            // the record and the patch (inject), or between restoring the bytes and
            // marking the record (eject). Ejecting it completes that operation.
            if now != expected && now != r.original {
                return Err(Error::Changed {
                    change: Change::Entry {
                        function: format!("{} in {}", r.name, r.module),
                        since: Since::Hooked,
                        expected,
                        found: now,
                    },
                });
            }
        }
        let mut moves = Vec::new();
        for tid in session.tids() {
            let regs = session.regs(tid)?;
            for h in &chosen {
                let r = record(*h);
                if r.in_trampoline(regs.rip) {
                    census.in_trampoline += 1;
                }
                if regs.rip >= r.patch_addr && regs.rip < r.patch_addr + r.patch_len() as u64 {
                    census.in_patch += 1;
                }
                if r.in_relocated(regs.rip) {
                    census.in_relocated += 1;
                    let Some(to) = r.relocated_to_original(regs.rip) else {
                        return Err(Error::ThreadInPatch {
                            tid,
                            function: r.name.clone(),
                            rip: regs.rip,
                        });
                    };
                    moves.push((tid, regs, to));
                }
            }
        }
        for h in &chosen {
            let r = record(*h);
            restored.push((
                r.patch_addr,
                jump_patch(arch, r.patch_addr, r.trampoline, r.patch_len()).unwrap_or_default(),
            ));
            mem.write(r.patch_addr, &r.original)?;
            if mem.read_vec(r.patch_addr, r.patch_len())? != r.original {
                return Err(Error::Verify {
                    addr: r.patch_addr,
                    what: "restored bytes",
                });
            }
        }
        for (i, s) in &chosen {
            let a = &arenas[*i];
            let mut r = a.records[*s as usize].clone();
            r.state = HookState::Ejected;
            let bytes = r.encode().map_err(|source| Error::Format {
                addr: a.header.base,
                source,
            })?;
            mem.write(a.header.record_addr(*s), &bytes)?;
            infos.push(HookInfo::new(&a.header, *s, &r));
        }
        let mut moved = Vec::new();
        for (tid, mut regs, to) in moves {
            regs.rip = to;
            session.set_regs(tid, &regs)?;
            moved.push(tid);
        }
        Ok((infos, moved))
    })();
    match result {
        Ok((hooks, moved_threads)) => {
            let stopped = session.detach()?;
            let unwind = crate::foreign_unwind::unregister(pid, &unwind_hooks, calls);
            Ok(EjectReport {
                hooks,
                stopped,
                moved_threads,
                rip_census: census,
                unwind,
            })
        }
        Err(e) => {
            for (addr, patch) in restored.iter().rev() {
                let _ = mem.write(*addr, patch);
            }
            let _ = session.detach();
            Err(e)
        }
    }
}
