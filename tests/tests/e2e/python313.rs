//! End-to-end: CPython 3.13, 3.14 and 3.15 read through their own
//! `_Py_DebugOffsets` (issue 22): `bt` (live and `--core`) and `bt --python`
//! show the Python frames, with names, files, lines and arguments, of Debian's
//! static interpreters and of a C program embedding `libpython3.1X.so`;
//! `record --python` places them in every sample (started or `--pid`); damaged
//! offsets, a fake 3.16 and a 10,000-deep recursion each end in a clear note.
//! (`bt` through argstashd: `daemon/tests/python313.rs`.)
//!
//! Targets run chrooted in the Debian sid root of `scripts/sid-root.sh`
//! (`/var/cache/argstash-sid/root`, or `ARGSTASH_SID_ROOT`). The fixture
//! (`tests/fixtures/python/offsets_app.py`) prints its own frames as Python sees
//! them; every check compares with that report. Skipped, with the reason
//! printed, without the root (or, for embedding, without `python3.1X-config`).

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use argstash_tests::*;
use serde_json::Value;

const LINE: Duration = Duration::from_secs(30);
/// The minor versions the root carries.
const MINORS: [u8; 3] = [13, 14, 15];

/// The sid root, or `None` (with the reason printed) when tests cannot use it.
fn sid_root(test: &str) -> Option<PathBuf> {
    let root = std::env::var_os("ARGSTASH_SID_ROOT").map_or_else(
        || PathBuf::from("/var/cache/argstash-sid/root"),
        PathBuf::from,
    );
    if !root.join(".argstash-sid-root").is_file() {
        println!(
            "SKIPPED {test}: no Debian sid root at {} (built by scripts/sid-root.sh)",
            root.display()
        );
        return None;
    }
    Some(root)
}

/// A directory of this test inside the root, with the fixtures copied in;
/// removed on drop.
struct RootDir {
    root: PathBuf,
    host: PathBuf,
    inside: String,
}

impl RootDir {
    fn new(root: &Path, what: &str) -> RootDir {
        let inside = format!("/tmp/argstash-e2e-{}-py-{what}", std::process::id());
        let host = root.join(inside.trim_start_matches('/'));
        let _ = fs::remove_dir_all(&host);
        fs::create_dir_all(&host).unwrap_or_else(|e| panic!("mkdir {}: {e}", host.display()));
        for f in [
            "offsets_app.py",
            "embed.c",
            "profsplit.py",
            "c_work.c",
            "subinterp_app.py",
        ] {
            fs::copy(fixtures_dir().join("python").join(f), host.join(f))
                .unwrap_or_else(|e| panic!("copy {f}: {e}"));
        }
        RootDir {
            root: root.to_path_buf(),
            host,
            inside,
        }
    }

    /// The fixture script as the chrooted process sees it.
    fn script(&self) -> String {
        format!("{}/offsets_app.py", self.inside)
    }

    /// Runs `argv` chrooted in the root.
    fn spawn(&self, argv: &[&str]) -> Target {
        let mut all = vec![self.root.to_str().expect("UTF-8 root")];
        all.extend_from_slice(argv);
        Target::spawn_with_args(Path::new("chroot"), &all)
    }

    /// The static interpreter 3.`minor` running the fixture in `mode`.
    fn python(&self, minor: u8, mode: &[&str]) -> Target {
        let exe = format!("/usr/bin/python3.{minor}");
        let script = self.script();
        let mut argv = vec![exe.as_str(), script.as_str()];
        argv.extend_from_slice(mode);
        self.spawn(&argv)
    }

    /// Runs `cmd` with `sh -c` chrooted in the root; its output, or why it failed.
    fn sh(&self, cmd: &str) -> Result<(), String> {
        let out = run_command(
            Command::new("chroot")
                .arg(&self.root)
                .args(["sh", "-c", cmd]),
            Duration::from_secs(120),
        );
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("{cmd}: {}", output_text(&out)))
        }
    }

    /// `c_work.c` (profsplit.py's C half) built in the root with its own gcc.
    fn c_work_lib(&self) -> String {
        let lib = format!("{}/libcwork.so", self.inside);
        let cmd = format!("gcc -O2 -g -shared -fPIC -o {lib} {}/c_work.c", self.inside);
        self.sh(&cmd).unwrap_or_else(|e| panic!("{e}"));
        lib
    }

    /// `embed.c` built in the root against libpython3.`minor`, or why not.
    fn embedder(&self, minor: u8) -> Result<String, String> {
        let config = format!("/usr/bin/python3.{minor}-config");
        if !self.root.join(config.trim_start_matches('/')).exists() {
            return Err(format!("no {config} in the root (python3.{minor}-dev)"));
        }
        let exe = format!("{}/embed3{minor}", self.inside);
        if self.root.join(exe.trim_start_matches('/')).is_file() {
            return Ok(exe);
        }
        let cmd = format!(
            "gcc -O1 -o {exe} {dir}/embed.c $({config} --cflags --ldflags --embed)",
            dir = self.inside
        );
        self.sh(&cmd)?;
        Ok(exe)
    }
}

