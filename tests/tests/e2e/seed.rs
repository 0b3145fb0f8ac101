//! End-to-end: hook `bar` and `foo` of seed.c (main -> foo(5) -> bar(28)) in
//! every build variant, read their arguments back from `bt`, eject, and check
//! the process is exactly as before and unharmed.

use std::path::Path;
use std::time::Duration;

use argstash_tests::*;
use serde_json::{json, Value};

/// bar sleeps 50 ms per call: a hooked call shows up well within this.
const HOOKED_SOON: Duration = Duration::from_secs(5);

/// Checks the main thread of a `bt --json`: bar above foo above main, the
/// hooked ones with their arguments, every other frame without any.
fn check_hooked_stack(t: &Target, bt: &Value) {
    let exe = module_path(t.exe());
    let main = bt_thread(bt, t.pid()).expect("main thread in bt");
    let frames = thread_frames(main);
    let (bar_i, bar) = frame_named(main, "bar").expect("bar on the stack");
    let (foo_i, foo_frame) = frame_named(main, "foo").expect("foo on the stack");
    let (main_i, _) = frame_named(main, "main").expect("the unwind reaches main");
    assert!(
        bar_i < foo_i && foo_i < main_i,
        "order bar {bar_i}, foo {foo_i}, main {main_i}: {main:#}"
    );
    assert_eq!(foo_i, bar_i + 1, "foo is bar's caller: {main:#}");
    assert_eq!(main_i, foo_i + 1, "main is foo's caller: {main:#}");

    assert_eq!(bar["hooked"], json!(true), "{bar:#}");
    assert_eq!(
        raw_arg(&bar["args"][0]),
        json!({"register": "rdi", "value": consts::SEED_BAR_ARG}),
        "{bar:#}"
    );
    assert_eq!(foo_frame["hooked"], json!(true), "{foo_frame:#}");
    assert_eq!(
        foo_frame["args"][0]["value"].as_i64(),
        Some(consts::SEED_FOO_ARG),
        "{foo_frame:#}"
    );
    for (name, f) in [("bar", bar), ("foo", foo_frame)] {
        assert_eq!(f["module"].as_str(), Some(exe.as_str()), "{f:#}");
        let args = f["args"].as_array().unwrap();
        let regs: Vec<&str> = args.iter().filter_map(|a| a["register"].as_str()).collect();
        assert_eq!(
            regs,
            ["rdi", "rsi", "rdx", "rcx", "r8", "r9"],
            "{name}: the six argument registers, in order"
        );
        assert!(f["stash_frame"].is_string(), "{f:#}");
        let pc = json_hex(&f["pc"]);
        let start = t.addr_of(name);
        let size = symbol(t.exe(), name).unwrap().size;
        assert!(
            (start..start + size).contains(&pc),
            "{name} frame pc {pc:#x} outside {start:#x}+{size}"
        );
    }
    for (i, f) in frames.iter().enumerate() {
        if i != bar_i && i != foo_i {
            assert_eq!(f["hooked"], json!(false), "frame {i}: {f:#}");
            assert_eq!(f["args"], json!([]), "frame {i}: {f:#}");
        }
    }
}

/// True when the main thread shows both bar and foo hooked (a call of foo
/// that began before the inject calls bar after it: bar hooked, foo not).
fn both_hooked(t: &Target, bt: &Value) -> bool {
    bt_thread(bt, t.pid()).is_some_and(|th| {
        ["bar", "foo"]
            .iter()
            .all(|name| frame_named(th, name).is_some_and(|(_, f)| f["hooked"] == json!(true)))
    })
}

