//! Giving back the signals a session took from its threads, and saying how each
//! one got back.
//!
//! A session holds at most one real signal per thread in a signal-delivery-stop; that
//! one goes back with `PTRACE_DETACH` and keeps its `siginfo` exactly (the kernel
//! delivers it straight from the stop, no queue entry is allocated). A signal that
//! arrives while a remote call runs the thread is taken out of the kernel and must be
//! queued again from outside, which the kernel allows only in part:
//!
//! * `rt_tgsigqueueinfo` may forge a `siginfo` only with a negative `si_code` other
//!   than `SI_TKILL` (`sigqueue`, POSIX timers, asynchronous I/O, `mq_notify`);
//!   anything else (`kill`, `tgkill`, kernel-generated signals) can only be re-sent
//!   with `tgkill`, which names argstash as the sender.
//! * A queue entry counts against the *real user's* machine-wide
//!   `RLIMIT_SIGPENDING`. When that is exhausted the kernel refuses a real-time
//!   signal (`EAGAIN`) and delivers a standard one without its `siginfo`. Both are
//!   transient (the budget frees as other signals are delivered), so a refusal is
//!   retried for a short while before the signal is reported lost.
//! * A standard signal already pending for the thread is merged by the kernel: the
//!   program sees it once.
//!
//! Every case is reported as a [`SignalOutcome`], never silently: a session hands its
//! outcomes back at [`Session::detach_reporting`](super::session::Session::detach_reporting),
//! and also appends them to this OS thread's journal, from which an operation made of
//! many sessions (an install: stops, remote calls on borrowed threads) takes those of
//! its process at the end ([`take_journal`]). ptrace binds every session to the thread
//! that made it, so a thread's journal holds exactly the signals its own sessions took.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use nix::errno::Errno;

/// How long an `EAGAIN` (the pending-signal budget exhausted) is retried.
const RETRY_FOR: Duration = Duration::from_millis(200);

/// How one signal a session took from a thread got back to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalFate {
    /// Delivered from the signal-delivery-stop at detach, `siginfo` unchanged.
    Redelivered,
    /// Queued again with its `siginfo` unchanged (`rt_tgsigqueueinfo`).
    Requeued,
    /// Queued again, but the kernel could not keep its `siginfo` (the machine-wide
    /// pending-signal budget of its user was exhausted): the program sees `SI_USER`.
    InfoDropped,
    /// Re-sent with `tgkill`: the kernel lets no other process forge this kind of
    /// `siginfo` (`si_code` >= 0 or `SI_TKILL`), so the program sees argstash as the sender.
    Resent,
    /// The same standard signal was already pending for the thread; the kernel merged
    /// them, so the program sees it once (as it would have without argstash if both
    /// had arrived while it blocked the signal).
    Merged,
    /// The kernel refused to queue it again (`errno`): the program never sees it.
    Lost {
        /// The error of the last attempt.
        errno: i32,
    },
}

impl SignalFate {
    /// The fate's name in reports (`redelivered`, `requeued`, `info-dropped`, `resent`,
    /// `merged`, `lost`).
    pub fn name(self) -> &'static str {
        match self {
            SignalFate::Redelivered => "redelivered",
            SignalFate::Requeued => "requeued",
            SignalFate::InfoDropped => "info-dropped",
            SignalFate::Resent => "resent",
            SignalFate::Merged => "merged",
            SignalFate::Lost { .. } => "lost",
        }
    }

    /// The fate named `name` ([`SignalFate::name`]); `errno` is used by `lost` only.
    pub fn from_name(name: &str, errno: i32) -> Option<SignalFate> {
        Some(match name {
            "redelivered" => SignalFate::Redelivered,
            "requeued" => SignalFate::Requeued,
            "info-dropped" => SignalFate::InfoDropped,
            "resent" => SignalFate::Resent,
            "merged" => SignalFate::Merged,
            "lost" => SignalFate::Lost { errno },
            _ => return None,
        })
    }

    /// What the program sees, in a sentence fragment for notes.
    pub fn consequence(self) -> String {
        match self {
            SignalFate::Redelivered | SignalFate::Requeued => "delivered exactly".to_string(),
            SignalFate::InfoDropped => "delivered without its siginfo (the pending-signal \
                                        budget of its user was exhausted)"
                .to_string(),
            SignalFate::Resent => "re-sent by tgkill: the program sees argstash as its sender \
                                   (the kernel lets no one forge this kind of siginfo)"
                .to_string(),
            SignalFate::Merged => "merged with the same signal already pending".to_string(),
            SignalFate::Lost { errno } => format!(
                "lost: the kernel refused to queue it again ({})",
                crate::ptrace::errno_text(errno)
            ),
        }
    }

    /// The program sees exactly what was sent.
    pub fn is_exact(self) -> bool {
        matches!(self, SignalFate::Redelivered | SignalFate::Requeued)
    }
}

