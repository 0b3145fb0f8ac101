//! The x86-64 stash frame: where a trampoline leaves the argument registers.
//!
//! This module is the one definition of the format. The emitter in
//! [`super::emit`] builds its pushes from [`STASHED_REGS`] and [`StashLayout`], and
//! every reader parses frames with [`StashFrame::parse`]; nothing else knows the
//! offsets.

use crate::error::FrameError;

/// The 64-bit marker stored at `rbp - 8` of every stash frame (`"ARGSTASH"` in memory).
pub use crate::trampoline::STASH_MARKER;

/// A general-purpose register that the trampoline stashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StashedReg {
    /// First integer argument.
    Rdi,
    /// Second integer argument.
    Rsi,
    /// Third integer argument.
    Rdx,
    /// Fourth integer argument.
    Rcx,
    /// Fifth integer argument.
    R8,
    /// Sixth integer argument.
    R9,
    /// `al` holds the number of vector registers used by a variadic call.
    Rax,
    /// The static chain pointer of nested functions.
    R10,
}

impl StashedReg {
    /// The register's name as assemblers and debuggers print it.
    pub const fn name(self) -> &'static str {
        match self {
            StashedReg::Rdi => "rdi",
            StashedReg::Rsi => "rsi",
            StashedReg::Rdx => "rdx",
            StashedReg::Rcx => "rcx",
            StashedReg::R8 => "r8",
            StashedReg::R9 => "r9",
            StashedReg::Rax => "rax",
            StashedReg::R10 => "r10",
        }
    }

    /// The register's number in instruction encodings (ModRM/REX).
    pub const fn encoding(self) -> u8 {
        match self {
            StashedReg::Rdi => 7,
            StashedReg::Rsi => 6,
            StashedReg::Rdx => 2,
            StashedReg::Rcx => 1,
            StashedReg::R8 => 8,
            StashedReg::R9 => 9,
            StashedReg::Rax => 0,
            StashedReg::R10 => 10,
        }
    }

    /// True for the six SysV integer argument registers.
    pub const fn is_argument(self) -> bool {
        !matches!(self, StashedReg::Rax | StashedReg::R10)
    }
}

/// The stashed registers in push order: `STASHED_REGS[i]` sits at `rbp - 24 - 8*i`.
pub const STASHED_REGS: [StashedReg; 8] = [
    StashedReg::Rdi,
    StashedReg::Rsi,
    StashedReg::Rdx,
    StashedReg::Rcx,
    StashedReg::R8,
    StashedReg::R9,
    StashedReg::Rax,
    StashedReg::R10,
];

/// The SysV x86-64 integer argument registers, first argument first.
pub const ARGUMENT_REGS: [StashedReg; 6] = [
    StashedReg::Rdi,
    StashedReg::Rsi,
    StashedReg::Rdx,
    StashedReg::Rcx,
    StashedReg::R8,
    StashedReg::R9,
];

/// Version of the frame layout, stored in every hook record.
pub const LAYOUT_VERSION: u16 = crate::arena::STASH_LAYOUT_VERSION;

/// Layout version of frames that also stash xmm0-xmm7 (version 1 plus the xmm area).
pub const LAYOUT_VERSION_XMM: u16 = crate::arena::STASH_LAYOUT_VERSION_XMM;

impl crate::arena::HookRecord {
    /// The x86-64 stash layout the record's trampoline uses.
    pub fn layout(&self) -> StashLayout {
        StashLayout::new(self.stack_words).with_xmm(self.xmm)
    }
}

/// Vector argument registers a trampoline can stash (xmm0-xmm7).
pub const XMM_ARGS: usize = 8;

/// Bytes of the optional xmm area (16 bytes per register).
pub const XMM_AREA_LEN: u64 = 16 * XMM_ARGS as u64;

/// Largest stack-argument window a trampoline copies.
pub const MAX_STACK_WORDS: u16 = 16;

/// Offset of the saved caller `rbp` from the frame base.
pub const SAVED_RBP_OFFSET: i64 = 0;
/// Offset of the hooked function's return address (into its caller) from the frame base.
pub const RETURN_ADDRESS_OFFSET: i64 = 8;
/// Offset of the [`STASH_MARKER`] from the frame base.
pub const MARKER_OFFSET: i64 = -8;
/// Offset of the hook record's address from the frame base.
pub const RECORD_OFFSET: i64 = -16;
/// Bytes between the frame base and the last stashed register.
const FIXED_BELOW_BASE: u64 = 16 + 8 * STASHED_REGS.len() as u64;

