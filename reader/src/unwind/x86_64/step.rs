//! Stepping an ordinary x86-64 frame: framehop finds the caller's pc, stack
//! and frame pointers (with its rule cache, its prologue and epilogue analysis
//! of the innermost frame, and the frame-pointer chain where no CFI covers the
//! pc); the shared CFI evaluator then moves the callee-saved registers
//! (rbx, r12-r15) to the caller for DWARF argument locations.

use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};

use super::{Regs, CALLEE_SAVED, DWARF_RBP, DWARF_RIP, DWARF_RSP};
use crate::memory::Memory;
use crate::symbols::ProcessSymbols;
use crate::unwind::cfi::{CfiIndex, Eval, ModuleCfi, Restored, Row, Scratch, SectionData};
use crate::unwind::{CodeAddress, DwarfRegisters, Stepped, StopReason};

/// The x86-64 unwinder's index of a process's modules: framehop's, and the CFI
/// index for callee-saved registers (both over the same section bytes).
pub struct X86_64 {
    unwinder: UnwinderX86_64<Arc<[u8]>>,
    cfi: CfiIndex,
}

/// framehop's rule cache and the CFI evaluator's scratch space.
pub struct Cache {
    framehop: CacheX86_64,
    scratch: Box<Scratch>,
}

impl Default for Cache {
    fn default() -> Cache {
        Cache {
            framehop: CacheX86_64::new(),
            scratch: Box::new(Scratch::new()),
        }
    }
}

