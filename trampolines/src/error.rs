//! Errors of code generation, prologue analysis and format parsing.

use thiserror::Error;

/// A stash frame could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    /// Fewer bytes than the layout needs were supplied.
    #[error("stash frame needs {needed} bytes, got {got}")]
    Truncated {
        /// Bytes the layout needs.
        needed: usize,
        /// Bytes supplied.
        got: usize,
    },
    /// The marker word is not [`crate::STASH_MARKER`]: this is not a stash frame.
    #[error("no stash marker at frame 0x{base:x} (found 0x{found:016x})")]
    BadMarker {
        /// Frame base that was checked.
        base: u64,
        /// The word found where the marker belongs.
        found: u64,
    },
}

/// Why a function's entry cannot be patched. Offsets are from the function's start.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PlanError {
    /// The function is shorter than the bytes the patch overwrites.
    #[error("the function is {size} bytes long but the patch needs {needed} bytes from its entry: too short to hook")]
    TooShort {
        /// Function size from its symbol.
        size: u64,
        /// Bytes needed from the start (including a kept `endbr64`).
        needed: u64,
    },
    /// The function is shorter than the patch and the bytes after it cannot be borrowed.
    #[error("the function is {size} bytes long but the patch needs {needed} bytes from its entry, and the bytes after it cannot be used: {why}: too short to hook")]
    TooShortNoPadding {
        /// Function size from its symbol.
        size: u64,
        /// Bytes needed from the start (including a kept `endbr64`).
        needed: u64,
        /// Why the bytes after the function are not usable.
        why: String,
    },
    /// The function returns twice (`setjmp`, `vfork`, ...).
    #[error("it returns twice (like setjmp or vfork): its second return would use the trampoline's frame after it is gone")]
    ReturnsTwice,
    /// A jump table sends an indirect jump into the middle of the patch.
    #[error("the indirect jump at +0x{from:x} has a jump-table entry to +0x{to:x}, inside the bytes the patch overwrites (+0x{patch_start:x}..+0x{patch_end:x})")]
    TableIntoPatch {
        /// Offset of the indirect jump.
        from: u64,
        /// Offset of the table entry's target.
        to: u64,
        /// First patched offset.
        patch_start: u64,
        /// One past the last patched offset.
        patch_end: u64,
    },
    /// An indirect jump's targets are unknown and the patch covers more than one instruction.
    #[error("the indirect jump at +0x{from:x} has targets that cannot be bounded and the patch (+0x{patch_start:x}..+0x{patch_end:x}) covers more than one instruction, one of which it might land on")]
    UnboundedIndirectJump {
        /// Offset of the indirect jump.
        from: u64,
        /// First patched offset.
        patch_start: u64,
        /// One past the last patched offset.
        patch_end: u64,
    },
    /// The symbol gives no size, so branches into the patch cannot be ruled out.
    #[error(
        "the function's size is unknown, so branches into the patched bytes cannot be ruled out"
    )]
    UnknownSize,
    /// An instruction that must not be moved lies in the bytes to overwrite.
    #[error("`{instruction}` at +0x{offset:x} lies in the {patch_len} bytes the patch overwrites ({why})")]
    ForbiddenInstruction {
        /// Offset of the instruction.
        offset: u64,
        /// The instruction, disassembled.
        instruction: String,
        /// Bytes the patch would overwrite.
        patch_len: usize,
        /// Why it is refused.
        why: &'static str,
    },
    /// Another instruction in the function branches into the middle of the patch.
    #[error("`{instruction}` at +0x{from:x} branches to +0x{to:x}, inside the bytes the patch overwrites (+0x{patch_start:x}..+0x{patch_end:x})")]
    BranchIntoPatch {
        /// Offset of the branching instruction.
        from: u64,
        /// Offset of its target.
        to: u64,
        /// The branching instruction, disassembled.
        instruction: String,
        /// First patched offset.
        patch_start: u64,
        /// One past the last patched offset.
        patch_end: u64,
    },
    /// The bytes do not decode as x86-64 instructions.
    #[error("invalid instruction at +0x{offset:x}: the address may not be code")]
    InvalidInstruction {
        /// Offset of the undecodable bytes.
        offset: u64,
    },
}

/// Machine code could not be generated.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CodegenError {
    /// A rel32 jump or call cannot reach its target.
    #[error("0x{to:x} is out of rel32 reach from 0x{from:x} (more than 2 GiB away)")]
    OutOfReach {
        /// Address of the branch.
        from: u64,
        /// Its target.
        to: u64,
    },
    /// The stack-argument window is larger than supported.
    #[error("a stack-argument window of {requested} words is larger than the supported {max}")]
    WindowTooLarge {
        /// Requested words.
        requested: u16,
        /// Largest supported.
        max: u16,
    },
    /// The assembler failed.
    #[error("assembler error: {0}")]
    Assembler(String),
    /// The relocated prologue could not be re-encoded at its new address.
    #[error("cannot re-encode the prologue at 0x{at:x}: {reason}")]
    Relocation {
        /// Where it was to be placed.
        at: u64,
        /// The encoder's reason.
        reason: String,
    },
    /// Call-frame information for the hook's code could not be built.
    #[error("cannot describe the hook's code for other unwinders: {0}")]
    Unwind(String),
}

/// An arena header or hook record is malformed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FormatError {
    /// The magic bytes are missing: not an argstash arena.
    #[error("not an argstash arena (bad magic)")]
    BadMagic,
    /// The arena was written by an incompatible format version.
    #[error(
        "arena format version {found} is not supported (this build reads version {supported})"
    )]
    UnsupportedVersion {
        /// Version in the header.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// A field is out of its valid range.
    #[error("corrupt arena: {0}")]
    Corrupt(&'static str),
    /// Too few bytes to parse.
    #[error("arena data truncated: need {needed} bytes, got {got}")]
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
}
