//! [`EntryDebug`]: what a function entry's DWARF says of its parameters, read
//! without parsing the whole file.

use super::data::{aranges_index, subprogram_at, unit_without_lines};
use crate::args::{self, FunctionInfo};
use crate::debugfile::DebugSearch;
use crate::debugfile::{separate_files, ElfSections};
use crate::dwarf::{DwarfReader, SharedBytes};
use gimli::LittleEndian;
use std::path::Path;
use std::sync::Arc;

/// A module's DWARF read narrowly, to describe the functions that `inject` hooks.
///
/// Reading all of libc's debug info (about 10 MB of inflated DWARF, 4,000 units)
/// to describe one function cost tens of milliseconds. Here `.debug_aranges`
/// picks the compilation unit that covers the function, `.debug_info` is inflated
/// only up to that unit's end, `.debug_abbrev` only up to the next unit's table,
/// and the line, location and range sections are never read: the description
/// of a function entry needs names and types only. Without an address index
/// (clang emits none by default) [`EntryDebug::function_info`] says so and the
/// caller reads everything ([`ModuleDebug`](crate::debuginfo::ModuleDebug)).
pub struct EntryDebug {
    /// The file holding the DWARF, when there is one.
    file: Option<ElfSections>,
    bias: u64,
    /// Address ranges (svma) and the offset of the unit covering each, sorted.
    index: Vec<(std::ops::Range<u64>, usize)>,
    /// `.debug_info` inflated so far (a prefix) and whether that is all of it.
    info: Option<(Arc<[u8]>, bool)>,
    /// `.debug_abbrev` inflated so far (a prefix).
    abbrev: Option<(Arc<[u8]>, bool)>,
    /// Small sections read whole: `.debug_str`, `.debug_line_str`,
    /// `.debug_str_offsets`, `.debug_addr`.
    strings: Option<[Arc<[u8]>; 4]>,
}

/// The answer of [`EntryDebug::function_info`].
#[derive(Debug)]
pub enum EntryInfo {
    /// The function starting at the address, described.
    Found(FunctionInfo),
    /// The unit covering the address describes no function starting there.
    NotDescribed,
    /// This narrow reader cannot tell: no DWARF address index covers the address,
    /// or the data is malformed; read all the DWARF instead.
    Unknown,
}

impl EntryDebug {
    /// Finds the DWARF of the module file `path` (loaded at `bias`) as
    /// [`ModuleDebug::load`](crate::debuginfo::ModuleDebug::load) does and reads its address index; nothing else yet.
    pub fn load(path: &Path, bias: u64, search: &DebugSearch) -> EntryDebug {
        let mut ed = EntryDebug {
            file: None,
            bias,
            index: Vec::new(),
            info: None,
            abbrev: None,
            strings: None,
        };
        let Ok(module) = ElfSections::open(path) else {
            return ed;
        };
        let file = if module.has(".debug_info") {
            Some(module)
        } else {
            let mut warnings = Vec::new();
            let found = separate_files(&module, path, search, &mut warnings)
                .map(|(f, _)| f)
                .find(|f| f.has(".debug_info"));
            found
        };
        let Some(file) = file else {
            return ed;
        };
        if let Some(aranges) = file.section(".debug_aranges") {
            ed.index = aranges_index(&aranges).unwrap_or_default();
        }
        ed.file = Some(file);
        ed
    }

    /// True when DWARF was found.
    pub fn has_dwarf(&self) -> bool {
        self.file.is_some()
    }

    /// The description of the function (not an inlined copy) whose entry is
    /// runtime address `pc`, as [`ModuleDebug::function_info`](crate::debuginfo::ModuleDebug::function_info) gives it when that
    /// function's entry is `pc`.
    pub fn function_info(&mut self, pc: u64) -> EntryInfo {
        let svma = pc.wrapping_sub(self.bias);
        let i = self.index.partition_point(|(r, _)| r.start <= svma);
        let unit_offset = match i.checked_sub(1).and_then(|i| self.index.get(i)) {
            Some((r, off)) if r.contains(&svma) => *off,
            _ => return EntryInfo::Unknown,
        };
        self.describe(unit_offset, svma)
            .unwrap_or(EntryInfo::Unknown)
    }

