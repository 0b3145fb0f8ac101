//! argstashd and CPython 3.13, 3.14 and 3.15 (issue 22): `argstash --bus ADDR
//! bt` prints the Python frames the standalone `argstash bt` prints, read from
//! the interpreter's own `_Py_DebugOffsets` and paired by entry frame, for
//! Debian's static interpreters and for a C program embedding
//! `libpython3.1X.so`.
//!
//! Targets run chrooted in the Debian sid root of `scripts/sid-root.sh`
//! (`/var/cache/argstash-sid/root`, or `ARGSTASH_SID_ROOT`): the daemon reads
//! every file of theirs through `/proc/PID/root`. The fixture
//! (`tests/fixtures/python/offsets_app.py`) prints its own frames; the daemon's
//! frames are checked against that report. Skipped, with the reason printed,
//! without the root.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use argstash_tests::{fixtures_dir, Target};
use common::{cli, steady, Bus};

const LINE: Duration = Duration::from_secs(30);

/// One Python frame: qualified name, file, line, and `(parameter, display)` pairs.
type Frame = (String, String, i64, Vec<(String, String)>);

/// The sid root, or `None` (with the reason printed).
fn sid_root(test: &str) -> Option<PathBuf> {
    let root = std::env::var_os("ARGSTASH_SID_ROOT").map_or_else(
        || PathBuf::from("/var/cache/argstash-sid/root"),
        PathBuf::from,
    );
    if root.join(".argstash-sid-root").is_file() {
        return Some(root);
    }
    println!(
        "SKIPPED {test}: no Debian sid root at {} (built by scripts/sid-root.sh)",
        root.display()
    );
    None
}

/// The fixture's report: per frame, its qualified name, file, line and
/// `(parameter, display)` pairs, innermost first.
fn report(t: &mut Target) -> Vec<Frame> {
    let mut frames: Vec<Frame> = Vec::new();
    loop {
        let line = t.expect_line(LINE);
        let f: Vec<&str> = line.split('\t').collect();
        match f.as_slice() {
            ["frame", q, file, l] => {
                frames.push((q.to_string(), file.to_string(), l.parse().unwrap(), vec![]))
            }
            ["param", n, d] => frames
                .last_mut()
                .unwrap()
                .3
                .push((n.to_string(), d.to_string())),
            ["end"] => return frames,
            _ => t.fail(&format!("unexpected report line {line:?}")),
        }
    }
}

