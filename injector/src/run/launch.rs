//! Starting a command traced and getting its hooks in before `main`.
//!
//! 1. Fork; the child asks to be traced (`PTRACE_TRACEME`) and execs; the
//!    kernel stops it with SIGTRAP right after the exec.
//! 2. An `int3` over the first byte of the program's entry point (`AT_ENTRY`
//!    in `/proc/PID/auxv`) and a continue: the dynamic loader maps the
//!    libraries and runs their constructors, then the trap stops the program at
//!    its first instruction. The byte is put back and the pc moved back onto it.
//! 3. The entry's first nine bytes become a `pause` system call in a loop and
//!    the child is detached: it sleeps there, touching nothing. Now it is an
//!    ordinary running process, so [`crate::install`] attaches, patches and
//!    detaches exactly as for any other.
//! 4. The supervisor thread seizes every thread again (`PTRACE_SEIZE` with the
//!    options it needs), stops the parked one, checks the nine bytes are still
//!    the park, puts the originals back and every register as it was at the entry. The program starts at its entry
//!    with the hooks in place.
//!
//! The alternative, a session built on the trace held since the exec, would
//! thread an "already held" mode through install, the remote system calls and
//! the unwind registration (each attaches on its own); the park-and-detach costs
//! one detach and one seize (tens of microseconds) and leaves them untouched.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};

use nix::sys::ptrace::{self, Options};
use nix::unistd::Pid as NixPid;

use reader::ids::Pid;
use reader::procfs;

use crate::hooks::{install, HookInfo, HookTarget, InstallOptions};
use crate::memory::{Memory, ProcessMemory, WriteMemory};

use super::RunError;

/// `PTRACE_EVENT_STOP`.
pub(super) const EVENT_STOP: i32 = 128;

/// Bytes written over the entry point while the hooks go in.
const PARK_LEN: usize = 9;

/// `mov eax, __NR_pause; syscall; jmp back to the mov` (x86-64): the parked
/// thread sleeps in `pause` instead of spinning on a CPU the install needs.
const PARK_64: [u8; PARK_LEN] = [0xb8, 34, 0, 0, 0, 0x0f, 0x05, 0xeb, 0xf7];
/// The same for i386: `mov eax, __NR_pause; int 0x80; jmp back`.
const PARK_32: [u8; PARK_LEN] = [0xb8, 29, 0, 0, 0, 0xcd, 0x80, 0xeb, 0xf7];

/// Where a child is parked: its entry point, the bytes the park replaced, the
/// registers it had there, and the park's own bytes.
pub(super) struct Parked {
    entry: u64,
    original: [u8; PARK_LEN],
    regs: libc::user_regs_struct,
    park: [u8; PARK_LEN],
}

/// A command stopped at its entry point with its hooks in place, held again by
/// the calling thread (seized, in an interrupt stop, not yet continued).
pub(super) struct Launched {
    pub(super) child: Child,
    pub(super) pid: i32,
    pub(super) hooks: Vec<HookInfo>,
}

/// The program's path as `execvp` would find it (for the setuid check only).
fn resolve(program: &std::ffi::OsStr) -> Option<PathBuf> {
    let p = PathBuf::from(program);
    if p.as_os_str().as_encoded_bytes().contains(&b'/') {
        return Some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|c| {
            c.metadata()
                .is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
        })
}

/// Refuses a set-user-ID or set-group-ID program we could only trace without its privileges.
fn check_setuid(program: &std::ffi::OsStr, name: &str) -> Result<(), RunError> {
    let Some(meta) = resolve(program).and_then(|p| p.metadata().ok()) else {
        return Ok(());
    };
    // SAFETY: geteuid and getegid have no preconditions.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if euid == 0 {
        return Ok(());
    }
    let suid = meta.mode() & libc::S_ISUID != 0 && meta.uid() != euid;
    let sgid = meta.mode() & libc::S_ISGID != 0 && meta.gid() != egid;
    if suid || sgid {
        return Err(RunError::Setuid {
            program: name.to_string(),
        });
    }
    Ok(())
}

/// Our own tracer, if we have one.
fn own_tracer() -> Option<(i32, String)> {
    let st = procfs::read_status(std::process::id() as i32).ok()?;
    (st.tracer != 0).then(|| {
        let name = procfs::read_comm(st.tracer).unwrap_or_else(|_| "?".into());
        (st.tracer, name)
    })
}

/// Blocks for the next stop or end of `pid` (our child, traced by this thread).
fn wait(pid: i32) -> Result<i32, nix::Error> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status word into a live local.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if r == pid {
            return Ok(status);
        }
        let e = nix::Error::last();
        if e != nix::Error::EINTR {
            return Err(e);
        }
    }
}

