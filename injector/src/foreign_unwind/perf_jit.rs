//! Making hooked frames unwindable by `perf record --call-graph dwarf`, through perf's
//! jitdump interface.
//!
//! perf takes call-frame information only from ELF files backing a mapping; the arena
//! is anonymous memory, so perf's DWARF unwinder stops at a trampoline. A JIT tells
//! perf about its code by writing `/tmp/jit-PID.dump` (a header and records, see
//! linux `tools/perf/Documentation/jitdump-specification.txt`) and mapping that file
//! executable in the process: the mapping is the marker `perf inject --jit` looks
//! for. `perf inject` then writes one ELF file per `JIT_CODE_LOAD` record (code, one
//! symbol, and the `.eh_frame`/`.eh_frame_hdr` of the `JIT_CODE_UNWINDING_INFO`
//! record before it) and adds a mapping event for it, so `perf report`/`perf script`
//! unwind through the code.
//!
//! argstash writes, per arena holding new hooks, one code record covering the arena's
//! slots from the first to the last active one (named `argstash_hooks`), preceded by
//! an unwinding record with every active hook's `.eh_frame` from the unwind area. One
//! record per arena rather than per hook: perf maps a record's unwinding data right
//! after its code, which for one hook would cover the next slot's code. The FDEs keep
//! absolute addresses (`DW_EH_PE_absptr`); `.eh_frame_hdr`'s table is relative to
//! where perf maps it. The marker mapping is made in the target with remote
//! `open`/`mmap`/`close` on a borrowed thread after the stop. Eject, once no hook is
//! left, unmaps it and removes the file.
//!
//! A `/tmp/jit-PID.dump` written by someone else (the process may be a JIT itself) is
//! never touched: only files whose code records all name argstash code are ours.

use std::io::Write;
use std::path::PathBuf;

use reader::shared_file::{self, own_uid};

use trampolines::arena::{HookState, SLOT_LEN};
use trampolines::unwind_area::FLAG_PERF_JIT;

use super::calls::{with_any_thread, AnyThreadError};
use super::files::{mapping_of, perf_map_owners, target_file, TargetFile, TargetTmpError};
use super::report::UnwindReport;
use super::slots::{hook_of, read_area, read_slot, set_flags, UnwindHook};
use crate::memory::{Memory, MemoryError, WriteMemory};
use crate::ptrace::gadgets::Gadgets;
use crate::ptrace::session_error::SessionError;

/// `JiTD`, as a little-endian `u32`.
pub const JITDUMP_MAGIC: u32 = 0x4A69_5444;
/// The jitdump format version written.
pub const JITDUMP_VERSION: u32 = 1;
/// Length of the file header.
pub const JITDUMP_HEADER_LEN: usize = 40;
/// Length of every record's prefix (id, total size, timestamp).
pub const RECORD_PREFIX_LEN: usize = 16;
/// Record id of a code load.
pub const JIT_CODE_LOAD: u32 = 0;
/// Record id of unwinding information for the next code load.
pub const JIT_CODE_UNWINDING_INFO: u32 = 4;
/// The symbol perf shows for frames in argstash code.
pub const CODE_NAME: &str = "argstash_hooks";
/// `e_machine` of x86-64.
const EM_X86_64: u32 = 62;
/// Bytes of the dump file mapped as the marker.
const MARKER_LEN: u64 = 4096;

/// Path of the jitdump of `pid` in our `/tmp` (perf looks for exactly this name).
pub fn jitdump_path(pid: i32) -> PathBuf {
    PathBuf::from(format!("/tmp/jit-{pid}.dump"))
}

/// The jitdump of `pid` in the `/tmp` the process sees (it maps it from there).
pub fn jitdump_file(pid: i32) -> Result<TargetFile, TargetTmpError> {
    target_file(pid, &format!("jit-{pid}.dump"))
}

/// Largest jitdump read back.
const MAX_DUMP: u64 = 256 << 20;

