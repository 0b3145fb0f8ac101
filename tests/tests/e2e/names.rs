//! End-to-end: `--func` takes C++ and Rust functions as their language writes
//! them (qualified name with or without the parameter list, a `::` suffix, a Rust
//! path without its hash), hooks them, `list` shows them so, and `eject` takes
//! the same name back; overloads and same-named functions of two crates are
//! listed with how to write each alone.
//!
//! Fixtures: cppnames.cpp (C++, -O2, no -g: only the symbol table names the
//! functions) and a Rust program built here with rustc (`crashy`, a binary crate,
//! and `recordlib`, an rlib it uses; both define `parse_record`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use argstash_tests::*;

const SOON: Duration = Duration::from_secs(5);

fn scratch(name: &str) -> PathBuf {
    let dir = fixture_cache_dir().join(format!("names-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

#[track_caller]
fn tool(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (run scripts/setup.sh)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn cpp_program(dir: &Path) -> Target {
    let exe = dir.join("cppnames");
    tool(
        Command::new("c++")
            .args(["-O2", "-fcf-protection=none", "-I"])
            .arg(fixtures_dir())
            .arg("-o")
            .arg(&exe)
            .arg(fixtures_dir().join("cppnames.cpp")),
    );
    Target::spawn(&exe)
}

const RUST_LIB: &str = "#[inline(never)]\n\
    pub fn parse_record(x: u64) -> u64 { std::hint::black_box(x) * 3 }\n";

const RUST_MAIN: &str = r#"
use std::io::Write;
#[inline(never)]
pub fn parse_record(x: u64, y: u64) -> u64 {
    std::thread::sleep(std::time::Duration::from_millis(100));
    std::hint::black_box(x) + y
}
fn main() {
    println!("ready {}", std::process::id());
    std::io::stdout().flush().unwrap();
    loop {
        let r = parse_record(std::hint::black_box(41), std::hint::black_box(1))
            + recordlib::parse_record(std::hint::black_box(2));
        if r != 48 {
            eprintln!("WRONG parse_record: {r}");
            std::process::abort();
        }
    }
}
"#;

fn rust_program(dir: &Path, v0: bool) -> Target {
    fs::write(dir.join("recordlib.rs"), RUST_LIB).unwrap();
    fs::write(dir.join("main.rs"), RUST_MAIN).unwrap();
    let rustc = |args: &[&str]| {
        let mut cmd = Command::new("rustc");
        cmd.args(["-C", "opt-level=2"]).current_dir(dir);
        if v0 {
            cmd.args(["-C", "symbol-mangling-version=v0"]);
        }
        tool(cmd.args(args));
    };
    rustc(&[
        "--crate-type",
        "rlib",
        "--crate-name",
        "recordlib",
        "recordlib.rs",
    ]);
    rustc(&[
        "--crate-name",
        "crashy",
        "--extern",
        "recordlib=librecordlib.rlib",
        "-o",
        "crashy",
        "main.rs",
    ]);
    Target::spawn(&dir.join("crashy"))
}

/// The active hook `list --json` shows with this demangled name.
fn listed(pid: i32, demangled: &str) -> serde_json::Value {
    let hooks = list_hooks(pid);
    hooks
        .iter()
        .find(|h| h["demangled"] == demangled && h["state"] == "active")
        .unwrap_or_else(|| panic!("no active hook shown as {demangled}: {hooks:#?}"))
        .clone()
}

/// Waits until the main thread is in the hooked function `shown` and returns the frame.
fn hooked_frame(pid: i32, shown: &str) -> serde_json::Value {
    let bt = wait_bt(pid, Some(pid), SOON, |bt| {
        frame_named(&bt["threads"][0], shown).is_some_and(|(_, f)| f["hooked"] == true)
    });
    frame_named(&bt["threads"][0], shown).unwrap().1.clone()
}

#[test]
fn cpp_functions_are_hooked_and_ejected_by_demangled_name() {
    let dir = scratch("cpp");
    let mut t = cpp_program(&dir);
    let pid = t.pid();
    let p = pid.to_string();

    // `parse(long, long)` parses as a C signature too; no symbol is called
    // `parse`, so it names the C++ overload: ambiguous between two namespaces.
    let out = expect_fail(
        &["inject", "--pid", &p, "--func", "parse(long, long)"],
        1,
        "`parse(long, long)` is ambiguous, 2 functions have that name",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "hook one alone with --func 'ns::Parser::parse(long, long)' or --func 'other::parse'"
        ),
        "{err}"
    );
    // Overloads of one method: each listed with its full form.
    let out = expect_fail(
        &["inject", "--pid", &p, "--func", "ns::Parser::parse"],
        1,
        "2 functions have that name",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--func 'ns::Parser::parse(int)'"), "{err}");
    // A malformed name says why.
    expect_fail(
        &["inject", "--pid", &p, "--func", "ns::Parser::"],
        1,
        "`::` must separate two names",
    );
    assert!(list_hooks(pid).is_empty(), "refusals hook nothing");

    // The full form hooks the overload; the list is not kept as a C signature.
    run_ok(&[
        "inject",
        "--pid",
        &p,
        "--func",
        "ns::Parser::parse(long, long)",
    ]);
    let hook = listed(pid, "ns::Parser::parse(long, long)");
    assert!(
        hook["function"]
            .as_str()
            .unwrap()
            .starts_with("_ZN2ns6Parser5parse"),
        "{hook}"
    );
    let text = run_ok(&["list", "--pid", &p]);
    assert!(text.contains("ns::Parser::parse(long, long)"), "{text}");
    let frame = hooked_frame(pid, "ns::Parser::parse");
    assert_eq!(frame_arg(&frame, "rsi"), Some(11), "{frame:#}");
    assert_eq!(frame_arg(&frame, "rdx"), Some(22), "{frame:#}");

    // Suffix forms and a template, in one inject; eject by the same names.
    run_ok(&[
        "inject",
        "--pid",
        &p,
        "--func",
        "Parser::parse(int)",
        "--func",
        "twice<int>",
    ]);
    listed(pid, "ns::Parser::parse(int)");
    listed(pid, "ns::twice<int>(int)");
    // A list the C grammar refuses (`const&`) and a `!` that is no module separator.
    let neq = "ns::operator!=(ns::Parser const&, ns::Parser const&)";
    run_ok(&["inject", "--pid", &p, "--func", neq]);
    listed(pid, neq);
    run_ok(&["eject", "--pid", &p, "--func", neq]);
    // `parse` alone matches two hooks: eject lists them.
    let out = expect_fail(&["eject", "--pid", &p, "--func", "parse"], 1, "ambiguous");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ns::Parser::parse(long, long) in "), "{err}");
    assert!(err.contains("ns::Parser::parse(int) in "), "{err}");
    run_ok(&[
        "eject",
        "--pid",
        &p,
        "--func",
        "parse(long,long)",
        "--func",
        "ns::Parser::parse(int)",
        "--func",
        "twice<int>",
    ]);
    let active: Vec<_> = list_hooks(pid)
        .into_iter()
        .filter(|h| h["state"] == "active")
        .collect();
    assert!(active.is_empty(), "{active:#?}");
    t.assert_healthy();
    let _ = fs::remove_dir_all(&dir);
}

fn rust_functions(v0: bool) {
    let dir = scratch(if v0 { "rust-v0" } else { "rust-legacy" });
    let mut t = rust_program(&dir, v0);
    let pid = t.pid();
    let p = pid.to_string();

    let out = expect_fail(
        &["inject", "--pid", &p, "--func", "parse_record"],
        1,
        "`parse_record` is ambiguous",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "hook one alone with --func 'crashy::parse_record' or --func 'recordlib::parse_record'"
        ),
        "{err}"
    );

    run_ok(&["inject", "--pid", &p, "--func", "crashy::parse_record"]);
    let hook = listed(pid, "crashy::parse_record");
    let mangled = hook["function"].as_str().unwrap();
    assert!(mangled.starts_with(if v0 { "_R" } else { "_ZN" }), "{hook}");
    let frame = hooked_frame(pid, "crashy::parse_record");
    assert_eq!(frame_arg(&frame, "rdi"), Some(41), "{frame:#}");
    assert_eq!(frame_arg(&frame, "rsi"), Some(1), "{frame:#}");
    // Hooked once: the mangled name finds the same function.
    expect_fail(&["inject", "--pid", &p, "--func", mangled], 1, "already");
    run_ok(&["eject", "--pid", &p, "--func", "crashy::parse_record"]);

    // The path of the other crate, then eject by the mangled name.
    run_ok(&["inject", "--pid", &p, "--func", "recordlib::parse_record"]);
    let hook = listed(pid, "recordlib::parse_record");
    let mangled = hook["function"].as_str().unwrap().to_string();
    run_ok(&["eject", "--pid", &p, "--func", &mangled]);
    assert!(list_hooks(pid).iter().all(|h| h["state"] != "active"));
    t.assert_healthy();
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn rust_functions_are_hooked_by_path_legacy_mangling() {
    rust_functions(false);
}

#[test]
fn rust_functions_are_hooked_by_path_v0_mangling() {
    rust_functions(true);
}

/// The mangled name of the function `nm -C` shows as `shown` (with or without a
/// return type before it) in `exe`: an independent demangler.
fn mangled_by_nm(exe: &Path, shown: &str) -> String {
    let nm = |demangle: bool| {
        let mut cmd = Command::new("nm");
        cmd.arg("--defined-only");
        if demangle {
            cmd.arg("-C");
        }
        let out = cmd.arg(exe).output().expect("nm (run scripts/setup.sh)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let (plain, demangled) = (nm(false), nm(true));
    // One symbol per line, in the same order in both listings.
    plain
        .lines()
        .zip(demangled.lines())
        .find(|(_, d)| {
            let name = d.splitn(3, ' ').nth(2).unwrap_or("");
            name == shown || name.ends_with(&format!(" {shown}"))
        })
        .and_then(|(p, _)| p.splitn(3, ' ').nth(2))
        .unwrap_or_else(|| panic!("nm -C shows no {shown} in {}", exe.display()))
        .to_string()
}

/// The candidates a refusal lists (`SHOWN in /path (0xADDR)`) and the spellings
/// its hint gives (`--func 'NAME'`), in order.
fn listed_and_hinted(err: &str) -> (Vec<(String, u64)>, Vec<String>) {
    let candidates = err
        .lines()
        .filter_map(|l| {
            let l = l.strip_prefix("  ")?;
            let (shown, rest) = l.rsplit_once(" in /")?;
            let addr = rest.rsplit_once(" (0x")?.1.strip_suffix(')')?;
            Some((shown.to_string(), u64::from_str_radix(addr, 16).ok()?))
        })
        .collect();
    let hint = err
        .lines()
        .find(|l| l.contains("--func '"))
        .unwrap_or_else(|| panic!("no hint with --func: {err}"));
    let spellings = hint
        .split("--func '")
        .skip(1)
        .map(|s| s.split_once('\'').unwrap().0.to_string())
        .collect();
    (candidates, spellings)
}

#[test]
fn name_refusals_say_how_to_write_each_function_alone_and_those_spellings_hook_it() {
    let dir = scratch("hints");
    let mut t = cpp_program(&dir);
    let pid = t.pid();
    let p = pid.to_string();
    let exe = dir.join("cppnames");
    // (bad input, what the message says, how many candidates, the hint's opening)
    let cases = [
        // Overloads in two namespaces.
        (
            "parse(long, long)",
            "`parse(long, long)` is ambiguous, 2 functions have that name",
            2,
            "hook one alone with --func '",
        ),
        // A malformed demangled name: what reads as a name, and its overloads.
        (
            "ns::Parser::parse(long",
            "`(` and `)` do not pair up",
            2,
            "to hook one of them, write --func '",
        ),
        // Templates whose argument lists hold `(` and `!`, malformed.
        (
            "ns::call<long (*)(long)",
            "`<` and `>` do not pair up",
            1,
            "to hook it, write --func 'ns::call<long (*)(long)>'",
        ),
        (
            "ns::pick<0>(ns::Tag<!(0)>",
            "`(` and `)` do not pair up",
            1,
            "to hook it, write --func 'ns::pick<0>'",
        ),
    ];
    for (bad, says, n, hint) in cases {
        let err = refused(&mut t, &["inject", "--pid", &p, "--func", bad], 1, says);
        assert!(err.contains(hint), "{bad}: {err}");
        let (candidates, spellings) = listed_and_hinted(&err);
        assert_eq!(candidates.len(), n, "{bad}: {err}");
        assert_eq!(spellings.len(), n, "{bad}: {err}");
        // Each spelling hooks the candidate listed at its place, and nm agrees.
        for ((shown, addr), spelling) in candidates.iter().zip(&spellings) {
            run_ok(&["inject", "--pid", &p, "--func", spelling]);
            let hook = listed(pid, shown);
            assert_eq!(json_hex(&hook["address"]), *addr, "{spelling}: {hook}");
            assert_eq!(hook["function"], mangled_by_nm(&exe, shown), "{hook}");
            run_ok(&["eject", "--pid", &p, "--func", spelling]);
        }
    }
    // Without `::`, `<` or `&`, `parse(long` is read as a C signature, and refused so.
    refused(
        &mut t,
        &["inject", "--pid", &p, "--func", "parse(long"],
        1,
        "cannot read the signature `parse(long`: the parameter list is not closed",
    );
    // Written whole, the templates hook; the bt frame is the function named.
    for (written, shown) in [
        ("ns::pick<0>(ns::Tag<!(0)>)", "ns::pick<0>(ns::Tag<!(0)>)"),
        (
            "ns::call<long (*)(long)>",
            "ns::call<long (*)(long)>(long (*)(long), long)",
        ),
    ] {
        run_ok(&["inject", "--pid", &p, "--func", written]);
        let hook = listed(pid, shown);
        assert_eq!(hook["function"], mangled_by_nm(&exe, shown), "{hook}");
        let text = run_ok(&["list", "--pid", &p]);
        assert!(text.contains(shown), "{text}");
    }
    run_ok(&["eject", "--pid", &p, "--all"]);
    t.assert_healthy();
    let _ = fs::remove_dir_all(&dir);
}

/// `argstash run --timeout 1 ARGS -- exe`: the report on stderr and the JSON one.
fn run_with_report(dir: &Path, exe: &Path, args: &[&str]) -> (String, serde_json::Value) {
    let report = dir.join("report.json");
    let _ = fs::remove_file(&report);
    let mut cmd = argstash_cmd(&["run", "--timeout", "1", "--report"]);
    cmd.arg(&report).args(args).arg("--").arg(exe);
    let out = run_command(&mut cmd, RUN_TIMEOUT);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    let text = fs::read_to_string(&report).unwrap();
    let bt = serde_json::from_str(text.lines().next().expect("a report")).unwrap();
    (err, bt)
}

#[test]
fn run_and_record_take_demangled_names_and_show_them_as_bt_does() {
    let dir = scratch("run-cpp");
    let exe = dir.join("cppnames");
    cpp_program(&dir).kill();
    let ll = "ns::Parser::parse(long, long)";
    let (err, bt) = run_with_report(&dir, &exe, &["--func", ll, "--func", "ns::pick<0>"]);
    let line = err
        .lines()
        .find(|l| l.contains(" in ns::Parser::parse ("))
        .unwrap_or_else(|| panic!("no ns::Parser::parse frame: {err}"));
    assert!(
        line.contains("rsi=11, rdx=22") && line.contains("[stashed]"),
        "{line}"
    );
    let (_, frame) = frame_named(&bt_threads(&bt)[0], "ns::Parser::parse").expect("frame");
    assert_eq!(frame["hooked"], true, "{frame:#}");
    assert_eq!(frame["hook"], mangled_by_nm(&exe, ll), "{frame:#}");
    assert_eq!(frame_arg(frame, "rdx"), Some(22), "{frame:#}");
    // An ambiguous name: refused before main, with how to write each alone.
    let out = run_command(
        argstash_cmd(&["run", "--func", "parse", "--"]).arg(&exe),
        RUN_TIMEOUT,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        err.contains("hook one alone with --func 'ns::Parser::parse(long, long)', --func 'ns::Parser::parse(int)' or --func 'other::parse'"),
        "{err}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("ready"),
        "main never ran: {out:?}"
    );

    // record: the folded stacks and the flame graph name the hook as bt does.
    let folded = dir.join("cpp.txt");
    run_ok(&[
        "record",
        "--func",
        ll,
        // No signature is known (no DWARF): registers are named only when asked.
        "--args",
        "rdi,rsi,rdx,rcx",
        "--idle",
        "--duration",
        "1",
        "-o",
        folded.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
    ]);
    let stacks = fs::read_to_string(&folded).unwrap();
    assert!(
        stacks.contains(";ns::Parser::parse(rdi=") && stacks.contains(", rsi=11, rdx=22,"),
        "{stacks}"
    );
    assert!(!stacks.contains("_ZN"), "no mangled name: {stacks}");
    let svg = dir.join("cpp.svg");
    run_ok(&[
        "record",
        "--func",
        ll,
        "--idle",
        "--duration",
        "1",
        "-o",
        svg.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
    ]);
    let graph = fs::read_to_string(&svg).unwrap();
    assert!(
        graph.contains("ns::Parser::parse"),
        "no demangled name in the SVG"
    );
    assert!(
        !graph.contains("_ZN2ns6Parser"),
        "a mangled name in the SVG"
    );
    // A refusal ends a short recording at once, saying why.
    let out = run_command(
        &mut argstash_cmd(&[
            "record",
            "--func",
            "ns::Parser::parse(long",
            "--duration",
            "1",
            "-o",
            folded.to_str().unwrap(),
            "--",
            exe.to_str().unwrap(),
        ]),
        RUN_TIMEOUT,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        err.contains("to hook one of them, write --func 'ns::Parser::parse(long, long)' or --func 'ns::Parser::parse(int)'"),
        "{err}"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn run_and_record_take_rust_paths() {
    let dir = scratch("run-rust");
    rust_program(&dir, false).kill();
    let exe = dir.join("crashy");
    let (err, bt) = run_with_report(&dir, &exe, &["--func", "crashy::parse_record"]);
    let line = err
        .lines()
        .find(|l| l.contains(" in crashy::parse_record ("))
        .unwrap_or_else(|| panic!("no crashy::parse_record frame: {err}"));
    assert!(
        line.contains("(rdi=41, rsi=1,") && line.contains("[stashed]"),
        "{line}"
    );
    let (_, frame) = frame_named(&bt_threads(&bt)[0], "crashy::parse_record").expect("frame");
    assert_eq!(frame["hooked"], true, "{frame:#}");
    // Two crates: refused, each path written alone.
    let out = run_command(
        argstash_cmd(&["run", "--func", "parse_record", "--"]).arg(&exe),
        RUN_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "hook one alone with --func 'crashy::parse_record' or --func 'recordlib::parse_record'"
        ),
        "{out:?}"
    );
    let folded = dir.join("rust.txt");
    run_ok(&[
        "record",
        "--func",
        "crashy::parse_record",
        // No signature is known (no DWARF): registers are named only when asked.
        "--args",
        "rdi,rsi,rdx",
        "--idle",
        "--duration",
        "1",
        "-o",
        folded.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
    ]);
    let stacks = fs::read_to_string(&folded).unwrap();
    assert!(
        stacks.contains(";crashy::parse_record(rdi=41, rsi=1,"),
        "{stacks}"
    );
    assert!(!stacks.contains("_ZN6crashy"), "no mangled name: {stacks}");
    let _ = fs::remove_dir_all(&dir);
}
