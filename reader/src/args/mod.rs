//! Typed arguments: what a function's parameters are (from DWARF or a signature the
//! user gives), where their values are, and how to show them the way gdb does.
//!
//! [`FunctionInfo`] is the reusable description: parameter names, [`TypeDesc`]s
//! (kind, byte size, names, members) and DWARF locations. Hooked frames take the
//! values from the stash frame by the SysV x86-64 calling convention
//! ([`assign_registers`]); other frames evaluate each parameter's DWARF location at
//! the frame's pc against what the unwinder recovered ([`FrameState`]) and show
//! `<optimized out>` for anything it cannot recover with certainty.

use std::ops::Range;

use gimli::{AttributeValue, UnitOffset, UnitRef};
use thiserror::Error;

pub mod i386;
pub mod x86_64;

use crate::debuginfo::DwarfReader;
use crate::memory::Memory;

/// Longest string read from the target for a `char *` argument (as gdb's `print elements`).
pub const MAX_STRING: usize = 200;
/// Most type DIEs visited while describing one function (bounds hostile input).
const TYPE_BUDGET: u32 = 4000;
/// How deep by-value aggregates are described.
const TYPE_DEPTH: u32 = 6;

/// What kind of type a [`TypeDesc`] is.
#[derive(Debug, Clone, PartialEq)]
pub enum TypeKind {
    /// `void`.
    Void,
    /// A signed integer.
    Signed,
    /// An unsigned integer.
    Unsigned,
    /// `bool` / `_Bool`.
    Bool,
    /// A character type.
    Char {
        /// True for `signed char` (and plain `char` on x86-64).
        signed: bool,
    },
    /// A floating-point type.
    Float,
    /// An enumeration.
    Enum {
        /// Enumerators and their values.
        enumerators: Vec<(String, i64)>,
        /// True when the underlying type is signed.
        signed: bool,
    },
    /// A pointer or reference.
    Pointer(Box<TypeDesc>),
    /// A struct or class.
    Struct {
        /// Members (empty when not described this deep).
        members: Vec<Member>,
    },
    /// A union.
    Union {
        /// Members (empty when not described this deep).
        members: Vec<Member>,
    },
    /// An array.
    Array {
        /// Element type.
        element: Box<TypeDesc>,
        /// Number of elements, when known.
        count: Option<u64>,
    },
    /// A function type.
    Function,
    /// Anything else.
    Unknown,
}

/// A C-level type: its kind, size and the name gdb would print.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeDesc {
    /// The name, as gdb prints it (`const char *`, `struct point *`, `unsigned char`).
    pub name: String,
    /// What kind of type it is.
    pub kind: TypeKind,
    /// Size in bytes (0 when unknown).
    pub size: u64,
}

/// A member of a struct or union.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// Member name (`None` for anonymous members).
    pub name: Option<String>,
    /// Byte offset in the aggregate.
    pub offset: u64,
    /// Member type.
    pub ty: TypeDesc,
    /// A bit-field (`DW_AT_bit_size`): `offset` does not say where its bits are.
    pub bit_field: bool,
}

/// Where a parameter's value is, per pc range, as DWARF expressions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Location {
    /// `(runtime pc range or None for everywhere, expression bytes)`.
    pub ranges: Vec<(Option<Range<u64>>, Vec<u8>)>,
}

impl Location {
    /// The expression valid at runtime address `pc`.
    pub fn at(&self, pc: u64) -> Option<&[u8]> {
        self.ranges
            .iter()
            .find(|(r, _)| r.as_ref().is_none_or(|r| r.contains(&pc)))
            .map(|(_, e)| e.as_slice())
            .filter(|e| !e.is_empty())
    }
}

/// One formal parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// Parameter name, if known.
    pub name: Option<String>,
    /// Parameter type.
    pub ty: TypeDesc,
    /// Where its value lives (empty without DWARF).
    pub location: Location,
}

/// A function's parameters, from DWARF or from a user-given signature.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionInfo {
    /// Function name, if known.
    pub name: Option<String>,
    /// Runtime entry address, if known.
    pub entry: Option<u64>,
    /// Formal parameters in order.
    pub params: Vec<Param>,
    /// True when the function takes `...`.
    pub variadic: bool,
    /// Return type (`None` for void or unknown).
    pub returns: Option<TypeDesc>,
    /// `DW_AT_frame_base` of the function.
    pub frame_base: Location,
    /// DWARF encoding of the unit the expressions belong to.
    pub encoding: Option<gimli::Encoding>,
    /// Described from a C++ unit (class types may be passed by invisible reference).
    pub cpp: bool,
}

