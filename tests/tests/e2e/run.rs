//! End-to-end: `argstash run -- CMD`: hooks in place before `main`, crash
//! reports followed by death by the same signal, `--timeout`, `--on-signal`,
//! exit codes, stdio and Ctrl-C passing through, forks and execs, and the bad
//! inputs of issue 12. The fixture is compiled at test time.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use argstash_tests::*;

/// Modes: crash, abort, hang, threads, exit N, echo, usr2, wait, caught, fork, exec PROG ARGS.
/// `first_thing(code, "early")` is the first call in main.
const RUNNER: &str = r#"#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int sink;
static const char *mode;

__attribute__((noinline)) void crash_now(void) { volatile int *p = (volatile int *)(long)(sink * 0); sink = *p; }

__attribute__((noinline)) void *worker(void *a) { for (;;) pause(); return a; }

/* Called first thing in main: its arguments must be stashed already. */
__attribute__((noinline)) int first_thing(int code, const char *tag) {
    if (!strcmp(mode, "crash")) crash_now();
    if (!strcmp(mode, "abort")) abort();
    if (!strcmp(mode, "hang")) for (;;) pause();
    if (!strcmp(mode, "threads")) {
        pthread_t t;
        for (int i = 0; i < 3; i++) pthread_create(&t, 0, worker, 0);
        usleep(20000);
        crash_now();
    }
    sink = code + (int)strlen(tag);
    return code;
}

static void on_usr2(int sig) { (void)sig; write(1, "got usr2\n", 9); }
static void on_segv(int sig) { (void)sig; write(1, "handled\n", 8); _exit(3); }

int main(int argc, char **argv) {
    mode = argc > 1 ? argv[1] : "";
    int code = first_thing(argc > 2 ? atoi(argv[2]) : 0, "early");
    if (!strcmp(mode, "exit")) return code;
    if (!strcmp(mode, "echo")) {
        char buf[256];
        while (fgets(buf, sizeof buf, stdin)) { for (char *c = buf; *c; c++) if (*c >= 'a' && *c <= 'z') *c -= 32; fputs(buf, stdout); }
        fputs("done\n", stderr);
        return 0;
    }
    if (!strcmp(mode, "usr2")) {
        /* Blocked until sigsuspend: a SIGUSR2 sent right after "ready" waits
           for it instead of running the handler before a pause() that would
           then sleep for ever. */
        sigset_t usr2, old;
        sigemptyset(&usr2);
        sigaddset(&usr2, SIGUSR2);
        sigprocmask(SIG_BLOCK, &usr2, &old);
        signal(SIGUSR2, on_usr2);
        printf("ready\n"); fflush(stdout);
        sigsuspend(&old);
        return 0;
    }
    if (!strcmp(mode, "wait")) { signal(SIGINT, SIG_DFL); printf("ready\n"); fflush(stdout); for (;;) pause(); }
    if (!strcmp(mode, "caught")) { signal(SIGSEGV, on_segv); crash_now(); }
    if (!strcmp(mode, "fork")) {
        pid_t c = fork();
        if (c == 0) { mode = "crash"; first_thing(9, "child"); _exit(0); }
        int st; waitpid(c, &st, 0);
        printf("child %s %d\n", WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        return 5;
    }
    if (!strcmp(mode, "exec")) { execv(argv[2], argv + 2); perror("execv"); return 99; }
    if (!strcmp(mode, "dlopen")) {
        void *h = dlopen(argv[2], RTLD_NOW);
        if (!h) { fprintf(stderr, "%s\n", dlerror()); return 98; }
        int (*f)(int) = (int (*)(int))dlsym(h, "handle");
        return f(21);
    }
    return 0;
}
"#;

/// A per-test-process directory for the compiled fixtures.
fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("argstash-run-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn compile(name: &str, extra: &[&str]) -> PathBuf {
    let d = dir();
    let src = d.join(format!("{name}.c"));
    std::fs::write(&src, RUNNER).unwrap();
    compile_c(
        &src,
        &d.join(name),
        &[&["-O2", "-g", "-pthread"], extra].concat(),
    )
}

/// The dynamically linked fixture, built once.
fn runner() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| compile("runner", &["-ldl"]))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `argstash run ARGS -- runner MODE...`, with a deadline.
fn run_runner(args: &[&str], mode: &[&str]) -> Output {
    let mut cmd = argstash_cmd(&["run"]);
    cmd.args(args).arg("--").arg(runner()).args(mode);
    run_command(&mut cmd, RUN_TIMEOUT)
}

