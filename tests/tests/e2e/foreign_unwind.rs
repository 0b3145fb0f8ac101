//! End-to-end: hooked frames stay unwindable by other unwinders.
//!
//! - libgcc (C++ exceptions): throws.cpp throws through hooked `relay` and `leaf`
//!   1000 times and catches every exception; eject deregisters (libgcc hands back
//!   exactly our object storage) and exceptions still work.
//! - perf: `/tmp/perf-PID.map` gets `argstash_trampoline.NAME` lines at inject, and
//!   loses exactly those at eject; `perf record --call-graph dwarf` names the
//!   trampoline frame above a hooked function.
//! - perf jitdump: inject writes `/tmp/jit-PID.dump` and maps it executable in the
//!   target; `perf record -k 1 --call-graph dwarf` + `perf inject --jit` unwind from
//!   a hooked function through its trampoline to `main`; eject unmaps and removes it,
//!   and a dump left by a process that died hooked is swept.
//! - gdb: plain `gdb -batch -p PID -ex bt` (through the GDB JIT interface), and gdb
//!   with `add-symbol-file /tmp/argstash-PID.elf`, unwind from a hooked function
//!   through its trampoline and the hooked caller down to `main`; eject unloads
//!   the JIT helper and removes the files.
//! - A plain C program without libgcc_s: the install says there is no in-process
//!   unwinder to feed, and succeeds.
//! - Remote calls: a call that blocks is interrupted after its time limit and the
//!   thread restored exactly; the process runs on unharmed.

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use argstash_tests::*;

const LINE: Duration = Duration::from_secs(20);

/// tests/fixtures/throws.cpp at -O2.
fn build_throws() -> PathBuf {
    build_cpp("throws")
}

fn perf_map(pid: i32) -> PathBuf {
    PathBuf::from(format!("/tmp/perf-{pid}.map"))
}

