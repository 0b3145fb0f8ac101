//! argstashd's own errors when it cannot start: each cause said once, with the fix.
//!
//! Real runs of the built binary against bus addresses that cannot work: a
//! socket path where no dbus-daemon listens, and an address D-Bus cannot parse.

use std::process::Command;
use std::time::Duration;

use argstash_tests::run_command;

/// Runs argstashd with `args`; returns its exit code and stderr. Fails the test
/// if it has not ended within 20 s (it must give up, not wait for a bus).
fn argstashd(args: &[&str]) -> (Option<i32>, String) {
    let state = std::env::temp_dir().join(format!("argstashd-startup-{}", std::process::id()));
    let out = run_command(
        Command::new(env!("CARGO_BIN_EXE_argstashd"))
            .args(args)
            .arg("--state-dir")
            .arg(&state),
        Duration::from_secs(20),
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_bus_nobody_listens_on_is_named_once_with_the_fix() {
    let dir = std::env::temp_dir().join(format!("argstashd-nobus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("bus");
    let address = format!("unix:path={}", socket.display());
    let (code, err) = argstashd(&["--address", &address]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(code, Some(1), "stderr: {err}");
    let enoent = std::io::Error::from_raw_os_error(libc::ENOENT).to_string();
    assert_eq!(
        err.matches(&enoent).count(),
        1,
        "the OS error is said exactly once: {err}"
    );
    assert!(err.contains(&address), "names the address: {err}");
    assert!(
        err.contains("dbus-daemon") && err.contains("--address"),
        "says what to do: {err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
}

#[test]
fn an_address_dbus_cannot_read_says_how_to_write_one() {
    let (code, err) = argstashd(&["--address", "nonsense"]);
    assert_eq!(code, Some(1), "stderr: {err}");
    assert!(err.contains("bad bus address nonsense"), "{err}");
    assert!(err.contains("unix:path="), "shows the form: {err}");
}
