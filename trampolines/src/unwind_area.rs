//! The unwind area: a read-write companion of an arena holding each hook's
//! `.eh_frame` bytes and the storage libgcc's `__register_frame_info` links into its
//! list (a `struct object`, written by libgcc, so it cannot live in the `r-x` arena).
//!
//! ```text
//! area ─► header (UNWIND_HEADER_LEN = 64): magic "ASUNWND1" │ version │ arena base │ capacity │ slot_len
//!         slot[i] (UNWIND_SLOT_LEN = 2048), one per arena slot:
//!           +0   registered: address of the `__deregister_frame_info` that undoes the
//!                registration (0: not registered in the process)
//!           +8   eh_frame length          +12 flags (bit 0: perf map line written,
//!                bit 1: GDB JIT entry linked, bit 2: in the perf jitdump)
//!           +64  libgcc object storage (OBJECT_LEN bytes, zero until registered)
//!           +192 .eh_frame bytes (at most MAX_EH_FRAME)
//!           +512 GDB JIT entry (next, prev, symfile address, symfile size)
//!           +576 in-memory symbol file for gdb (at most MAX_JIT_ELF)
//! ```
//!
//! The arena header points to its unwind area (bytes 48..56, 0 when it has none: arenas
//! of older builds keep working, their hooks just carry no unwind information). The
//! area has its own magic and version, so the arena format itself is unchanged.

use crate::arena::PAGE;
use crate::error::FormatError;

/// Magic bytes at the start of every unwind area.
pub const UNWIND_MAGIC: [u8; 8] = *b"ASUNWND1";
/// Unwind area format version.
pub const UNWIND_VERSION: u32 = 1;
/// Size of the unwind area's header.
pub const UNWIND_HEADER_LEN: usize = 64;
/// Size of one hook's unwind slot.
pub const UNWIND_SLOT_LEN: usize = 2048;
/// Offset of the libgcc object storage inside a slot.
pub const OBJECT_OFFSET: usize = 64;
/// Bytes reserved for libgcc's `struct object` (56 bytes in GCC 12; room to grow).
pub const OBJECT_LEN: usize = 128;
/// Offset of the `.eh_frame` bytes inside a slot.
pub const EH_FRAME_OFFSET: usize = OBJECT_OFFSET + OBJECT_LEN;
/// Largest `.eh_frame` a slot holds.
pub const MAX_EH_FRAME: usize = JIT_ENTRY_OFFSET - EH_FRAME_OFFSET;
/// Offset of the GDB JIT `jit_code_entry` (next, prev, symfile address, symfile size).
pub const JIT_ENTRY_OFFSET: usize = 512;
/// Offset of the in-memory symbol file gdb reads through the JIT interface.
pub const JIT_ELF_OFFSET: usize = JIT_ENTRY_OFFSET + 64;
/// Largest in-memory symbol file a slot holds.
pub const MAX_JIT_ELF: usize = UNWIND_SLOT_LEN - JIT_ELF_OFFSET;
/// Offset in the arena header of the unwind area's address.
pub const ARENA_HEADER_UNWIND_AT: usize = 48;
/// Slot flag: a `/tmp/perf-PID.map` line was written for this hook.
pub const FLAG_PERF_MAP: u32 = 1;
/// Slot flag: the hook's symbol file is linked into the target's GDB JIT descriptor.
pub const FLAG_GDB_JIT: u32 = 2;
/// Slot flag: the hook's code and `.eh_frame` are in the process's perf jitdump (`/tmp/jit-PID.dump`).
pub const FLAG_PERF_JIT: u32 = 4;

/// Where an arena's unwind area lives and how it is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnwindArea {
    /// Address of the area.
    pub base: u64,
    /// Address of the arena it belongs to.
    pub arena: u64,
    /// Slots (the arena's capacity).
    pub capacity: u32,
}

/// One hook's unwind slot, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UnwindSlot {
    /// Address of `__deregister_frame_info` that undoes the registration, 0 when not registered.
    pub registered: u64,
    /// Slot flags ([`FLAG_PERF_MAP`]).
    pub flags: u32,
    /// The `.eh_frame` bytes (empty when the hook has none).
    pub eh_frame: Vec<u8>,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

impl UnwindArea {
    /// An area at `base` for the arena at `arena` with `capacity` slots.
    pub fn new(base: u64, arena: u64, capacity: u32) -> UnwindArea {
        UnwindArea {
            base,
            arena,
            capacity,
        }
    }

    /// Mapping length (whole pages).
    pub fn len(&self) -> u64 {
        let bytes = UNWIND_HEADER_LEN + self.capacity as usize * UNWIND_SLOT_LEN;
        (bytes.div_ceil(PAGE) * PAGE) as u64
    }

    /// Always false: an area has at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Address of slot `index`.
    pub fn slot_addr(&self, index: u32) -> u64 {
        self.base + (UNWIND_HEADER_LEN + index as usize * UNWIND_SLOT_LEN) as u64
    }

    /// Address of the libgcc object storage of slot `index`.
    pub fn object_addr(&self, index: u32) -> u64 {
        self.slot_addr(index) + OBJECT_OFFSET as u64
    }

    /// Address of the `.eh_frame` bytes of slot `index`.
    pub fn eh_frame_addr(&self, index: u32) -> u64 {
        self.slot_addr(index) + EH_FRAME_OFFSET as u64
    }

    /// Address of the GDB JIT entry of slot `index`.
    pub fn jit_entry_addr(&self, index: u32) -> u64 {
        self.slot_addr(index) + JIT_ENTRY_OFFSET as u64
    }

