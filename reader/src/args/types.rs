//! The type model: what a function's parameters are ([`FunctionInfo`], [`Param`],
//! [`TypeDesc`]), where their values live ([`Location`]), what the unwinder knows
//! about a frame ([`FrameState`]) and what is shown for each argument
//! ([`ArgValue`]). A leaf: it uses nothing else in the crate, so every reader of
//! types (DWARF, signatures, ABI placement, formatting) depends on it alone.

use std::ops::Range;

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

/// The name of a pointer to a type named `pointee`, spaced as gdb prints it
/// (`char *`, `char **`).
pub(crate) fn pointer_name(pointee: &str) -> String {
    if pointee.ends_with('*') {
        format!("{pointee}*")
    } else {
        format!("{pointee} *")
    }
}
