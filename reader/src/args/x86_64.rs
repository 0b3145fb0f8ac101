//! SysV x86-64: where each parameter of a described function arrives, and its
//! value read back from a stash frame.
//!
//! - Placement ([`placement_of`]): which register or stack slot each parameter
//!   arrives in, classified with [`trampolines::x86_64::place_arguments`]. A
//!   parameter whose type cannot be classified with certainty makes the whole
//!   placement unknown (`None`), never a guess.
//! - Stash values ([`stashed_values_with_xmm`]): each parameter's bytes from the
//!   stashed argument registers, xmm registers and copied stack words, by that
//!   placement when every type classifies, else by the per-parameter
//!   classification of [`assign_registers`] up to the first parameter it cannot place.

use trampolines::x86_64::{place_arguments, ArgPlacement, Field, ParamType, Signature};

use super::format::{format_value, truncate};
use super::types::{ArgSource, ArgValue, FunctionInfo, Member, TypeDesc, TypeKind};
use crate::memory::Memory;

/// Deepest aggregate nesting [`param_type`] follows.
const MAX_TYPE_DEPTH: u32 = 8;

/// The SysV classification input for a parameter type, or `None` when the type
/// cannot be classified with certainty (never a guess).
pub fn param_type(ty: &TypeDesc) -> Option<ParamType> {
    convert_type(ty, 0)
}

fn convert_type(ty: &TypeDesc, depth: u32) -> Option<ParamType> {
    if depth > MAX_TYPE_DEPTH {
        return None;
    }
    let int = |size: u64| match size {
        1 | 2 | 4 | 8 => Some(ParamType::Int { size: size as u8 }),
        _ => None,
    };
    match &ty.kind {
        TypeKind::Signed | TypeKind::Unsigned if ty.size == 16 => Some(ParamType::Int128),
        TypeKind::Signed
        | TypeKind::Unsigned
        | TypeKind::Bool
        | TypeKind::Char { .. }
        | TypeKind::Enum { .. } => int(ty.size),
        TypeKind::Pointer(_) => (ty.size == 8).then_some(ParamType::Pointer),
        TypeKind::Float => match ty.size {
            4 => Some(ParamType::Float),
            8 => Some(ParamType::Double),
            // `_Float128` is also 16 bytes but travels in an xmm register.
            16 if ty.name.ends_with("long double") => Some(ParamType::LongDouble),
            _ => None,
        },
        TypeKind::Struct { members } | TypeKind::Union { members } => {
            aggregate(ty.size, members, depth)
        }
        TypeKind::Array { element, count } => {
            let count = (*count)?;
            let element_type = convert_type(element, depth + 1)?;
            let size = count.checked_mul(element_type.size())?;
            if size != ty.size {
                return None;
            }
            // Beyond 16 bytes the argument is in memory whatever its fields are.
            let fields = if size <= 16 {
                (0..count)
                    .map(|k| Field {
                        offset: k * element_type.size(),
                        ty: element_type.clone(),
                    })
                    .collect()
            } else {
                Vec::new()
            };
            Some(ParamType::Aggregate {
                size,
                align: element_type.align(),
                fields,
            })
        }
        TypeKind::Void | TypeKind::Function | TypeKind::Unknown => None,
    }
}

fn aggregate(size: u64, members: &[Member], depth: u32) -> Option<ParamType> {
    // Size 0 is an incomplete type here; no members means "not described".
    if size == 0 || members.is_empty() {
        return None;
    }
    let mut fields = Vec::with_capacity(members.len());
    for m in members {
        if m.bit_field {
            return None;
        }
        let ty = convert_type(&m.ty, depth + 1)?;
        if m.offset.checked_add(ty.size())? > size {
            return None;
        }
        fields.push(Field {
            offset: m.offset,
            ty,
        });
    }
    let align = fields.iter().map(|f| f.ty.align()).max().unwrap_or(1);
    Some(ParamType::Aggregate {
        size,
        align,
        fields,
    })
}

