//! The architectures code is generated for: [`Arch`] names one, and
//! [`Architecture`] is the contract each architecture's module implements.
//!
//! `x86_64/` and `i386/` hold the same files, framehop style: `arch.rs` (the
//! contract's implementation), `frame.rs` (the stash frame), `emit.rs` (the
//! trampoline emitter), `relocate.rs` (prologue planning and relocation) and
//! `hook.rs` (a hook's code). What is written once over the contract sits at
//! the crate root: the containers ([`crate::trampoline`], [`crate::hook`],
//! [`crate::relocation`]), [`crate::hook::build_hook`], and the run-time choice
//! [`crate::codegen`].

use std::fmt::Debug;

use crate::error::{CodegenError, PlanError};
use crate::relocation::{FunctionContext, ReadFile, RelocatedPrologue};
use crate::trampoline::Trampoline;

/// Instruction set of a target process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    /// 64-bit x86 (SysV AMD64 ABI).
    X86_64,
    /// 32-bit x86 (i386 SysV ABI), run on a 64-bit kernel.
    I386,
}

/// What planning a patch may consult besides the function's own bytes.
#[derive(Clone, Copy, Default)]
pub struct PlanInputs<'a> {
    /// What the caller knows of the function (padding after it, jump tables,
    /// where indirect jumps may land, the least patch length); x86-64 uses it.
    pub function: FunctionContext<'a>,
    /// Reads the target's live memory: i386 recognises the get-PC thunk a call
    /// in the patch goes to by its first bytes. `None`: nothing can be read.
    pub read_memory: Option<ReadFile<'a>>,
}

/// Where a planned patch goes, the same for every architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatchSite<'a> {
    /// The function's entry address.
    pub function: u64,
    /// First patched byte: the entry, or just after a kept end-branch instruction.
    pub patch_addr: u64,
    /// Bytes overwritten.
    pub patch_len: usize,
    /// The function starts with an end-branch instruction (`endbr64`/`endbr32`), kept in place.
    pub endbr: bool,
    /// The original bytes at `patch_addr..patch_addr + patch_len`.
    pub original: &'a [u8],
}

/// Where a trampoline goes and what it refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrampolineSite {
    /// Address the trampoline is assembled for (its slot's start).
    pub address: u64,
    /// Address of the hook record (pushed into every stash frame).
    pub record: u64,
    /// Address of the relocated prologue (the trampoline calls it).
    pub relocated: u64,
}

/// What a hook record says of a stash layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutRecord {
    /// The record's layout version.
    pub version: u16,
    /// Incoming stack words copied.
    pub stack_words: u16,
    /// The frame holds the vector argument registers.
    pub xmm: bool,
}

/// One architecture's code generation: what `x86_64/` and `i386/` each provide.
///
/// A hook's code ([`crate::hook::build_hook`]) and the run-time choice of an
/// architecture ([`crate::codegen::ArchCodegen`]) are written once over it, so
/// adding an architecture means implementing this trait in a folder of its own.
pub trait Architecture: Sync + 'static {
    /// Which architecture this is.
    const ARCH: Arch;
    /// Lower-case name, as in messages.
    const NAME: &'static str;
    /// Most incoming stack words a trampoline copies.
    const MAX_STACK_WORDS: u16;
    /// Fewest incoming stack words a trampoline copies: a smaller request is raised to it.
    const MIN_STACK_WORDS: u16;
    /// One past the highest address code and arenas can live at.
    const ADDRESS_LIMIT: u64;
    /// Bytes of an entry patch that reaches any address (for an arena beyond
    /// `jmp rel32` reach); `None` when hooks need an arena within reach.
    const FAR_JUMP_LEN: Option<usize>;

    /// The stash frame's layout.
    type Layout: Copy + Debug;
    /// A function's planned patch: which instructions move, and how.
    type Plan: Clone + Debug + Send + Sync + 'static;

    /// The layout copying `stack_words` stack words, with the vector argument
    /// registers when `xmm` (where the architecture stashes them).
    fn layout(stack_words: u16, xmm: bool) -> Self::Layout;
    /// What the hook record says of `layout`.
    fn layout_record(layout: &Self::Layout) -> LayoutRecord;
    /// Decides how to patch the function at `function` whose complete code is `code`.
    fn plan(function: u64, code: &[u8], inputs: &PlanInputs<'_>) -> Result<Self::Plan, PlanError>;
    /// Where `plan` patches.
    fn site(plan: &Self::Plan) -> PatchSite<'_>;
    /// Re-encodes the moved instructions of `plan` at `address`, followed by a jump back.
    fn relocate(plan: &Self::Plan, address: u64) -> Result<RelocatedPrologue, CodegenError>;
    /// Emits a trampoline at `site` stashing into `layout`, starting with an
    /// end-branch instruction when `endbr`.
    fn emit_trampoline(
        site: &TrampolineSite,
        layout: Self::Layout,
        endbr: bool,
    ) -> Result<Trampoline, CodegenError>;
    /// The bytes that replace `patch_len` bytes at `at` with a jump to `to`.
    fn jump_patch(at: u64, to: u64, patch_len: usize) -> Result<Vec<u8>, CodegenError>;
}
