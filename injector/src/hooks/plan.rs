//! The first phases of an install, while the target keeps running: a [`Plan`]
//! (resolve each function, read and analyse its bytes, decide its stack window,
//! choose an arena slot), then a [`Prepared`] install (the code of every hook
//! generated for its slot). Nothing here stops the process; what the plan read
//! that could change before the stop is checked again by the commit
//! ([`crate::hooks::commit`]).

use std::collections::HashSet;
use std::ops::Range;

use trampolines::arena::{Arena, ArenaHeader, HookState};
use trampolines::relocation::{JMP_REL32_LEN, MAX_PATCH_LEN};
use trampolines::x86_64::analysis::returns_twice_by_name;
use trampolines::{
    ArchCodegen, FunctionContext, HookCode, HookMeta, PlanError, PlanInputs, PlannedPatch,
};

use crate::arch::Arch;
use crate::error::{Error, FarJumpRefusal, RequestOption};
use crate::foreign_unwind::Unwinders;
use crate::hooks::arena::{ArenaChoice, NewArena, Placement};
use crate::hooks::window::{WindowPlan, WindowRefusal, WindowSource};
use crate::hooks::InstallOptions;
use crate::memory::Memory;
use crate::target::ProcessInfo;
use reader::arena::discover;
use reader::args::Signature;
use reader::symbols::{FuncSpec, Module, ProcessSymbols, Resolved};

/// One function to hook, analysed and placed.
pub(crate) struct PlannedHook {
    pub(crate) resolved: Resolved,
    pub(crate) plan: Box<dyn PlannedPatch>,
    pub(crate) window: WindowPlan,
    /// The addresses of the function's module: its arena must be in rel32 reach.
    module_range: Range<u64>,
    pub(crate) target: ArenaChoice,
    /// The function's bytes and the bytes after it, kept to plan again for a far arena.
    bytes: Vec<u8>,
    padding: Vec<u8>,
    returns_twice: bool,
    /// No arena fits within ±2 GiB: patched with the 14-byte absolute jump.
    far: bool,
    /// The user's parameter list, stored in the arena's signature table.
    pub(crate) signature: String,
}

impl PlannedHook {
    /// `NAME in MODULE`, as messages name the function.
    pub(crate) fn label(&self) -> String {
        format!("{} in {}", self.resolved.name, self.resolved.module_path)
    }

    /// Generates the hook's code for `slot` of the arena `header`.
    pub(crate) fn generate(
        &self,
        header: &ArenaHeader,
        slot: u32,
        installed_ns: u64,
    ) -> Result<HookCode, Error> {
        let meta = HookMeta {
            name: self.resolved.name.clone(),
            module: self.resolved.module_path.clone(),
            function_size: self.resolved.size,
            installed_ns,
            variadic: self.window.variadic,
        };
        self.plan
            .build(header, slot, self.window.words, self.window.xmm, &meta)
            .map_err(|source| {
                if self.far {
                    Error::NoArenaSpaceFar {
                        module: self.resolved.module_path.clone(),
                        function: self.resolved.name.clone(),
                        reason: FarJumpRefusal::Codegen(source),
                    }
                } else {
                    Error::Codegen {
                        function: self.label(),
                        source,
                    }
                }
            })
    }
}

/// Every function of one install analysed and given a slot; no code yet.
pub(crate) struct Plan {
    pub(crate) arch: Arch,
    pub(crate) hooks: Vec<PlannedHook>,
    /// The arenas found in the target (the commit checks they are unchanged).
    pub(crate) arenas: Vec<Arena>,
    /// The arenas to create.
    pub(crate) new_arenas: Vec<NewArena>,
    /// The target's unwinders, fed after the stop.
    pub(crate) unwinders: Unwinders,
}

/// A hook with its code: what the commit writes.
pub(crate) struct PreparedHook {
    pub(crate) planned: PlannedHook,
    pub(crate) code: HookCode,
}

/// An install ready to commit: every hook's code generated for its slot.
pub(crate) struct Prepared {
    pub(crate) arch: Arch,
    pub(crate) hooks: Vec<PreparedHook>,
    pub(crate) arenas: Vec<Arena>,
    pub(crate) new_arenas: Vec<NewArena>,
    pub(crate) unwinders: Unwinders,
    /// The install time written into every record (code regenerated in the stop keeps it).
    pub(crate) installed_ns: u64,
}

impl Prepared {
    /// The header of the arena a hook placed at `choice` goes into.
    pub(crate) fn arena_header(&self, choice: ArenaChoice) -> ArenaHeader {
        arena_header(&self.arenas, &self.new_arenas, choice)
    }
}

/// The header of the arena `choice` names.
pub(crate) fn arena_header(
    arenas: &[Arena],
    new_arenas: &[NewArena],
    choice: ArenaChoice,
) -> ArenaHeader {
    match choice {
        ArenaChoice::Existing(i, _) => arenas[i].header,
        ArenaChoice::New(i, _) => new_arenas[i].header(),
    }
}

