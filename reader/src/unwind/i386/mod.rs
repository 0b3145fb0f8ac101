//! The i386 half of the unwinder: ordinary frames are stepped with the
//! module's `.eh_frame` CFI through the shared evaluator, falling back to the
//! `ebp` chain where no CFI covers the pc (`step`); stash frames are read at
//! their known place (`trampoline`): their `eax`/`edx`/`ecx` and copied stack
//! words become the hooked frame's arguments, the stack words labelled by their
//! offset from the entry `esp` (`stack+4` is the first cdecl argument).
//!
//! Modules with DWARF name their frames (source function, file, line, inlined
//! calls) as on x86-64, and hooked frames' stashed words become named, typed
//! arguments where the parameters' entry places can be decided
//! ([`crate::args::i386`]); otherwise they stay positional.

mod step;
mod trampoline;

#[cfg(test)]
mod tests;

use trampolines::arena::HookRecord;

use crate::args::i386::{signature_values_i386, stashed_values_i386};
use crate::args::{ArgValue, FrameState, FunctionInfo};
use crate::memory::Memory;
use crate::symbols::ProcessSymbols;
use crate::unwind::{
    ArchUnwind, CodeAddress, DwarfRegisters, Scope, StashedArgs, Stepped, StopReason,
};

pub use step::I386;

/// DWARF register numbers of i386.
const DWARF_ESP: usize = 4;
const DWARF_EBP: usize = 5;
const DWARF_EIP: usize = 8;

/// The registers of a stopped 32-bit thread (ptrace's 64-bit view of it) by
/// i386 DWARF register number.
pub fn dwarf_registers(r: &libc::user_regs_struct) -> DwarfRegisters {
    let mut regs = [None; 17];
    let low = |v: u64| Some(v & 0xffff_ffff);
    for (n, v) in [
        r.rax, r.rcx, r.rdx, r.rbx, r.rsp, r.rbp, r.rsi, r.rdi, r.rip,
    ]
    .into_iter()
    .enumerate()
    {
        regs[n] = low(v);
    }
    regs
}

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

/// [`Regs32`] with whether they are exact (live, restored by CFI or from a
/// stash frame) rather than guessed (by the `ebp` chain).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Regs {
    regs: Regs32,
    exact: bool,
}

impl ArchUnwind for I386 {
    type Regs = Regs;
    type Cache = step::Cache;
    const ENTRY_VALUES: bool = false;

    fn new(symbols: &ProcessSymbols) -> I386 {
        I386::index(symbols)
    }

    fn initial(regs: &DwarfRegisters) -> Regs {
        let word = |n: usize| regs[n].unwrap_or(0) as u32;
        Regs {
            regs: Regs32 {
                eip: word(DWARF_EIP),
                esp: word(DWARF_ESP),
                ebp: word(DWARF_EBP),
            },
            exact: true,
        }
    }

    fn pc(regs: &Regs) -> u64 {
        u64::from(regs.regs.eip)
    }

    fn sp(regs: &Regs) -> u64 {
        u64::from(regs.regs.esp)
    }

    /// Registers that were only guessed (stepped by the `ebp` chain) are left unknown.
    fn frame_state(regs: &Regs, lookup: u64) -> FrameState {
        let mut st = FrameState {
            pc: lookup,
            ..FrameState::default()
        };
        if regs.exact {
            st.regs[DWARF_ESP] = Some(u64::from(regs.regs.esp));
            st.regs[DWARF_EBP] = Some(u64::from(regs.regs.ebp));
        }
        st.regs[DWARF_EIP] = Some(u64::from(regs.regs.eip));
        st
    }

    fn step(
        &self,
        cache: &mut step::Cache,
        at: CodeAddress,
        regs: &Regs,
        mem: &dyn Memory,
    ) -> Result<Option<Stepped<Regs>>, StopReason> {
        Ok(self.step_frame(cache, at.lookup(), regs, mem))
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
        trampoline::step_in_trampoline(hook, regs, mem)
    }

    fn goes_on(
        scope: &Scope,
        callee: &Regs,
        caller: &Regs,
        first: bool,
        _from_trampoline: bool,
    ) -> Result<bool, StopReason> {
        let ret = u64::from(caller.regs.eip);
        let in_code =
            scope.symbols.module_for(ret.wrapping_sub(1)).is_some() || scope.hook_at(ret).is_some();
        if caller.regs.eip < 0x1000 || !in_code {
            // The outermost frame's return slot holds no code address: the end.
            return Ok(false);
        }
        if caller.regs.esp <= callee.regs.esp && !first {
            return Err(StopReason::StackDidNotGrow {
                caller_sp: u64::from(caller.regs.esp),
                callee_sp: u64::from(callee.regs.esp),
            });
        }
        Ok(true)
    }

    fn stashed_values(info: &FunctionInfo, stash: &StashedArgs, mem: &dyn Memory) -> Vec<ArgValue> {
        let entry = match stash.function {
            0 => info.entry.unwrap_or(0),
            e => e,
        };
        stashed_values_i386(info, entry, &stash.registers, mem).unwrap_or_default()
    }

    fn signature_values(
        info: &FunctionInfo,
        stash: &StashedArgs,
        mem: &dyn Memory,
    ) -> Vec<ArgValue> {
        signature_values_i386(info, &stash.registers, mem).unwrap_or_default()
    }
}
