//! Debug information of a mapped module: where it is, whether it belongs to the
//! module, and what it says about an address.
//!
//! Debug info is looked for the way distributions ship it, in gdb's order: the
//! module's own `.debug_info`; `DIR/.build-id/xx/rest.debug` under each debug
//! directory; the `.gnu_debuglink` name next to the module, in its `.debug/`
//! directory and under each debug directory. A separate file is trusted only when
//! its build-id (or, without build-ids, the debuglink CRC) matches the module; a
//! mismatch is reported as a warning and the file ignored. MiniDebugInfo (an
//! xz-compressed ELF in `.gnu_debugdata`, as Fedora ships) adds the symbols a
//! stripped module's `.dynsym` lacks.
//!
//! Parsing is lazy: [`ModuleDebug::load`] finds and maps the files and builds the
//! addr2line context; units and functions are parsed on first lookup and kept.

pub mod answers;

use std::path::Path;
use std::sync::Arc;

use gimli::LittleEndian;

use crate::args::{self, FunctionInfo};
use crate::debugfile::{separate_files, BoundedSink, ElfSections};
pub use crate::debugfile::{DebugInfoError, DebugSearch, DebugSource, DEFAULT_DEBUG_DIR};
use crate::dwarf::{DwarfReader, SharedBytes};
use crate::dwarf_cache::{DiskCache, EntryKey, IndexEntry};
use crate::symbols::Symbol;

/// The debug info of a process's modules, in the order of its
/// [`ProcessSymbols::modules`](crate::symbols::ProcessSymbols), each loaded on first use.
pub struct ModulesDebug {
    cells: Vec<std::cell::OnceCell<ModuleDebug>>,
    search: DebugSearch,
    cache: DwarfCache,
}

impl ModulesDebug {
    /// Nothing loaded yet for `modules` modules; separate files are searched in the
    /// default places, and DWARF parses are shared through `cache`.
    pub fn new(modules: usize, cache: DwarfCache) -> ModulesDebug {
        ModulesDebug {
            cells: (0..modules).map(|_| std::cell::OnceCell::new()).collect(),
            search: DebugSearch::default(),
            cache,
        }
    }

    /// Sets where separate debug files are looked for (forgets what was loaded so far).
    pub fn set_search(&mut self, search: DebugSearch) {
        self.search = search;
        let n = self.cells.len();
        self.cells = (0..n).map(|_| std::cell::OnceCell::new()).collect();
    }

    /// Shares DWARF parses through `cache` (forgets what was loaded so far).
    pub fn set_cache(&mut self, cache: DwarfCache) {
        self.cache = cache;
        let n = self.cells.len();
        self.cells = (0..n).map(|_| std::cell::OnceCell::new()).collect();
    }

    /// The debug info of the module of `symbols` containing runtime address `addr`.
    pub fn for_addr(
        &self,
        symbols: &crate::symbols::ProcessSymbols,
        addr: u64,
    ) -> Option<&ModuleDebug> {
        let i = symbols
            .modules
            .iter()
            .position(|m| m.range.contains(&addr))?;
        let m = &symbols.modules[i];
        if !m.path.starts_with('/') {
            return None;
        }
        Some(self.cells.get(i)?.get_or_init(|| {
            let search = self.search.under(m.root.as_deref());
            ModuleDebug::load_cached(&m.file, m.bias, &search, &self.cache)
        }))
    }

    /// Takes out the loaded debug info of every module holding more than
    /// `max_bytes` of DWARF (it is loaded again when next needed). The caller
    /// decides where to drop it: freeing a large module's DWARF takes milliseconds.
    pub fn take_over(&mut self, max_bytes: usize) -> Vec<ModuleDebug> {
        self.cells
            .iter_mut()
            .filter(|cell| cell.get().is_some_and(|d| d.dwarf_bytes() > max_bytes))
            .filter_map(std::cell::OnceCell::take)
            .collect()
    }

    /// Saves what every loaded module learned from its DWARF ([`ModuleDebug::save_answers`]).
    pub fn save_answers(&self) {
        for debug in self.cells.iter().filter_map(std::cell::OnceCell::get) {
            debug.save_answers();
        }
    }

    /// Problems met while loading debug info so far (e.g. a debug file of another build).
    pub fn warnings(&self) -> Vec<String> {
        self.cells
            .iter()
            .filter_map(std::cell::OnceCell::get)
            .flat_map(|d| d.warnings.iter().cloned())
            .collect()
    }
}

