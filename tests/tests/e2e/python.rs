//! End-to-end: Python processes. `inject --python` hooks CPython's frame
//! evaluator; `bt` interleaves the Python frames with the native ones, paired
//! through the evaluator's stash (calls started after the hook) or by order
//! (calls live at inject time); `--python`/`--native` filter; `list` and
//! `eject` know the Python hook and the PEP 523 extension's call-through hook;
//! a process that is not a CPython is refused untouched; a core file reads like
//! a live process.
//!
//! The fixture (`tests/fixtures/python/mixed.py`) runs Python -> C -> Python
//! (ctypes calling `callback.c`, built here, which calls back into Python, then
//! `sorted(key=...)`) and prints its own frames; every check compares with
//! that report. Each test runs under every CPython 3.11 present (Debian's
//! static `/usr/bin/python3.11` and the `python3` on PATH); without one it is
//! skipped with a message.

use std::collections::HashSet;
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use argstash_tests::*;
use serde_json::Value;

/// Runs `exe -c code`; its trimmed stdout when it succeeds.
fn ask(exe: &Path, code: &str) -> Option<String> {
    let out = Command::new(exe).args(["-c", code]).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Every CPython 3.11 here, by real path, each once.
fn interpreters() -> Vec<PathBuf> {
    static FOUND: OnceLock<Vec<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let mut found = Vec::new();
            let mut seen = HashSet::new();
            let candidates = [
                Some(PathBuf::from("/usr/bin/python3.11")),
                ask(Path::new("python3"), "import sys; print(sys.executable)").map(PathBuf::from),
            ];
            for exe in candidates.into_iter().flatten() {
                let Ok(real) = exe.canonicalize() else {
                    continue;
                };
                let ok = ask(
                    &real,
                    "import sys, ctypes; print(sys.version_info[:2] == (3, 11))",
                );
                if ok.as_deref() == Some("True") && seen.insert(real.clone()) {
                    found.push(real);
                }
            }
            found
        })
        .clone()
}

/// The interpreters, or a SKIPPED line when there is none.
fn pythons(test: &str) -> Vec<PathBuf> {
    let found = interpreters();
    if found.is_empty() {
        println!("SKIPPED {test}: no CPython 3.11 with ctypes here (run scripts/setup.sh)");
    }
    found
}

/// `callback.c` built as a shared library (once per test process).
fn callback_lib() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let src = fixtures_dir().join("python/callback.c");
        let out = fixture_cache_dir().join(format!("libcallback-{}.so", std::process::id()));
        let flags = ["-O0", "-g", "-shared", "-fPIC", "-fno-omit-frame-pointer"];
        compile_c(&src, &out, &flags)
    })
    .clone()
}

fn script() -> PathBuf {
    fixtures_dir().join("python/mixed.py")
}

/// One frame as the script reported it.
type Seen = ReportedFrame;

/// Starts the fixture under `python` in `mode` (extra `args`).
fn start(python: &Path, mode: &str, args: &[&str]) -> Target {
    let script = script();
    let lib = callback_lib();
    let mut all = vec![script.to_str().unwrap(), lib.to_str().unwrap(), mode];
    all.extend(args);
    Target::spawn_with_args(python, &all)
}

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

/// The frames started after the hook: the fixture's callback and what it calls.
const AFTER_HOOK: [&str; 3] = ["innermost", "Sorter.through_sorted", "callback"];

/// Checks the interleaving and pairing of one thread's merged frames against the report.
fn check_mixed(frames: &[Value], seen: &[Seen], hooked: bool) {
    assert_eq!(python_frames(frames), seen, "{frames:#?}");
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(f["index"], i, "{f}");
        assert!(f["kind"] == "native" || f["kind"] == "python", "{f}");
        if f["kind"] != "python" {
            continue;
        }
        let name = f["function"].as_str().unwrap();
        let by = if hooked && AFTER_HOOK.contains(&name) {
            "stash"
        } else {
            "order"
        };
        assert_eq!(f["paired_by"], by, "{name}");
        // Right before its evaluator frame: only its run's Python frames in between.
        let e = f["eval_frame"].as_u64().unwrap_or_else(|| panic!("{f}")) as usize;
        assert!(e > i, "{f}");
        let eval = &frames[e];
        assert_eq!(eval["kind"], "native");
        assert!(
            eval["function"]
                .as_str()
                .is_some_and(|n| n.starts_with("_PyEval_EvalFrameDefault")),
            "{eval}"
        );
        for between in &frames[i + 1..e] {
            assert_eq!(between["kind"], "python", "{between}");
            assert_eq!(between["eval_frame"], e, "{between}");
        }
        if by == "stash" {
            // The evaluator's stashed `frame` is the outermost frame of its run.
            let outermost = &frames[e - 1];
            assert_eq!(frame_arg(eval, "rsi"), Some(json_hex(&outermost["frame"])));
            assert_eq!(outermost["entry"], true);
        }
    }
    // Python -> C -> Python: the C function sits between the callback's evaluator and through_c.
    let at = |name: &str| {
        frames
            .iter()
            .position(|f| f["function"] == name)
            .unwrap_or_else(|| panic!("no {name} in {frames:#?}"))
    };
    let callback_eval = frames[at("callback")]["eval_frame"].as_u64().unwrap() as usize;
    let c = at("call_back");
    assert!(callback_eval < c && c < at("through_c"));
}

