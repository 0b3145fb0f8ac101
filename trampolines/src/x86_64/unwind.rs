//! DWARF call-frame information (`.eh_frame`) for a hook's trampoline and relocated prologue.
//!
//! Other unwinders (libgcc for C++ exceptions and `backtrace()`, gdb, perf) know
//! nothing about code in the arena. This module describes it in the format they all
//! read: one CIE and two FDEs per hook, followed by the zero terminator that
//! `__register_frame_info` expects. Addresses are absolute (`DW_EH_PE_absptr`), so the
//! same bytes work wherever they are stored: registered in the target, or as the
//! `.eh_frame` section of a symbol file.
//!
//! The trampoline's rows come only from the instruction boundaries the emitter
//! reports ([`TrampolineOffsets`]), never from byte counts inside its frame:
//!
//! ```text
//!   [0, after_push_rbp)             CFA = rsp+8    ra = [CFA-8]
//!   [after_push_rbp, after_mov_rbp) CFA = rsp+16   rbp = [CFA-16]
//!   [after_mov_rbp, ret)            CFA = rbp+16   rbp = [CFA-16]   (pushes, call, leave)
//!   [ret, end)                      CFA = rsp+8    rbp = same value
//! ```
//!
//! The relocated prologue is a re-encoding of the function's first instructions,
//! entered by the trampoline's `call` (so CFA = rsp+8 at its first byte); its rows
//! come from following what each instruction does to `rsp` (`push`, `pop`,
//! `sub`/`add rsp, imm`, `lea rsp, [rsp+d]`, `mov rbp, rsp`). An instruction that
//! changes `rsp` in any other way ends the described range there.

use gimli::write::{
    Address, CallFrameInstruction, CommonInformationEntry, EhFrame, EndianVec,
    FrameDescriptionEntry, FrameTable,
};
use gimli::{Encoding, Format, LittleEndian, Register, X86_64};
use iced_x86::{
    Code, Decoder, DecoderOptions, Instruction, InstructionInfoFactory, Mnemonic, OpAccess, OpKind,
    Register as IcedReg,
};

use crate::error::CodegenError;
use crate::trampoline::TrampolineOffsets;

/// The code a hook adds to the target, as [`hook_eh_frame`] describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookCodeRanges<'a> {
    /// Trampoline address.
    pub trampoline: u64,
    /// Trampoline length in bytes.
    pub trampoline_len: u32,
    /// The trampoline's instruction boundaries.
    pub offsets: TrampolineOffsets,
    /// Relocated prologue address.
    pub relocated: u64,
    /// The relocated prologue's code (the moved instructions and the jump back).
    pub relocated_code: &'a [u8],
}

/// `.eh_frame` bytes for one hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookUnwind {
    /// CIE, FDEs and the zero terminator.
    pub eh_frame: Vec<u8>,
    /// Bytes of the relocated prologue that its FDE covers (all of it unless an
    /// instruction moved `rsp` in a way the analysis does not follow).
    pub relocated_covered: u32,
}

fn unwind_error(reason: impl Into<String>) -> CodegenError {
    CodegenError::Unwind(reason.into())
}

