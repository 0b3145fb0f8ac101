//! Every `/proc/PID/...` file argstash reads, one parser each: `maps` (the address
//! space, one [`MapEntry`] per line), `stat` ([`Stat`]), `status` ([`Status`]),
//! `comm`, the `task` directory (thread ids), `exe` (its path and ELF class),
//! `auxv`, and a thread's `syscall`.
//!
//! Each file has a pure parser over its text (unit-tested on sample text) and a
//! `read_*` function that reads the file of a given process. I/O errors are
//! returned as they come: callers decide whether "not found" means "the process
//! is gone" ([`is_gone`]).

use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// Access rights and sharing of one mapping, as the four `rwxp` letters say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Perms {
    /// Readable (`r`).
    pub read: bool,
    /// Writable (`w`).
    pub write: bool,
    /// Executable (`x`).
    pub exec: bool,
    /// Private copy-on-write (`p`) rather than shared (`s`).
    pub private: bool,
}

impl Perms {
    /// Parses the `rwxp` column; unknown letters read as "not set".
    pub fn parse(s: &str) -> Perms {
        let b = s.as_bytes();
        let at = |i: usize, c: u8| b.get(i) == Some(&c);
        Perms {
            read: at(0, b'r'),
            write: at(1, b'w'),
            exec: at(2, b'x'),
            private: at(3, b'p'),
        }
    }
}

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    /// First address of the mapping.
    pub start: u64,
    /// One past the last address of the mapping.
    pub end: u64,
    /// Access rights.
    pub perms: Perms,
    /// Offset into the mapped file (0 for anonymous mappings).
    pub offset: u64,
    /// Inode of the mapped file (0 for anonymous mappings).
    pub inode: u64,
    /// The path column: a file path, a pseudo name such as `[stack]`, or empty.
    pub path: String,
}

impl MapEntry {
    /// The address range `start..end`.
    pub fn range(&self) -> Range<u64> {
        self.start..self.end
    }

    /// True when the mapping is backed by a file (an absolute path with an inode).
    pub fn is_file(&self) -> bool {
        self.inode != 0 && self.path.starts_with('/')
    }

    /// True when the mapping is a perf JIT dump marker, `jit-PID.dump`: a JIT
    /// (argstash's hooks among them) maps its dump file executable only so that
    /// `perf inject --jit` finds it; no code runs there and it is no ELF file.
    pub fn is_jitdump_marker(&self) -> bool {
        let name = self.path.rsplit('/').next().unwrap_or("");
        name.strip_prefix("jit-")
            .and_then(|rest| rest.strip_suffix(".dump"))
            .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
    }

    /// True when `addr` lies inside the mapping.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr < self.end
    }

    /// True when the mapping is of the C library's file (`libc.so.6`, `libc-2.31.so`).
    pub fn is_libc(&self) -> bool {
        self.is_file() && is_libc_file(self.file_path().rsplit('/').next().unwrap_or(""))
    }

    /// The mapped file's path with a trailing ` (deleted)` removed.
    pub fn file_path(&self) -> &str {
        self.path.strip_suffix(" (deleted)").unwrap_or(&self.path)
    }
}

/// True for the C library's file name (`libc.so.6`, `libc-2.31.so`; not `libcrypt.so`).
pub fn is_libc_file(name: &str) -> bool {
    name.starts_with("libc.so") || name.starts_with("libc-")
}

/// The path through which process `pid`'s mapped file `path` (as its `maps` shows
/// it) is opened: `/proc/PID/root` followed by the path inside the process's root.
///
/// `maps` paths are written relative to the *reader's* root, so for a process
/// chrooted into `/srv/jail`, read from outside, they start with `/srv/jail/`;
/// that prefix (the `/proc/PID/root` link's target as this process sees it) is
/// removed first. Without it `/proc/PID/root/srv/jail/...` would name a file that
/// does not exist.
pub fn path_in_root(pid: i32, path: &str) -> String {
    let root = std::fs::read_link(format!("/proc/{pid}/root")).ok();
    let root = root.as_ref().and_then(|r| r.to_str());
    format!("/proc/{pid}/root{}", strip_root(root, path))
}

/// `path` without the process root `root` (as [`path_in_root`] uses it): unchanged
/// when `root` is `/`, unknown, or not a leading component of `path`.
pub fn strip_root<'a>(root: Option<&str>, path: &'a str) -> &'a str {
    let Some(root) = root
        .map(|r| r.trim_end_matches('/'))
        .filter(|r| !r.is_empty())
    else {
        return path;
    };
    match path.strip_prefix(root) {
        Some(rest) if rest.starts_with('/') => rest,
        _ => path,
    }
}

