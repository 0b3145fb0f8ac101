//! Finding a function by name among modules: exact, versioned, demangled and
//! generic matches, and how to write a candidate so it names one function alone.

use super::demangled;
use super::demangled::{Demangled, Query};
use super::error::SymbolError;
use super::module::Module;
use super::suggest::suggestions;
use super::symbol::{Resolved, Symbol};
pub(super) fn resolved(m: &Module, s: &Symbol) -> Resolved {
    Resolved {
        name: s.name.clone(),
        module_path: m.path.clone(),
        addr: s.addr,
        size: s.size,
    }
}

pub(super) fn resolve_name(name: &str, modules: &[&Module]) -> Result<Resolved, SymbolError> {
    resolve_name_with(name, modules, true)
}

/// [`resolve_name`]; `suggest`: a person asks, so C++ and Rust names are also
/// matched demangled, and similar names are looked for when none matches (a pass
/// over every symbol of every module, for an error a person reads).
pub(super) fn resolve_name_with(
    name: &str,
    modules: &[&Module],
    suggest: bool,
) -> Result<Resolved, SymbolError> {
    let found: Vec<(&Module, &Symbol)> = modules
        .iter()
        .flat_map(|m| m.symbols_named(name).map(move |s| (*m, s)))
        .collect();
    match found.as_slice() {
        [] => {
            if let Some(m) = modules.iter().find(|m| m.is_ifunc(name)) {
                return Err(SymbolError::Ifunc {
                    name: name.to_string(),
                    module: m.path.clone(),
                    targets: Vec::new(),
                });
            }
            // Demangled names are for people: a program's lookup of a C name
            // (`__cxa_throw`) does not demangle every symbol when it is absent.
            if suggest {
                if let Some(found) = resolve_demangled(name, modules) {
                    return found;
                }
            }
            Err(SymbolError::NotFound {
                name: name.to_string(),
                suggestions: if suggest {
                    suggestions(name, modules)
                } else {
                    Vec::new()
                },
            })
        }
        [(_, s)] if s.size == 0 => Err(SymbolError::ZeroSize {
            name: s.name.clone(),
        }),
        [(m, s)] => Ok(resolved(m, s)),
        many => Err(SymbolError::Ambiguous {
            name: name.to_string(),
            candidates: many
                .iter()
                .map(|(m, s)| format!("{} in {} ({:#x})", s.name, m.path, s.addr))
                .collect(),
        }),
    }
}

/// How a name as written matches a function symbol's name ([`name_match`]); the
/// smaller the better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NameMatch {
    /// The symbol's own (mangled or C) name.
    Exact,
    /// The whole demangled path (`ns::Parser::parse`, `crashy::parse_record`).
    Path,
    /// A suffix of the demangled path after a `::` (`parse`, `Parser::parse`).
    Suffix,
}

/// How `written` (a name as the user wrote it) names the function symbol `symbol`,
/// by the rules [`ProcessSymbols::resolve`](crate::symbols::ProcessSymbols::resolve) uses; `None` when it does not.
pub fn name_match(written: &str, symbol: &str) -> Option<NameMatch> {
    if written == symbol {
        return Some(NameMatch::Exact);
    }
    let q = Query::parse(written).ok()?;
    match Demangled::new(0, symbol)?.matches(&q)? {
        demangled::Tier::Path => Some(NameMatch::Path),
        demangled::Tier::Suffix | demangled::Tier::BarePath | demangled::Tier::BareSuffix => {
            Some(NameMatch::Suffix)
        }
    }
}

