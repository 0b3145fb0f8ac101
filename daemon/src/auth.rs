//! Who may act on which process: the kernel's own ptrace rule, checked for the caller.

use std::os::unix::fs::MetadataExt;

use argstash_dbus::{Error, ErrorKind};
use injector::SessionError;
use zbus::fdo::DBusProxy;
use zbus::names::{BusName, UniqueName};

/// Who is calling: the identity the kernel's ptrace check would look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    /// Unix user id of the connection, as the bus recorded it.
    pub uid: u32,
    /// Real group id of the calling process.
    pub gid: u32,
}

/// The identity of the bus connection `sender` (a unique name such as `:1.42`),
/// asked of the bus itself.
///
/// The uid comes from the bus; the gid from the peer's process (the bus gives its
/// pid), whose real uid must match the bus's record, so a reused pid is not believed.
pub async fn peer(dbus: &DBusProxy<'static>, sender: &UniqueName<'_>) -> Result<Caller, Error> {
    let creds = dbus
        .get_connection_credentials(BusName::Unique(sender.to_owned()))
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::AccessDenied,
                format!("cannot get the credentials of {sender} from the bus: {e}"),
            )
        })?;
    let uid = creds.unix_user_id().ok_or_else(|| {
        Error::new(
            ErrorKind::AccessDenied,
            format!("the bus does not know the Unix user of {sender}"),
        )
    })?;
    if uid == 0 {
        return Ok(Caller { uid, gid: 0 });
    }
    let unknown = |why: &str| {
        Error::new(
            ErrorKind::AccessDenied,
            format!("cannot tell the group of {sender} (uid {uid}): {why}"),
        )
    };
    let pid = creds
        .process_id()
        .ok_or_else(|| unknown("the bus does not know its process id"))?;
    let ids = |key: &str| status_ids(pid as i32, key).ok_or_else(|| unknown("its process is gone"));
    if ids("Uid:")?[0] != uid {
        return Err(unknown("its process id now belongs to another user"));
    }
    Ok(Caller {
        uid,
        gid: ids("Gid:")?[0],
    })
}

/// The real, effective and saved ids of `pid` from the `key` line (`Uid:` or
/// `Gid:`) of `/proc/PID/status`.
fn status_ids(pid: i32, key: &str) -> Option<[u32; 3]> {
    if pid <= 0 {
        return None;
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix(key))?;
    let mut v = line.split_whitespace().map(|x| x.parse::<u32>());
    Some([v.next()?.ok()?, v.next()?.ok()?, v.next()?.ok()?])
}

/// Who owns a process, as the kernel's ptrace check sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// Real, effective and saved uids.
    pub uids: [u32; 3],
    /// Real, effective and saved gids.
    pub gids: [u32; 3],
    /// Owner of `/proc/PID` (root for a process that is not dumpable).
    pub proc_uid: u32,
}

/// The owner of `pid` now, or `None` when it is gone.
pub fn owner_of(pid: i32) -> Option<Owner> {
    Some(Owner {
        uids: status_ids(pid, "Uid:")?,
        gids: status_ids(pid, "Gid:")?,
        proc_uid: std::fs::metadata(format!("/proc/{pid}")).ok()?.uid(),
    })
}

/// Allows the call when `caller` could ptrace `pid` itself: uid 0, or the same
/// real, effective and saved uid *and* gid (as the kernel compares them) and a
/// dumpable target.
pub fn may_trace(caller: Caller, pid: i32) -> Result<(), Error> {
    let owner = owner_of(pid).ok_or_else(|| {
        Error::new(
            ErrorKind::NoSuchProcess,
            SessionError::NoSuchProcess { pid }.to_string(),
        )
    })?;
    may_trace_owned(caller, pid, &owner)
}

/// [`may_trace`] against an `owner` read earlier (e.g. of a process that has exited since).
pub fn may_trace_owned(caller: Caller, pid: i32, owner: &Owner) -> Result<(), Error> {
    let Owner {
        uids,
        gids,
        proc_uid,
    } = *owner;
    let Caller { uid, gid } = caller;
    if uid == 0 {
        return Ok(());
    }
    let deny = |why: String| {
        Error::new(
            ErrorKind::AccessDenied,
            format!("uid {uid} may not trace process {pid}: {why}"),
        )
    };
    if uids.iter().any(|&u| u != uid) {
        return Err(deny(format!(
            "its real, effective and saved uids are {}, {} and {}",
            uids[0], uids[1], uids[2]
        )));
    }
    if gids.iter().any(|&g| g != gid) {
        return Err(deny(format!(
            "its real, effective and saved gids are {}, {} and {}, the caller's gid is {gid} \
             (setgid program, or started under another group)",
            gids[0], gids[1], gids[2]
        )));
    }
    // A process that is not dumpable (setuid, or prctl(PR_SET_DUMPABLE, 0)) has its
    // /proc/PID owned by root.
    if proc_uid != uid {
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
        let root = Caller { uid: 0, gid: 0 };
        let nobody = Caller {
            uid: 65534,
            gid: 65534,
        };
        assert!(may_trace(root, me).is_ok());
        let e = may_trace(nobody, me).unwrap_err();
        assert_eq!(e.kind(), Some(ErrorKind::AccessDenied));
        let e = may_trace(root, -5).unwrap_err();
        assert_eq!(e.kind(), Some(ErrorKind::NoSuchProcess));
    }
}
