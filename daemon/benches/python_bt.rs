//! `argstash bt` on a CPython process 50 Python frames deep: the cold CLI, the
//! warm daemon (a D-Bus `Backtrace` round trip on a private bus) and the CLI
//! through the daemon, next to `py-spy dump --native` and `pystack remote
//! --native` on the same process, interleaved round by round; then which stacks
//! each tool merges: the plain recursion, and Python -> C -> Python
//! (`tests/fixtures/python/mixed.py` with `callback.c`).
//!
//! `cargo bench -p argstashd --bench python_bt` (release: needs
//! `target/release/argstash`; a peer missing from PATH is skipped with a note;
//! `scripts/setup.sh` installs both from PyPI). Runs under every CPython 3.11
//! here (`python3` on PATH and Debian's `/usr/bin/python3.11`).

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::Bus;
use injector::{BacktraceOptions, Pid, ProcessReader};
use support::{cli, frame_lines, has_word, in_order, median, ms, on_path, run, Py};

const ROUNDS: usize = 20;

/// 49 `recurse` frames under `<module>`: 50 Python frames, all started after the hook.
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

/// Every CPython 3.11 here, by real path, each once.
fn interpreters() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    let asked = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    for exe in [asked, Some(PathBuf::from("/usr/bin/python3.11"))]
        .into_iter()
        .flatten()
    {
        let Ok(real) = exe.canonicalize() else {
            continue;
        };
        let v = Command::new(&real)
            .args(["-c", "import sys; print(sys.version_info[:2] == (3, 11))"])
            .output();
        if v.is_ok_and(|o| o.stdout.starts_with(b"True")) && !found.contains(&real) {
            found.push(real);
        }
    }
    found
}

