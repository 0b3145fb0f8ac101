//! End-to-end: arguments beyond the six integer registers (abiargs.c).
//!
//! Without `--stack-args`, argstash decides each function's stack window from its
//! code: `ten` (10 longs) and `by_struct` (a 32-byte struct by value) get exactly 4
//! words, the variadic `vsum` gets the default 8 and is marked variadic, its
//! `va_list` reader `vsum_list` gets 0, `dmix` (9 doubles) gets 1 word and, with
//! `--float-args`, xmm0-7. Every hooked function keeps returning the right result
//! (the fixture checks each call and aborts on a wrong one), and `bt` shows every
//! argument the fixture printed it passes. A function that takes the address of
//! its incoming stack words (`quad_ref`) is refused with a message naming
//! `--stack-args N`, and hooks with it.
//!
//! With DWARF (or a signature typed with `--func 'f(long n, double a, ...)'` on
//! a stripped build) and no `--float-args`, the window comes from the parameter
//! types and `dmix`'s doubles are stashed and shown by name from xmm0-7 and the
//! stack. Without either, `quad_ref` (which takes the address of its incoming
//! stack words) is refused with a message naming `--stack-args N`; with DWARF its
//! 32-byte struct parameter bounds the window at 4 words.
//!
//! The code analysis is also checked on the compiled fixture's bytes directly,
//! at -O0 and -O2.

use std::collections::HashMap;
use std::time::Duration;

use argstash_tests::*;
use serde_json::{json, Value};
use trampolines::x86_64::{analyse_stack_reads, Unsure};

const SOON: Duration = Duration::from_secs(5);
const HOOKED: [&str; 5] = ["ten", "by_struct", "vsum", "vsum_list", "dmix"];

/// The "args NAME V..." lines the fixture prints after "ready".
fn passed_args(t: &mut Target) -> HashMap<String, Vec<String>> {
    let mut out = HashMap::new();
    while out.len() < 4 {
        let line = t.expect_line(SOON);
        let mut words = line.split_whitespace();
        if words.next() == Some("args") {
            let name = words.next().unwrap_or_default().to_string();
            out.insert(name, words.map(String::from).collect());
        }
    }
    out
}

fn ints(v: &[String]) -> Vec<u64> {
    v.iter()
        .map(|s| s.parse::<i64>().unwrap_or_else(|e| panic!("{s}: {e}")) as u64)
        .collect()
}

fn doubles(v: &[String]) -> Vec<f64> {
    v.iter()
        .map(|s| s.parse::<f64>().unwrap_or_else(|e| panic!("{s}: {e}")))
        .collect()
}

/// The hooked frame of `name` in any thread.
fn hooked_frame<'a>(bt: &'a Value, name: &str) -> Option<&'a Value> {
    bt_threads(bt)
        .iter()
        .find_map(|th| frame_named(th, name).map(|(_, f)| f))
        .filter(|f| f["hooked"] == json!(true))
}

fn arg<'a>(frame: &'a Value, register: &str) -> &'a Value {
    frame["args"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["register"] == json!(register)))
        .unwrap_or_else(|| panic!("no {register} in {frame:#}"))
}

fn check_regs(frame: &Value, values: &[u64]) {
    for (reg, want) in ["rdi", "rsi", "rdx", "rcx", "r8", "r9"].iter().zip(values) {
        assert_eq!(
            arg(frame, reg)["value"].as_u64(),
            Some(*want),
            "{reg}: {frame:#}"
        );
    }
}

fn check_stack(frame: &Value, values: &[u64]) {
    for (i, want) in values.iter().enumerate() {
        let reg = format!("stack+{}", 8 * (i + 1));
        assert_eq!(
            arg(frame, &reg)["value"].as_u64(),
            Some(*want),
            "{reg}: {frame:#}"
        );
    }
}

