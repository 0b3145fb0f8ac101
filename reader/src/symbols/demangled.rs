//! Finding functions by the name their language writes: a C++ qualified name with
//! or without its parameter list (`ns::Parser::parse`, `parse(long, long)`), a Rust
//! path without its hash (`crashy::parse_record`, legacy or v0 mangling).
//!
//! A query is split at its first `(` outside `<...>` into a path and a parameter
//! list; the list (with any trailing qualifier such as `const`) must equal the
//! demangled one, and the path must equal the demangled path or be a suffix of it
//! that starts at a `::`. Whitespace is ignored on both sides, so `parse(long,long)`
//! finds `parse(long, long)`. Both parameter lists are brought to one spelling
//! first ([`canonical_params`]), so the common equivalent ways to write a type
//! match the demangler's: `const char *` is `char const*`, `unsigned long int` is
//! `unsigned long`, `unsigned` is `unsigned int`, `(void)` is `()`.

use std::fmt;

/// A function symbol's demangled names, kept by its module once computed.
#[derive(Debug, Clone)]
pub(crate) struct Demangled {
    /// Index of the symbol in the module's table.
    pub index: usize,
    /// The path without parameters or hash (`ns::Parser::parse`, `crashy::parse_record`).
    pub path: String,
    /// The C++ name with its parameter list (`ns::Parser::parse(long, long)`).
    pub full: Option<String>,
    /// `path` without whitespace.
    path_key: String,
    /// `path_key` without its generic (template) arguments, when it has some
    /// (`crashy::sum` of `crashy::sum::<u32>`, `ns::twice` of `ns::twice<int>`).
    bare_key: Option<String>,
    /// What follows the path in `full` (`(long,long)`, `()const`), without whitespace.
    params_key: Option<String>,
}

impl Demangled {
    /// The demangled names of symbol `index` called `mangled`, if it is a C++ or Rust name.
    pub fn new(index: usize, mangled: &str) -> Option<Demangled> {
        let (path, full) = demangle_parts(mangled)?;
        let path_key = squeeze(&path);
        let params_key = full.as_deref().and_then(|f| {
            let params = f
                .strip_prefix(path.as_str())
                .or_else(|| params_start(f).map(|i| &f[i..]))?;
            Some(canonical_params(params))
        });
        Some(Demangled {
            index,
            path,
            full,
            bare_key: without_generic_args(&path_key),
            path_key,
            params_key,
        })
    }

    /// How well `q` names this function, if it does.
    pub fn matches(&self, q: &Query) -> Option<Tier> {
        if let Some(params) = &q.params_key {
            if self.params_key.as_ref() != Some(params) {
                return None;
            }
        }
        let suffix = |key: &str| {
            key.strip_suffix(q.path_key.as_str())
                .is_some_and(|head| head.ends_with("::"))
        };
        if self.path_key == q.path_key {
            Some(Tier::Path)
        } else if suffix(&self.path_key) {
            Some(Tier::Suffix)
        } else if q.path_key.contains('<') {
            None
        } else {
            // A name without generic arguments names every instance.
            let bare = self.bare_key.as_deref()?;
            if bare == q.path_key {
                Some(Tier::BarePath)
            } else if suffix(bare) {
                Some(Tier::BareSuffix)
            } else {
                None
            }
        }
    }

    /// True when `o` has the same path.
    pub fn same_path(&self, o: &Demangled) -> bool {
        self.path_key == o.path_key
    }

    /// True when `o` has the same path and parameter list (C++ only).
    pub fn same_full(&self, o: &Demangled) -> bool {
        self.params_key.is_some() && self.same_path(o) && self.params_key == o.params_key
    }

    /// The name shown for this function: with its parameter list when it has one.
    pub fn shown(&self) -> &str {
        self.full.as_deref().unwrap_or(&self.path)
    }
}

/// How a query matched a demangled name; the better (smaller) tier wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Tier {
    /// The whole path.
    Path,
    /// A suffix of the path starting after a `::`.
    Suffix,
    /// The whole path without its generic arguments (`crashy::sum` for
    /// `crashy::sum::<u32>`).
    BarePath,
    /// A suffix of the path without its generic arguments.
    BareSuffix,
}