impl Drop for RootDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.host);
    }
}

/// One frame as the script reported it.
type Seen = ReportedFrame;

/// The Python frames of a `bt --json` thread, as the script reports frames.
fn python_frames(frames: &[Value]) -> Vec<Seen> {
    frames
        .iter()
        .filter(|f| f["kind"] == "python")
        .map(|f| Seen {
            function: f["function"].as_str().unwrap().to_string(),
            file: f["file"].as_str().unwrap().to_string(),
            line: f["line"].as_i64().unwrap_or(-1),
            params: f["params"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    (
                        p["name"].as_str().unwrap().to_string(),
                        p["display"].as_str().unwrap().to_string(),
                    )
                })
                .collect(),
        })
        .collect()
}

/// `[py] NAME (a=1, *b=...) at FILE:LINE` as the text backtrace prints a reported frame.
fn text_of(s: &Seen, stars: &[(&str, &str)]) -> String {
    let params: Vec<String> = s
        .params
        .iter()
        .map(|(n, d)| {
            let star = stars.iter().find(|(name, _)| name == n).map_or("", |s| s.1);
            format!("{star}{n}={d}")
        })
        .collect();
    format!(
        "[py] {} ({}) at {}:{}",
        s.function,
        params.join(", "),
        s.file,
        s.line
    )
}

fn main_thread(bt: &Value, pid: i32) -> &Value {
    bt_thread(bt, pid).unwrap_or_else(|| panic!("no thread {pid} in {bt}"))
}

/// Lets `t` (past its `ready` line) build its stack, and returns its report.
fn go(t: &mut Target) -> Vec<Seen> {
    t.write_stdin("go\n");
    read_python_report(t, LINE)
}

/// Checks live `bt --json` and `bt --python` of a blocked fixture against its report.
fn check_live(t: &mut Target, what: &str) {
    let seen = go(t);
    let pid = t.pid();
    wait_main_thread_reading(pid);
    assert_eq!(seen[0].function, "innermost", "{what}: {seen:?}");
    assert!(seen.iter().any(|s| s.function == "Outer.method"), "{what}");
    let bt = bt_json(pid, None);
    let thread = main_thread(&bt, pid);
    assert_eq!(
        python_frames(thread_frames(thread)),
        seen,
        "{what}: {thread:#}"
    );
    let notes = thread["python_notes"].to_string();
    assert!(!notes.contains("end early"), "{what}: {notes}");
    // One interpreter: no frame is labeled with it.
    assert!(
        thread_frames(thread)
            .iter()
            .all(|f| f.get("interpreter").is_none()),
        "{what}: {thread:#}"
    );
    // One evaluator call runs them all, found by its entry frame.
    let py: Vec<&Value> = thread_frames(thread)
        .iter()
        .filter(|f| f["kind"] == "python")
        .collect();
    assert!(
        py.iter()
            .all(|f| f["paired_by"] == "entry-frame" && f["eval_frame"] == py[0]["eval_frame"]),
        "{what}: {thread:#}"
    );
    let text = run_ok(&["bt", "--pid", &pid.to_string(), "--python"]);
    let method = seen.iter().find(|s| s.function == "Outer.method").unwrap();
    for s in [&seen[0], method] {
        let line = text_of(s, &[("rest", "*"), ("kw", "**")]);
        assert!(text.contains(&line), "{what}: no {line:?} in\n{text}");
    }
    t.assert_healthy();
    t.write_stdin("\n");
    assert!(t.wait_exit(LINE).is_some_and(|s| s.success()), "{what}");
}

#[test]
fn bt_shows_the_python_frames_of_the_static_interpreters() {
    let Some(root) = sid_root("bt_shows_the_python_frames_of_the_static_interpreters") else {
        return;
    };
    let dir = RootDir::new(&root, "static");
    for minor in MINORS {
        let mut t = dir.python(minor, &["block"]);
        check_live(&mut t, &format!("python3.{minor}"));
    }
}

