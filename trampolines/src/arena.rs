//! The arena: one r-x mapping in the target holding a self-describing header, one
//! hook record per hook, and one code slot per record.
//!
//! ```text
//! base ─► ┌───────────────────────────── header (HEADER_LEN = 64) ─┐
//!         │ magic "ASARENA1" │ version │ header_len │ arena_len    │
//!         │ base │ capacity │ record_len │ slot_len │ code_offset │
//!         │ unwind area address (48..56, 0 = none; see unwind_area) │
//!         ├────────────────────── record 0 (RECORD_LEN = 512) ────┤
//!         │ state │ flags │ function │ patch addr/len │ original  │
//!         │ trampoline │ after_call │ relocated │ insn map │ name │
//!         ├────────────────────── record 1 … capacity-1 ──────────┤
//!         │ version 2: one signature entry per record             │
//!         │ (SIGNATURE_LEN = 256: u16 length, parameter list text) │
//!         ├─ code_offset (page aligned) ──────────────────────────┤
//!         │ slot 0: trampoline │ relocated prologue (SLOT_LEN)    │
//!         │ slot 1 …                                              │
//!         └───────────────────────────────────────────────────────┘
//! ```
//!
//! Every field is little-endian at a fixed offset, so a reader with nothing but the
//! target's memory (a live process, a core file) rediscovers every hook. Parsing
//! never panics: malformed input yields [`FormatError`].

use crate::error::FormatError;

/// Magic bytes at the start of every arena.
pub const ARENA_MAGIC: [u8; 8] = *b"ASARENA1";
/// Format version this build writes (it reads this one and version 1).
///
/// Version 2 adds a table of user-given signatures after the records; version-1
/// arenas (no table) still parse and simply have no signatures.
pub const FORMAT_VERSION: u32 = 2;
/// The first format version, without the signature table.
pub const FORMAT_VERSION_1: u32 = 1;
/// Size of one signature entry (version 2).
pub const SIGNATURE_LEN: usize = 256;
/// Longest signature text stored (the entry less its length field).
pub const MAX_SIGNATURE: usize = SIGNATURE_LEN - 2;
/// Size of the fixed header before the records.
pub const HEADER_LEN: usize = 64;
/// Size of one hook record.
pub const RECORD_LEN: usize = 512;
/// Size of one code slot (trampoline + relocated prologue).
pub const SLOT_LEN: usize = 256;
/// Page size the arena is laid out for.
pub const PAGE: usize = 4096;
/// Longest function name stored in a record.
pub const MAX_NAME: usize = 128;
/// Longest module path stored in a record (longer paths keep their tail).
pub const MAX_MODULE: usize = 180;
/// Most original bytes stored (the longest patch).
pub const MAX_ORIGINAL: usize = 24;
/// Most entries in a record's instruction map.
pub const MAX_MAP: usize = 16;

/// Record flags bit: the stash frame has the xmm area.
const FLAG_XMM: u32 = 1;
/// Record flags bit: the hooked function is variadic.
const FLAG_VARIADIC: u32 = 2;

/// Version of the stash-frame layout, stored in every hook record (the emitters'
/// `LAYOUT_VERSION`s are this number).
pub const STASH_LAYOUT_VERSION: u16 = 1;

/// Layout version of frames that also stash xmm0-xmm7 (version 1 plus the xmm area).
pub const STASH_LAYOUT_VERSION_XMM: u16 = 2;

/// Lifecycle of a hook record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookState {
    /// Never used.
    Free,
    /// The function is patched and jumps to the trampoline.
    Active,
    /// The original bytes are back; the code slot is kept until provably unused.
    Ejected,
}

impl HookState {
    fn to_u32(self) -> u32 {
        match self {
            HookState::Free => 0,
            HookState::Active => 1,
            HookState::Ejected => 2,
        }
    }

