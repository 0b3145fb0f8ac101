//! The reader's top-level error: what could not be read, and where.

use thiserror::Error;
use trampolines::FormatError;

use crate::arena::ArenaError;
use crate::core::CoreError;
use crate::hint::Hint;
use crate::memory::MemoryError;
use crate::symbols::SymbolError;

/// Everything a reader operation can fail with.
#[derive(Debug, Error)]
pub enum Error {
    /// Reading target memory failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// A module's symbols could not be read, or a name could not be resolved.
    #[error(transparent)]
    Symbol(#[from] SymbolError),
    /// An arena in the target is malformed.
    #[error("arena at 0x{addr:x} in the target is unreadable: {source}")]
    Format {
        /// Arena address.
        addr: u64,
        /// Why.
        source: FormatError,
    },
    /// A core file could not be read.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// Reading a file under /proc failed.
    #[error("cannot read {path}: {source}")]
    Proc {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

impl From<ArenaError> for Error {
    fn from(e: ArenaError) -> Error {
        match e {
            ArenaError::Memory(e) => Error::Memory(e),
            ArenaError::Format { addr, source } => Error::Format { addr, source },
        }
    }
}

impl Error {
    /// What the caller can do about this error, if the error knows.
    pub fn hint(&self) -> Option<Hint> {
        match self {
            Error::Symbol(e) => e.hint(),
            Error::Core(e) => e.hint(),
            Error::Memory(_) | Error::Format { .. } | Error::Proc { .. } => None,
        }
    }
}
