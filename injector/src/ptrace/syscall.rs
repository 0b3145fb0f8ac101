//! System calls run inside the target on a stopped thread.
//!
//! The thread's registers are saved, RIP is pointed at a `syscall` instruction (`0f 05`)
//! found in an executable mapping (libc first), the arguments are loaded, `orig_rax` is
//! set to -1 so that the kernel does not restart the system call the thread was stopped
//! in *into ours*, and the thread is single-stepped over the one instruction. The result
//! is read from `rax` and every register is put back, so an interrupted `nanosleep`
//! (rax = -516, `ERESTART_RESTARTBLOCK`) restarts as if nothing had happened. Without a
//! gadget, `0f 05` is written at the thread's RIP for the step and restored afterwards
//! (only when every thread is stopped).
//!
//! While the thread runs our instruction its signal mask blocks everything but SIGTRAP
//! (`PTRACE_SETSIGMASK`), so pending signals stay queued instead of each costing a stop;
//! the mask it will have after its own system call (`PTRACE_GETSIGMASK`) is put back.
//! A process that ignores SIGTRAP is not single-stepped: forcing the step's SIGTRAP
//! would reset that disposition to `SIG_DFL`. Its thread runs the instruction between a
//! syscall-entry and a syscall-exit stop instead, then is sent back to its signal path.

use nix::sys::ptrace::{self, Options};
use nix::unistd::Pid;

use crate::arch::{Arch, ProcessArch, Syscall};
use crate::memory::{Memory, WriteMemory};
use crate::ptrace::gadgets::search_syscall;
use crate::ptrace::regs::{get_sigmask, set_sigmask, sigbit};
use crate::ptrace::session::{Current, Session, ThreadStop};
use crate::ptrace::session_error::{SessionError, UnexpectedState};
use crate::ptrace::wait::{wait_tid, Waited, EVENT_STOP};
use reader::procfs;

/// Single-steps before giving up (each stop on the way is a held signal or a trap).
const MAX_STEPS: usize = 16;

impl Session {
    /// Uses `addr` (which must hold `0f 05`) for remote system calls, e.g. one found by `find` before stopping.
    pub fn set_syscall_gadget(&mut self, addr: u64) -> Result<(), SessionError> {
        let pid = self.pid;
        let mut got = [0u8; 2];
        self.memory()?.read(addr, &mut got)?;
        if got != self.arch().syscall_instruction() {
            return Err(SessionError::BadGadget { pid, addr });
        }
        self.gadget = Some(Some(addr));
        Ok(())
    }

    /// libc's gadgets for self-restoring borrowed runs ([`crate::ptrace::sigframe`]), x86-64 only.
    pub(crate) fn sigreturn_gadgets(
        &mut self,
    ) -> Result<Option<crate::ptrace::sigframe::SigreturnGadgets>, SessionError> {
        if let Some(g) = self.sigreturn {
            return Ok(g);
        }
        let found = if self.arch() == Arch::X86_64 {
            let mut gadgets = self.gadgets.clone();
            match gadgets.sigreturn_in(self.memory()?) {
                Some(g) => Some(g),
                None => {
                    // Not found before the stop: search now (maps read fresh, inside the stop).
                    let maps = reader::procfs::read_maps(self.pid).unwrap_or_default();
                    let found = gadgets.sigreturn(self.memory()?, &maps);
                    self.gadgets = gadgets;
                    found
                }
            }
        } else {
            None
        };
        self.sigreturn = Some(found);
        Ok(found)
    }

    /// Writes a frame holding `regs`, the thread's FPU state and `mask` below the
    /// stack pointer of the stopped thread `tid` ([`crate::ptrace::sigframe`]); returns the
    /// gadgets and the stack pointer a borrowed run starts with, or `None` when the
    /// process has no such gadgets or the stack has no room (the caller then runs
    /// without the frame).
    pub(crate) fn write_sigframe(
        &mut self,
        tid: i32,
        regs: &libc::user_regs_struct,
        mask: u64,
    ) -> Result<Option<(crate::ptrace::sigframe::SigreturnGadgets, u64)>, SessionError> {
        let Some(gadgets) = self.sigreturn_gadgets()? else {
            return Ok(None);
        };
        let fp = crate::ptrace::regs::get_fpregs(tid)
            .map_err(|e| self.ptrace_error("PTRACE_GETFPREGS", tid, e))?;
        let ctx = crate::ptrace::sigframe::SavedContext {
            regs: *regs,
            fp,
            xstate: crate::ptrace::regs::get_xstate(tid),
            mask,
        };
        let frame = crate::ptrace::sigframe::build(&ctx, &gadgets);
        Ok(self
            .memory()?
            .write(frame.addr, &frame.bytes)
            .ok()
            .map(|()| (gadgets, frame.addr)))
    }

