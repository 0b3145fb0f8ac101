//! Proving from call-frame information that an indirect jump cannot land inside
//! a patch.
//!
//! The patch planner refuses a patch of several instructions when an indirect
//! jump of the function has targets it cannot bound (a `switch` table it does
//! not recognise, CPython's computed-goto dispatch): the jump might land on the
//! second instruction. A `jmp` does not move the stack pointer, so in correct
//! code its source and target agree on the CFA; when both compute it as
//! `rsp + offset`, the offsets must be equal. A prologue's `push`es change that
//! offset at every instruction, so a dispatch jump in the body (CFA at
//! `rsp + frame size`) cannot land on the second push of the prologue. Anything
//! not covered by an rsp-based rule may land, as before.

use std::cell::RefCell;
use std::collections::HashMap;

use reader::symbols::Module;
use reader::unwind::{CfaRule, ModuleCfa};

/// DWARF number of rsp.
const RSP: u16 = 7;

/// The CFA rules of one module, looked up as the planner asks.
pub(crate) struct Landing {
    cfa: RefCell<Option<ModuleCfa>>,
    rules: RefCell<HashMap<u64, Option<CfaRule>>>,
}

impl Landing {
    /// For the function's module (no module, no `.eh_frame`: every jump may land).
    pub(crate) fn new(module: Option<&Module>) -> Landing {
        Landing {
            cfa: RefCell::new(module.filter(|m| m.is_64).and_then(ModuleCfa::new)),
            rules: RefCell::new(HashMap::new()),
        }
    }

    fn rule(&self, pc: u64) -> Option<CfaRule> {
        if let Some(r) = self.rules.borrow().get(&pc) {
            return *r;
        }
        let r = self.cfa.borrow_mut().as_mut().and_then(|c| c.rule(pc));
        self.rules.borrow_mut().insert(pc, r);
        r
    }

    /// Whether a jump at `from` may land at `to` (false only when proved impossible).
    pub(crate) fn may_land(&self, from: u64, to: u64) -> bool {
        match (self.rule(from), self.rule(to)) {
            (Some(a), Some(b)) if a.register == RSP && b.register == RSP => a.offset == b.offset,
            _ => true,
        }
    }
}
