//! [`ModuleDebug`]: one module's debug information, loaded once and asked many
//! times (source frames, call-site parameters, MiniDebugInfo symbols), with the
//! answers it remembers.

use super::answers;
use super::cache::{load_dwarf, DwarfCache};
use super::data::{lock, DwarfData};
use super::demangle;
use super::source::{CallSiteParam, SourceFrame};
use crate::args::{self, FunctionInfo};
use crate::debugfile::{separate_files, BoundedSink, ElfSections};
use crate::debugfile::{DebugSearch, DebugSource};
use crate::dwarf::DwarfReader;
use crate::dwarf_cache::{DiskCache, EntryKey};
use crate::symbols::Symbol;
use std::path::Path;
use std::sync::Arc;

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

/// How many answers of each kind a [`Memo`] keeps before it starts over.
pub(super) const MEMO_MAX: usize = 4096;

/// Answers of [`ModuleDebug::frames`] and [`ModuleDebug::call_site_params`] by
/// address: a reader kept between backtraces (the daemon's) asks about the same
/// return addresses each time, and finding a call site walks its whole unit.
#[derive(Default)]
pub(super) struct Memo {
    frames: std::collections::HashMap<u64, Arc<[SourceFrame]>>,
    call_sites: std::collections::HashMap<(u64, u64), Vec<CallSiteParam>>,
    /// The answers found in the DWARF since the last save.
    new: answers::Answers,
}

/// Stores `value` under `key`, emptying `map` first when it is full.
pub(super) fn remember<K: std::hash::Hash + Eq, V: Clone>(
    map: &mut std::collections::HashMap<K, V>,
    key: K,
    value: &V,
) {
    if map.len() >= MEMO_MAX {
        map.clear();
    }
    map.insert(key, value.clone());
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
    pub(super) fn dwarf(&self) -> Option<&Arc<DwarfData>> {
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
    /// disk). Never done behind the caller's back (not on drop): the owners
    /// call it ([`crate::debuginfo::ModulesDebug::save_answers`], before they
    /// forget loaded debug info and at the end of each backtrace or recording).
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

pub(super) fn exprloc(v: Option<gimli::AttributeValue<DwarfReader>>) -> Option<Vec<u8>> {
    use gimli::Reader;
    match v? {
        gimli::AttributeValue::Exprloc(e) => Some(e.0.to_slice().ok()?.into_owned()),
        _ => None,
    }
}

/// The parameters of the call site in `unit` that returns to `return_svma`,
/// searched among the descendants of the entry at `within` (a function), or in
/// the whole unit.
pub(super) fn call_site_params(
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

/// Function symbols from a module's MiniDebugInfo, at runtime addresses, sorted.
pub(super) fn mini_debuginfo_symbols(
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
