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

mod error;
mod file;
mod parse;

pub use error::{
    BackingError, CoreError, CoreReadError, Malformation, MissingReason, NtFileProblem,
    UndumpedRead,
};
pub use file::{CoreFile, CoreOptions, MissingModule};
pub use parse::{CoreMappedFile, CoreThread};

use std::time::Duration;

use crate::debuginfo::DwarfCache;
use crate::ids::{Pid, Tid};
use crate::process_view::{Detail, ProcessState, ProcessView};
use crate::unwind::{Backtrace, BacktraceOptions, ThreadBacktrace};

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
    use super::error::*;
    use super::file::*;
    use super::parse::*;
    use super::*;
    use crate::hint::Hint;
    use crate::memory::Memory;
    use crate::unwind::Arch;
    use goblin::elf::note::{NT_FILE, NT_PRPSINFO, NT_PRSTATUS};
    use goblin::elf::program_header::{PF_R, PF_W, PF_X, PT_LOAD, PT_NOTE};
    use std::path::{Path, PathBuf};
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
