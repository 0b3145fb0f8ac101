//! Unit tests of the harness itself: every fixture builds and runs in every
//! variant, the code shapes the fixtures promise hold (checked with objdump),
//! and the /proc, ELF and process helpers agree with each other.

use super::*;

const LINE: Duration = Duration::from_secs(3);

// ---------------------------------------------------------------------------
// Every fixture in every variant reaches ready and behaves
// ---------------------------------------------------------------------------

fn for_each_variant(fixture: &str, check: impl Fn(&mut Target, Variant)) {
    for v in Variant::all_with_cet() {
        let mut t = Target::start(fixture, v);
        check(&mut t, v);
    }
}

#[test]
fn seed_runs_in_every_variant() {
    for_each_variant("seed", |t, _| {
        let want = format!("iter 0 result {}", consts::SEED_RESULT);
        assert_eq!(t.expect_line(LINE), want);
        assert_eq!(
            t.expect_line(LINE),
            format!("iter 1 result {}", consts::SEED_RESULT)
        );
        t.assert_healthy();
    });
}

#[test]
fn threads_runs_in_every_variant() {
    for_each_variant("threads", |t, _| {
        let tick = t.wait_for_line(LINE, |l| l.starts_with("tick 0 calls "));
        let calls: u64 = tick.split_whitespace().nth(3).unwrap().parse().unwrap();
        assert!(calls > 0, "{tick}");
        assert_eq!(t.tids().len(), consts::THREADS_TOTAL);
        let names: Vec<String> = thread_names(t.pid()).into_iter().map(|(_, n)| n).collect();
        for i in 0..consts::THREADS_WORKERS {
            assert!(names.contains(&format!("work{i}")), "{names:?}");
        }
        assert!(names.iter().any(|n| n == "parked"), "{names:?}");
        t.assert_healthy();
    });
}

#[test]
fn riprel_runs_in_every_variant() {
    for_each_variant("riprel", |t, _| {
        t.wait_for_line(LINE, |l| l.starts_with("iter "));
        t.assert_healthy();
    });
}

#[test]
fn badfuncs_runs_in_every_variant() {
    for_each_variant("badfuncs", |t, _| {
        t.wait_for_line(LINE, |l| l.starts_with("tick "));
        t.assert_healthy();
    });
}

#[test]
fn sigwait_runs_in_every_variant() {
    for_each_variant("sigwait", |t, _| {
        t.write_stdin("3\n");
        assert_eq!(t.expect_line(LINE), "echo 3 3007");
        t.signal(libc::SIGUSR2);
        assert_eq!(t.expect_line(LINE), "sigwait 1 1012");
        t.signal(libc::SIGUSR1);
        assert_eq!(t.expect_line(LINE), "handler 1");
        t.write_stdin("-4\n");
        assert_eq!(t.expect_line(LINE), "echo -4 -3993");
        t.assert_healthy();
        t.close_stdin();
        assert_eq!(t.expect_line(LINE), "bye");
        let status = t.wait_exit(LINE).expect("exits on EOF");
        assert_eq!(status.code(), Some(0));
        assert!(!t.is_alive());
    });
}

#[test]
fn wrong_result_is_reported() {
    // A fixture that dies must make Target report it, with its stderr.
    let mut t = Target::start("seed", Variant::O2G);
    t.signal(libc::SIGABRT);
    let status = t.wait_exit(LINE).expect("dies on SIGABRT");
    assert!(!status.success());
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.assert_healthy()))
        .expect_err("assert_healthy must panic on a dead fixture");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("not running"), "{msg}");
}

// ---------------------------------------------------------------------------
// Code shapes (objdump)
// ---------------------------------------------------------------------------

/// Offset past a leading endbr64 (0 or 4); asserts it matches the variant's CET setting.
fn entry_skip(insns: &[Insn], v: Variant, sym: &str, compiled_c: bool) -> u64 {
    let endbr = insns[0].mnemonic() == "endbr64";
    if compiled_c {
        assert_eq!(
            endbr,
            v.has_cet(),
            "{sym} ({v}): endbr64 iff CET: {insns:#?}"
        );
    }
    if endbr {
        4
    } else {
        0
    }
}

