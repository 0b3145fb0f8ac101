//! What relocating a prologue means on every architecture: the relocated code and
//! its instruction map, what a caller knows of a function besides its bytes, and
//! the rules for which instructions may move (iced-x86, at either bitness).

use iced_x86::{FlowControl, Formatter, Instruction, Mnemonic, NasmFormatter, OpKind};

/// Reads `len` bytes of the module's file at runtime address `addr`.
pub type ReadFile<'a> = &'a dyn Fn(u64, usize) -> Option<Vec<u8>>;

/// Bytes of a `jmp rel32`: the least a patch overwrites.
pub const JMP_REL32_LEN: usize = 5;

/// Largest patch: a 15-byte instruction starting at byte 4 of the patch window.
pub const MAX_PATCH_LEN: usize = 4 + 15;

/// A relocated prologue ready to be written at `address`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelocatedPrologue {
    /// Address the code was encoded for.
    pub address: u64,
    /// The code: the moved instructions, then a jump back.
    pub code: Vec<u8>,
    /// `(offset from patch_addr, offset in code)` for each moved instruction and the jump back.
    pub map: Vec<(u8, u16)>,
}

impl RelocatedPrologue {
    /// The relocated address equivalent to original address `patch_addr + orig_off`, if it is an instruction boundary.
    pub fn relocated_for(&self, orig_off: u64) -> Option<u64> {
        self.map
            .iter()
            .find(|(o, _)| u64::from(*o) == orig_off)
            .map(|(_, r)| self.address + u64::from(*r))
    }
}

/// The instruction in NASM syntax.
pub(crate) fn format(instruction: &Instruction) -> String {
    let mut out = String::new();
    NasmFormatter::new().format(instruction, &mut out);
    out
}

/// The target of a near branch.
pub(crate) fn near_target(instruction: &Instruction) -> Option<u64> {
    match instruction.op0_kind() {
        OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => {
            Some(instruction.near_branch_target())
        }
        _ => None,
    }
}

/// Why `instruction` must not be moved, if it must not.
pub(crate) fn refusal(instruction: &Instruction) -> Option<&'static str> {
    if matches!(
        instruction.mnemonic(),
        Mnemonic::Syscall
            | Mnemonic::Sysenter
            | Mnemonic::Int
            | Mnemonic::Int1
            | Mnemonic::Int3
            | Mnemonic::Into
    ) {
        return Some("a system call or trap cannot be moved");
    }
    match instruction.flow_control() {
        FlowControl::Next | FlowControl::ConditionalBranch => None,
        FlowControl::Call | FlowControl::IndirectCall => {
            Some("a call there would leave a return address pointing into the overwritten bytes")
        }
        FlowControl::Return => Some("the function returns within the patch: it is too short to hook"),
        FlowControl::UnconditionalBranch | FlowControl::IndirectBranch => {
            Some("control leaves the function within the patch (a tail call or a jump): it cannot be relocated safely")
        }
        FlowControl::Interrupt | FlowControl::Exception => Some("a trap cannot be moved"),
        FlowControl::XbeginXabortXend => Some("transactional-memory instructions cannot be moved"),
    }
}

/// What a caller knows about a function beyond its own bytes.
#[derive(Clone, Copy)]
pub struct FunctionContext<'a> {
    /// The bytes after the function up to the next symbol (or fewer): room a
    /// function shorter than the patch may use when they are dead fill.
    pub padding: &'a [u8],
    /// The function returns twice (known by name or from debug info).
    pub returns_twice: bool,
    /// Reads the module's file at a runtime address (jump-table entries);
    /// `None` means tables cannot be read and table jumps are unbounded.
    pub read_file: Option<ReadFile<'a>>,
    /// Least number of bytes to patch ([`JMP_REL32_LEN`], or the length of an
    /// absolute jump where the architecture has one).
    pub min_len: usize,
    /// Whether an indirect jump at `from`, whose targets cannot be bounded, may
    /// land at `to` (the start of an instruction inside the patch, not its
    /// first); `None` means it may. A caller proves "it cannot" from facts the
    /// code does not show (the frame's call-frame information, say).
    pub may_land: Option<MayLand<'a>>,
}

/// See [`FunctionContext::may_land`]: `(from, to)`.
pub type MayLand<'a> = &'a dyn Fn(u64, u64) -> bool;

impl Default for FunctionContext<'_> {
    fn default() -> Self {
        FunctionContext {
            padding: &[],
            returns_twice: false,
            read_file: None,
            min_len: JMP_REL32_LEN,
            may_land: None,
        }
    }
}