/// True when `bytes` are a jitdump argstash wrote (every code record is ours).
fn dump_is_ours(bytes: &[u8]) -> bool {
    code_load_names(bytes).is_ok_and(|names| names.iter().all(|n| n == CODE_NAME))
}

/// One block of argstash code as a jitdump describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitBlock {
    /// Address of the code in the target.
    pub addr: u64,
    /// The code bytes.
    pub code: Vec<u8>,
    /// `.eh_frame` contents (CIEs and FDEs, absolute addresses) of the hooks inside,
    /// each with or without its zero terminator.
    pub eh_frames: Vec<Vec<u8>>,
}

/// Why a jitdump could not be built or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JitDumpError {
    /// An `.eh_frame` entry could not be parsed.
    #[error("unreadable .eh_frame: {0}")]
    EhFrame(gimli::Error),
    /// A table entry is more than 2 GiB away from `.eh_frame_hdr`.
    #[error("FDE at 0x{0:x} too far from .eh_frame_hdr for a 32-bit table entry")]
    TooFar(u64),
    /// The file is not a jitdump.
    #[error("not a jitdump file (bad magic or truncated header)")]
    NotJitDump,
}

/// Monotonic clock in nanoseconds (`perf record -k 1` timestamps samples with it).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// The file header.
pub fn encode_header(pid: u32, timestamp: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(JITDUMP_HEADER_LEN);
    h.extend_from_slice(&JITDUMP_MAGIC.to_le_bytes());
    h.extend_from_slice(&JITDUMP_VERSION.to_le_bytes());
    h.extend_from_slice(&(JITDUMP_HEADER_LEN as u32).to_le_bytes());
    h.extend_from_slice(&EM_X86_64.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes()); // pad
    h.extend_from_slice(&pid.to_le_bytes());
    h.extend_from_slice(&timestamp.to_le_bytes());
    h.extend_from_slice(&0u64.to_le_bytes()); // flags
    h
}

fn prefix(id: u32, total: usize, timestamp: u64) -> Vec<u8> {
    let mut p = Vec::with_capacity(total);
    p.extend_from_slice(&id.to_le_bytes());
    p.extend_from_slice(&(total as u32).to_le_bytes());
    p.extend_from_slice(&timestamp.to_le_bytes());
    p
}

fn align8(n: u64) -> u64 {
    (n + 7) & !7
}

/// The FDEs of `eh_frame` (without terminator) as `(offset in it, initial address)`.
pub(super) fn fde_starts(eh_frame: &[u8]) -> Result<Vec<(usize, u64)>, JitDumpError> {
    use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
    let section = EhFrame::new(eh_frame, LittleEndian);
    let bases = BaseAddresses::default();
    let mut entries = section.entries(&bases);
    let mut out = Vec::new();
    loop {
        match entries.next() {
            Ok(None) => break,
            Ok(Some(CieOrFde::Cie(_))) => {}
            Ok(Some(CieOrFde::Fde(partial))) => {
                let fde = partial
                    .parse(EhFrame::cie_from_offset)
                    .map_err(JitDumpError::EhFrame)?;
                out.push((fde.offset(), fde.initial_address()));
            }
            Err(e) => return Err(JitDumpError::EhFrame(e)),
        }
    }
    Ok(out)
}

/// Strips the zero terminator `__register_frame_info` needs.
fn without_terminator(eh_frame: &[u8]) -> &[u8] {
    match eh_frame.len().checked_sub(4) {
        Some(n) if eh_frame[n..] == [0, 0, 0, 0] => &eh_frame[..n],
        _ => eh_frame,
    }
}