/// Checks that `bt --json` of a blocked `callback` fixture pairs its two evaluator
/// calls by their entry frames: every Python frame `entry-frame`, the inner run
/// (innermost .. <lambda>) with an inner native frame than the outer run
/// (Outer.method .. <module>), each run contiguous and right before its native
/// frame, native frames (sorted's C code) between the two.
fn check_entry_pairing(t: &mut Target, what: &str) {
    let seen = go(t);
    let pid = t.pid();
    wait_main_thread_reading(pid);
    let lambda = seen
        .iter()
        .position(|s| s.function.ends_with("<lambda>"))
        .unwrap_or_else(|| panic!("{what}: no lambda in {seen:?}"));
    let bt = bt_json(pid, None);
    let thread = main_thread(&bt, pid);
    let frames = thread_frames(thread);
    assert_eq!(python_frames(frames), seen, "{what}: {thread:#}");
    let py: Vec<(usize, &Value)> = frames
        .iter()
        .enumerate()
        .filter(|(_, f)| f["kind"] == "python")
        .collect();
    for (_, f) in &py {
        assert_eq!(f["paired_by"], "entry-frame", "{what}: {f:#}");
    }
    let eval = |i: usize| py[i].1["eval_frame"].as_u64();
    let (inner, outer) = (eval(0), eval(lambda + 1));
    assert!(inner.is_some() && outer.is_some(), "{what}: {thread:#}");
    assert!(
        inner < outer,
        "{what}: inner run at {inner:?}, outer at {outer:?}"
    );
    for i in 0..py.len() {
        let want = if i <= lambda { inner } else { outer };
        assert_eq!(eval(i), want, "{what}: Python frame {i}: {thread:#}");
    }
    // Merged order: each run contiguous, then its evaluator frame (native), and
    // the C code that called the key function between the two runs.
    let (first_inner, last_inner) = (py[0].0, py[lambda].0);
    let (first_outer, last_outer) = (py[lambda + 1].0, py[py.len() - 1].0);
    assert_eq!(
        last_inner - first_inner,
        lambda,
        "{what}: inner run not contiguous"
    );
    assert_eq!(
        last_outer - first_outer,
        py.len() - lambda - 2,
        "{what}: outer run not contiguous"
    );
    assert!(
        first_outer > last_inner + 1 && frames[last_inner + 1]["kind"] != "python",
        "{what}: no native frame between the runs: {thread:#}"
    );
    assert!(
        thread["python_notes"]
            .as_array()
            .is_none_or(|n| n.is_empty()),
        "{what}: {thread:#}"
    );
    t.assert_healthy();
    t.write_stdin("\n");
    assert!(t.wait_exit(LINE).is_some_and(|s| s.success()), "{what}");
}

#[test]
fn python_frames_pair_with_their_evaluator_calls_by_entry_frame() {
    let Some(root) = sid_root("python_frames_pair_with_their_evaluator_calls_by_entry_frame")
    else {
        return;
    };
    let dir = RootDir::new(&root, "entry");
    for minor in MINORS {
        let mut t = dir.python(minor, &["callback"]);
        check_entry_pairing(&mut t, &format!("python3.{minor}"));
    }
}

#[test]
fn bt_shows_the_python_frames_of_programs_embedding_libpython() {
    let Some(root) = sid_root("bt_shows_the_python_frames_of_programs_embedding_libpython") else {
        return;
    };
    let dir = RootDir::new(&root, "embed");
    for minor in MINORS {
        let exe = match dir.embedder(minor) {
            Ok(exe) => exe,
            Err(why) => {
                println!("SKIPPED embedding 3.{minor}: {why}");
                continue;
            }
        };
        let script = dir.script();
        let mut t = dir.spawn(&[&exe, &script, "block"]);
        check_live(&mut t, &format!("embedded libpython3.{minor}"));
    }
}

/// The core file name pattern, when it is a plain name (written to the cwd).
fn core_file_name() -> Option<String> {
    let pattern = fs::read_to_string("/proc/sys/kernel/core_pattern").ok()?;
    let pattern = pattern.trim();
    (!pattern.is_empty() && !pattern.contains(['/', '%', '|'])).then(|| pattern.to_string())
}

#[test]
fn bt_core_shows_the_python_frames() {
    let Some(root) = sid_root("bt_core_shows_the_python_frames") else {
        return;
    };
    let Some(pattern) = core_file_name() else {
        println!("SKIPPED bt_core_shows_the_python_frames: core_pattern is not a plain file name (sysctl kernel.core_pattern=core)");
        return;
    };
    let dir = RootDir::new(&root, "core");
    let script = dir.script();
    for minor in MINORS {
        let python = format!("/usr/bin/python3.{minor}");
        let mut runs = vec![(format!("python3.{minor}"), vec![python, script.clone()])];
        match dir.embedder(minor) {
            Ok(exe) => runs.push((format!("embedded 3.{minor}"), vec![exe, script.clone()])),
            Err(why) => println!("SKIPPED the core of embedded 3.{minor}: {why}"),
        }
        for (i, (what, argv)) in runs.into_iter().enumerate() {
            core_case(&dir, &pattern, &format!("cores3{minor}-{i}"), &argv, &what);
        }
    }
}

