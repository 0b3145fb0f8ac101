//! [`CoreFile`]: a parsed core as a process memory (its segments, the files it
//! mapped found on this machine or under a sysroot, undumped pages read from them)
//! and as a source of threads and modules.

use super::error::{
    BackingError, CoreError, CoreReadError, Malformation, MissingReason, UndumpedRead,
};
use super::parse::{
    container, le_u64, parse, CoreMappedFile, CoreThread, Segment, AT_ENTRY, AT_SYSINFO_EHDR,
    CORE_FILE_INODE, MAX_VDSO_LEN,
};
use crate::memory::{Memory, MemoryError};
use crate::procfs::{MapEntry, Perms};
use crate::symbols::{Module, ProcessSymbols, VDSO};
use crate::unwind::Arch;
use goblin::container::{Ctx, Endian};
use goblin::elf::header::{ELFCLASS32, ELFCLASS64};
use goblin::elf::program_header::{ProgramHeader, PF_R, PF_W, PF_X, PT_LOAD, PT_NOTE};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where to find the files a core's process had mapped.
#[derive(Debug, Clone, Default)]
pub struct CoreOptions {
    /// The crashed program's executable, instead of the path recorded in the core.
    pub exe: Option<PathBuf>,
    /// Directory the recorded paths are resolved under (a copy of the crashed machine's root).
    pub sysroot: Option<PathBuf>,
}

/// A file the process had mapped, as found (or not) on this machine.
pub(super) struct BackingFile {
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
    pub(super) path: PathBuf,
    pub(super) map: memmap2::Mmap,
    pub(super) segments: Vec<Segment>,
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
    pub(super) auxv: Vec<(u64, u64)>,
    pub(super) options: CoreOptions,
    pub(super) backing: HashMap<String, BackingFile>,
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
        CoreFile::from_file(&file, path, options)
    }

    /// Parses a core from an open descriptor (a file already checked, or an
    /// unnamed temporary file holding a decompressed core); `path` names it in
    /// messages and is what [`CoreFile::path`] returns.
    pub fn from_file(
        file: &std::fs::File,
        path: &Path,
        options: CoreOptions,
    ) -> Result<CoreFile, CoreError> {
        let shown = path.display().to_string();
        let open_err = |source| CoreError::Open {
            path: shown.clone(),
            source,
        };
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
        let map = unsafe { memmap2::Mmap::map(file) }.map_err(open_err)?;
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
            // A JIT dump marker (argstash's own /tmp/jit-PID.dump among them) holds no
            // code: looking for its symbols would only warn.
            if e.perms.exec
                && (e.is_file() || e.path == VDSO)
                && !e.is_jitdump_marker()
                && !paths.contains(&e.path.as_str())
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

/// The `NT_GNU_BUILD_ID` of a 64-bit or 32-bit ELF image, found through its
/// `PT_NOTE` headers; works on a whole file and on the first page a core dumps of
/// each ELF mapping.
pub(super) fn build_id(image: &[u8]) -> Option<&[u8]> {
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
pub(super) fn map_regular_file(path: &Path) -> Result<memmap2::Mmap, BackingError> {
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
