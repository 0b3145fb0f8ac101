//! The i386 stash frame: where a trampoline leaves eax/edx/ecx and the stack arguments.
//!
//! The one definition of the 32-bit format: the emitter in [`super::emit`] builds
//! its pushes from [`STASHED_REGS`] and [`StashLayout`], and readers parse frames
//! with [`StashFrame::parse`]. See the diagram in the crate documentation.

use crate::error::FrameError;

/// The 8-byte marker at `ebp - 8` (two pushed words; `"ARGSTASH"` in memory, as on x86-64).
pub use crate::trampoline::STASH_MARKER;

/// A general-purpose register that the i386 trampoline stashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StashedReg {
    /// First register argument of `regparm` functions; the return value.
    Eax,
    /// Second register argument of `regparm` and `fastcall` functions.
    Edx,
    /// Third `regparm` argument, first `fastcall` argument.
    Ecx,
}

impl StashedReg {
    /// The register's name as assemblers and debuggers print it.
    pub const fn name(self) -> &'static str {
        match self {
            StashedReg::Eax => "eax",
            StashedReg::Edx => "edx",
            StashedReg::Ecx => "ecx",
        }
    }

    /// The register's number in instruction encodings.
    pub const fn encoding(self) -> u8 {
        match self {
            StashedReg::Eax => 0,
            StashedReg::Edx => 2,
            StashedReg::Ecx => 1,
        }
    }
}

/// The stashed registers in push order: `STASHED_REGS[i]` sits at `ebp - 16 - 4*i`.
pub const STASHED_REGS: [StashedReg; 3] = [StashedReg::Eax, StashedReg::Edx, StashedReg::Ecx];

/// Version of the i386 frame layout, stored in every hook record of a 32-bit target.
pub const LAYOUT_VERSION: u16 = crate::arena::STASH_LAYOUT_VERSION;

/// Largest stack-argument window (in 4-byte words) a trampoline copies.
pub const MAX_STACK_WORDS: u16 = 16;

/// Stack words copied when the caller asks for none: on i386 every cdecl argument is on the stack.
pub const DEFAULT_STACK_WORDS: u16 = 8;

/// Offset of the saved caller `ebp` from the frame base.
pub const SAVED_EBP_OFFSET: i64 = 0;
/// Offset of the hooked function's return address (into its caller) from the frame base.
pub const RETURN_ADDRESS_OFFSET: i64 = 4;
/// Offset of the first incoming stack argument from the frame base.
pub const FIRST_ARG_OFFSET: i64 = 8;
/// Offset of the 8-byte [`STASH_MARKER`] from the frame base.
pub const MARKER_OFFSET: i64 = -8;
/// Offset of the hook record's (32-bit) address from the frame base.
pub const RECORD_OFFSET: i64 = -12;
/// Bytes between the frame base and the last stashed register.
const FIXED_BELOW_BASE: u64 = 12 + 4 * STASHED_REGS.len() as u64;

/// The shape of one hook's i386 stash frame; only the stack window varies between hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StashLayout {
    /// Incoming stack words (the cdecl arguments) copied below the stash for the callee.
    pub stack_words: u16,
}

impl StashLayout {
    /// A layout copying `stack_words` incoming stack words.
    pub const fn new(stack_words: u16) -> StashLayout {
        StashLayout { stack_words }
    }

    /// Offset of `reg`'s stashed value from the frame base.
    pub const fn reg_offset(reg: StashedReg) -> i64 {
        match reg {
            StashedReg::Eax => -16,
            StashedReg::Edx => -20,
            StashedReg::Ecx => -24,
        }
    }

    /// Padding (0, 4, 8 or 12 bytes) that gives the callee the stack alignment the caller gave the function.
    pub const fn padding(&self) -> u64 {
        (16 - (4 * self.stack_words as u64) % 16) % 16
    }

    /// `ebp - esp` at the trampoline's `call`: the bytes the frame occupies below its base.
    ///
    /// Always 8 modulo 16, so the callee's entry `esp` is congruent to the
    /// function's original entry `esp` modulo 16.
    pub const fn call_sp_offset(&self) -> u64 {
        FIXED_BELOW_BASE + self.padding() + 4 * self.stack_words as u64
    }

    /// Offset of copied stack word `i` from the frame base.
    pub const fn stack_word_offset(&self, i: u16) -> i64 {
        -(self.call_sp_offset() as i64) + 4 * i as i64
    }

    /// Frame base from the hooked function's CFA (`esp` just after its `call` pushed the return address, plus 4).
    pub const fn base_from_callee_cfa(&self, cfa: u64) -> u64 {
        cfa.wrapping_add(self.call_sp_offset())
    }

    /// Bytes a reader fetches for [`StashFrame::parse`], starting at `base - call_sp_offset()`.
    pub const fn read_len(&self) -> usize {
        (self.call_sp_offset() as i64 + FIRST_ARG_OFFSET) as usize
    }
}

