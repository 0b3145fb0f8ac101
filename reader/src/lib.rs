//! Reading a target without changing it: the half of argstash that needs no ptrace.
//!
//! A separate crate so that Cargo enforces the layering: everything here works from
//! a [`memory::Memory`] (a live process's memory, a stack snapshot, a core file)
//! and files on disk, never stops or writes a process, and does not depend on
//! `nix`. The injector (ptrace, hooks), the Python extension and the profiler all
//! build on it, as py-spy builds on its `remoteprocess` and addr2line on gimli.
//!
//! Layers, each using only those above it:
//!
//! - [`procfs`]: `/proc/PID/maps`, auxv.
//! - [`memory`]: the [`memory::Memory`] and [`memory::WriteMemory`] traits, stack snapshots.
//! - `dwarf` (private): the gimli reader type shared by the DWARF readers.
//! - [`args`]: the type model, DWARF parameters, user signatures, ABI placement
//!   per architecture, value formatting.
//! - [`symbols`], [`debuginfo`]: ELF symbol tables, separate debug files, DWARF.
//! - [`arena`]: the hooks' arenas found in a target's memory.
//! - [`unwind`]: frames, stash frames, the x86-64 and i386 unwinders.
//! - [`process_view`]: one view of a process (symbols, Python, unwinder, arenas)
//!   and the rule for when it is stale; live backtraces, the sampler and cores use it.
//! - [`core`]: core files as a memory, thread and module source.
//! - [`coredump`]: cores stored by systemd-coredump, found by pid, name or age.
//! - [`python`]: CPython's threads, frames and arguments, paired with native frames.
//!
//! Each public module is a front door of its own: its submodules are private
//! where callers need only a few of their items (`python`, `unwind`'s CFA
//! rules), which it re-exports; the per-architecture modules (`args::x86_64`,
//! `unwind::i386`, ...) and the on-disk answer format (`debuginfo::answers`, which
//! a fuzz target reads) stay public. Errors are each module's own (`SymbolError`,
//! `CoreError`, `ArenaError`, `PythonError`...): there is no catch-all error type.

#![deny(missing_docs)]

pub mod arena;
pub mod args;
pub mod core;
pub mod coredump;
pub mod debugfile;
pub mod debuginfo;
mod dwarf;
pub mod dwarf_cache;
pub mod hint;
pub mod ids;
pub mod memory;
pub mod process_view;
pub mod procfs;
pub mod python;
pub mod shared_file;
pub mod symbols;
pub mod unwind;
