//! i386 prologue analysis and relocation (iced-x86 at bitness 32).
//!
//! Same rules as x86-64 (the shared ones in [`crate::relocation`]), plus the two ways position-independent
//! i386 code learns its own address, which must keep yielding the *original*
//! address once moved:
//!
//! - `call __x86.get_pc_thunk.REG` (a function `mov REG, [esp]; ret`) becomes
//!   `mov REG, <original return address>`;
//! - `call next; pop REG` becomes `mov REG, <original address of the pop>`.
//!
//! 32-bit code has no RIP-relative operands, so every other moved instruction is
//! re-encoded as it was; near branches are fixed up by iced's `BlockEncoder`.

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Decoder, DecoderOptions, Instruction,
    InstructionBlock, OpKind, Register,
};

use super::emit::{check_32bit, ENDBR32};
use crate::error::{CodegenError, PlanError};
use crate::relocation::{format, near_target, refusal};
pub use crate::relocation::{RelocatedPrologue, JMP_REL32_LEN, MAX_PATCH_LEN};

/// How a moved instruction is re-encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Moved {
    /// Re-encoded as it is (branches fixed up).
    Same,
    /// A PIC sequence replaced by `mov reg, value` (the address the original code computed).
    LoadConstant { reg: Register, value: u32 },
}

/// Where and how an i386 function's entry will be patched.
#[derive(Debug, Clone)]
pub struct PatchPlan {
    /// The function's entry address.
    pub function: u64,
    /// First patched byte: the entry, or just after a kept `endbr32`.
    pub patch_addr: u64,
    /// Bytes overwritten (whole instructions, at least [`JMP_REL32_LEN`]).
    pub patch_len: usize,
    /// The function started with `endbr32`, which stays in place.
    pub endbr32: bool,
    /// The original bytes at `patch_addr..patch_addr + patch_len`.
    pub original: Vec<u8>,
    /// `(instruction, original length, how it moves)`.
    instructions: Vec<(Instruction, usize, Moved)>,
}

/// The register a get-PC thunk loads, if `code` (the thunk's first bytes) is `mov REG, [esp]; ret`.
pub fn pc_thunk_register(code: &[u8]) -> Option<Register> {
    let mut decoder = Decoder::with_ip(32, code, 0, DecoderOptions::NONE);
    let load = decoder.decode();
    let ret = decoder.decode();
    let is_load = load.code() == Code::Mov_r32_rm32
        && load.op1_kind() == OpKind::Memory
        && load.memory_base() == Register::ESP
        && load.memory_index() == Register::None
        && load.memory_displacement32() == 0
        && load.op0_register() != Register::ESP;
    (is_load && ret.code() == Code::Retnd).then(|| load.op0_register())
}

