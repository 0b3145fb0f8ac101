//! Core files: backtraces with stashed arguments after the process is gone.
//!
//! A [`CoreFile`] is an x86-64 or i386 ELF `ET_CORE` image mapped read-only. Its notes give
//! the threads (`NT_PRSTATUS`: tid, signal, registers), the command name
//! (`NT_PRPSINFO`), the auxiliary vector (`NT_AUXV`: where the executable and the
//! vDSO are) and the mapped files (`NT_FILE`). Its `PT_LOAD` segments are the memory,
//! served through the same [`Memory`] trait the live reader uses; bytes of a file
//! mapping the kernel did not dump (`p_filesz` 0 or short, the default
//! `coredump_filter`) are read from the mapped file on disk when it is there.
//!
//! Hooks need nothing outside the core: arenas are anonymous private `r-x`
//! mappings, which the kernel dumps, and [`crate::arena::discover`] finds them by their magic in
//! the mappings rebuilt from the segments. A mapped file missing on disk only costs
//! its frames their names (they show addresses); it never fails the backtrace.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use goblin::container::{Container, Ctx, Endian};
use goblin::elf::header::{ELFCLASS32, ELFCLASS64, EM_386, EM_X86_64, ET_CORE, ET_DYN, ET_EXEC};
use goblin::elf::note::{NoteDataIterator, NT_FILE, NT_PRPSINFO, NT_PRSTATUS};
use goblin::elf::program_header::{ProgramHeader, PF_R, PF_W, PF_X, PT_LOAD, PT_NOTE};

use crate::arena::ArenaError;
use crate::debuginfo::DwarfCache;
use crate::hint::Hint;
use crate::ids::{Pid, Tid};
use crate::memory::{Memory, MemoryError};
use crate::process_view::{Detail, ProcessState, ProcessView};
use crate::procfs::{MapEntry, Perms};
use crate::symbols::{Module, ProcessSymbols, SymbolError, VDSO};
use crate::unwind::{Arch, Backtrace, BacktraceOptions, DwarfRegisters, ThreadBacktrace};

/// `NT_AUXV`: the auxiliary vector the process started with.
const NT_AUXV: u32 = 6;
/// Auxiliary vector tag: address of the executable's entry point.
const AT_ENTRY: u64 = 9;
/// Auxiliary vector tag: address of the vDSO's ELF header.
const AT_SYSINFO_EHDR: u64 = 33;
/// Size of an x86-64 `struct elf_prstatus`.
const PRSTATUS_LEN: usize = 336;
/// Offset of `pr_pid` in `struct elf_prstatus`.
const PRSTATUS_PID: usize = 32;
/// Offset of `pr_cursig` in `struct elf_prstatus` (both architectures).
const PRSTATUS_CURSIG: usize = 12;
/// Offset of `pr_reg` (a `user_regs_struct`) in `struct elf_prstatus`.
const PRSTATUS_REGS: usize = 112;
/// Offset of `pr_pid` in an x86-64 `struct elf_prpsinfo`.
const PRPSINFO_PID: usize = 24;
/// Offset and length of `pr_fname` (the command name) in `struct elf_prpsinfo`.
const PRPSINFO_FNAME: (usize, usize) = (40, 16);
/// Size of an i386 `struct elf_prstatus` (32-bit longs and `timeval`s).
const PRSTATUS32_LEN: usize = 144;
/// Offset of `pr_pid` in an i386 `struct elf_prstatus`.
const PRSTATUS32_PID: usize = 24;
/// Offset of `pr_reg` (an i386 `user_regs_struct`: 17 words) in an i386 `struct elf_prstatus`.
const PRSTATUS32_REGS: usize = 72;
/// Offset of `pr_pid` in an i386 `struct elf_prpsinfo` (16-bit uid and gid).
const PRPSINFO32_PID: usize = 12;
/// Offset and length of `pr_fname` in an i386 `struct elf_prpsinfo`.
const PRPSINFO32_FNAME: (usize, usize) = (28, 16);
/// Largest `[vdso]` image read from the core.
const MAX_VDSO_LEN: u64 = 1 << 20;
/// `e_phnum` value saying the real count is in section header 0 (`sh_info`).
const PN_XNUM: u16 = 0xffff;
/// Offset of `sh_info` in an `Elf64_Shdr`.
const SHDR_INFO: usize = 44;
/// Offset of `sh_info` in an `Elf32_Shdr`.
const SHDR32_INFO: usize = 28;
/// `MapEntry::inode` of a file mapping rebuilt from a core (cores record no inodes).
const CORE_FILE_INODE: u64 = 1;

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

/// Where to find the files a core's process had mapped.
#[derive(Debug, Clone, Default)]
pub struct CoreOptions {
    /// The crashed program's executable, instead of the path recorded in the core.
    pub exe: Option<PathBuf>,
    /// Directory the recorded paths are resolved under (a copy of the crashed machine's root).
    pub sysroot: Option<PathBuf>,
}

/// The registers of one thread in a core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreThread {
    /// Thread id.
    pub tid: i32,
    /// Signal the thread was stopped by (the crashing thread's fatal signal).
    pub signal: i32,
    /// Instruction pointer (`eip` in an i386 core).
    pub rip: u64,
    /// Stack pointer (`esp` in an i386 core).
    pub rsp: u64,
    /// Frame pointer (`ebp` in an i386 core).
    pub rbp: u64,
    /// Every general register, by DWARF number of the core's architecture
    /// (x86-64: rax 0 … r15 15, rip 16; i386: eax 0 … edi 7, eip 8), for the
    /// unwinder and DWARF argument locations in the innermost frame.
    pub registers: DwarfRegisters,
}

/// One file mapping from `NT_FILE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreMappedFile {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Offset into the file, in bytes.
    pub offset: u64,
    /// Path as the process saw it (a trailing ` (deleted)` removed).
    pub path: String,
}

/// A `PT_LOAD` segment: process memory, some or all of it in the core.
#[derive(Debug, Clone, Copy)]
struct Segment {
    vaddr: u64,
    memsz: u64,
    offset: u64,
    filesz: u64,
    flags: u32,
}

/// A file the process had mapped, as found (or not) on this machine.
struct BackingFile {
    /// Where it was looked for.
    disk: PathBuf,
    /// Its bytes, or why they are not available.
    map: Result<memmap2::Mmap, Arc<BackingError>>,
}

/// A mapped file of the core whose symbols could not be loaded: its frames show addresses.
#[derive(Debug, Clone)]
pub struct MissingModule {
    /// Path as the process saw it.
    pub path: String,
    /// Where it was looked for on this machine.
    pub looked_at: PathBuf,
    /// Why it could not be used.
    pub reason: MissingReason,
}

/// A parsed x86-64 or i386 Linux core file, readable as process memory.
pub struct CoreFile {
    path: PathBuf,
    map: memmap2::Mmap,
    segments: Vec<Segment>,
    /// The dumped process's architecture.
    pub arch: Arch,
    /// Process id of the dumped process.
    pub pid: i32,
    /// Command name (`pr_fname`), empty if the core has no `NT_PRPSINFO`.
    pub command: String,
    /// Threads, the one that received the fatal signal first.
    pub threads: Vec<CoreThread>,
    /// File mappings from `NT_FILE`, in address order.
    pub files: Vec<CoreMappedFile>,
    auxv: Vec<(u64, u64)>,
    options: CoreOptions,
    backing: HashMap<String, BackingFile>,
}

impl std::fmt::Debug for CoreFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoreFile")
            .field("path", &self.path)
            .field("pid", &self.pid)
            .field("arch", &self.arch)
            .field("threads", &self.threads.len())
            .field("segments", &self.segments.len())
            .field("files", &self.files.len())
            .finish_non_exhaustive()
    }
}

