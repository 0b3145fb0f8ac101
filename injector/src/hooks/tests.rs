//! The install and eject phases against real processes: a plan that stops
//! nothing, commits that fail at each of their writes and leave the target byte
//! for byte as it was, and the commit that finally succeeds.

use trampolines::arena::ArenaHeader;

use super::*;
use crate::hooks::arena::ArenaChoice;
use crate::hooks::eject::Ejection;
use crate::hooks::plan::Plan;
use crate::hooks::undo::FailingWrite;
use crate::memory::{Memory, MemoryError};
use argstash_tests::{thread_status, wait_all_blocked, Target, OUTPUT_TIMEOUT};
use reader::procfs::{read_maps, MapEntry};

/// `work(x)` formats `7x` and parses it back (a real prologue, a call inside);
/// main answers each line of stdin with `work(line)`.
const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) int work(int x) {
    char buf[32];
    snprintf(buf, sizeof buf, "%d", x * 7);
    return atoi(buf) + 1;
}
int main(void) {
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        printf("%d\n", work(atoi(line)));
        fflush(stdout);
    }
    return 0;
}
"#;

/// Everything an install or eject may change: the mappings, and the bytes of the
/// program's code, of every arena and of every arena's unwind area.
#[derive(Debug, PartialEq, Eq)]
struct TargetState {
    maps: Vec<MapEntry>,
    bytes: Vec<(u64, Vec<u8>)>,
}

fn target_state(pid: i32) -> TargetState {
    let maps = read_maps(pid).unwrap();
    let mem = ProcessMemory::open(pid).unwrap();
    let exe = reader::procfs::read_exe_link(pid).unwrap();
    let mut ranges: Vec<(u64, u64)> = maps
        .iter()
        .filter(|m| m.perms.exec && std::path::Path::new(m.file_path()) == exe)
        .map(|m| (m.start, m.end))
        .collect();
    for a in discover(&maps, &mem).unwrap() {
        ranges.push((a.header.base, a.header.base + a.header.arena_len));
        if let Some(area) = crate::foreign_unwind::read_area(&mem, &a.header) {
            ranges.push((area.base, area.base + area.len()));
        }
    }
    let bytes = ranges
        .into_iter()
        .map(|(start, end)| (start, mem.read_vec(start, (end - start) as usize).unwrap()))
        .collect();
    TargetState { maps, bytes }
}

fn ask(child: &mut Target, x: i32) -> String {
    child.write_stdin(&format!("{x}\n"));
    child.expect_line(OUTPUT_TIMEOUT)
}

fn work_spec() -> Vec<FuncSpec> {
    vec![FuncSpec::parse("work")]
}

/// Commits an install of `work` failing at write 0, 1, 2, ... until one
/// succeeds, checking after each failure that the target is as it was; returns
/// the successful commit and how many writes it made.
fn install_through_every_failure(pid: i32) -> (commit::Committed, usize) {
    let before = target_state(pid);
    for fail_at in 0.. {
        let ctx = ProcessInfo::read(pid, Access::Stop).unwrap();
        let mem = ProcessMemory::open(pid).unwrap();
        let mut prepared = Plan::new(
            &ctx,
            &mem,
            &work_spec(),
            &[],
            &[],
            &InstallOptions::default(),
        )
        .unwrap()
        .prepare(now_ns())
        .unwrap();
        let mut session = ctx.stop_all().unwrap();
        let failing = FailingWrite::new(&mem, fail_at);
        let result = prepared.commit(&mut session, &failing);
        session.detach().unwrap();
        match result {
            Err(e) => {
                assert!(
                    matches!(e, Error::Memory(MemoryError::Write { .. })),
                    "write {fail_at}: {e}"
                );
                assert_eq!(
                    target_state(pid),
                    before,
                    "the target changed after a commit failed at write {fail_at}"
                );
            }
            Ok(done) => {
                assert_eq!(failing.writes(), fail_at);
                return (done, fail_at);
            }
        }
    }
    unreachable!()
}

/// Ejects `work` failing at each write until it succeeds, checking the target after each failure.
fn eject_through_every_failure(pid: i32) -> usize {
    let before = target_state(pid);
    for fail_at in 0.. {
        let ctx = ProcessInfo::read(pid, Access::Stop).unwrap();
        let mem = ProcessMemory::open(pid).unwrap();
        let arenas = discover(&ctx.maps, &mem).unwrap();
        let what = EjectWhat::Functions(work_spec());
        let ejection = Ejection::choose(pid, ctx.arch, arenas, &what).unwrap();
        let mut session = ctx.stop_all().unwrap();
        let failing = FailingWrite::new(&mem, fail_at);
        let result = ejection.commit(&mut session, &failing);
        session.detach().unwrap();
        match result {
            Err(e) => {
                assert!(matches!(e, Error::Memory(MemoryError::Write { .. })), "{e}");
                assert_eq!(
                    target_state(pid),
                    before,
                    "the target changed after an eject failed at write {fail_at}"
                );
            }
            Ok(done) => {
                assert_eq!(done.hooks.len(), 1);
                assert_eq!(done.hooks[0].state, HookState::Ejected);
                return fail_at;
            }
        }
    }
    unreachable!()
}

