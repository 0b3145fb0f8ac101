//! The x86-64 half of the unwinder: ordinary frames are stepped with framehop
//! over each module's `.eh_frame` (`step`), callee-saved registers are moved
//! to the caller with the shared CFI evaluator, and stash frames are read at
//! their known place (`trampoline`).

mod step;
mod trampoline;

#[cfg(test)]
mod tests;

use framehop::x86_64::UnwindRegsX86_64;

use crate::args::{stashed_values_with_xmm, ArgValue, FrameState, FunctionInfo};
use crate::memory::Memory;
use crate::symbols::ProcessSymbols;
use crate::unwind::{
    ArchUnwind, CodeAddress, DwarfRegisters, Scope, StashedArgs, Stepped, StopReason,
};
use trampolines::arena::HookRecord;

pub use step::X86_64;

/// Callee-saved registers other than rbp and rsp, by DWARF number (rbx, r12-r15).
const CALLEE_SAVED: [usize; 5] = [3, 12, 13, 14, 15];
const DWARF_RBP: usize = 6;
const DWARF_RSP: usize = 7;
const DWARF_RIP: usize = 16;

/// The registers of a stopped thread by DWARF register number.
pub fn dwarf_registers(r: &libc::user_regs_struct) -> DwarfRegisters {
    [
        r.rax, r.rdx, r.rcx, r.rbx, r.rsi, r.rdi, r.rbp, r.rsp, r.r8, r.r9, r.r10, r.r11, r.r12,
        r.r13, r.r14, r.r15, r.rip,
    ]
    .map(Some)
}

/// The registers carried from an x86-64 frame to its caller.
#[derive(Debug, Clone)]
pub struct Regs {
    /// The frame's pc.
    pc: u64,
    /// What framehop steps: the stack and frame pointers (and the last pc it returned).
    framehop: UnwindRegsX86_64,
    /// Every register known in the frame, by DWARF number: all of them in the
    /// innermost frame, the callee-saved ones, rsp, rbp and rip in its callers.
    known: DwarfRegisters,
}

impl Regs {
    /// The registers of the caller at `pc` with the stack and frame pointers
    /// `sp` and `bp`, and the callee-saved registers `saved` (others unknown).
    fn caller(&self, pc: u64, sp: u64, bp: u64, saved: &DwarfRegisters) -> Regs {
        let mut known = [None; 17];
        for r in CALLEE_SAVED {
            known[r] = saved[r];
        }
        known[DWARF_RSP] = Some(sp);
        known[DWARF_RBP] = Some(bp);
        known[DWARF_RIP] = Some(pc);
        let mut framehop = self.framehop;
        framehop.set_sp(sp);
        framehop.set_bp(bp);
        Regs {
            pc,
            framehop,
            known,
        }
    }
}

impl ArchUnwind for X86_64 {
    type Regs = Regs;
    type Cache = step::Cache;
    const ENTRY_VALUES: bool = true;

    fn new(symbols: &ProcessSymbols) -> X86_64 {
        X86_64::index(symbols)
    }

    fn initial(regs: &DwarfRegisters) -> Regs {
        let rip = regs[DWARF_RIP].unwrap_or(0);
        let rsp = regs[DWARF_RSP].unwrap_or(0);
        let rbp = regs[DWARF_RBP].unwrap_or(0);
        Regs {
            pc: rip,
            framehop: UnwindRegsX86_64::new(rip, rsp, rbp),
            known: *regs,
        }
    }

    fn pc(regs: &Regs) -> u64 {
        regs.pc
    }

    fn sp(regs: &Regs) -> u64 {
        regs.framehop.sp()
    }

    fn frame_state(regs: &Regs, lookup: u64) -> FrameState {
        FrameState {
            pc: lookup,
            cfa: None,
            regs: regs.known,
            entry_values: Vec::new(),
        }
    }

    fn step(
        &self,
        cache: &mut step::Cache,
        at: CodeAddress,
        regs: &Regs,
        mem: &dyn Memory,
    ) -> Result<Option<Stepped<Regs>>, StopReason> {
        self.step_frame(cache, at, regs, mem)
    }

    fn read_stash(
        hook: &HookRecord,
        regs: &Regs,
        mem: &dyn Memory,
    ) -> Result<(StashedArgs, Stepped<Regs>), StopReason> {
        trampoline::read_stash(hook, regs, mem)
    }

    fn step_in_trampoline(
        hook: &HookRecord,
        regs: &Regs,
        mem: &dyn Memory,
    ) -> Option<Stepped<Regs>> {
        Some(trampoline::step_in_trampoline(hook, regs, mem))
    }

    fn goes_on(
        _scope: &Scope,
        _callee: &Regs,
        caller: &Regs,
        _first: bool,
        from_trampoline: bool,
    ) -> Result<bool, StopReason> {
        // framehop ends the stack itself (a zero return address, an undefined
        // return-address rule); out of a trampoline, a return address in the
        // first page is no code.
        let floor = if from_trampoline { 0x1000 } else { 0 };
        Ok(caller.pc > floor)
    }

    fn stashed_values(info: &FunctionInfo, stash: &StashedArgs, mem: &dyn Memory) -> Vec<ArgValue> {
        stashed_values_with_xmm(info, &stash.registers, &stash.stack, &stash.xmm, mem)
    }

    fn signature_values(
        info: &FunctionInfo,
        stash: &StashedArgs,
        mem: &dyn Memory,
    ) -> Vec<ArgValue> {
        stashed_values_with_xmm(info, &stash.registers, &stash.stack, &stash.xmm, mem)
    }
}