/// `[py] NAME (a=1, b='x') at FILE:LINE` as the text backtrace prints a reported frame.
fn text_of(s: &Seen) -> String {
    let params: Vec<String> = s.params.iter().map(|(n, d)| format!("{n}={d}")).collect();
    format!(
        "[py] {} ({}) at {}:{}",
        s.function,
        params.join(", "),
        s.file,
        s.line
    )
}

fn main_frames(bt: &Value, pid: i32) -> Vec<Value> {
    thread_frames(bt_thread(bt, pid).unwrap_or_else(|| panic!("no thread {pid} in {bt}"))).clone()
}

#[test]
fn mixed_stack_pairs_new_calls_by_stash_and_old_ones_by_order() {
    for python in pythons("mixed_stack_pairs_new_calls_by_stash_and_old_ones_by_order") {
        let mut t = start(&python, "block", &[]);
        let pid = t.pid();
        let pid_s = pid.to_string();
        // `--python` twice is the same as once.
        let out = run_ok(&["inject", "--pid", &pid_s, "--python", "--python"]);
        assert!(out.contains("hooked _PyEval_EvalFrameDefault"), "{out}");
        let hooks = list_hooks(pid);
        assert_eq!(hooks.len(), 1);
        assert_eq!(hooks[0]["python"], true);
        assert_eq!(hooks[0]["call_through"], false);
        assert!(run_ok(&["list", "--pid", &pid_s]).contains(" python "));

        t.write_stdin("go\n");
        let seen = read_python_report(&mut t, Duration::from_secs(20));
        wait_main_thread_reading(pid);
        let bt = bt_json(pid, None);
        let frames = main_frames(&bt, pid);
        check_mixed(&frames, &seen, true);
        println!(
            "{}: {} frames, {} Python",
            python.display(),
            frames.len(),
            seen.len()
        );

        // Text: each Python frame as the script describes itself.
        let text = run_ok(&["bt", "--pid", &pid_s]);
        for s in &seen {
            let want = text_of(s);
            assert!(text.lines().any(|l| l.contains(&want)), "{want}\n{text}");
        }
        assert!(
            text.contains("outer (") && text.contains("[paired by order]"),
            "{text}"
        );

        // One side only.
        let only = run_json(&["bt", "--pid", &pid_s, "--json", "--python"]);
        let py = main_frames(&only, pid);
        assert!(py.iter().all(|f| f["kind"] == "python"));
        assert_eq!(python_frames(&py), seen);
        let native = run_json(&["bt", "--pid", &pid_s, "--json", "--native"]);
        let nat = main_frames(&native, pid);
        assert!(nat.iter().all(|f| f["kind"] == "native"));
        assert_eq!(nat.len(), frames.len() - seen.len());
        expect_fail(
            &["bt", "--pid", &pid_s, "--python", "--native"],
            2,
            "cannot be used",
        );

        // eject --python removes just the Python hook.
        let out = run_ok(&["eject", "--pid", &pid_s, "--python"]);
        assert!(out.contains("ejected _PyEval_EvalFrameDefault"), "{out}");
        assert_eq!(list_hooks(pid)[0]["state"], "ejected");
        expect_fail(&["eject", "--pid", &pid_s, "--python"], 1, "not hooked");
        t.assert_healthy();
    }
}

