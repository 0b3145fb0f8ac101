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

/// `--stack-args NAME=N` gives one function its window; the others keep theirs
/// (here found from the code), where a global `--stack-args N` would force N on all.
#[test]
fn a_window_for_one_function_leaves_the_others_to_the_analysis() {
    // Stripped: no signature; quad_ref's code takes the address of its incoming words.
    let mut t = Target::start("abiargs", Variant::new(Opt::O2, true));
    let p = t.pid().to_string();
    let out = run_ok(&[
        "inject",
        "--pid",
        &p,
        "--func",
        "quad_ref",
        "--func",
        "ten",
        "--stack-args",
        "quad_ref=5",
    ]);
    let line = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("hooked {name} ")))
            .unwrap_or_else(|| panic!("no line for {name}: {out}"))
            .to_string()
    };
    assert!(
        line("quad_ref").contains("stack window 5 words from user"),
        "{out}"
    );
    // ten(a, ..., j) passes g, h, i and j on the stack.
    assert!(
        line("ten").contains("stack window 4 words from code"),
        "{out}"
    );
    let hooks = list_hooks(t.pid());
    for (name, words) in [("quad_ref", 5), ("ten", 4)] {
        let h = hooks_named(&hooks, name, "active");
        assert_eq!(h.len(), 1, "{hooks:#?}");
        assert_eq!(h[0]["stack_words"].as_u64(), Some(words), "{name}");
    }
    // ten's results stay right while hooked.
    t.drain_lines();
    let mut seen = 0;
    while seen < 2 {
        let line = t.expect_line(SOON);
        if line.starts_with("ok ten") {
            seen += 1;
        }
        assert!(!line.contains("WRONG"), "{line}");
    }
    run_ok(&["eject", "--pid", &p, "--all"]);
    t.assert_function_pristine("quad_ref");
    t.assert_function_pristine("ten");
    t.assert_healthy();
}