/// Runs `argv` (the fixture, given its mode after) in `crash` mode with its core
/// written to directory `name`, and checks `bt --core` against its report.
fn core_case(dir: &RootDir, pattern: &str, name: &str, argv: &[String], what: &str) {
    let cores = format!("{}/{name}", dir.inside);
    let cores_host = dir.host.join(name);
    fs::create_dir_all(&cores_host).unwrap();
    let mut all: Vec<&str> = argv.iter().map(String::as_str).collect();
    all.extend(["crash", cores.as_str()]);
    let mut t = dir.spawn(&all);
    let pid = t.pid();
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: prlimit only reads `unlimited` (old limit pointer null).
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_CORE, &unlimited, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
    let seen = go(&mut t);
    let status = t.wait_exit(LINE).unwrap_or_else(|| t.fail("did not abort"));
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{what}: {status:?}");
    let candidates = [
        cores_host.join(pattern),
        cores_host.join(format!("{pattern}.{pid}")),
    ];
    let mut core = None;
    wait_until(Duration::from_secs(30), || {
        core = candidates.iter().find(|p| p.is_file()).cloned();
        core.is_some()
    });
    let core = core.unwrap_or_else(|| panic!("{what}: no core among {candidates:?}"));
    let core_s = core.to_str().unwrap();
    let root_s = dir.root.to_str().unwrap();
    let bt = run_json(&["bt", "--core", core_s, "--sysroot", root_s, "--json"]);
    let thread = main_thread(&bt, pid);
    assert_eq!(
        python_frames(thread_frames(thread)),
        seen,
        "{what}: {thread:#}"
    );
    let text = run_ok(&["bt", "--core", core_s, "--sysroot", root_s, "--python"]);
    let line = text_of(&seen[0], &[]);
    assert!(text.contains(&line), "{what}: no {line:?} in\n{text}");
    println!(
        "bt --core of {what}: {} Python frames as reported",
        seen.len()
    );
}

#[test]
fn ten_thousand_deep_recursion_stops_at_the_frame_limit_with_a_note() {
    let Some(root) = sid_root("ten_thousand_deep_recursion_stops_at_the_frame_limit_with_a_note")
    else {
        return;
    };
    let dir = RootDir::new(&root, "deep");
    for minor in MINORS {
        let mut t = dir.python(minor, &["deep"]);
        t.write_stdin("go\n");
        t.wait_for_line(LINE, |l| l == "bottom");
        let pid = t.pid();
        wait_main_thread_reading(pid);
        let bt = bt_json(pid, None);
        let thread = main_thread(&bt, pid);
        let py: Vec<&Value> = thread_frames(thread)
            .iter()
            .filter(|f| f["kind"] == "python")
            .collect();
        // Innermost first, cut at the limit with a note, never a failure.
        assert!(
            py.len() >= 100 && py.len() < 10_000,
            "3.{minor}: {} frames",
            py.len()
        );
        for (i, f) in py.iter().take(100).enumerate() {
            assert_eq!(f["function"], "deep", "3.{minor}");
            assert_eq!(f["params"][0]["display"], i.to_string(), "3.{minor}");
        }
        let notes = thread["python_notes"].to_string();
        assert!(notes.contains("limit"), "3.{minor}: {notes}");
        t.assert_healthy();
        t.write_stdin("\n");
        assert!(t.wait_exit(LINE).is_some_and(|s| s.success()), "3.{minor}");
    }
}

/// Runtime address of `_PyRuntime` in `pid`, whose executable is `exe` (host path).
fn runtime_addr(pid: i32, exe: &Path) -> u64 {
    let sym = symbol(exe, "_PyRuntime").expect("_PyRuntime in .dynsym");
    let lowest = elf_load_segments(exe)
        .iter()
        .map(|s| s.vaddr & !0xfff)
        .min()
        .unwrap();
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let name = exe.file_name().unwrap().to_str().unwrap();
    let start = maps
        .lines()
        .find(|l| l.ends_with(name) && l.split_whitespace().nth(2) == Some("00000000"))
        .and_then(|l| l.split('-').next())
        .map(|s| u64::from_str_radix(s, 16).unwrap())
        .unwrap_or_else(|| panic!("{name} not mapped in\n{maps}"));
    sym.addr + (start - lowest)
}

/// Writes `bytes` at `addr` of `pid` (the test damaging its target on purpose).
fn poke(pid: i32, addr: u64, bytes: &[u8]) -> Vec<u8> {
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .unwrap();
    let mut old = vec![0; bytes.len()];
    f.seek(SeekFrom::Start(addr)).unwrap();
    f.read_exact(&mut old).unwrap();
    f.seek(SeekFrom::Start(addr)).unwrap();
    f.write_all(bytes).unwrap();
    old
}

