//! argstash's one test harness: the end-to-end tests here, and every other
//! crate's tests (`injector`'s and `reader`'s unit tests, `argstashd`'s
//! integration tests) as a dev-dependency. It depends on no argstash crate (it
//! only builds programs, runs them and reads `/proc` and ELF files), so it is a
//! dev-dependency of `injector` and `reader` without a cycle.
//!
//! The modules, by role:
//! - [`fixtures`]: compile a C fixture from `tests/fixtures/` in a chosen
//!   [`Variant`] (optimisation, PIE or not, extra flags) into a content-hashed
//!   cache under `target/fixtures/` ([`build`], [`build_i386`],
//!   [`m32_available`]); programs given as text or from another directory
//!   ([`build_source`], [`try_build_sources`], [`build_file`]) and any other
//!   build ([`build_cached`]) share that cache;
//! - [`consts`]: what the fixtures promise (arguments, results, thread
//!   counts); the header comment of each `tests/fixtures/*.c` documents the
//!   rest of its behaviour;
//! - [`process`]: a running fixture ([`Target`]), synchronised on its
//!   `ready <pid>` (or bare `ready`) line, whose further stdout lines a test can
//!   read, killed and reaped on drop (and when the test process dies); a
//!   command in the background ([`Background`]);
//! - [`cli`]: run the real `argstash` binary with a timeout ([`argstash`],
//!   [`run`], [`run_ok`], [`run_json`], [`expect_fail`], [`bt_json`],
//!   [`list_hooks`]);
//! - [`json`]: accessors of the JSON that `bt` and `list` print;
//! - [`procfs`]: oracles from `/proc` ([`read_mem`], [`maps`],
//!   [`runtime_addr`], [`thread_ids`], [`tracer_pid`], [`proc_state`],
//!   [`thread_status`], [`wait_all_blocked`]);
//! - [`elf`]: oracles from the ELF file ([`file_bytes_at_vaddr`], [`symbol`])
//!   and an objdump wrapper ([`disassemble`], [`branch_targets`]),
//!   independent of the injector's own decoder;
//! - [`checks`]: what argstash must leave in a target ([`Untouched`],
//!   [`refused`], [`entry_state`]);
//! - [`crash`]: the crash.c fixture hooked and called as the core-file tests
//!   need it ([`allow_core_dumps`], [`hook_and_call_crash_fixture`]);
//! - [`faults`]: seeds, kill points and outcomes of the fault and soak tests;
//! - [`profile`]: run `argstash record` and read its collapsed stacks and summary.
//!
//! Everything is re-exported here, so `use argstash_tests::*;` gives a test
//! all of it.
//!
//! External tools used: `cc`, `strip`, `nm`, `objdump` (installed by
//! `scripts/setup.sh`). Everything here panics with a descriptive message on
//! failure: it is meant for tests.

#![warn(missing_docs)]

pub mod checks;
pub mod cli;
pub mod command;
pub mod consts;
pub mod crash;
pub mod elf;
pub mod faults;
pub mod fixtures;
pub mod json;
pub mod process;
pub mod procfs;
pub mod profile;
pub mod pyreport;

pub use checks::*;
pub use cli::*;
pub use command::*;
pub use crash::*;
pub use elf::*;
pub use faults::*;
pub use fixtures::*;
pub use json::*;
pub use process::*;
pub use procfs::*;
pub use profile::*;
pub use pyreport::*;