#[test]
fn frames_live_at_inject_time_pair_by_order_without_a_hook() {
    for python in pythons("frames_live_at_inject_time_pair_by_order_without_a_hook") {
        let mut t = start(&python, "block", &[]);
        t.write_stdin("go\n");
        let seen = read_python_report(&mut t, Duration::from_secs(20));
        wait_main_thread_reading(t.pid());
        let frames = main_frames(&bt_json(t.pid(), None), t.pid());
        check_mixed(&frames, &seen, false);
    }
}

#[test]
fn not_a_python_is_refused_untouched() {
    let mut t = Target::start("seed", Variant::O2G);
    let pid = t.pid().to_string();
    let err = refused(
        &mut t,
        &["inject", "--pid", &pid, "--python"],
        1,
        "is not a CPython",
    );
    assert!(err.contains("native frames"), "{err}");
    assert!(list_hooks(t.pid()).is_empty());
    // Its backtrace is the native one, every frame saying so.
    let bt = bt_json(t.pid(), None);
    assert!(bt_threads(&bt)
        .iter()
        .flat_map(thread_frames)
        .all(|f| f["kind"] == "native"));
}

/// Where the kernel writes cores, or why not here.
fn core_file_name() -> Option<String> {
    let pattern = fs::read_to_string("/proc/sys/kernel/core_pattern").ok()?;
    let pattern = pattern.trim();
    (!pattern.is_empty() && !pattern.contains(['/', '%', '|'])).then(|| pattern.to_string())
}

