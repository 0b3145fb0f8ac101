//! Code of the target that remote system calls and calls run through: a `syscall`
//! instruction (`int 0x80` in a 32-bit process), and libc's `syscall; ret` and
//! `__restore_rt` for self-restoring runs ([`crate::ptrace::sigframe`]).
//!
//! Searching for them reads the target's code, so it is done before a stop, and
//! what was found is kept in a [`Gadgets`] cache that belongs to its caller, as
//! framehop's `Cache` does: an operation creates one for its process, fills it
//! before stopping ([`Gadgets::find`]), hands it to each [`Session`](super::session::Session) it opens
//! ([`Session::set_gadgets`](super::session::Session::set_gadgets)) and takes back what a session found
//! ([`Session::gadgets`](super::session::Session::gadgets)). There is no process-wide state: two operations on the
//! same process share gadgets only if their caller passes the cache on.
//!
//! Only gadgets in libc are kept beyond one session (libc is never unmapped), and
//! each is checked against the target's bytes again before a session uses it.

use crate::arch::{Arch, ProcessArch};
use crate::memory::Memory;
use crate::ptrace::sigframe::{SigreturnGadgets, RESTORE_RT, SYSCALL_RET};
use reader::procfs::MapEntry;

/// Bytes read from the target at a time while searching.
const CHUNK: u64 = 64 * 1024;

/// Gadgets found in one process (a pid and its start time), kept by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gadgets {
    /// The process: its pid and start time (a reused pid is another process).
    owner: (i32, u64),
    /// A `syscall` (`int 0x80`) instruction in libc.
    syscall: Option<u64>,
    /// libc's `syscall; ret` and `__restore_rt`.
    sigreturn: Option<SigreturnGadgets>,
}

impl Gadgets {
    /// An empty cache for process `pid` started at `start_time` (`/proc/PID/stat`).
    pub fn new(pid: i32, start_time: u64) -> Gadgets {
        Gadgets {
            owner: (pid, start_time),
            syscall: None,
            sigreturn: None,
        }
    }

    /// The process the cache belongs to: `(pid, start time)`.
    pub fn owner(&self) -> (i32, u64) {
        self.owner
    }

    /// Searches the target's code for a system-call instruction (and, in a 64-bit
    /// process, libc's sigreturn gadgets) before stopping it; returns the address
    /// to pass to [`Session::set_syscall_gadget`](super::session::Session::set_syscall_gadget), in libc if there is one.
    ///
    /// What was found in libc is kept, so sessions seeded with this cache skip
    /// the search inside their stop.
    pub fn find(&mut self, arch: Arch, maps: &[MapEntry], mem: &dyn Memory) -> Option<u64> {
        if arch == Arch::X86_64 {
            self.sigreturn(mem, maps);
        }
        if let Some(addr) = self.syscall_in(arch, mem) {
            return Some(addr);
        }
        let found = search_syscall(maps, mem, arch.syscall_instruction());
        if let Some((addr, 0)) = found {
            self.syscall = Some(addr);
        }
        found.map(|(addr, _)| addr)
    }

    /// The kept libc `syscall` instruction, if the target still has it there.
    pub(crate) fn syscall_in(&self, arch: Arch, mem: &dyn Memory) -> Option<u64> {
        let addr = self.syscall?;
        let mut got = [0u8; 2];
        (mem.read(addr, &mut got).is_ok() && got == arch.syscall_instruction()).then_some(addr)
    }

    /// Keeps `addr`, found in libc (rank 0 of [`search_syscall`]).
    pub(crate) fn keep_syscall(&mut self, addr: u64) {
        self.syscall = Some(addr);
    }

    /// libc's sigreturn gadgets of a 64-bit process: the kept ones if the target
    /// still has them, else searched for in libc's executable mapping and kept.
    pub(crate) fn sigreturn(
        &mut self,
        mem: &dyn Memory,
        maps: &[MapEntry],
    ) -> Option<SigreturnGadgets> {
        if let Some(g) = self.sigreturn_in(mem) {
            return Some(g);
        }
        let libc = maps.iter().find(|m| m.perms.exec && m.is_libc())?;
        let [syscall_ret, restore_rt] = first_of(mem, libc, [&SYSCALL_RET, &RESTORE_RT]);
        let found = SigreturnGadgets {
            syscall_ret: syscall_ret?,
            restore_rt: restore_rt?,
        };
        self.sigreturn = Some(found);
        Some(found)
    }

