//! Ctrl-C while recording: the first ends the recording normally (eject, write);
//! the second ends it without waiting (no safe-point wait at eject); a third
//! kills argstash, which the target survives (see "Target safety" in DESIGN).

use std::sync::atomic::{AtomicUsize, Ordering};

static INTERRUPTS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_interrupt(_: libc::c_int) {
    let n = INTERRUPTS.fetch_add(1, Ordering::SeqCst) + 1;
    if n >= 2 {
        // SAFETY: signal() is async-signal-safe; the next SIGINT takes the default action.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
        }
    }
}

/// Counts SIGINT and SIGTERM from now on (system calls restart: a ptrace wait
/// in progress is not cut short).
pub fn install() {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; the handler
    // only touches an atomic and calls signal(), both async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_interrupt as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}

/// How many interrupts arrived so far.
pub fn count() -> usize {
    INTERRUPTS.load(Ordering::SeqCst)
}
