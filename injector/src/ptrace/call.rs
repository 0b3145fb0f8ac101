//! Function calls run inside the target on one stopped thread, with a time limit.
//!
//! Call only on a thread proved to be at a safe point ([`crate::ptrace::safe_point`]): the
//! callee may allocate and take the loader's or libgcc's locks.
//!
//! The thread's whole context (registers, XSAVE area, signal mask) is saved, and also
//! written below its stack pointer as a signal frame ([`crate::ptrace::sigframe`]) whose
//! return address, `__restore_rt`, is the callee's return address. RIP is pointed at
//! the function, the arguments are loaded and `orig_rax` is set to -1 (no restart of an
//! interrupted system call into our call). The thread runs under `PTRACE_SYSCALL`
//! until the callee returns into `__restore_rt` and its `rt_sigreturn` gives the
//! thread its context back; then argstash puts back the exact saved state (so an
//! interrupted system call restarts as it would have). The callee's return value is
//! lost on the way (`__restore_rt` loads `rax`): callers read what they need from memory.
//!
//! Nothing is ever abandoned half-way: a callee that has not returned within the time
//! limit (it waits for a lock another thread holds) is *released* — the thread is let
//! go as it is and finishes the call by itself, returning through the frame into its
//! own context ([`RemoteCallError::Released`]). The same happens if argstash dies
//! while the call runs. While it runs only `SIGSEGV` is unblocked (a fault with
//! `SIGSEGV` blocked or ignored would make the kernel reset the process's handler to
//! `SIG_DFL`; a process that ignores `SIGSEGV` is refused).

use std::time::{Duration, Instant};

use nix::sys::ptrace;
use nix::unistd::Pid;
use thiserror::Error;

use crate::ptrace::regs::{
    get_fpregs, get_sigmask, get_xstate, set_fpregs, set_sigmask, set_xstate, sigbit,
};
use crate::ptrace::session::{Current, Session};
use crate::ptrace::session_error::SessionError;
use crate::ptrace::wait::{try_wait, wait_tid_within, Waited, STOP_DEADLINE};

/// The user code segment selector of 64-bit code on Linux x86-64.
const USER_CS_64: u64 = 0x33;

/// A remote function call failed; the thread's registers and mask were put back.
#[derive(Debug, Error)]
pub enum RemoteCallError {
    /// Stopping, resuming or inspecting the thread failed.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The function did not return in time (it waits for a lock another thread
    /// holds); the thread was let go to finish the call by itself.
    #[error("{function} did not return within {waited:?} on thread {tid} (it waits for a lock another thread holds); the thread was let go to finish the call and return to its own code by itself")]
    Released {
        /// The function's name.
        function: String,
        /// The thread it ran on.
        tid: i32,
        /// How long we waited.
        waited: Duration,
    },
    /// The function faulted somewhere other than our return address.
    #[error("{function} crashed on thread {tid} at 0x{rip:x} (signal {signal}); the thread was restored and the signal discarded")]
    Crashed {
        /// The function's name.
        function: String,
        /// The thread it ran on.
        tid: i32,
        /// Where it faulted.
        rip: u64,
        /// The signal.
        signal: i32,
    },
    /// The process ignores SIGSEGV, so the return could not be caught without changing its handler.
    #[error("process {pid} ignores SIGSEGV, so a function call cannot be run in it without resetting that disposition")]
    SegvIgnored {
        /// The process.
        pid: i32,
    },
    /// The process has no `syscall; ret` and `__restore_rt` in its libc (a static or
    /// non-glibc program), so a call could not be made self-restoring.
    #[error("process {pid} has no glibc signal-return code to make a call in it safe if argstash is interrupted")]
    NoSigreturn {
        /// The process.
        pid: i32,
    },
    /// Too many more function arguments than registers.
    #[error("a remote call takes at most 6 arguments, {0} given")]
    TooManyArgs(usize),
}

/// Read fresh before each call: the program may change its SIGSEGV disposition at any time.
fn segv_ignored(pid: i32) -> bool {
    reader::procfs::read_status(pid).is_ok_and(|st| st.ignores(libc::SIGSEGV))
}

/// How the called function ended.
enum Ended {
    /// It returned and the thread went through `rt_sigreturn` (now in a syscall-exit stop).
    Returned,
    /// It faulted at this pc with this signal.
    Crashed(u64, i32),
    /// It did not return in time; the thread is stopped somewhere inside the call.
    TimedOut,
}

