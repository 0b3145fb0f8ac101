//! End-to-end: `argstash bt --core`. crash.c's hooked `stash_me` calls a function
//! that stores through NULL; the kernel writes the core (RLIMIT_CORE raised for the
//! child, core_pattern checked at test time) and `bt --core` must show the hooked
//! frame's arguments exactly as the live `bt` taken just before the crash did, and
//! as the fixture printed them. A `gcore` of a live hooked process must read like
//! the live `bt`.

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use argstash_tests::*;
use serde_json::{json, Value};

/// Long enough for the kernel to write a small core on a loaded machine.
const CORE_WRITTEN: Duration = Duration::from_secs(20);

const ARG_REGS: [&str; 6] = ["rdi", "rsi", "rdx", "rcx", "r8", "r9"];

/// Why cores cannot be collected here, or `None` when `core_pattern` writes a plain
/// file into the crashing process's working directory.
fn core_pattern_unusable() -> Option<String> {
    let pattern = match fs::read_to_string("/proc/sys/kernel/core_pattern") {
        Ok(p) => p.trim().to_string(),
        Err(e) => return Some(format!("cannot read /proc/sys/kernel/core_pattern: {e}")),
    };
    if pattern.starts_with('|') {
        return Some(format!("core_pattern pipes cores to a program ({pattern})"));
    }
    if pattern.is_empty() || pattern.contains('/') || pattern.contains('%') {
        return Some(format!(
            "core_pattern {pattern:?} is not a plain file name in the working directory"
        ));
    }
    None
}

/// Prints why a test is skipped; true when it must return.
fn skip_without_cores(test: &str) -> bool {
    match core_pattern_unusable() {
        Some(why) => {
            println!("SKIPPED {test}: {why}; set it with `sysctl kernel.core_pattern=core`");
            true
        }
        None => false,
    }
}

/// A fresh directory, removed with everything in it on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "argstash-core-{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        TempDir(p)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn str(&self) -> &str {
        self.0.to_str().expect("UTF-8 temp path")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A crashed fixture: its core, the live `bt` taken before the crash, the arguments it printed.
struct Crashed {
    dir: TempDir,
    exe: PathBuf,
    pid: i32,
    core: PathBuf,
    live: Value,
    printed: [u64; 6],
    /// The worker thread, parked inside hooked `worker_parked(worker_arg)`.
    worker_tid: i32,
    worker_arg: u64,
}

impl Crashed {
    fn core(&self) -> &str {
        self.core.to_str().expect("UTF-8 core path")
    }
}

/// Runs crash.c in a temp cwd with RLIMIT_CORE raised, hooks `stash_me`, takes the
/// live `bt` while the fixture waits inside it, then makes it crash and waits for the core.
fn crash_with_hook(variant: Variant) -> Crashed {
    let dir = TempDir::new("cwd");
    let exe = build("crash", variant);
    let mut t = Target::spawn_with_args(&exe, &[dir.str()]);
    let pid = t.pid();
    allow_core_dumps(pid);
    let HookedCrash {
        worker_tid,
        worker_arg,
        printed,
    } = hook_and_call_crash_fixture(&mut t);

    let live = bt_json(pid, None);
    t.write_stdin("crash\n");
    let status = t
        .wait_exit(CORE_WRITTEN)
        .unwrap_or_else(|| t.fail("did not die after the crash line"));
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "{status:?}");
    assert!(status.core_dumped(), "no core dumped: {status:?}");
    let pattern = fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap();
    let pattern = pattern.trim();
    let candidates = [
        dir.path().join(pattern),
        dir.path().join(format!("{pattern}.{pid}")),
    ];
    let mut core = None;
    wait_until(CORE_WRITTEN, || {
        core = candidates.iter().find(|p| p.is_file()).cloned();
        core.is_some()
    });
    let core = core.unwrap_or_else(|| panic!("no core among {candidates:?}"));
    Crashed {
        dir,
        exe,
        pid,
        core,
        live,
        printed,
        worker_tid,
        worker_arg,
    }
}