fn timed(cmd: &Path, args: &[&str]) -> Duration {
    let t = Instant::now();
    let out = run(cmd, args);
    let d = t.elapsed();
    assert!(
        out.status.success(),
        "{} {args:?}: {}",
        cmd.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    d
}

/// `callback.c` as a shared library in a temporary directory.
fn callback_lib(dir: &Path) -> PathBuf {
    argstash_tests::compile_c(
        &argstash_tests::fixtures_dir().join("python/callback.c"),
        &dir.join("libcallback.so"),
        &["-O0", "-g", "-shared", "-fPIC", "-fno-omit-frame-pointer"],
    )
}

/// One tool's verdict on one stack: merged as expected, or why not.
fn verdict(
    out: &Output,
    order: &[&str],
    count: Option<(&str, usize)>,
    outermost_first: bool,
) -> String {
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    let all = format!("{text}\n{err}");
    if let Some(l) = all.lines().find(|l| l.contains("Failed to merge")) {
        return format!("NOT merged: {:?}", l.trim());
    }
    if !out.status.success() {
        return format!(
            "failed ({}): {:?}",
            out.status,
            err.lines().last().unwrap_or("")
        );
    }
    if let Err(why) = in_order(&text, order, outermost_first) {
        return format!("wrong order: {why}");
    }
    if let Some((w, n)) = count {
        let seen = frame_lines(&text)
            .into_iter()
            .filter(|l| has_word(l, w))
            .count();
        if seen != n {
            return format!("{seen} {w} frames, expected {n}");
        }
    }
    "merged".to_string()
}

fn main() {
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
    let dir = std::env::temp_dir().join(format!("argstash-pybench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plain = dir.join("plain.py");
    std::fs::write(&plain, PLAIN).unwrap();
    let lib = callback_lib(&dir);
    let mixed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/python/mixed.py");

    for python in interpreters() {
        let version = run(
            &python,
            &["-c", "import sys; print(sys.version.split()[0])"],
        );
        println!(
            "\n{} ({}), 50 Python frames (plain.py), hooked with `argstash inject --python` before they started; median of {ROUNDS}, interleaved:",
            python.display(),
            String::from_utf8_lossy(&version.stdout).trim()
        );
        let mut py = Py::spawn(python_command(&python, &[plain.to_str().unwrap()]));
        let pid = py.pid();
        let p = pid.to_string();
        timed(&argstash, &["inject", "--pid", &p, "--python"]);
        py.go("ready");
        let threads = proxy.backtrace(pid as u32, 0, HashMap::new()).unwrap();
        let pyframes: usize = threads.iter().map(|t| t.python.len()).sum();
        assert_eq!(pyframes, 50, "daemon saw {pyframes} Python frames");
        let address = bus.address.clone();
        // The daemon's side without D-Bus: one reader kept, warmed by a first call.
        let mut reader = ProcessReader::new(Pid::from_raw(pid));
        reader.backtrace(&BacktraceOptions::default()).unwrap();
        let mut rows: Vec<(String, Vec<Duration>)> = vec![
            ("argstash bt (cold CLI)".into(), vec![]),
            ("argstash bt --json (cold CLI)".into(), vec![]),
            (
                "argstashd Backtrace (warm, D-Bus round trip)".into(),
                vec![],
            ),
            (
                "argstash --bus ADDR bt (CLI through the daemon)".into(),
                vec![],
            ),
            ("ProcessReader::backtrace (library, warm)".into(), vec![]),
        ];
        for (name, ..) in &peers {
            rows.push((name.to_string(), vec![]));
        }
        for _ in 0..ROUNDS {
            rows[0].1.push(timed(&argstash, &["bt", "--pid", &p]));
            rows[1]
                .1
                .push(timed(&argstash, &["bt", "--pid", &p, "--json"]));
            let t = Instant::now();
            proxy.backtrace(pid as u32, 0, HashMap::new()).unwrap();
            rows[2].1.push(t.elapsed());
            rows[3]
                .1
                .push(timed(&argstash, &["--bus", &address, "bt", "--pid", &p]));
            let t = Instant::now();
            reader.backtrace(&BacktraceOptions::default()).unwrap();
            rows[4].1.push(t.elapsed());
            for (i, (_, exe, args, _)) in peers.iter().enumerate() {
                let mut a = args.clone();
                a.push(&p);
                rows[5 + i].1.push(timed(exe, &a));
            }
        }
        for (name, v) in rows {
            let lo = *v.iter().min().unwrap();
            let hi = *v.iter().max().unwrap();
            println!(
                "  {name:<50} {:>10}   (min {}, max {})",
                ms(median(v)),
                ms(lo),
                ms(hi)
            );
        }

        // Which stacks each tool merges.
        let plain_order = ["recurse", "<module>"];
        let mut merged: Vec<(String, String, String)> = Vec::new();
        let mut check = |stack: &str, pid: &str, order: &[&str], count: Option<(&str, usize)>| {
            let out = run(&argstash, &["bt", "--pid", pid]);
            merged.push((
                "argstash bt".into(),
                stack.into(),
                verdict(&out, order, count, false),
            ));
            for (name, exe, args, outer) in &peers {
                let mut a = args.clone();
                a.push(pid);
                let out = run(exe, &a);
                merged.push((
                    name.to_string(),
                    stack.into(),
                    verdict(&out, order, count, *outer),
                ));
            }
        };
        drop(reader);
        check("plain, hooked", &p, &plain_order, Some(("recurse", 49)));
        timed(&argstash, &["eject", "--pid", &p, "--python"]);
        check("plain, ejected", &p, &plain_order, Some(("recurse", 49)));
        drop(py);
        let mut py = Py::spawn(python_command(&python, &[plain.to_str().unwrap()]));
        let p = py.pid().to_string();
        py.go("ready");
        check(
            "plain, never hooked",
            &p,
            &plain_order,
            Some(("recurse", 49)),
        );
        drop(py);
        // Innermost first: the Python frames and the C function between them.
        let mixed_order = [
            "innermost",
            "through_sorted",
            "callback",
            "call_back",
            "through_c",
            "outer",
            "<module>",
        ];
        let mut mixed_py = Py::spawn(python_command(
            &python,
            &[mixed.to_str().unwrap(), lib.to_str().unwrap(), "block"],
        ));
        let m = mixed_py.pid().to_string();
        mixed_py.go("end");
        check("mixed, never hooked", &m, &mixed_order, None);
        drop(mixed_py);
        let mut mixed_py = Py::spawn(python_command(
            &python,
            &[mixed.to_str().unwrap(), lib.to_str().unwrap(), "block"],
        ));
        let m = mixed_py.pid().to_string();
        timed(&argstash, &["inject", "--pid", &m, "--python"]);
        mixed_py.go("end");
        check("mixed, hooked", &m, &mixed_order, None);
        timed(&argstash, &["eject", "--pid", &m, "--python"]);
        check("mixed, ejected", &m, &mixed_order, None);
        drop(mixed_py);
        println!("  merging (Python frames in order, the C frame between them):");
        for (tool, stack, v) in merged {
            println!("    {tool:<26} {stack:<24} {v}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `python ARGS`, for [`Py::spawn`].
fn python_command(python: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(python);
    command.args(args);
    command
}
