//! Parsing a core's bytes: the ELF and program headers, its segments, and the
//! notes argstash uses (threads and registers, the auxiliary vector, mapped files).

use super::error::{CoreError, Malformation, NtFileProblem, PRSTATUS32_LEN, PRSTATUS_LEN};
use crate::unwind::{Arch, DwarfRegisters};
use goblin::container::{Container, Ctx, Endian};
use goblin::elf::header::{ELFCLASS32, ELFCLASS64, EM_386, EM_X86_64, ET_CORE, ET_DYN, ET_EXEC};
use goblin::elf::note::{NoteDataIterator, NT_FILE, NT_PRPSINFO, NT_PRSTATUS};
use goblin::elf::program_header::{ProgramHeader, PT_LOAD, PT_NOTE};

/// `NT_AUXV`: the auxiliary vector the process started with.
pub(super) const NT_AUXV: u32 = 6;

/// Auxiliary vector tag: address of the executable's entry point.
pub(super) const AT_ENTRY: u64 = 9;

/// Auxiliary vector tag: address of the vDSO's ELF header.
pub(super) const AT_SYSINFO_EHDR: u64 = 33;

/// Offset of `pr_pid` in `struct elf_prstatus`.
pub(super) const PRSTATUS_PID: usize = 32;

/// Offset of `pr_cursig` in `struct elf_prstatus` (both architectures).
pub(super) const PRSTATUS_CURSIG: usize = 12;

/// Offset of `pr_reg` (a `user_regs_struct`) in `struct elf_prstatus`.
pub(super) const PRSTATUS_REGS: usize = 112;

/// Offset of `pr_pid` in an x86-64 `struct elf_prpsinfo`.
pub(super) const PRPSINFO_PID: usize = 24;

/// Offset and length of `pr_fname` (the command name) in `struct elf_prpsinfo`.
pub(super) const PRPSINFO_FNAME: (usize, usize) = (40, 16);

/// Offset of `pr_pid` in an i386 `struct elf_prstatus`.
pub(super) const PRSTATUS32_PID: usize = 24;

/// Offset of `pr_reg` (an i386 `user_regs_struct`: 17 words) in an i386 `struct elf_prstatus`.
pub(super) const PRSTATUS32_REGS: usize = 72;

/// Offset of `pr_pid` in an i386 `struct elf_prpsinfo` (16-bit uid and gid).
pub(super) const PRPSINFO32_PID: usize = 12;

/// Offset and length of `pr_fname` in an i386 `struct elf_prpsinfo`.
pub(super) const PRPSINFO32_FNAME: (usize, usize) = (28, 16);

/// Largest `[vdso]` image read from the core.
pub(super) const MAX_VDSO_LEN: u64 = 1 << 20;

/// `e_phnum` value saying the real count is in section header 0 (`sh_info`).
pub(super) const PN_XNUM: u16 = 0xffff;

/// Offset of `sh_info` in an `Elf64_Shdr`.
pub(super) const SHDR_INFO: usize = 44;

/// Offset of `sh_info` in an `Elf32_Shdr`.
pub(super) const SHDR32_INFO: usize = 28;

/// `MapEntry::inode` of a file mapping rebuilt from a core (cores record no inodes).
pub(super) const CORE_FILE_INODE: u64 = 1;

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
pub(super) struct Segment {
    pub(super) vaddr: u64,
    pub(super) memsz: u64,
    pub(super) offset: u64,
    pub(super) filesz: u64,
    pub(super) flags: u32,
}

/// Little-endian reads from a byte slice that fail (as `None`) instead of panicking.
pub(super) fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

pub(super) fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

pub(super) fn le_i32(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

pub(super) fn le_i16(b: &[u8], at: usize) -> Option<i16> {
    Some(i16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

/// The notes this reader uses, copied out of the core.
pub(super) struct Notes {
    pub(super) arch: Arch,
    pub(super) pid: Option<i32>,
    pub(super) command: String,
    pub(super) threads: Vec<CoreThread>,
    pub(super) files: Vec<CoreMappedFile>,
    pub(super) auxv: Vec<(u64, u64)>,
}

/// Validates the ELF header and program headers, then reads the notes.
pub(super) fn parse(bytes: &[u8], path: &str) -> Result<(Vec<Segment>, Notes), CoreError> {
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
pub(super) fn container(class: u8) -> Option<Container> {
    match class {
        ELFCLASS64 => Some(Container::Big),
        ELFCLASS32 => Some(Container::Little),
        _ => None,
    }
}

/// Reads `NT_PRSTATUS`, `NT_PRPSINFO`, `NT_AUXV` and `NT_FILE` from the note
/// segments, whose layouts are those of `arch`.
pub(super) fn read_notes(
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

pub(super) fn parse_prstatus(desc: &[u8]) -> Result<CoreThread, Malformation> {
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
pub(super) fn parse_prstatus32(desc: &[u8]) -> Result<CoreThread, Malformation> {
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
pub(super) fn parse_auxv32(bytes: &[u8]) -> Vec<(u64, u64)> {
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
pub(super) fn parse_nt_file(desc: &[u8], arch: Arch) -> Result<Vec<CoreMappedFile>, NtFileProblem> {
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