/// `key` (a path without whitespace) without the generic or template argument
/// lists that follow a name (`sum::<u32>`, `twice<int>`, `vector<int>::at`);
/// `None` when it has none. A `<` that starts the path or follows `::` without
/// a name (`<Foo as Parse>::parse`) opens no argument list and stays, as do
/// operators' names.
fn without_generic_args(key: &str) -> Option<String> {
    if !key.contains('<') || key.contains("operator") {
        return None;
    }
    let mut out = String::with_capacity(key.len());
    let mut depth = 0usize;
    let mut removed = false;
    let mut prev = None;
    for ch in key.chars() {
        if depth > 0 {
            match ch {
                '<' => depth += 1,
                '>' => depth -= 1,
                _ => {}
            }
            continue;
        }
        let after_name = prev.is_some_and(|p: char| p.is_alphanumeric() || p == '_')
            || (out.ends_with("::") && out.len() > 2 && {
                let head = &out[..out.len() - 2];
                head.ends_with(|p: char| p.is_alphanumeric() || p == '_' || p == '>')
            });
        if ch == '<' && after_name {
            depth = 1;
            removed = true;
            continue;
        }
        out.push(ch);
        prev = Some(ch);
    }
    if !removed || depth != 0 {
        return None;
    }
    let out = out.replace("::::", "::");
    Some(out.strip_suffix("::").unwrap_or(&out).to_string())
}

/// A name as the user wrote it, split into path and parameter list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Query {
    /// The path without whitespace and without a leading `::`.
    path_key: String,
    /// The parameter list from its `(` on, as [`canonical_params`] spells it.
    params_key: Option<String>,
}

/// Why a name cannot be a demangled function name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameProblem {
    /// Nothing before the parameter list.
    #[error("there is no name before the parameter list")]
    NoPath,
    /// A `::` with nothing on one side (`ns::`, `a::::b`).
    #[error("`::` must separate two names")]
    EmptyComponent,
    /// Brackets that do not pair up.
    #[error("`{open}` and `{close}` do not pair up")]
    Unbalanced {
        /// The opening bracket.
        open: char,
        /// The closing bracket.
        close: char,
    },
}

impl Query {
    /// Parses `text` (trimmed, not empty) as a demangled name.
    pub fn parse(text: &str) -> Result<Query, NameProblem> {
        let split = params_start(text);
        let (path, params) = match split {
            Some(i) => (&text[..i], Some(&text[i..])),
            None => (text, None),
        };
        let path = path.trim();
        let path = path.strip_prefix("::").unwrap_or(path);
        if path.is_empty() {
            return Err(NameProblem::NoPath);
        }
        if !path.contains("operator") && path.split("::").any(|c| c.trim().is_empty()) {
            return Err(NameProblem::EmptyComponent);
        }
        if !path.contains("operator") && !balanced(path, '<', '>') {
            return Err(NameProblem::Unbalanced {
                open: '<',
                close: '>',
            });
        }
        if let Some(p) = params {
            if !balanced(p, '(', ')') {
                return Err(NameProblem::Unbalanced {
                    open: '(',
                    close: ')',
                });
            }
        }
        Ok(Query {
            path_key: squeeze(path),
            params_key: params.map(canonical_params),
        })
    }

    /// The same query without its parameter list (`parse` of `parse(int)`).
    pub fn without_params(&self) -> Option<Query> {
        self.params_key.as_ref()?;
        Some(Query {
            path_key: self.path_key.clone(),
            params_key: None,
        })
    }
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path_key)?;
        if let Some(p) = &self.params_key {
            f.write_str(p)?;
        }
        Ok(())
    }
}

