//! Whole-function facts a patch depends on, beyond its first bytes: whether the
//! bytes after a short function are dead fill, where indirect jumps through
//! `switch` tables can land, and whether a function returns twice.
//!
//! Jump tables are recognised in the shapes gcc and clang emit at -O1 and above:
//!
//! ```text
//!   cmp   idx, N ; ja default            ; the bound (jae: N - 1)
//!   [mov  idx', idx]                     ; zero-extension or copy
//!   lea   rT, [rip + table]              ; position-independent code:
//!   movsxd rE, dword [rT + idx'*4]       ;   entries are int32 offsets from table
//!   add   rE, rT
//!   jmp   rE
//!
//!   jmp   qword [idx'*8 + table]         ; fixed-address code: entries are addresses
//!
//!   cmp   dword [rbp-4], N ; ja default   ; gcc -O0: the index lives in a stack slot
//!   mov   eax, [rbp-4]
//!   lea   rdx, [rax*4] ; lea rax, [rip + table] ; mov eax, [rdx + rax] ; cdqe
//!   lea   rdx, [rip + table] ; add rax, rdx ; jmp rax
//!   (fixed-address: mov eax, [rbp-4] ; mov rax, [rax*8 + table] ; jmp rax)
//! ```
//!
//! The table's entries are read through a caller-supplied reader (the module's
//! file bytes). An indirect jump that indexes memory but matches neither shape,
//! or whose bound is not found, is *unbounded*. A `jmp reg` whose register was
//! not computed from an indexed load (a tail call through a function pointer)
//! and a `jmp [rip + slot]` (a tail call through the GOT) go to function entries
//! and are not considered.

use iced_x86::{
    Code, ConditionCode, Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind,
    Register,
};

/// Most entries read from one jump table.
pub const MAX_TABLE_ENTRIES: u64 = 4096;

/// Instructions looked at before an indirect jump to recognise its table.
const LOOKBACK: usize = 16;

/// One indirect jump of a function and where it may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndirectJump {
    /// Address of the `jmp`.
    pub from: u64,
    /// Every target read from its table, or `None` when it cannot be bounded.
    pub targets: Option<Vec<u64>>,
}

pub use crate::relocation::ReadFile;

/// True when `name` is a function known to return twice (`setjmp` and friends,
/// `vfork`, `getcontext`/`savecontext`): a trampoline's frame would be gone when
/// it returns the second time.
pub fn returns_twice_by_name(name: &str) -> bool {
    let base = name.split('@').next().unwrap_or(name);
    let base = base.trim_start_matches('_');
    let base = base.strip_prefix("libc_").unwrap_or(base);
    matches!(
        base,
        "vfork" | "getcontext" | "savecontext" | "savectx" | "qsetjmp"
    ) || base.ends_with("setjmp")
}

/// Why the bytes after a function cannot be used as patch room, or `None` when
/// `padding[..need]` is dead fill (`int3` or `nop` instructions).
pub fn padding_problem(padding: &[u8], need: usize) -> Option<String> {
    if padding.len() < need {
        return Some(if padding.is_empty() {
            "the next symbol starts right after it".to_string()
        } else {
            format!(
                "only {} byte(s) lie before the next symbol, {need} are needed",
                padding.len()
            )
        });
    }
    let mut decoder = Decoder::with_ip(64, padding, 0, DecoderOptions::NONE);
    while (decoder.position()) < need {
        let at = decoder.position();
        let i = decoder.decode();
        if i.is_invalid() || !matches!(i.mnemonic(), Mnemonic::Nop | Mnemonic::Int3) {
            return Some(format!(
                "the byte at +{at} after it is not int3 or nop fill ({:02x})",
                padding[at]
            ));
        }
    }
    None
}

fn full(reg: Register) -> Register {
    reg.full_register()
}

/// The register an instruction writes as its first operand (`cdqe`: rax), if any.
fn written_reg(i: &Instruction) -> Option<Register> {
    if matches!(i.mnemonic(), Mnemonic::Cdqe | Mnemonic::Cqo | Mnemonic::Cdq) {
        return Some(Register::RAX);
    }
    if i.op_count() > 0 && i.op0_kind() == OpKind::Register {
        if matches!(
            i.mnemonic(),
            Mnemonic::Cmp | Mnemonic::Test | Mnemonic::Push | Mnemonic::Bt
        ) {
            return None;
        }
        return Some(full(i.op0_register()));
    }
    None
}