/// Reads the description of the function (or inlined call) whose DIE is at `die`.
pub fn function_info(
    unit: UnitRef<'_, DwarfReader>,
    die: UnitOffset,
    bias: u64,
) -> Result<FunctionInfo, gimli::Error> {
    let mut budget = TYPE_BUDGET;
    let cpp = is_cpp(unit);
    let entry = unit.entry(die)?;
    // The abstract instance (for inlined and out-of-line copies) lists the
    // parameters with their names; a declaration (DW_AT_specification) may hold
    // the name and sits in the scope (namespace, class) that qualifies it.
    let origin = follow(unit, &entry, gimli::DW_AT_abstract_origin)?;
    let listed = origin.as_ref().unwrap_or(&entry);
    let declaration = follow(unit, listed, gimli::DW_AT_specification)?;
    let attr = |at| {
        listed
            .attr_value(at)
            .or_else(|| declaration.as_ref().and_then(|d| d.attr_value(at)))
    };
    let mut name = attr(gimli::DW_AT_name)
        .and_then(|v| unit.attr_string(v).ok())
        .and_then(|s| text(&s));
    if cpp {
        let scope_of = declaration.as_ref().unwrap_or(listed).offset();
        if let (Some(n), Some(scope)) = (&name, scope_prefix(unit, scope_of)) {
            name = Some(format!("{scope}{n}"));
        }
    }
    let returns = match attr(gimli::DW_AT_type) {
        Some(AttributeValue::UnitRef(off)) => {
            Some(describe(unit, off, TYPE_DEPTH, cpp, &mut budget)?)
        }
        _ => None,
    };
    let entry_pc = match entry.attr_value(gimli::DW_AT_low_pc) {
        Some(v) => unit.attr_address(v)?.map(|a| a.wrapping_add(bias)),
        None => None,
    };
    let frame_base = match entry.attr_value(gimli::DW_AT_frame_base) {
        Some(v) => location(unit, v, bias)?,
        None => Location::default(),
    };

    // Concrete parameters (with locations), keyed by their abstract origin.
    let mut concrete: Vec<(Option<UnitOffset>, Param)> = Vec::new();
    let mut variadic = false;
    for_children(unit, die, |child| {
        match child.tag() {
            gimli::DW_TAG_formal_parameter => {
                let origin = match child.attr_value(gimli::DW_AT_abstract_origin) {
                    Some(AttributeValue::UnitRef(o)) => Some(o),
                    _ => None,
                };
                let described = param(unit, child, origin, bias, cpp, &mut budget)?;
                concrete.push((origin, described));
            }
            gimli::DW_TAG_unspecified_parameters => variadic = true,
            _ => {}
        }
        Ok(())
    })?;
    let params = match origin.as_ref() {
        // An inlined or out-of-line instance: the abstract function lists every
        // parameter in order; the instance gives locations to those it kept.
        Some(o) if o.offset() != die => {
            let mut ordered = Vec::new();
            for_children(unit, o.offset(), |child| {
                match child.tag() {
                    gimli::DW_TAG_formal_parameter => {
                        let found = concrete
                            .iter()
                            .find(|(org, _)| *org == Some(child.offset()))
                            .map(|(_, p)| p.clone());
                        ordered.push(match found {
                            Some(p) => p,
                            None => param(unit, child, None, bias, cpp, &mut budget)?,
                        });
                    }
                    gimli::DW_TAG_unspecified_parameters => variadic = true,
                    _ => {}
                }
                Ok(())
            })?;
            if ordered.is_empty() {
                concrete.into_iter().map(|(_, p)| p).collect()
            } else {
                ordered
            }
        }
        _ => concrete.into_iter().map(|(_, p)| p).collect(),
    };
    Ok(FunctionInfo {
        name,
        entry: entry_pc,
        params,
        variadic,
        returns,
        frame_base,
        encoding: Some(unit.encoding()),
        cpp,
    })
}

fn text(r: &DwarfReader) -> Option<String> {
    use gimli::Reader;
    r.to_string_lossy().ok().map(|c| c.into_owned())
}

fn is_cpp(unit: UnitRef<'_, DwarfReader>) -> bool {
    let Ok(root) = unit.entry(unit.header.root_offset()) else {
        return false;
    };
    matches!(
        root.attr_value(gimli::DW_AT_language),
        Some(AttributeValue::Language(
            gimli::DW_LANG_C_plus_plus
                | gimli::DW_LANG_C_plus_plus_03
                | gimli::DW_LANG_C_plus_plus_11
                | gimli::DW_LANG_C_plus_plus_14
        ))
    )
}

/// Follows the unit-local reference attribute `at` (a few hops at most).
fn follow(
    unit: UnitRef<'_, DwarfReader>,
    entry: &gimli::DebuggingInformationEntry<DwarfReader>,
    at: gimli::DwAt,
) -> Result<Option<gimli::DebuggingInformationEntry<DwarfReader>>, gimli::Error> {
    let mut current: Option<gimli::DebuggingInformationEntry<DwarfReader>> = None;
    for _ in 0..4 {
        let e = current.as_ref().unwrap_or(entry);
        match e.attr_value(at) {
            Some(AttributeValue::UnitRef(o)) => current = Some(unit.entry(o)?),
            _ => break,
        }
    }
    Ok(current)
}

/// The `ns::Class::` prefix of the DIE at `target`: the names of the namespaces,
/// classes and structs enclosing it (one scan of the unit).
fn scope_prefix(unit: UnitRef<'_, DwarfReader>, target: UnitOffset) -> Option<String> {
    let mut cursor = unit.entries();
    let mut scopes: Vec<(isize, Option<String>)> = Vec::new();
    loop {
        let e = cursor.next_dfs().ok()??;
        let depth = e.depth();
        while scopes.last().is_some_and(|(d, _)| *d >= depth) {
            scopes.pop();
        }
        if e.offset() == target {
            break;
        }
        if matches!(
            e.tag(),
            gimli::DW_TAG_namespace
                | gimli::DW_TAG_class_type
                | gimli::DW_TAG_structure_type
                | gimli::DW_TAG_union_type
        ) {
            let n = e
                .attr_value(gimli::DW_AT_name)
                .and_then(|v| unit.attr_string(v).ok())
                .and_then(|s| text(&s));
            scopes.push((depth, n));
        }
    }
    let names: Vec<String> = scopes
        .into_iter()
        .map(|(_, n)| n.unwrap_or_else(|| "(anonymous namespace)".into()))
        .collect();
    (!names.is_empty()).then(|| format!("{}::", names.join("::")))
}