impl Plan {
    /// Resolves and analyses every function of `specs` (with the user's
    /// `signatures[i]` and stack window `windows[i]` for `specs[i]`) in the process
    /// `ctx`, reading its memory through `mem`, and gives each a slot.
    pub(crate) fn new(
        ctx: &ProcessInfo,
        mem: &dyn Memory,
        specs: &[FuncSpec],
        signatures: &[Option<Signature>],
        windows: &[Option<u16>],
        opts: &InstallOptions,
    ) -> Result<Plan, Error> {
        let pid = ctx.pid;
        let arch = ctx.arch;
        let symbols = ProcessSymbols::load_with_class(pid, &ctx.maps, arch == Arch::I386);
        let arenas = discover(&ctx.maps, mem)?;
        if arch == Arch::I386 && opts.float_args {
            return Err(Error::Unsupported32Bit {
                pid,
                name: ctx.comm.clone(),
                option: RequestOption::FloatArgs,
            });
        }
        let unwinders = match arch {
            Arch::X86_64 => crate::foreign_unwind::find_unwinders(&symbols),
            // No registration for i386 trampolines yet; an unwinder that
            // raises still decides whether a hook needs one.
            Arch::I386 => Unwinders {
                raiser: crate::foreign_unwind::find_raiser(&symbols, None),
                ..Default::default()
            },
        };
        let mut hooks: Vec<PlannedHook> = Vec::new();
        let mut debug = ModuleDwarf::default();
        let mut seen = HashSet::new();
        for (i, spec) in specs.iter().enumerate() {
            let user = signatures.get(i).and_then(|s| s.as_ref());
            // A window given for this function alone wins over the global one.
            let mut own = *opts;
            if let Some(n) = windows.get(i).copied().flatten() {
                own.stack_words = n;
                own.force_stack_words = true;
            }
            let hook = analyse(
                &symbols, mem, &arenas, &mut debug, &mut seen, arch, spec, user, &own,
            )?;
            hooks.push(hook);
        }
        let mut plan = Plan {
            arch,
            hooks,
            arenas,
            new_arenas: Vec::new(),
            unwinders,
        };
        plan.place(&ctx.maps, &symbols)?;
        Ok(plan)
    }

    /// Chooses an arena slot for every hook, creating arenas where none is in reach.
    fn place(
        &mut self,
        maps: &[reader::procfs::MapEntry],
        symbols: &ProcessSymbols,
    ) -> Result<(), Error> {
        let codegen = self.arch.codegen();
        let mut placement = Placement::new(maps, &self.arenas, codegen.address_limit());
        for p in self.hooks.iter_mut() {
            if let Some(choice) = placement.near(&p.module_range) {
                p.target = choice;
                continue;
            }
            let Some(far_jump_len) = codegen.far_jump_len() else {
                return Err(Error::NoArenaSpace {
                    module: p.resolved.module_path.clone(),
                });
            };
            // Nothing free within ±2 GiB: any arena will do, reached by the
            // absolute jump (x86-64: 14 bytes), if the prologue allows it.
            p.plan = plan_with(
                codegen,
                symbols,
                None,
                p.resolved.addr,
                &p.bytes,
                &p.padding,
                p.returns_twice,
                far_jump_len,
            )
            .map_err(|e| Error::NoArenaSpaceFar {
                module: p.resolved.module_path.clone(),
                function: p.resolved.name.clone(),
                reason: FarJumpRefusal::Plan(e),
            })?;
            p.far = true;
            p.target = placement.anywhere().ok_or_else(|| Error::NoArenaSpace {
                module: p.resolved.module_path.clone(),
            })?;
        }
        self.new_arenas = placement.into_new_arenas();
        Ok(())
    }

    /// Generates every hook's code for its slot, stamped `installed_ns`.
    pub(crate) fn prepare(self, installed_ns: u64) -> Result<Prepared, Error> {
        let mut hooks = Vec::with_capacity(self.hooks.len());
        for planned in self.hooks {
            let header = arena_header(&self.arenas, &self.new_arenas, planned.target);
            let slot = match planned.target {
                ArenaChoice::Existing(_, slot) | ArenaChoice::New(_, slot) => slot,
            };
            let code = planned.generate(&header, slot, installed_ns)?;
            hooks.push(PreparedHook { planned, code });
        }
        Ok(Prepared {
            arch: self.arch,
            hooks,
            arenas: self.arenas,
            new_arenas: self.new_arenas,
            unwinders: self.unwinders,
            installed_ns,
        })
    }
}

