//! End-to-end: how `argstash record` names hooked frames. tailspin.c's `work(id,
//! rounds)` ends in `jmp spin`, so the CPU time goes to `spin`'s frame, which
//! holds the stash of `work`'s hook: `--with-args` must name that frame as `bt`
//! marks it, the frame's own function with the hooked function and its
//! arguments (`spin [stashed by hook work(id=1, rounds=3)]`), never `spin` with
//! `work`'s arguments; with both samplers.

use std::fs;
use std::path::Path;

use argstash_tests::*;

/// Asserts that gcc compiled `work`'s call as a jump to `spin`.
fn assert_tail_jump(exe: &Path) {
    let spin = symbol(exe, "spin").expect("spin symbol").addr;
    let insns = disassemble(exe, "work");
    let last = insns.last().expect("instructions");
    assert!(
        last.mnemonic().starts_with("jmp") && last.branch_target() == Some(spin),
        "work does not end in `jmp spin` in {}: {insns:#?}",
        exe.display()
    );
}

/// Samples whose leaf frame is exactly `name`.
fn leaf(stacks: &Stacks, name: &str) -> u64 {
    stacks
        .iter()
        .filter(|(s, _)| s.last().is_some_and(|f| f == name))
        .map(|(_, n)| n)
        .sum()
}

#[test]
fn a_frame_a_hooked_function_tail_called_is_named_with_the_hook_and_its_arguments() {
    let exe = build("tailspin", Variant::O2G);
    assert_tail_jump(&exe);
    // tailspin.c: work(1, 3) and work(2, 1), 3:1 of the CPU time.
    let heavy = "spin [stashed by hook work(id=1, rounds=3)]";
    let light = "spin [stashed by hook work(id=2, rounds=1)]";
    for sampler in ["ptrace", "kernel"] {
        let out = temp_file("record-naming", &format!("tail-{sampler}.txt"));
        let o = out.to_str().unwrap();
        let e = exe.to_str().unwrap();
        let run = record_ok(&[
            "--sampler",
            sampler,
            "--rate",
            "499",
            "--func",
            "work",
            "--with-args",
            "-o",
            o,
            "--",
            e,
            "2",
        ]);
        let stacks = collapsed(&out);
        let stderr = text(&run.stderr);
        let (h, l) = (leaf(&stacks, heavy), leaf(&stacks, light));
        assert!(
            h > 0 && l > 0,
            "{sampler}: no {heavy:?} or {light:?}:\n{stacks:?}\n{stderr}"
        );
        // Most of the time is in spin, each sample under one of the two calls.
        let spin = count(&stacks, |f| f.starts_with("spin"));
        assert_eq!(spin, h + l, "{sampler}: {stacks:?}");
        assert!(
            h > l,
            "{sampler}: work(1, 3) does 3 times the work of work(2, 1): {stacks:?}"
        );
        // spin never shows with work's arguments as its own, nor work as a frame.
        assert_eq!(count(&stacks, |f| f.starts_with("spin(")), 0, "{stacks:?}");
        assert_eq!(count(&stacks, |f| f.starts_with("work")), 0, "{stacks:?}");
        let _ = fs::remove_file(&out);
    }
    // Without --with-args the frame is its own function's.
    let out = temp_file("record-naming", "tail-plain.txt");
    record_ok(&[
        "--rate",
        "499",
        "--func",
        "work",
        "-o",
        out.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
        "1",
    ]);
    let stacks = collapsed(&out);
    assert!(leaf(&stacks, "spin") > 0, "{stacks:?}");
    assert_eq!(count(&stacks, |f| f.contains("stashed")), 0, "{stacks:?}");
    let _ = fs::remove_file(out);
}

