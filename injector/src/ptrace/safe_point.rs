//! Safe points: when a stopped thread of the target may be borrowed to run one of the
//! target's own functions (`dlopen`, libgcc's `__register_frame_info`, ...).
//!
//! Such a function allocates memory and takes the loader's, the allocator's or
//! libgcc's locks. Run on a thread that is in the middle of any of those (inside
//! `malloc`, between two updates of a free list, holding the loader lock), it corrupts
//! the heap or deadlocks the process; a single-threaded process takes no lock at all
//! in `malloc`, so no timeout would even notice. So a thread is borrowed only where it
//! is *proved* to be outside all of that code, from its own stack:
//!
//! - its stack is unwound completely (CFI, from the innermost frame to the thread's
//!   first one); a stack that cannot be unwound proves nothing and is refused;
//! - every frame is classified by the module its pc lies in. *Guarded* modules are
//!   the C library (with `libpthread`/`libdl` of older glibc), the dynamic loader,
//!   libgcc's unwinder, and any other module that defines `malloc` or `free` (an
//!   allocator such as jemalloc or tcmalloc). Code elsewhere (the program, its other
//!   libraries, hook trampolines) cannot be in the middle of the state the call uses;
//! - guarded frames are allowed only in two places: at the outer end, the thread's
//!   start (`__libc_start_main`/`__libc_start_call_main`, `clone3`/`start_thread`,
//!   at most two frames), and at the inner end, a chain of known *waiting* functions
//!   (`read`, `nanosleep`, `poll`, `pthread_cond_wait`, ... by symbol name; see
//!   [`WAITING_FUNCTIONS`]) that hold no lock of their own while the thread waits,
//!   optionally called from stdio's buffered reads and writes ([`STDIO_FUNCTIONS`],
//!   `_IO_*`: `fgets` waiting in `read`, `printf` waiting in `write`). A stream's
//!   lock may be held there, but no call argstash makes touches stdio, and stdio
//!   allocates its buffers before, not while, it waits;
//! - when the C library has no symbol table (only `.dynsym`, as Debian's stripped
//!   libc), the innermost frames of a waiting thread are often unnamed: glibc's
//!   system-call stubs (`__syscall_cancel_arch`, `__internal_syscall_cancel`,
//!   `__futex_abstimed_wait_common`) are hidden. Up to [`MAX_STUB_FRAMES`] unnamed
//!   frames are then accepted at the inner end when other facts prove what they are
//!   ([`WaitingSyscall`]): the kernel reports the thread in a *waiting* system call
//!   ([`WAITING_SYSCALLS`], from `/proc/PID/task/TID/syscall`, checked against the
//!   stopped thread's `orig_rax` and `rip`), the innermost frame's pc is right after
//!   that `syscall` instruction (the bytes `0f 05` before it are read), and the first
//!   named frame outward, in the same module, is a waiting function by its `.dynsym`
//!   name whose system call it is (`clock_nanosleep` for `clock_nanosleep`,
//!   `pthread_cond_wait` for `futex`, ...). The unnamed frames are then that waiting
//!   function's own stubs: it took no lock before calling them, and they take none.
//!   A `futex` wait is accepted only as `FUTEX_WAIT`/`FUTEX_WAIT_BITSET` on a word
//!   outside the guarded modules' data (libc's arenas and locks, the loader's
//!   `_rtld_global`, libgcc's object mutex all live there): a thread waiting for one
//!   of those locks could be woken holding it;
//! - anything else (a guarded frame in the middle, an unnamed guarded frame) makes the
//!   thread unsafe at this instant.
//!
//! A thread that is unsafe now is usually safe a moment later (a loop around `malloc`
//! spends part of its time in the program's own code), so [`borrow_at_safe_point`]
//! samples every thread repeatedly for a bounded time. When none is found the call is
//! not made, and the caller says what was skipped.
//!
//! What this cannot see: an allocator linked statically into the program without
//! exporting `malloc` (its frames look like the program's own). `--unwind-registration
//! off` avoids every call in the target for such programs.

use std::fmt;
use std::ops::Range;
use std::time::{Duration, Instant};

use crate::memory::Memory;
use crate::ptrace::session::Session;
use crate::ptrace::session_error::SessionError;
use reader::procfs::{read_maps, MapEntry};
use reader::symbols::ProcessSymbols;
use reader::unwind::{Frame, FrameKind, Unwinder};

/// Guarded frames allowed at the outer end of a stack (the thread's start in libc).
const MAX_START_FRAMES: usize = 2;

/// Guarded frames allowed at the inner end (a chain of waiting and stdio functions).
const MAX_WAIT_FRAMES: usize = 12;

/// Unnamed guarded frames allowed below a named waiting function, when a
/// [`WaitingSyscall`] proves them to be its system-call stubs (glibc 2.41+ has at
/// most three: `__syscall_cancel_arch`, `__internal_syscall_cancel`, and a futex helper).
pub const MAX_STUB_FRAMES: usize = 3;