impl Session {
    /// Calls `function(args...)` on the stopped thread `tid`, giving up waiting after
    /// `timeout` (the thread is then released to finish by itself).
    ///
    /// `name` names the function in errors. Whatever happens short of a release, the
    /// thread is restored exactly (registers, FPU/SSE/AVX state, signal mask).
    pub fn remote_call(
        &mut self,
        tid: i32,
        function: u64,
        name: &str,
        args: &[u64],
        timeout: Duration,
    ) -> Result<(), RemoteCallError> {
        if args.len() > 6 {
            return Err(RemoteCallError::TooManyArgs(args.len()));
        }
        if segv_ignored(self.pid) {
            return Err(RemoteCallError::SegvIgnored { pid: self.pid });
        }
        self.index(tid)?;
        let saved = self.regs(tid)?;
        if saved.cs != USER_CS_64 {
            return Err(SessionError::Not64Bit { tid, cs: saved.cs }.into());
        }
        let fp = get_fpregs(tid).map_err(|e| self.ptrace_error("PTRACE_GETFPREGS", tid, e))?;
        let xstate = get_xstate(tid);
        let real_mask =
            get_sigmask(tid).map_err(|e| self.ptrace_error("PTRACE_GETSIGMASK", tid, e))?;
        let Some((gadgets, sp)) = self.write_sigframe(tid, &saved, real_mask)? else {
            return Err(RemoteCallError::NoSigreturn { pid: self.pid });
        };
        let mut regs = saved;
        regs.rip = function;
        regs.rsp = sp;
        regs.rax = 0;
        regs.orig_rax = u64::MAX;
        let mut slots = [0u64; 6];
        slots[..args.len()].copy_from_slice(args);
        regs.rdi = slots[0];
        regs.rsi = slots[1];
        regs.rdx = slots[2];
        regs.rcx = slots[3];
        regs.r8 = slots[4];
        regs.r9 = slots[5];
        // Clear the direction flag, as the ABI requires at a call.
        regs.eflags &= !0x400;
        // The registers first: from then on the thread finds its way back by itself.
        self.set_regs(tid, &regs)?;
        let sigreturn_at = (
            gadgets.restore_rt + crate::ptrace::sigframe::RESTORE_RT_SYSCALL_END,
            sp + 8,
        );
        let outcome = set_sigmask(tid, !sigbit(libc::SIGSEGV))
            .map_err(|e| self.ptrace_error("PTRACE_SETSIGMASK", tid, e))
            .and_then(|()| self.run_framed_call(tid, sigreturn_at, timeout));
        if let Ok(Ended::TimedOut) = outcome {
            // Released: the frame brings the thread back when the call is done.
            return Err(RemoteCallError::Released {
                function: name.to_string(),
                tid,
                waited: timeout,
            });
        }
        let mut restored: Result<(), SessionError> = Ok(());
        if let Ok(i) = self.index(tid) {
            // The mask before the registers: should argstash die in between, a thread
            // still inside the call is brought back by the frame, while one given its
            // own registers under our mask would keep blocking every signal.
            restored = set_sigmask(tid, real_mask)
                .map_err(|e| self.ptrace_error("PTRACE_SETSIGMASK", tid, e))
                .and(self.set_regs(tid, &saved));
            if self.threads[i].current == Current::SyscallStop {
                restored = restored.and_then(|()| self.back_to_signal_path(tid));
            }
            restored = restored.and_then(|()| match xstate.as_deref() {
                // The whole XSAVE image as it was read (AVX, AVX-512, PKRU, AMX...).
                Some(x) => set_xstate(tid, x).map_err(|e| {
                    // At least x87/SSE back; the error says the rest was not.
                    let _ = set_fpregs(tid, &fp);
                    self.ptrace_error("PTRACE_SETREGSET", tid, e)
                }),
                // No XSAVE: x87/SSE is all there is.
                None => {
                    set_fpregs(tid, &fp).map_err(|e| self.ptrace_error("PTRACE_SETFPREGS", tid, e))
                }
            });
        }
        let ended = outcome?;
        restored?;
        match ended {
            Ended::Returned | Ended::TimedOut => Ok(()),
            Ended::Crashed(rip, signal) => Err(RemoteCallError::Crashed {
                function: name.to_string(),
                tid,
                rip,
                signal,
            }),
        }
    }

