//! i386 (32-bit) targets: prologue relocation on code from real `cc -m32` builds.
//!
//! The fixture `cdecl32.c` runs as a 32-bit process; its hookable functions are
//! read from its memory and planned/relocated with `trampolines::i386` exactly as
//! an install would, then the relocated code is checked instruction by
//! instruction against the original. Skips (with a message) when `cc -m32`
//! cannot link on this machine (scripts/setup.sh installs gcc-multilib).

use std::path::Path;

use argstash_tests::{
    bt_thread, build, frame_named, m32_available, maps, read_mem, run_json, run_ok, symbol,
    wait_bt, wait_until, Opt, Target, Variant, E2E_TIMEOUT,
};
use iced_x86::{Code, Decoder, DecoderOptions, Instruction, Mnemonic, Register};
use trampolines::i386::{pc_thunk_register, plan_patch};

const M32: &[&str] = &["-m32"];

/// The four builds: {-O0 -g, -O2 -g} x {PIE, non-PIE}, all `-m32`.
fn variants() -> Vec<Variant> {
    let mut v = Vec::new();
    for opt in [Opt::O0g, Opt::O2g] {
        for pie in [true, false] {
            v.push(Variant::new(opt, pie).with_flags(M32));
        }
    }
    v
}

/// Load bias of a 32-bit executable in `pid`: 0 for ET_EXEC, the lowest mapping for ET_DYN.
fn load_bias32(pid: i32, exe: &Path) -> u64 {
    let header = std::fs::read(exe).expect("read executable");
    assert_eq!(&header[..4], b"\x7fELF");
    assert_eq!(header[4], 1, "{} is not ELF32", exe.display());
    if u16::from_le_bytes([header[16], header[17]]) != 3 {
        return 0;
    }
    let canon = std::fs::canonicalize(exe).expect("canonicalize");
    let canon = canon.to_string_lossy();
    maps(pid)
        .into_iter()
        .filter(|m| m.path == canon)
        .map(|m| m.start)
        .min()
        .expect("executable is mapped")
}

fn decode(code: &[u8], at: u64) -> Vec<Instruction> {
    Decoder::with_ip(32, code, at, DecoderOptions::NONE)
        .into_iter()
        .collect()
}

#[test]
fn prologues_of_m32_builds_relocate_with_their_pic_address_computations() {
    if !m32_available() {
        return;
    }
    for variant in variants() {
        let exe = build("cdecl32", variant);
        let mut target = Target::spawn(&exe);
        let pid = target.pid();
        let bias = load_bias32(pid, &exe);
        let thunk_at = |addr: u64| pc_thunk_register(&read_mem(pid, addr, 8));
        let mut constant_loads = 0;
        for name in [
            "cdecl_sum",
            "regparm_sum",
            "fast_sum",
            "make_triple",
            "pic_counter",
            "pic_peek",
            "pic_pop",
            "leaf_nop",
            "leaf_pop",
        ] {
            let sym = symbol(&exe, name).unwrap_or_else(|| panic!("{name} in {variant}"));
            let function = bias + sym.addr;
            let code = read_mem(pid, function, sym.size as usize);
            let plan = plan_patch(function, &code, &thunk_at)
                .unwrap_or_else(|e| panic!("{name} ({variant}): {e}"));
            // Place the copy 1 GiB away, as an arena below 4 GiB would be.
            let at = (function + 0x4000_0000) & 0xffff_fff0;
            let moved = plan
                .relocate(at)
                .unwrap_or_else(|e| panic!("{name} ({variant}): {e}"));
            let original = decode(&plan.original, plan.patch_addr);
            let relocated = decode(&moved.code, at);
            let (back, body) = relocated.split_last().expect("a jump back");
            assert_eq!(back.mnemonic(), Mnemonic::Jmp);
            assert_eq!(
                back.near_branch_target(),
                plan.patch_addr + plan.patch_len as u64,
                "{name} ({variant}): jumps back after the patch"
            );
            let mut orig = original.iter().peekable();
            for new in body {
                let old = orig.next().expect("as many moved instructions");
                if old.code() == Code::Call_rel32_32 {
                    // The address the original code computed, as a constant.
                    assert_eq!(new.code(), Code::Mov_r32_imm32, "{name} ({variant})");
                    assert_eq!(u64::from(new.immediate32()), old.next_ip());
                    let target = old.near_branch_target();
                    if target == old.next_ip() {
                        let pop = orig.next().expect("pop after call next");
                        assert_eq!(pop.code(), Code::Pop_r32);
                        assert_eq!(new.op0_register(), pop.op0_register());
                    } else {
                        let thunk = decode(&read_mem(pid, target, 4), target);
                        assert_eq!(thunk[0].memory_base(), Register::ESP);
                        assert_eq!(new.op0_register(), thunk[0].op0_register());
                    }
                    constant_loads += 1;
                } else {
                    let old_bytes =
                        &plan.original[(old.ip() - plan.patch_addr) as usize..][..old.len()];
                    let new_bytes = &moved.code[(new.ip() - at) as usize..][..new.len()];
                    assert_eq!(old_bytes, new_bytes, "{name} ({variant}): moved as is");
                }
            }
            assert!(orig.next().is_none(), "{name} ({variant}): all moved");
        }
        // pic_pop everywhere, plus pic_peek's get_pc_thunk call in PIE builds.
        let expected_min = if variant.pie { 2 } else { 1 };
        assert!(
            constant_loads >= expected_min,
            "{variant}: {constant_loads} PIC address computations rewritten"
        );
        target.assert_healthy();
    }
}

