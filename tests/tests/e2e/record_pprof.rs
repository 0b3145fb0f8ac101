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

/// A pprof duration (`499.0ms`, `1.25s`, `850us`) in milliseconds.
fn millis(d: &str) -> f64 {
    let (n, scale) = if let Some(n) = d.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = d.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = d.strip_suffix('s') {
        (n, 1000.0)
    } else {
        panic!("not a pprof duration: {d:?}")
    };
    n.parse::<f64>()
        .unwrap_or_else(|_| panic!("not a pprof duration: {d:?}"))
        * scale
}

/// `go tool pprof -tags`: per tag key, its total (ms) and each value's time (ms).
type Tags = BTreeMap<String, (f64, BTreeMap<String, f64>)>;

fn pprof_tags(go: &str, profile: &Path) -> (Tags, String) {
    let cache = temp_file("record-pprof", "gocache-tags");
    let mut cmd = Command::new(go);
    cmd.args(["tool", "pprof", "-tags"])
        .arg(profile)
        .env("GOCACHE", &cache)
        .env("HOME", std::env::temp_dir());
    let out = run_command(&mut cmd, Duration::from_secs(120));
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "go tool pprof -tags failed:\n{stdout}"
    );
    let _ = fs::remove_dir_all(cache);
    // ` KEY: Total 499.0ms` then `  372.7ms (74.70%): VALUE` lines.
    let mut tags = Tags::new();
    let mut key = None;
    for line in stdout.lines() {
        if let Some((k, total)) = line.trim().split_once(": Total ") {
            key = Some(k.to_string());
            tags.insert(k.to_string(), (millis(total.trim()), BTreeMap::new()));
        } else if let (Some(k), Some((time, value))) = (&key, line.trim().split_once(' ')) {
            let value = value.rsplit_once("): ").map_or(value, |(_, v)| v);
            if let Some(entry) = tags.get_mut(k) {
                entry.1.insert(value.to_string(), millis(time));
            }
        }
    }
    (tags, stdout)
}

#[test]
fn without_with_args_pprof_carries_the_hooked_arguments_as_labels() {
    let pb = temp_file("record-pprof", "labels.pb.gz");
    let txt = temp_file("record-pprof", "labels.txt");
    let exe = profsplit();
    record_ok(&[
        "--rate",
        "499",
        "--func",
        "apply_entry",
        "-o",
        pb.to_str().unwrap(),
        "-o",
        txt.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
        "accounts",
        "2",
    ]);
    // The names stay plain (no --with-args).
    let stacks = collapsed(&txt);
    let hooked = count(&stacks, |f| f == "apply_entry");
    assert!(hooked > 0, "{stacks:?}");
    assert_eq!(count(&stacks, |f| f.contains('(')), 0, "{stacks:?}");
    let Some(go) = go() else {
        eprintln!("skipped the pprof check: no `go` (scripts/setup.sh installs golang-go)");
        return;
    };
    let (tags, shown) = pprof_tags(go, &pb);
    // Every sample under apply_entry is labelled with its account: the label's
    // total is the time of those samples (a period of 499 Hz each).
    let (total, accounts) = tags
        .get("apply_entry.account")
        .unwrap_or_else(|| panic!("no apply_entry.account label:\n{shown}"));
    let period = (1_000_000_000 / 499) as f64 / 1e6;
    let want = hooked as f64 * period;
    // pprof prints a time of a second or more to 0.1 s (`Total 1.8s`), below
    // that to 0.1 ms: the comparison allows for the rounding of what it read
    // (the kernel sampler's 499 Hz of one busy thread for 2 s passes 1 s).
    let rounding = if *total >= 1000.0 { 50.0 } else { 0.05 };
    // At most the first sample goes unlabelled, if the annotated sample its
    // parameter names come from was lost.
    assert!(
        *total <= want + rounding + 0.1 && *total >= want - period - rounding - 0.1,
        "labelled {total} ms, the collapsed stacks {want} ms:\n{shown}"
    );
    // profsplit.c's three accounts, 1003 doing 7 of every 10 units of work.
    assert_eq!(
        accounts.keys().collect::<Vec<_>>(),
        ["1001", "1002", "1003"],
        "{shown}"
    );
    let top = accounts.iter().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
    assert_eq!(top, "1003", "{shown}");
    assert!(tags.contains_key("apply_entry.amount"), "{shown}");
    let _ = fs::remove_file(pb);
    let _ = fs::remove_file(txt);
}