fn perf_map_lines(pid: i32) -> Vec<String> {
    fs::read_to_string(perf_map(pid))
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// `(function, trampoline)` of every active hook, from `list --json`.
fn active_trampolines(pid: i32) -> Vec<(String, u64)> {
    let v = run_json(&["list", "--pid", &pid.to_string(), "--json"]);
    v["hooks"]
        .as_array()
        .expect("hooks array")
        .iter()
        .filter(|h| h["state"] == "active")
        .map(|h| {
            (
                h["function"].as_str().unwrap().to_string(),
                json_hex(&h["trampoline"]),
            )
        })
        .collect()
}

fn throw_round(t: &mut Target, n: u32) {
    t.write_stdin(&format!("throw {n}\n"));
    let line = t.wait_for_line(LINE, |l| l.starts_with("thrown"));
    assert_eq!(
        line,
        format!("thrown {n} caught {n}"),
        "{}",
        t.stderr_text()
    );
    t.assert_healthy();
}

#[test]
fn cpp_exceptions_cross_hooked_frames_and_eject_undoes_registration() {
    let exe = build_throws();
    let mut t = Target::spawn(&exe);
    let pid = t.pid().to_string();
    throw_round(&mut t, 10);
    // A line another tool (a JIT) wrote must survive our inject and eject.
    let map = perf_map(t.pid());
    fs::write(&map, "1000 10 other_tool_symbol\n").unwrap();

    let out = run_ok(&["inject", "--pid", &pid, "--func", "relay", "--func", "leaf"]);
    assert!(
        out.contains("unwind info registered with")
            && out.contains("libgcc_s")
            && out.contains("for 2 hooks"),
        "{out}"
    );
    let lines = perf_map_lines(t.pid());
    assert_eq!(lines[0], "1000 10 other_tool_symbol");
    for (name, trampoline) in active_trampolines(t.pid()) {
        let prefix = format!("{trampoline:x} ");
        let line = lines
            .iter()
            .find(|l| l.ends_with(&format!(" argstash_trampoline.{name}")))
            .unwrap_or_else(|| panic!("no perf map line for {name}: {lines:?}"));
        assert!(
            line.starts_with(&prefix),
            "{line} does not start at 0x{trampoline:x}"
        );
        assert!(lines
            .iter()
            .any(|l| l.ends_with(&format!(" argstash_prologue.{name}"))));
    }

    let list = run_ok(&["list", "--pid", &pid]);
    for name in ["relay", "leaf"] {
        assert!(
            list.lines().any(|l| l.starts_with("unwind")
                && l.contains(name)
                && l.contains("libgcc yes")
                && l.contains("gdb JIT yes")
                && l.contains("perf map yes")),
            "{list}"
        );
    }
    // Each exception unwinds leaf, leaf's trampoline, relay, relay's trampoline.
    throw_round(&mut t, 1000);

    let out = run_ok(&["eject", "--pid", &pid, "--all"]);
    assert!(out.contains("unwind info removed for 2 hooks"), "{out}");
    assert!(!out.contains("note:"), "{out}");
    assert_eq!(
        perf_map_lines(t.pid()),
        vec!["1000 10 other_tool_symbol".to_string()]
    );
    assert!(
        !maps(t.pid())
            .iter()
            .any(|m| m.path.contains("argstash-jit")),
        "eject unloads the gdb JIT helper"
    );
    throw_round(&mut t, 1000);

    // Hook again (the ejected slots keep their registration off) and eject one by one.
    run_ok(&["inject", "--pid", &pid, "--func", "relay"]);
    throw_round(&mut t, 100);
    let out = run_ok(&["eject", "--pid", &pid, "--func", "relay"]);
    assert!(out.contains("unwind info removed for 1 hooks"), "{out}");
    assert_eq!(
        perf_map_lines(t.pid()),
        vec!["1000 10 other_tool_symbol".to_string()]
    );
    fs::remove_file(&map).unwrap();
    throw_round(&mut t, 10);
}

#[test]
fn plain_c_program_without_libgcc_is_hooked_and_told_so() {
    let mut t = Target::start("seed", Variant::default());
    let pid = t.pid().to_string();
    let has_libgcc = maps(t.pid()).iter().any(|m| m.path.contains("libgcc_s"));
    let out = run_ok(&["inject", "--pid", &pid, "--func", "bar"]);
    if has_libgcc {
        println!("SKIP part: this seed build loads libgcc_s");
    } else {
        assert!(out.contains("no in-process unwinder"), "{out}");
    }
    assert!(perf_map_lines(t.pid())
        .iter()
        .any(|l| l.ends_with(" argstash_trampoline.bar")));
    let list = run_ok(&["list", "--pid", &pid]);
    assert!(
        list.lines()
            .any(|l| l.starts_with("unwind") && l.contains("bar") && l.contains("libgcc no")),
        "{list}"
    );
    if !has_libgcc {
        assert!(list.contains("no in-process unwinder"), "{list}");
    }
    let out = run_ok(&["eject", "--pid", &pid, "--all"]);
    assert!(!out.contains("note:"), "{out}");
    assert!(!perf_map(t.pid()).exists(), "our perf map file is removed");
    t.wait_for_line(LINE, |l| l.starts_with("iter"));
    t.assert_healthy();
}

fn perf_usable() -> Option<String> {
    let probe = Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-o", "/dev/null", "--", "true"])
        .output();
    match probe {
        Err(e) => Some(format!("perf is not installed ({e})")),
        Ok(o) if !o.status.success() => Some(format!(
            "perf cannot record here: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Ok(_) => None,
    }
}

#[test]
fn perf_names_trampoline_frames_from_the_perf_map() {
    if let Some(why) = perf_usable() {
        println!("SKIP: {why}");
        return;
    }
    let exe = build_throws();
    let mut t = Target::spawn(&exe);
    let pid = t.pid().to_string();
    run_ok(&["inject", "--pid", &pid, "--func", "relay", "--func", "leaf"]);
    t.write_stdin("spin\n");
    let dir = std::env::temp_dir().join(format!("argstash-perf-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let data = dir.join("perf.data");
    let rec = Command::new("perf")
        .args([
            "record",
            "-e",
            "cpu-clock",
            "-F",
            "499",
            "--call-graph",
            "dwarf",
            "-p",
            &pid,
            "-o",
        ])
        .arg(&data)
        .args(["--", "sleep", "1"])
        .output()
        .expect("run perf record");
    assert!(
        rec.status.success(),
        "perf record: {}",
        String::from_utf8_lossy(&rec.stderr)
    );
    let script = Command::new("perf")
        .args(["script", "-F", "ip,sym", "-i"])
        .arg(&data)
        .output()
        .expect("run perf script");
    let _ = fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&script.stdout);
    let samples: Vec<&str> = text.split("\n\n").filter(|s| s.contains(" leaf")).collect();
    assert!(samples.len() >= 20, "too few samples in leaf: {text:.2000}");
    // The frame above leaf is its trampoline, named from /tmp/perf-PID.map.
    let named = samples
        .iter()
        .filter(|s| {
            let frames: Vec<&str> = s.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
            let leaf = frames.iter().position(|f| f.ends_with(" leaf"));
            matches!(leaf, Some(i) if frames.get(i + 1).is_some_and(|f| f.ends_with(" argstash_trampoline.leaf")))
        })
        .count();
    assert!(
        named * 2 > samples.len(),
        "only {named} of {} samples in leaf name the trampoline above it:\n{}",
        samples.len(),
        samples.first().unwrap_or(&"")
    );
    t.assert_healthy();
    run_ok(&["eject", "--pid", &pid, "--all"]);
}

/// Frames of each `perf script -F ip,sym` sample (innermost first) that contains `func`.
fn samples_with<'a>(text: &'a str, func: &str) -> Vec<Vec<&'a str>> {
    let suffix = format!(" {func}");
    text.split("\n\n")
        .map(|s| {
            s.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
        })
        .filter(|frames| frames.iter().any(|f| f.ends_with(&suffix)))
        .collect()
}

#[test]
fn perf_inject_jit_unwinds_through_trampolines_to_main() {
    if let Some(why) = perf_usable() {
        println!("SKIP: {why}");
        return;
    }
    let exe = build_throws();
    let mut t = Target::spawn(&exe);
    let pid = t.pid().to_string();
    let dump = format!("/tmp/jit-{pid}.dump");
    let out = run_ok(&["inject", "--pid", &pid, "--func", "relay", "--func", "leaf"]);
    assert!(out.contains(&format!("perf jitdump: {dump}")), "{out}");
    assert!(
        maps(t.pid())
            .iter()
            .any(|m| m.path == dump && m.perms.contains('x')),
        "the jitdump is mapped executable in the target (perf's marker)"
    );
    let list = run_ok(&["list", "--pid", &pid]);
    assert!(
        list.lines()
            .filter(|l| l.starts_with("unwind "))
            .all(|l| l.ends_with("perf jitdump yes")),
        "{list}"
    );
    t.write_stdin("spin\n");
    let dir = std::env::temp_dir().join(format!("argstash-perfjit-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let data = dir.join("perf.data");
    let injected = dir.join("jit.data");
    let rec = Command::new("perf")
        .args(["record", "-k", "1", "-e", "cpu-clock", "-F", "499"])
        .args(["--call-graph", "dwarf", "-p", &pid, "-o"])
        .arg(&data)
        .args(["--", "sleep", "1"])
        .output()
        .expect("run perf record");
    assert!(
        rec.status.success(),
        "perf record: {}",
        String::from_utf8_lossy(&rec.stderr)
    );
    let inj = Command::new("perf")
        .args(["inject", "--jit", "-i"])
        .arg(&data)
        .arg("-o")
        .arg(&injected)
        .output()
        .expect("run perf inject");
    assert!(
        inj.status.success(),
        "perf inject: {}",
        String::from_utf8_lossy(&inj.stderr)
    );
    let script = |input: &PathBuf| {
        let o = Command::new("perf")
            .args(["script", "-F", "ip,sym", "-i"])
            .arg(input)
            .output()
            .expect("run perf script");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let plain = script(&data);
    let jitted = script(&injected);
    // perf inject writes one ELF per code record next to the dump.
    let elfs: Vec<PathBuf> = fs::read_dir("/tmp")
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("jitted-{pid}-")))
        })
        .collect();
    for p in &elfs {
        let _ = fs::remove_file(p);
    }
    let _ = fs::remove_dir_all(&dir);
    assert!(!elfs.is_empty(), "perf inject generated no jitted ELF");

    let main_above = |samples: &[Vec<&str>]| {
        samples
            .iter()
            .filter(|frames| {
                let leaf = frames.iter().position(|f| f.ends_with(" leaf"));
                matches!(leaf, Some(i) if frames[i + 1..].iter().any(|f| f.ends_with(" main")))
            })
            .count()
    };
    let samples = samples_with(&jitted, "leaf");
    assert!(
        samples.len() >= 20,
        "too few samples in leaf: {jitted:.2000}"
    );
    let through = main_above(&samples);
    assert!(
        through * 2 > samples.len(),
        "only {through} of {} samples in leaf reach main:\n{}",
        samples.len(),
        samples.first().map(|f| f.join("\n")).unwrap_or_default()
    );
    assert!(
        samples
            .iter()
            .any(|f| f.iter().any(|l| l.ends_with(" argstash_hooks"))),
        "the hook code is named from the jitted ELF"
    );
    // Without the injected ELFs perf stops at the anonymous arena.
    let before = main_above(&samples_with(&plain, "leaf"));
    println!(
        "leaf samples reaching main: {through} of {} with perf inject --jit, {before} without",
        samples.len()
    );

    t.assert_healthy();
    let out = run_ok(&["eject", "--pid", &pid, "--all"]);
    assert!(
        out.contains(&format!("perf jitdump: {dump} unmapped and removed")),
        "{out}"
    );
    // The thread spins inside relay -> leaf, so both trampolines are live: they keep
    // their libgcc registration (the exception rule); no other note.
    assert!(
        out.lines()
            .filter(|l| l.contains("note:"))
            .all(|l| l.contains("stay registered with libgcc: a thread can still return")),
        "{out}"
    );
    assert!(
        !maps(t.pid()).iter().any(|m| m.path == dump),
        "eject unmaps the jitdump"
    );
    assert!(!PathBuf::from(&dump).exists(), "eject removes the jitdump");
    t.assert_healthy();
}

#[test]
fn jitdump_of_a_process_that_died_hooked_is_removed() {
    let exe = build_throws();
    let t = Target::spawn(&exe);
    let pid = t.pid().to_string();
    let dump = PathBuf::from(format!("/tmp/jit-{pid}.dump"));
    run_ok(&["inject", "--pid", &pid, "--func", "leaf"]);
    assert!(dump.exists());
    drop(t); // kills and reaps it
             // The next install anywhere sweeps files of processes that are gone.
    let other = Target::spawn(&exe);
    let other_pid = other.pid().to_string();
    run_ok(&["inject", "--pid", &other_pid, "--func", "leaf"]);
    assert!(!dump.exists(), "stale jitdump removed");
    run_ok(&["eject", "--pid", &other_pid, "--all"]);
    assert!(!PathBuf::from(format!("/tmp/jit-{other_pid}.dump")).exists());
}

#[test]
fn gdb_attach_and_bt_unwinds_through_trampolines_to_main() {
    if Command::new("gdb").arg("--version").output().is_err() {
        println!("SKIP: gdb is not installed");
        return;
    }
    let mut t = Target::start("seed", Variant::default());
    let pid = t.pid().to_string();
    let out = run_ok(&["inject", "--pid", &pid, "--func", "bar", "--func", "foo"]);
    assert!(
        out.contains("gdb JIT interface: registered 2 hooks"),
        "{out}"
    );
    let file = format!("/tmp/argstash-{pid}.elf");
    assert!(out.contains(&format!("add-symbol-file {file}")), "{out}");
    let helper = format!("/tmp/argstash-jit-{pid}.so");
    assert!(
        maps(t.pid()).iter().any(|m| m.path == helper),
        "helper loaded"
    );
    t.wait_for_line(LINE, |l| l.starts_with("iter"));
    // Exactly what a user types: gdb finds the hooks through its JIT interface.
    check_gdb_chain(&gdb_bt_inside_bar(&pid, &[]));
    // The symbol file works for a gdb told about it.
    check_gdb_chain(&gdb_bt_inside_bar(
        &pid,
        &[&format!("add-symbol-file {file}")],
    ));

    let out = run_ok(&["eject", "--pid", &pid, "--all"]);
    assert!(out.contains("gdb JIT interface: removed 2 hooks"), "{out}");
    assert!(
        !std::path::Path::new(&file).exists(),
        "eject removes {file}"
    );
    assert!(
        !std::path::Path::new(&helper).exists(),
        "eject removes {helper}"
    );
    assert!(
        !maps(t.pid())
            .iter()
            .any(|m| m.path.contains("argstash-jit")),
        "eject unloads the helper"
    );
    let text = gdb_bt(&pid, &[]);
    assert!(!text.contains("argstash_trampoline"), "{text}");
    t.wait_for_line(LINE, |l| l.starts_with("iter"));
    t.assert_healthy();
}

/// `gdb -batch -p PID [-ex BEFORE...] -ex bt`: stdout and stderr.
fn gdb_bt(pid: &str, before: &[&str]) -> String {
    let mut cmd = Command::new("timeout");
    cmd.args(["60", "gdb", "-nx", "-batch", "-p", pid]);
    for c in before {
        cmd.args(["-ex", c]);
    }
    let gdb = cmd.args(["-ex", "bt"]).output().expect("run gdb");
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&gdb.stdout),
        String::from_utf8_lossy(&gdb.stderr)
    )
}