/// Stack frames (any depth) whose name starts with `prefix`, with their counts.
fn frames_starting(stacks: &Stacks, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = stacks
        .iter()
        .flat_map(|(s, _)| s.iter())
        .filter(|f| f.starts_with(prefix))
        .cloned()
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn without_a_signature_with_args_names_no_registers_unless_asked_and_says_so() {
    // profsplit without DWARF: nothing says how many arguments apply_entry takes.
    let exe = build("profsplit", Variant::new(Opt::O2, true));
    let e = exe.to_str().unwrap();
    for sampler in ["ptrace", "kernel"] {
        let out = temp_file("record-naming", &format!("nosig-{sampler}.txt"));
        let o = out.to_str().unwrap();
        let run = record_ok(&[
            "--sampler",
            sampler,
            "--rate",
            "299",
            "--func",
            "apply_entry",
            "--with-args",
            "-o",
            o,
            "--",
            e,
            "accounts",
            "1",
        ]);
        let stderr = text(&run.stderr);
        let stacks = collapsed(&out);
        // One frame per call site: the six registers' values no longer split it.
        assert_eq!(
            frames_starting(&stacks, "apply_entry"),
            ["apply_entry"],
            "{sampler}: {stacks:?}\n{stderr}"
        );
        assert!(
            stderr.contains("apply_entry named without arguments: no signature is known"),
            "{sampler}: the summary does not say why:\n{stderr}"
        );
        let _ = fs::remove_file(&out);
    }
    // Registers asked for by name are shown; so is a signature given with --func.
    let out = temp_file("record-naming", "nosig-rdi.txt");
    let o = out.to_str().unwrap();
    let run = record_ok(&[
        "--rate",
        "299",
        "--func",
        "apply_entry",
        "--args",
        "rdi",
        "-o",
        o,
        "--",
        e,
        "accounts",
        "2",
    ]);
    assert!(!text(&run.stderr).contains("named without arguments"));
    // profsplit.c's accounts: 1001, 1002 and 1003, in the first argument.
    let by_rdi = frames_starting(&collapsed(&out), "apply_entry");
    assert_eq!(
        by_rdi,
        [
            "apply_entry(rdi=1001)",
            "apply_entry(rdi=1002)",
            "apply_entry(rdi=1003)"
        ],
        "{by_rdi:?}"
    );
    record_ok(&[
        "--rate",
        "299",
        "--func",
        "apply_entry(long account, long amount)",
        "--with-args",
        "-o",
        o,
        "--",
        e,
        "accounts",
        "2",
    ]);
    let typed = frames_starting(&collapsed(&out), "apply_entry");
    assert_eq!(
        typed,
        [
            "apply_entry(account=1001, amount=1)",
            "apply_entry(account=1002, amount=2)",
            "apply_entry(account=1003, amount=7)"
        ],
        "{typed:?}"
    );
    let _ = fs::remove_file(out);
}

/// The name `bt` (text) gives the caller of `main` in the thread running it.
fn bt_caller_of_main(pid: &str) -> String {
    let bt = run_ok(&["bt", "--pid", pid]);
    let lines: Vec<&str> = bt.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains(" in main ("))
        .unwrap_or_else(|| panic!("no main frame in:\n{bt}"));
    let next = lines
        .get(at + 1)
        .unwrap_or_else(|| panic!("nothing under main:\n{bt}"));
    // `#5  0x00007f... in NAME (args) at file:line`
    let name = next
        .split_once(" in ")
        .and_then(|(_, rest)| rest.split_once(" ("))
        .map(|(name, _)| name.to_string())
        .unwrap_or_else(|| panic!("no name in {next:?}:\n{bt}"));
    name
}

#[test]
fn libc_internals_are_named_as_bt_names_them() {
    // profsplit's accounts mode runs in main: main's caller (libc's
    // __libc_start_call_main, which only libc6-dbg's debug file names) is on
    // the stack of every on-CPU sample.
    let exe = profsplit();
    let t = Target::spawn_with_args(&exe, &["accounts", "60"]);
    let pid = t.pid().to_string();
    let want = bt_caller_of_main(&pid);
    for sampler in ["ptrace", "kernel"] {
        let out = temp_file("record-naming", &format!("libc-{sampler}.txt"));
        let run = record_ok(&[
            "--sampler",
            sampler,
            "--pid",
            &pid,
            "--duration",
            "1",
            "-o",
            out.to_str().unwrap(),
        ]);
        let stacks = collapsed(&out);
        let callers: Vec<&str> = stacks
            .iter()
            .filter_map(|(s, _)| {
                let at = s.iter().position(|f| f == "main")?;
                Some(s.get(at.checked_sub(1)?)?.as_str())
            })
            .collect();
        assert!(
            !callers.is_empty(),
            "{sampler}: no sample through main: {stacks:?}\n{}",
            text(&run.stderr)
        );
        assert!(
            callers.iter().all(|c| *c == want),
            "{sampler}: bt names main's caller {want:?}, record {callers:?}"
        );
        let _ = fs::remove_file(out);
    }
}
