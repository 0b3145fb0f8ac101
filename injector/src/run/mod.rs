//! Start a command with hooks in place before its `main`, and report its stacks
//! when it crashes, when it gets chosen signals, or when the caller asks
//! (what `argstash run` does).
//!
//! [`spawn`] starts the command traced, stops it at exec, runs it to its entry
//! point (so the dynamic loader has mapped its libraries), installs the hooks,
//! and lets it run under a supervisor: a dedicated thread that is the command's
//! tracer. How the hooks get in while that thread holds the trace: at the entry
//! point the command is parked in a `pause` loop written over its first
//! instructions and let go, [`crate::install`] attaches and patches exactly as for
//! any running process, and the supervisor seizes it again, restores the
//! bytes and registers and lets it start (see `launch.rs`; measured in docs/BENCHMARKS.md).
//!
//! While it runs, every signal the command gets stops it in the supervisor, which
//! passes it on at once, except:
//! * a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP) with its
//!   default action: every thread is stopped, the backtraces are handed to the
//!   caller's [`RunOptions::on_event`], then the signal goes on and the command
//!   dies of it as it would have (exit status, core file);
//! * a signal in [`RunOptions::report_signals`]: reported, then delivered.
//!
//! Children the command forks keep the hooks (their memory is a copy); with
//! [`RunOptions::follow_forks`] they are supervised too.

mod doorbell;
mod launch;
mod supervise;

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use reader::debuginfo::DwarfCache;
use reader::ids::{Pid, Tid};

use crate::backtrace::{Backtrace, BacktraceOptions};
use crate::error::Error;
use crate::hooks::{HookInfo, HookTarget, InstallOptions};

/// How [`spawn`] runs a command.
pub struct RunOptions {
    /// How the hooks are installed (stack window, float arguments, unwind registration).
    pub install: InstallOptions,
    /// Also hook CPython's frame evaluator (as `inject --python`).
    pub python: bool,
    /// Report every thread's backtrace when a fatal signal is about to kill the command.
    pub on_crash: bool,
    /// Report the backtraces whenever the command gets one of these signals, then deliver it.
    pub report_signals: Vec<i32>,
    /// Supervise the processes the command forks too (crash reports, signals).
    pub follow_forks: bool,
    /// How backtraces are read.
    pub backtrace: BacktraceOptions,
    /// Where the backtraces' DWARF parses are kept (memory only by default;
    /// [`DwarfCache::from_env`] adds the user's on-disk cache).
    pub dwarf_cache: DwarfCache,
    /// Called on the supervisor thread for every [`RunEvent`], before the command
    /// goes on (a crash report is handled before the signal takes effect). Without
    /// it, reports are kept for [`Running::take_events`].
    pub on_event: Option<EventHandler>,
}

/// A caller's handler of [`RunEvent`]s (runs on the supervisor thread).
pub type EventHandler = Box<dyn FnMut(RunEvent) + Send>;

impl Default for RunOptions {
    fn default() -> RunOptions {
        RunOptions {
            install: InstallOptions::default(),
            python: false,
            on_crash: true,
            report_signals: Vec::new(),
            follow_forks: false,
            backtrace: BacktraceOptions::default(),
            dwarf_cache: DwarfCache::default(),
            on_event: None,
        }
    }
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("install", &self.install)
            .field("python", &self.python)
            .field("on_crash", &self.on_crash)
            .field("report_signals", &self.report_signals)
            .field("follow_forks", &self.follow_forks)
            .field("backtrace", &self.backtrace)
            .field("on_event", &self.on_event.as_ref().map(|_| "handler"))
            .finish()
    }
}

/// Something the supervisor saw.
#[derive(Debug)]
pub enum RunEvent {
    /// Every thread's backtrace, taken with every thread stopped.
    Report(Report),
    /// A supervised process replaced its program with `exec`: its hooks are gone
    /// (crash reports go on, with the new program's frames).
    Exec {
        /// The process.
        pid: Pid,
        /// The program it runs now (`/proc/PID/exe`).
        program: String,
    },
}

