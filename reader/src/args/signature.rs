//! The C signature parser: a parameter list the user gives instead of DWARF
//! (`bar(int, const char *s, ...)`), read into the type model with x86-64 sizes
//! (the i386 reader resizes them, see [`super::i386`]).

use thiserror::Error;

use super::types::{pointer_name, FunctionInfo, Location, Param, TypeDesc, TypeKind};

/// A signature given by the user, e.g. `bar(int, const char *)`, failed to parse.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SignatureError {
    /// The text is not `NAME(TYPE, ...)`.
    #[error("cannot read the signature `{text}`: {why}; write it like `bar(int, const char *)`")]
    Syntax {
        /// The signature as given.
        text: String,
        /// What is wrong.
        why: SyntaxReason,
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

/// What is wrong with a `NAME(TYPE, ...)` signature.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum SyntaxReason {
    /// The text after `(` does not end with `)`.
    #[error("it must end with `)`")]
    Unclosed,
    /// Nothing before the `(`.
    #[error("the function name is missing")]
    NoName,
    /// The parameter list cannot be read.
    #[error(transparent)]
    Params(#[from] ParamListError),
}

/// Why a C parameter list (`int n, const char *s, ...`) cannot be read.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum ParamListError {
    /// A parameter follows `...`.
    #[error("`...` must come last")]
    VariadicNotLast,
    /// Nothing between two commas (or after the last one).
    #[error("an empty parameter")]
    Empty,
    /// Words after the last `*` that are neither `const` nor one name.
    #[error("cannot read the parameter `{param}`")]
    Unreadable {
        /// The parameter as written.
        param: String,
    },
    /// The type words name no type this parser knows.
    #[error("unknown type in `{param}`")]
    UnknownType {
        /// The parameter as written.
        param: String,
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
    let err = |why: SyntaxReason| SignatureError::Syntax {
        text: spec.to_string(),
        why,
    };
    let inner = spec[open + 1..]
        .strip_suffix(')')
        .ok_or_else(|| err(SyntaxReason::Unclosed))?;
    let name = spec[..open].trim();
    if name.is_empty() {
        return Err(err(SyntaxReason::NoName));
    }
    Ok((name, Some(parse_params(inner).map_err(|e| err(e.into()))?)))
}

/// Parses a C parameter list such as `int n, const char *s, ...`.
pub fn parse_params(list: &str) -> Result<Signature, ParamListError> {
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
                return Err(ParamListError::VariadicNotLast);
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

fn parse_param(text: &str) -> Result<Param, ParamListError> {
    let spaced = text.replace('*', " * ");
    let words: Vec<&str> = spaced.split_whitespace().collect();
    if words.is_empty() {
        return Err(ParamListError::Empty);
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
        return Err(ParamListError::Unreadable {
            param: text.to_string(),
        });
    }
    let mut ty = base_type(&base).ok_or_else(|| ParamListError::UnknownType {
        param: text.to_string(),
    })?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn errors_say_what_is_wrong() {
        let why = |list: &str| parse_params(list).unwrap_err();
        assert_eq!(why("int, ..., long"), ParamListError::VariadicNotLast);
        assert_eq!(why("int, , long").to_string(), "an empty parameter");
        assert_eq!(
            why("char * x y").to_string(),
            "cannot read the parameter `char * x y`"
        );
        assert_eq!(
            why("int, frobnicate").to_string(),
            "unknown type in `frobnicate`"
        );
        assert_eq!(
            split_signature("bar(int").unwrap_err().to_string(),
            "cannot read the signature `bar(int`: it must end with `)`; write it like `bar(int, const char *)`"
        );
        assert_eq!(
            split_signature("(int)").unwrap_err(),
            SignatureError::Syntax {
                text: "(int)".into(),
                why: SyntaxReason::NoName
            }
        );
        assert_eq!(
            split_signature("bar(int, ..., long)").unwrap_err().to_string(),
            "cannot read the signature `bar(int, ..., long)`: `...` must come last; write it like `bar(int, const char *)`"
        );
    }
}
