//! Process and thread ids as types, so that one is never passed for the other.
//!
//! Linux numbers processes and threads from one space (a process's id is the id
//! of its first thread), so both wrap an `i32` and convert to it explicitly.

use std::fmt;
use std::str::FromStr;

/// A process id (`tgid`): what `kill` and `/proc/PID` take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pid(i32);

/// A thread id (`tid`): what `/proc/PID/task/TID` and `ptrace` take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tid(i32);

/// Why a text is not a process or thread id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a process or thread id (a decimal number, as `ps` shows)")]
pub struct IdError {
    /// The text given.
    pub text: String,
}

macro_rules! id_type {
    ($name:ident) => {
        impl $name {
            /// The id as the kernel numbers it.
            pub const fn from_raw(raw: i32) -> $name {
                $name(raw)
            }

            /// The raw number, for system calls and `/proc` paths.
            pub const fn as_raw(self) -> i32 {
                self.0
            }
        }

        impl From<$name> for i32 {
            fn from(id: $name) -> i32 {
                id.0
            }
        }

        impl TryFrom<u32> for $name {
            type Error = IdError;

            /// From `std::process::Child::id`.
            fn try_from(raw: u32) -> Result<$name, IdError> {
                i32::try_from(raw).map($name).map_err(|_| IdError {
                    text: raw.to_string(),
                })
            }
        }

        impl FromStr for $name {
            type Err = IdError;

            fn from_str(text: &str) -> Result<$name, IdError> {
                // Any number parses: whether a process or thread has it is
                // for the operation to find out (and say).
                text.trim()
                    .parse::<i32>()
                    .map($name)
                    .map_err(|_| IdError { text: text.into() })
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl PartialEq<i32> for $name {
            fn eq(&self, other: &i32) -> bool {
                self.0 == *other
            }
        }
    };
}

id_type!(Pid);
id_type!(Tid);

impl Pid {
    /// The process's first thread, whose id is the process id.
    pub const fn main_thread(self) -> Tid {
        Tid(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_display_and_refuse_non_ids() {
        let pid: Pid = "1234".parse().unwrap();
        assert_eq!(pid.as_raw(), 1234);
        assert_eq!(pid.to_string(), "1234");
        assert_eq!(pid.main_thread(), Tid::from_raw(1234));
        assert_eq!(" 7\n".parse::<Tid>().unwrap(), 7);
        assert_eq!("0".parse::<Pid>().unwrap(), 0);
        for bad in ["abc", "", "99999999999", "0x10"] {
            let e = bad.parse::<Pid>().unwrap_err();
            assert_eq!(e.text, bad);
        }
        assert!(Pid::try_from(u32::MAX).is_err());
        assert_eq!(Pid::try_from(42u32).unwrap(), 42);
    }
}
