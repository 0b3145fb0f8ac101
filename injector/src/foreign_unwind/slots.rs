//! The unwind area of an arena and its per-hook slots, as they sit in the target:
//! creating the area, writing a hook's `.eh_frame` into its slot, and reading and
//! updating a slot's registration state and flags. Everything that tells another
//! unwinder about a hook ([`super::gdb_jit`], [`super::perf_jit`], the perf map,
//! libgcc) reads the hook from here.

use trampolines::arena::{ArenaHeader, HookRecord, HEADER_LEN};
use trampolines::unwind_area::{
    unwind_area_of, UnwindArea, UnwindSlot, ARENA_HEADER_UNWIND_AT, MAX_EH_FRAME,
    UNWIND_HEADER_LEN, UNWIND_SLOT_LEN,
};
use trampolines::x86_64::{hook_eh_frame, HookCodeRanges};
use trampolines::CodegenError;
use trampolines::HookCode;

use crate::error::Error;
use crate::memory::{Memory, MemoryError, WriteMemory};
use crate::ptrace::session::Session;

/// `registered` value of a slot whose registration call was released unfinished: it
/// may or may not complete, so it is never deregistered (the area is never unmapped).
pub(crate) const REGISTRATION_PENDING: u64 = u64::MAX;

/// Offset of a slot's `registered` word (see [`UnwindSlot::encode`]).
const REGISTERED_AT: u64 = 0;
/// Offset of a slot's flags word (see [`UnwindSlot::encode`]).
const FLAGS_AT: u64 = 12;

/// One hook as registration needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnwindHook {
    /// Function name.
    pub name: String,
    /// The arena's unwind area.
    pub area: UnwindArea,
    /// Slot index.
    pub slot: u32,
    /// Trampoline address and length.
    pub trampoline: (u64, u32),
    /// Relocated prologue address and length.
    pub relocated: (u64, u32),
}

/// Why a hook's `.eh_frame` could not be made for its slot.
#[derive(Debug, thiserror::Error)]
pub enum EhFrameError {
    /// The hook's code ranges cannot be described.
    #[error(transparent)]
    Codegen(#[from] CodegenError),
    /// The description is larger than a slot holds.
    #[error(".eh_frame of {len} bytes does not fit its {MAX_EH_FRAME}-byte slot")]
    TooLarge {
        /// Its length.
        len: usize,
    },
}

/// Maps the memory of a new unwind area for `arena` (inside the stop), not yet initialised.
pub fn map_area(session: &mut Session, arena: &ArenaHeader) -> Result<UnwindArea, Error> {
    let len = UnwindArea::new(0, arena.base, arena.capacity).len();
    let base = session.remote_mmap(
        0,
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
    )?;
    Ok(UnwindArea::new(base, arena.base, arena.capacity))
}

/// Writes the header of the unwind area `area` mapped by [`map_area`] and points the arena header at it.
pub fn init_area(
    mem: &dyn WriteMemory,
    arena: &ArenaHeader,
    area: &UnwindArea,
) -> Result<(), Error> {
    mem.write(area.base, &area.encode_header())?;
    mem.write(
        arena.base + ARENA_HEADER_UNWIND_AT as u64,
        &area.base.to_le_bytes(),
    )?;
    Ok(())
}

/// The unwind area of `arena`, if it has a valid one.
pub fn read_area(mem: &dyn Memory, arena: &ArenaHeader) -> Option<UnwindArea> {
    let head = mem.read_vec(arena.base, HEADER_LEN).ok()?;
    let at = unwind_area_of(&head);
    if at == 0 {
        return None;
    }
    let bytes = mem.read_vec(at, UNWIND_HEADER_LEN).ok()?;
    UnwindArea::decode_header(at, arena.base, &bytes).ok()
}

/// The `.eh_frame` bytes for a generated hook, if they fit a slot.
pub fn eh_frame_for(code: &HookCode) -> Result<Vec<u8>, EhFrameError> {
    let unwind = hook_eh_frame(&HookCodeRanges {
        trampoline: code.trampoline.address,
        trampoline_len: code.trampoline.code.len() as u32,
        offsets: code.trampoline.offsets,
        relocated: code.relocated.address,
        relocated_code: &code.relocated.code,
    })?;
    if unwind.eh_frame.len() > MAX_EH_FRAME {
        return Err(EhFrameError::TooLarge {
            len: unwind.eh_frame.len(),
        });
    }
    Ok(unwind.eh_frame)
}

/// Writes a hook's unwind slot (inside the stop); `None` when its arena has no unwind area
/// or the hook cannot be described.
pub fn write_slot(
    mem: &dyn WriteMemory,
    arena: &ArenaHeader,
    code: &HookCode,
) -> Result<Option<UnwindArea>, Error> {
    let Some(area) = read_area(mem, arena) else {
        return Ok(None);
    };
    let Ok(eh_frame) = eh_frame_for(code) else {
        return Ok(None);
    };
    let slot = UnwindSlot {
        registered: 0,
        flags: 0,
        eh_frame,
    };
    let bytes = slot.encode().map_err(|source| Error::Format {
        addr: area.base,
        source,
    })?;
    mem.write(area.slot_addr(code.slot), &bytes)?;
    Ok(Some(area))
}

/// The hook described by `record` in slot `slot` of an arena whose unwind area is `area`.
pub fn hook_of(area: UnwindArea, slot: u32, record: &HookRecord) -> UnwindHook {
    UnwindHook {
        name: record.name.clone(),
        area,
        slot,
        trampoline: (record.trampoline, record.trampoline_len),
        relocated: (record.relocated, record.relocated_len),
    }
}

/// The slot of `hook`, as the target holds it.
pub(crate) fn read_slot(mem: &dyn Memory, hook: &UnwindHook) -> Result<UnwindSlot, Error> {
    let bytes = mem.read_vec(hook.area.slot_addr(hook.slot), UNWIND_SLOT_LEN)?;
    UnwindSlot::decode(&bytes).map_err(|source| Error::Format {
        addr: hook.area.base,
        source,
    })
}

/// Sets the slot's `registered` word: the deregistration function, 0, or
/// [`REGISTRATION_PENDING`].
pub(crate) fn set_registered(
    mem: &dyn WriteMemory,
    hook: &UnwindHook,
    value: u64,
) -> Result<(), MemoryError> {
    mem.write(
        hook.area.slot_addr(hook.slot) + REGISTERED_AT,
        &value.to_le_bytes(),
    )
}

/// Sets the slot's flags (`FLAG_*` of [`trampolines::unwind_area`]).
pub(crate) fn set_flags(
    mem: &dyn WriteMemory,
    hook: &UnwindHook,
    flags: u32,
) -> Result<(), MemoryError> {
    mem.write(
        hook.area.slot_addr(hook.slot) + FLAGS_AT,
        &flags.to_le_bytes(),
    )
}
