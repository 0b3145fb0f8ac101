//! Child processes: a running fixture ([`Target`]), a command in the
//! background ([`Background`]), and running a command or tool with a deadline.

use std::fmt;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::command::{die_with_parent, wait_until};
use crate::elf::{function_bytes, symbol};
use crate::fixtures::{build, build_source, Variant, SOURCE_FLAGS};
use crate::procfs::{
    proc_state, proc_status_field, read_mem, runtime_addr, thread_ids, thread_names,
};

/// How long [`Target::spawn`] waits for the `ready` line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a test waits for output or an exit it knows is coming (loaded machines are slow).
pub const OUTPUT_TIMEOUT: Duration = Duration::from_secs(20);

/// A running fixture process; killed (SIGKILL) and reaped when dropped.
///
/// The child gets `PR_SET_PDEATHSIG = SIGKILL`, so it also dies if the test
/// process dies. Note that the kernel ties this to the *thread* that spawned
/// it: create the `Target` on the thread that uses it (the test's thread),
/// not in a short-lived helper thread.
///
/// The harness never calls `waitpid` on a live child (it polls `/proc`
/// instead), so a test that ptraces the fixture from the test process itself
/// does not get its ptrace-stop notifications stolen.
pub struct Target {
    child: Child,
    pid: i32,
    exe: PathBuf,
    lines: Receiver<String>,
    before_ready: Vec<String>,
    stderr: Arc<Mutex<Vec<u8>>>,
    stdin: Option<ChildStdin>,
    status: Option<ExitStatus>,
}

impl Target {
    /// Build `fixture` in `variant` and [`Target::spawn`] it.
    pub fn start(fixture: &str, variant: Variant) -> Target {
        Target::spawn(&build(fixture, variant))
    }

    /// Like [`Target::start`], with command-line arguments.
    pub fn start_with_args(fixture: &str, variant: Variant, args: &[&str]) -> Target {
        Target::spawn_with_args(&build(fixture, variant), args)
    }

    /// Compile `source` (a test's own C program, [`build_source`] with
    /// [`SOURCE_FLAGS`]) and [`Target::spawn_with_args`] it.
    pub fn spawn_source(name: &str, source: &str, args: &[&str]) -> Target {
        Target::spawn_with_args(&build_source(name, source, SOURCE_FLAGS), args)
    }

    /// Spawn an executable and wait (up to [`READY_TIMEOUT`]) for its ready line:
    /// `ready <pid>`, or a bare `ready` from a program that does not say its pid.
    /// The lines before it are kept ([`Target::before_ready`]).
    pub fn spawn(exe: &Path) -> Target {
        Target::spawn_with_args(exe, &[])
    }

