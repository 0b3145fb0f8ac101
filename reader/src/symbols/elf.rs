//! Reading one ELF file: opening the very file a process mapped, its sections,
//! loads, load bias and function symbols (and those of its separate debug file).

use std::borrow::Cow;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use goblin::elf::program_header::PT_LOAD;
use goblin::elf::section_header::{SHN_UNDEF, SHT_NOBITS};
use goblin::elf::sym::Sym;
use goblin::elf::sym::{STB_LOCAL, STT_FUNC, STT_GNU_IFUNC};
use goblin::elf::Elf;
use goblin::options::ParseOptions;

use super::error::{ElfProblem, SymbolError};
use super::symbol::Symbol;
use super::view::{ElfView, SymbolSection};
use crate::procfs::MapEntry;

/// Mask that rounds an address or file offset down to its 4 KiB page.
pub(super) const PAGE_MASK: u64 = !0xfff;
/// Largest `[vdso]` image read from process memory.
pub(super) const MAX_VDSO_LEN: u64 = 1 << 20;
/// How many `PT_LOAD` headers are checked when scoring a candidate load bias.
pub(super) const MAX_SCORED_LOADS: usize = 64;
/// Smallest file that can hold an ELF header (the 32-bit one is 52 bytes).
pub(super) const MIN_ELF_LEN: u64 = 52;

/// The bytes of a module's file: mapped from disk, or copied (the `[vdso]`).
pub(super) enum FileData {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl FileData {
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            FileData::Mapped(map) => map,
            FileData::Owned(vec) => vec,
        }
    }
}

/// A section header reduced to what lookups need.
#[derive(Debug, Clone)]
pub(super) struct Section {
    pub(super) name: String,
    pub(super) addr: u64,
    pub(super) size: u64,
    pub(super) offset: u64,
    pub(super) nobits: bool,
}

/// A `PT_LOAD` program header.
#[derive(Debug, Clone, Copy)]
pub(super) struct Load {
    pub(super) vaddr: u64,
    pub(super) memsz: u64,
    pub(super) offset: u64,
    pub(super) filesz: u64,
}

/// Everything taken out of the parsed ELF, so the parse can borrow the file bytes
/// and be dropped before the bytes move into the [`Module`].
pub(super) struct Parsed {
    pub(super) bias: u64,
    pub(super) range: Range<u64>,
    pub(super) exec_ranges: Vec<Range<u64>>,
    pub(super) is_64: bool,
    pub(super) soname: Option<String>,
    pub(super) sections: Vec<Section>,
    pub(super) loads: Vec<Load>,
}

/// A module's function symbols, sorted by address.
pub(super) struct SymbolTable {
    pub(super) symbols: Vec<Symbol>,
    /// The largest symbol size (bounds the search for a covering symbol).
    pub(super) max_size: u64,
    /// GNU indirect functions: name and runtime address of the resolver, sorted by name.
    pub(super) ifuncs: Vec<(String, u64)>,
}

/// Which file [`open_mapped_file`] opened.
pub(super) enum Opened {
    /// The file at the path (through `/proc/PID/root`): the very inode mapped.
    Path,
    /// `/proc/PID/map_files/START-END`: the path is gone or holds another file.
    MapFiles(String),
}

