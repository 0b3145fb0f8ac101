//! Everything one i386 hook writes into the target, built in one place.
//!
//! The result is the architecture-neutral [`HookCode`] (trampoline, relocated
//! prologue, patch, record), so installing and ejecting work as on x86-64.

use super::emit::{emit_trampoline, jump_patch, TrampolineSpec};
use super::frame::{StashLayout, LAYOUT_VERSION, MAX_STACK_WORDS};
use super::relocate::PatchPlan;
use crate::arena::{ArenaHeader, HookRecord, HookState, SLOT_LEN};
use crate::error::CodegenError;
use crate::x86_64::{HookCode, HookMeta, RELOCATED_OFFSET};

/// Generates trampoline, relocated prologue, patch and record for `plan` in `slot` of the arena `header`.
pub fn build_hook(
    plan: &PatchPlan,
    header: &ArenaHeader,
    slot: u32,
    layout: StashLayout,
    meta: &HookMeta,
) -> Result<HookCode, CodegenError> {
    let slot_addr = header.slot_addr(slot);
    let relocated_addr = slot_addr + RELOCATED_OFFSET as u64;
    let relocated = plan.relocate(relocated_addr)?;
    if relocated.code.len() > SLOT_LEN - RELOCATED_OFFSET {
        return Err(CodegenError::Relocation {
            at: relocated_addr,
            reason: "relocated prologue does not fit its slot".into(),
        });
    }
    let trampoline = emit_trampoline(&TrampolineSpec {
        address: slot_addr,
        record: header.record_addr(slot),
        relocated: relocated_addr,
        layout,
        endbr32: plan.endbr32,
    })?;
    if trampoline.code.len() > RELOCATED_OFFSET {
        return Err(CodegenError::WindowTooLarge {
            requested: layout.stack_words,
            max: MAX_STACK_WORDS,
        });
    }
    let patch = jump_patch(plan.patch_addr, slot_addr, plan.patch_len)?;
    let record = HookRecord {
        state: HookState::Active,
        // The record's flag means "kept an end-branch instruction": endbr32 here.
        endbr64: plan.endbr32,
        function: plan.function,
        function_size: meta.function_size,
        patch_addr: plan.patch_addr,
        original: plan.original.clone(),
        layout_version: LAYOUT_VERSION,
        stack_words: layout.stack_words,
        trampoline: slot_addr,
        trampoline_len: trampoline.code.len() as u32,
        offsets: trampoline.offsets,
        relocated: relocated_addr,
        relocated_len: relocated.code.len() as u32,
        map: relocated.map.clone(),
        installed_ns: meta.installed_ns,
        name: meta.name.clone(),
        module: meta.module.clone(),
        variadic: meta.variadic,
        xmm: false,
    };
    Ok(HookCode {
        slot,
        trampoline,
        relocated,
        patch,
        record,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::i386::relocate::plan_patch;

    #[test]
    fn builds_a_slot_whose_parts_point_at_each_other() {
        let header = ArenaHeader::new(0x4000_0000, 8);
        // push ebp; mov ebp,esp; sub esp,0x18; mov eax,[ebp+8]; leave; ret
        let code = [
            0x55, 0x89, 0xe5, 0x83, 0xec, 0x18, 0x8b, 0x45, 0x08, 0xc9, 0xc3,
        ];
        let function = 0x5655_6000;
        let plan = plan_patch(function, &code, &|_| None).unwrap();
        let meta = HookMeta {
            name: "add".into(),
            ..HookMeta::default()
        };
        let hook = build_hook(&plan, &header, 3, StashLayout::new(4), &meta).unwrap();
        let slot = header.slot_addr(3);
        assert_eq!(hook.trampoline.address, slot);
        assert_eq!(hook.relocated.address, slot + RELOCATED_OFFSET as u64);
        let rel = i32::from_le_bytes([hook.patch[1], hook.patch[2], hook.patch[3], hook.patch[4]]);
        assert_eq!(
            (function as u32 + 5).wrapping_add(rel as u32),
            slot as u32,
            "the patch jumps to the trampoline"
        );
        assert_eq!(hook.patch.len(), 6);
        let record = HookRecord::decode(&hook.record.encode().unwrap()).unwrap();
        assert_eq!(record, hook.record);
        assert_eq!(record.after_call(), hook.trampoline.after_call());
        assert!(hook.slot_bytes().len() <= SLOT_LEN);
        // Above 4 GiB nothing is built.
        let high = ArenaHeader::new(0x1_0000_0000, 8);
        assert!(build_hook(&plan, &high, 0, StashLayout::new(4), &meta).is_err());
    }
}
