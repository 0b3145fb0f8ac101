//! Stress: threads.c's 8 workers call the hooked `work(a, b)` in a tight loop
//! and check every result (a wrong one aborts the fixture), while this test
//! installs and ejects the hook 200 times through the library API. Zero
//! crashes, zero wrong results, progress after every cycle, and every place a
//! stopped thread's RIP can be (patched bytes, relocated prologue,
//! trampoline) is met and handled.

use std::time::{Duration, Instant};

use argstash_tests::*;
use injector::{eject, install, EjectOptions, InstallOptions, Pid, RipCensus};
use reader::symbols::FuncSpec;

const CYCLES: usize = 200;

/// The per-worker call counters of threads.c (`static atomic_ulong calls[8]`).
fn worker_calls(t: &Target, calls_addr: u64) -> Vec<u64> {
    read_mem(t.pid(), calls_addr, 8 * consts::THREADS_WORKERS)
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn add(total: &mut RipCensus, c: &RipCensus) {
    total.in_patch += c.in_patch;
    total.in_relocated += c.in_relocated;
    total.in_trampoline += c.in_trampoline;
}

#[test]
fn eight_threads_two_hundred_inject_eject_cycles() {
    let mut t = Target::start("threads", Variant::O2G);
    let pid = t.pid();
    let tids = t.tids();
    assert_eq!(tids.len(), consts::THREADS_TOTAL);
    let calls_addr = t.addr_of("calls");
    let work = FuncSpec::Name("work".into());
    let work_addr = t.addr_of("work");
    let pristine = function_bytes(t.exe(), "work");
    assert_eq!(read_mem(pid, work_addr, pristine.len()), pristine);
    let start_calls = worker_calls(&t, calls_addr);
    let mut in_library = Duration::ZERO;

    let mut at_install = RipCensus::default();
    let mut at_eject = RipCensus::default();
    let (mut moved_in, mut moved_out) = (0, 0);
    let mut max_stop = Duration::ZERO;
    let started = Instant::now();
    let mut last_sum: u64 = start_calls.iter().sum();
    for cycle in 0..CYCLES {
        let call = Instant::now();
        let report = install(
            Pid::from_raw(pid),
            std::slice::from_ref(&work),
            &InstallOptions::default(),
        )
        .unwrap_or_else(|e| t.fail(&format!("cycle {cycle}: install: {e}")));
        assert_eq!(report.hooks.len(), 1);
        assert_eq!(report.threads, consts::THREADS_TOTAL, "cycle {cycle}");
        // Every thread found strictly inside the patched bytes was moved.
        assert_eq!(
            report.moved_threads.len(),
            report.rip_census.in_patch,
            "cycle {cycle}"
        );
        in_library += call.elapsed();
        add(&mut at_install, &report.rip_census);
        moved_in += report.moved_threads.len();
        max_stop = max_stop.max(report.stopped);

        let call = Instant::now();
        let report = eject(
            Pid::from_raw(pid),
            &EjectOptions::functions(vec![work.clone()]),
        )
        .unwrap_or_else(|e| t.fail(&format!("cycle {cycle}: eject: {e}")));
        assert_eq!(report.hooks.len(), 1);
        // Every thread found in the relocated prologue was moved back.
        assert_eq!(
            report.moved_threads.len(),
            report.rip_census.in_relocated,
            "cycle {cycle}"
        );
        in_library += call.elapsed();
        add(&mut at_eject, &report.rip_census);
        moved_out += report.moved_threads.len();
        max_stop = max_stop.max(report.stopped);

        assert_eq!(
            read_mem(pid, work_addr, pristine.len()),
            pristine,
            "cycle {cycle}: work not restored"
        );
        t.assert_healthy();
        // The workers keep making progress between cycles.
        let mut sum = 0;
        let progressed = wait_until(Duration::from_secs(10), || {
            sum = worker_calls(&t, calls_addr).iter().sum();
            sum > last_sum
        });
        if !progressed {
            t.fail(&format!(
                "cycle {cycle}: work() calls stalled at {last_sum}"
            ));
        }
        last_sum = sum;
    }
    let elapsed = started.elapsed();
    eprintln!("{CYCLES} inject/eject cycles with 8 busy threads took {elapsed:?}, {in_library:?} of it in install/eject (longest stop {max_stop:?})");
    eprintln!(
        "RIPs at install: {} in the patched bytes (moved {moved_in}); at eject: {} in relocated prologues (moved back {moved_out}), {} in trampolines, {} on the patch entry",
        at_install.in_patch, at_eject.in_relocated, at_eject.in_trampoline, at_eject.in_patch
    );
    // With 8 threads spending most of their time in and around work(), 200
    // stops always catch threads in the trampoline; the rarer places are
    // printed above.
    assert!(
        at_eject.in_trampoline > 0,
        "no eject in {CYCLES} found a thread inside the trampoline"
    );

    // Every worker made progress, the process kept every thread, and nothing is left behind.
    let end_calls = worker_calls(&t, calls_addr);
    for (w, (a, b)) in start_calls.iter().zip(&end_calls).enumerate() {
        assert!(b > a, "worker {w} stalled: {a} -> {b}");
    }
    assert_eq!(t.tids(), tids, "every thread is still there");
    assert_eq!(tracer_pid(pid), None);
    let hooks = list_hooks(pid);
    assert_eq!(hooks_named(&hooks, "work", "ejected").len(), CYCLES);
    assert!(hooks_named(&hooks, "work", "active").is_empty());
    t.assert_healthy();
}

/// Single-steps thread `tid` (seized by this test) until `at(rip)`, then
/// lets it go with a SIGSTOP pending, so the whole process group-stops with that
/// thread's RIP exactly there. Returns the RIP.
fn park_thread_where(pid: i32, tid: i32, at: impl Fn(u64) -> bool) -> u64 {
    use nix::sys::ptrace;
    use nix::sys::signal::Signal;
    use nix::sys::wait::{waitpid, WaitPidFlag};
    use nix::unistd::Pid;
    let t = Pid::from_raw(tid);
    ptrace::seize(t, ptrace::Options::empty()).expect("PTRACE_SEIZE");
    ptrace::interrupt(t).expect("PTRACE_INTERRUPT");
    waitpid(t, Some(WaitPidFlag::__WALL)).expect("waitpid");
    let mut rip = 0;
    for _ in 0..1_000_000 {
        rip = ptrace::getregs(t).expect("PTRACE_GETREGS").rip;
        if at(rip) {
            break;
        }
        ptrace::step(t, None).expect("PTRACE_SINGLESTEP");
        waitpid(t, Some(WaitPidFlag::__WALL)).expect("waitpid");
    }
    assert!(at(rip), "thread {tid} never reached the wanted place");
    // A process-wide SIGSTOP while the thread is still held: it joins the
    // group-stop when let go, before running another instruction (a signal
    // passed to PTRACE_DETACH would be dropped when the thread is in an
    // interrupt stop rather than a single-step trap).
    nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGSTOP).expect("SIGSTOP");
    ptrace::detach(t, None).expect("PTRACE_DETACH");
    assert!(
        wait_until(Duration::from_secs(10), || thread_ids(pid)
            .iter()
            .all(|t| thread_state(pid, *t) == Some('T'))),
        "the process did not group-stop"
    );
    rip
}

