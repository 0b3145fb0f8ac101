//! End-to-end: the guide's one-line set-ups of `argstash run` under a test
//! runner, taken from docs/guide/crash-reports.md itself so that they work as
//! written there: cargo's `runner` in `.cargo/config.toml` (a fresh `cargo new`
//! crate: `cargo run`, `cargo run --release`, `cargo test`) and CMake's
//! `CMAKE_CROSSCOMPILING_EMULATOR` under CTest. Each program crashes in
//! `parse_record(id, len)`; the report must show the values the program printed
//! before the call, stashed, and the runner must see the death it sees without
//! argstash.
//!
//! `argstash` is found on PATH, as docs/guide/install.md tells users to put it
//! there: the tests prepend the directory of the binary the harness built (the
//! guide's way is `cargo install --path cli`, which puts it in `~/.cargo/bin`;
//! too slow for a test, and it would replace the user's copy).

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use argstash_tests::*;

/// cargo and cmake builds of a small program, on a loaded machine.
const BUILD_TIMEOUT: Duration = Duration::from_secs(300);

/// The guide page that documents the runner set-ups.
const GUIDE: &str = "docs/guide/crash-reports.md";

/// The fenced block of the guide's `argstash run` section that starts with
/// ```` ```LANG ````, as written there (indentation removed).
fn guide_block(lang: &str) -> String {
    let guide = std::fs::read_to_string(workspace_root().join(GUIDE))
        .unwrap_or_else(|e| panic!("reading {GUIDE}: {e}"));
    let section = guide
        .split("\n## ")
        .find(|s| s.starts_with("`argstash run`"))
        .unwrap_or_else(|| panic!("{GUIDE} has no `argstash run` section"));
    let fence = format!("```{lang}\n");
    let start = section
        .find(&fence)
        .unwrap_or_else(|| panic!("{GUIDE}'s run section has no {lang} block"))
        + fence.len();
    let body = &section[start..];
    let end = body.find("```").expect("the block ends");
    body[..end]
        .lines()
        .map(str::trim_start)
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// PATH with the directory of the built `argstash` first.
fn path_with_argstash() -> OsString {
    let bin = argstash();
    let mut path = OsString::from(bin.parent().unwrap());
    if let Some(old) = std::env::var_os("PATH") {
        path.push(":");
        path.push(old);
    }
    path
}

/// A command run in `dir` with argstash on PATH and none of the variables of the
/// `cargo test` running us that would steer a nested cargo (target dir, flags,
/// a runner of its own).
fn tool(program: &str, dir: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(dir)
        .env("PATH", path_with_argstash())
        .env("CARGO_NET_OFFLINE", "true")
        .stdin(std::process::Stdio::null());
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k == "CARGO_TARGET_DIR"
            || k == "CARGO_BUILD_TARGET"
            || k.starts_with("CARGO_TARGET_")
            || k.contains("RUSTFLAGS")
            || k == "RUSTC_WRAPPER"
            || k == "CARGO_MAKEFLAGS"
        {
            cmd.env_remove(k.as_ref());
        }
    }
    cmd
}

#[track_caller]
fn must(cmd: &mut Command) -> Output {
    let out = run_command(cmd, BUILD_TIMEOUT);
    assert!(out.status.success(), "{cmd:?} failed: {}", text(&out));
    out
}

fn text(out: &Output) -> String {
    format!(
        "status {}\n--- stdout:\n{}--- stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A fresh directory under the system's temporary directory (not under the
/// workspace, whose Cargo.toml would claim the crate).
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("argstash-runners-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Arguments the programs get: not constants of the program, and small enough
/// to be shown in decimal.
fn record_args() -> (u64, u64) {
    let p = u64::from(std::process::id());
    (1000 + p % 1000, 16 + p % 7)
}

/// `parse_record(ID, LEN)` as the programs print it, parsed back.
#[track_caller]
fn printed_args(out: &str) -> (String, String) {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("parse_record("))
        .unwrap_or_else(|| panic!("the program printed no parse_record line: {out}"));
    let (id, len) = line
        .trim_end_matches(')')
        .split_once(", ")
        .unwrap_or_else(|| panic!("{line}"));
    (id.to_string(), len.to_string())
}

/// The report's line of the hooked frame named `name`.
#[track_caller]
fn frame_line<'a>(err: &'a str, name: &str) -> &'a str {
    let pat = format!(" {name} (");
    err.lines()
        .find(|l| l.starts_with('#') && l.contains(&pat))
        .unwrap_or_else(|| panic!("no frame of {name} in the report: {err}"))
}