/// The `(type, value)` pairs of an auxiliary vector (`/proc/PID/auxv`, `NT_AUXV`).
pub fn parse_auxv(bytes: &[u8]) -> Vec<(u64, u64)> {
    let word = |c: &[u8], at: usize| u64::from_le_bytes(c[at..at + 8].try_into().unwrap_or([0; 8]));
    bytes
        .chunks_exact(16)
        .map(|c| (word(c, 0), word(c, 8)))
        .collect()
}

/// Parses the text of a maps file; malformed lines are skipped.
pub fn parse_maps(text: &str) -> Vec<MapEntry> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<MapEntry> {
    let mut rest = line;
    let mut field = || {
        let r = rest.trim_start();
        let end = r.find(' ').unwrap_or(r.len());
        let (f, tail) = r.split_at(end);
        rest = tail;
        f
    };
    let range = field();
    let perms = field();
    let offset = field();
    let _dev = field();
    let inode = field();
    let path = rest.trim_start().to_string();
    let (start, end) = range.split_once('-')?;
    Some(MapEntry {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms: Perms::parse(perms),
        offset: u64::from_str_radix(offset, 16).ok()?,
        inode: inode.parse().ok()?,
        path,
    })
}

/// Reads and parses `/proc/PID/maps`.
pub fn read_maps(pid: i32) -> std::io::Result<Vec<MapEntry>> {
    Ok(parse_maps(&std::fs::read_to_string(format!(
        "/proc/{pid}/maps"
    ))?))
}

/// Reads and parses `/proc/PID/task/TID/maps`: the same address space seen through
/// one thread (a live thread still shows it after the group leader has exited).
pub fn read_task_maps(pid: i32, tid: i32) -> std::io::Result<Vec<MapEntry>> {
    Ok(parse_maps(&std::fs::read_to_string(format!(
        "/proc/{pid}/task/{tid}/maps"
    ))?))
}

/// True while `/proc/PID` exists (a zombie not yet reaped still has it).
pub fn exists(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// True while `/proc/PID/task/TID` exists: `tid` is a thread of `pid`.
pub fn task_exists(pid: i32, tid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists()
}

/// True for the errors `/proc` gives when the process or thread is not there (any more).
pub fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

/// The fields of `/proc/PID/stat` argstash uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stat {
    /// The command name (field 2, without its parentheses).
    pub comm: String,
    /// The state letter (field 3: `R`, `S`, `D`, `T`, `t`, `Z`, `X`, ...).
    pub state: char,
    /// The parent process (field 4).
    pub ppid: i32,
    /// The kernel's `PF_*` flags (field 9).
    pub flags: u64,
    /// When the process started, in clock ticks since boot (field 22): with the
    /// pid, the identity of a process (a reused pid has another start time).
    pub start_time: u64,
    /// The CPU it last ran on or is queued on (field 39; `None` on a short line).
    pub cpu: Option<u32>,
}

/// `PF_KTHREAD` in [`Stat::flags`]: the task is a kernel thread.
pub const PF_KTHREAD: u64 = 0x0020_0000;
/// `PF_EXITING` in [`Stat::flags`]: the task has started to exit (set first
/// thing when it exits, before its memory is let go; it never runs user code again).
pub const PF_EXITING: u64 = 0x0000_0004;

impl Stat {
    /// True for a kernel thread (no user space).
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }

    /// True for a zombie or dead task.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }

    /// True for a task that is exiting or has exited: it runs no user code again.
    pub fn is_exiting(&self) -> bool {
        self.is_dead() || self.flags & PF_EXITING != 0
    }
}

/// Parses the text of a `stat` file; `None` when it is malformed.
///
/// The command name may hold spaces and parentheses, so the fields after it are
/// counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
    Some(Stat {
        comm,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        flags: fields.get(6)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
        cpu: fields.get(36).and_then(|f| f.parse().ok()),
    })
}

/// Reads `/proc/ID/stat` (`id` a process or a thread id: every thread has its own entry).
pub fn read_stat(id: i32) -> io::Result<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{id}/stat"))?;
    parse_stat(&text).ok_or_else(|| malformed(&format!("/proc/{id}/stat")))
}

