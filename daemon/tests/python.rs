//! argstashd and Python processes: the `Inject` option `python` hooks CPython's
//! frame evaluator, and `argstash --bus ... bt --json` prints what the
//! standalone `argstash bt --json` prints, Python frames included.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use argstash_dbus::OPT_PYTHON;
use argstash_tests::{fixtures_dir, Target};
use common::{cli, steady, Bus};
use zbus::zvariant::Value;

/// A CPython 3.11 with ctypes (`python3` on PATH, else Debian's), or `None`.
fn python() -> Option<PathBuf> {
    for exe in ["python3", "/usr/bin/python3.11"] {
        let out = Command::new(exe)
            .args([
                "-c",
                "import sys, ctypes; print(sys.executable if sys.version_info[:2] == (3, 11) else '')",
            ])
            .output()
            .ok()?;
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !path.is_empty() {
            return Some(PathBuf::from(path));
        }
    }
    None
}

/// `tests/fixtures/python/callback.c` as a shared library in `dir`.
fn callback_lib(dir: &Path) -> PathBuf {
    let out = dir.join("libcallback.so");
    let built = Command::new("cc")
        .args(["-O0", "-g", "-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(fixtures_dir().join("python/callback.c"))
        .status()
        .unwrap();
    assert!(built.success());
    out
}

#[test]
fn python_inject_and_backtrace_through_the_daemon() {
    let Some(python) = python() else {
        println!("SKIPPED python_inject_and_backtrace_through_the_daemon: no CPython 3.11");
        return;
    };
    let bus = Bus::start();
    let lib = callback_lib(&bus.dir);
    let script = fixtures_dir().join("python/mixed.py");
    let mut t = Target::spawn_with_args(
        &python,
        &[script.to_str().unwrap(), lib.to_str().unwrap(), "block"],
    );
    let pid = t.pid();
    let proxy = bus.proxy();
    let mut opts = HashMap::new();
    opts.insert(OPT_PYTHON, Value::from(true));
    let hooks = proxy.inject(pid as u32, &[], opts).unwrap();
    assert_eq!(hooks.len(), 1);
    let listed = proxy.list_hooks(pid as u32).unwrap();
    assert_eq!(listed[0].function, "_PyEval_EvalFrameDefault");

    t.write_stdin("go\n");
    while t.expect_line(Duration::from_secs(20)) != "end" {}
    // Blocked reading stdin: every backtrace from now on is the same.
    assert!(argstash_tests::wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/syscall"))
            .is_ok_and(|s| s.starts_with("0 "))
    }));
    let pid_s = pid.to_string();
    let args = ["bt", "--pid", pid_s.as_str(), "--json"];
    let standalone = steady(&cli(None, &args));
    let through = steady(&cli(Some(&bus), &args));
    assert_eq!(through, standalone);
    let kinds = |v: &serde_json::Value, kind: &str| {
        v["threads"][0]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == kind)
            .count()
    };
    assert_eq!(kinds(&through, "python"), 7, "{through:#}");
    assert!(through["threads"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["paired_by"] == "stash"));
    // Text and one side only, too.
    let text = ["bt", "--pid", pid_s.as_str(), "--python"];
    let strip = |s: String| -> String {
        s.lines()
            .filter(|l| !l.starts_with("Thread "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(strip(cli(Some(&bus), &text)), strip(cli(None, &text)));
    // And out again by name.
    let out = cli(Some(&bus), &["eject", "--pid", &pid_s, "--python"]);
    assert!(out.contains("ejected _PyEval_EvalFrameDefault"), "{out}");
}

/// The Debian sid root with CPython 3.14 (`scripts/sid-root.sh`), or `None`.
fn sid_python314() -> Option<PathBuf> {
    let root = std::env::var_os("ARGSTASH_SID_ROOT").map_or_else(
        || PathBuf::from("/var/cache/argstash-sid/root"),
        PathBuf::from,
    );
    (root.join(".argstash-sid-root").is_file() && root.join("usr/bin/python3.14").is_file())
        .then_some(root)
}

#[test]
fn python_option_on_cpython_3_14_is_an_invalid_args_error_with_its_reason() {
    let Some(root) = sid_python314() else {
        println!("SKIPPED python_option_on_cpython_3_14_is_an_invalid_args_error_with_its_reason: no sid root with python3.14 (scripts/sid-root.sh)");
        return;
    };
    let bus = Bus::start();
    let script = "import os, sys; print('ready', os.getpid(), flush=True); sys.stdin.readline()";
    let t = Target::spawn_with_args(
        Path::new("/usr/sbin/chroot"),
        &[root.to_str().unwrap(), "python3.14", "-c", script],
    );
    let pid = t.pid();
    let maps = || std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let before = maps();
    let proxy = bus.proxy();
    let mut opts = HashMap::new();
    opts.insert(OPT_PYTHON, Value::from(true));
    let err = proxy.inject(pid as u32, &[], opts).unwrap_err();
    assert_eq!(
        err.kind(),
        Some(argstash_dbus::ErrorKind::InvalidArgs),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("(CPython 3.14.")
            && text.contains("entry frame on its own C stack")
            && text.contains("leave out the Inject option `python`"),
        "{text}"
    );
    let hint = err.hint().expect("a typed hint");
    assert_eq!(hint.option.as_deref(), Some(OPT_PYTHON), "{hint:?}");
    assert!(proxy.list_hooks(pid as u32).unwrap().is_empty());
    assert_eq!(maps(), before, "the target's mappings changed");
    // The CLI over the bus words the same refusal in its own terms.
    let pid_s = pid.to_string();
    let out = argstash_tests::argstash_cmd(&[
        "--bus",
        bus.address.as_str(),
        "inject",
        "--pid",
        &pid_s,
        "--python",
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("leave out --python"), "{err}");
}