/// Waits until each hooked function has returned (checked) results at least twice more.
fn check_results(t: &mut Target) {
    t.drain_lines();
    let mut ok: HashMap<String, usize> = HashMap::new();
    let names = ["ten", "by_struct", "vsum", "dmix"];
    while names.iter().any(|n| ok.get(*n).copied().unwrap_or(0) < 2) {
        let line = t.expect_line(SOON);
        if let Some(name) = line.strip_prefix("ok ").and_then(|r| r.split(' ').next()) {
            *ok.entry(name.to_string()).or_default() += 1;
        }
    }
    t.assert_healthy();
}

#[test]
fn hooked_functions_keep_results_and_bt_shows_every_argument() {
    let mut t = Target::start("abiargs", Variant::O2G);
    let passed = passed_args(&mut t);
    let p = t.pid().to_string();
    run_ok(&[
        "inject",
        "--pid",
        &p,
        "--func",
        "ten",
        "--func",
        "by_struct",
        "--func",
        "vsum",
        "--func",
        "vsum_list",
    ]);
    let out = run_ok(&["inject", "--pid", &p, "--func", "dmix", "--float-args"]);
    assert!(out.contains("xmm0-7 stashed"), "{out}");

    let hooks = list_hooks(t.pid());
    let expect = [
        ("ten", 4, false, false),
        ("by_struct", 4, false, false),
        ("vsum", 8, true, false),
        ("vsum_list", 0, false, false),
        ("dmix", 1, false, true),
    ];
    for (name, words, variadic, xmm) in expect {
        let h = hooks_named(&hooks, name, "active");
        assert_eq!(h.len(), 1, "{name}: {hooks:#?}");
        assert_eq!(h[0]["stack_words"], json!(words), "{name}: {:#}", h[0]);
        assert_eq!(h[0]["variadic"], json!(variadic), "{name}: {:#}", h[0]);
        assert_eq!(h[0]["xmm"], json!(xmm), "{name}: {:#}", h[0]);
    }
    let text = run_ok(&["list", "--pid", &p]);
    assert!(
        text.lines()
            .any(|l| l.contains(" vsum ") && l.contains("variadic")),
        "{text}"
    );

    let bt = wait_bt(t.pid(), None, SOON, |bt| {
        HOOKED.iter().all(|n| hooked_frame(bt, n).is_some())
    });

    let ten = ints(&passed["ten"]);
    let f = hooked_frame(&bt, "ten").unwrap();
    check_regs(f, &ten[..6]);
    check_stack(f, &ten[6..]);
    assert_eq!(f["args"].as_array().unwrap().len(), 10, "{f:#}");

    // by_struct(tag, q, after): tag in rdi, after in rsi, q in stack words 0..3.
    let s = ints(&passed["by_struct"]);
    let f = hooked_frame(&bt, "by_struct").unwrap();
    check_regs(f, &[s[0], s[5]]);
    check_stack(f, &s[1..5]);

    // vsum(n, ...): n and five values in registers, five on the stack, variadic window 8.
    let v = ints(&passed["vsum"]);
    let f = hooked_frame(&bt, "vsum").unwrap();
    check_regs(f, &v[..6]);
    check_stack(f, &v[6..]);
    assert_eq!(f["variadic"], json!(true), "{f:#}");
    assert_eq!(f["args"].as_array().unwrap().len(), 6 + 8, "{f:#}");
    // vsum_list(n, ap) reads the values through the va_list.
    let f = hooked_frame(&bt, "vsum_list").unwrap();
    check_regs(f, &v[..1]);

    // dmix(n, a..i): n in rdi, a..h in xmm0-7, i in stack word 0.
    let d = &passed["dmix"];
    let n = ints(&d[..1]);
    let x = doubles(&d[1..]);
    let f = hooked_frame(&bt, "dmix").unwrap();
    check_regs(f, &n);
    for (i, want) in x[..8].iter().enumerate() {
        let a = arg(f, &format!("xmm{i}"));
        assert_eq!(a["double"].as_f64(), Some(*want), "xmm{i}: {f:#}");
        assert_eq!(a["value"].as_u64(), Some(want.to_bits()), "xmm{i}: {f:#}");
    }
    check_stack(f, &[x[8].to_bits()]);

    let text = run_ok(&["bt", "--pid", &p]);
    // With DWARF the stashed doubles are shown by name, as gdb would.
    assert!(text.contains("dmix (n=3, a=0.5, b=1.25, c=-2,"), "{text}");

    check_results(&mut t);
    run_ok(&["eject", "--pid", &p, "--all"]);
    for name in HOOKED {
        t.assert_function_pristine(name);
    }
    check_results(&mut t);
}

