//! The hint file: which pids had arenas when the daemon last looked.
//!
//! Only a hint: after a restart each entry is checked against the live process
//! (same start time) and its arenas are re-read from target memory, where the
//! arena headers are the source of truth. A wrong or stale entry costs a lookup.

use std::fmt::Write;

use injector::process::shared_file;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

const FILE: &str = "arenas";

fn file(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// Largest hint file read.
const MAX_HINTS: u64 = 16 << 20;

/// Start time of `pid` in clock ticks after boot (field 22 of `/proc/PID/stat`).
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields follow the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The `(pid, start time)` entries of the hint file; unreadable lines are skipped.
pub fn read(dir: &Path) -> Vec<(i32, u64)> {
    // The runtime directory may be writable by others: no link followed, no FIFO
    // waited on, only a regular file of ours read.
    let Ok(Some(bytes)) = shared_file::read(&file(dir), &[shared_file::own_uid()], MAX_HINTS)
    else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&bytes);
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let pid: i32 = it.next()?.parse().ok()?;
            let start: u64 = it.next()?.parse().ok()?;
            (pid > 0).then_some((pid, start))
        })
        .collect()
}

/// Replaces the hint file with `entries` (written to a temporary file, then renamed).
pub fn write(dir: &Path, entries: &[(i32, u64)]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut text = String::new();
    for (pid, start) in entries {
        let _ = writeln!(text, "{pid} {start}");
    }
    // Created exclusively next to it and renamed over it; a file there that is
    // not ours (a link, a FIFO, another user's) is left alone and reported.
    shared_file::replace(
        &file(dir),
        text.as_bytes(),
        0o600,
        &[shared_file::own_uid()],
    )
    .with_context(|| format!("writing the hint file in {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let dir = std::env::temp_dir().join(format!("argstashd-hints-{}", std::process::id()));
        write(&dir, &[(12, 34), (56, 78)]).unwrap();
        assert_eq!(read(&dir), vec![(12, 34), (56, 78)]);
        std::fs::write(file(&dir), "x y\n-1 2\n9 10 extra\n").unwrap();
        assert_eq!(read(&dir), vec![(9, 10)]);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(start_time(std::process::id() as i32).is_some());
    }

    #[test]
    fn a_fifo_or_link_at_the_hint_file_is_neither_waited_on_nor_followed() {
        let dir = std::env::temp_dir().join(format!("argstashd-hints-fifo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let c = std::ffi::CString::new(file(&dir).to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
        assert_eq!(read(&dir), vec![]);
        let e = write(&dir, &[(1, 2)]).unwrap_err();
        assert!(format!("{e:#}").contains("FIFO"), "{e:#}");
        std::fs::remove_file(file(&dir)).unwrap();
        let target = dir.join("elsewhere");
        std::fs::write(&target, "kept\n").unwrap();
        std::os::unix::fs::symlink(&target, file(&dir)).unwrap();
        assert!(write(&dir, &[(1, 2)]).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
