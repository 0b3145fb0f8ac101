//! Python objects in target memory shown as Python's `repr` would, within limits.
//!
//! `int` exactly (also big ones, up to Python's own 4300-digit `repr` limit),
//! `float` as Python's shortest round-trip `repr`, `str` quoted and escaped and
//! cut at [`MAX_STR_CHARS`] code points, `bytes` as `b'...'`, `None`, `True`,
//! `False`; anything else as `<TYPE object at 0xADDR>`, with the length of a
//! tuple, list or dict. Builtin types are recognised by the address of their type
//! object (their names when the module does not export them), so a subclass of
//! `int` shows as an object of its own type. Every read is bounded and every
//! length checked: a value that cannot be read shows as `<unreadable ...>`.

use crate::memory::Memory;

use super::layout::{Layout, LongFormat};
use super::version::BuiltinTypes;

/// The most code points of a `str` shown before `...`.
pub const MAX_STR_CHARS: usize = 80;
/// The most bytes of a `bytes` shown before `...`.
pub const MAX_BYTES_SHOWN: usize = 80;
/// The most decimal digits of an `int` shown exactly (Python's own `repr` limit).
pub const MAX_INT_DECIMAL_DIGITS: usize = 4300;
/// The most bytes read of a type's name.
const MAX_TYPE_NAME: usize = 128;

/// A value shown: its type's name and its display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyValue {
    /// `tp_name` of its type (`int`, `MyClass`), `?` when unreadable.
    pub type_name: String,
    /// `repr`-like display.
    pub display: String,
}

/// Why an object could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectProblem {
    /// Its memory could not be read.
    Unreadable,
    /// A length or kind field is impossible.
    Malformed,
    /// It is not of the type expected.
    WrongType,
}

/// What the display knows how to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Bool,
    Float,
    Str,
    Bytes,
    None,
    Tuple,
    List,
    Dict,
    Cell,
    Code,
    Other,
}

impl Kind {
    /// The `tp_name` of a builtin kind.
    fn builtin_name(self) -> &'static str {
        match self {
            Kind::Int => "int",
            Kind::Bool => "bool",
            Kind::Float => "float",
            Kind::Str => "str",
            Kind::Bytes => "bytes",
            Kind::None => "NoneType",
            Kind::Tuple => "tuple",
            Kind::List => "list",
            Kind::Dict => "dict",
            Kind::Cell => "cell",
            Kind::Code => "code",
            Kind::Other => "object",
        }
    }

    /// The builtin kind named `name` (for modules that do not export their types).
    fn by_name(name: &str) -> Kind {
        [
            Kind::Int,
            Kind::Bool,
            Kind::Float,
            Kind::Str,
            Kind::Bytes,
            Kind::None,
            Kind::Tuple,
            Kind::List,
            Kind::Dict,
            Kind::Cell,
            Kind::Code,
        ]
        .into_iter()
        .find(|k| k.builtin_name() == name)
        .unwrap_or(Kind::Other)
    }
}

/// Reads objects of one interpreter from target memory.
#[derive(Clone, Copy)]
pub struct Objects<'a> {
    mem: &'a dyn Memory,
    layout: &'a Layout,
    types: &'a BuiltinTypes,
}

impl<'a> Objects<'a> {
    /// A reader of objects in `mem` laid out as `layout`, with `types` recognised exactly.
    pub fn new(mem: &'a dyn Memory, layout: &'a Layout, types: &'a BuiltinTypes) -> Self {
        Objects { mem, layout, types }
    }

    fn u64_at(&self, addr: u64) -> Result<u64, ObjectProblem> {
        self.mem
            .read_u64(addr)
            .map_err(|_| ObjectProblem::Unreadable)
    }

    fn i64_at(&self, addr: u64) -> Result<i64, ObjectProblem> {
        self.u64_at(addr).map(|v| v as i64)
    }

    fn bytes_at(&self, addr: u64, len: usize) -> Result<Vec<u8>, ObjectProblem> {
        self.mem
            .read_vec(addr, len)
            .map_err(|_| ObjectProblem::Unreadable)
    }

