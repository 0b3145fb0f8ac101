//! `argstash bt` on CPython 3.13, 3.14 and 3.15 processes 50 Python frames deep
//! (issue 22): the cold CLI, the warm daemon (a D-Bus `Backtrace` round trip on
//! a private bus) and the CLI through the daemon, next to `py-spy dump --native`
//! and `pystack remote --native` on the same process, interleaved round by
//! round (the order rotates each round); then whether each tool shows the 50
//! Python frames in order, merged with the native frames around them.
//!
//! `cargo bench -p argstashd --bench python_bt_sid` (release: needs
//! `target/release/argstash`). The interpreters are Debian's, run chrooted in
//! the sid root of `scripts/sid-root.sh` (`/var/cache/argstash-sid/root`, or
//! `ARGSTASH_SID_ROOT`); without it the bench says so and stops. A peer missing
//! from PATH is skipped with a note (`scripts/setup.sh` installs both).
//! `PYBENCH_SHOW=1` also prints each tool's output.

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::Bus;
use support::{cli, frame_lines, has_word, in_order, median, ms, on_path, run, Py};

const ROUNDS: usize = 20;
/// The minor versions measured.
const MINORS: [u8; 3] = [13, 14, 15];

/// 49 `recurse` frames under `<module>`: 50 Python frames; the innermost blocks
/// reading stdin.
const PLAIN: &str = r#"
import os, sys

def recurse(depth, label):
    if depth == 0:
        print("ready", flush=True)
        sys.stdin.readline()
        return 0
    return recurse(depth - 1, label) + 1

print("ready %d" % os.getpid(), flush=True)
sys.stdin.readline()
recurse(48, "plain")
"#;

