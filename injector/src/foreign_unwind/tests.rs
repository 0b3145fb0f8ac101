//! Unit tests of the foreign unwinders: slots and the unwind area against an
//! in-process memory, perf map editing on a scratch file, libgcc registration
//! notes when calls are off, and the jitdump marker and the gdb JIT helper's
//! lookup against real child processes.

use std::cell::RefCell;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use trampolines::arena::{ArenaHeader, HookRecord, HookState, HEADER_LEN};
use trampolines::unwind_area::{
    UnwindArea, UnwindSlot, ARENA_HEADER_UNWIND_AT, FLAG_GDB_JIT, FLAG_PERF_MAP,
};
use trampolines::x86_64::{build_hook, plan_patch, HookCode, HookMeta, StashLayout};

use super::calls::{with_any_thread, AnyThreadError, Borrower, CallSkipped};
use super::gdb_jit::{link_map_of, loaded_helper, HELPER_SO};
use super::perf_jit::{fde_starts, jitdump_path, map_marker, marker_mapping, unmap_marker};
use super::perf_jit::{MarkerError, JITDUMP_HEADER_LEN};
use super::perf_map::lines as perf_map_lines;
use super::slots::eh_frame_for;
use super::slots::{read_slot, set_flags, set_registered, REGISTRATION_PENDING};
use super::*;
use crate::memory::{Memory, MemoryError, WriteMemory};
use crate::ptrace::gadgets::Gadgets;
use crate::ptrace::session_error::SessionError;
use argstash_tests::{Target, OUTPUT_TIMEOUT};

/// Target memory made of a few regions of this process's heap.
#[derive(Default)]
struct FakeMemory {
    regions: RefCell<Vec<(u64, Vec<u8>)>>,
}

impl FakeMemory {
    /// Adds `len` zero bytes at `addr`.
    fn map(&self, addr: u64, len: usize) {
        self.regions.borrow_mut().push((addr, vec![0; len]));
    }

    /// Runs `f` on the bytes at `addr..addr + len`, when one region holds them all.
    fn with<T>(&self, addr: u64, len: usize, f: impl FnOnce(&mut [u8]) -> T) -> Option<T> {
        let mut regions = self.regions.borrow_mut();
        let (base, bytes) = regions.iter_mut().find(|(base, bytes)| {
            addr >= *base && addr + len as u64 <= base + bytes.len() as u64
        })?;
        let at = (addr - *base) as usize;
        Some(f(&mut bytes[at..at + len]))
    }
}

impl Memory for FakeMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        self.with(addr, buf.len(), |b| buf.copy_from_slice(b))
            .ok_or_else(|| MemoryError::Read {
                addr,
                len: buf.len(),
                source: io::Error::other("not mapped"),
            })
    }
}

impl WriteMemory for FakeMemory {
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemoryError> {
        self.with(addr, data.len(), |b| b.copy_from_slice(data))
            .ok_or_else(|| MemoryError::Write {
                addr,
                len: data.len(),
                source: io::Error::other("not mapped"),
            })
    }
}

const ARENA: u64 = 0x7f00_0000_0000;
const AREA: u64 = 0x7f10_0000_0000;
/// A function 256 MiB below the arena: within reach of its rel32 jumps.
const FUNCTION: u64 = ARENA - 0x1000_0000;

/// An arena header (4 slots) and its unwind area, laid out in `mem` as an install
/// leaves them.
fn arena_with_area(mem: &FakeMemory) -> (ArenaHeader, UnwindArea) {
    let header = ArenaHeader::new(ARENA, 4);
    mem.map(ARENA, header.arena_len as usize);
    mem.write(ARENA, &header.encode()).unwrap();
    let area = UnwindArea::new(AREA, ARENA, header.capacity);
    mem.map(AREA, area.len() as usize);
    mem.write(AREA, &area.encode_header()).unwrap();
    mem.write(ARENA + ARENA_HEADER_UNWIND_AT as u64, &AREA.to_le_bytes())
        .unwrap();
    (header, area)
}

