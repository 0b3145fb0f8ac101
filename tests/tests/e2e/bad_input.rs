//! End-to-end: everything argstash must refuse. Each refusal must come with
//! a clear message (a distinctive part of it is checked) and exit code 1
//! (2 for usage errors), and must leave the target exactly as it was: code
//! and mappings unchanged, not traced, not stopped, still healthy and
//! printing (see `Untouched`).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use argstash_tests::*;
use serde_json::json;

/// [`refused`] for `inject --pid P --func F...` (one `--func` per name), exit code 1.
#[track_caller]
fn refuse_inject(t: &mut Target, funcs: &[&str], needle: &str) -> String {
    let args = inject_args(t, funcs);
    refused(t, &strs(&args), 1, needle)
}

/// `inject --pid P --func F...` with one `--func` per name.
fn inject_args(t: &Target, funcs: &[&str]) -> Vec<String> {
    let mut v = vec!["inject".to_string(), "--pid".into(), t.pid().to_string()];
    for f in funcs {
        v.push("--func".into());
        v.push(f.to_string());
    }
    v
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn gettid() -> i32 {
    // SAFETY: plain syscall without arguments.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

fn file_name(path: &Path) -> String {
    module_path(path).rsplit('/').next().unwrap().to_string()
}

// ---------------------------------------------------------------------------
// Processes that must not (or cannot) be touched
// ---------------------------------------------------------------------------

#[test]
fn no_such_process() {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id() as i32;
    child.wait().unwrap();
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "pid {pid} reused already"
    );
    let p = pid.to_string();
    let needle = format!("no process with pid {pid}");
    for args in [
        vec!["inject", "--pid", &p, "--func", "bar"],
        vec!["eject", "--pid", &p, "--all"],
        vec!["list", "--pid", &p],
        vec!["bt", "--pid", &p],
    ] {
        expect_fail(&args, 1, &needle);
    }
    expect_fail(
        &["inject", "--pid", "0", "--func", "bar"],
        1,
        "no process with pid 0",
    );
}

#[test]
fn init_is_refused() {
    // Our own seed as pid 1 of a new pid namespace: the real init is never touched.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("init_is_refused: needs root for a pid namespace; skipped");
        return;
    }
    let exe = build("seed", Variant::O2G);
    let mut t = Target::spawn_as_namespace_init(&exe);
    t.wait_for_line(E2E_TIMEOUT, |l| l.starts_with("iter "));
    let before = Untouched::take(&t);
    for args in [
        &["inject", "--pid", "1", "--func", "bar"][..],
        &["bt", "--pid", "1"],
        &["eject", "--pid", "1", "--all"],
        &["eject", "--pid", "1", "--func", "bar"],
    ] {
        let out = run_in_namespace_of(t.pid(), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "argstash {args:?}: {stderr}");
        assert!(
            stderr.contains("refusing to attach to pid 1 (init)"),
            "argstash {args:?}: {stderr}"
        );
    }
    // list only reads memory and never stops it, so pid 1 is fine.
    let out = run_in_namespace_of(t.pid(), &["list", "--pid", "1", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list, json!({"pid": 1, "hooks": []}));
    before.check(&mut t);
    t.assert_function_pristine("bar");
}

/// `PF_KTHREAD` in the flags of `/proc/PID/stat`.
const PF_KTHREAD: u64 = 0x0020_0000;

fn stat_flags(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(6)?
        .parse()
        .ok()
}

/// pid 2 (kthreadd) if it is a kernel thread, else any kernel thread in /proc.
fn kernel_thread() -> (i32, String) {
    let is_kthread = |pid: i32| stat_flags(pid).is_some_and(|f| f & PF_KTHREAD != 0);
    let pid = if is_kthread(2) {
        2
    } else {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .find(|&p| is_kthread(p))
            .expect("no kernel thread visible in /proc (a pid namespace?)")
    };
    let name = proc_status_field(pid, "Name").unwrap();
    (pid, name)
}

#[test]
fn kernel_thread_is_refused() {
    let (kt, name) = kernel_thread();
    let state = proc_state(kt);
    let p = kt.to_string();
    let needle = format!("pid {kt} ({name}) is a kernel thread: nothing to hook");
    expect_fail(&["inject", "--pid", &p, "--func", "bar"], 1, &needle);
    expect_fail(&["bt", "--pid", &p], 1, &needle);
    expect_fail(&["eject", "--pid", &p, "--all"], 1, &needle);
    assert_eq!(tracer_pid(kt), None);
    assert!(!matches!(proc_state(kt), Some('t' | 'T')), "{state:?}");
}

#[test]
fn a_thread_id_is_not_a_process() {
    let mut t = Target::start("threads", Variant::O2G);
    let worker = *t.tids().last().unwrap();
    assert_ne!(worker, t.pid());
    let w = worker.to_string();
    let needle = format!(
        "{worker} is a thread of process {}, not a process: pass {}",
        t.pid(),
        t.pid()
    );
    refused(
        &mut t,
        &["inject", "--pid", &w, "--func", "work"],
        1,
        &needle,
    );
    t.assert_function_pristine("work");
}

#[test]
fn already_traced_by_another_tracer() {
    use nix::sys::ptrace;
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    use nix::unistd::Pid;

    let mut t = Target::start("seed", Variant::O2G);
    let p = t.pid().to_string();
    // A hook already in place, so eject has something to do.
    run_ok(&["inject", "--pid", &p, "--func", "bar"]);
    let hooks = list_hooks(t.pid());
    let before = Untouched::take(&t);
    let pid = Pid::from_raw(t.pid());
    // ptrace binds to the calling thread: this test's thread is the tracer.
    ptrace::seize(pid, ptrace::Options::empty()).expect("PTRACE_SEIZE the fixture");
    let me = gettid();
    assert_eq!(tracer_pid(t.pid()), Some(me));
    let needle = format!("process {p} is already traced by PID {me} (");
    for args in [
        &["inject", "--pid", &p, "--func", "foo"][..],
        &["bt", "--pid", &p],
        &["eject", "--pid", &p, "--all"],
    ] {
        let out = expect_fail(args, 1, &needle);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("detach that debugger first"), "{stderr}");
        assert_eq!(tracer_pid(t.pid()), Some(me), "still ours after {args:?}");
    }

    // Detach: a seized tracee must be in a ptrace-stop for PTRACE_DETACH.
    ptrace::interrupt(pid).expect("PTRACE_INTERRUPT");
    let sig = match waitpid(pid, Some(WaitPidFlag::__WALL)).expect("waitpid") {
        WaitStatus::PtraceEvent(..) => None,
        WaitStatus::Stopped(_, sig) => Some(sig),
        other => panic!("unexpected wait status {other:?}"),
    };
    ptrace::detach(pid, sig).expect("PTRACE_DETACH");
    assert!(wait_until(E2E_TIMEOUT, || tracer_pid(t.pid()).is_none()));
    before.check(&mut t);
    assert_eq!(list_hooks(t.pid()), hooks);
    t.assert_function_pristine("foo");
    run_ok(&["eject", "--pid", &p, "--all"]);
    t.assert_function_pristine("bar");
}

