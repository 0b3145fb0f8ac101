//! The i386 trampoline emitter (dynasmrt `x86`, assembled for the remote address).
//!
//! ```text
//!   [endbr32]                      ; only when the hooked function had one
//!   push ebp
//!   mov  ebp, esp                  ; frame base
//!   push MARKER.hi ; push MARKER.lo                  -> ebp-4, ebp-8
//!   push RECORD                                      -> ebp-12
//!   push eax ; push edx ; push ecx                   -> ebp-16 .. ebp-24
//!   [lea esp, [esp-pad]]           ; keep the entry's alignment for the callee
//!   push dword [ebp+8+4*(n-1)] .. push dword [ebp+8] ; stack-argument window
//!   call relocated_prologue
//! after_call:                      ; esp = ebp - K + N, N = bytes the callee popped (ret N)
//!   push eax
//!   lea  eax, [esp+4+K]            ; eax = ebp + N
//!   push dword [ebp+4] ; pop dword [eax+4]   ; return address  -> ebp+N+4
//!   push dword [ebp]   ; pop dword [eax]     ; caller's ebp    -> ebp+N
//!   push dword [esp]   ; pop dword [eax-4]   ; callee's eax    -> ebp+N-4
//!   lea  esp, [eax-4]
//!   pop  eax
//!   pop  ebp
//!   ret                            ; the caller sees esp advanced by N, as without the hook
//! ```
//!
//! The epilogue measures how many argument bytes the callee popped (`ret 4` of a
//! function returning a struct in memory, `ret N` of stdcall-style callees) from
//! `esp` after the call and moves the return address up by as many bytes, so the
//! caller's `esp` ends exactly where the unhooked function would have left it.
//! No register is written except `esp`/`ebp`, which end as the function leaves
//! them (`eax` is saved and restored around the epilogue); no flags are touched
//! (`push`, `pop`, `mov`, `lea`, `call`, `ret` leave EFLAGS alone). Memory written
//! lies below the caller's final `esp`, in the trampoline's own frame and the
//! argument words the callee popped.

use dynasmrt::x86::X86Relocation;
use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi, VecAssembler};

use super::frame::{StashLayout, MAX_STACK_WORDS, STASHED_REGS, STASH_MARKER};
use crate::error::CodegenError;
use crate::trampoline::{Trampoline, TrampolineOffsets};

/// The `endbr32` instruction bytes.
pub const ENDBR32: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfb];

/// Bytes from `after_call` to the epilogue's `pop eax` (esp is back at the frame, `ebp` still the base).
pub const EPILOGUE_POP_EAX: u32 = 1 + 4 + 3 + 3 + 3 + 2 + 3 + 3 + 3;
/// Bytes from `after_call` to the final `ret` (just after `pop ebp`).
pub const EPILOGUE_RET: u32 = EPILOGUE_POP_EAX + 2;

/// Everything the emitter needs to know about one i386 hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrampolineSpec {
    /// Address at which the trampoline will live in the target (below 4 GiB).
    pub address: u64,
    /// Address of the hook record (stored in every stash frame).
    pub record: u64,
    /// Address of the relocated prologue that the trampoline calls.
    pub relocated: u64,
    /// Stack layout (window size).
    pub layout: StashLayout,
    /// Start with `endbr32`.
    pub endbr32: bool,
}

/// Refuses an address outside the 32-bit address space.
pub(crate) fn check_32bit(what: &str, address: u64) -> Result<u32, CodegenError> {
    u32::try_from(address).map_err(|_| {
        CodegenError::Assembler(format!(
            "{what} 0x{address:x} lies above 4 GiB: i386 code must live in the 32-bit address space"
        ))
    })
}

/// `rel32` from the end of a 5-byte branch at `at` to `to`; every 32-bit target is in reach.
pub(crate) fn rel32(at: u32, to: u32) -> i32 {
    to.wrapping_sub(at.wrapping_add(5)) as i32
}

