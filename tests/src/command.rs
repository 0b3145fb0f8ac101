//! Commands run by the harness: a command in the background with its output
//! collected ([`Background`]), a command or external tool run with a deadline, and
//! polling for a condition. The bottom of the harness: every other module may use it.

use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Give `cmd`'s child `PR_SET_PDEATHSIG = SIGKILL` (and make it exit at once
/// if this process is already gone by then).
pub(crate) fn die_with_parent(cmd: &mut Command) {
    // SAFETY: the closure only calls async-signal-safe functions (prctl, getppid, _exit).
    unsafe {
        let parent = libc::getpid();
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Poll `cond` every 10 ms until it is true (returns true) or `timeout` passes (returns false).
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// How long [`wait_for`] polls before it fails the test.
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(20);

/// Poll `cond` every millisecond until it is true; panics naming `what` after [`WAIT_TIMEOUT`].
#[track_caller]
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < WAIT_TIMEOUT,
            "timed out waiting until {what}"
        );
        thread::sleep(Duration::from_millis(1));
    }
}

/// A command (often `argstash args...`) started in the background with stdout and stderr collected.
pub struct Background {
    child: Child,
    out: Option<thread::JoinHandle<Vec<u8>>>,
    err: Option<thread::JoinHandle<Vec<u8>>>,
    started: Instant,
}

impl Background {
    /// Start `cmd` (stdout and stderr are piped and collected by two threads).
    pub fn spawn(cmd: &mut Command) -> Background {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let collect = |mut r: Box<dyn Read + Send>| {
            thread::spawn(move || {
                let mut v = Vec::new();
                let _ = r.read_to_end(&mut v);
                v
            })
        };
        let out = Some(collect(Box::new(child.stdout.take().unwrap())));
        let err = Some(collect(Box::new(child.stderr.take().unwrap())));
        Background {
            child,
            out,
            err,
            started: Instant::now(),
        }
    }

    /// Process id.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Time since the start.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// SIGKILL it (it may already have exited; not reaped here).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// True once it has exited (checked without blocking).
    pub(crate) fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Wait up to `timeout` for the exit; `None` if it is still running.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_micros(500));
        }
    }

    /// Wait up to `timeout`; if it is still running then, SIGKILL it. Returns
    /// the output and whether it finished by itself in time.
    pub fn finish(mut self, timeout: Duration) -> (Output, bool) {
        let in_time = self.wait_timeout(timeout);
        let status = match in_time {
            Some(s) => s,
            None => {
                self.kill();
                self.child.wait().expect("wait after SIGKILL")
            }
        };
        let stdout = self.out.take().map(|h| h.join().unwrap_or_default());
        let stderr = self.err.take().map(|h| h.join().unwrap_or_default());
        (
            Output {
                status,
                stdout: stdout.unwrap_or_default(),
                stderr: stderr.unwrap_or_default(),
            },
            in_time.is_some(),
        )
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if self.out.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Run a command, capturing stdout and stderr; kill it and panic after `timeout`.
pub fn run_command(cmd: &mut Command, timeout: Duration) -> Output {
    let what = format!("{cmd:?}");
    let (out, in_time) = Background::spawn(cmd).finish(timeout);
    if !in_time {
        panic!(
            "{what} did not finish within {timeout:?}\n--- stdout:\n{}--- stderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// stdout and stderr of an `Output` as text, labelled, for failure messages.
pub fn output_text(out: &Output) -> String {
    format!(
        "status: {}\n--- stdout:\n{}--- stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Run an external tool, panic with its output unless it succeeds; returns stdout.
pub(crate) fn check_tool(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e} (run scripts/setup.sh)"));
    assert!(
        out.status.success(),
        "{what}: {cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: Duration = Duration::from_secs(3);

    #[test]
    fn run_command_captures_and_times_out() {
        let out = run_command(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            LINE,
        );
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");

        let start = Instant::now();
        let r = std::panic::catch_unwind(|| {
            run_command(Command::new("sleep").arg("30"), Duration::from_millis(200))
        });
        assert!(r.is_err());
        assert!(start.elapsed() < Duration::from_secs(10));
    }
}
