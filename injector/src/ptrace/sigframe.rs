//! Signal frames that give a borrowed thread its own context back by itself.
//!
//! A thread borrowed for a remote system call or function call has its registers (and
//! its signal mask) changed by argstash. If argstash died at that instant (SIGKILL,
//! OOM, a crash), the kernel would let the thread go with whatever it had been given:
//! run on from a `syscall` instruction into unrelated code, or keep a mask that blocks
//! every signal. So before the registers change, the thread's complete context
//! (general registers, the XSAVE area cut to what the kernel takes back for this
//! thread, see [`crate::ptrace::xsave`], the signal mask) is written below its stack
//! pointer as an `rt_sigframe`, and the borrowed run is arranged to end in glibc's
//! `__restore_rt` (`mov rax, 15; syscall`: `rt_sigreturn`):
//!
//! - a system call runs at a `syscall; ret` sequence of libc with the stack pointer
//!   on the frame, whose first word is `__restore_rt`'s address: after the system
//!   call, `ret` enters `__restore_rt`;
//! - a function call gets `__restore_rt` as its return address.
//!
//! Normally argstash stops the thread first and restores the context itself, exactly
//! (so an interrupted system call restarts as it would have). If argstash is gone, the
//! kernel's `rt_sigreturn` restores the same context from the frame: the thread then
//! behaves as after a signal handler ran, which every program already handles. An
//! interrupted system call that the kernel would restart transparently
//! (`ERESTARTSYS`, `ERESTARTNOINTR`, `ERESTARTNOHAND`) is set up in the frame to be
//! issued again; one restarted through `restart_syscall` (`nanosleep`, `poll` with a
//! timeout: `ERESTART_RESTARTBLOCK`) returns `EINTR`, as after a handled signal.

/// `syscall; ret`.
pub(crate) const SYSCALL_RET: [u8; 3] = [0x0f, 0x05, 0xc3];
/// glibc's `__restore_rt`: `mov rax, 15; syscall`.
pub(crate) const RESTORE_RT: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];
/// Where `rip` is at the syscall-entry stop of `__restore_rt`'s `rt_sigreturn`.
pub const RESTORE_RT_SYSCALL_END: u64 = 9;
use crate::ptrace::xsave::{self, XsaveLayout};

/// `rt_sigreturn` on x86-64.
pub const NR_RT_SIGRETURN: u64 = 15;

/// Size of `struct ucontext` (x86-64 kernel layout).
const UCONTEXT_LEN: usize = 304;
/// Offset of `uc_mcontext` (`struct sigcontext`) in the ucontext.
const MCONTEXT_AT: usize = 40;
/// Offset of `uc_sigmask` in the ucontext.
const SIGMASK_AT: usize = 296;
/// `UC_FP_XSTATE | UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS`.
const UC_FLAGS_XSTATE: u64 = 1 | 2 | 4;
/// `UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS` (an FXSAVE-only area).
const UC_FLAGS_FX: u64 = 2 | 4;
/// Offset of the software-reserved bytes in the FXSAVE area.
const SW_RESERVED_AT: usize = xsave::SW_RESERVED_AT;
/// Bytes of the FXSAVE area.
const FXSAVE_LEN: usize = xsave::LEGACY_LEN;
/// The x86-64 red zone below the stack pointer, plus a margin.
const BELOW_SP: u64 = 128 + 128;

/// The two code sequences of libc that the frames rely on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SigreturnGadgets {
    /// A `syscall; ret` sequence.
    pub syscall_ret: u64,
    /// `__restore_rt` (`mov rax, 15; syscall`).
    pub restore_rt: u64,
}

/// Everything of a thread that a borrowed run changes, as saved before it.
#[derive(Clone)]
pub struct SavedContext {
    /// General-purpose registers.
    pub regs: libc::user_regs_struct,
    /// x87/SSE state.
    pub fp: libc::user_fpregs_struct,
    /// The XSAVE area (`NT_X86_XSTATE`), when the kernel gives it.
    pub xstate: Option<Vec<u8>>,
    /// The signal mask the thread returns to.
    pub mask: u64,
}

/// A frame to write at `addr`; a borrowed run starts with `rsp = addr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigFrame {
    /// Lowest address of the frame: the word holding `__restore_rt`'s address.
    pub addr: u64,
    /// The bytes to write there.
    pub bytes: Vec<u8>,
}

