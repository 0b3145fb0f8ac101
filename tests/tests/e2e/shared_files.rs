//! End-to-end: files in directories others can write (issue 19).
//!
//! A hostile local user (uid 65534, through `setpriv`) plants FIFOs, symbolic links
//! (to a root-owned file), hard links (of a root-owned file) and files of their own
//! at every path argstash uses in /tmp (`perf-PID.map`, `jit-PID.dump`,
//! `argstash-jit-PID.so`, `argstash-PID.elf`) and in its cache; then `inject`,
//! `eject`, `bt`, `record` and `run` as root must end in time, leave every planted
//! file and whatever a link points at unchanged, say which file they left alone,
//! and leave the target working. The /tmp sweep of dead processes' files removes
//! only files that prove they are argstash's. And a process under `chroot` gets
//! the files it must open (the jitdump it maps, the gdb helper it `dlopen`s) in
//! its own /tmp.
//!
//! Every argstash run has a deadline ([`DEADLINE`]): a hang fails the test.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use argstash_tests::*;

/// Longest any argstash command may take here (a hang is a failure, not a wait).
const DEADLINE: Duration = Duration::from_secs(30);

const FIXTURE: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) long step(long i) {
    __asm__ volatile("" ::: "memory");
    return i * 3 + 1;
}

int main(int argc, char **argv) {
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    long sum = 0;
    if (argc > 1) {
        for (long i = 0; i < atol(argv[1]); i++) sum += step(i);
        printf("sum %ld\n", sum);
        return sum == 3 * atol(argv[1]) * (atol(argv[1]) - 1) / 2 + atol(argv[1]) ? 0 : 1;
    }
    for (long i = 0;; i++) {
        long r = step(i);
        if (r != i * 3 + 1) abort();
        sum += r;
        if (i % 50 == 0) { printf("iter %ld\n", i); fflush(stdout); }
        usleep(2000);
    }
}
"#;

/// One test's own directory in /tmp (the same file system as the planted files,
/// so a hard link can join them), sticky and writable by all like /tmp; removed
/// when dropped.
struct TestDir(PathBuf);

impl TestDir {
    fn new(tag: &str) -> TestDir {
        let d = std::env::temp_dir().join(format!(
            "argstash-shared-files-{}-{tag}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o1777)).unwrap();
        TestDir(d)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn fixture() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let d = fixture_cache_dir().join(format!("shared-files-{}", std::process::id()));
        fs::create_dir_all(&d).unwrap();
        let src = d.join("stepper.c");
        fs::write(&src, FIXTURE).unwrap();
        compile_c(&src, &d.join("stepper"), &["-O2", "-g"])
    })
    .clone()
}

/// Runs `args` as uid/gid 65534 with no groups; asserts it succeeded.
fn as_nobody(args: &[&str]) {
    let out = run_command(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(args),
        DEADLINE,
    );
    assert!(out.status.success(), "{args:?}: {}", output_text(&out));
}

/// `argstash args...` with a deadline: fails the test on a hang. Returns the
/// labelled output and whether it succeeded.
fn argstash_in_time(args: &[&str], xdg: Option<&Path>) -> (String, bool) {
    let out = argstash_output(args, xdg);
    (output_text(&out), out.status.success())
}

fn argstash_output(args: &[&str], xdg: Option<&Path>) -> std::process::Output {
    let mut cmd = argstash_cmd(args);
    if let Some(x) = xdg {
        cmd.env("XDG_CACHE_HOME", x).env_remove("ARGSTASH_CACHE");
    }
    let (out, in_time) = Background::spawn(&mut cmd).finish(DEADLINE);
    assert!(
        in_time,
        "argstash {args:?} hung (killed after {DEADLINE:?}):\n{}",
        output_text(&out)
    );
    out
}

/// What was planted at a path, to check it is still there unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plant {
    /// `mkfifo -m 666`, by uid 65534.
    Fifo,
    /// A symbolic link to the root-owned sentinel, by uid 65534.
    Symlink,
    /// A hard link of the root-owned sentinel (what uid 65534 could make
    /// without `fs.protected_hardlinks`; made by the test itself).
    Hardlink,
    /// A regular file of uid 65534's.
    OtherOwner,
}

