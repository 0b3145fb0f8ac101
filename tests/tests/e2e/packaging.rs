//! The man pages and shell completions under packaging/ (generated from the clap
//! definitions by scripts/packaging-files.sh, shipped by the Debian package): they are
//! what the current binaries print, the man pages render without warnings, and the
//! bash completion completes a subcommand and an option in a real bash.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use argstash_tests::{argstash, argstashd, output_text, run_command, workspace_root, RUN_TIMEOUT};

const REGENERATE: &str = "run scripts/packaging-files.sh and commit packaging/";

fn packaging() -> PathBuf {
    workspace_root().join("packaging")
}

/// Runs `cmd`, which must succeed; returns stdout.
fn ok(cmd: &mut Command) -> Vec<u8> {
    let out = run_command(cmd, RUN_TIMEOUT);
    assert!(out.status.success(), "{cmd:?}:\n{}", output_text(&out));
    out.stdout
}

fn names(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e} ({REGENERATE})", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn generated_files_are_current() {
    let fresh = std::env::temp_dir().join(format!("argstash-packaging-{}", std::process::id()));
    let _ = fs::remove_dir_all(&fresh);
    ok(Command::new(argstash()).arg("man-pages").arg(&fresh));
    let daemon_page = ok(Command::new(argstashd()).arg("--print-man-page"));
    fs::write(fresh.join("argstashd.8"), daemon_page).unwrap();

    let committed = packaging().join("man");
    let (want, have) = (names(&fresh), names(&committed));
    assert!(
        want.contains("argstash.1")
            && want.contains("argstash-bt.1")
            && want.contains("argstash-inject.1"),
        "argstash man-pages wrote {want:?}: no argstash.1 or per-subcommand pages"
    );
    assert!(
        !want.contains("argstash-man-pages.1"),
        "the hidden generator got a page: {want:?}"
    );
    assert_eq!(
        want, have,
        "packaging/man has other pages than the binaries write: {REGENERATE}"
    );
    let mut stale = Vec::new();
    for name in &want {
        if fs::read(fresh.join(name)).unwrap() != fs::read(committed.join(name)).unwrap() {
            stale.push(name.clone());
        }
    }
    for (shell, file) in [
        ("bash", "argstash.bash"),
        ("zsh", "_argstash"),
        ("fish", "argstash.fish"),
    ] {
        let script = ok(Command::new(argstash()).args(["completions", shell]));
        assert!(
            script.len() > 1000,
            "argstash completions {shell} printed {} bytes",
            script.len()
        );
        let path = packaging().join("completions").join(file);
        if fs::read(&path).ok().as_deref() != Some(script.as_slice()) {
            stale.push(format!("completions/{file}"));
        }
    }
    let _ = fs::remove_dir_all(&fresh);
    assert!(
        stale.is_empty(),
        "not current under packaging/: {stale:?}: {REGENERATE}"
    );
}

#[test]
fn man_pages_render_without_warnings() {
    let dir = packaging().join("man");
    let pages = names(&dir);
    assert!(pages.len() >= 9, "packaging/man holds {pages:?}");
    for page in &pages {
        let path = dir.join(page);
        // -ww: every warning; -z: format, print nothing. Warnings go to stderr.
        let out = run_command(
            Command::new("groff")
                .args(["-man", "-Tutf8", "-ww", "-z"])
                .arg(&path)
                .env("LC_ALL", "C.UTF-8"),
            RUN_TIMEOUT,
        );
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "groff on {page}:\n{}",
            output_text(&out)
        );
        // What a user sees: `man -l FILE` renders it (as text, no pager).
        let text = ok(Command::new("man")
            .arg("-l")
            .arg(&path)
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "100")
            .env("LC_ALL", "C.UTF-8"));
        let text = String::from_utf8_lossy(&text);
        let title = page.rsplit_once('.').unwrap().0;
        for want in ["NAME", "SYNOPSIS", "OPTIONS", title] {
            assert!(text.contains(want), "man -l {page} lacks {want:?}:\n{text}");
        }
    }
    // The per-subcommand pages say what their options do, from the clap docs.
    let bt = String::from_utf8_lossy(&ok(Command::new("man")
        .arg("-l")
        .arg(dir.join("argstash-bt.1"))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "200")))
    .into_owned();
    assert!(
        bt.contains("--pid") && bt.contains("Target process id"),
        "argstash-bt.1:\n{bt}"
    );
    let daemon = String::from_utf8_lossy(&ok(Command::new("man")
        .arg("-l")
        .arg(dir.join("argstashd.8"))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "200")))
    .into_owned();
    assert!(
        daemon.contains("argstashd(8)") && daemon.contains("--state-dir"),
        "argstashd.8:\n{daemon}"
    );
    assert!(
        !daemon.contains("print-man-page"),
        "the hidden flag is in argstashd.8:\n{daemon}"
    );
}

/// Runs `script` in a real bash after sourcing the committed bash completion.
fn bash(script: &str) -> String {
    let completion = packaging().join("completions/argstash.bash");
    let out = ok(Command::new("bash")
        .arg("--norc")
        .arg("--noprofile")
        .arg("-c")
        .arg(format!("source \"$1\"\n{script}"))
        .arg("bash")
        .arg(&completion));
    String::from_utf8_lossy(&out).into_owned()
}

/// What the completion function offers for the command line `words` (the cursor at
/// the end of the last word), one candidate per line, as bash would compute it on TAB.
fn complete(words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let line = words.join(" ");
    let script = format!(
        "COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{line}'; COMP_POINT={}\n\
         \"${{func}}\" argstash '{}' '{}'\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        quoted.join(" "),
        words.len() - 1,
        line.len(),
        words[words.len() - 1],
        words[words.len() - 2],
    );
    // The function bash calls is whatever `complete -p argstash` registered.
    let script =
        format!("func=$(complete -p argstash | sed -n 's/.*-F \\([^ ]*\\) .*/\\1/p')\n{script}");
    bash(&script).lines().map(str::to_string).collect()
}

#[test]
fn bash_completion_completes_subcommands_and_options() {
    let registered = bash("complete -p argstash");
    assert!(
        registered.contains("-F _argstash") && registered.trim_end().ends_with(" argstash"),
        "complete -p argstash: {registered}"
    );
    // A subcommand from its first letters.
    assert_eq!(complete(&["argstash", "b"]), ["bt"]);
    let all = complete(&["argstash", ""]);
    for sub in [
        "inject",
        "eject",
        "list",
        "bt",
        "record",
        "run",
        "demo",
        "completions",
    ] {
        assert!(all.contains(&sub.to_string()), "no {sub} in {all:?}");
    }
    assert!(
        !all.contains(&"man-pages".to_string()),
        "the hidden generator is offered: {all:?}"
    );
    // A subcommand's options.
    assert_eq!(complete(&["argstash", "bt", "--p"]), ["--pid", "--python"]);
    let inject = complete(&["argstash", "inject", "--st"]);
    assert_eq!(inject, ["--stack-args"]);
    // A value from a closed set.
    assert_eq!(complete(&["argstash", "completions", "f"]), ["fish"]);
}
