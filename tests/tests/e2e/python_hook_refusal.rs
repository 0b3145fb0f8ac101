//! End-to-end: `--python` on CPython 3.13, 3.14 and 3.15 (issue 22, item 4).
//!
//! From 3.12 each evaluator call keeps its entry frame on its own C stack, so
//! backtraces pair exactly without the native hook: `inject --python` and `run
//! --python` refuse it, naming the version and the reason, with the target left
//! exactly as it was (the evaluator's entry bytes, read at the address `nm -D`
//! gives; the blocked thread's `/proc/PID/syscall` registers; its context-switch
//! counts, which a ptrace stop would raise; its mappings), and `record --python`
//! records without a hook, saying why. Interpreters run chrooted in the Debian
//! sid root (`scripts/sid-root.sh`); skipped, with the reason printed, without it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use argstash_tests::*;

/// The sid root, or `None` (with the reason printed) when tests cannot use it.
fn sid_root() -> Option<PathBuf> {
    let root = std::env::var_os("ARGSTASH_SID_ROOT").map_or_else(
        || PathBuf::from("/var/cache/argstash-sid/root"),
        PathBuf::from,
    );
    if !root.join(".argstash-sid-root").is_file() {
        println!(
            "SKIPPED: no Debian sid root at {} (built by scripts/sid-root.sh)",
            root.display()
        );
        return None;
    }
    Some(root)
}

/// The root's interpreters: (`python3.1X`, its path on this machine).
fn interpreters(root: &Path) -> Vec<(String, PathBuf)> {
    ["python3.13", "python3.14", "python3.15"]
        .iter()
        .map(|n| (n.to_string(), root.join("usr/bin").join(n)))
        .filter(|(_, p)| p.is_file())
        .collect()
}

/// Address of `name` in the dynamic symbols of `file` (`nm -D`).
fn nm_address(file: &Path, name: &str) -> u64 {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(file)
        .output()
        .expect("run nm");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2] == name).then(|| u64::from_str_radix(f[0], 16).ok())?
        })
        .unwrap_or_else(|| panic!("{name} not in nm -D {}", file.display()))
}

/// True when `file` is a fixed-address executable (`readelf -h`: EXEC), whose
/// symbol values are runtime addresses.
fn fixed_address(file: &Path) -> bool {
    let out = Command::new("readelf")
        .arg("-hW")
        .arg(file)
        .output()
        .expect("run readelf");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim_start().starts_with("Type:") && l.contains("EXEC"))
}

/// What must not change in a target that was refused.
#[derive(Debug, PartialEq, Eq)]
struct Untouched {
    code: Vec<u8>,
    syscall: String,
    switches: Vec<String>,
    maps: String,
}

fn untouched(pid: i32, code_at: Option<u64>) -> Untouched {
    let code = code_at.map_or_else(Vec::new, |at| {
        use std::os::unix::fs::FileExt;
        let mem = fs::File::open(format!("/proc/{pid}/mem")).expect("open /proc/PID/mem");
        let mut b = vec![0u8; 64];
        mem.read_exact_at(&mut b, at)
            .expect("read the evaluator's entry");
        b
    });
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    Untouched {
        code,
        syscall: fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap(),
        switches: status
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .map(str::to_string)
            .collect(),
        maps: fs::read_to_string(format!("/proc/{pid}/maps")).unwrap(),
    }
}

/// `python3.1X` in the root, blocked reading stdin after printing its ready line.
fn blocked_python(root: &Path, python: &str) -> Target {
    let script = "import os, sys; print('ready', os.getpid(), flush=True); sys.stdin.readline()";
    let t = Target::spawn_with_args(
        Path::new("/usr/sbin/chroot"),
        &[root.to_str().unwrap(), python, "-c", script],
    );
    let pid = t.pid();
    assert!(
        wait_until(Duration::from_secs(20), || {
            fs::read_to_string(format!("/proc/{pid}/syscall")).is_ok_and(|s| s.starts_with("0 "))
        }),
        "{python} never blocked in read"
    );
    t
}