const PLANTS: [Plant; 4] = [
    Plant::Fifo,
    Plant::Symlink,
    Plant::Hardlink,
    Plant::OtherOwner,
];

/// A root-owned file whose bytes must never change.
fn sentinel(dir: &TestDir, tag: &str) -> PathBuf {
    let p = dir.join(&format!("sentinel-{tag}"));
    fs::write(&p, b"root's precious bytes\n").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
    p
}

const SENTINEL_BYTES: &[u8] = b"root's precious bytes\n";
const OTHER_BYTES: &[u8] = b"uid 65534 wrote this\n";

fn plant(kind: Plant, at: &Path, sentinel: &Path) {
    let _ = fs::remove_file(at);
    let at_s = at.to_str().unwrap();
    match kind {
        Plant::Fifo => as_nobody(&["mkfifo", "-m", "666", at_s]),
        Plant::Symlink => as_nobody(&["ln", "-s", sentinel.to_str().unwrap(), at_s]),
        Plant::Hardlink => fs::hard_link(sentinel, at).unwrap(),
        Plant::OtherOwner => as_nobody(&[
            "sh",
            "-c",
            &format!("printf 'uid 65534 wrote this\\n' > {at_s}"),
        ]),
    }
}

/// Asserts the planted file is still there as planted, and the sentinel unchanged.
fn assert_untouched(kind: Plant, at: &Path, sentinel: &Path) {
    let meta = fs::symlink_metadata(at)
        .unwrap_or_else(|e| panic!("{kind:?} at {} is gone: {e}", at.display()));
    match kind {
        Plant::Fifo => assert!(
            std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type()),
            "{}",
            at.display()
        ),
        Plant::Symlink => assert_eq!(fs::read_link(at).unwrap(), sentinel),
        Plant::Hardlink => assert_eq!(
            meta.ino(),
            fs::metadata(sentinel).unwrap().ino(),
            "{}",
            at.display()
        ),
        Plant::OtherOwner => {
            assert_eq!(meta.uid(), 65534);
            assert_eq!(fs::read(at).unwrap(), OTHER_BYTES, "{}", at.display());
        }
    }
    assert_eq!(
        fs::read(sentinel).unwrap(),
        SENTINEL_BYTES,
        "nothing written through a link"
    );
}

/// Removes the files it holds when dropped, also when a test fails: a FIFO left
/// in /tmp would hang any argstash without this fix that sweeps it.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = fs::remove_file(p);
        }
    }
}

/// The /tmp paths argstash uses for `pid`.
fn tmp_paths(pid: i32) -> [PathBuf; 4] {
    [
        format!("/tmp/perf-{pid}.map"),
        format!("/tmp/jit-{pid}.dump"),
        format!("/tmp/argstash-jit-{pid}.so"),
        format!("/tmp/argstash-{pid}.elf"),
    ]
    .map(PathBuf::from)
}

fn plant_name(kind: Plant) -> &'static str {
    match kind {
        Plant::Fifo => "fifo",
        Plant::Symlink => "symlink",
        Plant::Hardlink => "hardlink",
        Plant::OtherOwner => "other",
    }
}

#[test]
fn hostile_files_at_every_tmp_path_are_reported_and_left_alone_by_inject_eject_and_bt() {
    let exe = fixture();
    let d = TestDir::new("hostile");
    for kind in PLANTS {
        let mut t = Target::spawn(&exe);
        let pid = t.pid();
        let p = pid.to_string();
        let sentinel = sentinel(&d, plant_name(kind));
        let paths = tmp_paths(pid);
        let _cleanup = Cleanup(paths.to_vec());
        for path in &paths {
            plant(kind, path, &sentinel);
        }
        let (out, ok) = argstash_in_time(&["inject", "--pid", &p, "--func", "step"], None);
        assert!(ok, "{kind:?}: {out}");
        for path in &paths {
            assert!(
                out.contains(&format!("{} left alone", path.display())),
                "{kind:?}: the note names {}:\n{out}",
                path.display()
            );
            assert_untouched(kind, path, &sentinel);
        }
        let hooks = list_hooks(pid);
        assert!(
            hooks
                .iter()
                .any(|h| h["function"] == "step" && h["state"] == "active"),
            "{hooks:?}"
        );
        t.wait_for_line(Duration::from_secs(10), |l| l.starts_with("iter"));
        t.assert_healthy();

        let (out, ok) = argstash_in_time(&["bt", "--pid", &p], None);
        assert!(ok && out.contains("main"), "{out}");

        let (out, ok) = argstash_in_time(&["eject", "--pid", &p, "--all"], None);
        assert!(ok, "{kind:?}: {out}");
        for path in &paths {
            assert_untouched(kind, path, &sentinel);
        }
        t.assert_function_pristine("step");
        t.wait_for_line(Duration::from_secs(10), |l| l.starts_with("iter"));
        t.assert_healthy();
        for path in &paths {
            let _ = fs::remove_file(path);
        }
        let _ = fs::remove_file(&sentinel);
    }
}

