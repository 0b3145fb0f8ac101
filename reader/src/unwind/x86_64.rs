//! The x86-64 unwinder: ordinary frames are unwound with framehop over each
//! module's `.eh_frame`; stash frames are read at their known place (see
//! [`crate::unwind`]).

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
use trampolines::arena::{Arena, HookRecord};
use trampolines::x86_64::{StashFrame, ARGUMENT_REGS};

use crate::args::{dwarf_values, stashed_values_with_xmm, FrameState};
use crate::debuginfo::{DebugSearch, ModuleDebug, ModulesDebug};
use crate::memory::Memory;
use crate::symbols::ProcessSymbols;
use crate::unwind::{
    add_source, hook_at, hook_signature, hooked_info, symbolize, Frame, FrameKind, StashedArgs,
    MAX_FRAMES,
};

/// Callee-saved registers other than rbp and rsp, by DWARF number (rbx, r12-r15).
const CALLEE_SAVED: [usize; 5] = [3, 12, 13, 14, 15];
const DWARF_RBP: usize = 6;
const DWARF_RSP: usize = 7;
const DWARF_RIP: usize = 16;

/// The registers of a stopped thread by DWARF register number.
pub fn dwarf_registers(r: &libc::user_regs_struct) -> [Option<u64>; 17] {
    [
        r.rax, r.rdx, r.rcx, r.rbx, r.rsi, r.rdi, r.rbp, r.rsp, r.r8, r.r9, r.r10, r.r11, r.r12,
        r.r13, r.r14, r.r15, r.rip,
    ]
    .map(Some)
}

/// The unwinding context of one process: modules, symbols, arenas and debug info.
pub struct Unwind {
    unwinder: UnwinderX86_64<Vec<u8>>,
    symbols: ProcessSymbols,
    arenas: Vec<Arena>,
    /// Debug info per module, loaded on first use.
    debug: ModulesDebug,
}

