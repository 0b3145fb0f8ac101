//! End-to-end: riprel.c, whose hooked functions start with RIP-relative
//! instructions (`bump`: `mov counter(%rip),%eax`; `lookup`, PIE: `lea
//! table(%rip),%rax`), so the relocated prologue must fix their displacements.
//! The fixture checks every result itself; the test also recomputes the
//! running total it prints.

use std::time::Duration;

use argstash_tests::*;
use serde_json::{json, Value};

const SOON: Duration = Duration::from_secs(5);

/// The counter after `calls` calls of bump((k & 7) + 1), k = 0.., in u32 arithmetic.
fn expected_total(calls: u64) -> u32 {
    let (q, r) = (calls / 8, calls % 8);
    (36 * q + r * (r + 1) / 2) as u32
}

/// Reads `n` "iter N total T" lines and checks every T against the formula.
fn check_totals(t: &mut Target, n: usize) {
    t.drain_lines();
    for _ in 0..n {
        let line = t.wait_for_line(SOON, |l| l.starts_with("iter "));
        let w: Vec<&str> = line.split_whitespace().collect();
        let ["iter", calls, "total", total] = w.as_slice() else {
            t.fail(&format!("bad line {line:?}"));
        };
        let calls: u64 = calls.parse().unwrap();
        let total: u32 = total.parse().unwrap();
        assert_eq!(total, expected_total(calls), "{line}");
    }
    t.assert_healthy();
}

/// Checks one backtrace of the (single-threaded) fixture: the unwind reaches
/// main, and a hooked frame of bump/lookup carries a plausible argument.
fn check_bt(t: &Target, bt: &Value) -> bool {
    let th = bt_thread(bt, t.pid()).expect("main thread");
    assert!(
        frame_named(th, "main").is_some(),
        "the unwind reaches main: {th:#}"
    );
    let mut hooked = false;
    for f in thread_frames(th) {
        if f["hooked"] != json!(true) {
            assert_eq!(f["args"], json!([]), "{f:#}");
            continue;
        }
        hooked = true;
        let rdi = frame_arg(f, "rdi").expect("rdi stashed") as u32;
        match f["function"].as_str() {
            Some("bump") => assert!((1..=8).contains(&rdi), "bump({rdi}): {th:#}"),
            Some("lookup") => {}
            other => panic!("unexpected hooked frame {other:?}: {th:#}"),
        }
    }
    hooked
}

fn relocate_rip_relative(v: Variant) {
    let mut t = Target::start("riprel", v);
    let pid = t.pid().to_string();
    let funcs = ["bump", "lookup"];
    for f in funcs {
        t.assert_function_pristine(f);
    }
    // Precondition from the fixture's contract: bump's patch covers a
    // RIP-relative instruction (so this test is about relocation at all).
    let (skip, len) = expected_patch(t.exe(), "bump");
    let bump = symbol(t.exe(), "bump").unwrap().addr;
    let insns = disassemble(t.exe(), "bump");
    if v.optimized() {
        assert!(
            insns
                .iter()
                .any(|i| i.is_rip_relative() && i.addr < bump + skip + len as u64),
            "{v}: {insns:#?}"
        );
    }

    run_ok(&[
        "inject", "--pid", &pid, "--func", "bump", "--func", "lookup",
    ]);
    let hooks = list_hooks(t.pid());
    for f in funcs {
        let active = hooks_named(&hooks, f, "active");
        assert_eq!(active.len(), 1, "{f}: {hooks:#?}");
        let (skip, len) = expected_patch(t.exe(), f);
        assert_eq!(json_hex(&active[0]["patch_address"]), t.addr_of(f) + skip);
        assert_eq!(active[0]["patch_len"].as_u64(), Some(len as u64), "{f}");
    }
    check_totals(&mut t, 3);

    let mut hooked = 0;
    for i in 0..15 {
        let args = ["bt", "--pid", &pid, "--json"];
        let with_trampolines = ["bt", "--pid", &pid, "--json", "--show-trampolines"];
        let bt = run_json(if i % 2 == 0 {
            &args[..]
        } else {
            &with_trampolines[..]
        });
        hooked += usize::from(check_bt(&t, &bt));
    }
    eprintln!("{v}: a hooked frame was on the stack in {hooked} of 15 backtraces");
    check_totals(&mut t, 2);

    run_ok(&["eject", "--pid", &pid, "--all"]);
    for f in funcs {
        t.assert_function_pristine(f);
    }
    let hooks = list_hooks(t.pid());
    for f in funcs {
        assert_eq!(
            hooks_named(&hooks, f, "ejected").len(),
            1,
            "{f}: {hooks:#?}"
        );
    }
    check_totals(&mut t, 2);
    assert_eq!(tracer_pid(t.pid()), None);
}

#[test]
fn expected_total_formula() {
    let mut sum = 0u32;
    for k in 0..1000u64 {
        assert_eq!(expected_total(k), sum);
        sum = sum.wrapping_add((k & 7) as u32 + 1);
    }
}

#[test]
fn riprel_o2g_pie() {
    relocate_rip_relative(Variant::O2G);
}

#[test]
fn riprel_o2g_nopie() {
    relocate_rip_relative(Variant::new(Opt::O2g, false));
}

#[test]
fn riprel_o2_stripped_pie_cet() {
    relocate_rip_relative(Variant::new(Opt::O2, true).cet());
}

#[test]
fn riprel_o0g_pie() {
    relocate_rip_relative(Variant::new(Opt::O0g, true));
}