/// The shape of one hook's stash frame; the stack window and the optional xmm area vary between hooks.
///
/// With `xmm`, xmm0-xmm7 sit in 16-byte slots just below the general registers
/// (`xmm_offset`), before the padding and the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StashLayout {
    /// Incoming stack words (arguments 7 and up) copied below the stash for the callee.
    pub stack_words: u16,
    /// xmm0-xmm7 are stashed too (float and vector arguments).
    pub xmm: bool,
}

impl StashLayout {
    /// A layout copying `stack_words` incoming stack words, without the xmm area.
    pub const fn new(stack_words: u16) -> StashLayout {
        StashLayout {
            stack_words,
            xmm: false,
        }
    }

    /// The same layout with (or without) the xmm area.
    pub const fn with_xmm(self, xmm: bool) -> StashLayout {
        StashLayout {
            stack_words: self.stack_words,
            xmm,
        }
    }

    /// The layout version hook records store for this layout.
    pub const fn version(&self) -> u16 {
        if self.xmm {
            LAYOUT_VERSION_XMM
        } else {
            LAYOUT_VERSION
        }
    }

    /// Bytes of the xmm area (0 without it).
    pub const fn xmm_len(&self) -> u64 {
        if self.xmm {
            XMM_AREA_LEN
        } else {
            0
        }
    }

    /// Offset of stashed `xmm{i}` from the frame base (meaningful when `xmm` is set).
    pub const fn xmm_offset(&self, i: u8) -> i64 {
        -(FIXED_BELOW_BASE as i64) - XMM_AREA_LEN as i64 + 16 * i as i64
    }

    /// Offset of `reg`'s stashed value from the frame base.
    pub fn reg_offset(reg: StashedReg) -> i64 {
        let index = STASHED_REGS.iter().position(|r| *r == reg).unwrap_or(0);
        -24 - 8 * index as i64
    }

    /// Padding (0 or 8 bytes) that keeps `rsp` 16-byte aligned at the call.
    pub const fn padding(&self) -> u64 {
        if self.stack_words % 2 == 1 {
            8
        } else {
            0
        }
    }

    /// `rbp - rsp` at the trampoline's `call`: the bytes the frame occupies below its base.
    pub const fn call_sp_offset(&self) -> u64 {
        FIXED_BELOW_BASE + self.xmm_len() + self.padding() + 8 * self.stack_words as u64
    }

    /// Offset of copied stack word `i` from the frame base.
    pub const fn stack_word_offset(&self, i: u16) -> i64 {
        -(self.call_sp_offset() as i64) + 8 * i as i64
    }

    /// Frame base from the hooked function's CFA (`rsp` just after it returns to the trampoline).
    pub const fn base_from_callee_cfa(&self, cfa: u64) -> u64 {
        cfa.wrapping_add(self.call_sp_offset())
    }

    /// Bytes a reader fetches for [`StashFrame::parse`], starting at `base - call_sp_offset()`.
    pub const fn read_len(&self) -> usize {
        (self.call_sp_offset() + 16) as usize
    }
}