impl X86_64 {
    /// Indexes every module's `.eh_frame` (through `.eh_frame_hdr` where present).
    pub(crate) fn index(symbols: &ProcessSymbols) -> X86_64 {
        let mut unwinder = UnwinderX86_64::new();
        let mut cfi = Vec::new();
        for m in &symbols.modules {
            let eh_frame = SectionData::of(m, ".eh_frame");
            let eh_frame_hdr = SectionData::of(m, ".eh_frame_hdr");
            let info = ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma: m.section(".text").map(|(r, _)| r),
                got_svma: m.section(".got").map(|(r, _)| r),
                eh_frame_svma: m.section(".eh_frame").map(|(r, _)| r),
                eh_frame: eh_frame.as_ref().map(|s| s.data.clone()),
                eh_frame_hdr_svma: m.section(".eh_frame_hdr").map(|(r, _)| r),
                eh_frame_hdr: eh_frame_hdr.as_ref().map(|s| s.data.clone()),
                ..Default::default()
            };
            unwinder.add_module(Module::new(m.path.clone(), m.range.clone(), m.bias, info));
            if let Some(eh) = eh_frame {
                cfi.push(ModuleCfi::new(m, eh, eh_frame_hdr, 8));
            }
        }
        X86_64 {
            unwinder,
            cfi: CfiIndex::from_modules(cfi),
        }
    }

    /// Steps the frame at `at` with framehop, then restores its callee-saved
    /// registers; a frame whose frame pointer is unknown is stepped by its CFI alone.
    pub(crate) fn step_frame(
        &self,
        cache: &mut Cache,
        at: CodeAddress,
        regs: &Regs,
        mem: &dyn Memory,
    ) -> Result<Option<Stepped<Regs>>, StopReason> {
        if regs.known[DWARF_RBP].is_none() {
            return self.step_without_bp(&mut cache.scratch, at, regs, mem);
        }
        let address = match at {
            CodeAddress::Instruction(a) => FrameAddress::from_instruction_pointer(a),
            CodeAddress::Return(a) => match FrameAddress::from_return_address(a) {
                Some(a) => a,
                None => return Ok(None),
            },
        };
        // framehop computes the CFA from the stack pointer and subtracts from it
        // unchecked; a stack pointer in the upper half of the address space (never
        // a user stack, but a core or a hostile process can say so) would wrap.
        if regs.framehop.sp() >= 1 << 63 {
            return Err(StopReason::Overflow);
        }
        let mut framehop = regs.framehop;
        let mut read_stack = |addr: u64| mem.read_u64(addr).map_err(|_| ());
        let ret = self.unwinder.unwind_frame(
            address,
            &mut framehop,
            &mut cache.framehop,
            &mut read_stack,
        )?;
        let Some(ret) = ret else {
            return Ok(None);
        };
        let cfa = framehop.sp();
        let saved = self.callee_saved(&mut cache.scratch, at.lookup(), &regs.known, cfa, mem);
        let mut caller = regs.caller(ret, cfa, framehop.bp(), &saved);
        caller.framehop = framehop;
        Ok(Some(Stepped {
            caller,
            cfa: Some(cfa),
        }))
    }

    /// Steps a frame whose frame pointer is unknown (a thread read without a
    /// stop knows only its stack and instruction pointers) by its CFI alone:
    /// framehop would use a made-up frame pointer where a rule or its
    /// frame-pointer fallback reads it. The caller's rbp and callee-saved
    /// registers are known where this frame saved them. A frame without CFI, or
    /// whose CFA is computed from an unknown register, cannot be stepped.
    fn step_without_bp(
        &self,
        scratch: &mut Scratch,
        at: CodeAddress,
        regs: &Regs,
        mem: &dyn Memory,
    ) -> Result<Option<Stepped<Regs>>, StopReason> {
        let unknown = |register: u16| StopReason::RegisterUnknown {
            register: register_name(register),
            pc: regs.pc,
        };
        let Some(row) = self.cfi.row(at.lookup(), scratch) else {
            return Err(unknown(DWARF_RBP as u16));
        };
        let known = |r: u16| regs.known.get(usize::from(r)).copied().flatten();
        let read = |a: u64| mem.read_u64(a).ok();
        let eval = Eval {
            mask: u64::MAX,
            regs: &known,
            read: &read,
        };
        let Some(cfa) = eval.cfa(&row) else {
            return Err(unknown(cfa_register(&row)));
        };
        let sp = regs.known[DWARF_RSP].unwrap_or(0);
        if cfa <= sp {
            return Err(StopReason::StackDidNotGrow {
                caller_sp: cfa,
                callee_sp: sp,
            });
        }
        let ret = match eval.register(&row, DWARF_RIP as u16, cfa, None) {
            Restored::Value(v) => v,
            Restored::Undefined => return Ok(None),
            Restored::Unknown => {
                return Err(StopReason::Unreadable {
                    addr: cfa.wrapping_sub(8),
                })
            }
        };
        let mut saved = [None; 17];
        for r in CALLEE_SAVED.into_iter().chain([DWARF_RBP]) {
            saved[r] = match eval.register(&row, r as u16, cfa, regs.known[r]) {
                Restored::Value(v) => Some(v),
                Restored::Undefined | Restored::Unknown => None,
            };
        }
        let mut caller = regs.caller(ret, cfa, saved[DWARF_RBP].unwrap_or(0), &saved);
        caller.known[DWARF_RBP] = saved[DWARF_RBP];
        Ok(Some(Stepped {
            caller,
            cfa: Some(cfa),
        }))
    }

    /// The callee-saved registers (rbx, r12-r15) of the caller of the frame at
    /// `lookup`, with registers `frame` and CFA `cfa` (framehop's), by the
    /// frame's CFI: a register saved at `CFA + n` is read from there, one
    /// without a rule keeps its value, and what cannot be evaluated (no FDE, a
    /// CFA that disagrees with framehop's) is unknown.
    fn callee_saved(
        &self,
        scratch: &mut Scratch,
        lookup: u64,
        frame: &DwarfRegisters,
        cfa: u64,
        mem: &dyn Memory,
    ) -> DwarfRegisters {
        let mut saved = [None; 17];
        let Some(row) = self.cfi.row(lookup, scratch) else {
            return saved;
        };
        let regs = |r: u16| frame.get(usize::from(r)).copied().flatten();
        let read = |a: u64| mem.read_u64(a).ok();
        let eval = Eval {
            mask: u64::MAX,
            regs: &regs,
            read: &read,
        };
        // Cross-check the CFA with framehop's before trusting any slot.
        if eval.cfa(&row) != Some(cfa) {
            return saved;
        }
        for r in CALLEE_SAVED {
            saved[r] = match eval.register(&row, r as u16, cfa, frame[r]) {
                Restored::Value(v) => Some(v),
                Restored::Undefined | Restored::Unknown => None,
            };
        }
        saved
    }
}

/// The register a row's CFA is computed from (rsp for an expression).
fn cfa_register(row: &Row) -> u16 {
    match row.cfa() {
        gimli::CfaRule::RegisterAndOffset { register, .. } => register.0,
        gimli::CfaRule::Expression(_) => DWARF_RSP as u16,
    }
}

/// The name of x86-64 DWARF register `r`.
fn register_name(r: u16) -> &'static str {
    const NAMES: [&str; 17] = [
        "rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12",
        "r13", "r14", "r15", "rip",
    ];
    NAMES.get(usize::from(r)).copied().unwrap_or("a register")
}
