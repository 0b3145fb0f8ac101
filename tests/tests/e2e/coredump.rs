//! End-to-end: `argstash bt --coredump PID|latest|NAME` on cores stored by the
//! real systemd-coredump (Debian's package, installed by scripts/setup.sh).
//!
//! The global `kernel.core_pattern` is left alone (other tests rely on the kernel
//! writing a plain `core` file): the hooked crash.c fixture crashes, the kernel
//! writes its core into the fixture's directory, and while the crashed process is
//! still a zombie (as it is while the kernel's pipe helper runs) the test runs
//! `/lib/systemd/systemd-coredump` exactly as Debian's core_pattern makes the
//! kernel run it (`%P %u %g %s %t 9223372036854775808 %h %d`, the core on stdin).
//! That hands the core to a second systemd-coredump started as
//! systemd-coredump.socket would start it (`systemd-socket-activate --seqpacket
//! --accept`), which compresses it and stores it with its attributes. Both run in
//! a private mount namespace whose `/run/systemd`, `/var/lib/systemd/coredump`
//! (and, for the truncation case, `/etc/systemd/coredump.conf`) are the test's
//! own; argstash is run in such a namespace too, so it reads the real path.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use argstash_tests::*;
use serde_json::{json, Value};

const SYSTEMD_COREDUMP: &str = "/lib/systemd/systemd-coredump";
const STORE_TIMEOUT: Duration = Duration::from_secs(60);
const ARG_REGS: [&str; 6] = ["rdi", "rsi", "rdx", "rcx", "r8", "r9"];
/// A boot id for the cores this test names itself.
const BOOT: &str = "0123456789abcdef0123456789abcdef";

/// Why this test cannot run here, or `None`.
fn unusable() -> Option<String> {
    let pattern = fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    let pattern = pattern.trim();
    if pattern.is_empty() || pattern.contains('/') || pattern.contains('%') {
        return Some(format!(
            "core_pattern {pattern:?} is not a plain file name (set it with `sysctl kernel.core_pattern=core`)"
        ));
    }
    for tool in [SYSTEMD_COREDUMP, "/usr/bin/systemd-socket-activate"] {
        if !Path::new(tool).exists() {
            return Some(format!("{tool} is missing (scripts/setup.sh installs it)"));
        }
    }
    if !Path::new("/var/lib/systemd").is_dir() || !Path::new("/run").is_dir() {
        return Some("no /var/lib/systemd or /run to mount over".to_string());
    }
    None
}

fn skip(test: &str) -> bool {
    match unusable() {
        Some(why) => {
            println!("SKIPPED {test}: {why}");
            true
        }
        None => false,
    }
}

/// `sh -c script sh ARGS...` in a private mount namespace of its own (what it
/// mounts is seen by it and its children only); the caller adds the ARGS.
fn in_private_mounts(script: &str) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
    ]);
    cmd
}

/// Runs `argstash args` in a private mount namespace whose
/// /var/lib/systemd/coredump is `store` (`None`: absent).
fn argstash_with_store(store: Option<&Path>, args: &[&str]) -> Output {
    let script = match store {
        Some(_) => "mount -t tmpfs tmpfs /var/lib/systemd && mkdir /var/lib/systemd/coredump && mount --bind \"$1\" /var/lib/systemd/coredump && shift && exec \"$@\"",
        None => "mount -t tmpfs tmpfs /var/lib/systemd && shift && exec \"$@\"",
    };
    let mut cmd = in_private_mounts(script);
    cmd.arg(store.map(Path::as_os_str).unwrap_or(OsStr::new("-")))
        .arg(argstash())
        .args(args)
        .stdin(Stdio::null());
    run_command(&mut cmd, Duration::from_secs(120))
}

#[track_caller]
fn ok_json(store: &Path, args: &[&str]) -> (Value, String) {
    let out = argstash_with_store(Some(store), args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "argstash {args:?}: {out:?}");
    let v =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {out:?}"));
    (v, stderr)
}

