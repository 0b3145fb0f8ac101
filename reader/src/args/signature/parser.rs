//! The parser: tokens to parameters, by the grammar in the module docs.
//!
//! A recursive-descent reader with one token of lookahead. Every refusal names
//! the token it happened at, so the position points at the first thing wrong.

use std::collections::{HashMap, HashSet};

use super::ctype::{
    incomplete, is_keyword, pointer, qualified, tagged, typedef, typedef_type, TypeWords,
    QUALIFIERS, TAGS, TYPE_WORDS,
};
use super::error::{Expected, Found, SyntaxError, SyntaxReason};
use super::lexer::{Tok, Token};
use crate::args::types::{Location, Param, TypeDesc, TypeKind};

/// Where a parameter list ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Until {
    /// At the `)` that closes it (a whole signature).
    Close,
    /// At the end of the text (a bare parameter list).
    End,
}

/// A parsed parameter list.
#[derive(Debug)]
pub(super) struct List {
    /// The parameters.
    pub params: Vec<Param>,
    /// A trailing `...`.
    pub variadic: bool,
}

/// One parsed parameter, or the `void` that may stand for "no parameters".
enum Parsed {
    Param(Param),
    /// `void` by value, unnamed: its position and whether it was qualified.
    Void {
        at: usize,
        qualified: bool,
    },
}

/// The parser's state: the tokens and the next one to read.
pub(super) struct Parser<'t, 'a> {
    toks: &'t [Token<'a>],
    next: usize,
    until: Until,
    names: HashSet<&'a str>,
    /// The kind (`struct`, `union`, `enum`) each tag was first used with.
    tags: HashMap<&'a str, &'a str>,
}

fn err(at: usize, reason: SyntaxReason) -> SyntaxError {
    SyntaxError { at, reason }
}