/// Assert `sym` can take a 5-byte jmp: no control flow in the patched bytes,
/// long enough, and no branch in the whole program lands inside the patch.
fn assert_hookable(exe: &Path, sym: &str, v: Variant, targets: &[u64]) {
    let s = symbol(exe, sym).unwrap();
    let insns = disassemble(exe, sym);
    let skip = entry_skip(&insns, v, sym, true);
    assert!(s.size >= skip + 5, "{sym} ({v}) is only {} bytes", s.size);
    for i in insns.iter().filter(|i| i.addr < s.addr + skip + 5) {
        assert!(
            !i.is_control_flow() || i.mnemonic() == "endbr64",
            "{sym} ({v}): control flow in the first bytes: {insns:#?}"
        );
    }
    for &t in targets {
        assert!(
            !(s.addr + 1..s.addr + skip + 5).contains(&t),
            "{sym} ({v}): a branch targets {sym}+{}",
            t - s.addr
        );
    }
}

/// The first instruction after an optional endbr64.
fn first_real(exe: &Path, sym: &str) -> (Insn, u64) {
    let insns = disassemble(exe, sym);
    let skip = usize::from(insns[0].mnemonic() == "endbr64");
    let s = symbol(exe, sym).unwrap();
    let i = insns[skip].clone();
    let off = i.addr - s.addr;
    (i, off)
}

#[test]
fn seed_shapes() {
    for v in Variant::all_with_cet() {
        let exe = build("seed", v);
        let targets = branch_targets(&exe);
        assert_hookable(&exe, "bar", v, &targets);
        assert_hookable(&exe, "foo", v, &targets);
        let bar = symbol(&exe, "bar").unwrap().addr;
        let foo = disassemble(&exe, "foo");
        assert!(
            foo.iter()
                .any(|i| i.mnemonic().starts_with("call") && i.branch_target() == Some(bar)),
            "foo ({v}) does not call bar: {foo:#?}"
        );
        assert!(
            !foo.iter()
                .any(|i| i.mnemonic().starts_with('j') && i.branch_target() == Some(bar)),
            "foo ({v}) tail-calls bar: {foo:#?}"
        );
    }
}

#[test]
fn threads_shapes() {
    for v in Variant::all_with_cet() {
        let exe = build("threads", v);
        let targets = branch_targets(&exe);
        assert_hookable(&exe, "work", v, &targets);
        assert_hookable(&exe, "parked", v, &targets);
    }
}

#[test]
fn riprel_shapes() {
    for v in Variant::all_with_cet() {
        let exe = build("riprel", v);
        let targets = branch_targets(&exe);
        assert_hookable(&exe, "bump", v, &targets);
        assert_hookable(&exe, "lookup", v, &targets);
        if v.optimized() {
            let (first, _) = first_real(&exe, "bump");
            assert!(
                first.mnemonic() == "mov" && first.is_rip_relative() && first.len() == 6,
                "bump ({v}) should start with a 6-byte RIP-relative mov: {first:?}"
            );
        }
        if v.optimized() && v.pie {
            // Without PIE, gcc indexes the table with an absolute address instead.
            let s = symbol(&exe, "lookup").unwrap();
            let skip = entry_skip(&disassemble(&exe, "lookup"), v, "lookup", true);
            assert!(
                disassemble(&exe, "lookup")
                    .iter()
                    .any(|i| i.is_rip_relative() && i.addr < s.addr + skip + 5),
                "lookup ({v}) has no RIP-relative instruction in its first 5 bytes"
            );
        }
    }
}

#[test]
fn badfuncs_shapes() {
    for v in Variant::all_with_cet() {
        let exe = build("badfuncs", v);
        let targets = branch_targets(&exe);
        assert_hookable(&exe, "normal", v, &targets);

        // Hand-written: the same in every variant, no endbr64.
        let looper = symbol(&exe, "looper").unwrap();
        assert_eq!(looper.size, 10, "looper ({v})");
        assert!(
            targets.contains(&(looper.addr + 2)),
            "looper ({v}): no back-edge"
        );
        let callfirst = disassemble(&exe, "callfirst");
        let helper = symbol(&exe, "callfirst_helper").unwrap().addr;
        assert_eq!(callfirst[0].mnemonic(), "call", "callfirst ({v})");
        assert_eq!(
            callfirst[0].branch_target(),
            Some(helper),
            "callfirst ({v})"
        );

        if v.optimized() {
            let (first, _) = first_real(&exe, "tail");
            let other = symbol(&exe, "other").unwrap().addr;
            assert!(
                first.mnemonic() == "jmp" && first.branch_target() == Some(other),
                "tail ({v}) should be `jmp other`: {first:?}"
            );
            let tiny = symbol(&exe, "tiny").unwrap();
            assert!(tiny.size < 5, "tiny ({v}) is {} bytes", tiny.size);
            assert_ne!(disassemble(&exe, "tiny")[0].mnemonic(), "endbr64");
        }
    }
}