    /// The `syscall` gadget: the caller's ([`Session::set_gadgets`]), or searched for once per session.
    fn gadget(&mut self) -> Result<Option<u64>, SessionError> {
        if let Some(g) = self.gadget {
            return Ok(g);
        }
        let arch = self.arch();
        let kept = self.gadgets.clone();
        if let Some(addr) = kept.syscall_in(arch, self.memory()?) {
            self.gadget = Some(Some(addr));
            return Ok(Some(addr));
        }
        let tid = self
            .threads
            .first()
            .map(|t| t.tid)
            .ok_or(SessionError::Exited { pid: self.pid })?;
        // Through a live thread: the maps of an exited group leader are empty.
        let maps = procfs::read_task_maps(self.pid, tid).map_err(|source| SessionError::Proc {
            path: format!("/proc/{}/task/{tid}/maps", self.pid),
            source,
        })?;
        let found = search_syscall(&maps, self.memory()?, arch.syscall_instruction());
        if let Some((addr, 0)) = found {
            self.gadgets.keep_syscall(addr);
        }
        self.gadget = Some(found.map(|(addr, _)| addr));
        Ok(self.gadget.flatten())
    }

    /// The stopped thread remote system calls run on: one without a held signal and not in a group-stop if possible.
    pub fn syscall_thread(&self) -> Option<i32> {
        if let Some(tid) = self
            .syscall_tid
            .filter(|t| self.threads.iter().any(|x| x.tid == *t))
        {
            return Some(tid);
        }
        let rank = |t: &crate::ptrace::session::Tracee| match (t.signal.is_some(), t.found) {
            (false, ThreadStop::Interrupted) => 0,
            (false, _) => 1,
            (true, _) => 2,
        };
        self.threads.iter().min_by_key(|t| rank(t)).map(|t| t.tid)
    }

    /// Runs one system call inside the target on a stopped thread and returns its raw result (negative errno on failure).
    pub fn remote_syscall(&mut self, nr: i64, args: [u64; 6]) -> Result<i64, SessionError> {
        let tid = self
            .syscall_thread()
            .ok_or(SessionError::Exited { pid: self.pid })?;
        self.remote_syscall_on(tid, nr, args)
    }

    /// Runs one system call on the stopped thread `tid`; returns the raw result (negative errno on failure).
    pub fn remote_syscall_on(
        &mut self,
        tid: i32,
        nr: i64,
        args: [u64; 6],
    ) -> Result<i64, SessionError> {
        self.index(tid)?;
        let saved = self.regs(tid)?;
        let arch = self.arch();
        if !arch.expects_cs(saved.cs) {
            return Err(SessionError::Not64Bit { tid, cs: saved.cs });
        }
        // The mask the thread will have once its current system call is over (the
        // kernel reports saved_sigmask while a ppoll/sigsuspend mask is in force).
        let real_mask =
            get_sigmask(tid).map_err(|e| self.ptrace_error("PTRACE_GETSIGMASK", tid, e))?;
        // Self-restoring when possible: should argstash die while the thread runs our
        // system call, the thread returns to its own context by itself.
        // Not for a thread holding a signal: only the single-step ends in the
        // signal-delivery-stop that hands the signal back at detach without
        // requeueing it (a full real-time queue would lose it).
        let holds_signal = self
            .threads
            .iter()
            .any(|t| t.tid == tid && t.signal.is_some());
        let framed = match arch {
            Arch::X86_64 if !holds_signal => self.write_sigframe(tid, &saved, real_mask)?,
            _ => None,
        };
        let mut patched = None;
        let entry = match framed {
            Some((gadgets, _)) => gadgets.syscall_ret,
            None => match self.gadget()? {
                Some(g) => g,
                None => {
                    if !self.all_threads {
                        return Err(SessionError::NoSyscallGadget { pid: self.pid });
                    }
                    let mem = self.memory()?;
                    let mut original = [0u8; 2];
                    mem.read(saved.rip, &mut original)?;
                    mem.write(saved.rip, &arch.syscall_instruction())?;
                    patched = Some(original);
                    saved.rip
                }
            },
        };
        let mut regs = saved;
        regs.rip = entry;
        if let Some((_, sp)) = framed {
            regs.rsp = sp;
        }
        arch.load_syscall(&mut regs, nr, args);
        // Block signals while the thread runs our instruction, or every pending one
        // would be dequeued on the way (a flood of queued signals means a stop each).
        // Stepping needs SIGTRAP deliverable: a blocked or ignored SIGTRAP is reset to
        // SIG_DFL by the kernel when it forces the trap. A process that ignores SIGTRAP
        // is therefore driven through syscall-stops instead of a single-step.
        // A framed run is never single-stepped: a trap flag left set by a dead tracer
        // would kill the process with SIGTRAP after the step.
        let by_syscall_stops = self.sigtrap_ignored || framed.is_some();
        let step_mask = if by_syscall_stops {
            !0
        } else {
            !sigbit(libc::SIGTRAP)
        };
        // The registers before the mask: once they point into the framed run, a thread
        // whose tracer dies gets its real mask back from the frame.
        let outcome = self
            .set_regs(tid, &regs)
            .and_then(|()| {
                set_sigmask(tid, step_mask)
                    .map_err(|e| self.ptrace_error("PTRACE_SETSIGMASK", tid, e))
            })
            .and_then(|()| {
                if by_syscall_stops {
                    self.run_by_syscall_stops(tid)
                } else {
                    self.step_syscall(tid, entry)
                }
            });
        // Put everything back whatever happened (skipped if the thread is gone).
        let mut restored = Ok(());
        if let Ok(i) = self.index(tid) {
            let unmask = |s: &Self| {
                set_sigmask(tid, real_mask).map_err(|e| s.ptrace_error("PTRACE_SETSIGMASK", tid, e))
            };
            // Framed, the mask goes back first: until the registers are back too, the
            // frame would restore both if argstash died, while a thread given back its
            // own registers under our mask would keep blocking every signal.
            // (Framed threads hold no signal, so none is requeued if one is taken
            // on the way back to the signal path.)
            let unmasked_first = if framed.is_some() {
                unmask(self)
            } else {
                Ok(())
            };
            restored = unmasked_first.and(self.set_regs(tid, &saved));
            if self.threads[i].current == Current::SyscallStop {
                restored = restored.and_then(|()| self.back_to_signal_path(tid));
            }
            if framed.is_none() {
                restored = restored.and(unmask(self));
            }
        }
        let unpatched = match patched {
            Some(original) => self
                .memory()
                .and_then(|m| m.write(saved.rip, &original).map_err(SessionError::from)),
            None => Ok(()),
        };
        let result = arch.syscall_result(outcome? as u64);
        restored?;
        unpatched?;
        self.syscall_tid = Some(tid);
        Ok(result)
    }

