//! The undo of a commit, as a guard: a [`Transaction`] holds the stopped session
//! and the target's memory, every change made through it is logged before it is
//! made (a mapping created, bytes overwritten, a thread moved), and dropping it
//! without [`Transaction::commit`] takes every change back, newest first. So an
//! error anywhere inside the stop (a `?` included) cannot leave the target half
//! changed: there is no path that must remember to call the undo.
//!
//! The log keeps the bytes a write replaced as the caller read them (the bytes
//! under a patch are read back inside the stop before they are replaced; a free
//! arena slot is all zeros), so the undo restores the target byte for byte.
//! Undoing is best effort: a step that fails (the thread is gone, the process
//! was killed) does not stop the others.

use crate::error::Error;
use crate::memory::WriteMemory;
use crate::ptrace::session::Session;
use crate::ptrace::session_error::SessionError;

/// One logged change and how to take it back.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    /// A mapping was created: unmap it.
    Mapped { base: u64, len: u64 },
    /// `previous` was overwritten at `addr`: write it back.
    Wrote { addr: u64, previous: Vec<u8> },
    /// A thread's registers were changed: put `previous` back.
    Moved {
        tid: i32,
        previous: libc::user_regs_struct,
    },
}

/// The changes of a [`Transaction`] kept over a pause: the process was let go
/// in between (to register unwind information before the jump is written), and
/// a later stop either continues them ([`Transaction::resume`]) or takes them back.
#[must_use = "staged changes are taken back only by resuming them into a transaction"]
pub(crate) struct Suspended {
    log: Vec<Change>,
}

impl Suspended {
    /// Keeps the changes for good: nothing will take them back.
    pub(crate) fn keep(self) {}
}

/// A stopped thread to move: its registers now, and the address it continues at.
#[derive(Clone, Copy)]
pub(crate) struct ThreadMove {
    /// The thread.
    pub(crate) tid: i32,
    /// Its registers, as read inside the stop.
    pub(crate) regs: libc::user_regs_struct,
    /// Where it continues.
    pub(crate) to: u64,
}

/// Changes to a stopped target, taken back when dropped uncommitted.
pub(crate) struct Transaction<'a> {
    session: &'a mut Session,
    mem: &'a dyn WriteMemory,
    log: Vec<Change>,
    committed: bool,
}