/// A module's debug information, loaded once and queried many times.
pub struct ModuleDebug {
    /// Where the DWARF came from, if any was found.
    pub source: Option<DebugSource>,
    /// Files that were found but not trusted, and other problems, for the user.
    pub warnings: Vec<String>,
    bias: u64,
    /// The parsed DWARF: set at load, or on first need when the answers saved by
    /// an earlier run may make it unnecessary (see [`ModuleDebug::dwarf`]).
    dwarf: std::sync::OnceLock<Option<Arc<DwarfData>>>,
    /// The debug file whose DWARF is parsed on first need, and the cache to use.
    deferred: std::sync::Mutex<Option<(ElfSections, DwarfCache)>>,
    /// Function symbols from MiniDebugInfo (runtime addresses), sorted by address.
    mini_symbols: Vec<Symbol>,
    /// Answers already given, by address.
    memo: std::sync::Mutex<Memo>,
    /// Where the answers are saved for the next run: the on-disk cache and the
    /// key of the debug file they come from ([`crate::answers`]).
    persist: Option<(DiskCache, EntryKey)>,
    /// The answers an earlier run saved, asked before the DWARF.
    saved: Option<answers::Saved>,
}

impl Drop for ModuleDebug {
    fn drop(&mut self) {
        self.save_answers();
    }
}

/// How many answers of each kind a [`Memo`] keeps before it starts over.
const MEMO_MAX: usize = 4096;

/// Answers of [`ModuleDebug::frames`] and [`ModuleDebug::call_site_params`] by
/// address: a reader kept between backtraces (the daemon's) asks about the same
/// return addresses each time, and finding a call site walks its whole unit.
#[derive(Default)]
struct Memo {
    frames: std::collections::HashMap<u64, Arc<[SourceFrame]>>,
    call_sites: std::collections::HashMap<(u64, u64), Vec<CallSiteParam>>,
    /// The answers found in the DWARF since the last save.
    new: answers::Answers,
}

/// Stores `value` under `key`, emptying `map` first when it is full.
fn remember<K: std::hash::Hash + Eq, V: Clone>(
    map: &mut std::collections::HashMap<K, V>,
    key: K,
    value: &V,
) {
    if map.len() >= MEMO_MAX {
        map.clear();
    }
    map.insert(key, value.clone());
}

/// An addr2line context; it parses lazily and caches inside, and the lock makes
/// that safe across threads.
type SharedContext = Arc<std::sync::Mutex<addr2line::Context<DwarfReader>>>;

