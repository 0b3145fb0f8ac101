//! Prologue analysis and relocation (iced-x86).
//!
//! [`plan_patch`] decides which whole instructions a `jmp rel32` overwrites and
//! refuses entries where moving them would change behaviour. [`PatchPlan::relocate`]
//! re-encodes those instructions at their new address (RIP-relative operands and
//! branches are fixed up by iced's `BlockEncoder`) and appends a jump back to the
//! first untouched byte.

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Decoder, DecoderOptions, FlowControl, Formatter,
    Instruction, InstructionBlock, Mnemonic, NasmFormatter, OpKind,
};

use super::emit::ENDBR64;
use crate::error::{CodegenError, PlanError};

/// Bytes of a `jmp rel32`: the least a patch overwrites.
pub const JMP_REL32_LEN: usize = 5;

/// Largest patch: a 15-byte instruction starting at byte 4 of the patch window.
pub const MAX_PATCH_LEN: usize = 4 + 15;

/// Where and how a function's entry will be patched.
#[derive(Debug, Clone)]
pub struct PatchPlan {
    /// The function's entry address.
    pub function: u64,
    /// First patched byte: the entry, or just after a kept `endbr64`.
    pub patch_addr: u64,
    /// Bytes overwritten (whole instructions, at least [`JMP_REL32_LEN`]).
    pub patch_len: usize,
    /// The function started with `endbr64`, which stays in place.
    pub endbr64: bool,
    /// The original bytes at `patch_addr..patch_addr + patch_len`.
    pub original: Vec<u8>,
    instructions: Vec<Instruction>,
}

/// A relocated prologue ready to be written at `address`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelocatedPrologue {
    /// Address the code was encoded for.
    pub address: u64,
    /// The code: the moved instructions, then a jump back.
    pub code: Vec<u8>,
    /// `(offset from patch_addr, offset in code)` for each moved instruction and the jump back.
    pub map: Vec<(u8, u16)>,
}

impl RelocatedPrologue {
    /// The relocated address equivalent to original address `patch_addr + orig_off`, if it is an instruction boundary.
    pub fn relocated_for(&self, orig_off: u64) -> Option<u64> {
        self.map
            .iter()
            .find(|(o, _)| u64::from(*o) == orig_off)
            .map(|(_, r)| self.address + u64::from(*r))
    }
}

/// The instruction in NASM syntax.
pub(crate) fn format(instruction: &Instruction) -> String {
    let mut out = String::new();
    NasmFormatter::new().format(instruction, &mut out);
    out
}

/// The target of a near branch.
pub(crate) fn near_target(instruction: &Instruction) -> Option<u64> {
    match instruction.op0_kind() {
        OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => {
            Some(instruction.near_branch_target())
        }
        _ => None,
    }
}

/// Why `instruction` must not be moved, if it must not.
pub(crate) fn refusal(instruction: &Instruction) -> Option<&'static str> {
    if matches!(
        instruction.mnemonic(),
        Mnemonic::Syscall
            | Mnemonic::Sysenter
            | Mnemonic::Int
            | Mnemonic::Int1
            | Mnemonic::Int3
            | Mnemonic::Into
    ) {
        return Some("a system call or trap cannot be moved");
    }
    match instruction.flow_control() {
        FlowControl::Next | FlowControl::ConditionalBranch => None,
        FlowControl::Call | FlowControl::IndirectCall => {
            Some("a call there would leave a return address pointing into the overwritten bytes")
        }
        FlowControl::Return => Some("the function returns within the patch: it is too short to hook"),
        FlowControl::UnconditionalBranch | FlowControl::IndirectBranch => {
            Some("control leaves the function within the patch (a tail call or a jump): it cannot be relocated safely")
        }
        FlowControl::Interrupt | FlowControl::Exception => Some("a trap cannot be moved"),
        FlowControl::XbeginXabortXend => Some("transactional-memory instructions cannot be moved"),
    }
}

