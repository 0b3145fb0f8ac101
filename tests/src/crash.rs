//! The crash.c fixture driven as the core-file tests drive it: core dumps
//! allowed, `stash_me` and `worker_parked` hooked by the real `argstash
//! inject`, and what the fixture then reports read back.

use std::time::Duration;

use crate::cli::run_ok;
use crate::process::Target;

/// What crash.c reported once hooked and called, before it crashes.
#[derive(Debug, Clone, Copy)]
pub struct HookedCrash {
    /// The worker thread, parked inside hooked `worker_parked(worker_arg)`.
    pub worker_tid: i32,
    /// `worker_parked`'s argument.
    pub worker_arg: u64,
    /// The six arguments `stash_me` received, as the fixture printed them.
    pub printed: [u64; 6],
}

/// Lets the kernel dump `pid`'s core whatever the test's own limit (RLIMIT_CORE unlimited).
pub fn allow_core_dumps(pid: i32) {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: prlimit only reads `unlimited` and writes nothing (old limit pointer null).
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_CORE, &unlimited, std::ptr::null_mut()) };
    assert_eq!(
        rc,
        0,
        "prlimit RLIMIT_CORE: {}",
        std::io::Error::last_os_error()
    );
}

/// Hooks `stash_me` and `worker_parked` in crash.c (`t`), has it call them,
/// and reads what it reports, up to its `waiting` line: it then waits inside
/// `stash_me` for the `crash` line.
pub fn hook_and_call_crash_fixture(t: &mut Target) -> HookedCrash {
    let pid_s = t.pid().to_string();
    let out = run_ok(&[
        "inject",
        "--pid",
        &pid_s,
        "--func",
        "stash_me",
        "--func",
        "worker_parked",
    ]);
    assert!(out.contains("hooked stash_me"), "{out}");
    t.write_stdin("call\n");
    let worker_line = t.expect_line(Duration::from_secs(10));
    let worker: Vec<&str> = worker_line.split_whitespace().collect();
    let (worker_tid, worker_arg) = match worker.as_slice() {
        ["worker", tid, arg] => (
            tid.parse::<i32>().expect("worker tid"),
            u64::from_str_radix(arg, 16).expect("hex worker arg"),
        ),
        _ => t.fail(&format!("expected the worker line, got {worker_line:?}")),
    };
    let args_line = t.expect_line(Duration::from_secs(10));
    let printed: Vec<u64> = args_line
        .strip_prefix("args ")
        .unwrap_or_else(|| t.fail(&format!("expected the args line, got {args_line:?}")))
        .split_whitespace()
        .map(|h| u64::from_str_radix(h, 16).expect("hex argument"))
        .collect();
    let printed: [u64; 6] = printed.try_into().expect("six arguments");
    assert_eq!(t.expect_line(Duration::from_secs(10)), "waiting");
    HookedCrash {
        worker_tid,
        worker_arg,
        printed,
    }
}
