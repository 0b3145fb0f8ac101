//! The parsed DWARF of one file: its sections, unit index and aranges, parsed
//! or read back from the on-disk cache.

use crate::debugfile::DebugInfoError;
use crate::debugfile::ElfSections;
use crate::dwarf::{DwarfReader, SharedBytes};
use crate::dwarf_cache::{DiskCache, EntryKey, IndexEntry};
use gimli::LittleEndian;
use std::path::Path;
use std::sync::Arc;

/// Parsed DWARF of one file, shared through a [`DwarfCache`] by every
/// [`ModuleDebug`] of that file (libc's, for instance, serves all the processes
/// a daemon reads).
///
/// Lookups go unit by unit: the index says which unit covers an address, and
/// each unit gets an addr2line context of its own, built on first use over that
/// unit alone. Building one context over all of libc's 4,000 units cost more
/// than inflating its DWARF; a unit's costs microseconds. Units that refer to
/// other units (`DW_FORM_ref_addr` and the like) are looked up in one context
/// over the whole file instead.
pub(super) struct DwarfData {
    sections: Vec<(&'static str, SharedBytes)>,
    /// Address ranges (svma) and the `.debug_info` offset of the unit covering each.
    index: Vec<IndexEntry>,
    /// The contexts built so far, by unit offset.
    units: std::sync::Mutex<Vec<(u64, SharedContext)>>,
    /// The context over the whole file, when some unit needs it.
    whole: std::sync::OnceLock<Option<SharedContext>>,
    /// Bytes of the DWARF sections held (decompressed).
    pub(super) section_bytes: usize,
}

impl DwarfData {
    fn new(sections: Vec<(&'static str, SharedBytes)>, index: Vec<IndexEntry>) -> Self {
        let section_bytes = sections.iter().map(|(_, d)| d.len()).sum();
        DwarfData {
            sections,
            index,
            units: std::sync::Mutex::new(Vec::new()),
            whole: std::sync::OnceLock::new(),
            section_bytes,
        }
    }

    fn section(&self, name: &str) -> SharedBytes {
        self.sections
            .iter()
            .find(|(n, _)| *n == name)
            .map_or_else(SharedBytes::empty, |(_, d)| d.clone())
    }

    /// The sections as gimli reads them, `.debug_info` replaced by `info`.
    fn dwarf(&self, info: Option<SharedBytes>, aranges: bool) -> gimli::Dwarf<DwarfReader> {
        let load = |id: gimli::SectionId| -> Result<DwarfReader, std::convert::Infallible> {
            let data = match id {
                gimli::SectionId::DebugInfo => {
                    info.clone().unwrap_or_else(|| self.section(id.name()))
                }
                gimli::SectionId::DebugAranges if !aranges => SharedBytes::empty(),
                _ => self.section(id.name()),
            };
            Ok(DwarfReader::new(data, LittleEndian))
        };
        match gimli::Dwarf::load(load) {
            Ok(d) => d,
            Err(e) => match e {},
        }
    }

    /// The contexts that may describe svma `probe`, most likely first.
    pub(super) fn contexts(&self, probe: u64) -> Vec<SharedContext> {
        let mut hits: Vec<(u64, u64)> = self
            .index
            .iter()
            .filter(|(r, _)| r.contains(&probe))
            .map(|(r, unit)| (r.end, *unit))
            .collect();
        // addr2line's order: the range that ends first, then the earlier unit.
        hits.sort_unstable();
        let mut out: Vec<SharedContext> = Vec::new();
        for (_, unit) in hits {
            if let Some(c) = self.unit_context(unit) {
                if !out.iter().any(|o| Arc::ptr_eq(o, &c)) {
                    out.push(c);
                }
            }
        }
        out
    }

    /// The context of the unit at `.debug_info` offset `unit` (or the whole
    /// file's, when the unit refers to others).
    fn unit_context(&self, unit: u64) -> Option<SharedContext> {
        if let Some((_, c)) = self
            .units
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(u, _)| *u == unit)
        {
            return Some(c.clone());
        }
        let made = match self.slice_unit(unit) {
            Some(info) => {
                let dwarf = self.dwarf(Some(info), false);
                let context = addr2line::Context::from_dwarf(dwarf).ok()?;
                Arc::new(std::sync::Mutex::new(context))
            }
            None => self.whole()?,
        };
        let mut units = self.units.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, c)) = units.iter().find(|(u, _)| *u == unit) {
            return Some(c.clone());
        }
        units.push((unit, made.clone()));
        Some(made)
    }

    /// The one context over all units, built on first need.
    pub(super) fn whole(&self) -> Option<SharedContext> {
        self.whole
            .get_or_init(|| {
                let context = addr2line::Context::from_dwarf(self.dwarf(None, true)).ok()?;
                Some(Arc::new(std::sync::Mutex::new(context)))
            })
            .clone()
    }

    /// `.debug_info` cut to the unit at `unit` alone (its offsets then start at
    /// 0; unit-relative references are unchanged); `None` when the unit refers
    /// outside itself, so that cutting would lose what it refers to.
    fn slice_unit(&self, unit: u64) -> Option<SharedBytes> {
        let info = self.section(".debug_info");
        let start = usize::try_from(unit).ok()?;
        let header = gimli::DebugInfo::from(DwarfReader::new(info.clone(), LittleEndian))
            .header_from_offset(gimli::DebugInfoOffset(start))
            .ok()?;
        if !matches!(
            header.type_(),
            gimli::UnitType::Compilation | gimli::UnitType::Skeleton(_)
        ) {
            return None;
        }
        let end = start.checked_add(header.length_including_self())?;
        let abbrev = self.section(".debug_abbrev");
        let abbrev = abbrev.get(header.debug_abbrev_offset().0..)?;
        if refers_outside(abbrev, header.encoding().version)? {
            return None;
        }
        info.get(start..end)?;
        Some(SharedBytes::new(UnitSlice {
            info,
            range: start..end,
        }))
    }
}

