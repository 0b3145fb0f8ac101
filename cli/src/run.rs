//! `argstash run [OPTIONS] -- CMD [ARGS...]`: start CMD with hooks in place
//! before its `main`, print every thread's backtrace when it crashes (or times
//! out, or gets a chosen signal), and otherwise stay out of the way: CMD keeps
//! argstash's stdio, process group and terminal, and argstash ends as CMD ends.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

use clap::Args;
use injector::render::{backtrace_json, backtrace_text, View};
use injector::{FuncSpec, HookTarget, ReportReason, RunError, RunEvent, RunOptions};

/// Options of `argstash run`.
#[derive(Args)]
pub struct RunArgs {
    /// Function to hook before main: NAME, MODULE!NAME or 0xADDR, optionally with its
    /// parameter list ('bar(int, const char *)'). Repeatable.
    #[arg(long = "func", value_name = "FUNC")]
    funcs: Vec<String>,
    /// Hook CPython's frame evaluator too (as `inject --python`).
    #[arg(long, action = clap::ArgAction::Count)]
    python: u8,
    /// How each hook stashes, and how its unwind information is registered (as `inject`).
    #[command(flatten)]
    stash: crate::args::StashArgs,
    /// Print every thread's backtrace when the program gets a fatal signal (SIGSEGV,
    /// SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP), before it dies of it.
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"])]
    on_crash: String,
    /// Also append each report's `bt --json` object, one per line, to FILE.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// After SECS seconds: print the backtraces, kill the program (SIGKILL), exit 124.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout, allow_hyphen_values = true)]
    timeout: Option<Duration>,
    /// Print the backtraces whenever the program gets SIG (e.g. SIGUSR2), then deliver it. Repeatable.
    #[arg(long = "on-signal", value_name = "SIG", value_parser = parse_signal)]
    on_signal: Vec<i32>,
    /// Report crashes of the processes the program forks too.
    #[arg(long)]
    follow_forks: bool,
    /// The command and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<OsString>,
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!(
            "{s}: give a positive number of seconds (leave --timeout out for no limit)"
        ));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| e.to_string())
}

/// `SIGUSR2`, `USR2` or `12`.
fn parse_signal(s: &str) -> Result<i32, String> {
    if let Ok(n) = s.parse::<i32>() {
        if (1..=64).contains(&n) && n != libc::SIGKILL && n != libc::SIGSTOP {
            return Ok(n);
        }
        return Err(format!("{n}: not a signal that can be caught"));
    }
    let name = s.to_ascii_uppercase();
    let name = if name.starts_with("SIG") {
        name
    } else {
        format!("SIG{name}")
    };
    match name.parse::<nix::sys::signal::Signal>() {
        Ok(nix::sys::signal::Signal::SIGKILL) | Ok(nix::sys::signal::Signal::SIGSTOP) => {
            Err(format!("{s}: cannot be caught, so it cannot be reported"))
        }
        Ok(sig) => Ok(sig as i32),
        Err(_) => Err(format!("{s}: not a signal name (e.g. SIGUSR2)")),
    }
}

/// The child's pid, for the signal forwarder.
static CHILD: AtomicI32 = AtomicI32::new(0);

/// Passes a signal sent to argstash itself on to the child. Signals from the
/// terminal (Ctrl-C, Ctrl-\) reach the child directly, as it shares our
/// process group: those (`SI_KERNEL`) are not forwarded, or it would get two.
extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    let pid = CHILD.load(Ordering::Relaxed);
    if code == libc::SI_KERNEL {
        return;
    }
    if pid > 0 {
        // SAFETY: kill is async-signal-safe and takes two integers.
        unsafe {
            libc::kill(pid, sig);
        }
    } else {
        // No child yet: passed on once there is one (`forward_pending`).
        PENDING.fetch_or(1 << sig, Ordering::Relaxed);
    }
}

/// Signals that came before the child's pid was known (bit `sig`).
static PENDING: AtomicU64 = AtomicU64::new(0);

/// Records the child's pid for the forwarder and passes on what came before.
fn forward_pending(pid: i32) {
    CHILD.store(pid, Ordering::Relaxed);
    let pending = PENDING.swap(0, Ordering::Relaxed);
    for sig in FORWARDED {
        if pending & (1 << sig) != 0 {
            // SAFETY: kill takes two integers.
            unsafe {
                libc::kill(pid, sig);
            }
        }
    }
}

const FORWARDED: [i32; 7] = [
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
];