/// System calls a thread waits in without holding a lock of the C library, the
/// loader or libgcc *because of the system call*: sleeps, polls, blocking I/O,
/// waits for children and signals. (`futex` is judged apart: see [`WaitingSyscall`].)
/// Memory-management calls (`mmap`, `brk`, `madvise`, ...) are never here: malloc
/// makes them holding its arena lock.
pub const WAITING_SYSCALLS: &[i64] = &[
    libc::SYS_read,
    libc::SYS_readv,
    libc::SYS_pread64,
    libc::SYS_preadv,
    libc::SYS_preadv2,
    libc::SYS_write,
    libc::SYS_writev,
    libc::SYS_pwrite64,
    libc::SYS_pwritev,
    libc::SYS_recvfrom,
    libc::SYS_recvmsg,
    libc::SYS_recvmmsg,
    libc::SYS_sendto,
    libc::SYS_sendmsg,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_connect,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_select,
    libc::SYS_pselect6,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_wait4,
    libc::SYS_waitid,
    libc::SYS_pause,
    libc::SYS_rt_sigsuspend,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_msgrcv,
    libc::SYS_msgsnd,
    libc::SYS_semtimedop,
    libc::SYS_mq_timedreceive,
    libc::SYS_io_getevents,
    libc::SYS_flock,
    libc::SYS_futex,
];

/// `futex` operations that wait for a word to change (`FUTEX_WAIT`,
/// `FUTEX_WAIT_BITSET`): condition variables, semaphores, joins and user mutexes.
/// The priority-inheritance lock operations are left out (they take ownership).
const FUTEX_WAIT_OPS: &[u64] = &[0, 9];

/// `futex` op bits that do not change the operation (`FUTEX_PRIVATE_FLAG`, `FUTEX_CLOCK_REALTIME`).
const FUTEX_OP_FLAGS: u64 = 128 | 256;

/// Functions of the C library that hold no lock of their own while their thread
/// waits in them, compared after [`bare_name`] removes glibc's prefixes and suffixes.
pub const WAITING_FUNCTIONS: &[&str] = &[
    "read",
    "pread",
    "readv",
    "preadv",
    "preadv2",
    "write",
    "pwrite",
    "writev",
    "pwritev",
    "recv",
    "recvfrom",
    "recvmsg",
    "recvmmsg",
    "send",
    "sendto",
    "sendmsg",
    "accept",
    "accept4",
    "connect",
    "nanosleep",
    "clock_nanosleep",
    "sleep",
    "usleep",
    "poll",
    "ppoll",
    "select",
    "pselect",
    "pselect6",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "wait",
    "waitpid",
    "wait3",
    "wait4",
    "waitid",
    "pause",
    "sigsuspend",
    "sigwait",
    "sigwaitinfo",
    "sigtimedwait",
    "msgrcv",
    "msgsnd",
    "semop",
    "semtimedop",
    "mq_receive",
    "mq_timedreceive",
    "io_getevents",
    "flock",
    "pthread_join",
    "pthread_clockjoin_ex",
    "pthread_timedjoin_np",
    "pthread_cond_wait",
    "pthread_cond_timedwait",
    "pthread_cond_clockwait",
    "pthread_cond_wait_common",
    "futex_abstimed_wait_common",
    "futex_abstimed_wait_cancelable",
    "futex_abstimed_wait",
    "futex_wait",
    "do_futex_wait",
    "sem_wait",
    "sem_timedwait",
    "sem_clockwait",
    "new_sem_wait_slow",
    "pthread_mutex_lock",
    "pthread_mutex_timedlock",
    "pthread_mutex_clocklock",
    "lll_lock_wait",
    "pthread_rwlock_rdlock",
    "pthread_rwlock_wrlock",
];

/// stdio functions of the C library that reach the waiting functions through the
/// stream's buffer code (any `_IO_*` function counts as well).
pub const STDIO_FUNCTIONS: &[&str] = &[
    "fgets",
    "fgets_unlocked",
    "fgetc",
    "getc",
    "getchar",
    "fread",
    "fread_unlocked",
    "getline",
    "getdelim",
    "fscanf",
    "scanf",
    "isoc99_fscanf",
    "isoc99_scanf",
    "vfscanf",
    "vfscanf_internal",
    "uflow",
    "underflow",
    "overflow",
    "fwrite",
    "fwrite_unlocked",
    "fputs",
    "fputs_unlocked",
    "puts",
    "fputc",
    "putc",
    "putchar",
    "printf",
    "fprintf",
    "dprintf",
    "vprintf",
    "vfprintf",
    "vfprintf_internal",
    "vdprintf",
    "printf_positional",
    "printf_buffer_flush",
    "printf_buffer_flush_to_file",
    "printf_buffer_to_file_done",
    "fflush",
    "fflush_unlocked",
    "new_do_write",
    "new_file_write",
    "new_file_xsputn",
    "new_file_overflow",
    "new_file_underflow",
    "new_file_sync",
    "file_xsputn",
    "file_overflow",
    "file_underflow",
    "file_write",
    "file_sync",
];

/// True for a stdio function ([`STDIO_FUNCTIONS`] or any `_IO_*`).
fn is_stdio_function(name: &str) -> bool {
    let bare = bare_name(name);
    bare.starts_with("IO_") || STDIO_FUNCTIONS.contains(&bare)
}

/// A symbol name without glibc's internal decorations: `__GI___nanosleep`,
/// `__libc_read`, `___pthread_cond_wait`, `__futex_abstimed_wait_common64` and
/// `__clock_nanosleep_time64` become `nanosleep`, `read`, `pthread_cond_wait`,
/// `futex_abstimed_wait_common` and `clock_nanosleep`.
pub fn bare_name(name: &str) -> &str {
    let mut n = name.split('@').next().unwrap_or(name);
    loop {
        let before = n;
        for prefix in ["__GI_", "__libc_", "__"] {
            if let Some(rest) = n.strip_prefix(prefix) {
                n = rest;
            }
        }
        n = n.trim_start_matches('_');
        if n == before {
            break;
        }
    }
    for suffix in ["_time64", "64", "_nocancel"] {
        if let Some(rest) = n.strip_suffix(suffix) {
            n = rest;
        }
    }
    n
}

