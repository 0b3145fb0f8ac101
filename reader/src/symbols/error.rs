//! Why a symbol could not be loaded or found, and the messages that say so.

use std::io;

use super::demangled::NameProblem;
use super::symbol::IfuncTarget;
use crate::hint::Hint;

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

pub(super) fn not_an_entry_message(addr: u64, place: &AddressPlace) -> String {
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

pub(super) fn not_found_message(name: &str, suggestions: &[String]) -> String {
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

pub(super) fn ifunc_message(name: &str, module: &str, targets: &[IfuncTarget]) -> String {
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

pub(super) fn ambiguous_message(name: &str, candidates: &[String]) -> String {
    let mut msg = ambiguous_name_message(name, candidates);
    msg.push_str("\n  write MODULE!NAME to pick a module (e.g. `libc.so.6!write`)");
    msg
}

pub(super) fn bad_name_message(
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

pub(super) fn ambiguous_name_message(name: &str, candidates: &[String]) -> String {
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
