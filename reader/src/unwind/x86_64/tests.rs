//! The x86-64 unwinder on synthetic stacks: CFI steps (framehop) with the
//! callee-saved registers moved by the shared evaluator, stash frames, a
//! thread stopped in a trampoline, a relocated prologue.

use gimli::write::CallFrameInstruction;
use gimli::Register;
use trampolines::x86_64::frame::{MARKER_OFFSET, RETURN_ADDRESS_OFFSET, SAVED_RBP_OFFSET};
use trampolines::x86_64::{StashLayout, STASHED_REGS, STASH_MARKER};

use super::X86_64;
use crate::unwind::tests::{arena, eh_frame, hook, module, pcs, scope, walk, Fde, Mem};
use crate::unwind::{DwarfRegisters, FrameKind, Scope, StopReason};

const BASE: u64 = 0x5555_0000_0000;
/// `f`: `push rbp` at +0, `push rbx` at +1; called from `g`, which has no frame.
const F: u64 = BASE + 0x1000;
const G: u64 = BASE + 0x1100;
/// Where `f` returns to in `g`.
const IN_G: u64 = G + 5;
const STACK: u64 = 0x7ffd_0000_0000;
const TRAMPOLINE: u64 = 0x7e00_1000;

fn process(hooked: bool) -> Scope {
    let cfi = eh_frame(
        true,
        vec![
            Fde {
                start: 0x1000,
                len: 0x40,
                rows: vec![
                    (1, CallFrameInstruction::CfaOffset(16)),
                    (1, CallFrameInstruction::Offset(Register(6), -16)),
                    (2, CallFrameInstruction::CfaOffset(24)),
                    (2, CallFrameInstruction::Offset(Register(3), -24)),
                ],
            },
            Fde {
                start: 0x1100,
                len: 0x40,
                rows: Vec::new(),
            },
        ],
    );
    let arenas = if hooked {
        vec![arena(vec![hook("f", F, TRAMPOLINE)])]
    } else {
        Vec::new()
    };
    scope(vec![module(true, BASE, &cfi)], arenas)
}

/// A thread stopped in `f` after its prologue, rbx 0x3333 and r12 0x1212 live.
fn in_f(sp: u64, rbp: u64) -> DwarfRegisters {
    let mut regs = [None; 17];
    regs[16] = Some(F + 0x10);
    regs[7] = Some(sp);
    regs[6] = Some(rbp);
    regs[3] = Some(0x3333);
    regs[12] = Some(0x1212);
    regs
}

#[test]
fn cfi_steps_restore_callee_saved_registers() {
    let mut mem = Mem::default();
    // f's frame: saved rbx, saved rbp, return address into g; then g's: return 0.
    mem.words64(STACK, &[0x1111, STACK + 0x100, IN_G, 0]);
    let s = process(false);
    let (frames, states, stop) = walk::<X86_64>(&s, &in_f(STACK, 0x2222), &mem, false);
    assert_eq!(pcs(&frames), [F + 0x10, IN_G]);
    assert_eq!(stop, None);
    let f = states[0].as_ref().unwrap();
    assert_eq!((f.pc, f.cfa), (F + 0x10, Some(STACK + 24)));
    assert_eq!(
        f.regs[3],
        Some(0x3333),
        "the innermost frame has every register"
    );
    let g = states[1].as_ref().unwrap();
    assert_eq!(g.pc, IN_G - 1, "a caller is looked up at its call");
    assert_eq!(g.regs[3], Some(0x1111), "rbx restored from f's save slot");
    assert_eq!(g.regs[12], Some(0x1212), "r12 has no rule: same value");
    assert_eq!(g.regs[6], Some(STACK + 0x100));
    assert_eq!(g.regs[7], Some(STACK + 24));
    assert_eq!(g.regs[16], Some(IN_G));
    assert_eq!(g.regs[0], None, "rax is not known in callers");
}

/// The stash frame of `f`'s hook below f's CFA `cfa`, returning to g.
fn stash_bytes(mem: &mut Mem, cfa: u64, args: [u64; 6]) -> u64 {
    let layout = StashLayout::new(0);
    let base = layout.base_from_callee_cfa(cfa);
    let start = base - layout.call_sp_offset();
    let mut bytes = vec![0u8; layout.read_len()];
    let mut put = |off: i64, v: u64| {
        let at = (base as i64 + off - start as i64) as usize;
        bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
    };
    put(MARKER_OFFSET, STASH_MARKER);
    put(SAVED_RBP_OFFSET, STACK + 0x200);
    put(RETURN_ADDRESS_OFFSET, IN_G);
    let mut next = args.iter();
    for r in STASHED_REGS {
        let v = if r.is_argument() {
            *next.next().unwrap()
        } else {
            0
        };
        put(StashLayout::reg_offset(r), v);
    }
    mem.put(start, &bytes);
    // g's frame: return address 0 ends the stack.
    mem.words64(base + 16, &[0]);
    base
}