/// Reads `n` result lines and checks each is `iter N result 58`, N consecutive.
fn check_results(t: &mut Target, n: usize) {
    t.drain_lines();
    let mut prev: Option<u64> = None;
    for _ in 0..n {
        let line = t.expect_line(HOOKED_SOON);
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["iter", iter, "result", r] => {
                assert_eq!(r.parse::<i64>().ok(), Some(consts::SEED_RESULT), "{line}");
                let iter: u64 = iter.parse().expect("numeric iteration");
                if let Some(p) = prev {
                    assert_eq!(iter, p + 1, "iterations are consecutive: {line}");
                }
                prev = Some(iter);
            }
            _ => t.fail(&format!("unexpected line {line:?}")),
        }
    }
    t.assert_healthy();
}

fn hook_and_unhook(v: Variant) {
    let mut t = Target::start("seed", v);
    let pid = t.pid().to_string();
    let exe = module_path(t.exe());
    let funcs = ["bar", "foo"];
    let before: Vec<Vec<u8>> = funcs.iter().map(|f| t.live_function_bytes(f)).collect();
    for f in funcs {
        t.assert_function_pristine(f);
    }

    let out = run_ok(&["inject", "--pid", &pid, "--func", "bar", "--func", "foo"]);
    assert!(out.contains("hooked bar in"), "{out}");
    assert!(out.contains("hooked foo in"), "{out}");
    assert_eq!(tracer_pid(t.pid()), None, "detached after inject");

    // The hooks, as list reports them and as the memory shows them.
    let hooks = list_hooks(t.pid());
    assert_eq!(hooks.len(), 2, "{hooks:#?}");
    for f in funcs {
        let active = hooks_named(&hooks, f, "active");
        assert_eq!(active.len(), 1, "{f}: {hooks:#?}");
        let h = active[0];
        let addr = t.addr_of(f);
        assert_eq!(json_hex(&h["address"]), addr, "{f}: {h:#}");
        assert_eq!(h["module"].as_str(), Some(exe.as_str()), "{f}: {h:#}");
        let (skip, len) = expected_patch(t.exe(), f);
        assert_eq!(json_hex(&h["patch_address"]), addr + skip, "{f}: {h:#}");
        assert_eq!(h["patch_len"].as_u64(), Some(len as u64), "{f}: {h:#}");
        let live = t.live_function_bytes(f);
        let file = function_bytes(t.exe(), f);
        let patch = skip as usize..skip as usize + len;
        assert_eq!(
            jmp_rel32_target(addr + skip, &live[patch.start..]),
            Some(json_hex(&h["trampoline"])),
            "{f}: the entry jumps to the trampoline"
        );
        assert_eq!(
            live[..patch.start],
            file[..patch.start],
            "{f}: before the patch"
        );
        assert_eq!(live[patch.end..], file[patch.end..], "{f}: after the patch");
        if v.has_cet() {
            assert_eq!(
                live[..4],
                [0xf3, 0x0f, 0x1e, 0xfa],
                "{f}: endbr64 kept first"
            );
        }
    }

    // The next call of bar runs through the trampoline: its arguments show.
    let bt = wait_bt(t.pid(), None, HOOKED_SOON, |bt| both_hooked(&t, bt));
    check_hooked_stack(&t, &bt);
    check_results(&mut t, 4);

    // Eject: the original bytes are back, the records say so, no args any more.
    let out = run_ok(&["eject", "--pid", &pid, "--all"]);
    assert!(out.contains("ejected bar in"), "{out}");
    assert!(out.contains("ejected foo in"), "{out}");
    for (f, old) in funcs.iter().zip(&before) {
        t.assert_function_pristine(f);
        assert_eq!(&t.live_function_bytes(f), old, "{f}");
    }
    let hooks = list_hooks(t.pid());
    for f in funcs {
        assert_eq!(
            hooks_named(&hooks, f, "ejected").len(),
            1,
            "{f}: {hooks:#?}"
        );
        assert!(
            hooks_named(&hooks, f, "active").is_empty(),
            "{f}: {hooks:#?}"
        );
    }
    // A call of bar that began before the eject still runs through the
    // trampoline (never unmapped), and its arguments are still readable.
    let bt = bt_json(t.pid(), None);
    let main = bt_thread(&bt, t.pid()).expect("main thread");
    if let Some((_, bar)) = frame_named(main, "bar").filter(|(_, f)| f["hooked"] == json!(true)) {
        assert_eq!(
            raw_arg(&bar["args"][0]),
            json!({"register": "rdi", "value": consts::SEED_BAR_ARG}),
            "a live call after eject: {main:#}"
        );
        assert!(frame_named(main, "main").is_some(), "{main:#}");
    }
    // The next calls are not hooked.
    let bt = wait_bt(t.pid(), None, HOOKED_SOON, |bt| {
        bt_thread(bt, t.pid()).is_some_and(|th| {
            frame_named(th, "bar").is_some()
                && thread_frames(th)
                    .iter()
                    .all(|f| f["hooked"] == json!(false))
        })
    });
    let main = bt_thread(&bt, t.pid()).unwrap();
    for f in thread_frames(main) {
        assert_eq!(f["hooked"], json!(false), "{f:#}");
        assert_eq!(f["args"], json!([]), "{f:#}");
    }
    assert!(frame_named(main, "main").is_some(), "{main:#}");
    check_results(&mut t, 3);
    assert_eq!(tracer_pid(t.pid()), None);
}