/// Builds the `.eh_frame` bytes describing a hook's trampoline and relocated prologue.
pub fn hook_eh_frame(ranges: &HookCodeRanges<'_>) -> Result<HookUnwind, CodegenError> {
    let o = ranges.offsets;
    if !(o.after_push_rbp < o.after_mov_rbp
        && o.after_mov_rbp < o.after_call
        && o.after_call <= o.ret
        && o.ret < ranges.trampoline_len)
    {
        return Err(unwind_error(format!(
            "trampoline offsets out of order: {o:?}, length {}",
            ranges.trampoline_len
        )));
    }
    let encoding = Encoding {
        format: Format::Dwarf32,
        version: 1,
        address_size: 8,
    };
    let mut cie = CommonInformationEntry::new(encoding, 1, -8, X86_64::RA);
    cie.add_instruction(CallFrameInstruction::Cfa(X86_64::RSP, 8));
    cie.add_instruction(CallFrameInstruction::Offset(X86_64::RA, -8));
    let mut table = FrameTable::default();
    let cie_id = table.add_cie(cie);

    let mut fde =
        FrameDescriptionEntry::new(Address::Constant(ranges.trampoline), ranges.trampoline_len);
    fde.add_instruction(o.after_push_rbp, CallFrameInstruction::CfaOffset(16));
    fde.add_instruction(
        o.after_push_rbp,
        CallFrameInstruction::Offset(X86_64::RBP, -16),
    );
    fde.add_instruction(
        o.after_mov_rbp,
        CallFrameInstruction::CfaRegister(X86_64::RBP),
    );
    fde.add_instruction(o.ret, CallFrameInstruction::Cfa(X86_64::RSP, 8));
    fde.add_instruction(o.ret, CallFrameInstruction::SameValue(X86_64::RBP));
    table.add_fde(cie_id, fde);

    let (rows, covered) = relocated_rows(ranges.relocated, ranges.relocated_code)?;
    if covered > 0 {
        let mut fde = FrameDescriptionEntry::new(Address::Constant(ranges.relocated), covered);
        for (offset, instruction) in rows {
            fde.add_instruction(offset, instruction);
        }
        table.add_fde(cie_id, fde);
    }

    let mut eh_frame = EhFrame(EndianVec::new(LittleEndian));
    table
        .write_eh_frame(&mut eh_frame)
        .map_err(|e| unwind_error(e.to_string()))?;
    let mut bytes = eh_frame.0.into_vec();
    bytes.extend_from_slice(&[0; 4]);
    Ok(HookUnwind {
        eh_frame: bytes,
        relocated_covered: covered,
    })
}

/// DWARF number of a callee-saved register whose save the unwinder must know about.
fn callee_saved(reg: IcedReg) -> Option<Register> {
    Some(match reg {
        IcedReg::RBX => X86_64::RBX,
        IcedReg::RBP => X86_64::RBP,
        IcedReg::R12 => X86_64::R12,
        IcedReg::R13 => X86_64::R13,
        IcedReg::R14 => X86_64::R14,
        IcedReg::R15 => X86_64::R15,
        _ => return None,
    })
}

/// What one instruction does to the frame, as far as the rows need to know.
enum Effect {
    /// `rsp` moves down by this many bytes (negative: up); optionally saves a register at the new `rsp`.
    Stack(i64, Option<Register>),
    /// `mov rbp, rsp`: the CFA is from now on computed from `rbp`.
    FramePointer,
    /// Leaves `rsp` and `rbp` alone.
    None,
    /// Changes `rsp` (or the frame pointer) in a way the rows cannot follow.
    Unknown,
}

fn writes(info: &mut InstructionInfoFactory, i: &Instruction, reg: IcedReg) -> bool {
    info.info(i).used_registers().iter().any(|u| {
        u.register().full_register() == reg
            && matches!(
                u.access(),
                OpAccess::Write
                    | OpAccess::ReadWrite
                    | OpAccess::CondWrite
                    | OpAccess::ReadCondWrite
            )
    })
}