/// The last instruction in `start..before` that writes `reg`.
fn def_of(insns: &[Instruction], start: usize, before: usize, reg: Register) -> Option<usize> {
    let reg = full(reg);
    (start..before)
        .rev()
        .find(|&k| written_reg(&insns[k]) == Some(reg))
}

/// The address `reg` holds when it was set by `lea reg, [rip + X]` before `before`.
fn rip_address(insns: &[Instruction], start: usize, before: usize, reg: Register) -> Option<u64> {
    let lea = &insns[def_of(insns, start, before, reg)?];
    (lea.mnemonic() == Mnemonic::Lea && lea.is_ip_rel_memory_operand())
        .then(|| lea.ip_rel_memory_address())
}

/// A memory operand's base, displacement and size: identifies a stack slot.
fn slot_of(i: &Instruction, operand: u32) -> Option<(Register, u64, usize)> {
    (i.op_kind(operand) == OpKind::Memory && i.memory_index() == Register::None).then(|| {
        (
            i.memory_base(),
            i.memory_displacement64(),
            i.memory_size().size(),
        )
    })
}

/// The highest index a `cmp idx, N` + `ja`/`jae` pair before `at` allows for
/// register `index`, following register copies and a reload from a stack
/// slot (gcc -O0 compares the slot: `cmp dword [rbp-4], N`).
fn bound_before(insns: &[Instruction], at: usize, index: Register) -> Option<u64> {
    let mut index = full(index);
    let mut slot: Option<(Register, u64)> = None;
    let start = at.saturating_sub(LOOKBACK);
    for k in (start..at).rev() {
        let i = &insns[k];
        let compared = if i.mnemonic() != Mnemonic::Cmp {
            false
        } else {
            match (i.op0_kind(), slot) {
                (OpKind::Register, None) => full(i.op0_register()) == index,
                (OpKind::Memory, Some((base, disp))) => {
                    slot_of(i, 0).is_some_and(|(b, d, _)| (b, d) == (base, disp))
                }
                _ => false,
            }
        };
        if compared {
            if !matches!(
                i.op1_kind(),
                OpKind::Immediate8to32
                    | OpKind::Immediate8to64
                    | OpKind::Immediate32to64
                    | OpKind::Immediate32
                    | OpKind::Immediate8
            ) {
                return None;
            }
            let n = i.immediate(1);
            return match insns.get(k + 1)?.condition_code() {
                ConditionCode::a => Some(n),
                ConditionCode::ae => n.checked_sub(1),
                _ => None,
            };
        }
        if slot.is_none() && written_reg(i) == Some(index) {
            // `mov idx', idx` (a copy or zero-extension) moves the search to the source;
            // `mov idx', [slot]` to the slot.
            if i.mnemonic() == Mnemonic::Mov && i.op1_kind() == OpKind::Register {
                index = full(i.op1_register());
                continue;
            }
            if matches!(
                i.mnemonic(),
                Mnemonic::Mov | Mnemonic::Movsxd | Mnemonic::Movzx
            ) {
                if let Some((base, disp, _)) = slot_of(i, 1) {
                    slot = Some((base, disp));
                    continue;
                }
            }
            return None;
        }
        if let Some((base, disp)) = slot {
            // A store into the slot between the compare and the reload.
            if i.op_count() > 0 && slot_of(i, 0).is_some_and(|(b, d, _)| (b, d) == (base, disp)) {
                return None;
            }
        }
        if !matches!(
            i.flow_control(),
            FlowControl::Next | FlowControl::ConditionalBranch
        ) {
            return None;
        }
    }
    None
}

fn read_entries(read: ReadFile, table: u64, count: u64, width: usize) -> Option<Vec<u64>> {
    if count == 0 || count > MAX_TABLE_ENTRIES {
        return None;
    }
    let bytes = read(table, count as usize * width)?;
    Some(
        bytes
            .chunks_exact(width)
            .map(|c| match width {
                4 => i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64 as u64,
                _ => u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]),
            })
            .collect(),
    )
}

