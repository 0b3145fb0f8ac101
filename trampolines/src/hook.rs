//! Everything one hook writes into the target, built in one place for every
//! architecture: the trampoline, the relocated prologue, the entry patch and the
//! record describing them.

use crate::arch::{Architecture, TrampolineSite};
use crate::arena::{ArenaHeader, HookRecord, HookState, SLOT_LEN};
use crate::error::CodegenError;
use crate::relocation::RelocatedPrologue;
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
pub fn build_hook<A: Architecture>(
    plan: &A::Plan,
    header: &ArenaHeader,
    slot: u32,
    layout: A::Layout,
    meta: &HookMeta,
) -> Result<HookCode, CodegenError> {
    let site = A::site(plan);
    let fields = A::layout_record(&layout);
    let slot_addr = header.slot_addr(slot);
    let relocated_addr = slot_addr + RELOCATED_OFFSET as u64;
    let relocated = A::relocate(plan, relocated_addr)?;
    if relocated.code.len() > SLOT_LEN - RELOCATED_OFFSET {
        return Err(CodegenError::Relocation {
            at: relocated_addr,
            reason: "relocated prologue does not fit its slot".into(),
        });
    }
    let at = TrampolineSite {
        address: slot_addr,
        record: header.record_addr(slot),
        relocated: relocated_addr,
    };
    let trampoline = A::emit_trampoline(&at, layout, site.endbr)?;
    if trampoline.code.len() > RELOCATED_OFFSET {
        return Err(CodegenError::WindowTooLarge {
            requested: fields.stack_words,
            max: A::MAX_STACK_WORDS,
        });
    }
    let patch = A::jump_patch(site.patch_addr, slot_addr, site.patch_len)?;
    let record = HookRecord {
        state: HookState::Active,
        // The record's flag means "kept an end-branch instruction" (endbr64 or endbr32).
        endbr64: site.endbr,
        function: site.function,
        function_size: meta.function_size,
        patch_addr: site.patch_addr,
        original: site.original.to_vec(),
        layout_version: fields.version,
        xmm: fields.xmm,
        variadic: meta.variadic,
        stack_words: fields.stack_words,
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