/// The unwinding data for code of `code_len` bytes at `code_addr`: `.eh_frame` (all
/// `eh_frames`, one terminator) followed by `.eh_frame_hdr`, laid out as perf's ELF
/// writer places them (`.eh_frame` at the 8-aligned end of the code); returns the
/// data and the header's length.
pub fn unwinding_data(
    code_addr: u64,
    code_len: u64,
    eh_frames: &[Vec<u8>],
) -> Result<(Vec<u8>, usize), JitDumpError> {
    let mut eh_frame = Vec::new();
    let mut table = Vec::new();
    for part in eh_frames {
        let part = without_terminator(part);
        let base = eh_frame.len();
        for (offset, pc) in fde_starts(part)? {
            table.push((pc, base + offset));
        }
        eh_frame.extend_from_slice(part);
        while eh_frame.len() % 4 != 0 {
            eh_frame.push(0);
        }
    }
    eh_frame.extend_from_slice(&[0; 4]);
    table.sort();
    // Where perf maps them: .eh_frame right after the code, .eh_frame_hdr right after it.
    let eh_frame_at = code_addr + align8(code_len);
    let hdr_at = eh_frame_at + eh_frame.len() as u64;
    let rel = |addr: u64| -> Result<[u8; 4], JitDumpError> {
        i32::try_from(addr.wrapping_sub(hdr_at) as i64)
            .map(i32::to_le_bytes)
            .map_err(|_| JitDumpError::TooFar(addr))
    };
    let mut hdr = vec![
        1,                                                      // version
        (gimli::DW_EH_PE_pcrel.0 | gimli::DW_EH_PE_sdata4.0),   // eh_frame_ptr
        gimli::DW_EH_PE_udata4.0,                               // fde_count
        (gimli::DW_EH_PE_datarel.0 | gimli::DW_EH_PE_sdata4.0), // table
    ];
    let eh_frame_ptr = (eh_frame_at.wrapping_sub(hdr_at + 4) as i64) as i32;
    hdr.extend_from_slice(&eh_frame_ptr.to_le_bytes());
    hdr.extend_from_slice(&(table.len() as u32).to_le_bytes());
    for (pc, offset) in table {
        hdr.extend_from_slice(&rel(pc)?);
        hdr.extend_from_slice(&rel(eh_frame_at + offset as u64)?);
    }
    let hdr_len = hdr.len();
    eh_frame.extend_from_slice(&hdr);
    Ok((eh_frame, hdr_len))
}

/// The records describing `block`: its unwinding information, then its code load.
pub fn encode_block(
    block: &JitBlock,
    pid: u32,
    index: u64,
    timestamp: u64,
) -> Result<Vec<u8>, JitDumpError> {
    let (data, hdr_len) = unwinding_data(block.addr, block.code.len() as u64, &block.eh_frames)?;
    let fixed = RECORD_PREFIX_LEN + 24;
    let total = align8((fixed + data.len()) as u64) as usize;
    let mut out = prefix(JIT_CODE_UNWINDING_INFO, total, timestamp);
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(&(hdr_len as u64).to_le_bytes());
    out.extend_from_slice(&align8(data.len() as u64).to_le_bytes());
    out.extend_from_slice(&data);
    out.resize(total, 0);

    // The code must end the record: perf finds it at record end minus its size.
    let total = RECORD_PREFIX_LEN + 40 + CODE_NAME.len() + 1 + block.code.len();
    let mut load = prefix(JIT_CODE_LOAD, total, timestamp);
    load.extend_from_slice(&pid.to_le_bytes());
    load.extend_from_slice(&pid.to_le_bytes()); // tid
    load.extend_from_slice(&block.addr.to_le_bytes()); // vma
    load.extend_from_slice(&block.addr.to_le_bytes()); // code_addr
    load.extend_from_slice(&(block.code.len() as u64).to_le_bytes());
    load.extend_from_slice(&index.to_le_bytes());
    load.extend_from_slice(CODE_NAME.as_bytes());
    load.push(0);
    load.extend_from_slice(&block.code);
    out.extend_from_slice(&load);
    Ok(out)
}