impl<'a> Transaction<'a> {
    /// Starts logging changes made to the process `session` holds, whose memory is `mem`.
    pub(crate) fn begin(session: &'a mut Session, mem: &'a dyn WriteMemory) -> Transaction<'a> {
        Transaction {
            session,
            mem,
            log: Vec::new(),
            committed: false,
        }
    }

    /// The stopped session (for reads, and for changes logged with [`Transaction::mapped`]).
    pub(crate) fn session(&mut self) -> &mut Session {
        self.session
    }

    /// The target's memory, for reads (writes go through [`Transaction::write`]).
    pub(crate) fn mem(&self) -> &'a dyn WriteMemory {
        self.mem
    }

    /// Logs a mapping of `len` bytes at `base` made in the target: the undo unmaps it.
    pub(crate) fn mapped(&mut self, base: u64, len: u64) {
        self.log.push(Change::Mapped { base, len });
    }

    /// Logs that `previous` at `addr` was replaced by a write made outside the
    /// transaction (by a helper that writes through the memory itself).
    pub(crate) fn overwritten(&mut self, addr: u64, previous: Vec<u8>) {
        self.log.push(Change::Wrote { addr, previous });
    }

    /// Writes `bytes` at `addr`, which held `previous` (as long as `bytes`).
    ///
    /// Logged first: a write that fails half-way is taken back too.
    pub(crate) fn write(&mut self, addr: u64, bytes: &[u8], previous: &[u8]) -> Result<(), Error> {
        debug_assert_eq!(bytes.len(), previous.len());
        self.overwritten(addr, previous.to_vec());
        self.mem.write(addr, bytes)?;
        Ok(())
    }

    /// Writes `bytes` into memory that held zeros: a free arena slot or its parts.
    pub(crate) fn write_over_zeros(&mut self, addr: u64, bytes: &[u8]) -> Result<(), Error> {
        self.write(addr, bytes, &vec![0u8; bytes.len()])
    }

    /// Sets thread `tid`'s registers to `regs`; they were `previous`.
    pub(crate) fn set_regs(
        &mut self,
        tid: i32,
        regs: &libc::user_regs_struct,
        previous: libc::user_regs_struct,
    ) -> Result<(), SessionError> {
        self.log.push(Change::Moved { tid, previous });
        self.session.set_regs(tid, regs)
    }

    /// Moves a thread to `m.to` (logged: the undo moves it back).
    pub(crate) fn move_thread(&mut self, m: &ThreadMove) -> Result<(), SessionError> {
        let mut moved = m.regs;
        moved.rip = m.to;
        self.set_regs(m.tid, &moved, m.regs)
    }

    /// Continues the changes of an earlier, suspended transaction on a new stop:
    /// dropping the result uncommitted takes them back too.
    pub(crate) fn resume(
        session: &'a mut Session,
        mem: &'a dyn WriteMemory,
        earlier: Suspended,
    ) -> Transaction<'a> {
        Transaction {
            session,
            mem,
            log: earlier.log,
            committed: false,
        }
    }

    /// Keeps the changes for now, to be continued or taken back by a later
    /// [`Transaction::resume`] (the stop may end in between). Only changes that
    /// can be taken back without the stopped threads' registers may be
    /// suspended: no thread was moved.
    pub(crate) fn suspend(mut self) -> Suspended {
        debug_assert!(!self.log.iter().any(|c| matches!(c, Change::Moved { .. })));
        self.committed = true;
        Suspended {
            log: std::mem::take(&mut self.log),
        }
    }

    /// Keeps every change: the transaction is over.
    pub(crate) fn commit(mut self) {
        self.committed = true;
    }

    /// Takes every change back, newest first; writes into memory about to be
    /// unmapped are skipped.
    fn rollback(&mut self) {
        let log = std::mem::take(&mut self.log);
        let unmapped = |addr: u64| {
            log.iter()
                .any(|c| matches!(c, Change::Mapped { base, len } if (*base..base + len).contains(&addr)))
        };
        for change in log.iter().rev() {
            match change {
                Change::Moved { tid, previous } => {
                    let _ = self.session.set_regs(*tid, previous);
                }
                Change::Wrote { addr, previous } => {
                    if !unmapped(*addr) {
                        let _ = self.mem.write(*addr, previous);
                    }
                }
                Change::Mapped { base, len } => {
                    let _ = self.session.remote_munmap(*base, *len);
                }
            }
        }
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if !self.committed {
            self.rollback();
        }
    }
}

/// A target memory whose write number `fail_at` (counted from 0) fails, for tests
/// of what an error half-way through a commit leaves behind.
#[cfg(test)]
pub(crate) struct FailingWrite<'m> {
    inner: &'m dyn WriteMemory,
    fail_at: usize,
    writes: std::cell::Cell<usize>,
}

#[cfg(test)]
impl<'m> FailingWrite<'m> {
    /// Writes through `inner`, except the one numbered `fail_at`.
    pub(crate) fn new(inner: &'m dyn WriteMemory, fail_at: usize) -> FailingWrite<'m> {
        FailingWrite {
            inner,
            fail_at,
            writes: std::cell::Cell::new(0),
        }
    }

    /// How many writes were attempted.
    pub(crate) fn writes(&self) -> usize {
        self.writes.get()
    }
}

#[cfg(test)]
impl crate::memory::Memory for FailingWrite<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), crate::memory::MemoryError> {
        self.inner.read(addr, buf)
    }
}