/// One stash frame as read back from memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StashFrame {
    /// Address of the frame base (the trampoline's `rbp`).
    pub base: u64,
    /// The caller's `rbp`, saved by `push rbp`.
    pub saved_rbp: u64,
    /// Where the hooked function returns to in its caller.
    pub return_address: u64,
    /// Address of the hook record in the arena header.
    pub record: u64,
    /// Stashed register values, in [`STASHED_REGS`] order.
    pub regs: [u64; 8],
    /// Copied incoming stack words (arguments 7 and up).
    pub stack_args: Vec<u64>,
    /// Stashed xmm0-xmm7 (low byte first), empty when the layout has no xmm area.
    pub xmm: Vec<u128>,
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
        let word = |off: i64| -> u64 {
            let at = (below + off) as usize;
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let marker = word(MARKER_OFFSET);
        if marker != STASH_MARKER {
            return Err(FrameError::BadMarker {
                base,
                found: marker,
            });
        }
        let mut regs = [0u64; 8];
        for (slot, reg) in regs.iter_mut().zip(STASHED_REGS) {
            *slot = word(StashLayout::reg_offset(reg));
        }
        let stack_args = (0..layout.stack_words)
            .map(|i| word(layout.stack_word_offset(i)))
            .collect();
        let xmm = if layout.xmm {
            (0..XMM_ARGS as u8)
                .map(|i| {
                    let off = layout.xmm_offset(i);
                    u128::from(word(off)) | (u128::from(word(off + 8)) << 64)
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(StashFrame {
            base,
            saved_rbp: word(SAVED_RBP_OFFSET),
            return_address: word(RETURN_ADDRESS_OFFSET),
            record: word(RECORD_OFFSET),
            regs,
            stack_args,
            xmm,
        })
    }

    /// The stashed value of `reg`.
    pub fn reg(&self, reg: StashedReg) -> u64 {
        let index = STASHED_REGS.iter().position(|r| *r == reg).unwrap_or(0);
        self.regs[index]
    }

    /// The six integer argument registers, first argument first.
    pub fn arguments(&self) -> [u64; 6] {
        ARGUMENT_REGS.map(|r| self.reg(r))
    }

    /// Stack pointer of the trampoline's caller after the hooked call returns (`base + 16`).
    pub fn caller_sp(&self) -> u64 {
        self.base.wrapping_add(16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_consistent() {
        assert_eq!(StashLayout::reg_offset(StashedReg::Rdi), -24);
        assert_eq!(StashLayout::reg_offset(StashedReg::R10), -80);
        for n in 0..=MAX_STACK_WORDS {
            for xmm in [false, true] {
                let l = StashLayout::new(n).with_xmm(xmm);
                assert_eq!(
                    l.call_sp_offset() % 16,
                    0,
                    "rsp must stay 16-byte aligned at the call"
                );
                assert_eq!(l.stack_word_offset(0), -(l.call_sp_offset() as i64));
                if xmm {
                    // The xmm area ends just below r10 and is 16-byte aligned.
                    assert_eq!(
                        l.xmm_offset(7) + 16,
                        StashLayout::reg_offset(StashedReg::R10)
                    );
                    assert_eq!(l.xmm_offset(0) % 16, 0);
                    if n > 0 {
                        assert!(l.stack_word_offset(n - 1) + 8 <= l.xmm_offset(0));
                    }
                }
            }
        }
    }

    #[test]
    fn parse_rejects_bad_marker_and_short_input() {
        let l = StashLayout::new(1);
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
        let mut put = |off: i64, v: u64| {
            let at = (below + off) as usize;
            bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
        };
        put(MARKER_OFFSET, STASH_MARKER);
        put(RECORD_OFFSET, 0xabc0);
        put(SAVED_RBP_OFFSET, 0x7777);
        put(RETURN_ADDRESS_OFFSET, 0x5555);
        for (i, reg) in STASHED_REGS.iter().enumerate() {
            put(StashLayout::reg_offset(*reg), 100 + i as u64);
        }
        for i in 0..3 {
            put(l.stack_word_offset(i), 900 + i as u64);
        }
        let f = StashFrame::parse(0x10_0000, &l, &bytes).unwrap();
        assert_eq!(f.arguments(), [100, 101, 102, 103, 104, 105]);
        assert_eq!(f.reg(StashedReg::R10), 107);
        assert_eq!(f.stack_args, vec![900, 901, 902]);
        assert_eq!(
            (f.record, f.saved_rbp, f.return_address),
            (0xabc0, 0x7777, 0x5555)
        );
        assert_eq!(f.caller_sp(), 0x10_0010);
        assert!(f.xmm.is_empty());
    }

    #[test]
    fn parse_reads_the_xmm_area() {
        let l = StashLayout::new(1).with_xmm(true);
        assert_eq!(l.version(), LAYOUT_VERSION_XMM);
        let below = l.call_sp_offset() as i64;
        let mut bytes = vec![0u8; l.read_len()];
        let mut put = |off: i64, v: &[u8]| {
            let at = (below + off) as usize;
            bytes[at..at + v.len()].copy_from_slice(v);
        };
        put(MARKER_OFFSET, &STASH_MARKER.to_le_bytes());
        put(
            StashLayout::reg_offset(StashedReg::Rdi),
            &7u64.to_le_bytes(),
        );
        put(l.stack_word_offset(0), &9u64.to_le_bytes());
        for i in 0..XMM_ARGS as u8 {
            let v = (f64::from(i) + 0.5).to_bits() as u128 | (u128::from(i) << 64);
            put(l.xmm_offset(i), &v.to_le_bytes());
        }
        let f = StashFrame::parse(0x10_0000, &l, &bytes).unwrap();
        assert_eq!(f.arguments()[0], 7);
        assert_eq!(f.stack_args, vec![9]);
        assert_eq!(f.xmm.len(), XMM_ARGS);
        for (i, v) in f.xmm.iter().enumerate() {
            assert_eq!(f64::from_bits(*v as u64), i as f64 + 0.5);
            assert_eq!((v >> 64) as usize, i);
        }
    }
}