/// Little-endian reads from a byte slice that fail (as `None`) instead of panicking.
fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn le_i32(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn le_i16(b: &[u8], at: usize) -> Option<i16> {
    Some(i16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

/// The notes this reader uses, copied out of the core.
struct Notes {
    arch: Arch,
    pid: Option<i32>,
    command: String,
    threads: Vec<CoreThread>,
    files: Vec<CoreMappedFile>,
    auxv: Vec<(u64, u64)>,
}

impl CoreFile {
    /// Opens and parses a core file; `options` say where its mapped files are.
    pub fn open(path: &Path, options: CoreOptions) -> Result<CoreFile, CoreError> {
        let shown = path.display().to_string();
        let open_err = |source| CoreError::Open {
            path: shown.clone(),
            source,
        };
        // Never waits on a FIFO named as the core.
        let file = crate::shared_file::open_regular(path).map_err(open_err)?;
        let meta = file.metadata().map_err(open_err)?;
        if !meta.is_file() {
            return Err(open_err(io::Error::other("not a regular file")));
        }
        if meta.len() == 0 {
            return Err(CoreError::NotElf { path: shown });
        }
        // SAFETY: mapped read-only and private, never written through. A core is not
        // changed in place once the kernel has written it; if another process truncated
        // it while we read, an access past the new end would raise SIGBUS, the risk every
        // core reader that maps its input accepts.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(open_err)?;
        // goblin reports malformed input as errors; a panic on some input it does not
        // expect still must not take the caller down.
        let (segments, notes) =
            std::panic::catch_unwind(|| parse(&map, &shown)).unwrap_or_else(|_| {
                Err(CoreError::Malformed {
                    path: shown.clone(),
                    problem: Malformation::ParserPanicked,
                })
            })?;
        let mut core = CoreFile {
            path: path.to_path_buf(),
            map,
            segments,
            arch: notes.arch,
            pid: notes
                .pid
                .or(notes.threads.first().map(|t| t.tid))
                .unwrap_or(0),
            command: notes.command,
            threads: notes.threads,
            files: notes.files,
            auxv: notes.auxv,
            options,
            backing: HashMap::new(),
        };
        core.open_backing_files();
        Ok(core)
    }

    /// The core file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A value from the auxiliary vector.
    pub fn auxv(&self, tag: u64) -> Option<u64> {
        self.auxv.iter().find(|(t, _)| *t == tag).map(|(_, v)| *v)
    }

    /// The recorded path of the main executable: the file mapped at the entry point
    /// (without an auxiliary vector, the lowest file mapping).
    pub fn exe_path(&self) -> Option<&str> {
        let at_entry = self.auxv(AT_ENTRY).and_then(|entry| self.file_at(entry));
        at_entry.or(self.files.first()).map(|f| f.path.as_str())
    }

    /// Where a recorded path is looked for on this machine, in order: the `--exe`
    /// file alone for the executable; else under `--sysroot` first, then the path
    /// itself (used only when its build id proves it is the file the process had:
    /// see [`CoreFile::open`]).
    pub fn disk_paths(&self, recorded: &str) -> Vec<PathBuf> {
        if let Some(exe) = &self.options.exe {
            if self.exe_path() == Some(recorded) {
                return vec![exe.clone()];
            }
        }
        match &self.options.sysroot {
            Some(root) => vec![
                root.join(recorded.trim_start_matches('/')),
                PathBuf::from(recorded),
            ],
            None => vec![PathBuf::from(recorded)],
        }
    }

    /// Where the file of a recorded path was found (or, if it was not, first looked for).
    pub fn disk_path(&self, recorded: &str) -> PathBuf {
        match self.backing.get(recorded) {
            Some(b) => b.disk.clone(),
            None => self
                .disk_paths(recorded)
                .into_iter()
                .next()
                .unwrap_or_else(|| PathBuf::from(recorded)),
        }
    }

    /// The build id the core shows for the file mapped from `path` (from the dump
    /// of its first page), if the core holds it.
    pub fn recorded_build_id(&self, path: &str) -> Option<&[u8]> {
        let first = self
            .files
            .iter()
            .find(|f| f.path == path && f.offset == 0)?;
        build_id(self.dumped(first.start))
    }

    fn open_backing_files(&mut self) {
        let mut backing = HashMap::new();
        for f in &self.files {
            if backing.contains_key(&f.path) {
                continue;
            }
            backing.insert(f.path.clone(), self.find_backing(&f.path));
        }
        self.backing = backing;
    }

    /// The first of [`CoreFile::disk_paths`] that is the file the process had
    /// mapped. The fallback outside the sysroot must prove it by its build id;
    /// when none will do, the most telling failure is kept (another build over a
    /// missing file), with every place looked at.
    fn find_backing(&self, recorded: &str) -> BackingFile {
        let paths = self.disk_paths(recorded);
        let fallback = self.options.sysroot.is_some() && paths.len() > 1;
        let mut failures: Vec<(PathBuf, BackingError)> = Vec::new();
        for (i, disk) in paths.into_iter().enumerate() {
            let is_fallback = fallback && i > 0;
            let found = map_regular_file(&disk).and_then(|map| {
                self.check_same_build(recorded, &map)?;
                if is_fallback
                    && (self.recorded_build_id(recorded).is_none() || build_id(&map).is_none())
                {
                    return Err(BackingError::Unproven);
                }
                Ok(map)
            });
            match found {
                Ok(map) => return BackingFile { disk, map: Ok(map) },
                Err(e) => failures.push((disk, e)),
            }
        }
        let pick = failures
            .iter()
            .position(|(_, e)| matches!(e, BackingError::OtherBuild { .. }))
            .unwrap_or(0);
        let (disk, why) = failures.remove(pick);
        let why = if failures.is_empty() {
            why
        } else {
            BackingError::NoneFits {
                also: failures.into_iter().map(|(p, _)| p).collect(),
                why: Box::new(why),
            }
        };
        BackingFile {
            disk,
            map: Err(Arc::new(why)),
        }
    }

    /// Fails when the file found on disk has another GNU build id than the one the
    /// core's dump of its first page shows (the file was rebuilt or replaced).
    fn check_same_build(&self, path: &str, disk: &[u8]) -> Result<(), BackingError> {
        match (self.recorded_build_id(path), build_id(disk)) {
            (Some(core), Some(file)) if core != file => Err(BackingError::OtherBuild {
                file: file.to_vec(),
                core: core.to_vec(),
            }),
            _ => Ok(()),
        }
    }

    /// The bytes the core itself holds from `addr` to the end of that segment's dump.
    fn dumped(&self, addr: u64) -> &[u8] {
        let Some(seg) = self.segment_at(addr) else {
            return &[];
        };
        let into = addr - seg.vaddr;
        if into >= seg.filesz {
            return &[];
        }
        let from = (seg.offset + into) as usize;
        let to = (seg.offset + seg.filesz) as usize;
        self.map.get(from..to).unwrap_or(&[])
    }

    /// The process's mappings rebuilt from the segments and `NT_FILE`.
    ///
    /// Cores do not record sharing or inodes: every mapping reads as private, file
    /// mappings get a placeholder inode, and the vDSO is named `[vdso]`. A file
    /// mapping with no segment at all (gdb's `gcore` leaves out unmodified file
    /// pages) takes its permissions from the file's own `PT_LOAD` at that offset.
    pub fn maps(&self) -> Vec<MapEntry> {
        let mut maps = self.segment_maps();
        for f in &self.files {
            if self.segment_at(f.start).is_some() {
                continue;
            }
            maps.push(MapEntry {
                start: f.start,
                end: f.end,
                perms: self.file_perms(f).unwrap_or(Perms {
                    read: true,
                    private: true,
                    ..Perms::default()
                }),
                offset: f.offset,
                inode: CORE_FILE_INODE,
                path: f.path.clone(),
            });
        }
        maps.sort_by_key(|m| m.start);
        maps
    }

    /// The permissions the ELF file mapped by `f` gives the segment at its offset.
    fn file_perms(&self, f: &CoreMappedFile) -> Option<Perms> {
        let bytes: &[u8] = self.backing.get(&f.path)?.map.as_ref().ok()?;
        let header = goblin::elf::Elf::parse_header(bytes).ok()?;
        let ctx = Ctx::new(container(header.e_ident[4])?, Endian::Little);
        let phoff = usize::try_from(header.e_phoff).ok()?;
        let phdrs = ProgramHeader::parse(bytes, phoff, usize::from(header.e_phnum), ctx).ok()?;
        let load = phdrs
            .iter()
            .find(|p| p.p_type == PT_LOAD && p.p_offset & !0xfff == f.offset)?;
        Some(Perms {
            read: load.p_flags & PF_R != 0,
            write: load.p_flags & PF_W != 0,
            exec: load.p_flags & PF_X != 0,
            private: true,
        })
    }

    /// One mapping per `PT_LOAD` segment.
    fn segment_maps(&self) -> Vec<MapEntry> {
        let vdso = self.auxv(AT_SYSINFO_EHDR);
        self.segments
            .iter()
            .map(|s| {
                let file = self.file_at(s.vaddr);
                let (offset, inode, path) = match file {
                    Some(f) => (
                        f.offset.saturating_add(s.vaddr - f.start),
                        CORE_FILE_INODE,
                        f.path.clone(),
                    ),
                    None if Some(s.vaddr) == vdso => (0, 0, VDSO.to_string()),
                    None => (0, 0, String::new()),
                };
                MapEntry {
                    start: s.vaddr,
                    end: s.vaddr.saturating_add(s.memsz),
                    perms: Perms {
                        read: s.flags & PF_R != 0,
                        write: s.flags & PF_W != 0,
                        exec: s.flags & PF_X != 0,
                        private: true,
                    },
                    offset,
                    inode,
                    path,
                }
            })
            .collect()
    }

    fn file_at(&self, addr: u64) -> Option<&CoreMappedFile> {
        let i = self.files.partition_point(|f| f.start <= addr);
        let f = self.files.get(i.checked_sub(1)?)?;
        (addr < f.end).then_some(f)
    }

    fn segment_at(&self, addr: u64) -> Option<&Segment> {
        let i = self.segments.partition_point(|s| s.vaddr <= addr);
        let s = self.segments.get(i.checked_sub(1)?)?;
        (addr - s.vaddr < s.memsz).then_some(s)
    }

    /// Symbols of every executable file mapping (and the vDSO); files missing on this
    /// machine are listed instead, and their frames will show addresses only.
    pub fn symbols(&self, maps: &[MapEntry]) -> (ProcessSymbols, Vec<MissingModule>) {
        let mut paths: Vec<&str> = Vec::new();
        for e in maps {
            if e.perms.exec && (e.is_file() || e.path == VDSO) && !paths.contains(&e.path.as_str())
            {
                paths.push(&e.path);
            }
        }
        let mut modules = Vec::new();
        let mut missing = Vec::new();
        for path in paths {
            let entries: Vec<&MapEntry> = maps.iter().filter(|e| e.path == path).collect();
            let (loaded, looked_at) = if path == VDSO {
                let image = entries.first().map(|e| {
                    let len = (e.end - e.start).min(MAX_VDSO_LEN) as usize;
                    self.read_vec(e.start, len)
                });
                match image {
                    Some(Ok(bytes)) => (
                        Module::from_image(VDSO, bytes, &entries)
                            .map_err(|e| MissingReason::Symbols(Arc::new(e))),
                        PathBuf::from(VDSO),
                    ),
                    Some(Err(e)) => (Err(MissingReason::Image(Arc::new(e))), PathBuf::from(VDSO)),
                    None => continue,
                }
            } else {
                let disk = self.disk_path(path);
                let root = self.options.sysroot.as_deref();
                match self.backing.get(path).map(|b| &b.map) {
                    Some(Err(why)) => (Err(MissingReason::File(why.clone())), disk),
                    _ => (
                        Module::from_file(path, &disk, &entries)
                            .map(|m| m.under_root(root))
                            .map_err(|e| MissingReason::Symbols(Arc::new(e))),
                        disk,
                    ),
                }
            };
            match loaded {
                Ok(m) => modules.push(m),
                Err(reason) => missing.push(MissingModule {
                    path: path.to_string(),
                    looked_at,
                    reason,
                }),
            }
        }
        (ProcessSymbols::from_modules(self.pid, modules), missing)
    }

    /// Reads bytes of a file mapping the kernel did not dump from the file on disk.
    fn read_from_file(&self, addr: u64, buf: &mut [u8]) -> Result<usize, UndumpedRead> {
        let f = self
            .file_at(addr)
            .ok_or(if self.segment_at(addr).is_some() {
                UndumpedRead::NotFileMapping
            } else {
                UndumpedRead::NotMapped
            })?;
        let backing = self.backing.get(&f.path).ok_or(UndumpedRead::NoFile)?;
        let map = backing
            .map
            .as_ref()
            .map_err(|why| UndumpedRead::FileUnavailable {
                disk: backing.disk.clone(),
                why: why.clone(),
            })?;
        let n = buf.len().min((f.end - addr) as usize);
        let at = f
            .offset
            .checked_add(addr - f.start)
            .ok_or(UndumpedRead::OffsetOverflow)?;
        let bytes = usize::try_from(at)
            .ok()
            .and_then(|at| map.get(at..at.checked_add(n)?))
            .ok_or_else(|| UndumpedRead::PastEnd(backing.disk.clone()))?;
        buf[..n].copy_from_slice(bytes);
        Ok(n)
    }
}

/// Lower-case hex of bytes.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `NT_GNU_BUILD_ID` of a 64-bit or 32-bit ELF image, found through its
/// `PT_NOTE` headers; works on a whole file and on the first page a core dumps of
/// each ELF mapping.
fn build_id(image: &[u8]) -> Option<&[u8]> {
    if image.get(..4)? != b"\x7fELF" {
        return None;
    }
    let wide = match *image.get(4)? {
        ELFCLASS64 => true,
        ELFCLASS32 => false,
        _ => return None,
    };
    let u32_at = |b: &[u8], at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(
            b.get(at..at.checked_add(4)?)?.try_into().ok()?,
        ))
    };
    let u16_at = |b: &[u8], at: usize| -> Option<u16> {
        Some(u16::from_le_bytes(
            b.get(at..at.checked_add(2)?)?.try_into().ok()?,
        ))
    };
    // Elf64_Ehdr / Elf32_Ehdr: e_phoff, e_phentsize, e_phnum; Elf64_Phdr / Elf32_Phdr:
    // p_offset, p_filesz.
    let word = |b: &[u8], at: usize| {
        if wide {
            le_u64(b, at)
        } else {
            u32_at(b, at).map(u64::from)
        }
    };
    let (phoff, phentsize, phnum, p_offset, p_filesz) = if wide {
        (32, 54, 56, 8, 32)
    } else {
        (28, 42, 44, 4, 16)
    };
    let phoff = usize::try_from(word(image, phoff)?).ok()?;
    let phentsize = usize::from(u16_at(image, phentsize)?);
    let phnum = usize::from(u16_at(image, phnum)?);
    for i in 0..phnum {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(image, ph)? != PT_NOTE {
            continue;
        }
        let (Some(off), Some(len)) = (word(image, ph + p_offset), word(image, ph + p_filesz))
        else {
            continue;
        };
        let Some(notes) = usize::try_from(off)
            .ok()
            .zip(usize::try_from(len).ok())
            .and_then(|(o, l)| image.get(o..o.checked_add(l)?))
        else {
            continue;
        };
        let mut at = 0usize;
        while let (Some(namesz), Some(descsz), Some(ty)) = (
            u32_at(notes, at),
            u32_at(notes, at + 4),
            u32_at(notes, at + 8),
        ) {
            let name_at = at + 12;
            let desc_at = name_at.checked_add((namesz as usize).checked_add(3)? & !3)?;
            let next = desc_at.checked_add((descsz as usize).checked_add(3)? & !3)?;
            let name = notes.get(name_at..name_at + namesz as usize)?;
            if ty == goblin::elf::note::NT_GNU_BUILD_ID && name == b"GNU\0" {
                return notes.get(desc_at..desc_at.checked_add(descsz as usize)?);
            }
            at = next;
        }
    }
    None
}

/// Maps a regular file read-only, or says why not.
fn map_regular_file(path: &Path) -> Result<memmap2::Mmap, BackingError> {
    // A FIFO planted at a mapped file's path (in /tmp) is refused without waiting.
    let file = match crate::shared_file::open_regular(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => return Err(BackingError::NotRegular),
        Err(e) => return Err(BackingError::Io(e)),
    };
    let meta = file.metadata().map_err(BackingError::Io)?;
    if !meta.is_file() {
        return Err(BackingError::NotRegular);
    }
    if meta.len() == 0 {
        return Err(BackingError::Empty);
    }
    // SAFETY: read-only private mapping never written through; a file truncated under
    // us while mapped could raise SIGBUS, the risk every reader of mapped binaries takes.
    unsafe { memmap2::Mmap::map(&file) }.map_err(BackingError::Io)
}

/// Validates the ELF header and program headers, then reads the notes.
fn parse(bytes: &[u8], path: &str) -> Result<(Vec<Segment>, Notes), CoreError> {
    let len = bytes.len() as u64;
    let truncated = |needed: u64, what| CoreError::Truncated {
        path: path.to_string(),
        len,
        needed,
        what,
    };
    if bytes.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err(CoreError::NotElf {
            path: path.to_string(),
        });
    }
    let class = bytes.get(4).copied().unwrap_or(ELFCLASS64);
    let Some(container) = container(class) else {
        return Err(CoreError::Malformed {
            path: path.to_string(),
            problem: Malformation::ElfClass { class },
        });
    };
    let header_len = match container {
        Container::Little => goblin::elf::header::header32::SIZEOF_EHDR as u64,
        Container::Big => goblin::elf::header::header64::SIZEOF_EHDR as u64,
    };
    if len < header_len {
        return Err(truncated(header_len, "ELF header"));
    }
    let malformed = |problem| CoreError::Malformed {
        path: path.to_string(),
        problem,
    };
    let header =
        goblin::elf::Elf::parse_header(bytes).map_err(|e| malformed(Malformation::Header(e)))?;
    if header.e_type != ET_CORE {
        let kind = match header.e_type {
            ET_EXEC => "executable",
            ET_DYN => "shared object or PIE executable",
            _ => "file of another type",
        };
        return Err(CoreError::NotCore {
            path: path.to_string(),
            kind,
        });
    }
    let arch = match (class, header.e_machine) {
        (ELFCLASS64, EM_X86_64) => Arch::X86_64,
        (ELFCLASS32, EM_386) => Arch::I386,
        (_, machine) => {
            return Err(CoreError::WrongMachine {
                path: path.to_string(),
                machine,
            })
        }
    };
    // With 0xffff or more segments (PN_XNUM), the count is in section header 0's sh_info.
    let phnum = if header.e_phnum == PN_XNUM {
        let (sh_info_at, shdr_len) = match arch {
            Arch::X86_64 => (SHDR_INFO, 64),
            Arch::I386 => (SHDR32_INFO, 40),
        };
        let sh_info = usize::try_from(header.e_shoff)
            .ok()
            .and_then(|at| at.checked_add(sh_info_at))
            .and_then(|at| bytes.get(at..at.checked_add(4)?))
            .ok_or_else(|| {
                truncated(header.e_shoff.saturating_add(shdr_len), "section header 0")
            })?;
        u64::from(u32::from_le_bytes(sh_info.try_into().unwrap_or_default()))
    } else {
        u64::from(header.e_phnum)
    };
    let ph_end = phnum
        .checked_mul(u64::from(header.e_phentsize))
        .and_then(|n| n.checked_add(header.e_phoff))
        .ok_or_else(|| malformed(Malformation::ProgramHeaderOverflow))?;
    if ph_end > len {
        return Err(truncated(ph_end, "program headers"));
    }
    let ctx = Ctx::new(container, Endian::Little);
    let phdrs = ProgramHeader::parse(bytes, header.e_phoff as usize, phnum as usize, ctx)
        .map_err(|e| malformed(Malformation::ProgramHeaders(e)))?;
    let mut segments = Vec::new();
    let mut needed = ph_end;
    for ph in &phdrs {
        let end = ph.p_offset.checked_add(ph.p_filesz).ok_or_else(|| {
            malformed(Malformation::SegmentOverflow {
                offset: ph.p_offset,
            })
        })?;
        if ph.p_type == PT_LOAD || ph.p_type == PT_NOTE {
            needed = needed.max(end);
        }
        if ph.p_type == PT_LOAD && ph.p_memsz > 0 {
            segments.push(Segment {
                vaddr: ph.p_vaddr,
                memsz: ph.p_memsz,
                offset: ph.p_offset,
                filesz: ph.p_filesz.min(ph.p_memsz),
                flags: ph.p_flags,
            });
        }
    }
    if needed > len {
        let what = if phdrs
            .iter()
            .any(|p| p.p_type == PT_NOTE && p.p_offset.saturating_add(p.p_filesz) > len)
        {
            "notes"
        } else {
            "memory segments"
        };
        return Err(truncated(needed, what));
    }
    segments.sort_by_key(|s| s.vaddr);
    let notes = read_notes(bytes, &phdrs, ctx, arch).map_err(malformed)?;
    if notes.threads.is_empty() {
        return Err(CoreError::NoThreads {
            path: path.to_string(),
        });
    }
    Ok((segments, notes))
}