    /// Holds a real signal that a resumed thread stopped for (re-delivered at detach).
    pub(crate) fn hold_signal(&mut self, i: usize) -> Result<(), SessionError> {
        let tid = self.threads[i].tid;
        let info = ptrace::getsiginfo(Pid::from_raw(tid))
            .map_err(|e| self.ptrace_error("PTRACE_GETSIGINFO", tid, e))?;
        let t = &mut self.threads[i];
        t.current = Current::SignalStop;
        if t.signal.is_none() {
            t.signal = Some(info);
            t.resumed = false;
        } else {
            t.extra.push(info);
        }
        Ok(())
    }

    /// Waits for thread `i` after a resume; `Exited` when it is gone (and dropped from the session).
    fn wait_resumed(&mut self, i: usize) -> Result<(i32, i32, i32), SessionError> {
        let tid = self.threads[i].tid;
        match wait_tid(tid)? {
            Waited::Gone => {
                self.threads.remove(i);
                Err(SessionError::Exited { pid: self.pid })
            }
            Waited::Stop { sig, event, raw } => Ok((sig, event, raw)),
        }
    }

    /// Single-steps `tid` over the `syscall` at `entry`; holds real signals that arrive first.
    fn step_syscall(&mut self, tid: i32, entry: u64) -> Result<i64, SessionError> {
        let child = Pid::from_raw(tid);
        for _ in 0..MAX_STEPS {
            let i = self.index(tid)?;
            ptrace::step(child, None)
                .map_err(|e| self.ptrace_error("PTRACE_SINGLESTEP", tid, e))?;
            self.threads[i].resumed = true;
            let (sig, event, raw) = self.wait_resumed(i)?;
            match event {
                0 => {
                    self.threads[i].current = Current::SignalStop;
                    let now = ptrace::getregs(child)
                        .map_err(|e| self.ptrace_error("PTRACE_GETREGS", tid, e))?;
                    if sig == libc::SIGTRAP && now.rip != entry {
                        return Ok(now.rax as i64);
                    }
                    // A signal that cannot be blocked (or a real SIGTRAP) came first.
                    self.hold_signal(i)?;
                }
                // A trap left pending (interrupt, group-stop): nothing ran yet.
                EVENT_STOP => self.threads[i].current = Current::Event,
                _ => {
                    return Err(SessionError::Unexpected {
                        tid,
                        state: UnexpectedState::Wait(raw),
                    })
                }
            }
        }
        Err(SessionError::Unexpected {
            tid,
            state: UnexpectedState::NoStepTrap { steps: MAX_STEPS },
        })
    }

    /// Runs the `syscall` at RIP between a syscall-entry and a syscall-exit stop.
    fn run_by_syscall_stops(&mut self, tid: i32) -> Result<i64, SessionError> {
        let child = Pid::from_raw(tid);
        let base = if self.all_threads {
            Options::PTRACE_O_TRACECLONE
        } else {
            Options::empty()
        };
        // TRACESYSGOOD tells syscall-stops (SIGTRAP | 0x80) from a real SIGTRAP.
        ptrace::setoptions(child, base | Options::PTRACE_O_TRACESYSGOOD)
            .map_err(|e| self.ptrace_error("PTRACE_SETOPTIONS", tid, e))?;
        let result = self.syscall_stops(tid);
        // Options die with the ptrace link anyway; put them back for tidiness.
        if self.index(tid).is_ok() {
            let reset = ptrace::setoptions(child, base)
                .map_err(|e| self.ptrace_error("PTRACE_SETOPTIONS", tid, e));
            let value = result?;
            reset?;
            return Ok(value);
        }
        result
    }

