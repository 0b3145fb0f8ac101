//! The supervisor: the thread that traces a command started by [`super::spawn`].
//!
//! Its loop blocks in `waitpid(-1, __WALL | __WNOTHREAD)` (its own tracees and
//! children only) and, for each stop:
//! * a signal: passed on at once with `PTRACE_CONT` (the lean path), unless it
//!   is fatal with its default action (crash report first) or one the caller
//!   asked reports for;
//! * a group-stop (job control): `PTRACE_LISTEN`, so the command stays stopped
//!   as it would untraced until SIGCONT;
//! * a new thread or (with follow-forks) process: recorded, continued;
//! * an exec: reported (the hooks are gone), continued;
//! * the doorbell's exit: the caller's requests are served.
//!
//! A report stops every other thread of the process (`PTRACE_INTERRUPT`),
//! reads every stack through the held trace, hands the report to the caller and
//! resumes each thread exactly as it was stopped (with its own pending signal).

use std::collections::{HashMap, HashSet};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use nix::sys::ptrace::{self, Options};
use nix::unistd::Pid as NixPid;
use reader::ids::{Pid, Tid};

use crate::backtrace::{Backtrace, BacktraceOptions, ProcessReader};
use crate::error::Error;
use crate::hooks::HookTarget;

use super::doorbell::Doorbell;
use super::launch::{launch, EVENT_STOP};
use super::{Report, ReportReason, Request, RunError, RunEvent, RunOptions, Shared, Started};

/// Signals whose default action kills with a core, reported as crashes.
const CRASH_SIGNALS: [i32; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
    libc::SIGTRAP,
];

/// The supervisor thread's body: start the command, hand it to the caller, supervise it.
pub(super) fn main(
    cmd: Command,
    targets: Vec<HookTarget>,
    mut opts: RunOptions,
    shared: Arc<Shared>,
    started: Sender<Result<Started, RunError>>,
) {
    let mut options = Options::PTRACE_O_TRACECLONE | Options::PTRACE_O_TRACEEXEC;
    if opts.follow_forks {
        options |= Options::PTRACE_O_TRACEFORK | Options::PTRACE_O_TRACEVFORK;
    }
    let launched = match launch(cmd, &targets, opts.python, &opts.install, options) {
        Ok(l) => l,
        Err(e) => {
            let _ = started.send(Err(e));
            finish(&shared, None);
            return;
        }
    };
    let mut child = launched.child;
    let pid = launched.pid;
    // SAFETY: pidfd_open takes a pid and flags; the result is a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    let pidfd = (fd >= 0).then(|| {
        // SAFETY: the descriptor was just returned by pidfd_open and is owned by nobody else.
        unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) }
    });
    let doorbell = Doorbell::fork().ok();
    if let Some(d) = &doorbell {
        shared.state.lock().unwrap_or_else(|e| e.into_inner()).bell = d.bell.try_clone().ok();
    }
    let handler = opts.on_event.take();
    let mut sup = Supervisor {
        pid,
        threads: HashMap::from([(pid, pid)]),
        detach_on_stop: HashSet::new(),
        opts,
        handler,
        readers: HashMap::new(),
        shared: shared.clone(),
        doorbell,
    };
    let _ = started.send(Ok(Started {
        pid,
        hooks: launched.hooks,
        stdin: child.stdin.take(),
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
        pidfd,
    }));
    // The main thread waits in its interrupt stop at the entry point.
    let _ = ptrace::cont(NixPid::from_raw(pid), None);
    let status = sup.run();
    if let Some(d) = sup.doorbell.take() {
        // SAFETY: kill takes two integers; the doorbell is our child, not yet reaped.
        unsafe {
            libc::kill(d.pid, libc::SIGKILL);
        }
        let mut st = 0;
        // SAFETY: waitpid writes the status word into a live local.
        unsafe {
            libc::waitpid(d.pid, &mut st, libc::__WALL);
        }
    }
    // The Child's own wait would find nothing: the status came through our waitpid.
    drop(child);
    finish(&shared, status);
}

/// Publishes the exit status and marks the supervisor gone.
fn finish(shared: &Shared, status: Option<ExitStatus>) {
    let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    st.exit = status.or(st.exit);
    st.done = true;
    st.bell = None;
    shared.changed.notify_all();
}

struct Supervisor {
    /// The command's process.
    pid: i32,
    /// Every traced thread, with its process.
    threads: HashMap<i32, i32>,
    /// New tracees to let go at their first stop (processes created with
    /// `clone` without following forks).
    detach_on_stop: HashSet<i32>,
    opts: RunOptions,
    handler: Option<super::EventHandler>,
    /// One warm reader per supervised process.
    readers: HashMap<i32, ProcessReader>,
    shared: Arc<Shared>,
    doorbell: Option<Doorbell>,
}

