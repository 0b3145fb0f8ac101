//! Making hooks visible to gdb through its JIT interface.
//!
//! gdb reads, when it attaches, the list of in-memory symbol files at
//! `__jit_debug_descriptor` in any loaded object that also defines
//! `__jit_debug_register_code`. Ordinary programs have neither, so argstash loads a
//! tiny shared object providing them (built from `src/jit_helper.c`: no code runs at
//! load, no relocations) with a remote `dlopen` on a thread borrowed at a safe point
//! ([`crate::ptrace::safe_point`]; skipped, with a note, when none is found), then links one
//! entry per hook into the descriptor: an ELF file in the unwind area naming the
//! trampoline (`argstash_trampoline.NAME`) and relocated prologue, with their
//! `.eh_frame`. `gdb -p PID` then names and unwinds through the hook frames with no
//! extra command. Eject unlinks the entries and, once none is left, `dlclose`s the
//! helper and deletes its file.

use std::path::PathBuf;

use goblin::elf::Elf;
use reader::shared_file::{self, own_uid, SharedFileError};
use trampolines::arena::SLOT_LEN;
use trampolines::symbol_file::{symbol_file, SymbolFileHook};
use trampolines::unwind_area::{FLAG_GDB_JIT, MAX_JIT_ELF};

use super::calls::{Borrower, CallSkipped, CALL_TIMEOUT};
use super::files::{mapping_of, symbol_file_path, target_file, TargetFile, TargetTmpError};
use super::report::UnwindReport;
use super::slots::{read_slot, set_flags, UnwindHook};
use crate::memory::{Memory, MemoryError, WriteMemory};
use crate::ptrace::safe_point::NoSafePoint;
use reader::symbols::{FuncSpec, ProcessSymbols};

/// The helper shared object, built by `build.rs`.
pub const HELPER_SO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/jit_helper.so"));

/// `dlopen` and `dlclose` in the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loader {
    /// `dlopen`.
    pub dlopen: u64,
    /// `dlclose`.
    pub dlclose: u64,
}

/// Finds `dlopen`/`dlclose` (libc since glibc 2.34, else libdl).
pub fn find_loader(symbols: &ProcessSymbols) -> Option<Loader> {
    let find = |name: &str| {
        ["libc", "libdl"].iter().find_map(|module| {
            symbols
                .resolve(&FuncSpec::Qualified {
                    module: (*module).into(),
                    name: name.into(),
                })
                .ok()
                .map(|r| r.addr)
        })
    };
    Some(Loader {
        dlopen: find("dlopen")?,
        dlclose: find("dlclose")?,
    })
}

/// File name of the helper for `pid` (in the `/tmp` the process sees).
pub fn helper_name(pid: i32) -> String {
    format!("argstash-jit-{pid}.so")
}

/// The helper's file for `pid`, in the `/tmp` the process sees.
pub fn helper_file(pid: i32) -> Result<TargetFile, TargetTmpError> {
    target_file(pid, &helper_name(pid))
}

/// True when `bytes` are a helper argstash wrote (any build's: it defines the
/// handle word only argstash's helper has).
pub(super) fn is_helper(bytes: &[u8]) -> bool {
    bytes == HELPER_SO
        || (bytes.starts_with(b"\x7fELF")
            && bytes.windows(HELPER_PROOF.len()).any(|w| w == HELPER_PROOF))
}

/// A symbol only argstash's helper defines.
const HELPER_PROOF: &[u8] = b"argstash_jit_handle";
/// Largest helper read back.
pub(super) const MAX_HELPER: u64 = 1 << 20;

/// Offset of a symbol of the helper from its load base.
fn helper_symbol(name: &str) -> Option<u64> {
    let elf = Elf::parse(HELPER_SO).ok()?;
    elf.dynsyms
        .iter()
        .find(|s| elf.dynstrtab.get_at(s.st_name) == Some(name))
        .map(|s| s.st_value)
}

