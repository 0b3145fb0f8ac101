//! Sampling through the kernel's own sampler (`perf_event_open`), the way perf
//! and samply do: no thread is ever stopped. Each target thread gets a
//! software CPU-clock event of its own; when it fires, the kernel writes the
//! thread's user registers and a copy of the top [`STACK_COPY`] bytes of its
//! user stack into a ring buffer mapped into argstash, which reads it
//! ([`KernelSampler::drain`]) and unwinds the copy with the ptrace sampler's
//! unwinder ([`Sampler`]). Stash frames lie on the stack, so a hooked
//! function's arguments travel in the copy.
//!
//! `inherit` cannot be combined with a ring buffer per thread, so threads are
//! followed by listing `/proc/PID/task` again ([`KernelSampler::follow`], the
//! caller decides how often): a thread that starts and ends between two
//! listings is not sampled.
//!
//! Python: CPython's frames live in heap memory, not in the stack copy, so
//! they are read (`process_vm_readv`, no stop) right after the rings are
//! drained, while the thread runs on; the rings of a Python target wake
//! argstash at each sample ([`KernelSampler::wait`]) to keep that delay short.
//! Each thread's chain, read once per drain, is paired with the native frames
//! of each of its samples in the drain and kept only when consistent with
//! that sample ([`PythonRead::AfterSample`], see [`python_consistent`]);
//! otherwise the sample keeps its native frames only ([`PythonRead::MovedOn`]).
//!
//! 32-bit targets are refused ([`KernelError::Unsupported`]): the kernel
//! samples them (registers marked as the 32-bit ABI), but the unwinder is fed
//! x86-64 register samples only; the caller uses the ptrace sampler for them.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use reader::ids::{Pid, Tid};
use reader::memory::{Memory, MemoryError};
use reader::python::{NativeEval, PythonStack, ThreadRead};
use reader::unwind::{Capture, DwarfRegisters, StopReason};

use crate::arch::{Arch, ProcessArch};
use crate::error::Error;
use crate::sample::{detail, PythonRead, Sample, SampleOptions, Sampler};

/// Bytes of user stack the kernel copies with each sample (from the stack
/// pointer up). A stack deeper than this is unwound down to the copy's end and
/// the sample is marked truncated ([`KernelStats::beyond_copy`]).
pub const STACK_COPY: u32 = 32 * 1024;

// perf_event_attr constants (linux/perf_event.h).
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
const SAMPLE_IP: u64 = 1 << 0;
const SAMPLE_TID: u64 = 1 << 1;
const SAMPLE_TIME: u64 = 1 << 2;
const SAMPLE_REGS_USER: u64 = 1 << 12;
const SAMPLE_STACK_USER: u64 = 1 << 13;
const FLAG_DISABLED: u64 = 1 << 0;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const FLAG_FREQ: u64 = 1 << 10;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const RECORD_LOST: u32 = 2;
const RECORD_THROTTLE: u32 = 5;
const RECORD_SAMPLE: u32 = 9;
const REGS_ABI_64: u64 = 2;

/// The x86-64 user registers sampled (perf's numbering, asm/perf_regs.h): ax,
/// bx, cx, dx, si, di, bp, sp, ip and r8..r15, all the unwinder's DWARF
/// registers, so a frame whose CFI restores a callee-saved register is stepped
/// exactly as in a ptrace stop.
const REGS_MASK: u64 = 0x1ff | (0xff << 16);

/// DWARF register number (x86-64) of each sampled register, in the kernel's order.
const DWARF_OF_PERF: [usize; 17] = [0, 3, 2, 1, 4, 5, 6, 7, 16, 8, 9, 10, 11, 12, 13, 14, 15];

/// `struct perf_event_attr` up to `PERF_ATTR_SIZE_VER5` (112 bytes).
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Attr {
    kind: u32,
    size: u32,
    config: u64,
    period_or_freq: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved: u16,
}