/// The hooked `dmix` frame's named parameters: `n` from rdi, `a`..`h` from
/// xmm0-7 and `i` from stack word 0, each equal to what the fixture passed.
fn check_dmix_params(bt: &Value, passed: &[String]) {
    let f = hooked_frame(bt, "dmix").unwrap_or_else(|| panic!("no hooked dmix: {bt:#}"));
    let params = f["params"].as_array().unwrap();
    assert_eq!(params.len(), 10, "{f:#}");
    assert_eq!(params[0]["name"], json!("n"), "{f:#}");
    assert_eq!(params[0]["value"].as_u64(), Some(ints(&passed[..1])[0]));
    let want = doubles(&passed[1..]);
    for (k, (p, want)) in params[1..].iter().zip(&want).enumerate() {
        let name = ((b'a' + k as u8) as char).to_string();
        let register = if k < 8 {
            format!("xmm{k}")
        } else {
            "stack+8".to_string()
        };
        assert_eq!(p["name"], json!(name), "{p:#}");
        assert_eq!(p["type"], json!("double"), "{p:#}");
        assert_eq!(p["source"], json!("stash"), "{p:#}");
        assert_eq!(p["register"], json!(register), "{p:#}");
        let shown: f64 = p["display"]
            .as_str()
            .and_then(|d| d.parse().ok())
            .unwrap_or_else(|| panic!("{name} is not a number: {p:#}"));
        assert_eq!(shown, *want, "{name}: {p:#}");
        assert_eq!(p["value"].as_u64(), Some(want.to_bits()), "{name}: {p:#}");
    }
}

#[test]
fn dwarf_signature_stashes_doubles_and_decides_the_window() {
    let mut t = Target::start("abiargs", Variant::O2G);
    let passed = passed_args(&mut t);
    let p = t.pid().to_string();
    let out = run_ok(&["inject", "--pid", &p, "--func", "dmix", "--func", "ten"]);
    for name in ["dmix", "ten"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("hooked {name} ")))
            .unwrap_or_else(|| panic!("{out}"));
        assert!(line.contains("words from signature"), "{line}");
    }
    let hooks = list_hooks(t.pid());
    for (name, words, xmm) in [("dmix", 1, true), ("ten", 4, false)] {
        let h = hooks_named(&hooks, name, "active");
        assert_eq!(h.len(), 1, "{name}: {hooks:#?}");
        assert_eq!(h[0]["stack_words"], json!(words), "{name}: {:#}", h[0]);
        assert_eq!(h[0]["xmm"], json!(xmm), "{name}: {:#}", h[0]);
    }
    let bt = wait_bt(t.pid(), None, SOON, |bt| {
        ["dmix", "ten"]
            .iter()
            .all(|n| hooked_frame(bt, n).is_some())
    });
    check_dmix_params(&bt, &passed["dmix"]);
    let ten = ints(&passed["ten"]);
    let f = hooked_frame(&bt, "ten").unwrap();
    let shown: Vec<u64> = f["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["value"].as_u64().unwrap_or_else(|| panic!("{p:#}")))
        .collect();
    assert_eq!(shown, ten, "{f:#}");
    let text = run_ok(&["bt", "--pid", &p]);
    assert!(text.contains("b=1.25, c=-2, d=3.75, e=1000"), "{text}");
    check_results(&mut t);
    run_ok(&["eject", "--pid", &p, "--all"]);
    t.assert_function_pristine("dmix");
    t.assert_function_pristine("ten");
    check_results(&mut t);
}

#[test]
fn typed_signature_on_a_stripped_build_stashes_doubles() {
    let mut t = Target::start("abiargs", Variant::new(Opt::O2, true));
    let passed = passed_args(&mut t);
    let p = t.pid().to_string();
    let sig = "dmix(long n, double a, double b, double c, double d, double e, double f, \
               double g, double h, double i)";
    let out = run_ok(&["inject", "--pid", &p, "--func", sig]);
    assert!(
        out.contains("stack window 1 words from signature") && out.contains("xmm0-7 stashed"),
        "{out}"
    );
    let hooks = list_hooks(t.pid());
    let h = hooks_named(&hooks, "dmix", "active");
    assert_eq!(h.len(), 1, "{hooks:#?}");
    assert_eq!(h[0]["xmm"], json!(true), "{:#}", h[0]);
    let bt = wait_bt(t.pid(), None, SOON, |bt| hooked_frame(bt, "dmix").is_some());
    check_dmix_params(&bt, &passed["dmix"]);
    check_results(&mut t);
    run_ok(&["eject", "--pid", &p, "--all"]);
    t.assert_function_pristine("dmix");
    check_results(&mut t);
}

#[test]
fn unbounded_window_is_refused_until_given() {
    // Stripped: no signature, so only the code can bound the window.
    let mut t = Target::start("abiargs", Variant::new(Opt::O2, true));
    let p = t.pid().to_string();
    let out = expect_fail(
        &["inject", "--pid", &p, "--func", "quad_ref"],
        1,
        "--stack-args N",
    );
    // The refusal names the instruction that forced it: address and disassembly.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("takes the address of an incoming stack argument: `lea "),
        "{err}"
    );
    t.assert_function_pristine("quad_ref");
    assert!(list_hooks(t.pid()).is_empty());
    let out = run_ok(&[
        "inject",
        "--pid",
        &p,
        "--func",
        "quad_ref",
        "--stack-args",
        "4",
    ]);
    assert!(out.contains("stack window 4 words from user"), "{out}");
    run_ok(&["eject", "--pid", &p, "--all"]);
    t.assert_function_pristine("quad_ref");
    t.assert_healthy();
}

