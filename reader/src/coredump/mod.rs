//! Cores stored by systemd-coredump: finding one by pid, command name or age in
//! its directory, and opening it (decompressed when stored compressed) as a
//! [`CoreFile`].
//!
//! The files and their extended attributes are read directly, so no journal is
//! needed. The directory is root's, but each file in it is checked on its
//! descriptor before use, as every file in a shared directory is: opened without
//! following a link and without blocking, a regular file with one link, owned by
//! root (systemd-coredump writes as root and grants the crashed user read access
//! by an ACL) or by the uid its name records. A compressed core is streamed into an
//! unnamed temporary file (`O_TMPFILE`, gone when closed) bounded by
//! [`SYSTEMD_MAX_CORE`] and the free space there.

mod decompress;
mod meta;
mod name;

pub use decompress::{decompress, DecompressProblem, LimitReason, SYSTEMD_MAX_CORE};
pub use meta::{parse_attrs, read_attrs, CoredumpAttrs};
pub use name::{parse_name, unescape, Compression, StoredName};

use crate::core::{CoreError, CoreFile, CoreOptions};
use crate::shared_file::SharedFileError;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Where systemd-coredump stores cores (`Storage=external`, the default).
pub const SYSTEMD_COREDUMP_DIR: &str = "/var/lib/systemd/coredump";

/// Which stored core to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// The newest.
    Latest,
    /// The newest core of this pid.
    Pid(i32),
    /// The newest core of a program: its command name, its executable's file name,
    /// or (when it contains `/`) its executable's path.
    Name(String),
}

impl Selector {
    /// `latest`, a pid (all digits), or a name.
    pub fn parse(s: &str) -> Selector {
        if s == "latest" {
            Selector::Latest
        } else if let Some(pid) = (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<i32>().ok())
            .flatten()
        {
            Selector::Pid(pid)
        } else {
            Selector::Name(s.to_string())
        }
    }

    fn matches(&self, c: &StoredCore) -> bool {
        match self {
            Selector::Latest => true,
            Selector::Pid(pid) => c.pid() == *pid,
            Selector::Name(name) if name.contains('/') => c.attrs.exe.as_deref() == Some(name),
            Selector::Name(name) => {
                let comm = c.comm();
                // The kernel keeps 15 bytes of a command name.
                comm == name
                    || (name.len() > 15 && name.is_char_boundary(15) && comm == &name[..15])
                    || c.exe_name() == Some(name.as_str())
            }
        }
    }
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Selector::Latest => f.write_str("latest"),
            Selector::Pid(p) => write!(f, "pid {p}"),
            Selector::Name(n) => write!(f, "{n:?}"),
        }
    }
}

/// A core in the coredump directory: its path, its name's fields and its attributes.
#[derive(Debug, Clone)]
pub struct StoredCore {
    /// The file.
    pub path: PathBuf,
    /// What its name records.
    pub name: StoredName,
    /// What its extended attributes record.
    pub attrs: CoredumpAttrs,
    /// Its size on disk (compressed, if it is).
    pub size: u64,
}

impl StoredCore {
    /// The command name: the attribute's, else the file name's.
    pub fn comm(&self) -> &str {
        self.attrs.comm.as_deref().unwrap_or(&self.name.comm)
    }

    /// The crashed pid, as the file name records it.
    pub fn pid(&self) -> i32 {
        self.name.pid
    }

    /// When it crashed, in microseconds since the epoch.
    pub fn usec(&self) -> u64 {
        self.name.usec
    }

    /// The executable's file name, when systemd recorded its path.
    pub fn exe_name(&self) -> Option<&str> {
        self.attrs.exe.as_deref()?.rsplit('/').next()
    }
}

/// A stored core chosen by a [`Selector`], with the others that matched too.
#[derive(Debug, Clone)]
pub struct Selection {
    /// The newest match.
    pub chosen: StoredCore,
    /// The other matches, newest first.
    pub others: Vec<StoredCore>,
}

