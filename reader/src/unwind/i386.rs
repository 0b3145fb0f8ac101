//! Backtraces of 32-bit (i386) processes.
//!
//! framehop has no i386 unwinder, so this one is small and local: each frame is
//! stepped with the module's `.eh_frame` CFI (gimli, through `.eh_frame_hdr` when
//! present), falling back to the `ebp` chain where no CFI covers the pc. A return
//! address equal to a hook's `after_call` marks an i386 stash frame, read at its
//! known place (the hooked function's CFA plus the layout's call offset): its
//! `eax`/`edx`/`ecx` and copied stack words become the hooked frame's arguments,
//! the stack words labelled by their offset from the entry `esp` (`stack+4` is the
//! first cdecl argument). The output types are those of [`crate::unwind`].
//!
//! Modules with DWARF name their frames (source function, file, line, inlined
//! calls) like the x86-64 reader, and hooked frames' stashed words become named,
//! typed arguments where the parameters' entry places can be decided
//! ([`crate::args::i386`]); otherwise they stay positional.

use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, LittleEndian, ParsedEhFrameHdr, Register,
    RegisterRule, UnwindContext, UnwindSection,
};
use trampolines::arena::{Arena, HookRecord};
use trampolines::i386::{StashFrame, StashLayout, STASHED_REGS};
use trampolines::i386::{EPILOGUE_POP_EAX, MAX_STACK_WORDS};

use crate::args::i386::{signature_values_i386, stashed_values_i386};
use crate::args::FrameState;
use crate::debuginfo::{DebugSearch, ModuleDebug, ModulesDebug};
use crate::memory::Memory;
use crate::symbols::ProcessSymbols;
use crate::unwind::{
    add_source, hook_at, hook_signature, hooked_info, symbolize, Frame, FrameKind, StashedArgs,
    MAX_FRAMES,
};

/// DWARF register numbers of i386.
const ESP: Register = Register(4);
const EBP: Register = Register(5);
const RETURN_ADDRESS: Register = Register(8);

/// Labels of stashed stack words: the offset from the hooked function's entry `esp`.
const STACK_LABELS: [&str; MAX_STACK_WORDS as usize] = [
    "stack+4", "stack+8", "stack+12", "stack+16", "stack+20", "stack+24", "stack+28", "stack+32",
    "stack+36", "stack+40", "stack+44", "stack+48", "stack+52", "stack+56", "stack+60", "stack+64",
];

/// The registers an i386 unwind step tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Regs32 {
    /// Instruction pointer (or return address).
    pub eip: u32,
    /// Stack pointer.
    pub esp: u32,
    /// Frame pointer.
    pub ebp: u32,
}

/// One module's call-frame information.
struct ModuleCfi {
    range: std::ops::Range<u64>,
    bias: u64,
    eh_frame: Vec<u8>,
    eh_frame_hdr: Option<(u64, Vec<u8>)>,
    bases: BaseAddresses,
}

impl ModuleCfi {
    /// Steps one frame at runtime address `pc` with CFI; `None` when no CFI covers it.
    fn step(&self, pc: u64, regs: &Regs32, mem: &dyn Memory) -> Option<Regs32> {
        let svma = pc.wrapping_sub(self.bias);
        let eh_frame = EhFrame::new(&self.eh_frame, LittleEndian);
        let mut ctx = UnwindContext::new();
        let hdr: Option<ParsedEhFrameHdr<_>> = self
            .eh_frame_hdr
            .as_ref()
            .and_then(|(_, d)| EhFrameHdr::new(d, LittleEndian).parse(&self.bases, 4).ok());
        let row = match hdr.as_ref().and_then(|h| h.table()) {
            Some(table) => table
                .unwind_info_for_address(
                    &eh_frame,
                    &self.bases,
                    &mut ctx,
                    svma,
                    EhFrame::cie_from_offset,
                )
                .ok()?
                .clone(),
            None => eh_frame
                .unwind_info_for_address(&self.bases, &mut ctx, svma, EhFrame::cie_from_offset)
                .ok()?
                .clone(),
        };
        let value = |r: Register| match r {
            ESP => Some(regs.esp),
            EBP => Some(regs.ebp),
            _ => None,
        };
        let cfa = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => {
                value(*register)?.wrapping_add(*offset as i32 as u32)
            }
            CfaRule::Expression(_) => return None,
        };
        let restore = |r: Register, current: u32| -> Option<Option<u32>> {
            match row.register(r) {
                None | Some(RegisterRule::SameValue) => Some(Some(current)),
                Some(RegisterRule::Undefined) => Some(None),
                Some(RegisterRule::Offset(off)) => {
                    read_u32(mem, u64::from(cfa.wrapping_add(off as i32 as u32))).map(Some)
                }
                Some(RegisterRule::ValOffset(off)) => {
                    Some(Some(cfa.wrapping_add(off as i32 as u32)))
                }
                Some(RegisterRule::Register(from)) => value(from).map(Some),
                Some(_) => None,
            }
        };
        // An undefined return address ends the stack (e.g. `_start`).
        let eip = restore(RETURN_ADDRESS, 0)?.unwrap_or(0);
        let ebp = restore(EBP, regs.ebp)?.unwrap_or(0);
        Some(Regs32 { eip, esp: cfa, ebp })
    }
}