/// The fields of `/proc/PID/status` argstash uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    /// `Name`: the command name.
    pub name: String,
    /// `State`: the state letter.
    pub state: char,
    /// `Tgid`: the process a thread belongs to.
    pub tgid: i32,
    /// `TracerPid`: who ptraces it (0: nobody).
    pub tracer: i32,
    /// `Threads`: how many threads the process has.
    pub threads: u32,
    /// `SigIgn`: the ignored signals (bit `sig - 1`).
    pub sig_ignored: u64,
}

impl Status {
    /// True when the process ignores signal `sig` (`SIG_IGN`).
    pub fn ignores(&self, sig: i32) -> bool {
        (1..=64).contains(&sig) && self.sig_ignored & (1 << (sig - 1)) != 0
    }
}

/// Parses the text of a `status` file; missing or malformed fields stay at their default.
pub fn parse_status(text: &str) -> Status {
    let mut s = Status::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "Name" => s.name = value.to_string(),
            "State" => s.state = value.chars().next().unwrap_or('?'),
            "Tgid" => s.tgid = value.parse().unwrap_or(0),
            "TracerPid" => s.tracer = value.parse().unwrap_or(0),
            "Threads" => s.threads = value.parse().unwrap_or(0),
            "SigIgn" => s.sig_ignored = u64::from_str_radix(value, 16).unwrap_or(0),
            _ => {}
        }
    }
    s
}

/// Reads `/proc/PID/status`.
pub fn read_status(pid: i32) -> io::Result<Status> {
    Ok(parse_status(&std::fs::read_to_string(format!(
        "/proc/{pid}/status"
    ))?))
}

/// Reads `/proc/PID/task/TID/status` (one thread's view: its own state and tracer).
pub fn read_task_status(pid: i32, tid: i32) -> io::Result<Status> {
    Ok(parse_status(&std::fs::read_to_string(format!(
        "/proc/{pid}/task/{tid}/status"
    ))?))
}

/// Parses a `comm` file: the name without its newline.
pub fn parse_comm(text: &str) -> String {
    text.trim().to_string()
}

/// Reads `/proc/PID/comm`.
pub fn read_comm(pid: i32) -> io::Result<String> {
    Ok(parse_comm(&std::fs::read_to_string(format!(
        "/proc/{pid}/comm"
    ))?))
}

/// Reads `/proc/PID/task/TID/comm`: a thread's name.
pub fn read_task_comm(pid: i32, tid: i32) -> io::Result<String> {
    Ok(parse_comm(&std::fs::read_to_string(format!(
        "/proc/{pid}/task/{tid}/comm"
    ))?))
}

/// The thread ids among directory entry names (those that are numbers), sorted.
pub fn parse_task_ids<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Vec<i32> {
    let mut tids: Vec<i32> = names
        .into_iter()
        .filter_map(|n| n.as_ref().parse().ok())
        .collect();
    tids.sort_unstable();
    tids
}

/// Lists `/proc/PID/task`: the process's thread ids, ascending (the leader is the pid).
pub fn read_task_ids(pid: i32) -> io::Result<Vec<i32>> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task"))?;
    Ok(parse_task_ids(dir.filter_map(|e| {
        e.ok()?.file_name().to_str().map(str::to_string)
    })))
}

/// The word size of an ELF file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElfClass {
    /// `ELFCLASS32`: a 32-bit program (i386 here).
    Elf32,
    /// `ELFCLASS64`: a 64-bit program.
    Elf64,
}

/// The class of an ELF file from its first bytes (`e_ident`); `None` when it is not ELF.
pub fn parse_elf_class(ident: &[u8]) -> Option<ElfClass> {
    if ident.len() < 5 || ident[..4] != *b"\x7fELF" {
        return None;
    }
    match ident[4] {
        1 => Some(ElfClass::Elf32),
        2 => Some(ElfClass::Elf64),
        _ => None,
    }
}

/// Path of `/proc/PID/exe` (the link to the executable).
pub fn exe_path(pid: i32) -> String {
    format!("/proc/{pid}/exe")
}

/// Opens `/proc/PID/exe`: the executable itself, even when its path is gone or
/// in another mount namespace. Fails with `EACCES`/`EPERM` when the kernel hides
/// it (another user's or a non-dumpable process).
pub fn open_exe(pid: i32) -> io::Result<std::fs::File> {
    std::fs::File::open(exe_path(pid))
}

