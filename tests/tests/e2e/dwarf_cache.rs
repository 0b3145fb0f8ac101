//! End-to-end: the on-disk DWARF cache (`$XDG_CACHE_HOME/argstash`).
//!
//! With libc's separate debug file installed (libc6-dbg), `argstash bt` on
//! deepstack.c (sleeping in libc's `clock_nanosleep`) writes an entry for the
//! debug file on its first run, reads it on the next, rebuilds it when damaged,
//! and prints the same backtrace every time, and the same as without a cache.
//! Beside it, each debug file's symbolization answers (`BUILD-ID.answers`) are
//! saved by the first run and reused by the next (`reader::answers`).
//! Each test uses a fresh cache directory of its own, never the user's.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use argstash_tests::*;

/// A fresh, empty directory for one test's cache.
fn fresh_dir(name: &str) -> PathBuf {
    let dir = fixture_cache_dir().join(format!("dwarf-cache-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// The GNU build-id of the ELF file at `path`, in hex.
fn build_id_of(path: &Path) -> Option<String> {
    let out = Command::new("readelf").arg("-n").arg(path).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))?
        .trim()
        .to_string();
    Some(id)
}

/// The names of the files in the cache directory under `xdg`, sorted.
fn entries(xdg: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(xdg.join("argstash"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// libc's build-id, when its debug file is installed under /usr/lib/debug.
fn libc_debug_build_id() -> Option<String> {
    let libc = [
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/x86_64-linux-gnu/libc.so.6",
    ]
    .into_iter()
    .find(|p| Path::new(p).is_file())?;
    let id = build_id_of(Path::new(libc))?;
    let debug = format!("/usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..]);
    Path::new(&debug).is_file().then_some(id)
}

/// `argstash bt --pid PID` with the cache under `xdg` (or off), without the
/// thread's stop time, which differs run to run.
fn bt(pid: i32, xdg: &Path, cache_off: bool) -> String {
    let p = pid.to_string();
    let mut cmd = argstash_cmd(&["bt", "--pid", &p]);
    cmd.env("XDG_CACHE_HOME", xdg).env_remove("ARGSTASH_CACHE");
    if cache_off {
        cmd.env("ARGSTASH_CACHE", "off");
    }
    let out = run_command(&mut cmd, RUN_TIMEOUT);
    assert!(out.status.success(), "{}", output_text(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| match l.find(" (stopped ") {
            Some(at) => &l[..at],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_second_bt_reads_the_cache_and_prints_the_same() {
    let Some(id) = libc_debug_build_id() else {
        eprintln!("skipped: libc's debug file is not installed (apt-get install libc6-dbg)");
        return;
    };
    let exe = build("deepstack", Variant::O2G);
    let t = Target::spawn(&exe);
    // Let the recursion reach its sleep in libc.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let xdg = fresh_dir("twice");
    let entry = xdg.join("argstash").join(format!("{id}.dwarf"));

    let first = bt(t.pid(), &xdg, false);
    assert!(
        first.contains("clock_nanosleep.c:"),
        "libc's frames have source lines from its debug file:\n{first}"
    );
    assert!(entry.is_file(), "{} written", entry.display());
    let written = fs::metadata(&entry).unwrap().modified().unwrap();

    // The answers of libc's debug file are gone: the second run needs the
    // DWARF itself, from the entry.
    fs::remove_file(xdg.join("argstash").join(format!("{id}.answers"))).unwrap();
    let second = bt(t.pid(), &xdg, false);
    assert_eq!(second, first);
    let dwarf: Vec<String> = entries(&xdg)
        .into_iter()
        .filter(|n| !n.ends_with(".answers"))
        .collect();
    assert_eq!(dwarf, [format!("{id}.dwarf")], "one entry, no leftovers");
    assert_eq!(
        fs::metadata(&entry).unwrap().modified().unwrap(),
        written,
        "a hit does not rewrite the entry"
    );

    let off_dir = fresh_dir("off");
    assert_eq!(bt(t.pid(), &off_dir, true), first, "ARGSTASH_CACHE=off");
    assert!(
        !off_dir.join("argstash").exists(),
        "ARGSTASH_CACHE=off writes nothing"
    );
    let _ = fs::remove_dir_all(&xdg);
    let _ = fs::remove_dir_all(&off_dir);
}

#[test]
fn a_damaged_entry_gives_the_same_output_as_no_cache() {
    let Some(id) = libc_debug_build_id() else {
        eprintln!("skipped: libc's debug file is not installed (apt-get install libc6-dbg)");
        return;
    };
    let exe = build("deepstack", Variant::O2G);
    let t = Target::spawn(&exe);
    // Let the recursion reach its sleep in libc.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let xdg = fresh_dir("damaged");
    let entry = xdg.join("argstash").join(format!("{id}.dwarf"));
    let uncached = bt(t.pid(), &xdg, true);
    bt(t.pid(), &xdg, false);
    let good = fs::read(&entry).unwrap();

    // A flipped byte in the header's key and in its unit index, a truncated
    // file, one byte too many, an empty file.
    let mut key_flipped = good.clone();
    key_flipped[60] ^= 0x01;
    let mut index_flipped = good.clone();
    index_flipped[120 + 12 * 40 + 5] ^= 0x01;
    let truncated = good[..good.len() / 2].to_vec();
    let longer = [good.as_slice(), &[0]].concat();
    for (what, bytes) in [
        ("flipped key byte", key_flipped),
        ("flipped index byte", index_flipped),
        ("truncated", truncated),
        ("one byte longer", longer),
        ("empty", Vec::new()),
    ] {
        fs::write(&entry, &bytes).unwrap();
        // Without saved answers, so that the DWARF (and its entry) is needed.
        for name in entries(&xdg).iter().filter(|n| n.ends_with(".answers")) {
            fs::remove_file(xdg.join("argstash").join(name)).unwrap();
        }
        assert_eq!(bt(t.pid(), &xdg, false), uncached, "{what}");
        assert!(
            fs::read(&entry).unwrap() == good,
            "{what}: the entry was rebuilt"
        );
    }
    let _ = fs::remove_dir_all(&xdg);
}

#[test]
fn answers_are_saved_once_and_reused_with_the_same_output() {
    let exe = build("deepstack", Variant::O2G);
    let Some(id) = build_id_of(&exe) else {
        panic!(
            "{} has no build-id (the system cc links one in)",
            exe.display()
        );
    };
    let t = Target::spawn(&exe);
    // Let the recursion reach its sleep in libc.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let off_dir = fresh_dir("answers-off");
    let uncached = bt(t.pid(), &off_dir, true);
    let xdg = fresh_dir("answers");
    let first = bt(t.pid(), &xdg, false);
    assert_eq!(first, uncached, "the first run, which saves the answers");
    assert!(
        first.contains("deepstack.c:"),
        "the program's frames have source lines:\n{first}"
    );
    let answers = xdg.join("argstash").join(format!("{id}.answers"));
    assert!(answers.is_file(), "{} written", answers.display());
    let good = fs::read(&answers).unwrap();
    let written = fs::metadata(&answers).unwrap().modified().unwrap();

    let second = bt(t.pid(), &xdg, false);
    assert_eq!(second, first, "the second run, from the saved answers");
    assert_eq!(
        fs::metadata(&answers).unwrap().modified().unwrap(),
        written,
        "a run that learned nothing new writes nothing"
    );
    assert!(
        !entries(&xdg).iter().any(|n| n.ends_with(".tmp")),
        "no leftovers: {:?}",
        entries(&xdg)
    );

    // A damaged entry is ignored (the DWARF answers again) and saved whole again.
    let mut flipped = good.clone();
    flipped[good.len() / 2] ^= 0x10;
    for (what, bytes) in [
        ("flipped byte", flipped),
        ("truncated", good[..good.len() / 3].to_vec()),
        ("empty", Vec::new()),
    ] {
        fs::write(&answers, &bytes).unwrap();
        assert_eq!(bt(t.pid(), &xdg, false), uncached, "{what}");
        assert!(fs::read(&answers).unwrap() == good, "{what}: saved again");
    }
    let _ = fs::remove_dir_all(&xdg);
    let _ = fs::remove_dir_all(&off_dir);
}