#[test]
fn core_of_a_crashed_python_shows_the_mixed_stack() {
    let Some(pattern) = core_file_name() else {
        println!("SKIPPED core_of_a_crashed_python_shows_the_mixed_stack: core_pattern is not a plain file name (sysctl kernel.core_pattern=core)");
        return;
    };
    for python in pythons("core_of_a_crashed_python_shows_the_mixed_stack") {
        let dir = std::env::temp_dir().join(format!("argstash-pycore-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let mut t = start(&python, "crash", &[dir.to_str().unwrap()]);
        let pid = t.pid();
        let unlimited = libc::rlimit {
            rlim_cur: libc::RLIM_INFINITY,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: prlimit only reads `unlimited` (old limit pointer null).
        let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_CORE, &unlimited, std::ptr::null_mut()) };
        assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
        run_ok(&["inject", "--pid", &pid.to_string(), "--python"]);
        t.write_stdin("go\n");
        let seen = read_python_report(&mut t, Duration::from_secs(20));
        let status = t
            .wait_exit(Duration::from_secs(30))
            .unwrap_or_else(|| t.fail("did not abort"));
        assert_eq!(status.signal(), Some(libc::SIGABRT), "{status:?}");
        let candidates = [dir.join(&pattern), dir.join(format!("{pattern}.{pid}"))];
        let mut core = None;
        wait_until(Duration::from_secs(30), || {
            core = candidates.iter().find(|p| p.is_file()).cloned();
            core.is_some()
        });
        let core = core.unwrap_or_else(|| panic!("no core among {candidates:?}"));
        let bt = run_json(&["bt", "--core", core.to_str().unwrap(), "--json"]);
        let frames = main_frames(&bt, pid);
        check_mixed(&frames, &seen, true);
        let text = run_ok(&["bt", "--core", core.to_str().unwrap(), "--python"]);
        assert!(text.contains(&text_of(&seen[0])), "{text}");
        let _ = fs::remove_dir_all(&dir);
    }
}

/// The `argstash` extension's wheel unpacked for import (`target/py-ext`), or why not.
///
/// Built like scripts/test-python.sh builds it (maturin) when no wheel is there.
fn extension_dir(python: &Path) -> Result<PathBuf, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        let target = profile_dir().parent().unwrap().to_path_buf();
        let wheels = target.join("wheels/pep523");
        let find = || {
            fs::read_dir(&wheels)
                .ok()?
                .flatten()
                .map(|e| e.path())
                .find(|p| {
                    p.extension().is_some_and(|x| x == "whl")
                        && p.file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with("argstash-"))
                })
        };
        let wheel = match find() {
            Some(w) => w,
            None => {
                let out = Command::new("python3")
                    .args(["-m", "maturin", "build", "-m"])
                    .arg(workspace_root().join("pep523-ext/Cargo.toml"))
                    .arg("-i")
                    .arg(python)
                    .arg("-o")
                    .arg(&wheels)
                    .output()
                    .map_err(|e| format!("cannot run maturin: {e}"))?;
                if !out.status.success() {
                    return Err(format!(
                        "maturin build failed: {}",
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
                find().ok_or("maturin wrote no wheel")?
            }
        };
        let dir = target.join(format!("py-ext-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let out = Command::new(python)
            .args(["-m", "zipfile", "-e"])
            .arg(&wheel)
            .arg(&dir)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(dir)
    })
    .clone()
}

#[test]
fn call_through_hooks_of_the_extension_are_listed_and_left_alone() {
    for python in pythons("call_through_hooks_of_the_extension_are_listed_and_left_alone") {
        let dir = match extension_dir(&python) {
            Ok(d) => d,
            Err(why) => {
                println!("SKIPPED call_through_hooks...: no argstash wheel ({why})");
                return;
            }
        };
        let code = "import argstash, os, sys\nassert argstash.install()\nprint('ready %d' % os.getpid(), flush=True)\nsys.stdin.readline()\nargstash.uninstall()\nprint('done', flush=True)\n";
        let mut t = {
            // The extension is imported from the unpacked wheel.
            let wrapper = dir.join("run.py");
            fs::write(
                &wrapper,
                format!(
                    "import sys\nsys.path.insert(0, {:?})\n{code}",
                    dir.to_str().unwrap()
                ),
            )
            .unwrap();
            Target::spawn_with_args(&python, &[wrapper.to_str().unwrap()])
        };
        let pid = t.pid();
        let pid_s = pid.to_string();
        let hooks = list_hooks(pid);
        assert_eq!(hooks.len(), 1, "{hooks:?}");
        assert_eq!(hooks[0]["call_through"], true);
        assert_eq!(hooks[0]["python"], false);
        let listed = run_ok(&["list", "--pid", &pid_s]);
        assert!(listed.contains("pep523-ext"), "{listed}");
        // Its unwind row says what it is, not "an older argstash".
        let unwind: Vec<&str> = listed
            .lines()
            .filter(|l| l.starts_with("unwind "))
            .collect();
        assert_eq!(unwind.len(), 1, "{listed}");
        assert!(
            unwind[0].contains("_PyEval_EvalFrameDefault")
                && unwind[0].contains("pep523-ext: the extension's own trampoline")
                && !unwind[0].contains("older argstash"),
            "{listed}"
        );
        // Nothing of ours to eject yet.
        let out = run_ok(&["eject", "--pid", &pid_s, "--all"]);
        assert!(out.contains("nothing to eject"), "{out}");
        // The call-through record names the evaluator, but does not count as a hook of it.
        let out = run_ok(&["inject", "--pid", &pid_s, "--python"]);
        assert!(out.contains("hooked _PyEval_EvalFrameDefault"), "{out}");
        let hooks = list_hooks(pid);
        assert_eq!(hooks.iter().filter(|h| h["python"] == true).count(), 1);
        // Our hook's row is an ordinary one; the extension's keeps its own.
        let listed = run_ok(&["list", "--pid", &pid_s]);
        let unwind: Vec<&str> = listed
            .lines()
            .filter(|l| l.starts_with("unwind "))
            .collect();
        assert_eq!(unwind.len(), 2, "{listed}");
        assert_eq!(
            unwind.iter().filter(|l| l.contains("pep523-ext:")).count(),
            1,
            "{listed}"
        );
        assert_eq!(
            unwind.iter().filter(|l| l.contains(" libgcc ")).count(),
            1,
            "{listed}"
        );
        // eject --all takes ours only; the extension's stays active.
        let out = run_ok(&["eject", "--pid", &pid_s, "--all"]);
        assert_eq!(
            out.matches("ejected _PyEval_EvalFrameDefault").count(),
            1,
            "{out}"
        );
        let hooks = list_hooks(pid);
        let through: Vec<_> = hooks.iter().filter(|h| h["call_through"] == true).collect();
        assert_eq!(through.len(), 1);
        assert_eq!(through[0]["state"], "active");
        // The process removes its own hook and carries on.
        t.write_stdin("\n");
        assert_eq!(t.expect_line(Duration::from_secs(10)), "done");
    }
}

/// `fake_cpython.c` built with `defines` (once per set of defines and test process).
fn fake_cpython(name: &str, defines: &[&str]) -> PathBuf {
    let src = fixtures_dir().join("python/fake_cpython.c");
    let out = fixture_cache_dir().join(format!("{name}-{}", std::process::id()));
    if !out.exists() {
        compile_c(&src, &out, &[&["-O0", "-g", "-rdynamic"], defines].concat());
    }
    out
}

#[test]
fn a_version_without_a_layout_is_refused_untouched_naming_it() {
    let cases = [
        (
            "fake-cpython-312",
            vec![],
            "CPython 3.12.0 has no known memory layout",
            false,
        ),
        (
            "fake-cpython-313",
            vec!["-DDEBUG_OFFSETS", "-DFAKE_VERSION=0x030D00F0"],
            // Offsets with a cookie but nothing after it: refused, naming the field.
            "CPython 3.13.0: its _Py_DebugOffsets (at _PyRuntime",
            true,
        ),
    ];
    for (name, defines, message, debug_offsets) in cases {
        let mut t = Target::spawn(&fake_cpython(name, &defines));
        let pid = t.pid().to_string();
        let err = refused(&mut t, &["inject", "--pid", &pid, "--python"], 1, message);
        assert!(err.contains("only native frames"), "{err}");
        assert_eq!(err.contains("_Py_DebugOffsets"), debug_offsets, "{err}");
        assert!(list_hooks(t.pid()).is_empty());
        // bt still shows the native frames, the fake evaluator among them.
        let frames = main_frames(&bt_json(t.pid(), None), t.pid());
        assert!(frames.iter().all(|f| f["kind"] == "native"), "{frames:#?}");
        assert!(
            frames
                .iter()
                .any(|f| f["function"] == "_PyEval_EvalFrameDefault"),
            "{frames:#?}"
        );
        t.assert_healthy();
    }
}

/// Prints `tick` lines until killed: a CPython target for [`refused`].
const TICKING: &str = "import os, sys, time\nprint('ready %d' % os.getpid(), flush=True)\nwhile True:\n    time.sleep(0.05)\n    print('tick', flush=True)\n";

#[test]
fn a_second_python_hook_is_refused_untouched() {
    for python in pythons("a_second_python_hook_is_refused_untouched") {
        let mut t = Target::spawn_with_args(&python, &["-c", TICKING]);
        let pid = t.pid().to_string();
        let out = run_ok(&["inject", "--pid", &pid, "--python"]);
        assert!(out.contains("hooked _PyEval_EvalFrameDefault"), "{out}");
        let before = list_hooks(t.pid());
        let err = refused(
            &mut t,
            &["inject", "--pid", &pid, "--python"],
            1,
            "already hooked",
        );
        assert!(err.contains("eject it first"), "{err}");
        assert_eq!(list_hooks(t.pid()), before);
        run_ok(&["eject", "--pid", &pid, "--python"]);
        t.assert_healthy();
    }
}

/// 10,000 nested calls of `deep`, then blocks reading stdin at the bottom.
const DEEP: &str = "import os, sys\nsys.setrecursionlimit(20000)\ndef deep(n, tag):\n    if n == 0:\n        print('bottom', flush=True)\n        sys.stdin.readline()\n        return 0\n    return deep(n - 1, tag) + 1\nprint('ready %d' % os.getpid(), flush=True)\nsys.stdin.readline()\ndeep(10000, 't')\n";

#[test]
fn ten_thousand_deep_recursion_stops_at_the_frame_limit() {
    for python in pythons("ten_thousand_deep_recursion_stops_at_the_frame_limit") {
        let mut t = Target::spawn_with_args(&python, &["-c", DEEP]);
        let pid = t.pid();
        let pid_s = pid.to_string();
        run_ok(&["inject", "--pid", &pid_s, "--python"]);
        t.write_stdin("go\n");
        t.wait_for_line(Duration::from_secs(30), |l| l == "bottom");
        wait_main_thread_reading(pid);
        let bt = bt_json(pid, None);
        let thread = bt_thread(&bt, pid).unwrap_or_else(|| panic!("no thread {pid} in {bt}"));
        let py: Vec<&Value> = thread_frames(thread)
            .iter()
            .filter(|f| f["kind"] == "python")
            .collect();
        // Innermost first, cut at the limit with a note, never a failure.
        assert!(py.len() >= 100 && py.len() < 10_000, "{} frames", py.len());
        assert_eq!(py[0]["function"], "deep");
        assert_eq!(py[0]["params"][0]["display"], "0");
        assert_eq!(py[99]["params"][0]["display"], "99");
        let notes = thread["python_notes"].to_string();
        assert!(notes.contains("limit"), "{notes}");
        let text = run_ok(&["bt", "--pid", &pid_s, "--python"]);
        assert!(text.contains("limit"), "{text}");
        t.assert_healthy();
        run_ok(&["eject", "--pid", &pid_s, "--python"]);
        t.write_stdin("\n");
    }
}

/// Path of the shared libpython `python` runs with, if it maps one (Debian's
/// static build has a libpython too, which its executable does not use).
fn shared_libpython(python: &Path) -> Option<PathBuf> {
    let lib = ask(
        python,
        "print(next((l.split()[-1] for l in open('/proc/self/maps') if '/libpython3' in l), ''))",
    )?;
    let lib = PathBuf::from(lib);
    lib.is_file().then_some(lib)
}

#[test]
fn libpython_deleted_or_replaced_on_disk_is_hooked_and_read_from_memory() {
    let mut tested = false;
    for python in pythons("libpython_deleted_or_replaced_on_disk_is_hooked_and_read_from_memory") {
        let Some(lib) = shared_libpython(&python) else {
            continue;
        };
        for change in ["deleted", "replaced"] {
            let dir = std::env::temp_dir()
                .join(format!("argstash-pylib-{change}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            let copy = dir.join(lib.file_name().unwrap());
            fs::copy(&lib, &copy).unwrap();
            let env_var = format!("LD_LIBRARY_PATH={}", dir.display());
            let script = script();
            let cb = callback_lib();
            let mut t = Target::spawn_with_args(
                Path::new("/usr/bin/env"),
                &[
                    &env_var,
                    python.to_str().unwrap(),
                    script.to_str().unwrap(),
                    cb.to_str().unwrap(),
                    "block",
                ],
            );
            let pid = t.pid();
            let mapped = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
            assert!(mapped.contains(copy.to_str().unwrap()), "{mapped}");
            if change == "deleted" {
                fs::remove_file(&copy).unwrap();
            } else {
                // Another ELF file under the same name: its symbols must not be used.
                let other = dir.join("other");
                fs::copy("/bin/true", &other).unwrap();
                fs::rename(&other, &copy).unwrap();
            }
            let out = run_ok(&["inject", "--pid", &pid.to_string(), "--python"]);
            assert!(out.contains("hooked _PyEval_EvalFrameDefault"), "{out}");
            t.write_stdin("go\n");
            let seen = read_python_report(&mut t, Duration::from_secs(20));
            wait_main_thread_reading(pid);
            check_mixed(&main_frames(&bt_json(pid, None), pid), &seen, true);
            t.assert_healthy();
            drop(t);
            let _ = fs::remove_dir_all(&dir);
            tested = true;
        }
    }
    if !tested {
        println!("SKIPPED libpython_deleted_or_replaced...: no CPython 3.11 with a shared libpython here");
    }
}

/// Starts and ends threads without a pause, each a few Python calls deep, and prints ticks.
const CHURN: &str = "import os, sys, threading, time\ndef work(n, tag):\n    return work(n - 1, tag) if n else sum(range(100))\ndef churn():\n    while True:\n        ts = [threading.Thread(target=work, args=(20, 'w')) for _ in range(4)]\n        for t in ts: t.start()\n        for t in ts: t.join()\nthreading.Thread(target=churn, daemon=True).start()\nprint('ready %d' % os.getpid(), flush=True)\nwhile True:\n    time.sleep(0.05)\n    print('tick', flush=True)\n";

#[test]
fn threads_being_torn_down_never_fail_the_backtrace() {
    for python in pythons("threads_being_torn_down_never_fail_the_backtrace") {
        let mut t = Target::spawn_with_args(&python, &["-c", CHURN]);
        let pid = t.pid().to_string();
        run_ok(&["inject", "--pid", &pid, "--python"]);
        // Thread states come and go while bt reads them: each bt succeeds, and a
        // thread state that is half gone ends its thread's Python frames with a note.
        let mut python_frames = 0;
        for _ in 0..20 {
            let bt = run_json(&["bt", "--pid", &pid, "--json"]);
            for thread in bt_threads(&bt) {
                for f in thread_frames(thread)
                    .iter()
                    .filter(|f| f["kind"] == "python")
                {
                    assert!(f["function"].is_string(), "{f}");
                    python_frames += 1;
                }
            }
        }
        assert!(python_frames > 0);
        run_ok(&["eject", "--pid", &pid, "--python"]);
        t.assert_healthy();
        t.drain_lines();
        t.expect_line(Duration::from_secs(10));
    }
}
