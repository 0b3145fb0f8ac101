//! i386's side of the architecture contract ([`Architecture`]).

use super::emit::{emit_trampoline, jump_patch, TrampolineSpec};
use super::frame::{StashLayout, DEFAULT_STACK_WORDS, LAYOUT_VERSION, MAX_STACK_WORDS};
use super::relocate::{pc_thunk_register, plan_patch, PatchPlan};
use crate::arch::{Arch, Architecture, LayoutRecord, PatchSite, PlanInputs, TrampolineSite};
use crate::error::{CodegenError, PlanError};
use crate::relocation::RelocatedPrologue;
use crate::trampoline::Trampoline;

/// 32-bit x86 (System V i386 ABI) as the [`Architecture`] contract sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct I386;

/// Bytes read at a call target to recognise a get-PC thunk.
const THUNK_HEAD: usize = 8;

impl Architecture for I386 {
    const ARCH: Arch = Arch::I386;
    const NAME: &'static str = "i386";
    const MAX_STACK_WORDS: u16 = MAX_STACK_WORDS;
    /// Every cdecl argument is on the stack: a hook copies at least the default window.
    const MIN_STACK_WORDS: u16 = DEFAULT_STACK_WORDS;
    /// TASK_SIZE of a 32-bit task on x86-64.
    const ADDRESS_LIMIT: u64 = 0xffff_e000;
    const FAR_JUMP_LEN: Option<usize> = None;

    type Layout = StashLayout;
    type Plan = PatchPlan;

    /// The frame has no vector-register area: `xmm` is ignored.
    fn layout(stack_words: u16, _xmm: bool) -> StashLayout {
        StashLayout::new(stack_words)
    }

    fn layout_record(layout: &StashLayout) -> LayoutRecord {
        LayoutRecord {
            version: LAYOUT_VERSION,
            stack_words: layout.stack_words,
            xmm: false,
        }
    }

    fn plan(function: u64, code: &[u8], inputs: &PlanInputs<'_>) -> Result<PatchPlan, PlanError> {
        let thunk_at = |target: u64| {
            let head = (inputs.read_memory?)(target, THUNK_HEAD)?;
            pc_thunk_register(&head)
        };
        plan_patch(function, code, &thunk_at)
    }

    fn site(plan: &PatchPlan) -> PatchSite<'_> {
        PatchSite {
            function: plan.function,
            patch_addr: plan.patch_addr,
            patch_len: plan.patch_len,
            endbr: plan.endbr32,
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
            endbr32: endbr,
        })
    }

    fn jump_patch(at: u64, to: u64, patch_len: usize) -> Result<Vec<u8>, CodegenError> {
        jump_patch(at, to, patch_len)
    }
}