    fn describe(&mut self, unit_offset: usize, svma: u64) -> Option<EntryInfo> {
        let file = self.file.as_ref()?;
        let reader =
            |data: &Arc<[u8]>| DwarfReader::new(SharedBytes::from(data.clone()), LittleEndian);

        // .debug_info up to the end of this unit, plus the next unit's header
        // (for the bound of this unit's abbreviations).
        let info_size = file.section_size(".debug_info")?;
        let header_at = |info: &Arc<[u8]>, at: usize| {
            gimli::DebugInfo::from(reader(info))
                .header_from_offset(gimli::DebugInfoOffset(at))
                .ok()
        };
        // Units are contiguous: the next unit the index lists starts at or after
        // this one's end, so one inflate reaches both this unit and the next header.
        let next_listed = self
            .index
            .iter()
            .map(|(_, off)| *off)
            .filter(|&off| off > unit_offset)
            .min()
            .unwrap_or(info_size);
        let need = next_listed.saturating_add(32).min(info_size);
        let info = grow(&mut self.info, file, ".debug_info", need)?;
        let header = header_at(&info, unit_offset)?;
        let end = unit_offset.checked_add(header.length_including_self())?;
        let need = end.saturating_add(32).min(info_size);
        let info = grow(&mut self.info, file, ".debug_info", need)?;
        let next_abbrev = (end < info_size)
            .then(|| header_at(&info, end))
            .flatten()
            .map(|h| h.debug_abbrev_offset().0)
            .filter(|&next| next > header.debug_abbrev_offset().0);

        let abbrev_size = file.section_size(".debug_abbrev")?;
        let abbrev_need = next_abbrev.unwrap_or(abbrev_size).min(abbrev_size);
        let abbrev = grow(&mut self.abbrev, file, ".debug_abbrev", abbrev_need)?;
        if self.strings.is_none() {
            let whole = |name| {
                file.section_shared(name)
                    .unwrap_or_else(|| Arc::from(&[][..]))
            };
            self.strings = Some([
                whole(".debug_str"),
                whole(".debug_line_str"),
                whole(".debug_str_offsets"),
                whole(".debug_addr"),
            ]);
        }
        let [strs, line_strs, str_offsets, addr] = self.strings.as_ref()?;
        let empty = || reader(&Arc::from(&[][..]));
        let dwarf = gimli::Dwarf::load(|id| -> Result<DwarfReader, gimli::Error> {
            Ok(match id {
                gimli::SectionId::DebugInfo => reader(&info),
                gimli::SectionId::DebugAbbrev => reader(&abbrev),
                gimli::SectionId::DebugStr => reader(strs),
                gimli::SectionId::DebugLineStr => reader(line_strs),
                gimli::SectionId::DebugStrOffsets => reader(str_offsets),
                gimli::SectionId::DebugAddr => reader(addr),
                _ => empty(),
            })
        })
        .ok()?;
        let unit = unit_without_lines(&dwarf, header)?;
        let unit_ref = unit.unit_ref(&dwarf);
        let Some(die) = subprogram_at(unit_ref, svma) else {
            return Some(EntryInfo::NotDescribed);
        };
        Some(match args::function_info(unit_ref, die, self.bias) {
            Ok(info) => EntryInfo::Found(info),
            Err(_) => EntryInfo::Unknown,
        })
    }
}

/// Makes sure `cell` holds at least the first `len` bytes of section `name`
/// (inflating again from the start when it must grow); returns them.
pub(super) fn grow(
    cell: &mut Option<(Arc<[u8]>, bool)>,
    file: &ElfSections,
    name: &str,
    len: usize,
) -> Option<Arc<[u8]>> {
    match cell {
        Some((have, whole)) if *whole || have.len() >= len => Some(have.clone()),
        _ => {
            // At least double what was read: several functions of one module
            // then inflate the section a few times at most, not once each.
            let len = len.max(cell.as_ref().map_or(0, |(have, _)| have.len() * 2));
            let data = file.section_prefix(name, len)?;
            let whole = file
                .section_size(name)
                .is_some_and(|size| data.len() >= size);
            *cell = Some((data.clone(), whole));
            Some(data)
        }
    }
}