#[test]
fn sigwait_shapes() {
    for v in Variant::all_with_cet() {
        let exe = build("sigwait", v);
        let targets = branch_targets(&exe);
        for f in ["echo_fn", "on_sigwait", "in_handler", "sleeper_fn"] {
            assert_hookable(&exe, f, v, &targets);
        }
    }
}

#[test]
fn fixtures_compile_without_warnings() {
    for f in FIXTURES {
        for v in [
            Variant::new(Opt::O0g, true),
            Variant::O2G,
            Variant::O2G.cet(),
        ] {
            let mut cmd = Command::new("cc");
            cmd.args(v.cc_flags())
                .args(["-Werror", "-fsyntax-only"])
                .arg(fixture_path(f));
            check_tool(&mut cmd, &format!("{f} ({v}) with -Werror"));
        }
    }
}

#[test]
fn stripped_variant_has_same_code_and_no_debug_info() {
    for pie in [true, false] {
        let g = build("seed", Variant::new(Opt::O2g, pie));
        let s = build("seed", Variant::new(Opt::O2, pie));
        assert_ne!(g, s);
        for f in ["bar", "foo", "main"] {
            assert_eq!(symbol(&g, f).unwrap().addr, symbol(&s, f).unwrap().addr);
            assert_eq!(function_bytes(&g, f), function_bytes(&s, f), "{f}");
        }
        let sections = |p: &Path| check_tool(Command::new("objdump").arg("-h").arg(p), "sections");
        assert!(sections(&g).contains(".debug_info"));
        assert!(!sections(&s).contains(".debug_info"));
        assert!(sections(&s).contains(".eh_frame"));
    }
}

// ---------------------------------------------------------------------------
// Build cache
// ---------------------------------------------------------------------------

#[test]
fn build_is_cached_and_concurrency_safe() {
    let a = build("seed", Variant::O2G);
    let mtime = fs::metadata(&a).unwrap().modified().unwrap();
    assert_eq!(build("seed", Variant::O2G), a);
    assert_eq!(build_uncached("seed", Variant::O2G), a);
    assert_eq!(fs::metadata(&a).unwrap().modified().unwrap(), mtime);

    // A key nobody built before, built by 4 threads at once, bypassing the
    // in-process memo as separate processes would.
    let nonce = format!(
        "-DHARNESS_NONCE={}{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            ^ u128::from(SEQ_TEST.fetch_add(1, Ordering::Relaxed))
    );
    let flags: &'static [&'static str] =
        Box::leak(vec![&*Box::leak(nonce.into_boxed_str())].into());
    let v = Variant::O2G.with_flags(flags);
    let paths: Vec<PathBuf> = (0..4)
        .map(|_| thread::spawn(move || build_uncached("seed", v)))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    assert!(paths.iter().all(|p| *p == paths[0]), "{paths:?}");
    let t = Target::spawn(&paths[0]);
    drop(t);
    let hash = paths[0]
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .rsplit('-')
        .next()
        .unwrap()
        .to_string();
    let leftovers: Vec<_> = fs::read_dir(fixture_cache_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.contains(&hash) && n.contains(".tmp-")
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    fs::remove_file(&paths[0]).unwrap();
}

static SEQ_TEST: AtomicU64 = AtomicU64::new(0);

#[test]
fn variant_names_are_distinct() {
    let mut names: Vec<String> = Variant::all_with_cet().iter().map(Variant::name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 12);
    assert_eq!(Variant::O2G.cet().name(), "O2g-pie-cet");
    assert!(Variant::O2G.cet().has_cet() && !Variant::O2G.has_cet());
}

#[test]
fn fnv1a_is_stable() {
    // File names in target/fixtures depend on it.
    assert_eq!(fnv1a(&[]), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a(&[b"a"]), fnv1a(&[b"a"]));
    assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
}

// ---------------------------------------------------------------------------
// /proc and ELF helpers
// ---------------------------------------------------------------------------

#[test]
fn live_code_matches_file() {
    for v in Variant::all() {
        let t = Target::start("seed", v);
        let bias = load_bias(t.pid(), t.exe());
        assert_eq!(bias == 0, !v.pie, "{v}: bias {bias:#x}");
        for f in ["bar", "foo"] {
            let want = function_bytes(t.exe(), f);
            assert_eq!(
                read_mem(t.pid(), t.addr_of(f), want.len()),
                want,
                "{f} ({v})"
            );
        }
        assert!(try_read_mem(t.pid(), 0, 1).is_err());
    }
}