/// The ELF class of an opened executable; `None` when it is not ELF or unreadable.
pub fn exe_class(exe: &std::fs::File) -> Option<ElfClass> {
    let mut ident = [0u8; 5];
    exe.read_exact_at(&mut ident, 0).ok()?;
    parse_elf_class(&ident)
}

/// Reads the ELF class of `/proc/PID/exe`: `Ok(None)` when it is not ELF or not readable.
pub fn read_exe_class(pid: i32) -> io::Result<Option<ElfClass>> {
    Ok(exe_class(&open_exe(pid)?))
}

/// Reads where `/proc/PID/exe` points (the executable's path as the process sees it).
pub fn read_exe_link(pid: i32) -> io::Result<PathBuf> {
    std::fs::read_link(exe_path(pid))
}

/// Reads and parses `/proc/PID/auxv`.
pub fn read_auxv(pid: i32) -> io::Result<Vec<(u64, u64)>> {
    Ok(parse_auxv(&std::fs::read(format!("/proc/{pid}/auxv"))?))
}

/// Parses a thread's `syscall` file: the number of the system call it is blocked
/// in, `-1` when it is in user space, `None` when running or unreadable.
pub fn parse_syscall(text: &str) -> Option<i64> {
    text.split_whitespace().next()?.parse().ok()
}

/// Reads `/proc/PID/task/TID/syscall` (see [`parse_syscall`]).
pub fn read_task_syscall(pid: i32, tid: i32) -> Option<i64> {
    parse_syscall(&std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?)
}

/// What a thread's `syscall` file says about it: the kernel's own record of
/// where a thread off the CPU left user space (`nr arg1..arg6 sp pc`, `-1 sp pc`
/// or `running`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskSyscall {
    /// On a CPU or about to be (`running`): nothing is stable to read.
    Running,
    /// Off the CPU inside system call `nr` (called with `args`); `sp` and `pc`
    /// are its user stack and instruction pointers (`pc` just after the system
    /// call instruction).
    Blocked {
        /// The system call number.
        nr: u64,
        /// Its six arguments.
        args: [u64; 6],
        /// The user stack pointer.
        sp: u64,
        /// The user instruction pointer.
        pc: u64,
    },
    /// Off the CPU but not in a system call (`-1 sp pc`: stopped, or waiting in a
    /// page fault).
    Other {
        /// The user stack pointer.
        sp: u64,
        /// The user instruction pointer.
        pc: u64,
    },
}

/// The name of x86-64 system call `nr`, for the calls a thread is commonly
/// found blocked in; `None` for the others (shown by number).
pub fn x86_64_syscall_name(nr: u64) -> Option<&'static str> {
    Some(match nr {
        0 => "read",
        1 => "write",
        7 => "poll",
        17 => "pread64",
        18 => "pwrite64",
        19 => "readv",
        20 => "writev",
        23 => "select",
        34 => "pause",
        35 => "nanosleep",
        42 => "connect",
        43 => "accept",
        44 => "sendto",
        45 => "recvfrom",
        46 => "sendmsg",
        47 => "recvmsg",
        61 => "wait4",
        72 => "fcntl",
        73 => "flock",
        128 => "rt_sigtimedwait",
        130 => "rt_sigsuspend",
        202 => "futex",
        230 => "clock_nanosleep",
        232 => "epoll_wait",
        247 => "waitid",
        270 => "pselect6",
        271 => "ppoll",
        281 => "epoll_pwait",
        288 => "accept4",
        441 => "epoll_pwait2",
        _ => return None,
    })
}

fn hex_word(w: &str) -> Option<u64> {
    u64::from_str_radix(w.strip_prefix("0x")?, 16).ok()
}

/// Parses the whole of a thread's `syscall` file (see [`TaskSyscall`]); `None`
/// when it is malformed.
pub fn parse_task_syscall(text: &str) -> Option<TaskSyscall> {
    let words: Vec<&str> = text.split_whitespace().collect();
    match words.as_slice() {
        ["running"] => Some(TaskSyscall::Running),
        ["-1", sp, pc] => Some(TaskSyscall::Other {
            sp: hex_word(sp)?,
            pc: hex_word(pc)?,
        }),
        [nr, a0, a1, a2, a3, a4, a5, sp, pc] => Some(TaskSyscall::Blocked {
            nr: nr.parse().ok()?,
            args: [
                hex_word(a0)?,
                hex_word(a1)?,
                hex_word(a2)?,
                hex_word(a3)?,
                hex_word(a4)?,
                hex_word(a5)?,
            ],
            sp: hex_word(sp)?,
            pc: hex_word(pc)?,
        }),
        _ => None,
    }
}

