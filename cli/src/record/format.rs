//! The output file: its format by extension, checked before anything touches
//! the target, and written at the end.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::profile::Profile;
use super::{collapsed, pprof, speedscope, svg};

/// The formats `record` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// An interactive flame graph (inferno).
    Svg,
    /// The speedscope file format.
    Speedscope,
    /// Collapsed stacks (`flamegraph.pl` / inferno input).
    Collapsed,
    /// pprof's profile.proto, gzip-compressed (`go tool pprof`, Pyroscope, Parca).
    Pprof,
}

/// What `-o` names: a path and the format its extension asks for.
#[derive(Debug, Clone)]
pub struct Output {
    /// The path.
    pub path: PathBuf,
    /// The format.
    pub format: Format,
}

/// The supported extensions, as error messages list them.
pub const SUPPORTED: &str =
    ".svg (flame graph), .json (speedscope), .txt (collapsed stacks), .pb.gz (pprof)";

/// Parses `-o FILE` (clap value parser): the extension must be a supported one.
pub fn parse_output(s: &str) -> Result<Output, String> {
    let path = PathBuf::from(s);
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("{s}: not a file name; give -o FILE ending in {SUPPORTED}"))?
        .to_ascii_lowercase();
    let format = if name.ends_with(".svg") {
        Format::Svg
    } else if name.ends_with(".json") {
        Format::Speedscope
    } else if name.ends_with(".txt") {
        Format::Collapsed
    } else if name.ends_with(".pb.gz") {
        Format::Pprof
    } else if name.ends_with(".pb") {
        return Err(format!(
            "{s}: pprof profiles are written gzip-compressed, as pprof's readers expect: \
             name the file NAME.pb.gz"
        ));
    } else {
        let ext = name.rsplit_once('.').map_or("(none)", |(_, e)| e);
        return Err(format!(
            "unknown output extension .{}: use {SUPPORTED}",
            ext.trim_start_matches("(none)")
        ));
    };
    Ok(Output { path, format })
}

/// An output file opened before sampling starts, so that an unwritable path
/// fails before the target is touched.
pub struct OpenOutput {
    output: Output,
    file: File,
    created: bool,
}

impl Output {
    /// Opens the file for writing now (without truncating an existing one yet).
    pub fn open(&self) -> Result<OpenOutput> {
        let existed = self.path.exists();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .with_context(|| {
                format!(
                    "cannot write the profile to {}: checked before sampling, nothing was done to the target",
                    self.path.display()
                )
            })?;
        Ok(OpenOutput {
            output: self.clone(),
            file,
            created: !existed,
        })
    }
}

impl OpenOutput {
    /// Writes the profile; `wall`: its samples stand for wall-clock time (`--idle`).
    pub fn write(self, profile: &Profile, wall: bool) -> Result<()> {
        let OpenOutput { output, file, .. } = self;
        file.set_len(0)
            .with_context(|| format!("cannot truncate {}", output.path.display()))?;
        let mut w = BufWriter::new(file);
        match output.format {
            Format::Collapsed => collapsed::write(profile, &mut w)?,
            Format::Svg => svg::write(profile, &title(&output.path), &mut w)?,
            Format::Speedscope => speedscope::write(profile, &title(&output.path), &mut w)?,
            Format::Pprof => pprof::write(profile, wall, &mut w)?,
        }
        w.flush()
            .with_context(|| format!("cannot write {}", output.path.display()))?;
        Ok(())
    }

    /// Takes back a file this run created, when no profile is written after all.
    pub fn discard(self) {
        if self.created {
            let _ = std::fs::remove_file(&self.output.path);
        }
    }
}

fn title(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_choose_the_format() {
        assert_eq!(parse_output("a.svg").unwrap().format, Format::Svg);
        assert_eq!(parse_output("A.JSON").unwrap().format, Format::Speedscope);
        assert_eq!(parse_output("d/a.txt").unwrap().format, Format::Collapsed);
        assert_eq!(parse_output("a.PB.GZ").unwrap().format, Format::Pprof);
        let e = parse_output("a.pb").unwrap_err();
        assert!(e.contains("gzip") && e.contains(".pb.gz"), "{e}");
        let e = parse_output("a.png").unwrap_err();
        assert!(e.contains("unknown output extension .png"), "{e}");
        assert!(parse_output("noext").unwrap_err().contains("extension"));
    }
}
