//! The target's architecture and what differs with it: system-call ABI, patch
//! planning and code generation, where arenas may live.
//!
//! x86-64 processes use `trampolines::x86_64`; 32-bit (i386) processes use
//! `trampolines::i386`. Everything else (arenas, records, install/eject steps) is
//! shared, so the rest of the injector asks this module and nothing else.

use trampolines::arena::ArenaHeader;
use trampolines::error::{CodegenError, PlanError};
use trampolines::{i386, x86_64};

use crate::memory::Memory;
use reader::procfs::ElfClass;

/// Instruction set of a target process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    /// 64-bit x86 (SysV AMD64 ABI).
    X86_64,
    /// 32-bit x86 (i386 SysV ABI), run on a 64-bit kernel.
    I386,
}

/// A system call the injector runs inside the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syscall {
    /// `mmap` (x86-64) / `mmap2` (i386; offset in pages, always 0 here).
    Mmap,
    /// `munmap`.
    Munmap,
    /// `mprotect`.
    Mprotect,
}

/// i386 system-call numbers (`arch/x86/entry/syscalls/syscall_32.tbl`).
const I386_MMAP2: i64 = 192;
const I386_MUNMAP: i64 = 91;
const I386_MPROTECT: i64 = 125;

/// The user code segment selector of 32-bit code on Linux x86-64.
pub const USER32_CS: u64 = 0x23;

impl Arch {
    /// The architecture of `pid`'s executable (`/proc/PID/exe`'s ELF class); x86-64 when it cannot be read.
    ///
    /// An operation reads it once, in its [`crate::target::ProcessInfo`].
    pub fn of_process(pid: i32) -> Arch {
        Arch::of_class(reader::procfs::read_exe_class(pid).ok().flatten())
    }

    /// The architecture of an executable of ELF class `class`; x86-64 when unknown.
    pub fn of_class(class: Option<ElfClass>) -> Arch {
        match class {
            Some(ElfClass::Elf32) => Arch::I386,
            _ => Arch::X86_64,
        }
    }

    /// Lower-case name, as in messages.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86-64",
            Arch::I386 => "i386",
        }
    }

    /// The two-byte system-call instruction: `syscall` (`0f 05`) or `int 0x80` (`cd 80`).
    pub fn syscall_instruction(self) -> [u8; 2] {
        match self {
            Arch::X86_64 => [0x0f, 0x05],
            Arch::I386 => [0xcd, 0x80],
        }
    }

    /// The system-call number of `call`.
    pub fn syscall_number(self, call: Syscall) -> i64 {
        match (self, call) {
            (Arch::X86_64, Syscall::Mmap) => libc::SYS_mmap,
            (Arch::X86_64, Syscall::Munmap) => libc::SYS_munmap,
            (Arch::X86_64, Syscall::Mprotect) => libc::SYS_mprotect,
            (Arch::I386, Syscall::Mmap) => I386_MMAP2,
            (Arch::I386, Syscall::Munmap) => I386_MUNMAP,
            (Arch::I386, Syscall::Mprotect) => I386_MPROTECT,
        }
    }

    /// The name of system call `nr`, for messages.
    pub fn syscall_name(self, nr: i64) -> String {
        let known = [Syscall::Mmap, Syscall::Munmap, Syscall::Mprotect]
            .into_iter()
            .find(|c| self.syscall_number(*c) == nr);
        match (self, known) {
            (Arch::I386, Some(Syscall::Mmap)) => "mmap2".into(),
            (_, Some(Syscall::Mmap)) => "mmap".into(),
            (_, Some(Syscall::Munmap)) => "munmap".into(),
            (_, Some(Syscall::Mprotect)) => "mprotect".into(),
            (_, None) => format!("syscall {nr}"),
        }
    }

    /// True when a stopped thread's code segment is the one this architecture runs in.
    pub fn expects_cs(self, cs: u64) -> bool {
        match self {
            Arch::X86_64 => cs == 0x33,
            Arch::I386 => cs == USER32_CS,
        }
    }

    /// Loads system call `nr` with `args` into `regs` (a 64-bit tracer's view of either kind of thread).
    pub fn load_syscall(self, regs: &mut libc::user_regs_struct, nr: i64, args: [u64; 6]) {
        regs.rax = nr as u64;
        // Not "in a system call" any more: no restart of the interrupted one into ours.
        regs.orig_rax = u64::MAX;
        match self {
            Arch::X86_64 => {
                regs.rdi = args[0];
                regs.rsi = args[1];
                regs.rdx = args[2];
                regs.r10 = args[3];
                regs.r8 = args[4];
                regs.r9 = args[5];
            }
            Arch::I386 => {
                let low = |v: u64| u64::from(v as u32);
                regs.rbx = low(args[0]);
                regs.rcx = low(args[1]);
                regs.rdx = low(args[2]);
                regs.rsi = low(args[3]);
                regs.rdi = low(args[4]);
                regs.rbp = low(args[5]);
            }
        }
    }

    /// The raw result of a system call from `rax`: negative errno on failure, else the value.
    pub fn syscall_result(self, rax: u64) -> i64 {
        match self {
            Arch::X86_64 => rax as i64,
            Arch::I386 => {
                // eax: -4095..-1 are errors; everything else (addresses up to 4 GiB) a value.
                let eax = rax as u32;
                if eax >= (-4095i32) as u32 {
                    i64::from(eax as i32)
                } else {
                    i64::from(eax)
                }
            }
        }
    }

    /// One past the highest address code and arenas of this architecture can live at.
    pub fn address_limit(self) -> u64 {
        match self {
            Arch::X86_64 => 0x7fff_ffff_f000,
            // TASK_SIZE of a 32-bit task on x86-64.
            Arch::I386 => 0xffff_e000,
        }
    }

    /// Stack words a trampoline copies when the caller asked for `requested`.
    ///
    /// Every i386 cdecl argument is on the stack, so a 32-bit hook copies at least
    /// [`i386::DEFAULT_STACK_WORDS`] words.
    pub fn stack_words(self, requested: u16) -> u16 {
        match self {
            Arch::X86_64 => requested,
            Arch::I386 => requested.max(i386::DEFAULT_STACK_WORDS),
        }
    }
}