macro_rules! variants {
    ($($name:ident => $variant:expr;)*) => {$(
        #[test]
        fn $name() {
            hook_and_unhook($variant);
        }
    )*};
}

variants! {
    o0g_pie => Variant::new(Opt::O0g, true);
    o0g_nopie => Variant::new(Opt::O0g, false);
    o2g_pie => Variant::new(Opt::O2g, true);
    o2g_nopie => Variant::new(Opt::O2g, false);
    o2_stripped_pie => Variant::new(Opt::O2, true);
    o2_stripped_nopie => Variant::new(Opt::O2, false);
    o2g_pie_cet => Variant::O2G.cet();
    o0g_nopie_cet => Variant::new(Opt::O0g, false).cet();
}

#[test]
fn every_basic_variant_is_covered() {
    // The macro above names each of Variant::all() explicitly; keep them in sync.
    let covered = [
        Variant::new(Opt::O0g, true),
        Variant::new(Opt::O0g, false),
        Variant::new(Opt::O2g, true),
        Variant::new(Opt::O2g, false),
        Variant::new(Opt::O2, true),
        Variant::new(Opt::O2, false),
    ];
    for v in Variant::all() {
        assert!(covered.contains(&v), "{v} has no seed test");
    }
}

#[test]
fn hook_by_address_and_by_qualified_name() {
    let mut t = Target::start("seed", Variant::O2G);
    let pid = t.pid().to_string();
    let exe = module_path(t.exe());
    let file_name = exe.rsplit('/').next().unwrap().to_string();
    let bar = format!("{:#x}", t.addr_of("bar"));
    run_ok(&["inject", "--pid", &pid, "--addr", &bar]);
    run_ok(&[
        "inject",
        "--pid",
        &pid,
        "--func",
        &format!("{file_name}!foo"),
    ]);
    let hooks = list_hooks(t.pid());
    assert_eq!(hooks_named(&hooks, "bar", "active").len(), 1, "{hooks:#?}");
    assert_eq!(hooks_named(&hooks, "foo", "active").len(), 1, "{hooks:#?}");
    let bt = wait_bt(t.pid(), None, HOOKED_SOON, |bt| both_hooked(&t, bt));
    check_hooked_stack(&t, &bt);
    run_ok(&["eject", "--pid", &pid, "--func", &bar]);
    t.assert_function_pristine("bar");
    run_ok(&["eject", "--pid", &pid, "--func", "foo"]);
    t.assert_function_pristine("foo");
    check_results(&mut t, 2);
}