/// Byte offset of the `(` that opens the parameter list: the first one outside
/// `<...>` and not part of an operator's name (`operator()`, `operator<`).
fn params_start(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut skip_to = 0;
    for (i, ch) in text.char_indices() {
        if i < skip_to {
            continue;
        }
        if let Some(rest) = text[i..].strip_prefix("operator") {
            let symbol = rest.trim_start();
            let after = text.len() - symbol.len();
            skip_to = if symbol.starts_with("()") {
                after + 2
            } else {
                after
                    + symbol
                        .find(|c: char| !"<>=!+-*/%^&|~[],".contains(c))
                        .unwrap_or(symbol.len())
            };
            continue;
        }
        match ch {
            '<' => depth += 1,
            '>' => depth = depth.saturating_sub(1),
            '(' if depth == 0 => return Some(i),
            _ => {}
        }
    }
    None
}

/// What reads as a name in a malformed one: its path before the parameter list,
/// cut before an unpaired `<` or `>` and a stray `(` or `)`, without empty `::`
/// components (`parse` of `parse(long`, `ns::Parser` of `ns::Parser::`,
/// `ns::twice` of `ns::twice<int`); `None` when nothing readable is left.
pub(crate) fn readable_part(text: &str) -> Option<Query> {
    let text = text.trim();
    let mut path = params_start(text).map_or(text, |i| &text[..i]);
    if !balanced(path, '<', '>') {
        path = path.find(['<', '>']).map_or(path, |i| &path[..i]);
    }
    path = path.find(['(', ')']).map_or(path, |i| &path[..i]);
    let joined = path
        .split("::")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect::<Vec<_>>()
        .join("::");
    Query::parse(&joined).ok()
}

/// True when every `close` in `text` pairs with an earlier `open`, and all are closed.
fn balanced(text: &str, open: char, close: char) -> bool {
    let mut depth = 0usize;
    for ch in text.chars() {
        if ch == open {
            depth += 1;
        } else if ch == close {
            let Some(d) = depth.checked_sub(1) else {
                return false;
            };
            depth = d;
        }
    }
    depth == 0
}

/// One token of a parameter list: a word (`unsigned`, `std`, `4ul`) or one
/// punctuation mark (`*`, `::`, `<`, `...`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok<'a> {
    Word(&'a str),
    Punct(&'a str),
}

impl Tok<'_> {
    fn is(&self, text: &str) -> bool {
        matches!(self, Tok::Word(w) | Tok::Punct(w) if *w == text)
    }

    fn is_cv(&self) -> bool {
        self.is("const") || self.is("volatile")
    }

    /// A keyword of a built-in arithmetic type that combines with others
    /// (`unsigned long int`), or a cv-qualifier inside such a run.
    fn is_builtin_part(&self) -> bool {
        matches!(self, Tok::Word(w) if INT_WORDS.contains(w)) || self.is_cv()
    }
}

/// Words that combine into one built-in type in any order (`long unsigned int`).
const INT_WORDS: &[&str] = &[
    "signed", "unsigned", "short", "long", "int", "char", "double", "__int128",
];

/// Splits a parameter list into tokens; whitespace only separates them.
fn tokens(text: &str) -> Vec<Tok<'_>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c.is_whitespace() {
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let word_len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
            .unwrap_or(rest.len());
        let len = if word_len > 0 {
            word_len
        } else if rest.starts_with("...") {
            3
        } else if rest.starts_with("::") {
            2
        } else {
            c.len_utf8()
        };
        let (tok, tail) = rest.split_at(len);
        out.push(if word_len > 0 {
            Tok::Word(tok)
        } else {
            Tok::Punct(tok)
        });
        rest = tail;
    }
    out
}

/// A parameter list (`(char const*, unsigned long) const`) in one spelling of
/// its equivalent spellings, the one the demangler uses: cv-qualifiers after
/// the type they qualify (`const char *` is `char const*`), built-in types by
/// their shortest name (`long int` and `signed long` are `long`, `unsigned` is
/// `unsigned int`, `short int` is `short`), `const volatile` in that order,
/// `(void)` as `()`, and one space only between two words. Template arguments
/// and the parameters of function types inside are spelled the same way.
pub(crate) fn canonical_params(text: &str) -> String {
    let toks = tokens(text);
    let toks = canonical_seq(&toks);
    let mut out = String::with_capacity(text.len());
    let mut prev_word = false;
    for t in &toks {
        let (word, s) = match t {
            Tok::Word(w) => (true, *w),
            Tok::Punct(p) => (false, *p),
        };
        if word && prev_word {
            out.push(' ');
        }
        out.push_str(s);
        prev_word = word;
    }
    out
}

