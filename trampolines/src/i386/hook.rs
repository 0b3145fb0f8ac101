//! Everything one i386 hook writes into the target: the shared
//! [`crate::hook::build_hook`] over [`I386`], so installing and ejecting work as
//! on x86-64.

use super::arch::I386;
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
    crate::hook::build_hook::<I386>(plan, header, slot, layout, meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::{HookRecord, SLOT_LEN};
    use crate::hook::RELOCATED_OFFSET;
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