#[test]
fn ptrace_attach_shows_in_proc() {
    use nix::sys::ptrace;
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    use nix::unistd::Pid;

    let mut t = Target::start("seed", Variant::O2G);
    let pid = Pid::from_raw(t.pid());
    assert_eq!(tracer_pid(t.pid()), None);
    ptrace::attach(pid).expect("ptrace attach (needs CAP_SYS_PTRACE or ptrace_scope 0/1)");
    match waitpid(pid, Some(WaitPidFlag::__WALL)).unwrap() {
        WaitStatus::Stopped(_, _) => {}
        other => panic!("unexpected wait status {other:?}"),
    }
    // TracerPid is the tracing *thread*'s id.
    // SAFETY: plain syscall.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
    assert_eq!(tracer_pid(t.pid()), Some(tid));
    assert_eq!(proc_state(t.pid()), Some('t'));
    assert!(t.is_alive(), "a ptrace-stopped target is alive");
    ptrace::detach(pid, None).unwrap();
    assert!(wait_until(LINE, || tracer_pid(t.pid()).is_none()));
    t.drain_lines();
    t.wait_for_line(LINE, |l| l.starts_with("iter "));
    t.assert_healthy();
}

#[test]
fn state_and_threads_helpers() {
    let t = Target::start("threads", Variant::O2G);
    let tids = thread_ids(t.pid());
    assert_eq!(tids[0], t.pid());
    let parked = thread_names(t.pid())
        .into_iter()
        .find(|(_, n)| n == "parked")
        .unwrap()
        .0;
    assert!(wait_until(LINE, || thread_state(t.pid(), parked) == Some('S')));
    assert!(maps(t.pid()).iter().any(|m| m.path == "[stack]"));
    let pid = t.pid();
    drop(t);
    assert_eq!(proc_state(pid), None);
    assert!(thread_ids(pid).is_empty());
}

#[test]
fn stat_parsing_handles_odd_comm() {
    let dir = std::env::temp_dir().join(format!("argstash-stat-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let p = dir.join("stat");
    fs::write(&p, "42 (a) b (c) t 1 2 3\n").unwrap();
    assert_eq!(stat_state(p.to_str().unwrap()), Some('t'));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn objdump_parsing() {
    let text = "\n0000000000001410 <foo>:\n    1410:\t48 83 ec 08          \tsub    $0x8,%rsp\n    1417:\te8 b4 ff ff ff       \tcall   13d0 <bar>\n    1420:\tf3 0f 1e fa          \tendbr64\n    1424:\tf2 ff e0             \tbnd jmp *%rax\n    1427:\t7f f9                \tjg     1422 <looper+0x2>\n";
    let insns = parse_objdump(text);
    assert_eq!(insns.len(), 5);
    assert_eq!(insns[0].len(), 4);
    assert!(!insns[0].is_control_flow());
    assert_eq!(insns[1].branch_target(), Some(0x13d0));
    assert_eq!(insns[2].mnemonic(), "endbr64");
    assert_eq!(insns[3].mnemonic(), "jmp");
    assert_eq!(insns[3].branch_target(), None);
    assert!(insns[3].is_control_flow());
    assert_eq!(insns[4].branch_target(), Some(0x1422));
}

// ---------------------------------------------------------------------------
// Running commands
// ---------------------------------------------------------------------------

#[test]
fn run_command_captures_and_times_out() {
    let out = run_command(
        Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
        LINE,
    );
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(out.stdout, b"out\n");
    assert_eq!(out.stderr, b"err\n");

    let start = Instant::now();
    let r = std::panic::catch_unwind(|| {
        run_command(Command::new("sleep").arg("30"), Duration::from_millis(200))
    });
    assert!(r.is_err());
    assert!(start.elapsed() < Duration::from_secs(10));
}

#[test]
fn argstash_binary_is_built() {
    let bin = argstash();
    assert!(bin.is_file(), "{}", bin.display());
    assert_eq!(bin.file_name(), Some(OsStr::new("argstash")));
}

#[test]
fn hookable_checker_rejects_badfuncs() {
    // The checker used above must itself catch each kind of bad function.
    let v = Variant::O2G;
    let exe = build("badfuncs", v);
    let targets = branch_targets(&exe);
    for f in ["tail", "tiny", "looper", "callfirst"] {
        let r = std::panic::catch_unwind(|| assert_hookable(&exe, f, v, &targets));
        assert!(r.is_err(), "{f} passed the hookable check");
    }
}