/// The calling-convention view of a described function, or `None` when some
/// parameter (or a returned aggregate) cannot be classified with certainty.
pub fn signature_of(info: &FunctionInfo) -> Option<Signature> {
    let is_aggregate = |t: &TypeDesc| {
        matches!(
            t.kind,
            TypeKind::Struct { .. } | TypeKind::Union { .. } | TypeKind::Array { .. }
        )
    };
    // A C++ class may be non-trivially copyable and then travels by invisible
    // reference, which DWARF from GCC does not say.
    if info.cpp
        && (info.params.iter().any(|p| is_aggregate(&p.ty))
            || info.returns.as_ref().is_some_and(is_aggregate))
    {
        return None;
    }
    let params = info
        .params
        .iter()
        .map(|p| param_type(&p.ty))
        .collect::<Option<Vec<_>>>()?;
    // Only a returned aggregate changes the placement (a hidden pointer in rdi).
    let ret = match &info.returns {
        Some(t) if is_aggregate(t) => Some(param_type(t)?),
        Some(t) => param_type(t),
        None => None,
    };
    Some(Signature {
        ret,
        params,
        variadic: info.variadic,
    })
}

/// Where each parameter of a described function arrives, when every type classifies.
pub fn placement_of(info: &FunctionInfo) -> Option<ArgPlacement> {
    signature_of(info).map(|sig| place_arguments(&sig))
}

/// The register class of a parameter under the SysV x86-64 ABI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// `n` eightbytes in integer registers.
    Integer(usize),
    /// In vector registers.
    Sse,
    /// Passed in memory (on the stack).
    Memory,
    /// Not classified here (mixed aggregates, long double, ...).
    Unknown,
}

fn has_float(t: &TypeDesc) -> bool {
    match &t.kind {
        TypeKind::Float => true,
        TypeKind::Struct { members } | TypeKind::Union { members } => {
            members.iter().any(|m| has_float(&m.ty))
        }
        TypeKind::Array { element, .. } => has_float(element),
        _ => false,
    }
}

fn classify(t: &TypeDesc) -> Class {
    match &t.kind {
        TypeKind::Float if t.size <= 8 => Class::Sse,
        TypeKind::Float => Class::Unknown,
        TypeKind::Struct { members } | TypeKind::Union { members } => {
            if t.size > 16 {
                Class::Memory
            } else if t.size == 0 || members.is_empty() || has_float(t) {
                Class::Unknown
            } else {
                Class::Integer(t.size.div_ceil(8) as usize)
            }
        }
        TypeKind::Array { .. } | TypeKind::Function | TypeKind::Unknown | TypeKind::Void => {
            Class::Unknown
        }
        _ if t.size > 8 => Class::Unknown,
        _ => Class::Integer(1),
    }
}

/// Where a hooked function's parameter was at entry, by the SysV x86-64 ABI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgSlot {
    /// These integer argument registers (indices 0..6 into rdi, rsi, rdx, rcx, r8, r9).
    Registers(Vec<usize>),
    /// Incoming stack words starting at this index (0 = the first stack argument).
    Stack(usize),
    /// This vector register (`xmmN`), which the stash does not keep.
    Xmm(usize),
    /// Not known.
    Unknown,
}