/// A pid that no process has now.
fn dead_pid() -> i32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id() as i32;
    c.wait().unwrap();
    pid
}

#[test]
fn the_sweep_removes_only_files_that_prove_they_are_ours_and_never_waits() {
    let exe = fixture();
    let d = TestDir::new("sweep");
    // Hostile files at the names of a dead process: FIFOs (which hung every
    // later inject), a link, another user's file carrying our content.
    let dead = dead_pid();
    let sentinel = sentinel(&d, "sweep");
    let [map, dump, helper, elf] = tmp_paths(dead);
    let _cleanup = Cleanup(vec![map.clone(), dump.clone(), helper.clone(), elf.clone()]);
    plant(Plant::Fifo, &map, &sentinel);
    plant(Plant::Symlink, &dump, &sentinel);
    plant(Plant::Fifo, &helper, &sentinel);
    as_nobody(&[
        "sh",
        "-c",
        &format!(
            "printf '1000 10 argstash_trampoline.x\\n' > {}",
            elf.display()
        ),
    ]);
    // A root-owned perf map of a dead process holding only our lines is ours: swept.
    let dead2 = dead_pid();
    let ours = PathBuf::from(format!("/tmp/perf-{dead2}.map"));
    fs::write(
        &ours,
        "1000 10 argstash_trampoline.x\n1010 10 argstash_prologue.x\n",
    )
    .unwrap();
    // A root-owned perf map of a dead process with another tool's line: kept.
    let dead3 = dead_pid();
    let theirs = PathBuf::from(format!("/tmp/perf-{dead3}.map"));
    let _cleanup_maps = Cleanup(vec![ours.clone(), theirs.clone()]);
    fs::write(&theirs, "1000 10 argstash_trampoline.x\n2000 10 jitted\n").unwrap();

    let mut t = Target::spawn(&exe);
    let p = t.pid().to_string();
    let (out, ok) = argstash_in_time(&["inject", "--pid", &p, "--func", "step"], None);
    assert!(ok, "{out}");
    assert!(!ours.exists(), "our stale perf map is swept");
    assert!(
        theirs.exists(),
        "a perf map with another tool's line is kept"
    );
    assert_untouched(Plant::Fifo, &map, &sentinel);
    assert_untouched(Plant::Symlink, &dump, &sentinel);
    assert_untouched(Plant::Fifo, &helper, &sentinel);
    assert!(elf.exists(), "another user's file is not swept");
    let (out, ok) = argstash_in_time(&["eject", "--pid", &p, "--all"], None);
    assert!(ok, "{out}");

    // `record` hooks too (and so sweeps): it ends in time.
    let profile = d.join("sweep-profile.txt");
    let (out, ok) = argstash_in_time(
        &[
            "record",
            "--pid",
            &p,
            "--duration",
            "1",
            "-o",
            profile.to_str().unwrap(),
        ],
        None,
    );
    assert!(ok, "{out}");
    t.assert_function_pristine("step");
    t.wait_for_line(Duration::from_secs(10), |l| l.starts_with("iter"));
    t.assert_healthy();

    // `run` with a hook: the program runs to its end, its result checked.
    let (out, ok) = argstash_in_time(
        &["run", "--func", "step", "--", exe.to_str().unwrap(), "200"],
        None,
    );
    assert!(ok && out.contains("sum 59900"), "{out}");
    assert_untouched(Plant::Fifo, &map, &sentinel);
    assert_untouched(Plant::Symlink, &dump, &sentinel);
    for f in [&map, &dump, &helper, &elf, &theirs, &sentinel, &profile] {
        let _ = fs::remove_file(f);
    }
}

