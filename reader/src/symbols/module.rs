//! [`Module`]: one mapped ELF file, its placement and its function symbols.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use goblin::elf::section_header::SHN_UNDEF;

use super::demangled::Demangled;
use super::elf::{
    collect_symbols, map_elf_file, open_mapped_file, parse_module, parse_view, read_process_image,
    separate_symbols, FileData, Load, Opened, Section, SymbolTable, PAGE_MASK,
};
use super::error::{ElfProblem, SymbolError};
use super::symbol::{Symbol, VDSO};
use crate::procfs::MapEntry;

/// How far past an unsized symbol [`Module::lookup`] still attributes addresses to it.
pub(super) const UNSIZED_WINDOW: u64 = 64 * 1024;

/// One mapped ELF file: its runtime placement and function symbols.
pub struct Module {
    /// Path as in `/proc/PID/maps` (without ` (deleted)`), or `[vdso]`.
    pub path: String,
    /// The file on this machine the module was read from, where its debug info is
    /// looked for too: `path` for a live process, the file found under `--sysroot`
    /// (or given by `--exe`) for a core.
    pub file: PathBuf,
    /// The directory `file` lies under when it is another root's copy (a core's
    /// `--sysroot`): that root's debug directories are searched first.
    pub root: Option<PathBuf>,
    /// Load bias: runtime address = svma + bias (wrapping).
    pub bias: u64,
    /// Lowest start .. highest end of the file's mappings.
    pub range: Range<u64>,
    /// Runtime ranges of the executable mappings.
    pub exec_ranges: Vec<Range<u64>>,
    /// True for ELFCLASS64.
    pub is_64: bool,
    /// The `DT_SONAME` of a shared library (`libz.so.1`), if it has one.
    pub soname: Option<String>,
    /// The function symbols, read from the file on first use (a backtrace needs
    /// those of the few modules its frames are in, not of every mapped library).
    table: std::sync::OnceLock<SymbolTable>,
    sections: Vec<Section>,
    loads: Vec<Load>,
    data: FileData,
    /// Function symbols of the separate debug file's `.symtab`, read on first use.
    separate: std::sync::OnceLock<Vec<Symbol>>,
    /// Demangled names of the C++ and Rust function symbols, made on first use.
    demangled: std::sync::OnceLock<Vec<Demangled>>,
}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module")
            .field("path", &self.path)
            .field("bias", &format_args!("{:#x}", self.bias))
            .field(
                "range",
                &format_args!("{:#x}..{:#x}", self.range.start, self.range.end),
            )
            .field("is_64", &self.is_64)
            .field("symbols", &self.table.get().map(|t| t.symbols.len()))
            .field("file_len", &self.data.bytes().len())
            .finish_non_exhaustive()
    }
}

impl Module {
    /// Loads the mapped file `path` (as in `/proc/PID/maps`) of process `pid`.
    pub fn load(pid: i32, path: &str, maps: &[MapEntry]) -> Result<Module, SymbolError> {
        let entries: Vec<&MapEntry> = maps
            .iter()
            .filter(|e| e.file_path() == path || e.path == path)
            .collect();
        let Some(first) = entries.first() else {
            return Err(SymbolError::NotMapped {
                path: path.to_string(),
            });
        };
        let path = first.file_path().to_string();
        let data = if path == VDSO {
            read_process_image(pid, first, &path)?
        } else if path.starts_with('/') {
            let (data, opened) = open_mapped_file(pid, &path, &entries)?;
            let mut m = Module::from_data(path, data, &entries)?;
            // Gone from its path or replaced there: the debug info is read from
            // the mapped file too, never from what the path holds now.
            if let Opened::MapFiles(p) = opened {
                m.file = PathBuf::from(p);
            }
            return Ok(m);
        } else {
            return Err(SymbolError::Elf {
                path,
                problem: ElfProblem::NotAFileMapping,
            });
        };
        Module::from_data(path, data, &entries)
    }

    /// Loads a module from an ELF file on disk at `file`, placed where `entries`
    /// (the mappings of `path`, e.g. rebuilt from a core's `NT_FILE` note) say.
    pub fn from_file(
        path: &str,
        file: &Path,
        entries: &[&MapEntry],
    ) -> Result<Module, SymbolError> {
        let shown = file.display().to_string();
        let opened = crate::shared_file::open_regular(file).map_err(|source| SymbolError::Io {
            path: shown.clone(),
            source,
        })?;
        let data = map_elf_file(opened, &shown, path)?;
        let mut m = Module::from_data(path.to_string(), data, entries)?;
        m.file = file.to_path_buf();
        Ok(m)
    }