/// True for a function on the [`WAITING_FUNCTIONS`] list (internal `_private` lock
/// waits are not: they wait for the C library's own locks).
fn is_waiting_function(name: &str) -> bool {
    !name.ends_with("_private") && WAITING_FUNCTIONS.contains(&bare_name(name))
}

/// True for a waiting function that waits in `futex` (the pthread and semaphore
/// waits and glibc's futex helpers), after [`bare_name`].
fn is_futex_waiter(name: &str) -> bool {
    let bare = bare_name(name);
    [
        "pthread_",
        "sem_",
        "new_sem_",
        "futex_",
        "do_futex_",
        "lll_lock_wait",
    ]
    .iter()
    .any(|p| bare.starts_with(p))
}

/// A `syscall` file's `nr arg0..arg5 sp pc` form (hexadecimal words): the system
/// call number, its arguments and the pc; `None` for `-1 sp pc`, `running` and
/// anything malformed.
fn parse_in_syscall(text: &str) -> Option<(i64, [u64; 6], u64)> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let [nr, args @ .., _sp, pc] = words.as_slice() else {
        return None;
    };
    let hex = |w: &str| u64::from_str_radix(w.strip_prefix("0x")?, 16).ok();
    let nr: i64 = nr.parse().ok().filter(|n| *n >= 0)?;
    let args: Vec<u64> = args.iter().map(|w| hex(w)).collect::<Option<_>>()?;
    Some((nr, args.try_into().ok()?, hex(pc)?))
}

/// What the kernel and the code say about a stopped thread's system call, when it
/// is one it waits in (see the module documentation for what this proves).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitingSyscall {
    /// The system call number (one of [`WAITING_SYSCALLS`]).
    pub nr: i64,
    /// The pc right after its `syscall` instruction.
    pub pc: u64,
}

impl WaitingSyscall {
    /// The proof's first half, from facts read from the stopped thread: `reported`
    /// is the text of its `/proc/PID/task/TID/syscall`, `rip` and `orig_rax` its
    /// registers, `code_before_pc` the two bytes before `rip`, and `guarded_data(addr)`
    /// tells whether a futex word lies in a guarded module's data. `None` when the
    /// thread is not waiting in a system call this way.
    pub fn prove(
        reported: Option<&str>,
        rip: u64,
        orig_rax: u64,
        code_before_pc: Option<[u8; 2]>,
        guarded_data: impl Fn(u64) -> bool,
    ) -> Option<WaitingSyscall> {
        let (nr, args, pc) = parse_in_syscall(reported?)?;
        if !WAITING_SYSCALLS.contains(&nr)
            || pc != rip
            || orig_rax != nr as u64
            || code_before_pc != Some([0x0f, 0x05])
        {
            return None;
        }
        if nr == libc::SYS_futex
            && (!FUTEX_WAIT_OPS.contains(&(args[1] & !FUTEX_OP_FLAGS)) || guarded_data(args[0]))
        {
            return None;
        }
        Some(WaitingSyscall { nr, pc })
    }

    /// True when the named function `name` may be the one that made this system
    /// call: a waiting function, a futex waiter exactly for `futex`.
    fn made_by(&self, name: &str) -> bool {
        is_waiting_function(name) && (self.nr == libc::SYS_futex) == is_futex_waiter(name)
    }
}

/// Why a thread cannot be borrowed at this instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsafe {
    /// Its stack could not be unwound to its first frame.
    Incomplete {
        /// Why unwinding stopped.
        reason: String,
    },
    /// The outermost frame found is not where a thread starts.
    NoThreadStart {
        /// The outermost pc.
        pc: u64,
    },
    /// A frame is inside code that may hold the locks or state the call uses.
    Inside {
        /// The guarded module.
        module: String,
        /// The function, when a symbol names it.
        function: Option<String>,
        /// The frame's pc.
        pc: u64,
    },
    /// The stack mapping has no room below the stack pointer for the call's frame.
    NoStackRoom {
        /// The thread's stack pointer.
        sp: u64,
    },
    /// The thread could not be stopped or read.
    Stop {
        /// What went wrong.
        reason: String,
    },
}

impl fmt::Display for Unsafe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unsafe::Incomplete { reason } => write!(f, "its stack could not be unwound ({reason})"),
            Unsafe::NoThreadStart { pc } => {
                write!(f, "its stack does not end at a thread start (0x{pc:x})")
            }
            Unsafe::Inside {
                module,
                function,
                pc,
            } => {
                let file = module.rsplit('/').next().unwrap_or(module);
                match function {
                    Some(func) => write!(f, "it was inside {func} ({file}, 0x{pc:x})"),
                    None => write!(f, "it was inside {file} (0x{pc:x})"),
                }
            }
            Unsafe::NoStackRoom { sp } => {
                write!(f, "its stack has no room below 0x{sp:x}")
            }
            Unsafe::Stop { reason } => write!(f, "it could not be stopped ({reason})"),
        }
    }
}

/// What a module's code may hold while a thread is in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The C library (and glibc's split-off libpthread/libdl).
    Libc,
    /// The dynamic loader.
    Loader,
    /// libgcc's unwinder (its object list and lock).
    Unwinder,
    /// Another module defining `malloc`/`free`.
    Allocator,
    /// The executable.
    Executable,
    /// Anything else.
    Other,
}

impl Role {
    fn guarded(self) -> bool {
        matches!(
            self,
            Role::Libc | Role::Loader | Role::Unwinder | Role::Allocator
        )
    }
}

/// The role of each module of a process, for classifying frames.
#[derive(Debug, Clone)]
pub struct Guard {
    modules: Vec<(String, Range<u64>, Role)>,
}