fn resume(pid: i32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGCONT,
    )
    .expect("SIGCONT");
}

/// RIP of stopped thread `tid` (looked at through a one-thread session).
fn rip_of(pid: i32, tid: i32) -> u64 {
    let s = injector::Session::attach_thread(pid, tid).expect("attach");
    let rip = s.regs(tid).expect("regs").rip;
    s.detach().expect("detach");
    rip
}

/// The active record of the hook on `function`.
fn record_of(pid: i32, function: u64) -> trampolines::arena::HookRecord {
    let maps = reader::procfs::read_maps(pid).unwrap();
    let mem = injector::ProcessMemory::open(pid).unwrap();
    let arenas = reader::arena::discover(&maps, &mem).unwrap();
    arenas
        .iter()
        .find_map(|a| a.active_for(function).map(|(_, r)| r.clone()))
        .expect("an active hook")
}

/// Each place a thread can be stopped at, made to happen on purpose: a worker
/// is single-stepped to it and the process group-stopped there, then the
/// hook is installed or ejected, and the worker, resumed, must compute right.
#[test]
fn threads_parked_in_each_place_are_handled() {
    let mut t = Target::start("threads", Variant::O2G);
    let pid = t.pid();
    let work_addr = t.addr_of("work");
    let calls_addr = t.addr_of("calls");
    let pristine = function_bytes(t.exe(), "work");
    let (skip, len) = expected_patch(t.exe(), "work");
    let patch = work_addr + skip;
    let worker = thread_names(pid)
        .into_iter()
        .find(|(_, n)| n == "work2")
        .unwrap()
        .0;
    let work = || vec![FuncSpec::Name("work".into())];
    let progress = |t: &mut Target, what: &str| {
        let before = worker_calls(t, calls_addr)[2];
        if !wait_until(Duration::from_secs(10), || {
            worker_calls(t, calls_addr)[2] > before
        }) {
            t.fail(&format!("worker 2 stalled after {what}"));
        }
        t.assert_healthy();
    };

    // Install with the worker strictly inside the bytes the patch overwrites.
    let rip = park_thread_where(pid, worker, |rip| rip > patch && rip < patch + len as u64);
    let report = install(Pid::from_raw(pid), &work(), &InstallOptions::default()).unwrap();
    // Other workers, stopped wherever the SIGSTOP found them, may be there too.
    assert!(report.rip_census.in_patch >= 1, "{report:?}");
    assert!(report.moved_threads.contains(&worker), "{report:?}");
    let r = record_of(pid, work_addr);
    assert_eq!(r.original_to_relocated(rip), Some(rip_of(pid, worker)));
    resume(pid);
    progress(&mut t, "being moved into the relocated prologue");

    // Eject with the worker inside the relocated prologue: moved back.
    let rip = park_thread_where(pid, worker, |rip| r.in_relocated(rip));
    let report = eject(Pid::from_raw(pid), &EjectOptions::functions(work())).unwrap();
    assert!(report.rip_census.in_relocated >= 1, "{report:?}");
    assert!(report.moved_threads.contains(&worker), "{report:?}");
    assert_eq!(read_mem(pid, work_addr, pristine.len()), pristine);
    assert_eq!(r.relocated_to_original(rip), Some(rip_of(pid, worker)));
    resume(pid);
    progress(&mut t, "being moved back to the original bytes");

    // Eject with the worker inside the trampoline: it stays and finishes the call.
    install(Pid::from_raw(pid), &work(), &InstallOptions::default()).unwrap();
    let r = record_of(pid, work_addr);
    park_thread_where(pid, worker, |rip| r.in_trampoline(rip));
    let report = eject(Pid::from_raw(pid), &EjectOptions::functions(work())).unwrap();
    assert!(report.rip_census.in_trampoline >= 1, "{report:?}");
    assert!(!report.moved_threads.contains(&worker), "{report:?}");
    resume(pid);
    progress(&mut t, "an eject while it was in the trampoline");
    assert_eq!(read_mem(pid, work_addr, pristine.len()), pristine);
    assert_eq!(tracer_pid(pid), None);
}

