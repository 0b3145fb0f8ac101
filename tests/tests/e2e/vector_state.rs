//! End-to-end: a thread's vector state survives whatever argstash does with it
//! (issue 19: AVX-512 state was lost when a thread returned through the signal frame).
//!
//! vecstate.c keeps known values in zmm0-31, k0-7 and MXCSR (ymm0-15 or xmm0-15
//! without AVX-512) of every thread, across a blocking read() in one asm
//! statement, and checks them when told to ("check"). Each test prints what it
//! covered on this machine. The remote calls go to the fixture's `vec_clobber_*`
//! functions, which fill every one of those registers with garbage first, so only
//! an exact restore passes:
//!
//! - a call released after its time limit while asleep in the kernel, and one
//!   released while spinning in user code: the thread comes back through the
//!   signal frame by itself (its XSAVE image and registers compared byte for byte);
//! - a completed call, a crashed call and a remote system call: argstash puts the
//!   state back itself (`PTRACE_SETREGSET`), byte-exact, `XSTATE_BV` included;
//! - `argstash inject` and `eject` on the process (they borrow its threads);
//! - the tracer SIGKILLed while the thread runs a called function, and while it
//!   sits in a remote system call: the frame alone brings the thread back. The
//!   tracer is a forked copy of this test process running argstash's `Session`
//!   (the same code the CLI runs), so the kill lands at a known point.

use std::time::Duration;

use argstash_tests::*;
use injector::{RemoteCallError, Session, XsaveLayout};

const LINE: Duration = Duration::from_secs(10);
const FIXTURE: &str = "vecstate";

/// A running vecstate.c.
struct VecTarget {
    t: Target,
    /// Main thread first, then the workers.
    tids: Vec<i32>,
}

impl VecTarget {
    fn start(workers: usize) -> VecTarget {
        let t = Target::start_with_args(FIXTURE, Variant::O2G, &[&workers.to_string()]);
        let covers = t.expect_line(LINE);
        let cpu = t.expect_line(LINE);
        let tids: Vec<i32> = t
            .expect_line(LINE)
            .strip_prefix("tids ")
            .unwrap_or_else(|| t.fail("no tids line"))
            .split_whitespace()
            .map(|s| s.parse().expect("tid"))
            .collect();
        assert_eq!(tids.len(), workers + 1);
        report_coverage(&covers, &cpu);
        let v = VecTarget { t, tids };
        v.wait_all_in_read();
        v
    }

    fn pid(&self) -> i32 {
        self.t.pid()
    }

    fn worker(&self, i: usize) -> i32 {
        self.tids[i]
    }

    /// Every thread is blocked in its read(), registers loaded.
    fn wait_all_in_read(&self) {
        for &tid in &self.tids {
            assert!(
                wait_until(LINE, || in_read(self.pid(), tid)),
                "thread {tid} is not back in its read() (syscall: {:?})",
                syscall_of(self.pid(), tid)
            );
        }
    }

    /// One "check" round: every thread's registers must be what it loaded.
    fn check(&mut self, after: &str) {
        self.wait_all_in_read();
        self.t.write_stdin("check\n");
        let line = self.t.wait_for_line(LINE, |l| l.starts_with("round "));
        assert!(
            line.contains(" ok threads "),
            "after {after}: {line}\n{}",
            self.t.stderr_text()
        );
        println!("after {after}: {line}");
        self.t.assert_healthy();
    }

    fn addr(&self, sym: &str) -> u64 {
        self.t.addr_of(sym)
    }

    /// The "clobbered <tid>" line of a `vec_clobber_*` call on `tid`.
    fn wait_clobbered(&mut self, tid: i32) {
        let want = format!("clobbered {tid}");
        self.t.wait_for_line(LINE, |l| l == want);
    }
}