    fn from_u32(v: u32) -> Result<HookState, FormatError> {
        Ok(match v {
            0 => HookState::Free,
            1 => HookState::Active,
            2 => HookState::Ejected,
            _ => return Err(FormatError::Corrupt("unknown hook state")),
        })
    }

    /// Lower-case name for listings.
    pub fn name(self) -> &'static str {
        match self {
            HookState::Free => "free",
            HookState::Active => "active",
            HookState::Ejected => "ejected",
        }
    }
}

/// The fixed arena header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArenaHeader {
    /// Address of the arena (the header's own address, checked on read).
    pub base: u64,
    /// Total mapping length.
    pub arena_len: u64,
    /// Number of records.
    pub capacity: u32,
    /// Offset of code slot 0 from `base`.
    pub code_offset: u32,
    /// Format version ([`FORMAT_VERSION`] for new arenas).
    pub version: u32,
}

fn round_up(v: usize, to: usize) -> usize {
    v.div_ceil(to) * to
}

impl ArenaHeader {
    /// A header for a new arena at `base` with `capacity` records.
    pub fn new(base: u64, capacity: u32) -> ArenaHeader {
        ArenaHeader::with_version(base, capacity, FORMAT_VERSION)
    }

    /// The header an arena of format `version` at `base` with `capacity` records has.
    pub fn with_version(base: u64, capacity: u32, version: u32) -> ArenaHeader {
        let tables = Self::tables_len(capacity, version);
        let code_offset = round_up(tables, PAGE);
        let arena_len = round_up(code_offset + capacity as usize * SLOT_LEN, PAGE);
        ArenaHeader {
            base,
            arena_len: arena_len as u64,
            capacity,
            code_offset: code_offset as u32,
            version,
        }
    }

    fn tables_len(capacity: u32, version: u32) -> usize {
        let per_record = if version >= 2 {
            RECORD_LEN + SIGNATURE_LEN
        } else {
            RECORD_LEN
        };
        HEADER_LEN + capacity as usize * per_record
    }

    /// Bytes from `base` that hold the header, all records and (version 2) all signatures.
    pub fn header_len(&self) -> usize {
        Self::tables_len(self.capacity, self.version)
    }

    /// Address of the signature entry of record `index`; `None` in version-1 arenas.
    pub fn signature_addr(&self, index: u32) -> Option<u64> {
        (self.version >= 2 && index < self.capacity).then(|| {
            self.base
                + (HEADER_LEN
                    + self.capacity as usize * RECORD_LEN
                    + index as usize * SIGNATURE_LEN) as u64
        })
    }

    /// Address of record `index`.
    pub fn record_addr(&self, index: u32) -> u64 {
        self.base + (HEADER_LEN + index as usize * RECORD_LEN) as u64
    }

    /// Index of the record at `addr`, if `addr` is exactly a record of this arena.
    pub fn record_index(&self, addr: u64) -> Option<u32> {
        let off = addr.checked_sub(self.base + HEADER_LEN as u64)?;
        let index = off / RECORD_LEN as u64;
        (off % RECORD_LEN as u64 == 0 && index < u64::from(self.capacity)).then_some(index as u32)
    }

    /// Address of code slot `index`.
    pub fn slot_addr(&self, index: u32) -> u64 {
        self.base + u64::from(self.code_offset) + index as u64 * SLOT_LEN as u64
    }

