//! The extended attributes systemd-coredump sets on each core it stores
//! (`user.coredump.pid`, `.uid`, `.gid`, `.signal`, `.timestamp`, `.rlimit`,
//! `.hostname`, `.comm`, `.exe`): read from the open descriptor, each bounded in size.

use std::fs::File;
use std::os::fd::AsRawFd;

/// Longest attribute value read (an executable path is at most `PATH_MAX`).
const MAX_VALUE: usize = 4096;
/// Longest attribute name list read.
const MAX_LIST: usize = 64 * 1024;

/// What systemd-coredump recorded about the crash in the file's attributes; each is
/// `None` when absent or not in its form (systemd omits `exe` when it could not read it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoredumpAttrs {
    /// `user.coredump.pid`.
    pub pid: Option<i32>,
    /// `user.coredump.uid`.
    pub uid: Option<u32>,
    /// `user.coredump.gid`.
    pub gid: Option<u32>,
    /// `user.coredump.signal`: the signal that made the process dump.
    pub signal: Option<i32>,
    /// `user.coredump.timestamp`: microseconds since the epoch.
    pub timestamp_usec: Option<u64>,
    /// `user.coredump.rlimit`: the process's `RLIMIT_CORE` as systemd saw it.
    pub rlimit: Option<u64>,
    /// `user.coredump.hostname`.
    pub hostname: Option<String>,
    /// `user.coredump.comm`: the command name.
    pub comm: Option<String>,
    /// `user.coredump.exe`: the executable's path.
    pub exe: Option<String>,
}

/// Builds [`CoredumpAttrs`] from attribute names and values; names it does not
/// know are ignored.
pub fn parse_attrs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> CoredumpAttrs {
    let mut a = CoredumpAttrs::default();
    for (name, value) in pairs {
        let Some(key) = name.strip_prefix("user.coredump.") else {
            continue;
        };
        let text = text(value);
        match key {
            "pid" => a.pid = text.as_deref().and_then(number).filter(|&p: &i32| p > 0),
            "uid" => a.uid = text.as_deref().and_then(number),
            "gid" => a.gid = text.as_deref().and_then(number),
            "signal" => a.signal = text.as_deref().and_then(number).filter(|&s: &i32| s > 0),
            "timestamp" => a.timestamp_usec = text.as_deref().and_then(number),
            "rlimit" => a.rlimit = text.as_deref().and_then(number),
            "hostname" => a.hostname = text,
            "comm" => a.comm = text.filter(|t| !t.is_empty()),
            "exe" => a.exe = text.filter(|t| t.starts_with('/')),
            _ => {}
        }
    }
    a
}

/// A value as text: up to a NUL if there is one, lossily decoded.
fn text(value: &[u8]) -> Option<String> {
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    let v = &value[..end];
    (!v.is_empty()).then(|| String::from_utf8_lossy(v).into_owned())
}

fn number<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Reads `user.coredump.*` from an open file. A file system without extended
/// attributes, or a file without them, gives all `None`.
pub fn read_attrs(file: &File) -> CoredumpAttrs {
    let fd = file.as_raw_fd();
    let mut list = vec![0u8; MAX_LIST];
    // SAFETY: `list` is a writable buffer of the length passed; fd is open.
    let n = unsafe { libc::flistxattr(fd, list.as_mut_ptr().cast(), list.len()) };
    if n <= 0 {
        return CoredumpAttrs::default();
    }
    list.truncate(n as usize);
    let mut pairs: Vec<(String, Vec<u8>)> = Vec::new();
    for name in list.split(|&b| b == 0) {
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        if !name.starts_with("user.coredump.") {
            continue;
        }
        let Ok(cname) = std::ffi::CString::new(name) else {
            continue;
        };
        let mut value = vec![0u8; MAX_VALUE];
        // SAFETY: `cname` is NUL-terminated, `value` is writable for its length.
        let len =
            unsafe { libc::fgetxattr(fd, cname.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
        if len < 0 {
            continue;
        }
        value.truncate(len as usize);
        pairs.push((name.to_string(), value));
    }
    parse_attrs(pairs.iter().map(|(n, v)| (n.as_str(), v.as_slice())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_as_systemd_sets_them() {
        let a = parse_attrs([
            ("user.coredump.pid", &b"30015"[..]),
            ("user.coredump.uid", b"0"),
            ("user.coredump.gid", b"0"),
            ("user.coredump.comm", b"sleep"),
            ("user.coredump.rlimit", b"9223372036854775808"),
            ("user.coredump.signal", b"11"),
            ("user.coredump.hostname", b"vm"),
            ("user.coredump.timestamp", b"1795918376000000"),
            ("user.coredump.exe", b"/usr/bin/sleep"),
            ("user.other", b"x"),
        ]);
        assert_eq!(a.pid, Some(30015));
        assert_eq!(a.uid, Some(0));
        assert_eq!(a.signal, Some(11));
        assert_eq!(a.timestamp_usec, Some(1_795_918_376_000_000));
        assert_eq!(a.rlimit, Some(9_223_372_036_854_775_808));
        assert_eq!(a.comm.as_deref(), Some("sleep"));
        assert_eq!(a.exe.as_deref(), Some("/usr/bin/sleep"));
        assert_eq!(a.hostname.as_deref(), Some("vm"));
    }

    #[test]
    fn values_not_in_form_are_none() {
        let a = parse_attrs([
            ("user.coredump.pid", &b"-3"[..]),
            ("user.coredump.signal", b"0"),
            ("user.coredump.uid", b"99999999999"),
            ("user.coredump.exe", b"relative"),
            ("user.coredump.comm", b""),
            ("user.coredump.timestamp", b"12x"),
        ]);
        assert_eq!(a, CoredumpAttrs::default());
    }
}