#[test]
fn callee_popping_functions_end_with_ret_4() {
    // Why the i386 trampoline passes on what its callee popped: these two really do.
    if !m32_available() {
        return;
    }
    for variant in variants() {
        let exe = build("cdecl32", variant);
        let target = Target::spawn(&exe);
        let bias = load_bias32(target.pid(), &exe);
        let function = |name: &str| {
            let sym = symbol(&exe, name).expect("symbol");
            read_mem(target.pid(), bias + sym.addr, sym.size as usize)
        };
        let data = function("fast_sum");
        let rets: Vec<u16> = decode(&data, 0)
            .iter()
            .filter(|i| i.mnemonic() == Mnemonic::Ret)
            .map(|i| {
                if i.op_count() == 1 {
                    i.immediate16()
                } else {
                    0
                }
            })
            .collect();
        assert!(
            !rets.is_empty() && rets.iter().all(|r| *r == 4),
            "{variant}: fast_sum {rets:?}"
        );
        let data = function("make_triple");
        assert!(decode(&data, 0)
            .iter()
            .any(|i| i.mnemonic() == Mnemonic::Ret && i.op_count() == 1 && i.immediate16() == 4));
    }
}

/// The hookable functions of `cdecl32.c`.
const FUNCTIONS: [&str; 9] = [
    "cdecl_sum",
    "regparm_sum",
    "fast_sum",
    "make_triple",
    "pic_counter",
    "pic_peek",
    "pic_pop",
    "leaf_nop",
    "leaf_pop",
];

/// The round number of a fixture line `call <round> <function> <args...>`.
fn round_of(line: &str) -> Option<u64> {
    line.strip_prefix("call ")?.split(' ').next()?.parse().ok()
}

/// Waits until the fixture has completed `rounds` more full rounds of calls.
fn wait_rounds(t: &mut Target, rounds: u64) {
    let first = round_of(&t.wait_for_line(E2E_TIMEOUT, |l| round_of(l).is_some())).unwrap();
    t.wait_for_line(E2E_TIMEOUT, |l| {
        round_of(l).is_some_and(|r| r >= first + rounds)
    });
}