/// The code of a hook on a `push rbp; mov rbp, rsp; sub rsp, 16` prologue.
fn hook_code(header: &ArenaHeader, slot: u32) -> HookCode {
    let prologue = [
        0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10, 0x90, 0x90, 0xc9, 0xc3,
    ];
    let plan = plan_patch(FUNCTION, &prologue).unwrap();
    let meta = HookMeta {
        name: "f".into(),
        module: "/prog".into(),
        function_size: prologue.len() as u64,
        installed_ns: 1,
        variadic: false,
    };
    build_hook(&plan, header, slot, StashLayout::new(0), &meta).unwrap()
}

fn unwind_hook(area: UnwindArea, slot: u32, name: &str) -> UnwindHook {
    UnwindHook {
        name: name.into(),
        area,
        slot,
        trampoline: (ARENA + 0x1000 * u64::from(slot + 1), 48),
        relocated: (ARENA + 0x1000 * u64::from(slot + 1) + 0x200, 9),
    }
}

/// Writes an encoded slot, as an install leaves it.
fn put_slot(mem: &FakeMemory, hook: &UnwindHook, slot: &UnwindSlot) {
    mem.write(hook.area.slot_addr(hook.slot), &slot.encode().unwrap())
        .unwrap();
}

#[test]
fn the_unwind_area_is_found_from_the_arena_header() {
    let mem = FakeMemory::default();
    let (header, area) = arena_with_area(&mem);
    assert_eq!(read_area(&mem, &header), Some(area));
    // No pointer: no area; a pointer to something else: no area either.
    mem.write(ARENA + ARENA_HEADER_UNWIND_AT as u64, &0u64.to_le_bytes())
        .unwrap();
    assert_eq!(read_area(&mem, &header), None);
    mem.write(
        ARENA + ARENA_HEADER_UNWIND_AT as u64,
        &(ARENA + HEADER_LEN as u64).to_le_bytes(),
    )
    .unwrap();
    assert_eq!(read_area(&mem, &header), None);
}

#[test]
fn a_written_slot_holds_the_hooks_eh_frame_covering_its_code() {
    let mem = FakeMemory::default();
    let (header, area) = arena_with_area(&mem);
    let code = hook_code(&header, 2);
    assert_eq!(write_slot(&mem, &header, &code).unwrap(), Some(area));
    let record = HookRecord {
        state: HookState::Active,
        ..code.record.clone()
    };
    let hook = hook_of(area, 2, &record);
    assert_eq!(hook.trampoline.0, code.trampoline.address);
    assert_eq!(hook.relocated.0, code.relocated.address);
    let slot = read_slot(&mem, &hook).unwrap();
    assert_eq!((slot.registered, slot.flags), (0, 0));
    assert_eq!(slot.eh_frame, eh_frame_for(&code).unwrap());
    // One FDE for the trampoline, one for the relocated prologue.
    let body = &slot.eh_frame[..slot.eh_frame.len() - 4];
    let starts: Vec<u64> = fde_starts(body).unwrap().iter().map(|f| f.1).collect();
    assert_eq!(
        starts,
        vec![code.trampoline.address, code.relocated.address]
    );
    // Without an unwind area the hook is simply not described.
    mem.write(ARENA + ARENA_HEADER_UNWIND_AT as u64, &0u64.to_le_bytes())
        .unwrap();
    assert_eq!(write_slot(&mem, &header, &code).unwrap(), None);
}

#[test]
fn registration_state_and_flags_are_the_fields_the_slot_format_decodes() {
    let mem = FakeMemory::default();
    let (_, area) = arena_with_area(&mem);
    let hook = unwind_hook(area, 3, "f");
    let eh_frame = vec![0xab; 40];
    put_slot(
        &mem,
        &hook,
        &UnwindSlot {
            registered: 0,
            flags: 0,
            eh_frame: eh_frame.clone(),
        },
    );
    set_registered(&mem, &hook, 0x7f12_3456).unwrap();
    set_flags(&mem, &hook, FLAG_PERF_MAP | FLAG_GDB_JIT).unwrap();
    let slot = read_slot(&mem, &hook).unwrap();
    assert_eq!(slot.registered, 0x7f12_3456);
    assert_eq!(slot.flags, FLAG_PERF_MAP | FLAG_GDB_JIT);
    assert_eq!(slot.eh_frame, eh_frame, "the description is left alone");
    // The neighbouring slots are untouched.
    for other in [0, 2] {
        let s = read_slot(&mem, &unwind_hook(area, other, "g")).unwrap();
        assert_eq!(s, UnwindSlot::default(), "slot {other}");
    }
}

