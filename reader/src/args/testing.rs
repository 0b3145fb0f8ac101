//! What the unit tests of the args modules share.

use crate::memory::{Memory, MemoryError};

/// Target memory holding the bytes `.1` at address `.0`; any other read fails.
pub(crate) struct Bytes(pub u64, pub Vec<u8>);

impl Memory for Bytes {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let off = addr.checked_sub(self.0).map(|o| o as usize);
        match off.and_then(|o| self.1.get(o..o + buf.len())) {
            Some(b) => {
                buf.copy_from_slice(b);
                Ok(())
            }
            None => Err(MemoryError::Read {
                addr,
                len: buf.len(),
                source: std::io::ErrorKind::UnexpectedEof.into(),
            }),
        }
    }
}