/// The stashed argument registers of a hooked frame, in order.
fn stashed(frame: &Value) -> Vec<u64> {
    assert_eq!(frame["hooked"], json!(true), "{frame:#}");
    ARG_REGS
        .iter()
        .map(|r| frame_arg(frame, r).unwrap_or_else(|| panic!("no {r} in {frame:#}")))
        .collect()
}

fn main_thread(bt: &Value, pid: i32) -> &Value {
    bt_thread(bt, pid).unwrap_or_else(|| panic!("no thread {pid} in {bt:#}"))
}

#[test]
fn core_bt_shows_the_hooked_arguments_the_live_bt_showed() {
    if skip_without_cores("core_bt_shows_the_hooked_arguments_the_live_bt_showed") {
        return;
    }
    for variant in [Variant::O2G, Variant::new(Opt::O0g, false)] {
        let c = crash_with_hook(variant);
        let live_main = main_thread(&c.live, c.pid);
        let (live_i, live_frame) = frame_named(live_main, "stash_me").expect("stash_me live");
        assert_eq!(
            stashed(live_frame),
            c.printed,
            "{variant}: live bt vs printed"
        );

        let core_bt = run_json(&["bt", "--core", c.core(), "--json"]);
        assert_eq!(core_bt["pid"], json!(c.pid), "{core_bt:#}");
        let th = main_thread(&core_bt, c.pid);
        let frames = thread_frames(th);
        let names: Vec<&str> = frames
            .iter()
            .map(|f| f["function"].as_str().unwrap_or("??"))
            .collect();
        assert_eq!(
            names[..4],
            ["crash_here", "wait_then_crash", "stash_me", "main"],
            "{variant}: {th:#}"
        );
        let (core_i, core_frame) = frame_named(th, "stash_me").unwrap();
        assert_eq!(
            stashed(core_frame),
            c.printed,
            "{variant}: core bt vs printed"
        );
        assert_eq!(
            core_frame["stash_frame"], live_frame["stash_frame"],
            "{variant}: the same stash frame"
        );
        assert_eq!(
            core_frame["module"].as_str(),
            Some(module_path(&c.exe).as_str())
        );
        // From the hooked frame outwards the stack is the one the live bt saw.
        let live_frames = thread_frames(live_main);
        let outer = |fs: &[Value]| -> Vec<(Value, Value)> {
            fs.iter()
                .map(|f| (f["pc"].clone(), f["function"].clone()))
                .collect()
        };
        assert_eq!(
            outer(&frames[core_i..]),
            outer(&live_frames[live_i..]),
            "{variant}: outer frames"
        );
        for (i, f) in frames.iter().enumerate() {
            if i != core_i {
                assert_eq!(f["hooked"], json!(false), "{variant}: frame {i}: {f:#}");
            }
        }

        // The second thread, parked in its own hooked function.
        assert_eq!(bt_threads(&core_bt).len(), 2, "{core_bt:#}");
        for bt in [&c.live, &core_bt] {
            let worker = bt_thread(bt, c.worker_tid).expect("worker thread");
            let (_, parked) = frame_named(worker, "worker_parked").expect("worker_parked");
            assert_eq!(frame_arg(parked, "rdi"), Some(c.worker_arg), "{parked:#}");
        }
        assert_eq!(
            c.worker_arg,
            c.pid as u64 + 0x3000,
            "the fixture's WORKER_TAG"
        );
        let tid = c.worker_tid.to_string();
        let one = run_json(&["bt", "--core", c.core(), "--tid", &tid, "--json"]);
        assert_eq!(bt_threads(&one).len(), 1, "{one:#}");
        assert!(bt_thread(&one, c.worker_tid).is_some(), "{one:#}");

        let text = run_ok(&["bt", "--core", c.core()]);
        assert!(text.contains("killed by signal 11 (SIGSEGV)"), "{text}");
        // By register without debug info, by parameter name (`a1`) with it.
        let value = if c.printed[0] < 0x10000 {
            c.printed[0].to_string()
        } else {
            format!("0x{:x}", c.printed[0])
        };
        let raw = format!("stash_me (rdi={value}");
        let named = format!("stash_me (a1={})", c.printed[0]);
        let named = named.trim_end_matches(')');
        assert!(
            text.contains(&raw) || text.contains(named),
            "{raw:?} or {named:?} in {text}"
        );
    }
}

