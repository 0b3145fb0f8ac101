//! Checks of what argstash leaves in a target: a refused operation leaves it
//! untouched ([`Untouched`], [`refused`]); a function's entry is pristine or
//! a whole patch, never torn ([`entry_state`]).

use crate::cli::{expect_fail, hex_bytes, E2E_TIMEOUT};
use crate::elf::{expected_patch, function_bytes, jmp_rel32_target};
use crate::process::Target;
use crate::procfs::{maps, proc_state, read_mem, thread_state, tracer_pid, try_read_mem, MapEntry};

/// What an operation that argstash refused must leave unchanged in a target.
///
/// [`Untouched::take`] records the bytes of every executable file mapping and
/// the list of mappings; [`Untouched::check`] asserts they are the same, that
/// nobody traces the process, that no thread is stopped, that the thread
/// count is the same, and that the fixture still prints lines.
pub struct Untouched {
    pid: i32,
    maps: Vec<MapEntry>,
    code: Vec<(u64, Vec<u8>)>,
    threads: usize,
}

impl Untouched {
    /// Record the state of `t` (call before the operation that must be refused).
    pub fn take(t: &Target) -> Untouched {
        let maps = maps(t.pid());
        let code = maps
            .iter()
            .filter(|m| m.perms.contains('x') && m.path.starts_with('/'))
            .map(|m| {
                (
                    m.start,
                    read_mem(t.pid(), m.start, (m.end - m.start) as usize),
                )
            })
            .collect();
        Untouched {
            pid: t.pid(),
            maps,
            code,
            threads: t.tids().len(),
        }
    }

    /// Assert `t` is as recorded, untraced, running, healthy and still printing lines.
    #[track_caller]
    pub fn check(&self, t: &mut Target) {
        assert_eq!(t.pid(), self.pid, "Untouched::check on another target");
        t.assert_healthy();
        assert_eq!(
            tracer_pid(self.pid),
            None,
            "pid {} is still traced",
            self.pid
        );
        for tid in t.tids() {
            let st = thread_state(self.pid, tid);
            assert!(
                !matches!(st, Some('t' | 'T')),
                "thread {tid} of {} is stopped ({st:?})",
                self.pid
            );
        }
        assert_eq!(t.tids().len(), self.threads, "thread count changed");
        assert_eq!(
            maps(self.pid),
            self.maps,
            "the mappings of pid {} changed",
            self.pid
        );
        for (start, bytes) in &self.code {
            let now = read_mem(self.pid, *start, bytes.len());
            if now != *bytes {
                let at = now.iter().zip(bytes).position(|(a, b)| a != b).unwrap_or(0);
                panic!(
                    "code of pid {} changed at {:#x}",
                    self.pid,
                    *start + at as u64
                );
            }
        }
        t.drain_lines();
        t.expect_line(E2E_TIMEOUT);
        t.assert_healthy();
    }
}

/// Run `argstash args` against `t`, expecting exit `code` and `needle` in
/// stderr, and check `t` is [`Untouched`]; returns stderr.
#[track_caller]
pub fn refused(t: &mut Target, args: &[&str], code: i32, needle: &str) -> String {
    let before = Untouched::take(t);
    let out = expect_fail(args, code, needle);
    before.check(t);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What a function's entry looks like in a live process (see [`entry_state`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryState {
    /// Exactly the file's bytes.
    Pristine,
    /// A whole patch: `jmp rel32` into executable memory, `int3`/`nop` filling
    /// the rest of the patched instructions, the file's bytes after them.
    Patched {
        /// Where the jump goes.
        target: u64,
    },
    /// Anything else: the description says what differs.
    Torn(String),
    /// The memory could not be read (the process is gone?).
    Unreadable(String),
}

/// Classify the live entry of `sym` in `t` against the file (pristine, a whole patch, or torn).
///
/// The patched length is the one objdump predicts ([`expected_patch`]).
#[track_caller]
pub fn entry_state(t: &Target, sym: &str) -> EntryState {
    EntryOracle::new(t, sym).state()
}

/// What [`entry_state`] compares with, computed once (nm and objdump are slow
/// enough to matter in a loop of trials).
#[derive(Clone, Debug)]
pub struct EntryOracle {
    pid: i32,
    sym: String,
    addr: u64,
    file: Vec<u8>,
    patch_off: usize,
    patch_len: usize,
}

impl EntryOracle {
    /// The oracle for function `sym` of the running `t`.
    #[track_caller]
    pub fn new(t: &Target, sym: &str) -> EntryOracle {
        let (off, len) = expected_patch(t.exe(), sym);
        EntryOracle {
            pid: t.pid(),
            sym: sym.to_string(),
            addr: t.addr_of(sym),
            file: function_bytes(t.exe(), sym),
            patch_off: off as usize,
            patch_len: len,
        }
    }

    /// Classify the live bytes now.
    #[track_caller]
    pub fn state(&self) -> EntryState {
        let (sym, addr, file) = (&self.sym, self.addr, &self.file);
        let live = match try_read_mem(self.pid, addr, file.len()) {
            Ok(v) => v,
            Err(e) => {
                return EntryState::Unreadable(format!(
                    "{sym} at {addr:#x} of pid {}: {e} (state {:?})",
                    self.pid,
                    proc_state(self.pid)
                ))
            }
        };
        if live == *file {
            return EntryState::Pristine;
        }
        let (off, len) = (self.patch_off, self.patch_len);
        let describe = |why: &str| {
            EntryState::Torn(format!(
                "{sym} at {addr:#x}: {why}\n    file: {}\n    live: {}",
                hex_bytes(file),
                hex_bytes(&live)
            ))
        };
        if live[..off] != file[..off] || live[off + len..] != file[off + len..] {
            return describe("bytes outside the patch changed");
        }
        let Some(target) = jmp_rel32_target(addr + off as u64, &live[off..]) else {
            return describe("the patch does not start with a jmp rel32");
        };
        if !live[off + 5..off + len]
            .iter()
            .all(|b| matches!(b, 0xcc | 0x90))
        {
            return describe("the bytes after the jmp are neither int3 nor nop");
        }
        let executable = maps(self.pid)
            .iter()
            .any(|m| m.perms.contains('x') && (m.start..m.end).contains(&target));
        if !executable {
            return describe(&format!(
                "the jmp goes to {target:#x}, not executable memory"
            ));
        }
        EntryState::Patched { target }
    }
}