/// The backtraces of one supervised process, and why they were taken.
#[derive(Debug)]
pub struct Report {
    /// The process.
    pub pid: Pid,
    /// Why.
    pub reason: ReportReason,
    /// Every thread's stack, or why it could not be read.
    pub backtrace: Result<Backtrace, Error>,
}

/// Why a [`Report`] was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportReason {
    /// Thread `tid` got fatal `signal`, which kills the process once the report is handled.
    Crash {
        /// The signal number.
        signal: i32,
        /// The thread it hit.
        tid: Tid,
    },
    /// Thread `tid` got `signal`, one of [`RunOptions::report_signals`]; delivered next.
    Signal {
        /// The signal number.
        signal: i32,
        /// The thread it arrived at.
        tid: Tid,
    },
    /// The caller asked ([`Running::report`]), e.g. on a timeout.
    Requested,
}

/// Why [`spawn`] could not start the command with its hooks.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The command was not found (a shell exits 127).
    #[error("{program}: command not found")]
    NotFound {
        /// The command as given.
        program: String,
    },
    /// The command exists but cannot be executed (a shell exits 126).
    #[error("{program}: cannot execute: {source}")]
    NotExecutable {
        /// The command as given.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// The command is setuid or setgid and we may not trace it with its privileges.
    #[error("{program} is set-user-ID or set-group-ID and this user cannot trace it: the kernel would run it without its privileges")]
    Setuid {
        /// The program's path.
        program: String,
    },
    /// We are ourselves traced (e.g. by a debugger or an outer `argstash run
    /// --follow-forks`), and our child would be too, so it cannot be ours.
    #[error("cannot trace {program}: this process is traced by PID {tracer} ({tracer_name}), which traces its children too; run argstash outside it (or without --follow-forks in the outer argstash run)")]
    AlreadyTraced {
        /// The command.
        program: String,
        /// Our tracer.
        tracer: i32,
        /// Its command name.
        tracer_name: String,
    },
    /// Starting the command failed for another reason.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The command.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// The command ended before reaching its entry point (e.g. a missing shared library).
    #[error("{program} ended before its entry point ({})", crate::ptrace::session_error::describe_status(*.status))]
    EndedEarly {
        /// The command.
        program: String,
        /// Its raw wait status (its exit code or signal is the caller's to pass on).
        status: i32,
    },
    /// A `MODULE!NAME` names a library the command has not loaded at its entry point.
    #[error("{module} is not loaded when {program} starts (a library opened later with dlopen?): argstash run hooks libraries mapped before main only; hook {function} later with `argstash inject --pid PID --func {module}!{function}` once it is loaded")]
    NotLoaded {
        /// The command.
        program: String,
        /// The library named.
        module: String,
        /// The function named.
        function: String,
    },
    /// A ptrace step of the start-up failed.
    #[error("cannot start {program} traced: {step} failed: {source}")]
    Trace {
        /// The command.
        program: String,
        /// The step, e.g. `PTRACE_SEIZE`.
        step: &'static str,
        /// The errno.
        source: nix::Error,
    },
    /// The command's entry point could not be found or patched.
    #[error("cannot stop {program} at its entry point: {reason}")]
    Entry {
        /// The command.
        program: String,
        /// Why.
        reason: String,
    },
    /// Installing the hooks failed (the command was killed before its `main`).
    #[error(transparent)]
    Install(Error),
    /// The supervisor is gone (the command ended).
    #[error("process {pid} has ended: nothing to read")]
    Ended {
        /// The process.
        pid: i32,
    },
}

impl RunError {
    /// The exit code a shell would give for this failure: 127 not found, 126 not
    /// executable, the command's own status when it ended early, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::NotFound { .. } => 127,
            RunError::NotExecutable { .. } => 126,
            RunError::EndedEarly { status, .. } => {
                if libc::WIFEXITED(*status) {
                    libc::WEXITSTATUS(*status)
                } else {
                    128 + libc::WTERMSIG(*status)
                }
            }
            _ => 1,
        }
    }
}

