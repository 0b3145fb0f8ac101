//! The gimli reader type every DWARF consumer in this crate shares: a leaf, so
//! that [`crate::args`] (parameters and values from DWARF) and [`crate::debuginfo`]
//! (finding and loading a module's DWARF) both build on it without using each other.

use std::ops::Deref;
use std::sync::Arc;

use gimli::{EndianReader, LittleEndian};

/// The byte reader every DWARF structure here is built on.
pub type DwarfReader = EndianReader<LittleEndian, SharedBytes>;

/// Bytes shared by reference count: owned in memory or mapped from a file (a
/// debug file's uncompressed sections, or an on-disk cache entry), so DWARF is
/// read in place without a copy.
#[derive(Clone)]
pub struct SharedBytes(Arc<dyn Deref<Target = [u8]> + Send + Sync>);

impl SharedBytes {
    /// Shares `owner`'s bytes (e.g. an `Arc<[u8]>` or a memory map).
    pub fn new(owner: impl Deref<Target = [u8]> + Send + Sync + 'static) -> SharedBytes {
        SharedBytes(Arc::new(owner))
    }

    /// No bytes.
    pub fn empty() -> SharedBytes {
        SharedBytes::new(&[][..])
    }
}

impl Deref for SharedBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedBytes({} bytes)", self.len())
    }
}

impl From<Arc<[u8]>> for SharedBytes {
    fn from(bytes: Arc<[u8]>) -> SharedBytes {
        SharedBytes::new(bytes)
    }
}

impl From<&[u8]> for SharedBytes {
    fn from(bytes: &[u8]) -> SharedBytes {
        SharedBytes::new(Arc::<[u8]>::from(bytes))
    }
}

// SAFETY: the bytes live behind an `Arc` (on the heap, or in a mapping that is
// never remapped), so moving or cloning a `SharedBytes` never moves them, and
// the slice `deref` returns stays valid while any clone lives.
unsafe impl gimli::StableDeref for SharedBytes {}
// SAFETY: as above: a clone shares the same bytes at the same address.
unsafe impl gimli::CloneStableDeref for SharedBytes {}
