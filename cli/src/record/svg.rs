//! The interactive flame graph (inferno's SVG, with its search and zoom script).

use std::io::Write;

use anyhow::{Context, Result};
use inferno::flamegraph::{self, Options};

use super::collapsed;
use super::profile::Profile;

/// Writes the flame graph of `p`.
pub fn write(p: &Profile, title: &str, w: &mut dyn Write) -> Result<()> {
    let lines = collapsed::lines(p);
    let mut opts = Options::default();
    opts.title = format!("argstash record: {title}");
    opts.subtitle = Some(format!(
        "{} samples at {} Hz per thread, {} threads",
        p.samples(),
        p.rate,
        p.threads.len()
    ));
    opts.count_name = "samples".to_string();
    if lines.is_empty() {
        // inferno refuses an empty profile; an empty graph still says what happened.
        let empty = ["(no samples) 1".to_string()];
        return flamegraph::from_lines(&mut opts, empty.iter().map(String::as_str), w)
            .context("cannot render the flame graph");
    }
    flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), w)
        .context("cannot render the flame graph")
}
