//! argstash's end-to-end tests: one test binary, one module per subject (it
//! links once, where one binary per file meant 22 links of the harness and
//! its dependencies). Test names carry the module, so `scripts/test.sh seed::`
//! or `cargo test -p argstash-tests --test e2e seed::` runs one subject.
//!
//! All modules share one test process, and tests of different modules run at
//! the same time (`--test-threads=2` in scripts/test.sh). So a test changes
//! nothing process-wide (no environment variables, signal handlers or limits
//! of the test process; a target's limits are set with `prlimit`), names its
//! temporary files after the process id and its subject, and takes shared
//! helpers from the `argstash_tests` library, not from another module.

mod bad_input;
mod blocked;
mod busy_targets;
mod cold_parts;
mod concurrency;
mod core;
mod coredump;
mod deb;
mod dwarf;
mod dwarf_cache;
mod exceptions;
mod exit_codes;
mod faults;
mod foreign_unwind;
mod i386;
mod job_control;
mod jump_tables;
mod lifecycle;
mod many_args;
mod names;
mod packaging;
mod python;
mod python313;
mod python_hook_refusal;
mod real_code;
mod record;
mod record_counts;
mod record_naming;
mod record_pprof;
mod riprel;
mod run;
mod runners;
mod seed;
mod shared_files;
mod sid_safe_points;
mod signals;
mod stack_args;
mod stress;
mod symbols;
mod sysroot_core;
mod tail_call;
mod threads;
mod variadic_tail;
mod vdso;
mod vector_state;
