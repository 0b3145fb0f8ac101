//! The C signature parser: a parameter list the user gives instead of DWARF
//! (`--func 'bar(int n, const char *s, ...)'`), read into the type model with
//! x86-64 sizes (the i386 reader resizes them, see [`super::i386`]).
//!
//! Text that the grammar below does not accept is refused with the byte
//! position of the first token that is wrong and a [`SyntaxReason`] (whose
//! [`SyntaxReason::advice`] says how to write it); nothing is guessed. Every
//! list accepted is a valid C parameter list (`void f(LIST);` compiles with
//! `<stddef.h>`, `<stdint.h>`, `<stdbool.h>` and `<sys/types.h>`), and its
//! normalized text ([`Signature::text`], what the hook record stores and
//! `list` shows) parses back to the same signature.
//!
//! # Grammar
//!
//! Tokens are separated by any whitespace; positions are byte offsets.
//!
//! ```text
//! signature   = name , [ "(" , params , ")" ] ;     (* nothing may follow the ")" *)
//! name        = ? one or more characters other than "(" and ")" ? ;
//! params      = [ "void" ]                           (* no parameters *)
//!             | param , { "," , param } , [ "," , "..." ] ;
//! param       = { qualifier } , type , { qualifier } , declarator ;
//! type        = type-word , { type-word | qualifier } (* a C combination, any order *)
//!             | typedef-name
//!             | ( "struct" | "union" | "enum" ) , identifier ;
//! type-word   = "void" | "char" | "short" | "int" | "long" | "float" | "double"
//!             | "signed" | "unsigned" | "_Bool" | "bool" | "__int128" ;
//! qualifier   = "const" | "volatile" ;
//! declarator  = { "*" , { qualifier | "restrict" } } , [ identifier ] ,
//!               [ "[" , [ size ] , "]" ] ;
//! size        = nonzero-digit , { digit } ;
//! identifier  = ( letter | "_" ) , { letter | digit | "_" } ;  (* no keyword, no typedef-name *)
//! typedef-name = "size_t" | "ssize_t" | "uintptr_t" | "intptr_t" | "ptrdiff_t"
//!             | "off_t" | "pid_t" | "int8_t" | "int16_t" | "int32_t" | "int64_t"
//!             | "uint8_t" | "uint16_t" | "uint32_t" | "uint64_t" ;
//! ```
//!
//! Rules the EBNF does not show:
//!
//! - Type words combine as in C11 6.7.2, in any order: `unsigned long int`,
//!   `long unsigned`, `signed char`, `long long`, `long double`; `long char`,
//!   `signed double`, `long long long` are refused at the word that breaks the
//!   combination. A typedef name or a tagged type stands alone (with qualifiers).
//! - Each qualifier at most once per level; `restrict` only after a `*`.
//! - `void` alone and unqualified means no parameters; `void` with other
//!   parameters, with a name or a qualifier is refused. `()` means no
//!   parameters too (the hook has no prototype to take more from).
//! - `...` comes last and needs a parameter before it (`f(...)` is refused).
//! - Parameter names are distinct and optional; a tag is used with one kind
//!   (`struct t *a, union t *b` is refused, as C does).
//! - An array parameter is adjusted to a pointer to its element, as C does
//!   (C11 6.7.6.3p7): `int a[4]` and `int a[]` are `int *a`. One dimension only
//!   (`int a[2][3]`, a pointer to an array, is refused), the size a positive
//!   decimal number, and the element type complete (no `void`, no `struct TAG`).
//! - `struct TAG`, `union TAG` and `enum TAG` by value are accepted with unknown
//!   members: their placement is then unknown (an `enum` counts as `int`).
//! - Not supported, refused: function pointers and other parenthesized
//!   declarators (write `void *`), storage classes (`register`), `_Complex`,
//!   `_Atomic`, attributes, array qualifiers (`[static 4]`), other typedef names.

mod ctype;
mod error;
mod lexer;
mod parser;
#[cfg(test)]
mod tests;

pub use ctype::TYPEDEFS;
pub use error::{Expected, Found, SignatureError, SyntaxError, SyntaxReason};

use super::types::{FunctionInfo, Location, Param};
use lexer::{lex, Tok};
use parser::{Parser, Until};

/// A parameter list given by the user instead of DWARF; made only by parsing
/// ([`parse_params`], [`split_signature`]), so it is always well-formed.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    text: String,
    params: Vec<Param>,
    variadic: bool,
}