    /// The address of `obj`'s type object.
    pub fn type_of(&self, obj: u64) -> Result<u64, ObjectProblem> {
        let ty = self.u64_at(obj.wrapping_add(self.layout.object.ob_type))?;
        if ty == 0 {
            return Err(ObjectProblem::Malformed);
        }
        Ok(ty)
    }

    /// The `tp_name` of the type object at `ty`.
    pub fn type_name(&self, ty: u64) -> Result<String, ObjectProblem> {
        let name = self.u64_at(ty.wrapping_add(self.layout.object.tp_name))?;
        let mut out = Vec::new();
        // Read in small pieces so a name near the end of a mapping still reads.
        while out.len() < MAX_TYPE_NAME {
            let piece = self
                .bytes_at(name.wrapping_add(out.len() as u64), 16)
                .or_else(|_| self.bytes_at(name.wrapping_add(out.len() as u64), 1))?;
            match piece.iter().position(|&b| b == 0) {
                Some(end) => {
                    out.extend_from_slice(&piece[..end]);
                    return Ok(String::from_utf8_lossy(&out).into_owned());
                }
                None => out.extend_from_slice(&piece),
            }
        }
        Err(ObjectProblem::Malformed)
    }

    /// The kind of type `ty` by its address, when the module exports the builtin types.
    fn kind_by_addr(&self, ty: u64) -> Option<Kind> {
        let t = self.types;
        let by_addr = [
            (t.int, Kind::Int),
            (t.bool, Kind::Bool),
            (t.float, Kind::Float),
            (t.str, Kind::Str),
            (t.bytes, Kind::Bytes),
            (t.none_type, Kind::None),
            (t.tuple, Kind::Tuple),
            (t.list, Kind::List),
            (t.dict, Kind::Dict),
            (t.cell, Kind::Cell),
            (t.code, Kind::Code),
        ];
        if by_addr.iter().all(|(addr, _)| *addr == 0) {
            return None;
        }
        Some(
            by_addr
                .iter()
                .find(|(addr, _)| *addr == ty)
                .map_or(Kind::Other, |(_, k)| *k),
        )
    }

    /// The kind and type name of `obj`; the name is read only when needed.
    fn kind_of(&self, obj: u64) -> Result<(Kind, String), ObjectProblem> {
        let ty = self.type_of(obj)?;
        if let Some(kind) = self.kind_by_addr(ty).filter(|k| *k != Kind::Other) {
            return Ok((kind, kind.builtin_name().to_string()));
        }
        let name = self.type_name(ty)?;
        let kind = match self.kind_by_addr(ty) {
            Some(k) => k,
            None => Kind::by_name(&name),
        };
        Ok((kind, name))
    }

    /// True when `obj` is a code object.
    pub fn is_code(&self, obj: u64) -> bool {
        if self.types.code != 0 {
            return self.type_of(obj).is_ok_and(|t| t == self.types.code);
        }
        matches!(self.kind_of(obj), Ok((Kind::Code, _)))
    }

    /// The content of a cell object, or `obj` itself when it is not a cell.
    pub fn deref_cell(&self, obj: u64) -> Result<u64, ObjectProblem> {
        match self.kind_of(obj)? {
            (Kind::Cell, _) => self.u64_at(obj.wrapping_add(self.layout.object.cell_ref)),
            _ => Ok(obj),
        }
    }