#[test]
fn text_backtrace_shows_stashed_arguments() {
    let mut t = Target::start("seed", Variant::new(Opt::O2, true));
    let pid = t.pid().to_string();
    run_ok(&["inject", "--pid", &pid, "--func", "bar", "--func", "foo"]);
    let bar = format!(" in bar (rdi={}, rsi=", consts::SEED_BAR_ARG);
    let foo_line = format!(" in foo (rdi={}, rsi=", consts::SEED_FOO_ARG);
    let mut text = String::new();
    let seen = wait_until(HOOKED_SOON, || {
        text = run_ok(&["bt", "--pid", &pid]);
        text.contains(&bar) && text.contains(&foo_line)
    });
    assert!(seen, "no stashed bar in:\n{text}");
    let bar_line = text.lines().position(|l| l.contains(&bar)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[bar_line].contains("[stashed]"), "{text}");
    assert!(lines[bar_line + 1].contains(&foo_line), "{text}");
    assert!(lines[bar_line + 2].contains(" in main () from "), "{text}");
    run_ok(&["eject", "--pid", &pid, "--all"]);
    t.assert_function_pristine("bar");
    t.assert_healthy();
}

#[test]
fn a_full_arena_spills_into_a_new_one() {
    // Ejected records are never reused (their code may still be running), so
    // capacity + 2 inject/eject cycles need a second arena.
    let capacity = injector::ARENA_CAPACITY as usize;
    let cycles = capacity + 2;
    let mut t = Target::start("seed", Variant::new(Opt::O2, false));
    let pid = t.pid().to_string();
    let foo_bytes = t.live_function_bytes("foo");
    for i in 0..cycles {
        run_ok(&["inject", "--pid", &pid, "--func", "foo"]);
        run_ok(&["eject", "--pid", &pid, "--func", "foo"]);
        if i % 32 == 0 {
            assert_eq!(t.live_function_bytes("foo"), foo_bytes, "cycle {i}");
            t.assert_healthy();
        }
    }
    assert_eq!(t.live_function_bytes("foo"), foo_bytes);
    let hooks = list_hooks(t.pid());
    assert_eq!(
        hooks_named(&hooks, "foo", "ejected").len(),
        cycles,
        "{hooks:#?}"
    );
    let mut arenas: Vec<u64> = hooks.iter().map(|h| json_hex(&h["arena"])).collect();
    arenas.sort_unstable();
    arenas.dedup();
    assert_eq!(arenas.len(), 2, "{arenas:x?}");
    for a in &arenas {
        let n = hooks.iter().filter(|h| json_hex(&h["arena"]) == *a).count();
        assert!(n <= capacity, "{n} records in the arena at {a:#x}");
    }
    // Hooks still work after that.
    run_ok(&["inject", "--pid", &pid, "--func", "bar", "--func", "foo"]);
    let bt = wait_bt(t.pid(), None, HOOKED_SOON, |bt| both_hooked(&t, bt));
    check_hooked_stack(&t, &bt);
    check_results(&mut t, 2);
    run_ok(&["eject", "--pid", &pid, "--all"]);
    t.assert_function_pristine("bar");
    t.assert_function_pristine("foo");
}