    /// The kept sigreturn gadgets, if the target still has them.
    pub(crate) fn sigreturn_in(&self, mem: &dyn Memory) -> Option<SigreturnGadgets> {
        let g = self.sigreturn?;
        let mut a = [0u8; SYSCALL_RET.len()];
        let mut b = [0u8; RESTORE_RT.len()];
        (mem.read(g.syscall_ret, &mut a).is_ok()
            && a == SYSCALL_RET
            && mem.read(g.restore_rt, &mut b).is_ok()
            && b == RESTORE_RT)
            .then_some(g)
    }
}

/// Search order: libc, other mapped files, the vDSO, anonymous code.
fn rank(m: &MapEntry) -> u8 {
    if m.is_libc() {
        0
    } else if m.is_file() {
        1
    } else if m.path == "[vdso]" {
        2
    } else {
        3
    }
}

/// The first system-call instruction `insn` (`0f 05` or `cd 80`) in search order,
/// with the rank of its mapping (0: libc).
pub(crate) fn search_syscall(
    maps: &[MapEntry],
    mem: &dyn Memory,
    insn: [u8; 2],
) -> Option<(u64, u8)> {
    let mut candidates: Vec<&MapEntry> = maps
        .iter()
        .filter(|m| m.perms.exec && m.end <= 0x8000_0000_0000 && m.path != "[vsyscall]")
        .collect();
    candidates.sort_by_key(|m| rank(m));
    candidates.into_iter().find_map(|m| {
        let [at] = first_of(mem, m, [&insn]);
        at.map(|a| (a, rank(m)))
    })
}

/// The first occurrence of each of `patterns` in mapping `m`, reading [`CHUNK`]
/// bytes at a time into one buffer and stopping once all are found or a read fails.
fn first_of<const N: usize>(
    mem: &dyn Memory,
    m: &MapEntry,
    patterns: [&[u8]; N],
) -> [Option<u64>; N] {
    let mut found = [None; N];
    let keep = patterns.iter().map(|p| p.len()).max().unwrap_or(1) - 1;
    // `window[..kept]` is the tail of the last chunk (a pattern may straddle the
    // boundary), then the new chunk; `window[0]` is at `window_at`.
    let mut window = vec![0u8; keep + CHUNK as usize];
    let mut kept = 0;
    let mut window_at = m.start;
    let mut addr = m.start;
    while addr < m.end && found.iter().any(Option::is_none) {
        let len = CHUNK.min(m.end - addr) as usize;
        if mem.read(addr, &mut window[kept..kept + len]).is_err() {
            break;
        }
        let filled = &window[..kept + len];
        for (slot, pat) in found.iter_mut().zip(patterns) {
            if slot.is_none() {
                *slot = find(filled, pat).map(|i| window_at + i as u64);
            }
        }
        addr += len as u64;
        let next = keep.min(kept + len);
        window.copy_within(kept + len - next..kept + len, 0);
        window_at += (kept + len - next) as u64;
        kept = next;
    }
    found
}

