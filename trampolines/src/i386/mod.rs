//! i386 (System V, cdecl and its register variants): stash frame, trampoline emitter,
//! prologue relocation; the [`Architecture`](crate::arch::Architecture) contract's
//! [`I386`]. The containers ([`crate::HookCode`], [`crate::Trampoline`], …) are
//! the crate root's, shared with x86-64.

pub mod arch;
pub mod emit;
pub mod frame;
pub mod hook;
pub mod relocate;

pub use crate::hook::{HookCode, HookMeta, RELOCATED_OFFSET};
pub use crate::trampoline::{Trampoline, TrampolineOffsets};
pub use arch::I386;
pub use emit::{
    emit_trampoline, jump_patch, TrampolineSpec, ENDBR32, EPILOGUE_POP_EAX, EPILOGUE_RET,
};
pub use frame::{
    StashFrame, StashLayout, StashedReg, DEFAULT_STACK_WORDS, LAYOUT_VERSION, MAX_STACK_WORDS,
    STASHED_REGS, STASH_MARKER,
};
pub use hook::build_hook;
pub use relocate::{
    pc_thunk_register, plan_patch, PatchPlan, RelocatedPrologue, JMP_REL32_LEN, MAX_PATCH_LEN,
};