fn for_children(
    unit: UnitRef<'_, DwarfReader>,
    die: UnitOffset,
    mut f: impl FnMut(&gimli::DebuggingInformationEntry<DwarfReader>) -> Result<(), gimli::Error>,
) -> Result<(), gimli::Error> {
    let mut tree = unit.entries_tree(Some(die))?;
    let root = tree.root()?;
    let mut children = root.children();
    while let Some(child) = children.next()? {
        f(child.entry())?;
    }
    Ok(())
}

fn param(
    unit: UnitRef<'_, DwarfReader>,
    die: &gimli::DebuggingInformationEntry<DwarfReader>,
    origin: Option<UnitOffset>,
    bias: u64,
    cpp: bool,
    budget: &mut u32,
) -> Result<Param, gimli::Error> {
    let origin_entry = match origin {
        Some(o) => Some(unit.entry(o)?),
        None => None,
    };
    let named = |at| {
        die.attr_value(at)
            .or_else(|| origin_entry.as_ref().and_then(|o| o.attr_value(at)))
    };
    let name = named(gimli::DW_AT_name)
        .and_then(|v| unit.attr_string(v).ok())
        .and_then(|s| text(&s));
    let ty = match named(gimli::DW_AT_type) {
        Some(AttributeValue::UnitRef(off)) => describe(unit, off, TYPE_DEPTH, cpp, budget)?,
        _ => unknown_type(),
    };
    let location = match die.attr_value(gimli::DW_AT_location) {
        Some(v) => location(unit, v, bias).unwrap_or_default(),
        None => match die.attr_value(gimli::DW_AT_const_value) {
            Some(v) => const_location(v),
            None => Location::default(),
        },
    };
    Ok(Param { name, ty, location })
}

/// A `DW_AT_const_value` as an equivalent expression (`DW_OP_constu/consts; DW_OP_stack_value`).
fn const_location(v: AttributeValue<DwarfReader>) -> Location {
    let mut expr = Vec::new();
    let signed = match v {
        AttributeValue::Sdata(s) => Some(s),
        AttributeValue::Udata(u) => Some(u as i64),
        AttributeValue::Data1(d) => Some(i64::from(d)),
        AttributeValue::Data2(d) => Some(i64::from(d)),
        AttributeValue::Data4(d) => Some(i64::from(d)),
        AttributeValue::Data8(d) => Some(d as i64),
        _ => None,
    };
    let Some(value) = signed else {
        return Location::default();
    };
    expr.push(gimli::DW_OP_consts.0);
    let mut v = value;
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        let done = (v == 0 && byte & 0x40 == 0) || (v == -1 && byte & 0x40 != 0);
        expr.push(if done { byte } else { byte | 0x80 });
        if done {
            break;
        }
    }
    expr.push(gimli::DW_OP_stack_value.0);
    Location {
        ranges: vec![(None, expr)],
    }
}

fn location(
    unit: UnitRef<'_, DwarfReader>,
    v: AttributeValue<DwarfReader>,
    bias: u64,
) -> Result<Location, gimli::Error> {
    use gimli::Reader;
    if let AttributeValue::Exprloc(e) = &v {
        return Ok(Location {
            ranges: vec![(None, e.0.to_slice()?.into_owned())],
        });
    }
    let mut out = Location::default();
    if let Some(mut iter) = unit.attr_locations(v)? {
        while let Some(entry) = iter.next()? {
            let r = entry.range;
            out.ranges.push((
                Some(r.begin.wrapping_add(bias)..r.end.wrapping_add(bias)),
                entry.data.0.to_slice()?.into_owned(),
            ));
        }
    }
    Ok(out)
}

fn unknown_type() -> TypeDesc {
    TypeDesc {
        name: "?".into(),
        kind: TypeKind::Unknown,
        size: 0,
    }
}

fn pointer_name(pointee: &str) -> String {
    if pointee.ends_with('*') {
        format!("{pointee}*")
    } else {
        format!("{pointee} *")
    }
}