/// The function(s) whose demangled name `name` is, in `modules`: `None` when none
/// is, else the one function or why there is not exactly one.
pub(super) fn resolve_demangled(
    name: &str,
    modules: &[&Module],
) -> Option<Result<Resolved, SymbolError>> {
    let q = match Query::parse(name) {
        Ok(q) => q,
        Err(problem) => {
            let read = demangled::readable_part(name);
            let found = read
                .as_ref()
                // `ns::call` of `ns::call<long (*)(long)`: a path without generic
                // arguments names every instance.
                .map(|r| demangled_matches(r, modules, Demangled::matches))
                .unwrap_or_default();
            let found = &found[..found.len().min(MAX_READ_AS_CANDIDATES)];
            return Some(Err(SymbolError::BadName {
                name: name.to_string(),
                problem,
                read_as: read.map(|r| r.to_string()),
                candidates: found.iter().map(|(m, d)| candidate_text(m, d)).collect(),
                spellings: found
                    .iter()
                    .map(|(m, d)| alone_spelling(m, d, modules))
                    .collect(),
            }));
        }
    };
    let found = demangled_matches(&q, modules, Demangled::matches);
    match found.as_slice() {
        [] => None,
        [(m, d)] => {
            let s = &m.symbols()[d.index];
            Some(if s.size == 0 {
                Err(SymbolError::ZeroSize {
                    name: s.name.clone(),
                })
            } else {
                Ok(resolved(m, s))
            })
        }
        many => Some(Err(SymbolError::AmbiguousName {
            name: name.to_string(),
            candidates: many.iter().map(|(m, d)| candidate_text(m, d)).collect(),
            spellings: many
                .iter()
                .map(|(m, d)| alone_spelling(m, d, modules))
                .collect(),
        })),
    }
}

/// How many functions a malformed name's readable part lists at most.
pub(super) const MAX_READ_AS_CANDIDATES: usize = 12;

/// The functions of `modules` that `q` names by `how` (e.g. [`Demangled::matches`]),
/// those of the best [`demangled::Tier`] only, one per function.
pub(super) fn demangled_matches<'a>(
    q: &Query,
    modules: &[&'a Module],
    how: fn(&Demangled, &Query) -> Option<demangled::Tier>,
) -> Vec<(&'a Module, &'a Demangled)> {
    let mut hits: Vec<(demangled::Tier, &Module, &Demangled)> = modules
        .iter()
        .flat_map(|m| {
            m.demangled()
                .iter()
                .filter_map(move |d| Some((how(d, q)?, *m, d)))
        })
        .collect();
    let Some(best) = hits.iter().map(|(tier, _, _)| *tier).min() else {
        return Vec::new();
    };
    hits.retain(|(tier, _, _)| *tier == best);
    distinct_functions(hits.into_iter().map(|(_, m, d)| (m, d)))
}

/// A candidate as an error lists it: `DEMANGLED in /path (0xADDR)`.
pub(super) fn candidate_text(m: &Module, d: &Demangled) -> String {
    format!(
        "{} in {} ({:#x})",
        d.shown(),
        m.path,
        m.symbols()[d.index].addr
    )
}

/// One entry per function (module and address): aliases at one address, such as
/// a C++ constructor's complete and base object symbols, count once.
pub(super) fn distinct_functions<'a>(
    found: impl Iterator<Item = (&'a Module, &'a Demangled)>,
) -> Vec<(&'a Module, &'a Demangled)> {
    let mut out: Vec<(&Module, &Demangled)> = Vec::new();
    for (m, d) in found {
        let addr = m.symbols()[d.index].addr;
        if !out
            .iter()
            .any(|(x, e)| std::ptr::eq(*x, m) && x.symbols()[e.index].addr == addr)
        {
            out.push((m, d));
        }
    }
    out
}

/// The shortest way to write the function `d` of `m` that names it alone among
/// `modules`: its demangled path, its name with parameter list, its mangled name,
/// or `MODULE!MANGLED`.
pub(super) fn alone_spelling(m: &Module, d: &Demangled, modules: &[&Module]) -> String {
    let count = |same: &dyn Fn(&Demangled) -> bool| {
        distinct_functions(modules.iter().flat_map(|x| {
            x.demangled()
                .iter()
                .filter(|e| same(e))
                .map(move |e| (*x, e))
        }))
        .len()
    };
    if count(&|e| e.same_path(d)) == 1 {
        return d.path.clone();
    }
    if let Some(full) = &d.full {
        if count(&|e| e.same_full(d)) == 1 {
            return full.clone();
        }
    }
    let mangled = &m.symbols()[d.index].name;
    let defining = modules
        .iter()
        .filter(|x| x.symbols_named(mangled).next().is_some())
        .count();
    if defining == 1 {
        mangled.clone()
    } else {
        format!("{}!{mangled}", m.file_name())
    }
}
