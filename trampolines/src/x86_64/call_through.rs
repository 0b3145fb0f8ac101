//! Call-through hooks: a stash trampoline reached through a function pointer.
//!
//! Some functions are called through a pointer that a program lets you replace:
//! CPython's PEP 523 frame-evaluation function is the motivating case. Setting
//! that pointer to a stash trampoline that calls the previous value gives the
//! same stash frames as a patched entry, with nothing patched: the record has no
//! patch address and no original bytes ([`HookRecord::is_call_through`]), and
//! its `function` is the address the trampoline calls.
//!
//! ```text
//! slot + 0                 trampoline (emit_call_through), `call qword [rip -> target]`
//!                          int3 fill
//! slot + CONSTANTS_OFFSET  STASH_MARKER, then the record's address (pushed from here)
//! slot + TARGET_OFFSET     the call target, 8 bytes little-endian
//! ```
//!
//! The target word lives in the slot, so the trampoline reaches any address in
//! the process and the arena can be placed anywhere. Readers need nothing new: a
//! return address equal to the record's `after_call` marks a stash frame, as for
//! every hook. The frame stashes the six argument registers; its rax and r10
//! slots are not written (see [`emit_call_through`]).

use super::emit::{emit_call_through, CallThroughSpec};
use super::frame::{StashLayout, STASH_MARKER};
use crate::arena::{ArenaHeader, HookRecord, HookState, SLOT_LEN};
use crate::error::CodegenError;
use crate::hook::HookMeta;
use crate::trampoline::Trampoline;

/// Offset of the 8-byte call target inside the slot (its last word).
pub const TARGET_OFFSET: usize = SLOT_LEN - 8;

/// Offset of the marker word and the record-address word the trampoline pushes.
pub const CONSTANTS_OFFSET: usize = TARGET_OFFSET - 16;

/// The code and record of one call-through hook, ready to be written.
#[derive(Debug, Clone)]
pub struct CallThroughCode {
    /// Slot index in the arena.
    pub slot: u32,
    /// The trampoline, at the slot's start; the address to store in the function pointer.
    pub trampoline: Trampoline,
    /// The function the trampoline calls.
    pub target: u64,
    /// Address of the record (pushed into every stash frame).
    pub record_addr: u64,
    /// The record describing it.
    pub record: HookRecord,
}

impl CallThroughCode {
    /// The slot's full contents: trampoline, `int3` fill, marker, record address, call target.
    pub fn slot_bytes(&self) -> [u8; SLOT_LEN] {
        let mut bytes = [0xcc; SLOT_LEN];
        bytes[..self.trampoline.code.len()].copy_from_slice(&self.trampoline.code);
        bytes[CONSTANTS_OFFSET..CONSTANTS_OFFSET + 8].copy_from_slice(&STASH_MARKER.to_le_bytes());
        bytes[CONSTANTS_OFFSET + 8..TARGET_OFFSET].copy_from_slice(&self.record_addr.to_le_bytes());
        bytes[TARGET_OFFSET..].copy_from_slice(&self.target.to_le_bytes());
        bytes
    }
}

