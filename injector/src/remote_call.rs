//! Function calls run inside the target on one stopped thread, with a time limit.
//!
//! The thread's general-purpose registers, its extended state (XSAVE area, or
//! x87/SSE where the kernel does not take the XSAVE area back) and its signal mask
//! are saved;
//! RIP is pointed at the function, the arguments are loaded, `orig_rax` is set to -1
//! (no restart of an interrupted system call into our call), and a return address of 0
//! is pushed on a 16-byte-aligned stack well below the red zone. The thread then runs
//! until the function returns to address 0 and faults: the `SIGSEGV` is caught in its
//! signal-delivery-stop and never delivered. Everything is put back afterwards.
//!
//! While the call runs only `SIGSEGV` is unblocked (a fault with `SIGSEGV` blocked or
//! ignored would make the kernel reset the process's handler to `SIG_DFL`; a process
//! that ignores `SIGSEGV` is refused). The callee may block on a lock: when it has not
//! returned within the time limit, the thread is interrupted and restored exactly, and
//! [`RemoteCallError::TimedOut`] tells the caller to try another thread or give up.
//! Call only functions that are safe to abandon while they wait for a lock (they have
//! changed nothing shared before taking it), such as libgcc's frame registration.

use std::time::{Duration, Instant};

use nix::sys::ptrace;
use nix::unistd::Pid;
use thiserror::Error;

use crate::memory::Memory;
use crate::remote::{get_sigmask, set_sigmask, sigbit};
use crate::session::{describe_status, wait_tid, Current, Session, SessionError, Waited};

/// The user code segment selector of 64-bit code on Linux x86-64.
const USER_CS_64: u64 = 0x33;

/// Bytes left untouched below the thread's stack pointer (red zone and margin).
const STACK_GAP: u64 = 1024;

/// A remote function call failed; the thread's registers and mask were put back.
#[derive(Debug, Error)]
pub enum RemoteCallError {
    /// Stopping, resuming or inspecting the thread failed.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The function did not return in time: it probably waits for a lock that a
    /// stopped thread (or the calling thread itself) holds.
    #[error("{function} did not return within {waited:?} on thread {tid} (it probably waits for a lock held by a stopped thread); the thread was interrupted and restored")]
    TimedOut {
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
    /// Too many more function arguments than registers.
    #[error("a remote call takes at most 6 arguments, {0} given")]
    TooManyArgs(usize),
}

fn segv_ignored(pid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|mask| mask & sigbit(libc::SIGSEGV) != 0)
}

/// `PTRACE_GETFPREGS`: x87, MXCSR and the SSE registers.
fn get_fpregs(tid: i32) -> Result<libc::user_fpregs_struct, nix::errno::Errno> {
    let mut fp = std::mem::MaybeUninit::<libc::user_fpregs_struct>::zeroed();
    // SAFETY: the kernel writes exactly sizeof(user_fpregs_struct) bytes through `data`,
    // which points to a live, zero-initialised struct of that type.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_GETFPREGS,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            fp.as_mut_ptr(),
        )
    };
    nix::errno::Errno::result(r)?;
    // SAFETY: zero-initialised and then filled by the kernel; every bit pattern is valid.
    Ok(unsafe { fp.assume_init() })
}

/// `PTRACE_SETFPREGS`.
fn set_fpregs(tid: i32, fp: &libc::user_fpregs_struct) -> Result<(), nix::errno::Errno> {
    // SAFETY: the kernel reads sizeof(user_fpregs_struct) bytes through `data`, which
    // points to a live struct of that type.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_SETFPREGS,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            fp as *const libc::user_fpregs_struct as *mut libc::c_void,
        )
    };
    nix::errno::Errno::result(r).map(drop)
}

/// `NT_X86_XSTATE`: the XSAVE area (AVX upper halves and beyond).
const NT_X86_XSTATE: libc::c_int = 0x202;

/// `PTRACE_GETREGSET(NT_X86_XSTATE)`: the thread's whole extended state, if the kernel gives it.
fn get_xstate(tid: i32) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 1 << 14];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: the kernel writes at most `iov_len` bytes into `buf` (alive for the call)
    // and updates `iov_len` to the size written.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_GETREGSET,
            tid,
            NT_X86_XSTATE as usize as *mut libc::c_void,
            &mut iov as *mut libc::iovec as *mut libc::c_void,
        )
    };
    (r == 0).then(|| {
        buf.truncate(iov.iov_len);
        buf
    })
}

/// `PTRACE_SETREGSET(NT_X86_XSTATE)` with a buffer from [`get_xstate`].
fn set_xstate(tid: i32, state: &[u8]) -> bool {
    let mut iov = libc::iovec {
        iov_base: state.as_ptr() as *mut libc::c_void,
        iov_len: state.len(),
    };
    // SAFETY: the kernel reads `iov_len` bytes from `state`, alive for the call.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_SETREGSET,
            tid,
            NT_X86_XSTATE as usize as *mut libc::c_void,
            &mut iov as *mut libc::iovec as *mut libc::c_void,
        )
    };
    r == 0
}

/// Non-blocking wait for `tid`: `None` while it runs.
fn poll_tid(tid: i32) -> Result<Option<Waited>, SessionError> {
    let mut status: libc::c_int = 0;
    // SAFETY: waitpid only writes the status word through the pointer, which points to a live local.
    let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
    if r == 0 {
        return Ok(None);
    }
    if r == tid {
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            return Ok(Some(Waited::Gone));
        }
        if libc::WIFSTOPPED(status) {
            return Ok(Some(Waited::Stop {
                sig: libc::WSTOPSIG(status),
                event: (status >> 16) & 0xff,
                raw: status,
            }));
        }
        return Err(SessionError::Unexpected {
            tid,
            status: describe_status(status),
        });
    }
    match nix::errno::Errno::last() {
        nix::errno::Errno::EINTR => Ok(None),
        nix::errno::Errno::ECHILD => Ok(Some(Waited::Gone)),
        source => Err(SessionError::Ptrace {
            op: "waitpid",
            tid,
            source,
        }),
    }
}