/// How a thread stopped for a report is resumed.
#[derive(Clone, Copy)]
enum Resume {
    /// `PTRACE_CONT` with this signal (0: none).
    Cont(i32),
    /// `PTRACE_LISTEN`: it is in a group-stop.
    Listen,
}

impl Supervisor {
    /// Runs until the command's process is reaped; returns its status.
    fn run(&mut self) -> Option<ExitStatus> {
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes the status word into a live local.
            let r = unsafe { libc::waitpid(-1, &mut status, libc::__WALL | libc::__WNOTHREAD) };
            if r < 0 {
                match nix::Error::last() {
                    nix::Error::EINTR => continue,
                    _ => return None,
                }
            }
            if self.doorbell.as_ref().is_some_and(|d| d.pid == r) {
                self.answer_door();
                continue;
            }
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                self.threads.remove(&r);
                if r == self.pid {
                    return Some(ExitStatus::from_raw(status));
                }
                continue;
            }
            if libc::WIFSTOPPED(status) {
                self.stopped(r, status);
            }
        }
    }

    /// Handles one ptrace-stop of `tid`.
    fn stopped(&mut self, tid: i32, status: i32) {
        let sig = libc::WSTOPSIG(status);
        let event = status >> 16;
        let t = NixPid::from_raw(tid);
        if self.detach_on_stop.remove(&tid) {
            let _ = ptrace::detach(t, None);
            self.threads.remove(&tid);
            return;
        }
        match event {
            0 => {
                let tgid = self.tgid(tid);
                if self.opts.on_crash && CRASH_SIGNALS.contains(&sig) && kills(tgid, tid, sig) {
                    self.report(
                        tgid,
                        Some(tid),
                        ReportReason::Crash {
                            signal: sig,
                            tid: Tid::from_raw(tid),
                        },
                    );
                } else if self.opts.report_signals.contains(&sig) {
                    self.report(
                        tgid,
                        Some(tid),
                        ReportReason::Signal {
                            signal: sig,
                            tid: Tid::from_raw(tid),
                        },
                    );
                }
                resume(tid, Resume::Cont(sig));
            }
            EVENT_STOP => {
                if is_stop_signal(sig) {
                    resume(tid, Resume::Listen);
                } else {
                    resume(tid, Resume::Cont(0));
                }
            }
            libc::PTRACE_EVENT_CLONE | libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK => {
                self.new_tracee(tid, event);
                resume(tid, Resume::Cont(0));
            }
            libc::PTRACE_EVENT_EXEC => {
                let tgid = self.tgid(tid);
                // The exec'ing thread became the leader; every other thread is gone.
                self.threads.retain(|k, v| *v != tgid || *k == tgid);
                self.threads.insert(tgid, tgid);
                self.readers.remove(&tgid);
                let program = reader::procfs::read_exe_link(tgid)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| reader::procfs::exe_path(tgid));
                self.emit(RunEvent::Exec {
                    pid: Pid::from_raw(tgid),
                    program,
                });
                resume(tgid, Resume::Cont(0));
            }
            _ => resume(tid, Resume::Cont(0)),
        }
    }

    /// Records the thread or process a clone, fork or vfork event created.
    fn new_tracee(&mut self, parent: i32, event: i32) {
        let Ok(new) = ptrace::getevent(NixPid::from_raw(parent)) else {
            return;
        };
        let new = new as i32;
        let tgid = self.tgid(parent);
        if event == libc::PTRACE_EVENT_CLONE && reader::procfs::task_exists(tgid, new) {
            self.threads.insert(new, tgid);
        } else if event == libc::PTRACE_EVENT_CLONE && !self.opts.follow_forks {
            self.detach_on_stop.insert(new);
        } else {
            self.threads.insert(new, new);
        }
    }

    fn tgid(&self, tid: i32) -> i32 {
        self.threads.get(&tid).copied().unwrap_or_else(|| {
            reader::procfs::read_status(tid)
                .map(|s| s.tgid)
                .ok()
                .filter(|t| *t > 0)
                .unwrap_or(tid)
        })
    }

    /// Hands an event to the caller's handler, or keeps it for `take_events`.
    fn emit(&mut self, event: RunEvent) {
        match &mut self.handler {
            Some(h) => h(event),
            None => {
                let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
                st.events.push(event);
            }
        }
    }

    /// Stops every thread of `tgid` but `held` (already stopped), reads the
    /// backtraces, hands them over, and resumes the others as they were.
    fn report(&mut self, tgid: i32, held: Option<i32>, reason: ReportReason) {
        let backtrace = self.with_all_stopped(tgid, held, |sup| sup.read(tgid));
        self.emit(RunEvent::Report(Report {
            pid: Pid::from_raw(tgid),
            reason,
            backtrace,
        }));
    }

    fn read(&mut self, tgid: i32) -> Result<Backtrace, Error> {
        let opts: BacktraceOptions = self.opts.backtrace.clone();
        self.readers
            .entry(tgid)
            .or_insert_with(|| {
                let mut reader = ProcessReader::new(Pid::from_raw(tgid));
                reader.set_dwarf_cache(self.opts.dwarf_cache.clone());
                reader
            })
            .backtrace_held(&opts)
    }

    /// Runs `f` with every thread of `tgid` in a ptrace-stop (`held` already is).
    fn with_all_stopped<R>(
        &mut self,
        tgid: i32,
        held: Option<i32>,
        f: impl FnOnce(&mut Supervisor) -> R,
    ) -> R {
        let mut waiting: Vec<i32> = self
            .threads
            .iter()
            .filter(|(t, g)| **g == tgid && Some(**t) != held)
            .map(|(t, _)| *t)
            .collect();
        for t in &waiting {
            let _ = ptrace::interrupt(NixPid::from_raw(*t));
        }
        let mut stopped: Vec<(i32, Resume)> = Vec::new();
        while let Some(tid) = waiting.pop() {
            let mut status = 0;
            // SAFETY: waitpid writes the status word into a live local.
            let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL) };
            if r != tid {
                if r < 0 && nix::Error::last() == nix::Error::EINTR {
                    waiting.push(tid);
                }
                continue;
            }
            if !libc::WIFSTOPPED(status) {
                self.threads.remove(&tid);
                continue;
            }
            let sig = libc::WSTOPSIG(status);
            let how = match status >> 16 {
                0 => Resume::Cont(sig),
                EVENT_STOP if is_stop_signal(sig) => Resume::Listen,
                EVENT_STOP => Resume::Cont(0),
                e @ (libc::PTRACE_EVENT_CLONE
                | libc::PTRACE_EVENT_FORK
                | libc::PTRACE_EVENT_VFORK) => {
                    let before: HashSet<i32> = self.threads.keys().copied().collect();
                    self.new_tracee(tid, e);
                    // A new thread of this process starts stopped: wait for it too.
                    for (t, g) in &self.threads {
                        if !before.contains(t) && *g == tgid {
                            waiting.push(*t);
                        }
                    }
                    Resume::Cont(0)
                }
                _ => Resume::Cont(0),
            };
            stopped.push((tid, how));
        }
        let result = f(self);
        for (tid, how) in stopped {
            resume(tid, how);
        }
        result
    }

    /// Serves the requests queued before the doorbell rang, and forks the next doorbell.
    fn answer_door(&mut self) {
        let requests = {
            let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            self.doorbell = Doorbell::fork().ok();
            st.bell = self.doorbell.as_ref().and_then(|d| d.bell.try_clone().ok());
            std::mem::take(&mut st.requests)
        };
        for (n, request) in requests {
            let pid = self.pid;
            match request {
                Request::Backtrace => {
                    let bt = self.with_all_stopped(pid, None, |sup| sup.read(pid));
                    let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
                    st.answers.push((n, bt));
                }
                Request::Report => self.report(pid, None, ReportReason::Requested),
            }
            let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
            st.handled = st.handled.max(n + 1);
            self.shared.changed.notify_all();
        }
    }
}