#[test]
fn a_stash_frame_gives_its_arguments_to_the_hooked_frame() {
    let mut mem = Mem::default();
    mem.words64(STACK, &[0x1111, STACK + 0x100, TRAMPOLINE + 70]);
    let base = stash_bytes(&mut mem, STACK + 24, [28, 1, 2, 3, 4, 5]);
    let s = process(true);
    for show in [false, true] {
        let (frames, states, stop) = walk::<X86_64>(&s, &in_f(STACK, 0x2222), &mem, show);
        assert_eq!(stop, None);
        let want = if show {
            vec![F + 0x10, TRAMPOLINE + 70, IN_G]
        } else {
            vec![F + 0x10, IN_G]
        };
        assert_eq!(pcs(&frames), want);
        let stash = frames[0].stash.as_ref().expect("f is hooked");
        assert_eq!(stash.frame, base);
        assert_eq!(stash.function, F);
        assert_eq!(stash.hook, "f");
        let regs: Vec<(&str, u64)> = stash.registers.clone();
        assert_eq!(
            regs,
            [
                ("rdi", 28),
                ("rsi", 1),
                ("rdx", 2),
                ("rcx", 3),
                ("r8", 4),
                ("r9", 5)
            ]
        );
        let g = states.last().unwrap().as_ref().unwrap();
        assert_eq!(
            g.regs[7],
            Some(base + 16),
            "g's rsp is above the stash frame"
        );
        assert_eq!(g.regs[6], Some(STACK + 0x200));
        assert_eq!(g.regs[3], Some(0x1111), "kept across the trampoline");
        if show {
            assert_eq!(frames[1].kind, FrameKind::Trampoline);
            assert_eq!(frames[1].function.as_deref(), Some("argstash_trampoline.f"));
            assert!(states[1].is_none());
        }
    }
}

#[test]
fn an_unreadable_stash_frame_says_where() {
    let mut mem = Mem::default();
    mem.words64(STACK, &[0x1111, STACK + 0x100, TRAMPOLINE + 70]);
    let s = process(true);
    let (frames, _, stop) = walk::<X86_64>(&s, &in_f(STACK, 0x2222), &mem, false);
    assert_eq!(pcs(&frames), [F + 0x10]);
    let base = StashLayout::new(0).base_from_callee_cfa(STACK + 24);
    match stop {
        Some(StopReason::StashUnreadable { base: b, .. }) => assert_eq!(b, base),
        other => panic!("{other:?}"),
    }
    let text = stop_text(&s, &mem);
    assert!(
        text.starts_with(&format!("cannot read the stash frame at 0x{base:x}: ")),
        "{text}"
    );
}

fn stop_text(s: &Scope, mem: &Mem) -> String {
    let (_, _, stop) = walk::<X86_64>(s, &in_f(STACK, 0x2222), mem, false);
    stop.map(|r| r.to_string()).unwrap_or_default()
}

#[test]
fn a_thread_stopped_in_a_trampoline_shows_the_hooked_function() {
    let mut mem = Mem::default();
    // After `push rbp`, before `mov rbp, rsp`: saved rbp at rsp, return address above.
    mem.words64(STACK, &[STACK + 0x300, IN_G, 0]);
    let s = process(true);
    let mut regs = [None; 17];
    regs[16] = Some(TRAMPOLINE + 2);
    regs[7] = Some(STACK);
    regs[6] = Some(0x4444);
    let (frames, states, stop) = walk::<X86_64>(&s, &regs, &mem, false);
    assert_eq!(stop, None);
    assert_eq!(pcs(&frames), [TRAMPOLINE + 2, IN_G]);
    assert_eq!(frames[0].function.as_deref(), Some("f"));
    assert_eq!(frames[0].module.as_deref(), Some("unwind-test"));
    assert!(states[0].is_none());
    let g = states[1].as_ref().unwrap();
    assert_eq!(
        (g.regs[7], g.regs[6]),
        (Some(STACK + 16), Some(STACK + 0x300))
    );
}

#[test]
fn a_relocated_prologue_unwinds_as_the_original_bytes() {
    let mut mem = Mem::default();
    // One byte into the relocated copy: `push rbp` done (f's row at +1).
    mem.words64(STACK, &[STACK + 0x100, IN_G, 0]);
    let s = process(true);
    let relocated = TRAMPOLINE + 0x60;
    let mut regs = [None; 17];
    regs[16] = Some(relocated + 1);
    regs[7] = Some(STACK);
    regs[6] = Some(0x4444);
    let (frames, states, stop) = walk::<X86_64>(&s, &regs, &mem, false);
    assert_eq!(stop, None);
    assert_eq!(pcs(&frames), [relocated + 1, IN_G]);
    assert_eq!(frames[0].kind, FrameKind::Relocated);
    let f = states[0].as_ref().unwrap();
    assert_eq!((f.pc, f.cfa), (F + 1, Some(STACK + 16)));
}

