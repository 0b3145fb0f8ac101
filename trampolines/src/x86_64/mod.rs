//! x86-64 (SysV ABI): stash frame, trampoline emitter, prologue relocation.

pub mod analysis;
pub mod emit;
pub mod frame;
pub mod patch;
pub mod relocate;

pub use emit::{
    emit_trampoline, jump_patch, Trampoline, TrampolineOffsets, TrampolineSpec, ENDBR64,
};
pub use frame::{
    StashFrame, StashLayout, StashedReg, ARGUMENT_REGS, LAYOUT_VERSION, MAX_STACK_WORDS,
    STASHED_REGS, STASH_MARKER,
};
pub use patch::{entry_patch, rel32_reaches};
pub use relocate::{
    plan_patch, plan_patch_in, FunctionContext, PatchPlan, RelocatedPrologue, JMP_ABS_LEN,
    JMP_REL32_LEN, MAX_PATCH_LEN,
};
pub mod hook;
pub use hook::{build_hook, HookCode, HookMeta, RELOCATED_OFFSET};
pub mod unwind;
pub use unwind::{hook_eh_frame, HookCodeRanges, HookUnwind};
