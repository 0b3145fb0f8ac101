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
        err.contains("write `ns::Parser::parse(long, long)`"),
        "{err}"
    );
    assert!(err.contains("write `other::parse`"), "{err}");
    // Overloads of one method: each listed with its full form.
    let out = expect_fail(
        &["inject", "--pid", &p, "--func", "ns::Parser::parse"],
        1,
        "2 functions have that name",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("write `ns::Parser::parse(int)`"), "{err}");
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
    assert!(err.contains("write `crashy::parse_record`"), "{err}");
    assert!(err.contains("write `recordlib::parse_record`"), "{err}");

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