/// Decides how to patch the function at `function` whose complete code is `code`.
///
/// `code` must hold the whole function (its symbol size): every instruction in it
/// is scanned for branches into the patched bytes.
pub fn plan_patch(function: u64, code: &[u8]) -> Result<PatchPlan, PlanError> {
    if code.is_empty() {
        return Err(PlanError::UnknownSize);
    }
    let endbr64 = code.starts_with(&ENDBR64);
    let skip = if endbr64 { ENDBR64.len() } else { 0 };
    let needed = (skip + JMP_REL32_LEN) as u64;
    if (code.len() as u64) < needed {
        return Err(PlanError::TooShort {
            size: code.len() as u64,
            needed,
        });
    }
    let patch_addr = function + skip as u64;
    let mut decoder = Decoder::with_ip(64, &code[skip..], patch_addr, DecoderOptions::NONE);
    let mut instructions = Vec::new();
    let mut patch_len = 0usize;
    while patch_len < JMP_REL32_LEN {
        let offset = skip + patch_len;
        if !decoder.can_decode() {
            return Err(PlanError::TooShort {
                size: code.len() as u64,
                needed: offset as u64 + 1,
            });
        }
        let instruction = decoder.decode();
        if instruction.is_invalid() {
            // Running off the end of the function decodes as invalid too.
            if offset + instruction.len() >= code.len() || instruction.len() == 0 {
                return Err(PlanError::TooShort {
                    size: code.len() as u64,
                    needed: needed.max(offset as u64 + 1),
                });
            }
            return Err(PlanError::InvalidInstruction {
                offset: offset as u64,
            });
        }
        if let Some(why) = refusal(&instruction) {
            return Err(PlanError::ForbiddenInstruction {
                offset: offset as u64,
                instruction: format(&instruction),
                patch_len: JMP_REL32_LEN.max(patch_len + instruction.len()),
                why,
            });
        }
        patch_len += instruction.len();
        instructions.push(instruction);
    }
    let patch_end = patch_addr + patch_len as u64;
    check_branches_into(function, code, patch_addr, patch_end)?;
    Ok(PatchPlan {
        function,
        patch_addr,
        patch_len,
        endbr64,
        original: code[skip..skip + patch_len].to_vec(),
        instructions,
    })
}

