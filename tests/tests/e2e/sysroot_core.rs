//! End-to-end: `bt --core --sysroot` names a crashed frame from the crashed
//! machine's files, never from this machine's (issue 22).
//!
//! A CPython 3.14 in the Debian sid root (`scripts/sid-root.sh`) dies in its
//! root's libc (`ctypes.string_at(16)`); the host's libc is another build. With
//! `--sysroot ROOT`, every libc frame must be named from ROOT's libc (checked
//! against `nm -D` of that file) or left unnamed; without it, the host's libc must
//! be refused with a note naming both build ids (read with `readelf -n`), and its
//! frames left unnamed. Skipped, with the reason printed, when the root or cores
//! are not available.

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use argstash_tests::*;
use serde_json::Value;

const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";

/// The sid root, or `None` (with the reason printed) when tests cannot use it.
fn sid_root() -> Option<PathBuf> {
    let root = std::env::var_os("ARGSTASH_SID_ROOT").map_or_else(
        || PathBuf::from("/var/cache/argstash-sid/root"),
        PathBuf::from,
    );
    if !root.join(".argstash-sid-root").is_file() || !root.join("usr/bin/python3.14").is_file() {
        println!(
            "SKIPPED: no Debian sid root with python3.14 at {} (built by scripts/sid-root.sh)",
            root.display()
        );
        return None;
    }
    Some(root)
}

/// Why cores cannot be collected here (`core_pattern` must be a plain file name).
fn core_pattern() -> Result<String, String> {
    let pattern = fs::read_to_string("/proc/sys/kernel/core_pattern")
        .map_err(|e| format!("cannot read /proc/sys/kernel/core_pattern: {e}"))?;
    let pattern = pattern.trim().to_string();
    if pattern.is_empty() || pattern.contains(['|', '/', '%']) {
        return Err(format!(
            "core_pattern {pattern:?} is not a plain file name (set it with `sysctl kernel.core_pattern=core`)"
        ));
    }
    Ok(pattern)
}

/// A directory inside the root, removed on drop.
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

/// The GNU build id `readelf -n` shows for `file`.
fn readelf_build_id(file: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(file)
        .output()
        .expect("run readelf");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .unwrap_or_else(|| panic!("no build id in readelf -n {}", file.display()))
}

/// `(address, size, name)` of the defined dynamic symbols of `file`, from `nm -D -S`.
fn nm_dynamic(file: &Path) -> Vec<(u64, u64, String)> {
    let out = Command::new("nm")
        .args(["-D", "-S", "--defined-only"])
        .arg(file)
        .output()
        .expect("run nm");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                [addr, size, _, name] => Some((
                    u64::from_str_radix(addr, 16).ok()?,
                    u64::from_str_radix(size, 16).ok()?,
                    name.split('@').next()?.to_string(),
                )),
                _ => None,
            }
        })
        .collect()
}

/// The start of the mapping of `path` at file offset 0, from the core's `NT_FILE`
/// note, read here with a parser of its own (x86-64 cores: ELF64, little-endian).
fn core_base(core: &Path, path: &str) -> u64 {
    let b = fs::read(core).expect("read the core");
    let u16_at = |at: usize| u16::from_le_bytes(b[at..at + 2].try_into().unwrap()) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let (phoff, phentsize, phnum) = (u64_at(32) as usize, u16_at(54), u16_at(56));
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32_at(ph) != 4 {
            continue; // not PT_NOTE
        }
        let (mut at, end) = (
            u64_at(ph + 8) as usize,
            (u64_at(ph + 8) + u64_at(ph + 32)) as usize,
        );
        while at + 12 <= end {
            let (namesz, descsz, ty) = (u32_at(at), u32_at(at + 4), u32_at(at + 8));
            let desc = at + 12 + namesz.div_ceil(4) * 4;
            if ty == 0x4649_4c45 {
                let count = u64_at(desc) as usize;
                let mut names = b[desc + 16 + 24 * count..desc + descsz].split(|&c| c == 0);
                for k in 0..count {
                    let e = desc + 16 + 24 * k;
                    let name = names.next().expect("NT_FILE name");
                    if name == path.as_bytes() && u64_at(e + 16) == 0 {
                        return u64_at(e);
                    }
                }
            }
            at = desc + descsz.div_ceil(4) * 4;
        }
    }
    panic!(
        "no mapping of {path} at offset 0 in the NT_FILE note of {}",
        core.display()
    );
}

/// Crashes python3.14 in the root inside libc; returns the core.
fn crash_in_root(root: &Path, dir: &RootDir, pattern: &str) -> PathBuf {
    let script = format!(
        "ulimit -c unlimited && cd {} && exec python3.14 -c 'import ctypes; ctypes.string_at(16)'",
        dir.inside
    );
    let status = Command::new("chroot")
        .arg(root)
        .args(["/bin/sh", "-c", &script])
        .status()
        .expect("run chroot");
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "{status:?}");
    assert!(status.core_dumped(), "no core dumped: {status:?}");
    let core = fs::read_dir(&dir.host)
        .expect("read the crash directory")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == pattern || n.starts_with(&format!("{pattern}.")))
        });
    core.unwrap_or_else(|| panic!("no core in {}", dir.host.display()))
}