/// Assembles an i386 trampoline for `spec`.
pub fn emit_trampoline(spec: &TrampolineSpec) -> Result<Trampoline, CodegenError> {
    let words = spec.layout.stack_words;
    if words > MAX_STACK_WORDS {
        return Err(CodegenError::WindowTooLarge {
            requested: words,
            max: MAX_STACK_WORDS,
        });
    }
    let address = check_32bit("trampoline address", spec.address)?;
    let record = check_32bit("hook record address", spec.record)?;
    let relocated = check_32bit("relocated prologue address", spec.relocated)?;
    let mut ops: VecAssembler<X86Relocation> = VecAssembler::new(address as usize);
    let mut offsets = TrampolineOffsets::default();
    let here = |ops: &VecAssembler<X86Relocation>| ops.offset().0 as u32;

    if spec.endbr32 {
        ops.extend(ENDBR32);
    }
    dynasm!(ops ; .arch x86 ; push ebp);
    offsets.after_push_rbp = here(&ops);
    dynasm!(ops ; .arch x86 ; mov ebp, esp);
    offsets.after_mov_rbp = here(&ops);
    let marker_hi = (STASH_MARKER >> 32) as u32 as i32;
    let marker_lo = STASH_MARKER as u32 as i32;
    let record = record as i32;
    dynasm!(ops
        ; .arch x86
        ; push DWORD marker_hi
        ; push DWORD marker_lo
        ; push DWORD record
    );
    for reg in STASHED_REGS {
        ops.push(0x50 + reg.encoding());
    }
    let padding = spec.layout.padding() as i8;
    if padding != 0 {
        // lea esp, [esp - padding]
        ops.extend([0x8d, 0x64, 0x24, padding.wrapping_neg() as u8]);
    }
    for i in (0..words).rev() {
        // push dword [ebp + 8 + 4i]: disp8 fits the largest window.
        ops.extend([0xff, 0x75, (8 + 4 * i) as u8]);
    }
    let target = relocated as usize;
    dynasm!(ops ; .arch x86 ; call extern target);
    offsets.after_call = here(&ops);
    // lea eax, [esp + 4 + K]; K is at most 24 + 12 + 64, a disp8.
    let reach = (4 + spec.layout.call_sp_offset()) as u8;
    dynasm!(ops ; .arch x86 ; push eax);
    ops.extend([0x8d, 0x44, 0x24, reach]);
    dynasm!(ops
        ; .arch x86
        ; push DWORD [ebp + 4]
        ; pop DWORD [eax + 4]
        ; push DWORD [ebp]
        ; pop DWORD [eax]
        ; push DWORD [esp]
        ; pop DWORD [eax - 4]
        ; lea esp, [eax - 4]
    );
    debug_assert_eq!(here(&ops), offsets.after_call + EPILOGUE_POP_EAX);
    dynasm!(ops
        ; .arch x86
        ; pop eax
        ; pop ebp
    );
    offsets.ret = here(&ops);
    dynasm!(ops ; .arch x86 ; ret);
    let code = ops
        .finalize()
        .map_err(|e| CodegenError::Assembler(e.to_string()))?;
    Ok(Trampoline {
        address: spec.address,
        code,
        offsets,
    })
}