/// The same of the Python frames of the thread `tid` of a `bt --json`.
fn python_frames(bt: &serde_json::Value, tid: i32) -> Vec<Frame> {
    let thread = bt["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == tid)
        .unwrap_or_else(|| panic!("no thread {tid} in {bt}"));
    thread["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "python")
        .map(|f| {
            assert_eq!(f["paired_by"], "entry-frame", "{f}");
            let params = f["params"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    (
                        p["name"].as_str().unwrap().to_string(),
                        p["display"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            (
                f["function"].as_str().unwrap().to_string(),
                f["file"].as_str().unwrap().to_string(),
                f["line"].as_i64().unwrap_or(-1),
                params,
            )
        })
        .collect()
}

/// Runs `argv` chrooted in `root`: the fixture in `block` mode, which prints its
/// report and blocks reading stdin; checks the daemon's backtrace against it.
fn check(bus: &Bus, root: &Path, argv: &[&str], what: &str) {
    let mut all = vec![root.to_str().unwrap()];
    all.extend_from_slice(argv);
    let mut t = Target::spawn_with_args(Path::new("chroot"), &all);
    let pid = t.pid();
    t.write_stdin("go\n");
    let seen = report(&mut t);
    assert_eq!(seen[0].0, "innermost", "{what}: {seen:?}");
    assert!(argstash_tests::wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/syscall"))
            .is_ok_and(|s| s.starts_with("0 "))
    }));
    let pid_s = pid.to_string();
    let args = ["bt", "--pid", pid_s.as_str(), "--json"];
    let through = steady(&cli(Some(bus), &args));
    assert_eq!(python_frames(&through, pid), seen, "{what}: {through:#}");
    assert_eq!(through, steady(&cli(None, &args)), "{what}");
    // The text form, Python frames only, names the innermost frame with its arguments.
    let text = cli(Some(bus), &["bt", "--pid", &pid_s, "--python"]);
    let (name, file, line, params) = &seen[0];
    let params: Vec<String> = params.iter().map(|(n, d)| format!("{n}={d}")).collect();
    let want = format!("[py] {name} ({}) at {file}:{line}", params.join(", "));
    assert!(text.contains(&want), "{what}: no {want:?} in\n{text}");
    t.assert_healthy();
    t.write_stdin("\n");
    assert!(t.wait_exit(LINE).is_some_and(|s| s.success()), "{what}");
}

#[test]
fn bt_through_the_daemon_shows_the_python_frames_of_313_and_later() {
    let Some(root) = sid_root("bt_through_the_daemon_shows_the_python_frames_of_313_and_later")
    else {
        return;
    };
    let inside = format!("/tmp/argstashd-test-{}-py313", std::process::id());
    let host = root.join(inside.trim_start_matches('/'));
    let _ = std::fs::remove_dir_all(&host);
    std::fs::create_dir_all(&host).unwrap();
    for f in ["offsets_app.py", "embed.c"] {
        std::fs::copy(fixtures_dir().join("python").join(f), host.join(f)).unwrap();
    }
    let script = format!("{inside}/offsets_app.py");
    let bus = Bus::start();
    for minor in [13u8, 14, 15] {
        let python = format!("/usr/bin/python3.{minor}");
        if !root.join(python.trim_start_matches('/')).is_file() {
            println!("SKIPPED 3.{minor}: no {python} in the root");
            continue;
        }
        check(
            &bus,
            &root,
            &[&python, &script, "block"],
            &format!("python3.{minor}"),
        );
        // A C program embedding libpython3.1X, built in the root.
        let exe = format!("{inside}/embed3{minor}");
        let build = format!(
            "gcc -O1 -o {exe} {inside}/embed.c $(python3.{minor}-config --cflags --ldflags --embed)"
        );
        let built = Command::new("chroot")
            .arg(&root)
            .args(["sh", "-c", &build])
            .output()
            .unwrap();
        if !built.status.success() {
            println!(
                "SKIPPED embedded 3.{minor}: {build}: {}",
                String::from_utf8_lossy(&built.stderr)
            );
            continue;
        }
        check(
            &bus,
            &root,
            &[&exe, &script, "block"],
            &format!("embedded libpython3.{minor}"),
        );
    }
    let _ = std::fs::remove_dir_all(&host);
}

/// Subinterpreters: the daemon's backtrace carries each Python frame's
/// interpreter as the standalone one does (`interpreter.id`, `interpreter.state`).
#[test]
fn bt_through_the_daemon_labels_frames_with_their_subinterpreter() {
    let Some(root) = sid_root("bt_through_the_daemon_labels_frames_with_their_subinterpreter")
    else {
        return;
    };
    let inside = format!("/tmp/argstashd-test-{}-subinterp", std::process::id());
    let host = root.join(inside.trim_start_matches('/'));
    let _ = std::fs::remove_dir_all(&host);
    std::fs::create_dir_all(&host).unwrap();
    std::fs::copy(
        fixtures_dir().join("python/subinterp_app.py"),
        host.join("subinterp_app.py"),
    )
    .unwrap();
    let script = format!("{inside}/subinterp_app.py");
    let bus = Bus::start();
    for minor in [13u8, 14, 15] {
        let python = format!("/usr/bin/python3.{minor}");
        let mut t = Target::spawn_with_args(
            Path::new("chroot"),
            &[root.to_str().unwrap(), &python, &script],
        );
        let pid = t.pid();
        t.write_stdin("go\n");
        let ids = t.wait_for_line(LINE, |l| l.starts_with("ids "));
        let sub_a: i64 = ids.split(' ').nth(3).unwrap().parse().unwrap();
        t.wait_for_line(LINE, |l| l == "end");
        assert!(argstash_tests::wait_until(Duration::from_secs(10), || {
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/syscall"))
                .is_ok_and(|s| s.starts_with("0 "))
        }));
        let pid_s = pid.to_string();
        let args = ["bt", "--pid", pid_s.as_str(), "--json"];
        // The main thread, blocked: the same in both (the other one runs).
        let main_of = |v: serde_json::Value| -> serde_json::Value {
            v["threads"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["tid"] == pid)
                .unwrap()
                .clone()
        };
        let main = main_of(steady(&cli(Some(&bus), &args)));
        assert_eq!(main, main_of(steady(&cli(None, &args))), "3.{minor}");
        let labels: Vec<i64> = main["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "python")
            .map(|f| f["interpreter"]["id"].as_i64().unwrap_or(-1))
            .collect();
        assert_eq!(labels, [sub_a, sub_a, sub_a, 0, 0], "3.{minor}: {main:#}");
        t.assert_healthy();
        t.write_stdin("\n");
        assert!(t.wait_exit(LINE).is_some_and(|s| s.success()), "3.{minor}");
    }
    let _ = std::fs::remove_dir_all(&host);
}