#[track_caller]
fn fails(store: Option<&Path>, args: &[&str], needles: &[&str]) -> String {
    let out = argstash_with_store(store, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "argstash {args:?}: {out:?}");
    for n in needles {
        assert!(stderr.contains(n), "{n:?} not in: {stderr}");
    }
    stderr
}

/// Hands the kernel core `core` of the zombie `pid` to systemd-coredump as the
/// kernel's pipe would, with `conf` as /etc/systemd/coredump.conf if given, and
/// returns the file it stored in `store`.
fn store_with_systemd(pid: i32, core: &Path, store: &Path, conf: Option<&Path>) -> PathBuf {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let script = r#"
set -e
store="$1"; core="$2"; pid="$3"; now="$4"; conf="$5"
mount -t tmpfs tmpfs /run/systemd 2>/dev/null || { mkdir -p /run/systemd; mount -t tmpfs tmpfs /run/systemd; }
mount -t tmpfs tmpfs /var/lib/systemd
mkdir /var/lib/systemd/coredump
mount --bind "$store" /var/lib/systemd/coredump
if [ -n "$conf" ]; then mount --bind "$conf" /etc/systemd/coredump.conf; fi
systemd-socket-activate --seqpacket --accept -l /run/systemd/coredump /lib/systemd/systemd-coredump 2>/dev/null &
sa=$!
i=0; while [ ! -S /run/systemd/coredump ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
/lib/systemd/systemd-coredump "$pid" 0 0 11 "$now" 9223372036854775808 "$(uname -n)" 1 < "$core"
i=0; while [ $i -lt 600 ]; do
  for f in /var/lib/systemd/coredump/core.*; do [ -e "$f" ] && { kill $sa; exit 0; }; done
  sleep 0.1; i=$((i+1))
done
kill $sa; echo "systemd-coredump stored nothing" >&2; exit 1
"#;
    let mut cmd = in_private_mounts(script);
    cmd.arg(store)
        .arg(core)
        .arg(pid.to_string())
        .arg(now.to_string())
        .arg(conf.map(Path::as_os_str).unwrap_or(OsStr::new("")))
        .stdin(Stdio::null());
    let out = run_command(&mut cmd, STORE_TIMEOUT);
    assert!(
        out.status.success(),
        "storing through systemd-coredump: {out:?}"
    );
    let mut stored: Vec<PathBuf> = fs::read_dir(store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("core."))
        })
        .collect();
    assert_eq!(stored.len(), 1, "{stored:?}");
    stored.remove(0)
}

/// A hooked crash.c run, crashed; its kernel core; what the live bt and the fixture showed.
struct Crashed {
    dir: ScratchDir,
    pid: i32,
    comm: String,
    core: PathBuf,
    printed: [u64; 6],
    worker_tid: i32,
    worker_arg: u64,
    live: Value,
    target: Target,
}

/// Runs `exe` (crash.c) in a temp dir, hooks `stash_me` and `worker_parked`, makes it
/// crash, and leaves it a zombie once the kernel has written its core.
fn crash_hooked(exe: &Path, dir: ScratchDir) -> Crashed {
    let dir_s = dir.path().to_str().unwrap().to_string();
    let mut t = Target::spawn_with_args(exe, &[&dir_s]);
    let pid = t.pid();
    allow_core_dumps(pid);
    let comm = fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap()
        .trim()
        .to_string();
    let HookedCrash {
        worker_tid,
        worker_arg,
        printed,
    } = hook_and_call_crash_fixture(&mut t);
    let live = bt_json(pid, None);
    t.write_stdin("crash\n");
    // A zombie once the kernel has finished the core; not reaped, so its /proc
    // entry is there for systemd-coredump, as it is when the kernel runs it.
    assert!(
        wait_until(Duration::from_secs(30), || proc_state(pid) == Some('Z')),
        "pid {pid} did not crash"
    );
    let pattern = fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap();
    let pattern = pattern.trim();
    let core = [
        dir.path().join(pattern),
        dir.path().join(format!("{pattern}.{pid}")),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .unwrap_or_else(|| panic!("no core in {}", dir.path().display()));
    Crashed {
        dir,
        pid,
        comm,
        core,
        printed,
        worker_tid,
        worker_arg,
        live,
        target: t,
    }
}

fn stashed(frame: &Value) -> Vec<u64> {
    assert_eq!(frame["hooked"], json!(true), "{frame:#}");
    ARG_REGS
        .iter()
        .map(|r| frame_arg(frame, r).unwrap_or_else(|| panic!("no {r} in {frame:#}")))
        .collect()
}

fn pid_s_of(pid: i32) -> String {
    pid.to_string()
}

fn reap(c: &mut Crashed) {
    let status = c.target.wait_exit(Duration::from_secs(10)).expect("reaped");
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "{status:?}");
}

