//! The lexer: a parameter list's text as tokens, each with its byte position.
//!
//! Whitespace separates tokens and is otherwise ignored. A character that starts
//! no token of the grammar becomes a [`Tok::Bad`] token, so the parser reports it
//! in reading order, where it stands.

/// What a token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tok<'a> {
    /// A word: a letter or `_`, then letters, digits and `_`.
    Word(&'a str),
    /// A digit, then letters, digits and `_` (`3`, `0x10`, `3x`).
    Number(&'a str),
    /// `(`.
    Open,
    /// `)`.
    Close,
    /// `,`.
    Comma,
    /// `*`.
    Star,
    /// `[`.
    OpenBracket,
    /// `]`.
    CloseBracket,
    /// `...`.
    Ellipsis,
    /// A character no token starts with (`;`, `{`, `.`, a non-ASCII letter).
    Bad(char),
    /// The end of the text.
    End,
}

/// A token and the byte position where it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Token<'a> {
    /// What it is.
    pub tok: Tok<'a>,
    /// Byte offset of its first character in the text.
    pub at: usize,
}

impl Tok<'_> {
    /// The token as written (empty for the end).
    pub fn text(&self) -> String {
        match self {
            Tok::Word(w) | Tok::Number(w) => (*w).to_string(),
            Tok::Open => "(".into(),
            Tok::Close => ")".into(),
            Tok::Comma => ",".into(),
            Tok::Star => "*".into(),
            Tok::OpenBracket => "[".into(),
            Tok::CloseBracket => "]".into(),
            Tok::Ellipsis => "...".into(),
            Tok::Bad(c) => c.to_string(),
            Tok::End => String::new(),
        }
    }
}

fn word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The tokens of `text[from..]` (positions relative to `text`), ending with [`Tok::End`].
pub(super) fn lex(text: &str, from: usize) -> Vec<Token<'_>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = from;
    while i < bytes.len() {
        let c = bytes[i];
        let at = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let tok = if c.is_ascii_alphabetic() || c == b'_' || c.is_ascii_digit() {
            while i < bytes.len() && word_char(bytes[i]) {
                i += 1;
            }
            let w = &text[at..i];
            out.push(Token {
                tok: if c.is_ascii_digit() {
                    Tok::Number(w)
                } else {
                    Tok::Word(w)
                },
                at,
            });
            continue;
        } else if text[i..].starts_with("...") {
            i += 2;
            Tok::Ellipsis
        } else {
            match c {
                b'(' => Tok::Open,
                b')' => Tok::Close,
                b',' => Tok::Comma,
                b'*' => Tok::Star,
                b'[' => Tok::OpenBracket,
                b']' => Tok::CloseBracket,
                _ => {
                    // Whole characters: `at` is a char boundary, the text is UTF-8.
                    let ch = text[at..].chars().next().unwrap_or('\u{fffd}');
                    i += ch.len_utf8();
                    out.push(Token {
                        tok: Tok::Bad(ch),
                        at,
                    });
                    continue;
                }
            }
        };
        i += 1;
        out.push(Token { tok, at });
    }
    out.push(Token {
        tok: Tok::End,
        at: bytes.len(),
    });
    out
}