/// gdb's bt taken while the seed target is inside `bar` (it sleeps there almost all
/// the time; a stop that lands in its printing between calls is taken again, at most
/// a few times). Returns the last bt either way, for [`check_gdb_chain`] to judge.
fn gdb_bt_inside_bar(pid: &str, before: &[&str]) -> String {
    let mut text = String::new();
    for _ in 0..5 {
        text = gdb_bt(pid, before);
        if text
            .lines()
            .any(|l| l.starts_with('#') && l.contains(" bar ("))
        {
            break;
        }
    }
    text
}

/// bar, its trampoline, foo, its trampoline, main: consecutive frames of gdb's bt.
fn check_gdb_chain(text: &str) {
    let frames: Vec<&str> = text.lines().filter(|l| l.starts_with('#')).collect();
    let at = |needle: &str| {
        frames
            .iter()
            .position(|f| f.contains(needle))
            .unwrap_or_else(|| panic!("no frame with {needle:?} in gdb's bt:\n{text}"))
    };
    let bar = at(" bar (");
    let expected = [
        " bar (",
        "argstash_trampoline",
        " foo (",
        "argstash_trampoline",
        " main (",
    ];
    for (i, needle) in expected.iter().enumerate() {
        assert!(
            frames.get(bar + i).is_some_and(|f| f.contains(needle)),
            "frame #{} should contain {needle:?}:\n{text}",
            bar + i
        );
    }
}

