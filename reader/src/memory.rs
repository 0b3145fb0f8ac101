//! Byte-addressed access to a target's memory: one reading interface, many backends.
//!
//! [`Memory`] is the one interface the unwinder, the arena reader and the value
//! formatter use. Its backends: a live process (`injector`'s `ProcessMemory`), a
//! [`StackSnapshot`] copied while a thread was stopped, and a core file
//! ([`crate::core::CoreFile`]). Writing is a separate trait, [`WriteMemory`], that
//! only a live process implements: a core file or a snapshot cannot be written, and
//! the compiler knows it.

use std::io;

/// Errors reading or writing target memory.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// Reading `len` bytes at `addr` failed.
    #[error("cannot read {len} bytes at 0x{addr:x} in the target: {source}")]
    Read {
        /// First address of the read.
        addr: u64,
        /// Length of the read.
        len: usize,
        /// Why the last method tried failed.
        source: io::Error,
    },
    /// Writing `len` bytes at `addr` failed.
    #[error("cannot write {len} bytes at 0x{addr:x} in the target: {source}")]
    Write {
        /// First address of the write.
        addr: u64,
        /// Length of the write.
        len: usize,
        /// Why the last method tried failed.
        source: io::Error,
    },
    /// `/proc/PID/mem` could not be opened.
    #[error("cannot open /proc/{pid}/mem: {source} (is the pid right, and are we root or the process owner?)")]
    Open {
        /// The process.
        pid: i32,
        /// Why.
        source: io::Error,
    },
}

/// Byte-addressed access to a target's memory; the unwinder and the arena reader use only this.
pub trait Memory {
    /// Fills `buf` with the bytes at `addr`, or fails without a partial result.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError>;

    /// Reads a little-endian 64-bit word at `addr`.
    fn read_u64(&self, addr: u64) -> Result<u64, MemoryError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Reads `len` bytes at `addr` into a new vector.
    fn read_vec(&self, addr: u64, len: usize) -> Result<Vec<u8>, MemoryError> {
        let mut v = vec![0u8; len];
        self.read(addr, &mut v)?;
        Ok(v)
    }

    /// Drops whatever this backend kept of earlier reads, so that the next reads
    /// see the target as it is now (a reader that must read again something the
    /// running target changed under it); nothing to do for a backend that keeps nothing.
    fn forget_cached(&self) {}
}

impl<M: Memory + ?Sized> Memory for &M {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        (**self).read(addr, buf)
    }

    fn forget_cached(&self) {
        (**self).forget_cached();
    }
}

/// Writing into a live target's memory (code pages included); only live backends have it.
pub trait WriteMemory: Memory {
    /// Writes `data` at `addr`, or fails naming the address.
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemoryError>;
}

impl<M: WriteMemory + ?Sized> WriteMemory for &M {
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemoryError> {
        (**self).write(addr, data)
    }
}

/// A copy of a stack region, falling back to another [`Memory`] outside it.
pub struct StackSnapshot<'a> {
    start: u64,
    bytes: Vec<u8>,
    rest: &'a dyn Memory,
}

impl<'a> StackSnapshot<'a> {
    /// A snapshot of `bytes` copied from `start`, reading anything else from `rest`.
    pub fn new(start: u64, bytes: Vec<u8>, rest: &'a dyn Memory) -> Self {
        StackSnapshot { start, bytes, rest }
    }
}

impl Memory for StackSnapshot<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let end = self.start + self.bytes.len() as u64;
        if addr >= self.start && addr.saturating_add(buf.len() as u64) <= end {
            let off = (addr - self.start) as usize;
            buf.copy_from_slice(&self.bytes[off..off + buf.len()]);
            return Ok(());
        }
        self.rest.read(addr, buf)
    }
}

/// Bytes of one page of a [`PageCache`].
const CACHE_PAGE: u64 = 4096;
/// Most pages a [`PageCache`] holds before it starts over.
const CACHE_MAX_PAGES: usize = 256;

/// A read-through cache of whole pages over another [`Memory`], for a reader
/// that makes many small reads close together.
///
/// Reading a Python frame chain is hundreds of reads of a few bytes each (frame
/// fields, code objects, argument objects), most of them in a few heap pages;
/// each read of a live process is a system call. Through this cache each page
/// costs one. It is one consistent view of memory only while the target does
/// not run: [`PageCache::clear`] it whenever the target may have run since. A
/// read that touches a page that cannot be read whole is passed to the inner
/// memory as it is, so it fails (or succeeds) exactly as it would without the
/// cache.
pub struct PageCache<M> {
    inner: M,
    /// Pages by address; `None` for a page that could not be read whole.
    pages: std::cell::RefCell<std::collections::HashMap<u64, Option<Box<[u8]>>>>,
}

