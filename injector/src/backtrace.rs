//! Reading stacks back: stop a thread for as long as it takes to copy its registers
//! and stack, resume it, then unwind the copy.
//!
//! Ordinary frames are unwound with framehop over each module's `.eh_frame`. A
//! frame whose return address is some hook's `after_call` address is a stash frame:
//! its base is the hooked function's CFA plus the layout's call offset, so it is read
//! deterministically (no scanning), and its arguments are attached to the hooked
//! function's frame. The unwinder reads memory only through [`Memory`], so the same
//! code serves live processes and, later, core files.

use std::time::Duration;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
use trampolines::arena::{Arena, HookRecord};
use trampolines::x86_64::{StashFrame, ARGUMENT_REGS};

use crate::arena::discover;
use crate::args::{dwarf_values, stashed_values_with_xmm, ArgValue, FrameState};
use crate::debuginfo::{DebugSearch, ModuleDebug, ModulesDebug};
use crate::error::Error;
use crate::maps::{read_maps, MapEntry};
use crate::memory::{Memory, MemoryError, ProcessMemory};
use crate::session::Session;
use crate::symbols::ProcessSymbols;

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

/// Most frames unwound per thread.
pub const MAX_FRAMES: usize = 256;
/// Most stack bytes copied per thread while it is stopped.
pub const STACK_COPY: u64 = 256 * 1024;

/// Options for [`backtrace`].
#[derive(Debug, Clone, Copy, Default)]
pub struct BacktraceOptions {
    /// Only this thread.
    pub tid: Option<i32>,
    /// Include trampoline frames.
    pub show_trampolines: bool,
}

/// What kind of code a frame's pc is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FrameKind {
    /// Ordinary code of a module.
    #[default]
    Normal,
    /// A trampoline in an arena.
    Trampoline,
    /// A relocated prologue in an arena (shown as its original function).
    Relocated,
}

/// Argument values read from a stash frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StashedArgs {
    /// The six integer argument registers, first argument first, with their names.
    pub registers: Vec<(&'static str, u64)>,
    /// Copied stack words (arguments 7 and up), if the hook copies any.
    pub stack: Vec<u64>,
    /// Stashed xmm0-xmm7 (low byte first), if the hook stashes them.
    pub xmm: Vec<u128>,
    /// The hooked function is variadic (the stack words are a configured window).
    pub variadic: bool,
    /// Address of the stash frame.
    pub frame: u64,
    /// Entry address of the hooked function (0 when unknown).
    pub function: u64,
    /// Name of the hooked function (the hook's name, as `list` shows it). It differs
    /// from the frame's function when the hooked function tail-called that one.
    pub hook: String,
}

/// One stashed value, as readers list them: see [`StashedArgs::slots`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StashSlot {
    /// Register name, `stack+N` for a copied stack word, or `xmmN`.
    pub name: String,
    /// The value (128 bits for an xmm register, zero-extended otherwise).
    pub value: u128,
    /// True for an xmm register.
    pub xmm: bool,
}

impl StashedArgs {
    /// Every stashed value in the order readers show them: the registers, the
    /// copied stack words (`stack+8`, `stack+16`, ...), then the xmm registers.
    pub fn slots(&self) -> Vec<StashSlot> {
        let int = |name: String, v: u64| StashSlot {
            name,
            value: u128::from(v),
            xmm: false,
        };
        let mut out: Vec<StashSlot> = self
            .registers
            .iter()
            .map(|(r, v)| int(r.to_string(), *v))
            .collect();
        out.extend(
            self.stack
                .iter()
                .enumerate()
                .map(|(i, v)| int(format!("stack+{}", 8 * (i + 1)), *v)),
        );
        out.extend(self.xmm.iter().enumerate().map(|(i, v)| StashSlot {
            name: format!("xmm{i}"),
            value: *v,
            xmm: true,
        }));
        out
    }
}