/// `argstash run` in the background, its stdout read line by line.
struct Live {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    err: Option<std::thread::JoinHandle<String>>,
    seen: Vec<String>,
}

impl Live {
    fn spawn(cmd: &mut Command) -> Live {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for l in std::io::BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let err = Some(std::thread::spawn(move || {
            use std::io::Read;
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        }));
        Live {
            child,
            lines,
            err,
            seen: Vec::new(),
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Waits for a line (panics after the e2e timeout).
    fn expect(&mut self, want: &str) {
        let l = self.lines.recv_timeout(E2E_TIMEOUT).expect("a line");
        assert_eq!(l, want);
        self.seen.push(l);
    }

    /// Waits for the end: exit status, the rest of stdout, all of stderr.
    fn finish(mut self) -> (std::process::ExitStatus, String, String) {
        let mut waited = None;
        assert!(wait_until(RUN_TIMEOUT, || {
            waited = self.child.try_wait().unwrap();
            waited.is_some()
        }));
        let rest: Vec<String> = self.lines.try_iter().collect();
        let mut all = self.seen.clone();
        all.extend(rest);
        let err = self.err.take().unwrap().join().unwrap();
        let mut out = all.join("\n");
        if !out.is_empty() {
            out.push('\n');
        }
        (waited.unwrap(), out, err)
    }
}

#[test]
fn crash_report_shows_stashed_args_of_first_call_then_same_signal() {
    let report = dir().join("crash.json");
    let _ = std::fs::remove_file(&report);
    let out = run_runner(
        &[
            "--func",
            "first_thing",
            "--report",
            report.to_str().unwrap(),
        ],
        &["crash", "17"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{out:?}");
    assert!(err.contains("got SIGSEGV in thread"), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains(" in first_thing ("))
        .unwrap_or_else(|| panic!("no first_thing frame: {err}"));
    assert!(
        line.contains("code=17") && line.contains("\"early\""),
        "{line}"
    );
    assert!(line.contains("[stashed]"), "{line}");
    // The report file holds the `bt --json` object.
    let text = std::fs::read_to_string(&report).unwrap();
    let bt: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let threads = bt_threads(&bt);
    let (_, f) = frame_named(&threads[0], "first_thing").expect("first_thing in the JSON");
    assert_eq!(f["hooked"], serde_json::json!(true), "{f:#}");
    // Same as running it directly.
    let direct = run_command(Command::new(runner()).arg("crash"), RUN_TIMEOUT);
    assert_eq!(direct.status.signal(), out.status.signal());
}

#[test]
fn crash_leaves_a_core_when_core_dumps_are_enabled() {
    let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    if pattern.trim_start().starts_with('|') {
        eprintln!("core_pattern pipes cores to {pattern}: skipped");
        return;
    }
    let cwd = dir().join("cores");
    std::fs::create_dir_all(&cwd).unwrap();
    let mut cmd = Command::new("prlimit");
    cmd.args(["--core=unlimited", "--"])
        .arg(argstash())
        .args(["run", "--func", "first_thing", "--"])
        .arg(runner())
        .arg("crash")
        .current_dir(&cwd)
        .stdin(Stdio::null());
    let out = run_command(&mut cmd, RUN_TIMEOUT);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{out:?}");
    let cores: Vec<_> = std::fs::read_dir(&cwd)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("core"))
        .collect();
    assert_eq!(
        cores.len(),
        1,
        "one core (the child's, none of argstash's): {cores:?}"
    );
    let core = cores[0].path();
    let bt = run_ok(&["bt", "--core", core.to_str().unwrap()]);
    assert!(bt.contains("crash_now"), "{bt}");
    let _ = std::fs::remove_dir_all(&cwd);
}

#[test]
fn every_thread_is_reported() {
    let out = run_runner(&["--func", "first_thing"], &["threads"]);
    let err = stderr(&out);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{out:?}");
    assert_eq!(
        err.matches("\nThread ").count() + usize::from(err.starts_with("Thread ")),
        4,
        "{err}"
    );
    assert_eq!(err.matches(" in worker (").count(), 3, "{err}");
}

#[test]
fn abort_is_reported_and_a_caught_segv_is_not() {
    let out = run_runner(&[], &["abort"]);
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{out:?}");
    assert!(stderr(&out).contains("got SIGABRT"), "{out:?}");
    let out = run_runner(&[], &["caught"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(stdout(&out), "handled\n");
    assert!(!stderr(&out).contains("backtrace"), "{out:?}");
    // --on-crash off: no report, same death.
    let out = run_runner(&["--on-crash", "off"], &["crash"]);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{out:?}");
    assert!(!stderr(&out).contains("backtrace"), "{out:?}");
}

#[test]
fn timeout_prints_backtraces_kills_and_exits_124() {
    let started = std::time::Instant::now();
    let out = run_runner(
        &["--func", "first_thing", "--timeout", "0.5"],
        &["hang", "5"],
    );
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
    let err = stderr(&out);
    assert!(err.contains("timed out"), "{err}");
    assert!(err.contains("first_thing (code=5, tag="), "{err}");
}

#[test]
fn on_signal_reports_then_delivers() {
    let mut cmd = argstash_cmd(&["run", "--on-signal", "USR2", "--"]);
    cmd.arg(runner()).arg("usr2");
    let mut live = Live::spawn(&mut cmd);
    // The program prints "ready" once its handler is in place.
    live.expect("ready");
    let pid = child_of(live.pid());
    // SAFETY: kill takes two integers.
    unsafe { libc::kill(pid, libc::SIGUSR2) };
    let (status, out, err) = live.finish();
    assert_eq!(status.code(), Some(0), "{err}");
    assert_eq!(out, "ready\ngot usr2\n");
    assert!(err.contains("got SIGUSR2 in thread"), "{err}");
}

/// The one child of `parent` that is not argstash's doorbell.
fn child_of(parent: i32) -> i32 {
    let mut found = None;
    assert!(wait_until(E2E_TIMEOUT, || {
        let list = std::fs::read_dir("/proc").unwrap();
        found = list.filter_map(|e| e.ok()).find_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let rest = &st[st.rfind(')')? + 2..];
            let ppid: i32 = rest.split(' ').nth(1)?.parse().ok()?;
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            (ppid == parent && comm.trim() == "runner").then_some(pid)
        });
        found.is_some()
    }));
    found.unwrap()
}

#[test]
fn exit_codes_like_a_shell() {
    let out = run_runner(&["--func", "first_thing"], &["exit", "42"]);
    assert_eq!(out.status.code(), Some(42), "{out:?}");
    assert_eq!(stderr(&out), "");
    let out = run(&["run", "--", "/nonexistent/program"]);
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    assert!(stderr(&out).contains("command not found"), "{out:?}");
    let plain = dir().join("not-executable");
    std::fs::write(&plain, "data\n").unwrap();
    let out = run(&["run", "--", plain.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(stderr(&out).contains("cannot execute"), "{out:?}");
    // argstash fails before the child starts: 1, with the reason.
    let out = run_runner(&["--func", "no_such_function"], &["exit", "3"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("no_such_function"), "{out:?}");
}

#[test]
fn stdin_stdout_stderr_pass_through() {
    let mut cmd = argstash_cmd(&["run", "--func", "first_thing", "--"]);
    cmd.arg(runner()).arg("echo").stdin(Stdio::piped());
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello\nworld\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(stdout(&out), "HELLO\nWORLD\n");
    assert_eq!(stderr(&out), "done\n");
}

#[test]
fn ctrl_c_reaches_the_child() {
    let mut cmd = argstash_cmd(&["run", "--func", "first_thing", "--"]);
    cmd.arg(runner()).arg("wait").process_group(0);
    let mut live = Live::spawn(&mut cmd);
    live.expect("ready");
    // The terminal sends SIGINT to the whole foreground process group.
    // SAFETY: kill takes two integers.
    unsafe { libc::kill(-live.pid(), libc::SIGINT) };
    let (status, _, err) = live.finish();
    assert_eq!(status.signal(), Some(libc::SIGINT), "{err}");
    assert!(!err.contains("backtrace"), "{err}");
}

#[test]
fn sigkill_is_said_to_leave_no_report() {
    let mut cmd = argstash_cmd(&["run", "--"]);
    cmd.arg(runner()).arg("wait");
    let mut live = Live::spawn(&mut cmd);
    live.expect("ready");
    let pid = child_of(live.pid());
    // SAFETY: kill takes two integers.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let (status, _, err) = live.finish();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{err}");
    assert!(
        err.contains("killed by SIGKILL: no backtrace is possible"),
        "{err}"
    );
}

#[test]
fn forked_children_keep_hooks_and_follow_forks_reports_them() {
    let out = run_runner(&["--func", "first_thing"], &["fork"]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert_eq!(stdout(&out), "child signal 11\n");
    assert!(!stderr(&out).contains("backtrace"), "{out:?}");
    let out = run_runner(&["--func", "first_thing", "--follow-forks"], &["fork"]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let err = stderr(&out);
    assert!(err.contains("got SIGSEGV"), "{err}");
    // The hook was inherited by the child: its arguments are stashed.
    assert!(err.contains("first_thing (code=9, tag="), "{err}");
}

#[test]
fn exec_of_another_program_is_said() {
    let out = run_runner(
        &["--func", "first_thing"],
        &["exec", "/bin/sh", "-c", "exit 6"],
    );
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    assert!(stderr(&out).contains("its hooks are gone"), "{out:?}");
}

#[test]
fn static_binary_is_hooked() {
    let probe = Command::new("cc")
        .args(["-static", "-x", "c", "-o", "/dev/null", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .unwrap()
                .write_all(b"int main(){return 0;}")?;
            c.wait()
        });
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("no static libc here: skipped");
        return;
    }
    let bin = compile("runner_static", &["-static"]);
    let mut cmd = argstash_cmd(&["run", "--func", "first_thing", "--"]);
    cmd.arg(&bin).args(["crash", "8"]);
    let out = run_command(&mut cmd, RUN_TIMEOUT);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{out:?}");
    assert!(
        stderr(&out).contains("first_thing (code=8, tag="),
        "{out:?}"
    );
}

#[test]
fn bad_inputs_are_refused_clearly() {
    for t in ["0", "-1", "soon"] {
        let out = run(&["run", "--timeout", t, "--", "/bin/true"]);
        assert_eq!(out.status.code(), Some(2), "{t}: {out:?}");
        assert!(stderr(&out).contains("--timeout"), "{out:?}");
    }
    // A library loaded later with dlopen: refused up front, saying why.
    let out = run_runner(&["--func", "libplugin.so!handle"], &["exit", "0"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stderr(&out).contains("libplugin.so is not loaded when"),
        "{out:?}"
    );
    assert!(stderr(&out).contains("dlopen"), "{out:?}");
    // Two `argstash run` on one child: the inner one cannot trace it.
    let mut cmd = argstash_cmd(&["run", "--follow-forks", "--"]);
    cmd.arg(argstash())
        .args(["run", "--"])
        .arg(runner())
        .args(["exit", "3"]);
    let out = run_command(&mut cmd, RUN_TIMEOUT);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("is traced by PID"), "{out:?}");
}

#[test]
fn setuid_program_runs_untraced_with_a_warning() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("needs root to make a set-user-ID copy: skipped");
        return;
    }
    let d = dir().join("suid");
    std::fs::create_dir_all(&d).unwrap();
    let bin = d.join("runner");
    std::fs::copy(runner(), &bin).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o4755)).unwrap();
    for p in [dir(), d.clone()] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(argstash())
        .args(["run", "--func", "first_thing", "--"])
        .arg(&bin)
        .args(["exit", "4"])
        .stdin(Stdio::null());
    let out = run_command(&mut cmd, RUN_TIMEOUT);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(stderr(&out).contains("running it untraced"), "{out:?}");
}

/// The example harness: a test runs a child through the library, and when the
/// child hangs past its timeout, prints its backtrace with arguments, then kills it.
#[test]
fn library_harness_prints_backtrace_of_a_hung_child() {
    use injector::render::{backtrace_text, View};
    use injector::{run, RunOptions};

    let mut cmd = Command::new(runner());
    cmd.args(["hang", "31"]).stdout(Stdio::null());
    let child = run::spawn(cmd, &["first_thing"], RunOptions::default()).expect("spawn");
    assert_eq!(child.hooks().len(), 1);
    let status = child.wait_timeout(Duration::from_millis(300));
    assert!(status.is_none(), "the child hangs");
    // Timed out: what is it doing?
    let bt = child.backtrace().expect("backtrace of the hung child");
    let text = backtrace_text(&bt, View::All);
    eprintln!("child {} timed out:\n{text}", child.pid());
    assert!(text.contains("first_thing (code=31, tag="), "{text}");
    child.kill().unwrap();
    assert_eq!(child.wait().signal(), Some(libc::SIGKILL));
}

/// The cargo set-up from docs/guide/crash-reports.md, for real: a crate whose
/// `.cargo/config.toml` makes `argstash run` its runner; `cargo run` of a
/// program that crashes prints the backtrace with arguments.
#[test]
fn cargo_runner_set_up() {
    let krate = dir().join("crashy");
    let _ = std::fs::remove_dir_all(&krate);
    std::fs::create_dir_all(krate.join("src")).unwrap();
    std::fs::create_dir_all(krate.join(".cargo")).unwrap();
    std::fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"crashy\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n\n[profile.dev]\nopt-level = 2\n",
    )
    .unwrap();
    std::fs::write(
        krate.join("src/main.rs"),
        r#"
#[no_mangle]
#[inline(never)]
pub extern "C" fn parse_record(id: u64, len: u64) -> u64 {
    if id == 7 {
        // SAFETY (test program): a deliberate invalid write.
        unsafe { std::ptr::write_volatile(len as *mut u64, id) };
    }
    id + len
}

fn main() {
    let n: u64 = std::env::args().count() as u64;
    let mut total = 0;
    for id in 0..10 {
        total += parse_record(std::hint::black_box(id * n), 16);
    }
    println!("{total}");
}
"#,
    )
    .unwrap();
    std::fs::write(
        krate.join(".cargo/config.toml"),
        format!(
            "[target.x86_64-unknown-linux-gnu]\nrunner = \"{} run --func parse_record --\"\n",
            argstash().display()
        ),
    )
    .unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["run", "--quiet", "--offline"])
        .current_dir(&krate)
        .env("CARGO_TARGET_DIR", krate.join("target"))
        .env_remove("RUSTFLAGS")
        .stdin(Stdio::null());
    let out = run_command(&mut cmd, Duration::from_secs(240));
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("got SIGSEGV"), "{err}");
    assert!(
        err.contains("parse_record (id=7, len=16)") || err.contains("parse_record (rdi=7, rsi=16"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&krate);
}