/// The goblin container of ELF class `class`.
fn container(class: u8) -> Option<Container> {
    match class {
        ELFCLASS64 => Some(Container::Big),
        ELFCLASS32 => Some(Container::Little),
        _ => None,
    }
}

/// Reads `NT_PRSTATUS`, `NT_PRPSINFO`, `NT_AUXV` and `NT_FILE` from the note
/// segments, whose layouts are those of `arch`.
fn read_notes(
    bytes: &[u8],
    phdrs: &[ProgramHeader],
    ctx: Ctx,
    arch: Arch,
) -> Result<Notes, Malformation> {
    let mut notes = Notes {
        arch,
        pid: None,
        command: String::new(),
        threads: Vec::new(),
        files: Vec::new(),
        auxv: Vec::new(),
    };
    let (pid_at, (fname_at, fname_len)) = match arch {
        Arch::X86_64 => (PRPSINFO_PID, PRPSINFO_FNAME),
        Arch::I386 => (PRPSINFO32_PID, PRPSINFO32_FNAME),
    };
    for ph in phdrs.iter().filter(|p| p.p_type == PT_NOTE) {
        let offset = usize::try_from(ph.p_offset).map_err(|_| Malformation::NoteOffset)?;
        let size = usize::try_from(ph.p_filesz).map_err(|_| Malformation::NoteSize)?;
        let iter = NoteDataIterator {
            data: bytes,
            offset,
            size: offset.saturating_add(size),
            ctx: (ph.p_align as usize, ctx),
        };
        for note in iter {
            let note = note.map_err(Malformation::Note)?;
            if note.name != "CORE" {
                continue;
            }
            match note.n_type {
                NT_PRSTATUS => notes.threads.push(match arch {
                    Arch::X86_64 => parse_prstatus(note.desc)?,
                    Arch::I386 => parse_prstatus32(note.desc)?,
                }),
                NT_PRPSINFO => {
                    notes.pid = le_i32(note.desc, pid_at);
                    if let Some(name) = note.desc.get(fname_at..fname_at + fname_len) {
                        let end = name.iter().position(|b| *b == 0).unwrap_or(fname_len);
                        notes.command = String::from_utf8_lossy(&name[..end]).into_owned();
                    }
                }
                NT_AUXV => {
                    notes.auxv = match arch {
                        Arch::X86_64 => crate::procfs::parse_auxv(note.desc),
                        Arch::I386 => parse_auxv32(note.desc),
                    };
                }
                NT_FILE => {
                    notes.files = parse_nt_file(note.desc, arch).map_err(Malformation::NtFile)?
                }
                _ => {}
            }
        }
    }
    Ok(notes)
}