fn is_stop_signal(sig: i32) -> bool {
    matches!(
        sig,
        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
    )
}

/// Lets a stopped thread go.
fn resume(tid: i32, how: Resume) {
    let r = match how {
        // SAFETY: PTRACE_CONT passes the signal number by value; no pointer is read.
        Resume::Cont(sig) => unsafe {
            libc::ptrace(libc::PTRACE_CONT, tid, 0, sig as libc::c_long)
        },
        // SAFETY: PTRACE_LISTEN takes no address or data.
        Resume::Listen => unsafe { libc::ptrace(libc::PTRACE_LISTEN, tid, 0, 0) },
    };
    let _ = r;
}

/// True when `sig` arriving at `tid` takes its default action (it kills): not
/// caught by a handler; or caught but blocked, or ignored, which the kernel
/// overrides for a synchronous fault (`si_code > 0`).
fn kills(tgid: i32, tid: i32, sig: i32) -> bool {
    let text =
        std::fs::read_to_string(format!("/proc/{tgid}/task/{tid}/status")).unwrap_or_default();
    let mask = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    let bit = 1u64 << (sig - 1);
    let fault = || ptrace::getsiginfo(NixPid::from_raw(tid)).is_ok_and(|i| i.si_code > 0);
    if mask("SigIgn:") & bit != 0 {
        return fault();
    }
    if mask("SigCgt:") & bit != 0 {
        return mask("SigBlk:") & bit != 0 && fault();
    }
    true
}
