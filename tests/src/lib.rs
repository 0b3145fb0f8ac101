//! Test harness for argstash's end-to-end tests.
//!
//! What it gives a test:
//! - [`build`]: compile a C fixture from `tests/fixtures/` in a chosen
//!   [`Variant`] (optimisation, PIE or not, extra flags) into a content-hashed
//!   cache under `target/fixtures/`;
//! - [`Target`]: a running fixture, synchronised on its `ready <pid>` line,
//!   whose further stdout lines a test can read; killed and reaped on drop;
//! - [`argstash`], [`run`], [`run_ok`], [`run_json`], [`expect_fail`]: run
//!   the real `argstash` binary with a timeout;
//! - `/proc` and ELF helpers: [`read_mem`], [`file_bytes_at_vaddr`],
//!   [`symbol`], [`runtime_addr`], [`thread_ids`], [`tracer_pid`],
//!   [`proc_state`], and an objdump wrapper ([`disassemble`],
//!   [`branch_targets`]) that gives an oracle independent of the injector's
//!   own decoder.
//!
//! External tools used: `cc`, `strip`, `nm`, `objdump` (installed by
//! `scripts/setup.sh`). Everything here panics with a descriptive message on
//! failure: it is meant for tests.
//!
//! Constants the fixtures promise (arguments, results, thread counts) are in
//! [`consts`]; the header comment of each `tests/fixtures/*.c` documents the
//! rest of its behaviour.

#![warn(missing_docs)]

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fmt;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// Names of all fixtures (`tests/fixtures/<name>.c`).
pub const FIXTURES: &[&str] = &[
    "seed",
    "threads",
    "riprel",
    "badfuncs",
    "sigwait",
    "ambig",
    "crowded",
    "prologues",
    "manyargs",
    "crash",
    "lifecycle",
    "edgefuncs",
    "abiargs",
    "dwarfargs",
    "deepstack",
    "tailcall",
    "modnames",
    "busy_malloc",
    "busy_dlopen",
    "busy_printf",
    "pause_workers",
];

/// How long [`Target::spawn`] waits for the `ready` line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Default timeout of [`run`] and friends for one `argstash` invocation.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Extra flags that turn on CET instrumentation (`endbr64` at function entry).
pub const CET: &[&str] = &["-fcf-protection=full"];

/// Constants the fixtures guarantee (see each fixture's header comment).
pub mod consts {
    /// seed.c: main calls `foo(SEED_FOO_ARG)`.
    pub const SEED_FOO_ARG: i64 = 5;
    /// seed.c: foo calls `bar(SEED_BAR_ARG)` (= foo_arg + 23).
    pub const SEED_BAR_ARG: i64 = 28;
    /// seed.c: value `foo(5)` returns and main prints (`iter N result 58`).
    pub const SEED_RESULT: i64 = 58;
    /// threads.c: number of threads calling `work`.
    pub const THREADS_WORKERS: usize = 8;
    /// threads.c: total threads once ready (main + workers + "parked").
    pub const THREADS_TOTAL: usize = 10;
    /// threads.c: the argument the "parked" thread passes to `parked(long)`.
    pub const THREADS_PARKED_TAG: i64 = 0x1122_3344_5566_7788;
    /// sigwait.c: the argument the "sleeper" thread passes to `sleeper_fn`.
    pub const SIGWAIT_SLEEPER_TAG: i64 = 0x51ee9;
    /// manyargs.c: the eight arguments main passes to `eight` (g and h on the stack).
    pub const MANYARGS_ARGS: [i64; 8] = [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88];
    /// manyargs.c: what `eight` returns for them (a + 2b + ... + 8h).
    pub const MANYARGS_RESULT: i64 = 0x11 * 204;
    /// lifecycle.c: the tag the main loop passes to `nap`.
    pub const LIFECYCLE_NAP_TAG: u64 = 0x4e41_500a;
    /// lifecycle.c: the tag a forked child passes to `nap`.
    pub const LIFECYCLE_CHILD_TAG: u64 = 0xc4_1d0a;
    /// lifecycle.c: how deep `recurse` goes each round.
    pub const LIFECYCLE_RECURSE_DEPTH: u64 = 10_000;
}

// ---------------------------------------------------------------------------
// Building fixtures
// ---------------------------------------------------------------------------

/// Optimisation / debug-info level of a fixture build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Opt {
    /// `-O0 -g`.
    O0g,
    /// `-O2 -g`.
    O2g,
    /// `-O2 -g`, then `strip --strip-debug` (symbol table kept, same code as `O2g`).
    O2,
}

/// One way of compiling a fixture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    /// Optimisation and debug info.
    pub opt: Opt,
    /// `-fPIE -pie` when true, `-fno-pie -no-pie` when false.
    pub pie: bool,
    /// Appended last to the `cc` command line (so they override the defaults).
    pub extra_flags: &'static [&'static str],
}

impl Variant {
    /// `-O2 -g`, PIE: the default build.
    pub const O2G: Variant = Variant::new(Opt::O2g, true);

    /// A variant without extra flags.
    pub const fn new(opt: Opt, pie: bool) -> Variant {
        Variant {
            opt,
            pie,
            extra_flags: &[],
        }
    }

    /// The same variant with `flags` as its extra flags.
    pub const fn with_flags(self, flags: &'static [&'static str]) -> Variant {
        Variant {
            extra_flags: flags,
            ..self
        }
    }

    /// The same variant built with CET (`-fcf-protection=full`, `endbr64`).
    pub const fn cet(self) -> Variant {
        self.with_flags(CET)
    }

    /// Whether this is an `-O2` build (where the fixtures' -O2 code shapes hold).
    pub fn optimized(&self) -> bool {
        matches!(self.opt, Opt::O2g | Opt::O2)
    }

    /// Whether the extra flags turn on CET (`endbr64` at function entry).
    pub fn has_cet(&self) -> bool {
        self.extra_flags
            .iter()
            .rev()
            .find(|f| f.starts_with("-fcf-protection"))
            .is_some_and(|f| *f != "-fcf-protection=none")
    }

    /// The six basic variants: {O0g, O2g, O2} x {PIE, no-PIE}.
    pub fn all() -> Vec<Variant> {
        let mut v = Vec::new();
        for opt in [Opt::O0g, Opt::O2g, Opt::O2] {
            for pie in [true, false] {
                v.push(Variant::new(opt, pie));
            }
        }
        v
    }

    /// [`Variant::all`] plus the CET version of each.
    pub fn all_with_cet() -> Vec<Variant> {
        let mut v = Variant::all();
        v.extend(Variant::all().into_iter().map(Variant::cet));
        v
    }

    /// Short name used in file names and messages, e.g. `O2g-pie-cet`.
    pub fn name(&self) -> String {
        let mut s = format!("{:?}-{}", self.opt, if self.pie { "pie" } else { "nopie" });
        if self.extra_flags == CET {
            s.push_str("-cet");
        } else if !self.extra_flags.is_empty() {
            s.push_str("-x");
        }
        s
    }

    /// The full `cc` argument list except input and output files.
    pub fn cc_flags(&self) -> Vec<String> {
        let mut f: Vec<&str> = match self.opt {
            Opt::O0g => vec!["-O0", "-g"],
            Opt::O2g | Opt::O2 => vec!["-O2", "-g"],
        };
        f.extend(["-Wall", "-Wextra", "-pthread", "-fcf-protection=none"]);
        f.extend(if self.pie {
            ["-fPIE", "-pie"]
        } else {
            ["-fno-pie", "-no-pie"]
        });
        f.extend(self.extra_flags);
        f.into_iter().map(String::from).collect()
    }
}