fn install_forwarder() {
    for sig in FORWARDED {
        // SAFETY: a zeroed sigaction is valid; the handler is an extern "C" fn of
        // the SA_SIGINFO shape, and sigaction only reads the struct.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = forward as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// `SIGSEGV` for 11.
fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

/// Ends argstash the way the child ended: its exit code, or death by its signal
/// (with no core of our own), so a shell or test runner sees what it would have.
fn exit_like(status: std::process::ExitStatus) -> ! {
    if let Some(code) = status.code() {
        std::process::exit(code);
    }
    let sig = status.signal().unwrap_or(libc::SIGKILL);
    // SAFETY: plain system calls on integers and local structs: no core file of
    // ours, the default action back, the signal unblocked, then raised.
    unsafe {
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    std::process::exit(128 + sig);
}

/// Runs `argstash run`; returns only when argstash fails before the child starts.
pub fn main(a: RunArgs) -> i32 {
    let mut targets: Vec<HookTarget> = Vec::new();
    let mut names = Vec::new();
    for f in &a.funcs {
        match injector::names::split_function(f) {
            Ok((name, signature)) => {
                names.push(name);
                targets.push(HookTarget {
                    function: FuncSpec::parse(name),
                    signature,
                    stack_words: None,
                });
            }
            Err(e) => {
                eprintln!("argstash: {}", crate::errors::error_text(&e.into()));
                return 1;
            }
        }
    }
    match a.stash.function_windows(&names) {
        Ok(windows) => {
            for (name, n) in windows {
                for (t, _) in targets.iter_mut().zip(&names).filter(|(_, m)| **m == name) {
                    t.stack_words = Some(n);
                }
            }
        }
        Err(e) => {
            eprintln!("argstash: {e}");
            return 1;
        }
    }
    let program = a.command[0].to_string_lossy().into_owned();
    let mut cmd = std::process::Command::new(&a.command[0]);
    cmd.args(&a.command[1..]);
    let report_file = match &a.report {
        Some(p) => match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
        {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("argstash: --report {}: {e}", p.display());
                return 1;
            }
        },
        None => None,
    };
    let shown = program.clone();
    let mut file = report_file;
    let on_event = move |event: RunEvent| match event {
        RunEvent::Report(r) => {
            let why = match r.reason {
                ReportReason::Crash { signal, tid } => format!(
                    "{shown} (pid {}) got {} in thread {tid}",
                    r.pid,
                    signal_name(signal)
                ),
                ReportReason::Signal { signal, tid } => format!(
                    "{shown} (pid {}) got {} in thread {tid}",
                    r.pid,
                    signal_name(signal)
                ),
                ReportReason::Requested => format!("{shown} (pid {}) timed out", r.pid),
            };
            let mut err = std::io::stderr().lock();
            match &r.backtrace {
                Ok(bt) => {
                    let _ = write!(
                        err,
                        "argstash: {why}; every thread's backtrace:\n{}",
                        backtrace_text(bt, View::All)
                    );
                    if let Some(f) = file.as_mut() {
                        let _ = writeln!(f, "{}", backtrace_json(bt, View::All));
                    }
                }
                Err(e) => {
                    let _ = writeln!(err, "argstash: {why}; its backtraces cannot be read: {e}");
                }
            }
        }
        RunEvent::Exec { pid, program } => {
            eprintln!(
                "argstash: process {pid} replaced its program with {program} (exec): its hooks are gone; crash reports go on, without stashed arguments"
            );
        }
    };
    let opts = RunOptions {
        install: a.stash.install_options(),
        python: a.python > 0,
        on_crash: a.on_crash == "on",
        report_signals: a.on_signal.clone(),
        follow_forks: a.follow_forks,
        backtrace: Default::default(),
        dwarf_cache: injector::DwarfCache::from_env(),
        on_event: Some(Box::new(on_event)),
    };
    // Before the child starts: a signal that comes while it starts (the child
    // can print and be signalled before spawn returns) must not end argstash,
    // the tracer, which would take the child's own copy of the signal with it.
    install_forwarder();
    let child = match injector::run::spawn(cmd, &targets, opts) {
        Ok(c) => c,
        Err(RunError::Setuid { program: p }) => {
            eprintln!(
                "argstash: warning: {p} is set-user-ID or set-group-ID and cannot be traced by this user with its privileges: running it untraced, without hooks or crash reports"
            );
            let e = std::process::Command::new(&a.command[0])
                .args(&a.command[1..])
                .exec();
            eprintln!("argstash: {program}: {e}");
            return 126;
        }
        Err(e @ RunError::EndedEarly { .. }) => {
            eprintln!("argstash: {e}");
            return e.exit_code();
        }
        Err(RunError::Install(e)) => {
            // With its hint, in command-line syntax, as `inject` prints it.
            eprintln!("argstash: {}", crate::errors::error_text(&e.into()));
            return 1;
        }
        Err(e) => {
            let code = e.exit_code();
            // With the hint of an install error, in this command line's terms.
            eprintln!("argstash: {}", crate::errors::error_text(&e.into()));
            return code;
        }
    };
    forward_pending(child.pid().as_raw());
    let status = match a.timeout {
        Some(limit) => match child.wait_timeout(limit) {
            Some(s) => s,
            None => {
                child.report();
                let _ = child.kill();
                child.wait();
                return 124;
            }
        },
        None => child.wait(),
    };
    if status.signal() == Some(libc::SIGKILL) {
        eprintln!(
            "argstash: {program} (pid {}) was killed by SIGKILL: no backtrace is possible (SIGKILL cannot be caught, even by a tracer)",
            child.pid()
        );
    }
    exit_like(status)
}