/// One signal a session took from a thread, and how it got back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalOutcome {
    /// The thread it was taken from.
    pub tid: i32,
    /// The signal number.
    pub signal: i32,
    /// Its `si_code` when it was taken.
    pub code: i32,
    /// How it got back.
    pub fate: SignalFate,
}

thread_local! {
    /// (pid, outcome) for every signal this thread's sessions gave back, oldest first.
    static JOURNAL: RefCell<Vec<(i32, SignalOutcome)>> = const { RefCell::new(Vec::new()) };
}

/// Appends what a session of process `pid` gave back to this thread's journal.
pub(crate) fn journal(pid: i32, outcomes: &[SignalOutcome]) {
    if outcomes.is_empty() {
        return;
    }
    JOURNAL.with(|j| j.borrow_mut().extend(outcomes.iter().map(|o| (pid, *o))));
}

/// Takes this thread's journal entries for process `pid` (the others stay).
pub(crate) fn take_journal(pid: i32) -> Vec<SignalOutcome> {
    JOURNAL.with(|j| {
        let mut j = j.borrow_mut();
        let (mine, rest): (Vec<_>, Vec<_>) = j.drain(..).partition(|(p, _)| *p == pid);
        *j = rest;
        mine.into_iter().map(|(_, o)| o).collect()
    })
}

/// Puts `info` back in thread `tid`'s queue from outside, and says how.
pub(crate) fn requeue(pid: i32, tid: i32, info: &libc::siginfo_t) -> SignalOutcome {
    let signal = info.si_signo;
    let outcome = |fate| SignalOutcome {
        tid,
        signal,
        code: info.si_code,
        fate,
    };
    let realtime = signal >= libc::SIGRTMIN();
    if !realtime && pending_for(pid, tid, signal) {
        return outcome(SignalFate::Merged);
    }
    let forgeable = info.si_code < 0 && info.si_code != libc::SI_TKILL;
    let deadline = Instant::now() + RETRY_FOR;
    loop {
        let r = if forgeable {
            let mut copy = *info;
            // SAFETY: rt_tgsigqueueinfo reads a siginfo_t through the pointer, which
            // points to a live, fully initialised local copy.
            unsafe {
                libc::syscall(
                    libc::SYS_rt_tgsigqueueinfo,
                    pid,
                    tid,
                    signal,
                    &mut copy as *mut libc::siginfo_t,
                )
            }
        } else {
            // SAFETY: tgkill takes three integers and no pointers.
            unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, signal) }
        };
        let errno = if r == 0 { None } else { Some(Errno::last()) };
        match errno {
            None if !forgeable => return outcome(SignalFate::Resent),
            None if !realtime && budget_exhausted(pid, tid) => {
                // A standard signal is queued even when no queue entry could be
                // allocated, without its siginfo. Checked after the fact: the
                // budget was full when it was sent.
                return outcome(SignalFate::InfoDropped);
            }
            None => return outcome(SignalFate::Requeued),
            Some(Errno::EAGAIN) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Some(e) => return outcome(SignalFate::Lost { errno: e as i32 }),
        }
    }
}

/// Whether `signal` is pending for the thread or its process (`SigPnd`/`ShdPnd`).
fn pending_for(pid: i32, tid: i32, signal: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")) else {
        return false;
    };
    let bit = 1u64 << (signal - 1);
    status.lines().any(|l| {
        let (key, value) = l.split_once(':').unwrap_or(("", ""));
        (key == "SigPnd" || key == "ShdPnd")
            && u64::from_str_radix(value.trim(), 16).is_ok_and(|m| m & bit != 0)
    })
}