#[test]
fn perf_map_lines_name_both_code_ranges() {
    let hook = UnwindHook {
        name: "bar".into(),
        area: UnwindArea::new(AREA, ARENA, 4),
        slot: 0,
        trampoline: (0x7f00_0000_1000, 0x30),
        relocated: (0x7f00_0000_1200, 0x9),
    };
    assert_eq!(
        perf_map_lines(&hook),
        vec![
            "7f0000001000 30 argstash_trampoline.bar",
            "7f0000001200 9 argstash_prologue.bar"
        ]
    );
    assert!(perf_map::only_ours(&perf_map_lines(&hook).join("\n")));
    assert!(!perf_map::only_ours("7f00 10 jitted_code\n"));
}

/// A file under this test's own temporary directory, removed on drop.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new(name: &str) -> ScratchDir {
        let dir = std::env::temp_dir().join(format!("fu-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        ScratchDir(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn perf_map_edits_keep_other_tools_lines_and_remove_a_file_left_empty() {
    let dir = ScratchDir::new("perfmap");
    let path = dir.0.join("perf-1.map");
    let mem = FakeMemory::default();
    let (_, area) = arena_with_area(&mem);
    let hooks = [unwind_hook(area, 0, "a"), unwind_hook(area, 1, "b")];
    for h in &hooks {
        put_slot(&mem, h, &UnwindSlot::default());
    }
    // Another tool (a JIT) wrote the file first.
    std::fs::write(&path, "1000 20 jitted_a\n").unwrap();
    let mut report = UnwindReport::default();
    perf_map::add_to(
        &path,
        &[reader::shared_file::own_uid()],
        &mem,
        &hooks,
        &mut report,
    );
    assert_eq!(report.perf_map.as_deref(), Some(path.as_path()));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut expected = vec!["1000 20 jitted_a".to_string()];
    expected.extend(hooks.iter().flat_map(perf_map_lines));
    assert_eq!(text.lines().collect::<Vec<_>>(), expected);
    for h in &hooks {
        assert_eq!(read_slot(&mem, h).unwrap().flags, FLAG_PERF_MAP);
    }
    // Another line after ours; then `a` goes: only its lines leave.
    std::fs::write(&path, text + "3000 10 jitted_b\n").unwrap();
    let mut report = UnwindReport::default();
    perf_map::remove_from(
        &path,
        &[reader::shared_file::own_uid()],
        &mem,
        &hooks[..1],
        &mut report,
    );
    let mut kept = vec!["1000 20 jitted_a".to_string()];
    kept.extend(perf_map_lines(&hooks[1]));
    kept.push("3000 10 jitted_b".into());
    assert_eq!(
        std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .collect::<Vec<_>>(),
        kept
    );
    assert_eq!(read_slot(&mem, &hooks[0]).unwrap().flags, 0);
    assert_eq!(read_slot(&mem, &hooks[1]).unwrap().flags, FLAG_PERF_MAP);
    // A hook whose slot says it has no lines is not looked for.
    let mut report = UnwindReport::default();
    perf_map::remove_from(
        &path,
        &[reader::shared_file::own_uid()],
        &mem,
        &hooks[..1],
        &mut report,
    );
    assert_eq!(report.perf_map, None);
    // Only our lines left: the file goes with them.
    std::fs::write(&path, perf_map_lines(&hooks[1]).join("\n") + "\n").unwrap();
    perf_map::remove_from(
        &path,
        &[reader::shared_file::own_uid()],
        &mem,
        &hooks[1..],
        &mut UnwindReport::default(),
    );
    assert!(!path.exists());
}

#[test]
fn a_fifo_or_link_at_the_perf_map_is_reported_and_left_alone() {
    let dir = ScratchDir::new("perfmap-hostile");
    let path = dir.0.join("perf-2.map");
    let sentinel = dir.0.join("sentinel");
    std::fs::write(&sentinel, "precious\n").unwrap();
    let mem = FakeMemory::default();
    let (_, area) = arena_with_area(&mem);
    let hooks = [unwind_hook(area, 0, "a")];
    put_slot(&mem, &hooks[0], &UnwindSlot::default());
    let me = [reader::shared_file::own_uid()];
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    let mut report = UnwindReport::default();
    // Returns at once: the FIFO is opened without blocking and refused by kind.
    perf_map::add_to(&path, &me, &mem, &hooks, &mut report);
    assert_eq!(report.perf_map, None);
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains(&format!("{} left alone", path.display())) && n.contains("FIFO")),
        "{:?}",
        report.notes
    );
    assert_eq!(
        read_slot(&mem, &hooks[0]).unwrap().flags,
        0,
        "no lines claimed"
    );
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(&sentinel, &path).unwrap();
    let mut report = UnwindReport::default();
    perf_map::add_to(&path, &me, &mem, &hooks, &mut report);
    assert!(
        report.notes.iter().any(|n| n.contains("symbolic link")),
        "{:?}",
        report.notes
    );
    assert_eq!(std::fs::read_to_string(&sentinel).unwrap(), "precious\n");
}

