//! Prologue analysis and relocation (iced-x86).
//!
//! [`plan_patch`] decides which whole instructions a `jmp rel32` overwrites and
//! refuses entries where moving them would change behaviour. [`PatchPlan::relocate`]
//! re-encodes those instructions at their new address (RIP-relative operands and
//! branches are fixed up by iced's `BlockEncoder`) and appends a jump back to the
//! first untouched byte.

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Decoder, DecoderOptions, FlowControl, Instruction,
    InstructionBlock, Mnemonic,
};

use super::analysis::{indirect_jumps, padding_problem, ReadFile};
use super::emit::ENDBR64;
use crate::error::{CodegenError, PlanError};
use crate::relocation::{format, near_target, refusal};
pub use crate::relocation::{
    FunctionContext, MayLand, RelocatedPrologue, JMP_REL32_LEN, MAX_PATCH_LEN,
};

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

/// Bytes of the absolute jump `jmp [rip+0]; dq target`.
pub const JMP_ABS_LEN: usize = 14;

/// Decides how to patch the function at `function` whose complete code is `code`.
///
/// `code` must hold the whole function (its symbol size): every instruction in it
/// is scanned for branches into the patched bytes.
pub fn plan_patch(function: u64, code: &[u8]) -> Result<PatchPlan, PlanError> {
    plan_patch_in(function, code, &FunctionContext::default())
}

/// True for the instructions that may end a function moved whole into the relocated copy.
fn ends_function(instruction: &Instruction) -> bool {
    matches!(
        instruction.flow_control(),
        FlowControl::Return | FlowControl::UnconditionalBranch
    ) && !matches!(instruction.mnemonic(), Mnemonic::Int3)
}