fn parse_prstatus(desc: &[u8]) -> Result<CoreThread, Malformation> {
    if desc.len() < PRSTATUS_LEN {
        return Err(Malformation::PrStatusLen { len: desc.len() });
    }
    let reg = |i: usize| le_u64(desc, PRSTATUS_REGS + 8 * i).unwrap_or(0);
    // user_regs_struct: r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ...
    Ok(CoreThread {
        tid: le_i32(desc, PRSTATUS_PID).unwrap_or(0),
        signal: i32::from(le_i16(desc, PRSTATUS_CURSIG).unwrap_or(0)),
        rbp: reg(4),
        rip: reg(16),
        rsp: reg(19),
        // DWARF order: rax rdx rcx rbx rsi rdi rbp rsp r8-r15 rip.
        registers: [10, 12, 11, 5, 13, 14, 4, 19, 9, 8, 7, 6, 3, 2, 1, 0, 16].map(|i| Some(reg(i))),
    })
}

/// The registers of an i386 `NT_PRSTATUS` (a 32-bit core).
fn parse_prstatus32(desc: &[u8]) -> Result<CoreThread, Malformation> {
    if desc.len() < PRSTATUS32_LEN {
        return Err(Malformation::PrStatus32Len { len: desc.len() });
    }
    let reg = |i: usize| le_u32(desc, PRSTATUS32_REGS + 4 * i).map_or(0, u64::from);
    // user_regs_struct: ebx ecx edx esi edi ebp eax xds xes xfs xgs orig_eax eip xcs eflags esp xss
    let mut registers = [None; 17];
    // DWARF order: eax ecx edx ebx esp ebp esi edi eip.
    for (n, i) in [6, 1, 2, 0, 15, 5, 3, 4, 12].into_iter().enumerate() {
        registers[n] = Some(reg(i));
    }
    Ok(CoreThread {
        tid: le_i32(desc, PRSTATUS32_PID).unwrap_or(0),
        signal: i32::from(le_i16(desc, PRSTATUS_CURSIG).unwrap_or(0)),
        rbp: reg(5),
        rip: reg(12),
        rsp: reg(15),
        registers,
    })
}