impl Signature {
    /// The parameter list, normalized (`int, const char *s, ...`); parses back to this signature.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The parameters' types without their names, `, ` between them and a final
    /// `...` when variadic (`const char *, ...`): a C++ parameter list to match.
    pub fn types_text(&self) -> String {
        let mut types: Vec<&str> = self.params.iter().map(|p| p.ty.name.as_str()).collect();
        if self.variadic {
            types.push("...");
        }
        types.join(", ")
    }

    /// The parameters (arrays adjusted to pointers).
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// True for a trailing `...`.
    pub fn variadic(&self) -> bool {
        self.variadic
    }

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

    fn new(params: Vec<Param>, variadic: bool) -> Signature {
        let mut text: Vec<String> = params
            .iter()
            .map(|p| match &p.name {
                Some(n) if p.ty.name.ends_with('*') => format!("{}{n}", p.ty.name),
                Some(n) => format!("{} {n}", p.ty.name),
                None => p.ty.name.clone(),
            })
            .collect();
        if variadic {
            text.push("...".into());
        }
        Signature {
            text: text.join(", "),
            params,
            variadic,
        }
    }
}

/// Splits `NAME(PARAMETERS)` into the function part and its signature; a spec
/// without `(` has none. Refusals give the byte position in `spec` as given.
pub fn split_signature(spec: &str) -> Result<(&str, Option<Signature>), SignatureError> {
    let refuse = |e: SyntaxError| SignatureError::Syntax {
        text: spec.to_string(),
        at: e.at,
        reason: e.reason,
    };
    let Some(open) = spec.find('(') else {
        if let Some(close) = spec.find(')') {
            return Err(refuse(SyntaxError {
                at: close,
                reason: SyntaxReason::StrayClose,
            }));
        }
        return Ok((spec.trim(), None));
    };
    let name = spec[..open].trim();
    if name.is_empty() {
        return Err(refuse(SyntaxError {
            at: open,
            reason: SyntaxReason::NoName,
        }));
    }
    if let Some(close) = spec[..open].find(')') {
        return Err(refuse(SyntaxError {
            at: close,
            reason: SyntaxReason::StrayClose,
        }));
    }
    let toks = lex(spec, open + 1);
    let mut parser = Parser::new(&toks, Until::Close);
    let list = parser.list().map_err(refuse)?;
    // The list ended at its `)`: nothing may follow.
    if let Some(after) = toks.get(parser.position() + 1) {
        if after.tok != Tok::End {
            let reason = match after.tok {
                Tok::Bad(ch) => SyntaxReason::UnexpectedChar { ch },
                tok => SyntaxReason::TrailingText { found: tok.text() },
            };
            return Err(refuse(SyntaxError {
                at: after.at,
                reason,
            }));
        }
    }
    Ok((name, Some(Signature::new(list.params, list.variadic))))
}

/// [`split_signature`] for `--func`, which also takes C++ names as demangled: a
/// spec whose list is no C parameter list but whose name or list has C++ syntax in
/// it (`::`, `<`, `&`: `ns::f(std::string const&)`, `f<void (*)(int)>(int)`) is
/// returned whole as the name, with no signature, for the symbol lookup to match
/// against demangled names. Other refusals stand.
pub fn split_function(spec: &str) -> Result<(&str, Option<Signature>), SignatureError> {
    match split_signature(spec) {
        Err(_) if ["::", "<", "&"].iter().any(|c| spec.contains(c)) => Ok((spec.trim(), None)),
        Err(_) if method_qualifiers_follow(spec) => Ok((spec.trim(), None)),
        other => other,
    }
}

/// True when only C++ method qualifiers follow the last `)` of `spec`
/// (`compare(const char*) const`): a demangled member function, not C.
fn method_qualifiers_follow(spec: &str) -> bool {
    let Some(close) = spec.rfind(')') else {
        return false;
    };
    let mut words = spec[close + 1..].split_whitespace().peekable();
    words.peek().is_some() && words.all(|w| w == "const" || w == "volatile")
}

/// Parses a bare C parameter list such as `int n, const char *s, ...` (positions
/// are byte offsets in `list`).
pub fn parse_params(list: &str) -> Result<Signature, SyntaxError> {
    let toks = lex(list, 0);
    let list = Parser::new(&toks, Until::End).list()?;
    Ok(Signature::new(list.params, list.variadic))
}
