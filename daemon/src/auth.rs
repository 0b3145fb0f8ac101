//! Who may act on which process: the kernel's own ptrace rule, checked for the caller.

use std::os::unix::fs::MetadataExt;

use argstash_dbus::{Error, ErrorKind};
use injector::session::SessionError;
use zbus::fdo::DBusProxy;
use zbus::message::Header;
use zbus::names::BusName;

/// The Unix uid of the connection that sent `hdr`, asked of the bus itself.
pub async fn caller_uid(dbus: &DBusProxy<'static>, hdr: &Header<'_>) -> Result<u32, Error> {
    let sender = hdr.sender().ok_or_else(|| {
        Error::new(
            ErrorKind::AccessDenied,
            "the call has no sender: cannot tell who is asking",
        )
    })?;
    let creds = dbus
        .get_connection_credentials(BusName::Unique(sender.to_owned()))
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::AccessDenied,
                format!("cannot get the credentials of {sender} from the bus: {e}"),
            )
        })?;
    creds.unix_user_id().ok_or_else(|| {
        Error::new(
            ErrorKind::AccessDenied,
            format!("the bus does not know the Unix user of {sender}"),
        )
    })
}

/// The real, effective and saved uids of `pid` (the `Uid:` line of `/proc/PID/status`).
fn uids(pid: i32) -> Result<[u32; 3], Error> {
    let gone = || {
        Error::new(
            ErrorKind::NoSuchProcess,
            SessionError::NoSuchProcess { pid }.to_string(),
        )
    };
    if pid <= 0 {
        return Err(gone());
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|_| gone())?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .ok_or_else(gone)?;
    let v: Vec<u32> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 3 {
        return Err(gone());
    }
    Ok([v[0], v[1], v[2]])
}

/// Allows the call when `uid` could ptrace `pid` itself: uid 0, or the same real,
/// effective and saved uid and a dumpable target.
pub fn may_trace(uid: u32, pid: i32) -> Result<(), Error> {
    let ids = uids(pid)?;
    if uid == 0 {
        return Ok(());
    }
    let deny = |why: String| {
        Error::new(
            ErrorKind::AccessDenied,
            format!("uid {uid} may not trace process {pid}: {why}"),
        )
    };
    if ids.iter().any(|&u| u != uid) {
        return Err(deny(format!(
            "its real, effective and saved uids are {}, {} and {}",
            ids[0], ids[1], ids[2]
        )));
    }
    // A process that is not dumpable (setuid, or prctl(PR_SET_DUMPABLE, 0)) has its
    // /proc/PID owned by root.
    let owner = std::fs::metadata(format!("/proc/{pid}"))
        .map(|m| m.uid())
        .map_err(|_| {
            Error::new(
                ErrorKind::NoSuchProcess,
                SessionError::NoSuchProcess { pid }.to_string(),
            )
        })?;
    if owner != uid {
        return Err(deny(
            "it is not dumpable (setuid or set non-dumpable)".to_string(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_may_trace_and_others_may_not_trace_root() {
        let me = std::process::id() as i32;
        assert!(may_trace(0, me).is_ok());
        let e = may_trace(65534, me).unwrap_err();
        assert_eq!(e.kind(), Some(ErrorKind::AccessDenied));
        let e = may_trace(0, -5).unwrap_err();
        assert_eq!(e.kind(), Some(ErrorKind::NoSuchProcess));
    }
}