/// The program's entry point, from its auxiliary vector (either word size).
fn entry_point(pid: i32) -> Option<u64> {
    let bytes = std::fs::read(format!("/proc/{pid}/auxv")).ok()?;
    let elf32 = matches!(
        procfs::read_exe_class(pid).ok().flatten(),
        Some(procfs::ElfClass::Elf32)
    );
    if elf32 {
        bytes
            .chunks_exact(8)
            .map(|c| {
                let w = |at: usize| u32::from_le_bytes([c[at], c[at + 1], c[at + 2], c[at + 3]]);
                (u64::from(w(0)), u64::from(w(4)))
            })
            .find(|(k, _)| *k == libc::AT_ENTRY)
            .map(|(_, v)| v)
    } else {
        procfs::parse_auxv(&bytes)
            .into_iter()
            .find(|(k, _)| *k == libc::AT_ENTRY)
            .map(|(_, v)| v)
    }
}

/// A traced child's program counter (rip, or eip of a 32-bit process).
fn pc(pid: i32) -> Result<u64, nix::Error> {
    ptrace::getregs(NixPid::from_raw(pid)).map(|r| r.rip)
}

fn set_pc(pid: i32, value: u64) -> Result<(), nix::Error> {
    let mut r = ptrace::getregs(NixPid::from_raw(pid))?;
    r.rip = value;
    ptrace::setregs(NixPid::from_raw(pid), r)
}

/// Kills and reaps a child that must not run on.
fn kill(child: &mut Child) {
    let _ = child.kill();
    let pid = child.id() as i32;
    let _ = wait(pid);
    let _ = child.wait();
}

/// True when a file-backed mapping of the process is `module` (a path, a file
/// name, or a file-name prefix, as [`crate::FuncSpec`] matches modules).
fn module_mapped(maps: &[procfs::MapEntry], module: &str) -> bool {
    maps.iter().filter(|m| m.is_file()).any(|m| {
        let path = m.file_path();
        let file = path.rsplit('/').next().unwrap_or(path);
        path == module || file == module || file.starts_with(module)
    })
}

/// Starts `cmd`, hooks `targets` (and the Python evaluator if `python`) before
/// its `main`, and leaves it held by this thread at its entry point.
pub(super) fn launch(
    mut cmd: Command,
    targets: &[HookTarget],
    python: bool,
    install_opts: &InstallOptions,
    seize_options: Options,
) -> Result<Launched, RunError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    check_setuid(cmd.get_program(), &program)?;
    // SAFETY: the closure runs in the forked child before exec and makes one
    // async-signal-safe system call.
    unsafe {
        cmd.pre_exec(|| {
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(source) => {
            return Err(match source.kind() {
                std::io::ErrorKind::NotFound => RunError::NotFound { program },
                std::io::ErrorKind::PermissionDenied
                    if source.raw_os_error() == Some(libc::EPERM) =>
                {
                    match own_tracer() {
                        Some((tracer, tracer_name)) => RunError::AlreadyTraced {
                            program,
                            tracer,
                            tracer_name,
                        },
                        None => RunError::NotExecutable { program, source },
                    }
                }
                std::io::ErrorKind::PermissionDenied => RunError::NotExecutable { program, source },
                _ if matches!(
                    source.raw_os_error(),
                    Some(libc::ENOEXEC | libc::EISDIR | libc::ETXTBSY)
                ) =>
                {
                    RunError::NotExecutable { program, source }
                }
                _ => RunError::Spawn { program, source },
            })
        }
    };
    let pid = child.id() as i32;
    let parked = match to_entry(pid, &program) {
        Ok(p) => p,
        Err(e) => {
            if !matches!(e, RunError::EndedEarly { .. }) {
                kill(&mut child);
            }
            return Err(e);
        }
    };
    // Parked: install as into any running process.
    let hooks = match hook(pid, &program, targets, python, install_opts) {
        Ok(h) => h,
        Err(e) => {
            kill(&mut child);
            return Err(e);
        }
    };
    if let Err(e) = reseize(pid, &program, parked, seize_options) {
        kill(&mut child);
        return Err(e);
    }
    Ok(Launched { child, pid, hooks })
}

/// Runs the exec-stopped child to its entry point and leaves it parked there, detached.
/// Leaves the child parked at its entry point, detached.
fn to_entry(pid: i32, program: &str) -> Result<Parked, RunError> {
    let trace_err = |step: &'static str| {
        move |source: nix::Error| RunError::Trace {
            program: program.to_string(),
            step,
            source,
        }
    };
    let entry_err = |reason: String| RunError::Entry {
        program: program.to_string(),
        reason,
    };
    let status = wait(pid).map_err(trace_err("waitpid"))?;
    if !libc::WIFSTOPPED(status) {
        return Err(RunError::EndedEarly {
            program: program.to_string(),
            status,
        });
    }
    let entry =
        entry_point(pid).ok_or_else(|| entry_err("no AT_ENTRY in its auxiliary vector".into()))?;
    let mem = ProcessMemory::open(pid).map_err(|e| entry_err(e.to_string()))?;
    let mut first = [0u8; PARK_LEN];
    mem.read(entry, &mut first)
        .map_err(|e| entry_err(e.to_string()))?;
    mem.write(entry, &[0xcc])
        .map_err(|e| entry_err(e.to_string()))?;
    let child = NixPid::from_raw(pid);
    let mut deliver = None;
    loop {
        ptrace::cont(child, deliver).map_err(trace_err("PTRACE_CONT"))?;
        let status = wait(pid).map_err(trace_err("waitpid"))?;
        if !libc::WIFSTOPPED(status) {
            return Err(RunError::EndedEarly {
                program: program.to_string(),
                status,
            });
        }
        let sig = libc::WSTOPSIG(status);
        if sig == libc::SIGTRAP && pc(pid).map_err(trace_err("PTRACE_GETREGS"))? == entry + 1 {
            break;
        }
        // A signal before the entry point (the loader's or a constructor's): pass it on.
        deliver = nix::sys::signal::Signal::try_from(sig)
            .ok()
            .filter(|s| *s != nix::sys::signal::Signal::SIGTRAP || status >> 16 == 0);
    }
    let elf32 = matches!(
        procfs::read_exe_class(pid).ok().flatten(),
        Some(procfs::ElfClass::Elf32)
    );
    let park = if elf32 { PARK_32 } else { PARK_64 };
    mem.write(entry, &park)
        .map_err(|e| entry_err(e.to_string()))?;
    set_pc(pid, entry).map_err(trace_err("PTRACE_SETREGS"))?;
    let regs = ptrace::getregs(child).map_err(trace_err("PTRACE_GETREGS"))?;
    ptrace::detach(child, None).map_err(trace_err("PTRACE_DETACH"))?;
    Ok(Parked {
        entry,
        original: first,
        regs,
        park,
    })
}

