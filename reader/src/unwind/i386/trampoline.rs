//! i386 trampolines: the stash frame a hooked function returns to, and
//! stepping out of a trampoline a thread stopped in.

use trampolines::arena::HookRecord;
use trampolines::i386::{StashFrame, StashLayout, EPILOGUE_POP_EAX, MAX_STACK_WORDS, STASHED_REGS};

use super::step::read_u32;
use super::{Regs, Regs32};
use crate::memory::Memory;
use crate::unwind::{StashedArgs, Stepped, StopReason};

/// Labels of stashed stack words: the offset from the hooked function's entry `esp`.
const STACK_LABELS: [&str; MAX_STACK_WORDS as usize] = [
    "stack+4", "stack+8", "stack+12", "stack+16", "stack+20", "stack+24", "stack+28", "stack+32",
    "stack+36", "stack+40", "stack+44", "stack+48", "stack+52", "stack+56", "stack+60", "stack+64",
];

/// Reads the stash frame of `hook` below the hooked function's CFA (`regs`'
/// stack pointer after it returned): its arguments, and its caller's registers.
pub(super) fn read_stash(
    hook: &HookRecord,
    regs: &Regs,
    mem: &dyn Memory,
) -> Result<(StashedArgs, Stepped<Regs>), StopReason> {
    let layout = StashLayout::new(hook.stack_words);
    let base = layout.base_from_callee_cfa(u64::from(regs.regs.esp));
    let mut bytes = vec![0u8; layout.read_len()];
    mem.read(base - layout.call_sp_offset(), &mut bytes)
        .map_err(|e| StopReason::StashUnreadable {
            base,
            reason: e.to_string(),
        })?;
    let frame = StashFrame::parse(base, &layout, &bytes).map_err(|error| StopReason::BadStash {
        hook: hook.name.clone(),
        error,
    })?;
    let caller = Regs {
        regs: Regs32 {
            eip: frame.return_address,
            esp: frame.caller_sp() as u32,
            ebp: frame.saved_ebp,
        },
        exact: true,
    };
    let stash = stashed_args(&frame, hook.function, &hook.name);
    Ok((stash, Stepped { caller, cfa: None }))
}

/// Steps out of `hook`'s trampoline at `regs`' pc, by where the trampoline has
/// its return address at that offset (prologue, body, the epilogue's `pop eax`).
pub(super) fn step_in_trampoline(
    hook: &HookRecord,
    regs: &Regs,
    mem: &dyn Memory,
) -> Option<Stepped<Regs>> {
    let r = &regs.regs;
    let off = (u64::from(r.eip) - hook.trampoline) as u32;
    let o = hook.offsets;
    let sp = u64::from(r.esp);
    let bp = u64::from(r.ebp);
    let word = |a: u64| read_u32(mem, a);
    // A hook record read from a hostile target can hold any offset: one past
    // u32 names no instruction of the trampoline, so the step is unknown.
    let pop_eax = o.after_call.checked_add(EPILOGUE_POP_EAX)?;
    let (eip, esp, ebp) = if off < o.after_push_rbp || off >= o.ret {
        (word(sp)?, sp + 4, r.ebp)
    } else if off < o.after_mov_rbp {
        (word(sp + 4)?, sp + 8, word(sp)?)
    } else if off == pop_eax {
        (word(sp + 8)?, sp + 12, word(sp + 4)?)
    } else if off > pop_eax {
        (word(sp + 4)?, sp + 8, word(sp)?)
    } else {
        (word(bp + 4)?, bp + 8, word(bp)?)
    };
    Some(Stepped {
        caller: Regs {
            regs: Regs32 {
                eip,
                esp: esp as u32,
                ebp,
            },
            exact: false,
        },
        cfa: None,
    })
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
