//! Parsing of `/proc/PID/maps`: the target's address space, one [`MapEntry`] per line.

use std::ops::Range;

/// Access rights and sharing of one mapping, as the four `rwxp` letters say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Perms {
    /// Readable (`r`).
    pub read: bool,
    /// Writable (`w`).
    pub write: bool,
    /// Executable (`x`).
    pub exec: bool,
    /// Private copy-on-write (`p`) rather than shared (`s`).
    pub private: bool,
}

impl Perms {
    /// Parses the `rwxp` column; unknown letters read as "not set".
    pub fn parse(s: &str) -> Perms {
        let b = s.as_bytes();
        let at = |i: usize, c: u8| b.get(i) == Some(&c);
        Perms {
            read: at(0, b'r'),
            write: at(1, b'w'),
            exec: at(2, b'x'),
            private: at(3, b'p'),
        }
    }
}

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    /// First address of the mapping.
    pub start: u64,
    /// One past the last address of the mapping.
    pub end: u64,
    /// Access rights.
    pub perms: Perms,
    /// Offset into the mapped file (0 for anonymous mappings).
    pub offset: u64,
    /// Inode of the mapped file (0 for anonymous mappings).
    pub inode: u64,
    /// The path column: a file path, a pseudo name such as `[stack]`, or empty.
    pub path: String,
}

impl MapEntry {
    /// The address range `start..end`.
    pub fn range(&self) -> Range<u64> {
        self.start..self.end
    }

    /// True when the mapping is backed by a file (an absolute path with an inode).
    pub fn is_file(&self) -> bool {
        self.inode != 0 && self.path.starts_with('/')
    }

    /// True when `addr` lies inside the mapping.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr < self.end
    }

    /// True when the mapping is of the C library's file (`libc.so.6`, `libc-2.31.so`).
    pub fn is_libc(&self) -> bool {
        self.is_file() && is_libc_file(self.file_path().rsplit('/').next().unwrap_or(""))
    }

    /// The mapped file's path with a trailing ` (deleted)` removed.
    pub fn file_path(&self) -> &str {
        self.path.strip_suffix(" (deleted)").unwrap_or(&self.path)
    }
}

/// True for the C library's file name (`libc.so.6`, `libc-2.31.so`; not `libcrypt.so`).
pub fn is_libc_file(name: &str) -> bool {
    name.starts_with("libc.so") || name.starts_with("libc-")
}

/// The `(type, value)` pairs of an auxiliary vector (`/proc/PID/auxv`, `NT_AUXV`).
pub fn parse_auxv(bytes: &[u8]) -> Vec<(u64, u64)> {
    let word = |c: &[u8], at: usize| u64::from_le_bytes(c[at..at + 8].try_into().unwrap_or([0; 8]));
    bytes
        .chunks_exact(16)
        .map(|c| (word(c, 0), word(c, 8)))
        .collect()
}

/// Parses the text of a maps file; malformed lines are skipped.
pub fn parse_maps(text: &str) -> Vec<MapEntry> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<MapEntry> {
    let mut rest = line;
    let mut field = || {
        let r = rest.trim_start();
        let end = r.find(' ').unwrap_or(r.len());
        let (f, tail) = r.split_at(end);
        rest = tail;
        f
    };
    let range = field();
    let perms = field();
    let offset = field();
    let _dev = field();
    let inode = field();
    let path = rest.trim_start().to_string();
    let (start, end) = range.split_once('-')?;
    Some(MapEntry {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms: Perms::parse(perms),
        offset: u64::from_str_radix(offset, 16).ok()?,
        inode: inode.parse().ok()?,
        path,
    })
}

/// Reads and parses `/proc/PID/maps`.
pub fn read_maps(pid: i32) -> std::io::Result<Vec<MapEntry>> {
    Ok(parse_maps(&std::fs::read_to_string(format!(
        "/proc/{pid}/maps"
    ))?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_file_anon_and_pseudo_lines() {
        let text = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 fe:01 1234                       /opt/app/prog
55d0c0a01000-55d0c0a02000 r-xp 00001000 fe:01 1234                       /opt/app/prog (deleted)
7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]
7f0000000000-7f0000001000 r-xp 00000000 00:00 0 
garbage line
";
        let m = parse_maps(text);
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].start, 0x55d0c0a00000);
        assert_eq!(m[0].path, "/opt/app/prog");
        assert!(m[0].is_file() && !m[0].perms.exec);
        assert!(m[1].perms.exec && m[1].perms.private);
        assert_eq!(m[1].offset, 0x1000);
        assert_eq!(m[1].file_path(), "/opt/app/prog");
        assert_eq!(m[2].path, "[stack]");
        assert!(!m[2].is_file());
        assert_eq!(m[3].path, "");
        assert!(m[3].contains(0x7f0000000fff) && !m[3].contains(0x7f0000001000));
    }

    #[test]
    fn reads_own_maps() {
        let m = read_maps(std::process::id() as i32).unwrap();
        let here = reads_own_maps as fn() as usize as u64;
        assert!(m.iter().any(|e| e.contains(here) && e.perms.exec));
    }
}
