//! Why a signature is refused: a typed reason and the byte position it is at.

use thiserror::Error;

/// A signature given by the user failed to parse, or cannot be stored.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum SignatureError {
    /// The text is not a `NAME(PARAMETERS)` the grammar accepts (see the module docs).
    #[error("cannot read the signature `{text}`: {reason} (at byte {at}); {}", reason.advice())]
    Syntax {
        /// The text as given.
        text: String,
        /// Byte offset in `text` where it goes wrong.
        at: usize,
        /// What is wrong there.
        reason: SyntaxReason,
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

/// A parameter list the grammar does not accept: where and why.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("{reason} (at byte {at})")]
pub struct SyntaxError {
    /// Byte offset in the parsed text.
    pub at: usize,
    /// What is wrong there.
    pub reason: SyntaxReason,
}

/// What was found where something else was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// This token.
    Token(String),
    /// The end of the text.
    End,
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Found::Token(t) => write!(f, "`{t}`"),
            Found::End => f.write_str("the end of the text"),
        }
    }
}

/// What the grammar expected at a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// A parameter (a type) or `...`.
    Parameter,
    /// The name after `struct`, `union` or `enum`.
    Tag,
    /// `,` or the `)` that closes the list.
    CommaOrClose,
    /// An array size or `]`.
    ArraySize,
    /// `]` after an array size.
    CloseBracket,
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Expected::Parameter => "a parameter type",
            Expected::Tag => "the tag name",
            Expected::CommaOrClose => "`,` or the closing `)`",
            Expected::ArraySize => "an array size or `]`",
            Expected::CloseBracket => "`]`",
        })
    }
}

/// Why a signature or parameter list is refused.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum SyntaxReason {
    /// Nothing before the `(`.
    #[error("the function name is missing")]
    NoName,
    /// A `)` in a function name that has no `(`.
    #[error("`)` without a `(` that opens the parameter list")]
    StrayClose,
    /// The text ends before the `)` that closes the parameter list.
    #[error("the parameter list is not closed")]
    Unclosed,
    /// Something follows the `)` that closes the parameter list.
    #[error("`{found}` follows the `)` that closes the parameter list")]
    TrailingText {
        /// The first token after it.
        found: String,
    },
    /// A character that is part of no token of the grammar.
    #[error("unexpected character `{ch}`")]
    UnexpectedChar {
        /// The character.
        ch: char,
    },
    /// Another token was expected here.
    #[error("expected {expected}, found {found}")]
    Expected {
        /// What the grammar expected.
        expected: Expected,
        /// What is there.
        found: Found,
    },
    /// A word that names no type this parser knows.
    #[error("unknown type `{word}`")]
    UnknownType {
        /// The word.
        word: String,
    },
    /// A type word that C does not combine with the ones before it (`long char`).
    #[error("`{word}` cannot be combined with `{with}`")]
    BadCombination {
        /// The word.
        word: String,
        /// The type words before it, space-separated.
        with: String,
    },
    /// A qualifier given twice at the same level.
    #[error("`{word}` given twice")]
    DuplicateQualifier {
        /// The qualifier.
        word: String,
    },
    /// `restrict` qualifies pointers only.
    #[error("`restrict` qualifies only a pointer")]
    RestrictNotOnPointer,
    /// A keyword the grammar has no place for (`register`, `static`, `_Complex`).
    #[error("`{word}` is not supported in a parameter list here")]
    Unsupported {
        /// The keyword.
        word: String,
    },
    /// A keyword where the parameter's name would be.
    #[error("`{word}` is a C keyword, not a parameter name")]
    KeywordAsName {
        /// The keyword.
        word: String,
    },
    /// A typedef name where the parameter's name would be.
    #[error("`{word}` is a type, not a parameter name")]
    TypeAsName {
        /// The typedef name.
        word: String,
    },
    /// A token that cannot be a name where the parameter's name would be (`3x`).
    #[error("`{found}` is not a parameter name")]
    NotAName {
        /// The token.
        found: String,
    },
    /// Two parameters with the same name.
    #[error("a second parameter named `{name}`")]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// A tag used with another kind than before in the list (`struct t *a, union t *b`).
    #[error("`{tag}` was used as a `{first}` tag before")]
    TagKindConflict {
        /// The tag.
        tag: String,
        /// The kind it was first used with.
        first: String,
    },
    /// Qualifiers without a type (`const x`).
    #[error("the parameter has no type")]
    MissingType,
    /// Nothing between two commas, or after the last one.
    #[error("an empty parameter")]
    EmptyParameter,
    /// `void` as a parameter among others (it only means "no parameters" alone).
    #[error("`void` as a parameter is allowed only alone, meaning no parameters")]
    VoidNotAlone,
    /// `void` with a name.
    #[error("a parameter of type `void`")]
    VoidNamed,
    /// `const void` or `volatile void` as the whole list.
    #[error("`void` meaning no parameters cannot be qualified")]
    VoidQualified,
    /// `...` as the only parameter.
    #[error("`...` needs a named parameter before it")]
    VariadicWithoutNamed,
    /// A parameter follows `...`.
    #[error("`...` must come last")]
    VariadicNotLast,
    /// A parenthesized declarator (function pointers, `int (a)`).
    #[error("parenthesized declarators (function pointers) are not supported")]
    Parenthesized,
    /// An array of `void`.
    #[error("an array of `void`")]
    ArrayOfVoid,
    /// An array whose element type has unknown size (`struct s a[]`).
    #[error("an array of `{element}`, whose size is unknown")]
    ArrayOfIncomplete {
        /// The element type.
        element: String,
    },
    /// A second array dimension (`int a[2][3]`).
    #[error("more than one array dimension")]
    MultiDimensional,
    /// An array size that is not a positive decimal number.
    #[error("`{found}` is not an array size")]
    BadArraySize {
        /// The size as written.
        found: String,
    },
}