/// Opens a mapped file: the exact inode the process has mapped, or nothing.
///
/// `/proc/PID/root/<path>` reaches files inside the target's mount namespace (for
/// containers). If that path is gone, deleted or now holds a different inode (the
/// file was replaced on disk, as a package upgrade does), `/proc/PID/map_files/`
/// is tried, which opens the very file that is mapped; if that is not permitted
/// either, the file is refused ([`SymbolError::ReplacedOnDisk`]): another file's
/// symbols and unwind tables would name and unwind frames wrongly.
pub(super) fn open_mapped_file(
    pid: i32,
    path: &str,
    entries: &[&MapEntry],
) -> Result<(FileData, Opened), SymbolError> {
    let root_path = crate::procfs::path_in_root(pid, path);
    let inode = entries.first().map_or(0, |e| e.inode);
    // Never waits on a FIFO put where a mapped file was (a deleted file in /tmp).
    let by_path = crate::shared_file::open_regular(Path::new(&root_path));
    let same_inode = match &by_path {
        Ok(f) => f.metadata().is_ok_and(|m| m.ino() == inode),
        Err(_) => false,
    };
    if same_inode {
        let file = by_path.map_err(|source| SymbolError::Io {
            path: root_path.clone(),
            source,
        })?;
        return Ok((map_elf_file(file, &root_path, path)?, Opened::Path));
    }
    let Some(first) = entries.first() else {
        return Err(SymbolError::NotMapped {
            path: path.to_string(),
        });
    };
    let map_files = format!("/proc/{pid}/map_files/{:x}-{:x}", first.start, first.end);
    let source = match File::open(&map_files) {
        Ok(f) => {
            return Ok((
                map_elf_file(f, &map_files, path)?,
                Opened::MapFiles(map_files),
            ))
        }
        Err(e) => e,
    };
    let deleted = match by_path {
        Ok(_) => false,
        Err(e) if e.kind() == io::ErrorKind::NotFound => true,
        // Not a replacement: the path cannot be read (permissions, a FIFO...).
        Err(source) => {
            return Err(SymbolError::Io {
                path: root_path,
                source,
            })
        }
    };
    Err(SymbolError::ReplacedOnDisk {
        path: path.to_string(),
        deleted,
        map_files,
        source,
    })
}

/// Maps an opened file read-only after checking it starts with an ELF header.
pub(super) fn map_elf_file(file: File, shown: &str, path: &str) -> Result<FileData, SymbolError> {
    let io_err = |source| SymbolError::Io {
        path: shown.to_string(),
        source,
    };
    let len = file.metadata().map_err(io_err)?.len();
    let mut magic = [0u8; 4];
    if len < MIN_ELF_LEN || file.read_exact_at(&mut magic, 0).is_err() || &magic != b"\x7fELF" {
        return Err(SymbolError::Elf {
            path: path.to_string(),
            problem: ElfProblem::NoHeader,
        });
    }
    // SAFETY: the file is mapped read-only and private, and we never write through
    // the mapping. The remaining hazard is another process truncating or rewriting
    // the file while it is mapped: reads past the new end would raise SIGBUS and
    // rewritten bytes would change under us. Executables and libraries in use are
    // replaced by rename (a new inode), not rewritten in place, so this is the same
    // risk every debugger and profiler that maps its target's files accepts.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err)?;
    Ok(FileData::Mapped(map))
}

/// Reads an ELF image that exists only in the process's memory (the `[vdso]`).
pub(super) fn read_process_image(
    pid: i32,
    entry: &MapEntry,
    path: &str,
) -> Result<FileData, SymbolError> {
    let mem_path = format!("/proc/{pid}/mem");
    let len = entry.end.saturating_sub(entry.start).min(MAX_VDSO_LEN);
    let len = usize::try_from(len).map_err(|_| SymbolError::Elf {
        path: path.to_string(),
        problem: ElfProblem::TooLarge,
    })?;
    let mut buf = vec![0u8; len];
    File::open(&mem_path)
        .and_then(|f| f.read_exact_at(&mut buf, entry.start))
        .map_err(|source| SymbolError::Io {
            path: mem_path,
            source,
        })?;
    Ok(FileData::Owned(buf))
}

/// Parses an ELF image, turning a parser panic on hostile input into an error.
pub(super) fn parse_elf(bytes: &[u8]) -> Result<Elf<'_>, ElfProblem> {
    if bytes.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err(ElfProblem::NoHeader);
    }
    let opts = ParseOptions::permissive();
    match std::panic::catch_unwind(|| Elf::parse_with_opts(bytes, &opts)) {
        Ok(Ok(elf)) => Ok(elf),
        Ok(Err(e)) => Err(ElfProblem::Parse(e)),
        Err(_) => Err(ElfProblem::ParserPanicked),
    }
}