/// What the supervisor and the handle share.
#[derive(Default)]
struct Shared {
    state: Mutex<SharedState>,
    changed: Condvar,
}

#[derive(Default)]
struct SharedState {
    /// The command's exit status, once reaped.
    exit: Option<ExitStatus>,
    /// The supervisor thread has ended.
    done: bool,
    /// Requests for the supervisor, numbered.
    requests: Vec<(u64, Request)>,
    /// Requests below this number have been handled.
    handled: u64,
    /// The current doorbell's ringing end.
    bell: Option<OwnedFd>,
    /// Events kept for [`Running::take_events`] (no handler given).
    events: Vec<RunEvent>,
    /// Answers to backtrace requests, by request number.
    answers: Vec<(u64, Result<Backtrace, Error>)>,
    next_request: u64,
}

/// What the caller asks the supervisor for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Request {
    /// Take every thread's backtrace and answer with it.
    Backtrace,
    /// Take a report through the event handler.
    Report,
}

/// A command started by [`spawn`]: its pid, its pipes, its exit.
///
/// Dropping it leaves the command running under its supervisor (as dropping a
/// [`std::process::Child`] leaves the child running).
pub struct Running {
    pid: Pid,
    hooks: Vec<HookInfo>,
    /// The command's stdin, when the `Command` asked for a pipe.
    pub stdin: Option<ChildStdin>,
    /// The command's stdout, when the `Command` asked for a pipe.
    pub stdout: Option<ChildStdout>,
    /// The command's stderr, when the `Command` asked for a pipe.
    pub stderr: Option<ChildStderr>,
    shared: Arc<Shared>,
    pidfd: Option<OwnedFd>,
    started: Duration,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("pid", &self.pid)
            .field("hooks", &self.hooks.len())
            .finish()
    }
}

/// Starts `cmd` with every function of `targets` hooked before its `main` runs,
/// under a supervisor thread that reports crashes as `opts` says.
///
/// `targets` may be [`HookTarget`]s, [`crate::FuncSpec`]s or names (`&str`),
/// as for [`crate::install`]. The `Command`'s stdio settings, environment and
/// directory apply; the command stays in the caller's process group unless the
/// `Command` says otherwise.
///
/// ```
/// use injector::{run, Pid, RunOptions};
/// use std::process::Command;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut cmd = Command::new("sleep");
/// cmd.arg("30");
/// let child = run::spawn(cmd, &["clock_nanosleep"], RunOptions::default())?;
/// assert_eq!(child.hooks()[0].name, "clock_nanosleep");
/// # std::thread::sleep(std::time::Duration::from_millis(100));
/// // Every thread's stack, with the hooked function's stashed arguments.
/// let bt = child.backtrace()?;
/// assert!(bt.threads[0].frames.iter().any(|f| f.stash.is_some()));
/// child.kill()?;
/// assert!(child.wait().signal().is_some());
/// # use std::os::unix::process::ExitStatusExt;
/// # Ok(())
/// # }
/// ```
pub fn spawn<T: Clone + Into<HookTarget>>(
    cmd: Command,
    targets: &[T],
    opts: RunOptions,
) -> Result<Running, RunError> {
    let began = Instant::now();
    let targets: Vec<HookTarget> = targets.iter().cloned().map(Into::into).collect();
    let shared = Arc::new(Shared::default());
    let (tx, rx) = std::sync::mpsc::channel();
    let theirs = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("argstash-run".into())
        .spawn(move || supervise::main(cmd, targets, opts, theirs, tx));
    if let Err(source) = spawned {
        return Err(RunError::Spawn {
            program: String::new(),
            source,
        });
    }
    let started = rx.recv().map_err(|_| RunError::Ended { pid: 0 })??;
    Ok(Running {
        pid: Pid::from_raw(started.pid),
        hooks: started.hooks,
        stdin: started.stdin,
        stdout: started.stdout,
        stderr: started.stderr,
        shared,
        pidfd: started.pidfd,
        started: began.elapsed(),
    })
}