fn describe(
    unit: UnitRef<'_, DwarfReader>,
    off: UnitOffset,
    depth: u32,
    cpp: bool,
    budget: &mut u32,
) -> Result<TypeDesc, gimli::Error> {
    if *budget == 0 {
        return Ok(unknown_type());
    }
    *budget -= 1;
    let e = unit.entry(off)?;
    let name = e
        .attr_value(gimli::DW_AT_name)
        .and_then(|v| unit.attr_string(v).ok())
        .and_then(|s| text(&s));
    let size = match e.attr_value(gimli::DW_AT_byte_size) {
        Some(v) => v.udata_value().unwrap_or(0),
        None => 0,
    };
    let target = |budget: &mut u32, depth: u32| -> Result<Option<TypeDesc>, gimli::Error> {
        match e.attr_value(gimli::DW_AT_type) {
            Some(AttributeValue::UnitRef(t)) => Ok(Some(describe(unit, t, depth, cpp, budget)?)),
            _ => Ok(None),
        }
    };
    let void = || TypeDesc {
        name: "void".into(),
        kind: TypeKind::Void,
        size: 0,
    };
    // C++ names a type by its scope, as gdb does (`shapes::Widget`); C by its tag.
    let qualified = |n: &String| match cpp.then(|| scope_prefix(unit, off)).flatten() {
        Some(scope) => format!("{scope}{n}"),
        None => n.clone(),
    };
    let tagged = |word: &str| match &name {
        Some(n) if cpp => qualified(n),
        Some(n) => format!("{word} {n}"),
        None => format!("{word} {{...}}"),
    };
    Ok(match e.tag() {
        gimli::DW_TAG_base_type => {
            let enc = match e.attr_value(gimli::DW_AT_encoding) {
                Some(AttributeValue::Encoding(enc)) => enc,
                _ => gimli::DwAte(0),
            };
            let kind = match enc {
                gimli::DW_ATE_signed => TypeKind::Signed,
                gimli::DW_ATE_unsigned => TypeKind::Unsigned,
                gimli::DW_ATE_boolean => TypeKind::Bool,
                gimli::DW_ATE_signed_char => TypeKind::Char { signed: true },
                gimli::DW_ATE_unsigned_char => TypeKind::Char { signed: false },
                gimli::DW_ATE_UTF => TypeKind::Unsigned,
                gimli::DW_ATE_float => TypeKind::Float,
                _ => TypeKind::Unknown,
            };
            TypeDesc {
                name: name.unwrap_or_else(|| "?".into()),
                kind,
                size,
            }
        }
        gimli::DW_TAG_pointer_type
        | gimli::DW_TAG_reference_type
        | gimli::DW_TAG_rvalue_reference_type => {
            let pointee = target(budget, depth.min(2).saturating_sub(1))?.unwrap_or_else(void);
            let name = match e.tag() {
                gimli::DW_TAG_pointer_type => pointer_name(&pointee.name),
                gimli::DW_TAG_reference_type => format!("{} &", pointee.name),
                _ => format!("{} &&", pointee.name),
            };
            TypeDesc {
                name,
                kind: TypeKind::Pointer(Box::new(pointee)),
                size: if size == 0 { 8 } else { size },
            }
        }
        gimli::DW_TAG_const_type
        | gimli::DW_TAG_volatile_type
        | gimli::DW_TAG_restrict_type
        | gimli::DW_TAG_atomic_type => {
            let word = match e.tag() {
                gimli::DW_TAG_const_type => "const",
                gimli::DW_TAG_volatile_type => "volatile",
                gimli::DW_TAG_restrict_type => "restrict",
                _ => "_Atomic",
            };
            let mut t = target(budget, depth)?.unwrap_or_else(void);
            t.name = if matches!(t.kind, TypeKind::Pointer(_)) {
                format!("{} {word}", t.name)
            } else {
                format!("{word} {}", t.name)
            };
            t
        }
        gimli::DW_TAG_typedef => {
            let mut t = target(budget, depth)?.unwrap_or_else(void);
            if let Some(n) = &name {
                t.name = qualified(n);
            }
            t
        }
        gimli::DW_TAG_enumeration_type => {
            let signed = target(budget, 0)?.is_some_and(|t| {
                matches!(t.kind, TypeKind::Signed | TypeKind::Char { signed: true })
            });
            let mut enumerators = Vec::new();
            for_children(unit, off, |c| {
                if c.tag() == gimli::DW_TAG_enumerator {
                    let n = c
                        .attr_value(gimli::DW_AT_name)
                        .and_then(|v| unit.attr_string(v).ok())
                        .and_then(|s| text(&s));
                    let v = match c.attr_value(gimli::DW_AT_const_value) {
                        Some(AttributeValue::Sdata(s)) => Some(s),
                        Some(AttributeValue::Udata(u)) => Some(u as i64),
                        Some(AttributeValue::Data1(d)) => Some(i64::from(d as i8)),
                        Some(AttributeValue::Data2(d)) => Some(i64::from(d as i16)),
                        Some(AttributeValue::Data4(d)) => Some(i64::from(d as i32)),
                        Some(AttributeValue::Data8(d)) => Some(d as i64),
                        _ => None,
                    };
                    if let (Some(n), Some(v)) = (n, v) {
                        enumerators.push((n, v));
                    }
                }
                Ok(())
            })?;
            TypeDesc {
                name: tagged("enum"),
                kind: TypeKind::Enum {
                    enumerators,
                    signed,
                },
                size,
            }
        }
        gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type | gimli::DW_TAG_union_type => {
            let mut members = Vec::new();
            if depth > 0 {
                for_children(unit, off, |c| {
                    if c.tag() == gimli::DW_TAG_member
                        && !c.has_attr(gimli::DW_AT_external)
                        && !c.has_attr(gimli::DW_AT_declaration)
                    {
                        let n = c
                            .attr_value(gimli::DW_AT_name)
                            .and_then(|v| unit.attr_string(v).ok())
                            .and_then(|s| text(&s));
                        let offset = match c.attr_value(gimli::DW_AT_data_member_location) {
                            Some(v) => v.udata_value().unwrap_or(0),
                            None => 0,
                        };
                        let ty = match c.attr_value(gimli::DW_AT_type) {
                            Some(AttributeValue::UnitRef(t)) => {
                                describe(unit, t, depth - 1, cpp, budget)?
                            }
                            _ => unknown_type(),
                        };
                        members.push(Member {
                            name: n,
                            offset,
                            ty,
                            bit_field: c.has_attr(gimli::DW_AT_bit_size),
                        });
                    }
                    Ok(())
                })?;
            }
            if e.tag() == gimli::DW_TAG_union_type {
                TypeDesc {
                    name: tagged("union"),
                    kind: TypeKind::Union { members },
                    size,
                }
            } else {
                TypeDesc {
                    name: tagged(if e.tag() == gimli::DW_TAG_class_type {
                        "class"
                    } else {
                        "struct"
                    }),
                    kind: TypeKind::Struct { members },
                    size,
                }
            }
        }
        gimli::DW_TAG_array_type => {
            let element = target(budget, depth)?.unwrap_or_else(unknown_type);
            let mut count = None;
            for_children(unit, off, |c| {
                if c.tag() == gimli::DW_TAG_subrange_type && count.is_none() {
                    count = match (
                        c.attr_value(gimli::DW_AT_count),
                        c.attr_value(gimli::DW_AT_upper_bound),
                    ) {
                        (Some(n), _) => n.udata_value(),
                        (None, Some(u)) => u.udata_value().map(|u| u + 1),
                        _ => None,
                    };
                }
                Ok(())
            })?;
            let size = if size == 0 {
                count.unwrap_or(0).saturating_mul(element.size)
            } else {
                size
            };
            TypeDesc {
                name: format!(
                    "{} [{}]",
                    element.name,
                    count.map_or(String::new(), |c| c.to_string())
                ),
                kind: TypeKind::Array {
                    element: Box::new(element),
                    count,
                },
                size,
            }
        }
        gimli::DW_TAG_subroutine_type => TypeDesc {
            name: "function".into(),
            kind: TypeKind::Function,
            size: 0,
        },
        _ => TypeDesc {
            name: name.unwrap_or_else(|| "?".into()),
            kind: TypeKind::Unknown,
            size,
        },
    })
}