/// Reads `/proc/PID/task/TID/syscall` whole (see [`TaskSyscall`]); `None` when
/// the thread is gone or the file unreadable (a kernel without it).
pub fn read_task_syscall_state(pid: i32, tid: i32) -> Option<TaskSyscall> {
    parse_task_syscall(&std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?)
}

/// How often a thread has been put on and taken off a CPU: unchanged between
/// two reads, the thread ran no instruction in between (any run starts with a
/// slice and ends with a context switch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunCount {
    /// Slices on a CPU (`schedstat`'s third field), when the kernel keeps them.
    pub slices: Option<u64>,
    /// `voluntary_ctxt_switches` of its `status`.
    pub voluntary: u64,
    /// `nonvoluntary_ctxt_switches` of its `status`.
    pub involuntary: u64,
}

/// The context-switch counts of a `status` file's text: (voluntary, involuntary).
pub fn parse_switches(text: &str) -> Option<(u64, u64)> {
    let mut voluntary = None;
    let mut involuntary = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key {
            "voluntary_ctxt_switches" => voluntary = value.trim().parse().ok(),
            "nonvoluntary_ctxt_switches" => involuntary = value.trim().parse().ok(),
            _ => {}
        }
    }
    Some((voluntary?, involuntary?))
}

/// Reads thread `tid`'s [`RunCount`] (its `status` and `schedstat`); `None` when
/// the thread is gone or its `status` has no switch counts.
pub fn read_task_run_count(pid: i32, tid: i32) -> Option<RunCount> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
    let (voluntary, involuntary) = parse_switches(&status)?;
    let slices = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
        .ok()
        .and_then(|t| parse_schedstat(&t))
        .map(|s| s.slices);
    Some(RunCount {
        slices,
        voluntary,
        involuntary,
    })
}

/// A thread's scheduler statistics (`/proc/ID/schedstat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SchedStat {
    /// Time spent on a CPU, in nanoseconds.
    pub run_ns: u64,
    /// Time spent runnable but waiting for a CPU, in nanoseconds.
    pub wait_ns: u64,
    /// How many times the thread was put on a CPU: unchanged between two reads
    /// means it did not leave its CPU (or did not run) in between.
    pub slices: u64,
}

/// Parses the text of a `schedstat` file (`run_ns wait_ns slices`).
pub fn parse_schedstat(text: &str) -> Option<SchedStat> {
    let mut f = text.split_whitespace().map(|w| w.parse::<u64>().ok());
    Some(SchedStat {
        run_ns: f.next()??,
        wait_ns: f.next()??,
        slices: f.next()??,
    })
}

/// Reads `/proc/ID/schedstat` (`id` a process or a thread id); `None` when the
/// thread is gone or the kernel keeps no such statistics.
pub fn read_schedstat(id: i32) -> Option<SchedStat> {
    parse_schedstat(&std::fs::read_to_string(format!("/proc/{id}/schedstat")).ok()?)
}

