//! Stepping an ordinary i386 frame: the CFI of the module holding the pc
//! (through the shared evaluator), else the `ebp` chain.

use super::{Regs, Regs32, DWARF_EBP, DWARF_ESP};
use crate::memory::Memory;
use crate::symbols::ProcessSymbols;
use crate::unwind::cfi::{CfiIndex, Eval, Restored, Scratch};
use crate::unwind::Stepped;

/// DWARF number of the return-address column.
const RETURN_ADDRESS: u16 = 8;

/// The i386 unwinder's index of a process's modules' CFI.
pub struct I386 {
    cfi: CfiIndex,
}

/// The CFI evaluator's scratch space.
pub struct Cache {
    scratch: Box<Scratch>,
}

impl Default for Cache {
    fn default() -> Cache {
        Cache {
            scratch: Box::new(Scratch::new()),
        }
    }
}

/// One little-endian 32-bit word of memory.
pub(super) fn read_u32(mem: &dyn Memory, addr: u64) -> Option<u32> {
    let mut b = [0u8; 4];
    mem.read(addr, &mut b).ok()?;
    Some(u32::from_le_bytes(b))
}

impl I386 {
    /// Indexes every module's `.eh_frame` (through `.eh_frame_hdr` where present).
    pub(crate) fn index(symbols: &ProcessSymbols) -> I386 {
        I386 {
            cfi: CfiIndex::new(symbols, 4),
        }
    }

    /// Steps the frame looked up at `lookup`: by CFI (exact), else by the `ebp`
    /// chain (a guess); `None` when neither can.
    pub(crate) fn step_frame(
        &self,
        cache: &mut Cache,
        lookup: u64,
        regs: &Regs,
        mem: &dyn Memory,
    ) -> Option<Stepped<Regs>> {
        if let Some(next) = self.step_by_cfi(&mut cache.scratch, lookup, &regs.regs, mem) {
            return Some(Stepped {
                caller: Regs {
                    regs: next,
                    exact: true,
                },
                // The frame's CFA is its caller's stack pointer, when CFI said so.
                cfa: regs.exact.then_some(u64::from(next.esp)),
            });
        }
        step_by_ebp(&regs.regs, mem).map(|next| Stepped {
            caller: Regs {
                regs: next,
                exact: false,
            },
            cfa: None,
        })
    }

    fn step_by_cfi(
        &self,
        scratch: &mut Scratch,
        lookup: u64,
        regs: &Regs32,
        mem: &dyn Memory,
    ) -> Option<Regs32> {
        let row = self.cfi.row(lookup, scratch)?;
        let value = |r: u16| match usize::from(r) {
            DWARF_ESP => Some(u64::from(regs.esp)),
            DWARF_EBP => Some(u64::from(regs.ebp)),
            _ => None,
        };
        let read = |a: u64| read_u32(mem, a).map(u64::from);
        let eval = Eval {
            mask: u64::from(u32::MAX),
            regs: &value,
            read: &read,
        };
        let cfa = eval.cfa(&row)?;
        let restore = |r: u16, current: u32| match eval.register(&row, r, cfa, Some(current.into()))
        {
            Restored::Value(v) => Some(v as u32),
            Restored::Undefined => Some(0),
            Restored::Unknown => None,
        };
        // An undefined return address ends the stack (e.g. `_start`).
        let eip = restore(RETURN_ADDRESS, 0)?;
        let ebp = restore(DWARF_EBP as u16, regs.ebp)?;
        Some(Regs32 {
            eip,
            esp: cfa as u32,
            ebp,
        })
    }
}

/// The caller by the frame-pointer chain: `[ebp]` is the caller's `ebp`, `[ebp+4]`
/// the return address.
fn step_by_ebp(regs: &Regs32, mem: &dyn Memory) -> Option<Regs32> {
    if regs.ebp == 0 {
        return None;
    }
    let bp = u64::from(regs.ebp);
    Some(Regs32 {
        eip: read_u32(mem, bp + 4)?,
        esp: regs.ebp.wrapping_add(8),
        ebp: read_u32(mem, bp)?,
    })
}