/// Generates the trampoline and record of a call-through hook calling `target`, in
/// `slot` of the arena `header`. The trampoline starts with `endbr64` (it is the
/// target of indirect calls); the record has no patch, no relocated prologue and
/// `function == target`.
pub fn build_call_through(
    header: &ArenaHeader,
    slot: u32,
    target: u64,
    layout: StashLayout,
    meta: &HookMeta,
) -> Result<CallThroughCode, CodegenError> {
    let slot_addr = header.slot_addr(slot);
    let trampoline = emit_call_through(&CallThroughSpec {
        address: slot_addr,
        constants: slot_addr + CONSTANTS_OFFSET as u64,
        pointer: slot_addr + TARGET_OFFSET as u64,
        layout,
        endbr64: true,
    })?;
    if trampoline.code.len() > CONSTANTS_OFFSET {
        return Err(CodegenError::WindowTooLarge {
            requested: layout.stack_words,
            max: super::frame::MAX_STACK_WORDS,
        });
    }
    let record = HookRecord {
        state: HookState::Active,
        endbr64: false,
        function: target,
        function_size: meta.function_size,
        patch_addr: 0,
        original: Vec::new(),
        layout_version: layout.version(),
        xmm: layout.xmm,
        variadic: meta.variadic,
        stack_words: layout.stack_words,
        trampoline: slot_addr,
        trampoline_len: trampoline.code.len() as u32,
        offsets: trampoline.offsets,
        relocated: 0,
        relocated_len: 0,
        map: Vec::new(),
        installed_ns: meta.installed_ns,
        name: meta.name.clone(),
        module: meta.module.clone(),
    };
    Ok(CallThroughCode {
        slot,
        trampoline,
        target,
        record_addr: header.record_addr(slot),
        record,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::{Arena, HEADER_LEN, RECORD_LEN};
    use iced_x86::{Decoder, DecoderOptions, Mnemonic};

    #[test]
    fn slot_calls_the_target_word_and_the_record_roundtrips() {
        let header = ArenaHeader::new(0x7f00_0000_0000, 1);
        let target = 0x5555_0000_1230;
        let meta = HookMeta {
            name: "_PyEval_EvalFrameDefault".into(),
            module: "/usr/bin/python3.11".into(),
            installed_ns: 7,
            ..HookMeta::default()
        };
        let code = build_call_through(&header, 0, target, StashLayout::new(0), &meta).unwrap();
        let slot = code.slot_bytes();
        let at = header.slot_addr(0);
        assert_eq!(code.trampoline.address, at);
        assert_eq!(slot[TARGET_OFFSET..], target.to_le_bytes());
        assert_eq!(slot[CONSTANTS_OFFSET..CONSTANTS_OFFSET + 8], *b"ARGSTASH");
        assert_eq!(
            slot[CONSTANTS_OFFSET + 8..TARGET_OFFSET],
            header.record_addr(0).to_le_bytes()
        );
        // The call reads exactly the target word.
        let mut d = Decoder::with_ip(64, &code.trampoline.code, at, DecoderOptions::NONE);
        let call = d.iter().find(|i| i.mnemonic() == Mnemonic::Call).unwrap();
        assert!(call.is_ip_rel_memory_operand());
        assert_eq!(call.ip_rel_memory_address(), at + TARGET_OFFSET as u64);
        assert_eq!(call.next_ip(), code.trampoline.after_call());
        assert_eq!(slot[0..4], crate::x86_64::ENDBR64);

        let r = &code.record;
        assert!(r.is_call_through());
        assert_eq!((r.function, r.trampoline), (target, at));
        assert_eq!(r.after_call(), code.trampoline.after_call());
        assert!(r.in_trampoline(at) && !r.in_relocated(at));
        // Written into an arena image, it is found again by its after-call address.
        let mut bytes = vec![0u8; header.header_len()];
        bytes[..HEADER_LEN].copy_from_slice(&header.encode());
        bytes[HEADER_LEN..HEADER_LEN + RECORD_LEN].copy_from_slice(&r.encode().unwrap());
        let arena = Arena::decode(header.base, &bytes).unwrap();
        assert_eq!(arena.by_after_call(r.after_call()), Some(r));
        assert_eq!(arena.records[0].name, "_PyEval_EvalFrameDefault");
    }

    #[test]
    fn every_window_fits_before_the_constants() {
        let header = ArenaHeader::new(0x7f00_0000_0000, 2);
        for words in [0, 1, crate::x86_64::MAX_STACK_WORDS] {
            for xmm in [false, true] {
                let layout = StashLayout::new(words).with_xmm(xmm);
                let code =
                    build_call_through(&header, 1, 0x1000, layout, &HookMeta::default()).unwrap();
                assert!(code.trampoline.code.len() <= CONSTANTS_OFFSET);
                assert_eq!(code.record.layout(), layout);
            }
        }
    }
}
