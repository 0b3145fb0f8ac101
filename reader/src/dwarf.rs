//! The gimli reader type every DWARF consumer in this crate shares: a leaf, so
//! that [`crate::args`] (parameters and values from DWARF) and [`crate::debuginfo`]
//! (finding and loading a module's DWARF) both build on it without using each other.

use gimli::{EndianArcSlice, LittleEndian};

/// The byte reader every DWARF structure here is built on.
pub type DwarfReader = EndianArcSlice<LittleEndian>;
