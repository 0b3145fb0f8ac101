//! Collapsed stacks: `root;caller;leaf COUNT` per line, the input of
//! `flamegraph.pl` and inferno.

use std::io::Write;

use anyhow::Result;

use super::profile::Profile;

/// The collapsed lines of a profile, sorted (the order inferno expects).
pub fn lines(p: &Profile) -> Vec<String> {
    let mut out: Vec<String> = p
        .stacks
        .iter()
        .zip(p.stack_counts())
        .filter(|(_, n)| *n > 0)
        .map(|(stack, n)| {
            let names: Vec<&str> = stack
                .iter()
                .map(|f| p.frames[*f as usize].name.as_str())
                .collect();
            format!("{} {n}", names.join(";"))
        })
        .collect();
    out.sort();
    out
}

/// Writes the collapsed stacks.
pub fn write(p: &Profile, w: &mut dyn Write) -> Result<()> {
    for line in lines(p) {
        writeln!(w, "{line}")?;
    }
    Ok(())
}