/// What the supervisor hands back once the command runs.
struct Started {
    pid: i32,
    hooks: Vec<HookInfo>,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    pidfd: Option<OwnedFd>,
}

impl Running {
    /// The command's process id.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// The hooks installed before its `main`.
    pub fn hooks(&self) -> &[HookInfo] {
        &self.hooks
    }

    /// How long [`spawn`] took, from the call to the command's first instruction.
    pub fn startup(&self) -> Duration {
        self.started
    }

    /// Waits for the command to end.
    pub fn wait(&self) -> ExitStatus {
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(status) = st.exit {
                return status;
            }
            st = self
                .shared
                .changed
                .wait(st)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Waits at most `timeout` for the command to end.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if st.exit.is_some() {
                return st.exit;
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            st = self
                .shared
                .changed
                .wait_timeout(st, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The exit status, if the command has ended.
    pub fn try_wait(&self) -> Option<ExitStatus> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .exit
    }

    /// Sends `signal` to the command (through a pidfd: never to a reused pid).
    pub fn signal(&self, signal: i32) -> std::io::Result<()> {
        let r = match &self.pidfd {
            // SAFETY: pidfd_send_signal takes a descriptor, a signal number, a null
            // siginfo pointer and flags.
            Some(fd) => unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    signal,
                    std::ptr::null::<libc::siginfo_t>(),
                    0u32,
                )
            },
            // SAFETY: kill takes two integers.
            None => unsafe { libc::kill(self.pid.as_raw(), signal) as libc::c_long },
        };
        if r == 0 {
            Ok(())
        } else {
            let e = std::io::Error::last_os_error();
            // Already ended (and maybe reaped): nothing left to signal.
            if e.raw_os_error() == Some(libc::ESRCH) {
                return Ok(());
            }
            Err(e)
        }
    }

    /// Kills the command (SIGKILL).
    pub fn kill(&self) -> std::io::Result<()> {
        self.signal(libc::SIGKILL)
    }

    /// Every thread's backtrace now, read with every thread stopped by the supervisor.
    pub fn backtrace(&self) -> Result<Backtrace, RunError> {
        let n = self.ask(Request::Backtrace)?;
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(i) = st.answers.iter().position(|(k, _)| *k == n) {
                return st.answers.remove(i).1.map_err(RunError::Install);
            }
            if st.done {
                return Err(RunError::Ended {
                    pid: self.pid.as_raw(),
                });
            }
            st = self
                .shared
                .changed
                .wait(st)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Asks the supervisor for a [`Report`] with reason [`ReportReason::Requested`],
    /// handed to the event handler; returns once it was handled (false: the command had ended).
    pub fn report(&self) -> bool {
        let Ok(n) = self.ask(Request::Report) else {
            return false;
        };
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        while st.handled <= n {
            if st.done {
                return false;
            }
            st = self
                .shared
                .changed
                .wait(st)
                .unwrap_or_else(|e| e.into_inner());
        }
        true
    }

    /// Queues a request, rings the supervisor, and returns the request's number.
    fn ask(&self, kind: Request) -> Result<u64, RunError> {
        let mut st = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.done {
            return Err(RunError::Ended {
                pid: self.pid.as_raw(),
            });
        }
        let n = st.next_request;
        st.next_request += 1;
        st.requests.push((n, kind));
        if let Some(bell) = &st.bell {
            doorbell::ring(bell);
        }
        Ok(n)
    }

    /// The events seen so far when no [`RunOptions::on_event`] handler was given.
    pub fn take_events(&self) -> Vec<RunEvent> {
        std::mem::take(
            &mut self
                .shared
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .events,
        )
    }
}