    fn syscall_stops(&mut self, tid: i32) -> Result<i64, SessionError> {
        let child = Pid::from_raw(tid);
        let mut entered = false;
        for _ in 0..MAX_STEPS {
            let i = self.index(tid)?;
            ptrace::syscall(child, None)
                .map_err(|e| self.ptrace_error("PTRACE_SYSCALL", tid, e))?;
            self.threads[i].resumed = true;
            let (sig, event, raw) = self.wait_resumed(i)?;
            match event {
                0 if sig == libc::SIGTRAP | 0x80 => {
                    self.threads[i].current = Current::SyscallStop;
                    if entered {
                        let regs = ptrace::getregs(child)
                            .map_err(|e| self.ptrace_error("PTRACE_GETREGS", tid, e))?;
                        return Ok(regs.rax as i64);
                    }
                    entered = true;
                }
                // A signal that cannot be blocked came first.
                0 => self.hold_signal(i)?,
                EVENT_STOP => self.threads[i].current = Current::Event,
                _ => {
                    return Err(SessionError::Unexpected {
                        tid,
                        state: UnexpectedState::Wait(raw),
                    })
                }
            }
        }
        Err(SessionError::Unexpected {
            tid,
            state: UnexpectedState::NoSyscallExit {
                resumptions: MAX_STEPS,
            },
        })
    }

    /// From a syscall-stop, lets the thread leave the kernel and stop again in its
    /// signal path (where every held thread waits), with the registers already restored.
    pub(crate) fn back_to_signal_path(&mut self, tid: i32) -> Result<(), SessionError> {
        let child = Pid::from_raw(tid);
        ptrace::interrupt(child).map_err(|e| self.ptrace_error("PTRACE_INTERRUPT", tid, e))?;
        ptrace::cont(child, None).map_err(|e| self.ptrace_error("PTRACE_CONT", tid, e))?;
        let i = self.index(tid)?;
        let (_, event, raw) = self.wait_resumed(i)?;
        match event {
            EVENT_STOP => {
                self.threads[i].current = Current::Event;
                Ok(())
            }
            0 => self.hold_signal(i),
            _ => Err(SessionError::Unexpected {
                tid,
                state: UnexpectedState::Wait(raw),
            }),
        }
    }

    /// Checks a raw result for `-errno`.
    fn syscall_ok(&self, nr: i64, r: i64) -> Result<i64, SessionError> {
        if (-4095..0).contains(&r) {
            Err(SessionError::RemoteSyscall {
                pid: self.pid,
                name: self.arch().syscall_name(nr),
                nr,
                errno: (-r) as i32,
            })
        } else {
            Ok(r)
        }
    }

    /// Maps anonymous memory (fd -1, offset 0) in the target; returns the address the kernel chose.
    pub fn remote_mmap(
        &mut self,
        addr: u64,
        len: u64,
        prot: i32,
        flags: i32,
    ) -> Result<u64, SessionError> {
        let nr = self.arch().syscall_number(Syscall::Mmap);
        let r = self.remote_syscall(nr, [addr, len, prot as u64, flags as u64, u64::MAX, 0])?;
        self.syscall_ok(nr, r).map(|a| a as u64)
    }

    /// Unmaps `len` bytes at `addr` in the target.
    pub fn remote_munmap(&mut self, addr: u64, len: u64) -> Result<(), SessionError> {
        let nr = self.arch().syscall_number(Syscall::Munmap);
        let r = self.remote_syscall(nr, [addr, len, 0, 0, 0, 0])?;
        self.syscall_ok(nr, r).map(drop)
    }