/// [`plan_patch`] with what the caller knows about the function: padding after
/// it, whether it returns twice, its module's file bytes (for jump tables) and
/// the least patch length.
///
/// A function whose last instruction (`ret` or `jmp`) ends inside the patch is
/// moved whole; the patch then also covers `ctx.padding`, which must be dead fill.
pub fn plan_patch_in(
    function: u64,
    code: &[u8],
    ctx: &FunctionContext,
) -> Result<PatchPlan, PlanError> {
    if ctx.returns_twice {
        return Err(PlanError::ReturnsTwice);
    }
    if code.is_empty() {
        return Err(PlanError::UnknownSize);
    }
    let min_len = ctx.min_len.max(JMP_REL32_LEN);
    let endbr64 = code.starts_with(&ENDBR64);
    let skip = if endbr64 { ENDBR64.len() } else { 0 };
    let needed = (skip + min_len) as u64;
    let patch_addr = function + skip as u64;
    let mut decoder = Decoder::with_ip(64, &code[skip..], patch_addr, DecoderOptions::NONE);
    let mut instructions = Vec::new();
    let mut patch_len = 0usize;
    let mut moved_whole = false;
    while patch_len < min_len {
        let offset = skip + patch_len;
        if offset >= code.len() {
            // The function ends inside the patch: only if it was moved whole.
            let why = if instructions.last().is_some_and(ends_function) {
                match padding_problem(ctx.padding, min_len - patch_len) {
                    None => {
                        moved_whole = true;
                        break;
                    }
                    Some(why) => why,
                }
            } else {
                "it does not end in `ret` or `jmp`".to_string()
            };
            return Err(PlanError::TooShortNoPadding {
                size: code.len() as u64,
                needed,
                why,
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
        let last_of_function = offset + instruction.len() == code.len();
        if let Some(why) = refusal(&instruction) {
            if !(last_of_function && ends_function(&instruction)) {
                return Err(PlanError::ForbiddenInstruction {
                    offset: offset as u64,
                    instruction: format(&instruction),
                    patch_len: min_len.max(patch_len + instruction.len()),
                    why,
                });
            }
        }
        patch_len += instruction.len();
        instructions.push(instruction);
    }
    let moved_len = patch_len;
    if moved_whole {
        patch_len = min_len;
    }
    let patch_end = patch_addr + patch_len as u64;
    check_branches_into(function, code, patch_addr, patch_end)?;
    if let Some(read) = ctx.read_file {
        let inner: Vec<u64> = instructions.iter().skip(1).map(|i| i.ip()).collect();
        check_tables_into(
            function,
            code,
            read,
            patch_addr,
            patch_end,
            &inner,
            ctx.may_land,
        )?;
    }
    let mut original = code[skip..skip + moved_len].to_vec();
    original.extend_from_slice(&ctx.padding[..patch_len - moved_len]);
    Ok(PatchPlan {
        function,
        patch_addr,
        patch_len,
        endbr64,
        original,
        instructions,
    })
}

/// Refuses when a jump table sends an indirect jump into the patch's bytes 1..n,
/// or when an indirect jump cannot be bounded and may land on the start of an
/// instruction of the patch after its first (`inner`; see `may_land`).
fn check_tables_into(
    function: u64,
    code: &[u8],
    read: ReadFile,
    patch_addr: u64,
    patch_end: u64,
    inner: &[u64],
    may_land: Option<MayLand>,
) -> Result<(), PlanError> {
    for jump in indirect_jumps(function, code, read) {
        match jump.targets {
            Some(targets) => {
                if let Some(to) = targets.iter().find(|&&t| t > patch_addr && t < patch_end) {
                    return Err(PlanError::TableIntoPatch {
                        from: jump.from - function,
                        to: to - function,
                        patch_start: patch_addr - function,
                        patch_end: patch_end - function,
                    });
                }
            }
            None if inner
                .iter()
                .any(|&to| may_land.is_none_or(|f| f(jump.from, to))) =>
            {
                return Err(PlanError::UnboundedIndirectJump {
                    from: jump.from - function,
                    patch_start: patch_addr - function,
                    patch_end: patch_end - function,
                })
            }
            None => {}
        }
    }
    Ok(())
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

    /// Re-encodes the overwritten instructions at `address`, followed by a jump back:
    /// `jmp rel32` when the rest of the function is within reach, else the
    /// absolute `jmp [rip+0]; dq back` (14 bytes, no register written).
    pub fn relocate(&self, address: u64) -> Result<RelocatedPrologue, CodegenError> {
        let back = self.patch_addr + self.patch_len as u64;
        let encoded = BlockEncoder::encode(
            64,
            InstructionBlock::new(&self.instructions, address),
            BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS,
        )
        .map_err(|e| CodegenError::Relocation {
            at: address,
            reason: e.to_string(),
        })?;
        let mut map = Vec::with_capacity(self.instructions.len() + 1);
        let mut orig = 0u64;
        for (i, new_off) in encoded.new_instruction_offsets.iter().enumerate() {
            if *new_off == u32::MAX {
                return Err(CodegenError::Relocation {
                    at: address,
                    reason: format!(
                        "`{}` had to be rewritten to reach its target from there",
                        format(&self.instructions[i])
                    ),
                });
            }
            map.push((orig as u8, *new_off as u16));
            orig += self.instructions[i].len() as u64;
        }
        let mut code = encoded.code_buffer;
        map.push((orig as u8, code.len() as u16));
        let jump_at = address + code.len() as u64;
        code.extend_from_slice(&jump_bytes(jump_at, back));
        Ok(RelocatedPrologue { address, code, map })
    }
}

/// A jump from `at` to `to`: `jmp rel32` when in reach, else `jmp [rip+0]; dq to`.
pub fn jump_bytes(at: u64, to: u64) -> Vec<u8> {
    match i32::try_from(to.wrapping_sub(at + JMP_REL32_LEN as u64) as i64) {
        Ok(rel) => {
            let mut v = vec![0xe9];
            v.extend_from_slice(&rel.to_le_bytes());
            v
        }
        Err(_) => abs_jump(to),
    }
}

/// `jmp qword [rip+0]` followed by the 8-byte target: [`JMP_ABS_LEN`] bytes, no register written.
pub fn abs_jump(to: u64) -> Vec<u8> {
    let mut v = vec![0xff, 0x25, 0, 0, 0, 0];
    v.extend_from_slice(&to.to_le_bytes());
    v
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
            Err(PlanError::TooShortNoPadding {
                size: 3,
                needed: 5,
                ..
            })
        ));
    }

    #[test]
    fn short_function_borrows_dead_fill_after_it() {
        // lea eax,[rdi+1]; ret  (4 bytes), then nop fill up to the next symbol.
        let tiny = [0x8d, 0x47, 0x01, 0xc3];
        let fill = [0x66, 0x90, 0xcc, 0xcc];
        let ctx = FunctionContext {
            padding: &fill,
            ..FunctionContext::default()
        };
        let plan = plan_patch_in(F, &tiny, &ctx).unwrap();
        assert_eq!(plan.patch_len, 5);
        assert_eq!(plan.original, vec![0x8d, 0x47, 0x01, 0xc3, 0x66]);
        assert_eq!(plan.disassembly(), vec!["lea eax,[rdi+1]", "ret"]);
        // The relocated copy is the whole function; its ret returns to the trampoline.
        let r = plan.relocate(F + 0x1000).unwrap();
        assert_eq!(&r.code[..4], &tiny);
        // The same with 14 bytes needed: not enough fill.
        let ctx14 = FunctionContext {
            min_len: JMP_ABS_LEN,
            ..ctx
        };
        let err = plan_patch_in(F, &tiny, &ctx14).unwrap_err();
        assert!(err.to_string().contains("only 4 byte(s)"), "{err}");
        // Code after the function is not fill.
        let ctx = FunctionContext {
            padding: &[0x55, 0x90],
            ..FunctionContext::default()
        };
        let err = plan_patch_in(F, &tiny, &ctx).unwrap_err();
        assert!(
            err.to_string().contains("not int3 or nop fill (55)"),
            "{err}"
        );
        // A short function that does not end in ret/jmp (falls into the next one).
        let ctx = FunctionContext {
            padding: &fill,
            ..FunctionContext::default()
        };
        let err = plan_patch_in(F, &tiny[..3], &ctx).unwrap_err();
        assert!(
            err.to_string().contains("does not end in `ret` or `jmp`"),
            "{err}"
        );
        // A ret followed by more of the function is still refused.
        let err = plan_patch_in(F, &[0x31, 0xc0, 0xc3, 0xcc, 0xcc, 0xcc], &ctx).unwrap_err();
        assert!(
            matches!(err, PlanError::ForbiddenInstruction { .. }),
            "{err}"
        );
        // A 2-byte tail call `jmp short` moves whole too (re-encoded as jmp rel32).
        let tail = [0xeb, 0x10];
        let plan = plan_patch_in(F, &tail, &ctx).unwrap();
        let r = plan.relocate(F + 0x1000).unwrap();
        let first = Decoder::with_ip(64, &r.code, F + 0x1000, DecoderOptions::NONE).decode();
        assert_eq!(first.near_branch_target(), F + 0x12);
    }

    #[test]
    fn refuses_returns_twice() {
        let code = [0x55, 0x48, 0x89, 0xe5, 0x90, 0xc3];
        let ctx = FunctionContext {
            returns_twice: true,
            ..FunctionContext::default()
        };
        assert_eq!(
            plan_patch_in(F, &code, &ctx).unwrap_err(),
            PlanError::ReturnsTwice
        );
    }

    /// cmp edi,3; ja; lea rdx,[rip+T]; movsxd rax,[rdx+rdi*4]; add rax,rdx; jmp rax,
    /// with the table at F+0x100 holding `entries` (offsets from the table).
    fn switch_ctx_check(entries: &[i32]) -> Result<PatchPlan, PlanError> {
        let mut code = vec![
            0x83, 0xff, 0x03, 0x77, 0x10, 0x48, 0x8d, 0x15, 0xf4, 0x00, 0x00, 0x00, 0x48, 0x63,
            0x04, 0xba, 0x48, 0x01, 0xd0, 0xff, 0xe0,
        ];
        code.resize(0x30, 0xc3);
        let bytes: Vec<u8> = entries.iter().flat_map(|e| e.to_le_bytes()).collect();
        let read = move |addr: u64, len: usize| -> Option<Vec<u8>> {
            (addr == F + 0x100).then(|| bytes.get(..len).map(<[u8]>::to_vec))?
        };
        let ctx = FunctionContext {
            read_file: Some(&read),
            ..FunctionContext::default()
        };
        plan_patch_in(F, &code, &ctx)
    }

    #[test]
    fn jump_table_targets_in_the_patch_are_refused() {
        // Patch covers cmp (3) + ja (2) = +0..+5. Targets at +0x18.. are fine.
        assert!(switch_ctx_check(&[-0xe8, -0xe4, -0xe0, -0xdc]).is_ok());
        // An entry to +3 (the ja) is inside the patch.
        let err = switch_ctx_check(&[-0xe8, -0xfd, -0xe0, -0xdc]).unwrap_err();
        assert_eq!(
            err,
            PlanError::TableIntoPatch {
                from: 0x13,
                to: 3,
                patch_start: 0,
                patch_end: 5
            }
        );
        // An entry to +0 (the entry itself) lands on the jump: fine.
        assert!(switch_ctx_check(&[-0x100, -0xe4, -0xe0, -0xdc]).is_ok());
        // A table that cannot be read: unbounded, and the patch covers two instructions.
        let err = switch_ctx_check(&[]).unwrap_err();
        assert!(
            matches!(err, PlanError::UnboundedIndirectJump { from: 0x13, .. }),
            "{err}"
        );
    }

    #[test]
    fn an_unbounded_jump_proved_not_to_land_inside_is_fine() {
        // The same code with an unreadable table; the caller proves (e.g. from
        // the CFI) that the jump cannot land on the ja at +3.
        let mut code = vec![
            0x83, 0xff, 0x03, 0x77, 0x10, 0x48, 0x8d, 0x15, 0xf4, 0x00, 0x00, 0x00, 0x48, 0x63,
            0x04, 0xba, 0x48, 0x01, 0xd0, 0xff, 0xe0,
        ];
        code.resize(0x30, 0xc3);
        let read = |_: u64, _: usize| -> Option<Vec<u8>> { None };
        let asked = std::cell::RefCell::new(Vec::new());
        let never = |from: u64, to: u64| {
            asked.borrow_mut().push((from - F, to - F));
            false
        };
        let ctx = FunctionContext {
            read_file: Some(&read),
            may_land: Some(&never),
            ..FunctionContext::default()
        };
        assert!(plan_patch_in(F, &code, &ctx).is_ok());
        assert_eq!(*asked.borrow(), vec![(0x13, 3)]);
        let maybe = |_: u64, to: u64| to == F + 3;
        let ctx = FunctionContext {
            may_land: Some(&maybe),
            ..ctx
        };
        assert!(matches!(
            plan_patch_in(F, &code, &ctx),
            Err(PlanError::UnboundedIndirectJump { from: 0x13, .. })
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

    #[test]
    fn far_relocation_jumps_back_absolutely() {
        // push rbp; mov rbp,rsp; sub rsp,0x10; jz +2; 6 x nop; ret
        let code = [
            0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10, 0x74, 0x02, 0x90, 0x90, 0x90, 0x90,
            0x90, 0x90, 0xc3,
        ];
        let ctx = FunctionContext {
            min_len: JMP_ABS_LEN,
            ..FunctionContext::default()
        };
        let plan = plan_patch_in(F, &code, &ctx).unwrap();
        assert_eq!(plan.patch_len, 14);
        let far = 0x7f00_0000_0000;
        let r = plan.relocate(far).unwrap();
        let ins: Vec<Instruction> = Decoder::with_ip(64, &r.code, far, DecoderOptions::NONE)
            .into_iter()
            .collect();
        // The in-patch jz still lands on the relocated nop it targeted.
        let jz = ins.iter().find(|i| i.mnemonic() == Mnemonic::Je).unwrap();
        assert_eq!(Some(jz.near_branch_target()), r.relocated_for(0xc));
        let last = ins
            .iter()
            .rev()
            .find(|i| i.mnemonic() == Mnemonic::Jmp)
            .unwrap();
        assert!(last.is_ip_rel_memory_operand());
        assert_eq!(last.ip_rel_memory_address(), last.ip() + 6);
        assert_eq!(&r.code[r.code.len() - 8..], &(F + 14).to_le_bytes());
        assert_eq!(r.map.last(), Some(&(14, (r.code.len() - 14) as u16)));
        // Near, the same plan gets a 5-byte jmp rel32 back.
        let near = plan.relocate(F + 0x1000).unwrap();
        assert_eq!(near.code[near.code.len() - 5], 0xe9);
    }

    #[test]
    fn far_relocation_refuses_rip_relative_data() {
        // mov ecx,[rip+0x100]; then 8 nops and ret: the load cannot reach from far away.
        let mut code = vec![0x8b, 0x0d, 0x00, 0x01, 0x00, 0x00];
        code.extend_from_slice(&[0x90; 8]);
        code.push(0xc3);
        let ctx = FunctionContext {
            min_len: JMP_ABS_LEN,
            ..FunctionContext::default()
        };
        // (Below 4 GiB iced would use EIP-relative addressing: a PIE-like address.)
        let plan = plan_patch_in(0x5555_5555_4000, &code, &ctx).unwrap();
        let r = plan.relocate(0x7f00_0000_0000);
        assert!(matches!(r, Err(CodegenError::Relocation { .. })), "{r:?}");
    }
}