impl Default for Variant {
    fn default() -> Self {
        Variant::O2G
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// Directory holding the fixture sources (`tests/fixtures`).
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Path of a fixture's source, e.g. `fixture_path("seed")` (a `.c` suffix is optional;
/// C++ fixtures are named with their `.cpp` suffix, e.g. `"busy_throw.cpp"`).
pub fn fixture_path(name: &str) -> PathBuf {
    let file = if name.ends_with(".c") || name.ends_with(".cpp") {
        name.to_string()
    } else {
        format!("{name}.c")
    };
    let p = fixtures_dir().join(file);
    assert!(p.is_file(), "no fixture source {}", p.display());
    p
}

/// Root of the workspace (parent of `tests/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests crate has a parent directory")
        .to_path_buf()
}

/// Cargo's profile directory this test executable was built into (`target/debug`).
///
/// Found from `std::env::current_exe()`: test executables live in
/// `<profile dir>/deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("exe has a directory");
    if dir.file_name() == Some(OsStr::new("deps")) {
        dir.parent().expect("deps has a parent").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// Cache directory for compiled fixtures: `$ARGSTASH_FIXTURE_DIR`, else `target/fixtures`.
pub fn fixture_cache_dir() -> PathBuf {
    let dir = match std::env::var_os("ARGSTASH_FIXTURE_DIR") {
        Some(d) => PathBuf::from(d),
        None => match profile_dir().parent() {
            Some(target) => target.join("fixtures"),
            None => std::env::temp_dir().join("argstash-fixtures"),
        },
    };
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// Bump when the build recipe changes in a way the hash would not see.
const RECIPE_VERSION: &str = "argstash-fixtures-1";

/// 64-bit FNV-1a: a hash that is stable across Rust versions (file names depend on it).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.iter().chain(&[0xffu8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// `cc --version` output, part of the cache key.
fn cc_identity() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let out = Command::new("cc")
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("cannot run `cc --version` ({e}); run scripts/setup.sh"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
}

/// Compile `fixture` (a name from [`FIXTURES`]) in `variant`; returns the executable's path.
///
/// A name ending in `.cpp` (e.g. `"busy_throw.cpp"`) is a C++ fixture, compiled
/// with `c++` and the same flags.
///
/// The output is cached in [`fixture_cache_dir`] under a name containing a
/// hash of the sources (the fixture and every `.h` in `tests/fixtures`), the
/// flags and the compiler version, so unchanged fixtures are not rebuilt.
/// Safe to call concurrently from many threads and processes: each build
/// goes to a unique temporary name and is renamed into place.
pub fn build(fixture: &str, variant: Variant) -> PathBuf {
    type Memo = Mutex<HashMap<(String, Variant), Arc<OnceLock<PathBuf>>>>;
    static BUILDS: OnceLock<Memo> = OnceLock::new();
    let cell = BUILDS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry((fixture.to_string(), variant))
        .or_default()
        .clone();
    cell.get_or_init(|| build_uncached(fixture, variant))
        .clone()
}

fn build_uncached(fixture: &str, variant: Variant) -> PathBuf {
    let src = fixture_path(fixture);
    let flags = variant.cc_flags();
    let strip = variant.opt == Opt::O2;
    let compiler = if fixture.ends_with(".cpp") {
        "c++"
    } else {
        "cc"
    };

    let mut key: Vec<Vec<u8>> = vec![
        RECIPE_VERSION.into(),
        fixture.into(),
        fs::read(&src).unwrap_or_else(|e| panic!("read {}: {e}", src.display())),
        cc_identity().into(),
        vec![u8::from(strip)],
    ];
    key.extend(flags.iter().map(|f| f.as_bytes().to_vec()));
    if compiler != "cc" {
        key.push(compiler.into());
    }
    let mut headers: Vec<PathBuf> = fs::read_dir(fixtures_dir())
        .expect("read fixtures dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension() == Some(OsStr::new("h")))
        .collect();
    headers.sort();
    for h in &headers {
        key.push(h.file_name().unwrap().as_encoded_bytes().to_vec());
        key.push(fs::read(h).expect("read header"));
    }
    let parts: Vec<&[u8]> = key.iter().map(Vec::as_slice).collect();
    let hash = fnv1a(&parts);

    let dir = fixture_cache_dir();
    let out = dir.join(format!("{fixture}-{}-{hash:016x}", variant.name()));
    if out.is_file() {
        return out;
    }

    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{fixture}-{hash:016x}.tmp-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let mut cmd = Command::new(compiler);
    cmd.args(&flags).arg("-o").arg(&tmp).arg(&src);
    check_tool(&mut cmd, &format!("compile fixture {fixture} ({variant})"));
    if strip {
        check_tool(
            Command::new("strip").arg("--strip-debug").arg(&tmp),
            &format!("strip fixture {fixture} ({variant})"),
        );
    }
    if out.is_file() {
        // Someone else finished first; theirs is identical.
        let _ = fs::remove_file(&tmp);
    } else {
        fs::rename(&tmp, &out)
            .unwrap_or_else(|e| panic!("rename {} -> {}: {e}", tmp.display(), out.display()));
    }
    out
}

/// Run an external tool, panic with its output unless it succeeds; returns stdout.
fn check_tool(cmd: &mut Command, what: &str) -> String {
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

// ---------------------------------------------------------------------------
// Running fixtures
// ---------------------------------------------------------------------------

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
    stderr: Arc<Mutex<Vec<u8>>>,
    stdin: Option<ChildStdin>,
    status: Option<ExitStatus>,
}

impl Target {
    /// Build `fixture` in `variant` and [`Target::spawn`] it.
    pub fn start(fixture: &str, variant: Variant) -> Target {
        Target::spawn(&build(fixture, variant))
    }

    /// Spawn an executable and wait (up to [`READY_TIMEOUT`]) for its `ready <pid>` line.
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
        // A file just written by this test process (a copied executable) can be
        // briefly "busy": another test thread may fork between our open and close,
        // and its child holds the write descriptor until it execs. Retry that case.
        let mut attempts = 0;
        let mut child = loop {
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

        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("piped stdout");
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(l).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
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

        let mut target = Target {
            stdin: child.stdin.take(),
            child,
            pid,
            exe: exe.to_path_buf(),
            lines,
            stderr,
            status: None,
        };
        let want = format!("ready {pid}");
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match target
                .lines
                .recv_timeout(left.min(Duration::from_millis(100)))
            {
                Ok(line) if line == want => return target,
                Ok(line) if line.starts_with("ready ") => {
                    target.fail(&format!("bad ready line {line:?}, expected {want:?}"))
                }
                Ok(_) => {}
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

    /// Process id of the fixture.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Path of the running executable.
    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// Next stdout line, or `None` if none arrives within `timeout` (or stdout closed).
    pub fn next_line(&mut self, timeout: Duration) -> Option<String> {
        self.lines.recv_timeout(timeout).ok()
    }

    /// Next stdout line; panics (showing the fixture's stderr) if none arrives in time.
    pub fn expect_line(&mut self, timeout: Duration) -> String {
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

    /// Runtime address of `sym` in this process (see [`runtime_addr`]).
    pub fn addr_of(&self, sym: &str) -> u64 {
        runtime_addr(self.pid, &self.exe, sym)
    }

    /// Thread ids of the process (see [`thread_ids`]).
    pub fn tids(&self) -> Vec<i32> {
        thread_ids(self.pid)
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

// ---------------------------------------------------------------------------
// Running argstash
// ---------------------------------------------------------------------------

/// Path of the `argstash` binary (package `argstash` in `cli/`), built on first use.
///
/// `env!("CARGO_BIN_EXE_argstash")` only exists for integration tests of the
/// `argstash` package itself, and `cargo test` does not build a package's
/// binaries for another package's tests. So: `$ARGSTASH_BIN` if set;
/// otherwise, once per test process, run `cargo build -p argstash` (with
/// `--release` when this test executable is a release build; a no-op when
/// up to date, and it keeps the binary from being stale) and return
/// `<profile dir>/argstash`, found next to this test executable
/// (`target/<profile>/deps/..`). Cargo releases its build lock before it
/// runs tests, so the nested build does not deadlock.
pub fn argstash() -> PathBuf {
    if let Some(p) = std::env::var_os("ARGSTASH_BIN") {
        return PathBuf::from(p);
    }
    static BUILD: Once = Once::new();
    let profile = profile_dir();
    let bin = profile.join("argstash");
    BUILD.call_once(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(workspace_root())
            .args(["build", "--quiet", "-p", "argstash", "--bin", "argstash"]);
        if profile.file_name() == Some(OsStr::new("release")) {
            cmd.arg("--release");
        }
        // Same target dir as this executable's (cargo marks its root with CACHEDIR.TAG;
        // with `--target <triple>` the profile dir is one level deeper and we rely on
        // the default / $CARGO_TARGET_DIR instead).
        if let Some(target) = profile
            .parent()
            .filter(|t| t.join("CACHEDIR.TAG").is_file())
        {
            cmd.arg("--target-dir").arg(target);
        }
        check_tool(&mut cmd, "build the argstash binary");
    });
    assert!(bin.is_file(), "{} missing after cargo build", bin.display());
    bin
}

/// A `Command` for `argstash` with `args`, stdin from /dev/null.
pub fn argstash_cmd(args: &[&str]) -> Command {
    let mut cmd = Command::new(argstash());
    cmd.args(args).stdin(Stdio::null());
    cmd
}

/// Run `argstash args...` (timeout [`RUN_TIMEOUT`]) and return its output, whatever the exit code.
pub fn run(args: &[&str]) -> Output {
    run_command(&mut argstash_cmd(args), RUN_TIMEOUT)
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

fn describe(args: &[&str], out: &Output) -> String {
    format!(
        "argstash {}\n  status: {}\n--- stdout:\n{}--- stderr:\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Run `argstash args...`, assert exit code 0, return stdout.
#[track_caller]
pub fn run_ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "expected success: {}",
        describe(args, &out)
    );
    String::from_utf8(out.stdout.clone())
        .unwrap_or_else(|_| panic!("stdout is not UTF-8: {}", describe(args, &out)))
}

/// Run `argstash args...`, assert success, parse stdout as one JSON value.
#[track_caller]
pub fn run_json(args: &[&str]) -> serde_json::Value {
    let out = run(args);
    assert!(
        out.status.success(),
        "expected success: {}",
        describe(args, &out)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", describe(args, &out)))
}

/// Run `argstash args...`, assert exit code `code` and that stderr contains `needle`.
#[track_caller]
pub fn expect_fail(args: &[&str], code: i32, needle: &str) -> Output {
    let out = run(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "wrong exit code: {}",
        describe(args, &out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(needle),
        "stderr lacks {needle:?}: {}",
        describe(args, &out)
    );
    out
}

// ---------------------------------------------------------------------------
// /proc helpers
// ---------------------------------------------------------------------------

/// Read `len` bytes at `addr` of process `pid` through `/proc/PID/mem`.
#[track_caller]
pub fn read_mem(pid: i32, addr: u64, len: usize) -> Vec<u8> {
    try_read_mem(pid, addr, len)
        .unwrap_or_else(|e| panic!("read {len} bytes at {addr:#x} of pid {pid}: {e}"))
}

/// Like [`read_mem`], returning the error instead of panicking.
pub fn try_read_mem(pid: i32, addr: u64, len: usize) -> io::Result<Vec<u8>> {
    let f = fs::File::open(format!("/proc/{pid}/mem"))?;
    let mut buf = vec![0; len];
    f.read_exact_at(&mut buf, addr)?;
    Ok(buf)
}

/// Thread ids of process `pid`, sorted (empty if the process is gone).
pub fn thread_ids(pid: i32) -> Vec<i32> {
    let mut v: Vec<i32> = fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// `(tid, name)` of every thread of `pid` (names from `/proc/PID/task/TID/comm`).
pub fn thread_names(pid: i32) -> Vec<(i32, String)> {
    thread_ids(pid)
        .into_iter()
        .filter_map(|tid| {
            let comm = fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).ok()?;
            Some((tid, comm.trim_end().to_string()))
        })
        .collect()
}

/// A field of `/proc/PID/status` (e.g. `"TracerPid"`), trimmed; `None` if absent.
pub fn proc_status_field(pid: i32, field: &str) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == field).then(|| v.trim().to_string())
    })
}

/// Id of the thread tracing `pid` (`TracerPid`), `None` if untraced; panics if `pid` is gone.
#[track_caller]
pub fn tracer_pid(pid: i32) -> Option<i32> {
    let v = proc_status_field(pid, "TracerPid")
        .unwrap_or_else(|| panic!("no /proc/{pid}/status: process gone?"));
    let t: i32 = v.parse().expect("numeric TracerPid");
    (t != 0).then_some(t)
}

/// State letter of `pid` from `/proc/PID/stat` (`R`, `S`, `t` = ptrace-stopped, `Z`...); `None` if gone.
pub fn proc_state(pid: i32) -> Option<char> {
    stat_state(&format!("/proc/{pid}/stat"))
}

/// State letter of thread `tid` of `pid`; `None` if gone.
pub fn thread_state(pid: i32, tid: i32) -> Option<char> {
    stat_state(&format!("/proc/{pid}/task/{tid}/stat"))
}

fn stat_state(path: &str) -> Option<char> {
    let stat = fs::read_to_string(path).ok()?;
    // "pid (comm) S ...": comm may contain spaces and parentheses.
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapEntry {
    /// Start address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// Permissions, e.g. `r-xp`.
    pub perms: String,
    /// File offset of `start`.
    pub offset: u64,
    /// Path or pseudo-name (`[stack]`), empty for anonymous mappings.
    pub path: String,
}

/// Parsed `/proc/PID/maps`.
#[track_caller]
pub fn maps(pid: i32) -> Vec<MapEntry> {
    let text = fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/maps: {e}"));
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(6, ' ');
            let (range, perms, off) = (it.next()?, it.next()?, it.next()?);
            let (_dev, _inode) = (it.next()?, it.next()?);
            let path = it.next().unwrap_or("").trim().to_string();
            let (s, e) = range.split_once('-')?;
            Some(MapEntry {
                start: u64::from_str_radix(s, 16).ok()?,
                end: u64::from_str_radix(e, 16).ok()?,
                perms: perms.to_string(),
                offset: u64::from_str_radix(off, 16).ok()?,
                path,
            })
        })
        .collect()
}

/// Load bias of executable `exe` in process `pid`: runtime address minus ELF `st_value`/`p_vaddr`.
#[track_caller]
pub fn load_bias(pid: i32, exe: &Path) -> u64 {
    let canon = fs::canonicalize(exe).unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
    let canon = canon.to_string_lossy();
    let deleted = format!("{canon} (deleted)");
    let first = maps(pid)
        .into_iter()
        .filter(|m| m.path == canon || m.path == deleted)
        .min_by_key(|m| m.offset)
        .unwrap_or_else(|| panic!("{canon} is not mapped in pid {pid}"));
    let seg = elf_load_segments(exe)
        .into_iter()
        .find(|s| s.offset & !0xfff == first.offset)
        .unwrap_or_else(|| panic!("no PT_LOAD at file offset {:#x}", first.offset));
    first.start - (seg.vaddr & !0xfff)
}

/// Runtime address of symbol `sym` of executable `exe` in process `pid`.
#[track_caller]
pub fn runtime_addr(pid: i32, exe: &Path, sym: &str) -> u64 {
    let s = symbol(exe, sym).unwrap_or_else(|| panic!("no symbol {sym} in {}", exe.display()));
    load_bias(pid, exe) + s.addr
}

// ---------------------------------------------------------------------------
// ELF file helpers
// ---------------------------------------------------------------------------

/// A `PT_LOAD` program header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadSegment {
    /// `p_offset`.
    pub offset: u64,
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_filesz`.
    pub filesz: u64,
    /// `p_memsz`.
    pub memsz: u64,
    /// `p_flags` (PF_X = 1, PF_W = 2, PF_R = 4).
    pub flags: u32,
}

/// The `PT_LOAD` segments of a 64-bit little-endian ELF file.
#[track_caller]
pub fn elf_load_segments(path: &Path) -> Vec<LoadSegment> {
    let data = fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let bad =
        |what: &str| -> ! { panic!("{}: not a usable ELF64 LE file ({what})", path.display()) };
    if data.len() < 64 || &data[..4] != b"\x7fELF" || data[4] != 2 || data[5] != 1 {
        bad("header");
    }
    let u16_at = |o: usize| u16::from_le_bytes(data[o..o + 2].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(data[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(data[o..o + 8].try_into().unwrap());
    let phoff = u64_at(0x20) as usize;
    let phentsize = u16_at(0x36) as usize;
    let phnum = u16_at(0x38) as usize;
    if phentsize < 56 || phoff + phnum * phentsize > data.len() {
        bad("program headers");
    }
    (0..phnum)
        .map(|i| phoff + i * phentsize)
        .filter(|&p| u32_at(p) == 1) // PT_LOAD
        .map(|p| LoadSegment {
            flags: u32_at(p + 4),
            offset: u64_at(p + 8),
            vaddr: u64_at(p + 16),
            filesz: u64_at(p + 32),
            memsz: u64_at(p + 40),
        })
        .collect()
}

/// `len` bytes of the file at link-time virtual address `vaddr` (as in `nm`/`objdump`).
///
/// For comparing a live process's code (at `vaddr + load_bias`) with the file on disk.
#[track_caller]
pub fn file_bytes_at_vaddr(path: &Path, vaddr: u64, len: usize) -> Vec<u8> {
    let seg = elf_load_segments(path)
        .into_iter()
        .find(|s| vaddr >= s.vaddr && vaddr + len as u64 <= s.vaddr + s.filesz)
        .unwrap_or_else(|| {
            panic!(
                "{}: {vaddr:#x}+{len} is not inside one PT_LOAD's file bytes",
                path.display()
            )
        });
    let f = fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut buf = vec![0; len];
    f.read_exact_at(&mut buf, seg.offset + (vaddr - seg.vaddr))
        .unwrap_or_else(|e| panic!("{}: read at {vaddr:#x}: {e}", path.display()));
    buf
}

/// A symbol from `nm`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Name.
    pub name: String,
    /// Link-time address (`st_value`).
    pub addr: u64,
    /// Size (`st_size`), 0 if nm shows none.
    pub size: u64,
    /// nm's type letter (`T` global text, `t` local text, `D`, `B`...).
    pub kind: char,
}

/// All defined symbols of `path` (`nm -S --defined-only`; `.symtab`, or `.dynsym` if stripped).
#[track_caller]
pub fn symbols(path: &Path) -> Vec<Symbol> {
    let mut cmd = Command::new("nm");
    cmd.args(["-S", "--defined-only"]).arg(path);
    let mut text = check_tool(&mut cmd, "list symbols");
    if text.trim().is_empty() {
        let mut cmd = Command::new("nm");
        cmd.args(["-D", "-S", "--defined-only"]).arg(path);
        text = check_tool(&mut cmd, "list dynamic symbols");
    }
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (addr, size, kind, name) = match f.as_slice() {
                [a, s, k, n] => (a, Some(s), k, n),
                [a, k, n] => (a, None, k, n),
                _ => return None,
            };
            Some(Symbol {
                name: name.to_string(),
                addr: u64::from_str_radix(addr, 16).ok()?,
                size: size.map_or(Some(0), |s| u64::from_str_radix(s, 16).ok())?,
                kind: kind.chars().next()?,
            })
        })
        .collect()
}

/// The symbol `name` of `path` (the first if several), if defined.
pub fn symbol(path: &Path, name: &str) -> Option<Symbol> {
    symbols(path).into_iter().find(|s| s.name == name)
}

/// The bytes of function `name` (`st_size` bytes from the file).
#[track_caller]
pub fn function_bytes(path: &Path, name: &str) -> Vec<u8> {
    let s = symbol(path, name).unwrap_or_else(|| panic!("no symbol {name} in {}", path.display()));
    file_bytes_at_vaddr(path, s.addr, s.size as usize)
}

// ---------------------------------------------------------------------------
// objdump
// ---------------------------------------------------------------------------

/// One instruction as disassembled by objdump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Link-time address.
    pub addr: u64,
    /// Encoded bytes.
    pub bytes: Vec<u8>,
    /// AT&T text, e.g. `mov    0x2be6(%rip),%eax        # 408c <counter>`.
    pub text: String,
}

impl Insn {
    /// Encoded length.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false (objdump never prints empty instructions); for clippy.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The mnemonic, skipping prefixes such as `bnd`, `notrack`, `lock`, `rep`, `data16`, `cs`.
    pub fn mnemonic(&self) -> &str {
        const PREFIXES: &[&str] = &[
            "bnd", "notrack", "lock", "rep", "repz", "repnz", "repe", "repne", "data16", "addr32",
            "cs", "ds", "es", "ss", "fs", "gs", "rex", "rex.W",
        ];
        self.text
            .split_whitespace()
            .find(|w| !PREFIXES.contains(w))
            .unwrap_or("")
    }

    /// True for jumps, calls, returns, loops and other control transfers.
    pub fn is_control_flow(&self) -> bool {
        let m = self.mnemonic();
        m.starts_with('j')
            || m.starts_with("call")
            || m.starts_with("ret")
            || m.starts_with("loop")
            || m.starts_with("iret")
            || matches!(m, "int3" | "ud2" | "xbegin")
    }

    /// Target of a direct jump/call/loop (`jne 13f0 <bar+0x20>` -> `0x13f0`).
    pub fn branch_target(&self) -> Option<u64> {
        let m = self.mnemonic();
        if !(m.starts_with('j') || m.starts_with("call") || m.starts_with("loop") || m == "xbegin")
        {
            return None;
        }
        let mut words = self.text.split_whitespace();
        words.find(|w| *w == m)?;
        u64::from_str_radix(words.next()?, 16).ok()
    }

    /// True if an operand is addressed relative to `%rip`.
    pub fn is_rip_relative(&self) -> bool {
        self.text.contains("(%rip)")
    }
}

/// Parse `objdump -d --insn-width=16` output (instruction lines only).
fn parse_objdump(text: &str) -> Vec<Insn> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, '\t');
            let addr = f.next()?.trim().strip_suffix(':')?;
            let addr = u64::from_str_radix(addr, 16).ok()?;
            let bytes = f
                .next()?
                .split_whitespace()
                .map(|b| u8::from_str_radix(b, 16).ok())
                .collect::<Option<Vec<u8>>>()?;
            let text = f.next().unwrap_or("").trim().to_string();
            (!bytes.is_empty()).then_some(Insn { addr, bytes, text })
        })
        .collect()
}

/// Instructions of function `sym` in `path`, cut at its `st_size` (no padding).
#[track_caller]
pub fn disassemble(path: &Path, sym: &str) -> Vec<Insn> {
    let s = symbol(path, sym).unwrap_or_else(|| panic!("no symbol {sym} in {}", path.display()));
    let mut cmd = Command::new("objdump");
    cmd.args(["-d", "--insn-width=16"])
        .arg(format!("--start-address={:#x}", s.addr))
        .arg(format!("--stop-address={:#x}", s.addr + s.size.max(1)))
        .arg(path);
    let insns = parse_objdump(&check_tool(&mut cmd, "disassemble"));
    assert!(
        !insns.is_empty(),
        "objdump printed no instructions for {sym} in {}",
        path.display()
    );
    insns
}

/// Targets of every direct jump/call in the executable sections of `path`.
#[track_caller]
pub fn branch_targets(path: &Path) -> Vec<u64> {
    let mut cmd = Command::new("objdump");
    cmd.args(["-d", "--insn-width=16"]).arg(path);
    parse_objdump(&check_tool(&mut cmd, "disassemble"))
        .iter()
        .filter_map(Insn::branch_target)
        .collect()
}

#[cfg(test)]
mod tests;

// ---------------------------------------------------------------------------
// End-to-end helpers: `bt`/`list` JSON, refused operations, namespaces, i386
// ---------------------------------------------------------------------------

/// Default timeout of the end-to-end helpers below (a line, a backtrace state).
pub const E2E_TIMEOUT: Duration = Duration::from_secs(10);

/// The path of `exe` as `/proc/PID/maps` and argstash's `module` fields show it (canonical).
#[track_caller]
pub fn module_path(exe: &Path) -> String {
    fs::canonicalize(exe)
        .unwrap_or_else(|e| panic!("{}: {e}", exe.display()))
        .to_string_lossy()
        .into_owned()
}

/// Path of the mapped module of `pid` whose file name is `file_name` (e.g. `libc.so.6`).
#[track_caller]
pub fn mapped_module(pid: i32, file_name: &str) -> String {
    maps(pid)
        .into_iter()
        .map(|m| m.path)
        .find(|p| p.rsplit('/').next() == Some(file_name))
        .unwrap_or_else(|| panic!("no {file_name} mapped in pid {pid}"))
}

/// A `"0x1234"` JSON string (how argstash's JSON prints addresses) as a number.
#[track_caller]
pub fn json_hex(v: &serde_json::Value) -> u64 {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("expected a hex string, got {v}"));
    let hex = s
        .strip_prefix("0x")
        .unwrap_or_else(|| panic!("expected 0x..., got {s:?}"));
    u64::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("bad hex {s:?}: {e}"))
}

