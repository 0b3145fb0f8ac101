//! End-to-end: a hook never ends a program through a C++ exception.
//!
//! tests/fixtures/exceptions.cpp (g++ -O2, no debug info) throws and catches
//! all the time, checking every result. Each test runs many rounds, each on a
//! fresh process: inject while exceptions fly, let thousands more cross the hook,
//! eject while they still fly, then ask the program whether any result was wrong
//! and let it exit. A death (std::terminate: an unwinder that could not get
//! through a hooked frame) or a wrong result fails the test.
//!
//! Shapes: the hooked function throws itself, from its `.cold` part (one whose
//! `.cold` part also works in the hot part's frame: hooked without `--stack-args`); a callee
//! throws and the exception is caught above the hooked function; four threads at
//! once; a program that spends most of its time in libgcc's unwinder, each
//! exception crossing 40 hooked frames.
//!
//! `ARGSTASH_EXCEPTION_ROUNDS` overrides the number of rounds (100);
//! `scripts/exception-rounds.sh` runs 1,000.

use std::time::{Duration, Instant};

use argstash_tests::*;

const LINE: Duration = Duration::from_secs(20);

/// Rounds per test.
fn rounds() -> usize {
    std::env::var("ARGSTASH_EXCEPTION_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

/// `(calls, caught, bad)` as the program counts them.
fn check(t: &mut Target) -> (u64, u64, u64) {
    t.write_stdin("check\n");
    let line = t.wait_for_line(LINE, |l| l.starts_with("calls="));
    let mut it = line.split_whitespace().map(|kv| {
        kv.split_once('=')
            .expect("key=value")
            .1
            .parse::<u64>()
            .expect("number")
    });
    (it.next().unwrap(), it.next().unwrap(), it.next().unwrap())
}

/// Waits until the program has caught `more` exceptions beyond `from`.
fn let_exceptions_fly(t: &mut Target, from: u64, more: u64) -> (u64, u64, u64) {
    let started = Instant::now();
    loop {
        let now = check(t);
        if now.1 >= from + more {
            return now;
        }
        if !t.is_alive() || started.elapsed() > LINE {
            t.fail(&format!("{more} more exceptions did not come ({now:?})"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs the rounds of one shape; returns the number of deaths and of rounds with wrong results.
fn rounds_of(mode: &str, threads: usize, func: &str) {
    let exe = build_cpp("exceptions");
    let n = rounds();
    let (mut deaths, mut wrong, mut crossed) = (0, 0, 0u64);
    for round in 0..n {
        let mut t = Target::spawn_with_args(&exe, &[mode, &threads.to_string()]);
        let pid = t.pid().to_string();
        let before = let_exceptions_fly(&mut t, 0, 10);
        let out = run(&["inject", "--pid", &pid, "--func", func]);
        let text = output_text(&out);
        assert!(out.status.success(), "round {round}: inject failed: {text}");
        assert!(
            text.contains("registered with") && text.contains("for 1 hooks"),
            "round {round}: the hook must be registered with libgcc: {text}"
        );
        if !t.is_alive() {
            deaths += 1;
            eprintln!("round {round}: died after inject: {}", t.stderr_text());
            continue;
        }
        let during = let_exceptions_fly(&mut t, before.1, 200);
        let out = run(&["eject", "--pid", &pid, "--all"]);
        assert!(
            out.status.success(),
            "round {round}: eject failed: {}",
            output_text(&out)
        );
        let after = let_exceptions_fly(&mut t, during.1, 50);
        crossed += during.1 - before.1;
        t.write_stdin("quit\n");
        match t.wait_exit(LINE).map(|s| s.code()) {
            Some(Some(0)) => {}
            Some(Some(3)) => {
                wrong += 1;
                eprintln!("round {round}: wrong results ({after:?})");
            }
            other => {
                deaths += 1;
                eprintln!("round {round}: ended {other:?}: {}", t.stderr_text());
            }
        }
    }
    eprintln!(
        "exceptions::{mode} x{threads}: {n} rounds, {deaths} deaths, {wrong} with wrong \
         results, {crossed} exceptions caught while hooked"
    );
    assert_eq!(
        (deaths, wrong),
        (0, 0),
        "{mode}: deaths and wrong-result rounds"
    );
}

#[test]
fn thrown_by_the_hooked_function_from_its_cold_part() {
    let exe = build_cpp("exceptions");
    assert!(
        symbol(&exe, "_Z5riskyi.cold").is_some(),
        "g++ -O2 no longer splits risky into a .cold part: the test lost its shape"
    );
    rounds_of("self", 1, "_Z5riskyi");
}

/// `parse`'s `.cold` part addresses locals of the hot part's frame (`lea rdi, [rsp+N]`),
/// which, analysed as a function entered on its own, looked like code taking the address
/// of an incoming stack argument: the hook was refused without `--stack-args`.
#[test]
fn a_cold_part_addressing_the_hot_frame_is_hooked_without_stack_args() {
    let exe = build_cpp("exceptions");
    assert!(
        symbol(&exe, "_Z5parsell.cold").is_some(),
        "g++ -O2 no longer splits parse into a .cold part: the test lost its shape"
    );
    let mut t = Target::spawn_with_args(&exe, &["parse", "1"]);
    let pid = t.pid().to_string();
    let before = let_exceptions_fly(&mut t, 0, 10);
    let out = run(&["inject", "--pid", &pid, "--func", "_Z5parsell"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("stack window 0 words from code"), "{text}");
    let during = let_exceptions_fly(&mut t, before.1, 200);
    assert_eq!(during.2, 0, "wrong results while hooked: {during:?}");
    let out = run(&["eject", "--pid", &pid, "--all"]);
    assert!(out.status.success(), "{}", output_text(&out));
    t.write_stdin("quit\n");
    assert_eq!(t.wait_exit(LINE).and_then(|s| s.code()), Some(0));
    rounds_of("parse", 1, "_Z5parsell");
}

/// The same `parse` with only `.dynsym` left (`-rdynamic`, `strip --strip-all`):
/// no symbol names its cold part, so the jump into it is matched with the cold
/// part's call-frame information, walked as the same function, and the hook
/// still needs no `--stack-args`.
#[test]
fn a_cold_part_no_symbol_names_is_followed_in_a_stripped_build() {
    let exe = build_cpp_with("exceptions", &["-rdynamic"]);
    let cold = symbol(&exe, "_Z5parsell.cold")
        .expect("g++ -O2 no longer splits parse into a .cold part: the test lost its shape")
        .addr;
    assert!(
        disassemble(&exe, "_Z5parsell")
            .iter()
            .any(|i| i.branch_target() == Some(cold)),
        "parse never jumps into its .cold part"
    );
    let exe = strip_all(&exe);
    let names: Vec<String> = symbols(&exe).into_iter().map(|s| s.name).collect();
    assert!(names.iter().any(|n| n == "_Z5parsell"), "{names:?}");
    assert!(!names.iter().any(|n| n.contains(".cold")), "{names:?}");
    let mut t = Target::spawn_with_args(&exe, &["parse", "1"]);
    let pid = t.pid().to_string();
    let before = let_exceptions_fly(&mut t, 0, 10);
    let out = run(&["inject", "--pid", &pid, "--func", "_Z5parsell"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("stack window 0 words from code"), "{text}");
    let during = let_exceptions_fly(&mut t, before.1, 200);
    assert_eq!(during.2, 0, "wrong results while hooked: {during:?}");
    let out = run(&["eject", "--pid", &pid, "--all"]);
    assert!(out.status.success(), "{}", output_text(&out));
    t.write_stdin("quit\n");
    assert_eq!(t.wait_exit(LINE).and_then(|s| s.code()), Some(0));
}

#[test]
fn thrown_by_a_callee_and_caught_above_the_hooked_function() {
    rounds_of("callee", 1, "_Z5relayi");
}

#[test]
fn thrown_from_four_threads_at_once() {
    rounds_of("self", 4, "_Z5riskyi");
}

#[test]
fn a_program_living_in_the_unwinder() {
    rounds_of("deep", 1, "_Z7descendii");
}

#[test]
fn a_hook_that_cannot_be_protected_is_refused_and_the_target_left_unchanged() {
    let exe = build_cpp("exceptions");
    let mut t = Target::spawn_with_args(&exe, &["self", "1"]);
    let pid = t.pid().to_string();
    let before = let_exceptions_fly(&mut t, 0, 10);
    let bytes = t.live_function_bytes("_Z5riskyi");
    // Calls in the target off: the registration cannot be made first.
    let out = run(&[
        "inject",
        "--pid",
        &pid,
        "--func",
        "_Z5riskyi",
        "--unwind-registration",
        "off",
    ]);
    let text = output_text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("not hooking _Z5riskyi")
            && text.contains("would end the program")
            && text.contains("--accept-unwind-loss"),
        "{text}"
    );
    assert_eq!(t.live_function_bytes("_Z5riskyi"), bytes);
    t.assert_function_pristine("_Z5riskyi");
    let list = run_json(&["list", "--pid", &pid, "--json"]);
    assert!(
        list["hooks"].as_array().is_none_or(|h| h.is_empty()),
        "nothing hooked: {list}"
    );
    let_exceptions_fly(&mut t, before.1, 100);
    t.write_stdin("quit\n");
    assert_eq!(t.wait_exit(LINE).and_then(|s| s.code()), Some(0));
}