/// As another user (uid/gid 65534) argstash may not ptrace a root-owned
/// fixture: it must say so, not misreport the process as a kernel thread or
/// print a raw error twice. Needs root to switch user.
#[test]
fn not_permitted_for_another_user() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "not_permitted_for_another_user: needs root to run argstash as another user; skipped"
        );
        return;
    }
    let mut t = Target::start("seed", Variant::O2G);
    let before = Untouched::take(&t);
    let p = t.pid().to_string();
    let mut failures = Vec::new();
    for args in [
        &["inject", "--pid", &p, "--func", "bar"][..],
        &["bt", "--pid", &p],
        &["eject", "--pid", &p, "--all"],
    ] {
        let mut cmd = argstash_cmd(args);
        cmd.uid(65534).gid(65534);
        let out = run_command(&mut cmd, RUN_TIMEOUT);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.code() != Some(1)
            || !stderr.contains("run as root or as the process owner")
            || stderr.contains("kernel thread")
        {
            failures.push(format!("argstash {args:?} ({}): {stderr}", out.status));
        }
    }
    before.check(&mut t);
    assert!(
        failures.is_empty(),
        "expected exit 1 and `ptrace of process {p} was refused (EPERM): run as root or as \
         the process owner`, got:\n{}",
        failures.join("\n")
    );
}

#[test]
fn i386_entry_with_a_system_call_is_refused() {
    // 32-bit processes are supported (tests/tests/i386.rs); their refusals are
    // the x86-64 ones, leaving the process as it was.
    let exe = build_i386("tick32");
    let mut t = Target::spawn(&exe);
    t.expect_line(E2E_TIMEOUT);
    let p = t.pid().to_string();
    refused(
        &mut t,
        &["inject", "--pid", &p, "--func", "getpid_raw"],
        1,
        "`int 80h` at +0x4 lies in the 6 bytes the patch overwrites (a system call or trap cannot be moved)",
    );
}

// ---------------------------------------------------------------------------
// Functions that cannot be found or named
// ---------------------------------------------------------------------------

#[test]
fn function_not_found_suggests_close_names() {
    let mut t = Target::start("seed", Variant::O2G);
    let exe = module_path(t.exe());
    let args = inject_args(&t, &["baar"]);
    let stderr = refused(
        &mut t,
        &strs(&args),
        1,
        "no function named `baar` in the process; did you mean: bar (in ",
    );
    assert!(stderr.contains(&format!("bar (in {exe})")), "{stderr}");
    assert!(stderr.contains("MODULE!NAME"), "{stderr}");
    t.assert_function_pristine("bar");

    // A known module, a name not in it.
    let args = inject_args(&t, &["libc.so.6!bar"]);
    refused(
        &mut t,
        &strs(&args),
        1,
        "no function named `bar` in the process",
    );
    // An unknown module.
    let args = inject_args(&t, &["nosuchlib!bar"]);
    let stderr = refused(
        &mut t,
        &strs(&args),
        1,
        "no loaded module matches `nosuchlib`",
    );
    assert!(
        stderr.contains("libc.so.6"),
        "lists the loaded modules: {stderr}"
    );
}