/// The time of one run, or what it printed when it failed.
fn timed(cmd: &Path, args: &[&str]) -> Result<Duration, String> {
    let t = Instant::now();
    let out = run(cmd, args);
    let d = t.elapsed();
    if out.status.success() {
        Ok(d)
    } else {
        Err(format!(
            "{} {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// One tool's verdict on the stack: libc's `read` (under the innermost Python
/// frame's `readline`), the 49 `recurse` frames and `<module>` in order, then
/// `Py_RunMain` (the interpreter's entry, a dynamic symbol of Debian's
/// otherwise stripped binary) below them.
fn verdict(out: &Output, outermost_first: bool) -> String {
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    let all = format!("{text}\n{err}");
    if let Some(l) = all
        .lines()
        .find(|l| l.contains("Failed to merge") || l.contains("Unable to merge"))
    {
        return format!("NOT merged: {:?}", l.trim());
    }
    if !out.status.success() {
        return format!(
            "failed ({}): {:?}",
            out.status,
            all.trim().lines().last().unwrap_or("")
        );
    }
    let seen = frame_lines(&text)
        .into_iter()
        .filter(|l| has_word(l, "recurse"))
        .count();
    if seen != 49 {
        return format!("{seen} recurse frames, expected 49");
    }
    let python = ["recurse", "<module>"];
    if let Err(why) = in_order(&text, &python, outermost_first) {
        return format!("Python frames out of order: {why}");
    }
    let native = ["read", "recurse", "<module>", "Py_RunMain"];
    match in_order(&text, &native, outermost_first) {
        Ok(()) => "50 Python frames, merged (read above, Py_RunMain below)".into(),
        Err(why) => format!("50 Python frames in order; native frames not around them: {why}"),
    }
}

/// What `bt --json` says of its Python frames: how many, and how each was paired.
fn json_pairing(out: &Output) -> String {
    let v: serde_json::Value = match serde_json::from_slice(&out.stdout) {
        Ok(v) => v,
        Err(e) => return format!("not JSON: {e}"),
    };
    let mut count = 0;
    let mut by: Vec<String> = Vec::new();
    let mut walk = vec![&v];
    while let Some(x) = walk.pop() {
        match x {
            serde_json::Value::Object(m) => {
                if m.get("kind").and_then(|k| k.as_str()) == Some("python") {
                    count += 1;
                    let b = m
                        .get("paired_by")
                        .and_then(|b| b.as_str())
                        .unwrap_or("(none)")
                        .to_string();
                    if !by.contains(&b) {
                        by.push(b);
                    }
                }
                walk.extend(m.values());
            }
            serde_json::Value::Array(a) => walk.extend(a.iter()),
            _ => {}
        }
    }
    format!("{count} Python frames, paired_by {by:?}")
}

fn main() {
    let root = std::env::var_os("ARGSTASH_SID_ROOT").map_or_else(
        || PathBuf::from("/var/cache/argstash-sid/root"),
        PathBuf::from,
    );
    if !root.join(".argstash-sid-root").is_file() {
        println!(
            "no Debian sid root at {} (scripts/sid-root.sh builds it): nothing measured",
            root.display()
        );
        return;
    }
    let argstash = cli();
    // (name, program, arguments before the pid, prints the outermost frame first)
    let peers: Vec<(&str, PathBuf, Vec<&str>, bool)> = [
        (
            "py-spy dump --native",
            "py-spy",
            vec!["dump", "--native", "--pid"],
            false,
        ),
        (
            "pystack remote --native",
            "pystack",
            vec!["remote", "--native"],
            true,
        ),
    ]
    .into_iter()
    .filter_map(|(name, exe, args, outer)| match on_path(exe) {
        Some(p) => Some((name, p, args, outer)),
        None => {
            println!("note: {exe} not on PATH, skipped (scripts/setup.sh installs it)");
            None
        }
    })
    .collect();
    let bus = Bus::start();
    let proxy = bus.proxy();
    let inside = format!("/tmp/argstash-pybench-{}", std::process::id());
    let host = root.join(inside.trim_start_matches('/'));
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("plain.py"), PLAIN).unwrap();
    let script = format!("{inside}/plain.py");

    for minor in MINORS {
        let exe = root.join(format!("usr/bin/python3.{minor}"));
        if !exe.exists() {
            println!("\nno {} in the root: 3.{minor} skipped", exe.display());
            continue;
        }
        let version = run(
            Path::new("chroot"),
            &[
                root.to_str().unwrap(),
                &format!("/usr/bin/python3.{minor}"),
                "-c",
                "import sys; print(sys.version.split()[0])",
            ],
        );
        println!(
            "\nchroot {} python3.{minor} ({}), 50 Python frames (plain.py), never hooked; median of {ROUNDS}, interleaved, order rotating:",
            root.display(),
            String::from_utf8_lossy(&version.stdout).trim()
        );
        // `chroot` execs the interpreter: the `ready PID` line checks it is the same pid.
        let mut chrooted = Command::new("chroot");
        chrooted
            .arg(&root)
            .args([&format!("/usr/bin/python3.{minor}"), &script]);
        let mut py = Py::spawn(chrooted);
        let pid = py.pid();
        let p = pid.to_string();
        py.go("ready");
        let threads = proxy.backtrace(pid as u32, 0, HashMap::new()).unwrap();
        let pyframes: usize = threads.iter().map(|t| t.python.len()).sum();
        println!("  (daemon, first call: {pyframes} Python frames)");
        let address = bus.address.clone();
        // (name, program, arguments); `None` program: the daemon's D-Bus call.
        let mut tools: Vec<(String, Option<PathBuf>, Vec<String>)> = vec![
            (
                "argstash bt (cold CLI)".into(),
                Some(argstash.clone()),
                vec!["bt".into(), "--pid".into(), p.clone()],
            ),
            (
                "argstash bt --json (cold CLI)".into(),
                Some(argstash.clone()),
                vec!["bt".into(), "--pid".into(), p.clone(), "--json".into()],
            ),
            (
                "argstashd Backtrace (warm, D-Bus round trip)".into(),
                None,
                vec![],
            ),
            (
                "argstash --bus ADDR bt (CLI through the daemon)".into(),
                Some(argstash.clone()),
                vec![
                    "--bus".into(),
                    address.clone(),
                    "bt".into(),
                    "--pid".into(),
                    p.clone(),
                ],
            ),
        ];
        for (name, exe, args, _) in &peers {
            let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            a.push(p.clone());
            tools.push((name.to_string(), Some(exe.clone()), a));
        }
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(); tools.len()];
        let mut failed: Vec<Option<String>> = vec![None; tools.len()];
        for round in 0..ROUNDS {
            for k in 0..tools.len() {
                let i = (k + round) % tools.len();
                if failed[i].is_some() {
                    continue;
                }
                let (_, exe, args) = &tools[i];
                let r = match exe {
                    Some(exe) => {
                        let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
                        timed(exe, &a)
                    }
                    None => {
                        let t = Instant::now();
                        proxy
                            .backtrace(pid as u32, 0, HashMap::new())
                            .map(|_| t.elapsed())
                            .map_err(|e| e.to_string())
                    }
                };
                match r {
                    Ok(d) => times[i].push(d),
                    Err(e) => failed[i] = Some(e),
                }
            }
        }
        for (i, (name, ..)) in tools.iter().enumerate() {
            if let Some(e) = &failed[i] {
                println!("  {name:<50} FAILED: {}", e.replace('\n', " | "));
                continue;
            }
            let v = times[i].clone();
            let lo = *v.iter().min().unwrap();
            let hi = *v.iter().max().unwrap();
            println!(
                "  {name:<50} {:>10}   (min {}, max {})",
                ms(median(v)),
                ms(lo),
                ms(hi)
            );
        }
        println!("  merging (innermost first: read, 49 recurse, <module>, Py_RunMain):");
        let out = run(&argstash, &["bt", "--pid", &p]);
        println!("    {:<26} {}", "argstash bt", verdict(&out, false));
        let out = run(&argstash, &["bt", "--pid", &p, "--json"]);
        println!("    {:<26} {}", "argstash bt --json", json_pairing(&out));
        for (name, exe, args, outer) in &peers {
            let mut a = args.clone();
            a.push(&p);
            let out = run(exe, &a);
            println!("    {name:<26} {}", verdict(&out, *outer));
            if std::env::var_os("PYBENCH_SHOW").is_some() {
                println!(
                    "{}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        if std::env::var_os("PYBENCH_SHOW").is_some() {
            let out = run(&argstash, &["bt", "--pid", &p]);
            println!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        drop(py);
    }
    let _ = std::fs::remove_dir_all(&host);
}