/// The closing bracket of `open`, for the brackets that group tokens.
fn closing(open: &str) -> Option<&'static str> {
    match open {
        "(" => Some(")"),
        "<" => Some(">"),
        "[" => Some("]"),
        _ => None,
    }
}

/// Index just past the bracket that closes the group opened at `toks[at]`
/// (the end when it is never closed).
fn group_end(toks: &[Tok<'_>], at: usize) -> usize {
    let mut stack: Vec<&str> = Vec::new();
    for (i, t) in toks.iter().enumerate().skip(at) {
        if let Tok::Punct(p) = t {
            if let Some(c) = closing(p) {
                stack.push(c);
            } else if stack.last() == Some(p) {
                stack.pop();
                if stack.is_empty() {
                    return i + 1;
                }
            }
        }
    }
    toks.len()
}

/// [`canonical_params`] on tokens: each comma-separated item on its own, the
/// insides of brackets first.
fn canonical_seq<'a>(toks: &[Tok<'a>]) -> Vec<Tok<'a>> {
    let mut out = Vec::with_capacity(toks.len());
    let mut item: Vec<Tok<'a>> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Punct(",") => {
                out.extend(canonical_item(std::mem::take(&mut item)));
                out.push(toks[i].clone());
                i += 1;
            }
            Tok::Punct(p) if closing(p).is_some() => {
                let end = group_end(toks, i);
                let close = closing(p).filter(|c| end > i + 1 && toks[end - 1].is(c));
                let inner_end = if close.is_some() { end - 1 } else { end };
                let inner = canonical_seq(&toks[i + 1..inner_end]);
                item.push(toks[i].clone());
                // `(void)` is `()`; `<void>` stays a template argument.
                if !(*p == "(" && inner == [Tok::Word("void")]) {
                    item.extend(inner);
                }
                if close.is_some() {
                    item.push(toks[end - 1].clone());
                }
                i = end;
            }
            t => {
                item.push(t.clone());
                i += 1;
            }
        }
    }
    out.extend(canonical_item(item));
    out
}