/// An i386 auxiliary vector: (tag, value) pairs of 32-bit words.
fn parse_auxv32(bytes: &[u8]) -> Vec<(u64, u64)> {
    bytes
        .chunks_exact(8)
        .map(|c| {
            let word = |at: usize| le_u32(c, at).map_or(0, u64::from);
            (word(0), word(4))
        })
        .collect()
}

/// `NT_FILE`: count, page size, `count` (start, end, page offset) triples, then
/// `count` paths; the numbers are words of the core's architecture.
fn parse_nt_file(desc: &[u8], arch: Arch) -> Result<Vec<CoreMappedFile>, NtFileProblem> {
    let size: u64 = match arch {
        Arch::X86_64 => 8,
        Arch::I386 => 4,
    };
    let word = |b: &[u8], at: usize| match arch {
        Arch::X86_64 => le_u64(b, at),
        Arch::I386 => le_u32(b, at).map(u64::from),
    };
    let w = size as usize;
    let count = word(desc, 0).ok_or(NtFileProblem::TooShort)?;
    let page = word(desc, w).ok_or(NtFileProblem::TooShort)?;
    let table_len = count
        .checked_mul(3 * size)
        .and_then(|n| n.checked_add(2 * size))
        .filter(|n| *n <= desc.len() as u64)
        .ok_or(NtFileProblem::MoreEntriesThanBytes)? as usize;
    let mut names = desc[table_len..].split(|b| *b == 0);
    let mut files = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        let at = 2 * w + 3 * w * i;
        let (start, end, pages) = (
            word(desc, at).unwrap_or(0),
            word(desc, at + w).unwrap_or(0),
            word(desc, at + 2 * w).unwrap_or(0),
        );
        let name = names.next().ok_or(NtFileProblem::FewerPaths)?;
        let name = String::from_utf8_lossy(name);
        let path = name.strip_suffix(" (deleted)").unwrap_or(&name).to_string();
        if end <= start {
            return Err(NtFileProblem::EndsBeforeStart);
        }
        files.push(CoreMappedFile {
            start,
            end,
            offset: pages.saturating_mul(page),
            path,
        });
    }
    files.sort_by_key(|f| f.start);
    Ok(files)
}

impl Memory for CoreFile {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let len = buf.len();
        let fail = |why: CoreReadError| MemoryError::Read {
            addr,
            len,
            source: io::Error::other(why),
        };
        let mut done = 0usize;
        while done < len {
            let at = addr
                .checked_add(done as u64)
                .ok_or_else(|| fail(CoreReadError::AddressOverflow))?;
            let Some(seg) = self.segment_at(at) else {
                // Not in any segment: a file mapping the core left out, or unmapped.
                let n = self
                    .read_from_file(at, &mut buf[done..])
                    .map_err(|why| fail(CoreReadError::Undumped { at, why }))?;
                done += n;
                continue;
            };
            let into = at - seg.vaddr;
            let left_in_seg = (seg.memsz - into).min((len - done) as u64) as usize;
            let dest = &mut buf[done..done + left_in_seg];
            let n = if into < seg.filesz {
                let n = dest.len().min((seg.filesz - into) as usize);
                let from = (seg.offset + into) as usize;
                let src = self
                    .map
                    .get(from..from + n)
                    .ok_or_else(|| fail(CoreReadError::SegmentPastEnd))?;
                dest[..n].copy_from_slice(src);
                n
            } else {
                self.read_from_file(at, dest)
                    .map_err(|why| fail(CoreReadError::Undumped { at, why }))?
            };
            if n == 0 {
                return Err(fail(CoreReadError::NoBytes { at }));
            }
            done += n;
        }
        Ok(())
    }
}

/// A backtrace read from a core file, with the mapped files that were missing.
#[derive(Debug, Clone)]
pub struct CoreBacktrace {
    /// The threads, as a live backtrace has them (stopped for zero time).
    pub backtrace: Backtrace,
    /// Signal that killed the process (the first thread's), 0 if unknown.
    pub signal: i32,
    /// Mapped files whose symbols could not be loaded; their frames show addresses.
    pub missing: Vec<MissingModule>,
    /// Debug files that were found but not trusted (e.g. a build-id mismatch).
    pub debug_warnings: Vec<String>,
}

/// Unwinds every thread (or `opts.tid`) of a core, with stashed arguments from
/// its arenas, looking for separate debug files where `opts.debug_search` says;
/// DWARF parses in memory only (see [`backtrace_core_cached`]).
pub fn backtrace_core(
    core: &CoreFile,
    opts: &BacktraceOptions,
) -> Result<CoreBacktrace, CoreError> {
    backtrace_core_cached(core, opts, &DwarfCache::new())
}

