//! ELF symbol loading and lookup for a live process.
//!
//! Every executable file mapping of the target (plus its `[vdso]`) becomes one
//! [`Module`]: the file is opened through `/proc/PID/root/<path>` so that targets in
//! containers work, parsed once with goblin, and reduced to a sorted table of
//! function symbols at their runtime addresses. [`ProcessSymbols`] resolves what the
//! user asked to hook ([`FuncSpec`]) to one function entry, or explains why it
//! cannot.
//!
//! Only `STT_FUNC` symbols are functions here. `STT_GNU_IFUNC` symbols (e.g. glibc's
//! `memcpy`) name a resolver that picks the real implementation at load time, not the
//! code that runs, so they are never hook targets; naming one gives
//! [`SymbolError::Ifunc`]. [`ProcessSymbols::resolve_for_hook`] also says which
//! implementation the process calls, read from the GOT slots the dynamic linker
//! filled (no code runs in the target), and finds local functions of stripped
//! libraries in their separate debug file's `.symtab`.
//!
//! `MODULE!NAME` names a module by its path (or a symlink to it), its file name,
//! its `DT_SONAME`, or a prefix of either that ends before a `.` or `-`
//! ([`module_match`]).
//!
//! Symbol versions: a `.dynsym` entry whose version is hidden (a compatibility
//! version such as `realpath@GLIBC_2.2.5`) is named `NAME@VERSION`; the default
//! version keeps the plain name. `.symtab` names of the form `NAME@@VERSION` are
//! shortened to `NAME`.

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use goblin::elf::program_header::PT_LOAD;
use goblin::elf::section_header::{SHN_UNDEF, SHT_NOBITS};
use goblin::elf::sym::Sym;
use goblin::elf::sym::{STB_LOCAL, STT_FUNC, STT_GNU_IFUNC};
use goblin::elf::Elf;
use goblin::options::ParseOptions;

use crate::hint::Hint;
use crate::memory::Memory;
use crate::procfs::{self, MapEntry};

mod demangled;
mod view;
pub use demangled::{demangle_parts, shown_name, NameProblem};
use demangled::{Demangled, Query};
use view::{ElfView, SymbolSection};

/// Mask that rounds an address or file offset down to its 4 KiB page.
const PAGE_MASK: u64 = !0xfff;
/// How far past an unsized symbol [`Module::lookup`] still attributes addresses to it.
const UNSIZED_WINDOW: u64 = 64 * 1024;
/// Most suggestions a [`SymbolError::NotFound`] carries.
const MAX_SUGGESTIONS: usize = 5;
/// Largest `[vdso]` image read from process memory.
const MAX_VDSO_LEN: u64 = 1 << 20;
/// How many `PT_LOAD` headers are checked when scoring a candidate load bias.
const MAX_SCORED_LOADS: usize = 64;
/// The maps name (and [`Module::path`]) of the kernel's vDSO.
pub const VDSO: &str = "[vdso]";
/// Smallest file that can hold an ELF header (the 32-bit one is 52 bytes).
const MIN_ELF_LEN: u64 = 52;

/// Errors from loading or searching symbols.
#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    /// A file (or process memory) could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// What was being read.
        path: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A file is not a usable ELF image.
    #[error("{path}: not a usable ELF file: {problem}")]
    Elf {
        /// The file.
        path: String,
        /// What is wrong with it.
        problem: ElfProblem,
    },
    /// No function has that name.
    #[error("{}", not_found_message(.name, .suggestions))]
    NotFound {
        /// The name that was asked for.
        name: String,
        /// Close names, each rendered as `NAME (in /path/module)`.
        suggestions: Vec<String>,
    },
    /// Several different functions have that name.
    #[error("{}", ambiguous_message(.name, .candidates))]
    Ambiguous {
        /// The name that was asked for.
        name: String,
        /// Each candidate rendered as `NAME in /path/module (0xADDR)`.
        candidates: Vec<String>,
    },
    /// A `MODULE!NAME` spec named a module that is not loaded.
    #[error(
        "no loaded module matches `{module}` (give its path, its file name or soname such \
         as `libc.so.6`, or a prefix of one that ends before a `.` or `-`, such as `libc`); \
         loaded: {}",
        .loaded.join(", ")
    )]
    ModuleNotFound {
        /// The module that was asked for.
        module: String,
        /// File names of the loaded modules.
        loaded: Vec<String>,
    },
    /// The module part of a `MODULE!NAME` matches several modules that define the name.
    #[error(
        "`{module}!{name}` is ambiguous: `{module}` matches {} loaded modules that define \
         `{name}`:\n  {}",
        .candidates.len(),
        .candidates.join("\n  ")
    )]
    AmbiguousModule {
        /// The module as written.
        module: String,
        /// The function name.
        name: String,
        /// Each candidate rendered as `NAME in /path (0xADDR): write `SPELLING!NAME``.
        candidates: Vec<String>,
    },
    /// An address is not the entry of a function.
    #[error("{}", not_an_entry_message(*.addr, .place))]
    AddressNotInFunction {
        /// The address that was asked for.
        addr: u64,
        /// Where the address is instead.
        place: AddressPlace,
    },
    /// The function's symbol has no size.
    #[error("`{name}`: symbol has no size; cannot bound the function")]
    ZeroSize {
        /// The function's name.
        name: String,
    },
    /// The name is a GNU indirect function, whose symbol is a resolver.
    #[error("{}", ifunc_message(.name, .module, .targets))]
    Ifunc {
        /// The function's name.
        name: String,
        /// The module that defines it.
        module: String,
        /// What it resolved to in this process, as the GOT slots say (empty when
        /// not looked up, or when no slot shows it).
        targets: Vec<IfuncTarget>,
    },
    /// A name with `::`, `<` or `(` that cannot be a demangled function name.
    #[error("{}", bad_name_message(.name, .problem, .read_as, .candidates))]
    BadName {
        /// The name as written.
        name: String,
        /// What is wrong with it.
        problem: NameProblem,
        /// What could be read of it (`parse` of `parse(long`), when that names
        /// functions: those are `candidates`.
        read_as: Option<String>,
        /// The functions `read_as` names, each rendered as `DEMANGLED in /path (0xADDR)`.
        candidates: Vec<String>,
        /// How to write each of `candidates` alone (the hint), in the same order.
        spellings: Vec<String>,
    },
    /// Several functions have that demangled name.
    #[error("{}", ambiguous_name_message(.name, .candidates))]
    AmbiguousName {
        /// The name as written.
        name: String,
        /// Each candidate rendered as `DEMANGLED in /path (0xADDR)`.
        candidates: Vec<String>,
        /// How to write each candidate alone (the hint), in the same order.
        spellings: Vec<String>,
    },
    /// The file a process mapped is gone from its path or was replaced there (a
    /// package upgrade), and the mapped file itself cannot be opened through
    /// `/proc/PID/map_files`: the file at the path is never read in its stead.
    #[error(
        "{path} was {} on disk after the process mapped it, and the mapped file cannot be \
         opened through {map_files} ({source}): opening it there needs CAP_SYS_ADMIN (run as \
         root), or restart the process so that it maps the file now at that path",
        if *.deleted { "deleted" } else { "replaced" }
    )]
    ReplacedOnDisk {
        /// The path the process mapped.
        path: String,
        /// True when nothing is at the path any more; false when another file is.
        deleted: bool,
        /// The `/proc/PID/map_files/` entry tried.
        map_files: String,
        /// Why it could not be opened.
        #[source]
        source: io::Error,
    },
    /// The file is not mapped in the process.
    #[error("{path} is not mapped in the process")]
    NotMapped {
        /// The file.
        path: String,
    },
}

impl SymbolError {
    /// What the caller can do about this error, if the error knows.
    pub fn hint(&self) -> Option<Hint> {
        match self {
            SymbolError::Ambiguous { .. } => Some(Hint::PickByAddress),
            SymbolError::AmbiguousName { spellings, .. } => Some(Hint::WriteOneAlone {
                read_as: None,
                names: spellings.clone(),
            }),
            SymbolError::BadName {
                read_as: Some(read),
                spellings,
                ..
            } if !spellings.is_empty() => Some(Hint::WriteOneAlone {
                read_as: Some(read.clone()),
                names: spellings.clone(),
            }),
            SymbolError::AddressNotInFunction {
                place: AddressPlace::Inside { entry, .. },
                ..
            } => Some(Hint::UseEntry { entry: *entry }),
            SymbolError::Ifunc { targets, .. } if targets.is_empty() => {
                Some(Hint::NameImplementation)
            }
            SymbolError::Ifunc { targets, .. } => Some(Hint::HookImplementations {
                functions: targets
                    .iter()
                    .filter_map(|t| Some(format!("{}!{}", t.spelling, t.name.as_deref()?)))
                    .collect(),
                unnamed: targets.iter().any(|t| t.name.is_none()),
            }),
            _ => None,
        }
    }
}

/// What makes a file unusable as an ELF module.
#[derive(Debug, thiserror::Error)]
pub enum ElfProblem {
    /// The file does not start with an ELF header.
    #[error("no ELF header")]
    NoHeader,
    /// The mapping is not backed by a file (anonymous memory, `[heap]`, ...).
    #[error("not a file mapping")]
    NotAFileMapping,
    /// The in-memory image is larger than this machine can address.
    #[error("image too large")]
    TooLarge,
    /// The ELF parser refused the file.
    #[error("{0}")]
    Parse(goblin::error::Error),
    /// The ELF parser panicked on malformed input.
    #[error("the ELF parser failed on malformed input")]
    ParserPanicked,
    /// None of the process's mappings of the file matches its `PT_LOAD` segments.
    #[error("no mapping matches its PT_LOAD segments (was the file replaced on disk?)")]
    NoMatchingMapping,
}