impl<'t, 'a> Parser<'t, 'a> {
    /// A parser of `toks` (which end with [`Tok::End`]).
    pub fn new(toks: &'t [Token<'a>], until: Until) -> Self {
        Parser {
            toks,
            next: 0,
            until,
            names: HashSet::new(),
            tags: HashMap::new(),
        }
    }

    fn peek(&self) -> Token<'a> {
        self.toks[self.next.min(self.toks.len() - 1)]
    }

    fn bump(&mut self) -> Token<'a> {
        let t = self.peek();
        self.next += 1;
        t
    }

    /// The index of the next token (the terminator after [`Parser::list`]).
    pub fn position(&self) -> usize {
        self.next
    }

    fn at_terminator(&self) -> bool {
        match self.until {
            Until::Close => self.peek().tok == Tok::Close,
            Until::End => self.peek().tok == Tok::End,
        }
    }

    /// The refusal for `t` where `expected` should be.
    fn unexpected(&self, t: Token<'a>, expected: Expected) -> SyntaxError {
        let reason = match (t.tok, self.until) {
            (Tok::Bad(ch), _) => SyntaxReason::UnexpectedChar { ch },
            (Tok::End, Until::Close) => SyntaxReason::Unclosed,
            (Tok::Close, Until::End) => SyntaxReason::StrayClose,
            (Tok::End, Until::End) => SyntaxReason::Expected {
                expected,
                found: Found::End,
            },
            (tok, _) => SyntaxReason::Expected {
                expected,
                found: Found::Token(tok.text()),
            },
        };
        err(t.at, reason)
    }

    /// `params` of the grammar, up to (not including) its terminator.
    pub fn list(&mut self) -> Result<List, SyntaxError> {
        let mut params = Vec::new();
        let mut variadic = false;
        if self.at_terminator() {
            return Ok(List { params, variadic });
        }
        loop {
            let t = self.peek();
            match t.tok {
                Tok::Ellipsis => {
                    if params.is_empty() {
                        return Err(err(t.at, SyntaxReason::VariadicWithoutNamed));
                    }
                    self.bump();
                    variadic = true;
                    let after = self.peek();
                    if self.at_terminator() {
                        break;
                    }
                    if after.tok == Tok::Comma {
                        return Err(err(after.at, SyntaxReason::VariadicNotLast));
                    }
                    return Err(self.unexpected(after, Expected::CommaOrClose));
                }
                Tok::Comma => return Err(err(t.at, SyntaxReason::EmptyParameter)),
                _ if self.at_terminator() => return Err(err(t.at, SyntaxReason::EmptyParameter)),
                _ => {}
            }
            match self.param()? {
                Parsed::Param(p) => params.push(p),
                Parsed::Void { at, qualified } => {
                    if !params.is_empty() || !self.at_terminator() {
                        return Err(err(at, SyntaxReason::VoidNotAlone));
                    }
                    if qualified {
                        return Err(err(at, SyntaxReason::VoidQualified));
                    }
                    break;
                }
            }
            let t = self.peek();
            if self.at_terminator() {
                break;
            }
            if t.tok != Tok::Comma {
                return Err(self.unexpected(t, Expected::CommaOrClose));
            }
            self.bump();
        }
        Ok(List { params, variadic })
    }

    /// `param` of the grammar: type words, then the declarator.
    fn param(&mut self) -> Result<Parsed, SyntaxError> {
        let mut words = TypeWords::default();
        let mut spelled: Vec<&str> = Vec::new();
        let mut named_type: Option<TypeDesc> = None;
        let mut quals: Vec<&str> = Vec::new();
        let mut void_at = None;
        loop {
            let t = self.peek();
            let Tok::Word(w) = t.tok else { break };
            let typed = !spelled.is_empty() || named_type.is_some();
            if QUALIFIERS.contains(&w) {
                if quals.contains(&w) {
                    return Err(err(
                        t.at,
                        SyntaxReason::DuplicateQualifier { word: w.into() },
                    ));
                }
                quals.push(w);
            } else if w == "restrict" {
                return Err(err(t.at, SyntaxReason::RestrictNotOnPointer));
            } else if TYPE_WORDS.contains(&w) || (TAGS.contains(&w) && typed) {
                let with = match &named_type {
                    Some(ty) => Some(ty.name.clone()),
                    None if TAGS.contains(&w) => Some(spelled.join(" ")),
                    None => {
                        words.add(w);
                        words.resolve().is_none().then(|| spelled.join(" "))
                    }
                };
                if let Some(with) = with {
                    return Err(err(
                        t.at,
                        SyntaxReason::BadCombination {
                            word: w.into(),
                            with,
                        },
                    ));
                }
                spelled.push(w);
                if w == "void" {
                    void_at = Some(t.at);
                }
            } else if TAGS.contains(&w) {
                self.bump();
                let n = self.peek();
                match n.tok {
                    Tok::Word(tag) if !is_keyword(tag) => {
                        // One tag names one kind of type in a list (C11 6.7.2.3p2).
                        let first = *self.tags.entry(tag).or_insert(w);
                        if first != w {
                            return Err(err(
                                t.at,
                                SyntaxReason::TagKindConflict {
                                    tag: tag.into(),
                                    first: first.into(),
                                },
                            ));
                        }
                        named_type = Some(tagged(w, tag))
                    }
                    _ => return Err(self.unexpected(n, Expected::Tag)),
                }
            } else if typed {
                break;
            } else if typedef(w).is_some() {
                named_type = typedef_type(w);
            } else if is_keyword(w) {
                return Err(err(t.at, SyntaxReason::Unsupported { word: w.into() }));
            } else {
                return Err(err(t.at, SyntaxReason::UnknownType { word: w.into() }));
            }
            self.bump();
        }
        let base = match named_type.or_else(|| words.resolve()) {
            Some(ty) => qualified(ty, &quals),
            None => {
                let t = self.peek();
                return Err(match t.tok {
                    _ if !quals.is_empty() => err(t.at, SyntaxReason::MissingType),
                    _ => self.unexpected(t, Expected::Parameter),
                });
            }
        };
        self.declarator(base, !quals.is_empty(), void_at)
    }

    /// `declarator` of the grammar: `*`s with their qualifiers, a name, one array suffix.
    fn declarator(
        &mut self,
        base: TypeDesc,
        qualified: bool,
        void_at: Option<usize>,
    ) -> Result<Parsed, SyntaxError> {
        let mut ty = base;
        let mut stars = 0;
        while self.peek().tok == Tok::Star {
            self.bump();
            stars += 1;
            let mut quals: Vec<&str> = Vec::new();
            while let Tok::Word(q @ ("const" | "volatile" | "restrict")) = self.peek().tok {
                if quals.contains(&q) {
                    let at = self.peek().at;
                    return Err(err(at, SyntaxReason::DuplicateQualifier { word: q.into() }));
                }
                quals.push(q);
                self.bump();
            }
            ty = pointer(ty, &quals);
        }
        let t = self.peek();
        let mut name = None;
        match t.tok {
            Tok::Word(w) if typedef(w).is_some() => {
                return Err(err(t.at, SyntaxReason::TypeAsName { word: w.into() }))
            }
            Tok::Word(w) if is_keyword(w) => {
                return Err(err(t.at, SyntaxReason::KeywordAsName { word: w.into() }))
            }
            Tok::Word(w) => {
                if !self.names.insert(w) {
                    return Err(err(t.at, SyntaxReason::DuplicateName { name: w.into() }));
                }
                name = Some(w.to_string());
                self.bump();
            }
            Tok::Number(n) => return Err(err(t.at, SyntaxReason::NotAName { found: n.into() })),
            Tok::Open => return Err(err(t.at, SyntaxReason::Parenthesized)),
            _ => {}
        }
        let by_value = stars == 0;
        if self.peek().tok == Tok::OpenBracket {
            let open = self.bump();
            let size = self.peek();
            match size.tok {
                Tok::Number(n) => {
                    let positive = !n.starts_with('0') && n.parse::<u64>().is_ok();
                    if !positive {
                        return Err(err(size.at, SyntaxReason::BadArraySize { found: n.into() }));
                    }
                    self.bump();
                }
                Tok::CloseBracket => {}
                _ => return Err(self.unexpected(size, Expected::ArraySize)),
            }
            let close = self.peek();
            if close.tok != Tok::CloseBracket {
                return Err(self.unexpected(close, Expected::CloseBracket));
            }
            self.bump();
            if self.peek().tok == Tok::OpenBracket {
                return Err(err(self.peek().at, SyntaxReason::MultiDimensional));
            }
            if by_value && ty.kind == TypeKind::Void {
                return Err(err(open.at, SyntaxReason::ArrayOfVoid));
            }
            if by_value && incomplete(&ty) {
                return Err(err(
                    open.at,
                    SyntaxReason::ArrayOfIncomplete { element: ty.name },
                ));
            }
            // C adjusts an array parameter to a pointer to its element (C11 6.7.6.3p7).
            ty = pointer(ty, &[]);
        } else if by_value && ty.kind == TypeKind::Void {
            let at = void_at.unwrap_or(t.at);
            if name.is_some() {
                return Err(err(at, SyntaxReason::VoidNamed));
            }
            return Ok(Parsed::Void { at, qualified });
        }
        Ok(Parsed::Param(Param {
            name,
            ty,
            location: Location::default(),
        }))
    }
}
