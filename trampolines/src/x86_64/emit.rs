//! The x86-64 trampoline emitter (dynasmrt, assembled for the remote address).
//!
//! ```text
//!   [endbr64]                      ; only when the hooked function had one
//!   push rbp
//!   mov  rbp, rsp                  ; frame base
//!   push MARKER.lo ; mov dword [rsp+4], MARKER.hi      -> rbp-8
//!   push RECORD.lo ; mov dword [rsp+4], RECORD.hi      -> rbp-16
//!   push rdi, rsi, rdx, rcx, r8, r9, rax, r10          -> rbp-24 .. rbp-80
//!   [lea rsp, [rsp-128]            ; only with the xmm area:
//!    movdqu [rsp+16*i], xmm{i}]    ;   xmm0..xmm7        -> rbp-208 .. rbp-81
//!   [lea rsp, [rsp-8]]             ; odd window: keep rsp 16-byte aligned
//!   push qword [rbp+16+8*(n-1)] .. push qword [rbp+16] ; stack-argument window
//!   call relocated_prologue
//! after_call:
//!   leave
//!   ret
//! ```
//!
//! No register is written except `rsp`/`rbp`, which `leave` restores; no flags are
//! touched (`push`, `mov`, `lea`, `movdqu`, `call`, `leave`, `ret` leave RFLAGS
//! alone; `movdqu` to memory reads the xmm register and writes nothing else). The
//! only memory written is the trampoline's own frame below the caller's `rsp`.
//!
//! [`emit_call_through`] builds the same frame for a trampoline reached through a
//! function pointer, with fewer stores (see there).

use crate::trampoline::{Trampoline, TrampolineOffsets};
use dynasmrt::x64::X64Relocation;
use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi, VecAssembler};

use super::frame::{
    StashLayout, ARGUMENT_REGS, MAX_STACK_WORDS, STASHED_REGS, STASH_MARKER, XMM_ARGS,
};
use crate::error::CodegenError;

/// The `endbr64` instruction bytes.
pub const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// Everything the emitter needs to know about one hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrampolineSpec {
    /// Address at which the trampoline will live in the target.
    pub address: u64,
    /// Address of the hook record (stored in every stash frame).
    pub record: u64,
    /// Address of the relocated prologue that the trampoline calls.
    pub relocated: u64,
    /// Stack layout (window size).
    pub layout: StashLayout,
    /// Start with `endbr64`.
    pub endbr64: bool,
}

fn fits_rel32(from_end: u64, to: u64) -> bool {
    i32::try_from(to.wrapping_sub(from_end) as i64).is_ok()
}

/// Assembles a trampoline for `spec`.
pub fn emit_trampoline(spec: &TrampolineSpec) -> Result<Trampoline, CodegenError> {
    emit_frame(
        spec.address,
        spec.record,
        spec.layout,
        spec.endbr64,
        CallTo::Direct(spec.relocated),
    )
}

/// Everything the emitter needs for a trampoline that calls through a pointer.
///
/// Such a trampoline is reached through a function pointer (CPython's PEP 523
/// frame-evaluation slot, for one) rather than through a patched entry, and calls
/// its target with `call qword [rip+disp32]` through the 8-byte word at `pointer`,
/// so the target may lie anywhere in the address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallThroughSpec {
    /// Address at which the trampoline will live.
    pub address: u64,
    /// Address of 16 bytes holding [`STASH_MARKER`] and then the hook record's
    /// address, which the trampoline pushes from there (within ±2 GiB).
    pub constants: u64,
    /// Address of the 8-byte word that holds the call target (within ±2 GiB of the trampoline).
    pub pointer: u64,
    /// Stack layout (window size, xmm area).
    pub layout: StashLayout,
    /// Start with `endbr64` (a target of indirect calls under CET).
    pub endbr64: bool,
}