fn frames(bt: &Value) -> &Vec<Value> {
    thread_frames(&bt_threads(bt)[0])
}

#[test]
fn a_core_from_another_root_is_named_from_that_roots_files_only() {
    let Some(root) = sid_root() else { return };
    let pattern = match core_pattern() {
        Ok(p) => p,
        Err(why) => {
            println!("SKIPPED a_core_from_another_root_is_named_from_that_roots_files_only: {why}");
            return;
        }
    };
    let root_libc = root.join(LIBC.trim_start_matches('/'));
    let (root_id, host_id) = (
        readelf_build_id(&root_libc),
        readelf_build_id(Path::new(LIBC)),
    );
    let dir = RootDir::new(&root, "sysroot-core");
    let core = crash_in_root(&root, &dir, &pattern);
    let core_s = core.to_str().expect("UTF-8 core path");
    let exe = root.join("usr/bin/python3.14");
    let exe_s = exe.to_str().unwrap();
    let root_s = root.to_str().unwrap();
    let base = core_base(&core, LIBC);
    let symbols = nm_dynamic(&root_libc);

    // With --sysroot: every libc frame named from the root's libc, or not at all.
    let out = run(&[
        "bt",
        "--core",
        core_s,
        "--exe",
        exe_s,
        "--sysroot",
        root_s,
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains(&format!("cannot read {}", "/usr/bin/python3.14")),
        "the host path was tried before the sysroot: {stderr}"
    );
    let bt: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let fr = frames(&bt);
    assert_eq!(fr[0]["module"], LIBC, "the crash is in libc: {:#}", fr[0]);
    let mut libc_frames = 0;
    for f in fr.iter().filter(|f| f["module"] == LIBC) {
        libc_frames += 1;
        let at = json_hex(&f["pc"]) - base;
        if let Some(name) = f["function"].as_str() {
            let covers = symbols
                .iter()
                .any(|(a, s, n)| n == name && *a <= at && at < a + (*s).max(1));
            assert!(
                covers,
                "frame {:#} is named {name}, which no symbol of {} covering 0x{at:x} is",
                f,
                root_libc.display()
            );
        }
        assert_ne!(f["file"], "dcigettext.c", "named from another file: {f:#}");
        // The root's libc has no DWARF here: no source line can come from it.
        assert_eq!(f["line"], Value::Null, "a line from another file: {f:#}");
    }
    assert!(libc_frames >= 2, "{bt:#}");
    // `__libc_start_main` (exported) is named from the root's libc.
    assert!(
        fr.iter().any(|f| f["function"] == "__libc_start_main"),
        "{bt:#}"
    );

    // Without --sysroot the host's libc is another build: refused with both ids.
    if root_id != host_id {
        let out = run(&["bt", "--core", core_s, "--exe", exe_s, "--json"]);
        assert!(out.status.success(), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let note = stderr
            .lines()
            .find(|l| l.contains(&format!("no symbols for {LIBC}")))
            .unwrap_or_else(|| panic!("no note about {LIBC}: {stderr}"));
        assert!(note.contains(&root_id) && note.contains(&host_id), "{note}");
        assert!(note.contains("--sysroot"), "the note gives no fix: {note}");
        let bt: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let f0 = &frames(&bt)[0];
        assert_eq!(json_hex(&f0["pc"]), json_hex(&fr[0]["pc"]), "crash pc");
        assert_eq!(f0["function"], Value::Null, "{f0:#}");
        assert_eq!(f0["file"], Value::Null, "{f0:#}");
    } else {
        println!("note: the host's libc is the root's build ({host_id}): mismatch part not run");
    }

    // A sysroot whose libc is the host's (another build): refused, not used.
    if root_id != host_id {
        let fake = RootDir::new(&root, "sysroot-fake");
        let lib_dir = fake.host.join("usr/lib/x86_64-linux-gnu");
        fs::create_dir_all(&lib_dir).unwrap();
        fs::copy(LIBC, lib_dir.join("libc.so.6")).unwrap();
        let fake_s = fake.host.to_str().unwrap();
        let out = run(&[
            "bt",
            "--core",
            core_s,
            "--exe",
            exe_s,
            "--sysroot",
            fake_s,
            "--json",
        ]);
        assert!(out.status.success(), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&host_id) && stderr.contains(&root_id),
            "no build-id note for the sysroot's wrong libc: {stderr}"
        );
        let bt: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(frames(&bt)[0]["function"], Value::Null, "{bt:#}");
    }
}
