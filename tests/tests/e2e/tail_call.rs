//! End-to-end: a hooked function that tail-calls. tailcall.c's `tail_entry(7, 9, 0)`
//! ends in `jmp tail_target` at -O2, so while `tail_target` sleeps the stash of the
//! `tail_entry` hook sits on `tail_target`'s frame. `bt` must name the hook there
//! (`[stashed by hook tail_entry]`, `"hook": "tail_entry"`), name the stashed values
//! by `tail_entry`'s parameters (not `tail_target`'s, which were never in those
//! registers), and a core of the process must read the same. A frame that is the
//! hooked function itself keeps the plain `[stashed]` and still has `"hook"`.
//! The same on i386 (`cc -m32`; skipped when it cannot link here).

use std::path::Path;
use std::time::Duration;

use argstash_tests::*;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(10);

/// Asserts that gcc compiled `tail_entry`'s call as a jump to `tail_target`.
fn assert_tail_jump(exe: &Path) {
    let target = symbol(exe, "tail_target").expect("tail_target symbol").addr;
    let insns = disassemble(exe, "tail_entry");
    let last = insns.last().expect("instructions");
    assert!(
        last.mnemonic().starts_with("jmp") && last.branch_target() == Some(target),
        "tail_entry does not end in `jmp tail_target` in {}: {insns:#?}",
        exe.display()
    );
    assert!(
        !insns.iter().any(|i| i.mnemonic().starts_with("call")),
        "tail_entry calls instead of jumping: {insns:#?}"
    );
}

/// The hooked `tail_target` frame of the main thread of a `bt --json` value.
fn tail_frame(bt: &Value) -> Option<Value> {
    bt_threads(bt)
        .iter()
        .flat_map(thread_frames)
        .find(|f| f["function"] == "tail_target" && f["hooked"] == true)
        .cloned()
}

/// Runs `argstash bt` (text) until `needle` shows up; returns that output.
fn wait_bt_text(args: &[&str], needle: &str) -> String {
    let mut last = String::new();
    let ok = wait_until(WAIT, || {
        last = run_ok(args);
        last.contains(needle)
    });
    assert!(
        ok,
        "`argstash {}` never showed {needle:?}; last:\n{last}",
        args.join(" ")
    );
    last
}