/// `f`, `g` as in [`process`], and `h` (at +0x1200), whose CFA is rbp + 16
/// (frame-pointer code); nothing covers +0x1300.
fn process_with_fp_code() -> Scope {
    let cfi = eh_frame(
        true,
        vec![
            Fde {
                start: 0x1000,
                len: 0x40,
                rows: vec![
                    (1, CallFrameInstruction::CfaOffset(16)),
                    (1, CallFrameInstruction::Offset(Register(6), -16)),
                    (2, CallFrameInstruction::CfaOffset(24)),
                    (2, CallFrameInstruction::Offset(Register(3), -24)),
                ],
            },
            Fde {
                start: 0x1100,
                len: 0x40,
                rows: Vec::new(),
            },
            Fde {
                start: 0x1200,
                len: 0x40,
                rows: vec![(0, CallFrameInstruction::Cfa(Register(6), 16))],
            },
        ],
    );
    scope(vec![module(true, BASE, &cfi)], Vec::new())
}

#[test]
fn sp_and_pc_only_step_by_cfi_and_learn_what_a_frame_saved() {
    let mut mem = Mem::default();
    mem.words64(STACK, &[0x1111, STACK + 0x100, IN_G, 0]);
    let s = process_with_fp_code();
    let regs = crate::unwind::sp_pc_registers(STACK, F + 0x10);
    let (frames, states, stop) = walk::<X86_64>(&s, &regs, &mem, false);
    assert_eq!(pcs(&frames), [F + 0x10, IN_G]);
    assert_eq!(stop, None);
    let f = states[0].as_ref().unwrap();
    assert_eq!(f.cfa, Some(STACK + 24));
    assert_eq!(
        f.regs[3], None,
        "only sp and pc are known in the innermost frame"
    );
    let g = states[1].as_ref().unwrap();
    assert_eq!(g.regs[6], Some(STACK + 0x100), "rbp restored from f's slot");
    assert_eq!(g.regs[3], Some(0x1111), "rbx restored from f's slot");
    assert_eq!(g.regs[12], None, "r12 unsaved: still unknown");
}

#[test]
fn a_rule_that_needs_the_unknown_rbp_stops_with_its_name() {
    let mut mem = Mem::default();
    mem.words64(STACK, &[IN_G, 0]);
    let s = process_with_fp_code();
    for pc in [BASE + 0x1210, BASE + 0x1310] {
        let regs = crate::unwind::sp_pc_registers(STACK, pc);
        let (frames, _, stop) = walk::<X86_64>(&s, &regs, &mem, false);
        assert_eq!(pcs(&frames), [pc]);
        assert_eq!(
            stop,
            Some(StopReason::RegisterUnknown {
                register: "rbp",
                pc
            })
        );
    }
    // With rbp known, the same frame steps (framehop, rbp + 16).
    let mut regs = crate::unwind::sp_pc_registers(STACK, BASE + 0x1210);
    regs[6] = Some(STACK + 0x40);
    mem.words64(STACK + 0x40, &[STACK + 0x80, IN_G]);
    let (frames, _, _) = walk::<X86_64>(&s, &regs, &mem, false);
    assert_eq!(pcs(&frames)[..2], [BASE + 0x1210, IN_G]);
}

#[test]
fn a_trampoline_stop_with_the_stack_at_the_top_of_memory_does_not_panic() {
    // Found by the fuzzer (the `unwind` target): rsp near u64::MAX while
    // stopped inside a trampoline overflowed the step's `rsp + 16`.
    let s = process(true);
    let mut regs = [None; 17];
    regs[16] = Some(TRAMPOLINE + 2);
    regs[7] = Some(u64::MAX - 7);
    regs[6] = Some(0x4444);
    let (frames, _, _) = walk::<X86_64>(&s, &regs, &Mem::default(), false);
    assert_eq!(
        pcs(&frames),
        [TRAMPOLINE + 2],
        "nothing readable there: the walk ends at the thread's own frame"
    );
}

#[test]
fn a_stack_pointer_at_the_top_of_memory_stops_the_cfi_step() {
    // Found by the fuzzer (the `unwind` target): with rsp near u64::MAX the CFA
    // (rsp + 8) wrapped, and framehop's `cfa - 8` overflowed where a frame's
    // CFI has no return-address rule. This synthetic module's CIE has one, so
    // this checks the outcome of the guard; the inputs that reach framehop's
    // path are fuzz/regressions/unwind/panic-652e…, panic-f88b… (replayed by
    // `argstash-fuzz exec unwind`, which runs without ASLR as they were found).
    let s = process(false);
    let mut regs = [None; 17];
    regs[16] = Some(F);
    regs[7] = Some(u64::MAX - 4);
    regs[6] = Some(0);
    let (frames, _, stop) = walk::<X86_64>(&s, &regs, &Mem::default(), false);
    assert_eq!(pcs(&frames), [F]);
    assert_eq!(stop, Some(StopReason::Overflow));
}