/// [`backtrace_core`] sharing DWARF parses through `dwarf`, and saving what it
/// learned into `dwarf`'s on-disk cache, if it has one, before it returns.
pub fn backtrace_core_cached(
    core: &CoreFile,
    opts: &BacktraceOptions,
    dwarf: &DwarfCache,
) -> Result<CoreBacktrace, CoreError> {
    let state = ProcessState {
        arch: core.arch,
        started: None,
        maps: core.maps(),
    };
    let mut missing = Vec::new();
    // A core never changes: its view is built once and never refreshed.
    let view = ProcessView::build(
        state,
        core,
        opts.debug_search.clone(),
        dwarf.clone(),
        |maps| -> Result<_, CoreError> {
            let (symbols, not_loaded) = core.symbols(maps);
            missing = not_loaded;
            Ok(symbols)
        },
    )?;
    let mut py = view.python().reader(core);
    let selected: Vec<&CoreThread> = match opts.tid {
        Some(tid) => {
            let t: Vec<&CoreThread> = core.threads.iter().filter(|t| tid == t.tid).collect();
            if t.is_empty() {
                return Err(CoreError::NoSuchThread {
                    path: core.path.display().to_string(),
                    tid: tid.as_raw(),
                    threads: core.threads.iter().map(|t| t.tid).collect(),
                });
            }
            t
        }
        None => core.threads.iter().collect(),
    };
    let threads = selected
        .into_iter()
        .map(|t| {
            let detail = Detail::Annotated {
                show_trampolines: opts.show_trampolines,
            };
            let thread = view.unwind_thread(&t.registers, core, py.read(t.tid), detail);
            ThreadBacktrace {
                tid: Tid::from_raw(t.tid),
                name: if t.tid == core.pid {
                    core.command.clone()
                } else {
                    String::new()
                },
                frames: thread.frames,
                truncated: thread.truncated,
                stopped: Duration::ZERO,
                python: thread.python,
                capture: crate::unwind::Capture::Stopped,
            }
        })
        .collect();
    view.save_debug_answers();
    Ok(CoreBacktrace {
        backtrace: Backtrace {
            pid: Pid::from_raw(core.pid),
            threads,
        },
        signal: core.threads.first().map_or(0, |t| t.signal),
        missing,
        debug_warnings: view.debug_warnings(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A file in the temp directory, removed on drop.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(tag: &str, bytes: &[u8]) -> TempFile {
            static SEQ: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "argstash-core-{}-{}-{tag}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::write(&p, bytes).unwrap();
            TempFile(p)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn note(out: &mut Vec<u8>, ty: u32, desc: &[u8]) {
        out.extend(5u32.to_le_bytes());
        out.extend((desc.len() as u32).to_le_bytes());
        out.extend(ty.to_le_bytes());
        out.extend(b"CORE\0\0\0\0");
        out.extend(desc);
        out.resize(out.len().div_ceil(4) * 4, 0);
    }

    struct Load {
        vaddr: u64,
        memsz: u64,
        flags: u32,
        data: Vec<u8>,
    }

    /// Writes an x86-64 ET_CORE: ELF header, program headers, one note segment, the loads.
    fn build_core(notes: &[u8], loads: &[Load]) -> Vec<u8> {
        let phnum = 1 + loads.len();
        let mut out = Vec::new();
        out.extend(b"\x7fELF");
        out.extend([2, 1, 1, 0]);
        out.resize(16, 0);
        out.extend(4u16.to_le_bytes()); // ET_CORE
        out.extend(62u16.to_le_bytes()); // EM_X86_64
        out.extend(1u32.to_le_bytes());
        out.extend(0u64.to_le_bytes()); // e_entry
        out.extend(64u64.to_le_bytes()); // e_phoff
        out.extend(0u64.to_le_bytes()); // e_shoff
        out.extend(0u32.to_le_bytes());
        out.extend(64u16.to_le_bytes());
        out.extend(56u16.to_le_bytes());
        out.extend((phnum as u16).to_le_bytes());
        out.extend([0u8; 6]);
        let mut offset = 64 + 56 * phnum as u64;
        let mut phdr =
            |out: &mut Vec<u8>, ty: u32, flags: u32, vaddr: u64, filesz: u64, memsz: u64| {
                out.extend(ty.to_le_bytes());
                out.extend(flags.to_le_bytes());
                out.extend(offset.to_le_bytes());
                out.extend(vaddr.to_le_bytes());
                out.extend(0u64.to_le_bytes());
                out.extend(filesz.to_le_bytes());
                out.extend(memsz.to_le_bytes());
                out.extend(4u64.to_le_bytes());
                offset += filesz;
            };
        phdr(&mut out, PT_NOTE, 0, 0, notes.len() as u64, 0);
        for l in loads {
            phdr(
                &mut out,
                PT_LOAD,
                l.flags,
                l.vaddr,
                l.data.len() as u64,
                l.memsz,
            );
        }
        out.extend(notes);
        for l in loads {
            out.extend(&l.data);
        }
        out
    }

    /// Writes an i386 ET_CORE: ELF header, program headers, one note segment, the loads.
    fn build_core32(notes: &[u8], loads: &[Load]) -> Vec<u8> {
        let phnum = 1 + loads.len();
        let mut out = Vec::new();
        out.extend(b"\x7fELF");
        out.extend([1, 1, 1, 0]);
        out.resize(16, 0);
        out.extend(4u16.to_le_bytes()); // ET_CORE
        out.extend(3u16.to_le_bytes()); // EM_386
        out.extend(1u32.to_le_bytes());
        out.extend(0u32.to_le_bytes()); // e_entry
        out.extend(52u32.to_le_bytes()); // e_phoff
        out.extend(0u32.to_le_bytes()); // e_shoff
        out.extend(0u32.to_le_bytes());
        out.extend(52u16.to_le_bytes());
        out.extend(32u16.to_le_bytes());
        out.extend((phnum as u16).to_le_bytes());
        out.extend([0u8; 6]);
        let mut offset = 52 + 32 * phnum as u32;
        let mut phdr =
            |out: &mut Vec<u8>, ty: u32, flags: u32, vaddr: u32, filesz: u32, memsz: u32| {
                for v in [ty, offset, vaddr, 0, filesz, memsz, flags, 4] {
                    out.extend(v.to_le_bytes());
                }
                offset += filesz;
            };
        phdr(&mut out, PT_NOTE, 0, 0, notes.len() as u32, 0);
        for l in loads {
            phdr(
                &mut out,
                PT_LOAD,
                l.flags,
                l.vaddr as u32,
                l.data.len() as u32,
                l.memsz as u32,
            );
        }
        out.extend(notes);
        for l in loads {
            out.extend(&l.data);
        }
        out
    }

    fn prstatus32(tid: i32, sig: i16, eip: u32, esp: u32, ebp: u32) -> Vec<u8> {
        let mut d = vec![0u8; PRSTATUS32_LEN];
        d[PRSTATUS_CURSIG..PRSTATUS_CURSIG + 2].copy_from_slice(&sig.to_le_bytes());
        d[PRSTATUS32_PID..PRSTATUS32_PID + 4].copy_from_slice(&tid.to_le_bytes());
        // ebx ecx edx esi edi ebp eax ... eip (12) ... esp (15).
        for (i, v) in [(0, 0xb0), (5, ebp), (6, 0xa0), (12, eip), (15, esp)] {
            let at = PRSTATUS32_REGS + 4 * i;
            d[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        d
    }

    fn u32s(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn reads_an_i386_core() {
        let lib = backing_file();
        let mut notes = Vec::new();
        note(
            &mut notes,
            NT_PRSTATUS,
            &prstatus32(55, 11, 0x0804_8010, 0xff00_0100, 0xff00_0200),
        );
        let mut psinfo = vec![0u8; 124];
        psinfo[PRPSINFO32_PID..PRPSINFO32_PID + 4].copy_from_slice(&55i32.to_le_bytes());
        psinfo[PRPSINFO32_FNAME.0..PRPSINFO32_FNAME.0 + 4].copy_from_slice(b"cd32");
        note(&mut notes, NT_PRPSINFO, &psinfo);
        note(
            &mut notes,
            NT_AUXV,
            &u32s(&[AT_ENTRY as u32, 0x0804_8100, 0, 0]),
        );
        let mut nt_file = u32s(&[1, 0x1000, 0x0804_8000, 0x0804_a000, 1]);
        nt_file.extend(lib.0.as_os_str().as_encoded_bytes());
        nt_file.push(0);
        note(&mut notes, NT_FILE, &nt_file);
        let stack = Load {
            vaddr: 0xff00_0000,
            memsz: 0x1000,
            flags: PF_R | PF_W,
            data: vec![0x44; 0x1000],
        };
        let core = TempFile::new("core32", &build_core32(&notes, &[stack]));
        let c = CoreFile::open(&core.0, CoreOptions::default()).unwrap();
        assert_eq!(c.arch, Arch::I386);
        assert_eq!((c.pid, c.command.as_str()), (55, "cd32"));
        let t = c.threads[0];
        assert_eq!(
            (t.tid, t.signal, t.rip, t.rsp, t.rbp),
            (55, 11, 0x0804_8010, 0xff00_0100, 0xff00_0200)
        );
        // i386 DWARF numbers: eax 0, ebx 3, esp 4, ebp 5, eip 8.
        assert_eq!(
            [0, 3, 4, 5, 8].map(|n| t.registers[n]),
            [0xa0, 0xb0, 0xff00_0100, 0xff00_0200, 0x0804_8010].map(Some)
        );
        assert_eq!(c.exe_path(), lib.0.to_str());
        assert_eq!(
            c.files,
            [CoreMappedFile {
                start: 0x0804_8000,
                end: 0x0804_a000,
                offset: 0x1000,
                path: lib.0.to_str().unwrap().to_string(),
            }]
        );
        // File bytes come from the file from its offset; the stack from the core.
        assert_eq!(c.read_vec(0x0804_8000, 2).unwrap(), [0x100u32 as u8; 2]);
        assert_eq!(c.read_vec(0xff00_0ffe, 2).unwrap(), [0x44, 0x44]);
    }

    fn prstatus(tid: i32, sig: i16, rip: u64, rsp: u64, rbp: u64) -> Vec<u8> {
        let mut d = vec![0u8; PRSTATUS_LEN];
        d[PRSTATUS_CURSIG..PRSTATUS_CURSIG + 2].copy_from_slice(&sig.to_le_bytes());
        d[PRSTATUS_PID..PRSTATUS_PID + 4].copy_from_slice(&tid.to_le_bytes());
        for (i, v) in [(4, rbp), (16, rip), (19, rsp)] {
            let at = PRSTATUS_REGS + 8 * i;
            d[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        d
    }

    fn u64s(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// A core of pid 77 ("victim") with a file mapping at 0x400000 (only its first 16
    /// bytes dumped, the rest in `file` from offset 0x1000) and two adjacent anonymous
    /// segments at 0x7000_0000.
    fn sample_core(file: &Path) -> Vec<u8> {
        let mut notes = Vec::new();
        note(
            &mut notes,
            NT_PRSTATUS,
            &prstatus(77, 11, 0x400010, 0x7000_0100, 0x7000_0200),
        );
        note(
            &mut notes,
            NT_PRSTATUS,
            &prstatus(78, 0, 0x400020, 0x7000_0300, 0),
        );
        let mut psinfo = vec![0u8; 136];
        psinfo[PRPSINFO_PID..PRPSINFO_PID + 4].copy_from_slice(&77i32.to_le_bytes());
        psinfo[PRPSINFO_FNAME.0..PRPSINFO_FNAME.0 + 6].copy_from_slice(b"victim");
        note(&mut notes, NT_PRPSINFO, &psinfo);
        note(&mut notes, NT_AUXV, &u64s(&[AT_ENTRY, 0x400100, 0, 0]));
        let mut nt_file = u64s(&[1, 0x1000, 0x400000, 0x402000, 1]);
        nt_file.extend(file.as_os_str().as_encoded_bytes());
        nt_file.push(0);
        note(&mut notes, NT_FILE, &nt_file);
        build_core(
            &notes,
            &[
                Load {
                    vaddr: 0x400000,
                    memsz: 0x2000,
                    flags: PF_R | PF_X,
                    data: vec![0xcc; 16],
                },
                Load {
                    vaddr: 0x7000_0000,
                    memsz: 0x1000,
                    flags: PF_R | PF_W,
                    data: vec![0x11; 0x1000],
                },
                Load {
                    vaddr: 0x7000_1000,
                    memsz: 0x1000,
                    flags: PF_R | PF_X,
                    data: vec![0x22; 0x1000],
                },
            ],
        )
    }

    fn backing_file() -> TempFile {
        let bytes: Vec<u8> = (0..0x3000u32).map(|i| (i / 16) as u8).collect();
        TempFile::new("lib", &bytes)
    }

    #[test]
    fn reads_threads_memory_and_mapped_files() {
        let lib = backing_file();
        let core = TempFile::new("core", &sample_core(&lib.0));
        let c = CoreFile::open(&core.0, CoreOptions::default()).unwrap();
        assert_eq!((c.pid, c.command.as_str()), (77, "victim"));
        let seen: Vec<(i32, i32, u64, u64, u64)> = c
            .threads
            .iter()
            .map(|t| (t.tid, t.signal, t.rip, t.rsp, t.rbp))
            .collect();
        assert_eq!(
            seen,
            [
                (77, 11, 0x400010, 0x7000_0100, 0x7000_0200),
                (78, 0, 0x400020, 0x7000_0300, 0)
            ]
        );
        for t in &c.threads {
            // DWARF numbers: rbp 6, rsp 7, rip 16.
            assert_eq!(
                (t.registers[6], t.registers[7], t.registers[16]),
                (Some(t.rbp), Some(t.rsp), Some(t.rip))
            );
        }
        let lib_path = lib.0.to_str().unwrap();
        assert_eq!(c.exe_path(), Some(lib_path));
        let maps = c.maps();
        assert_eq!(maps.len(), 3);
        assert!(maps[0].is_file() && maps[0].perms.exec && maps[0].offset == 0x1000);
        assert_eq!(maps[0].path, lib_path);
        assert!(maps[2].perms.exec && maps[2].inode == 0 && maps[2].path.is_empty());

        // Dumped bytes come from the core; the rest of the file mapping from the file.
        assert_eq!(c.read_vec(0x400000, 16).unwrap(), vec![0xcc; 16]);
        let mixed = c.read_vec(0x40000c, 8).unwrap();
        assert_eq!(
            mixed,
            [0xcc, 0xcc, 0xcc, 0xcc, 0x101, 0x101, 0x101, 0x101].map(|b: u32| b as u8)
        );
        assert_eq!(c.read_vec(0x401ff0, 16).unwrap(), vec![0xff; 16]);
        // Across two segments.
        let across = c.read_vec(0x7000_0ffc, 8).unwrap();
        assert_eq!(across, [0x11, 0x11, 0x11, 0x11, 0x22, 0x22, 0x22, 0x22]);
        assert!(c.read_vec(0x7000_1ffc, 8).is_err(), "past the last segment");
        assert!(c.read_vec(0x1000, 1).is_err(), "unmapped");

        // The file missing under a sysroot: dumped bytes still read, the rest fails by name.
        let empty = std::env::temp_dir();
        let c = CoreFile::open(
            &core.0,
            CoreOptions {
                exe: None,
                sysroot: Some(empty.join("argstash-no-such-root")),
            },
        )
        .unwrap();
        assert_eq!(c.read_vec(0x400000, 16).unwrap(), vec![0xcc; 16]);
        let err = c.read_vec(0x400010, 4).unwrap_err().to_string();
        assert!(err.contains("argstash-no-such-root"), "{err}");
        // --exe replaces the file mapped at the entry point.
        let other = TempFile::new("exe", &[7u8; 0x3000]);
        let c = CoreFile::open(
            &core.0,
            CoreOptions {
                exe: Some(other.0.clone()),
                sysroot: None,
            },
        )
        .unwrap();
        assert_eq!(c.read_vec(0x400010, 2).unwrap(), [7, 7]);
        // A thread that is not in the core.
        let err = backtrace_core(
            &c,
            &BacktraceOptions {
                tid: Some(Tid::from_raw(5)),
                ..BacktraceOptions::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("no thread 5") && err.contains("77, 78"),
            "{err}"
        );
    }

    #[test]
    fn file_mappings_without_segments_read_from_the_file() {
        // A gcore-style core: the file mapping has no PT_LOAD at all.
        let exe = std::env::current_exe().unwrap();
        let mut notes = Vec::new();
        note(
            &mut notes,
            NT_PRSTATUS,
            &prstatus(9, 0, 0x500010, 0x7000_0000, 0),
        );
        let mut nt_file = u64s(&[1, 0x1000, 0x500000, 0x501000, 0]);
        nt_file.extend(exe.as_os_str().as_encoded_bytes());
        nt_file.push(0);
        note(&mut notes, NT_FILE, &nt_file);
        let stack = Load {
            vaddr: 0x7000_0000,
            memsz: 0x1000,
            flags: PF_R | PF_W,
            data: vec![0x33; 0x1000],
        };
        let core = TempFile::new("gcore", &build_core(&notes, &[stack]));
        let c = CoreFile::open(&core.0, CoreOptions::default()).unwrap();
        let maps = c.maps();
        assert_eq!(maps.len(), 2, "{maps:?}");
        let file = &maps[0];
        assert_eq!((file.start, file.end, file.offset), (0x500000, 0x501000, 0));
        assert!(
            file.perms.read && !file.perms.write && file.is_file(),
            "{file:?}"
        );
        assert_eq!(c.read_vec(0x500000, 4).unwrap(), b"\x7fELF");
        let err = c.read_vec(0x600000, 4).unwrap_err().to_string();
        assert!(err.contains("not mapped in the core"), "{err}");
    }

    #[test]
    fn segment_count_from_section_zero_when_pn_xnum() {
        let lib = backing_file();
        let mut bytes = sample_core(&lib.0);
        let phnum = u16::from_le_bytes([bytes[56], bytes[57]]);
        let shoff = bytes.len() as u64;
        let mut shdr = [0u8; 64];
        shdr[SHDR_INFO..SHDR_INFO + 4].copy_from_slice(&u32::from(phnum).to_le_bytes());
        bytes.extend(shdr);
        bytes[40..48].copy_from_slice(&shoff.to_le_bytes());
        bytes[56..58].copy_from_slice(&PN_XNUM.to_le_bytes());
        let f = TempFile::new("xnum", &bytes);
        let c = CoreFile::open(&f.0, CoreOptions::default()).unwrap();
        assert_eq!(c.maps().len(), 3);
        assert_eq!(c.threads.len(), 2);
        // Section header 0 cut off: a truncation error, not a panic.
        let f = TempFile::new("xnum-cut", &bytes[..bytes.len() - 30]);
        let err = CoreFile::open(&f.0, CoreOptions::default()).unwrap_err();
        assert!(matches!(err, CoreError::Truncated { .. }), "{err}");
    }

    #[test]
    fn truncated_and_corrupted_cores_are_errors_not_panics() {
        let lib = backing_file();
        let whole = sample_core(&lib.0);
        let notes_end = whole.len() - 16 - 0x2000;
        let mut lengths: Vec<usize> = (0..notes_end + 8).collect();
        lengths.extend((notes_end + 8..whole.len()).step_by(509));
        lengths.push(whole.len() - 1);
        for len in lengths {
            let f = TempFile::new("trunc", &whole[..len]);
            match CoreFile::open(&f.0, CoreOptions::default()) {
                Ok(_) => panic!("a core cut to {len} of {} bytes was accepted", whole.len()),
                Err(CoreError::Truncated { needed, .. }) => assert!(needed > len as u64),
                Err(CoreError::NotElf { .. }) => assert!(len < 4, "{len}"),
                Err(e) => panic!("cut to {len}: unexpected error {e}"),
            }
        }
        // Flipped bytes in the headers and notes: any result but a panic.
        for at in (0..notes_end).step_by(3) {
            let mut bad = whole.clone();
            bad[at] ^= 0xa5;
            let f = TempFile::new("flip", &bad);
            if let Ok(c) = CoreFile::open(&f.0, CoreOptions::default()) {
                let _ = c.read_vec(0x400000, 64);
                let _ = backtrace_core(&c, &BacktraceOptions::default());
            }
        }
    }

    #[test]
    fn build_ids_of_files_and_first_pages() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let Some(id) = build_id(&exe) else {
            println!(
                "this test binary has no build id (linker without --build-id); nothing to compare"
            );
            return;
        };
        assert!(id.len() >= 8, "{}", hex(id));
        // The note lies in the first page, as a core dumps it.
        let page = &exe[..4096.min(exe.len())];
        assert_eq!(build_id(page), Some(id));
        // Cut inside the notes, or garbage: no id, no panic.
        for len in [0, 4, 63, 64, 200, 0x360, 0x370] {
            let _ = build_id(&exe[..len.min(exe.len())]);
        }
        assert_eq!(build_id(b"\x7fELF\x02\x01\x01garbage"), None);
    }

    #[test]
    fn rejects_what_is_not_an_x86_64_core() {
        let open = |bytes: &[u8]| {
            let f = TempFile::new("bad", bytes);
            CoreFile::open(&f.0, CoreOptions::default()).unwrap_err()
        };
        assert!(matches!(
            open(b"hello, not a core\n"),
            CoreError::NotElf { .. }
        ));
        assert!(matches!(open(b""), CoreError::NotElf { .. }));
        // 32-bit: an i386 core is read (see `reads_an_i386_core`); other 32-bit ELF is not a core.
        let mut ident32 = b"\x7fELF\x01\x01\x01".to_vec();
        ident32.resize(52, 0);
        assert!(matches!(open(&ident32), CoreError::NotCore { .. }));
        let mut arm32 = build_core32(&[], &[]);
        arm32[18] = 40; // EM_ARM
        assert!(matches!(
            open(&arm32),
            CoreError::WrongMachine { machine: 40, .. }
        ));
        let mut class3 = b"\x7fELF\x03\x01\x01".to_vec();
        class3.resize(64, 0);
        assert!(matches!(open(&class3), CoreError::Malformed { .. }));
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let err = open(&exe);
        assert!(matches!(err, CoreError::NotCore { .. }), "{err}");
        // The fix (`--core`, `--exe` on the command line) is the front end's to spell.
        assert_eq!(err.hint(), Some(Hint::GiveCoreNotProgram), "{err}");
        let mut arm = build_core(&[], &[]);
        arm[18] = 183; // EM_AARCH64
        assert!(matches!(
            open(&arm),
            CoreError::WrongMachine { machine: 183, .. }
        ));
        let no_threads = build_core(&[], &[]);
        assert!(matches!(open(&no_threads), CoreError::NoThreads { .. }));
        let missing = CoreFile::open(Path::new("/nonexistent/core"), CoreOptions::default());
        assert!(matches!(missing, Err(CoreError::Open { .. })));
    }
}