/// Why the kernel sampler cannot run (the caller falls back to ptrace).
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// `perf_event_open` refused for lack of privilege.
    #[error("the kernel refused to sample thread {tid} (perf_event_open: {source}); kernel.perf_event_paranoid is {}{}", paranoid.map_or("unreadable".to_string(), |p| p.to_string()), if *seccomp { ", and argstash runs under a seccomp filter" } else { "" })]
    NotPermitted {
        /// The thread.
        tid: i32,
        /// `/proc/sys/kernel/perf_event_paranoid`, when readable.
        paranoid: Option<i32>,
        /// Whether argstash runs under a seccomp filter (which may be what refused).
        seccomp: bool,
        /// EACCES or EPERM.
        source: io::Error,
    },
    /// The thread exited before its event was opened.
    #[error("thread {tid} exited before its sampling event was opened")]
    NoSuchThread {
        /// The thread.
        tid: i32,
    },
    /// Out of file descriptors (one event per thread).
    #[error("no file descriptor left for thread {tid}'s sampling event ({source}): one is needed per thread")]
    TooManyFiles {
        /// The thread.
        tid: i32,
        /// EMFILE or ENFILE.
        source: io::Error,
    },
    /// The kernel or the target cannot be sampled this way.
    #[error("the kernel sampler cannot sample this target: {what}")]
    Unsupported {
        /// What is missing.
        what: String,
    },
    /// Another failure of `perf_event_open`, its ioctl or the ring's mmap.
    #[error("{call} failed for thread {tid}: {source}")]
    Failed {
        /// The system call.
        call: &'static str,
        /// The thread.
        tid: i32,
        /// Why.
        source: io::Error,
    },
    /// Loading the target's symbols and unwind tables failed.
    #[error(transparent)]
    Setup(#[from] Error),
}

impl KernelError {
    /// Sorts a failed `perf_event_open` for thread `tid` by its errno.
    pub fn from_open(tid: i32, source: io::Error, paranoid: Option<i32>) -> KernelError {
        match source.raw_os_error() {
            Some(libc::EACCES | libc::EPERM) => KernelError::NotPermitted {
                tid,
                paranoid,
                seccomp: under_seccomp(),
                source,
            },
            Some(libc::ESRCH) => KernelError::NoSuchThread { tid },
            Some(libc::EMFILE | libc::ENFILE) => KernelError::TooManyFiles { tid, source },
            Some(libc::ENOENT | libc::ENODEV | libc::EOPNOTSUPP | libc::ENOSYS) => {
                KernelError::Unsupported {
                    what: format!("no software CPU-clock event with user stacks ({source})"),
                }
            }
            _ => KernelError::Failed {
                call: "perf_event_open",
                tid,
                source,
            },
        }
    }
}

/// `/proc/sys/kernel/perf_event_paranoid`.
pub fn perf_event_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether this process runs under a seccomp filter (`Seccomp: 2` in its status).
fn under_seccomp() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.strip_prefix("Seccomp:").is_some_and(|v| v.trim() == "2"))
    })
}

/// Data pages of a thread's ring for `hz` samples a second: about 25 ms of
/// full samples, a power of two between 16 (64 KiB) and 128 (512 KiB).
fn data_pages(hz: u32) -> usize {
    let bytes = u64::from(hz) * u64::from(STACK_COPY + 256) / 40;
    (bytes.div_ceil(4096) as usize)
        .next_power_of_two()
        .clamp(16, 128)
}

/// Counts over a recording.
#[derive(Debug, Clone, Copy, Default)]
pub struct KernelStats {
    /// Samples read from the rings.
    pub samples: u64,
    /// Samples the kernel dropped because a ring was full (`PERF_RECORD_LOST`).
    pub lost: u64,
    /// Times the kernel throttled an event for taking too much CPU.
    pub throttled: u64,
    /// Samples with no user registers (taken in a kernel thread context).
    pub no_user_regs: u64,
    /// Samples the parser could not read.
    pub malformed: u64,
    /// Samples whose unwinding stopped at the end of the stack copy.
    pub beyond_copy: u64,
    /// Threads that were given an event.
    pub threads: u64,
    /// Samples of a Python target whose Python frames, read after the sample,
    /// were consistent with it and kept ([`PythonRead::AfterSample`]).
    pub python_after: u64,
    /// Samples of a Python target whose Python frames were left out: read
    /// after the sample, they disagreed with it, or a later sample of the
    /// thread came first ([`PythonRead::MovedOn`]).
    pub python_moved: u64,
}

/// One thread's event and its mapped ring buffer.
struct Ring {
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
}

impl Ring {
    fn header(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: `base` maps at least one page (the perf_event_mmap_page) for
        // as long as `self` lives; offsets 1024..1056 are its 8-byte-aligned
        // data_head, data_tail, data_offset and data_size fields, which the
        // kernel updates concurrently, hence atomic access.
        unsafe { &*(self.base.add(offset) as *const AtomicU64) }
    }