    /// Like [`Target::spawn`], with command-line arguments.
    pub fn spawn_with_args(exe: &Path, args: &[&str]) -> Target {
        let mut cmd = Command::new(exe);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_parent(&mut cmd);
        // A file just written by this test process (a copied executable) can be
        // briefly "busy": another test thread may fork between our open and close,
        // and its child holds the write descriptor until it execs. Retry that case.
        let mut attempts = 0;
        let child = loop {
            match cmd.spawn() {
                Ok(child) => break child,
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempts < 100 => {
                    attempts += 1;
                    thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("spawn {}: {e}", exe.display()),
            }
        };
        let pid = child.id() as i32;
        let mut target = Target::collect_output(child, pid, exe);
        let want = format!("ready {pid}");
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match target
                .lines
                .recv_timeout(left.min(Duration::from_millis(100)))
            {
                Ok(line) if line == want || line == "ready" => return target,
                Ok(line) if line.starts_with("ready ") => {
                    target.fail(&format!("bad ready line {line:?}, expected {want:?}"))
                }
                Ok(line) => target.before_ready.push(line),
                Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(RecvTimeoutError::Timeout) => {
                    target.fail(&format!("no ready line within {READY_TIMEOUT:?}"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = target.wait_exit(Duration::from_secs(2));
                    target.fail("stdout closed before the ready line")
                }
            }
        }
    }

    /// Spawn `exe` as pid 1 of a new pid namespace (`unshare --pid --fork --mount-proc`).
    ///
    /// The returned `Target`'s pid is the fixture's pid in *our* namespace; its
    /// ready line says `ready 1`. Run argstash inside with
    /// [`run_in_namespace_of`](crate::cli::run_in_namespace_of). Killing the
    /// fixture ends `unshare`, which is then reaped.
    pub fn spawn_as_namespace_init(exe: &Path) -> Target {
        let mut cmd = Command::new("unshare");
        cmd.args(["--pid", "--fork", "--mount-proc", "--kill-child"])
            .arg(exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn unshare {}: {e}", exe.display()));
        let unshare_pid = child.id() as i32;
        let mut target = Target::collect_output(child, unshare_pid, exe);
        match target.lines.recv_timeout(READY_TIMEOUT) {
            Ok(l) if l == "ready 1" => {}
            other => target.fail(&format!(
                "expected `ready 1` from the namespace, got {other:?}"
            )),
        }
        let children =
            fs::read_to_string(format!("/proc/{unshare_pid}/task/{unshare_pid}/children"))
                .unwrap_or_default();
        match children.split_whitespace().collect::<Vec<_>>().as_slice() {
            [one] => target.pid = one.parse().expect("numeric child pid"),
            other => target.fail(&format!("unshare has children {other:?}, expected one")),
        }
        target
    }

    /// A `Target` for a just-spawned `child` (stdin, stdout and stderr piped),
    /// with one thread collecting its stdout lines and one its stderr bytes.
    fn collect_output(mut child: Child, pid: i32, exe: &Path) -> Target {
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("piped stdout");
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut err_pipe = child.stderr.take().expect("piped stderr");
        let sink = stderr.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Target {
            stdin: child.stdin.take(),
            child,
            pid,
            exe: exe.to_path_buf(),
            lines,
            before_ready: Vec::new(),
            stderr,
            status: None,
        }
    }

    /// The stdout lines the process printed before its ready line.
    pub fn before_ready(&self) -> &[String] {
        &self.before_ready
    }

    /// Process id of the fixture.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Path of the running executable.
    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// Next stdout line, or `None` if none arrives within `timeout` (or stdout closed).
    pub fn next_line(&self, timeout: Duration) -> Option<String> {
        self.lines.recv_timeout(timeout).ok()
    }

    /// Next stdout line; panics (showing the fixture's stderr) if none arrives in time.
    pub fn expect_line(&self, timeout: Duration) -> String {
        match self.next_line(timeout) {
            Some(l) => l,
            None => self.fail(&format!("no stdout line within {timeout:?}")),
        }
    }

    /// Skip lines until one satisfies `pred` and return it; panics on timeout.
    pub fn wait_for_line(&mut self, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        let mut last = None;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if pred(&l) => return l,
                Ok(l) => last = Some(l),
                Err(_) => self.fail(&format!(
                    "no matching stdout line within {timeout:?} (last line: {last:?})"
                )),
            }
        }
    }

    /// All stdout lines already received, without waiting.
    pub fn drain_lines(&mut self) -> Vec<String> {
        self.lines.try_iter().collect()
    }

    /// Everything the fixture wrote to stderr so far (lossy UTF-8).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Write `text` to the fixture's stdin (sigwait.c reads lines from it).
    pub fn write_stdin(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().expect("stdin already closed");
        stdin
            .write_all(text.as_bytes())
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("write to fixture stdin: {e}"));
    }

    /// Write `text` to the fixture's stdin; false if that failed (the process is gone).
    pub fn try_write_stdin(&mut self, text: &str) -> bool {
        match self.stdin.as_mut() {
            Some(stdin) => stdin
                .write_all(text.as_bytes())
                .and_then(|()| stdin.flush())
                .is_ok(),
            None => false,
        }
    }

    /// Close the fixture's stdin (it sees EOF).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Send signal `sig` (e.g. `libc::SIGUSR1`) to the process.
    pub fn signal(&self, sig: i32) {
        // SAFETY: plain syscall on our own child's pid.
        let r = unsafe { libc::kill(self.pid, sig) };
        assert_eq!(
            r,
            0,
            "kill({}, {sig}): {}",
            self.pid,
            io::Error::last_os_error()
        );
    }

    /// True while the process exists and is not a zombie (checked via `/proc`, no `waitpid`).
    pub fn is_alive(&self) -> bool {
        self.status.is_none() && !matches!(proc_state(self.pid), None | Some('Z') | Some('X'))
    }

    /// Panic (with exit status and stderr) unless the process is alive and printed no `WRONG`.
    pub fn assert_healthy(&mut self) {
        if !self.is_alive() {
            let _ = self.wait_exit(Duration::from_secs(2));
            self.fail("fixture is not running");
        }
        if self.stderr_text().contains("WRONG") {
            self.fail("fixture reported a wrong result");
        }
    }