#[test]
fn hook_a_libc_function() {
    let mut t = Target::start("seed", Variant::O2G);
    let pid = t.pid().to_string();
    let libc = mapped_module(t.pid(), "libc.so.6");
    run_ok(&["inject", "--pid", &pid, "--func", "libc.so.6!nanosleep"]);
    let hooks = list_hooks(t.pid());
    let h = hooks_named(&hooks, "nanosleep", "active");
    assert_eq!(h.len(), 1, "{hooks:#?}");
    assert_eq!(h[0]["module"].as_str(), Some(libc.as_str()));
    let bt = wait_bt(t.pid(), None, HOOKED_SOON, |bt| {
        bt_thread(bt, t.pid())
            .and_then(|th| frame_named(th, "nanosleep"))
            .is_some_and(|(_, f)| f["hooked"] == json!(true))
    });
    let th = bt_thread(&bt, t.pid()).unwrap();
    let (i, f) = frame_named(th, "nanosleep").unwrap();
    assert_eq!(f["module"].as_str(), Some(libc.as_str()), "{f:#}");
    // bar calls nanosleep(&ts, &ts) with ts on its stack.
    let req = frame_arg(f, "rdi").unwrap();
    assert_eq!(frame_arg(f, "rsi"), Some(req), "{f:#}");
    let stack = maps(t.pid())
        .into_iter()
        .find(|m| m.path == "[stack]")
        .unwrap();
    assert!(
        (stack.start..stack.end).contains(&req),
        "{req:#x} not on the stack"
    );
    let frames = thread_frames(th);
    let callers: Vec<&str> = frames[i + 1..]
        .iter()
        .filter_map(|f| f["function"].as_str())
        .take(3)
        .collect();
    assert_eq!(callers, ["bar", "foo", "main"], "{th:#}");
    check_results(&mut t, 2);
    run_ok(&["eject", "--pid", &pid, "--all"]);
    let hooks = list_hooks(t.pid());
    let nanosleep = json_hex(&hooks_named(&hooks, "nanosleep", "ejected")[0]["address"]);
    let sym = symbols(Path::new(&libc))
        .into_iter()
        .find(|s| s.name == "nanosleep" || s.name.starts_with("nanosleep@@"))
        .expect("libc exports nanosleep");
    let bias = load_bias(t.pid(), Path::new(&libc));
    assert_eq!(nanosleep, bias + sym.addr);
    assert_eq!(
        read_mem(t.pid(), nanosleep, sym.size as usize),
        file_bytes_at_vaddr(Path::new(&libc), sym.addr, sym.size as usize),
        "libc's nanosleep restored"
    );
    check_results(&mut t, 2);
}

#[test]
fn deleted_executable() {
    // A binary replaced or removed on disk while it runs: maps say "(deleted)".
    let original = build("seed", Variant::O2G);
    let dir = std::env::temp_dir().join(format!("argstash-deleted-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("seed-deleted");
    std::fs::copy(&original, &copy).unwrap();
    let mut t = Target::spawn(&copy);
    let canon = module_path(&copy);
    std::fs::remove_file(&copy).unwrap();
    let _ = std::fs::remove_dir(&dir);
    let deleted = format!("{canon} (deleted)");
    let first = maps(t.pid())
        .into_iter()
        .filter(|m| m.path == deleted)
        .min_by_key(|m| m.offset)
        .expect("the deleted executable is mapped");
    let seg = elf_load_segments(&original)
        .into_iter()
        .find(|s| s.offset & !0xfff == first.offset)
        .unwrap();
    let bias = first.start - (seg.vaddr & !0xfff);
    let bar = symbol(&original, "bar").unwrap();
    let live_bar = || read_mem(t.pid(), bias + bar.addr, bar.size as usize);
    let pristine = function_bytes(&original, "bar");
    assert_eq!(live_bar(), pristine);

    let pid = t.pid().to_string();
    run_ok(&["inject", "--pid", &pid, "--func", "bar"]);
    let hooks = list_hooks(t.pid());
    let h = hooks_named(&hooks, "bar", "active");
    assert_eq!(h.len(), 1, "{hooks:#?}");
    assert_eq!(json_hex(&h[0]["address"]), bias + bar.addr);
    let bt = wait_bt(t.pid(), None, HOOKED_SOON, |bt| {
        bt_thread(bt, t.pid())
            .and_then(|th| frame_named(th, "bar"))
            .is_some_and(|(_, f)| f["hooked"] == json!(true))
    });
    let th = bt_thread(&bt, t.pid()).unwrap();
    let (_, f) = frame_named(th, "bar").unwrap();
    assert_eq!(
        frame_arg(f, "rdi"),
        Some(consts::SEED_BAR_ARG as u64),
        "{th:#}"
    );
    assert!(frame_named(th, "main").is_some(), "{th:#}");
    run_ok(&["eject", "--pid", &pid, "--all"]);
    assert_eq!(live_bar(), pristine);
    check_results(&mut t, 2);
}
