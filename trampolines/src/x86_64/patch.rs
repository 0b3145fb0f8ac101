//! The bytes written over a function's entry: a 5-byte `jmp rel32` when the
//! trampoline is within ±2 GiB, else the 14-byte absolute `jmp [rip+0]; dq to`
//! (which writes no register), padded with `int3` to the patched length.

use super::emit::jump_patch;
use super::relocate::{abs_jump, JMP_ABS_LEN, JMP_REL32_LEN};
use crate::error::CodegenError;

/// True when a `jmp rel32` at `at` reaches `to`.
pub fn rel32_reaches(at: u64, to: u64) -> bool {
    i32::try_from(to.wrapping_sub(at + JMP_REL32_LEN as u64) as i64).is_ok()
}

/// The patch for `patch_len` bytes at `at` jumping to `to`: rel32 when it
/// reaches, else the absolute jump when `patch_len` allows [`JMP_ABS_LEN`].
///
/// The choice depends only on the addresses and the length, so a reader can
/// recompute the expected patch from a hook record.
pub fn entry_patch(at: u64, to: u64, patch_len: usize) -> Result<Vec<u8>, CodegenError> {
    if rel32_reaches(at, to) {
        return jump_patch(at, to, patch_len);
    }
    if patch_len < JMP_ABS_LEN {
        return Err(CodegenError::OutOfReach { from: at, to });
    }
    let mut bytes = abs_jump(to);
    bytes.resize(patch_len, 0xcc);
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions, Mnemonic};

    #[test]
    fn near_is_rel32_far_is_absolute() {
        assert_eq!(
            entry_patch(0x1000, 0x2000, 7).unwrap(),
            jump_patch(0x1000, 0x2000, 7).unwrap()
        );
        let far = 0x7f12_3456_7000;
        let p = entry_patch(0x1000, far, 16).unwrap();
        assert_eq!(p.len(), 16);
        assert_eq!(&p[14..], &[0xcc, 0xcc]);
        let jmp = Decoder::with_ip(64, &p, 0x1000, DecoderOptions::NONE).decode();
        assert_eq!(jmp.mnemonic(), Mnemonic::Jmp);
        assert_eq!(jmp.len(), 6);
        assert_eq!(jmp.ip_rel_memory_address(), 0x1006);
        assert_eq!(u64::from_le_bytes(p[6..14].try_into().unwrap()), far);
        assert!(matches!(
            entry_patch(0x1000, far, 13),
            Err(CodegenError::OutOfReach { .. })
        ));
    }
}
