//! End-to-end: reading must not change what the program sees. A thread blocked
//! in a system call is read without a stop (its call goes on undisturbed), a
//! running thread is still stopped, and `bt --always-stop` stops every thread
//! (and so cuts a blocked write short, which is how the tests know the
//! difference is real). The evidence is the programs' own: a short write
//! reported by the writer, and the context-switch counts of a thread that
//! nothing but a stop could wake.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use argstash_tests::*;
use serde_json::{json, Value};

/// blocked.c names its threads before it prints `ready`.
const NAMED: Duration = Duration::ZERO;
/// Generous time for a woken thread to block again.
const SOON: Duration = Duration::from_secs(5);
/// blocked.c: the argument the sleeper passes to `nap(long)`.
const NAP_TAG: u64 = 0x6e61705461670001;
/// x86-64 system call numbers.
const SYS_READ: i64 = 0;
const SYS_WRITE: i64 = 1;

/// How often thread `tid` of `pid` has been switched out (voluntarily or not).
fn switches(pid: i32, tid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
        .unwrap_or_else(|e| panic!("status of thread {tid}: {e}"));
    status
        .lines()
        .filter(|l| l.contains("ctxt_switches:"))
        .map(|l| l.split(':').nth(1).unwrap().trim().parse::<u64>().unwrap())
        .sum()
}

/// Waits until thread `tid` of `pid` is blocked in system call `nr`.
#[track_caller]
fn wait_blocked(pid: i32, tid: i32, nr: i64) {
    assert!(
        wait_until(SOON, || blocked_syscall(pid, tid) == Some(nr)),
        "thread {tid} is not blocked in system call {nr}: {:?}",
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall"))
    );
}

/// blocked.c's counters after command `cmd`: (full, short, naps, spins).
fn stats(t: &mut Target, cmd: &str) -> (u64, u64, u64, u64) {
    t.drain_lines();
    t.write_stdin(&format!("{cmd}\n"));
    let line = t.wait_for_line(SOON, |l| l.starts_with("stats "));
    let w: Vec<&str> = line.split_whitespace().collect();
    match w.as_slice() {
        ["stats", "full", f, "short", s, "naps", n, "spins", p] => (
            f.parse().unwrap(),
            s.parse().unwrap(),
            n.parse().unwrap(),
            p.parse().unwrap(),
        ),
        _ => t.fail(&format!("bad stats line {line:?}")),
    }
}

/// The function names of a thread's frames.
fn names(th: &Value) -> Vec<String> {
    thread_frames(th)
        .iter()
        .map(|f| f["function"].as_str().unwrap_or("??").to_string())
        .collect()
}

/// The text section of thread `tid` in `bt` text output (its header and frames).
fn thread_text(out: &str, tid: i32) -> String {
    let head = format!("Thread {tid} ");
    out.split("\n\n")
        .find(|s| s.starts_with(&head))
        .unwrap_or_else(|| panic!("no thread {tid} in:\n{out}"))
        .to_string()
}

/// Checks the sleeper's backtrace: read <- doze <- nap (hooked, NAP_TAG) <- sleeper.
fn check_sleeper(th: &Value) {
    let n = names(th);
    let (i, nap) = frame_named(th, "nap").unwrap_or_else(|| panic!("no nap: {th:#}"));
    assert_eq!(n.first().map(String::as_str), Some("read"), "{th:#}");
    assert_eq!(n[i - 1], "doze", "{th:#}");
    assert_eq!(n.get(i + 1).map(String::as_str), Some("sleeper"), "{th:#}");
    assert_eq!(nap["hooked"], json!(true), "{th:#}");
    assert_eq!(frame_arg(nap, "rdi"), Some(NAP_TAG), "{th:#}");
}