/// Code load names in a jitdump's bytes, in order.
pub fn code_load_names(bytes: &[u8]) -> Result<Vec<String>, JitDumpError> {
    let u32_at = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()))
    };
    if u32_at(0) != Some(JITDUMP_MAGIC) {
        return Err(JitDumpError::NotJitDump);
    }
    let mut at = u32_at(8).ok_or(JitDumpError::NotJitDump)? as usize;
    let mut names = Vec::new();
    while let (Some(id), Some(total)) = (u32_at(at), u32_at(at + 4)) {
        let total = total as usize;
        if total < RECORD_PREFIX_LEN || at + total > bytes.len() {
            break;
        }
        if id == JIT_CODE_LOAD {
            let name = bytes
                .get(at + RECORD_PREFIX_LEN + 40..at + total)
                .unwrap_or_default();
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            names.push(String::from_utf8_lossy(&name[..end]).into_owned());
        }
        at += total;
    }
    Ok(names)
}

/// Whether the jitdump at `path` was written by argstash (every code record is ours).
#[cfg(test)]
fn is_ours(path: &std::path::Path) -> bool {
    matches!(shared_file::read(path, &[own_uid()], MAX_DUMP), Ok(Some(b)) if dump_is_ours(&b))
}

/// Where the jitdump of `pid` is mapped in it, if it is.
pub fn marker_mapping(pid: i32) -> Option<(u64, u64)> {
    let file = jitdump_file(pid).ok()?;
    mapping_of(pid, &file.host).map(|m| (m.start, m.end - m.start))
}

/// Active hooks of `pid` with unwind information, by arena: `(block, hooks)`.
fn active_blocks(pid: i32, mem: &dyn Memory) -> Vec<(JitBlock, Vec<UnwindHook>)> {
    let arenas = reader::procfs::read_maps(pid)
        .ok()
        .and_then(|maps| reader::arena::discover(&maps, mem).ok())
        .unwrap_or_default();
    let mut out = Vec::new();
    for a in &arenas {
        let Some(area) = read_area(mem, &a.header) else {
            continue;
        };
        let mut hooks = Vec::new();
        let mut eh_frames = Vec::new();
        let mut last = None;
        for (slot, r) in a.hooks().filter(|(_, r)| r.state == HookState::Active) {
            let hook = hook_of(area, slot, r);
            let Ok(s) = read_slot(mem, &hook) else {
                continue;
            };
            if s.eh_frame.is_empty() {
                continue;
            }
            last = last.max(Some(slot));
            eh_frames.push(s.eh_frame);
            hooks.push(hook);
        }
        let Some(last) = last else {
            continue;
        };
        let addr = a.header.slot_addr(0);
        let len = a.header.slot_addr(last) + SLOT_LEN as u64 - addr;
        let Ok(code) = mem.read_vec(addr, len as usize) else {
            continue;
        };
        out.push((
            JitBlock {
                addr,
                code,
                eh_frames,
            },
            hooks,
        ));
    }
    out
}

