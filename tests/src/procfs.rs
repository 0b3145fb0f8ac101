//! Oracles read from `/proc`: a process's memory, threads and their states,
//! tracers, mappings, and where an executable's symbols are at run time.

use std::fs;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use crate::command::{wait_for, wait_until};
use crate::elf::{elf_load_segments, symbol};

/// Read `len` bytes at `addr` of process `pid` through `/proc/PID/mem`.
#[track_caller]
pub fn read_mem(pid: i32, addr: u64, len: usize) -> Vec<u8> {
    try_read_mem(pid, addr, len)
        .unwrap_or_else(|e| panic!("read {len} bytes at {addr:#x} of pid {pid}: {e}"))
}

/// Like [`read_mem`], returning the error instead of panicking.
pub fn try_read_mem(pid: i32, addr: u64, len: usize) -> io::Result<Vec<u8>> {
    let f = fs::File::open(format!("/proc/{pid}/mem"))?;
    let mut buf = vec![0; len];
    f.read_exact_at(&mut buf, addr)?;
    Ok(buf)
}

/// Thread `tid`'s XSAVE image (`PTRACE_GETREGSET NT_X86_XSTATE`); the calling thread
/// must be its tracer, with the thread in a ptrace-stop.
pub fn xstate(tid: i32) -> Vec<u8> {
    // Larger than any XSAVE area (AMX tile data included, 11,008 bytes).
    let mut buf = vec![0u8; 1 << 15];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: the kernel writes at most iov_len bytes into buf, alive for the call.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_GETREGSET,
            tid,
            0x202usize as *mut libc::c_void,
            &mut iov as *mut libc::iovec as *mut libc::c_void,
        )
    };
    assert_eq!(r, 0, "PTRACE_GETREGSET NT_X86_XSTATE");
    buf.truncate(iov.iov_len);
    buf
}

/// The 27 words of a register set (`user_regs_struct`, in its field order), for comparisons.
pub fn regs_words(r: &libc::user_regs_struct) -> [u64; 27] {
    [
        r.r15, r.r14, r.r13, r.r12, r.rbp, r.rbx, r.r11, r.r10, r.r9, r.r8, r.rax, r.rcx, r.rdx,
        r.rsi, r.rdi, r.orig_rax, r.rip, r.cs, r.eflags, r.rsp, r.ss, r.fs_base, r.gs_base, r.ds,
        r.es, r.fs, r.gs,
    ]
}

/// Thread ids of process `pid`, sorted (empty if the process is gone).
pub fn thread_ids(pid: i32) -> Vec<i32> {
    let mut v: Vec<i32> = fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// `(tid, name)` of every thread of `pid` (names from `/proc/PID/task/TID/comm`).
pub fn thread_names(pid: i32) -> Vec<(i32, String)> {
    thread_ids(pid)
        .into_iter()
        .filter_map(|tid| {
            let comm = fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).ok()?;
            Some((tid, comm.trim_end().to_string()))
        })
        .collect()
}

/// A field of `/proc/PID/status` (e.g. `"TracerPid"`), trimmed; `None` if absent.
pub fn proc_status_field(pid: i32, field: &str) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == field).then(|| v.trim().to_string())
    })
}

/// Id of the thread tracing `pid` (`TracerPid`), `None` if untraced; panics if `pid` is gone.
#[track_caller]
pub fn tracer_pid(pid: i32) -> Option<i32> {
    let v = proc_status_field(pid, "TracerPid")
        .unwrap_or_else(|| panic!("no /proc/{pid}/status: process gone?"));
    let t: i32 = v.parse().expect("numeric TracerPid");
    (t != 0).then_some(t)
}

/// State letter of `pid` from `/proc/PID/stat` (`R`, `S`, `t` = ptrace-stopped, `Z`...); `None` if gone.
pub fn proc_state(pid: i32) -> Option<char> {
    stat_state(&format!("/proc/{pid}/stat"))
}

/// State letter of thread `tid` of `pid`; `None` if gone.
pub fn thread_state(pid: i32, tid: i32) -> Option<char> {
    stat_state(&format!("/proc/{pid}/task/{tid}/stat"))
}

/// `(state letter, TracerPid)` of thread `tid` of `pid`, from its own
/// `/proc/PID/task/TID/status`; panics if the thread is gone.
#[track_caller]
pub fn thread_status(pid: i32, tid: i32) -> (char, i32) {
    let path = format!("/proc/{pid}/task/{tid}/status");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no {name} in {path}"))
    };
    let state = field("State").chars().next().unwrap_or('?');
    let tracer = field("TracerPid").parse().expect("numeric TracerPid");
    (state, tracer)
}