#[test]
fn hooked_functions_of_every_convention_keep_their_results_and_eject_restores_bytes() {
    if !m32_available() {
        return;
    }
    for variant in variants() {
        let exe = build("cdecl32", variant);
        let mut t = Target::spawn(&exe);
        let pid = t.pid();
        let bias = load_bias32(pid, &exe);
        let entries: Vec<(u64, Vec<u8>)> = FUNCTIONS
            .iter()
            .map(|name| {
                let sym = symbol(&exe, name).expect("symbol");
                (bias + sym.addr, read_mem(pid, bias + sym.addr, 16))
            })
            .collect();
        let p = pid.to_string();
        let mut args = vec!["inject", "--pid", &p];
        for f in FUNCTIONS {
            args.extend(["--func", f]);
        }
        let out = run_ok(&args);
        for f in FUNCTIONS {
            assert!(out.contains(&format!("hooked {f} ")), "{variant}: {out}");
        }
        let hooks = run_json(&["list", "--pid", &p, "--json"]);
        let listed = hooks.to_string();
        for (f, (addr, original)) in FUNCTIONS.iter().zip(&entries) {
            assert!(listed.contains(f), "{variant}: {f} not listed: {listed}");
            let now = read_mem(pid, *addr, 16);
            assert_eq!(now[0], 0xe9, "{variant}: {f} starts with a jmp");
            assert_ne!(&now, original);
            // The arena lives in the 32-bit space, where the rel32 lands.
            let rel = i32::from_le_bytes([now[1], now[2], now[3], now[4]]);
            let trampoline = (*addr as u32).wrapping_add(5).wrapping_add(rel as u32);
            assert!(
                listed.contains(&trampoline.to_string())
                    || listed.contains(&format!("{trampoline:#x}")),
                "{variant}: {f} jumps to {trampoline:#x}: {listed}"
            );
        }
        // Every function runs through its trampoline for a while; the fixture checks
        // results, and regs_check every register, CF and esp around leaf_nop/leaf_pop.
        wait_rounds(&mut t, 10);
        t.assert_healthy();
        run_ok(&["eject", "--pid", &p, "--all"]);
        for (f, (addr, original)) in FUNCTIONS.iter().zip(&entries) {
            assert_eq!(
                &read_mem(pid, *addr, 16),
                original,
                "{variant}: {f} restored"
            );
        }
        wait_rounds(&mut t, 3);
        t.assert_healthy();
    }
}

/// Where each argument of `function` lives on i386, in the order the fixture prints them.
fn argument_places(function: &str) -> &'static [&'static str] {
    match function {
        "cdecl_sum" => &["stack+4", "stack+8", "stack+12"],
        "regparm_sum" => &["eax", "edx", "ecx", "stack+4"],
        "fast_sum" => &["ecx", "edx", "stack+4"],
        // stack+4 holds the hidden pointer to the returned struct.
        "make_triple" => &["stack+8", "stack+12"],
        "pic_counter" => &["stack+4"],
        other => panic!("no argument places for {other}"),
    }
}

/// The argument values a printed line `call <round> <function> <args...>` names.
fn printed_args(line: &str, function: &str) -> Option<Vec<u64>> {
    let mut words = line.strip_prefix("call ")?.split(' ');
    words.next()?;
    if words.next()? != function {
        return None;
    }
    words.map(|w| w.parse().ok()).collect()
}

#[test]
fn bt_shows_the_exact_stashed_arguments_of_every_convention() {
    if !m32_available() {
        return;
    }
    let hooked = [
        "cdecl_sum",
        "regparm_sum",
        "fast_sum",
        "make_triple",
        "pic_counter",
    ];
    for variant in variants() {
        let exe = build("cdecl32", variant);
        let mut t = Target::spawn(&exe);
        let p = t.pid().to_string();
        let mut args = vec!["inject", "--pid", &p];
        for f in hooked {
            args.extend(["--func", f]);
        }
        run_ok(&args);
        let mut seen: Vec<String> = Vec::new();
        for function in hooked {
            let bt = wait_bt(t.pid(), None, E2E_TIMEOUT, |bt| {
                bt_thread(bt, t.pid())
                    .and_then(|th| frame_named(th, function))
                    .is_some_and(|(_, f)| f["hooked"] == serde_json::json!(true))
            });
            let th = bt_thread(&bt, t.pid()).unwrap();
            let (index, frame) = frame_named(th, function).unwrap();
            assert!(
                frame_named(th, "main").is_some_and(|(i, _)| i > index),
                "{variant}: main is an outer frame: {th:#}"
            );
            let value_of = |place: &str| {
                frame["args"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|a| a["register"] == place)
                    .and_then(|a| a["value"].as_u64())
                    .unwrap_or_else(|| panic!("{variant}: no {place} in {frame:#}"))
            };
            let stashed: Vec<u64> = argument_places(function)
                .iter()
                .map(|p| value_of(p))
                .collect();
            // The call was printed just before it was made: find that line.
            let matches = |seen: &[String]| {
                seen.iter()
                    .any(|l| printed_args(l, function).as_ref() == Some(&stashed))
            };
            seen.extend(t.drain_lines());
            while !matches(&seen) {
                match t.next_line(E2E_TIMEOUT) {
                    Some(l) if round_of(&l).is_some() => seen.push(l),
                    Some(_) => {}
                    None => panic!(
                        "{variant}: {function} stashed {stashed:?}, printed calls: {:?}",
                        seen.iter().rev().take(12).collect::<Vec<_>>()
                    ),
                }
            }
        }
        t.assert_healthy();
        run_ok(&["eject", "--pid", &p, "--all"]);
        wait_rounds(&mut t, 2);
        t.assert_healthy();
    }
}

