//! End-to-end: hooked functions meeting the less ordinary ways a process
//! runs (lifecycle.c): longjmp out of a hooked call, a hooked function
//! called from a signal handler, recursion 10,000 deep, fork and exec.

use std::time::Duration;

use argstash_tests::*;
use serde_json::{json, Value};

const SOON: Duration = Duration::from_secs(10);

fn start(mode: &str) -> Target {
    let exe = build("lifecycle", Variant::O2G);
    Target::spawn_with_args(&exe, &[mode])
}

/// The number after `key` in a line like "iter 3 jumps 1 handled 0".
fn field(line: &str, key: &str) -> u64 {
    let w: Vec<&str> = line.split_whitespace().collect();
    w.iter()
        .position(|x| *x == key)
        .and_then(|i| w.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
}

fn next_iter(t: &mut Target) -> String {
    t.wait_for_line(SOON, |l| l.starts_with("iter "))
}

/// True when `thread` shows `name` hooked with `rdi == arg`.
fn hooked_with(thread: &Value, name: &str, arg: u64) -> bool {
    frame_named(thread, name)
        .is_some_and(|(_, f)| f["hooked"] == json!(true) && frame_arg(f, "rdi") == Some(arg))
}

fn main_thread_shows(pid: i32, name: &str, arg: u64) -> Value {
    let bt = wait_bt(pid, Some(pid), SOON, |bt| {
        bt_thread(bt, pid).is_some_and(|th| hooked_with(th, name, arg))
    });
    bt_thread(&bt, pid).unwrap().clone()
}

#[test]
fn longjmp_out_of_a_hooked_function() {
    let mut t = start("longjmp");
    let pid = t.pid().to_string();
    run_ok(&[
        "inject", "--pid", &pid, "--func", "jumper", "--func", "leaf", "--func", "nap",
    ]);
    t.drain_lines();
    let first = next_iter(&mut t);
    let mut last = first.clone();
    for _ in 0..20 {
        last = next_iter(&mut t);
    }
    // Half the rounds jumped out of the hooked jumper(), abandoning its stash
    // frame; every round's results were checked by the fixture.
    assert!(
        field(&last, "jumps") >= field(&first, "jumps") + 9,
        "{first} -> {last}"
    );
    t.assert_healthy();
    // The abandoned stash frames are not on the stack: nap's caller is main.
    let th = main_thread_shows(t.pid(), "nap", consts::LIFECYCLE_NAP_TAG);
    let frames = thread_frames(&th);
    let (i, _) = frame_named(&th, "nap").unwrap();
    let callers: Vec<&str> = frames[i + 1..]
        .iter()
        .filter_map(|f| f["function"].as_str())
        .collect();
    assert!(!callers.contains(&"jumper"), "a stale jumper frame: {th:#}");
    assert!(
        callers
            .iter()
            .any(|f| *f == "main" || *f == "check_leaf_and_nap"),
        "{th:#}"
    );
    run_ok(&["eject", "--pid", &pid, "--all"]);
    for f in ["jumper", "leaf", "nap"] {
        t.assert_function_pristine(f);
    }
    next_iter(&mut t);
    t.assert_healthy();
}

#[test]
fn a_signal_handler_calls_a_hooked_function() {
    let mut t = start("signal");
    let pid = t.pid().to_string();
    run_ok(&[
        "inject",
        "--pid",
        &pid,
        "--func",
        "in_handler",
        "--func",
        "leaf",
        "--func",
        "nap",
    ]);
    t.drain_lines();
    let before = field(&next_iter(&mut t), "handled");
    let mut seen_in_bt = false;
    for k in 0..5 {
        t.signal(libc::SIGUSR1);
        // The first in_handler sleeps 2 s: the backtrace catches it with its arguments.
        if k == 0 {
            let th = main_thread_shows(t.pid(), "in_handler", libc::SIGUSR1 as u64);
            let (_, f) = frame_named(&th, "in_handler").unwrap();
            assert_eq!(frame_arg(f, "rsi"), Some(before + 1), "{th:#}");
            seen_in_bt = true;
        }
        let want = before + k + 1;
        t.wait_for_line(SOON, |l| {
            l.starts_with("iter ") && field(l, "handled") >= want
        });
    }
    assert!(seen_in_bt);
    t.assert_healthy();
    run_ok(&["eject", "--pid", &pid, "--all"]);
    t.assert_function_pristine("in_handler");
    // Unhooked, the handler still works.
    t.signal(libc::SIGUSR1);
    t.wait_for_line(SOON, |l| {
        l.starts_with("iter ") && field(l, "handled") >= before + 6
    });
    t.assert_healthy();
}

#[test]
fn recursion_ten_thousand_deep_through_a_hook() {
    let mut t = start("recurse");
    let pid = t.pid().to_string();
    run_ok(&["inject", "--pid", &pid, "--func", "recurse"]);
    t.drain_lines();
    for _ in 0..3 {
        let line = next_iter(&mut t);
        assert_eq!(
            field(&line, "result"),
            2 * consts::LIFECYCLE_RECURSE_DEPTH,
            "{line}"
        );
    }
    // Caught at the bottom: the innermost frames are recurse(0, 10000),
    // recurse(1, 9999), ... each with its own stashed arguments, and the
    // unwind stops cleanly at the frame limit.
    let th = main_thread_shows(t.pid(), "recurse", 0);
    let frames = thread_frames(&th);
    let hooked: Vec<&Value> = frames
        .iter()
        .filter(|f| f["function"].as_str() == Some("recurse"))
        .collect();
    assert!(hooked.len() > 100, "{} recurse frames", hooked.len());
    for (k, f) in hooked.iter().enumerate() {
        assert_eq!(f["hooked"], json!(true), "frame {k}: {f:#}");
        assert_eq!(frame_arg(f, "rdi"), Some(k as u64), "frame {k}: {f:#}");
        assert_eq!(
            frame_arg(f, "rsi"),
            Some(consts::LIFECYCLE_RECURSE_DEPTH - k as u64),
            "frame {k}: {f:#}"
        );
    }
    let why = th["truncated"]
        .as_str()
        .unwrap_or_else(|| panic!("not truncated: {th:#}"));
    assert!(why.contains("frames"), "{why}");
    eprintln!("{} frames shown, then: {why}", frames.len());
    run_ok(&["eject", "--pid", &pid, "--all"]);
    t.assert_function_pristine("recurse");
    let line = next_iter(&mut t);
    assert_eq!(field(&line, "result"), 2 * consts::LIFECYCLE_RECURSE_DEPTH);
    t.assert_healthy();
}

#[test]
fn a_forked_child_keeps_working_hooks() {
    let mut t = start("fork");
    let pid = t.pid().to_string();
    run_ok(&["inject", "--pid", &pid, "--func", "leaf", "--func", "nap"]);
    t.signal(libc::SIGUSR2);
    let line = t.wait_for_line(SOON, |l| l.starts_with("child "));
    let child: i32 = line["child ".len()..].trim().parse().unwrap();
    // The child runs on, hooked: its calls are checked and counted.
    for _ in 0..3 {
        t.wait_for_line(SOON, |l| l.starts_with("child iter "));
    }
    let hooks = list_hooks(child);
    for f in ["leaf", "nap"] {
        assert_eq!(hooks_named(&hooks, f, "active").len(), 1, "{hooks:#?}");
    }
    let th = main_thread_shows(child, "nap", consts::LIFECYCLE_CHILD_TAG);
    assert!(
        frame_named(&th, "child_loop").is_some() || frame_named(&th, "main").is_some(),
        "{th:#}"
    );
    // The parent is unaffected and still hooked.
    main_thread_shows(t.pid(), "nap", consts::LIFECYCLE_NAP_TAG);
    // Ejecting in the child leaves the parent's hooks alone.
    let child_s = child.to_string();
    run_ok(&["eject", "--pid", &child_s, "--all"]);
    assert!(hooks_named(&list_hooks(child), "nap", "active").is_empty());
    assert_eq!(hooks_named(&list_hooks(t.pid()), "nap", "active").len(), 1);
    t.drain_lines();
    t.wait_for_line(SOON, |l| l.starts_with("child iter "));
    next_iter(&mut t);
    t.assert_healthy();
    assert_eq!(proc_state(child).map(|s| s != 'Z'), Some(true));
}

#[test]
fn exec_drops_the_hooks() {
    let mut t = start("exec");
    let pid = t.pid().to_string();
    run_ok(&["inject", "--pid", &pid, "--func", "leaf", "--func", "nap"]);
    assert_eq!(list_hooks(t.pid()).len(), 2);
    t.signal(libc::SIGUSR2);
    t.wait_for_line(SOON, |l| l == format!("execed {pid}"));
    // A fresh image: no arenas, no hooks, and list says so.
    assert!(list_hooks(t.pid()).is_empty());
    let out = run_ok(&["list", "--pid", &pid]);
    assert!(out.contains("has no argstash hooks"), "{out}");
    for _ in 0..3 {
        next_iter(&mut t);
    }
    t.assert_healthy();
    t.assert_function_pristine("nap");
    // And it can be hooked again.
    run_ok(&["inject", "--pid", &pid, "--func", "nap"]);
    main_thread_shows(t.pid(), "nap", consts::LIFECYCLE_NAP_TAG);
    next_iter(&mut t);
    t.assert_healthy();
}