fn effect(info: &mut InstructionInfoFactory, i: &Instruction, rbp_is_cfa: bool) -> Effect {
    let rsp_op0 =
        i.op_count() >= 1 && i.op0_kind() == OpKind::Register && i.op0_register() == IcedReg::RSP;
    match i.mnemonic() {
        Mnemonic::Push if i.stack_pointer_increment() == -8 => {
            let saved = (i.op0_kind() == OpKind::Register)
                .then(|| callee_saved(i.op0_register()))
                .flatten();
            return Effect::Stack(8, saved);
        }
        Mnemonic::Pop
            if i.stack_pointer_increment() == 8
                && !(i.op0_kind() == OpKind::Register && i.op0_register() == IcedReg::RSP) =>
        {
            if rbp_is_cfa && i.op0_kind() == OpKind::Register && i.op0_register() == IcedReg::RBP {
                return Effect::Unknown;
            }
            return Effect::Stack(-8, None);
        }
        Mnemonic::Sub | Mnemonic::Add if rsp_op0 && i.op_count() == 2 => {
            if matches!(
                i.op1_kind(),
                OpKind::Immediate8to64
                    | OpKind::Immediate32to64
                    | OpKind::Immediate8
                    | OpKind::Immediate32
            ) {
                let imm = i.immediate(1) as i64;
                return Effect::Stack(
                    if i.mnemonic() == Mnemonic::Sub {
                        imm
                    } else {
                        -imm
                    },
                    None,
                );
            }
            return Effect::Unknown;
        }
        Mnemonic::Lea if rsp_op0 => {
            if i.memory_base() == IcedReg::RSP && i.memory_index() == IcedReg::None {
                return Effect::Stack(-(i.memory_displacement64() as i64), None);
            }
            return Effect::Unknown;
        }
        _ => {}
    }
    if matches!(i.code(), Code::Mov_r64_rm64 | Code::Mov_rm64_r64)
        && i.op0_kind() == OpKind::Register
        && i.op0_register() == IcedReg::RBP
        && i.op1_kind() == OpKind::Register
        && i.op1_register() == IcedReg::RSP
    {
        return Effect::FramePointer;
    }
    // The final jump back, and every instruction that leaves rsp (and a CFA rbp) alone.
    let stack_change = i.stack_pointer_increment() != 0 || writes(info, i, IcedReg::RSP);
    if stack_change || (rbp_is_cfa && writes(info, i, IcedReg::RBP)) {
        return Effect::Unknown;
    }
    Effect::None
}