#[test]
fn a_commit_failing_at_any_write_leaves_the_target_as_it_was() {
    let mut child = Target::spawn_source("txn", PROGRAM, &[]);
    let pid = child.pid();
    assert_eq!(ask(&mut child, 6), "43");
    wait_all_blocked(pid);
    let pristine = target_state(pid);

    // A fresh process: the commit creates the arena and its unwind area.
    let (done, writes) = install_through_every_failure(pid);
    // Arena header, unwind area header and pointer, code, signature, record,
    // unwind slot, patch.
    assert_eq!(writes, 8);
    assert_eq!(done.new_arenas.len(), 1);
    assert_eq!(done.hooks.len(), 1);
    assert_eq!(done.hooks[0].name, "work");
    assert_eq!(done.unwind_hooks.len(), 1);
    assert_eq!(ask(&mut child, 6), "43", "the hooked function works");
    assert_eq!(list(Pid::from_raw(pid)).unwrap().len(), 1);

    assert_eq!(
        eject_through_every_failure(pid),
        2,
        "restored bytes, record"
    );
    assert_eq!(ask(&mut child, 5), "36");
    wait_all_blocked(pid);
    let ejected = target_state(pid);
    assert_eq!(
        ejected.bytes[0], pristine.bytes[0],
        "the program's code is the original again"
    );

    // The arena exists now: the commit writes into a free slot of it.
    let (done, writes) = install_through_every_failure(pid);
    assert_eq!(writes, 5, "code, signature, record, unwind slot, patch");
    assert!(done.new_arenas.is_empty());
    assert_eq!(done.hooks[0].slot, 1);
    assert_eq!(ask(&mut child, 2), "15");
    let listed = list(Pid::from_raw(pid)).unwrap();
    assert_eq!(
        listed.iter().map(|h| h.state).collect::<Vec<_>>(),
        [HookState::Ejected, HookState::Active]
    );
    eject(Pid::from_raw(pid), &EjectOptions::all()).unwrap();
    assert_eq!(ask(&mut child, 1), "8");
}

#[test]
fn a_plan_stops_nothing_and_places_the_hook_near_its_module() {
    let mut child = Target::spawn_source("plan", PROGRAM, &[]);
    let pid = child.pid();
    wait_all_blocked(pid);
    let ctx = ProcessInfo::read(pid, Access::Stop).unwrap();
    let mem = ProcessMemory::open(pid).unwrap();
    let plan = Plan::new(
        &ctx,
        &mem,
        &work_spec(),
        &[],
        &[],
        &InstallOptions::default(),
    )
    .unwrap();
    for tid in reader::procfs::read_task_ids(pid).unwrap() {
        assert_eq!(thread_status(pid, tid).1, 0, "no tracer while planning");
    }
    assert!(plan.arenas.is_empty());
    assert_eq!(plan.new_arenas.len(), 1);
    assert_eq!(plan.hooks[0].target, ArenaChoice::New(0, 0));
    let work = plan.hooks[0].resolved.addr;
    let base = plan.new_arenas[0].candidates[0];
    let len = ArenaHeader::new(0, arena::ARENA_CAPACITY).arena_len;
    assert!(arena::within_reach(&(base..base + len), &(work..work + 1)));
    assert!(ctx
        .maps
        .iter()
        .all(|m| m.end <= base || m.start >= base + len));
    let prepared = plan.prepare(7).unwrap();
    let code = &prepared.hooks[0].code;
    assert_eq!(code.record.function, work);
    assert_eq!(code.record.installed_ns, 7);
    assert_eq!(code.patch[0], 0xe9, "a rel32 jump");
    assert!(code.record.trampoline >= base && code.record.trampoline < base + len);
    assert!(!prepared.creates_arenas() || prepared.new_arenas[0].chosen == 0);
    // Nothing was written: the function still answers as before.
    assert_eq!(ask(&mut child, 3), "22");

    // A function named twice is refused while planning.
    let twice = [FuncSpec::parse("work"), FuncSpec::parse("work")];
    let e = Plan::new(&ctx, &mem, &twice, &[], &[], &InstallOptions::default())
        .err()
        .unwrap();
    assert!(matches!(e, Error::Duplicate { .. }), "{e}");
    // And a hooked one too.
    install(
        Pid::from_raw(pid),
        &[HookTarget::from("work")],
        &InstallOptions::default(),
    )
    .unwrap();
    let ctx = ProcessInfo::read(pid, Access::Stop).unwrap();
    let e = Plan::new(
        &ctx,
        &mem,
        &work_spec(),
        &[],
        &[],
        &InstallOptions::default(),
    )
    .err()
    .unwrap();
    assert!(matches!(e, Error::AlreadyHooked { .. }), "{e}");
    eject(Pid::from_raw(pid), &EjectOptions::all()).unwrap();
}

/// Memory whose every word holds its own address, except a guard range that cannot be read.
struct GuardedStack {
    guard: std::ops::Range<u64>,
}