#[cfg(test)]
impl WriteMemory for FailingWrite<'_> {
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), crate::memory::MemoryError> {
        let n = self.writes.get();
        self.writes.set(n + 1);
        if n == self.fail_at {
            return Err(crate::memory::MemoryError::Write {
                addr,
                len: data.len(),
                source: std::io::Error::from_raw_os_error(libc::EIO),
            });
        }
        self.inner.write(addr, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{Memory, MemoryError, ProcessMemory};
    use argstash_tests::{wait_all_blocked, Target};

    /// Blocks in read(stdin) with a page of its own to write into.
    const TARGET: &str = r#"
#include <stdio.h>
#include <unistd.h>
static char page[4096] __attribute__((aligned(4096))) = "original bytes";
int main(void) {
    printf("%p\n", (void *)page);
    printf("ready\n");
    fflush(stdout);
    char c;
    read(0, &c, 1);
    return page[0];
}
"#;

    fn page_of(child: &Target) -> u64 {
        u64::from_str_radix(child.before_ready()[0].trim_start_matches("0x"), 16).unwrap()
    }

    #[test]
    fn dropped_uncommitted_takes_every_change_back() {
        let child = Target::spawn_source("undo", TARGET, &[]);
        let pid = child.pid();
        let page = page_of(&child);
        wait_all_blocked(pid);
        let mem = ProcessMemory::open(pid).unwrap();
        let before = mem.read_vec(page, 64).unwrap();
        let maps_before = reader::procfs::read_maps(pid).unwrap();
        let mut session = Session::attach_all(pid).unwrap();
        let tid = session.tids()[0];
        let regs = session.regs(tid).unwrap();
        {
            let mut tx = Transaction::begin(&mut session, &mem);
            let base = tx
                .session()
                .remote_mmap(
                    0,
                    8192,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                )
                .unwrap();
            tx.mapped(base, 8192);
            // A write into the new mapping is not undone (the mapping goes).
            tx.write(base, b"new", b"\0\0\0").unwrap();
            tx.write(page, b"changed", &before[..7]).unwrap();
            tx.write(page + 3, b"XY", &mem.read_vec(page + 3, 2).unwrap())
                .unwrap();
            let mut moved = regs;
            moved.rip += 1;
            tx.set_regs(tid, &moved, regs).unwrap();
            assert_eq!(tx.session().regs(tid).unwrap().rip, regs.rip + 1);
            assert_eq!(&mem.read_vec(page, 7).unwrap(), b"chaXYed");
        }
        assert_eq!(mem.read_vec(page, 64).unwrap(), before);
        assert_eq!(session.regs(tid).unwrap().rip, regs.rip);
        assert_eq!(reader::procfs::read_maps(pid).unwrap(), maps_before);
        session.detach().unwrap();
    }

    #[test]
    fn committed_changes_stay_and_a_failed_write_is_taken_back() {
        let child = Target::spawn_source("commit", TARGET, &[]);
        let pid = child.pid();
        let page = page_of(&child);
        wait_all_blocked(pid);
        let mem = ProcessMemory::open(pid).unwrap();
        let before = mem.read_vec(page, 16).unwrap();
        let mut session = Session::attach_all(pid).unwrap();
        {
            let mut tx = Transaction::begin(&mut session, &mem);
            tx.write(page, b"kept", &before[..4]).unwrap();
            tx.commit();
        }
        assert_eq!(&mem.read_vec(page, 4).unwrap(), b"kept");
        // The second write fails: the first is taken back, to what it replaced.
        let failing = FailingWrite::new(&mem, 1);
        let result = (|| -> Result<(), Error> {
            let mut tx = Transaction::begin(&mut session, &failing);
            tx.write(page, b"one", b"kep")?;
            tx.write(page + 8, b"two", &before[8..11])?;
            tx.commit();
            Ok(())
        })();
        assert!(matches!(
            result,
            Err(Error::Memory(MemoryError::Write { .. }))
        ));
        assert_eq!(failing.writes(), 4, "two writes, two undone");
        assert_eq!(&mem.read_vec(page, 16).unwrap()[..4], b"kept");
        assert_eq!(&mem.read_vec(page, 16).unwrap()[4..], &before[4..]);
        session.detach().unwrap();
    }
}