/// For an entry load `[base + index*scale]` of `width`-byte entries: the
/// table address, the index register, and the instruction that reads the
/// index (where its bound is searched from). Either `[table + idx*width]`, or
/// (gcc -O0) `[table + off]` / `[off + table]` with `off = lea [idx*width]`.
fn table_and_index(
    insns: &[Instruction],
    start: usize,
    load: usize,
    width: u32,
) -> Option<(u64, Register, usize)> {
    let i = &insns[load];
    if i.memory_displacement64() != 0 {
        return None;
    }
    let (base, index, scale) = (i.memory_base(), i.memory_index(), i.memory_index_scale());
    if scale == width {
        return Some((rip_address(insns, start, load, base)?, index, load));
    }
    if scale != 1 {
        return None;
    }
    for (table_reg, offset_reg) in [(base, index), (index, base)] {
        let Some(table) = rip_address(insns, start, load, table_reg) else {
            continue;
        };
        let k_off = def_of(insns, start, load, offset_reg)?;
        let off = &insns[k_off];
        if off.mnemonic() == Mnemonic::Lea
            && off.memory_base() == Register::None
            && off.memory_index_scale() == width
            && off.memory_displacement64() == 0
        {
            return Some((table, off.memory_index(), k_off));
        }
    }
    None
}

/// Resolves the table of the indirect jump `insns[at]`.
/// `Ok(None)`: not a table jump; `Err(())`: a table jump that cannot be bounded.
fn table_targets(insns: &[Instruction], at: usize, read: ReadFile) -> Result<Option<Vec<u64>>, ()> {
    let jmp = &insns[at];
    let start = at.saturating_sub(LOOKBACK);
    // Absolute entries: `jmp [idx*8 + table]`, or `mov r, [idx*8 + table]; jmp r`.
    let absolute = |i: &Instruction, k: usize| -> Result<Option<Vec<u64>>, ()> {
        if i.memory_base() != Register::None || i.memory_index_scale() != 8 {
            return Err(());
        }
        let max = bound_before(insns, k, i.memory_index()).ok_or(())?;
        // `cmp idx, -1; ja`: a bound of 2^64 entries is no bound.
        read_entries(
            read,
            i.memory_displacement64(),
            max.checked_add(1).ok_or(())?,
            8,
        )
        .map(Some)
        .ok_or(())
    };
    if jmp.op0_kind() == OpKind::Memory {
        if jmp.memory_index() == Register::None {
            return Ok(None); // `jmp [rip + slot]` / `jmp [reg + off]`: a call through a pointer.
        }
        return absolute(jmp, at);
    }
    if jmp.op0_kind() != OpKind::Register {
        return Ok(None);
    }
    let Some(k_def) = def_of(insns, start, at, jmp.op0_register()) else {
        return Ok(None); // Not computed here: a pointer passed in.
    };
    let def = &insns[k_def];
    if def.mnemonic() != Mnemonic::Add {
        let indexed_load = def.op_count() == 2
            && def.op1_kind() == OpKind::Memory
            && def.memory_index() != Register::None;
        if indexed_load && def.mnemonic() == Mnemonic::Mov {
            return absolute(def, k_def);
        }
        return if indexed_load { Err(()) } else { Ok(None) };
    }
    if def.op1_kind() != OpKind::Register {
        return Err(());
    }
    // add rE, rT (either order): rT = lea [rip + table], rE = the sign-extended entry.
    let (a, b) = (def.op0_register(), def.op1_register());
    for (entry, base) in [(a, b), (b, a)] {
        let Some(table) = rip_address(insns, start, k_def, base) else {
            continue;
        };
        let Some(mut k_load) = def_of(insns, start, k_def, entry) else {
            continue;
        };
        if insns[k_load].mnemonic() == Mnemonic::Cdqe {
            // gcc -O0: `mov eax, [..]; cdqe`.
            match def_of(insns, start, k_load, Register::RAX) {
                Some(k) if insns[k].code() == Code::Mov_r32_rm32 => k_load = k,
                _ => continue,
            }
        } else if insns[k_load].code() != Code::Movsxd_r64_rm32 {
            continue;
        }
        if insns[k_load].op1_kind() != OpKind::Memory {
            continue;
        }
        let (load_table, index, reads_index) = table_and_index(insns, start, k_load, 4).ok_or(())?;
        if load_table != table {
            return Err(());
        }
        let max = bound_before(insns, reads_index, index).ok_or(())?;
        let count = max.checked_add(1).ok_or(())?;
        let entries = read_entries(read, table, count, 4).ok_or(())?;
        return Ok(Some(
            entries.into_iter().map(|e| table.wrapping_add(e)).collect(),
        ));
    }
    Err(())
}