fn malformed(path: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("malformed {path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_schedstat() {
        assert_eq!(
            parse_schedstat("51016531 3489002 130\n"),
            Some(SchedStat {
                run_ns: 51016531,
                wait_ns: 3489002,
                slices: 130
            })
        );
        assert_eq!(parse_schedstat("1 2"), None);
        assert_eq!(parse_schedstat("1 x 3"), None);
    }

    #[test]
    fn jit_dump_markers_are_named_by_perfs_convention() {
        let text = "\
7f0000000000-7f0000001000 r-xp 00000000 fe:01 77 /tmp/jit-4242.dump
7f0000001000-7f0000002000 r-xp 00000000 fe:01 78 /opt/jit-.dump
7f0000002000-7f0000003000 r-xp 00000000 fe:01 79 /opt/jit-12x.dump
7f0000003000-7f0000004000 r-xp 00000000 fe:01 80 /usr/lib/libjit-1.so
";
        let marks: Vec<bool> = parse_maps(text)
            .iter()
            .map(MapEntry::is_jitdump_marker)
            .collect();
        assert_eq!(marks, [true, false, false, false]);
    }

    #[test]
    fn parses_file_anon_and_pseudo_lines() {
        let text = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 fe:01 1234                       /opt/app/prog
55d0c0a01000-55d0c0a02000 r-xp 00001000 fe:01 1234                       /opt/app/prog (deleted)
7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]
7f0000000000-7f0000001000 r-xp 00000000 00:00 0 
garbage line
";
        let m = parse_maps(text);
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].start, 0x55d0c0a00000);
        assert_eq!(m[0].path, "/opt/app/prog");
        assert!(m[0].is_file() && !m[0].perms.exec);
        assert!(m[1].perms.exec && m[1].perms.private);
        assert_eq!(m[1].offset, 0x1000);
        assert_eq!(m[1].file_path(), "/opt/app/prog");
        assert_eq!(m[2].path, "[stack]");
        assert!(!m[2].is_file());
        assert_eq!(m[3].path, "");
        assert!(m[3].contains(0x7f0000000fff) && !m[3].contains(0x7f0000001000));
    }

    #[test]
    fn reads_own_maps() {
        let m = read_maps(std::process::id() as i32).unwrap();
        let here = reads_own_maps as fn() as usize as u64;
        assert!(m.iter().any(|e| e.contains(here) && e.perms.exec));
    }
    #[test]
    fn stat_fields_count_from_the_last_parenthesis() {
        let text = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 97 0 0 0 0 0 0 0 20 0 1 0 123456 1000 100 ...\n";
        let st = parse_stat(text).unwrap();
        assert_eq!(st.comm, "a (b) c");
        assert_eq!(st.state, 'S');
        assert_eq!(st.ppid, 1);
        assert_eq!(st.flags, 4194560);
        assert_eq!(st.start_time, 123456);
        assert_eq!(st.cpu, None);
        let full = "9 (w) R 1 0 0 0 0 4194304 0 0 0 0 0 0 0 0 0 0 0 0 77 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        assert_eq!(parse_stat(full).unwrap().cpu, Some(1));
        assert!(!st.is_kernel_thread() && !st.is_dead());
        let kthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0\n";
        assert!(parse_stat(kthread).unwrap().is_kernel_thread());
        let zombie = "7 (z) Z 1 7 7 0 -1 4194316 0 0 0 0 0 0 0 0 20 0 1 0 9 0 0\n";
        assert!(parse_stat(zombie).unwrap().is_dead());
        assert!(parse_stat(zombie).unwrap().is_exiting());
        // Killed, its memory being let go: still `R`, with PF_EXITING (0x4).
        let exiting = "7 (x) R 1 7 7 0 -1 4194372 0 0 0 0 0 0 0 0 20 0 1 0 9 0 0\n";
        let exiting = parse_stat(exiting).unwrap();
        assert!(exiting.is_exiting() && !exiting.is_dead());
        assert!(!parse_stat(kthread).unwrap().is_exiting());
        assert_eq!(parse_stat("7 (short) R 1 2"), None);
        assert_eq!(parse_stat("no parentheses"), None);
    }

    #[test]
    fn status_fields() {
        let text = "Name:\tprog\nUmask:\t0022\nState:\tt (tracing stop)\nTgid:\t100\nPid:\t101\n\
                    TracerPid:\t55\nThreads:\t3\nSigIgn:\t0000000000000020\nSigCgt:\t0\n";
        let st = parse_status(text);
        assert_eq!(st.name, "prog");
        assert_eq!(st.state, 't');
        assert_eq!((st.tgid, st.tracer, st.threads), (100, 55, 3));
        assert!(st.ignores(6) && !st.ignores(5) && !st.ignores(0) && !st.ignores(65));
        assert_eq!(parse_status(""), Status::default());
    }

    #[test]
    fn comm_task_ids_syscall_and_elf_class() {
        assert_eq!(parse_comm("worker 1\n"), "worker 1");
        assert_eq!(
            parse_task_ids(["12", "3", ".", "x", "100"]),
            vec![3, 12, 100]
        );
        assert_eq!(
            parse_syscall("230 0x1 0x0 0x7ffc 0x0 0x0 0x0 0x7ffc 0x7f\n"),
            Some(230)
        );
        assert_eq!(parse_syscall("-1 0x7ffc 0x55\n"), Some(-1));
        assert_eq!(parse_syscall("running\n"), None);
        assert_eq!(
            parse_task_syscall("230 0x1 0x0 0x7ffc 0x0 0x0 0x0 0x7ffd10 0x7f0a\n"),
            Some(TaskSyscall::Blocked {
                nr: 230,
                args: [1, 0, 0x7ffc, 0, 0, 0],
                sp: 0x7ffd10,
                pc: 0x7f0a
            })
        );
        assert_eq!(
            parse_task_syscall("-1 0x7ffc 0x55\n"),
            Some(TaskSyscall::Other {
                sp: 0x7ffc,
                pc: 0x55
            })
        );
        assert_eq!(parse_task_syscall("running\n"), Some(TaskSyscall::Running));
        assert_eq!(parse_task_syscall("1 0x1 0x2\n"), None);
        assert_eq!(
            parse_switches(
                "Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n"
            ),
            Some((12, 3))
        );
        assert_eq!(parse_switches("Name:\tx\n"), None);
        assert_eq!(parse_elf_class(b"\x7fELF\x01\x01"), Some(ElfClass::Elf32));
        assert_eq!(parse_elf_class(b"\x7fELF\x02"), Some(ElfClass::Elf64));
        assert_eq!(parse_elf_class(b"#!/bin/sh"), None);
        assert_eq!(parse_elf_class(b"\x7fEL"), None);
    }

    #[test]
    fn auxv_pairs() {
        let mut bytes = Vec::new();
        for (k, v) in [(33u64, 0x7ffd_1000u64), (6, 4096), (0, 0)] {
            bytes.extend_from_slice(&k.to_le_bytes());
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes.extend_from_slice(&[1, 2, 3]);
        assert_eq!(
            parse_auxv(&bytes),
            vec![(33, 0x7ffd_1000), (6, 4096), (0, 0)]
        );
    }

    #[test]
    fn reads_own_process() {
        let pid = std::process::id() as i32;
        let stat = read_stat(pid).unwrap();
        assert!(stat.start_time > 0 && !stat.is_kernel_thread());
        let status = read_status(pid).unwrap();
        assert_eq!(status.tgid, pid);
        assert_eq!(stat.comm, read_comm(pid).unwrap());
        let tids = read_task_ids(pid).unwrap();
        // The leader is listed, though not always first: after pid numbers wrap, a
        // thread's tid can be smaller than its leader's.
        assert!(tids.contains(&pid), "{tids:?}");
        assert_eq!(read_task_status(pid, pid).unwrap().tgid, pid);
        assert_eq!(read_exe_class(pid).unwrap(), Some(ElfClass::Elf64));
        assert_eq!(
            read_exe_link(pid).unwrap(),
            std::fs::read_link("/proc/self/exe").unwrap()
        );
        assert!(read_auxv(pid).unwrap().iter().any(|(k, _)| *k == 6));
        assert!(read_task_ids(-1).is_err_and(|e| is_gone(&e)));
        assert!(read_stat(i32::MAX).is_err_and(|e| is_gone(&e)));
        assert!(exists(pid) && task_exists(pid, pid));
        assert!(!exists(i32::MAX) && !task_exists(pid, i32::MAX));
        let here = reads_own_process as fn() as usize as u64;
        assert!(read_task_maps(pid, pid)
            .unwrap()
            .iter()
            .any(|m| m.contains(here)));
        assert!(read_task_maps(pid, i32::MAX).is_err_and(|e| is_gone(&e)));
    }

    #[test]
    fn chroot_prefix_is_removed() {
        let lib = "/var/cache/argstash-sid/root/usr/lib/x86_64-linux-gnu/libc.so.6";
        let root = Some("/var/cache/argstash-sid/root");
        assert_eq!(strip_root(root, lib), "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(
            strip_root(Some("/var/cache/argstash-sid/root/"), lib),
            "/usr/lib/x86_64-linux-gnu/libc.so.6"
        );
        assert_eq!(
            strip_root(Some("/"), "/usr/lib/libc.so.6"),
            "/usr/lib/libc.so.6"
        );
        assert_eq!(strip_root(None, "/usr/lib/libc.so.6"), "/usr/lib/libc.so.6");
        // A sibling directory sharing the prefix's letters is not inside the root.
        assert_eq!(
            strip_root(Some("/srv/jail"), "/srv/jail2/lib/libc.so.6"),
            "/srv/jail2/lib/libc.so.6"
        );
        // A process not chrooted: its maps paths already name files inside its root.
        let me = std::process::id() as i32;
        assert_eq!(
            path_in_root(me, "/usr/lib/libc.so.6"),
            format!("/proc/{me}/root/usr/lib/libc.so.6")
        );
    }
}