/// The arguments `dwarf32` is started with: int, long long (spanning two stack
/// words), string, double.
const DWARF32_A: i32 = 86;
const DWARF32_B: i64 = 0x1_0000_0011;
const DWARF32_S: &str = "stash-me";
const DWARF32_D: f64 = 2.5;

/// The expected `(name, stash place, value)` of each parameter of the hooked
/// functions of `dwarf32.c`, from the values the test passes it.
fn dwarf32_expected(function: &str) -> Vec<(&'static str, &'static str, u64)> {
    let a = DWARF32_A as u32 as u64;
    match function {
        "mixed_cdecl" => vec![
            ("a", "stack+4", a),
            ("b", "stack+8", DWARF32_B as u64),
            ("d", "stack+16", DWARF32_D.to_bits()),
            ("s", "stack+24", 0), // a pointer: checked by its display
        ],
        "reg_three" => vec![
            ("a", "eax", a),
            ("b", "edx", a + 1),
            ("c", "ecx", a + 2),
            ("d", "stack+4", a + 3),
        ],
        "fast_two" => vec![
            ("a", "ecx", a),
            ("b", "edx", a + 1),
            ("c", "stack+4", a + 2),
        ],
        other => panic!("no parameters for {other}"),
    }
}

/// The three hooked functions of `dwarf32.c`.
const DWARF32_FUNCTIONS: [&str; 3] = ["mixed_cdecl", "reg_three", "fast_two"];

