//! End-to-end: threads.c, 8 workers hammering `work(a, b)` and one thread
//! parked in `parked(tag)`. Hooks must show the parked thread's argument in
//! every view of the backtrace, must not disturb the workers' results, and
//! must survive many inject/eject cycles while the workers run.

use std::time::Duration;

use argstash_tests::*;
use serde_json::{json, Value};

/// parked() sleeps 200 ms per call: a hooked call shows up well within this.
const SOON: Duration = Duration::from_secs(5);

/// threads.c names every thread before it prints `ready`: no need to wait for a name.
const NAMED: Duration = Duration::ZERO;

/// A "tick N calls C parked P" line of threads.c, as (C, P).
fn tick(t: &mut Target) -> (u64, u64) {
    let line = t.wait_for_line(SOON, |l| l.starts_with("tick "));
    let w: Vec<&str> = line.split_whitespace().collect();
    match w.as_slice() {
        ["tick", _, "calls", c, "parked", p] => (c.parse().unwrap(), p.parse().unwrap()),
        _ => t.fail(&format!("bad tick line {line:?}")),
    }
}

/// Waits for two ticks (>= 500 ms of running) and checks the workers and the
/// parked thread made progress in between.
fn assert_progress(t: &mut Target) {
    t.drain_lines();
    let (c0, p0) = tick(t);
    let (c1, p1) = tick(t);
    assert!(c1 > c0, "work() calls stalled: {c0} -> {c1}");
    assert!(p1 > p0, "parked() calls stalled: {p0} -> {p1}");
    t.assert_healthy();
}

/// True when thread `tid` of `bt` shows `parked` hooked.
fn parked_hooked(bt: &Value, tid: i32) -> bool {
    bt_thread(bt, tid)
        .and_then(|th| frame_named(th, "parked"))
        .is_some_and(|(_, f)| f["hooked"] == json!(true))
}

/// Checks the parked thread's backtrace: parked(TAG) hooked, called by `parker`.
fn check_parked(th: &Value) {
    let (i, f) = frame_named(th, "parked").expect("parked on the stack");
    assert_eq!(
        raw_arg(&f["args"][0]),
        json!({"register": "rdi", "value": consts::THREADS_PARKED_TAG as u64}),
        "{th:#}"
    );
    let frames = thread_frames(th);
    assert_eq!(
        frames.get(i + 1).and_then(|c| c["function"].as_str()),
        Some("parker"),
        "parked's caller: {th:#}"
    );
    for (j, g) in frames.iter().enumerate().filter(|(j, _)| *j != i) {
        assert_eq!(g["hooked"], json!(false), "frame {j}: {th:#}");
    }
}

/// Checks a worker's backtrace: `worker` on it; if it is caught inside the
/// hooked `work`, the stashed a and b are a worker's.
fn check_worker(th: &Value, t: i64) -> bool {
    assert!(
        frame_named(th, "worker").is_some(),
        "the unwind reaches worker: {th:#}"
    );
    match frame_named(th, "work") {
        Some((_, f)) if f["hooked"] == json!(true) => {
            let a = frame_arg(f, "rdi").unwrap() as u32 as i32 as i64;
            let b = frame_arg(f, "rsi").unwrap() as u32 as i32 as i64;
            assert!((t * 1000..t * 1000 + 1024).contains(&a), "a = {a}: {th:#}");
            assert!((0..1024).contains(&b), "b = {b}: {th:#}");
            true
        }
        _ => false,
    }
}

