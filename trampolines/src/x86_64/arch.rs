//! x86-64's side of the architecture contract ([`Architecture`]).

use super::emit::{emit_trampoline, TrampolineSpec};
use super::frame::{StashLayout, MAX_STACK_WORDS};
use super::patch::entry_patch;
use super::relocate::{plan_patch_in, PatchPlan, JMP_ABS_LEN};
use crate::arch::{Arch, Architecture, LayoutRecord, PatchSite, PlanInputs, TrampolineSite};
use crate::error::{CodegenError, PlanError};
use crate::relocation::RelocatedPrologue;
use crate::trampoline::Trampoline;

/// 64-bit x86 (SysV AMD64 ABI) as the [`Architecture`] contract sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct X86_64;

impl Architecture for X86_64 {
    const ARCH: Arch = Arch::X86_64;
    const NAME: &'static str = "x86-64";
    const MAX_STACK_WORDS: u16 = MAX_STACK_WORDS;
    const MIN_STACK_WORDS: u16 = 0;
    const ADDRESS_LIMIT: u64 = 0x7fff_ffff_f000;
    const FAR_JUMP_LEN: Option<usize> = Some(JMP_ABS_LEN);

    type Layout = StashLayout;
    type Plan = PatchPlan;

    fn layout(stack_words: u16, xmm: bool) -> StashLayout {
        StashLayout::new(stack_words).with_xmm(xmm)
    }

    fn layout_record(layout: &StashLayout) -> LayoutRecord {
        LayoutRecord {
            version: layout.version(),
            stack_words: layout.stack_words,
            xmm: layout.xmm,
        }
    }

    fn plan(function: u64, code: &[u8], inputs: &PlanInputs<'_>) -> Result<PatchPlan, PlanError> {
        plan_patch_in(function, code, &inputs.function)
    }

    fn site(plan: &PatchPlan) -> PatchSite<'_> {
        PatchSite {
            function: plan.function,
            patch_addr: plan.patch_addr,
            patch_len: plan.patch_len,
            endbr: plan.endbr64,
            original: &plan.original,
        }
    }

    fn relocate(plan: &PatchPlan, address: u64) -> Result<RelocatedPrologue, CodegenError> {
        plan.relocate(address)
    }

    fn emit_trampoline(
        site: &TrampolineSite,
        layout: StashLayout,
        endbr: bool,
    ) -> Result<Trampoline, CodegenError> {
        emit_trampoline(&TrampolineSpec {
            address: site.address,
            record: site.record,
            relocated: site.relocated,
            layout,
            endbr64: endbr,
        })
    }

    fn jump_patch(at: u64, to: u64, patch_len: usize) -> Result<Vec<u8>, CodegenError> {
        entry_patch(at, to, patch_len)
    }
}