/// Why the helper could not be loaded in the target.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HelperError {
    /// Its file could not be written (or one there is not ours).
    #[error(transparent)]
    File(#[from] SharedFileError),
    /// The target's `/tmp` cannot hold it.
    #[error(transparent)]
    TargetTmp(#[from] TargetTmpError),
    /// The unwind area's spare bytes cannot hold the path for `dlopen`.
    #[error("no room for the helper's path in the unwind area")]
    NoRoom,
    /// Writing the target's memory failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// No thread was at a safe point for `dlopen`.
    #[error("not loaded: {why}; gdb can still read the hooks with add-symbol-file {}", .symbol_file.display())]
    NoSafePoint {
        /// The search for a safe point.
        why: NoSafePoint,
        /// The symbol file gdb can load instead.
        symbol_file: PathBuf,
    },
    /// `dlopen` could not be called, or did not return in time.
    #[error(transparent)]
    Call(CallSkipped),
    /// `dlopen` returned, but the helper is not mapped.
    #[error("dlopen of {} failed in the target", .0.display())]
    NotLoaded(PathBuf),
    /// The helper is mapped, but the loader's list of objects does not show it.
    #[error("the helper is not in the loader's list")]
    NotListed,
}

/// The helper as loaded in the target.
pub(super) struct Helper {
    /// `__jit_debug_descriptor`.
    pub(super) descriptor: u64,
    /// `argstash_jit_handle`: where the `dlopen` handle is kept for eject.
    pub(super) handle: u64,
    /// `argstash_jit_dlclose`: where `dlclose`'s address is kept for eject.
    pub(super) dlclose: u64,
}

/// The helper of `pid`, if the process has it mapped.
pub(super) fn loaded_helper(pid: i32) -> Option<Helper> {
    let file = helper_file(pid).ok()?;
    let base = mapping_of(pid, &file.host)
        .filter(|m| m.offset == 0)
        .map(|m| m.start)?;
    Some(Helper {
        descriptor: base + helper_symbol("__jit_debug_descriptor")?,
        handle: base + helper_symbol("argstash_jit_handle")?,
        dlclose: base + helper_symbol("argstash_jit_dlclose")?,
    })
}

/// `AT_PHDR`, `AT_PHNUM` and `AT_NULL` in the auxiliary vector.
const AT_PHDR: u64 = 3;
const AT_PHNUM: u64 = 5;
/// `PT_PHDR`, `PT_DYNAMIC`, `DT_DEBUG`.
const PT_PHDR: u32 = 6;
const PT_DYNAMIC: u32 = 2;
const DT_DEBUG: u64 = 21;

/// The loader's `struct link_map` of the object mapped from `path` (what `dlopen`
/// returned for it), found from memory only: the executable's program headers (from
/// the auxiliary vector) give its dynamic section, whose `DT_DEBUG` entry points at
/// the loader's `r_debug` and its list of loaded objects.
pub(crate) fn link_map_of(pid: i32, mem: &dyn Memory, path: &str) -> Option<u64> {
    let auxv = reader::procfs::read_auxv(pid).ok()?;
    let aux = |key: u64| auxv.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    let (phdr, phnum) = (aux(AT_PHDR)?, aux(AT_PHNUM)?.min(256));
    let headers = mem.read_vec(phdr, 56 * phnum as usize).ok()?;
    let field =
        |h: &[u8], at: usize| u64::from_le_bytes(h[at..at + 8].try_into().unwrap_or([0; 8]));
    let kind = |h: &[u8]| u32::from_le_bytes(h[0..4].try_into().unwrap_or([0; 4]));
    let bias = headers
        .chunks_exact(56)
        .find(|h| kind(h) == PT_PHDR)
        .map_or(0, |h| phdr.wrapping_sub(field(h, 16)));
    let dynamic = headers
        .chunks_exact(56)
        .find(|h| kind(h) == PT_DYNAMIC)
        .map(|h| field(h, 16).wrapping_add(bias))?;
    let mut r_debug = 0;
    for i in 0..512u64 {
        let tag = mem.read_u64(dynamic + i * 16).ok()?;
        if tag == 0 {
            break;
        }
        if tag == DT_DEBUG {
            r_debug = mem.read_u64(dynamic + i * 16 + 8).ok()?;
            break;
        }
    }
    if r_debug == 0 {
        return None;
    }
    let mut map = mem.read_u64(r_debug + 8).ok()?;
    for _ in 0..4096 {
        if map == 0 {
            return None;
        }
        let name_at = mem.read_u64(map + 8).ok()?;
        let mut name = [0u8; 256];
        if name_at != 0 && mem.read(name_at, &mut name).is_ok() {
            let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
            if &name[..end] == path.as_bytes() {
                return Some(map);
            }
        }
        map = mem.read_u64(map + 24).ok()?;
    }
    None
}

fn load_helper(
    pid: i32,
    loader: &Loader,
    scratch: (u64, usize),
    mem: &dyn WriteMemory,
    borrower: &mut Borrower,
) -> Result<Helper, HelperError> {
    let file = helper_file(pid)?;
    let path = file.host.clone();
    let text = file.seen.as_str();
    if shared_file::read(&path, &[own_uid()], MAX_HELPER)?.as_deref() != Some(HELPER_SO) {
        shared_file::replace(&path, HELPER_SO, 0o644, &[own_uid()])?;
    }
    let mut cstr = text.as_bytes().to_vec();
    cstr.push(0);
    if cstr.len() > scratch.1 {
        return Err(HelperError::NoRoom);
    }
    mem.write(scratch.0, &cstr)?;
    let called = borrower.with_thread(|session, tid| {
        session.remote_call(
            tid,
            loader.dlopen,
            "dlopen",
            &[scratch.0, (libc::RTLD_NOW | libc::RTLD_LOCAL) as u64],
            CALL_TIMEOUT,
        )?;
        Ok(())
    });
    match called {
        // The path must stay readable for a dlopen that goes on by itself.
        Err(e @ CallSkipped::Released(_)) => return Err(HelperError::Call(e)),
        Err(e) => {
            let _ = mem.write(scratch.0, &vec![0u8; cstr.len()]);
            return Err(match e {
                CallSkipped::NoSafePoint(why) => HelperError::NoSafePoint {
                    why,
                    symbol_file: symbol_file_path(pid),
                },
                e => HelperError::Call(e),
            });
        }
        Ok(()) => {
            let _ = mem.write(scratch.0, &vec![0u8; cstr.len()]);
        }
    }
    let Some(helper) = loaded_helper(pid) else {
        let _ = shared_file::remove_ours(&path, &[own_uid()], MAX_HELPER, is_helper);
        return Err(HelperError::NotLoaded(path));
    };
    let handle = link_map_of(pid, mem, text).ok_or(HelperError::NotListed)?;
    mem.write(helper.handle, &handle.to_le_bytes())?;
    mem.write(helper.dlclose, &loader.dlclose.to_le_bytes())?;
    Ok(helper)
}

/// Links every hook's symbol file into the target's JIT descriptor (loading the helper first).
pub(crate) fn register(
    pid: i32,
    mem: &dyn WriteMemory,
    loader: Option<&Loader>,
    hooks: &[UnwindHook],
    report: &mut UnwindReport,
    borrower: &mut Borrower,
) {
    let mut files = Vec::new();
    for hook in hooks {
        let Ok(slot) = read_slot(mem, hook) else {
            continue;
        };
        if slot.eh_frame.is_empty() || slot.flags & FLAG_GDB_JIT != 0 {
            continue;
        }
        let elf = symbol_file(
            &[SymbolFileHook {
                name: hook.name.clone(),
                code: (hook.trampoline.0, SLOT_LEN as u64),
                trampoline: (hook.trampoline.0, u64::from(hook.trampoline.1)),
                relocated: (hook.relocated.0, u64::from(hook.relocated.1)),
                eh_frame: slot.eh_frame.clone(),
            }],
            hook.area.eh_frame_addr(hook.slot),
        );
        if elf.len() <= MAX_JIT_ELF {
            files.push((hook, slot.flags, elf));
        } else {
            report
                .notes
                .push(format!("gdb symbol file for {} is too large", hook.name));
        }
    }
    if files.is_empty() {
        return;
    }
    let helper = match loaded_helper(pid) {
        Some(h) => h,
        None => {
            let Some(loader) = loader else {
                report.notes.push(
                    "no dlopen in the target: gdb cannot find the hooks by itself \
                     (use the symbol file instead)"
                        .into(),
                );
                return;
            };
            match load_helper(pid, loader, files[0].0.area.scratch(), mem, borrower) {
                Ok(h) => h,
                Err(e) => {
                    report.notes.push(format!("gdb JIT interface: {e}"));
                    return;
                }
            }
        }
    };
    for (hook, flags, elf) in files {
        let entry = hook.area.jit_entry_addr(hook.slot);
        let file = hook.area.jit_elf_addr(hook.slot);
        let linked = (|| -> Result<(), MemoryError> {
            mem.write(file, &elf)?;
            let first = mem.read_u64(helper.descriptor + 16)?;
            let mut e = [0u8; 32];
            e[0..8].copy_from_slice(&first.to_le_bytes());
            e[16..24].copy_from_slice(&file.to_le_bytes());
            e[24..32].copy_from_slice(&(elf.len() as u64).to_le_bytes());
            mem.write(entry, &e)?;
            if first != 0 {
                mem.write(first + 8, &entry.to_le_bytes())?;
            }
            mem.write(helper.descriptor + 16, &entry.to_le_bytes())
        })();
        match linked {
            Ok(()) => {
                let _ = set_flags(mem, hook, flags | FLAG_GDB_JIT);
                report.gdb_jit += 1;
            }
            Err(e) => report
                .notes
                .push(format!("gdb JIT entry for {}: {e}", hook.name)),
        }
    }
}

/// Unlinks the hooks' entries; `dlclose`s the helper and removes its file once none is left.
pub(crate) fn unregister(
    pid: i32,
    mem: &dyn WriteMemory,
    hooks: &[UnwindHook],
    report: &mut UnwindReport,
    borrower: &mut Borrower,
) {
    let Some(helper) = loaded_helper(pid) else {
        return;
    };
    for hook in hooks {
        let Ok(slot) = read_slot(mem, hook) else {
            continue;
        };
        if slot.flags & FLAG_GDB_JIT == 0 {
            continue;
        }
        let entry = hook.area.jit_entry_addr(hook.slot);
        let unlinked = (|| -> Result<(), MemoryError> {
            let next = mem.read_u64(entry)?;
            let prev = mem.read_u64(entry + 8)?;
            if prev == 0 {
                mem.write(helper.descriptor + 16, &next.to_le_bytes())?;
            } else {
                mem.write(prev, &next.to_le_bytes())?;
            }
            if next != 0 {
                mem.write(next + 8, &prev.to_le_bytes())?;
            }
            mem.write(entry, &[0u8; 32])
        })();
        match unlinked {
            Ok(()) => {
                let _ = set_flags(mem, hook, slot.flags & !FLAG_GDB_JIT);
                report.gdb_jit += 1;
            }
            Err(e) => report
                .notes
                .push(format!("gdb JIT entry for {}: {e}", hook.name)),
        }
    }
    if mem.read_u64(helper.descriptor + 16).ok() != Some(0) {
        return;
    }
    let Ok(dlclose) = mem.read_u64(helper.dlclose) else {
        return;
    };
    let Ok(file) = helper_file(pid) else {
        return;
    };
    let handle = match mem.read_u64(helper.handle) {
        Ok(h) if h != 0 => h,
        _ => link_map_of(pid, mem, &file.seen).unwrap_or(0),
    };
    if handle == 0 || dlclose == 0 {
        return;
    }
    let closed = borrower.with_thread(|session, tid| {
        session.remote_call(tid, dlclose, "dlclose", &[handle], CALL_TIMEOUT)?;
        Ok(())
    });
    match closed {
        Ok(()) => {
            if let Err(e) =
                shared_file::remove_ours(&file.host, &[own_uid()], MAX_HELPER, is_helper)
            {
                report.notes.push(format!("gdb JIT helper: {e}"));
            }
        }
        Err(e) => report
            .notes
            .push(format!("the gdb JIT helper stays loaded: {e}")),
    }
}
