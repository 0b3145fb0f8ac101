//! The C types a parameter list can name: which type words combine into which
//! basic type (C11 6.7.2, plus `bool` and GCC's `__int128`), the typedef names
//! known without headers, and the [`TypeDesc`] each becomes (x86-64 sizes; the
//! i386 reader resizes them, see [`crate::args::i386`]).

use crate::args::types::{pointer_name, TypeDesc, TypeKind};

/// Words that combine into a basic type, in any order.
pub(super) const TYPE_WORDS: [&str; 12] = [
    "void", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "_Bool",
    "bool", "__int128",
];

/// Type qualifiers allowed before a type and after a `*`.
pub(super) const QUALIFIERS: [&str; 2] = ["const", "volatile"];

/// Words that start a tagged type (`struct NAME`).
pub(super) const TAGS: [&str; 3] = ["struct", "union", "enum"];

/// C keywords (C11, and the GNU spellings GCC also reserves) that the grammar has
/// no place for: none of them is a name, and none may appear among the type words.
const OTHER_KEYWORDS: [&str; 37] = [
    "auto",
    "break",
    "case",
    "continue",
    "default",
    "do",
    "else",
    "extern",
    "for",
    "goto",
    "if",
    "inline",
    "register",
    "restrict",
    "return",
    "sizeof",
    "static",
    "switch",
    "typedef",
    "while",
    "_Alignas",
    "_Alignof",
    "_Atomic",
    "_Complex",
    "_Generic",
    "_Imaginary",
    "_Noreturn",
    "_Static_assert",
    "_Thread_local",
    "__attribute__",
    "__restrict",
    "__restrict__",
    "__const",
    "__volatile__",
    "__typeof__",
    "typeof",
    "asm",
];

/// True for a word that can never be a parameter name.
pub(super) fn is_keyword(w: &str) -> bool {
    TYPE_WORDS.contains(&w)
        || QUALIFIERS.contains(&w)
        || TAGS.contains(&w)
        || OTHER_KEYWORDS.contains(&w)
        || w.starts_with("__")
}

/// The typedef names a parameter list may use, with their kind and x86-64 size
/// (each is its own type: `size_t` stays `size_t`).
pub(super) fn typedef(w: &str) -> Option<(TypeKind, u64)> {
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

/// Every typedef name [`typedef`] knows, for hints and tests.
pub const TYPEDEFS: [&str; 15] = [
    "size_t",
    "ssize_t",
    "uintptr_t",
    "intptr_t",
    "ptrdiff_t",
    "off_t",
    "pid_t",
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "uint8_t",
    "uint16_t",
    "uint32_t",
    "uint64_t",
];

/// How many times each type word was given.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TypeWords {
    void: u8,
    char: u8,
    short: u8,
    int: u8,
    long: u8,
    float: u8,
    double: u8,
    signed: u8,
    unsigned: u8,
    bool: u8,
    int128: u8,
    /// `bool` rather than `_Bool` was written.
    bool_spelled: bool,
}

impl TypeWords {
    /// Counts one more type word (one of [`TYPE_WORDS`]).
    pub fn add(&mut self, w: &str) {
        let n = match w {
            "void" => &mut self.void,
            "char" => &mut self.char,
            "short" => &mut self.short,
            "int" => &mut self.int,
            "long" => &mut self.long,
            "float" => &mut self.float,
            "double" => &mut self.double,
            "signed" => &mut self.signed,
            "unsigned" => &mut self.unsigned,
            "_Bool" => &mut self.bool,
            "bool" => {
                self.bool_spelled = true;
                &mut self.bool
            }
            _ => &mut self.int128,
        };
        *n = n.saturating_add(1);
    }

    fn total(&self) -> u8 {
        self.void
            + self.char
            + self.short
            + self.int
            + self.long
            + self.float
            + self.double
            + self.signed
            + self.unsigned
            + self.bool
            + self.int128
    }