#[test]
fn missing_mapped_files_degrade_to_addresses() {
    if skip_without_cores("missing_mapped_files_degrade_to_addresses") {
        return;
    }
    let c = crash_with_hook(Variant::O2G);
    let full = run_json(&["bt", "--core", c.core(), "--json"]);
    // inject mapped argstash's perf JIT dump marker into the process, so the core
    // records it (whether or not the file is still there). It holds no code, so no
    // note names it.
    let marker = format!("/tmp/jit-{}.dump", c.pid);
    let plain = run(&["bt", "--core", c.core()]);
    let plain_err = String::from_utf8_lossy(&plain.stderr);
    assert!(
        plain.status.success() && !plain_err.contains(&marker),
        "{plain_err}"
    );
    let full_frames = thread_frames(main_thread(&full, c.pid)).clone();
    let libc_frame = full_frames
        .iter()
        .find(|f| f["module"].as_str().is_some_and(|m| m.contains("libc.so")))
        .unwrap_or_else(|| panic!("no libc frame in {full:#}"))
        .clone();

    // An empty sysroot, the executable given by --exe: libc is not under the
    // sysroot, so the recorded path is tried next, and used because its build id is
    // the one the core shows: the libc frame is named as without --sysroot.
    let empty = TempDir::new("sysroot");
    let exe = c.exe.to_str().unwrap();
    let args = [
        "bt",
        "--core",
        c.core(),
        "--json",
        "--sysroot",
        empty.str(),
        "--exe",
        exe,
    ];
    let out = run(&args);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr
            .lines()
            .any(|l| l.contains("no symbols for") && l.contains("libc.so")),
        "{stderr}"
    );
    let bt: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let th = main_thread(&bt, c.pid);
    let (_, hooked) = frame_named(th, "stash_me").expect("stash_me still named");
    assert_eq!(stashed(hooked), c.printed);
    let same_pc = thread_frames(th)
        .iter()
        .find(|f| f["pc"] == libc_frame["pc"])
        .unwrap_or_else(|| panic!("libc frame {libc_frame:#} missing from {th:#}"));
    assert_eq!(same_pc["function"], libc_frame["function"], "{same_pc:#}");
    assert_eq!(same_pc["module"], libc_frame["module"], "{same_pc:#}");

    // Under the sysroot, a libc of another build (the fixture itself, renamed) is
    // never used: the one at the recorded path, proven by its build id, is.
    let libc_path = libc_frame["module"].as_str().unwrap();
    let wrong = empty.path().join(libc_path.trim_start_matches('/'));
    fs::create_dir_all(wrong.parent().unwrap()).unwrap();
    fs::copy(&c.exe, &wrong).unwrap();
    let bt = run_json(&args);
    let th = main_thread(&bt, c.pid);
    let same_pc = thread_frames(th)
        .iter()
        .find(|f| f["pc"] == libc_frame["pc"])
        .unwrap_or_else(|| panic!("libc frame {libc_frame:#} missing from {th:#}"));
    assert_eq!(same_pc["function"], libc_frame["function"], "{same_pc:#}");

    // Another program given as --exe: its build id differs, so it is not used.
    let other = build("seed", Variant::O2G);
    let args = [
        "bt",
        "--core",
        c.core(),
        "--json",
        "--exe",
        other.to_str().unwrap(),
    ];
    let out = run(&args);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("build id"), "{stderr}");
    let bt: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let frames = thread_frames(main_thread(&bt, c.pid));
    assert_eq!(frames[0]["pc"], full_frames[0]["pc"], "crash pc");
    assert_eq!(frames[0]["function"], Value::Null, "{:#}", frames[0]);

    drop(c.dir);
}