#[test]
fn ambiguous_name_lists_candidates() {
    let mut t = Target::start("ambig", Variant::O2G);
    let exe = module_path(t.exe());
    let libc = mapped_module(t.pid(), "libc.so.6");
    let ours = t.addr_of("strfry");
    let args = inject_args(&t, &["strfry"]);
    let stderr = refused(
        &mut t,
        &strs(&args),
        1,
        "`strfry` is ambiguous, 2 functions have that name:",
    );
    assert!(
        stderr.contains(&format!("\n  strfry in {exe} ({ours:#x})")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("\n  strfry in {libc} (0x")),
        "{stderr}"
    );
    assert!(stderr.contains("write MODULE!NAME"), "{stderr}");
    t.assert_function_pristine("strfry");

    // Qualified, each resolves to its own module.
    let pid = t.pid().to_string();
    let qualified = format!("{}!strfry", file_name(t.exe()));
    run_ok(&[
        "inject",
        "--pid",
        &pid,
        "--func",
        &qualified,
        "--func",
        "libc.so.6!strfry",
    ]);
    let hooks = list_hooks(t.pid());
    let active = hooks_named(&hooks, "strfry", "active");
    assert_eq!(active.len(), 2, "{hooks:#?}");
    let mine = active
        .iter()
        .find(|h| h["module"].as_str() == Some(exe.as_str()))
        .expect("the program's strfry hooked");
    assert_eq!(json_hex(&mine["address"]), ours);
    assert!(
        active
            .iter()
            .any(|h| h["module"].as_str() == Some(libc.as_str())),
        "{hooks:#?}"
    );
    run_ok(&["eject", "--pid", &pid, "--all"]);
    t.assert_function_pristine("strfry");
    let libc_strfry = symbols(Path::new(&libc))
        .into_iter()
        .find(|s| s.name == "strfry" || s.name.starts_with("strfry@"))
        .expect("libc defines strfry");
    let libc_bias = load_bias(t.pid(), Path::new(&libc));
    assert_eq!(
        read_mem(
            t.pid(),
            libc_bias + libc_strfry.addr,
            libc_strfry.size as usize
        ),
        file_bytes_at_vaddr(
            Path::new(&libc),
            libc_strfry.addr,
            libc_strfry.size as usize
        ),
        "libc's strfry restored"
    );
    t.drain_lines();
    t.expect_line(E2E_TIMEOUT);
    t.assert_healthy();
}

#[test]
fn addresses_that_are_not_function_entries() {
    let mut t = Target::start("seed", Variant::O2G);
    let bar = t.addr_of("bar");
    let p = t.pid().to_string();
    let inside = format!("{:#x}", bar + 1);
    let stderr = refused(
        &mut t,
        &["inject", "--pid", &p, "--addr", &inside],
        1,
        &format!("{inside} is inside bar+0x1"),
    );
    assert!(stderr.contains(&format!("use --addr {bar:#x}")), "{stderr}");
    refused(
        &mut t,
        &["inject", "--pid", &p, "--addr", "0x10"],
        1,
        "0x10 is not inside any mapped ELF module",
    );
    t.assert_function_pristine("bar");
}

// ---------------------------------------------------------------------------
// Functions that cannot be patched safely
// ---------------------------------------------------------------------------

/// The first `mnemonic` instruction of `sym`, as (offset from the entry, instruction).
fn find_insn(exe: &Path, sym: &str, mnemonic: &str) -> (u64, Insn) {
    let start = symbol(exe, sym).unwrap().addr;
    let i = disassemble(exe, sym)
        .into_iter()
        .find(|i| i.mnemonic().starts_with(mnemonic))
        .unwrap_or_else(|| panic!("no {mnemonic} in {sym}"));
    (i.addr - start, i)
}