    /// This module with its file under `root` (a core's `--sysroot`), whose debug
    /// directories are searched first.
    pub fn under_root(mut self, root: Option<&Path>) -> Module {
        self.root = root
            .filter(|r| self.file.starts_with(r))
            .map(Path::to_path_buf);
        self
    }

    /// Builds a module from an ELF image copied out of memory (a core's `[vdso]`).
    pub fn from_image(
        path: &str,
        image: Vec<u8>,
        entries: &[&MapEntry],
    ) -> Result<Module, SymbolError> {
        Module::from_data(path.to_string(), FileData::Owned(image), entries)
    }

    fn from_data(
        path: String,
        data: FileData,
        entries: &[&MapEntry],
    ) -> Result<Module, SymbolError> {
        let parsed = parse_module(data.bytes(), entries).map_err(|problem| SymbolError::Elf {
            path: path.clone(),
            problem,
        })?;
        Ok(Module {
            file: PathBuf::from(&path),
            root: None,
            path,
            bias: parsed.bias,
            range: parsed.range,
            exec_ranges: parsed.exec_ranges,
            is_64: parsed.is_64,
            soname: parsed.soname,
            table: std::sync::OnceLock::new(),
            sections: parsed.sections,
            loads: parsed.loads,
            data,
            separate: std::sync::OnceLock::new(),
            demangled: std::sync::OnceLock::new(),
        })
    }

    /// The last component of the path (`libc.so.6`).
    pub fn file_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    /// Function symbols sorted by address; at one address the preferred name comes first.
    ///
    /// Merged from `.symtab` and `.dynsym`; one entry per distinct name and address.
    /// At one address, exported names come before local ones and names with fewer
    /// leading underscores first (`write` before `__libc_write`).
    pub fn symbols(&self) -> &[Symbol] {
        &self.table().symbols
    }

    /// The runtime address of `name` when the module's `.dynsym` defines it: a
    /// quick "which module exports this" that does not build the symbol table.
    pub fn exported(&self, name: &str) -> Option<u64> {
        let view = parse_view(self.data.bytes()).ok()?;
        let dynsym = view.dynsym.as_ref()?;
        dynsym
            .syms
            .iter()
            .find(|sym| {
                sym.st_shndx != SHN_UNDEF as usize
                    && sym.st_value != 0
                    && dynsym.name(sym.st_name) == Some(name)
            })
            .map(|sym| sym.st_value.wrapping_add(self.bias))
    }

    /// The symbol table, read from the file the first time it is needed.
    ///
    /// The image was parsed once already when the module was loaded, so a failure
    /// here (which cannot come from the same bytes) just leaves the table empty.
    fn table(&self) -> &SymbolTable {
        self.table.get_or_init(|| {
            let (symbols, ifuncs) = parse_view(self.data.bytes())
                .map(|view| collect_symbols(&view, self.bias))
                .unwrap_or_default();
            let max_size = symbols.iter().map(|s| s.size).max().unwrap_or(0);
            SymbolTable {
                symbols,
                max_size,
                ifuncs,
            }
        })
    }

    /// The function containing `addr` and the offset of `addr` into it.
    ///
    /// A sized symbol that covers `addr` wins. Failing that, the nearest preceding
    /// symbol is used if it has no size, lies within 64 KiB and in the same
    /// executable mapping as `addr`.
    pub fn lookup(&self, addr: u64) -> Option<(&Symbol, u64)> {
        let table = self.table();
        let end = table.symbols.partition_point(|s| s.addr <= addr);
        let mut i = end;
        while i > 0 {
            i -= 1;
            let start = table.symbols.get(i)?.addr;
            let off = addr - start;
            if off > table.max_size {
                break;
            }
            let first = table.symbols.partition_point(|s| s.addr < start);
            if let Some(s) = table.symbols.get(first..=i)?.iter().find(|s| s.size > off) {
                return Some((s, off));
            }
            i = first;
        }
        let last = table.symbols.get(end.checked_sub(1)?)?;
        let off = addr - last.addr;
        let same_exec = self
            .exec_ranges
            .iter()
            .any(|r| r.contains(&addr) && r.contains(&last.addr));
        if off >= UNSIZED_WINDOW || !same_exec || !self.same_section(addr, last.addr) {
            return None;
        }
        let first = table.symbols.partition_point(|s| s.addr < last.addr);
        let s = table
            .symbols
            .get(first..end)?
            .iter()
            .find(|s| s.size == 0)?;
        Some((s, off))
    }

    /// False when section headers put runtime addresses `a` and `b` in different sections
    /// (e.g. `_init` in `.init` and a stub in `.plt`); true when there are none to ask.
    fn same_section(&self, a: u64, b: u64) -> bool {
        let section_of = |addr: u64| {
            let svma = addr.wrapping_sub(self.bias);
            self.sections
                .iter()
                .position(|s| s.addr != 0 && svma >= s.addr && svma - s.addr < s.size)
        };
        section_of(a) == section_of(b)
    }

