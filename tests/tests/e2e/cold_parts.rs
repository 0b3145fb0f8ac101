//! End-to-end: `.cold` parts that no symbol names. coldwide.c's `wide` (8 integer
//! arguments) reads its stack arguments g and h only in `wide.cold`, with the hot
//! part's frame still allocated. Built with `-rdynamic` and `strip --strip-all`,
//! only `.dynsym` is left: `wide` is named, its cold part is not. The analysis
//! must follow the jump into the cold part (matched by the call-frame
//! information at its target) and copy both words: a window of 0 would hand
//! `slow` garbage for g and h. Built without unwind tables as well, nothing ties
//! the jump's target to `wide`: the hook is refused, naming the jump, and the
//! target is left as it was.

use std::path::Path;
use std::time::Duration;

use argstash_tests::*;

const LINE: Duration = Duration::from_secs(10);

/// Stack words `wide` takes: 8 integer arguments, 6 in registers (SysV).
const WIDE_STACK_WORDS: u64 = 8 - 6;

/// The hot part's jump into `wide.cold` in the unstripped build: (address, AT&T mnemonic).
fn jump_into_cold(exe: &Path) -> (u64, String) {
    let cold = symbol(exe, "wide.cold")
        .expect("gcc -O2 no longer splits wide into a .cold part: the test lost its shape")
        .addr;
    let insns = disassemble(exe, "wide");
    let jump = insns
        .iter()
        .find(|i| i.branch_target() == Some(cold))
        .unwrap_or_else(|| panic!("wide never jumps to wide.cold: {insns:#?}"));
    (jump.addr, jump.mnemonic().to_string())
}

/// Strips `exe` to `.dynsym` and checks that `wide` is still named and its cold part is not.
fn stripped(exe: &Path) -> std::path::PathBuf {
    let s = strip_all(exe);
    let names: Vec<String> = symbols(&s).into_iter().map(|s| s.name).collect();
    assert!(names.iter().any(|n| n == "wide"), "{names:?}");
    assert!(!names.iter().any(|n| n.contains(".cold")), "{names:?}");
    s
}

/// What iteration `i` prints (coldwide.c: a = -1 for odd i).
fn expected_line(i: u64) -> String {
    let r: i64 = if i % 2 == 1 {
        -(2_000_007 + 1000 * i as i64)
    } else {
        21
    };
    format!("iter {i} result {r}")
}

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

#[test]
fn a_stripped_cold_part_reading_stack_arguments_is_followed() {
    let exe = build(
        "coldwide",
        Variant::new(Opt::O2, true).with_flags(&["-rdynamic"]),
    );
    jump_into_cold(&exe);
    let exe = stripped(&exe);
    let mut t = Target::spawn(&exe);
    let pid = t.pid().to_string();
    check_lines(&mut t, 20);
    let out = run_ok(&["inject", "--pid", &pid, "--func", "wide"]);
    assert!(
        out.contains(&format!("stack window {WIDE_STACK_WORDS} words from code")),
        "{out}"
    );
    t.drain_lines();
    check_lines(&mut t, 500);
    run_ok(&["eject", "--pid", &pid, "--all"]);
    t.assert_function_pristine("wide");
    t.drain_lines();
    check_lines(&mut t, 20);
}

#[test]
fn a_jump_no_unwind_information_explains_is_refused_naming_it() {
    let exe = build(
        "coldwide",
        Variant::new(Opt::O2, true).with_flags(&["-rdynamic", "-fno-asynchronous-unwind-tables"]),
    );
    let (jump, mnemonic) = jump_into_cold(&exe);
    let exe = stripped(&exe);
    let mut t = Target::spawn(&exe);
    let pid = t.pid().to_string();
    check_lines(&mut t, 20);
    let err = refused(
        &mut t,
        &["inject", "--pid", &pid, "--func", "wide"],
        1,
        "--stack-args N",
    );
    // The jump, by address (a PIE moves by whole pages) and disassembly.
    let needle = "jumps out of the function to code that no symbol or unwind information";
    let at = err
        .split("the instruction at 0x")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|a| u64::from_str_radix(a, 16).ok())
        .unwrap_or_else(|| panic!("{err}"));
    assert!(err.contains(needle), "{err}");
    assert_eq!(at & 0xfff, jump & 0xfff, "{err}");
    assert!(err.contains(&format!(": `{mnemonic} ")), "{err}");
    assert!(list_hooks(t.pid()).is_empty());
    let out = run_ok(&[
        "inject",
        "--pid",
        &pid,
        "--func",
        "wide",
        "--stack-args",
        &WIDE_STACK_WORDS.to_string(),
    ]);
    assert!(out.contains("from user"), "{out}");
    t.drain_lines();
    check_lines(&mut t, 200);
    run_ok(&["eject", "--pid", &pid, "--all"]);
    t.assert_healthy();
}