fn badfuncs_refusals(v: Variant) {
    let mut t = Target::start("badfuncs", v);
    let exe = module_path(t.exe());
    let exe_path = t.exe().to_path_buf();
    let size = |f: &str| symbol(&exe_path, f).unwrap().size;
    let skip = |f: &str| {
        if disassemble(&exe_path, f)[0].mnemonic() == "endbr64" {
            4
        } else {
            0
        }
    };

    // looper: its loop jumps back into the bytes a patch would overwrite.
    let (from, jg) = find_insn(&exe_path, "looper", "j");
    let to = jg.branch_target().unwrap() - symbol(&exe_path, "looper").unwrap().addr;
    let needle = format!(
        "at +{from:#x} branches to +{to:#x}, inside the bytes the patch overwrites (+0x0..+0x5)"
    );
    let stderr = refuse_inject(&mut t, &["looper"], &needle);
    assert!(
        stderr.contains(&format!("cannot hook looper in {exe}: `jg")),
        "{stderr}"
    );

    // callfirst: a call in the patched bytes (to callfirst_helper).
    let stderr = refuse_inject(
        &mut t,
        &["callfirst"],
        "at +0x0 lies in the 5 bytes the patch overwrites (a call there would leave a return \
         address pointing into the overwritten bytes)",
    );
    assert!(
        stderr.contains(&format!("cannot hook callfirst in {exe}: `call ")),
        "{stderr}"
    );
    let helper = format!("{:x}", t.addr_of("callfirst_helper"));
    assert!(
        stderr.to_lowercase().contains(&helper),
        "names the call target {helper}: {stderr}"
    );

    // All or nothing: a good function named with a bad one is not hooked either.
    let stderr = refuse_inject(&mut t, &["normal", "looper"], "cannot hook looper in");
    assert!(!stderr.contains("hooked normal"), "{stderr}");
    assert_eq!(list_hooks(t.pid()), Vec::<serde_json::Value>::new());
    for f in ["tiny", "looper", "tail", "callfirst", "normal", "other"] {
        t.assert_function_pristine(f);
    }
    // The control function is hookable in the same process, and so are the
    // functions shorter than the patch: tiny (`lea; ret`) and tail (`jmp
    // other`) move whole, and the patch borrows the nop fill gcc puts after
    // them (checked to be fill up to the next symbol).
    let p = t.pid().to_string();
    for f in ["tiny", "tail"] {
        assert!(size(f) < skip(f) + 5, "{f} is {} bytes", size(f));
    }
    let out = run_ok(&[
        "inject", "--pid", &p, "--func", "normal", "--func", "tiny", "--func", "tail",
    ]);
    for f in ["tiny", "tail"] {
        assert!(
            out.contains(&format!(
                "hooked {f} in {exe} at 0x{:x} (5 bytes patched at 0x{:x}",
                t.addr_of(f),
                t.addr_of(f) + skip(f)
            )),
            "{out}"
        );
    }
    t.drain_lines();
    t.expect_line(E2E_TIMEOUT);
    t.expect_line(E2E_TIMEOUT);
    t.assert_healthy();
    run_ok(&["eject", "--pid", &p, "--all"]);
    for f in ["normal", "tiny", "tail"] {
        t.assert_function_pristine(f);
    }
}

#[test]
fn badfuncs_refused_o2g_pie() {
    badfuncs_refusals(Variant::O2G);
}

#[test]
fn badfuncs_refused_o2_nopie_cet() {
    badfuncs_refusals(Variant::new(Opt::O2, false).cet());
}

#[test]
fn forbidden_first_instructions() {
    let mut t = Target::start("prologues", Variant::O2G);
    let exe = module_path(t.exe());
    for (f, needle) in [
        (
            "jmpfirst",
            "at +0x0 lies in the 5 bytes the patch overwrites (control leaves the function",
        ),
        (
            "retfirst",
            "`ret` at +0x3 lies in the 5 bytes the patch overwrites (the function returns within the patch",
        ),
        (
            "pidfirst",
            "`syscall` at +0x4 lies in the 6 bytes the patch overwrites (a system call or trap cannot be moved)",
        ),
    ] {
        let stderr = refuse_inject(&mut t, &[f], needle);
        assert!(stderr.contains(&format!("cannot hook {f} in {exe}: ")), "{stderr}");
        t.assert_function_pristine(f);
    }
    let p = t.pid().to_string();
    run_ok(&["inject", "--pid", &p, "--func", "plain"]);
    t.drain_lines();
    t.expect_line(E2E_TIMEOUT);
    t.assert_healthy();
    run_ok(&["eject", "--pid", &p, "--func", "plain"]);
    t.assert_function_pristine("plain");
}

/// A refusal names its reason once (anyhow's `{:#}` repeats a `source`
/// that is also in the message).
#[test]
fn refusal_reason_is_stated_once() {
    let mut t = Target::start("edgefuncs", Variant::O2G);
    let stderr = refuse_inject(&mut t, &["short_nofill"], "too short to hook");
    assert_eq!(
        stderr.matches("too short to hook").count(),
        1,
        "the reason is repeated: {stderr}"
    );
}