/// The offset of the first `needle` in `haystack` (glibc's `memmem`).
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    // SAFETY: both pointers come from live slices and the lengths are theirs;
    // memmem only reads within them and returns null or a pointer into `haystack`.
    let at = unsafe {
        libc::memmem(
            haystack.as_ptr().cast(),
            haystack.len(),
            needle.as_ptr().cast(),
            needle.len(),
        )
    };
    (!at.is_null()).then(|| at as usize - haystack.as_ptr() as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reader::memory::MemoryError;
    use reader::procfs::parse_maps;

    /// A flat memory image at `base`.
    struct Image {
        base: u64,
        bytes: Vec<u8>,
    }

    impl Memory for Image {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
            let off = addr.checked_sub(self.base).map(|o| o as usize);
            match off.filter(|o| o + buf.len() <= self.bytes.len()) {
                Some(o) => {
                    buf.copy_from_slice(&self.bytes[o..o + buf.len()]);
                    Ok(())
                }
                None => Err(MemoryError::Read {
                    addr,
                    len: buf.len(),
                    source: std::io::Error::from_raw_os_error(libc::EFAULT),
                }),
            }
        }
    }

    #[test]
    fn patterns_are_found_across_chunk_boundaries() {
        let base = 0x7f00_0000_0000u64;
        let len = 3 * CHUNK as usize;
        let mut bytes = vec![0x90u8; len];
        // `syscall; ret` straddles the first boundary, `__restore_rt` the second.
        let a = CHUNK as usize - 1;
        bytes[a..a + 3].copy_from_slice(&SYSCALL_RET);
        let b = 2 * CHUNK as usize - 4;
        bytes[b..b + 9].copy_from_slice(&RESTORE_RT);
        let mem = Image { base, bytes };
        let maps = parse_maps(&format!(
            "{base:x}-{:x} r-xp 00000000 fe:01 7 /usr/lib/x86_64-linux-gnu/libc.so.6\n",
            base + len as u64
        ));
        let mut g = Gadgets::new(42, 1);
        let found = g.sigreturn(&mem, &maps).unwrap();
        assert_eq!(found.syscall_ret, base + a as u64);
        assert_eq!(found.restore_rt, base + b as u64);
        // The first `0f 05` is the one inside `syscall; ret`; it is in libc, so it is kept.
        assert_eq!(g.find(Arch::X86_64, &maps, &mem), Some(base + a as u64));
        assert_eq!(g.syscall_in(Arch::X86_64, &mem), Some(base + a as u64));
        assert_eq!(g.sigreturn_in(&mem), Some(found));
        // Bytes that changed are not trusted.
        let mut changed = Image {
            base,
            bytes: mem.bytes.clone(),
        };
        changed.bytes[a] = 0x90;
        assert_eq!(g.syscall_in(Arch::X86_64, &changed), None);
        assert_eq!(g.sigreturn_in(&changed), None);
    }

    #[test]
    fn libc_comes_first_and_only_libc_is_kept() {
        let lib = 0x7f00_0000_0000u64;
        let libc = 0x7f00_0010_0000u64;
        let mut bytes = vec![0x90u8; 0x20_0000];
        bytes[0x10] = 0x0f;
        bytes[0x11] = 0x05;
        bytes[0x10_0020] = 0x0f;
        bytes[0x10_0021] = 0x05;
        let mem = Image { base: lib, bytes };
        let maps = parse_maps(&format!(
            "{lib:x}-{:x} r-xp 00000000 fe:01 8 /usr/lib/libother.so\n\
             {libc:x}-{:x} r-xp 00000000 fe:01 7 /usr/lib/libc.so.6\n",
            lib + 0x1000,
            libc + 0x1000
        ));
        assert_eq!(
            search_syscall(&maps, &mem, [0x0f, 0x05]),
            Some((libc + 0x20, 0))
        );
        let mut g = Gadgets::new(1, 2);
        assert_eq!(g.find(Arch::X86_64, &maps, &mem), Some(libc + 0x20));
        assert_eq!(g.syscall, Some(libc + 0x20));
        // Without libc the other library's instruction is used, but not kept.
        let maps = parse_maps(&format!(
            "{lib:x}-{:x} r-xp 00000000 fe:01 8 /usr/lib/libother.so\n",
            lib + 0x1000
        ));
        let mut g = Gadgets::new(1, 2);
        assert_eq!(g.find(Arch::X86_64, &maps, &mem), Some(lib + 0x10));
        assert_eq!(g.syscall, None);
    }

    #[test]
    fn gadgets_are_found_in_our_own_libc() {
        let pid = std::process::id() as i32;
        let mem = crate::memory::ProcessMemory::open(pid).unwrap();
        let maps = reader::procfs::read_maps(pid).unwrap();
        let mut g = Gadgets::new(pid, 0);
        let s = g
            .sigreturn(&mem, &maps)
            .expect("libc has syscall; ret and __restore_rt");
        assert_ne!(s.syscall_ret, s.restore_rt);
        assert!(g.find(Arch::X86_64, &maps, &mem).is_some());
    }
}
