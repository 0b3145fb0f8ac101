//! Named arguments of hooked i386 functions, from DWARF and the i386 stash frame.
//!
//! The stash keeps `eax`, `edx`, `ecx` and a window of incoming stack words. Each
//! parameter is placed by its DWARF location at the function's entry when that is
//! decisive (`DW_OP_reg0/2/1` for regparm and fastcall arguments, `DW_OP_fbreg k`
//! over `DW_OP_call_frame_cfa` or `DW_OP_breg4 k` for stack words). A parameter
//! without a decisive entry location takes its cdecl position only when the other
//! parameters prove the function is cdecl; otherwise no parameter is named (the
//! frame falls back to positional stash labels), so no value is shown under a
//! name it may not belong to (gcc at -O0 copies regparm arguments to local slots
//! and records nothing that says regparm).

use gimli::Operation;

use super::format::format_value;
use super::types::{ArgSource, ArgValue, FunctionInfo, TypeDesc, TypeKind};
use crate::dwarf::DwarfReader;
use crate::memory::Memory;

/// DWARF numbers of the stashed i386 registers and their names.
const STASHED: [(u16, &str); 3] = [(0, "eax"), (2, "edx"), (1, "ecx")];
/// DWARF number of `esp`.
const ESP: u16 = 4;

/// Where one part of a parameter was at the function's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// In this register (DWARF number).
    Reg(u16),
    /// On the stack at this offset from the entry `esp` (4 is the first cdecl word).
    Stack(u64),
}

/// What a parameter's DWARF location says about its place at entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum EntryPlace {
    /// Its parts (place, bytes), low bytes first.
    Known(Vec<(Part, u64)>),
    /// Nothing decisive (no location at entry, a local slot, an expression).
    Unknown,
}

/// The place of a value described by `expr` at the entry pc, where the frame base is `fb`.
fn entry_place(expr: &[u8], fb: Option<&[u8]>, size: u64, encoding: gimli::Encoding) -> EntryPlace {
    let cfa_based = fb == Some([gimli::DW_OP_call_frame_cfa.0].as_slice());
    let mut ops = gimli::Expression(DwarfReader::new(
        crate::dwarf::SharedBytes::from(expr),
        gimli::LittleEndian,
    ))
    .operations(encoding);
    let mut parts = Vec::new();
    let mut pending: Option<Part> = None;
    loop {
        let op = match ops.next() {
            Ok(Some(op)) => op,
            Ok(None) => break,
            Err(_) => return EntryPlace::Unknown,
        };
        let part = match op {
            Operation::Register { register } => Part::Reg(register.0),
            // The CFA at entry is the entry esp + 4 (above the return address).
            Operation::FrameOffset { offset } if cfa_based && offset >= 0 => {
                Part::Stack(4 + offset as u64)
            }
            Operation::RegisterOffset {
                register, offset, ..
            } if register.0 == ESP && offset >= 4 => Part::Stack(offset as u64),
            Operation::Piece {
                size_in_bits,
                bit_offset: None,
            } if size_in_bits % 8 == 0 && size_in_bits > 0 => {
                let Some(p) = pending.take() else {
                    return EntryPlace::Unknown;
                };
                parts.push((p, size_in_bits / 8));
                continue;
            }
            _ => return EntryPlace::Unknown,
        };
        if pending.replace(part).is_some() {
            return EntryPlace::Unknown;
        }
    }
    match (pending, parts.is_empty()) {
        (Some(p), true) => parts.push((p, size)),
        (None, false) => {}
        _ => return EntryPlace::Unknown,
    }
    if parts.iter().map(|(_, n)| n).sum::<u64>() != size {
        return EntryPlace::Unknown;
    }
    EntryPlace::Known(parts)
}

/// True for a struct or union (returned through a hidden pointer on i386 Linux).
fn is_aggregate(t: &TypeDesc) -> bool {
    matches!(t.kind, TypeKind::Struct { .. } | TypeKind::Union { .. })
}