/// Wait (panicking after [`WAIT_TIMEOUT`](crate::WAIT_TIMEOUT)) until every
/// thread of `pid` sleeps (`S`) in a system call: none is on a CPU.
pub fn wait_all_blocked(pid: i32) {
    wait_for("all threads are blocked in a system call", || {
        thread_ids(pid).into_iter().all(|t| {
            blocked_syscall(pid, t).is_some_and(|n| n >= 0) && thread_status(pid, t).0 == 'S'
        })
    });
}

fn stat_state(path: &str) -> Option<char> {
    let stat = fs::read_to_string(path).ok()?;
    // "pid (comm) S ...": comm may contain spaces and parentheses.
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapEntry {
    /// Start address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// Permissions, e.g. `r-xp`.
    pub perms: String,
    /// File offset of `start`.
    pub offset: u64,
    /// Path or pseudo-name (`[stack]`), empty for anonymous mappings.
    pub path: String,
}

/// Parsed `/proc/PID/maps`.
#[track_caller]
pub fn maps(pid: i32) -> Vec<MapEntry> {
    let text = fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/maps: {e}"));
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(6, ' ');
            let (range, perms, off) = (it.next()?, it.next()?, it.next()?);
            let (_dev, _inode) = (it.next()?, it.next()?);
            let path = it.next().unwrap_or("").trim().to_string();
            let (s, e) = range.split_once('-')?;
            Some(MapEntry {
                start: u64::from_str_radix(s, 16).ok()?,
                end: u64::from_str_radix(e, 16).ok()?,
                perms: perms.to_string(),
                offset: u64::from_str_radix(off, 16).ok()?,
                path,
            })
        })
        .collect()
}

/// Load bias of executable `exe` in process `pid`: runtime address minus ELF `st_value`/`p_vaddr`.
#[track_caller]
pub fn load_bias(pid: i32, exe: &Path) -> u64 {
    let canon = fs::canonicalize(exe).unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
    let canon = canon.to_string_lossy();
    let deleted = format!("{canon} (deleted)");
    let first = maps(pid)
        .into_iter()
        .filter(|m| m.path == canon || m.path == deleted)
        .min_by_key(|m| m.offset)
        .unwrap_or_else(|| panic!("{canon} is not mapped in pid {pid}"));
    let seg = elf_load_segments(exe)
        .into_iter()
        .find(|s| s.offset & !0xfff == first.offset)
        .unwrap_or_else(|| panic!("no PT_LOAD at file offset {:#x}", first.offset));
    first.start - (seg.vaddr & !0xfff)
}

/// Runtime address of symbol `sym` of executable `exe` in process `pid`.
#[track_caller]
pub fn runtime_addr(pid: i32, exe: &Path, sym: &str) -> u64 {
    let s = symbol(exe, sym).unwrap_or_else(|| panic!("no symbol {sym} in {}", exe.display()));
    load_bias(pid, exe) + s.addr
}

/// Write `bytes` at `addr` of process `pid` through `/proc/PID/mem` (as another tool would patch it).
#[track_caller]
pub fn write_mem(pid: i32, addr: u64, bytes: &[u8]) {
    let f = fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .unwrap_or_else(|e| panic!("open /proc/{pid}/mem for writing: {e}"));
    f.write_all_at(bytes, addr)
        .unwrap_or_else(|e| panic!("write {} bytes at {addr:#x} of pid {pid}: {e}", bytes.len()));
}

/// The path of `exe` as `/proc/PID/maps` and argstash's `module` fields show it (canonical).
#[track_caller]
pub fn module_path(exe: &Path) -> String {
    fs::canonicalize(exe)
        .unwrap_or_else(|e| panic!("{}: {e}", exe.display()))
        .to_string_lossy()
        .into_owned()
}

/// Path of the mapped module of `pid` whose file name is `file_name` (e.g. `libc.so.6`).
#[track_caller]
pub fn mapped_module(pid: i32, file_name: &str) -> String {
    maps(pid)
        .into_iter()
        .map(|m| m.path)
        .find(|p| p.rsplit('/').next() == Some(file_name))
        .unwrap_or_else(|| panic!("no {file_name} mapped in pid {pid}"))
}

/// Threads of `pid` that are stopped (`t` ptrace stop or `T` job-control stop), with their state.
pub fn stopped_threads(pid: i32) -> Vec<(i32, char)> {
    thread_ids(pid)
        .into_iter()
        .filter_map(|tid| match thread_state(pid, tid) {
            Some(c @ ('t' | 'T')) => Some((tid, c)),
            _ => None,
        })
        .collect()
}