#[test]
fn fifos_and_links_in_place_of_cache_entries_are_misses_not_hangs() {
    let exe = fixture();
    let d = TestDir::new("cache");
    let t = Target::spawn(&exe);
    let p = t.pid().to_string();
    let xdg = fixture_cache_dir().join(format!("shared-files-xdg-{}", std::process::id()));
    let _ = fs::remove_dir_all(&xdg);
    fs::create_dir_all(&xdg).unwrap();
    // The backtrace without the thread's stop time, which differs run to run. Always
    // stopped: a thread found blocked is otherwise read without a stop, with fewer
    // registers known in its innermost frame, and the outputs would differ by when
    // each bt came.
    let bt = || {
        let out = argstash_output(&["bt", "--always-stop", "--pid", &p], Some(&xdg));
        assert!(out.status.success(), "{}", output_text(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split(" (stopped ").next().unwrap_or(l).to_string())
            .collect::<Vec<_>>()
    };
    let first = bt();
    assert!(first.iter().any(|l| l.contains("main")), "{first:?}");
    // A core of the target (gcore, when gdb is installed), read through the cache too.
    let core_prefix = d.join("cache-core");
    let core = d.join(&format!("cache-core.{p}"));
    let have_core = Command::new("gcore")
        .arg("-o")
        .arg(&core_prefix)
        .arg(&p)
        .output()
        .is_ok_and(|o| o.status.success())
        && core.is_file();
    let core_s = core.to_str().unwrap().to_string();
    let bt_core = || {
        let out = argstash_output(&["bt", "--core", &core_s], Some(&xdg));
        assert!(out.status.success(), "{}", output_text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let first_core = have_core.then(bt_core);
    if !have_core {
        println!("bt --core part skipped: gcore (gdb) is not installed");
    }
    let cache = xdg.join("argstash");
    let entries: Vec<PathBuf> = fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.to_string_lossy();
            n.ends_with(".dwarf") || n.ends_with(".answers")
        })
        .collect();
    assert!(!entries.is_empty(), "the first bt wrote cache entries");
    let sentinel = sentinel(&d, "cache");
    for (kind, name) in [(Plant::Fifo, "fifo"), (Plant::Symlink, "symlink")] {
        for e in &entries {
            let _ = fs::remove_file(e);
            match kind {
                Plant::Fifo => {
                    let out = Command::new("mkfifo").arg(e).output().unwrap();
                    assert!(out.status.success());
                }
                _ => std::os::unix::fs::symlink(&sentinel, e).unwrap(),
            }
        }
        assert_eq!(bt(), first, "{name}: the same backtrace");
        if let Some(first_core) = &first_core {
            assert_eq!(
                &bt_core(),
                first_core,
                "{name}: the same backtrace of the core"
            );
        }
        assert_eq!(fs::read(&sentinel).unwrap(), SENTINEL_BYTES);
    }
    let _ = fs::remove_dir_all(&xdg);
    let _ = fs::remove_file(&sentinel);
    let _ = fs::remove_file(&core);
}

/// Copies `exe` and the shared objects it loads into a fresh root directory.
fn build_chroot(d: &TestDir, exe: &Path) -> PathBuf {
    let root = d.join("chroot");
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(root.join("tmp")).unwrap();
    fs::set_permissions(root.join("tmp"), fs::Permissions::from_mode(0o1777)).unwrap();
    let copy = |from: &Path| {
        let to = root.join(from.strip_prefix("/").unwrap());
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        fs::copy(from, &to).unwrap();
    };
    let ldd = Command::new("ldd").arg(exe).output().unwrap();
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        let path = line
            .split_whitespace()
            .find(|w| w.starts_with('/'))
            .map(PathBuf::from);
        if let Some(p) = path {
            copy(&p);
            // The loader finds libraries through the canonical directories.
            if let Ok(real) = fs::canonicalize(&p) {
                copy(&real);
            }
        }
    }
    fs::copy(exe, root.join("stepper")).unwrap();
    root
}