#[test]
fn coredump_shows_the_stashed_arguments_of_a_hooked_crash() {
    if skip("coredump_shows_the_stashed_arguments_of_a_hooked_crash") {
        return;
    }
    let exe = build("crash", Variant::O2G);
    let mut c = crash_hooked(&exe, ScratchDir::new("coredump-cwd"));
    let store = ScratchDir::new("coredump-store");
    let stored = store_with_systemd(c.pid, &c.core, store.path(), None);
    // Small store for the truncation case: systemd-coredump's caps set low.
    let small = ScratchDir::new("coredump-small");
    let conf = small.path().join("coredump.conf");
    fs::write(
        &conf,
        "[Coredump]\nProcessSizeMax=64K\nExternalSizeMax=64K\n",
    )
    .unwrap();
    let small_store = ScratchDir::new("coredump-small-store");
    let cut = store_with_systemd(c.pid, &c.core, small_store.path(), Some(&conf));
    // Uncompressed (Compress=no), and from it the other formats systemd-coredump
    // writes where it is built with them: LZ4 frame and xz, by the lz4 and xz tools.
    let plain_conf = small.path().join("plain.conf");
    fs::write(&plain_conf, "[Coredump]\nCompress=no\n").unwrap();
    let plain_store = ScratchDir::new("coredump-plain-store");
    let plain = store_with_systemd(c.pid, &c.core, plain_store.path(), Some(&plain_conf));
    reap(&mut c);
    let plain_name = plain.file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        plain_name.ends_with(&format!(".{}", c.pid)) || !plain_name.ends_with(".zst"),
        "{plain_name}"
    );
    let formats = ScratchDir::new("coredump-formats");
    for (tool, suffix, pid) in [("lz4", "lz4", 9001), ("xz", "xz", 9002)] {
        let dst = formats
            .path()
            .join(format!("core.{}.0.{BOOT}.{pid}.2000000.{suffix}", c.comm));
        let out = Command::new(tool)
            .args(["-c", "-q"])
            .stdin(fs::File::open(&plain).unwrap())
            .stdout(fs::File::create(&dst).unwrap())
            .status()
            .unwrap_or_else(|e| panic!("{tool}: {e}"));
        assert!(out.success(), "{tool}: {out:?}");
    }
    fs::copy(&plain, formats.path().join(&plain_name)).unwrap();
    for spec in ["9001", "9002", pid_s_of(c.pid).as_str()] {
        let (bt, stderr) = ok_json(formats.path(), &["bt", "--coredump", spec, "--json"]);
        let frames = thread_frames(bt_thread(&bt, c.pid).expect("main thread")).clone();
        let hooked = frames
            .iter()
            .find(|f| f["function"] == json!("stash_me"))
            .unwrap_or_else(|| panic!("{spec}: no stash_me: {bt:#} {stderr}"));
        assert_eq!(stashed(hooked), c.printed, "{spec}: {stderr}");
    }

    // What systemd-coredump stored: name, compression, attributes, owner.
    let name = stored.file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        name.starts_with(&format!("core.{}.0.", c.comm)) && name.ends_with(".zst"),
        "{name}"
    );
    assert!(name.contains(&format!(".{}.", c.pid)), "{name}");
    let meta = fs::metadata(&stored).unwrap();
    assert_eq!(meta.uid(), 0, "{name} owner");

    let main_frames = |bt: &Value| -> Vec<Value> {
        thread_frames(bt_thread(bt, c.pid).unwrap_or_else(|| panic!("no main thread: {bt:#}")))
            .clone()
    };
    let live_main = main_frames(&c.live);
    let live_hooked = live_main
        .iter()
        .find(|f| f["function"] == json!("stash_me"))
        .expect("live stash_me");
    assert_eq!(stashed(live_hooked), c.printed, "live bt vs printed");

    let pid_s = c.pid.to_string();
    let store_path = store.path();
    for spec in ["latest", pid_s.as_str(), c.comm.as_str()] {
        let (bt, stderr) = ok_json(store_path, &["bt", "--coredump", spec, "--json"]);
        assert!(stderr.contains(&name), "{spec}: {stderr}");
        assert_eq!(bt["pid"], json!(c.pid), "{bt:#}");
        let frames = main_frames(&bt);
        let names: Vec<&str> = frames
            .iter()
            .map(|f| f["function"].as_str().unwrap_or("??"))
            .collect();
        assert_eq!(
            names[..4],
            ["crash_here", "wait_then_crash", "stash_me", "main"],
            "{spec}: {bt:#}"
        );
        let hooked = frames
            .iter()
            .find(|f| f["function"] == json!("stash_me"))
            .unwrap();
        assert_eq!(stashed(hooked), c.printed, "{spec}: coredump bt vs printed");
        assert_eq!(hooked["stash_frame"], live_hooked["stash_frame"], "{spec}");
        let worker = bt_thread(&bt, c.worker_tid).expect("worker thread");
        let (_, parked) = frame_named(worker, "worker_parked").expect("worker_parked");
        assert_eq!(frame_arg(parked, "rdi"), Some(c.worker_arg), "{parked:#}");
    }
    // --tid, and the text form.
    let tid = c.worker_tid.to_string();
    let (one, _) = ok_json(
        store_path,
        &["bt", "--coredump", "latest", "--tid", &tid, "--json"],
    );
    assert_eq!(bt_threads(&one).len(), 1, "{one:#}");
    let out = argstash_with_store(Some(store_path), &["bt", "--coredump", "latest"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    println!("{}{text}", String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains(&format!("Core of process {}", c.pid))
            && text.contains("killed by signal 11 (SIGSEGV)")
            && text.contains("stash_me"),
        "{text}"
    );

    // The core systemd-coredump cut at 64K: refused, naming the sizes and the settings.
    let stderr = fails(
        Some(small_store.path()),
        &["bt", "--coredump", "latest"],
        &[
            "cut short by systemd-coredump",
            "ExternalSizeMax=",
            "ProcessSizeMax=",
        ],
    );
    println!("{stderr}");
    assert!(cut.file_name().unwrap().to_str().unwrap().ends_with(".zst"));

    // Several matches: the newest wins, the others are named with the way to pick them.
    let older = store_path.join(format!("core.{}.0.{BOOT}.4242.1000000.zst", c.comm));
    fs::copy(&stored, &older).unwrap();
    let (bt, stderr) = ok_json(store_path, &["bt", "--coredump", &c.comm, "--json"]);
    assert_eq!(bt["pid"], json!(c.pid));
    assert!(
        stderr.contains("1 older core(s) match") && stderr.contains("pid 4242"),
        "{stderr}"
    );
    assert!(stderr.contains("--coredump PID"), "{stderr}");
    // ... and the older one by its pid (the name's pid; the core inside is the same crash).
    let (bt, stderr) = ok_json(store_path, &["bt", "--coredump", "4242", "--json"]);
    assert!(stderr.contains("4242.1000000.zst"), "{stderr}");
    assert_eq!(bt["pid"], json!(c.pid));

    // Nothing matches: every stored core is listed.
    let stderr = fails(
        Some(store_path),
        &["bt", "--coredump", "no-such-program"],
        &[
            "no core stored by systemd-coredump matches \"no-such-program\"",
            "pid 4242",
        ],
    );
    assert!(stderr.contains(&format!("pid {}", c.pid)), "{stderr}");
    println!("{stderr}");

    // A compressed file that is corrupt: named as such, with the format.
    let bytes = fs::read(&stored).unwrap();
    let mut bad = bytes.clone();
    let mid = bad.len() / 2;
    for b in &mut bad[mid..mid + 64] {
        *b ^= 0x5a;
    }
    let corrupt = store_path.join(format!("core.{}.0.{BOOT}.777.9999999999999999.zst", c.comm));
    fs::write(&corrupt, &bad).unwrap();
    let stderr = fails(
        Some(store_path),
        &["bt", "--coredump", "777"],
        &["cannot decompress", "zstd", "corrupt"],
    );
    println!("{stderr}");
    fs::remove_file(&corrupt).unwrap();

    // A link or another user's file in the directory is never read.
    let link = store_path.join(format!("core.{}.0.{BOOT}.778.9999999999999999.zst", c.comm));
    std::os::unix::fs::symlink(&stored, &link).unwrap();
    let foreign = store_path.join(format!("core.{}.0.{BOOT}.779.9999999999999999.zst", c.comm));
    fs::write(&foreign, &bytes).unwrap();
    std::os::unix::fs::chown(&foreign, Some(12345), None).unwrap();
    fails(
        Some(store_path),
        &["bt", "--coredump", "778"],
        &["matches pid 778"],
    );
    fails(
        Some(store_path),
        &["bt", "--coredump", "779"],
        &["matches pid 779"],
    );
    let (bt, _) = ok_json(store_path, &["bt", "--coredump", "latest", "--json"]);
    assert_eq!(bt["pid"], json!(c.pid), "latest skips the refused files");
    drop(c.dir);
}

#[test]
fn coredump_of_a_program_changed_since_names_the_build_id() {
    if skip("coredump_of_a_program_changed_since_names_the_build_id") {
        return;
    }
    // The crashed program is a copy that is replaced by another build after the crash.
    let dir = ScratchDir::new("coredump-changed");
    let exe = dir.path().join("crashcopy");
    fs::copy(build("crash", Variant::O2G), &exe).unwrap();
    let mut c = crash_hooked(&exe, dir);
    let store = ScratchDir::new("coredump-store");
    store_with_systemd(c.pid, &c.core, store.path(), None);
    reap(&mut c);
    let (before, _) = ok_json(store.path(), &["bt", "--coredump", "crashcopy", "--json"]);
    let before = thread_frames(bt_thread(&before, c.pid).unwrap()).clone();
    assert_eq!(before[0]["function"], json!("crash_here"));

    fs::remove_file(&exe).unwrap();
    fs::copy(build("seed", Variant::O2G), &exe).unwrap();
    let (after, stderr) = ok_json(store.path(), &["bt", "--coredump", "crashcopy", "--json"]);
    assert!(stderr.contains("build id"), "{stderr}");
    let frames = thread_frames(bt_thread(&after, c.pid).unwrap()).clone();
    assert_eq!(frames[0]["pc"], before[0]["pc"], "crash pc");
    assert_eq!(frames[0]["function"], Value::Null, "{:#}", frames[0]);
}

#[test]
fn coredump_that_names_nothing_says_what_there_is() {
    if skip("coredump_that_names_nothing_says_what_there_is") {
        return;
    }
    // No directory at all.
    fails(
        None,
        &["bt", "--coredump", "latest"],
        &[
            "/var/lib/systemd/coredump does not exist",
            "install systemd-coredump",
        ],
    );
    // An empty directory; a file that is no core of systemd-coredump's.
    let store = ScratchDir::new("coredump-empty");
    fs::write(store.path().join("notes.txt"), "x").unwrap();
    fails(
        Some(store.path()),
        &["bt", "--coredump", "latest"],
        &["holds no core", "kernel.core_pattern is \"core\""],
    );
    // A core name in its format whose content is not a core.
    fs::write(
        store.path().join(format!("core.x.0.{BOOT}.12.34")),
        b"not an ELF file",
    )
    .unwrap();
    fails(
        Some(store.path()),
        &["bt", "--coredump", "12"],
        &["is not a core file"],
    );
    // Clap rejects what makes no sense with --coredump.
    let out = argstash_with_store(
        Some(store.path()),
        &["bt", "--coredump", "latest", "--pid", "1"],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