/// `argstash bt --pid PID --json`, or `--tid TID` for one thread; asserts success.
#[track_caller]
pub fn bt_json(pid: i32, tid: Option<i32>) -> serde_json::Value {
    let pid_s = pid.to_string();
    let mut args = vec!["bt", "--pid", &pid_s, "--json"];
    let tid_s = tid.map(|t| t.to_string());
    if let Some(t) = &tid_s {
        args.extend(["--tid", t.as_str()]);
    }
    run_json(&args)
}

/// The thread objects of a `bt --json` value.
#[track_caller]
pub fn bt_threads(bt: &serde_json::Value) -> &Vec<serde_json::Value> {
    bt["threads"]
        .as_array()
        .unwrap_or_else(|| panic!("bt JSON without a threads array: {bt}"))
}

/// The thread `tid` of a `bt --json` value, if it is there.
pub fn bt_thread(bt: &serde_json::Value, tid: i32) -> Option<&serde_json::Value> {
    bt["threads"]
        .as_array()?
        .iter()
        .find(|t| t["tid"].as_i64() == Some(i64::from(tid)))
}

/// The frames of one thread object of `bt --json`.
#[track_caller]
pub fn thread_frames(thread: &serde_json::Value) -> &Vec<serde_json::Value> {
    thread["frames"]
        .as_array()
        .unwrap_or_else(|| panic!("thread without a frames array: {thread}"))
}

