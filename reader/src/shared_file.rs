//! Files in directories that others can write (`/tmp`, a target's `/tmp`, the cache).
//!
//! The rule every such file follows (docs/DESIGN.md, "Files in shared directories"):
//! it is opened without following a link and without blocking
//! (`O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`), and checked on the opened descriptor
//! (a regular file, owned by an expected user, no second link) before it is read,
//! written, mapped or deleted; new files are created exclusively (`O_EXCL`);
//! a file is deleted only once its content proves argstash wrote it, and only if
//! the name still leads to the very file checked. A file that fails a check is
//! left alone and the caller gets a [`SharedFileError::Refused`] naming why.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What a file that is not a regular file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A named pipe: opening it could wait for a writer forever.
    Fifo,
    /// A symbolic link.
    Symlink,
    /// A directory.
    Directory,
    /// A Unix socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// Anything else.
    Other,
}

impl FileKind {
    /// The kind of a file of mode `mode` (`st_mode`); `None` for a regular file.
    pub fn of_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => return None,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFDIR => FileKind::Directory,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFBLK => FileKind::BlockDevice,
            _ => FileKind::Other,
        })
    }
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FileKind::Fifo => "named pipe (FIFO)",
            FileKind::Symlink => "symbolic link",
            FileKind::Directory => "directory",
            FileKind::Socket => "socket",
            FileKind::CharDevice => "character device",
            FileKind::BlockDevice => "block device",
            FileKind::Other => "special file",
        })
    }
}

/// Why a file in a shared directory was left alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// It is not a regular file.
    #[error("it is a {0}, not a regular file")]
    NotRegular(FileKind),
    /// It belongs to a user argstash does not expect.
    #[error("it belongs to uid {found}, not to uid {expected}")]
    Owner {
        /// The file's owner.
        found: u32,
        /// The first owner expected.
        expected: u32,
    },
    /// It has other names (a hard link to a file elsewhere).
    #[error("it has {0} hard links")]
    Links(u64),
    /// Its content does not prove argstash wrote it.
    #[error("its content was not written by argstash")]
    NotOurs,
    /// It is larger than argstash reads.
    #[error("it is larger than {0} bytes")]
    TooLarge(u64),
    /// The name led to another file by the time it was to be removed.
    #[error("it was replaced while being checked")]
    Replaced,
}

/// Why a file in a shared directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SharedFileError {
    /// A file is there that fails the checks: it was left alone.
    #[error("{} left alone: {reason}", .path.display())]
    Refused {
        /// The file.
        path: PathBuf,
        /// Which check it failed.
        reason: Refusal,
    },
    /// The system refused an operation.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
}

impl SharedFileError {
    /// The check a file failed, when one was there and left alone.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            SharedFileError::Refused { reason, .. } => Some(reason),
            SharedFileError::Io { .. } => None,
        }
    }
}

