//! Why a core file could not be opened, parsed or read, and what is missing
//! from it: [`CoreError`] and the reasons it carries.

use crate::arena::ArenaError;
use crate::hint::Hint;
use crate::memory::MemoryError;
use crate::symbols::SymbolError;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// Size of an x86-64 `struct elf_prstatus`.
pub(super) const PRSTATUS_LEN: usize = 336;
/// Size of an i386 `struct elf_prstatus` (32-bit longs and `timeval`s).
pub(super) const PRSTATUS32_LEN: usize = 144;

/// Errors opening or parsing a core file.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// The file could not be opened or mapped.
    #[error("cannot read core file {path}: {source} (check the path: the kernel writes cores where /proc/sys/kernel/core_pattern says, relative to the crashed process's working directory)")]
    Open {
        /// The core file.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// The file is not ELF at all.
    #[error("{path} is not a core file (no ELF header)")]
    NotElf {
        /// The file.
        path: String,
    },
    /// The file is ELF, but an executable or library rather than a core.
    #[error("{path} is an ELF {kind}, not a core file")]
    NotCore {
        /// The file.
        path: String,
        /// What it is instead.
        kind: &'static str,
    },
    /// A core of another architecture.
    #[error(
        "{path} is a core of machine type {machine}, not x86-64 or i386: only x86-64 and i386 cores are supported"
    )]
    WrongMachine {
        /// The file.
        path: String,
        /// `e_machine`.
        machine: u16,
    },
    /// The file ends before its headers or segments do.
    #[error("{path} is truncated: it has {len} bytes but its {what} need {needed}; the dump was cut short (RLIMIT_CORE too small, disk full, or an interrupted copy): raise `ulimit -c` and reproduce, or copy the core again")]
    Truncated {
        /// The file.
        path: String,
        /// Its length.
        len: u64,
        /// Bytes the headers or segments need.
        needed: u64,
        /// Which part is cut off.
        what: &'static str,
    },
    /// Headers or notes are malformed.
    #[error("{path} is a malformed core file: {problem}")]
    Malformed {
        /// The file.
        path: String,
        /// What is wrong.
        problem: Malformation,
    },
    /// `--tid` named a thread the core does not have.
    #[error("the core {path} has no thread {tid}; its threads are {}", .threads.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", "))]
    NoSuchThread {
        /// The file.
        path: String,
        /// The thread asked for.
        tid: i32,
        /// The threads it has.
        threads: Vec<i32>,
    },
    /// No `NT_PRSTATUS` note: no thread registers to unwind from.
    #[error("{path} has no thread registers (no NT_PRSTATUS note); it was not written by the Linux kernel's ELF core dumper")]
    NoThreads {
        /// The file.
        path: String,
    },
    /// An arena (the hooks' code and records) in the core is unreadable.
    #[error(transparent)]
    Arena(#[from] ArenaError),
}

impl CoreError {
    /// What the caller can do about this error, if the error knows.
    pub fn hint(&self) -> Option<Hint> {
        match self {
            CoreError::NotElf { .. } => Some(Hint::GiveKernelCore),
            CoreError::NotCore { .. } => Some(Hint::GiveCoreNotProgram),
            _ => None,
        }
    }
}

/// What is malformed in a core file's headers or notes.
#[derive(Debug, thiserror::Error)]
pub enum Malformation {
    /// The ELF class byte is neither 32- nor 64-bit.
    #[error("unknown ELF class {class}")]
    ElfClass {
        /// The `EI_CLASS` byte.
        class: u8,
    },
    /// The ELF header does not parse.
    #[error("{0}")]
    Header(goblin::error::Error),
    /// The ELF parser panicked on malformed input.
    #[error("the ELF parser failed on malformed input")]
    ParserPanicked,
    /// The program header table's end overflows a 64-bit offset.
    #[error("program header table overflows")]
    ProgramHeaderOverflow,
    /// The program headers do not parse.
    #[error("program headers: {0}")]
    ProgramHeaders(goblin::error::Error),
    /// A segment's end overflows a 64-bit offset.
    #[error("segment at file offset {offset:#x} overflows")]
    SegmentOverflow {
        /// The segment's file offset.
        offset: u64,
    },
    /// A note segment's offset does not fit in memory.
    #[error("note offset too large")]
    NoteOffset,
    /// A note segment's size does not fit in memory.
    #[error("note size too large")]
    NoteSize,
    /// A note segment does not parse.
    #[error("note segment: {0}")]
    Note(goblin::error::Error),
    /// An `NT_PRSTATUS` note is shorter than the x86-64 one.
    #[error("NT_PRSTATUS has {len} bytes, an x86-64 one has {PRSTATUS_LEN}")]
    PrStatusLen {
        /// Its length.
        len: usize,
    },
    /// An `NT_PRSTATUS` note of a 32-bit core is shorter than the i386 one.
    #[error("NT_PRSTATUS has {len} bytes, an i386 one has {PRSTATUS32_LEN}")]
    PrStatus32Len {
        /// Its length.
        len: usize,
    },
    /// The `NT_FILE` note is inconsistent.
    #[error("NT_FILE note: {0}")]
    NtFile(NtFileProblem),
}