/// Installs the hooks into the parked (running, untraced) child.
fn hook(
    pid: i32,
    program: &str,
    targets: &[HookTarget],
    python: bool,
    opts: &InstallOptions,
) -> Result<Vec<HookInfo>, RunError> {
    let mut targets = targets.to_vec();
    if targets.is_empty() && !python {
        return Ok(Vec::new());
    }
    let maps = procfs::read_maps(pid).unwrap_or_default();
    for t in &targets {
        if let reader::symbols::FuncSpec::Qualified { module, name } = &t.function {
            if !module_mapped(&maps, module) {
                return Err(RunError::NotLoaded {
                    program: program.to_string(),
                    module: module.clone(),
                    function: name.clone(),
                });
            }
        }
    }
    if python {
        targets.push(crate::python::python_hook(Pid::from_raw(pid)).map_err(RunError::Install)?);
    }
    install(Pid::from_raw(pid), &targets, opts)
        .map(|r| r.hooks)
        .map_err(RunError::Install)
}

/// Seizes every thread of the parked child, stops the parked one and puts its
/// entry's bytes back; it is left in its interrupt stop.
fn reseize(pid: i32, program: &str, parked: Parked, options: Options) -> Result<(), RunError> {
    let trace_err = |step: &'static str| {
        move |source: nix::Error| RunError::Trace {
            program: program.to_string(),
            step,
            source,
        }
    };
    let mut tids = procfs::read_task_ids(pid).unwrap_or_default();
    if !tids.contains(&pid) {
        tids.push(pid);
    }
    for tid in tids {
        match ptrace::seize(NixPid::from_raw(tid), options) {
            Ok(()) => {}
            Err(nix::Error::ESRCH) if tid != pid => {}
            Err(e) => return Err(trace_err("PTRACE_SEIZE")(e)),
        }
    }
    let child = NixPid::from_raw(pid);
    ptrace::interrupt(child).map_err(trace_err("PTRACE_INTERRUPT"))?;
    loop {
        let status = wait(pid).map_err(trace_err("waitpid"))?;
        if !libc::WIFSTOPPED(status) {
            return Err(RunError::EndedEarly {
                program: program.to_string(),
                status,
            });
        }
        if status >> 16 == EVENT_STOP {
            break;
        }
        // Nothing else can happen to a thread parked in `pause` but a signal
        // sent to it meanwhile: keep it for after the start (it stays pending).
        let sig = libc::WSTOPSIG(status);
        // SAFETY: tgkill takes three integers.
        unsafe {
            libc::syscall(libc::SYS_tgkill, pid, pid, sig);
        }
        ptrace::cont(child, None).map_err(trace_err("PTRACE_CONT"))?;
        ptrace::interrupt(child).map_err(trace_err("PTRACE_INTERRUPT"))?;
    }
    let mem = ProcessMemory::open(pid).map_err(|e| RunError::Entry {
        program: program.to_string(),
        reason: e.to_string(),
    })?;
    let Parked {
        entry,
        original,
        regs,
        park,
    } = parked;
    let mut now = [0u8; PARK_LEN];
    let _ = mem.read(entry, &mut now);
    if now != park {
        return Err(RunError::Entry {
            program: program.to_string(),
            reason: format!(
                "its first instruction at 0x{entry:x} was changed while it was parked there (a hook on the entry point?)"
            ),
        });
    }
    mem.write(entry, &original).map_err(|e| RunError::Entry {
        program: program.to_string(),
        reason: e.to_string(),
    })?;
    // Every register as it was at the entry point; orig_rax -1 there, so the
    // interrupted `pause` is not restarted.
    ptrace::setregs(child, regs).map_err(trace_err("PTRACE_SETREGS"))
}
