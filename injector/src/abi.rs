//! How much of a hooked call's stack the trampoline copies, and whether it stashes xmm0-7.
//!
//! The window comes, in order of precedence, from the user (`--stack-args N`);
//! for a variadic function (by its code or its signature) from
//! [`DEFAULT_VARIADIC_WORDS`]; from a known signature (classified with
//! [`trampolines::x86_64::place_arguments`]), raised to what the code provably
//! reads when that is more (a tail call passing more on); or from the function's
//! code ([`trampolines::x86_64::analyse_stack_reads`], following direct tail
//! calls into functions the symbol tables name). When neither signature nor
//! code bounds the window, [`decide_window`] refuses and names `--stack-args N`.
//! The xmm area is stashed with `--float-args` or when the signature puts a
//! parameter in an xmm register.
//!
//! A signature is known when the user typed one (`--func 'f(int, double)'`) or
//! the module's DWARF describes the function; [`placement_of`] converts its
//! parameter types ([`param_type`]) and refuses (returns `None`, so the code
//! decides) whenever one of them cannot be classified with certainty: unknown or
//! incomplete types, bit-fields, `_Float128`, complex numbers, and C++ class
//! types (which may be passed by invisible reference).

use trampolines::x86_64::{
    analyse_stack_reads, place_arguments, ArgPlacement, Field, ParamType, Signature, StackReads,
    MAX_STACK_WORDS,
};

use crate::args::{FunctionInfo, Member, TypeDesc, TypeKind};
use crate::memory::Memory;
use crate::symbols::ProcessSymbols;

/// Stack words copied for a variadic function when the user gives no `--stack-args`.
pub const DEFAULT_VARIADIC_WORDS: u16 = 8;

/// How deep [`analyse_code`] follows tail calls.
const MAX_TAIL_DEPTH: usize = 4;

/// Largest function body analysed.
const MAX_BODY: u64 = 1 << 20;

/// Where a hook's window size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowSource {
    /// `--stack-args N`.
    User,
    /// The parameter types (debug info).
    Signature,
    /// The function's instructions.
    Code,
    /// The variadic default ([`DEFAULT_VARIADIC_WORDS`]).
    VariadicDefault,
}

impl WindowSource {
    /// Every source.
    pub const ALL: [WindowSource; 4] = [
        WindowSource::User,
        WindowSource::Signature,
        WindowSource::Code,
        WindowSource::VariadicDefault,
    ];

    /// The source whose [`WindowSource::name`] is `name`.
    pub fn from_name(name: &str) -> Option<WindowSource> {
        WindowSource::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Lower-case name for listings.
    pub fn name(self) -> &'static str {
        match self {
            WindowSource::User => "user",
            WindowSource::Signature => "signature",
            WindowSource::Code => "code",
            WindowSource::VariadicDefault => "variadic-default",
        }
    }
}

/// The decided window and xmm stash of one hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowPlan {
    /// Incoming stack words to copy.
    pub words: u16,
    /// The function is variadic.
    pub variadic: bool,
    /// Stash xmm0-xmm7.
    pub xmm: bool,
    /// Where `words` came from.
    pub source: WindowSource,
}

/// What the code analysis concluded, tail calls included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeVerdict {
    /// The function and the functions it tail-calls, merged.
    pub reads: StackReads,
    /// Why the window is unknown, naming the function where it was found.
    pub unsure: Option<String>,
}

/// Analyses the code of the function at `entry` (`size` bytes) and of the functions it tail-calls.
pub fn analyse_code(
    mem: &dyn Memory,
    symbols: &ProcessSymbols,
    entry: u64,
    size: u64,
) -> Result<CodeVerdict, crate::memory::MemoryError> {
    let mut merged = StackReads::default();
    let mut unsure = None;
    let mut seen = vec![entry];
    let mut queue = vec![(entry, size, 0usize)];
    while let Some((addr, len, depth)) = queue.pop() {
        let code = match mem.read_vec(addr, len.min(MAX_BODY) as usize) {
            Ok(code) => code,
            Err(e) if addr == entry => return Err(e),
            // An unreadable tail-call target is skipped like an unnamed one.
            Err(_) => continue,
        };
        let reads = analyse_stack_reads(addr, &code);
        let name = symbols
            .lookup(addr)
            .map_or_else(|| format!("0x{addr:x}"), |(_, s, _)| s.name.clone());
        if addr == entry {
            merged.variadic = reads.variadic;
            merged.indirect_jumps = reads.indirect_jumps;
        }
        merged.words = merged.words.max(reads.words);
        if unsure.is_none() {
            if let Some(why) = &reads.unsure {
                unsure = Some(if addr == entry {
                    why.to_string()
                } else {
                    format!("{name}, which it tail-calls: {why}")
                });
            }
        }
        for target in reads.tail_calls {
            merged.tail_calls.push(target);
            if seen.contains(&target) || depth + 1 > MAX_TAIL_DEPTH {
                continue;
            }
            seen.push(target);
            // Only functions that start at a named symbol are followed; PLT stubs and
            // unnamed code are not (a documented limit).
            if let Some((_, s, 0)) = symbols.lookup(target) {
                if s.size > 0 {
                    queue.push((target, s.size, depth + 1));
                }
            }
        }
    }
    Ok(CodeVerdict {
        reads: merged,
        unsure,
    })
}

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