/// Locks `context`: a panic while parsing leaves the lazily filled caches
/// consistent enough to keep answering (each cell is either filled or not).
fn lock(context: &SharedContext) -> std::sync::MutexGuard<'_, addr2line::Context<DwarfReader>> {
    context.lock().unwrap_or_else(|e| e.into_inner())
}

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
struct DwarfData {
    sections: Vec<(&'static str, SharedBytes)>,
    /// Address ranges (svma) and the `.debug_info` offset of the unit covering each.
    index: Vec<IndexEntry>,
    /// The contexts built so far, by unit offset.
    units: std::sync::Mutex<Vec<(u64, SharedContext)>>,
    /// The context over the whole file, when some unit needs it.
    whole: std::sync::OnceLock<Option<SharedContext>>,
    /// Bytes of the DWARF sections held (decompressed).
    section_bytes: usize,
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
    fn contexts(&self, probe: u64) -> Vec<SharedContext> {
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
    fn whole(&self) -> Option<SharedContext> {
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
struct UnitSlice {
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
fn refers_outside(table: &[u8], _version: u16) -> Option<bool> {
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

/// Identity of a file's contents: device, inode, size and modification time.
type FileKey = (u64, u64, u64, i64, i64);

fn file_key(path: &str) -> Option<FileKey> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// The parses a [`DwarfCache`] knows, by file; each lives as long as a reader holds it.
type SharedFiles = Vec<(FileKey, std::sync::Weak<DwarfData>)>;

/// Parsed DWARF by file, shared by every reader given the same cache.
///
/// The caller owns it and hands a clone (a handle to the same cache) to each
/// reader that should share parses: the daemon gives one to all its process
/// readers, so libc's DWARF is parsed once however many processes it serves. An
/// entry lives as long as some [`ModuleDebug`] uses it; the cache itself holds
/// no parse alive.
///
/// It may also keep what it parses on disk ([`DiskCache`]), for the next
/// process: by default in the user's cache directory, unless `ARGSTASH_CACHE=off`.
#[derive(Clone)]
pub struct DwarfCache {
    files: Arc<std::sync::Mutex<SharedFiles>>,
    disk: Option<DiskCache>,
}

impl Default for DwarfCache {
    fn default() -> Self {
        // Unit tests never touch the user's cache.
        let disk = if cfg!(test) {
            None
        } else {
            DiskCache::from_env()
        };
        DwarfCache::with_disk(disk)
    }
}

impl std::fmt::Debug for DwarfCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DwarfCache")
            .field("files", &self.lock().len())
            .field("disk", &self.disk)
            .finish()
    }
}

impl DwarfCache {
    /// An empty cache, shared by nothing yet, backed by the user's on-disk
    /// cache as the environment says ([`DiskCache::from_env`]).
    pub fn new() -> DwarfCache {
        DwarfCache::default()
    }

    /// An empty cache backed by `disk` (none: memory only).
    pub fn with_disk(disk: Option<DiskCache>) -> DwarfCache {
        DwarfCache {
            files: Arc::default(),
            disk,
        }
    }

    /// The on-disk cache behind this one, if any.
    pub fn disk(&self) -> Option<&DiskCache> {
        self.disk.as_ref()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SharedFiles> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The parse of the file `key` names, if some reader still holds it.
    fn get(&self, key: FileKey) -> Option<Arc<DwarfData>> {
        let mut files = self.lock();
        files.retain(|(_, w)| w.strong_count() > 0);
        files
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, w)| w.upgrade())
    }

    fn insert(&self, key: FileKey, data: &Arc<DwarfData>) {
        self.lock().push((key, Arc::downgrade(data)));
    }
}

/// One source-level frame at a pc: a function, possibly inlined into the next one.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceFrame {
    /// Function name, demangled, without parameter list.
    pub function: Option<String>,
    /// Source file.
    pub file: Option<String>,
    /// Source line.
    pub line: Option<u32>,
    /// The function's parameters (with locations valid at this pc).
    pub info: Option<FunctionInfo>,
}

impl ModuleDebug {
    /// Finds and loads the debug info of the module file `path` loaded at `bias`.
    ///
    /// Never fails: what cannot be read becomes a warning and the module is
    /// symbolized from its symbol tables alone.
    /// The DWARF is parsed for this module alone; [`ModuleDebug::load_cached`]
    /// shares it with other readers.
    pub fn load(path: &Path, bias: u64, search: &DebugSearch) -> ModuleDebug {
        Self::load_with(path, bias, search, true, &DwarfCache::new())
    }

    /// Like [`ModuleDebug::load`], sharing the parsed DWARF through `cache`.
    pub fn load_cached(
        path: &Path,
        bias: u64,
        search: &DebugSearch,
        cache: &DwarfCache,
    ) -> ModuleDebug {
        Self::load_with(path, bias, search, true, cache)
    }

    /// Like [`ModuleDebug::load`] but only for DWARF: skips MiniDebugInfo
    /// (an xz-compressed symbol table), which install never needs.
    pub fn load_dwarf(path: &Path, bias: u64, search: &DebugSearch) -> ModuleDebug {
        Self::load_with(path, bias, search, false, &DwarfCache::new())
    }

    fn load_with(
        path: &Path,
        bias: u64,
        search: &DebugSearch,
        mini: bool,
        cache: &DwarfCache,
    ) -> ModuleDebug {
        let mut md = ModuleDebug {
            source: None,
            warnings: Vec::new(),
            bias,
            dwarf: std::sync::OnceLock::new(),
            deferred: std::sync::Mutex::new(None),
            mini_symbols: Vec::new(),
            memo: Default::default(),
            persist: None,
            saved: None,
        };
        let module = match ElfSections::open(path) {
            Ok(m) => m,
            Err(e) => {
                md.warnings.push(e.to_string());
                return md;
            }
        };
        if mini {
            md.mini_symbols = mini_debuginfo_symbols(&module, bias, &mut md.warnings);
        }
        if module.has(".debug_info") {
            if md.recall(&module, cache) {
                md.source = Some(DebugSource::Embedded);
                md.defer(module, cache);
                return md;
            }
            match load_dwarf(&module, cache) {
                Ok(d) => {
                    md.set_dwarf(d);
                    md.source = Some(DebugSource::Embedded);
                    return md;
                }
                Err(e) => md.warnings.push(e.to_string()),
            }
        }
        let mut skipped = Vec::new();
        let mut failed = Vec::new();
        for (file, source) in separate_files(&module, path, search, &mut skipped) {
            if !file.has(".debug_info") {
                continue;
            }
            if md.recall(&file, cache) {
                md.source = Some(source);
                md.defer(file, cache);
                break;
            }
            match load_dwarf(&file, cache) {
                Ok(d) => {
                    md.set_dwarf(d);
                    md.source = Some(source);
                    break;
                }
                Err(e) => failed.push(e.to_string()),
            }
        }
        md.warnings.extend(skipped);
        md.warnings.extend(failed);
        md
    }

    /// Starts from the answers an earlier run saved for the debug file `file`,
    /// and saves this one's later (when `cache` has a disk). True when some were
    /// saved: the DWARF itself may then never be needed.
    fn recall(&mut self, file: &ElfSections, cache: &DwarfCache) -> bool {
        let Some(disk) = cache.disk() else {
            return false;
        };
        let Some(key) = file
            .build_id()
            .and_then(|id| EntryKey::of_file(Path::new(&file.path), id))
        else {
            return false;
        };
        self.saved = answers::Saved::load(disk, &key, self.bias);
        self.persist = Some((disk.clone(), key));
        self.saved.as_ref().is_some_and(|s| !s.is_empty())
    }

    fn set_dwarf(&mut self, data: Arc<DwarfData>) {
        self.dwarf = std::sync::OnceLock::from(Some(data));
    }

    /// Parses `file`'s DWARF only when an answer is not among the recalled ones.
    fn defer(&mut self, file: ElfSections, cache: &DwarfCache) {
        *self.deferred.get_mut().unwrap_or_else(|e| e.into_inner()) = Some((file, cache.clone()));
    }

    /// The parsed DWARF, parsing a deferred debug file now.
    fn dwarf(&self) -> Option<&Arc<DwarfData>> {
        self.dwarf
            .get_or_init(|| {
                let pending = self
                    .deferred
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                // A file that parsed when its answers were saved parses now; if it
                // no longer does, this module is symbolized from its symbols.
                pending.and_then(|(file, cache)| load_dwarf(&file, &cache).ok())
            })
            .as_ref()
    }

    /// Saves the answers found in the DWARF since the last save, with those
    /// saved before, for the next run (nothing to do when every answer came from
    /// disk). Also done on drop.
    pub fn save_answers(&self) {
        let Some((disk, key)) = &self.persist else {
            return;
        };
        let new = {
            let mut memo = self.memo();
            if memo.new.frames.is_empty() && memo.new.call_sites.is_empty() {
                return;
            }
            std::mem::take(&mut memo.new)
        };
        // Not saving only costs the next run the DWARF work again.
        let _ = answers::store(disk, key, self.bias, self.saved.as_ref(), &new);
    }

    fn memo(&self) -> std::sync::MutexGuard<'_, Memo> {
        self.memo.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True when DWARF was found.
    pub fn has_dwarf(&self) -> bool {
        self.source.is_some()
    }

    /// Bytes of DWARF section data this module holds in memory (0 without DWARF);
    /// the parsed units and line tables add to it as they are queried.
    pub fn dwarf_bytes(&self) -> usize {
        self.dwarf
            .get()
            .and_then(Option::as_ref)
            .map_or(0, |d| d.section_bytes)
    }

    /// The MiniDebugInfo function symbol covering runtime address `pc`.
    pub fn mini_symbol(&self, pc: u64) -> Option<(&Symbol, u64)> {
        let i = self.mini_symbols.partition_point(|s| s.addr <= pc);
        let s = self.mini_symbols.get(i.checked_sub(1)?)?;
        let off = pc - s.addr;
        (off < s.size.max(1)).then_some((s, off))
    }

    /// The source frames at runtime address `pc`, innermost (inlined) first, the
    /// physical function last; empty without DWARF for `pc`. Shared with the
    /// memo: a kept reader asks about the same addresses every backtrace, and
    /// the typed parameters are not copied each time.
    pub fn frames(&self, pc: u64) -> Arc<[SourceFrame]> {
        if let Some(known) = self.memo().frames.get(&pc) {
            return known.clone();
        }
        if let Some(known) = self.saved.as_ref().and_then(|s| s.frames(pc)) {
            remember(&mut self.memo().frames, pc, &known);
            return known;
        }
        let Some(d) = self.dwarf() else {
            return Arc::from([]);
        };
        let probe = pc.wrapping_sub(self.bias);
        let mut out = Vec::new();
        for context in d.contexts(probe) {
            out = self.frames_in(&lock(&context), probe);
            if !out.is_empty() {
                break;
            }
        }
        let out: Arc<[SourceFrame]> = Arc::from(out);
        let mut memo = self.memo();
        remember(&mut memo.new.frames, pc, &out);
        remember(&mut memo.frames, pc, &out);
        out
    }

    fn frames_in(&self, context: &addr2line::Context<DwarfReader>, probe: u64) -> Vec<SourceFrame> {
        let mut out = Vec::new();
        let unit = context.find_dwarf_and_unit(probe).skip_all_loads();
        let Ok(mut iter) = context.find_frames(probe).skip_all_loads() else {
            return out;
        };
        while let Ok(Some(f)) = iter.next() {
            let function = f
                .function
                .as_ref()
                .and_then(|n| n.raw_name().ok())
                .map(|n| demangle(&n));
            let info = match (unit, f.dw_die_offset) {
                (Some(u), Some(off)) => args::function_info(u, off, self.bias).ok(),
                _ => None,
            };
            // gdb qualifies names by their scope (`shapes::settle`) even when the
            // DWARF name is bare, as for inlined static functions.
            let function = match (&function, info.as_ref().and_then(|i| i.name.as_ref())) {
                (Some(f), Some(q)) if !f.contains("::") && q.ends_with(&format!("::{f}")) => {
                    Some(q.clone())
                }
                (None, Some(q)) => Some(q.clone()),
                _ => function,
            };
            out.push(SourceFrame {
                function,
                file: f.location.as_ref().and_then(|l| l.file).map(str::to_string),
                line: f.location.as_ref().and_then(|l| l.line),
                info,
            });
        }
        out
    }

    /// What the call returning to `return_address` passed, from the caller's
    /// call-site DWARF: `(parameter location at the callee's entry, value
    /// expression in the caller)` pairs; `caller_pc` is a pc inside the caller.
    pub fn call_site_params(&self, caller_pc: u64, return_address: u64) -> Vec<CallSiteParam> {
        if let Some(known) = self.memo().call_sites.get(&(caller_pc, return_address)) {
            return known.clone();
        }
        let saved = self.saved.as_ref();
        if let Some(known) = saved.and_then(|s| s.call_sites(caller_pc, return_address)) {
            remember(
                &mut self.memo().call_sites,
                (caller_pc, return_address),
                &known,
            );
            return known;
        }
        let Some(d) = self.dwarf() else {
            return Vec::new();
        };
        let probe = caller_pc.wrapping_sub(self.bias);
        let want = return_address.wrapping_sub(self.bias);
        let mut out = Vec::new();
        for context in d.contexts(probe) {
            let context = lock(&context);
            if let Some(unit) = context.find_dwarf_and_unit(probe).skip_all_loads() {
                // The call site is a descendant of the caller's own function
                // entry: searching that subtree, not the whole unit from its
                // start, is what keeps a cold `bt` through a large unit short.
                let function =
                    context
                        .find_frames(probe)
                        .skip_all_loads()
                        .ok()
                        .and_then(|mut frames| {
                            let mut last = None;
                            while let Ok(Some(f)) = frames.next() {
                                last = f.dw_die_offset.or(last);
                            }
                            last
                        });
                out = call_site_params(unit, want, function).unwrap_or_default();
                break;
            }
        }
        let mut memo = self.memo();
        let at = (caller_pc, return_address);
        remember(&mut memo.new.call_sites, at, &out);
        remember(&mut memo.call_sites, at, &out);
        out
    }

    /// The parameters of the function (not an inlined copy) whose code contains
    /// runtime address `pc`, e.g. a function's entry address.
    pub fn function_info(&self, pc: u64) -> Option<FunctionInfo> {
        self.frames(pc).last()?.info.clone()
    }
}

/// A call's parameter: its location expression at the callee's entry and the
/// expression of its value in the caller (`DW_AT_call_value`).
pub type CallSiteParam = (Vec<u8>, Vec<u8>);

fn exprloc(v: Option<gimli::AttributeValue<DwarfReader>>) -> Option<Vec<u8>> {
    use gimli::Reader;
    match v? {
        gimli::AttributeValue::Exprloc(e) => Some(e.0.to_slice().ok()?.into_owned()),
        _ => None,
    }
}

/// The parameters of the call site in `unit` that returns to `return_svma`,
/// searched among the descendants of the entry at `within` (a function), or in
/// the whole unit.
fn call_site_params(
    unit: gimli::UnitRef<'_, DwarfReader>,
    return_svma: u64,
    within: Option<gimli::UnitOffset<usize>>,
) -> Result<Vec<CallSiteParam>, gimli::Error> {
    let mut cursor = match within {
        Some(offset) => unit.entries_at_offset(offset)?,
        None => unit.entries(),
    };
    let mut top = None;
    let mut site = None;
    while let Some(e) = cursor.next_dfs()? {
        // The first entry read is the subtree's root; a later one at its depth
        // or above is past the subtree.
        match top {
            None => top = Some(e.depth()),
            Some(depth) if e.depth() <= depth => break,
            Some(_) => {}
        }
        let ret = match e.tag() {
            gimli::DW_TAG_call_site => e.attr_value(gimli::DW_AT_call_return_pc),
            gimli::DW_TAG_GNU_call_site => e.attr_value(gimli::DW_AT_low_pc),
            _ => continue,
        };
        if let Some(v) = ret {
            if unit.attr_address(v)? == Some(return_svma) {
                site = Some(e.offset());
                break;
            }
        }
    }
    let Some(site) = site else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let mut tree = unit.entries_tree(Some(site))?;
    let root = tree.root()?;
    let mut children = root.children();
    while let Some(child) = children.next()? {
        let e = child.entry();
        if !matches!(
            e.tag(),
            gimli::DW_TAG_call_site_parameter | gimli::DW_TAG_GNU_call_site_parameter
        ) {
            continue;
        }
        let value = exprloc(e.attr_value(gimli::DW_AT_call_value))
            .or_else(|| exprloc(e.attr_value(gimli::DW_AT_GNU_call_site_value)));
        if let (Some(loc), Some(value)) = (exprloc(e.attr_value(gimli::DW_AT_location)), value) {
            out.push((loc, value));
        }
    }
    Ok(out)
}

/// A module's DWARF read narrowly, to describe the functions that `inject` hooks.
///
/// Reading all of libc's debug info (about 10 MB of inflated DWARF, 4,000 units)
/// to describe one function cost tens of milliseconds. Here `.debug_aranges`
/// picks the compilation unit that covers the function, `.debug_info` is inflated
/// only up to that unit's end, `.debug_abbrev` only up to the next unit's table,
/// and the line, location and range sections are never read: the description
/// of a function entry needs names and types only. Without an address index
/// (clang emits none by default) [`EntryDebug::function_info`] says so and the
/// caller reads everything ([`ModuleDebug`]).
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
    /// [`ModuleDebug::load`] does and reads its address index; nothing else yet.
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
    /// runtime address `pc`, as [`ModuleDebug::function_info`] gives it when that
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
fn grow(
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

/// `(svma range, unit offset)` of every `.debug_aranges` entry, sorted by start.
fn aranges_index(data: &[u8]) -> Result<Vec<(std::ops::Range<u64>, usize)>, gimli::Error> {
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
fn unit_without_lines(
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
fn subprogram_at(unit: gimli::UnitRef<'_, DwarfReader>, svma: u64) -> Option<gimli::UnitOffset> {
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
const DWARF_SECTIONS: &[&str] = &[
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
fn read_sections(file: &ElfSections) -> Vec<(&'static str, SharedBytes)> {
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

/// The parsed DWARF of `file`, shared through `cache` with any other user of the same file.
fn load_dwarf(file: &ElfSections, cache: &DwarfCache) -> Result<Arc<DwarfData>, DebugInfoError> {
    let key = file_key(&file.path);
    if let Some(d) = key.and_then(|k| cache.get(k)) {
        return Ok(d);
    }
    // Parsed without holding the cache's lock: two threads may parse the same
    // file at once, and both results are correct.
    let data = Arc::new(parse_dwarf(file, cache.disk.as_ref())?);
    if let Some(key) = key {
        cache.insert(key, &data);
    }
    Ok(data)
}

/// The on-disk cache key of `file`: only files with compressed DWARF are worth
/// an entry (uncompressed sections are read in place already), and only files
/// with a build-id can have one.
fn disk_key(file: &ElfSections) -> Option<EntryKey> {
    if !DWARF_SECTIONS.iter().any(|n| file.is_compressed(n)) {
        return None;
    }
    EntryKey::of_file(Path::new(&file.path), file.build_id()?)
}

/// The DWARF of `file` from the entry `disk` holds for it, when that entry is
/// valid and agrees with the file (the same sections, of the same sizes).
fn from_disk(file: &ElfSections, disk: &DiskCache, key: &EntryKey) -> Option<DwarfData> {
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

fn parse_dwarf(file: &ElfSections, disk: Option<&DiskCache>) -> Result<DwarfData, DebugInfoError> {
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
fn unit_index(dwarf: &gimli::Dwarf<DwarfReader>) -> Result<Vec<IndexEntry>, gimli::Error> {
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

/// Function symbols from a module's MiniDebugInfo, at runtime addresses, sorted.
fn mini_debuginfo_symbols(
    module: &ElfSections,
    bias: u64,
    warnings: &mut Vec<String>,
) -> Vec<Symbol> {
    let Some(xz) = module.section(".gnu_debugdata") else {
        return Vec::new();
    };
    let mut out = BoundedSink(Vec::new());
    let mut input = std::io::Cursor::new(xz.as_ref());
    if let Err(e) = lzma_rs::xz_decompress(&mut input, &mut out) {
        warnings.push(format!(
            "cannot decompress the MiniDebugInfo (.gnu_debugdata) of {}: {e}",
            module.path
        ));
        return Vec::new();
    }
    let out = out.0;
    let inner = match ElfSections::from_vec(format!("{} (.gnu_debugdata)", module.path), out) {
        Ok(e) => e,
        Err(e) => {
            warnings.push(e.to_string());
            return Vec::new();
        }
    };
    let mut syms: Vec<Symbol> = inner
        .function_symbols()
        .into_iter()
        .map(|(name, addr, size, _)| Symbol {
            name,
            addr: addr.wrapping_add(bias),
            size,
        })
        .collect();
    syms.sort_by_key(|s| s.addr);
    syms
}

/// Demangles a C++ (`_Z...`) or Rust name; gdb style: without the parameter list
/// and, for Rust, without the hash. Other names are returned as they are.
pub fn demangle(name: &str) -> String {
    if let Ok(r) = rustc_demangle::try_demangle(name) {
        return format!("{r:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            let opts = cpp_demangle::DemangleOptions::new().no_params();
            if let Ok(s) = sym.demangle_with_options(&opts) {
                return s;
            }
        }
    }
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_reference_value() {
        assert_eq!(crate::debugfile::crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn demangles_cpp_and_rust_like_gdb() {
        assert_eq!(demangle("_ZN2ns3Foo3barEi"), "ns::Foo::bar");
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("bar"), "bar");
    }

    #[test]
    fn hostile_elf_bytes_are_errors() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..500 {
            let mut b = vec![0u8; 256];
            for v in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *v = x as u8;
            }
            b[..6].copy_from_slice(b"\x7fELF\x02\x01");
            if let Ok(e) = ElfSections::from_vec("fuzz".into(), b) {
                let _ = e.build_id();
                let _ = e.debuglink();
                let _ = e.function_symbols();
                let _ = e.section(".debug_info");
            }
        }
    }

    /// The narrow reader describes libc's functions as the full one does (the
    /// calling-convention view install uses), without reading all the DWARF.
    #[test]
    fn entry_reader_agrees_with_the_full_reader_on_libc() {
        let libc = [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/x86_64-linux-gnu/libc.so.6",
        ]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_file());
        let Some(libc) = libc else {
            eprintln!("skipped: no x86-64 libc.so.6");
            return;
        };
        let search = DebugSearch::default();
        let full = ModuleDebug::load_dwarf(libc, 0, &search);
        if !full.has_dwarf() {
            eprintln!("skipped: libc has no debug info here (apt-get install libc6-dbg)");
            return;
        }
        let mut narrow = EntryDebug::load(libc, 0, &search);
        assert!(narrow.has_dwarf());
        let syms = crate::symbols::separate_symbols(libc, 0, &search);
        let mut picked: Vec<&Symbol> = syms.iter().filter(|s| s.size > 0).step_by(11).collect();
        for name in [
            "unlinkat",
            "write",
            "printf",
            "qsort",
            "__memset_avx2_unaligned_erms",
        ] {
            picked.extend(syms.iter().filter(|s| s.name == name));
        }
        let (mut found, mut not_described, mut unknown) = (0, 0, 0);
        for s in picked {
            let want = full
                .function_info(s.addr)
                .filter(|i| i.entry == Some(s.addr));
            match (narrow.function_info(s.addr), want) {
                (EntryInfo::Found(got), Some(want)) => {
                    // Names may differ: GNU as describes each alias of an assembly
                    // function (`__sigsetjmp`, `__GI___sigsetjmp`) at one address.
                    assert_eq!(got.params.len(), want.params.len(), "{}", s.name);
                    assert_eq!(got.variadic, want.variadic, "{}", s.name);
                    assert_eq!(
                        format!("{:?}", crate::args::x86_64::placement_of(&got)),
                        format!("{:?}", crate::args::x86_64::placement_of(&want)),
                        "{}",
                        s.name
                    );
                    found += 1;
                }
                (EntryInfo::NotDescribed, None) => not_described += 1,
                (EntryInfo::Unknown, _) => unknown += 1,
                (got, want) => panic!("{} at {:#x}: narrow {got:?}, full {want:?}", s.name, s.addr),
            }
        }
        eprintln!(
            "libc: {found} functions described alike, {not_described} by neither, \
             {unknown} left to the full reader"
        );
        assert!(found > 50, "only {found} functions compared");
    }

    /// Readers given one cache share a file's parse; readers with their own do not.
    #[test]
    fn a_dwarf_cache_shares_parses_between_its_users() {
        let exe = std::env::current_exe().unwrap();
        let search = DebugSearch::default();
        let cache = DwarfCache::new();
        let a = ModuleDebug::load_cached(&exe, 0, &search, &cache);
        let Some(da) = a.dwarf().cloned() else {
            eprintln!("skipped: this test binary has no DWARF");
            return;
        };
        let b = ModuleDebug::load_cached(&exe, 0, &search, &cache.clone());
        assert!(Arc::ptr_eq(&da, b.dwarf().unwrap()), "one parse");
        let own = ModuleDebug::load(&exe, 0, &search);
        assert!(
            !Arc::ptr_eq(&da, own.dwarf().unwrap()),
            "a parse of its own"
        );
        // The cache holds no parse alive by itself.
        drop((a, b, da));
        assert!(cache
            .get(file_key(&exe.to_string_lossy()).unwrap())
            .is_none());
    }

    /// libc's DWARF (when its debug file is installed) answers alike from one
    /// context over the whole file, from per-unit contexts, from a disk cache
    /// entry, and after that entry was damaged (it is rebuilt).
    #[test]
    fn per_unit_contexts_and_the_disk_cache_answer_as_one_context() {
        let Some(libc) = [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/x86_64-linux-gnu/libc.so.6",
        ]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_file()) else {
            eprintln!("skipped: no x86-64 libc.so.6");
            return;
        };
        let search = DebugSearch::default();
        let plain = ModuleDebug::load(libc, 0, &search);
        let Some(whole) = plain.dwarf().and_then(|d| d.whole()) else {
            eprintln!("skipped: libc has no debug info here (apt-get install libc6-dbg)");
            return;
        };
        let dir =
            std::env::temp_dir().join(format!("argstash-debuginfo-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let disk = DiskCache::new(dir.clone(), crate::dwarf_cache::DEFAULT_MAX_BYTES);
        let load = || {
            ModuleDebug::load_cached(libc, 0, &search, &DwarfCache::with_disk(Some(disk.clone())))
        };
        let first = load();
        let entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert_eq!(entries.len(), 1, "one entry written: {entries:?}");
        let second = load();
        // Damage the entry's header: the next load rebuilds it.
        let mut bytes = std::fs::read(&entries[0]).unwrap();
        bytes[100] ^= 1;
        std::fs::write(&entries[0], &bytes).unwrap();
        let third = load();
        assert_ne!(std::fs::read(&entries[0]).unwrap(), bytes, "rebuilt");

        let syms = crate::symbols::separate_symbols(libc, 0, &search);
        type Shown = (Option<String>, Option<String>, Option<u32>, Option<usize>);
        let shown = |f: Arc<[SourceFrame]>| -> Vec<Shown> {
            f.iter()
                .map(|f| {
                    let params = f.info.as_ref().map(|i| i.params.len());
                    (f.function.clone(), f.file.clone(), f.line, params)
                })
                .collect()
        };
        let mut compared = 0;
        for s in syms.iter().filter(|s| s.size > 0).step_by(13) {
            let pc = s.addr + s.size / 2;
            let mut want = Vec::new();
            {
                let context = lock(&whole);
                let mut it = context.find_frames(pc).skip_all_loads().unwrap();
                while let Ok(Some(f)) = it.next() {
                    want.push((
                        f.function
                            .as_ref()
                            .and_then(|n| n.raw_name().ok())
                            .map(|n| demangle(&n)),
                        f.location.as_ref().and_then(|l| l.line),
                    ));
                }
            }
            let got = shown(plain.frames(pc));
            let lines: Vec<_> = got.iter().map(|g| g.2).collect();
            assert_eq!(
                lines,
                want.iter().map(|w| w.1).collect::<Vec<_>>(),
                "{} at {pc:#x}",
                s.name
            );
            for other in [&first, &second, &third] {
                assert_eq!(shown(other.frames(pc)), got, "{} at {pc:#x}", s.name);
            }
            compared += 1;
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(compared > 100, "only {compared} addresses compared");
    }

    #[test]
    fn candidate_paths_follow_gdb() {
        let search = DebugSearch {
            dirs: vec![std::path::PathBuf::from("/dbg")],
            root: None,
        };
        let c = crate::debugfile::candidates(
            Path::new("/opt/app/prog"),
            Some(&[0xab, 0xcd, 0xef]),
            Some("prog.debug"),
            &search,
        );
        let paths: Vec<String> = c.iter().map(|(p, _)| p.display().to_string()).collect();
        assert_eq!(
            paths,
            [
                "/dbg/.build-id/ab/cdef.debug",
                "/opt/app/prog.debug",
                "/opt/app/.debug/prog.debug",
                "/dbg/opt/app/prog.debug"
            ]
        );
    }

    #[test]
    fn candidate_paths_under_a_sysroot_search_its_debug_dirs_first() {
        let search = DebugSearch {
            dirs: vec![std::path::PathBuf::from("/dbg")],
            root: Some(std::path::PathBuf::from("/sys/root")),
        };
        let c = crate::debugfile::candidates(
            Path::new("/sys/root/opt/app/prog"),
            Some(&[0xab, 0xcd, 0xef]),
            Some("prog.debug"),
            &search,
        );
        let paths: Vec<String> = c.iter().map(|(p, _)| p.display().to_string()).collect();
        assert_eq!(
            paths,
            [
                "/sys/root/dbg/.build-id/ab/cdef.debug",
                "/dbg/.build-id/ab/cdef.debug",
                "/sys/root/opt/app/prog.debug",
                "/sys/root/opt/app/.debug/prog.debug",
                "/sys/root/dbg/opt/app/prog.debug",
                "/dbg/opt/app/prog.debug"
            ]
        );
    }
}