/// Assembles a stash trampoline that calls through the pointer at `spec.pointer`.
///
/// The stash frame has the layout and the trampoline the offsets of
/// [`emit_trampoline`]'s, built more cheaply, since the caller calls through a
/// function pointer and so cannot expect more than the ABI (flags and
/// caller-saved registers are the callee's):
///
/// ```text
///   [endbr64]
///   push rbp ; mov rbp, rsp
///   push qword [rip -> marker]       ; one store per constant, not two
///   push qword [rip -> record address]
///   push rdi, rsi, rdx, rcx, r8, r9  ; the six argument registers
///   lea  rsp, [rsp-16]               ; the rax and r10 slots: reserved, not written
///   [xmm area, padding, window as in emit_trampoline]
///   call qword [rip -> target]
///   leave ; ret
/// ```
///
/// The rax and r10 slots hold stale stack bytes: a function pointer call is not
/// variadic (al) and passes no static chain (r10), and readers show only the six
/// argument registers. Each store fewer is measurable on a hot path such as
/// CPython's frame evaluation.
pub fn emit_call_through(spec: &CallThroughSpec) -> Result<Trampoline, CodegenError> {
    emit_frame(
        spec.address,
        0,
        spec.layout,
        spec.endbr64,
        CallTo::Pointer {
            pointer: spec.pointer,
            constants: spec.constants,
        },
    )
}

/// How the trampoline reaches the function it calls.
#[derive(Debug, Clone, Copy)]
enum CallTo {
    /// Patched entry: `call rel32` to this address; constants as immediates, all eight registers.
    Direct(u64),
    /// Call-through: `call qword [rip+disp32]` through the word at `pointer`;
    /// constants pushed from `constants`, the six argument registers.
    Pointer {
        /// The target word.
        pointer: u64,
        /// The marker word, then the record-address word.
        constants: u64,
    },
}

/// `push qword [rip+disp32]` of the word at `word`, for an instruction at `at`.
fn push_rip_relative(at: u64, word: u64) -> Result<[u8; 6], CodegenError> {
    if !fits_rel32(at + 6, word) {
        return Err(CodegenError::OutOfReach { from: at, to: word });
    }
    let disp = (word.wrapping_sub(at + 6) as i64 as i32).to_le_bytes();
    Ok([0xff, 0x35, disp[0], disp[1], disp[2], disp[3]])
}

/// The common trampoline: stash frame, stack window, the call, `leave; ret`.
// dynasm's register expansion converts the register number to `u8` again.
#[allow(clippy::useless_conversion)]
fn emit_frame(
    address: u64,
    record: u64,
    layout: StashLayout,
    endbr64: bool,
    call: CallTo,
) -> Result<Trampoline, CodegenError> {
    let words = layout.stack_words;
    if words > MAX_STACK_WORDS {
        return Err(CodegenError::WindowTooLarge {
            requested: words,
            max: MAX_STACK_WORDS,
        });
    }
    let base = usize::try_from(address).map_err(|_| CodegenError::Assembler("address".into()))?;
    let mut ops: VecAssembler<X64Relocation> = VecAssembler::new(base);
    let mut offsets = TrampolineOffsets::default();
    let here = |ops: &VecAssembler<X64Relocation>| ops.offset().0 as u32;

    if endbr64 {
        ops.extend(ENDBR64);
    }
    dynasm!(ops ; .arch x64 ; push rbp);
    offsets.after_push_rbp = here(&ops);
    dynasm!(ops ; .arch x64 ; mov rbp, rsp);
    offsets.after_mov_rbp = here(&ops);
    match call {
        CallTo::Direct(_) => {
            for value in [STASH_MARKER, record] {
                let lo = value as u32 as i32;
                let hi = (value >> 32) as u32 as i32;
                dynasm!(ops
                    ; .arch x64
                    ; push lo
                    ; mov DWORD [rsp + 4], hi
                );
            }
            for reg in STASHED_REGS {
                ops.extend(push_reg(reg.encoding()).as_slice());
            }
        }
        CallTo::Pointer { constants, .. } => {
            for word in [constants, constants + 8] {
                let at = address + u64::from(here(&ops));
                ops.extend(push_rip_relative(at, word)?);
            }
            for reg in ARGUMENT_REGS {
                ops.extend(push_reg(reg.encoding()).as_slice());
            }
            // The rax and r10 slots (see emit_call_through); `lea` leaves the flags.
            dynasm!(ops ; .arch x64 ; lea rsp, [rsp - 16]);
        }
    }
    if layout.xmm {
        // `lea`, not `sub`: the caller's flags stay untouched.
        dynasm!(ops ; .arch x64 ; lea rsp, [rsp - 128]);
        for i in 0..XMM_ARGS as u8 {
            ops.extend(movdqu_to_rsp(i).as_slice());
        }
    }
    if layout.padding() != 0 {
        dynasm!(ops ; .arch x64 ; lea rsp, [rsp - 8]);
    }
    for i in (0..i32::from(words)).rev() {
        ops.extend(push_rbp_relative(16 + 8 * i).as_slice());
    }
    let call_at = address + u64::from(here(&ops));
    match call {
        CallTo::Direct(to) => {
            if !fits_rel32(call_at + 5, to) {
                return Err(CodegenError::OutOfReach { from: call_at, to });
            }
            let target = to as usize;
            dynasm!(ops ; .arch x64 ; call extern target);
        }
        CallTo::Pointer { pointer, .. } => {
            // ff 15 disp32: call qword [rip + disp32], rip = the next instruction.
            if !fits_rel32(call_at + 6, pointer) {
                return Err(CodegenError::OutOfReach {
                    from: call_at,
                    to: pointer,
                });
            }
            let disp = pointer.wrapping_sub(call_at + 6) as i64 as i32;
            ops.extend([0xff, 0x15]);
            ops.extend(disp.to_le_bytes());
        }
    }
    offsets.after_call = here(&ops);
    dynasm!(ops ; .arch x64 ; leave);
    offsets.ret = here(&ops);
    dynasm!(ops ; .arch x64 ; ret);
    let code = ops
        .finalize()
        .map_err(|e| CodegenError::Assembler(e.to_string()))?;
    Ok(Trampoline {
        address,
        code,
        offsets,
    })
}