fn read_u32(mem: &dyn Memory, addr: u64) -> Option<u32> {
    let mut b = [0u8; 4];
    mem.read(addr, &mut b).ok()?;
    Some(u32::from_le_bytes(b))
}

/// The unwinding context of one 32-bit process: modules' CFI, symbols, arenas.
pub struct Unwind32 {
    modules: Vec<ModuleCfi>,
    symbols: ProcessSymbols,
    arenas: Vec<Arena>,
    /// Debug info per module, loaded on first use.
    debug: ModulesDebug,
}

impl Unwind32 {
    /// Builds the context from the process's symbols (with their sections) and arenas.
    pub fn new(symbols: ProcessSymbols, arenas: Vec<Arena>) -> Unwind32 {
        let modules = symbols
            .modules
            .iter()
            .filter_map(|m| {
                let (eh_svma, eh) = m.section(".eh_frame")?;
                let hdr = m
                    .section(".eh_frame_hdr")
                    .map(|(r, d)| (r.start, d.to_vec()));
                let mut bases = BaseAddresses::default().set_eh_frame(eh_svma.start);
                if let Some((r, _)) = m.section(".text") {
                    bases = bases.set_text(r.start);
                }
                if let Some((r, _)) = m.section(".got") {
                    bases = bases.set_got(r.start);
                }
                if let Some((start, _)) = &hdr {
                    bases = bases.set_eh_frame_hdr(*start);
                }
                Some(ModuleCfi {
                    range: m.range.clone(),
                    bias: m.bias,
                    eh_frame: eh.to_vec(),
                    eh_frame_hdr: hdr,
                    bases,
                })
            })
            .collect();
        let debug = ModulesDebug::new(symbols.modules.len());
        Unwind32 {
            modules,
            symbols,
            arenas,
            debug,
        }
    }

    /// Sets where separate debug files are looked for (before any is loaded).
    pub fn set_debug_search(&mut self, search: DebugSearch) {
        self.debug.set_search(search);
    }

    /// Replaces the hooks' arenas (re-read from the target before each backtrace).
    pub fn set_arenas(&mut self, arenas: Vec<Arena>) {
        self.arenas = arenas;
    }

    /// Takes out the loaded debug info of every module holding more than
    /// `max_bytes` of DWARF (see [`ModulesDebug::take_over`]).
    pub fn take_debug_over(&mut self, max_bytes: usize) -> Vec<ModuleDebug> {
        self.debug.take_over(max_bytes)
    }

    /// Problems met while loading debug info so far (e.g. a debug file of another build).
    pub fn debug_warnings(&self) -> Vec<String> {
        self.debug.warnings()
    }

    /// The debug info of the module containing runtime address `addr`, loaded on first use.
    fn debug_for(&self, addr: u64) -> Option<&ModuleDebug> {
        self.debug.for_addr(&self.symbols, addr)
    }

    /// Adds source locations, inlined calls and named arguments to unwound frames.
    fn annotate(&self, frames: &mut [Frame], states: &[Option<FrameState>], mem: &dyn Memory) {
        for (f, st) in frames.iter_mut().zip(states) {
            let Some(st) = st else { continue };
            let physical = add_source(f, self.debug_for(st.pc), st, mem);
            let info = physical.as_ref().and_then(|p| p.info.as_ref());
            let tail_info = f
                .stash
                .as_ref()
                .and_then(|s| hooked_info(s, info, |a| self.debug_for(a)));
            let info = tail_info.as_ref().or(info);
            f.args = match (&f.stash, info) {
                (Some(stash), Some(i)) => {
                    let entry = match stash.function {
                        0 => i.entry.unwrap_or(0),
                        e => e,
                    };
                    stashed_values_i386(i, entry, &stash.registers, mem).unwrap_or_default()
                }
                (Some(stash), None) => hook_signature(&self.arenas, stash.function)
                    .and_then(|sig| crate::args::parse_params(sig).ok())
                    .and_then(|sig| {
                        signature_values_i386(&sig.to_function_info(None), &stash.registers, mem)
                    })
                    .unwrap_or_default(),
                (None, Some(i)) => crate::args::dwarf_values(i, &i.frame_base, st, mem),
                (None, None) => Vec::new(),
            };
        }
    }

