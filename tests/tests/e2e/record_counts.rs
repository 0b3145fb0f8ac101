//! End-to-end: the counts in `argstash record`'s summary, each with one meaning
//! (docs/guide/profiling.md), the same for both samplers. tailspin.c runs its work
//! in threads that come and go one after another (`tailspin SECS WAVES`): the
//! summary's "N samples of T threads (of S seen, at most M at once)" must give
//! N = the samples in the written profile, T = the threads that have samples
//! in it, S = every thread the process had during the recording (the fixture
//! says how many it made) and M = the most alive together (main and one worker).

use std::fs;

use argstash_tests::*;
use serde_json::Value;

/// The numbers of "N samples of T threads (of S seen, at most M at once)".
fn counts(stderr: &str) -> [u64; 4] {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("argstash record:"))
        .unwrap_or_else(|| panic!("no summary in:\n{stderr}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let before = |i: usize, w: &str| -> u64 {
        assert_eq!(words[i], w, "unexpected summary: {line}");
        words[i - 1]
            .trim_start_matches('(')
            .parse()
            .unwrap_or_else(|_| panic!("no number before {w:?} in {line}"))
    };
    // argstash record: N samples of T threads (of S seen, at most M at once)
    [
        before(3, "samples"),
        before(6, "threads"),
        before(9, "seen,"),
        before(13, "at"),
    ]
}

#[test]
fn summary_counts_mean_one_thing_each_with_either_sampler() {
    let exe = build("tailspin", Variant::O2G);
    let e = exe.to_str().unwrap();
    for sampler in ["ptrace", "kernel"] {
        let txt = temp_file("record-counts", &format!("{sampler}.txt"));
        let json = temp_file("record-counts", &format!("{sampler}.json"));
        let run = record_ok(&[
            "--sampler",
            sampler,
            "--rate",
            "199",
            "-o",
            txt.to_str().unwrap(),
            "-o",
            json.to_str().unwrap(),
            "--",
            e,
            "2",
            "4",
        ]);
        let stderr = text(&run.stderr);
        let stdout = text(&run.stdout);
        let made: u64 = stdout
            .lines()
            .find_map(|l| l.strip_prefix("threads "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no `threads N` line from the fixture:\n{stdout}"));
        let [samples, sampled, seen, at_once] = counts(&stderr);
        let stacks = collapsed(&txt);
        let in_file: u64 = stacks.iter().map(|(_, n)| n).sum();
        assert_eq!(samples, in_file, "{sampler}: samples in the file\n{stderr}");
        let doc: Value = serde_json::from_str(&fs::read_to_string(&json).unwrap()).unwrap();
        let with_samples = doc["profiles"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| !p["samples"].as_array().unwrap().is_empty())
            .count() as u64;
        assert_eq!(
            sampled, with_samples,
            "{sampler}: threads with samples\n{stderr}"
        );
        assert!(sampled >= 1 && sampled <= seen, "{sampler}: {stderr}");
        assert_eq!(
            seen, made,
            "{sampler}: every thread the fixture made\n{stderr}"
        );
        assert_eq!(
            at_once, 2,
            "{sampler}: main and one worker at a time\n{stderr}"
        );
        let _ = fs::remove_file(txt);
        let _ = fs::remove_file(json);
    }
}