/// Every table-driven indirect jump in the function at `function` whose whole code
/// is `code`, with its targets (see the module docs for what is recognised).
///
/// Targets outside the function make the jump unbounded: the table was not
/// what it seemed (e.g. absolute entries left for the dynamic loader to fill).
pub fn indirect_jumps(function: u64, code: &[u8], read: ReadFile) -> Vec<IndirectJump> {
    let insns: Vec<Instruction> = Decoder::with_ip(64, code, function, DecoderOptions::NONE)
        .into_iter()
        .collect();
    let end = function + code.len() as u64;
    let mut out = Vec::new();
    for (at, i) in insns.iter().enumerate() {
        if i.is_invalid() || i.flow_control() != FlowControl::IndirectBranch {
            continue;
        }
        let targets = match table_targets(&insns, at, read) {
            Ok(None) => continue,
            Ok(Some(t)) if t.iter().all(|&x| x >= function && x < end) => Some(t),
            _ => None,
        };
        out.push(IndirectJump {
            from: i.ip(),
            targets,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_twice_names() {
        for n in [
            "setjmp",
            "_setjmp",
            "__sigsetjmp",
            "sigsetjmp",
            "vfork",
            "__vfork",
            "__libc_vfork",
            "getcontext",
            "savecontext",
            "_setjmp@GLIBC_2.2.5",
        ] {
            assert!(returns_twice_by_name(n), "{n}");
        }
        for n in ["longjmp", "fork", "setcontext", "jumper", "setjmp_helper"] {
            assert!(!returns_twice_by_name(n), "{n}");
        }
    }

    #[test]
    fn padding_must_be_fill() {
        assert_eq!(padding_problem(&[0xcc, 0xcc, 0x90], 3), None);
        // A multi-byte nop (0f 1f 40 00) straddling the end is still fill.
        assert_eq!(
            padding_problem(&[0x66, 0x90, 0x0f, 0x1f, 0x40, 0x00], 3),
            None
        );
        assert!(padding_problem(&[0xcc, 0x55], 2).unwrap().contains("+1"));
        assert!(padding_problem(&[], 1).unwrap().contains("next symbol"));
        assert!(padding_problem(&[0xcc], 2).unwrap().contains("only 1"));
    }

    const F: u64 = 0x1000;

    /// gcc -O2 -fPIC `switch`: cmp edi,3; ja +def; mov edi,edi; lea rdx,[rip+T];
    /// movsxd rax,[rdx+rdi*4]; add rax,rdx; jmp rax; ... (T at F + 0x100).
    fn pic_switch() -> Vec<u8> {
        let mut c = vec![
            0x83, 0xff, 0x03, // 0: cmp edi,3
            0x77, 0x10, // 3: ja +0x10
            0x89, 0xff, // 5: mov edi,edi
            0x48, 0x8d, 0x15, 0xf2, 0x00, 0x00, 0x00, // 7: lea rdx,[rip+0xf2] -> 0x100
            0x48, 0x63, 0x04, 0xba, // e: movsxd rax,[rdx+rdi*4]
            0x48, 0x01, 0xd0, // 12: add rax,rdx
            0xff, 0xe0, // 15: jmp rax
        ];
        c.resize(0x30, 0xc3);
        c
    }

    fn pic_table(entries: &[i32]) -> impl Fn(u64, usize) -> Option<Vec<u8>> + '_ {
        move |addr, len| {
            assert_eq!(addr, F + 0x100);
            let bytes: Vec<u8> = entries.iter().flat_map(|e| e.to_le_bytes()).collect();
            bytes.get(..len).map(<[u8]>::to_vec)
        }
    }

    #[test]
    fn pic_table_is_bounded_and_read() {
        let code = pic_switch();
        let entries = [-0xe8, -0xe4, -0xe0, -0xdc]; // F+0x18, +0x1c, +0x20, +0x24
        let read = pic_table(&entries);
        let jumps = indirect_jumps(F, &code, &read);
        assert_eq!(
            jumps,
            vec![IndirectJump {
                from: F + 0x15,
                targets: Some(vec![F + 0x18, F + 0x1c, F + 0x20, F + 0x24]),
            }]
        );
        // An entry pointing outside the function: not a table we understand.
        let entries = [-0xe8, -0xe4, -0xe0, 0x1000];
        let read = pic_table(&entries);
        assert_eq!(indirect_jumps(F, &code, &read)[0].targets, None);
    }

    #[test]
    fn unbounded_and_pointer_jumps() {
        // Without the cmp/ja pair the table size is unknown.
        let mut code = pic_switch();
        code[..5].copy_from_slice(&[0x90; 5]);
        let read = |_: u64, _: usize| -> Option<Vec<u8>> { panic!("must not read") };
        assert_eq!(indirect_jumps(F, &code, &read)[0].targets, None);
        // jmp rax with rax a pointer argument (never written): a tail call.
        let code = [0x48, 0x89, 0xf8, 0xff, 0xe0]; // mov rax,rdi; jmp rax
        assert!(indirect_jumps(F, &code, &read).is_empty());
        // jmp [rip+x]: through the GOT.
        let code = [0xff, 0x25, 0, 0, 0, 0];
        assert!(indirect_jumps(F, &code, &read).is_empty());
    }

    #[test]
    fn a_bound_of_minus_one_is_no_bound() {
        // Found by the fuzzer (prologue_x86_64): `cmp rdi,-1; ja` bounds the index
        // by u64::MAX, and the entry count (bound + 1) overflowed.
        let mut code = vec![
            0x48, 0x83, 0xff, 0xff, 0x77, 0x08, 0xff, 0x24, 0xfd, 0x00, 0x20, 0x00, 0x00,
        ];
        code.resize(0x20, 0xc3);
        let read = |_: u64, _: usize| -> Option<Vec<u8>> { panic!("must not read") };
        assert_eq!(indirect_jumps(F, &code, &read)[0].targets, None);
        // The same with a PIC table: `cmp rdi,-1; ja`, then the movsxd/add pair.
        let mut code = vec![
            0x48, 0x83, 0xff, 0xff, // 0: cmp rdi,-1
            0x77, 0x10, // 4: ja +0x10
            0x48, 0x8d, 0x15, 0xf3, 0x00, 0x00, 0x00, // 6: lea rdx,[rip+0xf3] -> 0x100
            0x48, 0x63, 0x04, 0xba, // d: movsxd rax,[rdx+rdi*4]
            0x48, 0x01, 0xd0, // 11: add rax,rdx
            0xff, 0xe0, // 14: jmp rax
        ];
        code.resize(0x30, 0xc3);
        assert_eq!(indirect_jumps(F, &code, &read)[0].targets, None);
    }

    #[test]
    fn absolute_table() {
        // cmp rdi,2; jae +8; jmp qword [rdi*8+0x2000]
        let mut code = vec![
            0x48, 0x83, 0xff, 0x02, 0x73, 0x08, 0xff, 0x24, 0xfd, 0x00, 0x20, 0x00, 0x00,
        ];
        code.resize(0x20, 0xc3);
        let read = |addr: u64, len: usize| -> Option<Vec<u8>> {
            assert_eq!((addr, len), (0x2000, 16));
            let mut v = (F + 0x10).to_le_bytes().to_vec();
            v.extend_from_slice(&(F + 0x14).to_le_bytes());
            Some(v)
        };
        assert_eq!(
            indirect_jumps(F, &code, &read)[0].targets,
            Some(vec![F + 0x10, F + 0x14])
        );
    }
}