/// Index (in the frames array) and frame of the first frame of `thread` in function `name`.
pub fn frame_named<'a>(
    thread: &'a serde_json::Value,
    name: &str,
) -> Option<(usize, &'a serde_json::Value)> {
    thread["frames"]
        .as_array()?
        .iter()
        .enumerate()
        .find(|(_, f)| f["function"].as_str() == Some(name))
}

/// The raw part of one `args` entry of `bt --json` (`register` and `value`), without
/// the parameter name, type and display that debug info adds.
pub fn raw_arg(arg: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "register": arg["register"], "value": arg["value"] })
}

/// The value stashed for `register` (`rdi`, ...) in a hooked frame, if any.
pub fn frame_arg(frame: &serde_json::Value, register: &str) -> Option<u64> {
    frame["args"]
        .as_array()?
        .iter()
        .find(|a| a["register"].as_str() == Some(register))?["value"]
        .as_u64()
}

/// Poll `bt --json` (every 10 ms, up to `timeout`) until `pred` holds; panics with the last one.
#[track_caller]
pub fn wait_bt(
    pid: i32,
    tid: Option<i32>,
    timeout: Duration,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    let mut found = None;
    wait_until(timeout, || {
        let bt = bt_json(pid, tid);
        if pred(&bt) {
            found = Some(bt);
            return true;
        }
        last = bt;
        false
    });
    found.unwrap_or_else(|| {
        panic!(
            "no backtrace of pid {pid} met the condition within {timeout:?}; last:\n{}",
            serde_json::to_string_pretty(&last).unwrap_or_default()
        )
    })
}