/// Assigns each parameter its entry location under the SysV x86-64 ABI.
pub fn assign_registers(info: &FunctionInfo) -> Vec<ArgSlot> {
    let mut next_int = 0usize;
    let mut next_xmm = 0usize;
    let mut next_stack = 0usize;
    let mut lost = false;
    // A large returned struct takes rdi for its hidden pointer.
    if let Some(r) = &info.returns {
        if matches!(r.kind, TypeKind::Struct { .. } | TypeKind::Union { .. }) && r.size > 16 {
            next_int = 1;
        }
    }
    info.params
        .iter()
        .map(|p| {
            if lost {
                return ArgSlot::Unknown;
            }
            match classify(&p.ty) {
                Class::Integer(n) if next_int + n <= 6 => {
                    let regs = (next_int..next_int + n).collect();
                    next_int += n;
                    ArgSlot::Registers(regs)
                }
                Class::Integer(n) => {
                    let at = next_stack;
                    next_stack += n;
                    ArgSlot::Stack(at)
                }
                Class::Sse if next_xmm < 8 => {
                    next_xmm += 1;
                    ArgSlot::Xmm(next_xmm - 1)
                }
                Class::Memory => {
                    let at = next_stack;
                    next_stack += p.ty.size.div_ceil(8) as usize;
                    ArgSlot::Stack(at)
                }
                Class::Sse | Class::Unknown => {
                    lost = true;
                    ArgSlot::Unknown
                }
            }
        })
        .collect()
}

/// Where a parameter's bytes are in a stash frame.
#[derive(Debug, Clone, PartialEq, Eq)]
enum StashSlot {
    /// These integer argument registers (indices into rdi, rsi, rdx, rcx, r8, r9).
    Int(Vec<usize>),
    /// These xmm registers (the low eight bytes of each, in order).
    Xmm(Vec<usize>),
    /// Incoming stack words `first..first + words`.
    Stack { first: usize, words: usize },
    /// In integer and xmm registers both (a mixed small aggregate).
    Mixed(Vec<usize>, Vec<usize>),
    /// Not known.
    Unknown,
}

/// The stash slot of each parameter: from the full SysV classification when
/// every type classifies ([`placement_of`]), else from
/// [`assign_registers`].
fn stash_slots(info: &FunctionInfo) -> Vec<StashSlot> {
    use trampolines::x86_64::frame::ARGUMENT_REGS;
    use trampolines::x86_64::ArgLocation;
    if let Some(placement) = placement_of(info) {
        return placement
            .params
            .iter()
            .map(|loc| match loc {
                ArgLocation::Registers { int, sse } => {
                    let ints: Vec<usize> = int
                        .iter()
                        .filter_map(|r| ARGUMENT_REGS.iter().position(|a| a == r))
                        .collect();
                    let sses: Vec<usize> = sse.iter().map(|n| usize::from(*n)).collect();
                    match (ints.is_empty(), sses.is_empty()) {
                        (_, true) => StashSlot::Int(ints),
                        (true, false) => StashSlot::Xmm(sses),
                        (false, false) => StashSlot::Mixed(ints, sses),
                    }
                }
                ArgLocation::Stack { first, words } => StashSlot::Stack {
                    first: usize::from(*first),
                    words: usize::from(*words),
                },
            })
            .collect();
    }
    assign_registers(info)
        .into_iter()
        .zip(&info.params)
        .map(|(slot, p)| match slot {
            ArgSlot::Registers(r) => StashSlot::Int(r),
            ArgSlot::Stack(first) => StashSlot::Stack {
                first,
                words: p.ty.size.div_ceil(8).max(1) as usize,
            },
            ArgSlot::Xmm(n) => StashSlot::Xmm(vec![n]),
            ArgSlot::Unknown => StashSlot::Unknown,
        })
        .collect()
}