#[test]
fn damaged_debug_offsets_are_refused_by_name_and_native_frames_shown() {
    let Some(root) = sid_root("damaged_debug_offsets_are_refused_by_name_and_native_frames_shown")
    else {
        return;
    };
    let dir = RootDir::new(&root, "damaged");
    for minor in MINORS {
        let mut t = dir.python(minor, &["block"]);
        let pid = t.pid();
        wait_main_thread_reading(pid);
        let exe = root.join(format!("usr/bin/python3.{minor}"));
        let runtime = runtime_addr(pid, &exe);
        let pid_s = pid.to_string();
        // (offset in _Py_DebugOffsets, new bytes, what the note must say)
        let version_hex = 0x0300_00f0u64 | (u64::from(minor) << 16);
        let cases: [(u64, Vec<u8>, &str); 4] = [
            (0, b"ydebugpy".to_vec(), "cookie is missing"),
            (
                8,
                version_hex.to_le_bytes().to_vec(),
                "but the interpreter is",
            ),
            (16, 1u64.to_le_bytes().to_vec(), "free-threaded"),
            // runtime_state.size
            (24, 0u64.to_le_bytes().to_vec(), "runtime_state.size is 0"),
        ];
        for (off, bytes, needle) in cases {
            let old = poke(pid, runtime + off, &bytes);
            let bt = bt_json(pid, None);
            let thread = main_thread(&bt, pid);
            let notes = thread["python_notes"].to_string();
            assert!(notes.contains(needle), "3.{minor} {needle}: {notes}");
            assert!(notes.contains("_Py_DebugOffsets"), "3.{minor}: {notes}");
            assert!(notes.contains("only native frames"), "3.{minor}: {notes}");
            let frames = thread_frames(thread);
            assert!(frames.iter().all(|f| f["kind"] == "native"), "3.{minor}");
            assert!(frames.len() > 3, "3.{minor}: {frames:#?}");
            let text = run_ok(&["bt", "--pid", &pid_s]);
            assert!(text.contains(needle), "3.{minor}: {text}");
            poke(pid, runtime + off, &old);
        }
        // Restored: read again, and the process never noticed.
        let seen = go(&mut t);
        wait_main_thread_reading(pid);
        let bt = bt_json(pid, None);
        assert_eq!(python_frames(thread_frames(main_thread(&bt, pid))), seen);
        t.assert_healthy();
        t.write_stdin("\n");
        assert!(t.wait_exit(LINE).is_some_and(|s| s.success()), "3.{minor}");
    }
}

#[test]
fn a_fake_316_publishing_debug_offsets_is_refused_by_name() {
    let src = fixtures_dir().join("python/fake_cpython.c");
    let out = fixture_cache_dir().join(format!("fake-cpython-316-{}", std::process::id()));
    if !out.exists() {
        compile_c(
            &src,
            &out,
            &[
                "-O0",
                "-g",
                "-rdynamic",
                "-DDEBUG_OFFSETS",
                "-DFAKE_VERSION=0x031000F0",
            ],
        );
    }
    let mut t = Target::spawn(&out);
    let pid = t.pid();
    let bt = bt_json(pid, None);
    let thread = main_thread(&bt, pid);
    let notes = thread["python_notes"].to_string();
    assert!(
        notes.contains("CPython 3.16.0 has no known memory layout"),
        "{notes}"
    );
    assert!(notes.contains("never guessed"), "{notes}");
    let frames = thread_frames(thread);
    assert!(frames.iter().all(|f| f["kind"] == "native"), "{frames:#?}");
    assert!(frames
        .iter()
        .any(|f| f["function"] == "_PyEval_EvalFrameDefault"));
    t.assert_healthy();
}

/// Starts and ends short-lived threads without pause while the main thread
/// blocks in `wait_here(tag)` reading stdin.
const CHURN: &str = "import os, sys, threading\n\
def short(i):\n    return sum(range(i % 50))\n\
def churn():\n    i = 0\n    while True:\n        ts = [threading.Thread(target=short, args=(i + k,)) for k in range(4)]\n        for t in ts: t.start()\n        for t in ts: t.join()\n        i += 1\n\
def wait_here(tag):\n    print('ready %d' % os.getpid(), flush=True)\n    sys.stdin.readline()\n\
threading.Thread(target=churn, daemon=True).start()\n\
wait_here('churning')\n";

#[test]
fn thread_states_torn_down_while_read_never_fail_the_backtrace() {
    let Some(root) = sid_root("thread_states_torn_down_while_read_never_fail_the_backtrace") else {
        return;
    };
    let dir = RootDir::new(&root, "churn");
    fs::write(dir.host.join("churn.py"), CHURN).unwrap();
    let script = format!("{}/churn.py", dir.inside);
    for minor in MINORS {
        let exe = format!("/usr/bin/python3.{minor}");
        let mut t = dir.spawn(&[&exe, &script]);
        let pid = t.pid();
        wait_main_thread_reading(pid);
        let pid_s = pid.to_string();
        for round in 0..30 {
            let out = run(&["bt", "--pid", &pid_s, "--json"]);
            assert!(
                out.status.success(),
                "3.{minor} round {round}: {}",
                output_text(&out)
            );
            let bt: Value = serde_json::from_slice(&out.stdout).unwrap();
            let thread = main_thread(&bt, pid);
            let main = python_frames(thread_frames(thread));
            let names: Vec<&str> = main.iter().map(|s| s.function.as_str()).collect();
            assert_eq!(
                names,
                ["wait_here", "<module>"],
                "3.{minor} round {round}; Python notes: {}",
                thread["python_notes"]
            );
            assert_eq!(
                main[0].params,
                [("tag".to_string(), "'churning'".to_string())]
            );
        }
        t.assert_healthy();
        t.write_stdin("\n");
        assert!(t.wait_exit(LINE).is_some(), "3.{minor}");
    }
}

