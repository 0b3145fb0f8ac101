//! Cheap checks on a target pid before anything touches it.

use crate::error::Error;
use crate::session::SessionError;

/// Refuses pids that must not or cannot be hooked, before any ptrace call.
///
/// Rejects a missing pid, pid 1, argstash itself, kernel threads, and 32-bit
/// processes (not yet supported).
pub fn check_target(pid: i32) -> Result<(), Error> {
    if pid <= 0 || std::fs::metadata(format!("/proc/{pid}")).is_err() {
        return Err(SessionError::NoSuchProcess { pid }.into());
    }
    if pid == 1 {
        return Err(SessionError::Init.into());
    }
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"));
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string();
    if exe.is_err() {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        if maps.trim().is_empty() {
            return Err(SessionError::KernelThread { pid, name }.into());
        }
    }
    let mut ident = [0u8; 5];
    if let Ok(mut f) = std::fs::File::open(format!("/proc/{pid}/exe")) {
        use std::io::Read;
        if f.read_exact(&mut ident).is_ok() && ident[..4] == *b"\x7fELF" && ident[4] == 1 {
            return Err(Error::Unsupported32Bit { pid, name });
        }
    }
    Ok(())
}
