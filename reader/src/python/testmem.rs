//! A sparse in-memory [`Memory`] for the unit tests: only bytes put are readable.

use std::collections::BTreeMap;

use crate::memory::{Memory, MemoryError};

/// Sparse bytes by address; reading anything not put fails.
#[derive(Default)]
pub struct FakeMem {
    bytes: BTreeMap<u64, u8>,
}

impl FakeMem {
    /// Puts `data` at `addr`.
    pub fn put(&mut self, addr: u64, data: &[u8]) {
        for (i, b) in data.iter().enumerate() {
            self.bytes.insert(addr + i as u64, *b);
        }
    }

    /// Puts a little-endian 64-bit word.
    pub fn put_u64(&mut self, addr: u64, v: u64) {
        self.put(addr, &v.to_le_bytes());
    }

    /// Puts a little-endian 32-bit word.
    pub fn put_u32(&mut self, addr: u64, v: u32) {
        self.put(addr, &v.to_le_bytes());
    }
}

impl Memory for FakeMem {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        for (i, b) in buf.iter_mut().enumerate() {
            match self.bytes.get(&addr.wrapping_add(i as u64)) {
                Some(v) => *b = *v,
                None => {
                    return Err(MemoryError::Read {
                        addr,
                        len: buf.len(),
                        source: std::io::ErrorKind::UnexpectedEof.into(),
                    })
                }
            }
        }
        Ok(())
    }
}
