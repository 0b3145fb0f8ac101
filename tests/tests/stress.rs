//! Stress: threads.c's 8 workers call the hooked `work(a, b)` in a tight loop
//! and check every result (a wrong one aborts the fixture), while this test
//! installs and ejects the hook 200 times through the library API. Zero
//! crashes, zero wrong results, progress after every cycle, and every place a
//! stopped thread's RIP can be (patched bytes, relocated prologue,
//! trampoline) is met and handled.

use std::time::{Duration, Instant};

use argstash_tests::*;
use injector::hooks::{eject, install, EjectWhat, InstallOptions, RipCensus};
use injector::symbols::FuncSpec;

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
        let report = install(pid, std::slice::from_ref(&work), &InstallOptions::default())
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
        let report = eject(pid, &EjectWhat::Functions(vec![work.clone()]))
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