/// Why no window could be decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowRefusal {
    /// The code does not bound the incoming stack words it reads.
    Unsure(String),
    /// The function reads more stack words than a trampoline copies.
    TooLarge(u16),
}

/// Decides the window: the user's `requested` size, else the signature's, else the code's.
pub fn decide_window(
    requested: Option<u16>,
    signature: Option<&ArgPlacement>,
    code: &CodeVerdict,
    float_args: bool,
) -> Result<WindowPlan, WindowRefusal> {
    let variadic = code.reads.variadic || signature.is_some_and(|s| s.variadic);
    let xmm = float_args || signature.is_some_and(|s| s.uses_sse);
    let (words, source) = match (requested, signature) {
        (Some(n), _) => (n, WindowSource::User),
        (None, _) if variadic => (DEFAULT_VARIADIC_WORDS, WindowSource::VariadicDefault),
        (None, Some(sig)) => {
            // Code that provably reads more (a tail call passing more on) wins.
            let from_code = if code.unsure.is_none() {
                code.reads.words
            } else {
                0
            };
            (sig.stack_words.max(from_code), WindowSource::Signature)
        }
        (None, None) => match &code.unsure {
            Some(why) => return Err(WindowRefusal::Unsure(why.clone())),
            None => (code.reads.words, WindowSource::Code),
        },
    };
    if words > MAX_STACK_WORDS {
        return Err(WindowRefusal::TooLarge(words));
    }
    Ok(WindowPlan {
        words,
        variadic,
        xmm,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use trampolines::x86_64::{ArgLocation, Unsure};

    use crate::args::{parse_params, Location, Param};

    fn verdict(words: u16, variadic: bool, unsure: bool) -> CodeVerdict {
        CodeVerdict {
            reads: StackReads {
                words,
                variadic,
                unsure: unsure.then_some(Unsure::AddressTaken { at: 0x10 }),
                ..StackReads::default()
            },
            unsure: unsure.then(|| "address taken".to_string()),
        }
    }

    #[test]
    fn user_request_wins() {
        let p = decide_window(Some(3), None, &verdict(0, false, true), false).unwrap();
        assert_eq!((p.words, p.source), (3, WindowSource::User));
    }

    #[test]
    fn code_decides_without_signature_and_refuses_when_unsure() {
        let p = decide_window(None, None, &verdict(4, false, false), false).unwrap();
        assert_eq!((p.words, p.source, p.xmm), (4, WindowSource::Code, false));
        assert_eq!(
            decide_window(None, None, &verdict(0, false, true), false),
            Err(WindowRefusal::Unsure("address taken".into()))
        );
        assert_eq!(
            decide_window(None, None, &verdict(17, false, false), false),
            Err(WindowRefusal::TooLarge(17))
        );
    }

    #[test]
    fn variadic_gets_the_default_window() {
        let p = decide_window(None, None, &verdict(0, true, true), false).unwrap();
        assert_eq!(
            (p.words, p.variadic, p.source),
            (DEFAULT_VARIADIC_WORDS, true, WindowSource::VariadicDefault)
        );
        let p = decide_window(Some(12), None, &verdict(0, true, true), false).unwrap();
        assert_eq!((p.words, p.variadic), (12, true));
    }

    #[test]
    fn signature_decides_and_turns_on_xmm_for_doubles() {
        let mut params = vec![ParamType::Int { size: 8 }];
        params.extend(vec![ParamType::Double; 9]);
        let sig = place_arguments(&Signature {
            ret: Some(ParamType::Double),
            params,
            variadic: false,
        });
        // Even where the code alone is unsure, the signature bounds the window.
        let p = decide_window(None, Some(&sig), &verdict(0, false, true), false).unwrap();
        assert_eq!(
            (p.words, p.xmm, p.source),
            (1, true, WindowSource::Signature)
        );
    }
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
    fn user_signature_places_doubles_and_the_stack() {
        let sig = parse_params("long n, double a, double b, double c, double d, double e, double f, double g, double h, double i").unwrap();
        let p = placement_of(&sig.to_function_info(None)).unwrap();
        assert_eq!((p.stack_words, p.uses_sse, p.variadic), (1, true, false));
        let dec = decide_window(None, Some(&p), &verdict(0, false, false), false).unwrap();
        assert_eq!(
            (dec.words, dec.xmm, dec.source),
            (1, true, WindowSource::Signature)
        );
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