/// The effective user id of this process: the owner of the files it creates.
pub fn own_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn refused(path: &Path, reason: Refusal) -> SharedFileError {
    SharedFileError::Refused {
        path: path.to_path_buf(),
        reason,
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SharedFileError + '_ {
    move |source| SharedFileError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Checks the metadata of a file (from `fstat` on its descriptor, or `lstat`):
/// a regular file, owned by one of `owners`, with no other name (one link, or
/// none when it was renamed over or removed since it was opened: still the file
/// opened, and no hard link to a file elsewhere).
pub fn check(path: &Path, meta: &std::fs::Metadata, owners: &[u32]) -> Result<(), SharedFileError> {
    if let Some(kind) = FileKind::of_mode(meta.mode()) {
        return Err(refused(path, Refusal::NotRegular(kind)));
    }
    if !owners.contains(&meta.uid()) {
        return Err(refused(
            path,
            Refusal::Owner {
                found: meta.uid(),
                expected: owners.first().copied().unwrap_or(u32::MAX),
            },
        ));
    }
    if meta.nlink() > 1 {
        return Err(refused(path, Refusal::Links(meta.nlink())));
    }
    Ok(())
}

/// What a failed open means: a symbolic link (`ELOOP` under `O_NOFOLLOW`) or a
/// FIFO without a reader (`ENXIO` for a non-blocking write) is refused by kind.
fn open_error(path: &Path, e: std::io::Error) -> SharedFileError {
    match e.raw_os_error() {
        Some(libc::ELOOP) => refused(path, Refusal::NotRegular(FileKind::Symlink)),
        Some(libc::ENXIO) | Some(libc::ENODEV) | Some(libc::EOPNOTSUPP) => {
            match std::fs::symlink_metadata(path)
                .ok()
                .and_then(|m| FileKind::of_mode(m.mode()))
            {
                Some(kind) => refused(path, Refusal::NotRegular(kind)),
                None => io(path)(e),
            }
        }
        _ => io(path)(e),
    }
}

const SAFE_FLAGS: i32 = libc::O_NOFOLLOW | libc::O_NONBLOCK;

/// Opens `path` for reading and checks it; `Ok(None)` when there is no such file.
pub fn open_read(path: &Path, owners: &[u32]) -> Result<Option<File>, SharedFileError> {
    open_existing(path, owners, OpenOptions::new().read(true))
}

/// Opens an existing `path` with `options` plus [`SAFE_FLAGS`] and checks it on the
/// descriptor; `Ok(None)` when there is no such file.
fn open_existing(
    path: &Path,
    owners: &[u32],
    options: &mut OpenOptions,
) -> Result<Option<File>, SharedFileError> {
    let file = match options.custom_flags(SAFE_FLAGS).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(open_error(path, e)),
    };
    let meta = file.metadata().map_err(io(path))?;
    check(path, &meta, owners)?;
    Ok(Some(file))
}

/// Reads `path` whole (at most `max` bytes) after the checks of [`open_read`];
/// `Ok(None)` when there is no such file.
pub fn read(path: &Path, owners: &[u32], max: u64) -> Result<Option<Vec<u8>>, SharedFileError> {
    let Some(file) = open_read(path, owners)? else {
        return Ok(None);
    };
    read_checked(path, file, max).map(Some)
}

fn read_checked(path: &Path, file: File, max: u64) -> Result<Vec<u8>, SharedFileError> {
    let len = file.metadata().map_err(io(path))?.len();
    if len > max {
        return Err(refused(path, Refusal::TooLarge(max)));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max).read_to_end(&mut bytes).map_err(io(path))?;
    Ok(bytes)
}

/// Opens an existing `path` to append to it, after the checks of [`open_read`];
/// `Ok(None)` when there is no such file.
pub fn open_append(path: &Path, owners: &[u32]) -> Result<Option<File>, SharedFileError> {
    open_existing(path, owners, OpenOptions::new().append(true))
}

/// Creates `path` with `mode`, failing if any file (or link) is there already.
pub fn create_new(path: &Path, mode: u32) -> Result<File, SharedFileError> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(SAFE_FLAGS)
        .open(path)
        .map_err(|e| open_error(path, e))?;
    // A file just created exclusively is ours; checked all the same (a file
    // system may map owners).
    let meta = file.metadata().map_err(io(path))?;
    check(path, &meta, &[own_uid()])?;
    Ok(file)
}

/// Appends `bytes` to `path` if it exists and passes the checks, or creates it
/// exclusively with `mode`.
pub fn append_or_create(
    path: &Path,
    owners: &[u32],
    mode: u32,
    bytes: &[u8],
) -> Result<(), SharedFileError> {
    let mut file = match open_append(path, owners)? {
        Some(f) => f,
        None => create_new(path, mode)?,
    };
    file.write_all(bytes).map_err(io(path))
}

/// A temporary name next to `path` that no other writer uses.
fn temporary_name(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map_or_else(|| "argstash".into(), |n| n.to_string_lossy().into_owned());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    path.with_file_name(format!(
        ".{name}.argstash-tmp.{}.{}.{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Replaces `path` with `bytes` atomically (readers see the old or the new file):
/// written into a file created exclusively next to it, then renamed over it.
/// A file already at `path` that fails the checks for `owners` is left alone.
pub fn replace(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    owners: &[u32],
) -> Result<(), SharedFileError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => check(path, &meta, owners)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(path)(e)),
    }
    let tmp = temporary_name(path);
    let written = create_new(&tmp, mode).and_then(|mut f| f.write_all(bytes).map_err(io(&tmp)));
    let renamed = written.and_then(|()| std::fs::rename(&tmp, path).map_err(io(path)));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed
}

/// Removes `path` if it passes the checks for `owners` and `proof` accepts its
/// content (at most `max` bytes), and the name still leads to the file checked.
/// Returns whether a file was removed (`Ok(false)`: there was none).
pub fn remove_ours(
    path: &Path,
    owners: &[u32],
    max: u64,
    proof: impl FnOnce(&[u8]) -> bool,
) -> Result<bool, SharedFileError> {
    let Some(file) = open_read(path, owners)? else {
        return Ok(false);
    };
    let meta = file.metadata().map_err(io(path))?;
    let bytes = read_checked(path, file, max)?;
    if !proof(&bytes) {
        return Err(refused(path, Refusal::NotOurs));
    }
    // In a sticky directory (/tmp) no one else can rename or remove a file of
    // ours, so the name cannot be moved to another file between this check
    // and the unlink; elsewhere the check narrows the window to nothing useful.
    match std::fs::symlink_metadata(path) {
        Ok(now) if now.dev() == meta.dev() && now.ino() == meta.ino() => {}
        Ok(_) => return Err(refused(path, Refusal::Replaced)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io(path)(e)),
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io(path)(e)),
    }
}

