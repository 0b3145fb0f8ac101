//! The i386 unwinder on synthetic stacks: CFI steps through the shared
//! evaluator, the `ebp` chain where no CFI covers the pc, a stack pointer that
//! does not grow, stash frames with stack words, a thread stopped in a trampoline.

use gimli::write::CallFrameInstruction;
use gimli::Register;
use trampolines::i386::frame::{MARKER_OFFSET, RETURN_ADDRESS_OFFSET, SAVED_EBP_OFFSET};
use trampolines::i386::{StashLayout, StashedReg, STASH_MARKER};

use super::I386;
use crate::unwind::tests::{arena, eh_frame, hook, module, pcs, scope, walk, Fde, Mem};
use crate::unwind::{DwarfRegisters, FrameKind, Scope, StopReason};

const BASE: u64 = 0x5655_6000;
/// `f`: `push ebp` at +0, `mov ebp, esp` at +1 (CFA = ebp + 8 from +3); called from `g`.
const F: u64 = BASE + 0x1000;
const G: u64 = BASE + 0x1100;
/// Where `f` returns to in `g`.
const IN_G: u64 = G + 5;
/// Code of the module no FDE covers.
const NO_CFI: u64 = BASE + 0x1800;
const STACK: u64 = 0xffff_0000;
const TRAMPOLINE: u64 = 0x5800_0000;

fn process(hooked: Option<u16>) -> Scope {
    let cfi = eh_frame(
        false,
        vec![
            Fde {
                start: 0x1000,
                len: 0x40,
                rows: vec![
                    (1, CallFrameInstruction::CfaOffset(8)),
                    (1, CallFrameInstruction::Offset(Register(5), -8)),
                    (3, CallFrameInstruction::CfaRegister(Register(5))),
                ],
            },
            Fde {
                start: 0x1100,
                len: 0x40,
                rows: Vec::new(),
            },
        ],
    );
    let arenas = match hooked {
        Some(words) => {
            let mut h = hook("f", F, TRAMPOLINE);
            h.stack_words = words;
            vec![arena(vec![h])]
        }
        None => Vec::new(),
    };
    scope(vec![module(false, BASE, &cfi)], arenas)
}

fn at(pc: u64, esp: u64, ebp: u64) -> DwarfRegisters {
    let mut regs = [None; 17];
    regs[8] = Some(pc);
    regs[4] = Some(esp);
    regs[5] = Some(ebp);
    regs[0] = Some(0x77);
    regs
}

#[test]
fn cfi_steps_are_exact() {
    let mut mem = Mem::default();
    // f's frame: saved ebp, return address into g; g's return slot holds 0.
    mem.words32(STACK + 0x10, &[STACK as u32 + 0x40, IN_G as u32, 0]);
    let s = process(None);
    let (frames, states, stop) = walk::<I386>(&s, &at(F + 0x10, STACK, STACK + 0x10), &mem, false);
    assert_eq!(pcs(&frames), [F + 0x10, IN_G]);
    assert_eq!(stop, None, "a return address below 0x1000 ends the stack");
    let f = states[0].as_ref().unwrap();
    assert_eq!(f.cfa, Some(STACK + 0x18));
    assert_eq!(f.regs[0], None, "only esp, ebp and eip are tracked");
    let g = states[1].as_ref().unwrap();
    assert_eq!(g.pc, IN_G - 1);
    assert_eq!(g.regs[4], Some(STACK + 0x18));
    assert_eq!(g.regs[5], Some(STACK + 0x40));
    assert_eq!(g.regs[8], Some(IN_G));
}

#[test]
fn without_cfi_the_ebp_chain_is_a_guess() {
    let mut mem = Mem::default();
    mem.words32(STACK + 0x10, &[STACK as u32 + 0x40, IN_G as u32, 0]);
    let s = process(None);
    let (frames, states, stop) = walk::<I386>(&s, &at(NO_CFI, STACK, STACK + 0x10), &mem, false);
    assert_eq!(pcs(&frames), [NO_CFI, IN_G]);
    assert_eq!(stop, None);
    assert_eq!(states[0].as_ref().unwrap().cfa, None);
    let g = states[1].as_ref().unwrap();
    assert_eq!(
        (g.regs[4], g.regs[5]),
        (None, None),
        "guessed registers stay unknown"
    );
    assert_eq!(g.regs[8], Some(IN_G));
}