    /// True when `addr` lies inside the arena.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr < self.base + self.arena_len
    }

    /// Serialises the header (without records).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&ARENA_MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&(self.header_len() as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.arena_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.base.to_le_bytes());
        b[32..36].copy_from_slice(&self.capacity.to_le_bytes());
        b[36..40].copy_from_slice(&(RECORD_LEN as u32).to_le_bytes());
        b[40..44].copy_from_slice(&(SLOT_LEN as u32).to_le_bytes());
        b[44..48].copy_from_slice(&self.code_offset.to_le_bytes());
        b
    }

    /// Parses a header read from address `at`; checks magic, version, sizes and self-address.
    pub fn decode(at: u64, bytes: &[u8]) -> Result<ArenaHeader, FormatError> {
        let b = bytes.get(..HEADER_LEN).ok_or(FormatError::Truncated {
            needed: HEADER_LEN,
            got: bytes.len(),
        })?;
        if b[0..8] != ARENA_MAGIC {
            return Err(FormatError::BadMagic);
        }
        let version = u32_at(b, 8);
        if version != FORMAT_VERSION && version != FORMAT_VERSION_1 {
            return Err(FormatError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let h = ArenaHeader {
            base: u64_at(b, 24),
            arena_len: u64_at(b, 16),
            capacity: u32_at(b, 32),
            code_offset: u32_at(b, 44),
            version,
        };
        if h.base != at {
            return Err(FormatError::Corrupt(
                "header base does not match its address",
            ));
        }
        if u32_at(b, 36) as usize != RECORD_LEN || u32_at(b, 40) as usize != SLOT_LEN {
            return Err(FormatError::Corrupt("record or slot size"));
        }
        if h.capacity == 0
            || h.capacity > 4096
            || h != ArenaHeader::with_version(at, h.capacity, version)
        {
            return Err(FormatError::Corrupt("capacity and lengths disagree"));
        }
        if u32_at(b, 12) as usize != h.header_len() {
            return Err(FormatError::Corrupt("header length"));
        }
        Ok(h)
    }
}

/// One hook as recorded in the arena.
///
/// A record with no patch (`patch_addr` 0, no original bytes) describes a
/// *call-through* hook: its trampoline is reached through a function pointer
/// that its owner set (CPython's PEP 523 frame-evaluation slot, set by the
/// `argstash` Python extension) instead of a patched entry, and `function` is
/// what the trampoline calls. Its stash frames read like any other; there is
/// nothing to restore in code, only the pointer's owner can remove it
/// (see [`HookRecord::is_call_through`] and the emitters' call-through hooks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRecord {
    /// Lifecycle state.
    pub state: HookState,
    /// The function kept its `endbr64` in front of the patch.
    pub endbr64: bool,
    /// Function entry address.
    pub function: u64,
    /// Function size from its symbol.
    pub function_size: u64,
    /// First patched byte.
    pub patch_addr: u64,
    /// The original bytes at `patch_addr` (their length is the patch length).
    pub original: Vec<u8>,
    /// Stash layout version ([`STASH_LAYOUT_VERSION`] or [`STASH_LAYOUT_VERSION_XMM`]).
    pub layout_version: u16,
    /// Copied stack words.
    pub stack_words: u16,
    /// The frame stashes xmm0-xmm7 too (flags bit 1; layout version 2).
    pub xmm: bool,
    /// The function is variadic: its window is a configured size (flags bit 2).
    pub variadic: bool,
    /// Trampoline address.
    pub trampoline: u64,
    /// Trampoline length in bytes.
    pub trampoline_len: u32,
    /// Offsets of the trampoline's instruction boundaries.
    pub offsets: crate::trampoline::TrampolineOffsets,
    /// Relocated prologue address.
    pub relocated: u64,
    /// Relocated prologue length in bytes.
    pub relocated_len: u32,
    /// `(offset from patch_addr, offset in relocated code)` per moved instruction and the jump back.
    pub map: Vec<(u8, u16)>,
    /// When the hook was installed (Unix time, nanoseconds).
    pub installed_ns: u64,
    /// Function name.
    pub name: String,
    /// Path of the module holding the function.
    pub module: String,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn text_field(b: &[u8], len_at: usize, data_at: usize, max: usize) -> Result<String, FormatError> {
    let len = u16_at(b, len_at) as usize;
    if len > max {
        return Err(FormatError::Corrupt("string length"));
    }
    Ok(String::from_utf8_lossy(&b[data_at..data_at + len]).into_owned())
}

fn clip_tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

fn clip_head(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl HookRecord {
    /// Length of the patch.
    pub fn patch_len(&self) -> usize {
        self.original.len()
    }

    /// True for a call-through hook: reached through a function pointer, no patched bytes.
    pub fn is_call_through(&self) -> bool {
        self.original.is_empty() && self.patch_addr == 0
    }

    /// The trampoline's after-call address: the return address that marks a stash frame.
    pub fn after_call(&self) -> u64 {
        self.trampoline + u64::from(self.offsets.after_call)
    }

    /// True when `addr` lies in the trampoline.
    pub fn in_trampoline(&self, addr: u64) -> bool {
        addr >= self.trampoline && addr < self.trampoline + u64::from(self.trampoline_len)
    }

    /// True when `addr` lies in the relocated prologue.
    pub fn in_relocated(&self, addr: u64) -> bool {
        addr >= self.relocated && addr < self.relocated + u64::from(self.relocated_len)
    }

    /// True when `addr` lies in the patched bytes (their first byte included).
    pub fn in_patch(&self, addr: u64) -> bool {
        addr >= self.patch_addr && addr < self.patch_addr + self.patch_len() as u64
    }

    /// True when `addr` lies strictly inside the patched bytes (not on their first byte).
    pub fn inside_patch(&self, addr: u64) -> bool {
        addr > self.patch_addr && addr < self.patch_addr + self.patch_len() as u64
    }

    /// Relocated address for original address `addr` inside the patch, at an instruction boundary.
    pub fn original_to_relocated(&self, addr: u64) -> Option<u64> {
        let off = addr.checked_sub(self.patch_addr)?;
        self.map
            .iter()
            .find(|(o, _)| u64::from(*o) == off)
            .map(|(_, r)| self.relocated + u64::from(*r))
    }

    /// Original address for relocated address `addr`, at an instruction boundary (the jump back maps to the end of the patch).
    pub fn relocated_to_original(&self, addr: u64) -> Option<u64> {
        let off = addr.checked_sub(self.relocated)?;
        self.map
            .iter()
            .find(|(_, r)| u64::from(*r) == off)
            .map(|(o, _)| self.patch_addr + u64::from(*o))
    }

    /// Serialises the record into exactly [`RECORD_LEN`] bytes.
    pub fn encode(&self) -> Result<[u8; RECORD_LEN], FormatError> {
        if self.original.len() > MAX_ORIGINAL || (self.original.is_empty() && self.patch_addr != 0)
        {
            return Err(FormatError::Corrupt("patch length"));
        }
        if self.map.len() > MAX_MAP {
            return Err(FormatError::Corrupt("instruction map too long"));
        }
        let mut b = [0u8; RECORD_LEN];
        b[0..4].copy_from_slice(&self.state.to_u32().to_le_bytes());
        let flags = u32::from(self.endbr64)
            | (u32::from(self.xmm) << FLAG_XMM)
            | (u32::from(self.variadic) << FLAG_VARIADIC);
        b[4..8].copy_from_slice(&flags.to_le_bytes());
        b[8..16].copy_from_slice(&self.function.to_le_bytes());
        b[16..24].copy_from_slice(&self.function_size.to_le_bytes());
        b[24..32].copy_from_slice(&self.patch_addr.to_le_bytes());
        b[32] = self.original.len() as u8;
        b[33] = self.map.len() as u8;
        b[34..36].copy_from_slice(&self.stack_words.to_le_bytes());
        b[36..38].copy_from_slice(&self.layout_version.to_le_bytes());
        b[40..40 + self.original.len()].copy_from_slice(&self.original);
        b[64..72].copy_from_slice(&self.trampoline.to_le_bytes());
        b[72..76].copy_from_slice(&self.trampoline_len.to_le_bytes());
        b[76..80].copy_from_slice(&self.offsets.after_call.to_le_bytes());
        b[80..88].copy_from_slice(&self.relocated.to_le_bytes());
        b[88..92].copy_from_slice(&self.relocated_len.to_le_bytes());
        b[92] = self.offsets.after_push_rbp as u8;
        b[93] = self.offsets.after_mov_rbp as u8;
        b[94..96].copy_from_slice(&(self.offsets.ret as u16).to_le_bytes());
        for (i, (o, r)) in self.map.iter().enumerate() {
            let at = 96 + 4 * i;
            b[at] = *o;
            b[at + 2..at + 4].copy_from_slice(&r.to_le_bytes());
        }
        b[160..168].copy_from_slice(&self.installed_ns.to_le_bytes());
        let name = clip_head(&self.name, MAX_NAME);
        let module = clip_tail(&self.module, MAX_MODULE);
        b[192..194].copy_from_slice(&(name.len() as u16).to_le_bytes());
        b[194..196].copy_from_slice(&(module.len() as u16).to_le_bytes());
        b[196..196 + name.len()].copy_from_slice(name.as_bytes());
        b[324..324 + module.len()].copy_from_slice(module.as_bytes());
        Ok(b)
    }

    /// Parses a record; `Free` records parse with empty fields.
    pub fn decode(bytes: &[u8]) -> Result<HookRecord, FormatError> {
        let b = bytes.get(..RECORD_LEN).ok_or(FormatError::Truncated {
            needed: RECORD_LEN,
            got: bytes.len(),
        })?;
        let state = HookState::from_u32(u32_at(b, 0))?;
        let patch_len = b[32] as usize;
        let map_len = b[33] as usize;
        // No patch bytes: a call-through hook, which has no patch address either.
        let no_patch = patch_len == 0 && u64_at(b, 24) == 0;
        if state != HookState::Free
            && ((patch_len == 0 && !no_patch) || patch_len > MAX_ORIGINAL || map_len > MAX_MAP)
        {
            return Err(FormatError::Corrupt("patch or map length"));
        }
        let flags = u32_at(b, 4);
        let xmm = flags & (1 << FLAG_XMM) != 0;
        let layout_version = u16_at(b, 36);
        // Records written before the xmm area existed carry version 1 and no xmm flag.
        let expected = if xmm {
            STASH_LAYOUT_VERSION_XMM
        } else {
            STASH_LAYOUT_VERSION
        };
        if state != HookState::Free && layout_version != expected {
            return Err(FormatError::Corrupt("stash layout version"));
        }
        let patch_len = patch_len.min(MAX_ORIGINAL);
        let map = (0..map_len.min(MAX_MAP))
            .map(|i| (b[96 + 4 * i], u16_at(b, 96 + 4 * i + 2)))
            .collect();
        let record = HookRecord {
            state,
            endbr64: flags & 1 == 1,
            xmm,
            variadic: flags & (1 << FLAG_VARIADIC) != 0,
            function: u64_at(b, 8),
            function_size: u64_at(b, 16),
            patch_addr: u64_at(b, 24),
            original: b[40..40 + patch_len].to_vec(),
            stack_words: u16_at(b, 34),
            layout_version,
            trampoline: u64_at(b, 64),
            trampoline_len: u32_at(b, 72),
            offsets: crate::trampoline::TrampolineOffsets {
                after_push_rbp: u32::from(b[92]),
                after_mov_rbp: u32::from(b[93]),
                after_call: u32_at(b, 76),
                ret: u32::from(u16_at(b, 94)),
            },
            relocated: u64_at(b, 80),
            relocated_len: u32_at(b, 88),
            map,
            installed_ns: u64_at(b, 160),
            name: text_field(b, 192, 196, MAX_NAME)?,
            module: text_field(b, 194, 324, MAX_MODULE)?,
        };
        if state != HookState::Free && !record.ranges_fit() {
            return Err(FormatError::Corrupt("address range past the end of memory"));
        }
        Ok(record)
    }

    /// True when every address the record's methods compute (trampoline,
    /// after-call, relocated code, patch, map entries) stays below 2^64; a record
    /// read from a target whose ranges wrap is corrupt.
    fn ranges_fit(&self) -> bool {
        let max_map = |f: fn(&(u8, u16)) -> u64| self.map.iter().map(f).max().unwrap_or(0);
        let fits = |base: u64, len: u64| base.checked_add(len).is_some();
        fits(self.trampoline, u64::from(self.trampoline_len))
            && fits(self.trampoline, u64::from(self.offsets.after_call))
            && fits(self.relocated, u64::from(self.relocated_len))
            && fits(self.relocated, max_map(|m| u64::from(m.1)))
            && fits(self.patch_addr, self.patch_len() as u64)
            && fits(self.patch_addr, max_map(|m| u64::from(m.0)))
    }
}

/// Serialises a signature entry (an empty text means "no signature").
pub fn encode_signature(text: &str) -> Result<[u8; SIGNATURE_LEN], FormatError> {
    if text.len() > MAX_SIGNATURE {
        return Err(FormatError::Corrupt("signature too long"));
    }
    let mut b = [0u8; SIGNATURE_LEN];
    b[0..2].copy_from_slice(&(text.len() as u16).to_le_bytes());
    b[2..2 + text.len()].copy_from_slice(text.as_bytes());
    Ok(b)
}

/// Parses a signature entry; `None` when empty.
pub fn decode_signature(bytes: &[u8]) -> Result<Option<String>, FormatError> {
    let b = bytes.get(..SIGNATURE_LEN).ok_or(FormatError::Truncated {
        needed: SIGNATURE_LEN,
        got: bytes.len(),
    })?;
    let t = text_field(b, 0, 2, MAX_SIGNATURE)?;
    Ok((!t.is_empty()).then_some(t))
}

/// A parsed arena: its header and every record, indexed by slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arena {
    /// The header.
    pub header: ArenaHeader,
    /// Records, `records[i]` describing slot `i`.
    pub records: Vec<HookRecord>,
    /// User-given signatures (parameter lists), `signatures[i]` for slot `i`
    /// (all `None` in version-1 arenas).
    pub signatures: Vec<Option<String>>,
}

impl Arena {
    /// Parses an arena from the first `header.header_len()` bytes read at `at`.
    pub fn decode(at: u64, bytes: &[u8]) -> Result<Arena, FormatError> {
        let header = ArenaHeader::decode(at, bytes)?;
        let need = header.header_len();
        if bytes.len() < need {
            return Err(FormatError::Truncated {
                needed: need,
                got: bytes.len(),
            });
        }
        let records = (0..header.capacity as usize)
            .map(|i| HookRecord::decode(&bytes[HEADER_LEN + i * RECORD_LEN..]))
            .collect::<Result<Vec<_>, _>>()?;
        let table = HEADER_LEN + header.capacity as usize * RECORD_LEN;
        let signatures = (0..header.capacity as usize)
            .map(|i| {
                if header.version < 2 || records[i].state == HookState::Free {
                    return Ok(None);
                }
                decode_signature(&bytes[table + i * SIGNATURE_LEN..])
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Arena {
            header,
            records,
            signatures,
        })
    }

    /// The user-given signature (parameter list) of the hook in `slot`, if any.
    pub fn signature(&self, slot: u32) -> Option<&str> {
        self.signatures.get(slot as usize)?.as_deref()
    }

    /// Records that are not free, with their slot index.
    pub fn hooks(&self) -> impl Iterator<Item = (u32, &HookRecord)> {
        self.records
            .iter()
            .enumerate()
            .filter(|(_, r)| r.state != HookState::Free)
            .map(|(i, r)| (i as u32, r))
    }

    /// The first never-used slot.
    pub fn free_slot(&self) -> Option<u32> {
        self.records
            .iter()
            .position(|r| r.state == HookState::Free)
            .map(|i| i as u32)
    }

    /// The active hook whose function entry is `function`.
    pub fn active_for(&self, function: u64) -> Option<(u32, &HookRecord)> {
        self.hooks()
            .find(|(_, r)| r.state == HookState::Active && r.function == function)
    }

    /// The hook whose trampoline after-call address is `addr` (active or ejected).
    pub fn by_after_call(&self, addr: u64) -> Option<&HookRecord> {
        self.hooks()
            .map(|(_, r)| r)
            .find(|r| r.after_call() == addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> HookRecord {
        HookRecord {
            state: HookState::Active,
            endbr64: true,
            function: 0x5555_0000_1130,
            function_size: 42,
            patch_addr: 0x5555_0000_1134,
            original: vec![0x55, 0x48, 0x89, 0xe5, 0x53],
            layout_version: 1,
            stack_words: 3,
            xmm: false,
            variadic: false,
            trampoline: 0x5555_1000_0000,
            trampoline_len: 77,
            offsets: crate::trampoline::TrampolineOffsets {
                after_push_rbp: 5,
                after_mov_rbp: 8,
                after_call: 70,
                ret: 71,
            },
            relocated: 0x5555_1000_0060,
            relocated_len: 10,
            map: vec![(0, 0), (1, 1), (4, 4), (5, 5)],
            installed_ns: 123,
            name: "bar".into(),
            module: "/opt/app/prog".into(),
        }
    }

    #[test]
    fn records_whose_ranges_wrap_are_corrupt() {
        // Found by the fuzzer (fuzz/regressions/arena): a record read from a target
        // with its trampoline or relocated code at the top of the address space made
        // `in_trampoline` and `original_to_relocated` overflow.
        for corrupt in [
            HookRecord {
                trampoline: u64::MAX - 10,
                ..sample()
            },
            HookRecord {
                relocated: u64::MAX - 3,
                ..sample()
            },
            HookRecord {
                patch_addr: u64::MAX - 2,
                ..sample()
            },
        ] {
            let bytes = corrupt.encode().unwrap();
            assert_eq!(
                HookRecord::decode(&bytes),
                Err(FormatError::Corrupt("address range past the end of memory")),
                "{corrupt:?}"
            );
        }
        let fine = sample();
        assert_eq!(HookRecord::decode(&fine.encode().unwrap()).unwrap(), fine);
    }

    #[test]
    fn header_roundtrip_and_geometry() {
        let h = ArenaHeader::new(0x7000_0000, 128);
        assert_eq!(h.code_offset as usize % PAGE, 0);
        assert!(h.code_offset as usize >= h.header_len());
        assert_eq!(h.arena_len as usize % PAGE, 0);
        assert_eq!(ArenaHeader::decode(0x7000_0000, &h.encode()).unwrap(), h);
        assert_eq!(
            ArenaHeader::decode(0x7000_1000, &h.encode()),
            Err(FormatError::Corrupt(
                "header base does not match its address"
            ))
        );
        assert_eq!(h.record_index(h.record_addr(5)), Some(5));
        assert_eq!(h.record_index(h.record_addr(5) + 1), None);
        assert!(h.contains(h.slot_addr(127) + SLOT_LEN as u64 - 1));
    }

    #[test]
    fn record_roundtrip_and_maps() {
        let r = sample();
        let back = HookRecord::decode(&r.encode().unwrap()).unwrap();
        assert_eq!(back, r);
        assert_eq!(
            r.original_to_relocated(r.patch_addr + 4),
            Some(r.relocated + 4)
        );
        assert_eq!(
            r.relocated_to_original(r.relocated + 5),
            Some(r.patch_addr + 5)
        );
        assert!(r.inside_patch(r.patch_addr + 1) && !r.inside_patch(r.patch_addr));
        assert_eq!(r.after_call(), r.trampoline + 70);
    }

    #[test]
    fn xmm_and_variadic_flags_roundtrip_and_version_is_checked() {
        let mut r = sample();
        r.xmm = true;
        r.variadic = true;
        r.layout_version = STASH_LAYOUT_VERSION_XMM;
        let back = HookRecord::decode(&r.encode().unwrap()).unwrap();
        assert_eq!(back, r);
        assert!(back.layout().xmm);
        // An xmm flag without the matching layout version is refused, not misread.
        r.layout_version = 1;
        assert_eq!(
            HookRecord::decode(&r.encode().unwrap()),
            Err(FormatError::Corrupt("stash layout version"))
        );
        // A version-1 record (as older argstash wrote it) parses without the new flags.
        let old = sample();
        let back = HookRecord::decode(&old.encode().unwrap()).unwrap();
        assert!(!back.xmm && !back.variadic);
    }

    #[test]
    fn hostile_bytes_never_panic() {
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for _ in 0..2000 {
            let mut b = vec![0u8; RECORD_LEN + HEADER_LEN];
            for v in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *v = x as u8;
            }
            b[0] = (x % 3) as u8;
            b[1..4].fill(0);
            let _ = HookRecord::decode(&b);
            let _ = Arena::decode(0, &b);
            b[..8].copy_from_slice(&ARENA_MAGIC);
            let _ = Arena::decode(0, &b);
        }
        assert_eq!(
            Arena::decode(0, &[1, 2, 3]),
            Err(FormatError::Truncated {
                needed: HEADER_LEN,
                got: 3
            })
        );
    }

    #[test]
    fn version_1_arenas_still_parse_and_signatures_roundtrip() {
        let v1 = ArenaHeader::with_version(0x7000_0000, 4, FORMAT_VERSION_1);
        let mut bytes = v1.encode().to_vec();
        bytes.resize(v1.header_len(), 0);
        let r = sample();
        bytes[HEADER_LEN..HEADER_LEN + RECORD_LEN].copy_from_slice(&r.encode().unwrap());
        let a = Arena::decode(0x7000_0000, &bytes).unwrap();
        assert_eq!(a.header.version, 1);
        assert_eq!(a.records[0], r);
        assert_eq!(a.signature(0), None);
        assert_eq!(v1.signature_addr(0), None);

        let v2 = ArenaHeader::new(0x7000_0000, 4);
        assert!(v2.header_len() > v1.header_len());
        let mut bytes = v2.encode().to_vec();
        bytes.resize(v2.header_len(), 0);
        bytes[HEADER_LEN..HEADER_LEN + RECORD_LEN].copy_from_slice(&r.encode().unwrap());
        let at = (v2.signature_addr(0).unwrap() - v2.base) as usize;
        bytes[at..at + SIGNATURE_LEN]
            .copy_from_slice(&encode_signature("int, const char *").unwrap());
        let a = Arena::decode(0x7000_0000, &bytes).unwrap();
        assert_eq!(a.signature(0), Some("int, const char *"));
        assert!(encode_signature(&"x".repeat(MAX_SIGNATURE + 1)).is_err());
    }

    #[test]
    fn call_through_records_have_no_patch_and_roundtrip() {
        let mut r = sample();
        r.patch_addr = 0;
        r.original.clear();
        r.relocated = 0;
        r.relocated_len = 0;
        r.map.clear();
        assert!(r.is_call_through() && !sample().is_call_through());
        let back = HookRecord::decode(&r.encode().unwrap()).unwrap();
        assert_eq!(back, r);
        assert!(!back.inside_patch(0) && !back.in_relocated(0));
        // Patch bytes without an address, or an address without bytes, stay corrupt.
        r.patch_addr = 0x5555_0000_1134;
        assert_eq!(r.encode(), Err(FormatError::Corrupt("patch length")));
        let mut b = sample().encode().unwrap();
        b[32] = 0;
        assert_eq!(
            HookRecord::decode(&b),
            Err(FormatError::Corrupt("patch or map length"))
        );
    }

    #[test]
    fn long_names_are_clipped() {
        let mut r = sample();
        r.name = "n".repeat(300);
        r.module = format!("/{}", "m".repeat(300));
        let back = HookRecord::decode(&r.encode().unwrap()).unwrap();
        assert_eq!(back.name.len(), MAX_NAME);
        assert_eq!(back.module.len(), MAX_MODULE);
    }
}
