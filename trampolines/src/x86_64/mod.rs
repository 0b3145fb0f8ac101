//! x86-64 (SysV ABI): stash frame, trampoline emitter, prologue relocation; the
//! [`Architecture`](crate::arch::Architecture) contract's [`X86_64`]. Beside the
//! files every architecture has (`arch`, `emit`, `frame`, `hook`, `relocate`),
//! x86-64 alone has whole-function analysis, call-through hooks, SysV argument
//! placement, stack-read analysis and `.eh_frame` for hooks.

pub mod analysis;
pub mod arch;
pub mod call_through;
pub mod emit;
pub mod frame;
pub mod patch;
pub mod relocate;
pub mod stack_reads;
pub mod sysv;

pub use crate::hook::{HookCode, HookMeta, RELOCATED_OFFSET};
pub use crate::trampoline::{Trampoline, TrampolineOffsets};
pub use arch::X86_64;
pub use call_through::{build_call_through, CallThroughCode};
pub use emit::{
    emit_call_through, emit_trampoline, jump_patch, CallThroughSpec, TrampolineSpec, ENDBR64,
};
pub use frame::{
    StashFrame, StashLayout, StashedReg, ARGUMENT_REGS, LAYOUT_VERSION, LAYOUT_VERSION_XMM,
    MAX_STACK_WORDS, STASHED_REGS, STASH_MARKER, XMM_AREA_LEN, XMM_ARGS,
};
pub use patch::{entry_patch, rel32_reaches};
pub use relocate::{
    plan_patch, plan_patch_in, FunctionContext, MayLand, PatchPlan, RelocatedPrologue, JMP_ABS_LEN,
    JMP_REL32_LEN, MAX_PATCH_LEN,
};
pub mod hook;
pub use hook::build_hook;
pub mod unwind;
pub use stack_reads::{
    analyse_stack_reads, analyse_stack_reads_with_parts, classify_exit, disassemble_one, Exit,
    ExitKind, StackReads, TargetCfa, Unsure,
};
pub use sysv::{place_arguments, ArgLocation, ArgPlacement, Field, ParamType, Signature};
pub use unwind::{hook_eh_frame, HookCodeRanges, HookUnwind};