/// Refuses when any instruction outside the patch branches into its bytes 1..n.
fn check_branches_into(
    function: u64,
    code: &[u8],
    patch_addr: u64,
    patch_end: u64,
) -> Result<(), PlanError> {
    let decoder = Decoder::with_ip(64, code, function, DecoderOptions::NONE);
    for instruction in decoder {
        if instruction.is_invalid() {
            continue;
        }
        let from = instruction.ip();
        if from >= patch_addr && from < patch_end {
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
    /// Offset of the patch from the function's entry (4 with a kept `endbr64`).
    pub fn patch_offset(&self) -> u64 {
        self.patch_addr - self.function
    }

    /// The moved instructions, disassembled, one per line.
    pub fn disassembly(&self) -> Vec<String> {
        self.instructions.iter().map(format).collect()
    }

    /// Re-encodes the overwritten instructions at `address`, followed by a jump back.
    pub fn relocate(&self, address: u64) -> Result<RelocatedPrologue, CodegenError> {
        let back = self.patch_addr + self.patch_len as u64;
        let jump = Instruction::with_branch(Code::Jmp_rel32_64, back).map_err(|e| {
            CodegenError::Relocation {
                at: address,
                reason: e.to_string(),
            }
        })?;
        let mut block: Vec<Instruction> = self.instructions.clone();
        let mut jump = jump;
        // The jump's own IP must not equal any branch target in the block (its
        // target is `back`), or the encoder would treat it as an in-block branch.
        jump.set_ip(!0xfff);
        block.push(jump);
        let encoded = BlockEncoder::encode(
            64,
            InstructionBlock::new(&block, address),
            BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS,
        )
        .map_err(|e| CodegenError::Relocation {
            at: address,
            reason: e.to_string(),
        })?;
        let mut map = Vec::with_capacity(block.len());
        let mut orig = 0u64;
        for (i, new_off) in encoded.new_instruction_offsets.iter().enumerate() {
            if *new_off == u32::MAX {
                return Err(CodegenError::Relocation {
                    at: address,
                    reason: "instruction offset unavailable".into(),
                });
            }
            map.push((orig as u8, *new_off as u16));
            orig += block[i].len() as u64;
        }
        let code = encoded.code_buffer;
        Ok(RelocatedPrologue { address, code, map })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: u64 = 0x40_1000;

    #[test]
    fn covers_whole_instructions_and_keeps_endbr64() {
        // endbr64; push rbp; mov rbp,rsp; sub rsp,0x10; ret
        let code = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10, 0xc3,
        ];
        let plan = plan_patch(F, &code).unwrap();
        assert!(plan.endbr64);
        assert_eq!(plan.patch_addr, F + 4);
        assert_eq!(plan.patch_len, 8);
        assert_eq!(plan.original, &code[4..12]);
        assert_eq!(
            plan.disassembly(),
            vec!["push rbp", "mov rbp,rsp", "sub rsp,10h"]
        );
    }

    #[test]
    fn refuses_call_ret_jmp_and_short() {
        let call = [0xe8, 0, 0, 0, 0, 0xc3];
        assert!(matches!(
            plan_patch(F, &call),
            Err(PlanError::ForbiddenInstruction { .. })
        ));
        let jmp = [0xe9, 0x10, 0, 0, 0, 0x90, 0x90];
        assert!(matches!(
            plan_patch(F, &jmp),
            Err(PlanError::ForbiddenInstruction { .. })
        ));
        let ret_early = [0x31, 0xc0, 0xc3, 0x90, 0x90, 0x90];
        assert!(matches!(
            plan_patch(F, &ret_early),
            Err(PlanError::ForbiddenInstruction { .. })
        ));
        let syscall = [0x0f, 0x05, 0x90, 0x90, 0x90, 0xc3];
        assert!(matches!(
            plan_patch(F, &syscall),
            Err(PlanError::ForbiddenInstruction { .. })
        ));
        let tiny = [0x31, 0xc0, 0xc3];
        assert!(matches!(
            plan_patch(F, &tiny),
            Err(PlanError::TooShort { .. })
        ));
    }

    #[test]
    fn refuses_branch_into_patch() {
        // 0: mov eax,edi (2) ; 2: add eax,1 (3) ; 5: dec edi (2) ; 7: jnz -> 2 ; 9: ret
        let code = [0x89, 0xf8, 0x83, 0xc0, 0x01, 0xff, 0xcf, 0x75, 0xf9, 0xc3];
        let err = plan_patch(F, &code).unwrap_err();
        assert!(
            matches!(err, PlanError::BranchIntoPatch { from: 7, to: 2, .. }),
            "{err:?}"
        );
        // A back-edge to the entry itself is fine: it lands on the jmp.
        let code = [0x89, 0xf8, 0x83, 0xc0, 0x01, 0xff, 0xcf, 0x75, 0xf7, 0xc3];
        assert!(plan_patch(F, &code).is_ok());
    }

    #[test]
    fn relocates_rip_relative_and_jumps_back() {
        // mov eax,[rip+0x100] (6 bytes) ; add eax,edi ; ret
        let code = [0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, 0x01, 0xf8, 0xc3];
        let plan = plan_patch(F, &code).unwrap();
        assert_eq!(plan.patch_len, 6);
        let at = F + 0x1000_0000;
        let r = plan.relocate(at).unwrap();
        let mut d = Decoder::with_ip(64, &r.code, at, DecoderOptions::NONE);
        let first = d.decode();
        assert_eq!(
            first.memory_displacement64(),
            F + 6 + 0x100,
            "still reads the same data"
        );
        let back = d.decode();
        assert_eq!(back.mnemonic(), Mnemonic::Jmp);
        assert_eq!(back.near_branch_target(), F + 6);
        assert_eq!(r.map, vec![(0, 0), (6, first.len() as u16)]);
        assert_eq!(r.relocated_for(0), Some(at));
        assert_eq!(r.relocated_for(3), None);
    }
}