/// A function inlined at a frame's pc (gdb shows each as a frame of its own).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InlinedFrame {
    /// Function name (demangled).
    pub function: Option<String>,
    /// Source file of the pc (innermost) or of the call into the next inner function.
    pub file: Option<String>,
    /// Source line, as for `file`.
    pub line: Option<u32>,
    /// Arguments recovered from DWARF at this pc.
    pub args: Vec<ArgValue>,
}

/// One frame of a backtrace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Frame {
    /// The pc (for frames after the first, the return address).
    pub pc: u64,
    /// Function name, if a symbol covers the pc.
    pub function: Option<String>,
    /// Offset of the pc from the function's start.
    pub offset: u64,
    /// Module path, if the pc is in a mapped file.
    pub module: Option<String>,
    /// Kind of code.
    pub kind: FrameKind,
    /// Arguments from the stash frame, for hooked functions.
    pub stash: Option<StashedArgs>,
    /// The function's name in DWARF (e.g. `__GI___nanosleep` for the symbol
    /// `nanosleep`, `ns::Widget::poke` for a C++ method), as gdb shows it.
    pub source_function: Option<String>,
    /// Source file (from DWARF) of the pc, or of the call site of `inlined`'s outermost.
    pub file: Option<String>,
    /// Source line, as for `file`.
    pub line: Option<u32>,
    /// Functions inlined at the pc, innermost first (the frame itself is the outermost).
    pub inlined: Vec<InlinedFrame>,
    /// Named, typed arguments (from DWARF or a user signature); empty when unknown.
    pub args: Vec<ArgValue>,
}

impl Frame {
    /// The hook's name when it is not the name of the frame's function: the hooked
    /// function tail-called (jumped to) the function the pc is in, so the frame shows
    /// the callee with the hooked function's stashed arguments. `None` for frames
    /// without a stash and when the hook is the frame's function (by its symbol,
    /// DWARF or demangled name).
    pub fn foreign_hook(&self) -> Option<&str> {
        let hook = self.stash.as_ref()?.hook.as_str();
        if hook.is_empty() {
            return None;
        }
        let demangled = crate::debuginfo::demangle(hook);
        let same = [self.function.as_deref(), self.source_function.as_deref()]
            .into_iter()
            .flatten()
            .any(|name| name == hook || name == demangled);
        (!same).then_some(hook)
    }

    /// The named parameter whose value was stashed from `register` (a [`StashSlot`] name).
    pub fn stashed_param(&self, register: &str) -> Option<&ArgValue> {
        self.args.iter().find(|p| {
            p.source == Some(crate::args::ArgSource::Stash)
                && p.register.as_deref() == Some(register)
        })
    }
}

/// One thread's backtrace.
#[derive(Debug, Clone)]
pub struct ThreadBacktrace {
    /// Thread id.
    pub tid: i32,
    /// Thread name (`comm`).
    pub name: String,
    /// Frames, innermost first.
    pub frames: Vec<Frame>,
    /// Why unwinding stopped early, if it did.
    pub truncated: Option<String>,
    /// How long the thread was stopped.
    pub stopped: Duration,
}

/// A process's backtrace.
#[derive(Debug, Clone)]
pub struct Backtrace {
    /// Process id.
    pub pid: i32,
    /// Threads, in `/proc/PID/task` order.
    pub threads: Vec<ThreadBacktrace>,
}

/// A copy of a stack region, falling back to another [`Memory`] outside it.
pub struct StackSnapshot<'a> {
    start: u64,
    bytes: Vec<u8>,
    rest: &'a dyn Memory,
}

impl<'a> StackSnapshot<'a> {
    /// A snapshot of `bytes` copied from `start`, reading anything else from `rest`.
    pub fn new(start: u64, bytes: Vec<u8>, rest: &'a dyn Memory) -> Self {
        StackSnapshot { start, bytes, rest }
    }
}