/// Prints what the fixture covers here, and fails if it does not cover AVX-512
/// on a machine that has it (the test must run, not skip, there).
fn report_coverage(covers: &str, cpu: &str) {
    let field = |name: &str| {
        cpu.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {cpu:?}"))
            .to_string()
    };
    let xcr0 = field("xcr0=");
    let avx512 = field("avx512=") == "1";
    let amx = field("amx=") == "1";
    let host_avx512 = std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw");
    assert_eq!(
        avx512, host_avx512,
        "the fixture's AVX-512 detection ({cpu}) disagrees with this process's"
    );
    let mut covered = Vec::new();
    let mut not_covered = Vec::new();
    match covers {
        "covers avx512 zmm0-31 k0-7 mxcsr" => covered.push("avx512 (k0-7, zmm0-31)"),
        "covers avx ymm0-15 mxcsr" => covered.push("avx (ymm0-15)"),
        "covers sse xmm0-15 mxcsr" => covered.push("sse (xmm0-15)"),
        other => panic!("unknown coverage line {other:?}"),
    }
    covered.push("mxcsr");
    assert_eq!(
        host_avx512,
        covers.starts_with("covers avx512"),
        "AVX-512 is here and must be covered: {covers}"
    );
    let absent_avx512 = format!("avx512 (absent: XCR0={xcr0})");
    if !avx512 {
        not_covered.push(absent_avx512.as_str());
    }
    let amx_note = if amx {
        format!("amx (present, XCR0={xcr0}: the fixture loads no tiles)")
    } else {
        format!("amx (absent: XCR0={xcr0})")
    };
    not_covered.push(&amx_note);
    not_covered.push("x87 stack (not loaded)");
    println!(
        "covered: {}; not covered: {}",
        covered.join(", "),
        not_covered.join(", ")
    );
}

/// `/proc/PID/task/TID/syscall`: the thread's system call, first field.
fn syscall_of(pid: i32, tid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall"))
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
}

fn in_read(pid: i32, tid: i32) -> bool {
    syscall_of(pid, tid).as_deref() == Some("0")
}

/// Asserts two XSAVE images are equal, naming the differing byte offsets.
#[track_caller]
fn assert_same_xstate(before: &[u8], after: &[u8], what: &str) {
    let differ: Vec<usize> = (0..before.len().min(after.len()))
        .filter(|i| before[*i] != after[*i])
        .collect();
    assert!(
        before == after,
        "{what}: XSAVE image not restored exactly; bytes differ at {differ:?} (len {} vs {})",
        before.len(),
        after.len()
    );
}

/// Attaches to `tid`, runs `call` (which must release the call), detaches, and
/// checks the thread comes back by itself with its registers and image intact.
fn released_call(v: &mut VecTarget, tid: i32, function: &str, ms: u64, limit: Duration) {
    let pid = v.pid();
    let addr = v.addr(function);
    let mut s = Session::attach_thread(pid, tid).expect("attach");
    let regs_before = s.regs(tid).unwrap();
    let image_before = xstate(tid);
    let err = s
        .remote_call(tid, addr, function, &[ms], limit)
        .expect_err("the call outlasts its limit");
    assert!(matches!(err, RemoteCallError::Released { .. }), "{err}");
    s.detach().unwrap();
    v.wait_clobbered(tid);
    assert!(
        !in_read(pid, tid),
        "the thread is still inside {function} ({ms} ms)"
    );
    assert!(
        wait_until(Duration::from_secs(5), || in_read(pid, tid)),
        "the thread returned to its read() by itself"
    );
    let s = Session::attach_thread(pid, tid).expect("attach again");
    let regs_after = s.regs(tid).unwrap();
    let image_after = xstate(tid);
    s.detach().unwrap();
    assert_same_xstate(&image_before, &image_after, "rt_sigreturn from the frame");
    assert_eq!(
        format!("{regs_before:?}"),
        format!("{regs_after:?}"),
        "general registers restored exactly"
    );
    v.check(&format!("{function} released after {limit:?}"));
}

#[test]
fn call_released_while_blocked_returns_through_the_frame_intact() {
    let mut v = VecTarget::start(2);
    let tid = v.worker(1);
    released_call(
        &mut v,
        tid,
        "vec_clobber_sleep",
        400,
        Duration::from_millis(100),
    );
    // The main thread too.
    let main = v.tids[0];
    released_call(
        &mut v,
        main,
        "vec_clobber_sleep",
        400,
        Duration::from_millis(100),
    );
}

#[test]
fn call_timed_out_while_spinning_returns_through_the_frame_intact() {
    let mut v = VecTarget::start(2);
    let tid = v.worker(2);
    // Interrupted in user code, the garbage live in the registers.
    released_call(
        &mut v,
        tid,
        "vec_clobber_spin",
        400,
        Duration::from_millis(100),
    );
}