/// One type (or a qualifier list such as `const &` after the parameters), its
/// brackets' insides already canonical: built-in type runs in one spelling,
/// and leading cv-qualifiers moved after the type name they qualify.
fn canonical_item(toks: Vec<Tok<'_>>) -> Vec<Tok<'_>> {
    let mut out: Vec<Tok<'_>> = Vec::with_capacity(toks.len());
    let mut i = 0;
    while i < toks.len() {
        if !toks[i].is_builtin_part() {
            out.push(toks[i].clone());
            i += 1;
            continue;
        }
        let run_end = toks[i..]
            .iter()
            .position(|t| !t.is_builtin_part())
            .map_or(toks.len(), |n| i + n);
        let run = &toks[i..run_end];
        let cv: Vec<Tok<'_>> = ["const", "volatile"]
            .into_iter()
            .filter(|q| run.iter().any(|t| t.is(q)))
            .map(Tok::Word)
            .collect();
        let builtin = builtin_spelling(run);
        if builtin.is_empty() {
            // Only qualifiers: before a named type (`const std::string&`) they go
            // after it; elsewhere (`* const`, `) const`) they stay, ordered.
            let name_end = type_name_end(&toks, run_end);
            if i == 0 && name_end > run_end {
                out.extend(toks[run_end..name_end].iter().cloned());
                out.extend(cv);
                i = name_end;
                continue;
            }
            out.extend(cv);
        } else {
            out.extend(builtin.into_iter().map(Tok::Word));
            out.extend(cv);
        }
        i = run_end;
    }
    out
}

/// The end of the (possibly qualified, possibly templated) type name that
/// starts at `toks[at]`: `ns::Foo<int>::Bar`; `at` when there is none there.
fn type_name_end(toks: &[Tok<'_>], at: usize) -> usize {
    let mut i = at;
    if toks.get(i).is_some_and(|t| t.is("::")) {
        i += 1;
    }
    loop {
        match toks.get(i) {
            Some(Tok::Word(w)) if !matches!(*w, "const" | "volatile") => i += 1,
            _ => return at,
        }
        if toks.get(i).is_some_and(|t| t.is("<")) {
            i = group_end(toks, i);
        }
        if toks.get(i).is_some_and(|t| t.is("::")) {
            i += 1;
        } else {
            return i;
        }
    }
}

/// The built-in type a run of type keywords spells (without its cv-qualifiers),
/// as the demangler writes it; empty when the run has no type keyword.
fn builtin_spelling(run: &[Tok<'_>]) -> Vec<&'static str> {
    let count = |w: &str| run.iter().filter(|t| t.is(w)).count();
    let (unsigned, signed) = (count("unsigned") > 0, count("signed") > 0);
    let (short, long) = (count("short") > 0, count("long"));
    if count("char") > 0 {
        return match (unsigned, signed) {
            (true, _) => vec!["unsigned", "char"],
            (_, true) => vec!["signed", "char"],
            _ => vec!["char"],
        };
    }
    if count("__int128") > 0 {
        return if unsigned {
            vec!["unsigned", "__int128"]
        } else {
            vec!["__int128"]
        };
    }
    if count("double") > 0 {
        return if long > 0 {
            vec!["long", "double"]
        } else {
            vec!["double"]
        };
    }
    if !unsigned && !signed && !short && long == 0 && count("int") == 0 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(3);
    if unsigned {
        out.push("unsigned");
    }
    match (short, long) {
        (true, _) => out.push("short"),
        (_, 0) => out.push("int"),
        (_, 1) => out.push("long"),
        _ => out.extend(["long", "long"]),
    }
    out
}

/// `text` without whitespace.
fn squeeze(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

/// A function's name as argstash shows a hook's to a person (`list`, `bt`): a C++
/// name demangled with its parameter list, a Rust path without its hash (both are
/// what `--func` takes), any other name as it is.
pub fn shown_name(name: &str) -> String {
    match demangle_parts(name) {
        Some((_, Some(full))) => full,
        Some((path, None)) => path,
        None => name.to_string(),
    }
}

/// The demangled path and, for C++, the name with its parameter list; `None` when
/// `mangled` is neither a C++ nor a Rust symbol name.
pub fn demangle_parts(mangled: &str) -> Option<(String, Option<String>)> {
    if !mangled.starts_with("_Z") && !mangled.starts_with("_R") {
        return None;
    }
    if let Ok(r) = rustc_demangle::try_demangle(mangled) {
        return Some((format!("{r:#}"), None));
    }
    let sym = cpp_demangle::Symbol::new(mangled).ok()?;
    let bare = cpp_demangle::DemangleOptions::new().no_return_type();
    let path = sym.demangle_with_options(&bare.no_params()).ok()?;
    let full = sym.demangle_with_options(&bare).ok();
    // Special names (`typeinfo for X`, `vtable for X`) are no functions to match.
    if path.contains(' ') && !path.contains("::") && !path.contains('<') {
        return None;
    }
    Some((path, full))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(mangled: &str, q: &str) -> Option<Tier> {
        Demangled::new(0, mangled)?.matches(&Query::parse(q).ok()?)
    }

    #[test]
    fn cpp_names_match_by_path_suffix_and_parameters() {
        let parse_ll = "_ZN2ns6Parser5parseEll";
        assert_eq!(m(parse_ll, "ns::Parser::parse"), Some(Tier::Path));
        assert_eq!(m(parse_ll, "::ns::Parser::parse"), Some(Tier::Path));
        assert_eq!(m(parse_ll, "Parser::parse"), Some(Tier::Suffix));
        assert_eq!(m(parse_ll, "parse"), Some(Tier::Suffix));
        assert_eq!(m(parse_ll, "parse(long,long)"), Some(Tier::Suffix));
        assert_eq!(
            m(parse_ll, "ns::Parser::parse(long, long)"),
            Some(Tier::Path)
        );
        assert_eq!(m(parse_ll, "parse(int)"), None);
        assert_eq!(m(parse_ll, "arse"), None);
        assert_eq!(m(parse_ll, "s::Parser::parse"), None);
    }

    #[test]
    fn rust_paths_match_without_hash_in_both_manglings() {
        let legacy = "_ZN6crashy12parse_record17h0123456789abcdefE";
        assert_eq!(m(legacy, "crashy::parse_record"), Some(Tier::Path));
        assert_eq!(m(legacy, "parse_record"), Some(Tier::Suffix));
        assert_eq!(m(legacy, "parse_record()"), None);
        let v0 = "_RNvCs1234_6crashy12parse_record";
        assert_eq!(m(v0, "crashy::parse_record"), Some(Tier::Path));
        assert_eq!(m(v0, "parse_record"), Some(Tier::Suffix));
    }

    #[test]
    fn malformed_names_are_refused_with_the_reason() {
        assert_eq!(Query::parse("ns::"), Err(NameProblem::EmptyComponent));
        assert_eq!(Query::parse("a::::b"), Err(NameProblem::EmptyComponent));
        assert_eq!(Query::parse("(int)"), Err(NameProblem::NoPath));
        assert_eq!(
            Query::parse("f<int"),
            Err(NameProblem::Unbalanced {
                open: '<',
                close: '>'
            })
        );
        assert_eq!(
            Query::parse("f(int))"),
            Err(NameProblem::Unbalanced {
                open: '(',
                close: ')'
            })
        );
        // Operators' names are not brackets.
        let lt = "_ZN2nsltERKNS_6ParserES2_";
        assert_eq!(
            m(lt, "ns::operator<(ns::Parser const&, ns::Parser const&)"),
            Some(Tier::Path)
        );
        assert_eq!(m(lt, "operator<"), Some(Tier::Suffix));
        let call = "_ZN2ns1FclEi";
        assert_eq!(m(call, "ns::F::operator()(int)"), Some(Tier::Path));
        assert_eq!(m(call, "F::operator()"), Some(Tier::Suffix));
        // `(` inside template arguments does not start the parameter list.
        let q = Query::parse("f<void (*)(int)>(int)").unwrap();
        assert_eq!(q.to_string(), "f<void(*)(int)>(int)");
    }

    #[test]
    fn equivalent_spellings_of_a_parameter_list_are_one() {
        let c = canonical_params;
        assert_eq!(c("(const char *)"), "(char const*)");
        assert_eq!(c("( char  const * )"), "(char const*)");
        assert_eq!(c("(const char*) const"), "(char const*)const");
        assert_eq!(c("(unsigned long int, long int)"), "(unsigned long,long)");
        assert_eq!(
            c("(long unsigned, unsigned)"),
            "(unsigned long,unsigned int)"
        );
        assert_eq!(
            c("(signed, short int, signed long long int)"),
            "(int,short,long long)"
        );
        assert_eq!(
            c("(signed char, unsigned char, char)"),
            "(signed char,unsigned char,char)"
        );
        assert_eq!(
            c("(long double, unsigned __int128)"),
            "(long double,unsigned __int128)"
        );
        assert_eq!(c("(void)"), "()");
        assert_eq!(c("(const std::string &)"), "(std::string const&)");
        assert_eq!(
            c("(const ::ns::Foo<int>::Bar *const*)"),
            "(::ns::Foo<int>::Bar const*const*)"
        );
        assert_eq!(c("(volatile const int&&)"), "(int const volatile&&)");
        assert_eq!(
            c("(std::vector<const char*, std::allocator<const char *> > const&)"),
            "(std::vector<char const*,std::allocator<char const*>>const&)"
        );
        assert_eq!(
            c("(void (*)(const void*, unsigned))"),
            "(void(*)(void const*,unsigned int))"
        );
        assert_eq!(c("(char const*, ...)"), "(char const*,...)");
        assert_eq!(c("(std::array<int, 4ul>)"), "(std::array<int,4ul>)");
    }

    #[test]
    fn people_s_spellings_find_the_demangled_function() {
        // std::_Hash_bytes(void const*, unsigned long, unsigned long)
        let hash = "_ZSt11_Hash_bytesPKvmm";
        assert_eq!(
            m(
                hash,
                "std::_Hash_bytes(const void *, unsigned long int, unsigned long int)"
            ),
            Some(Tier::Path)
        );
        assert_eq!(
            m(
                hash,
                "_Hash_bytes(const void*, unsigned long, unsigned long)"
            ),
            Some(Tier::Suffix)
        );
        assert_eq!(
            m(hash, "_Hash_bytes(const void*, unsigned, unsigned long)"),
            None
        );
        // std::__throw_out_of_range_fmt(char const*, ...)
        let fmt = "_ZSt24__throw_out_of_range_fmtPKcz";
        assert_eq!(
            m(fmt, "__throw_out_of_range_fmt(const char *, ...)"),
            Some(Tier::Suffix)
        );
        // basic_string<char>::compare(char const*) const
        let cmp = "_ZNKSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE7compareEPKc";
        assert_eq!(
            m(
                cmp,
                "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char>>::compare(const char *) const"
            ),
            Some(Tier::Path)
        );
        assert_eq!(m(cmp, "compare(const char*) const"), Some(Tier::Suffix));
        assert_eq!(
            m(cmp, "compare(const char*)"),
            None,
            "the const qualifier counts"
        );
        // std::chrono::_V2::steady_clock::now()
        let now = "_ZNSt6chrono3_V212steady_clock3nowEv";
        assert_eq!(m(now, "steady_clock::now(void)"), Some(Tier::Suffix));
        assert_eq!(
            m(now, "std::chrono::_V2::steady_clock::now()"),
            Some(Tier::Path)
        );
    }

    #[test]
    fn a_name_without_generic_arguments_names_every_instance() {
        assert_eq!(
            without_generic_args("crashy::sum::<u32>").as_deref(),
            Some("crashy::sum")
        );
        assert_eq!(
            without_generic_args("ns::twice<int>").as_deref(),
            Some("ns::twice")
        );
        assert_eq!(
            without_generic_args("std::vector<std::pair<int,int>>::at").as_deref(),
            Some("std::vector::at")
        );
        assert_eq!(
            without_generic_args("a::<T>::b::<U>").as_deref(),
            Some("a::b")
        );
        assert_eq!(
            without_generic_args("<crashy::Fooascrashy::Parse>::parse"),
            None
        );
        assert_eq!(without_generic_args("crashy::sum"), None);
        assert_eq!(without_generic_args("ns::operator<"), None);
        // C++ template instance: the exact form wins, the bare one still names it.
        let twice = "_ZN2ns5twiceIiEET_S1_";
        assert_eq!(m(twice, "ns::twice<int>"), Some(Tier::Path));
        assert_eq!(m(twice, "ns::twice"), Some(Tier::BarePath));
        assert_eq!(m(twice, "twice(int)"), Some(Tier::BareSuffix));
        assert_eq!(m(twice, "twice<long>"), None);
        assert!(Tier::Suffix < Tier::BarePath);
    }

    #[test]
    fn hostile_lists_do_not_panic_and_one_spelling_is_stable() {
        for text in [
            "(",
            ")",
            "((((",
            "(<<>>)",
            "(const)",
            "(const const volatile)",
            "(unsigned unsigned long long long)",
            "(é const*, ünsigned)",
            "(a<b(c>d)e]f[)",
            "(::)",
            "(...,...)",
            "(const ::)",
            "(const ns::<int>)",
            "() const &&",
            "(std::vector<const char *>::iterator const&, void (*)(void))",
        ] {
            let once = canonical_params(text);
            assert_eq!(canonical_params(&once), once, "{text}");
            let _ = Query::parse(&format!("f{text}"));
            let _ = without_generic_args(text);
        }
    }
}