/// The entry places of `info`'s parameters at `entry`, or `None` when they
/// cannot all be decided (see the module docs).
fn places(info: &FunctionInfo, entry: u64) -> Option<Vec<Vec<(Part, u64)>>> {
    let encoding = info.encoding?;
    let fb = info.frame_base.at(entry);
    let found: Vec<EntryPlace> = info
        .params
        .iter()
        .map(|p| match p.location.at(entry) {
            Some(expr) if p.ty.size > 0 => entry_place(expr, fb, p.ty.size, encoding),
            _ => EntryPlace::Unknown,
        })
        .collect();
    // cdecl offsets: each parameter takes its size rounded up to 4 bytes.
    let mut next: u64 = if info.returns.as_ref().is_some_and(is_aggregate) {
        8
    } else {
        4
    };
    let mut cdecl = Vec::new();
    for p in &info.params {
        if p.ty.size == 0 {
            break;
        }
        cdecl.push(next);
        next = next.saturating_add(p.ty.size.div_ceil(4).saturating_mul(4));
    }
    // The function is proven cdecl up to the last parameter found exactly at its
    // cdecl offset, when no parameter was passed in a register or elsewhere.
    let mut cdecl_upto: Option<usize> = None;
    for (i, place) in found.iter().enumerate() {
        if let EntryPlace::Known(parts) = place {
            match (parts.as_slice(), cdecl.get(i)) {
                ([(Part::Stack(at), _)], Some(want)) if at == want => cdecl_upto = Some(i),
                _ => return decided_only(found),
            }
        }
    }
    found
        .into_iter()
        .enumerate()
        .map(|(i, place)| match place {
            EntryPlace::Known(parts) => Some(parts),
            EntryPlace::Unknown => {
                let at = *cdecl.get(i)?;
                (cdecl_upto? >= i).then(|| vec![(Part::Stack(at), info.params[i].ty.size)])
            }
        })
        .collect()
}

/// The places when every parameter's entry location is decisive by itself.
fn decided_only(found: Vec<EntryPlace>) -> Option<Vec<Vec<(Part, u64)>>> {
    found
        .into_iter()
        .map(|p| match p {
            EntryPlace::Known(parts) => Some(parts),
            EntryPlace::Unknown => None,
        })
        .collect()
}