#[test]
fn bad_core_input_is_named_with_its_fix() {
    if skip_without_cores("bad_core_input_is_named_with_its_fix") {
        return;
    }
    let c = crash_with_hook(Variant::O2G);
    let dir = TempDir::new("bad");
    let text = dir.path().join("notes.txt");
    fs::write(&text, "not a core\n").unwrap();
    expect_fail(
        &["bt", "--core", text.to_str().unwrap()],
        1,
        "is not a core file",
    );
    let exe = c.exe.to_str().unwrap();
    let out = expect_fail(&["bt", "--core", exe], 1, "not a core file");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--exe"));

    let bytes = fs::read(&c.core).unwrap();
    let cut = dir.path().join("core.cut");
    fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let out = expect_fail(&["bt", "--core", cut.to_str().unwrap()], 1, "is truncated");
    assert!(String::from_utf8_lossy(&out.stderr).contains("ulimit -c"));

    let gone = dir.path().join("no-such-core");
    expect_fail(&["bt", "--core", gone.to_str().unwrap()], 1, "core_pattern");
    expect_fail(
        &["bt", "--core", c.core(), "--exe", gone.to_str().unwrap()],
        1,
        "no such file",
    );
    expect_fail(
        &["bt", "--core", c.core(), "--pid", "1"],
        2,
        "cannot be used",
    );
    expect_fail(&["bt", "--pid", "1", "--exe", exe], 2, "cannot be used");
    expect_fail(&["bt", "--pid", "1", "--sysroot", "/"], 2, "cannot be used");
    expect_fail(
        &["bt", "--core", c.core(), "--tid", "1"],
        1,
        &format!("its threads are {}", c.pid),
    );
    // The good core still reads after all that.
    let bt = run_json(&["bt", "--core", c.core(), "--json"]);
    assert!(frame_named(main_thread(&bt, c.pid), "stash_me").is_some());
}

/// True when `tool` can be started (gcore has no `--version`; `-h` prints its usage).
fn have_tool(tool: &str) -> bool {
    std::process::Command::new(tool)
        .arg("-h")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok()
}

#[test]
fn gcore_of_a_live_hooked_process_reads_like_the_live_bt() {
    if !have_tool("gcore") {
        println!("SKIPPED gcore_of_a_live_hooked_process_reads_like_the_live_bt: gcore (gdb) is not installed; scripts/setup.sh installs gdb");
        return;
    }
    let dir = TempDir::new("gcore");
    let mut t = Target::start("crash", Variant::O2G);
    let pid = t.pid();
    let pid_s = pid.to_string();
    run_ok(&[
        "inject",
        "--pid",
        &pid_s,
        "--func",
        "stash_me",
        "--func",
        "worker_parked",
    ]);
    t.write_stdin("call\n");
    t.wait_for_line(Duration::from_secs(10), |l| l == "waiting");
    let live = bt_json(pid, None);

    // gdb's gcore leaves unmodified file pages out: they are read from the files.
    let prefix = dir.path().join("g");
    let mut gcore = std::process::Command::new("gcore");
    gcore.arg("-o").arg(&prefix).arg(&pid_s);
    let out = run_command(&mut gcore, Duration::from_secs(60));
    let core = dir.path().join(format!("g.{pid}"));
    assert!(core.is_file(), "gcore wrote no {}: {out:?}", core.display());
    t.assert_healthy();

    let from_core = run_json(&["bt", "--core", core.to_str().unwrap(), "--json"]);
    let frames = |bt: &Value, tid: i32| -> Vec<(Value, Value, Value)> {
        thread_frames(bt_thread(bt, tid).expect("thread"))
            .iter()
            .map(|f| (f["pc"].clone(), f["function"].clone(), f["args"].clone()))
            .collect()
    };
    // Nothing ran in between (both threads are blocked in read): the same stacks.
    for th in bt_threads(&live) {
        let tid = th["tid"].as_i64().unwrap() as i32;
        assert_eq!(frames(&from_core, tid), frames(&live, tid), "thread {tid}");
    }
    let (_, hooked) = frame_named(main_thread(&from_core, pid), "stash_me").unwrap();
    assert_eq!(stashed(hooked).len(), 6);
    let text = run_ok(&["bt", "--core", core.to_str().unwrap()]);
    assert!(text.contains("without a fatal signal"), "{text}");
}