#[test]
fn backtraces_of_all_threads_and_of_one() {
    let mut t = Target::start("threads", Variant::O2G);
    let pid = t.pid().to_string();
    let tids = t.tids();
    assert_eq!(tids.len(), consts::THREADS_TOTAL);
    let parked = t.tid_named("parked", NAMED);

    run_ok(&[
        "inject", "--pid", &pid, "--func", "work", "--func", "parked",
    ]);
    let hooks = list_hooks(t.pid());
    assert_eq!(hooks_named(&hooks, "work", "active").len(), 1, "{hooks:#?}");
    assert_eq!(
        hooks_named(&hooks, "parked", "active").len(),
        1,
        "{hooks:#?}"
    );

    // All threads: every one is there, with its name; parked shows its tag.
    let bt = wait_bt(t.pid(), None, SOON, |bt| parked_hooked(bt, parked));
    let threads = bt_threads(&bt);
    let mut bt_tids: Vec<i32> = threads
        .iter()
        .map(|th| th["tid"].as_i64().unwrap() as i32)
        .collect();
    bt_tids.sort_unstable();
    assert_eq!(bt_tids, tids, "bt covers every thread");
    for (tid, name) in thread_names(t.pid()) {
        let th = bt_thread(&bt, tid).unwrap();
        assert_eq!(th["name"].as_str(), Some(name.as_str()), "{th:#}");
        assert!(!thread_frames(th).is_empty(), "{th:#}");
    }
    check_parked(bt_thread(&bt, parked).unwrap());
    for w in 0..consts::THREADS_WORKERS {
        let tid = t.tid_named(&format!("work{w}"), NAMED);
        check_worker(bt_thread(&bt, tid).unwrap(), w as i64);
    }

    // The workers keep computing correct results for a while, hooked.
    assert_progress(&mut t);

    // One thread: just that one.
    let one = bt_json(t.pid(), Some(parked));
    assert_eq!(bt_threads(&one).len(), 1, "{one:#}");
    let th = &bt_threads(&one)[0];
    assert_eq!(th["tid"].as_i64(), Some(i64::from(parked)));
    assert_eq!(th["name"].as_str(), Some("parked"));
    if !parked_hooked(&one, parked) {
        // Between two calls of parked(); the next one is hooked.
        let again = wait_bt(t.pid(), Some(parked), SOON, |bt| parked_hooked(bt, parked));
        assert_eq!(bt_threads(&again).len(), 1, "{again:#}");
        check_parked(&bt_threads(&again)[0]);
    } else {
        check_parked(th);
    }
    let w3 = t.tid_named("work3", NAMED);
    let mut caught_in_work = 0;
    for _ in 0..20 {
        let one = bt_json(t.pid(), Some(w3));
        let threads = bt_threads(&one);
        assert_eq!(threads.len(), 1, "{one:#}");
        assert_eq!(threads[0]["tid"].as_i64(), Some(i64::from(w3)));
        assert_eq!(threads[0]["name"].as_str(), Some("work3"));
        caught_in_work += usize::from(check_worker(&threads[0], 3));
    }
    eprintln!("work3 was inside hooked work() in {caught_in_work} of 20 backtraces");

    run_ok(&["eject", "--pid", &pid, "--all"]);
    t.assert_function_pristine("work");
    t.assert_function_pristine("parked");
    assert_eq!(t.tids(), tids, "every thread is still there");
    assert_eq!(tracer_pid(t.pid()), None);
    assert_progress(&mut t);
}

#[test]
fn inject_eject_cycles_under_load() {
    let mut t = Target::start("threads", Variant::O2G);
    let pid = t.pid().to_string();
    let tids = t.tids();
    assert_eq!(tids.len(), consts::THREADS_TOTAL);
    let work = t.live_function_bytes("work");
    let work_addr = t.addr_of("work");
    let (skip, len) = expected_patch(t.exe(), "work");
    let target_pid = t.pid();
    let live_work = || read_mem(target_pid, work_addr, work.len());

    run_ok(&["inject", "--pid", &pid, "--func", "parked"]);
    const CYCLES: usize = 20;
    let mut moved = 0;
    let started = std::time::Instant::now();
    for i in 0..CYCLES {
        let out = run_ok(&["inject", "--pid", &pid, "--func", "work"]);
        moved += usize::from(out.contains("moved threads"));
        let live = live_work();
        assert!(
            jmp_rel32_target(work_addr + skip, &live[skip as usize..]).is_some(),
            "cycle {i}: work is not patched: {live:02x?}"
        );
        assert_eq!(live[skip as usize + len..], work[skip as usize + len..]);
        run_ok(&["eject", "--pid", &pid, "--func", "work"]);
        assert_eq!(live_work(), work, "cycle {i}: not restored");
        t.assert_healthy();
    }
    let elapsed = started.elapsed();
    eprintln!("{CYCLES} cycles took {elapsed:?}");
    eprintln!("threads were moved out of the patch in {moved} of {CYCLES} injects");

    let hooks = list_hooks(t.pid());
    assert_eq!(
        hooks_named(&hooks, "work", "ejected").len(),
        CYCLES,
        "{hooks:#?}"
    );
    assert!(
        hooks_named(&hooks, "work", "active").is_empty(),
        "{hooks:#?}"
    );
    assert_eq!(
        hooks_named(&hooks, "parked", "active").len(),
        1,
        "{hooks:#?}"
    );
    assert_eq!(t.tids(), tids, "every thread is still there");
    assert_progress(&mut t);

    // The parked hook lived through all of it.
    let parked = t.tid_named("parked", NAMED);
    let bt = wait_bt(t.pid(), Some(parked), SOON, |bt| parked_hooked(bt, parked));
    check_parked(&bt_threads(&bt)[0]);

    run_ok(&["eject", "--pid", &pid, "--all"]);
    t.assert_function_pristine("work");
    t.assert_function_pristine("parked");
    assert_eq!(t.tids(), tids);
    assert_eq!(tracer_pid(t.pid()), None);
    assert_progress(&mut t);
}