/// Resolves `spec`, reads and analyses its function, and decides its window.
#[allow(clippy::too_many_arguments)]
fn analyse(
    symbols: &ProcessSymbols,
    mem: &dyn Memory,
    arenas: &[Arena],
    debug: &mut ModuleDwarf,
    seen: &mut HashSet<u64>,
    arch: Arch,
    spec: &FuncSpec,
    user: Option<&Signature>,
    opts: &InstallOptions,
) -> Result<PlannedHook, Error> {
    // `parse(long, long)` names a C++ overload when no symbol is called `parse`:
    // its list is then part of the name, not a C signature.
    let (resolved, user) =
        match user.and_then(|sig| symbols.resolve_with_parameter_list(spec, &sig.types_text())) {
            Some(found) => (found?, None),
            None => (symbols.resolve_for_hook(spec, mem)?, user),
        };
    let signature = user.map(|s| s.text().to_string()).unwrap_or_default();
    let label = format!("{} in {}", resolved.name, resolved.module_path);
    if !seen.insert(resolved.addr) {
        return Err(Error::Duplicate { function: label });
    }
    // A call-through record (the PEP 523 extension's) names the function it
    // calls but patches nothing: it does not stand in the way of a hook.
    if let Some((arena, slot, r)) = arenas.iter().find_map(|a| {
        a.hooks()
            .find(|(_, r)| {
                r.state == HookState::Active && r.function == resolved.addr && !r.is_call_through()
            })
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
    let padding = padding_after(mem, module, resolved.addr + code.len() as u64);
    let returns_twice = module.is_some_and(|m| {
        m.symbols()
            .iter()
            .filter(|s| s.addr == resolved.addr)
            .any(|s| returns_twice_by_name(&s.name))
    }) || returns_twice_by_name(&resolved.name);
    let codegen = arch.codegen();
    let plan = plan_with(
        codegen,
        symbols,
        Some(mem),
        resolved.addr,
        &code,
        &padding,
        returns_twice,
        JMP_REL32_LEN,
    )
    .map_err(|source| Error::Plan {
        function: label.clone(),
        source,
    })?;
    let window = match arch {
        Arch::X86_64 => {
            let verdict =
                crate::hooks::window::analyse_code(mem, symbols, resolved.addr, resolved.size)?;
            let placement = known_placement(debug, symbols, &resolved, user);
            crate::hooks::window::decide_window(
                opts.requested_window(),
                placement.as_ref(),
                &verdict,
                opts.float_args,
            )
            .map_err(|refusal| match refusal {
                WindowRefusal::Unsure(reason) => Error::StackWindowUnknown {
                    function: label.clone(),
                    reason,
                },
                WindowRefusal::TooLarge(words) => Error::StackWindowTooLarge {
                    function: label.clone(),
                    words,
                },
            })?
        }
        // Every cdecl argument is on the stack: copy the i386 default window or more.
        Arch::I386 => WindowPlan {
            words: codegen.stack_words(opts.stack_words),
            variadic: false,
            xmm: false,
            source: WindowSource::User,
        },
    };
    let module_range = module
        .map(|m| m.range.clone())
        .unwrap_or(resolved.addr..resolved.addr + resolved.size);
    Ok(PlannedHook {
        resolved,
        plan,
        window,
        module_range,
        target: ArenaChoice::Existing(0, 0),
        bytes: code,
        padding,
        returns_twice,
        far: false,
        signature,
    })
}

/// The live bytes from `end` (just past a function) up to the next function
/// symbol of `module`, at most [`MAX_PATCH_LEN`], inside the same executable
/// mapping: room a short function may borrow when it is dead fill.
fn padding_after(mem: &dyn Memory, module: Option<&Module>, end: u64) -> Vec<u8> {
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
/// `padding`) for `codegen`'s architecture, patching at least `min_len` bytes;
/// jump tables are read from the module's file, call targets (i386 get-PC
/// thunks) from `mem` when given.
#[allow(clippy::too_many_arguments)]
fn plan_with(
    codegen: &dyn ArchCodegen,
    symbols: &ProcessSymbols,
    mem: Option<&dyn Memory>,
    addr: u64,
    code: &[u8],
    padding: &[u8],
    returns_twice: bool,
    min_len: usize,
) -> Result<Box<dyn PlannedPatch>, PlanError> {
    let module = symbols.module_for(addr);
    let read_file = |at: u64, len: usize| -> Option<Vec<u8>> {
        module?.file_bytes(at, len as u64).map(<[u8]>::to_vec)
    };
    let landing = crate::hooks::landing::Landing::new(module);
    let may_land = |from: u64, to: u64| landing.may_land(from, to);
    let read_memory = |at: u64, len: usize| -> Option<Vec<u8>> {
        let mut bytes = vec![0u8; len];
        mem?.read(at, &mut bytes).ok()?;
        Some(bytes)
    };
    let inputs = PlanInputs {
        function: FunctionContext {
            padding,
            returns_twice,
            read_file: Some(&read_file),
            min_len,
            may_land: Some(&may_land),
        },
        read_memory: mem.is_some().then_some(&read_memory),
    };
    codegen.plan(addr, code, &inputs)
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
    fn entry_for(&mut self, m: &Module) -> &mut reader::debuginfo::EntryDebug {
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

    fn for_module(&mut self, m: &Module) -> &reader::debuginfo::ModuleDebug {
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
    user: Option<&Signature>,
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