/// What is wrong with an `NT_FILE` note.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NtFileProblem {
    /// Shorter than its count and page size.
    #[error("too short")]
    TooShort,
    /// Its count says more entries than it has bytes for.
    #[error("more entries than bytes")]
    MoreEntriesThanBytes,
    /// Fewer paths than entries.
    #[error("fewer paths than entries")]
    FewerPaths,
    /// An entry ends before it starts.
    #[error("an entry ends before it starts")]
    EndsBeforeStart,
}

/// Why a file the core's process had mapped cannot be used here.
#[derive(Debug, thiserror::Error)]
pub enum BackingError {
    /// It could not be opened, inspected or mapped.
    #[error("{0}")]
    Io(io::Error),
    /// It is not a regular file.
    #[error("not a regular file")]
    NotRegular,
    /// It is empty.
    #[error("empty file")]
    Empty,
    /// It has another GNU build id than the file the process had mapped.
    #[error(
        "its build id is {} but the process had {} mapped: not the file of the crashed process",
        hex(.file),
        hex(.core)
    )]
    OtherBuild {
        /// The build id of the file found here.
        file: Vec<u8>,
        /// The build id the core's dump shows.
        core: Vec<u8>,
    },
    /// A file outside the sysroot that the core holds no build id to check it
    /// against: it may belong to this machine rather than the crashed one.
    #[error("it lies outside the sysroot and no build id (in the core and in the file) proves it is the crashed process's file")]
    Unproven,
    /// None of the places looked at has the file: `why` the place reported (another
    /// build, else the first place) cannot be used; `also` the other places.
    #[error("{why} (also looked at {})", .also.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    NoneFits {
        /// The other places looked at, in order.
        also: Vec<PathBuf>,
        /// Why the place reported cannot be used.
        why: Box<BackingError>,
    },
}

/// Why a module of a core has no symbols (its frames show addresses).
#[derive(Debug, Clone, thiserror::Error)]
pub enum MissingReason {
    /// The file found here cannot be used.
    #[error(transparent)]
    File(Arc<BackingError>),
    /// Its symbols could not be loaded.
    #[error(transparent)]
    Symbols(Arc<SymbolError>),
    /// The `[vdso]` image could not be read from the core.
    #[error(transparent)]
    Image(Arc<MemoryError>),
}

/// Why bytes of a core's process memory cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum CoreReadError {
    /// The range wraps around the address space.
    #[error("address overflow")]
    AddressOverflow,
    /// A segment's dumped bytes lie past the end of the core.
    #[error("segment past the end of the core")]
    SegmentPastEnd,
    /// Bytes the core did not dump could not be read from the mapped file.
    #[error("0x{at:x}: {why}")]
    Undumped {
        /// The first such address.
        at: u64,
        /// Why.
        why: UndumpedRead,
    },
    /// The mapped file gave no bytes at this address.
    #[error("0x{at:x}: no bytes")]
    NoBytes {
        /// The address.
        at: u64,
    },
}

/// Why bytes the kernel did not dump cannot be read from the file that was mapped there.
#[derive(Debug, thiserror::Error)]
pub enum UndumpedRead {
    /// The address is in a dumped segment's undumped tail, not a file mapping.
    #[error("not dumped in the core and not a file mapping")]
    NotFileMapping,
    /// No segment or file mapping covers the address.
    #[error("not mapped in the core")]
    NotMapped,
    /// The file mapping's file was never looked for.
    #[error("not dumped in the core")]
    NoFile,
    /// The file mapping's file cannot be used.
    #[error("not dumped in the core, and its file {} is unavailable: {why}", .disk.display())]
    FileUnavailable {
        /// Where the file was looked for.
        disk: PathBuf,
        /// Why it cannot be used.
        why: Arc<BackingError>,
    },
    /// The offset into the file overflows.
    #[error("offset overflow")]
    OffsetOverflow,
    /// The file is shorter than the mapping says.
    #[error("past the end of {}", .0.display())]
    PastEnd(PathBuf),
}

/// Lower-case hex of bytes.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
