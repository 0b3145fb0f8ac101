//! The files under `/tmp` that other tools read: their paths, and replacing one
//! atomically without following a link planted there.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Path of the perf map file of `pid`.
pub fn perf_map_path(pid: i32) -> PathBuf {
    PathBuf::from(format!("/tmp/perf-{pid}.map"))
}

/// Path of the gdb symbol file of `pid` (load it with `add-symbol-file PATH`).
pub fn symbol_file_path(pid: i32) -> PathBuf {
    PathBuf::from(format!("/tmp/argstash-{pid}.elf"))
}

/// Replaces `path` with `bytes` through a fresh temporary file `tmp` (never following a
/// symbolic link planted in /tmp), so readers see the old or the new file, never a mix.
pub(crate) fn replace_file(path: &Path, tmp: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let _ = std::fs::remove_file(tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(tmp)
        .and_then(|mut f| f.write_all(bytes));
    match written.and_then(|()| std::fs::rename(tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(tmp);
            Err(e)
        }
    }
}