/// The values of a hooked function's parameters from its stash frame.
///
/// `registers` are the six stashed argument registers with their names, `stack`
/// the copied incoming stack words.
pub fn stashed_values(
    info: &FunctionInfo,
    registers: &[(&'static str, u64)],
    stack: &[u64],
    mem: &dyn Memory,
) -> Vec<ArgValue> {
    stashed_values_with_xmm(info, registers, stack, &[], mem)
}

/// Like [`stashed_values`], with the stashed xmm0-xmm7 (`xmm`, empty when the
/// hook does not stash them): `float` and `double` parameters are read from
/// the low bytes of their register.
pub fn stashed_values_with_xmm(
    info: &FunctionInfo,
    registers: &[(&'static str, u64)],
    stack: &[u64],
    xmm: &[u128],
    mem: &dyn Memory,
) -> Vec<ArgValue> {
    let slots = stash_slots(info);
    info.params
        .iter()
        .zip(slots)
        .map(|(p, slot)| {
            let mut arg = ArgValue {
                name: p.name.clone(),
                ty: Some(p.ty.name.clone()),
                display: String::new(),
                source: None,
                register: None,
                value: None,
            };
            let xmm_names = |n: &[usize]| {
                n.iter()
                    .map(|i| format!("xmm{i}"))
                    .collect::<Vec<_>>()
                    .join(":")
            };
            let words: Option<(String, Vec<u64>)> = match &slot {
                StashSlot::Int(r) => {
                    let names: Vec<&str> = r
                        .iter()
                        .filter_map(|i| registers.get(*i).map(|x| x.0))
                        .collect();
                    let vals: Vec<u64> = r
                        .iter()
                        .filter_map(|i| registers.get(*i).map(|x| x.1))
                        .collect();
                    (vals.len() == r.len()).then(|| (names.join(":"), vals))
                }
                StashSlot::Xmm(n) => {
                    // Each eightbyte is the low half of its register.
                    let vals: Vec<u64> = n
                        .iter()
                        .filter_map(|i| xmm.get(*i).map(|v| *v as u64))
                        .collect();
                    (vals.len() == n.len()).then(|| (xmm_names(n), vals))
                }
                StashSlot::Stack { first, words } => stack
                    .get(*first..*first + *words)
                    .map(|w| (format!("stack+{}", 8 * (first + 1)), w.to_vec())),
                StashSlot::Mixed(..) | StashSlot::Unknown => None,
            };
            match (words, &slot) {
                (Some((reg, vals)), _) => {
                    let mut bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
                    if p.ty.size > 0 && (p.ty.size as usize) < bytes.len() {
                        bytes.truncate(p.ty.size as usize);
                    }
                    arg.display = format_value(&p.ty, &bytes, mem);
                    arg.value = (vals.len() == 1).then(|| truncate(vals[0], p.ty.size));
                    arg.register = Some(reg);
                    arg.source = Some(ArgSource::Stash);
                }
                (None, StashSlot::Xmm(n)) => {
                    let names = xmm_names(n);
                    arg.display = format!("<in {names}, not stashed: inject with --float-args>");
                    arg.register = Some(names);
                }
                (None, StashSlot::Stack { first, words }) => {
                    arg.display = format!(
                        "<on the stack at +{}, not copied: inject with --stack-args {}>",
                        8 * (first + 1),
                        first + words
                    );
                }
                (None, StashSlot::Mixed(..)) => {
                    arg.display = "<split across integer and xmm registers, not shown>".into();
                }
                _ => arg.display = "<not stashed>".into(),
            }
            arg
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::signature::parse_params;
    use crate::args::testing::Bytes;
    use crate::args::types::{Location, Param};
    use trampolines::x86_64::ArgLocation;

    fn base(name: &str, kind: TypeKind, size: u64) -> TypeDesc {
        TypeDesc {
            name: name.into(),
            kind,
            size,
        }
    }

    fn member(offset: u64, ty: TypeDesc) -> Member {
        Member {
            name: None,
            offset,
            ty,
            bit_field: false,
        }
    }

    fn info(params: Vec<TypeDesc>, returns: Option<TypeDesc>, cpp: bool) -> FunctionInfo {
        let mut f = parse_params("").unwrap().to_function_info(None);
        f.params = params
            .into_iter()
            .map(|ty| Param {
                name: None,
                ty,
                location: Location::default(),
            })
            .collect();
        f.returns = returns;
        f.cpp = cpp;
        f
    }

    #[test]
    fn scalar_types_convert() {
        let double = base("double", TypeKind::Float, 8);
        assert_eq!(param_type(&double), Some(ParamType::Double));
        assert_eq!(
            param_type(&base("float", TypeKind::Float, 4)),
            Some(ParamType::Float)
        );
        assert_eq!(
            param_type(&base("long double", TypeKind::Float, 16)),
            Some(ParamType::LongDouble)
        );
        assert_eq!(param_type(&base("_Float128", TypeKind::Float, 16)), None);
        assert_eq!(
            param_type(&base("__int128", TypeKind::Signed, 16)),
            Some(ParamType::Int128)
        );
        assert_eq!(
            param_type(&base("char", TypeKind::Char { signed: true }, 1)),
            Some(ParamType::Int { size: 1 })
        );
        let ptr = base("double *", TypeKind::Pointer(Box::new(double)), 8);
        assert_eq!(param_type(&ptr), Some(ParamType::Pointer));
        assert_eq!(param_type(&base("?", TypeKind::Unknown, 8)), None);
        assert_eq!(param_type(&base("int", TypeKind::Signed, 3)), None);
    }

    #[test]
    fn aggregates_convert_with_their_fields() {
        let double = base("double", TypeKind::Float, 8);
        let int = base("int", TypeKind::Signed, 4);
        let pair = base(
            "struct pair",
            TypeKind::Struct {
                members: vec![member(0, int.clone()), member(8, double.clone())],
            },
            16,
        );
        let sig = signature_of(&info(vec![pair], None, false)).unwrap();
        let p = place_arguments(&sig);
        assert!(p.uses_sse);
        assert_eq!(
            p.params[0],
            ArgLocation::Registers {
                int: vec![trampolines::x86_64::frame::StashedReg::Rdi],
                sse: vec![0]
            }
        );
        // char c[3] + int: one INTEGER eightbyte.
        let chars = base(
            "char [3]",
            TypeKind::Array {
                element: Box::new(base("char", TypeKind::Char { signed: true }, 1)),
                count: Some(3),
            },
            3,
        );
        let s = base(
            "struct s",
            TypeKind::Struct {
                members: vec![member(0, chars), member(4, int.clone())],
            },
            8,
        );
        assert_eq!(
            param_type(&s),
            Some(ParamType::Aggregate {
                size: 8,
                align: 4,
                fields: vec![
                    Field {
                        offset: 0,
                        ty: ParamType::Aggregate {
                            size: 3,
                            align: 1,
                            fields: (0..3)
                                .map(|offset| Field {
                                    offset,
                                    ty: ParamType::Int { size: 1 }
                                })
                                .collect()
                        }
                    },
                    Field {
                        offset: 4,
                        ty: ParamType::Int { size: 4 }
                    }
                ]
            })
        );
    }

    #[test]
    fn unsure_types_give_no_signature() {
        let int = base("int", TypeKind::Signed, 4);
        let mut bits = member(0, int.clone());
        bits.bit_field = true;
        let with_bits = base(
            "struct flags",
            TypeKind::Struct {
                members: vec![bits],
            },
            4,
        );
        assert_eq!(param_type(&with_bits), None);
        // Not described (too deep, or a declaration).
        let opaque = base(
            "struct opaque",
            TypeKind::Struct {
                members: Vec::new(),
            },
            8,
        );
        assert_eq!(param_type(&opaque), None);
        // One unclassifiable parameter spoils the whole signature.
        let f = info(
            vec![int.clone(), base("?", TypeKind::Unknown, 8)],
            None,
            false,
        );
        assert_eq!(placement_of(&f), None);
        // A C++ class by value may be passed by invisible reference.
        let class = base(
            "Widget",
            TypeKind::Struct {
                members: vec![member(0, int.clone())],
            },
            4,
        );
        assert_eq!(placement_of(&info(vec![class.clone()], None, true)), None);
        assert!(placement_of(&info(vec![class.clone()], None, false)).is_some());
        // A returned aggregate that cannot be classified leaves rdi in doubt.
        assert_eq!(placement_of(&info(vec![int], Some(opaque), false)), None);
    }

    #[test]
    fn user_signatures_place_variadic_and_hidden_return() {
        let v = parse_params("const char *fmt, ...").unwrap();
        let p = placement_of(&v.to_function_info(None)).unwrap();
        assert!(p.variadic && !p.uses_sse);
        // A returned big struct takes rdi: the sixth long goes to the stack.
        let big = base(
            "struct big",
            TypeKind::Struct {
                members: (0..3)
                    .map(|k| member(8 * k, base("long", TypeKind::Signed, 8)))
                    .collect(),
            },
            24,
        );
        let longs = parse_params("long, long, long, long, long, long").unwrap();
        let mut f = longs.to_function_info(None);
        f.returns = Some(big);
        let p = placement_of(&f).unwrap();
        assert!(p.hidden_return_pointer);
        assert_eq!(p.stack_words, 1);
    }

    #[test]
    fn signature_types_take_integer_and_xmm_registers() {
        let sig =
            parse_params("int, unsigned char, _Bool, const char *, struct p *, double").unwrap();
        let info = sig.to_function_info(None);
        let slots = assign_registers(&info);
        assert_eq!(slots[0], ArgSlot::Registers(vec![0]));
        assert_eq!(slots[4], ArgSlot::Registers(vec![4]));
        assert_eq!(slots[5], ArgSlot::Xmm(0));
    }

    #[test]
    fn seventh_integer_goes_to_the_stack() {
        let sig = parse_params("long, long, long, long, long, long, long").unwrap();
        let slots = assign_registers(&sig.to_function_info(None));
        assert_eq!(slots[6], ArgSlot::Stack(0));
        let regs: Vec<(&'static str, u64)> = vec![
            ("rdi", 1),
            ("rsi", 2),
            ("rdx", 3),
            ("rcx", 4),
            ("r8", 5),
            ("r9", 6),
        ];
        let mem = Bytes(0, Vec::new());
        let v = stashed_values(&sig.to_function_info(None), &regs, &[7], &mem);
        assert_eq!(v[6].display, "7");
        assert_eq!(v[6].register.as_deref(), Some("stack+8"));
        let v = stashed_values(&sig.to_function_info(None), &regs, &[], &mem);
        assert!(v[6].display.contains("--stack-args 1"), "{}", v[6].display);
    }

    #[test]
    fn doubles_come_from_stashed_xmm_and_the_ninth_from_the_stack() {
        let sig = parse_params(
            "long n, double a, double b, double c, double d, double e, double f, double g, double h, double i, float j",
        )
        .unwrap();
        let info = sig.to_function_info(None);
        let regs: Vec<(&'static str, u64)> = vec![("rdi", 3), ("rsi", 0)];
        let xmm: Vec<u128> = (0..8)
            .map(|k| (0xdead_u128 << 64) | u128::from((0.5 + f64::from(k)).to_bits()))
            .collect();
        let stack = [9.0f64.to_bits(), u64::from(2.5f32.to_bits())];
        let mem = Bytes(0, Vec::new());
        let v = stashed_values_with_xmm(&info, &regs, &stack, &xmm, &mem);
        assert_eq!(v[0].display, "3");
        assert_eq!(v[1].display, "0.5");
        assert_eq!(v[1].register.as_deref(), Some("xmm0"));
        assert_eq!(v[1].source, Some(ArgSource::Stash));
        assert_eq!(v[8].display, "7.5");
        assert_eq!(v[8].value, Some(7.5f64.to_bits()));
        // Past xmm7, doubles (and floats) take stack words in order.
        assert_eq!(v[9].display, "9");
        assert_eq!(v[9].register.as_deref(), Some("stack+8"));
        assert_eq!(v[10].display, "2.5");
        assert_eq!(v[10].register.as_deref(), Some("stack+16"));
        // Without the xmm area the message names the option.
        let v = stashed_values(&info, &regs, &stack, &mem);
        assert!(v[1].display.contains("--float-args"), "{}", v[1].display);
        assert_eq!(v[9].display, "9");
    }
}