/// Why a stored core could not be found or opened.
#[derive(Debug, thiserror::Error)]
pub enum CoredumpError {
    /// The directory is not there.
    #[error("{dir} does not exist: no core was stored by systemd-coredump here (install systemd-coredump: its package points kernel.core_pattern at it, and it stores each crash's core in that directory)")]
    NoDirectory {
        /// The directory.
        dir: PathBuf,
    },
    /// The directory could not be listed.
    #[error("cannot list {}: {source}", .dir.display())]
    List {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The directory holds no core.
    #[error("{} holds no core: none was stored by systemd-coredump{}", .dir.display(), pattern_note(.pattern.as_deref()))]
    Empty {
        /// The directory.
        dir: PathBuf,
        /// `/proc/sys/kernel/core_pattern` when it does not pipe to systemd-coredump.
        pattern: Option<String>,
    },
    /// No stored core matches.
    #[error("no core stored by systemd-coredump matches {selector}; the cores in {} are (newest first):\n{}", .dir.display(), listing(.available))]
    NoMatch {
        /// What was asked for.
        selector: Selector,
        /// The directory.
        dir: PathBuf,
        /// What is there, newest first.
        available: Vec<StoredCore>,
    },
    /// The core file failed the checks on its descriptor, or could not be opened.
    #[error("{0}")]
    Refused(#[from] SharedFileError),
    /// The temporary file to decompress into could not be made.
    #[error("cannot create a temporary file in {} to decompress the core into: {source}", .dir.display())]
    TempFile {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The compressed core could not be decompressed.
    #[error("cannot decompress {}: {problem}", .path.display())]
    Decompress {
        /// The stored core.
        path: PathBuf,
        /// Why.
        problem: DecompressProblem,
    },
    /// systemd-coredump stored the core cut short.
    #[error("{} was cut short by systemd-coredump: its {what} need {needed} bytes but it stored {len}; systemd-coredump stops at ProcessSizeMax= and ExternalSizeMax= in /etc/systemd/coredump.conf (2G by default): raise both and reproduce the crash", .path.display())]
    Truncated {
        /// The stored core.
        path: PathBuf,
        /// Bytes stored (decompressed).
        len: u64,
        /// Bytes the core's headers or segments need.
        needed: u64,
        /// Which part is cut off.
        what: &'static str,
    },
    /// The (decompressed) core could not be read as a core.
    #[error(transparent)]
    Core(#[from] CoreError),
}

fn pattern_note(pattern: Option<&str>) -> String {
    match pattern {
        Some(p) => format!(
            " (kernel.core_pattern is {p:?}, which does not pipe cores to systemd-coredump: install systemd-coredump, or set kernel.core_pattern as its /usr/lib/sysctl.d/50-coredump.conf says)"
        ),
        None => String::new(),
    }
}

/// Unix microseconds as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc_time(usec: u64) -> String {
    let secs = usec / 1_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// One line per stored core, as the error listing shows them.
pub fn listing(cores: &[StoredCore]) -> String {
    cores
        .iter()
        .map(|c| {
            format!(
                "  {}  pid {:<7} uid {:<5} {:<15} {}{}",
                utc_time(c.usec()),
                c.pid(),
                c.name.uid,
                c.comm(),
                c.attrs.exe.as_deref().unwrap_or("-"),
                c.attrs
                    .signal
                    .map(|s| format!("  (signal {s})"))
                    .unwrap_or_default(),
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The owners a stored core may have: root, or the crashed user its name records.
fn owners(name: &StoredName) -> [u32; 2] {
    [0, name.uid]
}

/// Lists the cores in `dir`, newest first. Files whose names systemd-coredump
/// does not give (its `.#` files being written, others) are skipped; so is a
/// file that fails the checks (it is never opened for reading here).
pub fn list(dir: &Path) -> Result<Vec<StoredCore>, CoredumpError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CoredumpError::NoDirectory {
                dir: dir.to_path_buf(),
            })
        }
        Err(source) => {
            return Err(CoredumpError::List {
                dir: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut cores = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| CoredumpError::List {
            dir: dir.to_path_buf(),
            source,
        })?;
        let Some(name) = entry.file_name().to_str().and_then(parse_name) else {
            continue;
        };
        let path = entry.path();
        let Ok(Some(file)) = crate::shared_file::open_read(&path, &owners(&name)) else {
            continue;
        };
        let attrs = read_attrs(&file);
        let size = file.metadata().map(|m| m.size()).unwrap_or(0);
        cores.push(StoredCore {
            path,
            name,
            attrs,
            size,
        });
    }
    cores.sort_by(|a, b| b.usec().cmp(&a.usec()).then_with(|| b.path.cmp(&a.path)));
    Ok(cores)
}

/// The newest core in `dir` that `selector` matches, and the other matches.
pub fn select(dir: &Path, selector: &Selector) -> Result<Selection, CoredumpError> {
    let all = list(dir)?;
    if all.is_empty() {
        let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern")
            .ok()
            .map(|p| p.trim().to_string())
            .filter(|p| !p.contains("systemd-coredump"));
        return Err(CoredumpError::Empty {
            dir: dir.to_path_buf(),
            pattern,
        });
    }
    let mut matching: Vec<StoredCore> = all
        .iter()
        .filter(|c| selector.matches(c))
        .cloned()
        .collect();
    if matching.is_empty() {
        return Err(CoredumpError::NoMatch {
            selector: selector.clone(),
            dir: dir.to_path_buf(),
            available: all,
        });
    }
    let chosen = matching.remove(0);
    Ok(Selection {
        chosen,
        others: matching,
    })
}

/// Where a compressed core is decompressed: `$TMPDIR`, else `/var/tmp` (on disk
/// rather than in memory on most systems).
pub fn temp_dir() -> PathBuf {
    std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from("/var/tmp"))
}

/// Free bytes for an unprivileged writer on the file system of `file`.
fn free_space(file: &File) -> Option<u64> {
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: fstatvfs writes a statvfs into the buffer given; the fd is open.
    let rc = unsafe { libc::fstatvfs(file.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: fstatvfs returned 0, so it filled the struct.
    let st = unsafe { st.assume_init() };
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Opens a stored core as a [`CoreFile`]: checked on its descriptor, decompressed
/// into an unnamed file under [`temp_dir`] when compressed. `options` are those
/// of any core.
pub fn open(stored: &StoredCore, options: CoreOptions) -> Result<CoreFile, CoredumpError> {
    let path = &stored.path;
    let file = crate::shared_file::open_read(path, &owners(&stored.name))?.ok_or_else(|| {
        SharedFileError::Io {
            path: path.clone(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        }
    })?;
    let core = match stored.name.compression {
        Compression::None => CoreFile::from_file(&file, path, options),
        format => {
            let dir = temp_dir();
            let out = OpenOptions::new()
                .read(true)
                .write(true)
                .mode(0o600)
                .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
                .open(&dir)
                .map_err(|source| CoredumpError::TempFile {
                    dir: dir.clone(),
                    source,
                })?;
            let (limit, why) = match free_space(&out) {
                Some(free) if free < SYSTEMD_MAX_CORE => (free, LimitReason::FreeSpace),
                _ => (SYSTEMD_MAX_CORE, LimitReason::SystemdMaximum),
            };
            decompress(&file, format, &out, limit, why).map_err(|problem| {
                CoredumpError::Decompress {
                    path: path.clone(),
                    problem,
                }
            })?;
            CoreFile::from_file(&out, path, options)
        }
    };
    core.map_err(|e| match e {
        CoreError::Truncated {
            len, needed, what, ..
        } => CoredumpError::Truncated {
            path: path.clone(),
            len,
            needed,
            what,
        },
        e => CoredumpError::Core(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors() {
        assert_eq!(Selector::parse("latest"), Selector::Latest);
        assert_eq!(Selector::parse("4242"), Selector::Pid(4242));
        assert_eq!(Selector::parse("crash"), Selector::Name("crash".into()));
        assert_eq!(
            Selector::parse("99999999999"),
            Selector::Name("99999999999".into())
        );
    }

    #[test]
    fn utc_times() {
        assert_eq!(utc_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_time(1_795_918_376_000_000), "2026-11-29 02:12:56 UTC");
        assert_eq!(utc_time(951_782_400_000_000), "2000-02-29 00:00:00 UTC");
    }
}
