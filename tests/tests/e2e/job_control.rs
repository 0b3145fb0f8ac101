//! End-to-end: a process stopped by job control (SIGSTOP, state `T`) must
//! stay stopped through inject, bt and eject (a ptrace detach must not resume
//! it), and run normally, hooked, after SIGCONT.

use std::time::Duration;

use argstash_tests::*;
use serde_json::json;

const SOON: Duration = Duration::from_secs(5);

fn all_stopped(t: &Target) -> bool {
    t.tids()
        .iter()
        .all(|&tid| thread_state(t.pid(), tid) == Some('T'))
}

#[track_caller]
fn assert_all_stopped(t: &Target, after: &str) {
    let states: Vec<_> = t
        .tids()
        .iter()
        .map(|&tid| (tid, thread_state(t.pid(), tid)))
        .collect();
    assert!(
        states.iter().all(|(_, s)| *s == Some('T')),
        "after {after}: {states:?}"
    );
    assert_eq!(tracer_pid(t.pid()), None, "after {after}");
}

#[test]
fn stopped_process_stays_stopped() {
    let mut t = Target::start("threads", Variant::O2G);
    let p = t.pid().to_string();
    let tids = t.tids();
    t.signal(libc::SIGSTOP);
    assert!(
        wait_until(SOON, || all_stopped(&t)),
        "SIGSTOP did not stop every thread"
    );
    t.drain_lines();

    run_ok(&["inject", "--pid", &p, "--func", "work", "--func", "parked"]);
    assert_all_stopped(&t, "inject");
    let bt = bt_json(t.pid(), None);
    assert_eq!(bt_threads(&bt).len(), tids.len(), "{bt:#}");
    assert_all_stopped(&t, "bt");
    let hooks = list_hooks(t.pid());
    assert_eq!(hooks_named(&hooks, "work", "active").len(), 1, "{hooks:#?}");
    // Stopped means no progress: main prints a tick every 500 ms when running.
    assert_eq!(
        t.next_line(Duration::from_millis(700)),
        None,
        "output while stopped"
    );
    assert_all_stopped(&t, "waiting");

    t.signal(libc::SIGCONT);
    assert!(wait_until(SOON, || !t
        .tids()
        .iter()
        .any(|&tid| thread_state(t.pid(), tid) == Some('T'))));
    t.wait_for_line(SOON, |l| l.starts_with("tick "));
    let parked = thread_names(t.pid())
        .into_iter()
        .find(|(_, n)| n == "parked")
        .unwrap()
        .0;
    let bt = wait_bt(t.pid(), Some(parked), SOON, |bt| {
        bt_thread(bt, parked)
            .and_then(|th| frame_named(th, "parked"))
            .is_some_and(|(_, f)| f["hooked"] == json!(true))
    });
    let th = bt_thread(&bt, parked).unwrap();
    let (_, f) = frame_named(th, "parked").unwrap();
    assert_eq!(frame_arg(f, "rdi"), Some(consts::THREADS_PARKED_TAG as u64));
    t.assert_healthy();

    // Eject while stopped again.
    t.signal(libc::SIGSTOP);
    assert!(wait_until(SOON, || all_stopped(&t)));
    run_ok(&["eject", "--pid", &p, "--all"]);
    assert_all_stopped(&t, "eject");
    t.assert_function_pristine("work");
    t.assert_function_pristine("parked");
    t.signal(libc::SIGCONT);
    t.drain_lines();
    t.wait_for_line(SOON, |l| l.starts_with("tick "));
    assert_eq!(t.tids(), tids);
    t.assert_healthy();
}