/// A signature given by the user, e.g. `bar(int, const char *)`, failed to parse.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SignatureError {
    /// The text is not `NAME(TYPE, ...)`.
    #[error("cannot read the signature `{text}`: {why}; write it like `bar(int, const char *)`")]
    Syntax {
        /// The signature as given.
        text: String,
        /// What is wrong.
        why: String,
    },
    /// The arena the hook would go into predates signatures (format version 1).
    #[error("the arena at 0x{arena:x} was made by an older argstash and cannot store signatures; eject its hooks and inject again, or inject without a signature")]
    OldArena {
        /// The arena's address.
        arena: u64,
    },
    /// The signature is longer than a hook record can store.
    #[error("the signature `{text}` is {len} bytes long; at most {max} fit in the hook record")]
    TooLong {
        /// The signature as given.
        text: String,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// A parameter list given by the user instead of DWARF.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    /// The parameter list as written, normalized (`int, const char *`).
    pub text: String,
    /// The parameters.
    pub params: Vec<Param>,
    /// True for a trailing `...`.
    pub variadic: bool,
}

/// Splits `NAME(TYPES)` into the function part and its signature; a spec without
/// parentheses has none.
pub fn split_signature(spec: &str) -> Result<(&str, Option<Signature>), SignatureError> {
    let spec = spec.trim();
    let Some(open) = spec.find('(') else {
        return Ok((spec, None));
    };
    let err = |why: &str| SignatureError::Syntax {
        text: spec.to_string(),
        why: why.to_string(),
    };
    let inner = spec[open + 1..]
        .strip_suffix(')')
        .ok_or_else(|| err("it must end with `)`"))?;
    let name = spec[..open].trim();
    if name.is_empty() {
        return Err(err("the function name is missing"));
    }
    Ok((name, Some(parse_params(inner).map_err(|why| err(&why))?)))
}

/// Parses a C parameter list such as `int n, const char *s, ...`.
pub fn parse_params(list: &str) -> Result<Signature, String> {
    let mut params = Vec::new();
    let mut variadic = false;
    let list = list.trim();
    if list.is_empty() || list == "void" {
        return Ok(Signature {
            text: String::new(),
            params,
            variadic,
        });
    }
    let parts: Vec<&str> = list.split(',').map(str::trim).collect();
    for (i, part) in parts.iter().enumerate() {
        if *part == "..." {
            if i + 1 != parts.len() {
                return Err("`...` must come last".into());
            }
            variadic = true;
            continue;
        }
        params.push(parse_param(part)?);
    }
    let mut text: Vec<String> = params
        .iter()
        .map(|p| match &p.name {
            Some(n) => format!(
                "{}{}{n}",
                p.ty.name,
                if p.ty.name.ends_with('*') { "" } else { " " }
            ),
            None => p.ty.name.clone(),
        })
        .collect();
    if variadic {
        text.push("...".into());
    }
    Ok(Signature {
        text: text.join(", "),
        params,
        variadic,
    })
}

