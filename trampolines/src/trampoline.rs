//! What every architecture's emitter produces: a trampoline's machine code, the
//! address it was assembled for, and the instruction boundaries a reader needs to
//! unwind from inside it. Shared by `x86_64` and `i386` and recorded in the arena
//! format ([`crate::arena`]), so it sits at the crate root below all three.

/// The marker every stash frame holds just below the saved frame pointer
/// (`"ARGSTASH"` in memory: one 64-bit word on x86-64, two words on i386).
pub const STASH_MARKER: u64 = u64::from_le_bytes(*b"ARGSTASH");

/// Offsets of the instruction boundaries a reader needs to unwind from inside a trampoline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TrampolineOffsets {
    /// Offset just after `push rbp`.
    pub after_push_rbp: u32,
    /// Offset just after `mov rbp, rsp`.
    pub after_mov_rbp: u32,
    /// Offset just after the `call` (the return address of the hooked call).
    pub after_call: u32,
    /// Offset of the final `ret` (just after `leave`).
    pub ret: u32,
}

/// A generated trampoline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trampoline {
    /// Address the code was assembled for.
    pub address: u64,
    /// The machine code.
    pub code: Vec<u8>,
    /// Instruction boundaries inside `code`.
    pub offsets: TrampolineOffsets,
}

impl Trampoline {
    /// The absolute return address of the hooked call: identifies stash frames.
    pub fn after_call(&self) -> u64 {
        self.address + u64::from(self.offsets.after_call)
    }
}