#[test]
fn with_calls_off_libgcc_registration_is_skipped_with_a_note_and_the_slots_unchanged() {
    let mem = FakeMemory::default();
    let (_, area) = arena_with_area(&mem);
    let hooks = [unwind_hook(area, 0, "a"), unwind_hook(area, 1, "b")];
    let described = UnwindSlot {
        registered: 0,
        flags: 0,
        eh_frame: vec![1; 24],
    };
    put_slot(&mem, &hooks[0], &described);
    put_slot(&mem, &hooks[1], &described);
    let off = CallPolicy {
        calls: RemoteCalls::Off,
        wait: Duration::ZERO,
        ..Default::default()
    };
    let unwinder = Unwinder {
        module: "/lib/libgcc_s.so.1".into(),
        register: 0x1000,
        deregister: 0x2000,
    };
    // No pid is touched when calls are off.
    let mut gadgets = Gadgets::new(-1, 0);
    let mut borrower = Borrower::new(-1, off, &mut gadgets);
    assert!(matches!(
        borrower.with_thread(|_, _| unreachable!()),
        Err(CallSkipped::Off)
    ));
    let mut report = UnwindReport::default();
    libgcc::register(&mem, Some(&unwinder), &hooks, &mut report, &mut borrower);
    assert_eq!(report.registered, 0);
    assert_eq!(
        report.notes,
        vec![
            "registration with /lib/libgcc_s.so.1 skipped for 2 hooks (calls in the target are \
             off): a C++ exception thrown through those hooked functions would end the program \
             (std::terminate)"
        ]
    );
    assert_eq!(read_slot(&mem, &hooks[0]).unwrap(), described);
    // No libgcc in the process: said once, nothing else tried.
    let mut report = UnwindReport::default();
    libgcc::register(&mem, None, &hooks, &mut report, &mut borrower);
    assert_eq!(report.notes.len(), 1);
    assert!(
        report.notes[0].starts_with("no in-process unwinder"),
        "{report:?}"
    );

    // Eject: a registration never confirmed stays; a confirmed one is skipped, and kept.
    set_registered(&mem, &hooks[0], REGISTRATION_PENDING).unwrap();
    set_registered(&mem, &hooks[1], unwinder.deregister).unwrap();
    let mut report = UnwindReport::default();
    libgcc::deregister(&mem, &hooks, &mut report, &mut borrower);
    assert_eq!(report.registered, 0);
    assert_eq!(report.notes.len(), 2, "{report:?}");
    assert!(report.notes[0].starts_with("1 hooks stay registered with libgcc"));
    assert!(report.notes[1].starts_with(
        "deregistration from libgcc skipped for 1 hooks (calls in the target are off)"
    ));
    assert_eq!(
        read_slot(&mem, &hooks[1]).unwrap().registered,
        unwinder.deregister
    );
}

#[test]
fn raw_calls_on_a_process_that_is_gone_fail_with_the_session_error() {
    // A pid above any pid_max: never a process.
    let gone = 1 << 30;
    match with_any_thread(gone, &mut Gadgets::new(gone, 0), |_, _| unreachable!()) {
        Err(AnyThreadError::Session(SessionError::NoSuchProcess { pid })) => assert_eq!(pid, gone),
        other => panic!("{other:?}"),
    }
}