/// Checks a `record --python` profile of `profsplit.py` (collapsed stacks) and
/// its stderr: Python frames named and nested as the script runs them, and C
/// work under the Python frame that calls it, never under the one that ran
/// before it (each sample's Python frames are paired with its own native stack).
fn check_profile(stacks: &Stacks, stderr: &str, minor: u8, what: &str) {
    let note = format!("--python installs no hook in CPython 3.{minor}.");
    assert!(stderr.contains(&note), "{what}: no {note:?} in\n{stderr}");
    assert!(stderr.contains("entry frame"), "{what}: {stderr}");
    let py = |s: &[String]| -> Vec<String> {
        s.iter()
            .filter(|f| f.starts_with("[py] "))
            .cloned()
            .collect()
    };
    let mut loops = 0;
    let mut c = 0;
    for (s, n) in stacks {
        let names = py(s);
        if s.iter().any(|f| f == "c_work") {
            // c_work runs under <module> -> py_work, and its Python frames come
            // before it in the stack (root first).
            assert_eq!(names, ["[py] <module>", "[py] py_work"], "{what}: {s:?}");
            let last_py = s.iter().rposition(|f| f.starts_with("[py] ")).unwrap();
            let at = s.iter().position(|f| f == "c_work").unwrap();
            assert!(last_py < at, "{what}: {s:?}");
            c += n;
        } else if names.last().is_some_and(|f| f == "[py] py_loop") {
            assert_eq!(
                names,
                ["[py] <module>", "[py] py_work", "[py] py_loop"],
                "{what}: {s:?}"
            );
            loops += n;
        }
    }
    assert!(
        c >= 5 && loops >= 5,
        "{what}: {c} samples in c_work, {loops} in py_loop: {stacks:?}\n{stderr}"
    );
    println!("record --python of {what}: {loops} samples in py_loop, {c} in c_work");
}

/// `record --python` on a started program and on a running one (`--pid`):
/// the static interpreters and embedded libpython, each minor version.
#[test]
fn record_python_places_the_python_frames_of_313_and_later() {
    let Some(root) = sid_root("record_python_places_the_python_frames_of_313_and_later") else {
        return;
    };
    let dir = RootDir::new(&root, "record");
    let lib = dir.c_work_lib();
    let script = format!("{}/profsplit.py", dir.inside);
    let root_s = root.to_str().unwrap();
    for minor in MINORS {
        // Started by record, chrooted: the executable is chroot's until it execs.
        let out_file = dir.host.join(format!("static3{minor}.txt"));
        let exe = format!("/usr/bin/python3.{minor}");
        let out = record_ok(&[
            "--rate",
            "499",
            "--python",
            "-o",
            out_file.to_str().unwrap(),
            "--",
            "chroot",
            root_s,
            &exe,
            &script,
            &lib,
            "1.5",
        ]);
        let what = format!("python3.{minor} started by record");
        assert!(text(&out.stdout).contains("pysplit"), "{what}: {out:?}");
        check_profile(&collapsed(&out_file), &text(&out.stderr), minor, &what);

        // Running already: an embedding program, recorded by --pid.
        let embed = match dir.embedder(minor) {
            Ok(exe) => exe,
            Err(why) => {
                println!("SKIPPED record of embedded 3.{minor}: {why}");
                continue;
            }
        };
        let mut t = dir.spawn(&[&embed, &script, &lib, "4"]);
        let pid = t.pid().to_string();
        let out_file = dir.host.join(format!("embed3{minor}.txt"));
        let out = record_ok(&[
            "--pid",
            &pid,
            "--duration",
            "1.5",
            "--rate",
            "499",
            "--python",
            "-o",
            out_file.to_str().unwrap(),
        ]);
        let what = format!("embedded libpython3.{minor} by --pid");
        check_profile(&collapsed(&out_file), &text(&out.stderr), minor, &what);
        t.wait_for_line(LINE, |l| l.starts_with("pysplit"));
        assert!(t.wait_exit(LINE).is_some_and(|s| s.success()), "{what}");
    }
}

/// `argstash ARGS` run as uid 65534 (no CAP_SYS_ADMIN: `/proc/PID/map_files`
/// cannot be opened).
fn run_as_nobody(args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(argstash())
        .args(args)
        .env("XDG_CACHE_HOME", "/nonexistent");
    run_command(&mut cmd, RUN_TIMEOUT)
}

