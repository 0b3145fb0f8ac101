//! The files other tools and the target read: where they live, and the owners each
//! may have. Every one of them is in a directory others can write, so every access
//! goes through [`reader::shared_file`] (no link followed, no blocking, checked on
//! the descriptor).
//!
//! - What perf and gdb read (`/tmp/perf-PID.map`, `/tmp/argstash-PID.elf`) is where
//!   perf looks: in our own `/tmp` for a process in our mount namespace (even under
//!   `chroot`: perf does not enter a root), else in the `/tmp` of the process's mount
//!   namespace, named by its pid there (perf enters the namespace and looks for
//!   `/tmp/perf-NSPID.map` first).
//! - What the target itself opens (the jitdump it maps, the gdb helper it
//!   `dlopen`s) is in the `/tmp` the target sees: ours when it shares our root and
//!   mount namespace, else `/proc/PID/root/tmp` (a `chroot`, a container, a unit with
//!   `PrivateTmp=yes`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use reader::shared_file::own_uid;

/// Path of the perf map file of `pid`, where perf looks for it.
pub fn perf_map_path(pid: i32) -> PathBuf {
    tools_path(pid, |p| format!("perf-{p}.map"))
}

/// Path of the gdb symbol file of `pid` (load it with `add-symbol-file PATH`), beside its perf map.
pub fn symbol_file_path(pid: i32) -> PathBuf {
    tools_path(pid, |p| format!("argstash-{p}.elf"))
}

/// The file `name(pid)` in our `/tmp` when `pid` shares our mount namespace, else
/// `name(pid in its namespace)` in the `/tmp` of its namespace (our `/tmp` again
/// when that one is unsafe: perf falls back to it).
fn tools_path(pid: i32, name: impl Fn(i32) -> String) -> PathBuf {
    if !shares_our_mounts(pid) {
        if let Ok(dir) = target_tmp(pid) {
            return dir.join(name(ns_pid(pid)));
        }
    }
    PathBuf::from("/tmp").join(name(pid))
}

/// The pid of `pid` in its own pid namespace (the last field of `NSpid`).
pub fn ns_pid(pid: i32) -> i32 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .and_then(|l| l.split_whitespace().last())
                .and_then(|p| p.parse().ok())
        })
        .unwrap_or(pid)
}

/// True when `pid` is in our mount namespace.
pub fn shares_our_mounts(pid: i32) -> bool {
    same_file(&format!("/proc/{pid}/ns/mnt"), "/proc/self/ns/mnt")
}

/// True when both paths lead to the same file (or either cannot be read).
fn same_file(a: &str, b: &str) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => true,
    }
}

/// Owners a perf map may have: us, or the target's user (a JIT in the process
/// writes its own lines there).
pub(crate) fn perf_map_owners(pid: i32) -> Vec<u32> {
    let mut owners = vec![own_uid()];
    if let Ok(m) = std::fs::metadata(format!("/proc/{pid}")) {
        if m.uid() != own_uid() {
            owners.push(m.uid());
        }
    }
    owners
}

/// A file the target opens: where we reach it, and the path it opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetFile {
    /// Its path from here (in `/tmp`, or in `/proc/PID/root/tmp`).
    pub host: PathBuf,
    /// Its path in the target's view (`/tmp/NAME`).
    pub seen: String,
}

/// Why the target's `/tmp` cannot hold argstash's files.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetTmpError {
    /// It is missing, or not a directory (a link is not followed).
    #[error("{0} is not a directory")]
    NotDirectory(PathBuf),
    /// Others can write it and it is not sticky: a file there could be swapped.
    #[error("{0} can be written by others and is not sticky")]
    NotSafe(PathBuf),
}

/// True when `pid` shares our root directory and mount namespace.
pub fn shares_our_root(pid: i32) -> bool {
    same_file(&format!("/proc/{pid}/root"), "/proc/self/root") && shares_our_mounts(pid)
}

/// The `/tmp` the target sees, from here, checked (a real directory, not a link;
/// sticky if others can write it).
pub fn target_tmp(pid: i32) -> Result<PathBuf, TargetTmpError> {
    if shares_our_root(pid) {
        return Ok(PathBuf::from("/tmp"));
    }
    let dir = PathBuf::from(format!("/proc/{pid}/root/tmp"));
    let Ok(meta) = std::fs::symlink_metadata(&dir) else {
        return Err(TargetTmpError::NotDirectory(dir));
    };
    if !meta.file_type().is_dir() {
        return Err(TargetTmpError::NotDirectory(dir));
    }
    let others_write = meta.mode() & 0o022 != 0 || (meta.uid() != 0 && meta.uid() != own_uid());
    if others_write && meta.mode() & libc::S_ISVTX == 0 {
        return Err(TargetTmpError::NotSafe(dir));
    }
    Ok(dir)
}

/// The file `name` in the `/tmp` the target sees.
pub fn target_file(pid: i32, name: &str) -> Result<TargetFile, TargetTmpError> {
    Ok(TargetFile {
        host: target_tmp(pid)?.join(name),
        seen: format!("/tmp/{name}"),
    })
}

/// The mapping of `pid` backed by the file at `host` (found by its inode and name:
/// the path column of a process in another root is not ours).
pub fn mapping_of(pid: i32, host: &Path) -> Option<reader::procfs::MapEntry> {
    let ino = std::fs::symlink_metadata(host).ok()?.ino();
    let name = format!("/{}", host.file_name()?.to_str()?);
    reader::procfs::read_maps(pid)
        .ok()?
        .into_iter()
        .find(|m| m.inode == ino && m.path.ends_with(&name))
}