    /// Copies out the records written since the last call and frees their room.
    fn take(&self, out: &mut Vec<u8>) {
        let page = page_size();
        let (data_off, data_size) = (page, self.len - page);
        // Acquire: the records up to data_head are visible once it is read.
        let head = self.header(1024).load(Ordering::Acquire);
        let tail = self.header(1032).load(Ordering::Relaxed);
        let avail = head.wrapping_sub(tail).min(data_size as u64) as usize;
        out.clear();
        out.reserve(avail);
        let start = (tail % data_size as u64) as usize;
        let first = avail.min(data_size - start);
        // SAFETY: both ranges lie inside the data area [data_off, len) of the
        // mapping, which the kernel does not rewrite before data_tail moves.
        unsafe {
            let data = self.base.add(data_off);
            out.extend_from_slice(std::slice::from_raw_parts(data.add(start), first));
            out.extend_from_slice(std::slice::from_raw_parts(data, avail - first));
        }
        // Release: the copy above is done before the kernel may reuse the room.
        self.header(1032)
            .store(tail.wrapping_add(avail as u64), Ordering::Release);
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are the mapping made in `open_ring`, unmapped once.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096)
}

/// A sample's stack copy as memory: the copy where it covers, a read error in
/// the rest of the stack mapping (the live stack has moved on since), the live
/// process elsewhere (code, the hooks' arenas).
struct CopiedStack<'a> {
    sp: u64,
    bytes: &'a [u8],
    /// The stack mapping the copy came from.
    mapping: (u64, u64),
    rest: &'a dyn Memory,
}

impl Memory for CopiedStack<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let end = self.sp.saturating_add(self.bytes.len() as u64);
        let last = addr.saturating_add(buf.len() as u64);
        if addr >= self.sp && last <= end {
            let off = (addr - self.sp) as usize;
            buf.copy_from_slice(&self.bytes[off..off + buf.len()]);
            return Ok(());
        }
        if addr < self.mapping.1 && last > self.mapping.0 {
            return Err(MemoryError::Read {
                addr,
                len: buf.len(),
                source: io::Error::other("outside the kernel's copy of the stack"),
            });
        }
        self.rest.read(addr, buf)
    }
}

/// Samples a process's threads through `perf_event_open`.
pub struct KernelSampler {
    sampler: Sampler,
    attr: Attr,
    rings: HashMap<i32, Ring>,
    /// Data pages of each ring ([`data_pages`]).
    pages: usize,
    buf: Vec<u8>,
    /// What was counted so far.
    pub stats: KernelStats,
}