/// The `hooks` array of `argstash list --pid PID --json`.
#[track_caller]
pub fn list_hooks(pid: i32) -> Vec<serde_json::Value> {
    let v = run_json(&["list", "--pid", &pid.to_string(), "--json"]);
    assert_eq!(v["pid"].as_i64(), Some(i64::from(pid)), "list JSON: {v}");
    v["hooks"]
        .as_array()
        .unwrap_or_else(|| panic!("list JSON without hooks: {v}"))
        .clone()
}

/// The hooks of a `list --json` array for function `name` in state `state` (`active`, `ejected`).
pub fn hooks_named<'a>(
    hooks: &'a [serde_json::Value],
    name: &str,
    state: &str,
) -> Vec<&'a serde_json::Value> {
    hooks
        .iter()
        .filter(|h| h["function"].as_str() == Some(name) && h["state"].as_str() == Some(state))
        .collect()
}

/// The patch objdump predicts for `sym`: (offset of the patch: 4 after endbr64, else 0; length).
///
/// The length is that of the whole instructions covering the 5 bytes of a `jmp rel32`.
#[track_caller]
pub fn expected_patch(exe: &Path, sym: &str) -> (u64, usize) {
    let insns = disassemble(exe, sym);
    let skip = usize::from(insns[0].mnemonic() == "endbr64");
    let mut len = 0;
    for i in &insns[skip..] {
        if len >= 5 {
            break;
        }
        len += i.len();
    }
    assert!(
        len >= 5,
        "{sym} in {} is too short: {insns:#?}",
        exe.display()
    );
    (if skip == 1 { 4 } else { 0 }, len)
}