/// Whether the thread's user has used up its pending-signal budget (`SigQ: used/limit`).
fn budget_exhausted(pid: i32, tid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigQ:"))
        .and_then(|q| q.trim().split_once('/'))
        .and_then(|(used, limit)| Some((used.parse::<u64>().ok()?, limit.parse::<u64>().ok()?)))
        .is_some_and(|(used, limit)| used >= limit)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ptrace::session::Session;
    use argstash_tests::{sigqueue, Target, OUTPUT_TIMEOUT};

    /// Prints the code and value of every SIGUSR1 and SIGRTMIN it gets; argv[1] sets
    /// its RLIMIT_SIGPENDING (0: no signal can be queued with a siginfo for it).
    const CATCHER: &str = r#"
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
static void on_sig(int sig, siginfo_t *si, void *uc) {
    char buf[96];
    int n = snprintf(buf, sizeof buf, "%s code=%d value=%d\n",
                     sig == SIGUSR1 ? "usr1" : "rt", si->si_code, si->si_value.sival_int);
    write(1, buf, n);
}
int main(int argc, char **argv) {
    if (argc > 1) {
        struct rlimit rl = {strtoul(argv[1], 0, 10), strtoul(argv[1], 0, 10)};
        if (setrlimit(RLIMIT_SIGPENDING, &rl)) { perror("setrlimit"); return 1; }
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sig;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGUSR1, &sa, 0);
    sigaction(SIGRTMIN, &sa, 0);
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        struct timespec ts = {0, 5000000};
        clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, 0);
    }
}
"#;

    /// A siginfo as `sigqueue` makes it (SI_QUEUE, our pid and uid, an integer value).
    fn queued(signal: i32, value: i32) -> libc::siginfo_t {
        // SAFETY: siginfo_t is plain data; all zero is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        info.si_signo = signal;
        info.si_code = libc::SI_QUEUE;
        // The sigqueue layout: si_pid, si_uid, then si_value at offset 24 on x86-64
        // (after signo, errno, code and padding).
        let raw = &mut info as *mut libc::siginfo_t as *mut u8;
        // SAFETY: the offsets are inside the 128-byte siginfo_t and aligned for i32.
        unsafe {
            *(raw.add(16) as *mut i32) = std::process::id() as i32;
            *(raw.add(20) as *mut u32) = libc::getuid();
            *(raw.add(24) as *mut i32) = value;
        }
        info
    }

    #[test]
    fn each_kind_of_signal_is_given_back_and_said_how() {
        let child = Target::spawn_source("requeue", CATCHER, &[]);
        let pid = child.pid();
        // A sigqueue'd signal keeps its siginfo.
        let o = requeue(pid, pid, &queued(libc::SIGUSR1, 42));
        assert_eq!(o.fate, SignalFate::Requeued, "{o:?}");
        assert_eq!(
            child.expect_line(OUTPUT_TIMEOUT),
            format!("usr1 code={} value=42", libc::SI_QUEUE)
        );
        let o = requeue(pid, pid, &queued(libc::SIGRTMIN(), 9));
        assert_eq!(o.fate, SignalFate::Requeued, "{o:?}");
        assert_eq!(
            child.expect_line(OUTPUT_TIMEOUT),
            format!("rt code={} value=9", libc::SI_QUEUE)
        );
        // A kill()'d signal (SI_USER) can only be re-sent, with argstash as the sender.
        let mut user = queued(libc::SIGUSR1, 0);
        user.si_code = libc::SI_USER;
        let o = requeue(pid, pid, &user);
        assert_eq!(o.fate, SignalFate::Resent, "{o:?}");
        assert!(!o.fate.is_exact());
        assert_eq!(
            child.expect_line(OUTPUT_TIMEOUT),
            format!("usr1 code={} value=0", libc::SI_TKILL)
        );
        // The same standard signal already pending (the thread is held): merged.
        let s = Session::attach_all(pid).unwrap();
        sigqueue(pid, libc::SIGUSR1, 5);
        let o = requeue(pid, pid, &queued(libc::SIGUSR1, 6));
        assert_eq!(o.fate, SignalFate::Merged, "{o:?}");
        s.detach().unwrap();
        assert_eq!(
            child.expect_line(OUTPUT_TIMEOUT),
            format!("usr1 code={} value=5", libc::SI_QUEUE)
        );
        assert!(child.next_line(Duration::from_millis(100)).is_none());
    }

    #[test]
    fn an_exhausted_budget_is_reported_not_hidden() {
        // RLIMIT_SIGPENDING 0: the kernel can allocate no queue entry for this target,
        // the state a machine is in when its user's pending signals reach the limit.
        let child = Target::spawn_source("budget", CATCHER, &["0"]);
        let pid = child.pid();
        let o = requeue(pid, pid, &queued(libc::SIGUSR1, 42));
        assert_eq!(o.fate, SignalFate::InfoDropped, "{o:?}");
        assert_eq!(
            child.expect_line(OUTPUT_TIMEOUT),
            format!("usr1 code={} value=0", libc::SI_USER)
        );
        let o = requeue(pid, pid, &queued(libc::SIGRTMIN(), 3));
        assert_eq!(
            o.fate,
            SignalFate::Lost {
                errno: libc::EAGAIN
            },
            "{o:?}"
        );
        assert!(child.next_line(Duration::from_millis(100)).is_none());
    }
}