/// A patch plan of either architecture.
#[derive(Debug, Clone)]
pub enum ArchPlan {
    /// An x86-64 function.
    X86_64(x86_64::PatchPlan),
    /// An i386 function.
    I386(i386::PatchPlan),
}

impl ArchPlan {
    /// Plans the patch of the function at `function` (complete code `code`); i386 get-PC thunks are read through `mem`.
    pub fn new(
        arch: Arch,
        function: u64,
        code: &[u8],
        mem: &dyn Memory,
    ) -> Result<ArchPlan, PlanError> {
        match arch {
            Arch::X86_64 => x86_64::plan_patch(function, code).map(ArchPlan::X86_64),
            Arch::I386 => {
                let thunk_at = |target: u64| {
                    let mut head = [0u8; 8];
                    mem.read(target, &mut head).ok()?;
                    i386::pc_thunk_register(&head)
                };
                i386::plan_patch(function, code, &thunk_at).map(ArchPlan::I386)
            }
        }
    }

    /// First patched byte.
    pub fn patch_addr(&self) -> u64 {
        match self {
            ArchPlan::X86_64(p) => p.patch_addr,
            ArchPlan::I386(p) => p.patch_addr,
        }
    }

    /// Bytes overwritten.
    pub fn patch_len(&self) -> usize {
        match self {
            ArchPlan::X86_64(p) => p.patch_len,
            ArchPlan::I386(p) => p.patch_len,
        }
    }

    /// The original bytes at the patch.
    pub fn original(&self) -> &[u8] {
        match self {
            ArchPlan::X86_64(p) => &p.original,
            ArchPlan::I386(p) => &p.original,
        }
    }

    /// Generates the hook for `slot` of `header`, copying `stack_words` stack words
    /// (and stashing xmm0-xmm7 when `xmm`; x86-64 only).
    pub fn build(
        &self,
        header: &ArenaHeader,
        slot: u32,
        stack_words: u16,
        xmm: bool,
        meta: &x86_64::HookMeta,
    ) -> Result<x86_64::HookCode, CodegenError> {
        match self {
            ArchPlan::X86_64(p) => x86_64::build_hook(
                p,
                header,
                slot,
                x86_64::StashLayout::new(stack_words).with_xmm(xmm),
                meta,
            ),
            ArchPlan::I386(p) => {
                i386::build_hook(p, header, slot, i386::StashLayout::new(stack_words), meta)
            }
        }
    }
}