    /// Address of the in-memory symbol file of slot `index`.
    pub fn jit_elf_addr(&self, index: u32) -> u64 {
        self.slot_addr(index) + JIT_ELF_OFFSET as u64
    }

    /// Spare bytes after the last slot (for short-lived call arguments such as a path).
    pub fn scratch(&self) -> (u64, usize) {
        let used = UNWIND_HEADER_LEN + self.capacity as usize * UNWIND_SLOT_LEN;
        (self.base + used as u64, self.len() as usize - used)
    }

    /// The area's header.
    pub fn encode_header(&self) -> [u8; UNWIND_HEADER_LEN] {
        let mut b = [0u8; UNWIND_HEADER_LEN];
        b[0..8].copy_from_slice(&UNWIND_MAGIC);
        b[8..12].copy_from_slice(&UNWIND_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.capacity.to_le_bytes());
        b[16..24].copy_from_slice(&self.arena.to_le_bytes());
        b[24..28].copy_from_slice(&(UNWIND_SLOT_LEN as u32).to_le_bytes());
        b
    }

    /// Parses the header read at `at`, checking it belongs to the arena at `arena`.
    pub fn decode_header(at: u64, arena: u64, bytes: &[u8]) -> Result<UnwindArea, FormatError> {
        let b = bytes
            .get(..UNWIND_HEADER_LEN)
            .ok_or(FormatError::Truncated {
                needed: UNWIND_HEADER_LEN,
                got: bytes.len(),
            })?;
        if b[0..8] != UNWIND_MAGIC {
            return Err(FormatError::BadMagic);
        }
        let version = u32_at(b, 8);
        if version != UNWIND_VERSION {
            return Err(FormatError::UnsupportedVersion {
                found: version,
                supported: UNWIND_VERSION,
            });
        }
        if u64_at(b, 16) != arena {
            return Err(FormatError::Corrupt("unwind area belongs to another arena"));
        }
        if u32_at(b, 24) as usize != UNWIND_SLOT_LEN {
            return Err(FormatError::Corrupt("unwind slot size"));
        }
        let capacity = u32_at(b, 12);
        if capacity == 0 || capacity > 4096 {
            return Err(FormatError::Corrupt("unwind area capacity"));
        }
        Ok(UnwindArea::new(at, arena, capacity))
    }
}

impl UnwindSlot {
    /// Serialises a slot (object storage zeroed).
    pub fn encode(&self) -> Result<[u8; UNWIND_SLOT_LEN], FormatError> {
        if self.eh_frame.len() > MAX_EH_FRAME {
            return Err(FormatError::Corrupt(".eh_frame larger than its slot"));
        }
        let mut b = [0u8; UNWIND_SLOT_LEN];
        b[0..8].copy_from_slice(&self.registered.to_le_bytes());
        b[8..12].copy_from_slice(&(self.eh_frame.len() as u32).to_le_bytes());
        b[12..16].copy_from_slice(&self.flags.to_le_bytes());
        b[EH_FRAME_OFFSET..EH_FRAME_OFFSET + self.eh_frame.len()].copy_from_slice(&self.eh_frame);
        Ok(b)
    }

    /// Parses a slot.
    pub fn decode(bytes: &[u8]) -> Result<UnwindSlot, FormatError> {
        let b = bytes.get(..UNWIND_SLOT_LEN).ok_or(FormatError::Truncated {
            needed: UNWIND_SLOT_LEN,
            got: bytes.len(),
        })?;
        let len = u32_at(b, 8) as usize;
        if len > MAX_EH_FRAME {
            return Err(FormatError::Corrupt(".eh_frame length"));
        }
        Ok(UnwindSlot {
            registered: u64_at(b, 0),
            flags: u32_at(b, 12),
            eh_frame: b[EH_FRAME_OFFSET..EH_FRAME_OFFSET + len].to_vec(),
        })
    }
}

/// The unwind area address stored in an arena header's bytes (0: none).
pub fn unwind_area_of(arena_header: &[u8]) -> u64 {
    arena_header
        .get(ARENA_HEADER_UNWIND_AT..ARENA_HEADER_UNWIND_AT + 8)
        .map(|b| u64_at(b, 0))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_slot_roundtrip() {
        let a = UnwindArea::new(0x7000_0000, 0x5000_0000, 128);
        assert_eq!(a.len() % PAGE as u64, 0);
        assert!(a.slot_addr(127) + UNWIND_SLOT_LEN as u64 <= a.base + a.len());
        assert_eq!(
            UnwindArea::decode_header(a.base, a.arena, &a.encode_header()),
            Ok(a)
        );
        assert_eq!(
            UnwindArea::decode_header(a.base, 0x1234, &a.encode_header()),
            Err(FormatError::Corrupt("unwind area belongs to another arena"))
        );
        let s = UnwindSlot {
            registered: 0x7fff_1234,
            flags: FLAG_PERF_MAP,
            eh_frame: vec![1, 2, 3, 4, 0, 0, 0, 0],
        };
        assert_eq!(UnwindSlot::decode(&s.encode().unwrap()), Ok(s));
        let big = UnwindSlot {
            eh_frame: vec![0; MAX_EH_FRAME + 1],
            ..Default::default()
        };
        assert!(big.encode().is_err());
        let mut hostile = [0xffu8; UNWIND_SLOT_LEN];
        assert!(UnwindSlot::decode(&hostile).is_err());
        hostile[8..12].fill(0);
        assert!(UnwindSlot::decode(&hostile).is_ok());
        assert!(UnwindSlot::decode(&hostile[..10]).is_err());
    }
}
