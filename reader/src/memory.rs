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
}

impl<M: Memory + ?Sized> Memory for &M {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        (**self).read(addr, buf)
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