impl Memory for StackSnapshot<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let end = self.start + self.bytes.len() as u64;
        if addr >= self.start && addr.saturating_add(buf.len() as u64) <= end {
            let off = (addr - self.start) as usize;
            buf.copy_from_slice(&self.bytes[off..off + buf.len()]);
            return Ok(());
        }
        self.rest.read(addr, buf)
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemoryError> {
        // A snapshot is for reading; it never forwards writes to the process.
        Err(MemoryError::ReadOnly {
            addr,
            len: data.len(),
        })
    }
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
    pub(crate) fn walk(
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

fn thread_name(pid: i32, tid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The thread ids of a process.
pub fn thread_ids(pid: i32) -> Result<Vec<i32>, Error> {
    let path = format!("/proc/{pid}/task");
    let dir = std::fs::read_dir(&path).map_err(|source| Error::Proc { path, source })?;
    let mut tids: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// Names `f` from `debug` at the frame's lookup pc (`st.pc`): the demangled (or
/// MiniDebugInfo) function, source function, file, line and inlined calls with
/// their DWARF arguments. Returns the physical function's source frame, if any.
pub(crate) fn add_source(
    f: &mut Frame,
    debug: Option<&ModuleDebug>,
    st: &FrameState,
    mem: &dyn Memory,
) -> Option<crate::debuginfo::SourceFrame> {
    let mut source = debug.map(|d| d.frames(st.pc)).unwrap_or_default();
    let physical = source.pop();
    // MiniDebugInfo is the module's full symbol table: it wins over `.dynsym`.
    match (&f.function, debug.and_then(|d| d.mini_symbol(st.pc))) {
        (_, Some((s, off))) if f.kind == FrameKind::Normal => {
            f.function = Some(crate::debuginfo::demangle(&s.name));
            f.offset = off + (f.pc - st.pc);
        }
        (Some(name), _) => f.function = Some(crate::debuginfo::demangle(name)),
        (None, _) => {}
    }
    if let Some(p) = &physical {
        f.source_function = p.function.clone();
        f.file = p.file.clone();
        f.line = p.line;
    }
    let info = physical.as_ref().and_then(|p| p.info.as_ref());
    let frame_base = info.map(|i| i.frame_base.clone()).unwrap_or_default();
    f.inlined = source
        .into_iter()
        .map(|s| InlinedFrame {
            args: s
                .info
                .as_ref()
                .map(|i| dwarf_values(i, &frame_base, st, mem))
                .unwrap_or_default(),
            function: s.function,
            file: s.file,
            line: s.line,
        })
        .collect();
    physical
}

/// The hooked function's own description, when the frame holding `stash` is
/// another function (`frame_info`'s entry is not the hook's): the hooked function
/// tail-called it, and the stashed registers hold the hooked function's
/// parameters, not the frame's. `None` when `frame_info` is the right one (or
/// nothing better is known): then the frame's own description names the values.
pub(crate) fn hooked_info<'d>(
    stash: &StashedArgs,
    frame_info: Option<&crate::args::FunctionInfo>,
    debug_for: impl Fn(u64) -> Option<&'d ModuleDebug>,
) -> Option<crate::args::FunctionInfo> {
    if stash.function == 0 {
        return None;
    }
    match frame_info.and_then(|i| i.entry) {
        Some(entry) if entry == stash.function => None,
        _ => debug_for(stash.function)?
            .function_info(stash.function)
            .filter(|i| i.entry == Some(stash.function)),
    }
}

/// The user-given signature stored with the hook of the function at `entry`.
pub(crate) fn hook_signature(arenas: &[Arena], entry: u64) -> Option<&str> {
    arenas.iter().find_map(|a| {
        a.hooks()
            .find(|(_, r)| r.function == entry)
            .and_then(|(slot, _)| a.signature(slot))
    })
}

/// The hook whose trampoline or relocated prologue holds `pc`, in any of `arenas`.
pub(crate) fn hook_at(arenas: &[Arena], pc: u64) -> Option<&HookRecord> {
    arenas
        .iter()
        .flat_map(|a| a.hooks().map(|(_, r)| r))
        .find(|r| r.in_trampoline(pc) || r.in_relocated(pc))
}

/// A frame at `pc` named by the ELF symbol covering `lookup` (the pc, or a return
/// address minus one), without debug info.
pub(crate) fn symbolize(symbols: &ProcessSymbols, pc: u64, lookup: u64, kind: FrameKind) -> Frame {
    let (function, offset, module) = match symbols.lookup(lookup) {
        Some((m, s, off)) => (
            Some(s.name.clone()),
            off + (pc - lookup),
            Some(m.path.clone()),
        ),
        None => (None, 0, symbols.module_for(lookup).map(|m| m.path.clone())),
    };
    Frame {
        pc,
        function,
        offset,
        module,
        kind,
        ..Frame::default()
    }
}

/// The stack bytes to copy from a stopped thread: from its stack pointer to the end
/// of that mapping, at most [`STACK_COPY`].
pub(crate) fn stack_range(maps: &[MapEntry], rsp: u64) -> (u64, u64) {
    let end = maps
        .iter()
        .find(|m| m.contains(rsp))
        .map_or(rsp + 4096, |m| m.end);
    (rsp, end.min(rsp + STACK_COPY))
}

/// The file-backed executable mappings: when they are unchanged, so are the
/// symbols and unwind tables parsed from them.
fn code_key(maps: &[MapEntry]) -> Vec<(u64, u64, u64, u64, String)> {
    maps.iter()
        .filter(|m| m.perms.exec && m.is_file())
        .map(|m| (m.start, m.end, m.offset, m.inode, m.path.clone()))
        .collect()
}

/// Start time of a process (field 22 of `/proc/PID/stat`): tells a reused pid apart.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = &stat[stat.rfind(')')? + 2..];
    after_comm.split(' ').nth(19)?.parse().ok()
}

/// Reads backtraces of one process again and again, keeping its parsed symbols and
/// unwind tables between calls (for long-running readers such as the daemon).
///
/// Every call revalidates: the hooks are re-read from the arenas in the target
/// (the source of truth), and the symbols are reloaded when the code mappings or
/// the process (a reused pid) changed.
pub struct ProcessReader {
    pid: i32,
    started: Option<u64>,
    key: Vec<(u64, u64, u64, u64, String)>,
    unwind: Option<Unwind>,
    search: DebugSearch,
}

impl ProcessReader {
    /// A reader for `pid`; symbols are loaded by the first backtrace.
    pub fn new(pid: i32) -> ProcessReader {
        ProcessReader {
            pid,
            started: None,
            key: Vec::new(),
            unwind: None,
            search: DebugSearch::default(),
        }
    }

    /// Sets where separate debug files are looked for.
    pub fn set_debug_search(&mut self, search: DebugSearch) {
        if let Some(u) = self.unwind.as_mut() {
            u.set_debug_search(search.clone());
        }
        self.search = search;
    }

    /// Problems met while loading debug info (e.g. a debug file of another build).
    pub fn debug_warnings(&self) -> Vec<String> {
        self.unwind
            .as_ref()
            .map(Unwind::debug_warnings)
            .unwrap_or_default()
    }

    /// The process this reader serves.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Takes out the loaded debug info of modules with more than `max_bytes` of
    /// DWARF (a long-lived caller's memory bound; symbols and unwind tables stay).
    pub fn take_debug_over(&mut self, max_bytes: usize) -> Vec<ModuleDebug> {
        self.unwind
            .as_mut()
            .map_or_else(Vec::new, |u| u.take_debug_over(max_bytes))
    }

    /// Takes a backtrace, reusing the cached symbols when they are still valid.
    pub fn backtrace(&mut self, opts: &BacktraceOptions) -> Result<Backtrace, Error> {
        let pid = self.pid;
        crate::target::check_target(pid, crate::target::Access::Stop)?;
        if crate::arch::Arch::of_process(pid) == crate::arch::Arch::I386 {
            return crate::backtrace_i386::backtrace_with_search(pid, opts, &self.search);
        }
        let maps = read_maps(pid).map_err(|source| Error::Proc {
            path: format!("/proc/{pid}/maps"),
            source,
        })?;
        let key = code_key(&maps);
        let started = start_time(pid);
        // A replaced context lives until this call ends, so the debug info it
        // parsed is shared with the new one instead of parsed again.
        let (unwind, _previous) = match self.unwind.take() {
            Some(u) if key == self.key && started == self.started => (u, None),
            previous => {
                let mut u = Unwind::new(ProcessSymbols::load(pid, &maps)?, Vec::new());
                u.set_debug_search(self.search.clone());
                (u, previous)
            }
        };
        let unwind = self.unwind.insert(unwind);
        self.key = key;
        self.started = started;
        let mem = ProcessMemory::open(pid)?;
        unwind.arenas = discover(&maps, &mem)?;
        read_threads(pid, &maps, &mem, unwind, opts)
    }
}

/// Takes a backtrace of every thread (or one) of a live process.
pub fn backtrace(pid: i32, opts: &BacktraceOptions) -> Result<Backtrace, Error> {
    ProcessReader::new(pid).backtrace(opts)
}

/// Stops each thread just long enough to copy its registers and stack, then unwinds the copy.
fn read_threads(
    pid: i32,
    maps: &[MapEntry],
    mem: &ProcessMemory,
    unwind: &Unwind,
    opts: &BacktraceOptions,
) -> Result<Backtrace, Error> {
    let tids = match opts.tid {
        Some(t) => {
            if !thread_ids(pid)?.contains(&t) {
                return Err(crate::session::SessionError::NoSuchThread { pid, tid: t }.into());
            }
            vec![t]
        }
        None => thread_ids(pid)?,
    };
    let mut threads = Vec::new();
    for tid in tids {
        let session = match Session::attach_thread(pid, tid) {
            Ok(s) => s,
            // The thread exited between listing and stopping it.
            Err(crate::session::SessionError::NoSuchProcess { .. })
            | Err(crate::session::SessionError::Exited { .. })
                if opts.tid.is_none() =>
            {
                continue
            }
            Err(e) => return Err(e.into()),
        };
        let regs = session.regs(tid)?;
        let (start, end) = stack_range(maps, regs.rsp);
        let mut bytes = vec![0u8; (end - start) as usize];
        let copied = mem.read(start, &mut bytes);
        let stopped = session.detach()?;
        if copied.is_err() {
            bytes.clear();
        }
        let snapshot = StackSnapshot::new(start, bytes, mem);
        let (frames, truncated) =
            unwind.unwind_registers(&dwarf_registers(&regs), &snapshot, opts.show_trampolines);
        threads.push(ThreadBacktrace {
            tid,
            name: thread_name(pid, tid),
            frames,
            truncated,
            stopped,
        });
    }
    Ok(Backtrace { pid, threads })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_list_registers_then_stack_words_then_xmm() {
        let s = StashedArgs {
            registers: vec![("rdi", 1), ("rsi", 2)],
            stack: vec![3, 4],
            xmm: vec![(5u128 << 64) | 6],
            variadic: false,
            frame: 0,
            function: 0,
            hook: String::new(),
        };
        let slots: Vec<(String, u128, bool)> = s
            .slots()
            .into_iter()
            .map(|x| (x.name, x.value, x.xmm))
            .collect();
        assert_eq!(
            slots,
            [
                ("rdi".to_string(), 1, false),
                ("rsi".to_string(), 2, false),
                ("stack+8".to_string(), 3, false),
                ("stack+16".to_string(), 4, false),
                ("xmm0".to_string(), (5u128 << 64) | 6, true),
            ]
        );
    }
}