/// Reads the [`ElfView`] of an image, turning a parser panic on hostile input into an error.
pub(super) fn parse_view(bytes: &[u8]) -> Result<ElfView<'_>, ElfProblem> {
    if bytes.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err(ElfProblem::NoHeader);
    }
    match std::panic::catch_unwind(|| ElfView::parse(bytes)) {
        Ok(Ok(view)) => Ok(view),
        Ok(Err(e)) => Err(ElfProblem::Parse(e)),
        Err(_) => Err(ElfProblem::ParserPanicked),
    }
}

/// Finds the load bias that places the `PT_LOAD` segments onto the file's mappings.
///
/// Takes the first `PT_LOAD` that some mapping matches (`offset == p_offset & !0xfff`);
/// if several mappings match it (the file is mapped more than once), the bias that
/// lines up the most segments wins.
pub(super) fn compute_bias(loads: &[Load], entries: &[&MapEntry]) -> Option<u64> {
    let lines_up = |bias: u64| {
        let scored = loads.iter().take(MAX_SCORED_LOADS);
        scored
            .filter(|l| {
                let page = (l.vaddr & PAGE_MASK).wrapping_add(bias);
                entries
                    .iter()
                    .any(|e| e.offset == l.offset & PAGE_MASK && e.start == page)
            })
            .count()
    };
    for load in loads {
        let mut best: Option<(usize, u64)> = None;
        for e in entries
            .iter()
            .filter(|e| e.offset == load.offset & PAGE_MASK)
        {
            let bias = e.start.wrapping_sub(load.vaddr & PAGE_MASK);
            let score = lines_up(bias);
            match best {
                Some((s, _)) if s >= score => {}
                _ => best = Some((score, bias)),
            }
        }
        if let Some((_, bias)) = best {
            return Some(bias);
        }
    }
    None
}

/// A function symbol before merging, with what decides which name is preferred.
pub(super) struct RawSym<'a> {
    name: Cow<'a, str>,
    addr: u64,
    size: u64,
    local: bool,
    from_dynsym: bool,
}

impl RawSym<'_> {
    /// Sort key among symbols at one address: exported, fewer leading `_`, `.symtab` first.
    fn preference(&self) -> (bool, usize, bool) {
        let underscores = self.name.bytes().take_while(|&b| b == b'_').count();
        (self.local, underscores, self.from_dynsym)
    }
}

pub(super) fn parse_module(bytes: &[u8], entries: &[&MapEntry]) -> Result<Parsed, ElfProblem> {
    let elf = parse_view(bytes)?;
    let loads: Vec<Load> = elf
        .program_headers
        .iter()
        .filter(|p| p.p_type == PT_LOAD)
        .map(|p| Load {
            vaddr: p.p_vaddr,
            memsz: p.p_memsz,
            offset: p.p_offset,
            filesz: p.p_filesz,
        })
        .collect();
    let bias = compute_bias(&loads, entries).ok_or(ElfProblem::NoMatchingMapping)?;

    // The mappings that belong to this placement of the image (a file can be mapped
    // again elsewhere, e.g. read as data).
    let image = loads.iter().try_fold(None::<(u64, u64)>, |acc, l| {
        let lo = (l.vaddr & PAGE_MASK).wrapping_add(bias);
        let hi = l.vaddr.checked_add(l.memsz)?.checked_add(0xfff)? & PAGE_MASK;
        let hi = hi.wrapping_add(bias);
        Some(Some(acc.map_or((lo, hi), |(a, b): (u64, u64)| {
            (a.min(lo), b.max(hi))
        })))
    });
    let mut own: Vec<&MapEntry> = match image {
        Some(Some((lo, hi))) => entries
            .iter()
            .copied()
            .filter(|e| e.start >= lo && e.end <= hi)
            .collect(),
        _ => Vec::new(),
    };
    if own.is_empty() {
        own = entries.to_vec();
    }
    let start = own.iter().map(|e| e.start).min().unwrap_or(0);
    let end = own.iter().map(|e| e.end).max().unwrap_or(0);
    let exec_ranges = own
        .iter()
        .filter(|e| e.perms.exec)
        .map(|e| e.range())
        .collect();

    let sections = elf
        .section_headers
        .iter()
        .map(|sh| Section {
            name: elf.section_name(sh).to_string(),
            addr: sh.sh_addr,
            size: sh.sh_size,
            offset: sh.sh_offset,
            nobits: sh.sh_type == SHT_NOBITS,
        })
        .collect();

    Ok(Parsed {
        bias,
        range: start..end,
        exec_ranges,
        is_64: elf.is_64,
        soname: elf.soname.filter(|n| !n.is_empty()).map(str::to_string),
        sections,
        loads,
    })
}