/// The bytes that replace a function's patched prologue: `jmp rel32` to `to`, then `int3` fill.
pub fn jump_patch(at: u64, to: u64, patch_len: usize) -> Result<Vec<u8>, CodegenError> {
    let at = check_32bit("patch address", at)?;
    let to = check_32bit("trampoline address", to)?;
    let mut bytes = Vec::with_capacity(patch_len.max(5));
    bytes.push(0xe9);
    bytes.extend_from_slice(&rel32(at, to).to_le_bytes());
    bytes.resize(patch_len.max(5), 0xcc);
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions, Formatter, Mnemonic, NasmFormatter};

    fn disasm(t: &Trampoline) -> Vec<(u64, Mnemonic, String)> {
        let mut d = Decoder::with_ip(32, &t.code, t.address, DecoderOptions::NONE);
        let mut f = NasmFormatter::new();
        let mut out = Vec::new();
        for i in &mut d {
            assert!(!i.is_invalid(), "invalid instruction at {:x}", i.ip());
            let mut s = String::new();
            f.format(&i, &mut s);
            out.push((i.ip(), i.mnemonic(), s));
        }
        out
    }

    /// A number as the NASM formatter prints it.
    fn nasm(v: u64) -> String {
        if v < 10 {
            return v.to_string();
        }
        let hex = format!("{v:X}h");
        if hex.starts_with(|c: char| c.is_ascii_alphabetic()) {
            format!("0{hex}")
        } else {
            hex
        }
    }

    fn spec(words: u16) -> TrampolineSpec {
        TrampolineSpec {
            address: 0x5655_1000,
            record: 0x5655_0040,
            relocated: 0x5655_1080,
            layout: StashLayout::new(words),
            endbr32: words == 1,
        }
    }

    #[test]
    fn frame_matches_the_layout_and_touches_only_its_own_state() {
        for words in 0..=MAX_STACK_WORDS {
            let spec = spec(words);
            let t = emit_trampoline(&spec).unwrap();
            let ins = disasm(&t);
            let texts: Vec<&str> = ins.iter().map(|i| i.2.as_str()).collect();
            let skip = usize::from(spec.endbr32);
            assert_eq!(ins[0].1 == Mnemonic::Endbr32, spec.endbr32);
            let mut want = vec![
                "push ebp".to_string(),
                "mov ebp,esp".into(),
                "push 48534154h".into(), // "TASH"
                "push 53475241h".into(), // "ARGS"
                "push 56550040h".into(),
                "push eax".into(),
                "push edx".into(),
                "push ecx".into(),
            ];
            let pad = spec.layout.padding();
            if pad != 0 {
                want.push(format!("lea esp,[esp-{}]", nasm(pad)));
            }
            for i in (0..words).rev() {
                want.push(format!("push dword [ebp+{}]", nasm(u64::from(8 + 4 * i))));
            }
            want.push("call 56551080h".into());
            let k = 4 + spec.layout.call_sp_offset();
            want.extend([
                "push eax".to_string(),
                format!("lea eax,[esp+{}]", nasm(k)),
                "push dword [ebp+4]".into(),
                "pop dword [eax+4]".into(),
                "push dword [ebp]".into(),
                "pop dword [eax]".into(),
                "push dword [esp]".into(),
                "pop dword [eax-4]".into(),
                "lea esp,[eax-4]".into(),
                "pop eax".into(),
                "pop ebp".into(),
                "ret".into(),
            ]);
            assert_eq!(&texts[skip..], want, "{words} words");
            let after_call = ins.iter().position(|i| i.1 == Mnemonic::Call).unwrap() + 1;
            assert_eq!(t.after_call(), ins[after_call].0);
            assert_eq!(
                t.address + u64::from(t.offsets.after_call + EPILOGUE_POP_EAX),
                ins[ins.len() - 3].0
            );
            assert_eq!(t.address + u64::from(t.offsets.ret), ins.last().unwrap().0);
            assert_eq!(
                u64::from(t.offsets.after_call + EPILOGUE_RET),
                u64::from(t.offsets.ret)
            );
            assert!(
                t.code.len() <= crate::hook::RELOCATED_OFFSET,
                "{words} words: {} bytes",
                t.code.len()
            );
        }
    }

    /// Runs the trampoline's effect on a model machine: every push, pop, lea and the
    /// call (as a callee popping `popped` bytes), then checks the caller's view.
    #[test]
    fn epilogue_leaves_the_caller_as_the_function_would_have() {
        use iced_x86::{Instruction, OpKind, Register};
        use std::collections::HashMap;
        for words in [0u16, 1, 3, 4, 16] {
            for popped in [0u32, 4, 8, 12, 100] {
                let t = emit_trampoline(&spec(words)).unwrap();
                let mut mem: HashMap<u32, u32> = HashMap::new();
                let entry_esp = 0x00ff_f00c_u32;
                let caller_ret = 0x0804_9999_u32;
                mem.insert(entry_esp, caller_ret);
                for i in 0..40 {
                    mem.insert(entry_esp + 4 + 4 * i, 0xa000 + i);
                }
                let (mut eax, mut ebp, mut esp) = (0x1111_u32, 0x2222_u32, entry_esp);
                let (edx, ecx) = (0x3333_u32, 0x4444_u32);
                let mut callee_esp = None;
                let reg = |r: Register, eax: u32, ebp: u32, esp: u32| match r {
                    Register::EAX => eax,
                    Register::EBP => ebp,
                    Register::ESP => esp,
                    Register::EDX => edx,
                    Register::ECX => ecx,
                    other => panic!("unexpected register {other:?}"),
                };
                let addr = |i: &Instruction, eax: u32, ebp: u32, esp: u32| {
                    reg(i.memory_base(), eax, ebp, esp).wrapping_add(i.memory_displacement32())
                };
                let d = Decoder::with_ip(32, &t.code, t.address, DecoderOptions::NONE);
                for i in d {
                    match i.mnemonic() {
                        Mnemonic::Endbr32 => {}
                        Mnemonic::Push => {
                            let v = match i.op0_kind() {
                                OpKind::Register => reg(i.op0_register(), eax, ebp, esp),
                                OpKind::Memory => mem[&addr(&i, eax, ebp, esp)],
                                _ => i.immediate32(),
                            };
                            esp -= 4;
                            mem.insert(esp, v);
                        }
                        Mnemonic::Pop => {
                            let v = mem[&esp];
                            esp += 4;
                            match i.op0_kind() {
                                OpKind::Register if i.op0_register() == Register::EAX => eax = v,
                                OpKind::Register if i.op0_register() == Register::EBP => ebp = v,
                                OpKind::Memory => {
                                    mem.insert(addr(&i, eax, ebp, esp), v);
                                }
                                _ => panic!("unexpected pop"),
                            }
                        }
                        Mnemonic::Mov => ebp = esp,
                        Mnemonic::Lea => {
                            let v = addr(&i, eax, ebp, esp);
                            match i.op0_register() {
                                Register::ESP => esp = v,
                                Register::EAX => eax = v,
                                other => panic!("lea into {other:?}"),
                            }
                        }
                        Mnemonic::Call => {
                            // The callee: entered with the copied window, returns 42 and pops.
                            callee_esp = Some(esp - 4);
                            for w in 0..u32::from(words) {
                                assert_eq!(mem[&(esp + 4 * w)], 0xa000 + w, "window word {w}");
                            }
                            eax = 42;
                            esp += popped;
                        }
                        Mnemonic::Ret => {
                            assert_eq!(mem[&esp], caller_ret);
                            esp += 4;
                        }
                        other => panic!("unexpected {other:?}"),
                    }
                }
                assert_eq!(callee_esp.unwrap() % 16, entry_esp % 16, "callee alignment");
                assert_eq!(eax, 42, "return value kept");
                assert_eq!(ebp, 0x2222, "caller's ebp restored");
                assert_eq!(esp, entry_esp + 4 + popped, "callee's pop passed on");
                for i in popped / 4..40 {
                    assert_eq!(
                        mem[&(entry_esp + 4 + 4 * i)],
                        0xa000 + i,
                        "caller-visible argument word {i} unchanged"
                    );
                }
            }
        }
    }

    #[test]
    fn refuses_high_addresses_and_big_windows() {
        let mut s = spec(0);
        s.relocated = 0x1_0000_0000;
        assert!(matches!(
            emit_trampoline(&s),
            Err(CodegenError::Assembler(m)) if m.contains("4 GiB")
        ));
        let mut s = spec(MAX_STACK_WORDS + 1);
        s.endbr32 = false;
        assert!(matches!(
            emit_trampoline(&s),
            Err(CodegenError::WindowTooLarge { .. })
        ));
    }

    #[test]
    fn jump_patch_wraps_around_the_32bit_space() {
        let p = jump_patch(0x1000, 0x2000, 7).unwrap();
        assert_eq!(p, vec![0xe9, 0xfb, 0x0f, 0, 0, 0xcc, 0xcc]);
        // 3.75 GiB forwards is 256 MiB backwards modulo 2^32.
        let p = jump_patch(0x1000_0000, 0x0100_0000, 5).unwrap();
        let rel = i32::from_le_bytes([p[1], p[2], p[3], p[4]]);
        assert_eq!(0x1000_0005u32.wrapping_add(rel as u32), 0x0100_0000);
        assert!(jump_patch(0x1_0000_0000, 0x2000, 5).is_err());
    }
}
