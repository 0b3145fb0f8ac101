//! Waking a supervisor blocked in `waitpid`.
//!
//! The supervisor waits with `waitpid(-1, __WALL | __WNOTHREAD)`: only its own
//! tracees and its own children, so a host program's other children are never
//! reaped by it. Nothing but a child of that thread can end such a wait, so the
//! doorbell *is* one: a tiny process, forked by the supervisor, that blocks reading
//! one end of a socket pair and exits when a byte (or end of file) arrives. Its exit
//! ends the wait; the supervisor reaps it, answers the requests queued meanwhile,
//! and forks the next one. Ringing is a `send` on the other end, from any thread.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// One doorbell process and the end of the socket pair that rings it.
pub(super) struct Doorbell {
    /// The doorbell process (a child of the supervisor thread).
    pub(super) pid: i32,
    /// The ringing end.
    pub(super) bell: OwnedFd,
}

impl Doorbell {
    /// Forks a doorbell from the calling (supervisor) thread.
    pub(super) fn fork() -> std::io::Result<Doorbell> {
        let mut fds = [0i32; 2];
        // SAFETY: socketpair writes two descriptors into the two-element array.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nothing else.
        let (bell, door) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let door_fd = door.as_raw_fd();
        // SAFETY: the child only makes async-signal-safe system calls (close_range,
        // read, _exit) before it exits, so forking a multi-threaded process is sound.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: in the child: plain system calls on integers and a local buffer.
            unsafe {
                // Hold nothing of the host's (pipes to other children must see EOF).
                if door_fd > 0 {
                    libc::syscall(libc::SYS_close_range, 0u32, (door_fd - 1) as u32, 0u32);
                }
                libc::syscall(libc::SYS_close_range, (door_fd + 1) as u32, u32::MAX, 0u32);
                // Out of the terminal's process group: Ctrl-C is not for it.
                libc::setpgid(0, 0);
                let mut b = 0u8;
                loop {
                    let n = libc::read(door_fd, (&mut b as *mut u8).cast(), 1);
                    if n >= 0 || *libc::__errno_location() != libc::EINTR {
                        break;
                    }
                }
                libc::_exit(0);
            }
        }
        drop(door);
        Ok(Doorbell { pid, bell })
    }
}

/// Rings a doorbell through its ringing end (a dead doorbell is not an error:
/// the supervisor already woke and will see the queued request).
pub(super) fn ring(bell: &OwnedFd) {
    let b = [1u8];
    // SAFETY: send reads one byte from a live local; MSG_NOSIGNAL keeps a closed
    // peer from raising SIGPIPE.
    unsafe {
        libc::send(bell.as_raw_fd(), b.as_ptr().cast(), 1, libc::MSG_NOSIGNAL);
    }
}
