//! The target's architecture and what differs with it beyond code generation:
//! the system-call ABI a 64-bit tracer drives either kind of thread with.
//!
//! [`Arch`] is `trampolines`' one enum. Everything about generating code for an
//! architecture (planning a patch, a hook's code, the jump of an installed hook,
//! the least stack window, where arenas may live) is `trampolines`' contract,
//! reached through [`Arch::codegen`]; the system-call ABI is [`SyscallAbi`],
//! implemented here for the same per-architecture types. Both are chosen once
//! per call ([`ProcessArch::abi`], [`Arch::codegen`]), so the rest of the
//! injector asks this module and never matches on the architecture to do so.

use trampolines::{i386::I386, x86_64::X86_64};

use reader::procfs::ElfClass;

pub use trampolines::Arch;

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

/// The user code segment selector of 64-bit code on Linux x86-64.
const USER64_CS: u64 = 0x33;

/// One architecture's system-call ABI, as a 64-bit tracer sees a thread of it.
pub trait SyscallAbi: Sync {
    /// The two-byte system-call instruction: `syscall` (`0f 05`) or `int 0x80` (`cd 80`).
    fn instruction(&self) -> [u8; 2];
    /// The system-call number of `call`.
    fn number(&self, call: Syscall) -> i64;
    /// The name of `call` in this ABI, for messages.
    fn name(&self, call: Syscall) -> &'static str;
    /// The code segment selector a thread of this architecture runs in.
    fn code_segment(&self) -> u64;
    /// Loads system call `nr` with `args` into `regs`.
    fn load(&self, regs: &mut libc::user_regs_struct, nr: i64, args: [u64; 6]);
    /// The raw result of a system call from `rax`: negative errno on failure, else the value.
    fn result(&self, rax: u64) -> i64;
}

impl SyscallAbi for X86_64 {
    fn instruction(&self) -> [u8; 2] {
        [0x0f, 0x05]
    }

    fn number(&self, call: Syscall) -> i64 {
        match call {
            Syscall::Mmap => libc::SYS_mmap,
            Syscall::Munmap => libc::SYS_munmap,
            Syscall::Mprotect => libc::SYS_mprotect,
        }
    }

    fn name(&self, call: Syscall) -> &'static str {
        match call {
            Syscall::Mmap => "mmap",
            Syscall::Munmap => "munmap",
            Syscall::Mprotect => "mprotect",
        }
    }

    fn code_segment(&self) -> u64 {
        USER64_CS
    }

    fn load(&self, regs: &mut libc::user_regs_struct, nr: i64, args: [u64; 6]) {
        load_number(regs, nr);
        regs.rdi = args[0];
        regs.rsi = args[1];
        regs.rdx = args[2];
        regs.r10 = args[3];
        regs.r8 = args[4];
        regs.r9 = args[5];
    }

    fn result(&self, rax: u64) -> i64 {
        rax as i64
    }
}

impl SyscallAbi for I386 {
    fn instruction(&self) -> [u8; 2] {
        [0xcd, 0x80]
    }

    fn number(&self, call: Syscall) -> i64 {
        match call {
            Syscall::Mmap => I386_MMAP2,
            Syscall::Munmap => I386_MUNMAP,
            Syscall::Mprotect => I386_MPROTECT,
        }
    }

    fn name(&self, call: Syscall) -> &'static str {
        match call {
            Syscall::Mmap => "mmap2",
            Syscall::Munmap => "munmap",
            Syscall::Mprotect => "mprotect",
        }
    }

    fn code_segment(&self) -> u64 {
        USER32_CS
    }

    fn load(&self, regs: &mut libc::user_regs_struct, nr: i64, args: [u64; 6]) {
        load_number(regs, nr);
        let low = |v: u64| u64::from(v as u32);
        regs.rbx = low(args[0]);
        regs.rcx = low(args[1]);
        regs.rdx = low(args[2]);
        regs.rsi = low(args[3]);
        regs.rdi = low(args[4]);
        regs.rbp = low(args[5]);
    }

    fn result(&self, rax: u64) -> i64 {
        // eax: -4095..-1 are errors; everything else (addresses up to 4 GiB) a value.
        let eax = rax as u32;
        if eax >= (-4095i32) as u32 {
            i64::from(eax as i32)
        } else {
            i64::from(eax)
        }
    }
}

/// Puts the number of the system call in `rax`, shared by both ABIs.
fn load_number(regs: &mut libc::user_regs_struct, nr: i64) {
    regs.rax = nr as u64;
    // Not "in a system call" any more: no restart of the interrupted one into ours.
    regs.orig_rax = u64::MAX;
}

/// What the injector asks of a target's [`Arch`]: how to tell it from the
/// process, and its system-call ABI (chosen once, in [`ProcessArch::abi`]).
pub trait ProcessArch: Sized {
    /// The architecture of `pid`'s executable (`/proc/PID/exe`'s ELF class); x86-64 when it cannot be read.
    ///
    /// An operation reads it once, in its [`crate::target::ProcessInfo`].
    fn of_process(pid: i32) -> Self;

    /// The architecture of an executable of ELF class `class`; x86-64 when unknown.
    fn of_class(class: Option<ElfClass>) -> Self;

    /// This architecture's system-call ABI.
    fn abi(self) -> &'static dyn SyscallAbi;

    /// The two-byte system-call instruction: `syscall` (`0f 05`) or `int 0x80` (`cd 80`).
    fn syscall_instruction(self) -> [u8; 2] {
        self.abi().instruction()
    }

    /// The system-call number of `call`.
    fn syscall_number(self, call: Syscall) -> i64 {
        self.abi().number(call)
    }

    /// The name of system call `nr`, for messages.
    fn syscall_name(self, nr: i64) -> String {
        let abi = self.abi();
        [Syscall::Mmap, Syscall::Munmap, Syscall::Mprotect]
            .into_iter()
            .find(|c| abi.number(*c) == nr)
            .map_or_else(|| format!("syscall {nr}"), |c| abi.name(c).into())
    }

    /// True when a stopped thread's code segment is the one this architecture runs in.
    fn expects_cs(self, cs: u64) -> bool {
        cs == self.abi().code_segment()
    }

    /// Loads system call `nr` with `args` into `regs` (a 64-bit tracer's view of either kind of thread).
    fn load_syscall(self, regs: &mut libc::user_regs_struct, nr: i64, args: [u64; 6]) {
        self.abi().load(regs, nr, args)
    }

    /// The raw result of a system call from `rax`: negative errno on failure, else the value.
    fn syscall_result(self, rax: u64) -> i64 {
        self.abi().result(rax)
    }
}

impl ProcessArch for Arch {
    fn of_process(pid: i32) -> Arch {
        Arch::of_class(reader::procfs::read_exe_class(pid).ok().flatten())
    }

    fn of_class(class: Option<ElfClass>) -> Arch {
        match class {
            Some(ElfClass::Elf32) => Arch::I386,
            _ => Arch::X86_64,
        }
    }

    fn abi(self) -> &'static dyn SyscallAbi {
        match self {
            Arch::X86_64 => &X86_64,
            Arch::I386 => &I386,
        }
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