/// Values of a hooked i386 function's parameters from its stash (`stash`: the
/// `eax`/`edx`/`ecx` registers and `stack+N` words, as the i386 reader labels
/// them), or `None` when the parameters' entry places cannot be decided.
///
/// `entry` is the function's runtime entry address.
pub fn stashed_values_i386(
    info: &FunctionInfo,
    entry: u64,
    stash: &[(&'static str, u64)],
    mem: &dyn Memory,
) -> Option<Vec<ArgValue>> {
    values(info, places(info, entry)?, stash, mem)
}

/// Values of the parameters of a user-given signature (`info`, as parsed for
/// x86-64: its types are resized for i386 here), in cdecl order from `stash`;
/// `None` when a type's i386 size is unknown (see [`signature_layout_i386`]).
pub fn signature_values_i386(
    info: &FunctionInfo,
    stash: &[(&'static str, u64)],
    mem: &dyn Memory,
) -> Option<Vec<ArgValue>> {
    let mut info = info.clone();
    for p in &mut info.params {
        ilp32(&mut p.ty);
    }
    let places = signature_layout_i386(&info)?
        .into_iter()
        .map(|(at, size)| vec![(Part::Stack(at), size)])
        .collect();
    values(&info, places, stash, mem)
}

/// Where each parameter of a user-given signature (`info`, as parsed for x86-64)
/// arrives in an i386 cdecl call: `(offset from the entry esp, i386 size)`, the
/// first at offset 4; `None` when a type has no known i386 size (a struct by
/// value without members, `__int128`, which i386 GCC does not have).
pub fn signature_layout_i386(info: &FunctionInfo) -> Option<Vec<(u64, u64)>> {
    let mut next: u64 = 4;
    let mut places = Vec::new();
    for p in &info.params {
        let mut ty = p.ty.clone();
        ilp32(&mut ty);
        if ty.size == 0 || (matches!(ty.kind, TypeKind::Signed | TypeKind::Unsigned) && ty.size > 8)
        {
            return None;
        }
        places.push((next, ty.size));
        next = next.saturating_add(ty.size.div_ceil(4).saturating_mul(4));
    }
    Some(places)
}

/// Resizes a type parsed with x86-64 sizes to i386's (ILP32): pointers, `long`
/// and the pointer-sized typedefs take 4 bytes, `long double` 12. Idempotent.
fn ilp32(ty: &mut TypeDesc) {
    let bare: String = ty
        .name
        .split(' ')
        .filter(|w| !matches!(*w, "const" | "volatile"))
        .collect::<Vec<_>>()
        .join(" ");
    match &mut ty.kind {
        TypeKind::Pointer(_) => ty.size = 4,
        TypeKind::Signed | TypeKind::Unsigned
            if matches!(
                bare.as_str(),
                "long"
                    | "unsigned long"
                    | "size_t"
                    | "ssize_t"
                    | "uintptr_t"
                    | "intptr_t"
                    | "ptrdiff_t"
                    | "off_t"
            ) =>
        {
            ty.size = 4
        }
        TypeKind::Float if ty.size == 16 => ty.size = 12,
        _ => {}
    }
}

/// The values of `info`'s parameters at `places` in the stash.
fn values(
    info: &FunctionInfo,
    places: Vec<Vec<(Part, u64)>>,
    stash: &[(&'static str, u64)],
    mem: &dyn Memory,
) -> Option<Vec<ArgValue>> {
    let word_at = |offset: u64| {
        stash
            .iter()
            .find(|(label, _)| label.strip_prefix("stack+") == Some(&offset.to_string()))
            .map(|(_, v)| *v as u32)
    };
    let reg = |n: u16| {
        let name = STASHED.iter().find(|(r, _)| *r == n)?.1;
        stash
            .iter()
            .find(|(l, _)| *l == name)
            .map(|(_, v)| (name, *v as u32))
    };
    let mut out = Vec::new();
    for (p, parts) in info.params.iter().zip(places) {
        let mut arg = ArgValue {
            name: p.name.clone(),
            ty: Some(p.ty.name.clone()),
            display: String::new(),
            source: None,
            register: None,
            value: None,
        };
        let mut bytes = Vec::new();
        let mut labels = Vec::new();
        let mut missing = None;
        for (part, len) in &parts {
            match part {
                Part::Reg(n) => {
                    // A register the stash does not keep (x87, SSE, ...): undecidable.
                    let (name, v) = reg(*n).filter(|_| *len <= 4)?;
                    bytes.extend_from_slice(&v.to_le_bytes()[..*len as usize]);
                    labels.push(name.to_string());
                }
                Part::Stack(at) => {
                    labels.push(format!("stack+{at}"));
                    // Saturating: a hostile size must not overflow; the stash ends long before.
                    let end = at.saturating_add(*len);
                    for b in *at..end {
                        let word = b & !3;
                        match word_at(word) {
                            Some(w) => bytes.push(w.to_le_bytes()[(b - word) as usize]),
                            None => {
                                missing.get_or_insert((*at, end.saturating_sub(4).div_ceil(4)));
                                break;
                            }
                        }
                    }
                }
            }
        }
        arg.register = Some(labels.join(":"));
        match missing {
            Some((at, words)) => {
                arg.display = format!(
                    "<on the stack at +{at}, not copied: inject with --stack-args {words}>"
                );
            }
            None => {
                arg.display = format_value(&p.ty, &bytes, mem);
                arg.value = (bytes.len() <= 8).then(|| {
                    let mut w = [0u8; 8];
                    w[..bytes.len()].copy_from_slice(&bytes);
                    u64::from_le_bytes(w)
                });
                arg.source = Some(ArgSource::Stash);
            }
        }
        out.push(arg);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::types::{Location, Param};
    use crate::memory::MemoryError;

    struct NoMemory;
    impl Memory for NoMemory {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
            Err(MemoryError::Read {
                addr,
                len: buf.len(),
                source: std::io::ErrorKind::UnexpectedEof.into(),
            })
        }
    }

    const ENC: gimli::Encoding = gimli::Encoding {
        format: gimli::Format::Dwarf32,
        version: 5,
        address_size: 4,
    };

    fn int(name: &str, size: u64, expr: Vec<u8>) -> Param {
        Param {
            name: Some(name.into()),
            ty: TypeDesc {
                name: if size == 8 { "long long" } else { "int" }.into(),
                kind: TypeKind::Signed,
                size,
            },
            location: Location {
                ranges: if expr.is_empty() {
                    vec![]
                } else {
                    vec![(None, expr)]
                },
            },
        }
    }

    fn info(params: Vec<Param>) -> FunctionInfo {
        FunctionInfo {
            name: Some("f".into()),
            entry: Some(0x1000),
            params,
            variadic: false,
            returns: None,
            frame_base: Location {
                ranges: vec![(None, vec![gimli::DW_OP_call_frame_cfa.0])],
            },
            encoding: Some(ENC),
            cpp: false,
        }
    }

    fn fbreg(k: u8) -> Vec<u8> {
        vec![gimli::DW_OP_fbreg.0, k]
    }

    const STASH: [(&str, u64); 6] = [
        ("eax", 1),
        ("edx", 2),
        ("ecx", 3),
        ("stack+4", 10),
        ("stack+8", 0xffff_fffe),
        ("stack+12", 0xffff_ffff),
    ];

    #[test]
    fn stack_and_register_locations_name_their_words() {
        let f = info(vec![
            int("a", 4, vec![gimli::DW_OP_reg0.0]),
            int("b", 4, vec![gimli::DW_OP_reg2.0]),
            int("c", 4, fbreg(0)),
        ]);
        let v = stashed_values_i386(&f, 0x1000, &STASH, &NoMemory).unwrap();
        let shown: Vec<_> = v
            .iter()
            .map(|a| (a.display.as_str(), a.register.clone()))
            .collect();
        assert_eq!(
            shown,
            [
                ("1", Some("eax".into())),
                ("2", Some("edx".into())),
                ("10", Some("stack+4".into()))
            ]
        );
    }

    #[test]
    fn unlocated_parameters_take_cdecl_words_only_when_proven() {
        // `b` (two words) has no location; `c` at its cdecl offset proves cdecl.
        let f = info(vec![
            int("a", 4, fbreg(0)),
            int("b", 8, vec![]),
            int("c", 4, fbreg(12)),
        ]);
        let v = stashed_values_i386(&f, 0x1000, &STASH, &NoMemory).unwrap();
        assert_eq!(v[1].display, "-2");
        assert_eq!(v[1].register.as_deref(), Some("stack+8"));
        assert_eq!(
            v[2].display,
            "<on the stack at +16, not copied: inject with --stack-args 4>"
        );
        // Nothing after `b` proves where it was: not decided.
        let f = info(vec![int("a", 4, fbreg(0)), int("b", 8, vec![])]);
        assert!(stashed_values_i386(&f, 0x1000, &STASH, &NoMemory).is_none());
        // A local slot (gcc -O0 regparm) decides nothing.
        let f = info(vec![int("a", 4, vec![gimli::DW_OP_fbreg.0, 0x6c])]);
        assert!(stashed_values_i386(&f, 0x1000, &STASH, &NoMemory).is_none());
        // A stack word off its cdecl offset (fastcall) stops cdecl guesses.
        let f = info(vec![int("a", 4, vec![]), int("b", 4, fbreg(0))]);
        assert!(stashed_values_i386(&f, 0x1000, &STASH, &NoMemory).is_none());
    }

    #[test]
    fn signatures_take_cdecl_words_with_i386_sizes() {
        let sig =
            crate::args::signature::parse_params("long n, long long big, unsigned char c").unwrap();
        let v = signature_values_i386(&sig.to_function_info(None), &STASH, &NoMemory).unwrap();
        let shown: Vec<_> = v
            .iter()
            .map(|a| (a.display.as_str(), a.register.clone()))
            .collect();
        assert_eq!(
            shown,
            [
                ("10", Some("stack+4".into())),
                ("-2", Some("stack+8".into())),
                (
                    "<on the stack at +16, not copied: inject with --stack-args 4>",
                    Some("stack+16".into())
                )
            ]
        );
    }

    #[test]
    fn register_pairs_combine_little_endian() {
        let mut expr = vec![gimli::DW_OP_reg0.0, gimli::DW_OP_piece.0, 4];
        expr.extend([gimli::DW_OP_reg2.0, gimli::DW_OP_piece.0, 4]);
        let f = info(vec![int("x", 8, expr)]);
        let v = stashed_values_i386(&f, 0x1000, &STASH, &NoMemory).unwrap();
        assert_eq!(v[0].value, Some(0x2_0000_0001));
        assert_eq!(v[0].register.as_deref(), Some("eax:edx"));
    }
}