impl SyntaxReason {
    /// How to write it instead (C syntax, the same for every front end).
    pub fn advice(&self) -> &'static str {
        use SyntaxReason as R;
        match self {
            R::NoName => "write the function's name before the `(`, like `bar(int a, const char *s)`",
            R::StrayClose | R::Unclosed => {
                "write the parameter list between `(` and `)`, like `bar(int a, const char *s)`"
            }
            R::TrailingText { .. } => "nothing may follow the `)` that closes the parameter list",
            R::Expected {
                expected: Expected::ArraySize | Expected::CloseBracket,
                ..
            } => "write an array parameter as `int a[4]` or `int a[]` (it is the pointer `int *a`)",
            R::Expected {
                expected: Expected::Tag,
                ..
            } => "name the type after `struct`, `union` or `enum`, like `struct point *p`",
            R::UnexpectedChar { .. } | R::Expected { .. } | R::Parenthesized => {
                "a parameter is a type, optional `*`s and an optional name, parameters are \
                 separated by `,`; write pointers to functions as `void *`"
            }
            R::UnknownType { .. } => {
                "use a C type (`int`, `unsigned long`, `double`, `char *`, ...), one of size_t, \
                 ssize_t, uintptr_t, intptr_t, ptrdiff_t, off_t, pid_t, intN_t, uintN_t, or \
                 `struct NAME *` for other types"
            }
            R::BadCombination { .. } => {
                "combine type words as C does (`unsigned long`, `long long`, `long double`, \
                 `signed char`); a typedef name stands alone"
            }
            R::DuplicateQualifier { .. } | R::RestrictNotOnPointer => {
                "write each qualifier once, `restrict` only after a `*` (`char *restrict s`)"
            }
            R::Unsupported { .. } => "leave it out: only the type and the name matter here",
            R::KeywordAsName { .. } | R::TypeAsName { .. } | R::NotAName { .. } => {
                "a name is a letter or `_` followed by letters, digits and `_`, and is no \
                 keyword or type"
            }
            R::DuplicateName { .. } => "give every parameter its own name",
            R::TagKindConflict { .. } => {
                "a tag names one type in a parameter list: use the same `struct`, `union` or \
                 `enum` each time, or another tag"
            }
            R::MissingType => "give the type, like `const int x`",
            R::EmptyParameter => "remove the extra `,` or write the parameter",
            R::VoidNotAlone | R::VoidNamed | R::VoidQualified => {
                "write `(void)` or `()` for a function without parameters, `void *` for a pointer"
            }
            R::VariadicWithoutNamed | R::VariadicNotLast => {
                "write `...` last, after at least one parameter, like `printf(const char *fmt, ...)`"
            }
            R::ArrayOfVoid | R::ArrayOfIncomplete { .. } | R::MultiDimensional => {
                "an array parameter is a pointer to its element: write `T *p`"
            }
            R::BadArraySize { .. } => "write the size as a positive decimal number, or `[]`",
        }
    }
}