#[test]
fn a_chrooted_target_maps_the_jitdump_and_loads_the_gdb_helper_from_its_own_tmp() {
    let exe = fixture();
    let d = TestDir::new("chroot");
    let root = build_chroot(&d, &exe);
    let chroot = PathBuf::from("/usr/sbin/chroot");
    let mut t = Target::spawn_with_args(&chroot, &[root.to_str().unwrap(), "/stepper"]);
    let pid = t.pid();
    let p = pid.to_string();
    let (out, ok) = argstash_in_time(&["inject", "--pid", &p, "--func", "step"], None);
    assert!(ok, "{out}");
    assert!(!out.contains("cannot map"), "{out}");
    assert!(out.contains("gdb JIT interface: registered 1"), "{out}");
    let dump = root.join(format!("tmp/jit-{pid}.dump"));
    let helper = root.join(format!("tmp/argstash-jit-{pid}.so"));
    assert!(dump.is_file() && helper.is_file(), "{out}");
    // Read from here, the maps of a chrooted process show host-absolute paths.
    let mapped = maps(pid);
    let has = |p: &Path| mapped.iter().any(|m| Path::new(&m.path) == p);
    assert!(has(&dump), "jitdump mapped: {mapped:?}");
    assert!(has(&helper), "gdb helper loaded: {mapped:?}");
    assert!(!Path::new(&format!("/tmp/jit-{pid}.dump")).exists());
    let list = run_ok(&["list", "--pid", &p]);
    assert!(
        list.lines()
            .any(|l| l.starts_with("unwind") && l.contains("gdb JIT yes")),
        "{list}"
    );
    t.wait_for_line(Duration::from_secs(10), |l| l.starts_with("iter"));
    t.assert_healthy();
    let (out, ok) = argstash_in_time(&["eject", "--pid", &p, "--all"], None);
    assert!(ok, "{out}");
    assert!(
        !dump.exists() && !helper.exists(),
        "eject removes them:\n{out}"
    );
    assert!(!maps(pid).iter().any(|m| m.path.contains("argstash-jit")));
    t.wait_for_line(Duration::from_secs(10), |l| l.starts_with("iter"));
    t.assert_healthy();
    drop(t);
    remove_argstash_tmp_files(pid);
    let _ = fs::remove_dir_all(&root);
}

#[test]
fn a_target_with_a_private_tmp_gets_every_file_in_its_own_tmp() {
    // What argstashd meets under its unit's `PrivateTmp=yes`, seen from the other
    // side: the target and argstash do not share a /tmp. The target runs in a
    // mount namespace of its own with a fresh tmpfs on /tmp (its executable is
    // outside /tmp, which the tmpfs hides).
    // The fixture is built outside /tmp, which the tmpfs hides.
    let exe = fixture();
    let unshare = PathBuf::from("unshare");
    let mut t = Target::spawn_with_args(
        &unshare,
        &[
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount -t tmpfs argstash-private-tmp /tmp && exec \"$0\"",
            exe.to_str().unwrap(),
        ],
    );
    let pid = t.pid();
    let p = pid.to_string();
    let (out, ok) = argstash_in_time(&["inject", "--pid", &p, "--func", "step"], None);
    assert!(ok, "{out}");
    assert!(!out.contains("cannot map"), "{out}");
    assert!(out.contains("gdb JIT interface: registered 1"), "{out}");
    let theirs = PathBuf::from(format!("/proc/{pid}/root/tmp"));
    let names = [
        format!("jit-{pid}.dump"),
        format!("argstash-jit-{pid}.so"),
        format!("perf-{pid}.map"),
        format!("argstash-{pid}.elf"),
    ];
    for name in &names {
        assert!(
            theirs.join(name).is_file(),
            "{name} in the target's /tmp:\n{out}"
        );
        assert!(
            !Path::new("/tmp").join(name).exists(),
            "{name} not in ours:\n{out}"
        );
    }
    let map = fs::read_to_string(theirs.join(&names[2])).unwrap();
    assert!(map.contains(" argstash_trampoline.step"), "{map}");
    let list = run_ok(&["list", "--pid", &p]);
    assert!(
        list.lines().any(|l| l.starts_with("unwind")
            && l.contains("gdb JIT yes")
            && l.contains("perf map yes")),
        "{list}"
    );
    t.wait_for_line(Duration::from_secs(10), |l| l.starts_with("iter"));
    t.assert_healthy();
    let (out, ok) = argstash_in_time(&["eject", "--pid", &p, "--all"], None);
    assert!(ok, "{out}");
    for name in &names {
        assert!(!theirs.join(name).exists(), "eject removes {name}:\n{out}");
    }
    t.wait_for_line(Duration::from_secs(10), |l| l.starts_with("iter"));
    t.assert_healthy();
    drop(t);
}

