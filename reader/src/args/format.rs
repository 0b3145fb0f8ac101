//! Value formatting as gdb prints it: integers, `bool`, chars (`97 'a'`), enums,
//! floats (`%g` with 17 or 9 significant digits), pointers, C strings (read from
//! the target a page at a time, at most [`MAX_STRING`] bytes), structs and unions
//! member by member, anything else as bytes.

use super::types::{TypeDesc, TypeKind};
use crate::memory::Memory;

/// Longest string read from the target for a `char *` argument (as gdb's `print elements`).
pub const MAX_STRING: usize = 200;

/// Formats a value of type `ty` from its little-endian bytes as gdb prints it.
pub fn format_value(ty: &TypeDesc, bytes: &[u8], mem: &dyn Memory) -> String {
    format_depth(ty, bytes, mem, 0)
}

fn word(bytes: &[u8], size: u64) -> u64 {
    let n = (size as usize).clamp(1, 8).min(bytes.len());
    let mut w = [0u8; 8];
    w[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(w)
}

fn sign_extend(v: u64, size: u64) -> i64 {
    match size {
        1 => v as u8 as i8 as i64,
        2 => v as u16 as i16 as i64,
        4 => v as u32 as i32 as i64,
        _ => v as i64,
    }
}

fn char_literal(c: u8) -> String {
    match c {
        b'\n' => "'\\n'".into(),
        b'\t' => "'\\t'".into(),
        b'\r' => "'\\r'".into(),
        b'\\' => "'\\\\'".into(),
        b'\'' => "'\\''".into(),
        0x20..=0x7e => format!("'{}'", c as char),
        _ => format!("'\\{c:03o}'"),
    }
}

fn escape_into(out: &mut String, bytes: &[u8]) {
    for &c in bytes {
        match c {
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\r' => out.push_str("\\r"),
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(c as char),
            _ => out.push_str(&format!("\\{c:03o}")),
        }
    }
}

/// Reads a NUL-terminated string of at most [`MAX_STRING`] bytes at `addr`.
fn read_c_string(mem: &dyn Memory, addr: u64) -> Result<(Vec<u8>, bool), ()> {
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < MAX_STRING {
        // Never read across a page boundary in one go: the next page may be unmapped.
        let page_left = 4096 - (at % 4096) as usize;
        let n = page_left.min(MAX_STRING - out.len()).min(64);
        let mut chunk = vec![0u8; n];
        if mem.read(at, &mut chunk).is_err() {
            // The string may end just before unreadable memory: go byte by byte.
            for i in 0..n {
                let mut b = [0u8; 1];
                if mem.read(at + i as u64, &mut b).is_err() {
                    return if out.is_empty() {
                        Err(())
                    } else {
                        Ok((out, true))
                    };
                }
                if b[0] == 0 {
                    return Ok((out, false));
                }
                out.push(b[0]);
            }
            at += n as u64;
            continue;
        }
        if let Some(end) = chunk.iter().position(|&c| c == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Ok((out, false));
        }
        out.extend_from_slice(&chunk);
        at += n as u64;
    }
    Ok((out, true))
}

fn format_depth(ty: &TypeDesc, bytes: &[u8], mem: &dyn Memory, depth: u32) -> String {
    let v = word(bytes, ty.size);
    match &ty.kind {
        TypeKind::Signed => sign_extend(v, ty.size).to_string(),
        TypeKind::Unsigned => truncate(v, ty.size).to_string(),
        TypeKind::Bool => match truncate(v, ty.size) {
            0 => "false".into(),
            1 => "true".into(),
            n => n.to_string(),
        },
        TypeKind::Char { signed } => {
            let c = v as u8;
            let n = if *signed {
                (c as i8).to_string()
            } else {
                c.to_string()
            };
            format!("{n} {}", char_literal(c))
        }
        TypeKind::Enum {
            enumerators,
            signed,
        } => {
            let n = if *signed {
                sign_extend(v, ty.size)
            } else {
                truncate(v, ty.size) as i64
            };
            match enumerators.iter().find(|(_, e)| *e == n) {
                Some((name, _)) => name.clone(),
                None => n.to_string(),
            }
        }
        TypeKind::Float => match ty.size {
            4 => gdb_float(f64::from(f32::from_bits(v as u32)), 9),
            8 => gdb_float(f64::from_bits(v), 17),
            _ => "<unsupported float>".into(),
        },
        TypeKind::Pointer(pointee) => {
            if v == 0 {
                return "0x0".into();
            }
            match &pointee.kind {
                TypeKind::Char { .. } if pointee.size == 1 => match read_c_string(mem, v) {
                    Ok((s, cut)) => {
                        let mut out = format!("0x{v:x} \"");
                        escape_into(&mut out, &s);
                        out.push('"');
                        if cut {
                            out.push_str("...");
                        }
                        out
                    }
                    Err(()) => format!("0x{v:x} <error: Cannot access memory at address 0x{v:x}>"),
                },
                TypeKind::Struct { .. } | TypeKind::Union { .. } => {
                    format!("({}) 0x{v:x}", ty.name)
                }
                _ => format!("0x{v:x}"),
            }
        }
        TypeKind::Struct { members } | TypeKind::Union { members }
            if depth < 3 && !members.is_empty() =>
        {
            let parts: Vec<String> = members
                .iter()
                .map(|m| {
                    let start = m.offset as usize;
                    let end = start.saturating_add(m.ty.size as usize);
                    let shown = match bytes.get(start..end) {
                        Some(b) => format_depth(&m.ty, b, mem, depth + 1),
                        None => "<unavailable>".into(),
                    };
                    match &m.name {
                        Some(n) => format!("{n} = {shown}"),
                        None => shown,
                    }
                })
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
        _ => {
            let shown: Vec<String> = bytes
                .iter()
                .take(ty.size.max(1) as usize)
                .map(|b| format!("{b:02x}"))
                .collect();
            format!("<{} bytes: {}>", shown.len(), shown.join(" "))
        }
    }
}

/// `v` as gdb prints a floating-point value: C's `%g` with `digits`
/// significant digits (17 for `double`, 9 for `float`), `inf`, `-nan(0x...)`.
pub fn gdb_float(v: f64, digits: usize) -> String {
    if v.is_nan() {
        let sign = if v.is_sign_negative() { "-" } else { "" };
        return format!("{sign}nan(0x{:x})", v.to_bits() & ((1u64 << 52) - 1));
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.into();
    }
    let digits = digits.max(1);
    // The exponent after rounding to `digits` significant digits decides the style.
    let sci = format!("{:.*e}", digits - 1, v);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if exp < -4 || exp >= digits as i32 {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.unsigned_abs())
    } else {
        let decimals = (digits as i32 - 1 - exp).max(0) as usize;
        trim(&format!("{v:.decimals$}"))
    }
}

/// The low `size` bytes of `v` (all of it for sizes 0 and 8 or more).
pub(crate) fn truncate(v: u64, size: u64) -> u64 {
    if size == 0 || size >= 8 {
        v
    } else {
        v & ((1u64 << (8 * size)) - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::signature::parse_params;
    use crate::args::testing::Bytes;

    #[test]
    fn values_format_like_gdb() {
        let mem = Bytes(0x1000, b"hi\n\"there\0".to_vec());
        let sig =
            parse_params("int, unsigned char, _Bool, const char *, struct p *, double").unwrap();
        let t = |i: usize| &sig.params()[i].ty;
        assert_eq!(format_value(t(0), &(-5i64).to_le_bytes(), &mem), "-5");
        assert_eq!(format_value(t(1), &[97, 1, 2], &mem), "97 'a'");
        assert_eq!(format_value(t(2), &[1], &mem), "true");
        assert_eq!(
            format_value(t(3), &0x1000u64.to_le_bytes(), &mem),
            "0x1000 \"hi\\n\\\"there\""
        );
        assert_eq!(
            format_value(t(3), &0x9000u64.to_le_bytes(), &mem),
            "0x9000 <error: Cannot access memory at address 0x9000>"
        );
        assert_eq!(
            format_value(t(4), &0x1234u64.to_le_bytes(), &mem),
            "(struct p *) 0x1234"
        );
    }

    #[test]
    fn doubles_print_like_gdb() {
        for (v, want) in [
            (1.25, "1.25"),
            (1e3, "1000"),
            (-0.125, "-0.125"),
            (0.1, "0.10000000000000001"),
            (1e20, "1e+20"),
            (1.5e-7, "1.4999999999999999e-07"),
            (0.0, "0"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(gdb_float(v, 17), want, "{v}");
        }
        assert_eq!(gdb_float(f64::from(0.1f32), 9), "0.100000001");
    }
}