#[test]
fn dwarf_bounds_a_window_the_code_cannot() {
    let mut t = Target::start("abiargs", Variant::O2G);
    let p = t.pid().to_string();
    let out = run_ok(&["inject", "--pid", &p, "--func", "quad_ref"]);
    assert!(out.contains("stack window 4 words from signature"), "{out}");
    run_ok(&["eject", "--pid", &p, "--all"]);
    t.assert_function_pristine("quad_ref");
    t.assert_healthy();
}

#[test]
fn code_analysis_of_the_compiled_fixture() {
    for variant in [Variant::O2G, Variant::new(Opt::O0g, true)] {
        let exe = build("abiargs", variant);
        let reads = |name: &str| {
            let s = symbol(&exe, name).unwrap();
            analyse_stack_reads(s.addr, &function_bytes(&exe, name))
        };
        for (name, words) in [("ten", 4), ("by_struct", 4), ("dmix", 1), ("vsum_list", 0)] {
            let r = reads(name);
            assert_eq!(
                (r.words, &r.unsure, r.variadic),
                (words, &None, false),
                "{name} {variant}: {r:?}"
            );
        }
        let v = reads("vsum");
        assert!(v.variadic, "vsum {variant}: {v:?}");
        // A variadic function that reads only longs has no xmm save area.
        let bench = build("bench_args", variant);
        let s = symbol(&bench, "va").unwrap();
        let va = analyse_stack_reads(s.addr, &function_bytes(&bench, "va"));
        assert!(va.variadic, "bench_args va {variant}: {va:?}");
        let s = symbol(&bench, "s10").unwrap();
        let s10 = analyse_stack_reads(s.addr, &function_bytes(&bench, "s10"));
        assert_eq!(
            (s10.words, s10.unsure),
            (4, None),
            "bench_args s10 {variant}"
        );
        let q = reads("quad_ref");
        assert!(
            matches!(q.unsure, Some(Unsure::AddressTaken { .. })),
            "quad_ref {variant}: {q:?}"
        );
    }
}