impl KernelSampler {
    /// Loads the target like [`Sampler::new`] and opens an event on each of its
    /// threads now, `hz` samples a second of each thread's CPU time. Fails
    /// without side effects when the first event cannot be opened.
    pub fn new(pid: Pid, opts: SampleOptions, hz: u32) -> Result<KernelSampler, KernelError> {
        if Arch::of_process(pid.as_raw()) != Arch::X86_64 {
            return Err(KernelError::Unsupported {
                what: "a 32-bit target (the kernel samples it, but argstash unwinds only x86-64 register samples so far)".into(),
            });
        }
        let sampler = Sampler::new(pid, opts)?;
        let attr = Attr {
            kind: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<Attr>() as u32,
            config: PERF_COUNT_SW_CPU_CLOCK,
            period_or_freq: u64::from(hz.max(1)),
            sample_type: SAMPLE_IP
                | SAMPLE_TID
                | SAMPLE_TIME
                | SAMPLE_REGS_USER
                | SAMPLE_STACK_USER,
            flags: FLAG_DISABLED | FLAG_FREQ | FLAG_EXCLUDE_HV,
            sample_regs_user: REGS_MASK,
            sample_stack_user: STACK_COPY,
            // A Python target's frames are read as soon as possible after
            // each sample: its rings wake argstash at every sample.
            wakeup_events: u32::from(sampler.is_python()),
            ..Attr::default()
        };
        let mut k = KernelSampler {
            sampler,
            attr,
            rings: HashMap::new(),
            pages: data_pages(hz),
            buf: Vec::new(),
            stats: KernelStats::default(),
        };
        let tids = k.sampler.threads().map_err(|e| KernelError::Unsupported {
            what: e.to_string(),
        })?;
        let mut opened = false;
        for tid in &tids {
            match k.open(tid.as_raw()) {
                Ok(()) => opened = true,
                Err(KernelError::NoSuchThread { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        if !opened {
            return Err(KernelError::NoSuchThread { tid: pid.as_raw() });
        }
        Ok(k)
    }

    /// The ptrace sampler whose unwinder and mappings this one uses.
    pub fn sampler(&self) -> &Sampler {
        &self.sampler
    }

    /// See [`Sampler::refresh`].
    pub fn sampler_mut(&mut self) -> &mut Sampler {
        &mut self.sampler
    }

    /// Threads with an event now.
    pub fn watched(&self) -> usize {
        self.rings.len()
    }

    /// Waits up to `timeout` for a sample: the rings of a Python target wake
    /// the caller at each sample (so its Python frames are read soon after);
    /// the others only when half full, so this mostly sleeps `timeout`.
    pub fn wait(&self, timeout: std::time::Duration) {
        let mut fds: Vec<libc::pollfd> = self
            .rings
            .values()
            .map(|r| libc::pollfd {
                fd: r.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        if fds.is_empty() {
            std::thread::sleep(timeout);
            return;
        }
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs that
        // poll may write the revents of; the fds are our own open events.
        unsafe {
            libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms);
        }
    }

    fn open(&mut self, tid: i32) -> Result<(), KernelError> {
        // A target found to run CPython since: its new threads' rings wake too.
        self.attr.wakeup_events = u32::from(self.sampler.is_python());
        let fd = match self.open_event(tid) {
            // Unprivileged under perf_event_paranoid 2: user space only.
            Err(KernelError::NotPermitted { .. }) if self.attr.flags & FLAG_EXCLUDE_KERNEL == 0 => {
                self.attr.flags |= FLAG_EXCLUDE_KERNEL;
                self.open_event(tid)?
            }
            other => other?,
        };
        let len = (self.pages + 1) * page_size();
        // SAFETY: a shared read-write mapping of a perf event fd, the layout the
        // kernel requires (1 + 2^n pages); the result is checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let source = io::Error::last_os_error();
            return Err(match source.raw_os_error() {
                Some(libc::EPERM | libc::EACCES) => KernelError::NotPermitted {
                    tid,
                    paranoid: perf_event_paranoid(),
                    seccomp: under_seccomp(),
                    source,
                },
                _ => KernelError::Failed {
                    call: "mmap of the ring buffer",
                    tid,
                    source,
                },
            });
        }
        let ring = Ring {
            fd,
            base: base.cast(),
            len,
        };
        // SAFETY: an ioctl without argument on our own perf event fd.
        if unsafe { libc::ioctl(ring.fd.as_raw_fd(), PERF_EVENT_IOC_ENABLE as _, 0) } < 0 {
            return Err(KernelError::Failed {
                call: "PERF_EVENT_IOC_ENABLE",
                tid,
                source: io::Error::last_os_error(),
            });
        }
        self.rings.insert(tid, ring);
        self.stats.threads += 1;
        Ok(())
    }

    fn open_event(&self, tid: i32) -> Result<OwnedFd, KernelError> {
        // SAFETY: perf_event_open reads `attr` (a valid, initialised
        // perf_event_attr whose size field is its size) and returns a new fd
        // or -1; nothing else is touched.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &self.attr as *const Attr,
                tid,
                -1i32,
                -1i32,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(KernelError::from_open(
                tid,
                io::Error::last_os_error(),
                perf_event_paranoid(),
            ));
        }
        // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    /// Opens events on threads in `tids` that have none, and closes (after a
    /// last [`Self::drain`] by the caller) those of threads no longer listed.
    /// A thread that exited meanwhile is skipped; other failures are returned
    /// after the remaining threads were tried, the first one only.
    pub fn follow(&mut self, tids: &[Tid]) -> Result<(), KernelError> {
        let mut first_err = None;
        for tid in tids {
            let raw = tid.as_raw();
            if self.rings.contains_key(&raw) {
                continue;
            }
            match self.open(raw) {
                Ok(()) | Err(KernelError::NoSuchThread { .. }) => {}
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        self.rings
            .retain(|t, _| tids.iter().any(|x| x.as_raw() == *t));
        first_err.map_or(Ok(()), Err)
    }

    /// Reads every ring: the samples taken since the last call, in each
    /// thread's order, to unwind with [`Self::unwind`]; lost and throttle
    /// records are counted in [`Self::stats`].
    pub fn drain(&mut self) -> Vec<KernelRecord> {
        let mut out = Vec::new();
        let mut buf = std::mem::take(&mut self.buf);
        for ring in self.rings.values() {
            ring.take(&mut buf);
            let mut off = 0;
            while off + 8 <= buf.len() {
                let kind = u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap_or_default());
                let size = usize::from(u16::from_ne_bytes(
                    buf[off + 6..off + 8].try_into().unwrap_or_default(),
                ));
                if size < 8 || off + size > buf.len() {
                    break;
                }
                let body = &buf[off + 8..off + size];
                match kind {
                    RECORD_SAMPLE => {
                        self.stats.samples += 1;
                        out.push(KernelRecord {
                            tid: parse_sample(body).map_or(0, |p| p.tid),
                            bytes: body.to_vec(),
                            python: PyAt::NotPython,
                        });
                    }
                    RECORD_LOST => self.stats.lost += read_u64(body, 8).unwrap_or(0),
                    RECORD_THROTTLE => self.stats.throttled += 1,
                    _ => {}
                }
                off += size;
            }
        }
        self.buf = buf;
        self.read_python(&mut out);
        out
    }

    /// Reads the Python frames of each thread sampled in `records` now, right
    /// after the drain, once per thread: each of its samples in the drain is
    /// checked against that one reading (when the loop fell behind, a thread
    /// has several, the earlier ones older).
    fn read_python(&self, records: &mut [KernelRecord]) {
        if !self.sampler.is_python() || records.is_empty() {
            return;
        }
        let mut tids: Vec<Tid> = records.iter().map(|r| Tid::from_raw(r.tid)).collect();
        tids.sort_unstable_by_key(|t| t.as_raw());
        tids.dedup();
        let Some(reads) = self.sampler.read_python_now(&tids) else {
            return;
        };
        let reads: HashMap<i32, ThreadRead> = tids.iter().map(|t| t.as_raw()).zip(reads).collect();
        for r in records.iter_mut() {
            if let Some(read) = reads.get(&r.tid) {
                r.python = PyAt::Read(read.clone());
            }
        }
    }

    /// Unwinds one sample read by [`Self::drain`] (with DWARF's names, types
    /// and lines when `annotate`); `None` when it holds no user registers or is
    /// malformed (counted).
    pub fn unwind(&mut self, record: &KernelRecord, annotate: bool) -> Option<Sample> {
        let Some(parsed) = parse_sample(&record.bytes) else {
            self.stats.malformed += 1;
            return None;
        };
        let Some(regs) = parsed.regs else {
            self.stats.no_user_regs += 1;
            return None;
        };
        let sp = regs[7]?;
        let mapping = self
            .sampler
            .maps()
            .iter()
            .find(|m| m.contains(sp))
            .map_or((sp, sp), |m| (m.start, m.end));
        let mem = CopiedStack {
            sp,
            bytes: parsed.stack,
            mapping,
            rest: self.sampler.memory(),
        };
        let (frames, truncated, python, python_read) = match &record.python {
            PyAt::NotPython => {
                let (f, t) = self.sampler.unwind_with(&regs, &mem, annotate);
                (f, t, None, PythonRead::Stopped)
            }
            PyAt::Read(read) => {
                let thread =
                    self.sampler
                        .view()
                        .unwind_thread(&regs, &mem, read.clone(), detail(annotate));
                let native: Vec<NativeEval> =
                    thread.frames.iter().map(|f| f.python_eval()).collect();
                let (python, how) = match thread.python {
                    Some(py) => {
                        // The stack of the evaluator call that runs the innermost frame.
                        let cfa = py
                            .frames
                            .first()
                            .and_then(|f| f.placement)
                            .and_then(|p| native.get(p.eval_frame))
                            .and_then(|n| n.stack)
                            .map(|(_, cfa)| cfa);
                        let held = |addr: u64| {
                            regs.contains(&Some(addr)) || stack_holds(sp, parsed.stack, cfa, addr)
                        };
                        match python_consistent(&py, &native, held) {
                            true => (Some(py), PythonRead::AfterSample),
                            false => (None, PythonRead::MovedOn),
                        }
                    }
                    // No Python frames now where the sample ran the evaluator.
                    None if native.iter().any(|n| n.is_eval) => (None, PythonRead::MovedOn),
                    None => (None, PythonRead::Stopped),
                };
                (thread.frames, thread.truncated, python, how)
            }
        };
        if !annotate {
            match python_read {
                PythonRead::AfterSample => self.stats.python_after += 1,
                PythonRead::MovedOn => self.stats.python_moved += 1,
                PythonRead::Stopped => {}
            }
        }
        if !annotate
            && parsed.stack.len() as u32 >= STACK_COPY
            && matches!(truncated, Some(StopReason::Unreadable { .. }))
        {
            self.stats.beyond_copy += 1;
        }
        Some(Sample {
            tid: Tid::from_raw(parsed.tid),
            frames,
            python,
            python_read,
            truncated,
            stopped: std::time::Duration::ZERO,
            latency: std::time::Duration::ZERO,
            stack_bytes: parsed.stack.len(),
            at_syscall: false,
            on_cpu: Some(true),
            capture: Capture::Kernel,
        })
    }
}

/// One sample as the kernel wrote it (registers and stack copy), not yet
/// unwound, with its thread's Python frames read right after the drain.
#[derive(Debug, Clone)]
pub struct KernelRecord {
    tid: i32,
    bytes: Vec<u8>,
    python: PyAt,
}

/// A record's Python frames.
#[derive(Debug, Clone)]
enum PyAt {
    /// The process runs no CPython.
    NotPython,
    /// Read right after the drain.
    Read(ThreadRead),
}

impl KernelRecord {
    /// The thread sampled (0 when malformed).
    pub fn tid(&self) -> Tid {
        Tid::from_raw(self.tid)
    }
}

/// Whether Python frames `py`, read after a sample, agree with the sample's
/// native frames `native`, so that pairing them says where the sample was:
/// - nothing in the pairing was out of place (no notes) and every Python
///   frame found its evaluator frame;
/// - as many C-level evaluator calls in the native frames (where they are
///   named) as entry frames in the Python chain;
/// - the innermost Python frame's address is `held` by the sample (in its
///   registers or its copied stack): the evaluator running it keeps it there,
///   while a frame entered after the sample (a call made since) is not.
///
/// Python frames that pass are still a reading after the sample: a thread
/// that left a function and entered it again at the same frame address, or
/// moved on within the same frame, passes.
pub fn python_consistent(
    py: &PythonStack,
    native: &[NativeEval],
    held: impl Fn(u64) -> bool,
) -> bool {
    if !py.notes.is_empty() || py.frames.iter().any(|f| f.placement.is_none()) {
        return false;
    }
    let evals = native.iter().filter(|n| n.is_eval).count();
    let entries = py.frames.iter().filter(|f| f.frame.is_entry).count();
    if evals > 0 && evals != entries {
        return false;
    }
    py.frames.first().is_none_or(|f| held(f.frame.addr))
}

/// Whether the stack copy `stack` (taken at `sp`) holds the 8-byte value
/// `addr`, up to `cfa` (the end of the evaluator frame that runs the
/// innermost Python frame) when known, else in the whole copy.
fn stack_holds(sp: u64, stack: &[u8], cfa: Option<u64>, addr: u64) -> bool {
    let end = cfa.map_or(stack.len(), |cfa| {
        (cfa.saturating_sub(sp) as usize).min(stack.len())
    });
    let want = addr.to_ne_bytes();
    stack[..end].chunks_exact(8).any(|w| w == want)
}

fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// A PERF_RECORD_SAMPLE of this module's sample_type.
#[derive(Debug)]
struct Parsed<'a> {
    tid: i32,
    regs: Option<DwarfRegisters>,
    stack: &'a [u8],
}

/// Reads a sample body: ip, pid/tid, time, regs ABI and registers, stack size,
/// stack bytes and the size the kernel actually copied. `None` when malformed.
fn parse_sample(b: &[u8]) -> Option<Parsed<'_>> {
    let tid = u32::from_ne_bytes(b.get(12..16)?.try_into().ok()?) as i32;
    let abi = read_u64(b, 24)?;
    let mut at = 32;
    let regs = if abi == 0 {
        None
    } else {
        let mut regs: DwarfRegisters = [None; 17];
        for dwarf in DWARF_OF_PERF {
            regs[dwarf] = Some(read_u64(b, at)?);
            at += 8;
        }
        (abi == REGS_ABI_64).then_some(regs)
    };
    let size = read_u64(b, at)? as usize;
    at += 8;
    let stack = if size == 0 {
        &b[0..0]
    } else {
        let data = b.get(at..at.checked_add(size)?)?;
        let dyn_size = read_u64(b, at + size)? as usize;
        &data[..dyn_size.min(size)]
    };
    Some(Parsed { tid, regs, stack })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_sorted_by_errno() {
        let e = |n| io::Error::from_raw_os_error(n);
        let r = KernelError::from_open(7, e(libc::EACCES), Some(2));
        assert!(matches!(
            r,
            KernelError::NotPermitted {
                tid: 7,
                paranoid: Some(2),
                ..
            }
        ));
        assert!(
            r.to_string().contains("kernel.perf_event_paranoid is 2"),
            "{r}"
        );
        assert!(matches!(
            KernelError::from_open(7, e(libc::EPERM), None),
            KernelError::NotPermitted { paranoid: None, .. }
        ));
        assert!(matches!(
            KernelError::from_open(7, e(libc::ESRCH), None),
            KernelError::NoSuchThread { tid: 7 }
        ));
        assert!(matches!(
            KernelError::from_open(7, e(libc::EMFILE), None),
            KernelError::TooManyFiles { .. }
        ));
        assert!(matches!(
            KernelError::from_open(7, e(libc::ENOENT), None),
            KernelError::Unsupported { .. }
        ));
        assert!(matches!(
            KernelError::from_open(7, e(libc::EINVAL), None),
            KernelError::Failed { .. }
        ));
    }

    #[test]
    fn rings_hold_about_25_ms_of_samples() {
        assert_eq!(data_pages(1), 16);
        // 99 Hz: 2.5 samples of 33 KiB, 82 KiB: 32 pages.
        assert_eq!(data_pages(99), 32);
        assert_eq!(data_pages(999), 128);
        assert_eq!(data_pages(10_000), 128);
    }

    /// Memory that reads as 0xee everywhere.
    struct Live;
    impl Memory for Live {
        fn read(&self, _addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
            buf.fill(0xee);
            Ok(())
        }
    }

    #[test]
    fn the_stack_copy_is_read_and_the_rest_of_the_stack_is_not() {
        let bytes: Vec<u8> = (0..64).collect();
        let mem = CopiedStack {
            sp: 0x7000_1000,
            bytes: &bytes,
            mapping: (0x7000_0000, 0x7000_4000),
            rest: &Live,
        };
        let mut b = [0u8; 8];
        mem.read(0x7000_1008, &mut b).unwrap();
        assert_eq!(b, [8, 9, 10, 11, 12, 13, 14, 15]);
        // Past the copy, or straddling its end, in the stack mapping: the live
        // stack has moved on since the sample, so it is not read.
        assert!(mem.read(0x7000_1040, &mut b).is_err());
        assert!(mem.read(0x7000_103c, &mut b).is_err());
        assert!(mem.read(0x7000_0ff8, &mut b).is_err());
        assert!(mem.read(u64::MAX - 3, &mut b).is_ok());
        // Code and arenas: the live process.
        mem.read(0x5555_0000, &mut b).unwrap();
        assert_eq!(b, [0xee; 8]);
    }

    fn py_frame(
        addr: u64,
        is_entry: bool,
        eval_frame: Option<usize>,
    ) -> reader::python::StackFrame {
        reader::python::StackFrame {
            frame: reader::python::PyFrame {
                addr,
                code: 0,
                qualname: format!("f{addr:x}"),
                file: "x.py".into(),
                line: None,
                first_line: 1,
                is_entry,
                entry_frame: None,
                owner: reader::python::FrameOwner::Thread,
                incomplete: false,
                params: Vec::new(),
                params_note: None,
            },
            placement: eval_frame.map(|eval_frame| reader::python::Placement {
                eval_frame,
                paired_by: reader::python::PairedBy::Order,
            }),
            interpreter: None,
        }
    }

    fn eval(is_eval: bool) -> NativeEval {
        NativeEval {
            is_eval,
            stashed_frame: None,
            stack: None,
        }
    }

    #[test]
    fn python_read_after_a_sample_is_kept_only_when_it_agrees_with_it() {
        // c_work called from an evaluator running py_work (0x100) under
        // <module> (0x80, the entry frame).
        let native = [eval(false), eval(true), eval(false)];
        let py = PythonStack {
            frames: vec![
                py_frame(0x100, false, Some(1)),
                py_frame(0x80, true, Some(1)),
            ],
            notes: Vec::new(),
        };
        let held = |a: u64| a == 0x100;
        assert!(python_consistent(&py, &native, held));
        // The innermost frame is one the sample does not hold: entered since.
        assert!(!python_consistent(&py, &native, |a| a == 0x80));
        // A Python frame no evaluator frame claims.
        let mut unplaced = py.clone();
        unplaced.frames[1].placement = None;
        assert!(!python_consistent(&unplaced, &native, held));
        // A pairing note.
        let mut noted = py.clone();
        noted.notes.push("Python frames end early".into());
        assert!(!python_consistent(&noted, &native, held));
        // Two evaluator calls in the sample, one entry frame read after it
        // (the inner call returned since).
        let two = [eval(true), eval(false), eval(true)];
        assert!(!python_consistent(&py, &two, held));
        // No named evaluator frame (3.13+ builds): the count is not checked.
        let unnamed = [eval(false), eval(false)];
        assert!(python_consistent(&py, &unnamed, held));
        // No Python frames now: consistent only with a sample that ran no
        // evaluator (a thread that runs no Python).
        let empty = PythonStack::default();
        assert!(python_consistent(&empty, &[eval(false)], |_| false));
        assert!(!python_consistent(&empty, &native, |_| false));
    }

    #[test]
    fn a_held_value_is_looked_for_up_to_the_evaluators_frame() {
        let sp = 0x7000_0000u64;
        let mut stack = vec![0u8; 64];
        stack[40..48].copy_from_slice(&0xdead_beefu64.to_ne_bytes());
        assert!(stack_holds(sp, &stack, None, 0xdead_beef));
        assert!(stack_holds(sp, &stack, Some(sp + 48), 0xdead_beef));
        // Past the evaluator's frame: not looked at.
        assert!(!stack_holds(sp, &stack, Some(sp + 40), 0xdead_beef));
        // A CFA past the copy is cut to it.
        assert!(stack_holds(sp, &stack, Some(sp + 4096), 0xdead_beef));
        assert!(!stack_holds(sp, &stack, None, 0xbeef));
    }

    #[test]
    fn attr_has_the_ver5_size() {
        assert_eq!(std::mem::size_of::<Attr>(), 112);
    }

    #[test]
    fn a_sample_body_parses_and_hostile_ones_do_not_panic() {
        let mut b = Vec::new();
        b.extend_from_slice(&0x1234u64.to_ne_bytes()); // ip
        b.extend_from_slice(&10u32.to_ne_bytes()); // pid
        b.extend_from_slice(&11u32.to_ne_bytes()); // tid
        b.extend_from_slice(&5u64.to_ne_bytes()); // time
        b.extend_from_slice(&REGS_ABI_64.to_ne_bytes());
        for i in 0..17u64 {
            b.extend_from_slice(&(100 + i).to_ne_bytes());
        }
        b.extend_from_slice(&16u64.to_ne_bytes()); // size
        b.extend_from_slice(&[7u8; 16]);
        b.extend_from_slice(&8u64.to_ne_bytes()); // dyn_size
        let p = parse_sample(&b).unwrap();
        assert_eq!(p.tid, 11);
        let regs = p.regs.unwrap();
        // perf order ax, bx, cx, dx, si, di, bp, sp, ip, r8..: DWARF rax=0, rbx=3, rsp=7, rip=16, r8=8.
        assert_eq!(
            (regs[0], regs[3], regs[7], regs[16], regs[8], regs[15]),
            (
                Some(100),
                Some(101),
                Some(107),
                Some(108),
                Some(109),
                Some(116)
            )
        );
        assert_eq!(p.stack, &[7u8; 8]);
        for cut in 0..b.len() {
            let _ = parse_sample(&b[..cut]);
        }
        let mut huge = b.clone();
        let at = 32 + 17 * 8;
        huge[at..at + 8].copy_from_slice(&u64::MAX.to_ne_bytes());
        assert!(parse_sample(&huge).is_none());
    }
}