#[test]
fn blocked_threads_are_read_without_a_stop_running_ones_stopped() {
    let mut t = Target::start("blocked", Variant::O2G);
    let pid = t.pid();
    let pid_s = pid.to_string();
    let writer = t.tid_named("writer", NAMED);
    let sleeper = t.tid_named("sleeper", NAMED);
    let spinner = t.tid_named("spinner", NAMED);

    // Hook nap, then let the sleeper into a hooked call of it: blocked in
    // read(2) inside doze, the hooked function's callee.
    run_ok(&["inject", "--pid", &pid_s, "--func", "nap"]);
    t.write_stdin("wake\n");
    assert!(
        wait_until(SOON, || stats(&mut t, "stats").2 >= 1),
        "the sleeper did not return from its nap"
    );
    wait_blocked(pid, sleeper, SYS_READ);
    wait_blocked(pid, writer, SYS_WRITE);
    let (_, short0, _, spins0) = stats(&mut t, "stats");
    let (sleeper0, writer0) = (switches(pid, sleeper), switches(pid, writer));

    // Five plain backtraces: the blocked threads are read without a stop and
    // their calls go on undisturbed; the spinner is stopped.
    for round in 0..5 {
        let out = run_ok(&["bt", "--pid", &pid_s]);
        let w = thread_text(&out, writer);
        assert!(
            w.starts_with(&format!(
                "Thread {writer} \"writer\" (read without a stop, blocked in write):"
            )),
            "round {round}:\n{out}"
        );
        let write_at = w.find("write (").expect("a write frame");
        let caller_at = w.find(" in push_block ").or(w.find(" in writer_loop "));
        assert!(
            caller_at.is_some_and(|c| c > write_at),
            "round {round}: write's caller:\n{w}"
        );
        let s = thread_text(&out, sleeper);
        assert!(
            s.starts_with(&format!(
                "Thread {sleeper} \"sleeper\" (read without a stop, blocked in read):"
            )),
            "round {round}:\n{out}"
        );
        assert!(
            s.contains(&format!(" in nap (tag={}) [stashed]", NAP_TAG as i64)),
            "round {round}: nap's stash:\n{s}"
        );
        let p = thread_text(&out, spinner);
        assert!(
            p.starts_with(&format!("Thread {spinner} \"spinner\" (stopped ")),
            "round {round}:\n{out}"
        );
        assert!(p.contains(" in spinner "), "round {round}:\n{p}");
    }
    let (_, short1, _, spins1) = stats(&mut t, "stats");
    assert_eq!(short1, short0, "a backtrace cut the writer's write short");
    assert!(spins1 > spins0, "the spinner stalled");
    assert_eq!(switches(pid, writer), writer0, "the writer was woken");

    // The same in JSON: the sleeper's frames and hooked arguments, read without a stop.
    let free = bt_json(pid, None);
    let th = bt_thread(&free, sleeper).unwrap();
    assert_eq!(th["without_stop"], json!(true), "{th:#}");
    assert_eq!(th["syscall"], json!(SYS_READ), "{th:#}");
    assert_eq!(th["syscall_name"], json!("read"), "{th:#}");
    assert_eq!(th["stopped_us"], json!(0), "{th:#}");
    check_sleeper(th);
    let spin = bt_thread(&free, spinner).unwrap();
    assert_eq!(spin["without_stop"], json!(false), "{spin:#}");
    assert!(frame_named(spin, "spinner").is_some(), "{spin:#}");
    assert_eq!(
        switches(pid, sleeper),
        sleeper0,
        "the sleeper was woken by a backtrace without a stop"
    );

    // --always-stop stops every thread: the same frames and arguments below the
    // innermost frame, and the stop wakes the sleeper (its read restarts).
    let stopped = run_json(&["bt", "--pid", &pid_s, "--json", "--always-stop"]);
    for th in bt_threads(&stopped) {
        assert_eq!(th["without_stop"], json!(false), "{th:#}");
    }
    let th_stopped = bt_thread(&stopped, sleeper).unwrap();
    check_sleeper(th_stopped);
    assert_eq!(
        names(th_stopped)[1..],
        names(th)[1..],
        "{th_stopped:#}\n{th:#}"
    );
    assert!(
        switches(pid, sleeper) > sleeper0,
        "a stop should have woken the sleeper"
    );

    // And a stop cuts the writer's write short once part of its block is
    // written (after a drain at the latest).
    let mut short = short0;
    for _ in 0..10 {
        stats(&mut t, "drain");
        wait_blocked(pid, writer, SYS_WRITE);
        let out = run_ok(&[
            "bt",
            "--pid",
            &pid_s,
            "--tid",
            &writer.to_string(),
            "--always-stop",
        ]);
        assert!(out.contains("\"writer\" (stopped "), "{out}");
        short = stats(&mut t, "stats").1;
        if short > short0 {
            break;
        }
    }
    assert!(
        short > short0,
        "--always-stop never cut a write short: the test cannot tell a stop from none"
    );
    t.assert_healthy();
}

