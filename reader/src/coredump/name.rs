//! The names systemd-coredump gives the cores it stores:
//! `core.COMM.UID.BOOTID.PID.USEC` plus `.zst`, `.lz4` or `.xz` when compressed.
//! COMM is the crashed process's command name, bytes unsafe in a file name written
//! as `\xNN`; it may itself contain dots, so the fixed fields are taken from the right.

/// How a stored core is compressed, from its file name's suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Stored as the kernel wrote it (`Compress=no`).
    None,
    /// Zstandard (`.zst`), systemd's default where it was built with it.
    Zstd,
    /// LZ4 frame format (`.lz4`).
    Lz4,
    /// XZ (`.xz`).
    Xz,
}

impl Compression {
    /// The format's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "uncompressed",
            Compression::Zstd => "zstd",
            Compression::Lz4 => "lz4",
            Compression::Xz => "xz",
        }
    }
}

/// The fields of a stored core's file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredName {
    /// The command name (`/proc/PID/comm`), unescaped; at most 15 bytes as the kernel keeps it.
    pub comm: String,
    /// The crashed process's real uid.
    pub uid: u32,
    /// The boot id (32 lowercase hex digits) of the boot the crash happened in.
    pub boot_id: String,
    /// The crashed process's pid (as seen from the initial pid namespace).
    pub pid: i32,
    /// When it crashed, in microseconds since the Unix epoch.
    pub usec: u64,
    /// How the file is compressed.
    pub compression: Compression,
}

/// Parses a file name of the coredump directory; `None` for anything systemd-coredump
/// does not name so (its `.#core...` files being written, other files).
pub fn parse_name(name: &str) -> Option<StoredName> {
    let rest = name.strip_prefix("core.")?;
    let (rest, compression) = if let Some(r) = rest.strip_suffix(".zst") {
        (r, Compression::Zstd)
    } else if let Some(r) = rest.strip_suffix(".lz4") {
        (r, Compression::Lz4)
    } else if let Some(r) = rest.strip_suffix(".xz") {
        (r, Compression::Xz)
    } else {
        (rest, Compression::None)
    };
    let mut fields = rest.rsplitn(5, '.');
    let usec = decimal(fields.next()?)?;
    let pid = i32::try_from(decimal(fields.next()?)?).ok()?;
    let boot_id = fields.next()?;
    if boot_id.len() != 32 || !boot_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let uid = u32::try_from(decimal(fields.next()?)?).ok()?;
    let comm = unescape(fields.next()?)?;
    if comm.is_empty() || pid <= 0 {
        return None;
    }
    Some(StoredName {
        comm,
        uid,
        boot_id: boot_id.to_ascii_lowercase(),
        pid,
        usec,
        compression,
    })
}

/// A non-empty run of ASCII digits as a number; `None` for anything else or an overflow.
fn decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Undoes systemd's `\xNN` escaping; other bytes stand for themselves. Bytes that
/// do not form UTF-8 are shown as U+FFFD.
pub fn unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            if b.get(i + 1) != Some(&b'x') {
                return None;
            }
            let hex = s.get(i + 2..i + 4)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT: &str = "b98cbf3ea0bd48ee9b9873a22f3a2334";

    #[test]
    fn names_as_systemd_writes_them() {
        let n = parse_name(&format!("core.sleep.0.{BOOT}.30015.1795918376000000.zst")).unwrap();
        assert_eq!(n.comm, "sleep");
        assert_eq!(n.uid, 0);
        assert_eq!(n.boot_id, BOOT);
        assert_eq!(n.pid, 30015);
        assert_eq!(n.usec, 1_795_918_376_000_000);
        assert_eq!(n.compression, Compression::Zstd);
        let n = parse_name(&format!("core.a.b\\x20c.1000.{BOOT}.7.5")).unwrap();
        assert_eq!(n.comm, "a.b c");
        assert_eq!(n.uid, 1000);
        assert_eq!(n.compression, Compression::None);
        assert_eq!(
            parse_name(&format!("core.x.1.{BOOT}.2.3.lz4"))
                .unwrap()
                .compression,
            Compression::Lz4
        );
        assert_eq!(
            parse_name(&format!("core.x.1.{BOOT}.2.3.xz"))
                .unwrap()
                .compression,
            Compression::Xz
        );
    }

    #[test]
    fn other_names_are_not_cores() {
        for name in [
            format!(".#core.sleep.0.{BOOT}.1.2.zst"),
            "core".to_string(),
            "core.sleep".to_string(),
            format!("core..0.{BOOT}.1.2"),
            format!("core.x.0.{BOOT}.0.2"),
            format!("core.x.-1.{BOOT}.1.2"),
            "core.x.0.nothex.1.2".to_string(),
            format!("core.x.0.{BOOT}.1.99999999999999999999999"),
            format!("core.bad\\q.0.{BOOT}.1.2"),
            format!("core.bad\\x4.0.{BOOT}.1.2"),
        ] {
            assert_eq!(parse_name(&name), None, "{name}");
        }
    }
}
