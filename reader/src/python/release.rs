//! A CPython version as the interpreter spells it (`PY_VERSION_HEX`): a plain value,
//! at the bottom of `python` so that errors, layouts and the finder can all name it.

use std::fmt;

/// A CPython version as `PY_VERSION_HEX` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PythonVersion {
    /// `3`.
    pub major: u8,
    /// `11` for 3.11.
    pub minor: u8,
    /// `7` for 3.11.7; 0 when only the file name told the version.
    pub micro: u8,
    /// Release level: `0xa` alpha, `0xb` beta, `0xc` candidate, `0xf` final.
    pub level: u8,
    /// Serial of a pre-release.
    pub serial: u8,
}

impl PythonVersion {
    /// Decodes `PY_VERSION_HEX` (`0x030b07f0` is 3.11.7 final).
    pub fn from_hex(hex: u64) -> PythonVersion {
        let byte = |shift: u32| ((hex >> shift) & 0xff) as u8;
        PythonVersion {
            major: byte(24),
            minor: byte(16),
            micro: byte(8),
            level: byte(4) & 0xf,
            serial: byte(0) & 0xf,
        }
    }

    /// Finds `3.X` in a file name such as `libpython3.11.so.1.0` or `python3.10`.
    pub fn from_file_name(name: &str) -> Option<PythonVersion> {
        let rest = name
            .strip_prefix("libpython")
            .or_else(|| name.strip_prefix("python"))?;
        let rest = rest.strip_prefix("3.")?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let minor: u8 = digits.parse().ok()?;
        Some(PythonVersion {
            major: 3,
            minor,
            micro: 0,
            level: 0xf,
            serial: 0,
        })
    }
}

impl fmt::Display for PythonVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.micro)?;
        match self.level {
            0xa => write!(f, "a{}", self.serial),
            0xb => write!(f, "b{}", self.serial),
            0xc => write!(f, "rc{}", self.serial),
            _ => Ok(()),
        }
    }
}