/// The jump that replaces the patched bytes of an installed hook (for eject's checks).
pub fn jump_patch(arch: Arch, at: u64, to: u64, len: usize) -> Result<Vec<u8>, CodegenError> {
    match arch {
        Arch::X86_64 => x86_64::entry_patch(at, to, len),
        Arch::I386 => i386::jump_patch(at, to, len),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i386_results_keep_high_addresses_and_errors() {
        assert_eq!(Arch::I386.syscall_result(0xf7f0_0000), 0xf7f0_0000);
        assert_eq!(Arch::I386.syscall_result(u64::from((-12i32) as u32)), -12);
        assert_eq!(Arch::I386.syscall_result((-12i64) as u64), -12);
        assert_eq!(Arch::X86_64.syscall_result((-12i64) as u64), -12);
    }

    #[test]
    fn i386_syscall_registers_follow_the_int80_abi() {
        // SAFETY: user_regs_struct is plain integers; all-zero is a valid value.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        Arch::I386.load_syscall(&mut regs, 192, [1, 2, 3, 4, u64::MAX, 6]);
        assert_eq!(
            (regs.rax, regs.rbx, regs.rcx, regs.rdx, regs.rsi, regs.rdi, regs.rbp),
            (192, 1, 2, 3, 4, 0xffff_ffff, 6)
        );
        assert_eq!(regs.orig_rax, u64::MAX);
        assert_eq!(Arch::I386.syscall_name(192), "mmap2");
        assert_eq!(Arch::X86_64.syscall_name(libc::SYS_mmap), "mmap");
    }

    /// Two threads block in read(), main in fgets(); echoes stdin lines.
    const READERS32: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static int fds[2];
static void *reader(void *a) { char c; read(fds[0], &c, 1); return a; }
int main(void) {
    pipe(fds);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, reader, 0);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        printf("echo %s", line);
        fflush(stdout);
    }
    return 0;
}
"#;

    #[test]
    fn remote_syscalls_in_a_32bit_process_leave_every_register_as_it_was() {
        use argstash_tests::{
            regs_words, try_build_sources, wait_all_blocked, Target, OUTPUT_TIMEOUT,
        };

        use crate::ptrace::session::Session;

        let flags = ["-m32", "-O1", "-pthread"];
        let Ok(bin) = try_build_sources("readers32", &[("readers32.c", READERS32)], &flags) else {
            eprintln!("SKIP: `cc -m32` cannot link here (install gcc-multilib: scripts/setup.sh)");
            return;
        };
        let mut child = Target::spawn(&bin);
        let pid = child.pid();
        assert_eq!(Arch::of_process(pid), Arch::I386);
        wait_all_blocked(pid);

        let mut s = Session::attach_all(pid).unwrap();
        let tids = s.tids();
        assert_eq!(tids.len(), 3);
        let before: Vec<_> = tids
            .iter()
            .map(|t| regs_words(&s.regs(*t).unwrap()))
            .collect();
        for t in &tids {
            assert_eq!(s.regs(*t).unwrap().cs, USER32_CS);
        }
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        let a = s.remote_mmap(0, 8192, prot, flags).unwrap();
        assert!(
            a + 8192 <= 0x1_0000_0000 && a.is_multiple_of(4096),
            "mmap2 gave {a:#x}"
        );
        s.remote_mprotect(a, 8192, libc::PROT_READ).unwrap();
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        assert!(
            maps.contains(&format!("{a:08x}-{:08x} r--p", a + 8192)),
            "{maps}"
        );
        s.remote_munmap(a, 8192).unwrap();
        // An error comes back as an error: munmap of an unaligned address is EINVAL.
        let err = s.remote_munmap(a + 1, 4096).unwrap_err().to_string();
        assert!(err.contains("munmap") && err.contains("EINVAL"), "{err}");
        let after: Vec<_> = tids
            .iter()
            .map(|t| regs_words(&s.regs(*t).unwrap()))
            .collect();
        assert_eq!(before, after);
        s.detach().unwrap();

        // The interrupted reads restart and the process carries on.
        wait_all_blocked(pid);
        child.write_stdin("hello\n");
        assert_eq!(child.expect_line(OUTPUT_TIMEOUT), "echo hello");
    }

    #[test]
    fn processes_are_told_apart_by_their_executable() {
        assert_eq!(Arch::of_process(std::process::id() as i32), Arch::X86_64);
    }
}
