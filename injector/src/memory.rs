//! The live backend of [`reader::memory::Memory`] and the only [`WriteMemory`].
//!
//! [`ProcessMemory`] reads with `process_vm_readv` (fast, one copy) and falls back to
//! `/proc/PID/mem`, which also reaches pages the target cannot read itself. Writes
//! go through `/proc/PID/mem`: unlike `process_vm_writev`, it writes into read-only
//! and `r-x` code pages (the kernel forces the write, breaking copy-on-write for
//! private file mappings). When the caller holds a thread in a ptrace-stop,
//! `PTRACE_PEEKDATA`/`PTRACE_POKEDATA` is the last resort.

use std::fs::File;
use std::io;
use std::io::IoSliceMut;
use std::os::unix::fs::FileExt;

use nix::sys::ptrace;
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;

pub use reader::memory::{Memory, MemoryError, WriteMemory};

/// A live process: reads with process_vm_readv, writes through /proc/PID/mem (works on r-x code), PTRACE_POKEDATA fallback when the caller says the tid is ptrace-stopped.
#[derive(Debug)]
pub struct ProcessMemory {
    pid: i32,
    /// The thread whose view is used (the pid itself unless opened through a thread).
    via: i32,
    mem: File,
    ptrace_tid: Option<i32>,
}

impl ProcessMemory {
    /// Opens `/proc/PID/mem` for reading and writing.
    pub fn open(pid: i32) -> Result<Self, MemoryError> {
        Self::open_path(pid, pid, format!("/proc/{pid}/mem"))
    }

    /// Opens the memory of `pid` through its thread `tid` (still works after the group leader exited).
    pub fn open_thread(pid: i32, tid: i32) -> Result<Self, MemoryError> {
        Self::open_path(pid, tid, format!("/proc/{pid}/task/{tid}/mem"))
    }

    fn open_path(pid: i32, via: i32, path: String) -> Result<Self, MemoryError> {
        let mem = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| MemoryError::Open { pid, source })?;
        Ok(ProcessMemory {
            pid,
            via,
            mem,
            ptrace_tid: None,
        })
    }

    /// Allows `PTRACE_PEEKDATA`/`POKEDATA` on `tid`, which the caller keeps ptrace-stopped from this OS thread.
    pub fn with_ptrace_fallback(mut self, tid: i32) -> Self {
        self.ptrace_tid = Some(tid);
        self
    }

    /// The process this memory belongs to.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// One `process_vm_readv`; returns how many bytes arrived (short at an unreadable page).
    fn read_vm(&self, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
        let len = buf.len();
        let mut local = [IoSliceMut::new(buf)];
        let remote = [RemoteIoVec {
            base: addr as usize,
            len,
        }];
        process_vm_readv(Pid::from_raw(self.via), &mut local, &remote).map_err(io::Error::from)
    }

    /// `pread` on `/proc/PID/mem` until `buf` is full.
    fn read_mem_file(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            // /proc/PID/mem takes unsigned offsets, so addresses above i64::MAX are fine.
            match self.mem.read_at(&mut buf[done..], addr + done as u64) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "unmapped address (or the process has no memory left)",
                    ))
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// `pwrite` on `/proc/PID/mem` until all of `data` is written.
    fn write_mem_file(&self, addr: u64, data: &[u8]) -> io::Result<()> {
        let mut done = 0;
        while done < data.len() {
            match self.mem.write_at(&data[done..], addr + done as u64) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "the kernel accepted no bytes",
                    ))
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads with `PTRACE_PEEKDATA`, one aligned word at a time.
    fn read_ptrace(&self, tid: i32, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        let end = addr
            .checked_add(buf.len() as u64)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let mut word_addr = addr & !7;
        while word_addr < end {
            let word = peek(tid, word_addr)?.to_le_bytes();
            for (i, b) in word.iter().enumerate() {
                let a = word_addr + i as u64;
                if a >= addr && a < end {
                    buf[(a - addr) as usize] = *b;
                }
            }
            word_addr += 8;
        }
        Ok(())
    }

    /// Writes with `PTRACE_POKEDATA`, read-modify-write for partial head and tail words.
    fn write_ptrace(&self, tid: i32, addr: u64, data: &[u8]) -> io::Result<()> {
        let end = addr
            .checked_add(data.len() as u64)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let mut word_addr = addr & !7;
        while word_addr < end {
            let whole = word_addr >= addr && word_addr + 8 <= end;
            let mut word = if whole {
                [0u8; 8]
            } else {
                peek(tid, word_addr)?.to_le_bytes()
            };
            for (i, b) in word.iter_mut().enumerate() {
                let a = word_addr + i as u64;
                if a >= addr && a < end {
                    *b = data[(a - addr) as usize];
                }
            }
            ptrace::write(
                Pid::from_raw(tid),
                word_addr as ptrace::AddressType,
                i64::from_le_bytes(word),
            )
            .map_err(io::Error::from)?;
            word_addr += 8;
        }
        Ok(())
    }
}

fn peek(tid: i32, addr: u64) -> io::Result<i64> {
    ptrace::read(Pid::from_raw(tid), addr as ptrace::AddressType).map_err(io::Error::from)
}