/// The registers a thread should have after `rt_sigreturn`: `saved`, with a system
/// call the thread was stopped in set up to be issued again where the kernel would
/// have restarted it, or to return `EINTR` where it restarts through `restart_syscall`.
fn resumed_registers(saved: &libc::user_regs_struct) -> libc::user_regs_struct {
    let mut r = *saved;
    if (saved.orig_rax as i64) >= 0 {
        match saved.rax as i64 {
            // ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND: issue the system call again.
            -514..=-512 => {
                r.rax = saved.orig_rax;
                r.rip = saved.rip.wrapping_sub(2);
            }
            // ERESTART_RESTARTBLOCK: rt_sigreturn cancels the restart block.
            -516 => r.rax = (-libc::EINTR) as i64 as u64,
            _ => {}
        }
    }
    r
}

/// The floating-point area of the frame and the `uc_flags` that describe it: the
/// thread's XSAVE image sized as its kernel buffer takes it ([`xsave::frame_area`]),
/// else (no XSAVE, or an image the layout does not fit) its x87/SSE state alone.
fn fp_area(ctx: &SavedContext, layout: Option<&XsaveLayout>) -> (Vec<u8>, u64) {
    if let (Some(image), Some(layout)) = (ctx.xstate.as_deref(), layout) {
        if let Some(area) = xsave::frame_area(image, layout) {
            return (area, UC_FLAGS_XSTATE);
        }
    }
    // SAFETY: user_fpregs_struct is plain old data of exactly FXSAVE_LEN bytes; the
    // slice covers it and lives no longer than the borrow of `ctx`.
    let fx = unsafe {
        std::slice::from_raw_parts(
            (&ctx.fp as *const libc::user_fpregs_struct).cast::<u8>(),
            std::mem::size_of::<libc::user_fpregs_struct>(),
        )
    };
    let mut area = fx.to_vec();
    area.resize(FXSAVE_LEN, 0);
    // No software-reserved magic: the kernel restores it as a plain FXSAVE image.
    area[SW_RESERVED_AT..FXSAVE_LEN].fill(0);
    (area, UC_FLAGS_FX)
}

/// Builds the frame for `ctx` below its stack pointer (red zone and margin kept), with
/// this machine's XSAVE layout.
pub fn build(ctx: &SavedContext, gadgets: &SigreturnGadgets) -> SigFrame {
    build_with(ctx, gadgets, XsaveLayout::host())
}