/// Where an address that is not a function entry lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddressPlace {
    /// Inside no mapped ELF module.
    NoModule,
    /// Inside a function, past its entry.
    Inside {
        /// The function's name.
        function: String,
        /// The address's offset from the entry.
        offset: u64,
        /// The function's entry address.
        entry: u64,
        /// The module holding it.
        module: String,
    },
    /// Inside a module, where no function symbol covers it.
    NoSymbol {
        /// The module.
        module: String,
    },
}

fn not_an_entry_message(addr: u64, place: &AddressPlace) -> String {
    match place {
        AddressPlace::NoModule => format!("{addr:#x} is not inside any mapped ELF module"),
        AddressPlace::Inside {
            function,
            offset,
            module,
            ..
        } => format!(
            "{addr:#x} is inside {function}+{offset:#x} (in {module}); hooks go on function entries"
        ),
        AddressPlace::NoSymbol { module } => {
            format!("no function symbol covers {addr:#x} (in {module})")
        }
    }
}

fn not_found_message(name: &str, suggestions: &[String]) -> String {
    let mut msg = format!("no function named `{name}` in the process");
    if !suggestions.is_empty() {
        msg.push_str("; did you mean: ");
        msg.push_str(&suggestions.join(", "));
    }
    msg.push_str(
        "\n  names must match exactly; qualify a library's function as MODULE!NAME \
         (e.g. `libc.so.6!write`); list a module's functions with \
         `nm --defined-only /proc/PID/root/MODULE_PATH` (`nm -D` for stripped libraries)",
    );
    msg
}

fn ifunc_message(name: &str, module: &str, targets: &[IfuncTarget]) -> String {
    let mut msg = format!(
        "`{name}` in {module} is a GNU indirect function (IFUNC): its symbol is the resolver \
         that picks an implementation at load time, not the code that runs"
    );
    match targets {
        [] => msg.push_str(
            "; no GOT slot of this process shows which implementation it chose (no caller \
             has been bound to it yet)",
        ),
        [one] => {
            msg.push_str("\n  this process calls ");
            msg.push_str(&one.describe());
        }
        many => {
            msg.push_str(&format!(
                "\n  this process calls {} implementations of it:",
                many.len()
            ));
            for t in many {
                msg.push_str("\n    ");
                msg.push_str(&t.describe());
            }
        }
    }
    msg
}

fn ambiguous_message(name: &str, candidates: &[String]) -> String {
    let mut msg = ambiguous_name_message(name, candidates);
    msg.push_str("\n  write MODULE!NAME to pick a module (e.g. `libc.so.6!write`)");
    msg
}

fn bad_name_message(
    name: &str,
    problem: &NameProblem,
    read_as: &Option<String>,
    candidates: &[String],
) -> String {
    let mut msg = format!(
        "`{name}` is not a function name as C++ or Rust write it: {problem} (write it as \
         the demangler does, e.g. `ns::Parser::parse(long, long)`, or give the mangled name)"
    );
    if let Some(read) = read_as {
        if !candidates.is_empty() {
            msg.push_str(&format!(
                "\n  `{read}` names {}:",
                if candidates.len() == 1 {
                    "1 function".to_string()
                } else {
                    format!("{} functions", candidates.len())
                }
            ));
            for c in candidates {
                msg.push_str("\n  ");
                msg.push_str(c);
            }
        }
    }
    msg
}

fn ambiguous_name_message(name: &str, candidates: &[String]) -> String {
    let mut msg = format!(
        "`{name}` is ambiguous, {} functions have that name:",
        candidates.len()
    );
    for c in candidates {
        msg.push_str("\n  ");
        msg.push_str(c);
    }
    msg
}

/// What the user asked to hook: `NAME`, `MODULE!NAME`, or an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FuncSpec {
    /// A function name searched in every module.
    Name(String),
    /// A function name searched in one module.
    Qualified {
        /// Module path, file name (`libc.so.6`) or file-name prefix (`libc`).
        module: String,
        /// Function name.
        name: String,
    },
    /// A runtime address that must be a function entry.
    Addr(u64),
}

impl FuncSpec {
    /// Parses `0x1234` as an address, `MODULE!NAME` as qualified, anything else as a name.
    ///
    /// The `!` of `MODULE!NAME` is the first one that is not part of a C++ name: a `!`
    /// after a `::`, `<` or `(`, or in `operator!`/`operator!=`, belongs to the name
    /// (`ns::operator!=(A, B)`, `f<(!0)>`); such a name is written with its module as
    /// `MODULE!ns::operator!=(A, B)`.
    pub fn parse(s: &str) -> FuncSpec {
        let s = s.trim();
        if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            if let Ok(addr) = u64::from_str_radix(hex, 16) {
                return FuncSpec::Addr(addr);
            }
        }
        match module_separator(s).map(|i| (&s[..i], &s[i + 1..])) {
            Some((module, name)) if !module.is_empty() && !name.is_empty() => FuncSpec::Qualified {
                module: module.to_string(),
                name: name.to_string(),
            },
            _ => FuncSpec::Name(s.to_string()),
        }
    }
}

/// Byte offset of the `!` that ends the `MODULE` of `MODULE!NAME`, if there is one.
fn module_separator(s: &str) -> Option<usize> {
    let i = s.find('!')?;
    let head = &s[..i];
    let operator = head.trim_end().ends_with("operator");
    let in_name = head.contains("::") || head.contains('<') || head.contains('(');
    (!operator && !in_name).then_some(i)
}

impl fmt::Display for FuncSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FuncSpec::Name(name) => f.write_str(name),
            FuncSpec::Qualified { module, name } => write!(f, "{module}!{name}"),
            FuncSpec::Addr(addr) => write!(f, "{addr:#x}"),
        }
    }
}

/// One function symbol at its runtime address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// Symbol name (mangled as in the file).
    pub name: String,
    /// Runtime address of the first instruction.
    pub addr: u64,
    /// Size in bytes; 0 when the symbol table does not say.
    pub size: u64,
}

/// One implementation a GNU indirect function resolved to in a process, as a GOT
/// slot holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfuncTarget {
    /// Runtime address of the implementation.
    pub addr: u64,
    /// Its symbol name (from the module's tables or its separate debug file), if any.
    pub name: Option<String>,
    /// Path of the module holding the implementation.
    pub module: String,
    /// How to write that module in `MODULE!NAME` so it names that module alone.
    pub spelling: String,
    /// Paths of the modules whose GOT slots hold this address (`R_*_JUMP_SLOT` and
    /// `R_*_GLOB_DAT` of importers, `R_*_IRELATIVE` of the defining module).
    pub via: Vec<String>,
}

impl IfuncTarget {
    /// `NAME (0xADDR in MODULE), resolved through the GOT of A and B`.
    fn describe(&self) -> String {
        let what = match &self.name {
            Some(n) => format!("{n} ({:#x}, {})", self.addr, self.module),
            None => format!("unnamed code at {:#x} (in {})", self.addr, self.module),
        };
        format!(
            "{what}, resolved through the GOT of {}",
            self.via.join(" and ")
        )
    }
}

/// A function resolved to one runtime address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Symbol name.
    pub name: String,
    /// Path of the module as in `/proc/PID/maps`.
    pub module_path: String,
    /// Runtime address of the function entry.
    pub addr: u64,
    /// Size of the function in bytes (never 0).
    pub size: u64,
}