fn role_of_file(file: &str) -> Option<Role> {
    let starts = |p: &str| {
        file.strip_prefix(p)
            .is_some_and(|rest| rest.starts_with(".so") || rest.starts_with('-'))
    };
    if reader::procfs::is_libc_file(file) || starts("libpthread") || starts("libdl") {
        Some(Role::Libc)
    } else if file.starts_with("ld-linux") || starts("ld") {
        Some(Role::Loader)
    } else if starts("libgcc_s") {
        Some(Role::Unwinder)
    } else {
        None
    }
}

impl Guard {
    /// Classifies the modules of `symbols`; `exe` is the executable's path.
    pub fn new(symbols: &ProcessSymbols, exe: Option<&str>) -> Guard {
        let modules = symbols
            .modules
            .iter()
            .map(|m| {
                let role = if exe == Some(m.path.as_str()) {
                    Role::Executable
                } else if let Some(r) = role_of_file(m.file_name()) {
                    r
                } else if ["malloc", "free"]
                    .iter()
                    .any(|n| m.symbols_named(n).any(|s| s.size > 0))
                {
                    Role::Allocator
                } else {
                    Role::Other
                };
                (m.path.clone(), m.range.clone(), role)
            })
            .collect();
        Guard { modules }
    }

    fn role(&self, module: Option<&str>) -> Role {
        module
            .and_then(|p| self.modules.iter().find(|(path, _, _)| path == p))
            .map_or(Role::Other, |(_, _, r)| *r)
    }

    /// Ok when a thread with these frames (innermost first, from [`Unwinder::walk`]) may
    /// run a function that allocates or takes the loader's, allocator's or unwinder's locks.
    #[cfg(test)]
    pub fn check(&self, frames: &[Frame], truncated: Option<&str>) -> Result<(), Unsafe> {
        self.check_waiting(frames, truncated, None)
    }

    /// True when `addr` lies in a guarded module's mappings or in the anonymous
    /// mapping right after one (its `.bss`), per `maps`.
    pub fn guarded_data(&self, maps: &[MapEntry], addr: u64) -> bool {
        let Some(i) = maps.iter().position(|m| m.contains(addr)) else {
            return false;
        };
        let owner = if maps[i].is_file() {
            Some(&maps[i])
        } else {
            i.checked_sub(1)
                .map(|p| &maps[p])
                .filter(|p| p.end == maps[i].start && p.is_file() && maps[i].path.is_empty())
        };
        owner.is_some_and(|m| {
            let path = m.file_path();
            let role = match self.modules.iter().find(|(p, _, _)| p == path) {
                Some((_, _, r)) => *r,
                None => {
                    role_of_file(path.rsplit('/').next().unwrap_or(path)).unwrap_or(Role::Other)
                }
            };
            role.guarded()
        })
    }

    /// [`Guard::check`], also accepting unnamed system-call stubs at the inner end
    /// when `waiting` proves the thread is waiting in a system call (see the module
    /// documentation).
    pub fn check_waiting(
        &self,
        frames: &[Frame],
        truncated: Option<&str>,
        waiting: Option<&WaitingSyscall>,
    ) -> Result<(), Unsafe> {
        if let Some(reason) = truncated {
            return Err(Unsafe::Incomplete {
                reason: reason.to_string(),
            });
        }
        // Trampolines belong to no module; a relocated prologue is its function's.
        let frames: Vec<(&Frame, Role)> = frames
            .iter()
            .filter(|f| f.kind != FrameKind::Trampoline)
            .map(|f| (f, self.role(f.module.as_deref())))
            .collect();
        let Some(&(last, last_role)) = frames.last() else {
            return Err(Unsafe::Incomplete {
                reason: "no frame".into(),
            });
        };
        // A thread starts in the executable (`_start`) or in the C library (`clone3`).
        if !matches!(last_role, Role::Executable | Role::Libc | Role::Loader) {
            return Err(Unsafe::NoThreadStart { pc: last.pc });
        }
        let mut outer = frames.len();
        if last_role == Role::Executable {
            outer -= 1;
        }
        let mut start_frames = 0;
        while outer > 0 && frames[outer - 1].1.guarded() && start_frames < MAX_START_FRAMES {
            outer -= 1;
            start_frames += 1;
        }
        let mut inner = 0;
        if let (Some(w), Some(&(first, _))) = (waiting, frames.first()) {
            let stub = |(f, role): &(&Frame, Role)| {
                role.guarded() && f.function.is_none() && f.module == first.module
            };
            let stubs = frames
                .iter()
                .take(outer.min(MAX_STUB_FRAMES + 1))
                .take_while(|f| stub(f))
                .count();
            let entry = frames.get(stubs).filter(|(f, role)| {
                stubs < outer
                    && role.guarded()
                    && f.module == first.module
                    && f.function.as_deref().is_some_and(|n| w.made_by(n))
            });
            if first.pc == w.pc && (1..=MAX_STUB_FRAMES).contains(&stubs) && entry.is_some() {
                inner = stubs;
            }
        }
        while inner < outer
            && inner < MAX_WAIT_FRAMES + MAX_STUB_FRAMES
            && frames[inner].1.guarded()
            && frames[inner]
                .0
                .function
                .as_deref()
                .is_some_and(|f| is_waiting_function(f) || is_stdio_function(f))
        {
            inner += 1;
        }
        for &(f, role) in &frames[inner..outer] {
            if role.guarded() {
                return Err(Unsafe::Inside {
                    module: f.module.clone().unwrap_or_default(),
                    function: f.function.clone(),
                    pc: f.pc,
                });
            }
        }
        Ok(())
    }
}