    /// Changes the protection of `len` bytes at `addr` in the target.
    pub fn remote_mprotect(&mut self, addr: u64, len: u64, prot: i32) -> Result<(), SessionError> {
        let nr = self.arch().syscall_number(Syscall::Mprotect);
        let r = self.remote_syscall(nr, [addr, len, prot as u64, 0, 0, 0])?;
        self.syscall_ok(nr, r).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ptrace::gadgets::Gadgets;
    use crate::ptrace::session::SIGNALS;
    use argstash_tests::{
        blocked_syscall, regs_words, sigqueue, thread_ids, thread_status, wait_all_blocked,
        wait_for, Target, OUTPUT_TIMEOUT,
    };
    use reader::procfs::read_maps;

    /// Sleeps 300 ms in one nanosleep and says whether it completed.
    const SLEEP: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <time.h>
int main(void) {
    struct timespec a, b, ts = {0, 300000000};
    clock_gettime(CLOCK_MONOTONIC, &a);
    printf("ready\n");
    fflush(stdout);
    int r = nanosleep(&ts, 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    long ms = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
    printf("%s %ld\n", r == 0 ? "done" : errno == EINTR ? "EINTR" : "error", ms);
    fflush(stdout);
    return 0;
}
"#;

    fn perms_at(pid: i32, addr: u64) -> Option<String> {
        let m = read_maps(pid).unwrap();
        let e = m.into_iter().find(|e| e.start == addr)?;
        let p = e.perms;
        Some(format!(
            "{}{}{}",
            if p.read { 'r' } else { '-' },
            if p.write { 'w' } else { '-' },
            if p.exec { 'x' } else { '-' }
        ))
    }

    #[test]
    fn sleeping_thread_resumes_its_sleep() {
        let child = Target::spawn_source("sleep", SLEEP, &[]);
        let pid = child.pid();
        wait_for("the program sleeps", || {
            blocked_syscall(pid, pid) == Some(libc::SYS_clock_nanosleep)
        });
        let mut s = Session::attach_all(pid).unwrap();
        let before = s.regs(pid).unwrap();
        assert_eq!(before.rax as i64, -516, "ERESTART_RESTARTBLOCK");
        assert_eq!(before.orig_rax, libc::SYS_clock_nanosleep as u64);

        let a = s
            .remote_mmap(
                0,
                8192,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            )
            .unwrap();
        assert_eq!(perms_at(pid, a).as_deref(), Some("r-x"));
        s.remote_mprotect(a, 8192, libc::PROT_READ).unwrap();
        assert_eq!(perms_at(pid, a).as_deref(), Some("r--"));
        s.remote_munmap(a, 8192).unwrap();
        assert_eq!(perms_at(pid, a), None);
        assert_eq!(regs_words(&s.regs(pid).unwrap()), regs_words(&before));
        s.detach().unwrap();

        let out = child.expect_line(OUTPUT_TIMEOUT);
        let (word, ms) = out.split_once(' ').unwrap();
        assert_eq!(word, "done", "{out}");
        assert!(ms.parse::<u64>().unwrap() >= 299, "{out}");
        assert!(child.next_line(Duration::from_millis(50)).is_none());
    }

    /// Threads blocked in read() on a pipe that never gets data; main reads stdin.
    /// Readers block every signal; main has a SIGTRAP handler.
    const READERS: &str = r#"
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static int fds[2];
static void *reader(void *a) {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, 0);
    char c;
    read(fds[0], &c, 1);
    return 0;
}
static void on_trap(int sig) { write(1, "TRAP\n", 5); }
int main(void) {
    signal(SIGTRAP, on_trap);
    pipe(fds);
    pthread_t t[8];
    for (int i = 0; i < 8; i++) pthread_create(&t[i], 0, reader, 0);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "quit", 4)) break;
        printf("echo %s", line);
        fflush(stdout);
    }
    return 0;
}
"#;

    /// Signal masks and dispositions of every thread, from /proc.
    fn signal_state(pid: i32) -> Vec<String> {
        thread_ids(pid)
            .into_iter()
            .map(|t| {
                let text = std::fs::read_to_string(format!("/proc/{pid}/task/{t}/status")).unwrap();
                text.lines()
                    .filter(|l| l.starts_with("Sig") || l.starts_with("ShdPnd"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    fn registers_identical(by_syscall_stops: bool, framed: bool) {
        let mut child = Target::spawn_source("readers", READERS, &[]);
        let pid = child.pid();
        wait_all_blocked(pid);
        let signals = signal_state(pid);
        let mut s = Session::attach_all(pid).unwrap();
        s.sigtrap_ignored = by_syscall_stops;
        if !framed {
            s.sigreturn = Some(None);
        }
        let tids = s.tids();
        assert_eq!(tids.len(), 9);
        let before: Vec<_> = tids
            .iter()
            .map(|t| regs_words(&s.regs(*t).unwrap()))
            .collect();
        // The extended state too (x87, SSE, AVX, AVX-512...), byte for byte.
        let images = |tids: &[i32]| -> Vec<_> {
            tids.iter()
                .map(|t| crate::ptrace::regs::get_xstate(*t))
                .collect()
        };
        let images_before = images(&tids);
        for (n, &tid) in tids.iter().enumerate() {
            let a = s
                .remote_mmap(
                    0,
                    4096,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                )
                .unwrap();
            s.remote_mprotect(a, 4096, libc::PROT_READ).unwrap();
            // Also on the threads that block every signal.
            let r = s
                .remote_syscall_on(tid, libc::SYS_munmap, [a, 4096, 0, 0, 0, 0])
                .unwrap();
            assert_eq!(r, 0, "munmap on thread #{n}");
        }
        let same_session: Vec<_> = tids
            .iter()
            .map(|t| regs_words(&s.regs(*t).unwrap()))
            .collect();
        assert_eq!(before, same_session);
        assert!(images_before == images(&tids), "XSAVE images changed");
        s.detach().unwrap();

        // The read()s restart (ERESTARTSYS) and block again: a second session sees the same registers.
        wait_all_blocked(pid);
        assert_eq!(signal_state(pid), signals);
        let s = Session::attach_all(pid).unwrap();
        let again: Vec<_> = tids
            .iter()
            .map(|t| regs_words(&s.regs(*t).unwrap()))
            .collect();
        assert_eq!(before, again);
        assert!(
            images_before == images(&tids),
            "XSAVE images changed after the read()s restarted"
        );
        s.detach().unwrap();
        child.write_stdin("hello\n");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "echo hello");
        assert!(
            child.next_line(Duration::from_millis(50)).is_none(),
            "stray SIGTRAP"
        );
    }

    /// The tracer dies (its thread exits while it holds the session) right after
    /// giving every thread a framed remote system call: each thread runs the call,
    /// returns through `__restore_rt` into its own context, and its `read` starts again.
    #[test]
    fn a_dead_tracer_leaves_framed_threads_whole() {
        let mut child = Target::spawn_source("deadtracer", READERS, &[]);
        let pid = child.pid();
        wait_all_blocked(pid);
        let signals = signal_state(pid);
        let state = |s: &Session| -> Vec<_> {
            s.tids()
                .iter()
                .map(|t| {
                    (
                        regs_words(&s.regs(*t).unwrap()),
                        crate::ptrace::regs::get_xstate(*t),
                    )
                })
                .collect()
        };
        let before = {
            let s = Session::attach_all(pid).unwrap();
            let r = state(&s);
            s.detach().unwrap();
            r
        };
        wait_all_blocked(pid);
        std::thread::spawn(move || {
            let mut s = Session::attach_all(pid).unwrap();
            for tid in s.tids() {
                let saved = s.regs(tid).unwrap();
                let mask = get_sigmask(tid).unwrap();
                let (g, sp) = s
                    .write_sigframe(tid, &saved, mask)
                    .unwrap()
                    .expect("libc has the gadgets and the stack has room");
                let mut regs = saved;
                regs.rip = g.syscall_ret;
                regs.rsp = sp;
                Arch::X86_64.load_syscall(&mut regs, libc::SYS_getpid, [0; 6]);
                set_sigmask(tid, !0).unwrap();
                s.set_regs(tid, &regs).unwrap();
            }
            // As if argstash were killed here: no restore, no detach.
            std::mem::forget(s);
        })
        .join()
        .unwrap();
        wait_all_blocked(pid);
        assert_eq!(signal_state(pid), signals);
        let s = Session::attach_all(pid).unwrap();
        let after = state(&s);
        s.detach().unwrap();
        // Registers and XSAVE images, as rt_sigreturn restored them from the frames.
        let regs =
            |v: &[([u64; 27], Option<Vec<u8>>)]| v.iter().map(|(r, _)| *r).collect::<Vec<_>>();
        assert_eq!(regs(&before), regs(&after));
        assert!(before == after, "XSAVE images differ after rt_sigreturn");
        child.write_stdin("still here\n");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "echo still here");
    }

    #[test]
    fn registers_identical_before_and_after() {
        registers_identical(false, false);
    }

    #[test]
    fn registers_identical_with_syscall_stops() {
        registers_identical(true, false);
    }

    #[test]
    fn registers_identical_with_a_sigframe() {
        registers_identical(false, true);
    }

    /// A thread whose real mask blocks SIGUSR1 waits in ppoll with a temporary mask that
    /// lets it through; the handler interrupts the ppoll, then the real mask is back.
    const PPOLL: &str = r#"
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static int fds[2];
static void on_usr1(int sig) { write(1, "usr1\n", 5); }
static void *waiter(void *a) {
    sigset_t usr1, none, now;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigemptyset(&none);
    pthread_sigmask(SIG_BLOCK, &usr1, 0);
    struct pollfd p = {fds[0], POLLIN, 0};
    printf("ready\n");
    fflush(stdout);
    int r = ppoll(&p, 1, 0, &none);
    pthread_sigmask(SIG_BLOCK, 0, &now);
    printf("ppoll=%d blocked=%d\n", r, sigismember(&now, SIGUSR1));
    fflush(stdout);
    return 0;
}
int main(void) {
    signal(SIGUSR1, on_usr1);
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, 0);
    pipe(fds);
    pthread_t t;
    pthread_create(&t, 0, waiter, 0);
    pthread_join(t, 0);
    return 0;
}
"#;

    fn ppoll_keeps_masks(by_syscall_stops: bool) {
        let child = Target::spawn_source("ppoll", PPOLL, &[]);
        let pid = child.pid();
        let tid = thread_ids(pid)[1];
        wait_for("the thread waits in ppoll", || {
            blocked_syscall(pid, tid) == Some(libc::SYS_ppoll)
        });
        let mut s = Session::attach_all(pid).unwrap();
        s.sigtrap_ignored = by_syscall_stops;
        for _ in 0..3 {
            let a = s
                .remote_syscall_on(tid, libc::SYS_mmap, [0, 4096, 1, 0x22, u64::MAX, 0])
                .unwrap();
            assert!(a > 0);
            s.remote_syscall_on(tid, libc::SYS_munmap, [a as u64, 4096, 0, 0, 0, 0])
                .unwrap();
        }
        s.detach().unwrap();
        wait_for("the ppoll is restarted", || {
            blocked_syscall(pid, tid) == Some(libc::SYS_ppoll)
        });
        assert!(child.next_line(Duration::from_millis(20)).is_none());
        // SAFETY: tgkill takes three integers.
        assert_eq!(
            unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGUSR1) },
            0
        );
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "usr1");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "ppoll=-1 blocked=1");
    }

    #[test]
    fn ppoll_temporary_mask_survives() {
        ppoll_keeps_masks(false);
    }

    #[test]
    fn ppoll_temporary_mask_survives_syscall_stops() {
        ppoll_keeps_masks(true);
    }

    #[test]
    fn ignored_sigtrap_stays_ignored() {
        let child = Target::spawn_source(
            "igntrap",
            &SLEEP.replace(
                "int main(void) {",
                "#include <signal.h>\nint main(void) {\n    signal(SIGTRAP, SIG_IGN);",
            ),
            &[],
        );
        let pid = child.pid();
        let ignored = || {
            let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            let line = text
                .lines()
                .find(|l| l.starts_with("SigIgn:"))
                .unwrap()
                .to_string();
            u64::from_str_radix(line[7..].trim(), 16).unwrap() & (1 << (libc::SIGTRAP - 1)) != 0
        };
        assert!(ignored());
        wait_for("the program sleeps", || {
            blocked_syscall(pid, pid) == Some(libc::SYS_clock_nanosleep)
        });
        let mut s = Session::attach_all(pid).unwrap();
        assert!(s.sigtrap_ignored);
        let before = s.regs(pid).unwrap();
        let a = s
            .remote_mmap(
                0,
                8192,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            )
            .unwrap();
        assert_eq!(perms_at(pid, a).as_deref(), Some("r-x"));
        s.remote_munmap(a, 8192).unwrap();
        assert_eq!(regs_words(&s.regs(pid).unwrap()), regs_words(&before));
        s.detach().unwrap();
        assert!(ignored(), "SIGTRAP no longer ignored");
        let out = child.expect_line(OUTPUT_TIMEOUT);
        assert!(out.starts_with("done "), "{out}");
        assert!(out[5..].parse::<u64>().unwrap() >= 299, "{out}");
    }

    #[test]
    fn held_signal_survives_a_remote_syscall() {
        let child = Target::spawn_source("sigr", SIGNALS, &[]);
        let pid = child.pid();
        let mut s = Session::attach_all(pid).unwrap();
        sigqueue(pid, libc::SIGUSR1, 9);
        s.resume_until_stop(pid).unwrap();
        assert_eq!(
            s.stop_state(pid),
            Some(ThreadStop::Signal {
                signal: libc::SIGUSR1
            })
        );
        let before = s.regs(pid).unwrap();
        let a = s
            .remote_mmap(
                0,
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            )
            .unwrap();
        s.remote_munmap(a, 4096).unwrap();
        assert_eq!(regs_words(&s.regs(pid).unwrap()), regs_words(&before));
        s.detach().unwrap();
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "usr1 code=-1");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "usr1 value=9");
        assert!(
            child.next_line(Duration::from_millis(100)).is_none(),
            "second delivery or stray SIGTRAP"
        );
    }

    /// A thread holding one signal meets an unblockable SIGSTOP during the step: the
    /// first is re-delivered exactly, the second re-queued; both take effect.
    #[test]
    fn second_signal_during_the_step_is_requeued() {
        let child = Target::spawn_source("sig2", SIGNALS, &[]);
        let pid = child.pid();
        let mut s = Session::attach_all(pid).unwrap();
        sigqueue(pid, libc::SIGUSR1, 5);
        s.resume_until_stop(pid).unwrap();
        assert_eq!(
            s.stop_state(pid),
            Some(ThreadStop::Signal {
                signal: libc::SIGUSR1
            })
        );
        nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGSTOP).unwrap();
        let a = s
            .remote_mmap(
                0,
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            )
            .unwrap();
        assert_eq!(s.threads[0].extra.len(), 1, "SIGSTOP held during the step");
        s.remote_munmap(a, 4096).unwrap();
        s.detach().unwrap();
        wait_for("the process stops", || thread_status(pid, pid) == ('T', 0));
        assert!(child.next_line(Duration::from_millis(50)).is_none());
        nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGCONT).unwrap();
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "usr1 code=-1");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "usr1 value=5");
        assert!(child.next_line(Duration::from_millis(100)).is_none());
    }

    #[test]
    fn group_stopped_process_takes_a_remote_syscall() {
        let mut child = Target::spawn_source("gstop", READERS, &[]);
        let pid = child.pid();
        nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGSTOP).unwrap();
        wait_for("stopped", || {
            thread_ids(pid)
                .iter()
                .all(|t| thread_status(pid, *t).0 == 'T')
        });
        let mut s = Session::attach_all(pid).unwrap();
        let a = s
            .remote_mmap(
                0,
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            )
            .unwrap();
        s.detach().unwrap();
        assert_eq!(perms_at(pid, a).as_deref(), Some("r--"));
        // Woken by the detach, each thread goes back into the group-stop, and stays there.
        wait_for("every thread is stopped again", || {
            thread_ids(pid)
                .iter()
                .all(|t| thread_status(pid, *t) == ('T', 0))
        });
        child.write_stdin("x\n");
        assert!(
            child.next_line(Duration::from_millis(100)).is_none(),
            "a stopped process answered"
        );
        for t in thread_ids(pid) {
            assert_eq!(thread_status(pid, t), ('T', 0));
        }
        nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGCONT).unwrap();
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "echo x");
    }

    #[test]
    fn fallback_writes_syscall_at_rip() {
        let mut child = Target::spawn_source("fallb", READERS, &[]);
        let pid = child.pid();
        wait_all_blocked(pid);
        let mut s = Session::attach_all(pid).unwrap();
        s.gadget = Some(None);
        s.sigreturn = Some(None);
        let rip = s.regs(pid).unwrap().rip;
        let code = s.memory().unwrap().read_vec(rip - 2, 8).unwrap();
        let a = s
            .remote_mmap(
                0,
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            )
            .unwrap();
        s.remote_munmap(a, 4096).unwrap();
        assert_eq!(s.memory().unwrap().read_vec(rip - 2, 8).unwrap(), code);
        s.detach().unwrap();
        child.write_stdin("y\n");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "echo y");

        // With one thread stopped, writing at RIP is refused.
        let tid = thread_ids(pid)[1];
        let mut s = Session::attach_thread(pid, tid).unwrap();
        s.gadget = Some(None);
        s.sigreturn = Some(None);
        let e = s
            .remote_mmap(
                0,
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            )
            .unwrap_err();
        assert!(matches!(e, SessionError::NoSyscallGadget { .. }), "{e}");
        // A single stopped thread runs remote syscalls through a gadget.
        s.gadget = None;
        let a = s
            .remote_mmap(
                0,
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            )
            .unwrap();
        s.remote_munmap(a, 4096).unwrap();
        s.detach().unwrap();
    }

    #[test]
    fn errors_are_rendered() {
        let child = Target::spawn_source("errs", READERS, &[]);
        let pid = child.pid();
        let start = reader::procfs::read_stat(pid).unwrap().start_time;
        let maps = read_maps(pid).unwrap();
        let mem = crate::memory::ProcessMemory::open(pid).unwrap();
        let mut gadgets = Gadgets::new(pid, start);
        let gadget = gadgets.find(Arch::X86_64, &maps, &mem).unwrap();
        assert_eq!(gadgets.syscall_in(Arch::X86_64, &mem), Some(gadget));
        let libc_code = maps.iter().find(|m| m.contains(gadget)).unwrap();
        assert!(libc_code.path.contains("libc"), "{}", libc_code.path);
        let mut s = Session::attach_all(pid).unwrap();
        // Gadgets of another process with that pid are not used.
        let mut other = Gadgets::new(pid, start + 1);
        other.find(Arch::X86_64, &maps, &mem);
        s.set_gadgets(&other);
        assert_ne!(s.gadgets(), &other, "another process with that pid");
        s.set_gadgets(&gadgets);
        assert_eq!(s.gadgets(), &gadgets);
        s.set_syscall_gadget(gadget).unwrap();
        assert!(matches!(
            s.set_syscall_gadget(gadget + 1),
            Err(SessionError::BadGadget { .. })
        ));
        let e = s.remote_munmap(0x1001, 4096).unwrap_err();
        assert!(
            matches!(
                e,
                SessionError::RemoteSyscall {
                    errno: libc::EINVAL,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            format!("remote munmap in process {pid} failed: EINVAL (Invalid argument)")
        );
        let a = s
            .remote_mmap(
                0,
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            )
            .unwrap();
        let e = s
            .remote_mmap(
                a,
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            )
            .unwrap_err();
        assert!(
            matches!(
                e,
                SessionError::RemoteSyscall {
                    errno: libc::EEXIST,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(
            s.remote_syscall(libc::SYS_getpid, [0; 6]).unwrap(),
            pid as i64
        );
        s.detach().unwrap();
    }

    /// The leader calls pthread_exit; a worker reads stdin.
    const ZOMBIE_LEADER: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static char buf[64] = "zombie leader";
static void *worker(void *a) {
    printf("%lx\nready\n", (unsigned long)buf);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        printf("%s\n", buf);
        fflush(stdout);
    }
    return 0;
}
int main(void) {
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    pthread_exit(0);
}
"#;

    #[test]
    fn exited_group_leader() {
        let mut child = Target::spawn_source("zleader", ZOMBIE_LEADER, &[]);
        let pid = child.pid();
        let buf = u64::from_str_radix(&child.before_ready()[0], 16).unwrap();
        wait_for("the leader is a zombie", || {
            thread_status(pid, pid).0 == 'Z'
        });
        let mut s = Session::attach_all(pid).unwrap();
        assert_eq!(s.tids().len(), 1);
        assert!(!s.tids().contains(&pid));
        let a = s
            .remote_mmap(
                0,
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            )
            .unwrap();
        s.remote_munmap(a, 4096).unwrap();
        s.memory().unwrap().write(buf, b"Z").unwrap();
        assert_eq!(s.memory().unwrap().read_vec(buf, 6).unwrap(), b"Zombie");
        s.detach().unwrap();
        child.write_stdin("\n");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "Zombie leader");
    }
}