impl<M: Memory> PageCache<M> {
    /// An empty cache over `inner` (a backend, or a reference to one).
    pub fn new(inner: M) -> PageCache<M> {
        PageCache {
            inner,
            pages: Default::default(),
        }
    }

    /// Forgets every page (the target may have changed them).
    pub fn clear(&self) {
        self.pages.borrow_mut().clear();
    }
}

impl<M: Memory> Memory for PageCache<M> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let end = match addr.checked_add(buf.len() as u64) {
            Some(end) if buf.len() as u64 <= 2 * CACHE_PAGE => end,
            _ => return self.inner.read(addr, buf),
        };
        let mut pages = self.pages.borrow_mut();
        if pages.len() >= CACHE_MAX_PAGES {
            pages.clear();
        }
        let mut page = addr & !(CACHE_PAGE - 1);
        let mut done = 0;
        while page < end {
            let bytes = pages.entry(page).or_insert_with(|| {
                let mut b = vec![0u8; CACHE_PAGE as usize].into_boxed_slice();
                self.inner.read(page, &mut b).ok().map(|()| b)
            });
            let Some(bytes) = bytes else {
                drop(pages);
                return self.inner.read(addr, buf);
            };
            let next = page.checked_add(CACHE_PAGE);
            let from = (addr.max(page) - page) as usize;
            let to = (end.min(next.unwrap_or(u64::MAX)) - page) as usize;
            buf[done..done + (to - from)].copy_from_slice(&bytes[from..to]);
            done += to - from;
            match next {
                Some(next) => page = next,
                None => break,
            }
        }
        Ok(())
    }

    fn forget_cached(&self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Memory readable in [0x1000, 0x4000) (byte i holds i mod 251), counting reads.
    struct Counted {
        reads: Cell<usize>,
    }

    impl Memory for Counted {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
            self.reads.set(self.reads.get() + 1);
            let end = addr.checked_add(buf.len() as u64);
            if addr < 0x1000 || end.is_none_or(|end| end > 0x4000) {
                return Err(MemoryError::Read {
                    addr,
                    len: buf.len(),
                    source: io::Error::from_raw_os_error(libc::EFAULT),
                });
            }
            for (i, b) in buf.iter_mut().enumerate() {
                *b = ((addr + i as u64) % 251) as u8;
            }
            Ok(())
        }
    }

    fn expected(addr: u64, len: usize) -> Vec<u8> {
        (0..len as u64).map(|i| ((addr + i) % 251) as u8).collect()
    }

    #[test]
    fn page_cache_reads_each_page_once_and_agrees_with_the_inner_memory() {
        let inner = Counted {
            reads: Cell::new(0),
        };
        let cache = PageCache::new(&inner);
        for (addr, len) in [
            (0x1008, 8),
            (0x1010, 16),
            (0x1ffc, 8),
            (0x2100, 100),
            (0x1000, 0),
        ] {
            assert_eq!(cache.read_vec(addr, len).unwrap(), expected(addr, len));
        }
        assert_eq!(inner.reads.get(), 2, "pages 0x1000 and 0x2000, once each");
        cache.clear();
        assert_eq!(
            cache.read_u64(0x1008).unwrap().to_le_bytes().to_vec(),
            expected(0x1008, 8)
        );
        assert_eq!(inner.reads.get(), 3, "read again after clear");
        // A reader that only has `&dyn Memory` forgets the pages the same way.
        let memory: &dyn Memory = &&cache;
        memory.forget_cached();
        assert_eq!(
            memory.read_u64(0x1010).unwrap(),
            cache.read_u64(0x1010).unwrap()
        );
        assert_eq!(inner.reads.get(), 4, "read again after forget_cached");
    }

    #[test]
    fn page_cache_fails_where_the_inner_memory_fails() {
        let inner = Counted {
            reads: Cell::new(0),
        };
        let cache = PageCache::new(&inner);
        assert!(
            cache.read_vec(0xff8, 16).is_err(),
            "starts in an unreadable page"
        );
        assert!(
            cache.read_vec(0x3ff8, 16).is_err(),
            "ends in an unreadable page"
        );
        assert_eq!(cache.read_vec(0x3ff0, 16).unwrap(), expected(0x3ff0, 16));
        assert!(cache.read_vec(u64::MAX - 4, 8).is_err(), "wraps around");
        let big = cache.read_vec(0x1000, 3 * 4096).unwrap();
        assert_eq!(
            big,
            expected(0x1000, 3 * 4096),
            "large reads go straight through"
        );
    }
}