/// Bytes below the stack pointer that a call's frame may need in the thread's stack
/// mapping (red zone, the saved context with its XSAVE area, alignment).
pub const STACK_ROOM: u64 = 32 * 1024;

/// True when `[sp - STACK_ROOM, sp)` lies in the mapping that holds `sp`.
fn has_stack_room(maps: &[MapEntry], sp: u64) -> bool {
    maps.iter()
        .find(|m| m.contains(sp))
        .is_some_and(|m| sp.saturating_sub(STACK_ROOM) >= m.start)
}

/// No thread was at a safe point within the time allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoSafePoint {
    /// How many thread stops were examined.
    pub samples: usize,
    /// How long was spent.
    pub waited: Duration,
    /// The last thread examined and why it was not safe.
    pub last: Option<(i32, Unsafe)>,
}

impl fmt::Display for NoSafePoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no thread was at a safe point in {} samples over {} ms",
            self.samples,
            self.waited.as_millis()
        )?;
        if let Some((tid, why)) = &self.last {
            write!(f, " (last: thread {tid}: {why})")?;
        }
        Ok(())
    }
}

/// Threads of `pid`, the best to borrow for a call first: those asleep in a system
/// call other than `futex` or a memory-management one (unlikely to hold a user-space
/// lock), then those running user code, then the rest.
pub(crate) fn call_candidates(pid: i32) -> Vec<i32> {
    let Ok(tids) = reader::procfs::read_task_ids(pid) else {
        return vec![pid];
    };
    let mut tids: Vec<(u8, i32)> = tids
        .into_iter()
        .map(|tid| {
            let nr = reader::procfs::read_task_syscall(pid, tid);
            // A thread waiting for a futex, or inside malloc's own mmap/brk, may hold a lock.
            let risky = [
                libc::SYS_futex,
                libc::SYS_mmap,
                libc::SYS_munmap,
                libc::SYS_brk,
                libc::SYS_mremap,
                libc::SYS_madvise,
                libc::SYS_mprotect,
            ];
            let rank = match nr {
                Some(n) if risky.contains(&n) => 2,
                Some(n) if n >= 0 => 0,
                _ => 1,
            };
            (rank, tid)
        })
        .collect();
    tids.sort();
    tids.into_iter().map(|(_, t)| t).collect()
}