/// The interpreter's file (the static `python3.1X`, or the `libpython3.13`
/// an embedding program loaded) deleted, then replaced by another file, while
/// the process runs, as a package upgrade does: `bt` reads the mapped file
/// through `/proc/PID/map_files`, never the file now at the path (no warning
/// about it, every Python frame as before); where map_files cannot be opened
/// (uid 65534), the note names the file, the cause and the fix, and native
/// frames are shown.
#[test]
fn interpreter_files_deleted_or_replaced_after_start_are_read_as_mapped() {
    let Some(root) =
        sid_root("interpreter_files_deleted_or_replaced_after_start_are_read_as_mapped")
    else {
        return;
    };
    let dir = RootDir::new(&root, "replaced");
    let script = dir.script();
    // (what, the file to delete and replace (inside the root), argv)
    let mut cases: Vec<(String, String, Vec<String>)> = Vec::new();
    for minor in MINORS {
        let copy = format!("{}/python3.{minor}", dir.inside);
        fs::copy(
            root.join(format!("usr/bin/python3.{minor}")),
            dir.host.join(format!("python3.{minor}")),
        )
        .unwrap();
        let argv = vec![copy.clone(), script.clone(), "block".into()];
        cases.push((format!("python3.{minor}"), copy, argv));
    }
    match dir.embedder(13) {
        Ok(exe) => {
            let lib = "libpython3.13.so.1.0";
            let from = fs::read_dir(root.join("usr/lib"))
                .unwrap()
                .filter_map(Result::ok)
                .map(|e| e.path().join(lib))
                .find(|p| p.is_file())
                .unwrap_or_else(|| panic!("no {lib} under the root's /usr/lib"));
            let libdir = format!("{}/lib", dir.inside);
            fs::create_dir_all(dir.host.join("lib")).unwrap();
            fs::copy(&from, dir.host.join("lib").join(lib)).unwrap();
            let argv = vec![
                "/usr/bin/env".into(),
                format!("LD_LIBRARY_PATH={libdir}"),
                exe,
                script.clone(),
                "block".into(),
            ];
            cases.push(("embedded 3.13".into(), format!("{libdir}/{lib}"), argv));
        }
        Err(why) => println!("SKIPPED the embedded case: {why}"),
    }
    // Others (uid 65534) run the targets and traverse to the files.
    for d in [dir.host.clone(), dir.host.join("lib")] {
        if d.is_dir() {
            fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        }
    }
    for (what, file, argv) in cases {
        let mut all = vec!["--userspec=65534:65534", dir.root.to_str().unwrap()];
        all.extend(argv.iter().map(String::as_str));
        let mut t = Target::spawn_with_args(Path::new("chroot"), &all);
        let pid = t.pid();
        let host_file = dir.root.join(file.trim_start_matches('/'));
        let mapped = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        assert!(
            mapped.contains(host_file.to_str().unwrap()),
            "{what}: {file} not mapped:\n{mapped}"
        );
        let seen = go(&mut t);
        wait_main_thread_reading(pid);
        let pid_s = pid.to_string();
        let names = |bt: &Value| -> Vec<String> {
            thread_frames(main_thread(bt, pid))
                .iter()
                .map(|f| f["function"].as_str().unwrap_or("??").to_string())
                .collect()
        };
        let before = names(&bt_json(pid, None));
        for change in ["deleted", "replaced"] {
            if change == "deleted" {
                fs::remove_file(&host_file).unwrap();
            } else {
                // Not an ELF file at all: reading it in the mapped one's stead warns.
                let other = host_file.with_extension("new");
                fs::write(&other, vec![b'x'; 4096]).unwrap();
                fs::rename(&other, &host_file).unwrap();
            }
            let out = run(&["bt", "--pid", &pid_s, "--json"]);
            assert!(
                out.status.success(),
                "{what} {change}: {}",
                output_text(&out)
            );
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                !stderr.contains(host_file.to_str().unwrap()),
                "{what} {change}: the file at the path was read: {stderr}"
            );
            let bt: Value = serde_json::from_slice(&out.stdout).unwrap();
            let thread = main_thread(&bt, pid);
            assert_eq!(
                python_frames(thread_frames(thread)),
                seen,
                "{what} {change}: {thread:#}"
            );
            assert_eq!(names(&bt), before, "{what} {change}");

            // Without CAP_SYS_ADMIN the mapped file cannot be opened: refused by name.
            let out = run_as_nobody(&["bt", "--pid", &pid_s, "--json"]);
            assert!(
                out.status.success(),
                "{what} {change}: {}",
                output_text(&out)
            );
            let bt: Value = serde_json::from_slice(&out.stdout).unwrap();
            let thread = main_thread(&bt, pid);
            let notes = thread["python_notes"].to_string();
            for needle in [
                format!("{} was {change} on disk", host_file.display()),
                "CAP_SYS_ADMIN".to_string(),
                "restart the process".to_string(),
                "only native frames".to_string(),
            ] {
                assert!(
                    notes.contains(&needle),
                    "{what} {change}: no {needle:?} in {notes}"
                );
            }
            let frames = thread_frames(thread);
            assert!(
                frames.iter().all(|f| f["kind"] == "native") && !frames.is_empty(),
                "{what} {change}: {thread:#}"
            );
        }
        t.assert_healthy();
        t.write_stdin("\n");
        assert!(t.wait_exit(LINE).is_some_and(|s| s.success()), "{what}");
    }
}