/// The bytes of a module's file: mapped from disk, or copied (the `[vdso]`).
enum FileData {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl FileData {
    fn bytes(&self) -> &[u8] {
        match self {
            FileData::Mapped(map) => map,
            FileData::Owned(vec) => vec,
        }
    }
}

/// A section header reduced to what lookups need.
#[derive(Debug, Clone)]
struct Section {
    name: String,
    addr: u64,
    size: u64,
    offset: u64,
    nobits: bool,
}

/// A `PT_LOAD` program header.
#[derive(Debug, Clone, Copy)]
struct Load {
    vaddr: u64,
    memsz: u64,
    offset: u64,
    filesz: u64,
}

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

/// Everything taken out of the parsed ELF, so the parse can borrow the file bytes
/// and be dropped before the bytes move into the [`Module`].
struct Parsed {
    bias: u64,
    range: Range<u64>,
    exec_ranges: Vec<Range<u64>>,
    is_64: bool,
    soname: Option<String>,
    sections: Vec<Section>,
    loads: Vec<Load>,
}

/// A module's function symbols, sorted by address.
struct SymbolTable {
    symbols: Vec<Symbol>,
    /// The largest symbol size (bounds the search for a covering symbol).
    max_size: u64,
    /// GNU indirect functions: name and runtime address of the resolver, sorted by name.
    ifuncs: Vec<(String, u64)>,
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
    fn demangled(&self) -> &[Demangled] {
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

/// Which file [`open_mapped_file`] opened.
enum Opened {
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
fn open_mapped_file(
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
fn map_elf_file(file: File, shown: &str, path: &str) -> Result<FileData, SymbolError> {
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
fn read_process_image(pid: i32, entry: &MapEntry, path: &str) -> Result<FileData, SymbolError> {
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
fn parse_elf(bytes: &[u8]) -> Result<Elf<'_>, ElfProblem> {
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
fn parse_view(bytes: &[u8]) -> Result<ElfView<'_>, ElfProblem> {
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
fn compute_bias(loads: &[Load], entries: &[&MapEntry]) -> Option<u64> {
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
struct RawSym<'a> {
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

fn parse_module(bytes: &[u8], entries: &[&MapEntry]) -> Result<Parsed, ElfProblem> {
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
fn kept_kind(sym: &Sym) -> Option<u8> {
    let defined = sym.st_shndx != SHN_UNDEF as usize && sym.st_value != 0;
    let kind = sym.st_type();
    (defined && (kind == STT_FUNC || kind == STT_GNU_IFUNC)).then_some(kind)
}

/// `NAME` of a `.symtab` name of the form `NAME@@VERSION`, else the name itself.
fn without_default_version(name: &str) -> &str {
    if !name.as_bytes().contains(&b'@') {
        return name;
    }
    name.split_once("@@").map_or(name, |(plain, _)| plain)
}

/// Adds a symbol [`kept_kind`] kept, named `name`, at its runtime address (value
/// plus `bias`): a function to `raw`, an indirect function to `ifuncs`.
fn keep<'a>(
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
fn collect_symbols(elf: &ElfView<'_>, bias: u64) -> (Vec<Symbol>, Vec<(String, u64)>) {
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

/// Every ELF module mapped in a process.
#[derive(Debug)]
pub struct ProcessSymbols {
    /// The process.
    pub pid: i32,
    /// One module per executable file mapping, in address order, plus the `[vdso]`.
    pub modules: Vec<Module>,
    /// Mapped files left out because they were deleted or replaced on disk and
    /// cannot be read as mapped ([`SymbolError::ReplacedOnDisk`]).
    pub refused: Vec<std::sync::Arc<SymbolError>>,
    /// The executable's path when the process is a 32-bit program.
    exe_32bit: Option<String>,
}

impl ProcessSymbols {
    /// Loads every ELF file the process has mapped executable, plus its `[vdso]`.
    ///
    /// Files that are not ELF or cannot be opened or parsed are skipped silently;
    /// files with no executable mapping (locale archives, fonts, data) are never
    /// opened. Fails only when the process itself is gone.
    pub fn load(pid: i32, maps: &[MapEntry]) -> Result<ProcessSymbols, SymbolError> {
        Ok(ProcessSymbols::load_known(
            pid,
            maps,
            executable_is_32bit(pid)?,
        ))
    }

    /// [`ProcessSymbols::load`] for a caller that has read the executable's class
    /// already (`is_32bit`: it is `ELFCLASS32`), so `/proc/PID/exe` is not read again.
    pub fn load_with_class(pid: i32, maps: &[MapEntry], is_32bit: bool) -> ProcessSymbols {
        ProcessSymbols::load_known(pid, maps, is_32bit.then(|| procfs::exe_path(pid)))
    }

    fn load_known(pid: i32, maps: &[MapEntry], exe_32bit: Option<String>) -> ProcessSymbols {
        let mut paths: Vec<&str> = Vec::new();
        for e in maps {
            if e.perms.exec && (e.is_file() || e.path == VDSO) {
                let p = e.file_path();
                if !paths.contains(&p) {
                    paths.push(p);
                }
            }
        }
        let mut modules = Vec::new();
        let mut refused = Vec::new();
        for p in paths {
            match Module::load(pid, p, maps) {
                Ok(m) => modules.push(m),
                Err(e @ SymbolError::ReplacedOnDisk { .. }) => refused.push(std::sync::Arc::new(e)),
                Err(_) => {}
            }
        }
        ProcessSymbols {
            pid,
            modules,
            refused,
            exe_32bit,
        }
    }

    /// The one function called `name` in any module, as [`ProcessSymbols::resolve`]
    /// finds it, when a program (not a person) asks: by its symbol name only (no
    /// demangled names), and no similar names are looked for when there is none.
    pub fn find_function(&self, name: &str) -> Option<Resolved> {
        self.resolve_unqualified(name, false).ok()
    }

    fn resolve_unqualified(&self, name: &str, suggest: bool) -> Result<Resolved, SymbolError> {
        // The vdso duplicates libc names (`clock_gettime`, `time`); it is searched
        // only when nothing else has the name, or when named as `[vdso]!NAME`.
        let (vdso, files): (Vec<&Module>, Vec<&Module>) =
            self.modules.iter().partition(|m| m.path == VDSO);
        match resolve_name_with(name, &files, suggest) {
            Err(SymbolError::NotFound { .. })
                if vdso.iter().any(|m| m.symbols_named(name).next().is_some()) =>
            {
                resolve_name_with(name, &vdso, suggest)
            }
            other => other,
        }
    }

    /// Reads now the symbol tables of the modules whose path is among `paths`
    /// (each is otherwise read on its first lookup): a caller runs this on
    /// another thread while it stops and copies threads, so that the unwind
    /// that follows finds the large tables (libpython's, libc's) ready.
    pub fn read_tables(&self, paths: &[&str]) {
        for m in self
            .modules
            .iter()
            .filter(|m| paths.contains(&m.path.as_str()))
        {
            m.symbols();
        }
    }

    /// Symbols of a process that is not running (a core file): modules built by the caller.
    pub fn from_modules(pid: i32, modules: Vec<Module>) -> ProcessSymbols {
        ProcessSymbols {
            pid,
            modules,
            refused: Vec::new(),
            exe_32bit: None,
        }
    }

    /// True when the process runs a 32-bit (i386) executable.
    pub fn is_32bit(&self) -> bool {
        self.exe_32bit.is_some()
    }

    /// The module whose mappings contain `addr` (executable mappings first).
    pub fn module_for(&self, addr: u64) -> Option<&Module> {
        self.modules
            .iter()
            .find(|m| m.exec_ranges.iter().any(|r| r.contains(&addr)))
            .or_else(|| self.modules.iter().find(|m| m.range.contains(&addr)))
    }

    /// The module and function containing `addr`, with the offset into the function.
    pub fn lookup(&self, addr: u64) -> Option<(&Module, &Symbol, u64)> {
        let m = self.module_for(addr)?;
        let (s, off) = m.lookup(addr)?;
        Some((m, s, off))
    }

    /// Resolves a spec to one function entry.
    pub fn resolve(&self, spec: &FuncSpec) -> Result<Resolved, SymbolError> {
        match spec {
            FuncSpec::Name(name) => self.resolve_unqualified(name, true),
            FuncSpec::Qualified { module, name } => {
                let matched = self.modules_matching(module);
                if matched.is_empty() {
                    let mut loaded: Vec<String> = Vec::new();
                    for m in &self.modules {
                        let shown = match m.soname.as_deref() {
                            Some(so) if so != m.file_name() => {
                                format!("{} (soname {so})", m.file_name())
                            }
                            _ => m.file_name().to_string(),
                        };
                        if !loaded.contains(&shown) {
                            loaded.push(shown);
                        }
                    }
                    return Err(SymbolError::ModuleNotFound {
                        module: module.clone(),
                        loaded,
                    });
                }
                let defining: Vec<&Module> = matched
                    .iter()
                    .copied()
                    .filter(|m| m.symbols_named(name).next().is_some() || m.is_ifunc(name))
                    .collect();
                if defining.len() > 1 {
                    return Err(SymbolError::AmbiguousModule {
                        module: module.clone(),
                        name: name.clone(),
                        candidates: defining
                            .iter()
                            .map(|m| {
                                let at = m.symbols_named(name).next().map_or_else(
                                    || "IFUNC".to_string(),
                                    |s| format!("{:#x}", s.addr),
                                );
                                format!(
                                    "{name} in {} ({at}): write `{}!{name}`",
                                    m.path,
                                    self.unique_spelling(m)
                                )
                            })
                            .collect(),
                    });
                }
                resolve_name(
                    name,
                    if defining.is_empty() {
                        &matched
                    } else {
                        &defining
                    },
                )
            }
            FuncSpec::Addr(addr) => self.resolve_addr(*addr),
        }
    }

    /// For a hook written `NAME(PARAMS)` whose list also parses as a C signature:
    /// the C++ function whose demangled name with parameter list this is, when no
    /// symbol is called `NAME` exactly (a C function `NAME` takes `PARAMS` as its
    /// signature). `None` when there is no such C++ function.
    pub fn resolve_with_parameter_list(
        &self,
        spec: &FuncSpec,
        params: &str,
    ) -> Option<Result<Resolved, SymbolError>> {
        let (modules, name): (Vec<&Module>, &str) = match spec {
            FuncSpec::Name(n) => (self.modules.iter().filter(|m| m.path != VDSO).collect(), n),
            FuncSpec::Qualified { module, name } => (self.modules_matching(module), name),
            FuncSpec::Addr(_) => return None,
        };
        if modules
            .iter()
            .any(|m| m.symbols_named(name).next().is_some() || m.is_ifunc(name))
        {
            return None;
        }
        match resolve_demangled(&format!("{name}({params})"), &modules)? {
            Err(SymbolError::BadName { .. }) => None,
            found => Some(found),
        }
    }

    /// Modules named by `module` (the `MODULE` of `MODULE!NAME`), those of the best
    /// [`ModuleMatch`] only: its path (or another path of the same file, such as the
    /// symlink `ldd` prints), else its file name or `DT_SONAME` (`libz.so.1`), else a
    /// prefix of either that ends at a name boundary (`libz`, `libz.so`, `libz.so.1`
    /// all find `libz.so.1.2.13`; `lib` and `libz.s` find nothing).
    pub fn modules_matching(&self, module: &str) -> Vec<&Module> {
        let same_file = |m: &Module| {
            module.contains('/')
                && m.path.starts_with('/')
                && same_file_in(self.pid, module, &m.path)
        };
        let best = self
            .modules
            .iter()
            .filter_map(|m| {
                let how = module_match(&m.path, m.soname.as_deref(), module);
                how.or_else(|| same_file(m).then_some(ModuleMatch::Path))
                    .map(|how| (how, m))
            })
            .collect::<Vec<_>>();
        let Some(top) = best.iter().map(|(how, _)| *how).min() else {
            return Vec::new();
        };
        best.into_iter()
            .filter(|(how, _)| *how == top)
            .map(|(_, m)| m)
            .collect()
    }

    /// Resolves what the user asked to hook, as [`Self::resolve`] does and more,
    /// reading the live process through `mem`:
    ///
    /// - a name no symbol table of the loaded files has is looked up in the
    ///   `.symtab` of their separate debug files (build-id or debuglink), which
    ///   names local functions of stripped libraries;
    /// - an IFUNC is still refused, but the error names the implementation(s) this
    ///   process calls, read from the GOT slots that hold it (nothing runs in the
    ///   target).
    pub fn resolve_for_hook(
        &self,
        spec: &FuncSpec,
        mem: &dyn Memory,
    ) -> Result<Resolved, SymbolError> {
        match self.resolve(spec) {
            Err(SymbolError::NotFound { name, suggestions }) => {
                let modules: Vec<&Module> = match spec {
                    FuncSpec::Qualified { module, .. } => self.modules_matching(module),
                    _ => self.modules.iter().filter(|m| m.path != VDSO).collect(),
                };
                let found: Vec<(&Module, &Symbol)> = modules
                    .iter()
                    .flat_map(|m| {
                        m.separate_symbols()
                            .iter()
                            .filter(|s| s.name == name)
                            .map(move |s| (*m, s))
                    })
                    .collect();
                match found.as_slice() {
                    [] => Err(SymbolError::NotFound { name, suggestions }),
                    [(_, s)] if s.size == 0 => Err(SymbolError::ZeroSize {
                        name: s.name.clone(),
                    }),
                    [(m, s)] => Ok(resolved(m, s)),
                    many => Err(SymbolError::Ambiguous {
                        name,
                        candidates: many
                            .iter()
                            .map(|(m, s)| format!("{} in {} ({:#x})", s.name, m.path, s.addr))
                            .collect(),
                    }),
                }
            }
            Err(SymbolError::Ifunc { name, module, .. }) => {
                let targets = match self.modules.iter().find(|m| m.path == module) {
                    Some(m) => self.ifunc_targets(m, &name, mem),
                    None => Vec::new(),
                };
                Err(SymbolError::Ifunc {
                    name,
                    module,
                    targets,
                })
            }
            other => other,
        }
    }

    /// Where the GNU indirect function `name` of module `m` resolved to in this
    /// process, read from GOT slots without running code in it: every module's
    /// `JUMP_SLOT`/`GLOB_DAT` relocation for `name`, and `m`'s own `IRELATIVE`
    /// relocations whose resolver is `name`'s (glibc's internal calls). Slots that
    /// do not point into `m`'s code (not bound yet, or bound to another module's
    /// `name`) are left out. Sorted by address.
    pub fn ifunc_targets(&self, m: &Module, name: &str, mem: &dyn Memory) -> Vec<IfuncTarget> {
        let resolver = m.ifunc_resolver(name);
        let mut slots: Vec<(u64, &Module)> = Vec::new();
        for x in self.modules.iter().filter(|x| x.path != VDSO) {
            for slot in got_slots(x, name, (std::ptr::eq(x, m)).then_some(resolver).flatten()) {
                let width = if x.is_64 { 8 } else { 4 };
                let mut buf = [0u8; 8];
                let Some(word) = buf.get_mut(..width) else {
                    continue;
                };
                if mem.read(slot, word).is_err() {
                    continue;
                }
                let value = u64::from_le_bytes(buf);
                if m.exec_ranges.iter().any(|r| r.contains(&value)) {
                    slots.push((value, x));
                }
            }
        }
        slots.sort_by_key(|(addr, _)| *addr);
        let mut out: Vec<IfuncTarget> = Vec::new();
        for (addr, x) in slots {
            match out.last_mut() {
                Some(t) if t.addr == addr => {
                    if !t.via.contains(&x.path) {
                        t.via.push(x.path.clone());
                    }
                }
                _ => out.push(IfuncTarget {
                    addr,
                    name: m.name_at(addr).map(|s| s.name.clone()),
                    module: m.path.clone(),
                    spelling: self.unique_spelling(m),
                    via: vec![x.path.clone()],
                }),
            }
        }
        out
    }

    /// The shortest way to write module `m` in `MODULE!NAME` that names it alone:
    /// its file name, its soname, or else its path.
    pub fn unique_spelling(&self, m: &Module) -> String {
        let alone = |spelling: &str| {
            let found = self.modules_matching(spelling);
            found.len() == 1 && std::ptr::eq(found[0], m)
        };
        [Some(m.file_name()), m.soname.as_deref()]
            .into_iter()
            .flatten()
            .find(|s| alone(s))
            .unwrap_or(&m.path)
            .to_string()
    }

    fn resolve_addr(&self, addr: u64) -> Result<Resolved, SymbolError> {
        let Some(m) = self.module_for(addr) else {
            return Err(SymbolError::AddressNotInFunction {
                addr,
                place: AddressPlace::NoModule,
            });
        };
        if let Some(s) = m.symbol_at(addr) {
            if s.size == 0 {
                return Err(SymbolError::ZeroSize {
                    name: s.name.clone(),
                });
            }
            return Ok(resolved(m, s));
        }
        let place = match m.lookup(addr) {
            Some((s, offset)) => AddressPlace::Inside {
                function: s.name.clone(),
                offset,
                entry: s.addr,
                module: m.path.clone(),
            },
            None => AddressPlace::NoSymbol {
                module: m.path.clone(),
            },
        };
        Err(SymbolError::AddressNotInFunction { addr, place })
    }
}

fn resolved(m: &Module, s: &Symbol) -> Resolved {
    Resolved {
        name: s.name.clone(),
        module_path: m.path.clone(),
        addr: s.addr,
        size: s.size,
    }
}

fn resolve_name(name: &str, modules: &[&Module]) -> Result<Resolved, SymbolError> {
    resolve_name_with(name, modules, true)
}

/// [`resolve_name`]; `suggest`: a person asks, so C++ and Rust names are also
/// matched demangled, and similar names are looked for when none matches (a pass
/// over every symbol of every module, for an error a person reads).
fn resolve_name_with(
    name: &str,
    modules: &[&Module],
    suggest: bool,
) -> Result<Resolved, SymbolError> {
    let found: Vec<(&Module, &Symbol)> = modules
        .iter()
        .flat_map(|m| m.symbols_named(name).map(move |s| (*m, s)))
        .collect();
    match found.as_slice() {
        [] => {
            if let Some(m) = modules.iter().find(|m| m.is_ifunc(name)) {
                return Err(SymbolError::Ifunc {
                    name: name.to_string(),
                    module: m.path.clone(),
                    targets: Vec::new(),
                });
            }
            // Demangled names are for people: a program's lookup of a C name
            // (`__cxa_throw`) does not demangle every symbol when it is absent.
            if suggest {
                if let Some(found) = resolve_demangled(name, modules) {
                    return found;
                }
            }
            Err(SymbolError::NotFound {
                name: name.to_string(),
                suggestions: if suggest {
                    suggestions(name, modules)
                } else {
                    Vec::new()
                },
            })
        }
        [(_, s)] if s.size == 0 => Err(SymbolError::ZeroSize {
            name: s.name.clone(),
        }),
        [(m, s)] => Ok(resolved(m, s)),
        many => Err(SymbolError::Ambiguous {
            name: name.to_string(),
            candidates: many
                .iter()
                .map(|(m, s)| format!("{} in {} ({:#x})", s.name, m.path, s.addr))
                .collect(),
        }),
    }
}

/// How a name as written matches a function symbol's name ([`name_match`]); the
/// smaller the better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NameMatch {
    /// The symbol's own (mangled or C) name.
    Exact,
    /// The whole demangled path (`ns::Parser::parse`, `crashy::parse_record`).
    Path,
    /// A suffix of the demangled path after a `::` (`parse`, `Parser::parse`).
    Suffix,
}

/// How `written` (a name as the user wrote it) names the function symbol `symbol`,
/// by the rules [`ProcessSymbols::resolve`] uses; `None` when it does not.
pub fn name_match(written: &str, symbol: &str) -> Option<NameMatch> {
    if written == symbol {
        return Some(NameMatch::Exact);
    }
    let q = Query::parse(written).ok()?;
    match Demangled::new(0, symbol)?.matches(&q)? {
        demangled::Tier::Path => Some(NameMatch::Path),
        demangled::Tier::Suffix | demangled::Tier::BarePath | demangled::Tier::BareSuffix => {
            Some(NameMatch::Suffix)
        }
    }
}

/// The function(s) whose demangled name `name` is, in `modules`: `None` when none
/// is, else the one function or why there is not exactly one.
fn resolve_demangled(name: &str, modules: &[&Module]) -> Option<Result<Resolved, SymbolError>> {
    let q = match Query::parse(name) {
        Ok(q) => q,
        Err(problem) => {
            let read = demangled::readable_part(name);
            let found = read
                .as_ref()
                // `ns::call` of `ns::call<long (*)(long)`: a path without generic
                // arguments names every instance.
                .map(|r| demangled_matches(r, modules, Demangled::matches))
                .unwrap_or_default();
            let found = &found[..found.len().min(MAX_READ_AS_CANDIDATES)];
            return Some(Err(SymbolError::BadName {
                name: name.to_string(),
                problem,
                read_as: read.map(|r| r.to_string()),
                candidates: found.iter().map(|(m, d)| candidate_text(m, d)).collect(),
                spellings: found
                    .iter()
                    .map(|(m, d)| alone_spelling(m, d, modules))
                    .collect(),
            }));
        }
    };
    let found = demangled_matches(&q, modules, Demangled::matches);
    match found.as_slice() {
        [] => None,
        [(m, d)] => {
            let s = &m.symbols()[d.index];
            Some(if s.size == 0 {
                Err(SymbolError::ZeroSize {
                    name: s.name.clone(),
                })
            } else {
                Ok(resolved(m, s))
            })
        }
        many => Some(Err(SymbolError::AmbiguousName {
            name: name.to_string(),
            candidates: many.iter().map(|(m, d)| candidate_text(m, d)).collect(),
            spellings: many
                .iter()
                .map(|(m, d)| alone_spelling(m, d, modules))
                .collect(),
        })),
    }
}

/// How many functions a malformed name's readable part lists at most.
const MAX_READ_AS_CANDIDATES: usize = 12;

/// The functions of `modules` that `q` names by `how` (e.g. [`Demangled::matches`]),
/// those of the best [`demangled::Tier`] only, one per function.
fn demangled_matches<'a>(
    q: &Query,
    modules: &[&'a Module],
    how: fn(&Demangled, &Query) -> Option<demangled::Tier>,
) -> Vec<(&'a Module, &'a Demangled)> {
    let mut hits: Vec<(demangled::Tier, &Module, &Demangled)> = modules
        .iter()
        .flat_map(|m| {
            m.demangled()
                .iter()
                .filter_map(move |d| Some((how(d, q)?, *m, d)))
        })
        .collect();
    let Some(best) = hits.iter().map(|(tier, _, _)| *tier).min() else {
        return Vec::new();
    };
    hits.retain(|(tier, _, _)| *tier == best);
    distinct_functions(hits.into_iter().map(|(_, m, d)| (m, d)))
}

/// A candidate as an error lists it: `DEMANGLED in /path (0xADDR)`.
fn candidate_text(m: &Module, d: &Demangled) -> String {
    format!(
        "{} in {} ({:#x})",
        d.shown(),
        m.path,
        m.symbols()[d.index].addr
    )
}

/// One entry per function (module and address): aliases at one address, such as
/// a C++ constructor's complete and base object symbols, count once.
fn distinct_functions<'a>(
    found: impl Iterator<Item = (&'a Module, &'a Demangled)>,
) -> Vec<(&'a Module, &'a Demangled)> {
    let mut out: Vec<(&Module, &Demangled)> = Vec::new();
    for (m, d) in found {
        let addr = m.symbols()[d.index].addr;
        if !out
            .iter()
            .any(|(x, e)| std::ptr::eq(*x, m) && x.symbols()[e.index].addr == addr)
        {
            out.push((m, d));
        }
    }
    out
}

/// The shortest way to write the function `d` of `m` that names it alone among
/// `modules`: its demangled path, its name with parameter list, its mangled name,
/// or `MODULE!MANGLED`.
fn alone_spelling(m: &Module, d: &Demangled, modules: &[&Module]) -> String {
    let count = |same: &dyn Fn(&Demangled) -> bool| {
        distinct_functions(modules.iter().flat_map(|x| {
            x.demangled()
                .iter()
                .filter(|e| same(e))
                .map(move |e| (*x, e))
        }))
        .len()
    };
    if count(&|e| e.same_path(d)) == 1 {
        return d.path.clone();
    }
    if let Some(full) = &d.full {
        if count(&|e| e.same_full(d)) == 1 {
            return full.clone();
        }
    }
    let mangled = &m.symbols()[d.index].name;
    let defining = modules
        .iter()
        .filter(|x| x.symbols_named(mangled).next().is_some())
        .count();
    if defining == 1 {
        mangled.clone()
    } else {
        format!("{}!{mangled}", m.file_name())
    }
}

/// Runtime addresses of module `x`'s GOT slots that the dynamic linker fills with
/// the address of `name`: its `JUMP_SLOT` and `GLOB_DAT` relocations against a
/// symbol called `name` and, when `irelative` is the runtime address of `name`'s
/// IFUNC resolver in `x`, the `IRELATIVE` relocations that call that resolver.
fn got_slots(x: &Module, name: &str, irelative: Option<u64>) -> Vec<u64> {
    use goblin::elf::reloc::{
        R_386_GLOB_DAT, R_386_IRELATIVE, R_386_JMP_SLOT, R_X86_64_GLOB_DAT, R_X86_64_IRELATIVE,
        R_X86_64_JUMP_SLOT,
    };
    let Ok(elf) = parse_elf(x.data()) else {
        return Vec::new();
    };
    let (jump_slot, glob_dat, irel) = if x.is_64 {
        (R_X86_64_JUMP_SLOT, R_X86_64_GLOB_DAT, R_X86_64_IRELATIVE)
    } else {
        (R_386_JMP_SLOT, R_386_GLOB_DAT, R_386_IRELATIVE)
    };
    let resolver_svma = irelative.map(|a| a.wrapping_sub(x.bias));
    let mut out = Vec::new();
    let relocs = elf
        .dynrelas
        .iter()
        .chain(elf.dynrels.iter())
        .chain(elf.pltrelocs.iter());
    for r in relocs {
        let wanted = if r.r_type == jump_slot || r.r_type == glob_dat {
            elf.dynsyms
                .get(r.r_sym)
                .and_then(|sym| elf.dynstrtab.get_at(sym.st_name))
                == Some(name)
        } else if r.r_type == irel {
            // RELA keeps the resolver in the addend; REL (i386) in the slot's file bytes.
            let addend = match r.r_addend {
                Some(a) => Some(a as u64),
                None => x
                    .file_bytes(r.r_offset.wrapping_add(x.bias), 4)
                    .and_then(|b| b.try_into().ok())
                    .map(|b: [u8; 4]| u64::from(u32::from_le_bytes(b))),
            };
            resolver_svma.is_some() && addend == resolver_svma
        } else {
            false
        };
        if wanted {
            out.push(r.r_offset.wrapping_add(x.bias));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Up to [`MAX_SUGGESTIONS`] close names, rendered `NAME (in /path)`, closest first.
fn suggestions(name: &str, modules: &[&Module]) -> Vec<String> {
    let limit = (name.chars().count() / 2).clamp(1, 3);
    let mut scored: Vec<(usize, &str, &str)> = Vec::new();
    // A C++ name whose path is right but whose parameter list names no function:
    // the functions of that path, with their lists as the demangler spells them.
    if let Some(path_only) = Query::parse(name).ok().and_then(|q| q.without_params()) {
        for m in modules {
            for d in m.demangled() {
                if d.full.is_some() && d.matches(&path_only).is_some() {
                    scored.push((0, d.shown(), &m.path));
                }
            }
        }
    }
    for m in modules {
        for s in m.symbols() {
            let distance = bounded_levenshtein(name, &s.name, limit);
            let substring = name.len() >= 3 && s.name.contains(name);
            let score = match distance {
                Some(d) => d,
                None if substring => limit + 1 + s.name.len().saturating_sub(name.len()),
                None => continue,
            };
            scored.push((score, &s.name, &m.path));
        }
    }
    // A C++ or Rust name is compared with the demangled paths too, with as many
    // `::` components as it has (`Parser::pars` with `Parser::parse` of
    // `ns::Parser::parse`).
    let bare = name.split('(').next().unwrap_or(name).trim();
    if bare.contains("::") {
        let parts = bare.matches("::").count() + 1;
        for m in modules {
            for d in m.demangled() {
                let tail = match d.path.rmatch_indices("::").nth(parts - 1) {
                    Some((i, _)) => &d.path[i + 2..],
                    None => d.path.as_str(),
                };
                if let Some(score) = bounded_levenshtein(bare, tail, limit) {
                    scored.push((score, d.shown(), &m.path));
                }
            }
        }
    }
    // A C++ or Rust name is compared with the demangled paths too.
    if name.contains("::") {
        for m in modules {
            for d in m.demangled() {
                if let Some(score) = bounded_levenshtein(name, &d.path, limit) {
                    scored.push((score, d.shown(), &m.path));
                }
            }
        }
    }
    scored.sort_unstable();
    scored.dedup();
    scored
        .into_iter()
        .take(MAX_SUGGESTIONS)
        .map(|(_, n, path)| format!("{n} (in {path})"))
        .collect()
}

/// Levenshtein distance between `a` and `b` (by chars), or `None` if above `limit`.
fn bounded_levenshtein(a: &str, b: &str, limit: usize) -> Option<usize> {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > limit {
        return None;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        let mut row_min = cur[0];
        for (j, cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != cb);
            cur[j + 1] = substitute.min(prev[j + 1] + 1).min(cur[j] + 1);
            row_min = row_min.min(cur[j + 1]);
        }
        if row_min > limit {
            return None;
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev.last().copied().filter(|&d| d <= limit)
}

/// The executable's path if `/proc/PID/exe` is a 32-bit ELF; errors only if the process is gone.
fn executable_is_32bit(pid: i32) -> Result<Option<String>, SymbolError> {
    let exe = procfs::exe_path(pid);
    match procfs::read_exe_class(pid) {
        Ok(Some(procfs::ElfClass::Elf32)) => {
            let path = procfs::read_exe_link(pid).map_or(exe, |p| p.to_string_lossy().into_owned());
            Ok(Some(path))
        }
        Ok(_) => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(SymbolError::Io {
            path: exe,
            source: e,
        }),
        Err(_) => Ok(None),
    }
}

/// How the `MODULE` of a `MODULE!NAME` names a loaded module; better matches sort first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ModuleMatch {
    /// Its path as in `/proc/PID/maps`, or another path to the same file.
    Path,
    /// Its file name (`libc.so.6`) or `DT_SONAME` (`libz.so.1`).
    Name,
    /// A prefix of its file name or soname ending at a name boundary (`libz`, `libz.so.1`).
    Prefix,
}

/// True when `prefix` is a leading part of the file name `name` that ends at a name
/// boundary: right before a `.` or `-` of `name` (`libz`, `libz.so`, `libz.so.1` of
/// `libz.so.1.2.13`; `libc` of `libc-2.31.so`), or all of it. `libz.s`, `lib` and
/// `libz.` are not (and `libc` is no prefix of `libcrypt.so.1`).
pub fn name_prefix_at_boundary(name: &str, prefix: &str) -> bool {
    !prefix.is_empty()
        && name
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '-']))
}

/// How well `module` (a path, a file name, a soname, or a prefix of one of them)
/// names the module at `path` whose soname is `soname`; `None` if it does not.
/// `vdso` names the `[vdso]`.
pub fn module_match(path: &str, soname: Option<&str>, module: &str) -> Option<ModuleMatch> {
    let module = if module == "vdso" { VDSO } else { module };
    let file = path.rsplit('/').next().unwrap_or(path);
    if path == module {
        Some(ModuleMatch::Path)
    } else if module.contains('/') {
        None
    } else if file == module || soname == Some(module) {
        Some(ModuleMatch::Name)
    } else if name_prefix_at_boundary(file, module)
        || soname.is_some_and(|s| name_prefix_at_boundary(s, module))
    {
        Some(ModuleMatch::Prefix)
    } else {
        None
    }
}

/// True when `module` (as [`module_match`] reads it) names the module at `path`;
/// its soname is not known here, so only path and file-name forms count.
pub fn module_name_matches(path: &str, module: &str) -> bool {
    module_match(path, None, module).is_some()
}

/// The `DT_SONAME` of the file at `path` in process `pid`'s mount namespace, if
/// it is a readable ELF shared library that has one.
pub fn soname_of(pid: i32, path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let file = crate::shared_file::open_regular(Path::new(&crate::procfs::path_in_root(pid, path)))
        .ok()?;
    let data = map_elf_file(file, path, path).ok()?;
    let elf = parse_view(data.bytes()).ok()?;
    elf.soname.filter(|n| !n.is_empty()).map(str::to_string)
}

/// True when the paths `a` and `b` name the same file inside process `pid`'s
/// mount namespace (a symlink such as `/lib/x86_64-linux-gnu/libz.so.1` and the
/// `libz.so.1.2.13` it points to).
pub fn same_file_in(pid: i32, a: &str, b: &str) -> bool {
    let id = |p: &str| {
        std::fs::metadata(crate::procfs::path_in_root(pid, p))
            .ok()
            .map(|m| (m.dev(), m.ino()))
    };
    match (id(a), id(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    mod names;

    /// A live process's memory read through `/proc/PID/mem` (the tests' own backend).
    struct ProcMem(std::fs::File);

    impl Memory for ProcMem {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), crate::memory::MemoryError> {
            self.0
                .read_exact_at(buf, addr)
                .map_err(|source| crate::memory::MemoryError::Read {
                    addr,
                    len: buf.len(),
                    source,
                })
        }
    }
    use crate::procfs::read_maps;
    use std::io::{BufRead, BufReader};
    use std::path::PathBuf;
    use std::process::{Child, Command, Stdio};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    const MAIN_C: &str = r#"
#include <stdio.h>
#include <unistd.h>

int call_twin_a(int);
int call_twin_b(int);

__attribute__((noipa)) int bar(int x) { return x * 3 + 1; }
__attribute__((noipa)) int foo(int x) { return bar(x + 1) * 2 + call_twin_a(x) + call_twin_b(x); }
/* Same name as glibc's strfry: ambiguous across modules. */
__attribute__((noipa)) char *strfry(char *s) { return s; }

/* A function symbol with no size. */
__asm__(".text\n.globl nosize\n.type nosize,@function\nnosize:\n\tret\n");

int main(void) {
    volatile int v = foo(5);
    (void)v;
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
}
"#;
    const TWIN_A_C: &str = "static __attribute__((noipa)) int twin(int x) { return x + 7; }\n\
                            int call_twin_a(int x) { return twin(x) + 1; }\n";
    const TWIN_B_C: &str = "static __attribute__((noipa)) int twin(int x) { return x * 9; }\n\
                            int call_twin_b(int x) { return twin(x) - 1; }\n";
    const I386_C: &str = r#"
__attribute__((noinline)) int bar32(int x) { return x * 3 + 1; }
void _start(void) {
    static const char msg[] = "ready\n";
    int r;
    __asm__ volatile("int $0x80" : "=a"(r) : "a"(4), "b"(1), "c"(msg), "d"(6) : "memory");
    for (;;) __asm__ volatile("int $0x80" : "=a"(r) : "a"(29) : "memory");
}
"#;

    /// A compiled test program running as a child; killed and cleaned up on drop.
    struct Target {
        child: Child,
        dir: PathBuf,
        exe: PathBuf,
    }

    impl Drop for Target {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    impl Target {
        fn pid(&self) -> i32 {
            self.child.id() as i32
        }
        fn exe_path(&self) -> String {
            self.exe.to_string_lossy().into_owned()
        }
    }

    fn unique_dir(tag: &str) -> PathBuf {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("argstash-symtest-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Compiles `sources` with `flags` and starts the program; returns once it printed "ready".
    /// `None` if the compiler cannot build it (the directory is removed).
    fn build_and_spawn(tag: &str, sources: &[(&str, &str)], flags: &[&str]) -> Option<Target> {
        let dir = unique_dir(tag);
        let exe = dir.join(format!("symtest_{tag}"));
        let mut cc = Command::new("cc");
        cc.args(flags).arg("-o").arg(&exe);
        for (file, text) in sources {
            std::fs::write(dir.join(file), text).unwrap();
            cc.arg(dir.join(file));
        }
        let out = cc.output().expect("running cc");
        if !out.status.success() {
            eprintln!(
                "cc {flags:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let _ = std::fs::remove_dir_all(&dir);
            return None;
        }
        let child = Command::new(&exe).stdout(Stdio::piped()).spawn().unwrap();
        let mut target = Target { child, dir, exe };
        let stdout = target.child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        Some(target)
    }

    fn spawn_c_program(tag: &str, pie: bool) -> Target {
        let flags: &[&str] = if pie {
            &["-O2", "-fPIE", "-pie"]
        } else {
            &["-O2", "-fno-pie", "-no-pie"]
        };
        build_and_spawn(
            tag,
            &[
                ("main.c", MAIN_C),
                ("twin_a.c", TWIN_A_C),
                ("twin_b.c", TWIN_B_C),
            ],
            flags,
        )
        .expect("cc must build the test program")
    }

    fn read_mem(pid: i32, addr: u64, len: u64) -> Vec<u8> {
        let mut buf = vec![0u8; len as usize];
        File::open(format!("/proc/{pid}/mem"))
            .unwrap()
            .read_exact_at(&mut buf, addr)
            .unwrap();
        buf
    }

    /// The file bytes of a function, found through the `.text` section header.
    fn text_bytes(m: &Module, addr: u64, len: u64) -> Vec<u8> {
        let (svma, bytes) = m.section(".text").expect(".text");
        let at = addr.wrapping_sub(m.bias);
        assert!(svma.contains(&at), "{at:#x} not in .text {svma:?}");
        let start = (at - svma.start) as usize;
        bytes[start..start + len as usize].to_vec()
    }

    fn module<'a>(ps: &'a ProcessSymbols, path: &str) -> &'a Module {
        ps.modules
            .iter()
            .find(|m| m.path == path)
            .unwrap_or_else(|| panic!("{path} not loaded"))
    }

    fn check_program(pie: bool) {
        let target = spawn_c_program(if pie { "pie" } else { "nopie" }, pie);
        let pid = target.pid();
        let exe = target.exe_path();
        let maps = read_maps(pid).unwrap();
        let ps = ProcessSymbols::load(pid, &maps).unwrap();
        let prog = module(&ps, &exe);
        assert!(prog.is_64);
        if pie {
            assert_ne!(prog.bias, 0);
        } else {
            assert_eq!(prog.bias, 0);
        }
        assert!(
            ps.modules.iter().any(|m| m.path == VDSO),
            "vdso not loaded: {:?}",
            ps.modules
        );

        // A function of the program: runtime bytes equal file bytes.
        let bar = ps.resolve(&FuncSpec::parse("bar")).unwrap();
        assert_eq!(bar.name, "bar");
        assert_eq!(bar.module_path, exe);
        assert!(bar.size >= 3);
        assert!(prog.exec_ranges.iter().any(|r| r.contains(&bar.addr)));
        let live = read_mem(pid, bar.addr, bar.size);
        assert_eq!(live, text_bytes(prog, bar.addr, bar.size));
        assert_eq!(prog.file_bytes(bar.addr, bar.size), Some(live.as_slice()));

        // Qualified by file name, and the same function through its name as module.
        let q = ps
            .resolve(&FuncSpec::parse(&format!("{}!bar", prog.file_name())))
            .unwrap();
        assert_eq!(q, bar);

        // libc's write, by file name and by prefix.
        let write = ps.resolve(&FuncSpec::parse("libc.so.6!write")).unwrap();
        assert!(write.module_path.ends_with("/libc.so.6"), "{write:?}");
        let libc = module(&ps, &write.module_path);
        assert!(libc.exec_ranges.iter().any(|r| r.contains(&write.addr)));
        assert_eq!(
            read_mem(pid, write.addr, write.size),
            text_bytes(libc, write.addr, write.size)
        );
        assert_eq!(ps.resolve(&FuncSpec::parse("libc!write")).unwrap(), write);
        assert_eq!(ps.resolve(&FuncSpec::parse("write")).unwrap(), write);

        // Ambiguous: two static `twin` in the program; `strfry` in the program and libc.
        match ps.resolve(&FuncSpec::parse("twin")) {
            Err(e @ SymbolError::Ambiguous { .. }) => {
                let SymbolError::Ambiguous { candidates, .. } = &e else {
                    unreachable!()
                };
                assert_eq!(candidates.len(), 2, "{candidates:?}");
                assert!(candidates
                    .iter()
                    .all(|c| c.starts_with(&format!("twin in {exe} (0x"))));
                assert!(e.to_string().contains("MODULE!NAME"), "{e}");
            }
            other => panic!("twin: {other:?}"),
        }
        match ps.resolve(&FuncSpec::parse("strfry")) {
            Err(e @ SymbolError::Ambiguous { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(&format!("strfry in {exe} (0x")), "{msg}");
                assert!(msg.contains("libc.so.6 (0x"), "{msg}");
                assert!(msg.contains("libc.so.6!write"), "{msg}");
            }
            other => panic!("strfry: {other:?}"),
        }
        let own = ps
            .resolve(&FuncSpec::parse(&format!("{exe}!strfry")))
            .unwrap();
        assert_eq!(own.module_path, exe);
        let theirs = ps.resolve(&FuncSpec::parse("libc.so.6!strfry")).unwrap();
        assert_eq!(theirs.module_path, write.module_path);

        // Not found, with a suggestion.
        match ps.resolve(&FuncSpec::parse("baar")) {
            Err(e @ SymbolError::NotFound { .. }) => {
                let SymbolError::NotFound { suggestions, .. } = &e else {
                    unreachable!()
                };
                assert_eq!(
                    suggestions.first(),
                    Some(&format!("bar (in {exe})")),
                    "{suggestions:?}"
                );
                assert!(e.to_string().contains("did you mean: bar (in "), "{e}");
            }
            other => panic!("baar: {other:?}"),
        }
        match ps.resolve(&FuncSpec::parse("nosuchlib!write")) {
            Err(SymbolError::ModuleNotFound { loaded, .. }) => {
                assert!(loaded.iter().any(|l| l == "libc.so.6"), "{loaded:?}")
            }
            other => panic!("nosuchlib: {other:?}"),
        }

        // Zero-sized and indirect functions.
        assert!(matches!(
            ps.resolve(&FuncSpec::parse("nosize")),
            Err(SymbolError::ZeroSize { .. })
        ));
        let nosize = prog
            .symbols()
            .iter()
            .find(|s| s.name == "nosize")
            .unwrap()
            .addr;
        if prog.lookup(nosize).map(|(s, _)| s.name.as_str()) != Some("nosize") {
            panic!("lookup(nosize) = {:?}", prog.lookup(nosize));
        }
        assert!(matches!(
            ps.resolve(&FuncSpec::parse("memcpy")),
            Err(SymbolError::Ifunc { .. })
        ));
        // Read from the live GOT: libc's own IRELATIVE slot for memcpy holds the
        // implementation it chose, inside libc's code.
        let mem = ProcMem(std::fs::File::open(format!("/proc/{pid}/mem")).unwrap());
        match ps.resolve_for_hook(&FuncSpec::parse("memcpy"), &mem) {
            Err(e @ SymbolError::Ifunc { .. }) => {
                let SymbolError::Ifunc { targets, .. } = &e else {
                    unreachable!()
                };
                let libc = module(&ps, &write.module_path);
                assert!(!targets.is_empty(), "{e}");
                for t in targets {
                    assert!(
                        libc.exec_ranges.iter().any(|r| r.contains(&t.addr)),
                        "{t:?}"
                    );
                    assert!(t.via.contains(&libc.path), "{t:?}");
                    assert_eq!(t.spelling, "libc.so.6");
                    let live = read_mem(pid, t.addr, 4);
                    assert_eq!(Some(live.as_slice()), libc.file_bytes(t.addr, 4));
                }
                assert!(e.to_string().contains("this process calls "), "{e}");
            }
            other => panic!("memcpy for a hook: {other:?}"),
        }
        // Sonames: libc's is its file name; a prefix must end at a name boundary.
        assert_eq!(
            module(&ps, &write.module_path).soname.as_deref(),
            Some("libc.so.6")
        );
        assert_eq!(
            ps.resolve(&FuncSpec::parse("libc.so!write")).unwrap(),
            write
        );
        assert!(matches!(
            ps.resolve(&FuncSpec::parse("libc.s!write")),
            Err(SymbolError::ModuleNotFound { .. })
        ));
        // glibc's compatibility versions are named NAME@VERSION; the default keeps the name.
        let realpath = ps.resolve(&FuncSpec::parse("realpath")).unwrap();
        let old = ps
            .resolve(&FuncSpec::parse("realpath@GLIBC_2.2.5"))
            .unwrap();
        assert_ne!(realpath.addr, old.addr);

        // The vdso is searched by plain name only when nothing else has the name.
        let clock = ps.resolve(&FuncSpec::parse("clock_gettime")).unwrap();
        assert_eq!(clock.module_path, write.module_path);
        let vdso_clock = ps
            .resolve(&FuncSpec::parse("[vdso]!clock_gettime"))
            .unwrap();
        assert_eq!(vdso_clock.module_path, VDSO);
        assert_eq!(
            ps.resolve(&FuncSpec::parse("vdso!clock_gettime")).unwrap(),
            vdso_clock
        );
        assert_eq!(
            ps.resolve(&FuncSpec::parse("__vdso_clock_gettime"))
                .unwrap()
                .addr,
            vdso_clock.addr
        );
        let vdso = module(&ps, VDSO);
        assert_eq!(
            read_mem(pid, vdso_clock.addr, 16),
            vdso.file_bytes(vdso_clock.addr, 16).unwrap()
        );

        // An unsized symbol (`_init` in .init) does not swallow the PLT after it.
        if let Some((plt, _)) = prog.section(".plt") {
            let at = plt.start.wrapping_add(prog.bias) + 0x10;
            assert!(prog.lookup(at).is_none(), "{:?}", prog.lookup(at));
        }

        // Addresses.
        let by_addr = ps
            .resolve(&FuncSpec::parse(&format!("{:#x}", bar.addr)))
            .unwrap();
        assert_eq!(by_addr, bar);
        match ps.resolve(&FuncSpec::Addr(bar.addr + 1)) {
            Err(e @ SymbolError::AddressNotInFunction { .. }) => {
                let SymbolError::AddressNotInFunction { addr, .. } = &e else {
                    unreachable!()
                };
                assert_eq!(*addr, bar.addr + 1);
                assert!(e.to_string().contains("bar+0x1"), "{e}");
                // The fix is the entry, which each front end spells (`--addr 0x...`).
                assert_eq!(e.hint(), Some(Hint::UseEntry { entry: bar.addr }));
            }
            other => panic!("bar+1: {other:?}"),
        }
        match ps.resolve(&FuncSpec::Addr(0x10)) {
            Err(e @ SymbolError::AddressNotInFunction { .. }) => {
                assert!(e.to_string().contains("0x10"), "{e}")
            }
            other => panic!("0x10: {other:?}"),
        }
        let (m, s, off) = ps.lookup(bar.addr + 1).unwrap();
        assert_eq!(
            (m.path.as_str(), s.name.as_str(), off),
            (exe.as_str(), "bar", 1)
        );
        assert!(ps
            .lookup(write.addr + 3)
            .is_some_and(|(_, s, off)| s.addr == write.addr && off == 3));
    }

    #[test]
    fn pie_program() {
        check_program(true);
    }

    #[test]
    fn non_pie_program() {
        check_program(false);
    }

    #[test]
    fn i386_program_symbols_resolve() {
        let flags = ["-m32", "-O2", "-static", "-nostdlib", "-fno-pie", "-no-pie"];
        let Some(target) = build_and_spawn("i386", &[("main32.c", I386_C)], &flags) else {
            eprintln!("skipping: cc cannot build i386 programs here");
            return;
        };
        let maps = read_maps(target.pid()).unwrap();
        let ps = ProcessSymbols::load(target.pid(), &maps).unwrap();
        let m = module(&ps, &target.exe_path());
        assert!(!m.is_64);
        assert!(m.symbols().iter().any(|s| s.name == "bar32"));
        assert!(ps.is_32bit());
        let bar = m.symbols().iter().find(|s| s.name == "bar32").unwrap();
        let resolved = ps.resolve(&FuncSpec::parse("bar32")).unwrap();
        assert_eq!(resolved.size, bar.size);
        assert!(m.exec_ranges.iter().any(|r| r.contains(&resolved.addr)));
    }

    #[test]
    fn gone_process_is_an_error() {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert!(matches!(
            ProcessSymbols::load(pid, &[]),
            Err(SymbolError::Io { .. })
        ));
    }

    #[test]
    fn malformed_files_do_not_panic() {
        let dir = unique_dir("malformed");
        let pid = std::process::id() as i32;
        let own_exe = std::fs::read("/proc/self/exe").unwrap();
        let mut cases: Vec<Vec<u8>> = vec![
            Vec::new(),
            b"\x7fELF".to_vec(),
            own_exe[..64.min(own_exe.len())].to_vec(),
            own_exe[..4096.min(own_exe.len())].to_vec(),
        ];
        // Flip bytes all over the header tables of a real binary.
        for (i, pos) in (0..64).chain([0x20, 0x28, 0x3c, 0x3e]).enumerate() {
            let mut bad = own_exe.clone();
            if let Some(b) = bad.get_mut(pos) {
                *b ^= 0xff;
            }
            if i % 2 == 0 {
                bad.truncate(own_exe.len() / 2);
            }
            cases.push(bad);
        }
        for (i, bytes) in cases.iter().enumerate() {
            let path = dir.join(format!("bad{i}"));
            std::fs::write(&path, bytes).unwrap();
            let path = std::fs::canonicalize(&path)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let ino = std::fs::metadata(&path).unwrap().ino();
            let maps = [MapEntry {
                start: 0x10000,
                end: 0x11000,
                perms: crate::procfs::Perms::parse("r-xp"),
                offset: 0,
                inode: ino,
                path: path.clone(),
            }];
            if let Ok(m) = Module::load(pid, &path, &maps) {
                let _ = m.lookup(0x10010);
                let _ = m.section(".text");
                let _ = m.file_bytes(0x10000, 16);
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn spec_parse_and_display() {
        assert_eq!(FuncSpec::parse("0x1234"), FuncSpec::Addr(0x1234));
        assert_eq!(
            FuncSpec::parse("libc.so.6!write"),
            FuncSpec::Qualified {
                module: "libc.so.6".into(),
                name: "write".into()
            }
        );
        assert_eq!(FuncSpec::parse("write"), FuncSpec::Name("write".into()));
        assert_eq!(FuncSpec::parse("0xzz"), FuncSpec::Name("0xzz".into()));
        assert_eq!(FuncSpec::parse("!write"), FuncSpec::Name("!write".into()));
        for s in ["0x1234", "libc.so.6!write", "write"] {
            assert_eq!(FuncSpec::parse(s).to_string(), s);
        }
    }

    #[test]
    fn name_prefixes_end_at_a_boundary() {
        let z = "libz.so.1.2.13";
        for good in [
            "libz",
            "libz.so",
            "libz.so.1",
            "libz.so.1.2",
            "libz.so.1.2.13",
        ] {
            assert!(name_prefix_at_boundary(z, good), "{good}");
        }
        for bad in [
            "",
            "l",
            "lib",
            "libz.",
            "libz.s",
            "libz.so.",
            "libz.so.1.2.1",
            "libzz",
        ] {
            assert!(!name_prefix_at_boundary(z, bad), "{bad}");
        }
        assert!(!name_prefix_at_boundary("libcrypt.so.1", "libc"));
        assert!(name_prefix_at_boundary("libc.so.6", "libc"));
        assert!(name_prefix_at_boundary("libc-2.31.so", "libc"));
        assert!(name_prefix_at_boundary(
            "ld-linux-x86-64.so.2",
            "ld-linux-x86-64"
        ));
        assert!(!name_prefix_at_boundary("libc-2.31.so", "libc-"));
    }

    #[test]
    fn module_match_ranks_path_name_soname_prefix() {
        let z = "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13";
        let so = Some("libz.so.1");
        assert_eq!(module_match(z, so, z), Some(ModuleMatch::Path));
        assert_eq!(
            module_match(z, so, "libz.so.1.2.13"),
            Some(ModuleMatch::Name)
        );
        assert_eq!(module_match(z, so, "libz.so.1"), Some(ModuleMatch::Name));
        assert_eq!(
            module_match(z, None, "libz.so.1"),
            Some(ModuleMatch::Prefix)
        );
        for prefix in ["libz", "libz.so", "libz.so.1.2"] {
            assert_eq!(
                module_match(z, so, prefix),
                Some(ModuleMatch::Prefix),
                "{prefix}"
            );
        }
        for bad in ["libz.s", "lib", "z.so.1", "/lib/libz.so.1", "so.1"] {
            assert_eq!(module_match(z, so, bad), None, "{bad}");
        }
        // A soname that is not a prefix of the file name is matched on its own.
        let odd = "/opt/lib/libfoo-2.3.so";
        let odd_so = Some("libfoo.so.2");
        assert_eq!(
            module_match(odd, odd_so, "libfoo.so.2"),
            Some(ModuleMatch::Name)
        );
        assert_eq!(
            module_match(odd, odd_so, "libfoo.so"),
            Some(ModuleMatch::Prefix)
        );
        assert_eq!(
            module_match(odd, odd_so, "libfoo"),
            Some(ModuleMatch::Prefix)
        );
        assert_eq!(module_match("/lib/libcrypt.so.1", None, "libc"), None);
        assert_eq!(module_match(VDSO, None, "vdso"), Some(ModuleMatch::Path));
        assert!(module_name_matches(z, "libz"));
        assert!(!module_name_matches(z, "libz.s"));
    }

    #[test]
    fn levenshtein() {
        assert_eq!(bounded_levenshtein("baar", "bar", 3), Some(1));
        assert_eq!(bounded_levenshtein("kitten", "sitting", 3), Some(3));
        assert_eq!(bounded_levenshtein("kitten", "sitting", 2), None);
        assert_eq!(bounded_levenshtein("", "abc", 3), Some(3));
    }

    /// Prints how long loading a small process's symbols takes (run with --nocapture).
    #[test]
    fn find_function_agrees_with_resolve_and_builds_no_suggestions() {
        let target = spawn_c_program("find", true);
        let pid = target.pid();
        let ps = ProcessSymbols::load(pid, &read_maps(pid).unwrap()).unwrap();
        let by_resolve = ps.resolve(&FuncSpec::Name("call_twin_a".into())).unwrap();
        let found = ps
            .find_function("call_twin_a")
            .expect("defined in the program");
        assert_eq!(
            (found.addr, &found.module_path),
            (by_resolve.addr, &by_resolve.module_path)
        );
        // `twin` is defined twice (two static functions): ambiguous, as for resolve.
        assert!(ps.find_function("twin").is_none());
        assert!(ps.find_function("no_such_function_anywhere").is_none());
        match ps.resolve(&FuncSpec::Name("call_twin_c".into())) {
            Err(SymbolError::NotFound { suggestions, .. }) => {
                assert!(
                    suggestions.iter().any(|s| s.contains("call_twin_")),
                    "{suggestions:?}"
                )
            }
            other => panic!("expected NotFound with suggestions, got {other:?}"),
        }
    }

    #[test]
    fn exported_finds_dynamic_symbols_only() {
        let target = spawn_c_program("exported", true);
        let pid = target.pid();
        let ps = ProcessSymbols::load(pid, &read_maps(pid).unwrap()).unwrap();
        let libc = ps
            .modules
            .iter()
            .find(|m| m.file_name().starts_with("libc.so"))
            .expect("libc is mapped");
        let printf = ps.resolve(&FuncSpec::Name("printf".into())).unwrap();
        assert_eq!(libc.exported("printf"), Some(printf.addr));
        let exe = module(&ps, &target.exe_path());
        assert_eq!(
            exe.exported("call_twin_a"),
            None,
            "not in the program's .dynsym"
        );
        assert!(
            exe.symbols_named("call_twin_a").next().is_some(),
            "but in .symtab"
        );
    }

    #[test]
    fn load_time_small_process() {
        let target = spawn_c_program("timing", true);
        let pid = target.pid();
        let mut times = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            let maps = read_maps(pid).unwrap();
            let ps = ProcessSymbols::load(pid, &maps).unwrap();
            times.push(t.elapsed());
            assert!(ps.modules.len() >= 3);
        }
        times.sort();
        eprintln!(
            "read_maps + ProcessSymbols::load of a small process: median {:?}, min {:?}, max {:?}",
            times[times.len() / 2],
            times[0],
            times[times.len() - 1]
        );
    }
}
