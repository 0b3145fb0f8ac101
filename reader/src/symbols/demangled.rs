//! Finding functions by the name their language writes: a C++ qualified name with
//! or without its parameter list (`ns::Parser::parse`, `parse(long, long)`), a Rust
//! path without its hash (`crashy::parse_record`, legacy or v0 mangling).
//!
//! A query is split at its first `(` outside `<...>` into a path and a parameter
//! list; the list (with any trailing qualifier such as `const`) must equal the
//! demangled one, and the path must equal the demangled path or be a suffix of it
//! that starts at a `::`. Whitespace is ignored on both sides, so `parse(long,long)`
//! finds `parse(long, long)`. Types are written as the demangler writes them
//! (`char const*`, not `const char *`).

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
    /// What follows the path in `full` (`(long,long)`, `()const`), without whitespace.
    params_key: Option<String>,
}

impl Demangled {
    /// The demangled names of symbol `index` called `mangled`, if it is a C++ or Rust name.
    pub fn new(index: usize, mangled: &str) -> Option<Demangled> {
        let (path, full) = demangle_parts(mangled)?;
        let path_key = squeeze(&path);
        let params_key = full.as_deref().and_then(|f| {
            let key = squeeze(f);
            key.strip_prefix(path_key.as_str()).map(str::to_string)
        });
        Some(Demangled {
            index,
            path,
            full,
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
        path_tier(&self.path_key, &q.path_key)
    }

    /// How well `q`, a path without parameter list, names this function's template:
    /// its path without the template arguments that end it (`ns::call` names
    /// `ns::call<long (*)(long)>`); `None` for a function that is no template.
    pub fn matches_template(&self, q: &Query) -> Option<Tier> {
        if q.params_key.is_some() {
            return None;
        }
        path_tier(without_template_args(&self.path_key)?, &q.path_key)
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

/// How the path `wanted` names the path `key` (both without whitespace).
fn path_tier(key: &str, wanted: &str) -> Option<Tier> {
    if key == wanted {
        Some(Tier::Path)
    } else if key
        .strip_suffix(wanted)
        .is_some_and(|head| head.ends_with("::"))
    {
        Some(Tier::Suffix)
    } else {
        None
    }
}

/// `key` without the `<...>` that ends it (`ns::call` of `ns::call<long(*)(long)>`).
fn without_template_args(key: &str) -> Option<&str> {
    let mut depth = 0usize;
    for (i, ch) in key.char_indices().rev() {
        match ch {
            '>' => depth += 1,
            '<' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(&key[..i]);
                }
            }
            _ if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

/// How a query matched a demangled name; the better (smaller) tier wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Tier {
    /// The whole path.
    Path,
    /// A suffix of the path starting after a `::`.
    Suffix,
}

/// A name as the user wrote it, split into path and parameter list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Query {
    /// The path without whitespace and without a leading `::`.
    path_key: String,
    /// The parameter list from its `(` on, without whitespace.
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
            params_key: params.map(squeeze),
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
}
