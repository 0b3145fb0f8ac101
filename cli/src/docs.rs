//! The documentation generated from the command-line definitions: shell completions
//! (`argstash completions SHELL`) and man pages (the hidden `argstash man-pages DIR`,
//! run by scripts/packaging-files.sh to refresh the copies under packaging/).

use std::path::Path;

use anyhow::{Context, Result};
use clap::Command;
use clap_complete::Shell;

/// Writes the completion script for `shell` to stdout.
pub fn completions(cmd: Command, shell: Shell) {
    let mut cmd = visible(cmd);
    clap_complete::generate(shell, &mut cmd, "argstash", &mut std::io::stdout());
}

/// `cmd` (argstash's) without its hidden subcommands, which clap_complete would otherwise offer.
fn visible(cmd: Command) -> Command {
    let subcommands: Vec<Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let mut out = Command::new("argstash")
        .args(cmd.get_arguments().cloned())
        .subcommands(subcommands)
        .subcommand_required(cmd.is_subcommand_required_set())
        .version(env!("CARGO_PKG_VERSION"));
    if let Some(about) = cmd.get_about() {
        out = out.about(about.clone());
    }
    out
}

/// Writes `argstash.1` and one `argstash-SUBCOMMAND.1` per visible subcommand into `dir`.
pub fn man_pages(cmd: Command, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(cmd, dir)
        .with_context(|| format!("writing the man pages into {}", dir.display()))
}
