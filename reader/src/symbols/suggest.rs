//! Names close to one that matched nothing, for the error a person reads.

use super::demangled::Query;
use super::module::Module;

/// Most suggestions a [`SymbolError::NotFound`] carries.
pub(super) const MAX_SUGGESTIONS: usize = 5;
/// Up to [`MAX_SUGGESTIONS`] close names, rendered `NAME (in /path)`, closest first.
pub(super) fn suggestions(name: &str, modules: &[&Module]) -> Vec<String> {
    let limit = (name.chars().count() / 2).clamp(1, 3);
    let mut scored: Vec<(usize, &str, &str)> = Vec::new();
    // A C++ name whose path is right but whose parameter list names no function:
    // the functions of that path, with their lists as the demangler spells them.
    if let Some(path_only) = Query::parse(name).ok().and_then(|q| q.without_params()) {
        for m in modules {
            for d in m.demangled() {
                if d.full.is_some() && d.matches(&path_only).is_some() {
                    scored.push((0, d.shown(), &m.path));
                }
            }
        }
    }
    for m in modules {
        for s in m.symbols() {
            let distance = bounded_levenshtein(name, &s.name, limit);
            let substring = name.len() >= 3 && s.name.contains(name);
            let score = match distance {
                Some(d) => d,
                None if substring => limit + 1 + s.name.len().saturating_sub(name.len()),
                None => continue,
            };
            scored.push((score, &s.name, &m.path));
        }
    }
    // A C++ or Rust name is compared with the demangled paths too, with as many
    // `::` components as it has (`Parser::pars` with `Parser::parse` of
    // `ns::Parser::parse`).
    let bare = name.split('(').next().unwrap_or(name).trim();
    if bare.contains("::") {
        let parts = bare.matches("::").count() + 1;
        for m in modules {
            for d in m.demangled() {
                let tail = match d.path.rmatch_indices("::").nth(parts - 1) {
                    Some((i, _)) => &d.path[i + 2..],
                    None => d.path.as_str(),
                };
                if let Some(score) = bounded_levenshtein(bare, tail, limit) {
                    scored.push((score, d.shown(), &m.path));
                }
            }
        }
    }
    // A C++ or Rust name is compared with the demangled paths too.
    if name.contains("::") {
        for m in modules {
            for d in m.demangled() {
                if let Some(score) = bounded_levenshtein(name, &d.path, limit) {
                    scored.push((score, d.shown(), &m.path));
                }
            }
        }
    }
    scored.sort_unstable();
    scored.dedup();
    scored
        .into_iter()
        .take(MAX_SUGGESTIONS)
        .map(|(_, n, path)| format!("{n} (in {path})"))
        .collect()
}

/// Levenshtein distance between `a` and `b` (by chars), or `None` if above `limit`.
pub(super) fn bounded_levenshtein(a: &str, b: &str, limit: usize) -> Option<usize> {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > limit {
        return None;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        let mut row_min = cur[0];
        for (j, cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != cb);
            cur[j + 1] = substitute.min(prev[j + 1] + 1).min(cur[j] + 1);
            row_min = row_min.min(cur[j + 1]);
        }
        if row_min > limit {
            return None;
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev.last().copied().filter(|&d| d <= limit)
}