fn check_variant(variant: Variant, with_dwarf: bool, m32: bool) {
    let exe = build("tailcall", variant);
    assert_tail_jump(&exe);
    let mut t = Target::spawn(&exe);
    let pid = t.pid().to_string();
    run_ok(&["inject", "--pid", &pid, "--func", "tail_entry"]);

    let bt = wait_bt(t.pid(), None, WAIT, |bt| tail_frame(bt).is_some());
    let f = tail_frame(&bt).unwrap();
    assert_eq!(f["hook"], "tail_entry", "{f:#}");
    // x86-64: the registers tail_entry was called with (7, 9, 0; tail_target got
    // 8, 9, 12345). i386: cdecl arguments live in the stack words the hook copied,
    // and tail_entry rewrote them in place for tail_target before its `jmp`, so
    // they hold what tail_target was passed.
    let (slots, values) = if m32 {
        (["stack+4", "stack+8", "stack+12"], ["8", "9", "12345"])
    } else {
        (["rdi", "rsi", "rdx"], ["7", "9", "0"])
    };
    for (slot, value) in slots.iter().zip(values) {
        assert_eq!(frame_arg(&f, slot), value.parse().ok(), "{slot}: {f:#}");
    }
    // No tail_entry frame: it jumped away and has no frame of its own.
    assert!(
        !bt_threads(&bt)
            .iter()
            .flat_map(thread_frames)
            .any(|f| f["function"] == "tail_entry"),
        "{bt:#}"
    );
    let params = f["params"].as_array().unwrap();
    let text_needle = if with_dwarf {
        // Named by tail_entry's parameters (x, y, z), whose entry locations the
        // stash holds, not by tail_target's (a, b, c).
        let named: Vec<(&str, &str)> = params
            .iter()
            .map(|p| (p["name"].as_str().unwrap(), p["display"].as_str().unwrap()))
            .collect();
        assert_eq!(
            named,
            [("x", values[0]), ("y", values[1]), ("z", values[2])],
            "{f:#}"
        );
        format!(
            "in tail_target (x={}, y={}, z={}) [stashed by hook tail_entry] at tailcall.c:",
            values[0], values[1], values[2]
        )
    } else {
        assert!(params.is_empty(), "{f:#}");
        "in tail_target (rdi=7, rsi=9, rdx=0, ".to_string()
    };
    let text = wait_bt_text(&["bt", "--pid", &pid], &text_needle);
    let line = text
        .lines()
        .find(|l| l.contains(&text_needle))
        .expect("the line");
    assert!(line.contains("[stashed by hook tail_entry]"), "{line}");

    // A core (gcore) of the hooked process reads the same (cores are x86-64 only).
    if !m32 && Path::new("/usr/bin/gcore").exists() {
        let dir = std::env::temp_dir().join(format!("argstash-tailcore-{}", t.pid()));
        std::fs::create_dir_all(&dir).unwrap();
        let prefix = dir.join("core");
        // Wait for tail_target to be on the stack, then dump.
        wait_bt(t.pid(), None, WAIT, |bt| tail_frame(bt).is_some());
        let mut gcore = std::process::Command::new("gcore");
        gcore.arg("-o").arg(&prefix).arg(&pid);
        let out = run_command(&mut gcore, Duration::from_secs(60));
        let core = dir.join(format!("core.{pid}"));
        assert!(core.is_file(), "gcore wrote no core: {out:?}");
        let core_s = core.to_str().unwrap();
        let v = run_json(&["bt", "--core", core_s, "--json"]);
        let text = run_ok(&["bt", "--core", core_s]);
        let _ = std::fs::remove_dir_all(&dir);
        // gcore stops the process wherever it is: tail_target may be running, not sleeping.
        if let Some(f) = tail_frame(&v) {
            assert_eq!(f["hook"], "tail_entry", "{f:#}");
            assert_eq!(frame_arg(&f, "rdi"), Some(7), "{f:#}");
            assert!(text.contains("[stashed by hook tail_entry]"), "{text}");
        } else {
            println!("core taken while tail_target was not on the stack:\n{text}");
        }
    }

    run_ok(&["eject", "--pid", &pid, "--all"]);
    t.assert_healthy();
}

#[test]
fn tail_called_frame_names_the_hook_with_dwarf() {
    check_variant(Variant::O2G, true, false);
}

#[test]
fn tail_called_frame_names_the_hook_without_dwarf() {
    check_variant(Variant::new(Opt::O2, true), false, false);
}

#[test]
fn tail_called_frame_names_the_hook_on_i386() {
    if !m32_available() {
        return;
    }
    check_variant(Variant::O2G.with_flags(&["-m32"]), true, true);
}

#[test]
fn hooked_function_itself_keeps_plain_stashed_and_has_hook() {
    let mut t = Target::start("seed", Variant::O2G);
    let pid = t.pid().to_string();
    run_ok(&["inject", "--pid", &pid, "--func", "bar"]);
    let bt = wait_bt(t.pid(), None, WAIT, |bt| {
        bt_threads(bt)
            .iter()
            .flat_map(thread_frames)
            .any(|f| f["function"] == "bar" && f["hooked"] == true)
    });
    let threads = bt_threads(&bt);
    for f in threads.iter().flat_map(thread_frames) {
        if f["hooked"] == true {
            assert_eq!(f["hook"], f["function"], "{f:#}");
        } else {
            assert!(f.get("hook").is_none(), "{f:#}");
        }
    }
    let text = wait_bt_text(
        &["bt", "--pid", &pid],
        "in bar (bar_arg=28) [stashed] at seed.c:",
    );
    assert!(!text.contains("by hook"), "{text}");
    run_ok(&["eject", "--pid", &pid, "--all"]);
    t.assert_healthy();
}
