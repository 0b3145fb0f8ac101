//! x86-64 trampolines: the stash frame a hooked function returns to, and
//! stepping out of a trampoline a thread stopped in.

use trampolines::arena::HookRecord;
use trampolines::x86_64::{StashFrame, ARGUMENT_REGS};

use super::Regs;
use crate::memory::Memory;
use crate::unwind::{StashedArgs, Stepped, StopReason};

/// Reads the stash frame of `hook` below the hooked function's CFA (`regs`'
/// stack pointer after it returned): its arguments, and its caller's registers.
pub(super) fn read_stash(
    hook: &HookRecord,
    regs: &Regs,
    mem: &dyn Memory,
) -> Result<(StashedArgs, Stepped<Regs>), StopReason> {
    let layout = hook.layout();
    let base = layout.base_from_callee_cfa(regs.framehop.sp());
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
    let stash = StashedArgs {
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
    };
    let caller = regs.caller(
        frame.return_address,
        base + 16,
        frame.saved_rbp,
        &regs.known,
    );
    Ok((stash, Stepped { caller, cfa: None }))
}

/// Steps out of `hook`'s trampoline at `regs`' pc: before its `push rbp` and
/// from its `ret` on, the return address is at the stack pointer; between the
/// push and `mov rbp, rsp`, one word above; after that, above the frame pointer.
/// Unreadable words read as 0 (which ends the stack).
pub(super) fn step_in_trampoline(
    hook: &HookRecord,
    regs: &Regs,
    mem: &dyn Memory,
) -> Stepped<Regs> {
    let off = (regs.pc - hook.trampoline) as u32;
    let o = hook.offsets;
    let sp = regs.framehop.sp();
    let bp = regs.framehop.bp();
    let word = |a: u64| mem.read_u64(a).unwrap_or(0);
    // Registers from a core or a hostile target can sit at the top of the
    // address space: a wrapped caller stack pointer is below this one, and the
    // walk stops there as for any stack that does not grow.
    let (ret, sp, bp) = if off < o.after_push_rbp || off >= o.ret {
        (word(sp), sp.wrapping_add(8), bp)
    } else if off < o.after_mov_rbp {
        (word(sp.wrapping_add(8)), sp.wrapping_add(16), word(sp))
    } else {
        (word(bp.wrapping_add(8)), bp.wrapping_add(16), word(bp))
    };
    Stepped {
        caller: regs.caller(ret, sp, bp, &regs.known),
        cfa: None,
    }
}
