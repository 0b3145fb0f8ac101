//! End-to-end: safe points proved on a libc without a symbol table (issue 19).
//!
//! Targets run chrooted in the Debian sid root that `scripts/sid-root.sh` builds
//! (`/var/cache/argstash-sid/root`, or `ARGSTASH_SID_ROOT`): its libc is stripped
//! to `.dynsym`, so a thread asleep stops in an unnamed stub below
//! `clock_nanosleep`. A program that can throw needs its hooks' unwind information
//! registered with libgcc before their jumps, by a call on a thread at a safe point;
//! without the proof from the kernel's system-call report every such inject was
//! refused. Each test runs fresh processes and counts how many injects registered.
//!
//! Skipped, with the reason printed, when the root is not there.
//! `ARGSTASH_SID_ROUNDS` overrides the number of processes per test (20).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use argstash_tests::*;

const LINE: Duration = Duration::from_secs(20);

/// The sid root, or `None` (with the reason printed) when tests cannot use it.
fn sid_root() -> Option<PathBuf> {
    let root = std::env::var_os("ARGSTASH_SID_ROOT").map_or_else(
        || PathBuf::from("/var/cache/argstash-sid/root"),
        PathBuf::from,
    );
    if !root.join(".argstash-sid-root").is_file() {
        eprintln!(
            "skipped: no Debian sid root at {} (built by scripts/sid-root.sh)",
            root.display()
        );
        return None;
    }
    Some(root)
}

/// Processes per test.
fn rounds() -> usize {
    std::env::var("ARGSTASH_SID_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

/// A directory of this test process inside the root (`/tmp/argstash-e2e-PID-what`
/// as the chrooted program sees it), removed on drop.
struct RootDir {
    host: PathBuf,
    inside: String,
}

impl RootDir {
    fn new(root: &Path, what: &str) -> RootDir {
        let inside = format!("/tmp/argstash-e2e-{}-{what}", std::process::id());
        let host = root.join(inside.trim_start_matches('/'));
        let _ = fs::remove_dir_all(&host);
        fs::create_dir_all(&host).unwrap_or_else(|e| panic!("mkdir {}: {e}", host.display()));
        RootDir { host, inside }
    }
}

impl Drop for RootDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.host);
    }
}

/// `calls`, `caught`, `bad` from the sleeper's next status line.
fn status(t: &mut Target) -> (u64, u64, u64) {
    let line = t.wait_for_line(LINE, |l| l.starts_with("calls="));
    let mut it = line.split_whitespace().map(|kv| {
        kv.split_once('=')
            .and_then(|(_, v)| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("bad status line {line:?}"))
    });
    (it.next().unwrap(), it.next().unwrap(), it.next().unwrap())
}

/// True when inject's output says the hook's unwind information was registered with
/// the root's libgcc (the call made on a thread at a proved safe point).
fn registered(text: &str, root: &Path) -> bool {
    text.contains(&format!(
        "unwind info registered with {}",
        root.join("usr/lib/x86_64-linux-gnu/libgcc_s.so.1")
            .display()
    )) && text.contains("for 1 hooks")
}

/// A C++ program built with the root's g++ (stripped libc, libstdc++, libgcc_s),
/// its thread asleep in `sleep_for` (`clock_nanosleep`): every inject of `risky`
/// registers, exceptions then cross the hook, bt and eject work.
#[test]
fn cpp_sleeper_registers_at_proved_safe_points() {
    cpp_rounds("sleep", &[]);
}

/// The same with every thread waiting in `futex`: a worker in a condition
/// variable's timed wait (provable: a futex wait on its own stack's word below
/// `pthread_cond_clockwait`), the main thread in `std::thread::join` (not provable:
/// four unnamed libc frames below libstdc++).
#[test]
fn cpp_condvar_waiter_registers_at_proved_safe_points() {
    cpp_rounds("condvar", &["condvar"]);
}

