//! Reading from DWARF: a function's [`FunctionInfo`] (parameters, their types
//! described to a bounded depth, their location lists, the frame base), and the
//! values of those parameters in an unwound frame, by evaluating each location
//! expression at the frame's pc against what the unwinder recovered
//! ([`FrameState`]). Anything not recoverable with certainty is `<optimized out>`.

use gimli::{AttributeValue, UnitOffset, UnitRef};

use super::format::format_value;
use super::types::{
    pointer_name, ArgSource, ArgValue, FrameState, FunctionInfo, Location, Member, Param, TypeDesc,
    TypeKind,
};
use crate::dwarf::DwarfReader;
use crate::memory::Memory;

/// Most type DIEs visited while describing one function (bounds hostile input).
const TYPE_BUDGET: u32 = 4000;
/// How deep by-value aggregates are described.
const TYPE_DEPTH: u32 = 6;

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
    let reader = DwarfReader::new(crate::dwarf::SharedBytes::from(expr), gimli::LittleEndian);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::testing::Bytes;

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