fn parse_param(text: &str) -> Result<Param, String> {
    let spaced = text.replace('*', " * ");
    let words: Vec<&str> = spaced.split_whitespace().collect();
    if words.is_empty() {
        return Err("an empty parameter".into());
    }
    let stars = words.iter().filter(|w| **w == "*").count();
    let last_star = words.iter().rposition(|w| *w == "*");
    let mut base: Vec<&str> = match last_star {
        Some(p) => words[..p].iter().copied().filter(|w| *w != "*").collect(),
        None => words.clone(),
    };
    let mut after: Vec<&str> = match last_star {
        Some(p) => words[p + 1..].to_vec(),
        None => Vec::new(),
    };
    // A trailing identifier that is not a type word is the parameter's name.
    let is_type_word = |w: &str| {
        matches!(
            w,
            "const"
                | "volatile"
                | "unsigned"
                | "signed"
                | "short"
                | "long"
                | "int"
                | "char"
                | "_Bool"
                | "bool"
                | "float"
                | "double"
                | "void"
                | "struct"
                | "union"
                | "enum"
        ) || known_typedef(w).is_some()
    };
    let mut name = None;
    if last_star.is_none() {
        let tagged = base.len() >= 2 && matches!(base[base.len() - 2], "struct" | "union" | "enum");
        if base.len() >= 2 && !is_type_word(base[base.len() - 1]) && !tagged {
            name = base.pop().map(str::to_string);
        }
    } else if let Some(n) = after.pop() {
        if n != "const" {
            name = Some(n.to_string());
        }
    }
    after.retain(|w| *w != "const");
    if !after.is_empty() {
        return Err(format!("cannot read the parameter `{text}`"));
    }
    let mut ty = base_type(&base).ok_or_else(|| format!("unknown type in `{text}`"))?;
    for _ in 0..stars {
        ty = TypeDesc {
            name: pointer_name(&ty.name),
            kind: TypeKind::Pointer(Box::new(ty)),
            size: 8,
        };
    }
    Ok(Param {
        name,
        ty,
        location: Location::default(),
    })
}

fn known_typedef(w: &str) -> Option<(TypeKind, u64)> {
    Some(match w {
        "size_t" | "uintptr_t" | "uint64_t" => (TypeKind::Unsigned, 8),
        "ssize_t" | "intptr_t" | "ptrdiff_t" | "int64_t" | "off_t" => (TypeKind::Signed, 8),
        "uint32_t" => (TypeKind::Unsigned, 4),
        "int32_t" | "pid_t" => (TypeKind::Signed, 4),
        "uint16_t" => (TypeKind::Unsigned, 2),
        "int16_t" => (TypeKind::Signed, 2),
        "uint8_t" => (TypeKind::Unsigned, 1),
        "int8_t" => (TypeKind::Signed, 1),
        _ => return None,
    })
}

fn base_type(words: &[&str]) -> Option<TypeDesc> {
    let qualifiers: Vec<&str> = words
        .iter()
        .copied()
        .filter(|w| matches!(*w, "const" | "volatile"))
        .collect();
    let rest: Vec<&str> = words
        .iter()
        .copied()
        .filter(|w| !matches!(*w, "const" | "volatile"))
        .collect();
    let prefix = if qualifiers.is_empty() {
        String::new()
    } else {
        format!("{} ", qualifiers.join(" "))
    };
    let (kind, size, name) = match rest.as_slice() {
        ["struct" | "union", tag] => {
            let kind = if rest[0] == "struct" {
                TypeKind::Struct {
                    members: Vec::new(),
                }
            } else {
                TypeKind::Union {
                    members: Vec::new(),
                }
            };
            (kind, 0, format!("{} {tag}", rest[0]))
        }
        ["enum", tag] => (
            TypeKind::Enum {
                enumerators: Vec::new(),
                signed: false,
            },
            4,
            format!("enum {tag}"),
        ),
        [w] if known_typedef(w).is_some() => {
            let (k, s) = known_typedef(w)?;
            (k, s, w.to_string())
        }
        ["void"] => (TypeKind::Void, 0, "void".into()),
        ["_Bool"] => (TypeKind::Bool, 1, "_Bool".into()),
        ["bool"] => (TypeKind::Bool, 1, "bool".into()),
        ["float"] => (TypeKind::Float, 4, "float".into()),
        ["double"] => (TypeKind::Float, 8, "double".into()),
        ["long", "double"] => (TypeKind::Float, 16, "long double".into()),
        _ => {
            let unsigned = rest.contains(&"unsigned");
            let ints: Vec<&str> = rest
                .iter()
                .copied()
                .filter(|w| !matches!(*w, "unsigned" | "signed"))
                .collect();
            let (size, canon) = match ints.as_slice() {
                ["char"] => (1, "char"),
                ["short"] | ["short", "int"] => (2, "short"),
                [] | ["int"] => (4, "int"),
                ["long"] | ["long", "int"] => (8, "long"),
                ["long", "long"] | ["long", "long", "int"] => (8, "long long"),
                _ => return None,
            };
            if canon == "char" {
                let name = match (unsigned, rest.contains(&"signed")) {
                    (true, _) => "unsigned char",
                    (false, true) => "signed char",
                    _ => "char",
                };
                (TypeKind::Char { signed: !unsigned }, 1, name.to_string())
            } else {
                (
                    if unsigned {
                        TypeKind::Unsigned
                    } else {
                        TypeKind::Signed
                    },
                    size,
                    if unsigned {
                        format!("unsigned {canon}")
                    } else {
                        canon.to_string()
                    },
                )
            }
        }
    };
    Some(TypeDesc {
        name: format!("{prefix}{name}"),
        kind,
        size,
    })
}

impl Signature {
    /// The signature as a [`FunctionInfo`] (no locations: values come from the stash).
    pub fn to_function_info(&self, name: Option<String>) -> FunctionInfo {
        FunctionInfo {
            name,
            entry: None,
            params: self.params.clone(),
            variadic: self.variadic,
            returns: None,
            frame_base: Location::default(),
            encoding: None,
            cpp: false,
        }
    }
}

/// Where a shown argument value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgSource {
    /// Read from the stash frame of a hooked function.
    Stash,
    /// Recovered from a DWARF location description at the frame's pc.
    Dwarf,
}