#[test]
fn a_fifo_in_place_of_a_mapped_file_is_refused_not_waited_on() {
    // The target runs from a file in a directory others can write; the file is
    // deleted and uid 65534 puts a FIFO at its name. `bt` opens the target's
    // mapped files by name: it must not wait on the FIFO.
    let d = TestDir::new("mapped");
    let exe = d.join("stepper-copy");
    fs::copy(fixture(), &exe).unwrap();
    let t = Target::spawn(&exe);
    let p = t.pid().to_string();
    let core = d.join(&format!("core.{p}"));
    let have_core = Command::new("gcore")
        .arg("-o")
        .arg(d.join("core"))
        .arg(&p)
        .output()
        .is_ok_and(|o| o.status.success())
        && core.is_file();
    fs::remove_file(&exe).unwrap();
    as_nobody(&["mkfifo", "-m", "666", exe.to_str().unwrap()]);
    let (out, ok) = argstash_in_time(&["bt", "--pid", &p], None);
    // The mapped file itself is read through /proc/PID/map_files.
    assert!(ok && out.contains("main"), "{out}");
    if have_core {
        let core_s = core.to_str().unwrap();
        // The executable's frames lose their names; the libraries' keep theirs.
        let (out, ok) = argstash_in_time(&["bt", "--core", core_s], None);
        assert!(ok && out.contains("usleep"), "{out}");
    } else {
        println!("bt --core part skipped: gcore (gdb) is not installed");
    }
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(
        &fs::symlink_metadata(&exe).unwrap().file_type()
    ));
}

#[test]
fn links_to_another_processes_files_are_not_followed() {
    // uid 65534 links the names of one process's files to those of another
    // hooked process: hooking and unhooking the first must leave the second's
    // files exactly as they were.
    let exe = fixture();
    let other = Target::spawn(&exe);
    let o = other.pid().to_string();
    let (out, ok) = argstash_in_time(&["inject", "--pid", &o, "--func", "step"], None);
    assert!(ok, "{out}");
    let theirs = tmp_paths(other.pid());
    let before: Vec<Vec<u8>> = theirs
        .iter()
        .filter(|p| p.is_file())
        .map(|p| fs::read(p).unwrap())
        .collect();
    assert!(
        before.len() >= 2,
        "the other process has its perf map and jitdump"
    );

    let mut t = Target::spawn(&exe);
    let p = t.pid().to_string();
    let ours = tmp_paths(t.pid());
    let _cleanup = Cleanup(ours.to_vec());
    for (at, to) in ours.iter().zip(&theirs) {
        let _ = fs::remove_file(at);
        as_nobody(&["ln", "-s", to.to_str().unwrap(), at.to_str().unwrap()]);
    }
    let (out, ok) = argstash_in_time(&["inject", "--pid", &p, "--func", "step"], None);
    assert!(ok, "{out}");
    let (eject, ok) = argstash_in_time(&["eject", "--pid", &p, "--all"], None);
    assert!(ok, "{eject}");
    for at in &ours {
        assert!(
            out.contains(&format!(
                "{} left alone: it is a symbolic link",
                at.display()
            )),
            "{out}"
        );
        assert!(fs::symlink_metadata(at).unwrap().file_type().is_symlink());
    }
    let after: Vec<Vec<u8>> = theirs
        .iter()
        .filter(|p| p.is_file())
        .map(|p| fs::read(p).unwrap())
        .collect();
    assert_eq!(after, before, "the other process's files are unchanged");
    t.assert_function_pristine("step");
    t.wait_for_line(Duration::from_secs(10), |l| l.starts_with("iter"));
    t.assert_healthy();
    let (out, ok) = argstash_in_time(&["eject", "--pid", &o, "--all"], None);
    assert!(ok, "{out}");
    drop(other);
    remove_argstash_tmp_files(t.pid());
}
