//! A stopped thread's register state and signal mask, read and written over ptrace:
//! the floating-point and XSAVE state a remote call must give back as it found it,
//! and the signal mask it runs under. The lowest layer of `ptrace`: the session,
//! remote system calls and remote calls all build on these.

use std::ffi::c_void;

use nix::errno::Errno;

/// The bit of `sig` in a kernel signal set.
pub(crate) fn sigbit(sig: i32) -> u64 {
    1 << (sig - 1)
}

/// `PTRACE_GETSIGMASK`: the mask in force once the current system call is over.
pub(crate) fn get_sigmask(tid: i32) -> Result<u64, Errno> {
    let mut mask: u64 = 0;
    // SAFETY: the kernel writes exactly `addr` = 8 bytes (sizeof the kernel's sigset_t
    // on x86-64) through `data`, which points to a live local u64.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_GETSIGMASK,
            tid,
            std::mem::size_of::<u64>() as *mut c_void,
            &mut mask as *mut u64 as *mut c_void,
        )
    };
    Errno::result(r).map(|_| mask)
}

/// `PTRACE_SETSIGMASK` (the kernel never blocks SIGKILL or SIGSTOP).
pub(crate) fn set_sigmask(tid: i32, mask: u64) -> Result<(), Errno> {
    // SAFETY: the kernel reads exactly `addr` = 8 bytes through `data`, which points to
    // a live local u64.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_SETSIGMASK,
            tid,
            std::mem::size_of::<u64>() as *mut c_void,
            &mask as *const u64 as *mut c_void,
        )
    };
    Errno::result(r).map(drop)
}

/// `PTRACE_GETFPREGS`: x87, MXCSR and the SSE registers.
pub(crate) fn get_fpregs(tid: i32) -> Result<libc::user_fpregs_struct, Errno> {
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
    Errno::result(r)?;
    // SAFETY: zero-initialised and then filled by the kernel; every bit pattern is valid.
    Ok(unsafe { fp.assume_init() })
}

/// `PTRACE_SETFPREGS`.
pub(crate) fn set_fpregs(tid: i32, fp: &libc::user_fpregs_struct) -> Result<(), Errno> {
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
    Errno::result(r).map(drop)
}

/// `NT_X86_XSTATE`: the XSAVE area (AVX upper halves and beyond).
const NT_X86_XSTATE: libc::c_int = 0x202;

/// `PTRACE_GETREGSET(NT_X86_XSTATE)`: the thread's whole extended state, if the kernel gives it.
pub(crate) fn get_xstate(tid: i32) -> Option<Vec<u8>> {
    // The kernel hands out an image for every enabled feature (11008 bytes with AMX);
    // room for at least that, whatever the layout says.
    let room = crate::ptrace::xsave::XsaveLayout::host().map_or(0, |l| l.max_size());
    let mut buf = vec![0u8; room.max(1 << 14)];
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

/// `PTRACE_SETREGSET(NT_X86_XSTATE)` with a buffer from [`get_xstate`]: the kernel
/// takes back every component and the header's `XSTATE_BV` as they were read.
pub(crate) fn set_xstate(tid: i32, state: &[u8]) -> Result<(), Errno> {
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
    Errno::result(r).map(drop)
}