/// A call that does not return in time is never abandoned half-way: the thread is let
/// go inside it, finishes it by itself, and returns through the signal frame into its
/// own context (registers and XSAVE state exactly as before, its `read` issued again).
#[test]
fn blocked_remote_call_is_released_and_returns_by_itself() {
    use injector::Session;
    let exe = build_throws();
    let mut t = Target::spawn(&exe);
    throw_round(&mut t, 5);
    let pid = t.pid();
    let usleep = runtime_addr_in(pid, "libc.so.6", "usleep");
    let mut s = Session::attach_thread(pid, pid).expect("attach");
    let before = s.regs(pid).unwrap();
    let xstate_before = xstate(pid);
    let err = s
        .remote_call(
            pid,
            usleep,
            "usleep",
            &[400_000],
            Duration::from_millis(100),
        )
        .expect_err("usleep(400 ms) outlasts a 100 ms limit");
    assert!(
        matches!(err, injector::RemoteCallError::Released { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("did not return within"), "{err}");
    s.detach().unwrap();
    // Inside usleep (nanosleep) now; back in its own read() of stdin once it is over.
    let in_read = || {
        std::fs::read_to_string(format!("/proc/{pid}/syscall"))
            .is_ok_and(|s| s.split_whitespace().next() == Some("0"))
    };
    std::thread::sleep(Duration::from_millis(50));
    assert!(!in_read(), "the thread is still running the call");
    assert!(
        wait_until(Duration::from_secs(5), in_read),
        "the thread returned to its read()"
    );
    let s = Session::attach_thread(pid, pid).expect("attach again");
    let after = s.regs(pid).unwrap();
    let xstate_after = xstate(pid);
    let differ: Vec<usize> = (0..xstate_before.len().min(xstate_after.len()))
        .filter(|i| xstate_before[*i] != xstate_after[*i])
        .collect();
    assert!(
        xstate_before == xstate_after,
        "vector and x87 state restored exactly by rt_sigreturn; bytes differ at {differ:?} (len {} vs {})",
        xstate_before.len(),
        xstate_after.len()
    );
    assert_eq!(
        format!("{before:?}"),
        format!("{after:?}"),
        "registers restored exactly"
    );
    s.detach().unwrap();
    throw_round(&mut t, 5);
}

/// Runtime address of `name` in the loaded module named `module` (as argstash resolves it).
fn runtime_addr_in(pid: i32, module: &str, name: &str) -> u64 {
    use reader::symbols::{FuncSpec, ProcessSymbols};
    let maps = reader::procfs::read_maps(pid).expect("maps");
    let symbols = ProcessSymbols::load(pid, &maps).expect("symbols");
    symbols
        .resolve(&FuncSpec::Qualified {
            module: module.into(),
            name: name.into(),
        })
        .unwrap_or_else(|e| panic!("{module}!{name}: {e}"))
        .addr
}
