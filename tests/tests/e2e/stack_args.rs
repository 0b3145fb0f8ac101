//! End-to-end: manyargs.c's `eight(a, ..., h)` takes g and h on the stack.
//! With `--stack-args N` the trampoline copies N incoming stack words for
//! the original function and `bt` shows them as `stack+8`, `stack+16`, ...

use std::time::Duration;

use argstash_tests::*;
use serde_json::{json, Value};

const SOON: Duration = Duration::from_secs(5);

fn check_results(t: &mut Target, n: usize) {
    t.drain_lines();
    for _ in 0..n {
        let line = t.expect_line(SOON);
        assert!(
            line.starts_with("iter ")
                && line.ends_with(&format!(" result {}", consts::MANYARGS_RESULT)),
            "{line}"
        );
    }
    t.assert_healthy();
}

fn eight_hooked(t: &Target, bt: &Value) -> bool {
    bt_thread(bt, t.pid())
        .and_then(|th| frame_named(th, "eight"))
        .is_some_and(|(_, f)| f["hooked"] == json!(true))
}

fn stack_window(words: u16) {
    let mut t = Target::start("manyargs", Variant::O2G);
    let p = t.pid().to_string();
    let n = words.to_string();
    run_ok(&["inject", "--pid", &p, "--func", "eight", "--stack-args", &n]);
    let hooks = list_hooks(t.pid());
    let h = hooks_named(&hooks, "eight", "active");
    assert_eq!(h.len(), 1, "{hooks:#?}");
    assert_eq!(h[0]["stack_words"].as_u64(), Some(u64::from(words)));

    let bt = wait_bt(t.pid(), None, SOON, |bt| eight_hooked(&t, bt));
    let th = bt_thread(&bt, t.pid()).unwrap();
    let (i, f) = frame_named(th, "eight").unwrap();
    let args = f["args"].as_array().unwrap();
    assert_eq!(args.len(), 6 + usize::from(words), "{f:#}");
    let a = consts::MANYARGS_ARGS;
    for (k, reg) in ["rdi", "rsi", "rdx", "rcx", "r8", "r9"].iter().enumerate() {
        assert_eq!(
            raw_arg(&args[k]),
            json!({"register": reg, "value": a[k]}),
            "{f:#}"
        );
    }
    assert_eq!(
        raw_arg(&args[6]),
        json!({"register": "stack+8", "value": a[6]}),
        "{f:#}"
    );
    assert_eq!(
        raw_arg(&args[7]),
        json!({"register": "stack+16", "value": a[7]}),
        "{f:#}"
    );
    for (k, arg) in args.iter().enumerate().skip(6) {
        assert_eq!(
            arg["register"],
            json!(format!("stack+{}", 8 * (k - 5))),
            "{f:#}"
        );
    }
    assert_eq!(
        thread_frames(th)[i + 1]["function"].as_str(),
        Some("main"),
        "{th:#}"
    );
    // eight still finds g and h: the results stay right.
    check_results(&mut t, 3);

    run_ok(&["eject", "--pid", &p, "--all"]);
    t.assert_function_pristine("eight");
    check_results(&mut t, 2);
}

#[test]
fn two_stack_words() {
    stack_window(2);
}

#[test]
fn sixteen_stack_words() {
    stack_window(16);
}