    /// The preferred function symbol that starts exactly at `addr`, sized ones first.
    pub fn symbol_at(&self, addr: u64) -> Option<&Symbol> {
        let symbols = &self.table().symbols;
        let first = symbols.partition_point(|s| s.addr < addr);
        let end = symbols.partition_point(|s| s.addr <= addr);
        let at = symbols.get(first..end)?;
        at.iter().find(|s| s.size > 0).or_else(|| at.first())
    }

    /// Function symbols with exactly this name (one per address).
    pub fn symbols_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Symbol> + 'a {
        self.table().symbols.iter().filter(move |s| s.name == name)
    }

    /// The demangled names of the module's C++ and Rust function symbols, made
    /// on first use and kept.
    pub(super) fn demangled(&self) -> &[Demangled] {
        self.demangled.get_or_init(|| {
            self.symbols()
                .iter()
                .enumerate()
                .filter_map(|(i, s)| Demangled::new(i, &s.name))
                .collect()
        })
    }

    /// True when `name` is one of the module's GNU indirect functions.
    pub fn is_ifunc(&self, name: &str) -> bool {
        self.ifunc_resolver(name).is_some()
    }

    /// Runtime address of the resolver of the GNU indirect function `name`, if it is one.
    pub fn ifunc_resolver(&self, name: &str) -> Option<u64> {
        let i = self
            .table()
            .ifuncs
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()?;
        self.table().ifuncs.get(i).map(|(_, addr)| *addr)
    }

    /// Names of the module's GNU indirect functions (`STT_GNU_IFUNC`), sorted.
    pub fn ifunc_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.table().ifuncs.iter().map(|(n, _)| n.as_str())
    }

    /// Function symbols of the module's separate debug file's `.symtab` (found by
    /// build-id or debuglink under the default debug directory, the module's root's
    /// first, and checked against
    /// the module), sorted by address, preferred name first; read on first use and
    /// kept. Empty for the `[vdso]` and when there is no such file.
    pub fn separate_symbols(&self) -> &[Symbol] {
        self.separate.get_or_init(|| {
            if !self.path.starts_with('/') {
                return Vec::new();
            }
            separate_symbols(
                &self.file,
                self.bias,
                &crate::debugfile::DebugSearch::default().under(self.root.as_deref()),
            )
        })
    }

    /// The preferred symbol that starts exactly at `addr`, sized first: from the
    /// module's own tables, else from its separate debug file.
    pub fn name_at(&self, addr: u64) -> Option<&Symbol> {
        let sized = |s: &&Symbol| s.size > 0;
        let own = self.symbol_at(addr);
        if let Some(s) = own.filter(sized) {
            return Some(s);
        }
        let separate = self.separate_symbols();
        let first = separate.partition_point(|s| s.addr < addr);
        let end = separate.partition_point(|s| s.addr <= addr);
        let at = separate.get(first..end).unwrap_or_default();
        at.iter().find(sized).or(own).or_else(|| at.first())
    }

    /// Raw bytes and svma range of a section by name; `None` if missing or `SHT_NOBITS`.
    pub fn section(&self, name: &str) -> Option<(Range<u64>, &[u8])> {
        let s = self.sections.iter().find(|s| s.name == name && !s.nobits)?;
        let start = usize::try_from(s.offset).ok()?;
        let len = usize::try_from(s.size).ok()?;
        let bytes = self.data().get(start..start.checked_add(len)?)?;
        Some((s.addr..s.addr.checked_add(s.size)?, bytes))
    }

    /// The file bytes that back `len` bytes at runtime address `addr`, if all are in the file.
    pub fn file_bytes(&self, addr: u64, len: u64) -> Option<&[u8]> {
        let svma = addr.wrapping_sub(self.bias);
        let load = self.loads.iter().find(|l| {
            svma >= l.vaddr && svma - l.vaddr < l.filesz && len <= l.filesz - (svma - l.vaddr)
        })?;
        let start = usize::try_from(load.offset.checked_add(svma - load.vaddr)?).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        self.data().get(start..end)
    }

    /// The svma of the first byte of the image: the lowest page-aligned `PT_LOAD` address.
    pub fn base_svma(&self) -> u64 {
        self.loads
            .iter()
            .map(|l| l.vaddr & PAGE_MASK)
            .min()
            .unwrap_or(0)
    }

    /// The whole file's bytes.
    pub fn data(&self) -> &[u8] {
        self.data.bytes()
    }
}