    /// Wait up to `timeout` for the process to exit; reaps it and returns its status.
    ///
    /// Reaping is bounded too (`waitpid(WNOHANG)` polled for up to 2 s more):
    /// a zombie that another live process still traces cannot be reaped by its
    /// parent until that tracer lets it go, and a test must not hang on that.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if self.status.is_none() {
            let pid = self.pid;
            if wait_until(timeout, || {
                matches!(proc_state(pid), None | Some('Z') | Some('X'))
            }) {
                let mut status = None;
                wait_until(Duration::from_secs(2), || {
                    status = self.child.try_wait().ok().flatten();
                    status.is_some()
                });
                self.status = status;
                if status.is_some() {
                    // Give the pipe readers a moment to collect the last output.
                    thread::sleep(Duration::from_millis(20));
                }
            }
        }
        self.status
    }

    /// Close stdin (the process sees EOF), then [`Target::wait_exit`].
    pub fn end_input_and_wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.close_stdin();
        self.wait_exit(timeout)
    }

    /// SIGKILL the process and reap it; returns its exit status if it could be reaped.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            // SAFETY: plain syscall on our own (not yet reaped) child.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            if self.wait_exit(Duration::from_secs(10)).is_none() {
                eprintln!(
                    "argstash-tests: fixture {} (pid {}) did not die after SIGKILL (state {:?}, tracer {:?})",
                    self.exe.display(),
                    self.pid,
                    proc_state(self.pid),
                    proc_status_field(self.pid, "TracerPid")
                );
            }
        }
        self.status
    }

    /// SIGKILL the process without reaping it (it stays a zombie child until
    /// [`Target::wait_exit`] or drop); for tests of a tracer meeting a dead target.
    pub fn kill_unreaped(&self) {
        if self.status.is_none() {
            // SAFETY: plain kill(2) of our own child, not yet reaped.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
    }

    /// Runtime address of `sym` in this process (see [`runtime_addr`]).
    pub fn addr_of(&self, sym: &str) -> u64 {
        runtime_addr(self.pid, &self.exe, sym)
    }

    /// Thread ids of the process (see [`thread_ids`]).
    pub fn tids(&self) -> Vec<i32> {
        thread_ids(self.pid)
    }

    /// Id of the thread called `name`, waiting up to `timeout` for it to show
    /// (a fixture's threads may name themselves after it printed `ready`).
    pub fn tid_named(&self, name: &str, timeout: Duration) -> i32 {
        let mut tid = None;
        wait_until(timeout, || {
            tid = thread_names(self.pid)
                .into_iter()
                .find(|(_, n)| n == name)
                .map(|(tid, _)| tid);
            tid.is_some()
        });
        tid.unwrap_or_else(|| panic!("no thread {name:?} in {:?}", thread_names(self.pid)))
    }

    /// The live bytes of function `sym` (its `st_size` bytes at its runtime address).
    pub fn live_function_bytes(&self, sym: &str) -> Vec<u8> {
        let s = symbol(&self.exe, sym)
            .unwrap_or_else(|| panic!("no symbol {sym} in {}", self.exe.display()));
        read_mem(self.pid, self.addr_of(sym), s.size as usize)
    }

    /// Assert the live bytes of function `sym` equal the file's (nothing patched).
    #[track_caller]
    pub fn assert_function_pristine(&self, sym: &str) {
        let live = self.live_function_bytes(sym);
        assert_eq!(
            live,
            function_bytes(&self.exe, sym),
            "{sym} in pid {} differs from {}",
            self.pid,
            self.exe.display()
        );
    }

    /// Panic with `msg`, the process state and its stderr.
    #[track_caller]
    pub fn fail(&self, msg: &str) -> ! {
        panic!(
            "fixture {} (pid {}): {msg}\n  exit status: {:?}, /proc state: {:?}\n  stderr:\n{}",
            self.exe.display(),
            self.pid,
            self.status,
            proc_state(self.pid),
            indent(&self.stderr_text())
        )
    }
}

/// Queue signal `sig` with the integer `value` to process `pid` (`sigqueue(3)`: `si_code` `SI_QUEUE`).
#[track_caller]
pub fn sigqueue(pid: i32, sig: i32, value: i32) {
    let v = libc::sigval {
        sival_ptr: value as usize as *mut libc::c_void,
    };
    // SAFETY: sigqueue takes integers and a sigval by value.
    let r = unsafe { libc::sigqueue(pid, sig, v) };
    assert_eq!(
        r,
        0,
        "sigqueue({pid}, {sig}): {}",
        io::Error::last_os_error()
    );
}

impl Drop for Target {
    fn drop(&mut self) {
        self.kill();
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("pid", &self.pid)
            .field("exe", &self.exe)
            .finish()
    }
}

fn indent(text: &str) -> String {
    if text.is_empty() {
        return "    (empty)".into();
    }
    text.lines().map(|l| format!("    {l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Variant;

    const LINE: Duration = Duration::from_secs(3);

    #[test]
    fn wrong_result_is_reported() {
        // A fixture that dies must make Target report it, with its stderr.
        let mut t = Target::start("seed", Variant::O2G);
        t.signal(libc::SIGABRT);
        let status = t.wait_exit(LINE).expect("dies on SIGABRT");
        assert!(!status.success());
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.assert_healthy()))
            .expect_err("assert_healthy must panic on a dead fixture");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("not running"), "{msg}");
    }
}