/// One unit's bytes within a shared `.debug_info`.
pub(super) struct UnitSlice {
    info: SharedBytes,
    range: std::ops::Range<usize>,
}

impl std::ops::Deref for UnitSlice {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.info[self.range.clone()]
    }
}

/// Whether the abbreviation table at the start of `table` lets its unit refer
/// outside itself: to another unit, a type unit, a supplementary file, or an
/// imported (partial) unit; also for forms only known per entry
/// (`DW_FORM_indirect`). `None` when the table is malformed.
pub(super) fn refers_outside(table: &[u8], _version: u16) -> Option<bool> {
    use gimli::Reader;
    let mut r = gimli::EndianSlice::new(table, LittleEndian);
    loop {
        let code = r.read_uleb128().ok()?;
        if code == 0 {
            return Some(false);
        }
        let tag = r.read_uleb128().ok()?;
        if tag == u64::from(gimli::DW_TAG_imported_unit.0) {
            return Some(true);
        }
        r.read_u8().ok()?;
        loop {
            let name = r.read_uleb128().ok()?;
            let form = r.read_uleb128().ok()?;
            if name == 0 && form == 0 {
                break;
            }
            let form = gimli::DwForm(u16::try_from(form).ok()?);
            if matches!(
                form,
                gimli::DW_FORM_ref_addr
                    | gimli::DW_FORM_ref_sig8
                    | gimli::DW_FORM_ref_sup4
                    | gimli::DW_FORM_ref_sup8
                    | gimli::DW_FORM_GNU_ref_alt
                    | gimli::DW_FORM_indirect
            ) {
                return Some(true);
            }
            if form == gimli::DW_FORM_implicit_const {
                r.read_sleb128().ok()?;
            }
        }
    }
}

/// `(svma range, unit offset)` of every `.debug_aranges` entry, sorted by start.
pub(super) fn aranges_index(
    data: &[u8],
) -> Result<Vec<(std::ops::Range<u64>, usize)>, gimli::Error> {
    let aranges = gimli::DebugAranges::new(data, LittleEndian);
    let mut headers = aranges.headers();
    let mut out = Vec::new();
    while let Some(header) = headers.next()? {
        let unit = header.debug_info_offset().0;
        let mut entries = header.entries();
        while let Some(entry) = entries.next()? {
            let range = entry.range();
            if range.begin < range.end {
                out.push((range.begin..range.end, unit));
            }
        }
    }
    out.sort_by_key(|(r, _)| (r.start, r.end));
    Ok(out)
}