/// crowded.c leaves no free page within ±2.5 GiB of its code: hooks there
/// get an arena anywhere and the 14-byte absolute jump, when the prologue
/// allows it; otherwise a clear refusal.
#[test]
fn no_free_address_near_the_module() {
    for v in [Variant::O2G, Variant::new(Opt::O2g, false)] {
        let mut t = Target::start("crowded", v);
        let exe = module_path(t.exe());
        let needle = format!(
            "no free address within ±2 GiB of {exe} for the trampoline arena, and callsat6 \
             cannot take the 14-byte absolute jump used instead: `call "
        );
        let stderr = refuse_inject(&mut t, &["callsat6"], &needle);
        assert!(stderr.contains("at +0x6 lies in the 14 bytes"), "{stderr}");
        t.assert_function_pristine("callsat6");
        assert_eq!(list_hooks(t.pid()), Vec::<serde_json::Value>::new());

        // spin and slow take the absolute jump into an arena out of rel32 reach.
        let p = t.pid().to_string();
        run_ok(&["inject", "--pid", &p, "--func", "spin", "--func", "slow"]);
        let hooks = list_hooks(t.pid());
        for f in ["spin", "slow"] {
            let h = hooks_named(&hooks, f, "active")[0];
            assert!(h["patch_len"].as_u64().unwrap() >= 14, "{h:#}");
            let live = t.live_function_bytes(f);
            assert_eq!(&live[..6], &[0xff, 0x25, 0, 0, 0, 0], "{f}: jmp [rip+0]");
            let to = u64::from_le_bytes(live[6..14].try_into().unwrap());
            assert_eq!(to, json_hex(&h["trampoline"]), "{f}");
            assert!(
                to.abs_diff(t.addr_of(f)) > 1 << 31,
                "{f}: the arena is near: {h:#}"
            );
        }
        let bt = wait_bt(t.pid(), None, E2E_TIMEOUT, |bt| {
            bt_threads(bt)
                .iter()
                .any(|th| frame_named(th, "slow").is_some_and(|(_, f)| f["hooked"] == json!(true)))
        });
        let th = &bt_threads(&bt)[0];
        let (_, f) = frame_named(th, "slow").unwrap();
        let ns = frame_arg(f, "rdi").unwrap();
        assert!(ns == 1_000_000 || ns == 1_000_001, "{th:#}");
        t.drain_lines();
        t.expect_line(E2E_TIMEOUT);
        t.expect_line(E2E_TIMEOUT);
        t.assert_healthy();
        run_ok(&["eject", "--pid", &p, "--all"]);
        for f in ["spin", "slow"] {
            t.assert_function_pristine(f);
        }
        t.expect_line(E2E_TIMEOUT);
        t.assert_healthy();
    }
}

// ---------------------------------------------------------------------------
// Hooks that exist, or do not
// ---------------------------------------------------------------------------

#[test]
fn already_hooked() {
    let mut t = Target::start("seed", Variant::O2G);
    let exe = module_path(t.exe());
    let p = t.pid().to_string();
    run_ok(&["inject", "--pid", &p, "--func", "bar"]);
    let hooks = list_hooks(t.pid());
    let h = hooks_named(&hooks, "bar", "active")[0].clone();
    let needle =
        format!(
        "bar in {exe} is already hooked (hook #{} in the arena at {}, trampoline {}): eject it \
         first with `argstash eject --pid PID --func bar`",
        h["slot"], h["arena"].as_str().unwrap(), h["trampoline"].as_str().unwrap()
    );
    let patched = t.live_function_bytes("bar");
    refuse_inject(&mut t, &["bar"], &needle);
    // With another, hookable function in the same request: neither is touched.
    refuse_inject(&mut t, &["foo", "bar"], &needle);
    t.assert_function_pristine("foo");
    assert_eq!(t.live_function_bytes("bar"), patched);
    assert_eq!(list_hooks(t.pid()), hooks);

    // The first hook still works.
    let bt = wait_bt(t.pid(), None, E2E_TIMEOUT, |bt| {
        bt_thread(bt, t.pid())
            .and_then(|th| frame_named(th, "bar"))
            .is_some_and(|(_, f)| f["hooked"] == json!(true))
    });
    let (_, bar) = frame_named(bt_thread(&bt, t.pid()).unwrap(), "bar").unwrap();
    assert_eq!(frame_arg(bar, "rdi"), Some(consts::SEED_BAR_ARG as u64));
    let line = t.wait_for_line(E2E_TIMEOUT, |l| l.starts_with("iter "));
    assert!(
        line.ends_with(&format!(" result {}", consts::SEED_RESULT)),
        "{line}"
    );
    run_ok(&["eject", "--pid", &p, "--all"]);
    t.assert_function_pristine("bar");
}

#[test]
fn named_twice_in_one_request() {
    let mut t = Target::start("seed", Variant::O2G);
    let exe = module_path(t.exe());
    let needle = format!("bar in {exe} is named more than once in this request");
    refuse_inject(&mut t, &["bar", "bar"], &needle);
    let p = t.pid().to_string();
    let addr = format!("{:#x}", t.addr_of("bar"));
    refused(
        &mut t,
        &["inject", "--pid", &p, "--func", "bar", "--addr", &addr],
        1,
        &needle,
    );
    t.assert_function_pristine("bar");
}