/// True when `cc -m32` links a program here (scripts/setup.sh installs gcc-multilib).
fn m32_available() -> bool {
    let dir = TempDir::new("m32-probe");
    let src = dir.path().join("probe.c");
    fs::write(&src, "int main(void) { return 0; }\n").expect("write probe");
    std::process::Command::new("cc")
        .arg("-m32")
        .arg("-o")
        .arg(dir.path().join("probe"))
        .arg(&src)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn i386_core_bt_shows_what_the_live_bt_showed() {
    if skip_without_cores("i386_core_bt_shows_what_the_live_bt_showed") {
        return;
    }
    if !m32_available() {
        println!("SKIPPED i386_core_bt_shows_what_the_live_bt_showed: `cc -m32` cannot link here (install gcc-multilib: scripts/setup.sh)");
        return;
    }
    const M32: &[&str] = &["-m32"];
    for variant in [
        Variant::new(Opt::O2g, true).with_flags(M32),
        Variant::new(Opt::O0g, false).with_flags(M32),
    ] {
        let c = crash_with_hook(variant);
        let core_bt = run_json(&["bt", "--core", c.core(), "--json"]);
        assert_eq!(core_bt["pid"], json!(c.pid), "{core_bt:#}");
        let th = main_thread(&core_bt, c.pid);
        let frames = thread_frames(th);
        let names: Vec<&str> = frames
            .iter()
            .map(|f| f["function"].as_str().unwrap_or("??"))
            .collect();
        assert_eq!(
            names[..4],
            ["crash_here", "wait_then_crash", "stash_me", "main"],
            "{variant}: {th:#}"
        );
        // cdecl: the six arguments are the stashed stack words above the entry esp.
        let (core_i, core_frame) = frame_named(th, "stash_me").unwrap();
        assert_eq!(
            core_frame["hooked"],
            json!(true),
            "{variant}: {core_frame:#}"
        );
        let places = [
            "stack+4", "stack+8", "stack+12", "stack+16", "stack+20", "stack+24",
        ];
        let stashed: Vec<u64> = places
            .iter()
            .map(|p| {
                frame_arg(core_frame, p)
                    .unwrap_or_else(|| panic!("{variant}: no {p} in {core_frame:#}"))
            })
            .collect();
        let printed: Vec<u64> = c.printed.iter().map(|v| v & 0xffff_ffff).collect();
        assert_eq!(stashed, printed, "{variant}: core bt vs printed");

        // The live bt showed the same hooked frame, arguments and outer frames.
        let live_main = main_thread(&c.live, c.pid);
        let (live_i, live_frame) = frame_named(live_main, "stash_me").expect("stash_me live");
        assert_eq!(
            core_frame["stash_frame"], live_frame["stash_frame"],
            "{variant}"
        );
        assert_eq!(core_frame["args"], live_frame["args"], "{variant}");
        let outer = |fs: &[Value]| -> Vec<(Value, Value)> {
            fs.iter()
                .map(|f| (f["pc"].clone(), f["function"].clone()))
                .collect()
        };
        assert_eq!(
            outer(&frames[core_i..]),
            outer(&thread_frames(live_main)[live_i..]),
            "{variant}: outer frames"
        );
        assert_eq!(
            core_frame["module"].as_str(),
            Some(module_path(&c.exe).as_str())
        );

        // The worker thread, parked in its own hooked function.
        assert_eq!(bt_threads(&core_bt).len(), 2, "{core_bt:#}");
        let parked = |bt: &Value| -> Value {
            let worker = bt_thread(bt, c.worker_tid).expect("worker thread");
            frame_named(worker, "worker_parked")
                .expect("worker_parked")
                .1
                .clone()
        };
        let (live_parked, core_parked) = (parked(&c.live), parked(&core_bt));
        assert_eq!(
            frame_arg(&core_parked, "stack+4"),
            Some(c.worker_arg),
            "{core_parked:#}"
        );
        assert_eq!(core_parked["args"], live_parked["args"]);

        let text = run_ok(&["bt", "--core", c.core()]);
        assert!(text.contains("killed by signal 11 (SIGSEGV)"), "{text}");
    }
}