/// A perl process killed when the test ends.
struct Perl {
    child: Child,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Drop for Perl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Perl {
    fn lines(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }
}

/// Writes 256 KiB blocks to stdout with `syswrite` and dies on a short write,
/// as a script that treats one as an error does.
const PERL_WRITER: &str = r#"
my $block = "p" x (256 * 1024);
$| = 1;
print STDERR "ready $$\n";
sub pump {
    my $n = syswrite(STDOUT, $block);
    die "short write $n\n" if $n != length $block;
    print STDERR "full\n";
}
pump() while 1;
"#;

/// Reads `len` bytes of the writer's output (the slow reader of its pipe).
fn drain(out: &mut ChildStdout, len: usize) {
    let mut buf = vec![0u8; len];
    out.read_exact(&mut buf).expect("read perl's output");
}

#[test]
fn perl_syswrite_is_not_cut_short_by_bt() {
    let child = Command::new("perl")
        .arg("-e")
        .arg(PERL_WRITER)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("perl runs (the test needs /usr/bin/perl)");
    let mut perl = Perl {
        child,
        stderr: Arc::default(),
    };
    let err = perl.child.stderr.take().unwrap();
    let lines = perl.stderr.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            lines.lock().unwrap().push(line);
        }
    });
    let mut out = perl.child.stdout.take().unwrap();
    assert!(
        wait_until(SOON, || perl.lines().iter().any(|l| l.starts_with("ready"))),
        "perl did not start: {:?}",
        perl.lines()
    );
    let pid = perl.child.id() as i32;
    let pid_s = pid.to_string();

    // Five backtraces while perl is blocked in write(2) with part of a block
    // written; the slow reader takes 20 KiB between them.
    for round in 0..5 {
        wait_blocked(pid, pid, SYS_WRITE);
        let out_text = run_ok(&["bt", "--pid", &pid_s]);
        assert!(
            out_text.starts_with(&format!(
                "Thread {pid} \"perl\" (read without a stop, blocked in write):"
            )),
            "round {round}:\n{out_text}"
        );
        let write_at = out_text.find("write (").expect("a write frame");
        let pp_at = out_text.find(" in Perl_pp_syswrite ");
        assert!(
            pp_at.is_some_and(|p| p > write_at),
            "round {round}: write's caller:\n{out_text}"
        );
        drain(&mut out, 20 * 1024);
    }
    wait_blocked(pid, pid, SYS_WRITE);
    assert!(
        !perl.lines().iter().any(|l| l.contains("short write")),
        "perl saw a short write: {:?}",
        perl.lines()
    );
    assert!(
        perl.child.try_wait().unwrap().is_none(),
        "perl exited: {:?}",
        perl.lines()
    );

    // A stop cuts the pending write short (164 KiB of its first block are
    // written by now): the script dies as in the bug report.
    let stopped = run_ok(&["bt", "--pid", &pid_s, "--always-stop"]);
    assert!(stopped.contains("\"perl\" (stopped "), "{stopped}");
    assert!(
        wait_until(SOON, || perl
            .lines()
            .iter()
            .any(|l| l.contains("short write"))),
        "a stop should cut perl's write short: {:?}",
        perl.lines()
    );
}

#[test]
fn record_idle_samples_blocked_threads_without_a_stop() {
    let mut t = Target::start("blocked", Variant::O2G);
    let pid = t.pid();
    let pid_s = pid.to_string();
    let writer = t.tid_named("writer", NAMED);
    let sleeper = t.tid_named("sleeper", NAMED);
    wait_blocked(pid, writer, SYS_WRITE);
    wait_blocked(pid, sleeper, SYS_READ);
    let (_, short0, _, _) = stats(&mut t, "stats");
    let (sleeper0, writer0) = (switches(pid, sleeper), switches(pid, writer));
    let out_file = temp_file("blocked", "idle.txt");
    let out = record_ok(&[
        "--pid",
        &pid_s,
        "--idle",
        "--duration",
        "1",
        "-o",
        out_file.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    let stacks = collapsed(&out_file);
    let _ = std::fs::remove_file(&out_file);
    assert!(
        stderr.contains("samples of threads blocked in a system call read without a stop"),
        "{stderr}"
    );
    // Every thread is in the profile: the blocked ones read without a stop,
    // the spinner stopped.
    for f in ["doze", "writer_loop", "spin_step"] {
        assert!(count(&stacks, |x| x == f) > 0, "no {f} in {stacks:?}");
    }
    assert_eq!(
        stats(&mut t, "stats").1,
        short0,
        "a sample cut a write short"
    );
    assert_eq!(
        switches(pid, sleeper),
        sleeper0,
        "a sample woke the sleeper"
    );
    assert_eq!(switches(pid, writer), writer0, "a sample woke the writer");
    t.assert_healthy();
}

#[test]
fn a_frame_that_needs_rbp_gets_its_thread_stopped_instead() {
    // At -O0, doze's CFA is rbp + 16 and the read(2) wrapper below it keeps rbp
    // in its register: without a stop rbp is unknown, so the sleeper is
    // stopped and read in full, never unwound short.
    let mut t = Target::start("blocked", Variant::new(Opt::O0g, true));
    let pid = t.pid();
    let sleeper = t.tid_named("sleeper", NAMED);
    let spinner = t.tid_named("spinner", NAMED);
    wait_blocked(pid, sleeper, SYS_READ);
    let bt = bt_json(pid, Some(sleeper));
    let th = bt_thread(&bt, sleeper).unwrap();
    assert_eq!(th["without_stop"], json!(false), "{th:#}");
    assert!(th.get("truncated").is_none(), "{th:#}");
    let n = names(th);
    for f in ["read", "doze", "nap", "sleeper"] {
        assert!(n.iter().any(|x| x == f), "no {f} in {n:?}");
    }
    let spin = bt_json(pid, Some(spinner));
    assert_eq!(bt_threads(&spin)[0]["without_stop"], json!(false));
    t.assert_healthy();
}
