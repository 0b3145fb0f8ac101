//! Everything one hook writes into the target, built in one place.

use super::emit::{emit_trampoline, TrampolineSpec};
use super::frame::StashLayout;
use super::patch::entry_patch;
use super::relocate::{PatchPlan, RelocatedPrologue};
use crate::arena::{ArenaHeader, HookRecord, HookState, SLOT_LEN};
use crate::error::CodegenError;
use crate::trampoline::Trampoline;

/// Offset of the relocated prologue inside a code slot (the trampoline comes first;
/// the largest one, 16 stack words plus the xmm area, takes 158 bytes).
pub const RELOCATED_OFFSET: usize = 160;

/// Names stored in the hook record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookMeta {
    /// Function name.
    pub name: String,
    /// Module path.
    pub module: String,
    /// Function size from its symbol.
    pub function_size: u64,
    /// Install time, Unix nanoseconds.
    pub installed_ns: u64,
    /// The function is variadic (its window size is a configured default, not a measurement).
    pub variadic: bool,
}

/// The code and record of one hook, ready to be written.
#[derive(Debug, Clone)]
pub struct HookCode {
    /// Slot index in the arena.
    pub slot: u32,
    /// The trampoline, at the slot's start.
    pub trampoline: Trampoline,
    /// The relocated prologue, at slot + [`RELOCATED_OFFSET`].
    pub relocated: RelocatedPrologue,
    /// The bytes that replace `plan.original` at `plan.patch_addr`.
    pub patch: Vec<u8>,
    /// The record describing it all.
    pub record: HookRecord,
}

impl HookCode {
    /// The slot's full contents (trampoline, `int3` fill, relocated prologue).
    pub fn slot_bytes(&self) -> Vec<u8> {
        let mut bytes = vec![0xcc; RELOCATED_OFFSET + self.relocated.code.len()];
        bytes[..self.trampoline.code.len()].copy_from_slice(&self.trampoline.code);
        bytes[RELOCATED_OFFSET..].copy_from_slice(&self.relocated.code);
        bytes
    }
}

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
        endbr64: plan.endbr64,
    })?;
    if trampoline.code.len() > RELOCATED_OFFSET {
        return Err(CodegenError::WindowTooLarge {
            requested: layout.stack_words,
            max: super::frame::MAX_STACK_WORDS,
        });
    }
    let patch = entry_patch(plan.patch_addr, slot_addr, plan.patch_len)?;
    let record = HookRecord {
        state: HookState::Active,
        endbr64: plan.endbr64,
        function: plan.function,
        function_size: meta.function_size,
        patch_addr: plan.patch_addr,
        original: plan.original.clone(),
        layout_version: layout.version(),
        xmm: layout.xmm,
        variadic: meta.variadic,
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
    };
    Ok(HookCode {
        slot,
        trampoline,
        relocated,
        patch,
        record,
    })
}