/// A unit without its line program (so `.debug_line` need not be read): the
/// root's bases and name, as `gimli::Unit::new` reads them.
pub(super) fn unit_without_lines(
    dwarf: &gimli::Dwarf<DwarfReader>,
    header: gimli::UnitHeader<DwarfReader>,
) -> Option<gimli::Unit<DwarfReader>> {
    let abbreviations = dwarf.abbreviations(&header).ok()?;
    let encoding = header.encoding();
    let mut unit = gimli::Unit {
        abbreviations,
        name: None,
        comp_dir: None,
        low_pc: 0,
        str_offsets_base: gimli::DebugStrOffsetsBase::default_for_encoding_and_file(
            encoding,
            dwarf.file_type,
        ),
        addr_base: gimli::DebugAddrBase(0),
        loclists_base: gimli::DebugLocListsBase::default_for_encoding_and_file(
            encoding,
            dwarf.file_type,
        ),
        rnglists_base: gimli::DebugRngListsBase::default_for_encoding_and_file(
            encoding,
            dwarf.file_type,
        ),
        line_program: None,
        dwo_id: None,
        header,
    };
    let (mut name, mut low_pc) = (None, None);
    {
        let mut cursor = unit.header.entries(&unit.abbreviations);
        cursor.next_dfs().ok()?;
        let root = cursor.current()?;
        for attr in root.attrs() {
            match (attr.name(), attr.value()) {
                (gimli::DW_AT_name, v) => name = Some(v),
                (gimli::DW_AT_low_pc, v) => low_pc = Some(v),
                (gimli::DW_AT_str_offsets_base, gimli::AttributeValue::DebugStrOffsetsBase(b)) => {
                    unit.str_offsets_base = b
                }
                (
                    gimli::DW_AT_addr_base | gimli::DW_AT_GNU_addr_base,
                    gimli::AttributeValue::DebugAddrBase(b),
                ) => unit.addr_base = b,
                (gimli::DW_AT_loclists_base, gimli::AttributeValue::DebugLocListsBase(b)) => {
                    unit.loclists_base = b
                }
                (
                    gimli::DW_AT_rnglists_base | gimli::DW_AT_GNU_ranges_base,
                    gimli::AttributeValue::DebugRngListsBase(b),
                ) => unit.rnglists_base = b,
                _ => {}
            }
        }
    }
    unit.name = name.and_then(|v| dwarf.attr_string(&unit, v).ok());
    if let Some(v) = low_pc {
        unit.low_pc = dwarf.attr_address(&unit, v).ok()??;
    }
    Some(unit)
}

/// The `DW_TAG_subprogram` whose `DW_AT_low_pc` is `svma`.
pub(super) fn subprogram_at(
    unit: gimli::UnitRef<'_, DwarfReader>,
    svma: u64,
) -> Option<gimli::UnitOffset> {
    let mut cursor = unit.entries();
    while let Some(e) = cursor.next_dfs().ok()? {
        if e.tag() != gimli::DW_TAG_subprogram {
            continue;
        }
        if let Some(v) = e.attr_value(gimli::DW_AT_low_pc) {
            if unit.attr_address(v).ok()? == Some(svma) {
                return Some(e.offset());
            }
        }
    }
    None
}

/// The DWARF sections gimli reads, by name.
pub(super) const DWARF_SECTIONS: &[&str] = &[
    ".debug_abbrev",
    ".debug_addr",
    ".debug_aranges",
    ".debug_info",
    ".debug_line",
    ".debug_line_str",
    ".debug_loc",
    ".debug_loclists",
    ".debug_ranges",
    ".debug_rnglists",
    ".debug_str",
    ".debug_str_offsets",
];

/// Reads (and decompresses) the DWARF sections, on two threads: distributions
/// compress them, and inflating is most of the cold cost. Uncompressed sections
/// are read in place from the file's mapping.
pub(super) fn read_sections(file: &ElfSections) -> Vec<(&'static str, SharedBytes)> {
    let mut names: Vec<(&'static str, u64)> = DWARF_SECTIONS
        .iter()
        .filter_map(|n| file.header(n).map(|h| (*n, h.size)))
        .collect();
    names.sort_by_key(|(_, size)| std::cmp::Reverse(*size));
    // Greedy split by size into two halves.
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (mut sa, mut sb) = (0u64, 0u64);
    for (n, size) in names {
        if sa <= sb {
            a.push(n);
            sa += size;
        } else {
            b.push(n);
            sb += size;
        }
    }
    let read = |names: Vec<&'static str>| -> Vec<(&'static str, SharedBytes)> {
        names
            .into_iter()
            .filter_map(|n| Some((n, file.section_bytes(n)?)))
            .collect()
    };
    if b.is_empty() || !b.iter().any(|n| file.is_compressed(n)) {
        let mut out = read(a);
        out.extend(read(b));
        return out;
    }
    std::thread::scope(|scope| {
        let other = scope.spawn(|| read(b));
        let mut out = read(a);
        out.extend(other.join().unwrap_or_default());
        out
    })
}

/// The on-disk cache key of `file`: only files with compressed DWARF are worth
/// an entry (uncompressed sections are read in place already), and only files
/// with a build-id can have one.
pub(super) fn disk_key(file: &ElfSections) -> Option<EntryKey> {
    if !DWARF_SECTIONS.iter().any(|n| file.is_compressed(n)) {
        return None;
    }
    EntryKey::of_file(Path::new(&file.path), file.build_id()?)
}