    fn hook_at(&self, pc: u64) -> Option<&HookRecord> {
        hook_at(&self.arenas, pc)
    }

    fn symbolize(&self, pc: u64, lookup: u64, kind: FrameKind) -> Frame {
        symbolize(&self.symbols, pc, lookup, kind)
    }

    /// Steps an ordinary frame: CFI of the module holding `lookup`, else the `ebp`
    /// chain; says whether CFI stepped it (so its CFA and restored registers are
    /// exact) rather than the `ebp` chain (a guess).
    fn step_normal(&self, lookup: u64, regs: &Regs32, mem: &dyn Memory) -> Option<(Regs32, bool)> {
        if let Some(r) = self.step_by_cfi(lookup, regs, mem) {
            return Some((r, true));
        }
        self.step_by_ebp(regs, mem).map(|r| (r, false))
    }

    fn step_by_cfi(&self, lookup: u64, regs: &Regs32, mem: &dyn Memory) -> Option<Regs32> {
        self.modules
            .iter()
            .find(|m| m.range.contains(&lookup))
            .and_then(|m| m.step(lookup, regs, mem))
    }

    fn step_by_ebp(&self, regs: &Regs32, mem: &dyn Memory) -> Option<Regs32> {
        if regs.ebp == 0 {
            return None;
        }
        let bp = u64::from(regs.ebp);
        Some(Regs32 {
            eip: read_u32(mem, bp + 4)?,
            esp: regs.ebp.wrapping_add(8),
            ebp: read_u32(mem, bp)?,
        })
    }

    /// Steps out of the trampoline of `hook` where a thread stopped inside it.
    fn step_in_trampoline(hook: &HookRecord, regs: &Regs32, mem: &dyn Memory) -> Option<Regs32> {
        let off = (u64::from(regs.eip) - hook.trampoline) as u32;
        let o = hook.offsets;
        let sp = u64::from(regs.esp);
        let bp = u64::from(regs.ebp);
        let word = |a: u64| read_u32(mem, a);
        let pop_eax = o.after_call + EPILOGUE_POP_EAX;
        let (eip, esp, ebp) = if off < o.after_push_rbp || off >= o.ret {
            (word(sp)?, sp + 4, regs.ebp)
        } else if off < o.after_mov_rbp {
            (word(sp + 4)?, sp + 8, word(sp)?)
        } else if off == pop_eax {
            (word(sp + 8)?, sp + 12, word(sp + 4)?)
        } else if off > pop_eax {
            (word(sp + 4)?, sp + 8, word(sp)?)
        } else {
            (word(bp + 4)?, bp + 8, word(bp)?)
        };
        Some(Regs32 {
            eip,
            esp: esp as u32,
            ebp,
        })
    }

    /// Unwinds one thread from its registers, reading memory from `mem`, then adds
    /// source lines and named arguments from DWARF.
    pub fn unwind(
        &self,
        start: Regs32,
        mem: &dyn Memory,
        show_trampolines: bool,
    ) -> (Vec<Frame>, Option<String>) {
        let mut states = Vec::new();
        let (mut frames, truncated) = self.unwind_frames(start, mem, show_trampolines, &mut states);
        self.annotate(&mut frames, &states, mem);
        (frames, truncated)
    }

