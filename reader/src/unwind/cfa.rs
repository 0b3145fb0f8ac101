//! The CFA rule at chosen addresses of one module, for callers outside the
//! unwinder (an install proving that an indirect jump cannot land inside a
//! patch: a `jmp` keeps the stack pointer, so its target has the same
//! stack-pointer-relative CFA as its source; the stack-window analysis matching a
//! jump out of a function with the frame of the code it lands in).

use gimli::CfaRule as GimliCfa;

use crate::symbols::Module;

use super::cfi::{ModuleCfi, Scratch, SectionData};

/// The CFA at an address: `register + offset`, by DWARF register number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CfaRule {
    /// DWARF register (x86-64: 7 is rsp, 6 is rbp).
    pub register: u16,
    /// Offset added to it.
    pub offset: i64,
}

/// One module's call-frame information, asked for CFA rules.
pub struct ModuleCfa {
    cfi: ModuleCfi,
    scratch: Scratch,
}

impl ModuleCfa {
    /// Indexes the `.eh_frame` of `m`; `None` when it has none.
    pub fn new(m: &Module) -> Option<ModuleCfa> {
        let eh = SectionData::of(m, ".eh_frame")?;
        let hdr = SectionData::of(m, ".eh_frame_hdr");
        Some(ModuleCfa {
            cfi: ModuleCfi::new(m, eh, hdr, if m.is_64 { 8 } else { 4 }),
            scratch: Scratch::new(),
        })
    }

    /// The CFA rule at runtime address `pc`; `None` where no FDE covers it or
    /// the CFA is a DWARF expression.
    pub fn rule(&mut self, pc: u64) -> Option<CfaRule> {
        match self.cfi.row(pc, &mut self.scratch)?.cfa() {
            GimliCfa::RegisterAndOffset { register, offset } => Some(CfaRule {
                register: register.0,
                offset: *offset,
            }),
            GimliCfa::Expression(_) => None,
        }
    }

    /// The runtime address range of the FDE covering `pc` (one function, or one
    /// part of a function such as gcc's `.cold` block); `None` where none does.
    pub fn fde_range(&self, pc: u64) -> Option<std::ops::Range<u64>> {
        self.cfi.fde_range(pc)
    }
}