/// The crate's `src/main.rs`: the guide's example (docs/examples/crashy.rs).
const CRASHY_MAIN: &str = include_str!("../../../docs/examples/crashy.rs");

/// A `cargo new` crate with the crashing program and the guide's runner.
fn crashy_crate(dir: &Path) -> PathBuf {
    must(tool("cargo", dir).args(["new", "--quiet", "--vcs", "none", "crashy"]));
    let krate = dir.join("crashy");
    std::fs::write(krate.join("src/main.rs"), CRASHY_MAIN).unwrap();
    std::fs::create_dir_all(krate.join(".cargo")).unwrap();
    let config = guide_block("toml");
    assert!(
        config.contains("runner = \"argstash run --func parse_record --\""),
        "{config}"
    );
    std::fs::write(krate.join(".cargo/config.toml"), config).unwrap();
    krate
}

/// `cargo run [--release] -- ID LEN` dies as the program does, after a report
/// that shows the printed arguments stashed.
fn cargo_run(release: bool) {
    let dir = scratch(if release { "release" } else { "debug" });
    let krate = crashy_crate(&dir);
    let (id, len) = record_args();
    let profile = if release { "release" } else { "debug" };
    let mut cmd = tool("cargo", &krate);
    cmd.arg("run");
    if release {
        cmd.arg("--release");
    }
    cmd.args(["--", &id.to_string(), &len.to_string()]);
    let out = run_command(&mut cmd, BUILD_TIMEOUT);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    // cargo runs the runner with the program's relative path and the arguments.
    assert!(
        err.contains(&format!(
            "Running `argstash run --func parse_record -- target/{profile}/crashy {id} {len}`"
        )),
        "{}",
        text(&out)
    );
    let (pid, plen) = printed_args(&err);
    assert!(
        err.contains(&format!("target/{profile}/crashy (pid ")) && err.contains("got SIGSEGV"),
        "{}",
        text(&out)
    );
    let line = frame_line(&err, "crashy::parse_record");
    assert!(line.contains("[stashed]"), "{line}");
    if release {
        // No debug info in cargo's release profile: the registers, in the ABI's order.
        assert!(line.contains(&format!("(rdi={pid}, rsi={plen},")), "{line}");
    } else {
        assert!(line.contains(&format!("(id={pid}, len={plen})")), "{line}");
    }
    // The program on its own, without cargo and argstash, dies the same way; cargo
    // execs the runner, so its own status is the program's.
    let direct = run_command(
        Command::new(krate.join("target").join(profile).join("crashy"))
            .args([id.to_string(), len.to_string()]),
        RUN_TIMEOUT,
    );
    assert_eq!(
        direct.status.signal(),
        Some(libc::SIGSEGV),
        "{}",
        text(&direct)
    );
    assert_eq!(
        out.status.signal(),
        direct.status.signal(),
        "{}",
        text(&out)
    );
    // And `cargo run` without the runner ends the same way.
    let plain = without_runner(&krate, || run_command(&mut cmd, BUILD_TIMEOUT));
    assert_eq!(
        plain.status.signal(),
        out.status.signal(),
        "{}",
        text(&plain)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// What `f` gives with the crate's `.cargo/config.toml` moved away.
fn without_runner<T>(krate: &Path, f: impl FnOnce() -> T) -> T {
    let config = krate.join(".cargo/config.toml");
    let aside = krate.join("config.toml.aside");
    std::fs::rename(&config, &aside).unwrap();
    let result = f();
    std::fs::rename(&aside, &config).unwrap();
    result
}

#[test]
fn cargo_run_with_guide_runner_reports_the_crash() {
    cargo_run(false);
}

#[test]
fn cargo_run_release_with_guide_runner_reports_the_crash() {
    cargo_run(true);
}

#[test]
fn cargo_test_with_guide_runner_reports_the_crashing_test() {
    let dir = scratch("test");
    let krate = crashy_crate(&dir);
    let (id, len) = record_args();
    let mut cmd = tool("cargo", &krate);
    cmd.arg("test")
        .env("CRASHY_ID", id.to_string())
        .env("CRASHY_LEN", len.to_string());
    let out = run_command(&mut cmd, BUILD_TIMEOUT);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let all = format!("{}{err}", String::from_utf8_lossy(&out.stdout));
    let (pid, plen) = printed_args(&all);
    assert_eq!(
        (pid.clone(), plen.clone()),
        (id.to_string(), len.to_string())
    );
    // The test thread crashed: its backtrace, with the stashed arguments.
    assert!(all.contains("got SIGSEGV in thread"), "{}", text(&out));
    let line = frame_line(&all, "crashy::parse_record");
    assert!(
        line.contains(&format!("(id={pid}, len={plen}) [stashed]")),
        "{line}"
    );
    assert!(
        all.contains("Thread ") && all.contains("\"tests::long_rec"),
        "the test's thread is named: {}",
        text(&out)
    );
    // cargo says what it says without the runner: the test binary died of SIGSEGV.
    assert_eq!(out.status.code(), Some(101), "{}", text(&out));
    assert!(
        err.contains("process didn't exit successfully: `argstash run --func parse_record -- ")
            && err.contains("(signal: 11, SIGSEGV"),
        "{}",
        text(&out)
    );
    let test_bin = err
        .split("Running unittests src/main.rs (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap_or_else(|| panic!("cargo named no test binary: {err}"));
    let direct = run_command(
        Command::new(krate.join(test_bin))
            .env("CRASHY_ID", id.to_string())
            .env("CRASHY_LEN", len.to_string()),
        RUN_TIMEOUT,
    );
    assert_eq!(
        direct.status.signal(),
        Some(libc::SIGSEGV),
        "{}",
        text(&direct)
    );
    // `cargo test` without the runner: the same status and the same account of it.
    let plain = without_runner(&krate, || run_command(&mut cmd, BUILD_TIMEOUT));
    assert_eq!(plain.status.code(), out.status.code(), "{}", text(&plain));
    let plain_err = String::from_utf8_lossy(&plain.stderr);
    assert!(
        plain_err.contains(&format!(
            "process didn't exit successfully: `{}` (signal: 11, SIGSEGV",
            krate.join(test_bin).display()
        )),
        "{}",
        text(&plain)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

const CRASHY_C: &str = r#"#include <stdio.h>
#include <stdlib.h>

/* Parses one record; a length over 8 writes through a null pointer: the crash. */
__attribute__((noinline)) long parse_record(long id, long len)
{
    if (len > 8) {
        volatile long *volatile header = NULL;
        *header = id;
    }
    return id * 31 + len;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    long id = atol(argv[1]), len = atol(argv[2]);
    printf("parse_record(%ld, %ld)\n", id, len);
    fflush(stdout);
    printf("%ld\n", parse_record(id, len));
    return 0;
}
"#;

#[test]
fn ctest_with_guide_emulator_line_reports_the_crashing_test() {
    let dir = scratch("cmake");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let cmake = guide_block("cmake");
    let line = cmake
        .lines()
        .find(|l| l.starts_with("set(CMAKE_CROSSCOMPILING_EMULATOR "))
        .unwrap_or_else(|| panic!("{GUIDE}'s cmake block has no emulator line: {cmake}"));
    let (id, len) = record_args();
    // As the guide says: the line goes before the targets it applies to.
    std::fs::write(
        src.join("CMakeLists.txt"),
        format!(
            "cmake_minimum_required(VERSION 3.15)\n\
             project(crashy C)\n\
             {line}\n\
             enable_testing()\n\
             add_executable(crashy crashy.c)\n\
             add_test(NAME long_record COMMAND crashy {id} {len})\n"
        ),
    )
    .unwrap();
    std::fs::write(src.join("crashy.c"), CRASHY_C).unwrap();
    let build = dir.join("build");
    must(tool("cmake", &dir).args([
        "-S",
        "src",
        "-B",
        "build",
        "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
    ]));
    must(tool("cmake", &dir).args(["--build", "build"]));
    let out = run_command(
        tool("ctest", &build).arg("--output-on-failure"),
        BUILD_TIMEOUT,
    );
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // CTest runs the test under argstash, reports it failed, and shows the report.
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        all.contains("1 tests failed out of 1") && all.contains("long_record (SEGFAULT)"),
        "{}",
        text(&out)
    );
    let (pid, plen) = printed_args(&all);
    assert_eq!(
        (pid.clone(), plen.clone()),
        (id.to_string(), len.to_string())
    );
    assert!(all.contains("got SIGSEGV in thread"), "{}", text(&out));
    let frame = frame_line(&all, "parse_record");
    assert!(
        frame.contains(&format!("(id={pid}, len={plen}) [stashed]")),
        "{frame}"
    );
    // The program alone dies of the same signal.
    let direct = run_command(
        Command::new(build.join("crashy")).args([id.to_string(), len.to_string()]),
        RUN_TIMEOUT,
    );
    assert_eq!(
        direct.status.signal(),
        Some(libc::SIGSEGV),
        "{}",
        text(&direct)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