/// One i386 stash frame as read back from memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StashFrame {
    /// Address of the frame base (the trampoline's `ebp`).
    pub base: u64,
    /// The caller's `ebp`, saved by `push ebp`.
    pub saved_ebp: u32,
    /// Where the hooked function returns to in its caller.
    pub return_address: u32,
    /// Address of the hook record in the arena header.
    pub record: u32,
    /// Stashed register values, in [`STASHED_REGS`] order.
    pub regs: [u32; 3],
    /// Copied incoming stack words: the cdecl arguments, first argument first.
    pub stack_args: Vec<u32>,
}

impl StashFrame {
    /// Parses a frame from `bytes`, which were read starting at `base - layout.call_sp_offset()`.
    pub fn parse(base: u64, layout: &StashLayout, bytes: &[u8]) -> Result<StashFrame, FrameError> {
        if bytes.len() < layout.read_len() {
            return Err(FrameError::Truncated {
                needed: layout.read_len(),
                got: bytes.len(),
            });
        }
        let below = layout.call_sp_offset() as i64;
        let word = |off: i64| -> u32 {
            let at = (below + off) as usize;
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let marker = u64::from(word(MARKER_OFFSET)) | u64::from(word(MARKER_OFFSET + 4)) << 32;
        if marker != STASH_MARKER {
            return Err(FrameError::BadMarker {
                base,
                found: marker,
            });
        }
        let regs = STASHED_REGS.map(|r| word(StashLayout::reg_offset(r)));
        let stack_args = (0..layout.stack_words)
            .map(|i| word(layout.stack_word_offset(i)))
            .collect();
        Ok(StashFrame {
            base,
            saved_ebp: word(SAVED_EBP_OFFSET),
            return_address: word(RETURN_ADDRESS_OFFSET),
            record: word(RECORD_OFFSET),
            regs,
            stack_args,
        })
    }

    /// The stashed value of `reg`.
    pub fn reg(&self, reg: StashedReg) -> u32 {
        match reg {
            StashedReg::Eax => self.regs[0],
            StashedReg::Edx => self.regs[1],
            StashedReg::Ecx => self.regs[2],
        }
    }

    /// The caller's `esp` once the hooked call has returned, for a callee that pops no arguments (`base + 8`).
    pub fn caller_sp(&self) -> u64 {
        self.base.wrapping_add(8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_consistent() {
        assert_eq!(StashLayout::reg_offset(StashedReg::Eax), -16);
        assert_eq!(StashLayout::reg_offset(StashedReg::Ecx), -24);
        for (i, r) in STASHED_REGS.iter().enumerate() {
            assert_eq!(StashLayout::reg_offset(*r), -16 - 4 * i as i64);
        }
        for n in 0..=MAX_STACK_WORDS {
            let l = StashLayout::new(n);
            assert_eq!(
                l.call_sp_offset() % 16,
                8,
                "the callee must see the entry's stack alignment"
            );
            assert_eq!(l.stack_word_offset(0), -(l.call_sp_offset() as i64));
            assert!(l.stack_word_offset(n) <= StashLayout::reg_offset(StashedReg::Ecx));
        }
    }

    #[test]
    fn parse_rejects_bad_marker_and_short_input() {
        let l = StashLayout::new(2);
        let bytes = vec![0u8; l.read_len()];
        assert!(matches!(
            StashFrame::parse(0x1000, &l, &bytes),
            Err(FrameError::BadMarker { .. })
        ));
        assert!(matches!(
            StashFrame::parse(0x1000, &l, &bytes[1..]),
            Err(FrameError::Truncated { .. })
        ));
    }

    #[test]
    fn parse_reads_every_slot() {
        let l = StashLayout::new(3);
        let below = l.call_sp_offset() as i64;
        let mut bytes = vec![0u8; l.read_len()];
        let mut put = |off: i64, v: u32| {
            let at = (below + off) as usize;
            bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
        };
        put(MARKER_OFFSET, STASH_MARKER as u32);
        put(MARKER_OFFSET + 4, (STASH_MARKER >> 32) as u32);
        put(RECORD_OFFSET, 0xabc0);
        put(SAVED_EBP_OFFSET, 0x7777);
        put(RETURN_ADDRESS_OFFSET, 0x5555);
        for (i, reg) in STASHED_REGS.iter().enumerate() {
            put(StashLayout::reg_offset(*reg), 100 + i as u32);
        }
        for i in 0..3 {
            put(l.stack_word_offset(i), 900 + u32::from(i));
        }
        let f = StashFrame::parse(0x10_0000, &l, &bytes).unwrap();
        assert_eq!(f.reg(StashedReg::Eax), 100);
        assert_eq!(f.reg(StashedReg::Edx), 101);
        assert_eq!(f.reg(StashedReg::Ecx), 102);
        assert_eq!(f.stack_args, vec![900, 901, 902]);
        assert_eq!(
            (f.record, f.saved_ebp, f.return_address),
            (0xabc0, 0x7777, 0x5555)
        );
        assert_eq!(f.caller_sp(), 0x10_0008);
    }
}