/// Stops threads of `pid` one at a time until one is at a safe point, for at most
/// `budget`; returns the session holding it (only that thread is stopped).
///
/// Threads asleep in a system call are tried first. Between rounds the process runs
/// freely for a millisecond or two, so busy threads are met at other points.
pub fn borrow_at_safe_point(
    pid: i32,
    unwind: &Unwinder,
    guard: &Guard,
    mem: &dyn Memory,
    budget: Duration,
) -> Result<(Session, i32), NoSafePoint> {
    let started = Instant::now();
    let mut samples = 0;
    let mut last = None;
    let mut round = 0u32;
    loop {
        let maps = read_maps(pid).unwrap_or_default();
        for tid in call_candidates(pid) {
            if started.elapsed() > budget && samples > 0 {
                break;
            }
            let session = match Session::attach_thread(pid, tid) {
                Ok(s) => s,
                Err(SessionError::Exited { .. }) | Err(SessionError::NoSuchProcess { .. })
                    if !crate::ptrace::wait::process_ended(pid) =>
                {
                    continue
                }
                Err(e) => {
                    samples += 1;
                    last = Some((
                        tid,
                        Unsafe::Stop {
                            reason: e.to_string(),
                        },
                    ));
                    if crate::ptrace::wait::process_ended(pid) {
                        return Err(NoSafePoint {
                            samples,
                            waited: started.elapsed(),
                            last,
                        });
                    }
                    continue;
                }
            };
            samples += 1;
            let verdict = match session.regs(tid) {
                Err(e) => Err(Unsafe::Stop {
                    reason: e.to_string(),
                }),
                Ok(regs) if !has_stack_room(&maps, regs.rsp) => {
                    Err(Unsafe::NoStackRoom { sp: regs.rsp })
                }
                Ok(regs) => {
                    let mut before = [0u8; 2];
                    let reported =
                        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok();
                    let waiting = WaitingSyscall::prove(
                        reported.as_deref(),
                        regs.rip,
                        regs.orig_rax,
                        mem.read(regs.rip.wrapping_sub(2), &mut before)
                            .ok()
                            .map(|()| before),
                        |addr| guard.guarded_data(&maps, addr),
                    );
                    let dwarf = reader::unwind::dwarf_registers(unwind.arch(), &regs);
                    let (frames, truncated) = unwind.walk(&dwarf, mem);
                    let truncated = truncated.map(|r| r.to_string());
                    guard.check_waiting(&frames, truncated.as_deref(), waiting.as_ref())
                }
            };
            match verdict {
                Ok(()) => return Ok((session, tid)),
                Err(why) => {
                    last = Some((tid, why));
                    let _ = session.detach();
                }
            }
        }
        if started.elapsed() > budget {
            return Err(NoSafePoint {
                samples,
                waited: started.elapsed(),
                last,
            });
        }
        round += 1;
        // Let the process run; vary the pause so a periodic loop is met at other points.
        std::thread::sleep(Duration::from_micros(500 + u64::from(round % 7) * 300));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_names() {
        assert_eq!(bare_name("__GI___nanosleep"), "nanosleep");
        assert_eq!(bare_name("__libc_read"), "read");
        assert_eq!(bare_name("___pthread_cond_wait"), "pthread_cond_wait");
        assert_eq!(
            bare_name("__futex_abstimed_wait_common64"),
            "futex_abstimed_wait_common"
        );
        assert_eq!(bare_name("__clock_nanosleep_time64"), "clock_nanosleep");
        assert_eq!(bare_name("read@@GLIBC_2.2.5"), "read");
        assert!(is_waiting_function("__lll_lock_wait"));
        assert!(!is_waiting_function("__lll_lock_wait_private"));
        assert!(!is_waiting_function("malloc"));
        assert!(!is_waiting_function("_IO_file_write"));
    }

    #[test]
    fn module_roles() {
        assert_eq!(role_of_file("libc.so.6"), Some(Role::Libc));
        assert_eq!(role_of_file("libc-2.31.so"), Some(Role::Libc));
        assert_eq!(role_of_file("libcrypt.so.1"), None);
        assert_eq!(role_of_file("ld-linux-x86-64.so.2"), Some(Role::Loader));
        assert_eq!(role_of_file("libgcc_s.so.1"), Some(Role::Unwinder));
        assert_eq!(role_of_file("libz.so.1"), None);
    }

    fn frame(pc: u64, module: &str, function: Option<&str>) -> Frame {
        Frame {
            pc,
            module: Some(module.into()),
            function: function.map(Into::into),
            ..Frame::default()
        }
    }

    fn guard() -> Guard {
        Guard {
            modules: vec![
                ("/bin/prog".into(), 0x1000..0x2000, Role::Executable),
                ("/lib/libc.so.6".into(), 0x10000..0x20000, Role::Libc),
                ("/lib/libz.so.1".into(), 0x30000..0x40000, Role::Other),
                (
                    "/lib/libjemalloc.so.2".into(),
                    0x50000..0x60000,
                    Role::Allocator,
                ),
            ],
        }
    }

    fn main_start() -> Vec<Frame> {
        vec![
            frame(0x11000, "/lib/libc.so.6", None),
            frame(0x11100, "/lib/libc.so.6", Some("__libc_start_main")),
            frame(0x1010, "/bin/prog", Some("_start")),
        ]
    }

    #[test]
    fn program_code_and_waits_are_safe() {
        let g = guard();
        let mut frames = vec![frame(0x1500, "/bin/prog", Some("main"))];
        frames.extend(main_start());
        assert_eq!(g.check(&frames, None), Ok(()));
        let mut waiting = vec![
            frame(0x12000, "/lib/libc.so.6", Some("__GI___clock_nanosleep")),
            frame(0x12100, "/lib/libc.so.6", Some("__nanosleep")),
            frame(0x30500, "/lib/libz.so.1", Some("gzread")),
        ];
        waiting.extend(frames);
        assert_eq!(g.check(&waiting, None), Ok(()));
        // fgets waiting for input, printf waiting for a full pipe to drain.
        let mut fgets = vec![
            frame(0x15000, "/lib/libc.so.6", Some("__GI___libc_read")),
            frame(0x15100, "/lib/libc.so.6", Some("_IO_new_file_underflow")),
            frame(0x15200, "/lib/libc.so.6", Some("__GI__IO_default_uflow")),
            frame(0x15300, "/lib/libc.so.6", Some("_IO_getline_info")),
            frame(0x15400, "/lib/libc.so.6", Some("_IO_fgets")),
            frame(0x1500, "/bin/prog", Some("main")),
        ];
        fgets.extend(main_start());
        assert_eq!(g.check(&fgets, None), Ok(()));
        let mut printf = vec![
            frame(0x15000, "/lib/libc.so.6", Some("write")),
            frame(0x15100, "/lib/libc.so.6", Some("_IO_file_write")),
            frame(0x15150, "/lib/libc.so.6", Some("new_do_write")),
            frame(0x15160, "/lib/libc.so.6", Some("_IO_new_file_xsputn")),
            frame(0x15170, "/lib/libc.so.6", Some("__vfprintf_internal")),
            frame(0x15200, "/lib/libc.so.6", Some("printf")),
            frame(0x1500, "/bin/prog", Some("main")),
        ];
        printf.extend(main_start());
        assert_eq!(g.check(&printf, None), Ok(()));
        // A thread started by clone3/start_thread.
        let thread = vec![
            frame(0x1500, "/bin/prog", Some("worker")),
            frame(0x13000, "/lib/libc.so.6", None),
            frame(0x13100, "/lib/libc.so.6", None),
        ];
        assert_eq!(g.check(&thread, None), Ok(()));
    }

    #[test]
    fn allocator_loader_and_unknown_code_are_not() {
        let g = guard();
        let mut in_malloc = vec![
            frame(0x14000, "/lib/libc.so.6", Some("_int_malloc")),
            frame(0x14100, "/lib/libc.so.6", Some("malloc")),
            frame(0x1500, "/bin/prog", Some("main")),
        ];
        in_malloc.extend(main_start());
        assert!(matches!(
            g.check(&in_malloc, None),
            Err(Unsafe::Inside { function: Some(f), .. }) if f == "_int_malloc"
        ));
        // printf inside malloc (a large positional format) is not.
        let mut in_printf = vec![
            frame(0x14000, "/lib/libc.so.6", Some("_int_malloc")),
            frame(0x14100, "/lib/libc.so.6", Some("malloc")),
            frame(0x15200, "/lib/libc.so.6", Some("printf_positional")),
            frame(0x15300, "/lib/libc.so.6", Some("printf")),
            frame(0x1500, "/bin/prog", Some("main")),
        ];
        in_printf.extend(main_start());
        assert!(g.check(&in_printf, None).is_err());
        // Nor is a string function called from stdio (not a wait, not stdio itself).
        let mut in_memcpy = vec![
            frame(
                0x14200,
                "/lib/libc.so.6",
                Some("__memmove_avx_unaligned_erms"),
            ),
            frame(0x15100, "/lib/libc.so.6", Some("_IO_file_xsputn")),
            frame(0x15200, "/lib/libc.so.6", Some("fwrite")),
            frame(0x1500, "/bin/prog", Some("main")),
        ];
        in_memcpy.extend(main_start());
        assert!(g.check(&in_memcpy, None).is_err());
        // An allocator library anywhere on the stack.
        let mut in_jemalloc = vec![
            frame(0x1600, "/bin/prog", Some("callback")),
            frame(0x50100, "/lib/libjemalloc.so.2", Some("je_arena_purge")),
            frame(0x1500, "/bin/prog", Some("main")),
        ];
        in_jemalloc.extend(main_start());
        assert!(g.check(&in_jemalloc, None).is_err());
        // exit() running an atexit handler: libc frames in the middle.
        let mut in_exit = vec![
            frame(0x1600, "/bin/prog", Some("handler")),
            frame(0x16000, "/lib/libc.so.6", Some("__run_exit_handlers")),
            frame(0x16100, "/lib/libc.so.6", Some("exit")),
        ];
        in_exit.extend(main_start());
        assert!(g.check(&in_exit, None).is_err());
        // An unnamed guarded frame is never taken for a wait.
        let mut unnamed = vec![frame(0x17000, "/lib/libc.so.6", None)];
        unnamed.extend(vec![frame(0x1500, "/bin/prog", Some("main"))]);
        unnamed.extend(main_start());
        assert!(g.check(&unnamed, None).is_err());
    }

    /// What the kernel reported for a thread asleep in `time.sleep` on Debian sid
    /// (stripped libc), read from a live process; the pc is in the unnamed stub.
    const SID_SLEEP: &str = "230 0x1 0x1 0x7ffd7f761390 0x0 0x0 0x0 0x7ffd7f761340 0x10a02\n";

    fn prove(line: &str, rip: u64, orig_rax: u64, code: [u8; 2]) -> Option<WaitingSyscall> {
        WaitingSyscall::prove(Some(line), rip, orig_rax, Some(code), |addr| {
            (0x10000..0x20000).contains(&addr)
        })
    }

    const SYSCALL: [u8; 2] = [0x0f, 0x05];

    /// A stripped libc's sleeping stack: stub (unnamed), clock_nanosleep, nanosleep, main.
    fn sid_sleeping() -> Vec<Frame> {
        let mut frames = vec![
            frame(0x10a02, "/lib/libc.so.6", None),
            frame(0x11e6a, "/lib/libc.so.6", Some("clock_nanosleep")),
            frame(0x125d3, "/lib/libc.so.6", Some("nanosleep")),
            frame(0x1500, "/bin/prog", Some("main")),
        ];
        frames.extend(main_start());
        frames
    }

    #[test]
    fn syscall_report_proves_unnamed_stubs() {
        let g = guard();
        let frames = sid_sleeping();
        // Without the kernel's report the unnamed stub proves nothing (the old refusal).
        assert!(matches!(
            g.check(&frames, None),
            Err(Unsafe::Inside {
                function: None,
                pc: 0x10a02,
                ..
            })
        ));
        let w = prove(SID_SLEEP, 0x10a02, 230, SYSCALL).expect("a proved wait");
        assert_eq!(
            w,
            WaitingSyscall {
                nr: 230,
                pc: 0x10a02
            }
        );
        assert_eq!(g.check_waiting(&frames, None, Some(&w)), Ok(()));
        // Two stubs (glibc 2.41's __syscall_cancel_arch and __internal_syscall_cancel).
        let mut two = frames.clone();
        two.insert(1, frame(0x10b10, "/lib/libc.so.6", None));
        assert_eq!(g.check_waiting(&two, None, Some(&w)), Ok(()));
        // Too many unnamed frames are not stubs any more.
        let mut many = frames.clone();
        for pc in [0x10b10, 0x10c10, 0x10d10] {
            many.insert(1, frame(pc, "/lib/libc.so.6", None));
        }
        assert!(g.check_waiting(&many, None, Some(&w)).is_err());
        // The first named frame must be a waiting function (malloc is not) ...
        let mut in_malloc = frames.clone();
        in_malloc[1] = frame(0x11e6a, "/lib/libc.so.6", Some("malloc"));
        assert!(g.check_waiting(&in_malloc, None, Some(&w)).is_err());
        // ... and one that waits in this system call (not a futex wait for clock_nanosleep).
        let mut cond = frames.clone();
        cond[1] = frame(0x11e6a, "/lib/libc.so.6", Some("pthread_cond_wait"));
        assert!(g.check_waiting(&cond, None, Some(&w)).is_err());
        // The innermost frame must be the one right after the syscall instruction.
        let elsewhere = WaitingSyscall {
            nr: 230,
            pc: 0x10a50,
        };
        assert!(g.check_waiting(&frames, None, Some(&elsewhere)).is_err());
        // A guarded frame in the middle still refuses (exit running a handler that sleeps).
        let mut in_exit = frames[..3].to_vec();
        in_exit.push(frame(
            0x16000,
            "/lib/libc.so.6",
            Some("__run_exit_handlers"),
        ));
        in_exit.extend(main_start());
        assert!(g.check_waiting(&in_exit, None, Some(&w)).is_err());
        // An incomplete stack proves nothing, whatever the kernel says.
        assert!(g.check_waiting(&frames, Some("no CFI"), Some(&w)).is_err());
    }

    #[test]
    fn syscall_lines() {
        assert_eq!(
            parse_in_syscall(SID_SLEEP),
            Some((230, [1, 1, 0x7ffd7f761390, 0, 0, 0], 0x10a02))
        );
        assert_eq!(parse_in_syscall("-1 0x7ffd7f761340 0x10a02\n"), None);
        assert_eq!(parse_in_syscall("running\n"), None);
        assert_eq!(parse_in_syscall("230 0x1 0x1\n"), None);
        assert_eq!(parse_in_syscall("230 1 1 1 0 0 0 0x7ffc 0x7f\n"), None);
        assert_eq!(
            parse_in_syscall("-2 0x1 0x1 0x1 0x0 0x0 0x0 0x7ffc 0x7f\n"),
            None
        );
        assert_eq!(
            parse_in_syscall("230 0x1 0x1 0x1 0x0 0x0 0x0 0x0 0x7ffc 0x7f\n"),
            None
        );
        assert_eq!(parse_in_syscall(""), None);
    }

    #[test]
    fn syscall_reports_that_prove_nothing() {
        // Not a waiting system call: mmap (malloc growing its heap under its arena lock).
        assert_eq!(
            prove(
                "9 0x0 0x21000 0x3 0x22 0xffffffffffffffff 0x0 0x7ffc 0x10a02",
                0x10a02,
                9,
                SYSCALL
            ),
            None
        );
        // In user space, running, or unreadable.
        assert_eq!(
            prove("-1 0x7ffd7f761340 0x10a02", 0x10a02, u64::MAX, SYSCALL),
            None
        );
        assert_eq!(prove("running", 0x10a02, 230, SYSCALL), None);
        assert_eq!(prove("", 0x10a02, 230, SYSCALL), None);
        // The report disagrees with the stopped thread's registers (it moved on).
        assert_eq!(prove(SID_SLEEP, 0x10b00, 230, SYSCALL), None);
        assert_eq!(prove(SID_SLEEP, 0x10a02, 35, SYSCALL), None);
        // No syscall instruction before the pc.
        assert_eq!(prove(SID_SLEEP, 0x10a02, 230, [0xff, 0xd0]), None);
        // futex: a wait on a word of the program's is a proved wait ...
        let cond = "202 0x55d0c0 0x189 0x0 0x0 0x0 0xffffffff 0x7ffc 0x10a02";
        let w = prove(cond, 0x10a02, 202, SYSCALL).expect("a proved futex wait");
        let g = guard();
        let mut frames = vec![
            frame(0x10a02, "/lib/libc.so.6", None),
            frame(0x10c00, "/lib/libc.so.6", None),
            frame(
                0x11000,
                "/lib/libc.so.6",
                Some("pthread_cond_wait@@GLIBC_2.3.2"),
            ),
            frame(0x1500, "/bin/prog", Some("main")),
        ];
        frames.extend(main_start());
        assert_eq!(g.check_waiting(&frames, None, Some(&w)), Ok(()));
        // ... but not for clock_nanosleep's stubs, and a lock of libc's is never.
        frames[2] = frame(0x11000, "/lib/libc.so.6", Some("clock_nanosleep"));
        assert!(g.check_waiting(&frames, None, Some(&w)).is_err());
        let libc_lock = "202 0x11f00 0x80 0x2 0x0 0x0 0x0 0x7ffc 0x10a02";
        assert_eq!(prove(libc_lock, 0x10a02, 202, SYSCALL), None);
        // A futex wake or a PI lock is not a wait for a condition.
        let wake = "202 0x55d0c0 0x81 0x1 0x0 0x0 0x0 0x7ffc 0x10a02";
        assert_eq!(prove(wake, 0x10a02, 202, SYSCALL), None);
        let pi = "202 0x55d0c0 0x86 0x0 0x0 0x0 0x0 0x7ffc 0x10a02";
        assert_eq!(prove(pi, 0x10a02, 202, SYSCALL), None);
    }

    #[test]
    fn guarded_data_includes_bss() {
        use reader::procfs::parse_maps;
        let maps = parse_maps(
            "10000-11000 r--p 00000000 fe:00 7 /lib/libc.so.6\n\
             11000-12000 rw-p 00001000 fe:00 7 /lib/libc.so.6\n\
             12000-13000 rw-p 00000000 00:00 0 \n\
             55d000-55e000 rw-p 00000000 00:00 0 [heap]\n\
             7f0000-7f1000 rw-p 00000000 00:00 0 \n",
        );
        let g = guard();
        assert!(g.guarded_data(&maps, 0x10100));
        assert!(g.guarded_data(&maps, 0x12100), "libc's .bss");
        assert!(!g.guarded_data(&maps, 0x55d0c0), "the heap");
        assert!(
            !g.guarded_data(&maps, 0x7f0100),
            "an anonymous mapping after a gap"
        );
        assert!(!g.guarded_data(&maps, 0x9000), "unmapped");
    }

    #[test]
    fn incomplete_stacks_prove_nothing() {
        let g = guard();
        let frames = vec![frame(0x1500, "/bin/prog", Some("main"))];
        assert!(matches!(
            g.check(&frames, Some("no CFI")),
            Err(Unsafe::Incomplete { .. })
        ));
        // Ends in a library that does not start threads.
        let frames = vec![frame(0x30500, "/lib/libz.so.1", Some("gzread"))];
        assert!(matches!(
            g.check(&frames, None),
            Err(Unsafe::NoThreadStart { .. })
        ));
        assert!(g.check(&[], None).is_err());
    }
}