/// Hooks in one `inject` call.
const MANY: usize = 50;

/// C source of a program with [`MANY`] hookable functions `f00`..`f49`
/// calling each other in a chain: `f<i>(1000 + i, 0x5000 + 0x100 * i)`; the
/// last one sleeps 20 ms, so the whole chain is on the main thread's stack
/// most of the time. main checks every result against one computed before
/// it says ready, and prints `iter N` after each call.
fn chain_source() -> String {
    let mut c = String::from("#include \"fixture.h\"\n\n");
    for i in 0..MANY {
        c += &format!("long f{i:02}(long a, long b);\n");
    }
    for i in 0..MANY {
        let body = if i + 1 == MANY {
            "    sleep_ms(20);\n    return a ^ b;\n".to_string()
        } else {
            format!(
                "    long r = f{:02}(a + 1, b + 0x100);\n    return (r ^ a) + {i};\n",
                i + 1
            )
        };
        c += &format!("\nHOOKABLE long f{i:02}(long a, long b)\n{{\n{body}}}\n");
    }
    c += r#"
int main(void)
{
    long expected = f00(1000, 0x5000);
    announce_ready();
    for (long iter = 0;; iter++) {
        long r = f00(1000, 0x5000);
        if (r != expected)
            wrong("iter %ld: f00 = %ld, expected %ld", iter, r, expected);
        say("iter %ld", iter);
    }
}
"#;
    c
}

