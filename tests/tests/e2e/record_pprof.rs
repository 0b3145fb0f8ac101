//! End-to-end: `argstash record -o FILE.pb.gz`, pprof's profile.proto, read by
//! pprof itself (`go tool pprof`, Debian's golang-go: scripts/setup.sh). One
//! recording is written both as pprof and as collapsed stacks (`-o` twice), and
//! every function's self-time share that pprof reports must be the share
//! argstash's own collapsed output gives it, hooked frames named with their
//! arguments (`--args`) included.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use argstash_tests::*;

/// `go`, when installed.
fn go() -> Option<&'static str> {
    Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
        .then_some("go")
}

/// Self-time shares in percent by function, from `go tool pprof -top`.
fn pprof_top(go: &str, profile: &Path) -> (BTreeMap<String, f64>, String) {
    let cache = temp_file("record-pprof", "gocache");
    let mut cmd = Command::new(go);
    cmd.args(["tool", "pprof", "-top", "-nodefraction=0"])
        .arg(profile)
        .env("GOCACHE", &cache)
        .env("HOME", std::env::temp_dir());
    let out = run_command(&mut cmd, Duration::from_secs(120));
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "go tool pprof failed:\n{stdout}\n{}",
        text(&out.stderr)
    );
    let _ = fs::remove_dir_all(cache);
    // `      flat  flat%   sum%        cum   cum%` then one row per function;
    // the name is the rest of the line (it may hold spaces: `f(a=1, b=2)`).
    let mut shares = BTreeMap::new();
    let mut rows = false;
    for line in stdout.lines() {
        if line.trim_start().starts_with("flat") {
            rows = true;
            continue;
        }
        if !rows {
            continue;
        }
        let mut rest = line.trim_start();
        let mut fields = Vec::new();
        for _ in 0..5 {
            let (field, tail) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            fields.push(field);
            rest = tail.trim_start();
        }
        let flat: f64 = fields[1]
            .trim_end_matches('%')
            .parse()
            .unwrap_or_else(|_| panic!("no flat% in {line:?}:\n{stdout}"));
        shares.insert(rest.to_string(), flat);
    }
    (shares, stdout)
}

/// Self-time shares in percent by leaf frame, from collapsed stacks.
fn collapsed_self(stacks: &Stacks) -> BTreeMap<String, f64> {
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    let mut by = BTreeMap::<String, u64>::new();
    for (s, n) in stacks {
        *by.entry(s.last().cloned().unwrap_or_default()).or_default() += n;
    }
    by.into_iter()
        .map(|(k, n)| (k, 100.0 * n as f64 / total as f64))
        .collect()
}

#[test]
fn pprof_reads_the_same_shares_as_the_collapsed_stacks_of_one_recording() {
    let pb = temp_file("record-pprof", "accounts.pb.gz");
    let txt = temp_file("record-pprof", "accounts.txt");
    let exe = profsplit();
    record_ok(&[
        "--rate",
        "499",
        "--func",
        "apply_entry",
        "--args",
        "account",
        "-o",
        pb.to_str().unwrap(),
        "-o",
        txt.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
        "accounts",
        "2",
    ]);
    let raw = fs::read(&pb).unwrap();
    assert_eq!(&raw[..2], &[0x1f, 0x8b], "{} is not gzip", pb.display());
    let ours = collapsed_self(&collapsed(&txt));
    let hooked: Vec<&String> = ours
        .keys()
        .filter(|k| k.starts_with("apply_entry(account="))
        .collect();
    assert_eq!(
        hooked.len(),
        3,
        "three accounts split apply_entry: {ours:?}"
    );
    let Some(go) = go() else {
        eprintln!("skipped the pprof check: no `go` (scripts/setup.sh installs golang-go)");
        return;
    };
    let (all, shown) = pprof_top(go, &pb);
    // Functions with self time (the callers show with 0 flat).
    let theirs: BTreeMap<String, f64> = all.into_iter().filter(|(_, s)| *s > 0.0).collect();
    // The same functions, hooked ones with their argument in the name, and
    // the same share each (pprof prints two decimals).
    assert_eq!(
        theirs.keys().collect::<Vec<_>>(),
        ours.keys().collect::<Vec<_>>(),
        "pprof:\n{shown}"
    );
    for (name, share) in &ours {
        let read = theirs[name];
        assert!(
            (read - share).abs() <= 0.006,
            "{name}: pprof says {read}%, the collapsed stacks {share:.3}%:\n{shown}"
        );
    }
    // The hottest account (amount 7 of 10) leads both.
    let top = |m: &BTreeMap<String, f64>| {
        m.iter()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(k, _)| k.clone())
    };
    assert_eq!(top(&theirs), top(&ours), "pprof:\n{shown}");
    assert_eq!(top(&ours).as_deref(), Some("apply_entry(account=1003)"));
    let _ = fs::remove_file(pb);
    let _ = fs::remove_file(txt);
}
