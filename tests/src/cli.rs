//! Running the `argstash` binary: building it once, running it with a
//! timeout, checking its exit code and output, and the `bt` and `list`
//! commands tests poll.

use std::ffi::OsStr;
use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Once;
use std::time::Duration;

use crate::command::{check_tool, run_command, wait_until, Background};
use crate::fixtures::{profile_dir, workspace_root};

/// Default timeout of [`run`] and friends for one `argstash` invocation.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Default timeout of the end-to-end helpers (a fixture's line, a backtrace state).
pub const E2E_TIMEOUT: Duration = Duration::from_secs(10);

/// Path of the `argstash` binary (package `argstash` in `cli/`), built on first use.
///
/// `env!("CARGO_BIN_EXE_argstash")` only exists for integration tests of the
/// `argstash` package itself, and `cargo test` does not build a package's
/// binaries for another package's tests. So: `$ARGSTASH_BIN` if set;
/// otherwise, once per test process, run `cargo build -p argstash` (with
/// `--release` when this test executable is a release build; a no-op when
/// up to date, and it keeps the binary from being stale) and return
/// `<profile dir>/argstash`, found next to this test executable
/// (`target/<profile>/deps/..`). Cargo releases its build lock before it
/// runs tests, so the nested build does not deadlock.
pub fn argstash() -> PathBuf {
    static BUILD: Once = Once::new();
    built_binary("ARGSTASH_BIN", "argstash", "argstash", &BUILD)
}

/// Path of the `argstashd` binary (package `argstashd` in `daemon/`), built on first
/// use like [`argstash`]; `$ARGSTASHD_BIN` if set.
pub fn argstashd() -> PathBuf {
    static BUILD: Once = Once::new();
    built_binary("ARGSTASHD_BIN", "argstashd", "argstashd", &BUILD)
}

/// `$env_var` if set, else `<profile dir>/bin` after one `cargo build -p package --bin bin`.
fn built_binary(env_var: &str, package: &str, bin_name: &str, build: &Once) -> PathBuf {
    if let Some(p) = std::env::var_os(env_var) {
        return PathBuf::from(p);
    }
    let profile = profile_dir();
    let bin = profile.join(bin_name);
    build.call_once(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(workspace_root())
            .args(["build", "--quiet", "-p", package, "--bin", bin_name]);
        if profile.file_name() == Some(OsStr::new("release")) {
            cmd.arg("--release");
        }
        // Same target dir as this executable's (cargo marks its root with CACHEDIR.TAG;
        // with `--target <triple>` the profile dir is one level deeper and we rely on
        // the default / $CARGO_TARGET_DIR instead).
        if let Some(target) = profile
            .parent()
            .filter(|t| t.join("CACHEDIR.TAG").is_file())
        {
            cmd.arg("--target-dir").arg(target);
        }
        check_tool(&mut cmd, &format!("build the {bin_name} binary"));
    });
    assert!(bin.is_file(), "{} missing after cargo build", bin.display());
    bin
}

/// A `Command` for `argstash` with `args`, stdin from /dev/null.
pub fn argstash_cmd(args: &[&str]) -> Command {
    let mut cmd = Command::new(argstash());
    cmd.args(args).stdin(Stdio::null());
    cmd
}

/// Run `argstash args...` (timeout [`RUN_TIMEOUT`]) and return its output, whatever the exit code.
pub fn run(args: &[&str]) -> Output {
    run_command(&mut argstash_cmd(args), RUN_TIMEOUT)
}

/// The command and its status and output, for an assertion's message.
pub(crate) fn describe(args: &[&str], out: &Output) -> String {
    format!(
        "argstash {}\n  status: {}\n--- stdout:\n{}--- stderr:\n{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Run `argstash args...`, assert exit code 0, return stdout.
#[track_caller]
pub fn run_ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "expected success: {}",
        describe(args, &out)
    );
    String::from_utf8(out.stdout.clone())
        .unwrap_or_else(|_| panic!("stdout is not UTF-8: {}", describe(args, &out)))
}

/// Run `argstash args...`, assert success, parse stdout as one JSON value.
#[track_caller]
pub fn run_json(args: &[&str]) -> serde_json::Value {
    let out = run(args);
    assert!(
        out.status.success(),
        "expected success: {}",
        describe(args, &out)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", describe(args, &out)))
}

/// Run `argstash args...`, assert exit code `code` and that stderr contains `needle`.
#[track_caller]
pub fn expect_fail(args: &[&str], code: i32, needle: &str) -> Output {
    let out = run(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "wrong exit code: {}",
        describe(args, &out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(needle),
        "stderr lacks {needle:?}: {}",
        describe(args, &out)
    );
    out
}

/// Run `argstash args...` inside the pid and mount namespaces of process `pid` (via `nsenter`).
pub fn run_in_namespace_of(pid: i32, args: &[&str]) -> Output {
    let mut cmd = Command::new("nsenter");
    cmd.args(["--target", &pid.to_string(), "--pid", "--mount"])
        .arg(argstash())
        .args(args)
        .stdin(Stdio::null());
    run_command(&mut cmd, RUN_TIMEOUT)
}

/// `argstash bt --pid PID --json`, or `--tid TID` for one thread; asserts success.
#[track_caller]
pub fn bt_json(pid: i32, tid: Option<i32>) -> serde_json::Value {
    let pid_s = pid.to_string();
    let mut args = vec!["bt", "--pid", &pid_s, "--json"];
    let tid_s = tid.map(|t| t.to_string());
    if let Some(t) = &tid_s {
        args.extend(["--tid", t.as_str()]);
    }
    run_json(&args)
}

/// Poll `bt --json` (every 10 ms, up to `timeout`) until `pred` holds; panics with the last one.
#[track_caller]
pub fn wait_bt(
    pid: i32,
    tid: Option<i32>,
    timeout: Duration,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    let mut found = None;
    wait_until(timeout, || {
        let bt = bt_json(pid, tid);
        if pred(&bt) {
            found = Some(bt);
            return true;
        }
        last = bt;
        false
    });
    found.unwrap_or_else(|| {
        panic!(
            "no backtrace of pid {pid} met the condition within {timeout:?}; last:\n{}",
            serde_json::to_string_pretty(&last).unwrap_or_default()
        )
    })
}

/// The `hooks` array of `argstash list --pid PID --json`.
#[track_caller]
pub fn list_hooks(pid: i32) -> Vec<serde_json::Value> {
    let v = run_json(&["list", "--pid", &pid.to_string(), "--json"]);
    assert_eq!(v["pid"].as_i64(), Some(i64::from(pid)), "list JSON: {v}");
    v["hooks"]
        .as_array()
        .unwrap_or_else(|| panic!("list JSON without hooks: {v}"))
        .clone()
}

/// Lowercase hex of `bytes` separated by spaces (`e9 2b 5c`), as argstash's messages print bytes.
pub fn hex_bytes(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Remove the files argstash writes for a process in /tmp (perf map, jitdump, gdb symbols).
pub fn remove_argstash_tmp_files(pid: i32) {
    for f in [
        format!("/tmp/perf-{pid}.map"),
        format!("/tmp/jit-{pid}.dump"),
        format!("/tmp/argstash-{pid}.elf"),
    ] {
        let _ = fs::remove_file(f);
    }
}

impl Background {
    /// Start `argstash args...`.
    pub fn argstash(args: &[&str]) -> Background {
        Background::spawn(&mut argstash_cmd(args))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argstash_binary_is_built() {
        let bin = argstash();
        assert!(bin.is_file(), "{}", bin.display());
        assert_eq!(bin.file_name(), Some(OsStr::new("argstash")));
    }
}