/// Compiles [`chain_source`] once (-O2 -g, PIE) into the fixture cache.
fn build_chain() -> std::path::PathBuf {
    let dir = fixture_cache_dir();
    let src = dir.join(format!("chain{MANY}-{}.c", std::process::id()));
    std::fs::write(&src, chain_source()).unwrap();
    let exe = src.with_extension("");
    let out = std::process::Command::new("cc")
        .args(["-O2", "-g", "-fPIE", "-pie", "-I"])
        .arg(fixtures_dir())
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run cc (scripts/setup.sh installs it)");
    assert!(out.status.success(), "cc: {out:?}");
    exe
}

#[test]
fn fifty_functions_in_one_inject() {
    let exe = build_chain();
    let mut t = Target::spawn(&exe);
    let pid = t.pid().to_string();
    let names: Vec<String> = (0..MANY).map(|i| format!("f{i:02}")).collect();
    let mut args = vec!["inject", "--pid", &pid];
    for n in &names {
        args.extend(["--func", n.as_str()]);
    }
    let out = run_ok(&args);
    eprintln!("{}", out.lines().last().unwrap_or_default());
    assert_eq!(
        out.lines().filter(|l| l.starts_with("hooked ")).count(),
        MANY,
        "{out}"
    );
    // One stop window and one arena for all of them.
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with("target stopped for"))
            .count(),
        1,
        "{out}"
    );
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with("created arena at"))
            .count(),
        1,
        "{out}"
    );
    let hooks = list_hooks(t.pid());
    let mut arenas: Vec<u64> = hooks.iter().map(|h| json_hex(&h["arena"])).collect();
    arenas.sort_unstable();
    arenas.dedup();
    assert_eq!(arenas.len(), 1, "{hooks:#?}");
    for n in &names {
        assert_eq!(hooks_named(&hooks, n, "active").len(), 1, "{n}: {hooks:#?}");
    }

    // Every hooked frame of the chain shows its own arguments.
    let main_tid = t.pid();
    let last = names.last().unwrap().clone();
    let bt = wait_bt(t.pid(), Some(main_tid), Duration::from_secs(10), |bt| {
        bt_thread(bt, main_tid)
            .and_then(|th| frame_named(th, &last))
            .is_some_and(|(_, f)| f["hooked"] == serde_json::json!(true))
    });
    let th = bt_thread(&bt, main_tid).unwrap();
    for (i, n) in names.iter().enumerate() {
        let (_, f) = frame_named(th, n).unwrap_or_else(|| panic!("no {n}: {th:#}"));
        assert_eq!(f["hooked"], serde_json::json!(true), "{n}: {th:#}");
        assert_eq!(frame_arg(f, "rdi"), Some(1000 + i as u64), "{n}: {th:#}");
        assert_eq!(
            frame_arg(f, "rsi"),
            Some(0x5000 + 0x100 * i as u64),
            "{n}: {th:#}"
        );
    }

    // The hooked chain keeps computing the right result.
    t.drain_lines();
    for _ in 0..3 {
        t.wait_for_line(Duration::from_secs(10), |l| l.starts_with("iter "));
    }
    t.assert_healthy();
    let out = run_ok(&["eject", "--pid", &pid, "--all"]);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ejected ")).count(),
        MANY,
        "{out}"
    );
    for n in &names {
        t.assert_function_pristine(n);
    }
    t.wait_for_line(Duration::from_secs(10), |l| l.starts_with("iter "));
    t.assert_healthy();
    let _ = std::fs::remove_file(exe.with_extension("c"));
    let _ = std::fs::remove_file(&exe);
}