impl ArgSource {
    /// Lower-case name for JSON.
    pub fn name(self) -> &'static str {
        match self {
            ArgSource::Stash => "stash",
            ArgSource::Dwarf => "dwarf",
        }
    }
}

/// One argument as shown in a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgValue {
    /// Parameter name, if known (otherwise the register name is shown).
    pub name: Option<String>,
    /// Type name, if known.
    pub ty: Option<String>,
    /// The value as gdb would print it, or `<optimized out>` / `<... not stashed>`.
    pub display: String,
    /// Where the value came from; `None` when there is no value.
    pub source: Option<ArgSource>,
    /// The register (or `stack+N`) the value was stashed from.
    pub register: Option<String>,
    /// The raw value, zero-extended, when it fits 64 bits.
    pub value: Option<u64>,
}

/// What the unwinder knows about one physical frame.
#[derive(Debug, Clone, Default)]
pub struct FrameState {
    /// The pc used for lookups (the return address minus one for caller frames).
    pub pc: u64,
    /// The canonical frame address, if the frame was unwound.
    pub cfa: Option<u64>,
    /// Register values known for this frame, by DWARF register number (0..=16).
    pub regs: [Option<u64>; 17],
    /// Values of `DW_OP_entry_value` expressions (by their bytes, e.g. `DW_OP_reg5`)
    /// that the caller's call-site information gives for this call.
    pub entry_values: Vec<(Vec<u8>, u64)>,
}

/// True when a location of `info` at `pc` asks for an entry value.
pub fn wants_entry_values(info: &FunctionInfo, pc: u64) -> bool {
    info.params.iter().any(|p| {
        p.location.at(pc).is_some_and(|e| {
            e.contains(&gimli::DW_OP_entry_value.0) || e.contains(&gimli::DW_OP_GNU_entry_value.0)
        })
    })
}

