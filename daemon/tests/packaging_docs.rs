//! packaging/README.md's private-bus recipe, run as written: its dbus-daemon
//! configuration must let argstashd own its name and busctl reach it.
//!
//! The shell block under "Without systemd" is run by bash with `/tmp/` moved
//! into a directory of the test's own and the built argstashd first on PATH;
//! the block's last line (busctl) is then retried until the daemon has come up.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

/// The ```sh block that follows the line starting with `marker` in `text`.
fn shell_block_after(text: &str, marker: &str) -> String {
    let after = &text[text.find(marker).expect("the recipe is in the README")..];
    let start = after.find("```sh\n").expect("a sh block") + "```sh\n".len();
    let len = after[start..].find("```").expect("the block ends");
    after[start..start + len].to_string()
}

#[test]
fn the_private_bus_recipe_works_as_written() {
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../packaging/README.md"
    ))
    .expect("packaging/README.md");
    let block = shell_block_after(&readme, "Without systemd, a private bus works too");
    let mut lines: Vec<&str> = block.lines().collect();
    let busctl = lines.pop().expect("the block ends with busctl");
    assert!(busctl.starts_with("busctl "), "last line: {busctl}");

    let dir = std::env::temp_dir().join(format!("argstash-recipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let here = |s: &str| s.replace("/tmp/", &format!("{}/", dir.display()));
    let script = here(&lines.join("\n"));
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_argstashd"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The block's background jobs share the script's process group, ended below.
    let setup = Command::new("bash")
        .arg("-c")
        .arg(format!("{script}\nwait"))
        .env("PATH", &path)
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("bash runs the recipe");
    let group = setup.id() as i32;

    let deadline = Instant::now() + Duration::from_secs(60);
    let tree = loop {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!("timeout 5 {}", here(busctl)))
            .env("PATH", &path)
            .output()
            .expect("busctl runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && stdout.contains("/org/argstash/Injector1") {
            break Ok(stdout);
        }
        if Instant::now() > deadline {
            break Err(format!(
                "busctl never listed the service: status {:?}\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    // SAFETY: kill(2) on the process group the recipe's bash leads; no memory involved.
    unsafe {
        libc::kill(-group, libc::SIGTERM);
    }
    let logs = setup.wait_with_output().expect("recipe ends");
    let logs = String::from_utf8_lossy(&logs.stderr).into_owned();
    std::fs::remove_dir_all(&dir).ok();
    let tree = tree.unwrap_or_else(|e| panic!("{e}\nlogs:\n{logs}"));
    assert!(tree.contains("/org/argstash/Injector1"), "{tree}");
    assert!(
        !logs.contains("Rejected"),
        "the bus rejected messages under the documented policy:\n{logs}"
    );
}
