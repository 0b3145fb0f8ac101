//! End-to-end: functions that end in a tail call (`jmp`) into a variadic function
//! (nginx's `ngx_http_process_request` ending in `jmp ngx_log_error_core`).
//! vartail.c's `process(long)` passes nothing on the stack; `pass8` forwards its
//! two stack arguments to `vsum` in place and `pass_ld` its `long double`, neither
//! touching the stack itself. Each is hooked without `--stack-args`; the window
//! must cover what is forwarded (2 words for both; what a window of 0 breaks:
//! `vsum` and `vlog` read the forwarded words through `va_arg`), and every result
//! must stay what the program computes unhooked, over hundreds of calls.
//! Without debug info the window is the variadic default (the code cannot count
//! what a function forwards untouched); with it, the signature's.

use std::path::Path;
use std::time::Duration;

use argstash_tests::*;

const LINE: Duration = Duration::from_secs(10);

/// The hooked functions, the variadic function each tail-calls, whether it
/// forwards stack arguments in place, and how many words those are (SysV:
/// `pass8`'s 7th and 8th integers, `pass_ld`'s 16-byte `long double`).
const SHAPES: [(&str, &str, u64); 3] = [
    ("process", "vlog", 0),
    ("pass8", "vsum", 2),
    ("pass_ld", "vlog", 2),
];

/// Asserts that gcc compiled `func` as `... jmp callee` with no call, and, when
/// it forwards stack arguments, with no `rsp`-relative access of its own.
fn assert_variadic_tail_jump(exe: &Path, func: &str, callee: &str, forwarded: u64) {
    let target = symbol(exe, callee).expect("callee symbol").addr;
    let insns = disassemble(exe, func);
    let last = insns.last().expect("instructions");
    assert!(
        last.mnemonic().starts_with("jmp") && last.branch_target() == Some(target),
        "{func} does not end in `jmp {callee}` in {}: {insns:#?}",
        exe.display()
    );
    assert!(
        !insns.iter().any(|i| i.mnemonic().starts_with("call")),
        "{func} calls: {insns:#?}"
    );
    if forwarded > 0 {
        assert!(
            !insns.iter().any(|i| i.text.contains("(%rsp")),
            "{func} touches its stack arguments itself: {insns:#?}"
        );
    }
}

/// The window `inject` reported for `func`: (words, source).
fn window(inject_out: &str, func: &str) -> (u64, String) {
    let line = inject_out
        .lines()
        .find(|l| l.starts_with(&format!("hooked {func} in ")))
        .unwrap_or_else(|| panic!("no hooked line for {func}:\n{inject_out}"));
    let rest = line
        .split("stack window ")
        .nth(1)
        .unwrap_or_else(|| panic!("{line}"));
    let mut words = rest.split_whitespace();
    let n = words.next().and_then(|n| n.parse().ok()).expect("N");
    assert_eq!(words.next(), Some("words"), "{line}");
    assert_eq!(words.next(), Some("from"), "{line}");
    let source = words
        .next()
        .expect("source")
        .trim_end_matches([',', ')'])
        .to_string();
    (n, source)
}

/// What iteration `i` prints, computed here: vlog's text for process(i), vsum's
/// sum of i..i+6, vlog's text for pass_ld(i + 0.5).
fn expected_line(i: u64) -> String {
    format!(
        "iter {i} process=request {i} state {} pass8={} ld=ld {i}.5",
        3 * i,
        (i..i + 7).sum::<u64>()
    )
}

/// Reads `n` lines, each the one iteration `i` must print.
fn check_lines(t: &mut Target, n: usize) {
    for _ in 0..n {
        let line = t.expect_line(LINE);
        let i: u64 = line
            .strip_prefix("iter ")
            .and_then(|r| r.split_whitespace().next())
            .and_then(|i| i.parse().ok())
            .unwrap_or_else(|| t.fail(&format!("unexpected line {line:?}")));
        assert_eq!(line, expected_line(i));
    }
    t.assert_healthy();
}

fn hook_and_check(variant: Variant, with_dwarf: bool) {
    let exe = build("vartail", variant);
    for (func, callee, forwarded) in SHAPES {
        assert_variadic_tail_jump(&exe, func, callee, forwarded);
    }
    let mut t = Target::spawn(&exe);
    let pid = t.pid().to_string();
    check_lines(&mut t, 50);
    let mut args = vec!["inject", "--pid", &pid];
    for (func, _, _) in SHAPES {
        args.extend(["--func", func]);
    }
    let out = run_ok(&args);
    for (func, _, forwarded) in SHAPES {
        let (words, source) = window(&out, func);
        assert!(
            words >= forwarded,
            "{func}: window {words} < {forwarded}:\n{out}"
        );
        if with_dwarf {
            // The parameter types bound what a sibling call passes: exactly.
            assert_eq!((words, source.as_str()), (forwarded, "signature"), "{out}");
        } else {
            assert_eq!(source, "variadic-default", "{func}:\n{out}");
        }
    }
    t.drain_lines();
    check_lines(&mut t, 500);
    run_ok(&["eject", "--pid", &pid, "--all"]);
    t.drain_lines();
    check_lines(&mut t, 50);
}

#[test]
fn tail_calls_into_variadic_functions_are_hooked_without_stack_args_and_without_dwarf() {
    hook_and_check(Variant::new(Opt::O2, true), false);
}

#[test]
fn tail_calls_into_variadic_functions_take_the_signature_window_with_dwarf() {
    hook_and_check(Variant::O2G, true);
}