#[test]
fn inject_python_on_3_13_and_later_is_refused_untouched() {
    let Some(root) = sid_root() else { return };
    let pythons = interpreters(&root);
    assert!(!pythons.is_empty(), "no python3.1X in {}", root.display());
    for (python, exe) in pythons {
        let t = blocked_python(&root, &python);
        let pid = t.pid();
        let pid_s = pid.to_string();
        let entry = fixed_address(&exe).then(|| nm_address(&exe, "_PyEval_EvalFrameDefault"));
        let before = untouched(pid, entry);
        // Alone, and with a native function (all or nothing).
        for extra in [&[][..], &["--func", "PyLong_FromLong"][..]] {
            let mut args = vec!["inject", "--pid", &pid_s, "--python"];
            args.extend_from_slice(extra);
            let out = run(&args);
            assert_eq!(out.status.code(), Some(1), "{python} {args:?}: {out:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            let version = python.trim_start_matches("python");
            assert!(
                err.contains(&format!("(CPython {version}."))
                    && err.contains("entry frame on its own C stack")
                    && err.contains("nothing was changed")
                    && err.contains("leave out --python"),
                "{python}: {err}"
            );
            assert_eq!(
                untouched(pid, entry),
                before,
                "{python} changed by {args:?}"
            );
        }
        assert!(list_hooks(pid).is_empty(), "{python}: hooks left");
    }
}

#[test]
fn record_python_on_3_14_records_without_a_hook_and_says_why() {
    let Some(root) = sid_root() else { return };
    if !root.join("usr/bin/python3.14").is_file() {
        println!("SKIPPED: no python3.14 in {}", root.display());
        return;
    }
    let t = blocked_python(&root, "python3.14");
    let pid_s = t.pid().to_string();
    let out_file = std::env::temp_dir().join(format!(
        "argstash-e2e-{}-record-py314.txt",
        std::process::id()
    ));
    let out = run(&[
        "record",
        "--pid",
        &pid_s,
        "--python",
        "--idle",
        "--duration",
        "1",
        "-o",
        out_file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--python installs no hook in CPython 3.14.")
            && err.contains("entry frame on its own C stack"),
        "{err}"
    );
    let profile = fs::read_to_string(&out_file).unwrap_or_default();
    let _ = fs::remove_file(&out_file);
    assert!(!profile.trim().is_empty(), "empty profile: {err}");
    assert!(list_hooks(t.pid()).is_empty(), "a hook was left");
}

#[test]
fn run_python_on_3_14_is_refused_before_the_command_starts() {
    let Some(root) = sid_root() else { return };
    if !root.join("usr/bin/python3.14").is_file() {
        println!("SKIPPED: no python3.14 in {}", root.display());
        return;
    }
    // `run` must stop the interpreter itself at its entry, so it runs inside the
    // root, with a /proc mounted in a private mount namespace of its own.
    let inside = format!("/tmp/argstash-e2e-{}-run-py", std::process::id());
    let host_dir = root.join(inside.trim_start_matches('/'));
    fs::create_dir_all(&host_dir).unwrap();
    fs::copy(argstash(), host_dir.join("argstash")).unwrap();
    let marker = format!("{inside}/started");
    let script = format!(
        "mount -t proc proc {root}/proc && exec chroot {root} {inside}/argstash run --python -- \
         python3.14 -c 'open(\"{marker}\", \"w\")'",
        root = root.display()
    );
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .output()
        .expect("run unshare");
    let started = root.join(marker.trim_start_matches('/')).exists();
    let _ = fs::remove_dir_all(&host_dir);
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("mount: ") || err.contains("unshare: ") {
        println!("SKIPPED run_python_on_3_14_is_refused_before_the_command_starts: {err}");
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        err.contains("(CPython 3.14.")
            && err.contains("entry frame on its own C stack")
            && err.contains("leave out --python"),
        "{err}"
    );
    assert!(!started, "the command ran its main after the refusal");
}