    /// The basic type these words name, or `None` when C has no such combination
    /// (`long char`, `signed double`, `long long long`) or no word was given.
    pub fn resolve(&self) -> Option<TypeDesc> {
        let total = self.total();
        let sign = self.signed + self.unsigned;
        if total == 0 || self.signed > 1 || self.unsigned > 1 || sign > 1 {
            return None;
        }
        let unsigned = self.unsigned == 1;
        let alone = |n: u8| n == 1 && total == 1;
        let ty = |kind, size, name: &str| TypeDesc {
            name: name.to_string(),
            kind,
            size,
        };
        if alone(self.void) {
            return Some(ty(TypeKind::Void, 0, "void"));
        }
        if alone(self.bool) {
            let name = if self.bool_spelled { "bool" } else { "_Bool" };
            return Some(ty(TypeKind::Bool, 1, name));
        }
        if alone(self.float) {
            return Some(ty(TypeKind::Float, 4, "float"));
        }
        if self.double == 1 {
            return match (self.long, total) {
                (0, 1) => Some(ty(TypeKind::Float, 8, "double")),
                (1, 2) => Some(ty(TypeKind::Float, 16, "long double")),
                _ => None,
            };
        }
        if self.char == 1 {
            if total != 1 + sign {
                return None;
            }
            let name = match (self.signed, self.unsigned) {
                (1, _) => "signed char",
                (_, 1) => "unsigned char",
                _ => "char",
            };
            return Some(ty(TypeKind::Char { signed: !unsigned }, 1, name));
        }
        let int_kind = if unsigned {
            TypeKind::Unsigned
        } else {
            TypeKind::Signed
        };
        let prefix = if unsigned { "unsigned " } else { "" };
        if self.int128 == 1 {
            return (total == 1 + sign).then(|| ty(int_kind, 16, &format!("{prefix}__int128")));
        }
        // What is left: short, int, long, long long, signed, unsigned.
        if self.void + self.bool + self.float + self.double + self.int128 + self.char > 0
            || self.int > 1
            || self.short > 1
            || self.long > 2
            || (self.short == 1 && self.long > 0)
        {
            return None;
        }
        let (size, name) = match (self.short, self.long) {
            (1, _) => (2, "short"),
            (_, 1) => (8, "long"),
            (_, 2) => (8, "long long"),
            _ => (4, "int"),
        };
        let name = if unsigned && name == "int" {
            "unsigned int".to_string()
        } else {
            format!("{prefix}{name}")
        };
        Some(ty(int_kind, size, &name))
    }
}

/// A typedef name's type.
pub(super) fn typedef_type(w: &str) -> Option<TypeDesc> {
    typedef(w).map(|(kind, size)| TypeDesc {
        name: w.to_string(),
        kind,
        size,
    })
}

/// `struct TAG`, `union TAG` or `enum TAG`, as far as it is known without its
/// definition: a struct or union of unknown size, an `int`-sized enum.
pub(super) fn tagged(tag: &str, name: &str) -> TypeDesc {
    let (kind, size) = match tag {
        "struct" => (
            TypeKind::Struct {
                members: Vec::new(),
            },
            0,
        ),
        "union" => (
            TypeKind::Union {
                members: Vec::new(),
            },
            0,
        ),
        _ => (
            TypeKind::Enum {
                enumerators: Vec::new(),
                signed: false,
            },
            4,
        ),
    };
    TypeDesc {
        name: format!("{tag} {name}"),
        kind,
        size,
    }
}

/// `ty` with qualifiers in front of its name (`const volatile int`).
pub(super) fn qualified(mut ty: TypeDesc, quals: &[&str]) -> TypeDesc {
    for q in QUALIFIERS.iter().rev() {
        if quals.contains(q) {
            ty.name = format!("{q} {}", ty.name);
        }
    }
    ty
}

/// A pointer to `to`, with qualifiers of the pointer itself (`char * const`).
pub(super) fn pointer(to: TypeDesc, quals: &[&str]) -> TypeDesc {
    let mut name = pointer_name(&to.name);
    for q in ["const", "volatile", "restrict"] {
        if quals.contains(&q) {
            name = format!("{name} {q}");
        }
    }
    TypeDesc {
        name,
        kind: TypeKind::Pointer(Box::new(to)),
        size: 8,
    }
}

/// True for a type whose size the parameter list does not give (`struct TAG`,
/// `union TAG`, `enum TAG` by value): C cannot make arrays of it.
pub(super) fn incomplete(ty: &TypeDesc) -> bool {
    matches!(
        ty.kind,
        TypeKind::Struct { .. } | TypeKind::Union { .. } | TypeKind::Enum { .. }
    )
}