impl Memory for ProcessMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        if buf.is_empty() {
            return Ok(());
        }
        let len = buf.len();
        // Fast path; a short count means an unreadable page somewhere in the range.
        let done = self.read_vm(addr, buf).unwrap_or(0).min(len);
        if done == len {
            return Ok(());
        }
        let rest = addr + done as u64;
        let err = match self.read_mem_file(rest, &mut buf[done..]) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        match self.ptrace_tid {
            Some(tid) => self.read_ptrace(tid, rest, &mut buf[done..]),
            None => Err(err),
        }
        .map_err(|source| MemoryError::Read { addr, len, source })
    }
}

impl WriteMemory for ProcessMemory {
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemoryError> {
        if data.is_empty() {
            return Ok(());
        }
        let err = match self.write_mem_file(addr, data) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        match self.ptrace_tid {
            Some(tid) => self.write_ptrace(tid, addr, data),
            None => Err(err),
        }
        .map_err(|source| MemoryError::Write {
            addr,
            len: data.len(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptrace::session::Session;
    use argstash_tests::{Target, OUTPUT_TIMEOUT};

    /// Prints the address of a function (r-x), a constant (r--) and a PROT_NONE page.
    const PROG: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
__attribute__((noinline)) int target_fn(int x) { return x * 3 + 1; }
static const char konst[64] = "constant data in a read-only page";
int main(void) {
    char *none = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(none, 0x5a, 4096);
    mprotect(none, 4096, PROT_NONE);
    printf("%lx %lx %lx\nready\n", (unsigned long)target_fn, (unsigned long)konst, (unsigned long)none);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        printf("%d\n", target_fn(atoi(line)));
        fflush(stdout);
    }
    return 0;
}
"#;

    fn addrs(child: &Target) -> (u64, u64, u64) {
        let v: Vec<u64> = child.before_ready()[0]
            .split_whitespace()
            .map(|s| u64::from_str_radix(s, 16).unwrap())
            .collect();
        (v[0], v[1], v[2])
    }

    #[test]
    fn writes_into_code_and_reads_back() {
        let mut child = Target::spawn_source("mem", PROG, &[]);
        let (code, konst, none) = addrs(&child);
        let mem = ProcessMemory::open(child.pid()).unwrap();
        assert_eq!(mem.pid(), child.pid());

        // Read-only data through the fast path.
        assert_eq!(
            &mem.read_vec(konst, 33).unwrap()[..],
            b"constant data in a read-only page"
        );
        // A PROT_NONE page: process_vm_readv fails, /proc/PID/mem reads it.
        assert!(mem.read_vm(none, &mut [0u8; 16]).is_err());
        assert_eq!(mem.read_vec(none + 100, 16).unwrap(), vec![0x5a; 16]);
        assert_eq!(mem.read_u64(none).unwrap(), 0x5a5a_5a5a_5a5a_5a5a);

        // Replace target_fn with `mov eax, 42; ret` in its r-x page, then restore it.
        let original = mem.read_vec(code, 6).unwrap();
        let patch = [0xb8, 42, 0, 0, 0, 0xc3];
        mem.write(code, &patch).unwrap();
        assert_eq!(mem.read_vec(code, 6).unwrap(), patch);
        child.write_stdin("5\n");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "42");
        mem.write(code, &original).unwrap();
        child.write_stdin("5\n");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "16");

        // Writing through a reference, into read-only data.
        let by_ref: &dyn WriteMemory = &mem;
        (&by_ref).write(konst, b"C").unwrap();
        assert_eq!(by_ref.read_vec(konst, 4).unwrap(), b"Cons");
    }

    #[test]
    fn ptrace_words_unaligned() {
        let child = Target::spawn_source("memp", PROG, &[]);
        let (_, konst, none) = addrs(&child);
        let session = Session::attach_all(child.pid()).unwrap();
        let mem = ProcessMemory::open(child.pid())
            .unwrap()
            .with_ptrace_fallback(child.pid());
        // Unaligned head and tail, spanning three words.
        let at = konst + 3;
        let before = mem.read_vec(konst, 32).unwrap();
        mem.write_ptrace(child.pid(), at, b"0123456789abcdef!")
            .unwrap();
        let after = mem.read_vec(konst, 32).unwrap();
        assert_eq!(&after[..3], &before[..3]);
        assert_eq!(&after[3..20], b"0123456789abcdef!");
        assert_eq!(&after[20..], &before[20..]);
        let mut back = [0u8; 17];
        mem.read_ptrace(child.pid(), at, &mut back).unwrap();
        assert_eq!(&back, b"0123456789abcdef!");
        let mut none_bytes = [0u8; 5];
        mem.read_ptrace(child.pid(), none + 7, &mut none_bytes)
            .unwrap();
        assert_eq!(none_bytes, [0x5a; 5]);
        session.detach().unwrap();
    }

    #[test]
    fn open_missing_process_fails() {
        let err = ProcessMemory::open(i32::MAX).unwrap_err();
        assert!(
            matches!(err, MemoryError::Open { pid: i32::MAX, .. }),
            "{err}"
        );
    }

    #[test]
    fn unmapped_read_and_write_fail() {
        let mem = ProcessMemory::open(std::process::id() as i32).unwrap();
        assert!(matches!(
            mem.read_vec(8, 8),
            Err(MemoryError::Read {
                addr: 8,
                len: 8,
                ..
            })
        ));
        assert!(matches!(
            mem.write(8, &[1]),
            Err(MemoryError::Write {
                addr: 8,
                len: 1,
                ..
            })
        ));
    }
}
