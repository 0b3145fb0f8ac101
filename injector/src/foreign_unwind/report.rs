//! What telling other unwinders about hooks did: the report each part adds to.

use std::path::PathBuf;
use std::time::Duration;

/// What `register` or `unregister` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnwindReport {
    /// Hooks whose `.eh_frame` is registered with (or was removed from) the in-process unwinder.
    pub registered: usize,
    /// The module providing the in-process unwinder, when there is one.
    pub unwinder: Option<String>,
    /// Why some hooks are not (un)registered, for logs and `list`.
    pub notes: Vec<String>,
    /// The perf map file written or cleaned.
    pub perf_map: Option<PathBuf>,
    /// The perf jitdump (`/tmp/jit-PID.dump`) written and mapped, or unmapped and removed.
    pub perf_jitdump: Option<PathBuf>,
    /// Part of `elapsed` spent on the perf jitdump (writing it, remote open/mmap/close or munmap).
    pub perf_jitdump_elapsed: Duration,
    /// The gdb symbol file describing the active hooks (`add-symbol-file PATH`), if any are left.
    pub symbol_file: Option<PathBuf>,
    /// Hooks linked into (or unlinked from) the target's GDB JIT descriptor.
    pub gdb_jit: usize,
    /// Time spent on all of it (after the stop; only a borrowed thread is held meanwhile).
    pub elapsed: Duration,
}