/// Decides how to patch the i386 function at `function` whose complete code is `code`.
///
/// `pc_thunk_at(target)` names the register loaded by the function at `target` when
/// it is a get-PC thunk (see [`pc_thunk_register`]); other calls in the patch are refused.
pub fn plan_patch(
    function: u64,
    code: &[u8],
    pc_thunk_at: &dyn Fn(u64) -> Option<Register>,
) -> Result<PatchPlan, PlanError> {
    if code.is_empty() {
        return Err(PlanError::UnknownSize);
    }
    let endbr32 = code.starts_with(&ENDBR32);
    let skip = if endbr32 { ENDBR32.len() } else { 0 };
    let needed = (skip + JMP_REL32_LEN) as u64;
    if (code.len() as u64) < needed {
        return Err(PlanError::TooShort {
            size: code.len() as u64,
            needed,
        });
    }
    let patch_addr = function + skip as u64;
    let mut decoder = Decoder::with_ip(32, &code[skip..], patch_addr, DecoderOptions::NONE);
    let mut instructions = Vec::new();
    let mut patch_len = 0usize;
    let decode = |decoder: &mut Decoder, offset: usize| -> Result<Instruction, PlanError> {
        let too_short = PlanError::TooShort {
            size: code.len() as u64,
            needed: needed.max(offset as u64 + 1),
        };
        if !decoder.can_decode() {
            return Err(too_short);
        }
        let instruction = decoder.decode();
        if instruction.is_invalid() {
            if offset + instruction.len() >= code.len() || instruction.len() == 0 {
                return Err(too_short);
            }
            return Err(PlanError::InvalidInstruction {
                offset: offset as u64,
            });
        }
        Ok(instruction)
    };
    while patch_len < JMP_REL32_LEN {
        let offset = skip + patch_len;
        let instruction = decode(&mut decoder, offset)?;
        let next_ip = instruction.next_ip();
        if instruction.code() == Code::Call_rel32_32 {
            let target = instruction.near_branch_target();
            if target == next_ip {
                // call next; pop REG
                let pop = decode(&mut decoder, offset + instruction.len())?;
                if pop.code() != Code::Pop_r32 || pop.op0_register() == Register::ESP {
                    return Err(forbidden(
                        &instruction,
                        offset,
                        patch_len,
                        "`call` to the next instruction must be followed by `pop REG` to be moved",
                    ));
                }
                let len = instruction.len() + pop.len();
                instructions.push((
                    instruction,
                    len,
                    Moved::LoadConstant {
                        reg: pop.op0_register(),
                        value: next_ip as u32,
                    },
                ));
                patch_len += len;
                continue;
            }
            if let Some(reg) = pc_thunk_at(target) {
                instructions.push((
                    instruction,
                    instruction.len(),
                    Moved::LoadConstant {
                        reg,
                        value: next_ip as u32,
                    },
                ));
                patch_len += instruction.len();
                continue;
            }
        }
        if let Some(why) = refusal(&instruction) {
            return Err(forbidden(&instruction, offset, patch_len, why));
        }
        patch_len += instruction.len();
        instructions.push((instruction, instruction.len(), Moved::Same));
    }
    let patch_end = patch_addr + patch_len as u64;
    check_branches_into(function, code, patch_addr, patch_end)?;
    Ok(PatchPlan {
        function,
        patch_addr,
        patch_len,
        endbr32,
        original: code[skip..skip + patch_len].to_vec(),
        instructions,
    })
}

fn forbidden(
    instruction: &Instruction,
    offset: usize,
    patch_len: usize,
    why: &'static str,
) -> PlanError {
    PlanError::ForbiddenInstruction {
        offset: offset as u64,
        instruction: format(instruction),
        patch_len: JMP_REL32_LEN.max(patch_len + instruction.len()),
        why,
    }
}

/// Refuses when any instruction outside the patch branches into its bytes 1..n.
fn check_branches_into(
    function: u64,
    code: &[u8],
    patch_addr: u64,
    patch_end: u64,
) -> Result<(), PlanError> {
    let decoder = Decoder::with_ip(32, code, function, DecoderOptions::NONE);
    for instruction in decoder {
        let from = instruction.ip();
        if instruction.is_invalid() || (from >= patch_addr && from < patch_end) {
            continue;
        }
        if let Some(to) = near_target(&instruction) {
            if to > patch_addr && to < patch_end {
                return Err(PlanError::BranchIntoPatch {
                    from: from - function,
                    to: to - function,
                    instruction: format(&instruction),
                    patch_start: patch_addr - function,
                    patch_end: patch_end - function,
                });
            }
        }
    }
    Ok(())
}

impl PatchPlan {
    /// Offset of the patch from the function's entry (4 with a kept `endbr32`).
    pub fn patch_offset(&self) -> u64 {
        self.patch_addr - self.function
    }

    /// The moved instructions, disassembled, one per line (as they were originally).
    pub fn disassembly(&self) -> Vec<String> {
        self.instructions
            .iter()
            .map(|(i, _, _)| format(i))
            .collect()
    }