/// The symbol's kind when it is one that [`collect_symbols`] keeps (a defined
/// function or indirect function), else `None`; read before its name is looked up.
pub(super) fn kept_kind(sym: &Sym) -> Option<u8> {
    let defined = sym.st_shndx != SHN_UNDEF as usize && sym.st_value != 0;
    let kind = sym.st_type();
    (defined && (kind == STT_FUNC || kind == STT_GNU_IFUNC)).then_some(kind)
}

/// `NAME` of a `.symtab` name of the form `NAME@@VERSION`, else the name itself.
pub(super) fn without_default_version(name: &str) -> &str {
    if !name.as_bytes().contains(&b'@') {
        return name;
    }
    name.split_once("@@").map_or(name, |(plain, _)| plain)
}

/// Adds a symbol [`kept_kind`] kept, named `name`, at its runtime address (value
/// plus `bias`): a function to `raw`, an indirect function to `ifuncs`.
pub(super) fn keep<'a>(
    raw: &mut Vec<RawSym<'a>>,
    ifuncs: &mut Vec<(String, u64)>,
    (sym, kind, bias): (&Sym, u8, u64),
    name: Cow<'a, str>,
    from_dynsym: bool,
) {
    let addr = sym.st_value.wrapping_add(bias);
    if kind == STT_FUNC {
        raw.push(RawSym {
            name,
            addr,
            size: sym.st_size,
            local: sym.st_bind() == STB_LOCAL,
            from_dynsym,
        });
    } else {
        ifuncs.push((name.into_owned(), addr));
    }
}