/// Rounds of the sid_sleeper fixture, started with `args`.
fn cpp_rounds(what: &str, args: &[&str]) {
    let Some(root) = sid_root() else { return };
    let dir = RootDir::new(&root, &format!("sleeper-{what}"));
    fs::copy(
        fixture_path("sid_sleeper.cpp"),
        dir.host.join("sid_sleeper.cpp"),
    )
    .expect("copy the fixture into the root");
    let exe = format!("{}/sid_sleeper", dir.inside);
    let out = run_command(
        Command::new("chroot").arg(&root).args([
            "g++",
            "-O2",
            "-o",
            &exe,
            &format!("{}/sid_sleeper.cpp", dir.inside),
        ]),
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "g++ in the sid root failed: {}",
        output_text(&out)
    );
    let root_arg = root.to_str().expect("UTF-8 root path");
    let n = rounds();
    let mut accepted = 0;
    for round in 0..n {
        let mut argv = vec![root_arg, exe.as_str()];
        argv.extend_from_slice(args);
        let mut t = Target::spawn_with_args(Path::new("chroot"), &argv);
        let pid = t.pid().to_string();
        let before = status(&mut t);
        let out = run(&["inject", "--pid", &pid, "--func", "risky"]);
        let text = output_text(&out);
        assert!(out.status.success(), "round {round}: inject failed: {text}");
        assert!(
            registered(&text, &root),
            "round {round}: inject did not register: {text}"
        );
        accepted += 1;
        // Exceptions now cross the hooked frame: the program must keep catching them.
        let mut after = status(&mut t);
        while after.1 < before.1 + 5 {
            after = status(&mut t);
        }
        assert_eq!(after.2, 0, "round {round}: wrong results after inject");
        assert!(t.is_alive(), "round {round}: died: {}", t.stderr_text());
        // bt names the program's and libc's frames from the files in the root (their
        // maps paths are host-absolute; argstash opens them through /proc/PID/root).
        let bt = run_ok(&["bt", "--pid", &pid]);
        let main_frame = format!("in main () from {}", dir.host.join("sid_sleeper").display());
        let libc = root.join("usr/lib/x86_64-linux-gnu/libc.so.6");
        assert!(
            bt.contains(&main_frame) && bt.contains(&format!("from {}", libc.display())),
            "round {round}: bt lacks {main_frame:?} or a frame of {}: {bt}",
            libc.display()
        );
        // Eject names the module by its path inside the root: the same file as the
        // host-absolute path the hook records (compared through /proc/PID/root).
        let in_root = format!("{exe}!risky");
        let out = run(&["eject", "--pid", &pid, "--func", &in_root]);
        assert!(
            out.status.success(),
            "round {round}: eject failed: {}",
            output_text(&out)
        );
        let last = status(&mut t);
        assert_eq!(last.2, 0, "round {round}: wrong results after eject");
        assert!(t.is_alive(), "round {round}: died after eject");
        t.kill();
        remove_argstash_tmp_files(t.pid());
    }
    eprintln!("sid C++ sleeper ({what}): {accepted}/{n} injects registered at a proved safe point");
    assert_eq!(accepted, n);
}

/// CPython 3.15 in the root links libgcc_s, so argstash counts it as able to throw:
/// a hook in the interpreter needs registration, on its main thread asleep in
/// `time.sleep`.
#[test]
fn python_in_time_sleep_registers_at_proved_safe_points() {
    let Some(root) = sid_root() else { return };
    let python = "/usr/bin/python3.15";
    if !root.join(python.trim_start_matches('/')).exists() {
        eprintln!("skipped: no {python} in {}", root.display());
        return;
    }
    let root_arg = root.to_str().expect("UTF-8 root path");
    let script = "import os, time\nprint('ready', os.getpid(), flush=True)\n\
                  while True:\n    time.sleep(0.05)\n";
    let n = rounds();
    let mut accepted = 0;
    for round in 0..n {
        let t = Target::spawn_with_args(Path::new("chroot"), &[root_arg, python, "-c", script]);
        let pid = t.pid().to_string();
        let out = run(&["inject", "--pid", &pid, "--func", "PyLong_FromLong"]);
        let text = output_text(&out);
        assert!(out.status.success(), "round {round}: inject failed: {text}");
        assert!(
            registered(&text, &root),
            "round {round}: inject did not register: {text}"
        );
        accepted += 1;
        let out = run(&["eject", "--pid", &pid, "--func", "PyLong_FromLong"]);
        assert!(
            out.status.success(),
            "round {round}: eject failed: {}",
            output_text(&out)
        );
        assert!(t.is_alive(), "round {round}: died: {}", t.stderr_text());
        remove_argstash_tmp_files(t.pid());
    }
    eprintln!(
        "sid python3.15 in time.sleep: {accepted}/{n} injects registered at a proved safe point"
    );
    assert_eq!(accepted, n);
}