    /// Unwinds one thread; `states` gets, per frame, what DWARF evaluation needs
    /// (`None` for trampoline frames).
    fn unwind_frames(
        &self,
        start: Regs32,
        mem: &dyn Memory,
        show_trampolines: bool,
        states: &mut Vec<Option<FrameState>>,
    ) -> (Vec<Frame>, Option<String>) {
        let mut frames: Vec<Frame> = Vec::new();
        let mut regs = start;
        // The registers of the frame at hand are exact (live, or restored by CFI).
        let mut regs_exact = true;
        for depth in 0..MAX_FRAMES {
            let pc = u64::from(regs.eip);
            let first = depth == 0;
            let shown_before = states.len();
            let lookup = if first { pc } else { pc.wrapping_sub(1) };
            let next = if let Some(hook) = self.hook_at(pc).filter(|h| h.in_trampoline(pc)) {
                let step = if !first && pc == hook.after_call() {
                    // The hooked function returned here: its stash frame is at a known place.
                    let layout = StashLayout::new(hook.stack_words);
                    let base = layout.base_from_callee_cfa(u64::from(regs.esp));
                    let mut bytes = vec![0u8; layout.read_len()];
                    if let Err(e) = mem.read(base - layout.call_sp_offset(), &mut bytes) {
                        let why = format!("cannot read the stash frame at 0x{base:x}: {e}");
                        return (frames, Some(why));
                    }
                    let frame = match StashFrame::parse(base, &layout, &bytes) {
                        Ok(f) => f,
                        Err(e) => {
                            return (
                                frames,
                                Some(format!("bad stash frame for {}: {e}", hook.name)),
                            )
                        }
                    };
                    if let Some(callee) = frames.last_mut() {
                        callee.stash = Some(stashed_args(&frame, hook.function, &hook.name));
                    }
                    Some((
                        Regs32 {
                            eip: frame.return_address,
                            esp: frame.caller_sp() as u32,
                            ebp: frame.saved_ebp,
                        },
                        true,
                    ))
                } else {
                    Self::step_in_trampoline(hook, &regs, mem).map(|r| (r, false))
                };
                if show_trampolines || first {
                    let mut f = Frame {
                        pc,
                        function: Some(format!("argstash_trampoline.{}", hook.name)),
                        offset: pc - hook.trampoline,
                        module: None,
                        kind: FrameKind::Trampoline,
                        stash: None,
                        ..Frame::default()
                    };
                    if first && !show_trampolines {
                        f.function = Some(hook.name.clone());
                        f.offset = 0;
                        f.module = Some(hook.module.clone());
                    }
                    frames.push(f);
                    states.push(None);
                }
                step
            } else if let Some(hook) = self.hook_at(pc).filter(|h| h.in_relocated(pc)) {
                // A relocated prologue behaves like the original bytes it came from.
                let orig = hook.relocated_to_original(pc).unwrap_or(hook.patch_addr);
                let mut f = self.symbolize(orig, orig, FrameKind::Relocated);
                f.pc = pc;
                frames.push(f);
                states.push(Some(frame_state(orig, &regs, regs_exact)));
                self.step_normal(orig, &regs, mem)
            } else {
                frames.push(self.symbolize(pc, lookup, FrameKind::Normal));
                states.push(Some(frame_state(lookup, &regs, regs_exact)));
                self.step_normal(lookup, &regs, mem)
            };
            // Exact: stepped by CFI, or out of a stash frame (registers at known places).
            let (next, exact) = match next {
                Some((r, exact)) => (Some(r), exact),
                None => (None, false),
            };
            if let (Some(next), true) = (&next, states.len() > shown_before) {
                // The frame's CFA is its caller's stack pointer, when CFI said so.
                if let Some(Some(st)) = states.last_mut() {
                    st.cfa = (exact && regs_exact).then_some(u64::from(next.esp));
                }
            }
            regs_exact = exact;
            let Some(next) = next else {
                return (frames, None);
            };
            let ret = u64::from(next.eip);
            let in_code = self.symbols.module_for(ret.wrapping_sub(1)).is_some()
                || self.hook_at(ret).is_some();
            if next.eip < 0x1000 || !in_code {
                // The outermost frame's return slot holds no code address: the end.
                return (frames, None);
            }
            if next.esp <= regs.esp && !first {
                return (
                    frames,
                    Some(format!(
                        "the stack pointer did not grow (0x{:x} after 0x{:x})",
                        next.esp, regs.esp
                    )),
                );
            }
            regs = next;
        }
        let shown = frames.len();
        (
            frames,
            Some(format!(
                "stopped after {MAX_FRAMES} unwind steps ({shown} frames shown; each hooked call takes two steps)"
            )),
        )
    }
}

/// What DWARF evaluation knows of an i386 frame at lookup pc `pc` (by i386
/// DWARF register number: esp 4, ebp 5, eip 8); the CFA is set once stepped.
/// Registers that were only guessed (stepped by the `ebp` chain) are left unknown.
fn frame_state(pc: u64, regs: &Regs32, exact: bool) -> FrameState {
    let mut st = FrameState {
        pc,
        ..FrameState::default()
    };
    if exact {
        st.regs[4] = Some(u64::from(regs.esp));
        st.regs[5] = Some(u64::from(regs.ebp));
    }
    st.regs[8] = Some(u64::from(regs.eip));
    st
}

/// The arguments of an i386 stash frame: `eax`, `edx`, `ecx`, then the stack words by offset.
fn stashed_args(frame: &StashFrame, function: u64, hook: &str) -> StashedArgs {
    let mut registers: Vec<(&'static str, u64)> = STASHED_REGS
        .iter()
        .map(|r| (r.name(), u64::from(frame.reg(*r))))
        .collect();
    registers.extend(
        STACK_LABELS
            .iter()
            .zip(&frame.stack_args)
            .map(|(label, v)| (*label, u64::from(*v))),
    );
    StashedArgs {
        registers,
        stack: Vec::new(),
        xmm: Vec::new(),
        variadic: false,
        frame: frame.base,
        function,
        hook: hook.to_string(),
    }
}