/// Prints the address of a 256-byte buffer, then sleeps; each line of input is a
/// path it `dlopen`s, printing the handle.
const SLEEPER: &str = r#"
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static char scratch[256];
int main(void) {
    printf("%p\n", (void *)scratch);
    printf("ready\n");
    fflush(stdout);
    char path[4096];
    while (fgets(path, sizeof path, stdin)) {
        path[strcspn(path, "\n")] = 0;
        printf("%p\n", dlopen(path, RTLD_NOW | RTLD_LOCAL));
        fflush(stdout);
    }
    for (;;) pause();
}
"#;

fn hex_line(line: &str) -> u64 {
    u64::from_str_radix(line.trim_start_matches("0x"), 16).unwrap()
}

#[test]
fn the_jitdump_is_mapped_and_unmapped_in_a_real_process() {
    let child = Target::spawn_source("jitmark", SLEEPER, &[]);
    let pid = child.pid();
    let scratch = (hex_line(&child.before_ready()[0]), 256);
    let mem = crate::memory::ProcessMemory::open(pid).unwrap();
    let path = jitdump_path(pid);
    let _ = std::fs::remove_file(&path);
    let start_time = reader::procfs::read_stat(pid).unwrap().start_time;
    let mut gadgets = Gadgets::new(pid, start_time);
    // No file yet: the remote open fails, and says so in the target's terms.
    match map_marker(pid, &mem, scratch, &mut gadgets) {
        Err(MarkerError::Thread(AnyThreadError::Session(SessionError::RemoteSyscall {
            name,
            errno,
            ..
        }))) => assert_eq!((name.as_str(), errno), ("open", libc::ENOENT)),
        other => panic!("{other:?}"),
    }
    assert_eq!(marker_mapping(pid), None);
    std::fs::write(&path, super::perf_jit::encode_header(pid as u32, 0)).unwrap();
    let addr = map_marker(pid, &mem, scratch, &mut gadgets).unwrap();
    let (start, len) = marker_mapping(pid).unwrap();
    assert_eq!(start, addr);
    assert!(len >= JITDUMP_HEADER_LEN as u64);
    // The path written for `open` is wiped again.
    assert_eq!(mem.read_vec(scratch.0, 256).unwrap(), vec![0; 256]);
    // No room for the path: refused before anything runs in the target.
    assert!(matches!(
        map_marker(pid, &mem, (scratch.0, 8), &mut gadgets),
        Err(MarkerError::NoRoom)
    ));
    unmap_marker(pid, (start, len), &mut gadgets).unwrap();
    // The gadgets the sessions found stay with the caller, for the next session.
    assert_eq!(gadgets.owner(), (pid, start_time));
    assert_eq!(marker_mapping(pid), None);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn the_gdb_jit_helper_is_found_where_the_process_loaded_it() {
    let mut child = Target::spawn_source("jithelper", SLEEPER, &[]);
    let pid = child.pid();
    let path = super::gdb_jit::helper_file(pid).unwrap().host;
    let text = path.to_str().unwrap().to_string();
    assert!(loaded_helper(pid).is_none());
    std::fs::write(&path, HELPER_SO).unwrap();
    child.write_stdin(&format!("{text}\n"));
    let handle = hex_line(&child.expect_line(OUTPUT_TIMEOUT));
    assert_ne!(handle, 0, "dlopen of the helper failed in the child");
    let mem = crate::memory::ProcessMemory::open(pid).unwrap();
    // What dlopen returned is the loader's link_map of the file, found from memory.
    assert_eq!(link_map_of(pid, &mem, &text), Some(handle));
    assert_eq!(link_map_of(pid, &mem, "/no/such/object.so"), None);
    // The helper's symbols, where it was mapped: the descriptor is at version 1 with
    // no entry, and the handle and dlclose words are still empty.
    let helper = loaded_helper(pid).unwrap();
    let descriptor = mem.read_vec(helper.descriptor, 24).unwrap();
    assert_eq!(&descriptor[..4], &1u32.to_le_bytes());
    assert_eq!(&descriptor[8..], &[0; 16]);
    assert_eq!(mem.read_u64(helper.handle).unwrap(), 0);
    assert_eq!(mem.read_u64(helper.dlclose).unwrap(), 0);
    std::fs::remove_file(&path).unwrap();
}