/// `TracerPid` of every thread of `pid` that has a tracer: `(tid, tracer)`.
pub fn traced_threads(pid: i32) -> Vec<(i32, i32)> {
    thread_ids(pid)
        .into_iter()
        .filter_map(|tid| {
            let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
            let v: i32 = text
                .lines()
                .find_map(|l| l.strip_prefix("TracerPid:"))?
                .trim()
                .parse()
                .ok()?;
            (v != 0).then_some((tid, v))
        })
        .collect()
}

/// Wait up to `timeout` until no thread of `pid` is traced or stopped; the
/// offending threads otherwise (`"tid 12: state t, tracer 34"` lines).
pub fn wait_released(pid: i32, timeout: Duration) -> Result<(), String> {
    if wait_until(timeout, || {
        traced_threads(pid).is_empty() && stopped_threads(pid).is_empty()
    }) {
        return Ok(());
    }
    let traced = traced_threads(pid);
    let stopped = stopped_threads(pid);
    Err(format!(
        "after {timeout:?}: traced threads (tid, tracer) {traced:?}, stopped threads (tid, state) {stopped:?}"
    ))
}

/// The system call thread `tid` of `pid` is blocked in (first field of
/// `/proc/PID/task/TID/syscall`); `None` when running, or unreadable.
pub fn blocked_syscall(pid: i32, tid: i32) -> Option<i64> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{function_bytes, Target, Variant};

    const LINE: Duration = Duration::from_secs(3);

    #[test]
    fn live_code_matches_file() {
        for v in Variant::all() {
            let t = Target::start("seed", v);
            let bias = load_bias(t.pid(), t.exe());
            assert_eq!(bias == 0, !v.pie, "{v}: bias {bias:#x}");
            for f in ["bar", "foo"] {
                let want = function_bytes(t.exe(), f);
                assert_eq!(
                    read_mem(t.pid(), t.addr_of(f), want.len()),
                    want,
                    "{f} ({v})"
                );
            }
            assert!(try_read_mem(t.pid(), 0, 1).is_err());
        }
    }

    #[test]
    fn ptrace_attach_shows_in_proc() {
        use nix::sys::ptrace;
        use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
        use nix::unistd::Pid;

        let mut t = Target::start("seed", Variant::O2G);
        let pid = Pid::from_raw(t.pid());
        assert_eq!(tracer_pid(t.pid()), None);
        ptrace::attach(pid).expect("ptrace attach (needs CAP_SYS_PTRACE or ptrace_scope 0/1)");
        match waitpid(pid, Some(WaitPidFlag::__WALL)).unwrap() {
            WaitStatus::Stopped(_, _) => {}
            other => panic!("unexpected wait status {other:?}"),
        }
        // TracerPid is the tracing *thread*'s id.
        // SAFETY: plain syscall.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
        assert_eq!(tracer_pid(t.pid()), Some(tid));
        assert_eq!(proc_state(t.pid()), Some('t'));
        assert!(t.is_alive(), "a ptrace-stopped target is alive");
        ptrace::detach(pid, None).unwrap();
        assert!(wait_until(LINE, || tracer_pid(t.pid()).is_none()));
        t.drain_lines();
        t.wait_for_line(LINE, |l| l.starts_with("iter "));
        t.assert_healthy();
    }

    #[test]
    fn state_and_threads_helpers() {
        let t = Target::start("threads", Variant::O2G);
        let tids = thread_ids(t.pid());
        assert_eq!(tids[0], t.pid());
        let parked = thread_names(t.pid())
            .into_iter()
            .find(|(_, n)| n == "parked")
            .unwrap()
            .0;
        assert!(wait_until(LINE, || thread_state(t.pid(), parked) == Some('S')));
        assert!(maps(t.pid()).iter().any(|m| m.path == "[stack]"));
        let pid = t.pid();
        drop(t);
        assert_eq!(proc_state(pid), None);
        assert!(thread_ids(pid).is_empty());
    }

    #[test]
    fn stat_parsing_handles_odd_comm() {
        let dir = std::env::temp_dir().join(format!("argstash-stat-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("stat");
        fs::write(&p, "42 (a) b (c) t 1 2 3\n").unwrap();
        assert_eq!(stat_state(p.to_str().unwrap()), Some('t'));
        fs::remove_dir_all(&dir).unwrap();
    }
}