/// `push r64` in its shortest form (dynasm adds a REX prefix to every
/// dynamically chosen register, which costs a byte per push).
fn push_reg(encoding: u8) -> Vec<u8> {
    if encoding < 8 {
        vec![0x50 + encoding]
    } else {
        vec![0x41, 0x50 + (encoding - 8)]
    }
}

/// `movdqu [rsp + 16*i], xmm{i}` (i < 8): stores xmm{i}, changes no register or flag.
fn movdqu_to_rsp(i: u8) -> [u8; 6] {
    // F3 0F 7F /r; ModRM mod=01 (disp8), reg=xmm, rm=100 (SIB); SIB base=rsp, no index.
    [0xf3, 0x0f, 0x7f, 0x44 | (i << 3), 0x24, 16 * i]
}

/// `push qword [rbp + disp]` with an 8-bit displacement where it fits (dynasm
/// always picks 32 bits), so the largest window still fits the slot.
fn push_rbp_relative(disp: i32) -> Vec<u8> {
    match i8::try_from(disp) {
        Ok(d8) => vec![0xff, 0x75, d8 as u8],
        Err(_) => {
            let mut v = vec![0xff, 0xb5];
            v.extend_from_slice(&disp.to_le_bytes());
            v
        }
    }
}

/// The bytes that replace a function's patched prologue: `jmp rel32` to `to`, then `int3` fill.
pub fn jump_patch(at: u64, to: u64, patch_len: usize) -> Result<Vec<u8>, CodegenError> {
    if !fits_rel32(at + 5, to) {
        return Err(CodegenError::OutOfReach { from: at, to });
    }
    let rel = to.wrapping_sub(at + 5) as i64 as i32;
    let mut bytes = Vec::with_capacity(patch_len.max(5));
    bytes.push(0xe9);
    bytes.extend_from_slice(&rel.to_le_bytes());
    bytes.resize(patch_len.max(5), 0xcc);
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions, Formatter, Mnemonic, NasmFormatter};

    fn disasm(t: &Trampoline) -> Vec<(u64, Mnemonic, String)> {
        let mut d = Decoder::with_ip(64, &t.code, t.address, DecoderOptions::NONE);
        let mut f = NasmFormatter::new();
        let mut out = Vec::new();
        for i in &mut d {
            let mut s = String::new();
            f.format(&i, &mut s);
            out.push((i.ip(), i.mnemonic(), s));
        }
        out
    }

    #[test]
    fn writes_only_stack_and_frame_registers() {
        let cases = [0u16, 1, 2, 7, 14, 15, MAX_STACK_WORDS]
            .into_iter()
            .flat_map(|w| [(w, false), (w, true)]);
        for (words, xmm) in cases {
            let spec = TrampolineSpec {
                address: 0x7000_0000_1000,
                record: 0x7000_0000_0040,
                relocated: 0x7000_0000_1100,
                layout: StashLayout::new(words).with_xmm(xmm),
                endbr64: words == 1,
            };
            let t = emit_trampoline(&spec).unwrap();
            let ins = disasm(&t);
            let allowed = [
                Mnemonic::Endbr64,
                Mnemonic::Push,
                Mnemonic::Mov,
                Mnemonic::Lea,
                Mnemonic::Movdqu,
                Mnemonic::Call,
                Mnemonic::Leave,
                Mnemonic::Ret,
            ];
            for (_, m, text) in &ins {
                assert!(allowed.contains(m), "unexpected {text}");
                if *m == Mnemonic::Mov {
                    assert!(
                        text == "mov rbp,rsp" || text.starts_with("mov dword [rsp+4]"),
                        "{text}"
                    );
                }
                if *m == Mnemonic::Lea {
                    assert!(
                        text == "lea rsp,[rsp-8]" || (xmm && text == "lea rsp,[rsp-80h]"),
                        "{text}"
                    );
                }
            }
            let stores: Vec<&str> = ins
                .iter()
                .filter(|i| i.1 == Mnemonic::Movdqu)
                .map(|i| i.2.as_str())
                .collect();
            let want_stores: Vec<String> = if xmm {
                (0..8)
                    .map(|i| match i {
                        0 => "movdqu [rsp],xmm0".to_string(),
                        _ => format!("movdqu [rsp+{:X}h],xmm{i}", 16 * i),
                    })
                    .collect()
            } else {
                Vec::new()
            };
            assert_eq!(stores, want_stores);
            let call = ins.iter().find(|i| i.1 == Mnemonic::Call).unwrap();
            assert!(call.2.contains("1100"), "{}", call.2);
            // The window is copied highest word first, so it lands in order.
            let window: Vec<&str> = ins
                .iter()
                .filter(|i| i.2.starts_with("push qword [rbp+"))
                .map(|i| i.2.as_str())
                .collect();
            let expected: Vec<String> = (0..words)
                .rev()
                .map(|i| format!("push qword [rbp+{:X}h]", 16 + 8 * i))
                .collect();
            assert_eq!(window, expected);
            let regs: Vec<&str> = ins
                .iter()
                .filter(|i| i.1 == Mnemonic::Push && !i.2.contains('[') && i.2 != "push rbp")
                .filter(|i| !i.2.starts_with("push 0") && !i.2.ends_with('h'))
                .map(|i| i.2.as_str())
                .collect();
            let want: Vec<String> = STASHED_REGS
                .iter()
                .map(|r| format!("push {}", r.name()))
                .collect();
            assert_eq!(regs, want);
            // The largest window still leaves the relocated prologue its place.
            assert!(
                t.code.len() <= crate::hook::RELOCATED_OFFSET,
                "{words} words: {} bytes",
                t.code.len()
            );
            assert_eq!(
                t.after_call(),
                ins.iter().find(|i| i.1 == Mnemonic::Leave).unwrap().0
            );
            assert_eq!(t.address + u64::from(t.offsets.ret), ins.last().unwrap().0);
            assert_eq!(ins[0].1 == Mnemonic::Endbr64, spec.endbr64);
        }
    }

    #[test]
    fn refuses_unreachable_targets_and_big_windows() {
        let mut spec = TrampolineSpec {
            address: 0x1000,
            record: 0,
            relocated: 0x7fff_0000_0000,
            layout: StashLayout::new(0),
            endbr64: false,
        };
        assert!(matches!(
            emit_trampoline(&spec),
            Err(CodegenError::OutOfReach { .. })
        ));
        spec.relocated = 0x2000;
        spec.layout = StashLayout::new(MAX_STACK_WORDS + 1);
        assert!(matches!(
            emit_trampoline(&spec),
            Err(CodegenError::WindowTooLarge { .. })
        ));
    }

    #[test]
    fn call_through_builds_the_same_frame_with_fewer_stores() {
        for (words, xmm) in [
            (0u16, false),
            (3, true),
            (MAX_STACK_WORDS, false),
            (1, false),
        ] {
            let layout = StashLayout::new(words).with_xmm(xmm);
            let direct = emit_trampoline(&TrampolineSpec {
                address: 0x7000_0000_1000,
                record: 0x7000_0000_0040,
                relocated: 0x7000_0000_10a0,
                layout,
                endbr64: true,
            })
            .unwrap();
            let (constants, pointer) = (0x7000_0000_10e8, 0x7000_0000_10f8);
            let through = emit_call_through(&CallThroughSpec {
                address: 0x7000_0000_1000,
                constants,
                pointer,
                layout,
                endbr64: true,
            })
            .unwrap();
            assert_eq!(
                (
                    through.offsets.after_push_rbp,
                    through.offsets.after_mov_rbp
                ),
                (direct.offsets.after_push_rbp, direct.offsets.after_mov_rbp)
            );
            let ins = disasm(&through);
            let text: Vec<&str> = ins.iter().map(|i| i.2.as_str()).collect();
            let mut want = vec![
                "endbr64".to_string(),
                "push rbp".into(),
                "mov rbp,rsp".into(),
                format!("push qword [rel {constants:X}h]"),
                format!("push qword [rel {:X}h]", constants + 8),
            ];
            want.extend(ARGUMENT_REGS.iter().map(|r| format!("push {}", r.name())));
            want.push("lea rsp,[rsp-10h]".into());
            // From here on (xmm area, padding, window) the direct form's code, then the call.
            let direct_ins = disasm(&direct);
            let shared = direct_ins
                .iter()
                .skip_while(|i| i.2 != "push r10")
                .skip(1)
                .take_while(|i| i.1 != Mnemonic::Call)
                .map(|i| i.2.clone());
            want.extend(shared);
            want.push(format!("call qword [rel {pointer:X}h]"));
            want.extend(["leave".to_string(), "ret".to_string()]);
            assert_eq!(text, want);
            // rsp at the call is where the layout puts it: count what was pushed.
            let pushed: u64 = ins
                .iter()
                .filter(|i| i.1 == Mnemonic::Push && i.2 != "push rbp")
                .count() as u64
                * 8
                + 16
                + layout.xmm_len()
                + layout.padding();
            assert_eq!(pushed, layout.call_sp_offset());
            assert_eq!(
                through.after_call(),
                ins.iter().find(|i| i.1 == Mnemonic::Leave).unwrap().0
            );
            assert_eq!(
                through.address + u64::from(through.offsets.ret),
                ins.last().unwrap().0
            );
            assert!(through.code.len() < direct.code.len() + 8);
        }
        let far = emit_call_through(&CallThroughSpec {
            address: 0x1000,
            constants: 0x2000,
            pointer: 0x7fff_0000_0000,
            layout: StashLayout::new(0),
            endbr64: false,
        });
        assert!(matches!(far, Err(CodegenError::OutOfReach { .. })));
        let far = emit_call_through(&CallThroughSpec {
            address: 0x1000,
            constants: 0x7fff_0000_0000,
            pointer: 0x2000,
            layout: StashLayout::new(0),
            endbr64: false,
        });
        assert!(matches!(far, Err(CodegenError::OutOfReach { .. })));
    }

    #[test]
    fn jump_patch_encodes_rel32_and_fills() {
        let p = jump_patch(0x1000, 0x2000, 7).unwrap();
        assert_eq!(p, vec![0xe9, 0xfb, 0x0f, 0, 0, 0xcc, 0xcc]);
        assert!(jump_patch(0x1000, 0x1_0000_1000, 5).is_err());
    }
}