/// Target of the `jmp rel32` (`e9`) at `addr` whose bytes start `code`; `None` if it is not one.
pub fn jmp_rel32_target(addr: u64, code: &[u8]) -> Option<u64> {
    if code.len() < 5 || code[0] != 0xe9 {
        return None;
    }
    let rel = i32::from_le_bytes(code[1..5].try_into().ok()?);
    Some((addr + 5).wrapping_add_signed(i64::from(rel)))
}

impl Target {
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

    /// Spawn `exe` as pid 1 of a new pid namespace (`unshare --pid --fork --mount-proc`).
    ///
    /// The returned `Target`'s pid is the fixture's pid in *our* namespace; its
    /// ready line says `ready 1`. Run argstash inside with [`run_in_namespace_of`].
    /// Killing the fixture ends `unshare`, which is then reaped.
    pub fn spawn_as_namespace_init(exe: &Path) -> Target {
        let mut cmd = Command::new("unshare");
        cmd.args(["--pid", "--fork", "--mount-proc", "--kill-child"])
            .arg(exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
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
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn unshare {}: {e}", exe.display()));
        let unshare_pid = child.id() as i32;
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
        let mut target = Target {
            stdin: child.stdin.take(),
            child,
            pid: unshare_pid,
            exe: exe.to_path_buf(),
            lines,
            stderr,
            status: None,
        };
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
}

/// Run `argstash args...` inside the pid and mount namespaces of process `pid` (via `nsenter`).
pub fn run_in_namespace_of(pid: i32, args: &[&str]) -> Output {
    let mut cmd = Command::new("nsenter");
    cmd.args(["--target", &pid.to_string(), "--pid", "--mount"])
        .arg(argstash())
        .args(args)
        .stdin(Stdio::null());
    run_command(&mut cmd, RUN_TIMEOUT)
}

/// What an operation that argstash refused must leave unchanged in a target.
///
/// [`Untouched::take`] records the bytes of every executable file mapping and
/// the list of mappings; [`Untouched::check`] asserts they are the same, that
/// nobody traces the process, that no thread is stopped, that the thread
/// count is the same, and that the fixture still prints lines.
pub struct Untouched {
    pid: i32,
    maps: Vec<MapEntry>,
    code: Vec<(u64, Vec<u8>)>,
    threads: usize,
}

impl Untouched {
    /// Record the state of `t` (call before the operation that must be refused).
    pub fn take(t: &Target) -> Untouched {
        let maps = maps(t.pid());
        let code = maps
            .iter()
            .filter(|m| m.perms.contains('x') && m.path.starts_with('/'))
            .map(|m| {
                (
                    m.start,
                    read_mem(t.pid(), m.start, (m.end - m.start) as usize),
                )
            })
            .collect();
        Untouched {
            pid: t.pid(),
            maps,
            code,
            threads: t.tids().len(),
        }
    }

    /// Assert `t` is as recorded, untraced, running, healthy and still printing lines.
    #[track_caller]
    pub fn check(&self, t: &mut Target) {
        assert_eq!(t.pid(), self.pid, "Untouched::check on another target");
        t.assert_healthy();
        assert_eq!(
            tracer_pid(self.pid),
            None,
            "pid {} is still traced",
            self.pid
        );
        for tid in t.tids() {
            let st = thread_state(self.pid, tid);
            assert!(
                !matches!(st, Some('t' | 'T')),
                "thread {tid} of {} is stopped ({st:?})",
                self.pid
            );
        }
        assert_eq!(t.tids().len(), self.threads, "thread count changed");
        assert_eq!(
            maps(self.pid),
            self.maps,
            "the mappings of pid {} changed",
            self.pid
        );
        for (start, bytes) in &self.code {
            let now = read_mem(self.pid, *start, bytes.len());
            if now != *bytes {
                let at = now.iter().zip(bytes).position(|(a, b)| a != b).unwrap_or(0);
                panic!(
                    "code of pid {} changed at {:#x}",
                    self.pid,
                    *start + at as u64
                );
            }
        }
        t.drain_lines();
        t.expect_line(E2E_TIMEOUT);
        t.assert_healthy();
    }
}

/// Assemble and link `tests/fixtures/<name>.s` as a static i386 program (`as --32`, `ld -m elf_i386`).
///
/// Cached in [`fixture_cache_dir`] under a hash of the source, like [`build`].
pub fn build_i386(name: &str) -> PathBuf {
    let src = fixtures_dir().join(format!("{name}.s"));
    let text = fs::read(&src).unwrap_or_else(|e| panic!("read {}: {e}", src.display()));
    let hash = fnv1a(&[RECIPE_VERSION.as_bytes(), b"i386", &text]);
    let dir = fixture_cache_dir();
    let out = dir.join(format!("{name}-i386-{hash:016x}"));
    if out.is_file() {
        return out;
    }
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{name}-{hash:016x}.tmp-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let obj = tmp.with_extension("o");
    check_tool(
        Command::new("as").args(["--32", "-o"]).arg(&obj).arg(&src),
        &format!("assemble {name}.s"),
    );
    check_tool(
        Command::new("ld")
            .args(["-m", "elf_i386", "-o"])
            .arg(&tmp)
            .arg(&obj),
        &format!("link {name}"),
    );
    let _ = fs::remove_file(&obj);
    if out.is_file() {
        let _ = fs::remove_file(&tmp);
    } else {
        fs::rename(&tmp, &out)
            .unwrap_or_else(|e| panic!("rename {} -> {}: {e}", tmp.display(), out.display()));
    }
    out
}

/// Write `bytes` at `addr` of process `pid` through `/proc/PID/mem` (as another tool would patch it).
#[track_caller]
pub fn write_mem(pid: i32, addr: u64, bytes: &[u8]) {
    let f = fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .unwrap_or_else(|e| panic!("open /proc/{pid}/mem for writing: {e}"));
    f.write_all_at(bytes, addr)
        .unwrap_or_else(|e| panic!("write {} bytes at {addr:#x} of pid {pid}: {e}", bytes.len()));
}

/// Lowercase hex of `bytes` separated by spaces (`e9 2b 5c`), as argstash's messages print bytes.
pub fn hex_bytes(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------------------
// Fault and soak helpers (issue 9): seeds, child processes with deadlines,
// thread states, the state of a function's entry bytes
// ---------------------------------------------------------------------------

/// A small deterministic PRNG (64-bit LCG, high bits out) for random kill points.
///
/// Tests print the seed so that a failing run can be repeated with
/// [`seed_from_env`]'s variable.
#[derive(Clone, Debug)]
pub struct Lcg(u64);

impl Lcg {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Lcg {
        Lcg(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    /// The next 64 bits (Knuth's MMIX constants; the high half is mixed down).
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let x = self.0;
        (x >> 32) ^ (x << 32) ^ (x >> 17)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        (self.next_u64() >> 11) % n
    }

    /// A duration in `0..=max`, at microsecond resolution.
    pub fn duration_upto(&mut self, max: Duration) -> Duration {
        Duration::from_micros(self.below(max.as_micros() as u64 + 1))
    }
}

/// The seed in environment variable `var` (decimal), else one taken from the clock.
pub fn seed_from_env(var: &str) -> u64 {
    if let Some(s) = std::env::var_os(var) {
        let s = s.to_string_lossy();
        return s
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{var}={s:?} is not a decimal seed: {e}"));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    now.as_secs() ^ (u64::from(now.subsec_nanos()) << 20) ^ u64::from(std::process::id())
}

/// A positive count from environment variable `var`, else `default`.
pub fn count_from_env(var: &str, default: usize) -> usize {
    match std::env::var(var) {
        Ok(s) => s
            .trim()
            .parse()
            .ok()
            .filter(|&n: &usize| n > 0)
            .unwrap_or_else(|| panic!("{var}={s:?} is not a positive count")),
        Err(_) => default,
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

    /// Start `argstash args...`.
    pub fn argstash(args: &[&str]) -> Background {
        Background::spawn(&mut argstash_cmd(args))
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

/// stdout and stderr of an `Output` as text, labelled, for failure messages.
pub fn output_text(out: &Output) -> String {
    format!(
        "status: {}\n--- stdout:\n{}--- stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Threads of `pid` that are stopped (`t` ptrace stop or `T` job-control stop), with their state.
pub fn stopped_threads(pid: i32) -> Vec<(i32, char)> {
    thread_ids(pid)
        .into_iter()
        .filter_map(|tid| match thread_state(pid, tid) {
            Some(c @ ('t' | 'T')) => Some((tid, c)),
            _ => None,
        })
        .collect()
}

/// `TracerPid` of every thread of `pid` that has a tracer: `(tid, tracer)`.
pub fn traced_threads(pid: i32) -> Vec<(i32, i32)> {
    thread_ids(pid)
        .into_iter()
        .filter_map(|tid| {
            let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
            let v: i32 = text
                .lines()
                .find_map(|l| l.strip_prefix("TracerPid:"))?
                .trim()
                .parse()
                .ok()?;
            (v != 0).then_some((tid, v))
        })
        .collect()
}

/// Wait up to `timeout` until no thread of `pid` is traced or stopped; the
/// offending threads otherwise (`"tid 12: state t, tracer 34"` lines).
pub fn wait_released(pid: i32, timeout: Duration) -> Result<(), String> {
    if wait_until(timeout, || {
        traced_threads(pid).is_empty() && stopped_threads(pid).is_empty()
    }) {
        return Ok(());
    }
    let traced = traced_threads(pid);
    let stopped = stopped_threads(pid);
    Err(format!(
        "after {timeout:?}: traced threads (tid, tracer) {traced:?}, stopped threads (tid, state) {stopped:?}"
    ))
}

/// The system call thread `tid` of `pid` is blocked in (first field of
/// `/proc/PID/task/TID/syscall`); `None` when running, or unreadable.
pub fn blocked_syscall(pid: i32, tid: i32) -> Option<i64> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// What a function's entry looks like in a live process (see [`entry_state`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryState {
    /// Exactly the file's bytes.
    Pristine,
    /// A whole patch: `jmp rel32` into executable memory, `int3`/`nop` filling
    /// the rest of the patched instructions, the file's bytes after them.
    Patched {
        /// Where the jump goes.
        target: u64,
    },
    /// Anything else: the description says what differs.
    Torn(String),
    /// The memory could not be read (the process is gone?).
    Unreadable(String),
}

/// Classify the live entry of `sym` in `t` against the file (pristine, a whole patch, or torn).
///
/// The patched length is the one objdump predicts ([`expected_patch`]).
#[track_caller]
pub fn entry_state(t: &Target, sym: &str) -> EntryState {
    EntryOracle::new(t, sym).state()
}

/// What [`entry_state`] compares with, computed once (nm and objdump are slow
/// enough to matter in a loop of trials).
#[derive(Clone, Debug)]
pub struct EntryOracle {
    pid: i32,
    sym: String,
    addr: u64,
    file: Vec<u8>,
    patch_off: usize,
    patch_len: usize,
}

impl EntryOracle {
    /// The oracle for function `sym` of the running `t`.
    #[track_caller]
    pub fn new(t: &Target, sym: &str) -> EntryOracle {
        let (off, len) = expected_patch(t.exe(), sym);
        EntryOracle {
            pid: t.pid(),
            sym: sym.to_string(),
            addr: t.addr_of(sym),
            file: function_bytes(t.exe(), sym),
            patch_off: off as usize,
            patch_len: len,
        }
    }

    /// Classify the live bytes now.
    #[track_caller]
    pub fn state(&self) -> EntryState {
        let (sym, addr, file) = (&self.sym, self.addr, &self.file);
        let live = match try_read_mem(self.pid, addr, file.len()) {
            Ok(v) => v,
            Err(e) => {
                return EntryState::Unreadable(format!(
                    "{sym} at {addr:#x} of pid {}: {e} (state {:?})",
                    self.pid,
                    proc_state(self.pid)
                ))
            }
        };
        if live == *file {
            return EntryState::Pristine;
        }
        let (off, len) = (self.patch_off, self.patch_len);
        let describe = |why: &str| {
            EntryState::Torn(format!(
                "{sym} at {addr:#x}: {why}\n    file: {}\n    live: {}",
                hex_bytes(file),
                hex_bytes(&live)
            ))
        };
        if live[..off] != file[..off] || live[off + len..] != file[off + len..] {
            return describe("bytes outside the patch changed");
        }
        let Some(target) = jmp_rel32_target(addr + off as u64, &live[off..]) else {
            return describe("the patch does not start with a jmp rel32");
        };
        if !live[off + 5..off + len]
            .iter()
            .all(|b| matches!(b, 0xcc | 0x90))
        {
            return describe("the bytes after the jmp are neither int3 nor nop");
        }
        let executable = maps(self.pid)
            .iter()
            .any(|m| m.perms.contains('x') && (m.start..m.end).contains(&target));
        if !executable {
            return describe(&format!(
                "the jmp goes to {target:#x}, not executable memory"
            ));
        }
        EntryState::Patched { target }
    }
}

/// Remove the files argstash writes for a process in /tmp (perf map, jitdump, gdb symbols).
pub fn remove_argstash_tmp_files(pid: i32) {
    for f in [
        format!("/tmp/perf-{pid}.map"),
        format!("/tmp/jit-{pid}.dump"),
        format!("/tmp/argstash-{pid}.elf"),
    ] {
        let _ = fs::remove_file(f);
    }
}

impl Target {
    /// Like [`Target::start`], with command-line arguments.
    pub fn start_with_args(fixture: &str, variant: Variant, args: &[&str]) -> Target {
        Target::spawn_with_args(&build(fixture, variant), args)
    }

    /// SIGKILL the process without reaping it (it stays a zombie child until
    /// [`Target::wait_exit`] or drop); for tests of a tracer meeting a dead target.
    pub fn kill_unreaped(&self) {
        if self.status.is_none() {
            // SAFETY: plain kill(2) of our own child, not yet reaped.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
    }
}

impl Target {
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
}

/// When a fault test strikes, relative to an `argstash` run it started.
#[derive(Clone, Copy, Debug)]
pub enum KillPoint {
    /// This long after `argstash` was started.
    FromStart(Duration),
    /// This long after the target first shows a tracer (`TracerPid` of the
    /// process), i.e. inside the stop window; falls back to "now" if no
    /// tracer shows up within `bound` (the run may already be over).
    AfterAttach(Duration, Duration),
}

impl KillPoint {
    /// Where trial `i` of a target-kill test strikes an inject that takes about
    /// `inject_time`: even trials anywhere in the run (up to 1.2 times it), odd ones
    /// up to 5 ms after argstash attaches.
    pub fn target_kill(i: usize, rng: &mut Lcg, inject_time: Duration) -> KillPoint {
        if i.is_multiple_of(2) {
            KillPoint::FromStart(rng.duration_upto(inject_time + inject_time / 5))
        } else {
            KillPoint::AfterAttach(
                rng.duration_upto(Duration::from_millis(5)),
                inject_time * 4 + Duration::from_secs(1),
            )
        }
    }

    /// Sleep until the point is reached for `target_pid`; returns a description.
    pub fn wait(&self, target_pid: i32, runner: &mut Background) -> String {
        match *self {
            KillPoint::FromStart(d) => {
                let left = d.saturating_sub(runner.elapsed());
                thread::sleep(left);
                format!("{d:?} after start")
            }
            KillPoint::AfterAttach(d, bound) => {
                let deadline = Instant::now() + bound;
                let mut seen = false;
                while Instant::now() < deadline {
                    let traced =
                        proc_status_field(target_pid, "TracerPid").is_some_and(|v| v != "0");
                    if traced {
                        seen = true;
                        break;
                    }
                    if matches!(runner.child.try_wait(), Ok(Some(_))) {
                        break;
                    }
                    thread::sleep(Duration::from_micros(50));
                }
                thread::sleep(d);
                if seen {
                    format!("{d:?} after attach (seen at {:?})", runner.elapsed() - d)
                } else {
                    format!("{d:?} after the run (no tracer seen)")
                }
            }
        }
    }
}

/// How an `argstash` run met a target SIGKILLed under it (see [`kill_target_during`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKillKind {
    /// It finished its work before the kill and exited 0.
    Completed,
    /// It failed saying the process exited (the wanted error).
    ExitedError,
    /// The process was gone before it attached: "no process with pid".
    GoneBeforeAttach,
    /// It did not exit within the bound (killed by the test).
    Hang,
    /// It failed with another message.
    Unclear,
    /// It exited, but the target could not be reaped or stayed traced.
    TargetLeftBehind,
}

/// The outcome of [`kill_target_during`].
#[derive(Debug)]
pub struct TargetKillOutcome {
    /// Classification.
    pub kind: TargetKillKind,
    /// `argstash`'s output.
    pub output: Output,
    /// From the target's SIGKILL to `argstash`'s exit (or the bound).
    pub exit_after_kill: Duration,
    /// Where the kill struck, and what was seen (for messages).
    pub detail: String,
}

/// Start `argstash args...` (`args` naming `target`'s pid), SIGKILL the
/// target at `point` *without reaping it* (the test process is its parent
/// and stays silent, like a parent that never reaps), and classify how
/// `argstash` ends within `bound`. Afterwards the target is reaped (bounded)
/// and checked to be gone and untraced.
pub fn kill_target_during(
    target: &mut Target,
    args: &[&str],
    point: KillPoint,
    bound: Duration,
) -> TargetKillOutcome {
    let pid = target.pid();
    let mut runner = Background::argstash(args);
    let mut detail = point.wait(pid, &mut runner);
    target.kill_unreaped();
    let killed_at = Instant::now();
    let finished = runner.wait_timeout(bound);
    let exit_after_kill = killed_at.elapsed();
    if finished.is_none() {
        let tids: Vec<i32> = thread_ids(runner.pid());
        let calls: Vec<_> = tids
            .iter()
            .map(|&t| (t, blocked_syscall(runner.pid(), t)))
            .collect();
        detail.push_str(&format!(
            "; argstash still running {bound:?} after the kill, its threads (tid, syscall): {calls:?}; target threads (tid, state): {:?}",
            thread_ids(pid)
                .into_iter()
                .map(|t| (t, thread_state(pid, t)))
                .collect::<Vec<_>>()
        ));
    }
    let (output, _) = runner.finish(Duration::ZERO);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let mut kind = if finished.is_none() {
        TargetKillKind::Hang
    } else if output.status.success() {
        TargetKillKind::Completed
    } else if stderr.contains("exited") {
        TargetKillKind::ExitedError
    } else if stderr.contains(&format!("no process with pid {pid}")) {
        TargetKillKind::GoneBeforeAttach
    } else {
        TargetKillKind::Unclear
    };
    // Nothing of the dead target may stay traced, and it must be reapable.
    let traced = traced_threads(pid);
    if !traced.is_empty() && kind != TargetKillKind::Hang {
        detail.push_str(&format!(
            "; after argstash exited the dead target still has traced threads {traced:?}"
        ));
        kind = TargetKillKind::TargetLeftBehind;
    }
    if target.wait_exit(Duration::from_secs(5)).is_none() {
        detail.push_str(&format!(
            "; the target was not reapable 5 s after argstash ended (state {:?}, tracer {:?})",
            proc_state(pid),
            proc_status_field(pid, "TracerPid")
        ));
        if kind != TargetKillKind::Hang {
            kind = TargetKillKind::TargetLeftBehind;
        }
    } else if !wait_until(Duration::from_secs(2), || {
        !Path::new(&format!("/proc/{pid}")).exists()
    }) {
        detail.push_str("; /proc/PID still exists after the target was reaped");
        kind = TargetKillKind::TargetLeftBehind;
    }
    remove_argstash_tmp_files(pid);
    TargetKillOutcome {
        kind,
        output,
        exit_after_kill,
        detail,
    }
}