/// [`build`] for the XSAVE layout `layout`.
pub fn build_with(
    ctx: &SavedContext,
    gadgets: &SigreturnGadgets,
    layout: Option<&XsaveLayout>,
) -> SigFrame {
    let (fp, uc_flags) = fp_area(ctx, layout);
    let top = ctx.regs.rsp - BELOW_SP;
    let fp_addr = (top - fp.len() as u64) & !63;
    let uc_addr = (fp_addr - UCONTEXT_LEN as u64) & !15;
    let addr = uc_addr - 8;
    let mut bytes = vec![0u8; (fp_addr + fp.len() as u64 - addr) as usize];
    let put = |b: &mut Vec<u8>, at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    put(&mut bytes, 0, gadgets.restore_rt);
    let uc = 8;
    put(&mut bytes, uc, uc_flags);
    // uc_link 0; uc_stack all zero: rt_sigreturn leaves the alternate stack as it is.
    let r = resumed_registers(&ctx.regs);
    let mc = uc + MCONTEXT_AT;
    let gprs = [
        r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15, r.rdi, r.rsi, r.rbp, r.rbx, r.rdx,
        r.rax, r.rcx, r.rsp, r.rip, r.eflags,
    ];
    for (i, v) in gprs.iter().enumerate() {
        put(&mut bytes, mc + i * 8, *v);
    }
    // cs, gs, fs, ss (16 bits each); the kernel takes cs and ss from here.
    let segs = [r.cs as u16, 0, 0, r.ss as u16];
    for (i, s) in segs.iter().enumerate() {
        bytes[mc + 144 + i * 2..mc + 146 + i * 2].copy_from_slice(&s.to_le_bytes());
    }
    put(&mut bytes, mc + 184, fp_addr);
    put(&mut bytes, uc + SIGMASK_AT, ctx.mask);
    let fp_at = (fp_addr - addr) as usize;
    bytes[fp_at..fp_at + fp.len()].copy_from_slice(&fp);
    SigFrame { addr, bytes }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> SavedContext {
        // SAFETY: both are plain old data for which all-zero bytes are valid.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        regs.rsp = 0x7fff_0000_1008;
        regs.rip = 0x4000_1234;
        regs.cs = 0x33;
        regs.ss = 0x2b;
        regs.rax = (-514i64) as u64;
        regs.orig_rax = 34;
        regs.rdi = 7;
        SavedContext {
            regs,
            // SAFETY: as above.
            fp: unsafe { std::mem::zeroed() },
            xstate: None,
            mask: 0x1234,
        }
    }

    #[test]
    fn frame_layout() {
        let g = SigreturnGadgets {
            syscall_ret: 0x1000,
            restore_rt: 0x2000,
        };
        let f = build_with(&ctx(), &g, None);
        // The ucontext starts 16-byte aligned right after the return address, so a
        // function entered with rsp = addr sees an ABI-aligned stack.
        assert_eq!((f.addr + 8) % 16, 0);
        assert!(f.addr + (f.bytes.len() as u64) <= 0x7fff_0000_1008 - 128);
        let word = |at: usize| u64::from_le_bytes(f.bytes[at..at + 8].try_into().unwrap());
        assert_eq!(word(0), 0x2000);
        let mc = 8 + MCONTEXT_AT;
        // pause() (ERESTARTNOHAND) is issued again: rax = its number, rip back on `syscall`.
        assert_eq!(word(mc + 13 * 8), 34);
        assert_eq!(word(mc + 16 * 8), 0x4000_1232);
        assert_eq!(word(mc + 8 * 8), 7);
        assert_eq!(word(8 + SIGMASK_AT), 0x1234);
        let fp = word(mc + 184);
        assert_eq!(fp % 64, 0);
        assert_eq!(fp + FXSAVE_LEN as u64, f.addr + f.bytes.len() as u64);
    }

    /// An AVX-512 + AMX layout (Sapphire Rapids offsets).
    fn amx_layout() -> XsaveLayout {
        let table = |_leaf: u32, sub: u32| match sub {
            2 => [256, 576, 0, 0],
            5 => [64, 1088, 0, 0],
            6 => [512, 1152, 0, 0],
            7 => [1024, 1664, 0, 0],
            17 => [64, 2752, 2, 0],
            18 => [8192, 2816, 6, 0],
            _ => [0; 4],
        };
        XsaveLayout::from_cpuid(0x600e7, table).unwrap()
    }

    #[test]
    fn xsave_frame_is_sized_for_the_thread() {
        let g = SigreturnGadgets {
            syscall_ret: 0x1000,
            restore_rt: 0x2000,
        };
        let mut c = ctx();
        // ptrace's image: every enabled feature (11008 bytes), XCR0 in the software
        // bytes, AVX-512 in use, the tiles not.
        let mut image: Vec<u8> = (0..11008).map(|i| (i % 251) as u8).collect();
        image[SW_RESERVED_AT..FXSAVE_LEN].fill(0);
        image[SW_RESERVED_AT..SW_RESERVED_AT + 8].copy_from_slice(&0x600e7u64.to_le_bytes());
        image[512..576].fill(0);
        image[512..520].copy_from_slice(&0xe7u64.to_le_bytes());
        c.xstate = Some(image.clone());
        let layout = amx_layout();
        let f = build_with(&c, &g, Some(&layout));
        let word = |at: usize| u64::from_le_bytes(f.bytes[at..at + 8].try_into().unwrap());
        assert_eq!(word(8), UC_FLAGS_XSTATE);
        let fp = word(8 + MCONTEXT_AT + 184);
        assert_eq!(fp % 64, 0);
        let at = (fp - f.addr) as usize;
        // Up to the tile configuration (the kernel's default buffer), then MAGIC2.
        assert_eq!(f.bytes.len() - at, 2816 + 4);
        assert_eq!(f.bytes[at..at + SW_RESERVED_AT], image[..SW_RESERVED_AT]);
        assert_eq!(f.bytes[at + 512..at + 2816], image[512..2816]);
        let sw = |o: usize| u32::from_le_bytes(f.bytes[at + o..at + o + 4].try_into().unwrap());
        assert_eq!(sw(SW_RESERVED_AT), xsave::FP_XSTATE_MAGIC1);
        assert_eq!(sw(SW_RESERVED_AT + 4), 2820);
        assert_eq!(word(at + SW_RESERVED_AT + 8), 0x200e7);
        assert_eq!(sw(SW_RESERVED_AT + 16), 2816);
        assert_eq!(sw(2816), xsave::FP_XSTATE_MAGIC2);
        assert!(f.addr + (f.bytes.len() as u64) <= 0x7fff_0000_1008 - 128);
        // No layout: an FXSAVE-only frame, flagged as such.
        let f = build_with(&c, &g, None);
        let word = |at: usize| u64::from_le_bytes(f.bytes[at..at + 8].try_into().unwrap());
        assert_eq!(word(8), UC_FLAGS_FX);
    }

    #[test]
    fn restart_block_returns_eintr() {
        let mut c = ctx();
        c.regs.rax = (-516i64) as u64;
        let r = resumed_registers(&c.regs);
        assert_eq!(r.rax as i64, -(libc::EINTR as i64));
        assert_eq!(r.rip, c.regs.rip);
        // Not in a system call: nothing changes.
        c.regs.orig_rax = u64::MAX;
        c.regs.rax = 5;
        assert_eq!(resumed_registers(&c.regs).rax, 5);
    }
}