    /// Runs `tid` under `PTRACE_SYSCALL` until it enters `rt_sigreturn` at
    /// `sigreturn_at` (rip after the `syscall`, rsp on the frame) and leaves it again,
    /// faults, or `timeout` passes (then it is stopped wherever it is).
    fn run_framed_call(
        &mut self,
        tid: i32,
        sigreturn_at: (u64, u64),
        timeout: Duration,
    ) -> Result<Ended, SessionError> {
        let child = Pid::from_raw(tid);
        let base = if self.all_threads {
            ptrace::Options::PTRACE_O_TRACECLONE
        } else {
            ptrace::Options::empty()
        };
        ptrace::setoptions(child, base | ptrace::Options::PTRACE_O_TRACESYSGOOD)
            .map_err(|e| self.ptrace_error("PTRACE_SETOPTIONS", tid, e))?;
        let deadline = Instant::now() + timeout;
        let mut returning = false;
        let ended = loop {
            let i = self.index(tid)?;
            ptrace::syscall(child, None)
                .map_err(|e| self.ptrace_error("PTRACE_SYSCALL", tid, e))?;
            self.threads[i].resumed = true;
            let mut nap = Duration::from_micros(10);
            let waited = loop {
                if let Some(w) = try_wait(tid)? {
                    break w;
                }
                if Instant::now() >= deadline {
                    ptrace::interrupt(child)
                        .map_err(|e| self.ptrace_error("PTRACE_INTERRUPT", tid, e))?;
                    // A thread held in the kernel inside the call is not waited
                    // for without end: it finishes the call by itself (its signal
                    // frame gives its context back), seized until this tracer
                    // thread ends, which lets it go.
                    let Some(waited) = wait_tid_within(tid, Some(STOP_DEADLINE))? else {
                        return Err(self.no_stop(tid));
                    };
                    match waited {
                        Waited::Gone => {
                            self.threads.remove(i);
                            return Err(SessionError::Exited { pid: self.pid });
                        }
                        Waited::Stop { event: 0, sig, .. } if sig == libc::SIGTRAP | 0x80 => {
                            self.threads[i].current = Current::SyscallStop;
                        }
                        Waited::Stop { event: 0, .. } => {
                            self.threads[i].current = Current::SignalStop;
                            self.hold_signal(i)?;
                        }
                        Waited::Stop { .. } => self.threads[i].current = Current::Event,
                    }
                    return Ok(Ended::TimedOut);
                }
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(1));
            };
            let (sig, event) = match waited {
                Waited::Gone => {
                    self.threads.remove(i);
                    return Err(SessionError::Exited { pid: self.pid });
                }
                Waited::Stop { sig, event, .. } => (sig, event),
            };
            match (event, sig) {
                (0, s) if s == libc::SIGTRAP | 0x80 => {
                    self.threads[i].current = Current::SyscallStop;
                    if returning {
                        // The exit stop of rt_sigreturn: the thread has its context back.
                        break Ended::Returned;
                    }
                    let now = ptrace::getregs(child)
                        .map_err(|e| self.ptrace_error("PTRACE_GETREGS", tid, e))?;
                    returning = now.orig_rax == crate::ptrace::sigframe::NR_RT_SIGRETURN
                        && (now.rip, now.rsp) == sigreturn_at;
                }
                (0, s) if s == libc::SIGSEGV || s == libc::SIGBUS || s == libc::SIGILL => {
                    self.threads[i].current = Current::SignalStop;
                    let now = ptrace::getregs(child)
                        .map_err(|e| self.ptrace_error("PTRACE_GETREGS", tid, e))?;
                    break Ended::Crashed(now.rip, s);
                }
                // A signal that cannot be blocked: hold it for detach, keep running.
                (0, _) => {
                    self.threads[i].current = Current::SignalStop;
                    self.hold_signal(i)?;
                }
                // A group-stop or a stray interrupt: nothing to deliver, keep running.
                _ => self.threads[i].current = Current::Event,
            }
        };
        if self.index(tid).is_ok() {
            ptrace::setoptions(child, base)
                .map_err(|e| self.ptrace_error("PTRACE_SETOPTIONS", tid, e))?;
        }
        Ok(ended)
    }
}