impl Unwind {
    /// Builds the context from the process's mappings, symbols and arenas.
    pub fn new(symbols: ProcessSymbols, arenas: Vec<Arena>) -> Unwind {
        let mut unwinder = UnwinderX86_64::new();
        for m in &symbols.modules {
            let sect = |name: &str| m.section(name).map(|(r, d)| (r, d.to_vec()));
            let (eh_frame_svma, eh_frame) =
                sect(".eh_frame").map_or((None, None), |(r, d)| (Some(r), Some(d)));
            let (eh_frame_hdr_svma, eh_frame_hdr) =
                sect(".eh_frame_hdr").map_or((None, None), |(r, d)| (Some(r), Some(d)));
            let info = ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma: m.section(".text").map(|(r, _)| r),
                got_svma: m.section(".got").map(|(r, _)| r),
                eh_frame_svma,
                eh_frame,
                eh_frame_hdr_svma,
                eh_frame_hdr,
                ..Default::default()
            };
            unwinder.add_module(Module::new(m.path.clone(), m.range.clone(), m.bias, info));
        }
        let debug = ModulesDebug::new(symbols.modules.len());
        Unwind {
            unwinder,
            symbols,
            arenas,
            debug,
        }
    }

    /// Replaces the hooks' arenas (re-read from the target before each backtrace).
    pub fn set_arenas(&mut self, arenas: Vec<Arena>) {
        self.arenas = arenas;
    }

    /// Sets where separate debug files are looked for (forgets debug info loaded so far).
    pub fn set_debug_search(&mut self, search: DebugSearch) {
        self.debug.set_search(search);
    }

    /// The debug info of the module containing runtime address `addr`, loaded on first use.
    pub fn debug_for(&self, addr: u64) -> Option<&ModuleDebug> {
        self.debug.for_addr(&self.symbols, addr)
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

    /// `state` with the entry values its caller's call site gives, when the frame's
    /// parameter locations ask for them (gdb's `x@entry=` values).
    fn with_entry_values(
        &self,
        state: &FrameState,
        caller: Option<&Frame>,
        caller_state: Option<&Option<FrameState>>,
        mem: &dyn Memory,
    ) -> FrameState {
        let mut st = state.clone();
        let (Some(caller), Some(Some(cs))) = (caller, caller_state) else {
            return st;
        };
        if caller.kind != FrameKind::Normal {
            return st;
        }
        let Some(debug) = self.debug_for(st.pc) else {
            return st;
        };
        let wants = debug
            .frames(st.pc)
            .iter()
            .filter_map(|s| s.info.as_ref())
            .any(|i| crate::args::wants_entry_values(i, st.pc));
        if !wants {
            return st;
        }
        let Some(caller_debug) = self.debug_for(cs.pc) else {
            return st;
        };
        let Some(caller_info) = caller_debug.function_info(cs.pc) else {
            return st;
        };
        let Some(encoding) = caller_info.encoding else {
            return st;
        };
        for (loc, value) in caller_debug.call_site_params(cs.pc, caller.pc) {
            if let Some(v) =
                crate::args::call_value(&value, &caller_info.frame_base, encoding, cs, mem)
            {
                st.entry_values.push((loc, v));
            }
        }
        st
    }

    /// Moves the callee-saved registers (rbx, r12-r15) from a frame to its caller
    /// with the frame's CFI (`.eh_frame` via `.eh_frame_hdr`): a register saved
    /// at `CFA + n` is read from there, one without a rule keeps its value, and
    /// anything else (no FDE, another rule, a CFA that disagrees with the
    /// unwinder's) makes it unknown.
    fn restore_callee_saved(
        &self,
        lookup: u64,
        frame_regs: &[Option<u64>; 17],
        cfa: u64,
        saved: &mut [Option<u64>; 17],
        mem: &dyn Memory,
    ) {
        let row_rules = || -> Option<Vec<(usize, Option<gimli::RegisterRule<usize>>)>> {
            let m = self.symbols.module_for(lookup)?;
            let (eh_range, eh) = m.section(".eh_frame")?;
            let (hdr_range, hdr) = m.section(".eh_frame_hdr")?;
            let mut bases = gimli::BaseAddresses::default()
                .set_eh_frame(eh_range.start)
                .set_eh_frame_hdr(hdr_range.start);
            if let Some((text, _)) = m.section(".text") {
                bases = bases.set_text(text.start);
            }
            let eh_frame = gimli::EhFrame::new(eh, gimli::LittleEndian);
            let parsed = gimli::EhFrameHdr::new(hdr, gimli::LittleEndian)
                .parse(&bases, 8)
                .ok()?;
            let table = parsed.table()?;
            let mut ctx = Box::new(gimli::UnwindContext::new());
            let row = table
                .unwind_info_for_address(
                    &eh_frame,
                    &bases,
                    &mut ctx,
                    lookup.wrapping_sub(m.bias),
                    <gimli::EhFrame<_> as gimli::UnwindSection<_>>::cie_from_offset,
                )
                .ok()?;
            // Cross-check the CFA with the unwinder's before trusting any slot.
            let gimli::CfaRule::RegisterAndOffset { register, offset } = row.cfa() else {
                return None;
            };
            let base = (*frame_regs.get(usize::from(register.0))?)?;
            if base.wrapping_add_signed(*offset) != cfa {
                return None;
            }
            Some(
                CALLEE_SAVED
                    .iter()
                    .map(|r| (*r, row.register(gimli::Register(*r as u16))))
                    .collect(),
            )
        };
        match row_rules() {
            Some(rules) => {
                for (r, rule) in rules {
                    saved[r] = match rule {
                        None | Some(gimli::RegisterRule::SameValue) => saved[r],
                        Some(gimli::RegisterRule::Offset(off)) => {
                            mem.read_u64(cfa.wrapping_add_signed(off)).ok()
                        }
                        Some(_) => None,
                    };
                }
            }
            None => {
                for r in CALLEE_SAVED {
                    saved[r] = None;
                }
            }
        }
    }

    /// Adds source locations, inlined frames and typed arguments to unwound frames.
    fn annotate(&self, frames: &mut [Frame], states: &[Option<FrameState>], mem: &dyn Memory) {
        for i in 0..frames.len().min(states.len()) {
            let Some(st) = &states[i] else { continue };
            let st = &self.with_entry_values(st, frames.get(i + 1), states.get(i + 1), mem);
            let f = &mut frames[i];
            let physical = add_source(f, self.debug_for(st.pc), st, mem);
            let info = physical.as_ref().and_then(|p| p.info.as_ref());
            let tail_info = f
                .stash
                .as_ref()
                .and_then(|s| hooked_info(s, info, |a| self.debug_for(a)));
            let info = tail_info.as_ref().or(info);
            f.args = match (&f.stash, info) {
                (Some(stash), Some(i)) => {
                    stashed_values_with_xmm(i, &stash.registers, &stash.stack, &stash.xmm, mem)
                }
                (Some(stash), None) => match hook_signature(&self.arenas, stash.function)
                    .map(crate::args::parse_params)
                {
                    Some(Ok(sig)) => stashed_values_with_xmm(
                        &sig.to_function_info(None),
                        &stash.registers,
                        &stash.stack,
                        &stash.xmm,
                        mem,
                    ),
                    _ => Vec::new(),
                },
                (None, Some(i)) => dwarf_values(i, &i.frame_base, st, mem),
                (None, None) => Vec::new(),
            };
        }
    }

    /// The frames of one thread, named by ELF symbols only (no source lines or
    /// arguments: cheap), trampolines included, and why unwinding stopped early
    /// (`None`: it reached the thread's outermost frame).
    pub fn walk(
        &self,
        regs: &libc::user_regs_struct,
        mem: &dyn Memory,
    ) -> (Vec<Frame>, Option<String>) {
        let mut states = Vec::new();
        self.unwind_frames(&dwarf_registers(regs), mem, true, &mut states)
    }

    /// The hook records known to this context.
    pub fn hooks(&self) -> impl Iterator<Item = &HookRecord> {
        self.arenas.iter().flat_map(|a| a.hooks().map(|(_, r)| r))
    }

    fn hook_at(&self, pc: u64) -> Option<&HookRecord> {
        hook_at(&self.arenas, pc)
    }

    fn symbolize(&self, pc: u64, lookup: u64, kind: FrameKind) -> Frame {
        symbolize(&self.symbols, pc, lookup, kind)
    }

    /// Unwinds one thread from its registers, reading memory from `mem`.
    pub fn unwind(
        &self,
        rip: u64,
        rsp: u64,
        rbp: u64,
        mem: &dyn Memory,
        show_trampolines: bool,
    ) -> (Vec<Frame>, Option<String>) {
        let mut regs = [None; 17];
        regs[DWARF_RIP] = Some(rip);
        regs[DWARF_RSP] = Some(rsp);
        regs[DWARF_RBP] = Some(rbp);
        self.unwind_registers(&regs, mem, show_trampolines)
    }

    /// Unwinds one thread from every register known for its innermost frame (by DWARF
    /// number: rax 0, rdx 1, rcx 2, rbx 3, rsi 4, rdi 5, rbp 6, rsp 7, r8-r15, rip 16;
    /// rip, rsp and rbp are required), then adds source lines and DWARF arguments.
    pub fn unwind_registers(
        &self,
        initial: &[Option<u64>; 17],
        mem: &dyn Memory,
        show_trampolines: bool,
    ) -> (Vec<Frame>, Option<String>) {
        let mut states: Vec<Option<FrameState>> = Vec::new();
        let (mut frames, truncated) =
            self.unwind_frames(initial, mem, show_trampolines, &mut states);
        states.resize(frames.len(), None);
        self.annotate(&mut frames, &states, mem);
        (frames, truncated)
    }

    fn unwind_frames(
        &self,
        initial: &[Option<u64>; 17],
        mem: &dyn Memory,
        show_trampolines: bool,
        states: &mut Vec<Option<FrameState>>,
    ) -> (Vec<Frame>, Option<String>) {
        let rip = initial[DWARF_RIP].unwrap_or(0);
        let rsp = initial[DWARF_RSP].unwrap_or(0);
        let rbp = initial[DWARF_RBP].unwrap_or(0);
        let mut frames: Vec<Frame> = Vec::new();
        // Callee-saved registers as they are in the frame being unwound.
        let mut saved = [None; 17];
        for r in CALLEE_SAVED {
            saved[r] = initial[r];
        }
        let mut regs = UnwindRegsX86_64::new(rip, rsp, rbp);
        let mut cache = CacheX86_64::<_>::new();
        let mut read_stack = |addr: u64| mem.read_u64(addr).map_err(|_| ());
        let mut address = FrameAddress::from_instruction_pointer(rip);
        for _ in 0..MAX_FRAMES {
            let pc = address.address();
            let first = !address.is_return_address();
            // Look symbols up by the call instruction for return addresses.
            let lookup = if first { pc } else { pc - 1 };
            if let Some(hook) = self.hook_at(pc).filter(|h| h.in_trampoline(pc)) {
                let next = if !first && pc == hook.after_call() {
                    // The hooked function returned here: a stash frame, at a known place.
                    let layout = hook.layout();
                    let base = layout.base_from_callee_cfa(regs.sp());
                    let mut bytes = vec![0u8; layout.read_len()];
                    if let Err(e) = mem.read(base - layout.call_sp_offset(), &mut bytes) {
                        return (
                            frames,
                            Some(format!("cannot read the stash frame at 0x{base:x}: {e}")),
                        );
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
                        callee.stash = Some(StashedArgs {
                            registers: ARGUMENT_REGS
                                .iter()
                                .map(|r| (r.name(), frame.reg(*r)))
                                .collect(),
                            stack: frame.stack_args.clone(),
                            xmm: frame.xmm.clone(),
                            variadic: hook.variadic,
                            frame: base,
                            function: hook.function,
                            hook: hook.name.clone(),
                        });
                    }
                    (frame.return_address, base + 16, frame.saved_rbp)
                } else {
                    // Stopped inside the trampoline itself.
                    let off = (pc - hook.trampoline) as u32;
                    let o = hook.offsets;
                    let sp = regs.sp();
                    let bp = regs.bp();
                    let word = |a: u64| mem.read_u64(a).unwrap_or(0);
                    if off < o.after_push_rbp || off >= o.ret {
                        (word(sp), sp + 8, bp)
                    } else if off < o.after_mov_rbp {
                        (word(sp + 8), sp + 16, word(sp))
                    } else {
                        (word(bp + 8), bp + 16, word(bp))
                    }
                };
                if show_trampolines || first {
                    let mut f = Frame {
                        pc,
                        function: Some(format!("argstash_trampoline.{}", hook.name)),
                        offset: pc - hook.trampoline,
                        module: None,
                        kind: FrameKind::Trampoline,
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
                let (ret, sp, bp) = next;
                regs.set_sp(sp);
                regs.set_bp(bp);
                match FrameAddress::from_return_address(ret) {
                    Some(a) if ret > 0x1000 => address = a,
                    _ => return (frames, None),
                }
                continue;
            }
            let (frame, unwind_address) = match self.hook_at(pc).filter(|h| h.in_relocated(pc)) {
                Some(hook) => {
                    // A relocated prologue behaves like the original bytes it came from.
                    let orig = hook.relocated_to_original(pc).unwrap_or(hook.patch_addr);
                    let mut f = self.symbolize(orig, orig, FrameKind::Relocated);
                    f.pc = pc;
                    (f, FrameAddress::from_instruction_pointer(orig))
                }
                None => (self.symbolize(pc, lookup, FrameKind::Normal), address),
            };
            let mut state = FrameState {
                pc: unwind_address.address_for_lookup(),
                cfa: None,
                regs: [None; 17],
                entry_values: Vec::new(),
            };
            if first {
                state.regs = *initial;
            } else {
                state.regs = saved;
                state.regs[DWARF_RSP] = Some(regs.sp());
                state.regs[DWARF_RBP] = Some(regs.bp());
                state.regs[DWARF_RIP] = Some(pc);
            }
            let frame_regs = state.regs;
            let lookup_pc = state.pc;
            frames.push(frame);
            states.push(Some(state));
            let unwound =
                self.unwinder
                    .unwind_frame(unwind_address, &mut regs, &mut cache, &mut read_stack);
            if let (Ok(Some(_)), Some(Some(st))) = (&unwound, states.last_mut()) {
                st.cfa = Some(regs.sp());
                self.restore_callee_saved(lookup_pc, &frame_regs, regs.sp(), &mut saved, mem);
            }
            match unwound {
                Ok(Some(ret)) => match FrameAddress::from_return_address(ret) {
                    Some(a) => address = a,
                    None => return (frames, None),
                },
                Ok(None) => return (frames, None),
                Err(e) => return (frames, Some(e.to_string())),
            }
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
