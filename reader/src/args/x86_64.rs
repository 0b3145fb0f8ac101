//! SysV x86-64 placement: which register or stack slot each parameter of a
//! described function arrives in, classified with
//! [`trampolines::x86_64::place_arguments`]. A parameter whose type cannot be
//! classified with certainty makes the whole placement unknown (`None`), never a guess.

use trampolines::x86_64::{place_arguments, ArgPlacement, Field, ParamType, Signature};

use crate::args::{FunctionInfo, Member, TypeDesc, TypeKind};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{parse_params, Location, Param};
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
}