impl Memory for GuardedStack {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let end = addr + buf.len() as u64;
        if addr < self.guard.end && self.guard.start < end {
            return Err(MemoryError::Read {
                addr,
                len: buf.len(),
                source: std::io::Error::from_raw_os_error(libc::EIO),
            });
        }
        for (i, w) in buf.chunks_mut(8).enumerate() {
            let v = (addr + 8 * i as u64).to_le_bytes();
            w.copy_from_slice(&v[..w.len()]);
        }
        Ok(())
    }
}

#[test]
fn stack_scan_stops_at_the_next_threads_guard() {
    // Two thread stacks in one mapping (glibc 2.42+ guards with MADV_GUARD_INSTALL):
    // [0x10000, 0x30000) this thread's stack, a guard page, then the next stack.
    let mem = GuardedStack {
        guard: 0x30000..0x31000,
    };
    let mut seen = Vec::new();
    assert!(stack_words(&mem, 0x2f000, 0x50000, |w| seen.push(w)));
    assert_eq!(seen.first(), Some(&0x2f000));
    assert_eq!(seen.last(), Some(&0x2fff8));
    assert_eq!(seen.len(), 0x1000 / 8);
    // A scan that starts in a chunk spanning the guard keeps the pages before it.
    let mut seen = Vec::new();
    assert!(stack_words(&mem, 0x20008, 0x50000, |w| seen.push(w)));
    assert_eq!(seen.last(), Some(&0x2fff8));
    assert_eq!(seen.len(), (0x30000 - 0x20008) / 8);
    // Without a guard the scan reaches the end of the mapping.
    let mut count = 0;
    assert!(stack_words(&mem, 0x40000, 0x50000, |_| count += 1));
    assert_eq!(count, 0x10000 / 8);
    // A stack pointer in unreadable memory tells nothing.
    assert!(!stack_words(&mem, 0x30008, 0x50000, |_| {}));
}

/// A program with half a gigabyte of touched memory (in small pages): once
/// killed, the kernel takes long to let it go, and all that time its maps read
/// empty while its threads are not zombies yet.
const SLOW_TO_DIE: &str = r#"
#include <stdio.h>
#include <sys/mman.h>
__attribute__((noinline)) int work(int x) { return x * 7 + 1; }
int main(void) {
    size_t len = (size_t)512 << 20;
    char *p = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    madvise(p, len, MADV_NOHUGEPAGE);
    for (size_t i = 0; i < len; i += 4096) p[i] = 1;
    printf("ready\n");
    fflush(stdout);
    char line[8];
    while (fgets(line, sizeof line, stdin)) printf("%d\n", work(line[0]));
    return 0;
}
"#;

/// The moment `faults::target_killed_during_inject` struck about once in 100
/// trials, made to last: a lookup of the function to hook after the target was
/// killed, while the kernel tears its address space down, finds nothing; the
/// install then reports that the process exited, not that it has no such function.
#[test]
fn a_lookup_in_a_process_being_torn_down_reports_its_exit() {
    // The window lasts tens of milliseconds, but a loaded machine may not run
    // this thread in it: each try kills a fresh target, until one is caught there.
    const TRIES: usize = 8;
    let mut caught = None;
    for _ in 0..TRIES {
        let child = Target::spawn_source("slow_to_die", SLOW_TO_DIE, &[]);
        let pid = child.pid();
        assert!(
            reader::procfs::read_maps(pid)
                .unwrap()
                .iter()
                .any(|m| m.perms.exec),
            "a live process has code mapped"
        );
        // SAFETY: kill(2) of our own child, which is not reaped before `child` drops.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        let start = std::time::Instant::now();
        let torn_down = || {
            reader::procfs::read_maps(pid).is_ok_and(|m| m.is_empty())
                && reader::procfs::read_stat(pid).is_ok_and(|s| !s.is_dead())
        };
        let mut missed = false;
        while !torn_down() {
            let dead = reader::procfs::read_stat(pid).map_or(true, |s| s.is_dead());
            if dead || start.elapsed() > std::time::Duration::from_secs(10) {
                missed = true;
                break;
            }
            std::thread::yield_now();
        }
        if !missed {
            caught = Some((child, pid));
            break;
        }
    }
    let (child, pid) = caught.unwrap_or_else(|| {
        panic!("the window where the maps read empty was missed in {TRIES} tries")
    });
    // What the install met: the maps, read once the address space is gone,
    // hold no module, so the function is not found...
    let maps = read_maps(pid).unwrap();
    let symbols = reader::symbols::ProcessSymbols::load_with_class(pid, &maps, false);
    let lookup = symbols
        .resolve(&FuncSpec::parse("work"))
        .map(|r| r.addr)
        .unwrap_err();
    assert!(
        matches!(lookup, reader::symbols::SymbolError::NotFound { .. }),
        "{lookup}"
    );
    // ...and that failure is the process ending, which is what is reported.
    let err = crate::error::exited_during(pid, crate::error::Operation::Inject, lookup.into());
    assert!(
        matches!(err, Error::ExitedDuring { pid: p, operation: crate::error::Operation::Inject } if p == pid),
        "{err}"
    );
    drop(child);
}