    /// `obj` shown as Python's `repr` would, within the limits.
    pub fn value(&self, obj: u64) -> PyValue {
        if obj == 0 {
            return PyValue {
                type_name: String::new(),
                display: "<unbound>".into(),
            };
        }
        let (kind, type_name) = match self.kind_of(obj) {
            Ok(k) => k,
            Err(_) => {
                return PyValue {
                    type_name: "?".into(),
                    display: format!("<unreadable object at 0x{obj:x}>"),
                }
            }
        };
        let shown = match kind {
            Kind::None => Ok("None".to_string()),
            Kind::Bool => self
                .int_value(obj)
                .map(|v| if v == "0" { "False" } else { "True" }.to_string()),
            Kind::Int => self.int_value(obj),
            Kind::Float => self
                .u64_at(obj.wrapping_add(self.layout.object.float_value))
                .map(|bits| float_repr(f64::from_bits(bits))),
            Kind::Str => self
                .str_chars(obj, MAX_STR_CHARS)
                .map(|(chars, cut)| str_repr(&chars, cut)),
            Kind::Bytes => self.bytes_value(obj),
            Kind::Tuple | Kind::List => self
                .var_size(obj)
                .map(|n| format!("<{type_name} object at 0x{obj:x}, len {n}>")),
            Kind::Dict => self
                .i64_at(obj.wrapping_add(self.layout.object.dict_used))
                .map(|n| format!("<{type_name} object at 0x{obj:x}, len {n}>")),
            Kind::Cell | Kind::Code | Kind::Other => {
                Ok(format!("<{type_name} object at 0x{obj:x}>"))
            }
        };
        let display = shown.unwrap_or_else(|p| {
            let why = match p {
                ObjectProblem::Unreadable => "unreadable",
                ObjectProblem::Malformed | ObjectProblem::WrongType => "malformed",
            };
            format!("<{why} {type_name} object at 0x{obj:x}>")
        });
        PyValue { type_name, display }
    }

    /// `ob_size` of a variable-size object, never negative.
    fn var_size(&self, obj: u64) -> Result<u64, ObjectProblem> {
        let n = self.i64_at(obj.wrapping_add(self.layout.object.ob_size))?;
        u64::try_from(n).map_err(|_| ObjectProblem::Malformed)
    }

    /// The decimal digits of an `int` (with `-`), or a note when it is too big.
    fn int_value(&self, obj: u64) -> Result<String, ObjectProblem> {
        let o = &self.layout.object;
        let (negative, ndigits) = match o.long_format {
            LongFormat::ObSize => {
                let size = self.i64_at(obj.wrapping_add(o.ob_size))?;
                (size < 0, size.unsigned_abs())
            }
            LongFormat::LvTag { offset } => {
                let tag = self.u64_at(obj.wrapping_add(offset))?;
                match tag & 3 {
                    0 => (false, tag >> 3),
                    1 => (false, 0),
                    2 => (true, tag >> 3),
                    _ => return Err(ObjectProblem::Malformed),
                }
            }
        };
        let ndigits = usize::try_from(ndigits).map_err(|_| ObjectProblem::Malformed)?;
        let bits = o.long_digit_bits as usize;
        // Decimal digits are at least (ndigits - 1) * bits * log10(2).
        if ndigits
            .saturating_sub(1)
            .saturating_mul(bits)
            .saturating_mul(30103)
            / 100_000
            > MAX_INT_DECIMAL_DIGITS
        {
            return Ok(format!(
                "<int of about {} bits at 0x{obj:x}>",
                ndigits.saturating_mul(bits)
            ));
        }
        if o.long_digit_size != 4 || bits == 0 || bits > 31 {
            return Err(ObjectProblem::Malformed);
        }
        let raw = self.bytes_at(obj.wrapping_add(o.long_digits), ndigits * 4)?;
        let digits: Vec<u32> = raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if digits.iter().any(|&d| d >> bits != 0) {
            return Err(ObjectProblem::Malformed);
        }
        let mut s = digits_to_decimal(&digits, bits as u32);
        if s.len() > MAX_INT_DECIMAL_DIGITS {
            return Ok(format!("<int of {} decimal digits at 0x{obj:x}>", s.len()));
        }
        if negative && s != "0" {
            s.insert(0, '-');
        }
        Ok(s)
    }

    fn bytes_value(&self, obj: u64) -> Result<String, ObjectProblem> {
        let len = self.var_size(obj)?;
        let shown = len.min(MAX_BYTES_SHOWN as u64) as usize;
        let data = self.bytes_at(obj.wrapping_add(self.layout.object.bytes_data), shown)?;
        Ok(bytes_repr(&data, len > shown as u64))
    }

    /// The raw bytes of a `bytes` object, at most `max` of them (an error when longer).
    pub fn bytes_content(&self, obj: u64, max: usize) -> Result<Vec<u8>, ObjectProblem> {
        if self.kind_of(obj)?.0 != Kind::Bytes {
            return Err(ObjectProblem::WrongType);
        }
        let len = self.var_size(obj)?;
        if len > max as u64 {
            return Err(ObjectProblem::Malformed);
        }
        self.bytes_at(
            obj.wrapping_add(self.layout.object.bytes_data),
            len as usize,
        )
    }

