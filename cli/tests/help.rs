//! `argstash --help` as a newcomer reads it: the first line names every subcommand.

use std::process::Command;

#[test]
fn the_summary_line_names_every_subcommand() {
    let out = Command::new(env!("CARGO_BIN_EXE_argstash"))
        .arg("--help")
        .output()
        .expect("argstash --help runs");
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).expect("utf-8");
    let summary = help.lines().next().expect("a first line");
    // The subcommands as clap lists them, between "Commands:" and the next heading.
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 7, "commands found: {commands:?}\n{help}");
    for c in &commands {
        let named = summary
            .split(|ch: char| !ch.is_ascii_alphanumeric())
            .any(|w| w == *c);
        assert!(named, "`{c}` missing from the summary line: {summary}");
    }
}
