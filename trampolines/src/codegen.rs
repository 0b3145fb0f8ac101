//! Choosing the architecture at run time: [`Arch::codegen`] gives a target's
//! [`Architecture`] as one object-safe interface, [`ArchCodegen`], and a plan
//! made through it is a [`PlannedPatch`]. A caller that learns the
//! architecture from the process dispatches here once instead of matching on
//! [`Arch`] in every step; this module holds the only such match.

use std::fmt;

use crate::arch::{Arch, Architecture, PatchSite, PlanInputs};
use crate::arena::ArenaHeader;
use crate::error::{CodegenError, PlanError};
use crate::hook::{build_hook, HookCode, HookMeta};
use crate::{i386, x86_64};

impl Arch {
    /// This architecture's code generation.
    pub fn codegen(self) -> &'static dyn ArchCodegen {
        match self {
            Arch::X86_64 => &x86_64::X86_64,
            Arch::I386 => &i386::I386,
        }
    }

    /// Lower-case name, as in messages.
    pub fn name(self) -> &'static str {
        self.codegen().name()
    }
}

/// An [`Architecture`] behind a reference chosen at run time.
pub trait ArchCodegen: Sync {
    /// Which architecture this is.
    fn arch(&self) -> Arch;
    /// Lower-case name, as in messages.
    fn name(&self) -> &'static str;
    /// Plans the patch of the function at `function` (complete code `code`).
    fn plan(
        &self,
        function: u64,
        code: &[u8],
        inputs: &PlanInputs<'_>,
    ) -> Result<Box<dyn PlannedPatch>, PlanError>;
    /// The jump that replaces `patch_len` bytes at `at` with a jump to `to`.
    fn jump_patch(&self, at: u64, to: u64, patch_len: usize) -> Result<Vec<u8>, CodegenError>;
    /// Stack words a trampoline copies when the caller asked for `requested`.
    fn stack_words(&self, requested: u16) -> u16;
    /// One past the highest address code and arenas can live at.
    fn address_limit(&self) -> u64;
    /// Bytes of an entry patch that reaches any address; `None` when there is none.
    fn far_jump_len(&self) -> Option<usize>;
}

impl<A: Architecture> ArchCodegen for A {
    fn arch(&self) -> Arch {
        A::ARCH
    }

    fn name(&self) -> &'static str {
        A::NAME
    }

    fn plan(
        &self,
        function: u64,
        code: &[u8],
        inputs: &PlanInputs<'_>,
    ) -> Result<Box<dyn PlannedPatch>, PlanError> {
        let plan = <A as Architecture>::plan(function, code, inputs)?;
        Ok(Box::new(Planned::<A>(plan)))
    }

    fn jump_patch(&self, at: u64, to: u64, patch_len: usize) -> Result<Vec<u8>, CodegenError> {
        <A as Architecture>::jump_patch(at, to, patch_len)
    }

    fn stack_words(&self, requested: u16) -> u16 {
        requested.max(A::MIN_STACK_WORDS)
    }

    fn address_limit(&self) -> u64 {
        A::ADDRESS_LIMIT
    }

    fn far_jump_len(&self) -> Option<usize> {
        A::FAR_JUMP_LEN
    }
}

/// A patch planned by [`ArchCodegen::plan`], for whichever architecture made it.
pub trait PlannedPatch: fmt::Debug + Send + Sync {
    /// Where it patches.
    fn site(&self) -> PatchSite<'_>;
    /// Generates the hook for `slot` of `header`, copying `stack_words` stack
    /// words (and stashing the vector argument registers when `xmm`, where the
    /// architecture has them).
    fn build(
        &self,
        header: &ArenaHeader,
        slot: u32,
        stack_words: u16,
        xmm: bool,
        meta: &HookMeta,
    ) -> Result<HookCode, CodegenError>;

    /// First patched byte.
    fn patch_addr(&self) -> u64 {
        self.site().patch_addr
    }

    /// Bytes overwritten.
    fn patch_len(&self) -> usize {
        self.site().patch_len
    }

    /// The original bytes at the patch.
    fn original(&self) -> &[u8] {
        self.site().original
    }
}

/// A plan of architecture `A`.
struct Planned<A: Architecture>(A::Plan);

impl<A: Architecture> fmt::Debug for Planned<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple(A::NAME).field(&self.0).finish()
    }
}

impl<A: Architecture> PlannedPatch for Planned<A> {
    fn site(&self) -> PatchSite<'_> {
        A::site(&self.0)
    }

    fn build(
        &self,
        header: &ArenaHeader,
        slot: u32,
        stack_words: u16,
        xmm: bool,
        meta: &HookMeta,
    ) -> Result<HookCode, CodegenError> {
        build_hook::<A>(&self.0, header, slot, A::layout(stack_words, xmm), meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_arch_dispatches_to_its_own_contract() {
        for arch in [Arch::X86_64, Arch::I386] {
            assert_eq!(arch.codegen().arch(), arch);
        }
        assert_eq!(Arch::X86_64.name(), "x86-64");
        assert_eq!(Arch::I386.name(), "i386");
        assert_eq!(
            Arch::I386.codegen().stack_words(2),
            i386::DEFAULT_STACK_WORDS
        );
        assert_eq!(Arch::X86_64.codegen().stack_words(2), 2);
    }
}
