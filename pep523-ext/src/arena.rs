//! One call-through hook in its own arena, in this process's memory.
//!
//! The arena is the format `argstash bt` rediscovers in any process
//! (`trampolines::arena`): an anonymous private mapping whose first bytes are the
//! header, then one record, then (page aligned) one code slot. It is mapped
//! read-write while it is written and then read-execute: never both. A guard
//! page without access on each side keeps the kernel from merging it with a
//! neighbouring mapping (a reader finds arenas by the start of their mapping).
//!
//! Arenas are never unmapped: a thread may be inside a frame that will return
//! into the trampoline long after the hook is uninstalled.

use region::Protection;
use trampolines::arena::{ArenaHeader, HookState, HEADER_LEN, PAGE, RECORD_LEN};
use trampolines::x86_64::{build_call_through, CallThroughCode, StashLayout};
use trampolines::HookMeta;

use crate::Error;

/// Records per arena: one, so no other writer (the `argstash` CLI places its own
/// hooks in free slots of arenas it finds) ever shares a page with ours.
const CAPACITY: u32 = 1;

/// A stash trampoline calling one target, mapped for good.
#[derive(Debug)]
pub struct Hook {
    /// The arena header (its `base` is the mapping's start).
    pub header: ArenaHeader,
    /// Code and record, as written.
    pub code: CallThroughCode,
}

impl Hook {
    /// Maps an arena holding a trampoline that calls `target`, described by `meta`.
    pub fn create(target: u64, meta: &HookMeta) -> Result<Hook, Error> {
        if region::page::size() != PAGE {
            return Err(Error::PageSize(region::page::size()));
        }
        let len = ArenaHeader::new(0, CAPACITY).arena_len as usize;
        let mut mapping = region::alloc(len + 2 * PAGE, Protection::NONE)?;
        // SAFETY: the mapping is `len + 2 * PAGE` bytes long; the arena starts after its first page.
        let base = unsafe { mapping.as_mut_ptr::<u8>().add(PAGE) };
        let header = ArenaHeader::new(base as u64, CAPACITY);
        let code = build_call_through(&header, 0, target, StashLayout::new(0), meta)?;
        let record = code.record.encode()?;
        let slot = code.slot_bytes();
        // SAFETY: `base..base + len` lies inside our own fresh mapping, which nothing
        // else knows about yet; it is made writable only (not executable).
        unsafe { region::protect(base, len, Protection::READ_WRITE) }?;
        {
            // SAFETY: the range was just made writable and nothing else refers to it.
            let arena = unsafe { std::slice::from_raw_parts_mut(base, len) };
            arena[..HEADER_LEN].copy_from_slice(&header.encode());
            let at = (header.record_addr(0) - header.base) as usize;
            arena[at..at + RECORD_LEN].copy_from_slice(&record);
            let at = (header.slot_addr(0) - header.base) as usize;
            arena[at..at + slot.len()].copy_from_slice(&slot);
        }
        // SAFETY: as above; from here on the range is read-execute, never writable again
        // except the header page (data only) in `set_state`.
        unsafe { region::protect(base, len, Protection::READ_EXECUTE) }?;
        // Never unmapped (see the module docs): the guard pages stay with it.
        std::mem::forget(mapping);
        Ok(Hook { header, code })
    }

    /// The trampoline's address: what the interpreter's eval-frame pointer is set to.
    pub fn entry(&self) -> usize {
        self.code.trampoline.address as usize
    }

    /// The function the trampoline calls.
    pub fn target(&self) -> usize {
        self.code.target as usize
    }

    /// Rewrites the record with `state` (and, when activating, the install time).
    pub fn set_state(&mut self, state: HookState, installed_ns: u64) -> Result<(), Error> {
        let mut record = self.code.record.clone();
        record.state = state;
        if state == HookState::Active {
            record.installed_ns = installed_ns;
        }
        let bytes = record.encode()?;
        let page = self.header.base as *mut u8;
        debug_assert!(self.header.header_len() <= PAGE);
        // SAFETY: the first page of the arena holds only the header and the record
        // (data, never run), so it can be writable for a moment; no code is on it.
        unsafe { region::protect(page, PAGE, Protection::READ_WRITE) }?;
        let at = (self.header.record_addr(0) - self.header.base) as usize;
        // SAFETY: the page was just made writable and the record lies inside it.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), page.add(at), RECORD_LEN) };
        // SAFETY: the same page, back to read-execute like the rest of the arena.
        unsafe { region::protect(page, PAGE, Protection::READ_EXECUTE) }?;
        self.code.record = record;
        Ok(())
    }
}