/// Starts `dwarf32` built as `variant`, hooks `specs` (`--func` values) and
/// returns each one's hooked frame from `bt --json` (waiting until it is on the stack).
fn dwarf32_frames(
    variant: Variant,
    specs: &[&'static str],
) -> (Target, Vec<(&'static str, serde_json::Value)>) {
    let exe = build("dwarf32", variant);
    let a = DWARF32_A.to_string();
    let b = DWARF32_B.to_string();
    let d = DWARF32_D.to_string();
    let mut t = Target::spawn_with_args(&exe, &[&a, &b, DWARF32_S, &d]);
    let p = t.pid().to_string();
    let mut args = vec!["inject", "--pid", &p];
    for f in specs {
        args.extend(["--func", f]);
    }
    run_ok(&args);
    let mut frames = Vec::new();
    for spec in specs {
        let function = spec.split('(').next().unwrap();
        let bt = wait_bt(t.pid(), None, E2E_TIMEOUT, |bt| {
            bt_thread(bt, t.pid())
                .and_then(|th| frame_named(th, function))
                .is_some_and(|(_, f)| f["hooked"] == serde_json::json!(true))
        });
        let th = bt_thread(&bt, t.pid()).unwrap();
        frames.push((function, frame_named(th, function).unwrap().1.clone()));
    }
    t.assert_healthy();
    (t, frames)
}

/// Asserts that `frame` names every parameter of `function` with the value passed.
fn assert_named(variant: Variant, function: &str, frame: &serde_json::Value) {
    let params = frame["params"].as_array().expect("params");
    let expected = dwarf32_expected(function);
    assert_eq!(params.len(), expected.len(), "{variant}: {frame:#}");
    for (p, (name, place, value)) in params.iter().zip(expected) {
        assert_eq!(p["name"], name, "{variant} {function}: {p}");
        assert_eq!(p["register"], place, "{variant} {function}: {p}");
        assert_eq!(p["source"], "stash", "{variant} {function}: {p}");
        if name == "s" {
            assert_eq!(p["type"], "const char *", "{variant}: {p}");
            let display = p["display"].as_str().unwrap();
            assert!(
                display.ends_with(&format!("\"{DWARF32_S}\"")),
                "{variant}: {p}"
            );
        } else {
            assert_eq!(
                p["value"].as_u64(),
                Some(value),
                "{variant} {function}: {p}"
            );
        }
    }
    let shown: Vec<&str> = params
        .iter()
        .map(|p| p["display"].as_str().unwrap())
        .collect();
    if function == "mixed_cdecl" {
        assert_eq!(shown[0], DWARF32_A.to_string());
        assert_eq!(shown[1], DWARF32_B.to_string());
        assert_eq!(shown[2], DWARF32_D.to_string());
    }
}

/// Asserts the frame's source file is the fixture's, at a real line.
fn assert_source(variant: Variant, function: &str, frame: &serde_json::Value) {
    assert_eq!(frame["source_function"], function, "{variant}: {frame:#}");
    let file = frame["file"].as_str().unwrap_or_default();
    assert!(file.ends_with("dwarf32.c"), "{variant}: {frame:#}");
    assert!(
        frame["line"].as_u64().is_some_and(|l| l > 0),
        "{variant}: {frame:#}"
    );
}

#[test]
fn o2_i386_frames_show_named_typed_arguments_and_source_lines() {
    if !m32_available() {
        return;
    }
    let variant = Variant::new(Opt::O2g, true).with_flags(M32);
    let (mut t, frames) = dwarf32_frames(variant, &DWARF32_FUNCTIONS);
    for (function, frame) in &frames {
        assert_source(variant, function, frame);
        assert_named(variant, function, frame);
    }
    // The text form reads like gdb's.
    let p = t.pid().to_string();
    let mut text = String::new();
    let found = wait_until(E2E_TIMEOUT, || {
        text = run_ok(&["bt", "--pid", &p]);
        text.lines().any(|l| l.contains(" in reg_three ("))
    });
    assert!(found, "{text}");
    let line = text
        .lines()
        .find(|l| l.contains(" in reg_three ("))
        .unwrap();
    let a = DWARF32_A;
    let want = format!(
        "reg_three (a={a}, b={}, c={}, d={}) [stashed] at dwarf32.c:",
        a + 1,
        a + 2,
        a + 3
    );
    assert!(line.contains(&want), "{line}");
    t.assert_healthy();
}

#[test]
fn o0_i386_frames_name_only_what_dwarf_decides() {
    if !m32_available() {
        return;
    }
    let variant = Variant::new(Opt::O0g, true).with_flags(M32);
    let (mut t, frames) = dwarf32_frames(variant, &DWARF32_FUNCTIONS);
    for (function, frame) in &frames {
        assert_source(variant, function, frame);
        if *function == "mixed_cdecl" {
            // cdecl: gcc -O0 copies `b` and `d` to local slots, but `s` at its
            // cdecl offset proves where they came in.
            assert_named(variant, function, frame);
        } else {
            // gcc -O0 keeps regparm/fastcall arguments in local slots and says
            // nothing of the convention: positions only, never a guessed name.
            assert_eq!(
                frame["params"],
                serde_json::json!([]),
                "{variant}: {frame:#}"
            );
            let args = frame["args"].as_array().unwrap();
            assert!(args.iter().all(|a| a.get("name").is_none()), "{frame:#}");
            for (_, place, value) in dwarf32_expected(function) {
                assert!(
                    args.iter()
                        .any(|a| a["register"] == place && a["value"].as_u64() == Some(value)),
                    "{variant} {function}: {place}={value} in {frame:#}"
                );
            }
        }
    }
    t.assert_healthy();
}

#[test]
fn stripped_i386_frames_stay_positional() {
    if !m32_available() {
        return;
    }
    let variant = Variant::new(Opt::O2, true).with_flags(M32);
    let (mut t, frames) = dwarf32_frames(variant, &DWARF32_FUNCTIONS);
    for (function, frame) in &frames {
        assert_eq!(
            frame["params"],
            serde_json::json!([]),
            "{variant}: {frame:#}"
        );
        assert!(frame["file"].is_null(), "{variant}: {frame:#}");
        let args = frame["args"].as_array().unwrap();
        for (_, place, value) in dwarf32_expected(function) {
            if place == "stack+8" || place == "stack+16" || place == "stack+24" {
                continue; // multi-word and pointer values: only named frames combine them
            }
            assert!(
                args.iter()
                    .any(|a| a["register"] == place && a["value"].as_u64() == Some(value)),
                "{variant} {function}: {place}={value} in {frame:#}"
            );
        }
    }
    t.assert_healthy();
}

#[test]
fn stripped_i386_frames_take_names_from_a_user_signature_in_cdecl_order() {
    if !m32_available() {
        return;
    }
    let variant = Variant::new(Opt::O2, true).with_flags(M32);
    let spec = "mixed_cdecl(int a, long long b, double d, const char *s)";
    let (mut t, frames) = dwarf32_frames(variant, &[spec]);
    let (function, frame) = &frames[0];
    assert!(frame["file"].is_null(), "{variant}: {frame:#}");
    assert_named(variant, function, frame);
    t.assert_healthy();
}