    /// Re-encodes the overwritten instructions at `address`, followed by a jump back.
    pub fn relocate(&self, address: u64) -> Result<RelocatedPrologue, CodegenError> {
        check_32bit("relocated prologue address", address)?;
        let error = |e: iced_x86::IcedError| CodegenError::Relocation {
            at: address,
            reason: e.to_string(),
        };
        let back = self.patch_addr + self.patch_len as u64;
        let mut block = Vec::with_capacity(self.instructions.len() + 1);
        for (instruction, _, moved) in &self.instructions {
            block.push(match moved {
                Moved::Same => *instruction,
                Moved::LoadConstant { reg, value } => {
                    let mut mov =
                        Instruction::with2(Code::Mov_r32_imm32, *reg, *value).map_err(error)?;
                    mov.set_ip(instruction.ip());
                    mov
                }
            });
        }
        let mut jump = Instruction::with_branch(Code::Jmp_rel32_32, back).map_err(error)?;
        // Keep the jump's IP off every branch target in the block.
        jump.set_ip(0xffff_f000);
        block.push(jump);
        let encoded = BlockEncoder::encode(
            32,
            InstructionBlock::new(&block, address),
            BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS,
        )
        .map_err(error)?;
        let mut map = Vec::with_capacity(block.len());
        let mut orig = 0usize;
        for (i, new_off) in encoded.new_instruction_offsets.iter().enumerate() {
            if *new_off == u32::MAX {
                return Err(CodegenError::Relocation {
                    at: address,
                    reason: "instruction offset unavailable".into(),
                });
            }
            map.push((orig as u8, *new_off as u16));
            orig += self.instructions.get(i).map_or(0, |(_, len, _)| *len);
        }
        Ok(RelocatedPrologue {
            address,
            code: encoded.code_buffer,
            map,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::Mnemonic;

    const F: u64 = 0x0804_9000;

    fn no_thunks(_: u64) -> Option<Register> {
        None
    }

    fn decode_all(code: &[u8], at: u64) -> Vec<Instruction> {
        Decoder::with_ip(32, code, at, DecoderOptions::NONE)
            .into_iter()
            .collect()
    }

    #[test]
    fn covers_whole_instructions_and_keeps_endbr32() {
        // endbr32; push ebp; mov ebp,esp; sub esp,0x18; ret
        let code = [
            0xf3, 0x0f, 0x1e, 0xfb, 0x55, 0x89, 0xe5, 0x83, 0xec, 0x18, 0xc3,
        ];
        let plan = plan_patch(F, &code, &no_thunks).unwrap();
        assert!(plan.endbr32);
        assert_eq!((plan.patch_addr, plan.patch_len), (F + 4, 6));
        assert_eq!(plan.original, &code[4..10]);
        assert_eq!(
            plan.disassembly(),
            vec!["push ebp", "mov ebp,esp", "sub esp,18h"]
        );
        let r = plan.relocate(0x4000_0000).unwrap();
        assert_eq!(&r.code[..6], &code[4..10], "moved as it was");
        let back = decode_all(&r.code, r.address).pop().unwrap();
        assert_eq!(back.near_branch_target(), F + 10);
        assert_eq!(r.map, vec![(0, 0), (1, 1), (3, 3), (6, 6)]);
    }

    #[test]
    fn refuses_calls_returns_jumps_traps_and_short() {
        let call = [0xe8, 0x10, 0, 0, 0, 0xc3];
        assert!(matches!(
            plan_patch(F, &call, &no_thunks),
            Err(PlanError::ForbiddenInstruction { .. })
        ));
        let int80 = [0xcd, 0x80, 0x90, 0x90, 0x90, 0xc3];
        assert!(matches!(
            plan_patch(F, &int80, &no_thunks),
            Err(PlanError::ForbiddenInstruction { .. })
        ));
        let ret_early = [0x31, 0xc0, 0xc3, 0x90, 0x90, 0x90];
        assert!(matches!(
            plan_patch(F, &ret_early, &no_thunks),
            Err(PlanError::ForbiddenInstruction { .. })
        ));
        let ret4 = [0x31, 0xc0, 0xc2, 0x04, 0x00, 0x90];
        assert!(matches!(
            plan_patch(F, &ret4, &no_thunks),
            Err(PlanError::ForbiddenInstruction { .. })
        ));
        // call next without a pop after it
        let call_next = [0xe8, 0, 0, 0, 0, 0x90, 0xc3];
        assert!(matches!(
            plan_patch(F, &call_next, &no_thunks),
            Err(PlanError::ForbiddenInstruction { .. })
        ));
        assert!(matches!(
            plan_patch(F, &[0x31, 0xc0, 0xc3], &no_thunks),
            Err(PlanError::TooShort { .. })
        ));
    }

    #[test]
    fn refuses_branch_into_patch() {
        // 0: mov eax,[esp+4] (4) ; 4: inc eax (1) ; 5: dec ecx ; 6: jnz -> 4 ; 8: ret
        let code = [0x8b, 0x44, 0x24, 0x04, 0x40, 0x49, 0x75, 0xfc, 0xc3];
        let err = plan_patch(F, &code, &no_thunks).unwrap_err();
        assert!(
            matches!(err, PlanError::BranchIntoPatch { from: 6, to: 4, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn recognises_pc_thunks() {
        assert_eq!(
            pc_thunk_register(&[0x8b, 0x1c, 0x24, 0xc3]),
            Some(Register::EBX)
        );
        assert_eq!(
            pc_thunk_register(&[0x8b, 0x04, 0x24, 0xc3]),
            Some(Register::EAX)
        );
        assert_eq!(pc_thunk_register(&[0x8b, 0x1c, 0x24, 0x90]), None);
        assert_eq!(pc_thunk_register(&[0x8b, 0x5c, 0x24, 0x04, 0xc3]), None);
        assert_eq!(pc_thunk_register(&[]), None);
    }

    #[test]
    fn pc_thunk_call_becomes_a_constant_load() {
        // push ebx; call thunk; add ebx, 0x2e5b; ...
        let thunk = F + 0x100;
        let rel = (thunk as u32).wrapping_sub(F as u32 + 1 + 5);
        let mut code = vec![0x53, 0xe8];
        code.extend_from_slice(&rel.to_le_bytes());
        code.extend_from_slice(&[0x81, 0xc3, 0x5b, 0x2e, 0, 0, 0x5b, 0xc3]);
        let thunks = |t: u64| (t == thunk).then_some(Register::EBX);
        let plan = plan_patch(F, &code, &thunks).unwrap();
        assert_eq!(plan.patch_len, 6);
        let r = plan.relocate(0x7000_0000).unwrap();
        let ins = decode_all(&r.code, r.address);
        assert_eq!(ins[0].code(), Code::Push_r32);
        assert_eq!(ins[1].code(), Code::Mov_r32_imm32);
        assert_eq!(ins[1].op0_register(), Register::EBX);
        assert_eq!(
            u64::from(ins[1].immediate32()),
            F + 6,
            "the original return address"
        );
        assert_eq!(ins[2].near_branch_target(), F + 6);
        assert_eq!(r.map, vec![(0, 0), (1, 1), (6, 6)]);
        // Without the thunk it is a call like any other.
        assert!(plan_patch(F, &code, &no_thunks).is_err());
    }

    #[test]
    fn call_next_pop_becomes_a_constant_load() {
        // call next; pop ecx; add ecx, 0x1000; ret
        let code = [0xe8, 0, 0, 0, 0, 0x59, 0x81, 0xc1, 0, 0x10, 0, 0, 0xc3];
        let plan = plan_patch(F, &code, &no_thunks).unwrap();
        assert_eq!(plan.patch_len, 6);
        let r = plan.relocate(0x7000_0000).unwrap();
        let ins = decode_all(&r.code, r.address);
        assert_eq!(ins[0].code(), Code::Mov_r32_imm32);
        assert_eq!(ins[0].op0_register(), Register::ECX);
        assert_eq!(
            u64::from(ins[0].immediate32()),
            F + 5,
            "the address of the pop"
        );
        assert_eq!(ins[1].near_branch_target(), F + 6);
        assert_eq!(r.map, vec![(0, 0), (6, 5)]);
    }

    #[test]
    fn relocates_short_conditional_branches() {
        // test eax,eax; je +0x20 (out of the patch); nop...
        let mut code = vec![0x85, 0xc0, 0x74, 0x20, 0x90, 0x90];
        code.resize(0x30, 0x90);
        code.push(0xc3);
        let plan = plan_patch(F, &code, &no_thunks).unwrap();
        let r = plan.relocate(0x2000_0000).unwrap();
        let ins = decode_all(&r.code, r.address);
        assert_eq!(ins[1].mnemonic(), Mnemonic::Je);
        assert_eq!(ins[1].near_branch_target(), F + 4 + 0x20);
    }
}