    /// The items of a tuple, at most `max` (an error when longer).
    pub fn tuple_items(&self, obj: u64, max: usize) -> Result<Vec<u64>, ObjectProblem> {
        if self.kind_of(obj)?.0 != Kind::Tuple {
            return Err(ObjectProblem::WrongType);
        }
        let len = self.var_size(obj)?;
        if len > max as u64 {
            return Err(ObjectProblem::Malformed);
        }
        let raw = self.bytes_at(
            obj.wrapping_add(self.layout.object.tuple_items),
            len as usize * 8,
        )?;
        Ok(raw
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect())
    }

    /// A `str` as text, failing when it is not a `str` or longer than `max` code points.
    pub fn text(&self, obj: u64, max: usize) -> Result<String, ObjectProblem> {
        if self.kind_of(obj)?.0 != Kind::Str {
            return Err(ObjectProblem::WrongType);
        }
        let len = self.i64_at(obj.wrapping_add(self.layout.object.str_length))?;
        if !(0..=max as i64).contains(&len) {
            return Err(ObjectProblem::Malformed);
        }
        let (chars, cut) = self.str_chars(obj, max)?;
        if cut {
            return Err(ObjectProblem::Malformed);
        }
        Ok(chars
            .iter()
            .map(|&c| char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect())
    }

    /// The first `max` code points of a `str` and whether there are more.
    fn str_chars(&self, obj: u64, max: usize) -> Result<(Vec<u32>, bool), ObjectProblem> {
        let o = &self.layout.object;
        // One read for the length and the state.
        let head_len = (o.str_length + 8).max(o.str_state + 4) as usize;
        let head = self.bytes_at(obj, head_len)?;
        let field = |off: u64, n: usize| head.get(off as usize..off as usize + n);
        let len = field(o.str_length, 8)
            .and_then(|b| b.try_into().ok())
            .map(i64::from_le_bytes)
            .ok_or(ObjectProblem::Malformed)?;
        let len = u64::try_from(len).map_err(|_| ObjectProblem::Malformed)?;
        let state = field(o.str_state, 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or(ObjectProblem::Malformed)?;
        let kind = (state & o.str_kind_mask) >> o.str_kind_mask.trailing_zeros();
        let compact = state & o.str_compact_bit != 0;
        let ascii = state & o.str_ascii_bit != 0;
        // 3.12+ have no `ready` bit (the layout says 0): every string is ready.
        let ready = o.str_ready_bit == 0 || state & o.str_ready_bit != 0;
        if !ready || !matches!(kind, 1 | 2 | 4) || (ascii && kind != 1) {
            return Err(ObjectProblem::Malformed);
        }
        let data = match (compact, ascii) {
            (true, true) => obj.wrapping_add(o.str_ascii_data),
            (true, false) => obj.wrapping_add(o.str_compact_data),
            (false, _) => match self.u64_at(obj.wrapping_add(o.str_legacy_data))? {
                0 => return Err(ObjectProblem::Malformed),
                p => p,
            },
        };
        let shown = len.min(max as u64) as usize;
        let raw = self.bytes_at(data, shown * kind as usize)?;
        let chars = match kind {
            1 => raw.iter().map(|&b| u32::from(b)).collect(),
            2 => raw
                .chunks_exact(2)
                .map(|c| u32::from(u16::from_le_bytes([c[0], c[1]])))
                .collect(),
            _ => raw
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        };
        Ok((chars, len > shown as u64))
    }
}

/// Little-endian base-2^`bits` digits as a decimal string.
pub fn digits_to_decimal(digits: &[u32], bits: u32) -> String {
    const BASE: u64 = 1_000_000_000;
    // Little-endian limbs of 9 decimal digits.
    let mut limbs: Vec<u64> = Vec::new();
    for &d in digits.iter().rev() {
        let mut carry = u64::from(d);
        for limb in limbs.iter_mut() {
            let v = (*limb << bits) + carry;
            *limb = v % BASE;
            carry = v / BASE;
        }
        while carry != 0 {
            limbs.push(carry % BASE);
            carry /= BASE;
        }
    }
    let Some((top, rest)) = limbs.split_last() else {
        return "0".into();
    };
    let mut s = top.to_string();
    for limb in rest.iter().rev() {
        s.push_str(&format!("{limb:09}"));
    }
    s
}

/// Python's `repr` of a float: the shortest string that reads back the same value,
/// in positional notation for exponents -4 to 15 and `1e+16` style outside.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.into();
    }
    let sign = if x.is_sign_negative() { "-" } else { "" };
    if x == 0.0 {
        return format!("{sign}0.0");
    }
    // Rust's `{:e}` is the shortest round-trip form: `1.2345e3`, `5e-324`.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let decpt = exp + 1;
    let n = digits.len() as i32;
    if !(-4 < decpt && decpt <= 16) {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() { "" } else { "." };
        let e = decpt - 1;
        let esign = if e < 0 { '-' } else { '+' };
        format!("{sign}{first}{dot}{rest}e{esign}{:02}", e.abs())
    } else if decpt <= 0 {
        format!("{sign}0.{}{digits}", "0".repeat((-decpt) as usize))
    } else if decpt >= n {
        format!("{sign}{digits}{}.0", "0".repeat((decpt - n) as usize))
    } else {
        let (int, frac) = digits.split_at(decpt as usize);
        format!("{sign}{int}.{frac}")
    }
}