/// The DWARF of `file` from the entry `disk` holds for it, when that entry is
/// valid and agrees with the file (the same sections, of the same sizes).
pub(super) fn from_disk(file: &ElfSections, disk: &DiskCache, key: &EntryKey) -> Option<DwarfData> {
    let entry = disk.load(key).ok()?;
    let mut sections = Vec::new();
    for name in DWARF_SECTIONS {
        match (file.header(name).is_some(), entry.section(name)) {
            (false, None) => {}
            (true, Some(bytes)) if file.section_size(name) == Some(bytes.len()) => {
                sections.push((*name, bytes));
            }
            _ => return None,
        }
    }
    if entry.section_names().count() != sections.len() {
        return None;
    }
    let info_len = sections
        .iter()
        .find(|(n, _)| *n == ".debug_info")
        .map_or(0, |(_, d)| d.len() as u64);
    if entry.index.iter().any(|(_, unit)| *unit >= info_len) {
        return None;
    }
    Some(DwarfData::new(sections, entry.index))
}

pub(super) fn parse_dwarf(
    file: &ElfSections,
    disk: Option<&DiskCache>,
) -> Result<DwarfData, DebugInfoError> {
    let disk = disk.and_then(|d| Some((d, disk_key(file)?)));
    if let Some((disk, key)) = &disk {
        if let Some(data) = from_disk(file, disk, key) {
            return Ok(data);
        }
    }
    let sections = read_sections(file);
    let data = DwarfData::new(sections, Vec::new());
    let index = unit_index(&data.dwarf(None, true)).map_err(|source| DebugInfoError::Dwarf {
        path: file.path.clone(),
        source,
    })?;
    if let Some((disk, key)) = &disk {
        let refs: Vec<(&str, &[u8])> = data.sections.iter().map(|(n, d)| (*n, &**d)).collect();
        // A cache that cannot be written only costs the next run time.
        let _ = disk.store(key, &refs, &index);
    }
    Ok(DwarfData { index, ..data })
}

/// Which unit covers which addresses, as addr2line decides it: a unit's
/// `.debug_aranges` entries, else its own ranges (`DW_AT_ranges`,
/// `DW_AT_low_pc`/`DW_AT_high_pc`), else its line program's sequences. Only the
/// units without aranges are parsed (gcc gives every unit aranges).
pub(super) fn unit_index(
    dwarf: &gimli::Dwarf<DwarfReader>,
) -> Result<Vec<IndexEntry>, gimli::Error> {
    let mut aranges: Vec<(usize, std::ops::Range<u64>)> = Vec::new();
    let mut headers = dwarf.debug_aranges.headers();
    while let Some(header) = headers.next()? {
        let unit = header.debug_info_offset().0;
        let mut entries = header.entries();
        // Entry errors end this set only, as addr2line ignores them.
        while let Ok(Some(e)) = entries.next() {
            let r = e.range();
            if r.begin < r.end {
                aranges.push((unit, r.begin..r.end));
            }
        }
    }
    aranges.sort_by_key(|(unit, r)| (*unit, r.start));
    let mut out = Vec::new();
    let mut units = dwarf.units();
    while let Some(header) = units.next()? {
        let Some(offset) = header.debug_info_offset() else {
            continue;
        };
        if matches!(
            header.type_(),
            gimli::UnitType::Type { .. }
                | gimli::UnitType::SplitType { .. }
                | gimli::UnitType::Partial
        ) {
            continue;
        }
        let unit = offset.0;
        let first = aranges.partition_point(|(u, _)| *u < unit);
        let listed = aranges[first..].iter().take_while(|(u, _)| *u == unit);
        let before = out.len();
        out.extend(listed.map(|(_, r)| (r.clone(), unit as u64)));
        if out.len() > before {
            continue;
        }
        let Ok(parsed) = dwarf.unit(header) else {
            continue;
        };
        if let Ok(mut ranges) = dwarf.unit_ranges(&parsed) {
            while let Ok(Some(r)) = ranges.next() {
                if r.begin < r.end {
                    out.push((r.begin..r.end, unit as u64));
                }
            }
        }
        if out.len() > before {
            continue;
        }
        if let Some(program) = parsed.line_program.clone() {
            if let Ok((_, sequences)) = program.sequences() {
                for s in sequences.iter().filter(|s| s.start < s.end) {
                    out.push((s.start..s.end, unit as u64));
                }
            }
        }
    }
    out.sort_by_key(|(r, unit)| (r.start, r.end, *unit));
    Ok(out)
}

/// An addr2line context; it parses lazily and caches inside, and the lock makes
/// that safe across threads.
pub(super) type SharedContext = Arc<std::sync::Mutex<addr2line::Context<DwarfReader>>>;

/// Locks `context`: a panic while parsing leaves the lazily filled caches
/// consistent enough to keep answering (each cell is either filled or not).
pub(super) fn lock(
    context: &SharedContext,
) -> std::sync::MutexGuard<'_, addr2line::Context<DwarfReader>> {
    context.lock().unwrap_or_else(|e| e.into_inner())
}