/// Why the jitdump could not be mapped in the target (or unmapped from it).
#[derive(Debug, thiserror::Error)]
pub(super) enum MarkerError {
    /// The target's `/tmp` cannot hold it.
    #[error(transparent)]
    TargetTmp(#[from] TargetTmpError),
    /// The unwind area's spare bytes cannot hold the path for `open`.
    #[error("no room for the jitdump's path in the unwind area")]
    NoRoom,
    /// Writing the path into the target failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The remote system calls failed.
    #[error(transparent)]
    Thread(#[from] AnyThreadError),
}

/// `r`, or the error a negative system call result `-errno` stands for.
fn syscall_result(pid: i32, name: &str, nr: i64, r: i64) -> Result<i64, SessionError> {
    if (-4095..0).contains(&r) {
        Err(SessionError::RemoteSyscall {
            pid,
            name: name.to_string(),
            nr,
            errno: (-r) as i32,
        })
    } else {
        Ok(r)
    }
}

/// Maps the jitdump in the target (open, mmap read+exec, close); returns its address.
pub(super) fn map_marker(
    pid: i32,
    mem: &dyn WriteMemory,
    scratch: (u64, usize),
    gadgets: &mut Gadgets,
) -> Result<u64, MarkerError> {
    let mut cstr = jitdump_file(pid)?.seen.into_bytes();
    cstr.push(0);
    if cstr.len() > scratch.1 {
        return Err(MarkerError::NoRoom);
    }
    mem.write(scratch.0, &cstr)?;
    let mut addr = 0u64;
    let outcome = with_any_thread(pid, gadgets, |session, tid| {
        let open = session.remote_syscall_on(
            tid,
            libc::SYS_open,
            // Never blocks on a FIFO nor follows a link swapped in meanwhile.
            [
                scratch.0,
                (libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC) as u64,
                0,
                0,
                0,
                0,
            ],
        )?;
        let fd = syscall_result(pid, "open", libc::SYS_open, open)?;
        let mapped = session.remote_syscall_on(
            tid,
            libc::SYS_mmap,
            [
                0,
                MARKER_LEN,
                (libc::PROT_READ | libc::PROT_EXEC) as u64,
                libc::MAP_PRIVATE as u64,
                fd as u64,
                0,
            ],
        );
        // Close whatever happened to the mapping: the target keeps no descriptor of ours.
        let closed = session.remote_syscall_on(tid, libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
        let mapped = mapped?;
        closed?;
        addr = syscall_result(pid, "mmap", libc::SYS_mmap, mapped)? as u64;
        Ok(())
    });
    let _ = mem.write(scratch.0, &vec![0u8; cstr.len()]);
    outcome?;
    Ok(addr)
}

/// Unmaps the jitdump marker from the target.
pub(super) fn unmap_marker(
    pid: i32,
    (addr, len): (u64, u64),
    gadgets: &mut Gadgets,
) -> Result<(), AnyThreadError> {
    with_any_thread(pid, gadgets, |session, tid| {
        let r = session.remote_syscall_on(tid, libc::SYS_munmap, [addr, len, 0, 0, 0, 0])?;
        syscall_result(pid, "munmap", libc::SYS_munmap, r)?;
        Ok(())
    })
}

/// Appends records for the arenas holding `hooks` to `/tmp/jit-PID.dump` (creating it)
/// and maps it in the target if it is not yet.
pub fn register(
    pid: i32,
    mem: &dyn WriteMemory,
    hooks: &[UnwindHook],
    report: &mut UnwindReport,
    gadgets: &mut Gadgets,
) {
    let path = match jitdump_file(pid) {
        Ok(file) => file.host,
        Err(e) => {
            report.notes.push(format!("perf jitdump not written: {e}"));
            return;
        }
    };
    // A JIT in the process may have written its own (owned by the process's user).
    let existing = match shared_file::read(&path, &perf_map_owners(pid), MAX_DUMP) {
        Ok(existing) => existing,
        Err(e) => {
            report.notes.push(format!("perf jitdump not written: {e}"));
            return;
        }
    };
    let mut index = match &existing {
        Some(bytes) => match code_load_names(bytes) {
            Ok(names) if names.iter().all(|n| n == CODE_NAME) => names.len() as u64,
            _ => {
                report.notes.push(format!(
                    "{} belongs to another JIT in the process: perf jitdump not written",
                    path.display()
                ));
                return;
            }
        },
        None => 0,
    };
    let timestamp = monotonic_ns();
    let mut bytes = Vec::new();
    if existing.is_none() {
        bytes.extend_from_slice(&encode_header(pid as u32, timestamp));
    }
    let mut described = Vec::new();
    for (block, in_arena) in active_blocks(pid, mem) {
        if !in_arena.iter().any(|h| hooks.iter().any(|n| n == h)) {
            continue;
        }
        match encode_block(&block, pid as u32, index, timestamp) {
            Ok(records) => {
                bytes.extend_from_slice(&records);
                index += 1;
                described.extend(in_arena);
            }
            Err(e) => report.notes.push(format!("perf jitdump: {e}")),
        }
    }
    if described.is_empty() {
        return;
    }
    let opened = match existing {
        None => shared_file::create_new(&path, 0o644).map(Some),
        Some(_) => shared_file::open_append(&path, &[own_uid()]),
    };
    let written = match opened {
        Ok(Some(mut f)) => f.write_all(&bytes).map_err(|e| e.to_string()),
        Ok(None) => Err(format!("{} was removed meanwhile", path.display())),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = written {
        report.notes.push(format!("perf jitdump not written: {e}"));
        return;
    }
    if marker_mapping(pid).is_none() {
        let scratch = described[0].area.scratch();
        if let Err(e) = map_marker(pid, mem, scratch, gadgets) {
            report.notes.push(format!(
                "cannot map {} in the target (perf inject --jit will not find it): {e}",
                path.display()
            ));
            if existing.is_none() {
                let _ = shared_file::remove_ours(&path, &[own_uid()], MAX_DUMP, dump_is_ours);
            }
            return;
        }
    }
    for hook in &described {
        if let Ok(s) = read_slot(mem, hook) {
            let _ = set_flags(mem, hook, s.flags | FLAG_PERF_JIT);
        }
    }
    report.perf_jitdump = Some(path);
}

/// Once no active hook is left, unmaps the jitdump from the target and removes it.
pub fn unregister(
    pid: i32,
    mem: &dyn WriteMemory,
    report: &mut UnwindReport,
    gadgets: &mut Gadgets,
) {
    if !active_blocks(pid, mem).is_empty() {
        return;
    }
    let Ok(path) = jitdump_file(pid).map(|f| f.host) else {
        return;
    };
    match shared_file::read(&path, &[own_uid()], MAX_DUMP) {
        Ok(Some(bytes)) if dump_is_ours(&bytes) => {}
        Ok(_) => return,
        Err(e) => {
            // Not ours (another JIT's), or a file planted there: left alone.
            if e.refusal()
                .is_some_and(|r| !matches!(r, shared_file::Refusal::Owner { .. }))
            {
                report.notes.push(format!("perf jitdump: {e}"));
            }
            return;
        }
    }
    if let Some(mapping) = marker_mapping(pid) {
        if let Err(e) = unmap_marker(pid, mapping, gadgets) {
            report.notes.push(format!(
                "cannot unmap {} from the target: {e}",
                path.display()
            ));
        }
    }
    match shared_file::remove_ours(&path, &[own_uid()], MAX_DUMP, dump_is_ours) {
        Ok(true) => report.perf_jitdump = Some(path),
        Ok(false) => {}
        Err(e) => report.notes.push(format!("perf jitdump: {e}")),
    }
}

/// Removes our jitdump of a process that no longer exists (proved ours from its
/// owner and content).
pub fn remove_if_dead(pid: u32, path: &std::path::Path) {
    if !reader::procfs::exists(pid as i32) {
        let _ = shared_file::remove_ours(path, &[own_uid()], MAX_DUMP, dump_is_ours);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trampolines::x86_64::{hook_eh_frame, HookCodeRanges};

    fn sample_eh_frame(at: u64) -> Vec<u8> {
        // A trampoline-like range: push rbp; mov rbp, rsp; ...; call; leave; ret.
        let offsets = trampolines::trampoline::TrampolineOffsets {
            after_push_rbp: 1,
            after_mov_rbp: 4,
            after_call: 40,
            ret: 41,
        };
        hook_eh_frame(&HookCodeRanges {
            trampoline: at,
            trampoline_len: 48,
            offsets,
            relocated: at + 160,
            relocated_code: &[0x55, 0x48, 0x89, 0xe5, 0xe9, 0, 0, 0, 0],
        })
        .unwrap()
        .eh_frame
    }

    #[test]
    fn header_is_what_perf_checks() {
        let h = encode_header(42, 7);
        assert_eq!(h.len(), JITDUMP_HEADER_LEN);
        assert_eq!(&h[0..4], b"DTiJ");
        assert_eq!(u32::from_le_bytes(h[8..12].try_into().unwrap()), 40);
        assert_eq!(u32::from_le_bytes(h[20..24].try_into().unwrap()), 42);
    }

    #[test]
    fn eh_frame_hdr_table_points_at_each_fde_from_where_perf_maps_it() {
        let code_addr = 0x7f00_0000_1000u64;
        let frames = vec![sample_eh_frame(code_addr), sample_eh_frame(code_addr + 256)];
        let code_len = 512u64;
        let (data, hdr_len) = unwinding_data(code_addr, code_len, &frames).unwrap();
        let eh_frame = &data[..data.len() - hdr_len];
        let hdr = &data[data.len() - hdr_len..];
        assert_eq!(&eh_frame[eh_frame.len() - 4..], &[0; 4], "one terminator");
        let eh_frame_at = code_addr + code_len;
        let hdr_at = eh_frame_at + eh_frame.len() as u64;
        let count = u32::from_le_bytes(hdr[8..12].try_into().unwrap()) as usize;
        assert_eq!(count, 4, "two FDEs per hook");
        let ptr = i32::from_le_bytes(hdr[4..8].try_into().unwrap()) as i64;
        assert_eq!((hdr_at as i64 + 4 + ptr) as u64, eh_frame_at);
        let starts = fde_starts(&eh_frame[..eh_frame.len() - 4]).unwrap();
        let mut prev = 0;
        for e in 0..count {
            let at = 12 + e * 8;
            let pc = i32::from_le_bytes(hdr[at..at + 4].try_into().unwrap()) as i64;
            let fde = i32::from_le_bytes(hdr[at + 4..at + 8].try_into().unwrap()) as i64;
            let pc = (hdr_at as i64 + pc) as u64;
            assert!(pc >= prev, "table sorted");
            prev = pc;
            let fde_off = (hdr_at as i64 + fde) as u64 - eh_frame_at;
            assert!(
                starts.contains(&(fde_off as usize, pc)),
                "entry {e} names the FDE starting at its pc"
            );
        }
    }

    #[test]
    fn records_round_trip_and_code_ends_the_load_record() {
        let block = JitBlock {
            addr: 0x5000,
            code: vec![0xcc; 300],
            eh_frames: vec![sample_eh_frame(0x5000)],
        };
        let mut file = encode_header(1, 0);
        file.extend(encode_block(&block, 1, 0, 5).unwrap());
        file.extend(encode_block(&block, 1, 1, 6).unwrap());
        assert_eq!(code_load_names(&file).unwrap(), vec![CODE_NAME; 2]);
        assert!(file.ends_with(&[0xcc; 300]));
        assert_eq!(
            code_load_names(b"not a dump"),
            Err(JitDumpError::NotJitDump)
        );
    }

    #[test]
    fn a_dump_with_another_jits_code_is_not_ours() {
        let dir = std::env::temp_dir().join(format!("perf-jit-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("jit-1.dump");
        let mut file = encode_header(1, 0);
        let block = JitBlock {
            addr: 0x5000,
            code: vec![0x90; 16],
            eh_frames: vec![sample_eh_frame(0x5000)],
        };
        file.extend(encode_block(&block, 1, 0, 5).unwrap());
        std::fs::write(&path, &file).unwrap();
        assert!(is_ours(&path));
        // Rename the code record as a Java agent would.
        let name_at = file
            .windows(CODE_NAME.len())
            .position(|w| w == CODE_NAME.as_bytes())
            .unwrap();
        file[name_at..name_at + 4].copy_from_slice(b"java");
        std::fs::write(&path, &file).unwrap();
        assert!(!is_ours(&path));
        std::fs::write(&path, b"garbage").unwrap();
        assert!(!is_ours(&path));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