/// Subinterpreters (`_interpreters`): the main thread runs code in one, a second
/// thread in another. Every interpreter's threads are walked: each OS thread's
/// frames of every interpreter it is in, innermost first, each labeled with its
/// interpreter's id, all paired by entry frame; checked against the frames each
/// interpreter reports of itself.
#[test]
fn subinterpreters_frames_are_all_read_and_labeled_with_their_interpreter() {
    let Some(root) =
        sid_root("subinterpreters_frames_are_all_read_and_labeled_with_their_interpreter")
    else {
        return;
    };
    let dir = RootDir::new(&root, "subinterp");
    let script = format!("{}/subinterp_app.py", dir.inside);
    for minor in MINORS {
        let what = format!("python3.{minor}");
        let exe = format!("/usr/bin/python3.{minor}");
        let mut t = dir.spawn(&[&exe, &script]);
        let pid = t.pid();
        t.write_stdin("go\n");
        let ids: Vec<i64> = t
            .wait_for_line(LINE, |l| l.starts_with("ids "))
            .split(' ')
            .skip(1)
            .map(|n| n.parse().unwrap())
            .collect();
        let (main_tid, thread_tid, sub_a, sub_b) = (ids[0], ids[1], ids[2], ids[3]);
        assert_eq!(main_tid, i64::from(pid), "{what}");
        assert!(sub_a > 0 && sub_b > 0 && sub_a != sub_b, "{what}: {ids:?}");
        // (interpreter id, function, file, line), innermost first.
        let mut seen: Vec<(i64, String, String, i64)> = Vec::new();
        loop {
            let line = t.expect_line(LINE);
            let f: Vec<&str> = line.split('\t').collect();
            match f.as_slice() {
                ["frame", id, q, file, l] => seen.push((
                    id.parse().unwrap(),
                    q.to_string(),
                    file.to_string(),
                    l.parse().unwrap(),
                )),
                ["end"] => break,
                _ => t.fail(&format!("unexpected report line {line:?}")),
            }
        }
        wait_main_thread_reading(pid);
        let bt = bt_json(pid, None);
        let frames_of = |tid: i64| -> Vec<(i64, String, String, i64, String)> {
            let thread = bt_thread(&bt, tid as i32).unwrap_or_else(|| panic!("no {tid} in {bt}"));
            assert!(
                thread["python_notes"]
                    .as_array()
                    .is_none_or(|n| n.is_empty()),
                "{what}: {thread:#}"
            );
            thread_frames(thread)
                .iter()
                .filter(|f| f["kind"] == "python")
                .map(|f| {
                    (
                        f["interpreter"]["id"].as_i64().unwrap_or(-1),
                        f["function"].as_str().unwrap().to_string(),
                        f["file"].as_str().unwrap().to_string(),
                        f["line"].as_i64().unwrap_or(-1),
                        f["paired_by"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        };
        let main: Vec<(i64, String, String, i64)> = frames_of(main_tid)
            .into_iter()
            .map(|(id, f, file, line, by)| {
                assert_eq!(by, "entry-frame", "{what}: {f}");
                (id, f, file, line)
            })
            .collect();
        assert_eq!(main, seen, "{what}");
        // The other thread: its subinterpreter's frames inside the main
        // interpreter's, which started the thread.
        let other = frames_of(thread_tid);
        let got: Vec<(i64, &str)> = other.iter().map(|f| (f.0, f.1.as_str())).collect();
        assert_eq!(
            got[..3],
            [(sub_b, "loop_sub"), (sub_b, "<module>"), (0, "in_thread")],
            "{what}: {other:?}"
        );
        assert!(got[3..].iter().all(|f| f.0 == 0), "{what}: {other:?}");
        assert!(other.iter().all(|f| f.4 == "entry-frame"), "{what}");
        // The text names the interpreter after each frame.
        let text = run_ok(&["bt", "--pid", &pid.to_string(), "--python"]);
        let inner = format!(
            "[py] inner_sub (tag='sub1') at {}:{} [interpreter {sub_a}]",
            seen[0].2, seen[0].3
        );
        assert!(text.contains(&inner), "{what}: no {inner:?} in\n{text}");
        assert!(text.contains("[interpreter 0]"), "{what}: {text}");
        t.assert_healthy();
        t.write_stdin("\n");
        assert!(t.wait_exit(LINE).is_some_and(|s| s.success()), "{what}");
    }
}