#[test]
fn completed_crashed_and_syscall_runs_are_undone_byte_exact() {
    let mut v = VecTarget::start(2);
    let pid = v.pid();
    let tid = v.worker(1);
    let sleep = v.addr("vec_clobber_sleep");
    let crash = v.addr("vec_clobber_crash");
    let mut s = Session::attach_thread(pid, tid).expect("attach");
    let regs = s.regs(tid).unwrap();
    let image = xstate(tid);
    if let Some(layout) = XsaveLayout::host() {
        assert_eq!(
            image.len(),
            layout.max_size(),
            "ptrace's image spans every enabled feature of the CPUID layout (XCR0 {:#x})",
            layout.xcr0
        );
    }
    s.remote_call(tid, sleep, "vec_clobber_sleep", &[1], LINE)
        .expect("vec_clobber_sleep(1) returns");
    assert_same_xstate(&image, &xstate(tid), "a completed call");
    let err = s
        .remote_call(tid, crash, "vec_clobber_crash", &[], LINE)
        .expect_err("vec_clobber_crash faults");
    assert!(matches!(err, RemoteCallError::Crashed { .. }), "{err}");
    assert_same_xstate(&image, &xstate(tid), "a crashed call");
    let got = s
        .remote_syscall_on(tid, libc::SYS_getpid, [0; 6])
        .expect("remote getpid");
    assert_eq!(got, i64::from(pid));
    assert_same_xstate(&image, &xstate(tid), "a remote system call");
    assert_eq!(format!("{regs:?}"), format!("{:?}", s.regs(tid).unwrap()));
    s.detach().unwrap();
    v.wait_clobbered(tid);
    v.check("a completed call, a crashed call and a remote system call");
}

#[test]
fn inject_and_eject_leave_every_thread_intact() {
    let mut v = VecTarget::start(3);
    let p = v.pid().to_string();
    run_ok(&["inject", "--pid", &p, "--func", "vec_hookable"]);
    v.check("inject");
    run_ok(&["eject", "--pid", &p, "--all"]);
    v.check("eject");
    v.t.assert_function_pristine("vec_hookable");
}

/// Runs `work` in a forked copy of this process (its exit code is 0 on success),
/// dying with the test thread; returns the child's pid.
fn tracer_process(work: impl FnOnce() -> bool) -> i32 {
    // SAFETY: fork(2); the child runs only `work` (ptrace through argstash's
    // Session, whose allocations glibc makes safe after fork) and then _exit(2),
    // never returning into the test harness.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        // SAFETY: prctl and _exit only act on this process.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or(false);
        // SAFETY: as above.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    child
}

/// SIGKILLs and reaps the tracer process `child`; its wait status.
fn kill_tracer(child: i32) -> i32 {
    let mut status = 0;
    // SAFETY: kill and waitpid on our own forked child.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, &mut status, 0);
    }
    status
}

#[test]
fn tracer_killed_inside_a_call_the_frame_restores_the_thread() {
    let mut v = VecTarget::start(2);
    let (pid, tid) = (v.pid(), v.worker(1));
    let sleep = v.addr("vec_clobber_sleep");
    let child = tracer_process(move || {
        let Ok(mut s) = Session::attach_thread(pid, tid) else {
            return false;
        };
        let _ = s.remote_call(
            tid,
            sleep,
            "vec_clobber_sleep",
            &[1500],
            Duration::from_secs(30),
        );
        true
    });
    // The thread is inside the call, its registers garbage: kill the tracer.
    v.wait_clobbered(tid);
    let status = kill_tracer(child);
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
        "the tracer was killed mid-call (status {status:#x})"
    );
    assert!(!in_read(pid, tid), "the thread is still inside the call");
    assert!(
        wait_until(Duration::from_secs(10), || in_read(pid, tid)),
        "the thread came back to its read() by itself"
    );
    v.check("the tracer was killed inside a call");
}

#[test]
fn tracer_killed_inside_a_remote_syscall_the_frame_restores_the_thread() {
    let mut v = VecTarget::start(2);
    let (pid, tid) = (v.pid(), v.worker(2));
    let child = tracer_process(move || {
        let Ok(mut s) = Session::attach_thread(pid, tid) else {
            return false;
        };
        // poll(NULL, 0, 1500): a system call that just waits.
        let _ = s.remote_syscall_on(tid, libc::SYS_poll, [0, 0, 1500, 0, 0, 0]);
        true
    });
    let poll = libc::SYS_poll.to_string();
    assert!(
        wait_until(LINE, || syscall_of(pid, tid).as_deref()
            == Some(poll.as_str())),
        "the thread never entered the remote poll (syscall {:?})",
        syscall_of(pid, tid)
    );
    let status = kill_tracer(child);
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
        "the tracer was killed mid-syscall (status {status:#x})"
    );
    assert!(
        wait_until(Duration::from_secs(10), || in_read(pid, tid)),
        "the thread came back to its read() by itself (syscall {:?})",
        syscall_of(pid, tid)
    );
    v.check("the tracer was killed inside a remote system call");
}