/// Merges `.symtab` and `.dynsym` function symbols into the sorted, deduplicated table.
pub(super) fn collect_symbols(elf: &ElfView<'_>, bias: u64) -> (Vec<Symbol>, Vec<(String, u64)>) {
    let count = |t: &Option<SymbolSection<'_>>| t.as_ref().map_or(0, |t| t.syms.len());
    let mut raw: Vec<RawSym<'_>> = Vec::with_capacity(count(&elf.symtab) + count(&elf.dynsym));
    let mut ifuncs: Vec<(String, u64)> = Vec::new();

    if let Some(symtab) = &elf.symtab {
        for sym in symtab.syms.iter() {
            let Some(kind) = kept_kind(&sym) else {
                continue;
            };
            let Some(name) = symtab.name(sym.st_name).filter(|n| !n.is_empty()) else {
                continue;
            };
            let name = Cow::Borrowed(without_default_version(name));
            keep(&mut raw, &mut ifuncs, (&sym, kind, bias), name, false);
        }
    }

    if let Some(dynsym) = &elf.dynsym {
        // Version index -> version name, for naming hidden (non-default) versions.
        let versions: Vec<(u16, &str)> = elf
            .verdef
            .as_ref()
            .map(|verdef| {
                verdef
                    .iter()
                    .filter_map(|vd| {
                        let aux = vd.iter().next()?;
                        Some((vd.vd_ndx, dynsym.name(aux.vda_name)?))
                    })
                    .collect()
            })
            .unwrap_or_default();

        for (index, sym) in dynsym.syms.iter().enumerate() {
            let Some(kind) = kept_kind(&sym) else {
                continue;
            };
            let Some(name) = dynsym.name(sym.st_name).filter(|n| !n.is_empty()) else {
                continue;
            };
            let hidden_version = elf
                .versym
                .as_ref()
                .and_then(|vs| vs.get_at(index))
                .filter(|v| v.is_hidden())
                .and_then(|v| versions.iter().find(|(ndx, _)| *ndx == v.version()))
                .map(|(_, ver)| *ver);
            let name = match hidden_version {
                Some(ver) => Cow::Owned(format!("{name}@{ver}")),
                None => Cow::Borrowed(name),
            };
            keep(&mut raw, &mut ifuncs, (&sym, kind, bias), name, true);
        }
    }

    // One entry per (address, name), keeping the .symtab one (it sorts first).
    raw.sort_unstable_by(|a, b| {
        (a.addr, &a.name, a.from_dynsym).cmp(&(b.addr, &b.name, b.from_dynsym))
    });
    raw.dedup_by(|later, kept| {
        let same = later.addr == kept.addr && later.name == kept.name;
        if same && kept.size == 0 {
            kept.size = later.size;
        }
        if same {
            kept.local &= later.local;
        }
        same
    });
    for at_one_addr in raw.chunk_by_mut(|a, b| a.addr == b.addr) {
        if at_one_addr.len() > 1 {
            at_one_addr.sort_by_cached_key(RawSym::preference);
        }
    }

    ifuncs.sort_unstable();
    ifuncs.dedup_by(|later, kept| later.0 == kept.0);
    let symbols = raw
        .into_iter()
        .map(|s| Symbol {
            name: s.name.into_owned(),
            addr: s.addr,
            size: s.size,
        })
        .collect();
    (symbols, ifuncs)
}

/// Function symbols of the `.symtab` of the module file `path`'s separate debug
/// file (found and checked as [`crate::debuginfo::ModuleDebug::load`] does), at runtime addresses
/// for load bias `bias`, sorted by address; at one address global names first,
/// then those with fewer leading underscores. Empty when there is none.
///
/// Stripped libraries keep only `.dynsym`; their debug file's `.symtab` also
/// names local functions, such as glibc's IFUNC implementations
/// (`__memset_avx2_unaligned_erms`).
pub fn separate_symbols(
    path: &Path,
    bias: u64,
    search: &crate::debugfile::DebugSearch,
) -> Vec<Symbol> {
    let Ok(module) = crate::debugfile::ElfSections::open(path) else {
        return Vec::new();
    };
    let mut warnings = Vec::new();
    let Some((file, _)) = crate::debugfile::separate_files(&module, path, search, &mut warnings)
        .find(|(f, _)| {
            f.sections
                .iter()
                .any(|s| s.kind == crate::debugfile::SHT_SYMTAB)
        })
    else {
        return Vec::new();
    };
    let mut syms: Vec<(Symbol, bool)> = file
        .function_symbols()
        .into_iter()
        .map(|(name, addr, size, local)| {
            let name = match name.split_once("@@") {
                Some((plain, _)) => plain.to_string(),
                None => name,
            };
            let sym = Symbol {
                name,
                addr: addr.wrapping_add(bias),
                size,
            };
            (sym, local)
        })
        .collect();
    syms.sort_by(|(a, a_local), (b, b_local)| {
        let underscores = |s: &Symbol| s.name.bytes().take_while(|&c| c == b'_').count();
        (a.addr, *a_local, underscores(a), &a.name).cmp(&(
            b.addr,
            *b_local,
            underscores(b),
            &b.name,
        ))
    });
    syms.dedup_by(|later, kept| later.0.addr == kept.0.addr && later.0.name == kept.0.name);
    syms.into_iter().map(|(s, _)| s).collect()
}