/// Rows of the relocated prologue and the number of bytes they cover.
fn relocated_rows(
    address: u64,
    code: &[u8],
) -> Result<(Vec<(u32, CallFrameInstruction)>, u32), CodegenError> {
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    let mut rows = Vec::new();
    let mut depth: i64 = 8; // CFA - rsp: the return address into the trampoline.
    let mut rbp_is_cfa = false;
    let mut saved: Vec<Register> = Vec::new();
    let mut offset = 0u32;
    while decoder.can_decode() {
        let i = decoder.decode();
        if i.is_invalid() {
            return Err(unwind_error(format!(
                "invalid instruction in the relocated prologue at +0x{offset:x}"
            )));
        }
        let end = offset + i.len() as u32;
        match effect(&mut info, &i, rbp_is_cfa) {
            Effect::Unknown => return Ok((rows, offset)),
            Effect::None => {}
            Effect::FramePointer => {
                rbp_is_cfa = true;
                rows.push((end, CallFrameInstruction::Cfa(X86_64::RBP, depth as i32)));
            }
            Effect::Stack(delta, reg) => {
                depth += delta;
                if !(8..=1 << 20).contains(&depth) {
                    return Ok((rows, offset));
                }
                if !rbp_is_cfa {
                    rows.push((end, CallFrameInstruction::CfaOffset(depth as i32)));
                }
                if let Some(reg) = reg.filter(|r| !saved.contains(r)) {
                    saved.push(reg);
                    rows.push((end, CallFrameInstruction::Offset(reg, -(depth as i32))));
                }
            }
        }
        offset = end;
        if i.mnemonic() == Mnemonic::Jmp {
            break;
        }
    }
    Ok((rows, offset))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x86_64::{emit_trampoline, plan_patch, StashLayout, TrampolineSpec};
    use gimli::{
        BaseAddresses, CfaRule, EhFrame as ReadEhFrame, RegisterRule, UnwindContext, UnwindSection,
    };

    /// `(cfa register, cfa offset, ra rule offset, rbp rule)` at `addr`.
    fn rules_at(bytes: &[u8], addr: u64) -> Option<(Register, i64, i64, RegisterRule<usize>)> {
        let section = ReadEhFrame::new(bytes, LittleEndian);
        let mut ctx = UnwindContext::new();
        let row = section
            .unwind_info_for_address(
                &BaseAddresses::default(),
                &mut ctx,
                addr,
                ReadEhFrame::cie_from_offset,
            )
            .ok()?;
        let (reg, off) = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => (*register, *offset),
            CfaRule::Expression(_) => return None,
        };
        let ra = match row.register(X86_64::RA) {
            Some(RegisterRule::Offset(o)) => o,
            _ => return None,
        };
        Some((
            reg,
            off,
            ra,
            row.register(X86_64::RBP).unwrap_or(RegisterRule::Undefined),
        ))
    }

    fn hook(
        code: &[u8],
        endbr64: bool,
        words: u16,
    ) -> (crate::x86_64::Trampoline, Vec<u8>, u64, HookUnwind) {
        let function = 0x5555_0000_1000;
        let plan = plan_patch(function, code).unwrap();
        let relocated_at = 0x5555_1000_0080;
        let relocated = plan.relocate(relocated_at).unwrap();
        let t = emit_trampoline(&TrampolineSpec {
            address: 0x5555_1000_0000,
            record: 0x5555_0fff_0040,
            relocated: relocated_at,
            layout: StashLayout::new(words),
            endbr64,
        })
        .unwrap();
        let unwind = hook_eh_frame(&HookCodeRanges {
            trampoline: t.address,
            trampoline_len: t.code.len() as u32,
            offsets: t.offsets,
            relocated: relocated_at,
            relocated_code: &relocated.code,
        })
        .unwrap();
        (t, relocated.code, relocated_at, unwind)
    }

    #[test]
    fn trampoline_rows_follow_the_emitted_offsets() {
        for (endbr64, words) in [(false, 0u16), (true, 3), (false, 16)] {
            let mut code = if endbr64 {
                vec![0xf3, 0x0f, 0x1e, 0xfa]
            } else {
                vec![]
            };
            code.extend_from_slice(&[0x53, 0x48, 0x83, 0xec, 0x20, 0x90, 0xc3]);
            let (t, _, _, unwind) = hook(&code, endbr64, words);
            let o = t.offsets;
            let at = |off: u32| rules_at(&unwind.eh_frame, t.address + u64::from(off)).unwrap();
            for off in 0..t.code.len() as u32 {
                let (reg, cfa, ra, rbp) = at(off);
                assert_eq!(ra, -8, "ra at +{off}");
                if off < o.after_push_rbp {
                    assert_eq!((reg, cfa), (X86_64::RSP, 8), "+{off}");
                    assert!(!matches!(rbp, RegisterRule::Offset(_)), "+{off}: {rbp:?}");
                } else if off < o.after_mov_rbp {
                    assert_eq!(
                        (reg, cfa, rbp),
                        (X86_64::RSP, 16, RegisterRule::Offset(-16))
                    );
                } else if off < o.ret {
                    assert_eq!(
                        (reg, cfa, rbp),
                        (X86_64::RBP, 16, RegisterRule::Offset(-16))
                    );
                } else {
                    assert_eq!((reg, cfa, rbp), (X86_64::RSP, 8, RegisterRule::SameValue));
                }
            }
            assert!(rules_at(&unwind.eh_frame, t.address + t.code.len() as u64).is_none());
            assert!(rules_at(&unwind.eh_frame, t.address - 1).is_none());
            assert_eq!(&unwind.eh_frame[unwind.eh_frame.len() - 4..], &[0; 4]);
        }
    }

    #[test]
    fn relocated_prologue_rows_follow_pushes_and_frame_pointer() {
        // push rbp; mov rbp,rsp; push rbx; sub rsp,0x18; ... ret
        let code = [
            0x55, 0x48, 0x89, 0xe5, 0x53, 0x48, 0x83, 0xec, 0x18, 0x90, 0x90, 0xc3,
        ];
        let (_, reloc, at, unwind) = hook(&code, false, 0);
        assert_eq!(unwind.relocated_covered as usize, reloc.len());
        let rule = |off: u64| rules_at(&unwind.eh_frame, at + off).unwrap();
        // Relocated layout: 55 | 48 89 e5 | 53 | 48 83 ec 18 | e9 rel32
        assert_eq!(rule(0).0, X86_64::RSP);
        assert_eq!(rule(0).1, 8);
        assert_eq!(
            (rule(1).0, rule(1).1, rule(1).3),
            (X86_64::RSP, 16, RegisterRule::Offset(-16))
        );
        assert_eq!((rule(4).0, rule(4).1), (X86_64::RBP, 16));
        assert_eq!((rule(5).0, rule(5).1), (X86_64::RBP, 16));
        assert_eq!((rule(9).0, rule(9).1, rule(9).2), (X86_64::RBP, 16, -8));
        // rbx was saved at CFA-24 by the push.
        let section = ReadEhFrame::new(&unwind.eh_frame[..], LittleEndian);
        let mut ctx = UnwindContext::new();
        let row = section
            .unwind_info_for_address(
                &BaseAddresses::default(),
                &mut ctx,
                at + 9,
                ReadEhFrame::cie_from_offset,
            )
            .unwrap();
        assert_eq!(row.register(X86_64::RBX), Some(RegisterRule::Offset(-24)));
    }

    #[test]
    fn relocated_prologue_without_frame_pointer_tracks_rsp() {
        // push r15; push r14; sub rsp,0x28; mov eax,edi; ...
        let code = [
            0x41, 0x57, 0x41, 0x56, 0x48, 0x83, 0xec, 0x28, 0x89, 0xf8, 0xc3,
        ];
        let (_, reloc, at, unwind) = hook(&code, false, 0);
        assert_eq!(unwind.relocated_covered as usize, reloc.len());
        let rule = |off: u64| rules_at(&unwind.eh_frame, at + off).unwrap();
        assert_eq!((rule(0).0, rule(0).1), (X86_64::RSP, 8));
        assert_eq!(rule(2).1, 16);
        assert_eq!(rule(4).1, 24);
        assert_eq!(rule(8).1, 24 + 0x28);
        assert_eq!(rule(reloc.len() as u64 - 1).1, 24 + 0x28);
        assert!(rules_at(&unwind.eh_frame, at + reloc.len() as u64).is_none());
    }

    #[test]
    fn untracked_stack_change_ends_the_range() {
        // and rsp,-16 (48 83 e4 f0); push rbx; ... : nothing after the `and` is described.
        let code = [0x48, 0x83, 0xe4, 0xf0, 0x53, 0x90, 0xc3];
        let (_, _, at, unwind) = hook(&code, false, 0);
        assert_eq!(unwind.relocated_covered, 0);
        assert!(rules_at(&unwind.eh_frame, at).is_none());
        // mov eax,edi; and rsp,-16: the first instruction is still described.
        let code = [0x89, 0xf8, 0x90, 0x48, 0x83, 0xe4, 0xf0, 0xc3];
        let (_, _, at, unwind) = hook(&code, false, 0);
        assert_eq!(unwind.relocated_covered, 3);
        assert_eq!(rules_at(&unwind.eh_frame, at + 2).unwrap().1, 8);
    }

    #[test]
    fn refuses_offsets_out_of_order() {
        let bad = HookCodeRanges {
            trampoline: 0x1000,
            trampoline_len: 10,
            offsets: TrampolineOffsets {
                after_push_rbp: 5,
                after_mov_rbp: 4,
                after_call: 8,
                ret: 9,
            },
            relocated: 0x1080,
            relocated_code: &[0xe9, 0, 0, 0, 0],
        };
        assert!(matches!(hook_eh_frame(&bad), Err(CodegenError::Unwind(_))));
    }
}