/// Opens `path` read-only without blocking, following links (for files named by a
/// process's maps, a core's notes or a debug link, which may be links), and
/// fails unless it is a regular file: a FIFO planted where a module, a core's
/// mapped file or a debug file was expected is an error, never a wait.
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    match FileKind::of_mode(meta.mode()) {
        None => Ok(file),
        Some(kind) => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("it is a {kind}, not a regular file"),
        )),
    }
}

/// True when `dir` is a directory owned by us that no one else can write
/// (checked without following a link): files in it need no owner proof.
pub fn is_private_dir(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.file_type().is_dir() && m.uid() == own_uid() && m.mode() & 0o022 == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, FileTypeExt};

    struct Dir(PathBuf);
    impl Dir {
        fn new(tag: &str) -> Dir {
            let p = std::env::temp_dir()
                .join(format!("argstash-shared-file-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    }

    #[test]
    fn a_fifo_is_refused_without_blocking_for_every_operation() {
        let d = Dir::new("fifo");
        let p = d.0.join("f");
        mkfifo(&p);
        let me = [own_uid()];
        let fifo = Some(&Refusal::NotRegular(FileKind::Fifo));
        assert_eq!(open_read(&p, &me).unwrap_err().refusal(), fifo);
        assert_eq!(open_append(&p, &me).unwrap_err().refusal(), fifo);
        assert_eq!(
            append_or_create(&p, &me, 0o644, b"x")
                .unwrap_err()
                .refusal(),
            fifo
        );
        assert_eq!(replace(&p, b"x", 0o644, &me).unwrap_err().refusal(), fifo);
        assert_eq!(
            remove_ours(&p, &me, 10, |_| true).unwrap_err().refusal(),
            fifo
        );
        assert!(std::fs::symlink_metadata(&p).unwrap().file_type().is_fifo());
        let e = open_regular(&p).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
    }

    #[test]
    fn a_link_is_never_followed_and_its_target_is_unchanged() {
        let d = Dir::new("link");
        let target = d.0.join("target");
        std::fs::write(&target, b"precious").unwrap();
        let p = d.0.join("l");
        symlink(&target, &p).unwrap();
        let me = [own_uid()];
        let link = Some(&Refusal::NotRegular(FileKind::Symlink));
        assert_eq!(open_read(&p, &me).unwrap_err().refusal(), link);
        assert_eq!(
            append_or_create(&p, &me, 0o644, b"x")
                .unwrap_err()
                .refusal(),
            link
        );
        assert_eq!(replace(&p, b"x", 0o644, &me).unwrap_err().refusal(), link);
        assert_eq!(
            remove_ours(&p, &me, 10, |_| true).unwrap_err().refusal(),
            link
        );
        let hard = d.0.join("h");
        std::fs::hard_link(&target, &hard).unwrap();
        assert_eq!(
            append_or_create(&hard, &me, 0o644, b"x")
                .unwrap_err()
                .refusal(),
            Some(&Refusal::Links(2))
        );
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        // Another owner is refused too.
        assert!(matches!(
            open_read(&target, &[own_uid().wrapping_add(1)])
                .unwrap_err()
                .refusal(),
            Some(Refusal::Owner { .. })
        ));
    }

    #[test]
    fn ordinary_files_are_created_appended_replaced_and_removed() {
        let d = Dir::new("plain");
        let p = d.0.join("f");
        let me = [own_uid()];
        assert!(open_read(&p, &me).unwrap().is_none());
        append_or_create(&p, &me, 0o644, b"a").unwrap();
        append_or_create(&p, &me, 0o644, b"b").unwrap();
        assert_eq!(read(&p, &me, 100).unwrap().unwrap(), b"ab");
        assert!(create_new(&p, 0o644).is_err());
        replace(&p, b"new", 0o644, &me).unwrap();
        assert_eq!(read(&p, &me, 100).unwrap().unwrap(), b"new");
        assert_eq!(
            read(&p, &me, 2).unwrap_err().refusal(),
            Some(&Refusal::TooLarge(2))
        );
        assert_eq!(
            remove_ours(&p, &me, 100, |b| b == b"old")
                .unwrap_err()
                .refusal(),
            Some(&Refusal::NotOurs)
        );
        assert!(remove_ours(&p, &me, 100, |b| b == b"new").unwrap());
        assert!(!remove_ours(&p, &me, 100, |_| true).unwrap());
        assert_eq!(std::fs::read_dir(&d.0).unwrap().count(), 0, "no leftovers");
    }
}
