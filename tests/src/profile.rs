//! `argstash record` helpers shared by the profiler's test binaries: run the
//! command, read collapsed stacks, and read the summary line.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::{build, Variant};

/// Collapsed stacks: each stack's frames, root first, and its sample count.
pub type Stacks = Vec<(Vec<String>, u64)>;

/// A file under the temp dir named after this process, `subject` and `name`.
pub fn temp_file(subject: &str, name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("argstash-{subject}-{}-{name}", std::process::id()))
}

/// The `profsplit` fixture (optimised, with DWARF).
pub fn profsplit() -> PathBuf {
    build("profsplit", Variant::O2G)
}

/// Bytes as text (lossy).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `argstash record ARGS` to completion (at most [`crate::RUN_TIMEOUT`]).
pub fn record(args: &[&str]) -> Output {
    crate::run(&[&["record"], args].concat())
}

/// [`record`], which must succeed.
#[track_caller]
pub fn record_ok(args: &[&str]) -> Output {
    let args = [&["record"], args].concat();
    let out = crate::run(&args);
    assert!(
        out.status.success(),
        "{}",
        crate::cli::describe(&args, &out)
    );
    out
}

/// Collapsed stacks: frames root first, and the count.
pub fn collapsed(path: &Path) -> Stacks {
    let body = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    body.lines()
        .map(|l| {
            let (stack, n) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad line {l:?}"));
            let frames = stack.split(';').map(str::to_string).collect();
            (
                frames,
                n.parse().unwrap_or_else(|_| panic!("bad count in {l:?}")),
            )
        })
        .collect()
}

/// Samples whose stack has a frame for which `pred` holds.
pub fn count(stacks: &[(Vec<String>, u64)], pred: impl Fn(&str) -> bool) -> u64 {
    stacks
        .iter()
        .filter(|(s, _)| s.iter().any(|f| pred(f)))
        .map(|(_, n)| n)
        .sum()
}

/// `name=N` fields of the fixture's result line starting with `tag`.
pub fn measured(stdout: &str, tag: &str) -> Vec<(String, f64)> {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(tag))
        .unwrap_or_else(|| panic!("no {tag:?} line in the fixture's output:\n{stdout}"));
    line.split_whitespace()
        .skip(1)
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().expect("a number")))
        .collect()
}

/// The number before `word` in the summary line (`594 samples of 2 threads (2 seen)`).
pub fn summary_number(stderr: &str, word: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("argstash record:"))
        .unwrap_or_else(|| panic!("no summary in:\n{stderr}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| w.trim_start_matches('(') == word)
        .unwrap_or_else(|| panic!("no {word:?} in {line}"));
    words[at - 1]
        .trim_start_matches('(')
        .parse()
        .unwrap_or_else(|_| panic!("no number before {word:?} in {line}"))
}