/// How the called function ended.
enum Ended {
    Returned(u64),
    Crashed(u64, i32),
    TimedOut,
}

impl Session {
    /// Calls `function(args...)` on the stopped thread `tid` and returns `rax`, giving up after `timeout`.
    ///
    /// `name` names the function in errors. The thread is restored exactly (registers,
    /// FPU/SSE state, signal mask) whatever happens.
    pub fn remote_call(
        &mut self,
        tid: i32,
        function: u64,
        name: &str,
        args: &[u64],
        timeout: Duration,
    ) -> Result<u64, RemoteCallError> {
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
        let mut regs = saved;
        let sp = ((saved.rsp - STACK_GAP) & !15) - 8;
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

        let outcome = self
            .memory()
            .and_then(|m| m.write(sp, &0u64.to_le_bytes()).map_err(SessionError::from))
            .and_then(|()| {
                set_sigmask(tid, !sigbit(libc::SIGSEGV))
                    .map_err(|e| self.ptrace_error("PTRACE_SETSIGMASK", tid, e))
            })
            .and_then(|()| self.set_regs(tid, &regs))
            .and_then(|()| self.run_call(tid, timeout));

        let mut restored: Result<(), SessionError> = Ok(());
        if self.index(tid).is_ok() {
            restored = self
                .set_regs(tid, &saved)
                .and_then(|()| {
                    // The full XSAVE area when the kernel takes it back, else x87/SSE.
                    if xstate.as_deref().is_some_and(|x| set_xstate(tid, x)) {
                        return Ok(());
                    }
                    set_fpregs(tid, &fp).map_err(|e| self.ptrace_error("PTRACE_SETFPREGS", tid, e))
                })
                .and_then(|()| {
                    set_sigmask(tid, real_mask)
                        .map_err(|e| self.ptrace_error("PTRACE_SETSIGMASK", tid, e))
                });
        }
        let ended = outcome?;
        restored?;
        match ended {
            Ended::Returned(rax) => Ok(rax),
            Ended::Crashed(rip, signal) => Err(RemoteCallError::Crashed {
                function: name.to_string(),
                tid,
                rip,
                signal,
            }),
            Ended::TimedOut => Err(RemoteCallError::TimedOut {
                function: name.to_string(),
                tid,
                waited: timeout,
            }),
        }
    }

    /// Lets `tid` run until the call returns to 0, faults, or `timeout` passes (then interrupts it).
    fn run_call(&mut self, tid: i32, timeout: Duration) -> Result<Ended, SessionError> {
        let child = Pid::from_raw(tid);
        let deadline = Instant::now() + timeout;
        let mut nap = Duration::from_micros(20);
        loop {
            let i = self.index(tid)?;
            ptrace::cont(child, None).map_err(|e| self.ptrace_error("PTRACE_CONT", tid, e))?;
            self.threads[i].resumed = true;
            let waited = loop {
                if let Some(w) = poll_tid(tid)? {
                    break w;
                }
                if Instant::now() >= deadline {
                    ptrace::interrupt(child)
                        .map_err(|e| self.ptrace_error("PTRACE_INTERRUPT", tid, e))?;
                    match wait_tid(tid)? {
                        Waited::Stop { sig, event: 0, .. } if sig == libc::SIGSEGV => {
                            // It returned just before the interrupt; the interrupt stays pending
                            // and is collected by the next resume of the session.
                            break Waited::Stop {
                                sig,
                                event: 0,
                                raw: 0,
                            };
                        }
                        Waited::Stop { event: 0, .. } => {
                            self.threads[i].current = Current::SignalStop;
                            self.hold_signal(i)?;
                            return Ok(Ended::TimedOut);
                        }
                        Waited::Stop { .. } => {
                            self.threads[i].current = Current::Event;
                            return Ok(Ended::TimedOut);
                        }
                        Waited::Gone => {
                            self.threads.remove(i);
                            return Err(SessionError::Exited { pid: self.pid });
                        }
                    }
                }
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(2));
            };
            match waited {
                Waited::Gone => {
                    self.threads.remove(i);
                    return Err(SessionError::Exited { pid: self.pid });
                }
                Waited::Stop { sig, event: 0, .. }
                    if sig == libc::SIGSEGV || sig == libc::SIGBUS || sig == libc::SIGILL =>
                {
                    self.threads[i].current = Current::SignalStop;
                    let now = ptrace::getregs(child)
                        .map_err(|e| self.ptrace_error("PTRACE_GETREGS", tid, e))?;
                    if sig == libc::SIGSEGV && now.rip == 0 {
                        return Ok(Ended::Returned(now.rax));
                    }
                    return Ok(Ended::Crashed(now.rip, sig));
                }
                // A signal that cannot be blocked: hold it for detach, keep running.
                Waited::Stop { event: 0, .. } => {
                    self.threads[i].current = Current::SignalStop;
                    self.hold_signal(i)?;
                }
                // A group-stop or a stray interrupt: nothing to deliver, keep running.
                Waited::Stop { .. } => self.threads[i].current = Current::Event,
            }
        }
    }
}