#[test]
fn a_stack_pointer_that_does_not_grow_stops_the_unwind() {
    let mut mem = Mem::default();
    // f returns to code without CFI whose ebp points below f's frame.
    let low = STACK - 0x100;
    mem.words32(STACK + 0x10, &[low as u32, NO_CFI as u32 + 5]);
    mem.words32(low, &[0, IN_G as u32]);
    let s = process(None);
    let (frames, _, stop) = walk::<I386>(&s, &at(F + 0x10, STACK, STACK + 0x10), &mem, false);
    assert_eq!(pcs(&frames), [F + 0x10, NO_CFI + 5]);
    assert_eq!(
        stop,
        Some(StopReason::StackDidNotGrow {
            caller_sp: low + 8,
            callee_sp: STACK + 0x18
        })
    );
}

#[test]
fn a_stash_frame_gives_registers_and_stack_words() {
    let layout = StashLayout::new(2);
    let cfa = STACK + 0x18;
    let base = layout.base_from_callee_cfa(cfa);
    let start = base - layout.call_sp_offset();
    let mut bytes = vec![0u8; layout.read_len()];
    let mut put = |off: i64, v: u32| {
        let at = (base as i64 + off - start as i64) as usize;
        bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
    };
    put(MARKER_OFFSET, STASH_MARKER as u32);
    put(MARKER_OFFSET + 4, (STASH_MARKER >> 32) as u32);
    put(SAVED_EBP_OFFSET, STACK as u32 + 0x80);
    put(RETURN_ADDRESS_OFFSET, IN_G as u32);
    put(StashLayout::reg_offset(StashedReg::Eax), 11);
    put(StashLayout::reg_offset(StashedReg::Edx), 22);
    put(StashLayout::reg_offset(StashedReg::Ecx), 33);
    put(layout.stack_word_offset(0), 44);
    put(layout.stack_word_offset(1), 55);
    let mut mem = Mem::default();
    mem.words32(STACK + 0x10, &[STACK as u32 + 0x40, TRAMPOLINE as u32 + 70]);
    mem.put(start, &bytes);
    mem.words32(base + 8, &[0]);
    let s = process(Some(2));
    let (frames, states, stop) = walk::<I386>(&s, &at(F + 0x10, STACK, STACK + 0x10), &mem, true);
    assert_eq!(stop, None);
    assert_eq!(pcs(&frames), [F + 0x10, TRAMPOLINE + 70, IN_G]);
    assert_eq!(frames[1].kind, FrameKind::Trampoline);
    let stash = frames[0].stash.as_ref().expect("f is hooked");
    assert_eq!(stash.frame, base);
    assert_eq!(
        stash.registers,
        [
            ("eax", 11),
            ("edx", 22),
            ("ecx", 33),
            ("stack+4", 44),
            ("stack+8", 55)
        ]
    );
    let g = states[2].as_ref().unwrap();
    assert_eq!(
        g.regs[4],
        Some(base + 8),
        "exact: read from the stash frame"
    );
    assert_eq!(g.regs[5], Some(STACK + 0x80));
}

#[test]
fn a_thread_stopped_before_the_trampolines_push_returns_by_esp() {
    let mut mem = Mem::default();
    mem.words32(STACK, &[IN_G as u32, 0]);
    let s = process(Some(0));
    let (frames, states, stop) = walk::<I386>(&s, &at(TRAMPOLINE, STACK, 0x1234), &mem, false);
    assert_eq!(stop, None);
    assert_eq!(pcs(&frames), [TRAMPOLINE, IN_G]);
    assert_eq!(frames[0].function.as_deref(), Some("f"));
    let g = states[1].as_ref().unwrap();
    assert_eq!(
        (g.regs[4], g.regs[5]),
        (None, None),
        "stepped by position: a guess"
    );
}

#[test]
fn a_hook_record_with_an_impossible_after_call_offset_does_not_panic() {
    // Found by the fuzzer (the `unwind` target): a record read from the target
    // with `after_call` near u32::MAX overflowed the epilogue offset.
    let mut mem = Mem::default();
    mem.words32(STACK, &[IN_G as u32, 0]);
    let mut h = hook("f", F, TRAMPOLINE);
    h.offsets.after_call = u32::MAX - 3;
    let s = scope(Vec::new(), vec![arena(vec![h])]);
    let (frames, _, _) = walk::<I386>(&s, &at(TRAMPOLINE + 10, STACK, 0x1234), &mem, false);
    assert_eq!(
        pcs(&frames).first(),
        Some(&(TRAMPOLINE + 10)),
        "the thread's own frame is still shown"
    );
}