/// Evaluates a call-site value expression (`DW_AT_call_value`) in the caller's frame.
pub fn call_value(
    expr: &[u8],
    frame_base: &Location,
    encoding: gimli::Encoding,
    state: &FrameState,
    mem: &dyn Memory,
) -> Option<u64> {
    let pieces = run(expr, frame_base, encoding, state, mem, 0)?;
    match pieces.as_slice() {
        [p] if p.size_in_bits.is_none() => match p.location {
            // A value expression leaves its result as the "address".
            gimli::Location::Address { address } => Some(address),
            gimli::Location::Value { value } => value.to_u64(!0).ok(),
            gimli::Location::Register { register } => {
                state.regs.get(register.0 as usize).copied().flatten()
            }
            _ => None,
        },
        _ => None,
    }
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
/// every type classifies ([`crate::args::x86_64::placement_of`]), else from
/// [`assign_registers`].
fn stash_slots(info: &FunctionInfo) -> Vec<StashSlot> {
    use trampolines::x86_64::frame::ARGUMENT_REGS;
    use trampolines::x86_64::ArgLocation;
    if let Some(placement) = crate::args::x86_64::placement_of(info) {
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

fn truncate(v: u64, size: u64) -> u64 {
    if size == 0 || size >= 8 {
        v
    } else {
        v & ((1u64 << (8 * size)) - 1)
    }
}

/// The values of a frame's parameters recovered from their DWARF locations.
///
/// `frame_base` is the physical function's frame base (inlined calls use their
/// container's). Anything not recoverable with certainty is `<optimized out>`.
pub fn dwarf_values(
    info: &FunctionInfo,
    frame_base: &Location,
    state: &FrameState,
    mem: &dyn Memory,
) -> Vec<ArgValue> {
    info.params
        .iter()
        .map(|p| {
            let bytes = info
                .encoding
                .and_then(|enc| evaluate(&p.location, frame_base, enc, &p.ty, state, mem));
            let (display, source, value) = match bytes {
                Some(b) => {
                    let value = (b.len() <= 8).then(|| {
                        let mut w = [0u8; 8];
                        w[..b.len()].copy_from_slice(&b);
                        u64::from_le_bytes(w)
                    });
                    (format_value(&p.ty, &b, mem), Some(ArgSource::Dwarf), value)
                }
                None => ("<optimized out>".to_string(), None, None),
            };
            ArgValue {
                name: p.name.clone(),
                ty: Some(p.ty.name.clone()),
                display,
                source,
                register: None,
                value,
            }
        })
        .collect()
}

/// Evaluates `loc` at the frame's pc to the value's bytes (`size` of the type).
fn evaluate(
    loc: &Location,
    frame_base: &Location,
    encoding: gimli::Encoding,
    ty: &TypeDesc,
    state: &FrameState,
    mem: &dyn Memory,
) -> Option<Vec<u8>> {
    let expr = loc.at(state.pc)?;
    let size = usize::try_from(ty.size)
        .ok()
        .filter(|s| *s > 0 && *s <= 64)?;
    let pieces = run(expr, frame_base, encoding, state, mem, 0)?;
    let mut out = Vec::with_capacity(size);
    for piece in &pieces {
        let want = match piece.size_in_bits {
            Some(bits) if bits % 8 == 0 => (bits / 8) as usize,
            Some(_) => return None,
            None if pieces.len() == 1 => size,
            None => return None,
        };
        if piece.bit_offset.is_some() {
            return None;
        }
        let mut bytes = match &piece.location {
            gimli::Location::Register { register } => {
                if want > 8 {
                    return None;
                }
                state
                    .regs
                    .get(register.0 as usize)
                    .copied()
                    .flatten()?
                    .to_le_bytes()
                    .to_vec()
            }
            gimli::Location::Address { address } => mem.read_vec(*address, want).ok()?,
            gimli::Location::Value { value } => value.to_u64(!0).ok()?.to_le_bytes().to_vec(),
            gimli::Location::Bytes { value } => value.to_vec(),
            _ => return None,
        };
        if bytes.len() < want {
            return None;
        }
        bytes.truncate(want);
        out.extend_from_slice(&bytes);
    }
    (out.len() == size).then_some(out)
}

fn run(
    expr: &[u8],
    frame_base: &Location,
    encoding: gimli::Encoding,
    state: &FrameState,
    mem: &dyn Memory,
    depth: u32,
) -> Option<Vec<gimli::Piece<DwarfReader>>> {
    use gimli::EvaluationResult as R;
    let reader = DwarfReader::new(std::sync::Arc::from(expr), gimli::LittleEndian);
    let mut eval = gimli::Expression(reader).evaluation(encoding);
    eval.set_max_iterations(10_000);
    let mut step = eval.evaluate().ok()?;
    loop {
        step = match step {
            R::Complete => return Some(eval.result()),
            R::RequiresMemory { address, size, .. } => {
                let mut b = [0u8; 8];
                mem.read(address, b.get_mut(..usize::from(size))?).ok()?;
                eval.resume_with_memory(gimli::Value::Generic(u64::from_le_bytes(b)))
                    .ok()?
            }
            R::RequiresRegister { register, .. } => {
                let v = state.regs.get(register.0 as usize).copied().flatten()?;
                eval.resume_with_register(gimli::Value::Generic(v)).ok()?
            }
            R::RequiresFrameBase if depth == 0 => {
                let base = frame_base_value(frame_base, encoding, state, mem)?;
                eval.resume_with_frame_base(base).ok()?
            }
            R::RequiresCallFrameCfa => eval.resume_with_call_frame_cfa(state.cfa?).ok()?,
            R::RequiresEntryValue(e) => {
                use gimli::Reader;
                let bytes = e.0.to_slice().ok()?;
                let v = state
                    .entry_values
                    .iter()
                    .find(|(k, _)| k.as_slice() == bytes.as_ref())?
                    .1;
                eval.resume_with_entry_value(gimli::Value::Generic(v))
                    .ok()?
            }
            _ => return None,
        };
    }
}

fn frame_base_value(
    frame_base: &Location,
    encoding: gimli::Encoding,
    state: &FrameState,
    mem: &dyn Memory,
) -> Option<u64> {
    let expr = frame_base.at(state.pc)?;
    let pieces = run(expr, frame_base, encoding, state, mem, 1)?;
    match pieces.as_slice() {
        [p] => match p.location {
            gimli::Location::Address { address } => Some(address),
            gimli::Location::Register { register } => {
                state.regs.get(register.0 as usize).copied().flatten()
            }
            gimli::Location::Value { value } => value.to_u64(!0).ok(),
            _ => None,
        },
        _ => None,
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryError;

    struct Bytes(u64, Vec<u8>);
    impl Memory for Bytes {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
            let off = addr.checked_sub(self.0).map(|o| o as usize);
            match off.and_then(|o| self.1.get(o..o + buf.len())) {
                Some(b) => {
                    buf.copy_from_slice(b);
                    Ok(())
                }
                None => Err(MemoryError::Read {
                    addr,
                    len: buf.len(),
                    source: std::io::ErrorKind::UnexpectedEof.into(),
                }),
            }
        }
    }

    #[test]
    fn signatures_parse_into_types() {
        let (name, sig) = split_signature("bar(int, const char *s, unsigned char, ...)").unwrap();
        let sig = sig.unwrap();
        assert_eq!(name, "bar");
        assert!(sig.variadic);
        assert_eq!(sig.text, "int, const char *s, unsigned char, ...");
        assert_eq!(sig.params[1].name.as_deref(), Some("s"));
        assert_eq!(sig.params[1].ty.name, "const char *");
        assert_eq!(sig.params[2].ty.kind, TypeKind::Char { signed: false });
        let (_, none) = split_signature("libc!write").unwrap();
        assert!(none.is_none());
        assert!(split_signature("bar(int").is_err());
        assert!(split_signature("bar(frobnicate)").is_err());
        let (_, p) = split_signature("f(struct point *p, long n)").unwrap();
        assert_eq!(p.unwrap().params[0].ty.name, "struct point *");
    }

    #[test]
    fn values_format_like_gdb() {
        let mem = Bytes(0x1000, b"hi\n\"there\0".to_vec());
        let sig =
            parse_params("int, unsigned char, _Bool, const char *, struct p *, double").unwrap();
        let t = |i: usize| &sig.params[i].ty;
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

    #[test]
    fn const_values_evaluate() {
        let loc = const_location(AttributeValue::Sdata(-300));
        let enc = gimli::Encoding {
            format: gimli::Format::Dwarf32,
            version: 5,
            address_size: 8,
        };
        let ty = TypeDesc {
            name: "int".into(),
            kind: TypeKind::Signed,
            size: 4,
        };
        let mem = Bytes(0, Vec::new());
        let b = evaluate(
            &loc,
            &Location::default(),
            enc,
            &ty,
            &FrameState::default(),
            &mem,
        )
        .unwrap();
        assert_eq!(format_value(&ty, &b, &mem), "-300");
    }
}