/// Python's `repr` of a `str` given as code points; `cut` adds `...` after the quote.
pub fn str_repr(chars: &[u32], cut: bool) -> String {
    let has = |c: char| chars.contains(&(c as u32));
    let quote = if has('\'') && !has('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(chars.len() + 2);
    out.push(quote);
    for &c in chars {
        match c {
            0x5c => out.push_str("\\\\"),
            0x09 => out.push_str("\\t"),
            0x0a => out.push_str("\\n"),
            0x0d => out.push_str("\\r"),
            _ if c == quote as u32 => {
                out.push('\\');
                out.push(quote);
            }
            0..=0x1f | 0x7f => out.push_str(&format!("\\x{c:02x}")),
            0x20..=0x7e => out.push(char::from(c as u8)),
            _ => match char::from_u32(c).filter(|&ch| is_printable(ch)) {
                Some(ch) => out.push(ch),
                None if c <= 0xff => out.push_str(&format!("\\x{c:02x}")),
                None if c <= 0xffff => out.push_str(&format!("\\u{c:04x}")),
                None => out.push_str(&format!("\\U{c:08x}")),
            },
        }
    }
    out.push(quote);
    if cut {
        out.push_str("...");
    }
    out
}

/// Python's `repr` of `bytes`; `cut` adds `...` after the quote.
pub fn bytes_repr(data: &[u8], cut: bool) -> String {
    let quote = if data.contains(&b'\'') && !data.contains(&b'"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::from("b");
    out.push(quote);
    for &b in data {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            _ if b == quote as u8 => {
                out.push('\\');
                out.push(quote);
            }
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push(quote);
    if cut {
        out.push_str("...");
    }
    out
}

/// Whether Python's `str.isprintable` holds for a non-ASCII character.
///
/// Without Unicode's category tables this knows the control, format, separator,
/// surrogate, private-use and non-character ranges; unassigned code points (which
/// Python escapes) show as they are.
fn is_printable(c: char) -> bool {
    let c = c as u32;
    let not_printable: &[(u32, u32)] = &[
        (0x80, 0xa0),
        (0xad, 0xad),
        (0x600, 0x605),
        (0x61c, 0x61c),
        (0x6dd, 0x6dd),
        (0x70f, 0x70f),
        (0x890, 0x891),
        (0x8e2, 0x8e2),
        (0x1680, 0x1680),
        (0x180e, 0x180e),
        (0x2000, 0x200f),
        (0x2028, 0x202f),
        (0x205f, 0x2064),
        (0x2066, 0x206f),
        (0x3000, 0x3000),
        (0xd800, 0xf8ff),
        (0xfdd0, 0xfdef),
        (0xfeff, 0xfeff),
        (0xfff9, 0xfffb),
        (0x110bd, 0x110bd),
        (0x110cd, 0x110cd),
        (0x13430, 0x1343f),
        (0x1bca0, 0x1bca3),
        (0x1d173, 0x1d17a),
        (0xe0001, 0xe0001),
        (0xe0020, 0xe007f),
        (0xf0000, 0x10ffff),
    ];
    if c & 0xfffe == 0xfffe {
        return false;
    }
    !not_printable.iter().any(|&(lo, hi)| (lo..=hi).contains(&c))
}

#[cfg(test)]
mod tests {
    use super::super::layout::PY311;
    use super::super::testmem::FakeMem;
    use super::*;

    const INT_T: u64 = 0x1_0000;
    const FLOAT_T: u64 = 0x1_1000;
    const STR_T: u64 = 0x1_2000;
    const BYTES_T: u64 = 0x1_3000;
    const NONE_T: u64 = 0x1_4000;
    const BOOL_T: u64 = 0x1_5000;
    const TUPLE_T: u64 = 0x1_6000;
    const FOO_T: u64 = 0x1_7000;

    fn types() -> BuiltinTypes {
        BuiltinTypes {
            int: INT_T,
            float: FLOAT_T,
            str: STR_T,
            bytes: BYTES_T,
            none_type: NONE_T,
            bool: BOOL_T,
            tuple: TUPLE_T,
            ..BuiltinTypes::default()
        }
    }

    fn mem() -> FakeMem {
        let mut m = FakeMem::default();
        for (t, name) in [
            (INT_T, "int"),
            (FLOAT_T, "float"),
            (STR_T, "str"),
            (BYTES_T, "bytes"),
            (NONE_T, "NoneType"),
            (BOOL_T, "bool"),
            (TUPLE_T, "tuple"),
            (FOO_T, "Foo"),
        ] {
            let name_at = t + 0x800;
            m.put_u64(t + 24, name_at);
            let mut n = name.as_bytes().to_vec();
            n.extend([0u8; 16]);
            m.put(name_at, &n);
        }
        m
    }

    fn object(m: &mut FakeMem, at: u64, ty: u64, size: i64) {
        m.put_u64(at, 1);
        m.put_u64(at + 8, ty);
        m.put_u64(at + 16, size as u64);
    }

    fn int(m: &mut FakeMem, at: u64, negative: bool, digits: &[u32]) {
        let n = digits.len() as i64;
        object(m, at, INT_T, if negative { -n } else { n });
        for (i, d) in digits.iter().enumerate() {
            m.put_u32(at + 24 + 4 * i as u64, *d);
        }
    }

    fn ascii(m: &mut FakeMem, at: u64, s: &str) {
        object(m, at, STR_T, s.len() as i64);
        m.put_u64(at + 24, 0); // hash
        m.put_u32(at + 32, 0x80 | 0x40 | 0x20 | (1 << 2));
        m.put(at + 48, s.as_bytes());
    }

    fn wide(m: &mut FakeMem, at: u64, kind: u32, chars: &[u32]) {
        object(m, at, STR_T, chars.len() as i64);
        m.put_u64(at + 24, 0); // hash
        m.put_u32(at + 32, 0x80 | 0x20 | (kind << 2));
        for (i, c) in chars.iter().enumerate() {
            let p = at + 72 + (i as u64) * u64::from(kind);
            match kind {
                1 => m.put(p, &[*c as u8]),
                2 => m.put(p, &(*c as u16).to_le_bytes()),
                _ => m.put_u32(p, *c),
            }
        }
    }

    fn show(m: &FakeMem, at: u64) -> String {
        let t = types();
        Objects::new(m, &PY311, &t).value(at).display
    }

    #[test]
    fn ints_small_big_negative() {
        let mut m = mem();
        int(&mut m, 0x100, false, &[]);
        int(&mut m, 0x200, false, &[42]);
        int(&mut m, 0x300, true, &[7]);
        // 2**64 = 16 * 2**60: digits (30-bit) 0, 0, 16.
        int(&mut m, 0x400, false, &[0, 0, 16]);
        // 10**30 - 1 as 30-bit digits.
        let mut digits = Vec::new();
        let mut v: u128 = 10u128.pow(30) - 1;
        while v > 0 {
            digits.push((v & 0x3fff_ffff) as u32);
            v >>= 30;
        }
        int(&mut m, 0x500, true, &digits);
        int(&mut m, 0x600, false, &[1 << 30]);
        assert_eq!(show(&m, 0x100), "0");
        assert_eq!(show(&m, 0x200), "42");
        assert_eq!(show(&m, 0x300), "-7");
        assert_eq!(show(&m, 0x400), "18446744073709551616");
        assert_eq!(show(&m, 0x500), format!("-{}", "9".repeat(30)));
        assert_eq!(show(&m, 0x600), "<malformed int object at 0x600>");
        // Huge: no digits are read past the size check.
        object(&mut m, 0x700, INT_T, 1_000_000);
        assert!(show(&m, 0x700).starts_with("<int of about 30000000 bits"));
        object(&mut m, 0x800, INT_T, i64::MIN);
        assert!(
            show(&m, 0x800).starts_with("<int of about"),
            "{}",
            show(&m, 0x800)
        );
    }

    #[test]
    fn decimal_conversion() {
        assert_eq!(digits_to_decimal(&[], 30), "0");
        assert_eq!(digits_to_decimal(&[1_000_000_000], 30), "1000000000");
        let mut d = vec![0u32; 10];
        d.push(1);
        // 2**300
        assert_eq!(
            digits_to_decimal(&d, 30),
            "2037035976334486086268445688409378161051468393665936250636140449354381299763336706183397376"
        );
    }

    #[test]
    fn floats_like_python() {
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e100, "1e+100"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
            (std::f64::consts::PI, "3.141592653589793"),
            (1234.5, "1234.5"),
            (100.0, "100.0"),
        ];
        for (x, want) in cases {
            assert_eq!(float_repr(x), want, "{x:?}");
        }
        let mut m = mem();
        object(&mut m, 0x100, FLOAT_T, 0);
        m.put_u64(0x110, 2.5f64.to_bits());
        assert_eq!(show(&m, 0x100), "2.5");
    }

    #[test]
    fn strings_escaped_and_cut() {
        let mut m = mem();
        ascii(&mut m, 0x100, "zed");
        ascii(&mut m, 0x200, "it's");
        ascii(&mut m, 0x300, "a'b\"c\\\n\t\x01\x7f");
        ascii(&mut m, 0x400, &"x".repeat(100));
        wide(&mut m, 0x500, 1, &[0xe9, 0xa0, 0x41]);
        wide(&mut m, 0x600, 2, &[0x4e2d, 0x2028, 0xd800]);
        wide(&mut m, 0x700, 4, &[0x1f600, 0x10ffff]);
        assert_eq!(show(&m, 0x100), "'zed'");
        assert_eq!(show(&m, 0x200), "\"it's\"");
        assert_eq!(show(&m, 0x300), r#"'a\'b"c\\\n\t\x01\x7f'"#);
        assert_eq!(show(&m, 0x400), format!("'{}'...", "x".repeat(80)));
        assert_eq!(show(&m, 0x500), "'é\\xa0A'");
        assert_eq!(show(&m, 0x600), "'中\\u2028\\ud800'");
        assert_eq!(show(&m, 0x700), "'😀\\U0010ffff'");
        // Impossible kind.
        object(&mut m, 0x800, STR_T, 3);
        m.put_u64(0x800 + 24, 0);
        m.put_u32(0x800 + 32, 0x80 | 0x20 | (3 << 2));
        assert_eq!(show(&m, 0x800), "<malformed str object at 0x800>");
        // A huge length reads only the shown part, which is missing here.
        object(&mut m, 0x900, STR_T, i64::MAX);
        m.put_u64(0x900 + 24, 0);
        m.put_u32(0x900 + 32, 0x80 | 0x40 | 0x20 | (1 << 2));
        assert_eq!(show(&m, 0x900), "<unreadable str object at 0x900>");
        let t = types();
        let objs = Objects::new(&m, &PY311, &t);
        assert_eq!(objs.text(0x100, 10).unwrap(), "zed");
        assert_eq!(objs.text(0x400, 10), Err(ObjectProblem::Malformed));
        assert_eq!(objs.text(0x900, 10), Err(ObjectProblem::Malformed));
    }

    #[test]
    fn bytes_none_bool_other() {
        let mut m = mem();
        object(&mut m, 0x100, BYTES_T, 5);
        m.put(0x100 + 32, b"a\x00'\xff\n");
        object(&mut m, 0x200, NONE_T, 0);
        int(&mut m, 0x300, false, &[1]);
        m.put_u64(0x308, BOOL_T);
        int(&mut m, 0x400, false, &[]);
        m.put_u64(0x408, BOOL_T);
        object(&mut m, 0x500, FOO_T, 0);
        object(&mut m, 0x600, TUPLE_T, 3);
        object(&mut m, 0x700, BYTES_T, 200);
        m.put(0x700 + 32, &[b'q'; 80]);
        assert_eq!(show(&m, 0x100), "b\"a\\x00'\\xff\\n\"");
        assert_eq!(show(&m, 0x200), "None");
        assert_eq!(show(&m, 0x300), "True");
        assert_eq!(show(&m, 0x400), "False");
        assert_eq!(show(&m, 0x500), "<Foo object at 0x500>");
        assert_eq!(show(&m, 0x600), "<tuple object at 0x600, len 3>");
        assert_eq!(show(&m, 0x700), format!("b'{}'...", "q".repeat(80)));
        assert_eq!(show(&m, 0), "<unbound>");
        assert_eq!(show(&m, 0xdead_0000), "<unreadable object at 0xdead0000>");
        let t = types();
        let v = Objects::new(&m, &PY311, &t).value(0x500);
        assert_eq!(v.type_name, "Foo");
    }

    #[test]
    fn names_when_types_are_not_exported() {
        let mut m = mem();
        int(&mut m, 0x100, false, &[5]);
        let none = BuiltinTypes::default();
        assert_eq!(Objects::new(&m, &PY311, &none).value(0x100).display, "5");
        // A type name without a NUL within the limit.
        m.put_u64(FOO_T + 24, 0x9000);
        m.put(0x9000, &[b'a'; 200]);
        object(&mut m, 0x200, FOO_T, 0);
        assert_eq!(show(&m, 0x200), "<unreadable object at 0x200>");
    }

    #[test]
    fn ints_with_lv_tag_and_strings_without_a_ready_bit() {
        // 3.12+: digit count << 3 and the sign in lv_tag (immortal bit 2 as in
        // 3.14's small ints); the state word has no ready bit.
        let mut l = PY311;
        l.object.long_format = LongFormat::LvTag { offset: 16 };
        l.object.str_ready_bit = 0;
        let mut m = mem();
        let tagged = |m: &mut FakeMem, at: u64, tag: u64, digits: &[u32]| {
            object(m, at, INT_T, tag as i64);
            for (i, d) in digits.iter().enumerate() {
                m.put_u32(at + 24 + 4 * i as u64, *d);
            }
        };
        tagged(&mut m, 0x100, 1 | 4, &[0]);
        tagged(&mut m, 0x200, (1 << 3) | 4, &[1]);
        tagged(&mut m, 0x300, (1 << 3) | 2, &[7]);
        // -(2**100 + 7): digits of 30 bits, least significant first.
        tagged(&mut m, 0x400, (4 << 3) | 2, &[7, 0, 0, 1 << 10]);
        tagged(&mut m, 0x500, 3, &[]);
        object(&mut m, 0x600, STR_T, 2);
        m.put_u64(0x600 + 24, 0);
        m.put_u32(0x600 + 32, 0x40 | 0x20 | (1 << 2));
        m.put(0x600 + 48, b"ok");
        let t = types();
        let o = Objects::new(&m, &l, &t);
        let shown: Vec<_> = [0x100, 0x200, 0x300, 0x400, 0x500, 0x600]
            .iter()
            .map(|&a| o.value(a).display)
            .collect();
        assert_eq!(
            shown[..4],
            ["0", "1", "-7", "-1267650600228229401496703205383"]
        );
        assert!(shown[4].starts_with("<malformed int"), "{}", shown[4]);
        assert_eq!(shown[5], "'ok'");
    }
}
