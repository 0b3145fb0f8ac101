//! Fuzz targets for every argstash reader of bytes it does not control, and the
//! pieces of a fuzzing driver that runs on stable Rust.
//!
//! A crate of its own because it is the one place that depends on every reader
//! at once (core files, ELF and DWARF, arenas, the unwinder, the Python reader,
//! the on-disk caches, signatures, the prologue relocator): the readers' crates
//! stay free of fuzzing code, and the driver binary (`argstash-fuzz`) can be
//! built with a plain stable toolchain for CI.
//!
//! - [`targets`]: one `fuzz_<name>(data: &[u8])` per target, driving the
//!   reader's public entry points.
//! - [`image`]: a target's memory decoded from fuzz bytes (the reader's
//!   [`reader::memory::Memory`] seam), so memory readers are fuzzed without a process.
//! - [`mutate`]: the mutator (byte flips, splices, inserts, truncation, interesting integers).
//! - [`seeds`]: seed inputs recorded from real inputs (compiled fixtures, libc,
//!   a live CPython, this process's own stack, argstash's own encoders).
//!
//! See docs/FUZZING.md for how to run it.

#![deny(missing_docs)]

pub mod image;
pub mod mutate;
pub mod seeds;
pub mod targets;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

static SCRATCH: OnceLock<PathBuf> = OnceLock::new();

/// Sets the directory the file-reading targets write their inputs into (once,
/// before the first input); it gets empty `sysroot` and `debug` subdirectories.
pub fn set_scratch(dir: &Path) -> std::io::Result<()> {
    for sub in ["sysroot", "debug", "cache"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    let _ = SCRATCH.set(dir.to_path_buf());
    Ok(())
}

/// The scratch directory: as set, else `target/fuzz-scratch/<pid>` under the
/// current directory (never the system temp directory).
pub fn scratch() -> &'static Path {
    SCRATCH.get_or_init(|| {
        let dir = std::env::current_dir()
            .unwrap_or_default()
            .join("target/fuzz-scratch")
            .join(std::process::id().to_string());
        for sub in ["sysroot", "debug", "cache"] {
            let _ = std::fs::create_dir_all(dir.join(sub));
        }
        dir
    })
}
