//! Everything one x86-64 hook writes into the target: the shared
//! [`crate::hook::build_hook`] over [`X86_64`].

use super::arch::X86_64;
use super::frame::StashLayout;
use super::relocate::PatchPlan;
use crate::arena::ArenaHeader;
use crate::error::CodegenError;
use crate::hook::{HookCode, HookMeta};

/// Generates trampoline, relocated prologue, patch and record for `plan` in `slot` of the arena `header`.
pub fn build_hook(
    plan: &PatchPlan,
    header: &ArenaHeader,
    slot: u32,
    layout: StashLayout,
    meta: &HookMeta,
) -> Result<HookCode, CodegenError> {
    crate::hook::build_hook::<X86_64>(plan, header, slot, layout, meta)
}
