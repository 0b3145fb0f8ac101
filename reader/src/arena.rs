//! Finding the arenas in a target from its memory alone.
//!
//! An arena is an anonymous private `r-x` mapping whose first bytes are the
//! [`trampolines::arena`] header. Nothing about hooks is kept outside the target:
//! every reader (`bt`, `list`, `eject`, a restarted tool, a core-file reader)
//! rediscovers the arenas by scanning the mappings for the magic.

use trampolines::arena::{Arena, ArenaHeader, ARENA_MAGIC, HEADER_LEN, PAGE};

use trampolines::FormatError;

use crate::memory::{Memory, MemoryError};
use crate::procfs::MapEntry;

/// Why the arenas of a target could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ArenaError {
    /// Reading an arena's header or records failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// An arena in the target is malformed.
    #[error("arena at 0x{addr:x} in the target is unreadable: {source}")]
    Format {
        /// Arena address.
        addr: u64,
        /// Why.
        source: FormatError,
    },
}

/// Finds every arena in the mappings (anonymous `r-x` mappings starting with the magic).
pub fn discover(maps: &[MapEntry], mem: &dyn Memory) -> Result<Vec<Arena>, ArenaError> {
    let mut found = Vec::new();
    for m in maps {
        if !(m.perms.exec && m.perms.read && m.perms.private) || m.inode != 0 || !m.path.is_empty()
        {
            continue;
        }
        if m.end - m.start < PAGE as u64 {
            continue;
        }
        let mut head = [0u8; HEADER_LEN];
        if mem.read(m.start, &mut head).is_err() || head[..8] != ARENA_MAGIC {
            continue;
        }
        let header = ArenaHeader::decode(m.start, &head).map_err(|source| ArenaError::Format {
            addr: m.start,
            source,
        })?;
        found.push(read_arena(mem, &header)?);
    }
    Ok(found)
}

/// Reads an arena's header and records.
pub fn read_arena(mem: &dyn Memory, header: &ArenaHeader) -> Result<Arena, ArenaError> {
    let mut bytes = vec![0u8; header.header_len()];
    mem.read(header.base, &mut bytes)?;
    Arena::decode(header.base, &bytes).map_err(|source| ArenaError::Format {
        addr: header.base,
        source,
    })
}