/// Malformed `--func` signatures (issue 19): each is refused with the byte it goes
/// wrong at, shown under the input, and how to write it; nothing reaches the
/// target, so `list` shows no hook (before, `bar(int a))` was stored as `int a)`).
#[test]
fn malformed_signatures_are_refused_at_their_position() {
    let mut t = Target::start("seed", Variant::O2G);
    for (func, at, why, advice) in [
        (
            "bar(int a))",
            10,
            "`)` follows the `)` that closes the parameter list",
            "nothing may follow",
        ),
        (
            "bar(int a[)",
            10,
            "expected an array size or `]`, found `)`",
            "write an array parameter as `int a[4]`",
        ),
        (
            "bar(int 3x)",
            8,
            "`3x` is not a parameter name",
            "a name is a letter or `_`",
        ),
        (
            "bar(long a;)",
            10,
            "unexpected character `;`",
            "a parameter is a type",
        ),
        (
            "bar(void, int)",
            4,
            "`void` as a parameter is allowed only alone",
            "write `(void)` or `()`",
        ),
        (
            "bar(...)",
            4,
            "`...` needs a named parameter before it",
            "write `...` last",
        ),
    ] {
        let stderr = refuse_inject(&mut t, &[func], why);
        let caret = format!("\n  {func}\n  {}^ at byte {at}\n  {advice}", " ".repeat(at));
        assert!(stderr.contains(&caret), "{func}: {stderr}");
    }
    assert!(list_hooks(t.pid()).is_empty(), "nothing was stored");
    t.assert_function_pristine("bar");
    // `run` refuses them the same way, before it starts the program.
    let out = expect_fail(
        &["run", "--func", "bar(int a))", "--", "/bin/true"],
        1,
        "  bar(int a))\n            ^ at byte 10",
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn eject_of_a_function_that_is_not_hooked() {
    let mut t = Target::start("seed", Variant::O2G);
    let exe = module_path(t.exe());
    let p = t.pid().to_string();
    refused(
        &mut t,
        &["eject", "--pid", &p, "--func", "bar"],
        1,
        "bar is not hooked; the process has no active hooks",
    );
    // Nothing to do is not an error.
    let out = run_ok(&["eject", "--pid", &p, "--all"]);
    assert!(out.contains("nothing to eject"), "{out}");

    run_ok(&["inject", "--pid", &p, "--func", "foo"]);
    let hooks = list_hooks(t.pid());
    let foo_bytes = t.live_function_bytes("foo");
    refused(
        &mut t,
        &["eject", "--pid", &p, "--func", "bar"],
        1,
        &format!("bar is not hooked; hooked functions: foo ({exe})"),
    );
    refused(
        &mut t,
        &["eject", "--pid", &p, "--func", "nosuchfunction"],
        1,
        "nosuchfunction",
    );
    assert_eq!(list_hooks(t.pid()), hooks);
    assert_eq!(t.live_function_bytes("foo"), foo_bytes);
    run_ok(&["eject", "--pid", &p, "--func", "foo"]);
    t.assert_function_pristine("foo");
    // Ejected already: not hooked any more.
    refused(
        &mut t,
        &["eject", "--pid", &p, "--func", "foo"],
        1,
        "foo is not hooked; the process has no active hooks",
    );
}

#[test]
fn bt_of_a_thread_that_does_not_exist() {
    let mut t = Target::start("seed", Variant::O2G);
    let p = t.pid().to_string();
    let mut child = Command::new("true").spawn().expect("spawn true");
    let gone = child.id() as i32;
    child.wait().unwrap();
    let g = gone.to_string();
    refused(
        &mut t,
        &["bt", "--pid", &p, "--tid", &g],
        1,
        &format!("no thread {gone} in process {p}"),
    );
}

// ---------------------------------------------------------------------------
// Usage errors: exit code 2, nothing touched
// ---------------------------------------------------------------------------

#[test]
fn usage_errors() {
    let mut t = Target::start("seed", Variant::O2G);
    let p = t.pid().to_string();
    for (args, needle) in [
        (
            &["inject", "--pid", &p][..],
            "the following required arguments were not provided",
        ),
        (
            &["inject", "--pid", &p, "--addr", "1234"],
            "write the address in hex",
        ),
        (
            &["inject", "--pid", &p, "--addr", "0xzz"],
            "not a hex address",
        ),
        (
            &["inject", "--pid", &p, "--func", "bar", "--stack-args", "17"],
            "--stack-args",
        ),
        (&["inject", "--func", "bar"], "--pid"),
        (
            &["inject", "--pid", "abc", "--func", "bar"],
            "invalid value 'abc'",
        ),
        (
            &["eject", "--pid", &p],
            "the following required arguments were not provided",
        ),
        (
            &["eject", "--pid", &p, "--all", "--func", "bar"],
            "cannot be used with",
        ),
        (&["frobnicate"], "unrecognized subcommand 'frobnicate'"),
    ] {
        refused(&mut t, args, 2, needle);
    }
    t.assert_function_pristine("bar");
}

#[test]
fn a_per_function_stack_window_for_a_function_not_named() {
    let mut t = Target::start("seed", Variant::O2G);
    let p = t.pid().to_string();
    let err = refused(
        &mut t,
        &[
            "inject",
            "--pid",
            &p,
            "--func",
            "bar",
            "--stack-args",
            "baz=2",
        ],
        1,
        "--stack-args baz=2: no --func names `baz` (the --func names: bar)",
    );
    assert!(err.contains("add --func 'baz'"), "{err}");
    for (args, needle) in [
        (
            &[
                "inject",
                "--pid",
                &p,
                "--func",
                "bar",
                "--stack-args",
                "bar=17",
            ][..],
            "`17` is not a number of stack words from 0 to 16",
        ),
        (
            &["inject", "--pid", &p, "--func", "bar", "--stack-args", "=2"],
            "with the --func name before the `=`",
        ),
    ] {
        refused(&mut t, args, 2, needle);
    }
    refused(
        &mut t,
        &[
            "inject",
            "--pid",
            &p,
            "--func",
            "bar",
            "--stack-args",
            "bar=1",
            "--stack-args",
            "bar=2",
        ],
        1,
        "--stack-args gives `bar` a window twice",
    );
    t.assert_function_pristine("bar");
}

// ---------------------------------------------------------------------------
// Failures after the target was stopped, and foreign patches
// ---------------------------------------------------------------------------

/// Sets the soft address-space limit (RLIMIT_AS) of `pid`; returns the old one.
fn set_as_limit(pid: i32, soft: u64) -> libc::rlimit {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit reads `new` and writes `old`, both live locals.
    let r = unsafe {
        let mut current = std::mem::zeroed();
        assert_eq!(
            libc::prlimit(pid, libc::RLIMIT_AS, std::ptr::null(), &mut current),
            0
        );
        let new = libc::rlimit {
            rlim_cur: soft,
            rlim_max: current.rlim_max,
        };
        libc::prlimit(pid, libc::RLIMIT_AS, &new, &mut old)
    };
    assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
    old
}

/// Caps the target's address space at its current size, so the arena's
/// remote mmap fails (ENOMEM) for every candidate *inside* the stop window.
/// Returns the stderr of the failed inject, after checking the undo.
fn inject_with_address_space_full(t: &mut Target) -> String {
    let vm_kb: u64 = proc_status_field(t.pid(), "VmSize")
        .unwrap()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap();
    let old = set_as_limit(t.pid(), vm_kb * 1024);
    let stderr = refuse_inject(t, &["bar", "foo"], "trampoline arena");
    t.assert_function_pristine("bar");
    t.assert_function_pristine("foo");
    assert_eq!(list_hooks(t.pid()), Vec::<serde_json::Value>::new());
    set_as_limit(t.pid(), old.rlim_cur);
    stderr
}

#[test]
fn a_failure_inside_the_stop_is_undone() {
    let mut t = Target::start("seed", Variant::O2G);
    inject_with_address_space_full(&mut t);
    // With the limit lifted, the same request works.
    let p = t.pid().to_string();
    run_ok(&["inject", "--pid", &p, "--func", "bar", "--func", "foo"]);
    run_ok(&["eject", "--pid", &p, "--all"]);
    t.assert_function_pristine("bar");
    t.assert_healthy();
}

/// When every mmap of the arena fails, the message must give mmap's reason
/// (here ENOMEM from RLIMIT_AS), not claim there is no free address nearby.
#[test]
fn arena_mmap_failure_names_its_cause() {
    let mut t = Target::start("seed", Variant::O2G);
    let stderr = inject_with_address_space_full(&mut t);
    let lower = stderr.to_lowercase();
    assert!(
        lower.contains("cannot allocate memory") || lower.contains("enomem"),
        "the mmap error (ENOMEM) is not reported: {stderr}"
    );
}

#[test]
fn eject_completes_when_the_original_bytes_are_back() {
    // What an argstash killed mid-inject (record written, patch not) or mid-eject
    // (bytes restored, record not) leaves behind: the original bytes under an active
    // record. eject finishes the job instead of refusing it.
    let mut t = Target::start("seed", Variant::O2G);
    let p = t.pid().to_string();
    run_ok(&["inject", "--pid", &p, "--func", "bar", "--func", "foo"]);
    let hooks = list_hooks(t.pid());
    let bar = &hooks_named(&hooks, "bar", "active")[0];
    let patch = json_hex(&bar["patch_address"]);
    let len = bar["patch_len"].as_u64().unwrap() as usize;
    let original = function_bytes(t.exe(), "bar");
    let offset = (patch - t.addr_of("bar")) as usize;
    write_mem(t.pid(), patch, &original[offset..offset + len]);
    t.assert_function_pristine("bar");

    let out = run_ok(&["eject", "--pid", &p, "--func", "bar"]);
    assert!(out.contains("ejected bar"), "{out}");
    t.assert_function_pristine("bar");
    let after = list_hooks(t.pid());
    assert_eq!(hooks_named(&after, "bar", "active").len(), 0);
    assert_eq!(hooks_named(&after, "foo", "active").len(), 1);
    run_ok(&["eject", "--pid", &p, "--func", "foo"]);
    t.assert_function_pristine("foo");
    t.drain_lines();
    t.expect_line(E2E_TIMEOUT);
    t.assert_healthy();
}

#[test]
fn a_thread_traced_by_another_tracer_is_named() {
    use nix::sys::ptrace;
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    use nix::unistd::Pid;

    let mut t = Target::start("threads", Variant::O2G);
    let before = Untouched::take(&t);
    let (worker, _) = thread_names(t.pid())
        .into_iter()
        .find(|(_, n)| n == "work0")
        .unwrap();
    // Only one thread is traced (by this test's thread): the process's own
    // TracerPid is 0, the refusal comes when argstash reaches that thread.
    let w = Pid::from_raw(worker);
    ptrace::seize(w, ptrace::Options::empty()).expect("PTRACE_SEIZE work0");
    let me = gettid();
    assert_eq!(tracer_pid(t.pid()), None);
    let p = t.pid().to_string();
    let needle = format!("thread {worker} of process {p} is already traced by PID {me} (");
    expect_fail(&["inject", "--pid", &p, "--func", "work"], 1, &needle);
    expect_fail(&["bt", "--pid", &p], 1, &needle);
    ptrace::interrupt(w).expect("PTRACE_INTERRUPT");
    let sig = match waitpid(w, Some(WaitPidFlag::__WALL)).expect("waitpid") {
        WaitStatus::Stopped(_, sig) => Some(sig),
        _ => None,
    };
    ptrace::detach(w, sig).expect("PTRACE_DETACH");
    let status = format!("/proc/{}/task/{worker}/status", t.pid());
    assert!(wait_until(E2E_TIMEOUT, || std::fs::read_to_string(&status)
        .is_ok_and(|s| s.contains("\nTracerPid:\t0\n"))));
    before.check(&mut t);
    t.assert_function_pristine("work");
}

// ---------------------------------------------------------------------------
// Prologues that don't fit in five bytes (edgefuncs.c)
// ---------------------------------------------------------------------------

fn edge_functions(v: Variant) {
    let mut t = Target::start("edgefuncs", v);
    let exe = module_path(t.exe());
    let p = t.pid().to_string();
    refuse_inject(
        &mut t,
        &["short_nofill"],
        &format!(
            "cannot hook short_nofill in {exe}: the function is 4 bytes long but the patch \
             needs 5 bytes from its entry, and the bytes after it cannot be used: the next \
             symbol starts right after it"
        ),
    );
    refuse_inject(
        &mut t,
        &["table_into"],
        &format!(
            "cannot hook table_into in {exe}: the indirect jump at +0x1a has a jump-table entry \
             to +0x2, inside the bytes the patch overwrites (+0x0..+0x5)"
        ),
    );
    refuse_inject(
        &mut t,
        &["goto_two"],
        "the indirect jump at +0x11 has targets that cannot be bounded and the patch \
         (+0x0..+0x5) covers more than one instruction",
    );
    // The hookable ones: a short function with fill after it, a gcc switch
    // whose table targets all lie after the (two-instruction) patch, and an
    // unbounded indirect jump with a one-instruction patch.
    let hooked = ["short_fill", "dense_switch", "goto_one"];
    let out = run_ok(&[
        "inject", "--pid", &p, "--func", hooked[0], "--func", hooked[1], "--func", hooked[2],
    ]);
    assert_eq!(out.matches("hooked ").count(), 3, "{out}");
    let switch_patch = hooks_named(&list_hooks(t.pid()), "dense_switch", "active")[0]["patch_len"]
        .as_u64()
        .unwrap();
    assert!(
        switch_patch > 5,
        "the switch's patch covers cmp + ja: {out}"
    );
    t.drain_lines();
    t.expect_line(E2E_TIMEOUT);
    t.expect_line(E2E_TIMEOUT);
    t.assert_healthy();
    run_ok(&["eject", "--pid", &p, "--all"]);
    for f in hooked
        .iter()
        .chain(&["short_nofill", "short_next", "table_into", "goto_two"])
    {
        t.assert_function_pristine(f);
    }
    t.expect_line(E2E_TIMEOUT);
    t.assert_healthy();
}

#[test]
fn edge_functions_pie() {
    edge_functions(Variant::O2G);
}

#[test]
fn edge_functions_o0_pie() {
    edge_functions(Variant::new(Opt::O0g, true));
}

#[test]
fn edge_functions_nopie_cet() {
    edge_functions(Variant::new(Opt::O2g, false).cet());
}

#[test]
fn returns_twice_functions_are_refused() {
    let mut t = Target::start("edgefuncs", Variant::O2G);
    for f in ["setjmp", "_setjmp", "__sigsetjmp", "vfork"] {
        let stderr = refuse_inject(&mut t, &[f], "it returns twice (like setjmp or vfork)");
        assert!(stderr.contains(&format!("cannot hook {f} in ")), "{stderr}");
    }
}
