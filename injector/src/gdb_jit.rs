//! Making hooks visible to gdb through its JIT interface.
//!
//! gdb reads, when it attaches, the list of in-memory symbol files at
//! `__jit_debug_descriptor` in any loaded object that also defines
//! `__jit_debug_register_code`. Ordinary programs have neither, so argstash loads a
//! tiny shared object providing them (built from `src/jit_helper.c`: no code runs at
//! load, no relocations) with a remote `dlopen` on a borrowed thread, then links one
//! entry per hook into the descriptor: an ELF file in the unwind area naming the
//! trampoline (`argstash_trampoline.NAME`) and relocated prologue, with their
//! `.eh_frame`. `gdb -p PID` then names and unwinds through the hook frames with no
//! extra command. Eject unlinks the entries and, once none is left, `dlclose`s the
//! helper and deletes its file.

use std::path::PathBuf;

use goblin::elf::Elf;
use trampolines::arena::SLOT_LEN;
use trampolines::symbol_file::{symbol_file, SymbolFileHook};
use trampolines::unwind_area::{FLAG_GDB_JIT, MAX_JIT_ELF};

use crate::foreign_unwind::{
    read_slot, set_flags, with_borrowed_thread, UnwindHook, UnwindReport, CALL_TIMEOUT,
};
use crate::memory::Memory;
use crate::symbols::{FuncSpec, ProcessSymbols};

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

/// Path of the helper for `pid`.
pub fn helper_path(pid: i32) -> PathBuf {
    PathBuf::from(format!("/tmp/argstash-jit-{pid}.so"))
}

/// Offset of a symbol of the helper from its load base.
fn helper_symbol(name: &str) -> Option<u64> {
    let elf = Elf::parse(HELPER_SO).ok()?;
    elf.dynsyms
        .iter()
        .find(|s| elf.dynstrtab.get_at(s.st_name) == Some(name))
        .map(|s| s.st_value)
}

/// The helper as loaded in the target.
struct Helper {
    descriptor: u64,
    handle: u64,
    dlclose: u64,
}

fn loaded_helper(pid: i32) -> Option<Helper> {
    let path = helper_path(pid);
    let path = path.to_str()?;
    let maps = crate::maps::read_maps(pid).ok()?;
    let base = maps
        .iter()
        .find(|m| m.path == path && m.offset == 0)
        .map(|m| m.start)?;
    Some(Helper {
        descriptor: base + helper_symbol("__jit_debug_descriptor")?,
        handle: base + helper_symbol("argstash_jit_handle")?,
        dlclose: base + helper_symbol("argstash_jit_dlclose")?,
    })
}

fn load_helper(
    pid: i32,
    loader: &Loader,
    scratch: (u64, usize),
    mem: &dyn Memory,
) -> Result<Helper, String> {
    let path = helper_path(pid);
    let text = path.to_str().ok_or("helper path is not UTF-8")?;
    if std::fs::read(&path).ok().as_deref() != Some(HELPER_SO) {
        let tmp = path.with_extension(format!("so.tmp{}", std::process::id()));
        crate::foreign_unwind::replace_file(&path, &tmp, HELPER_SO)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let mut cstr = text.as_bytes().to_vec();
    cstr.push(0);
    if cstr.len() > scratch.1 {
        return Err("no room for the helper's path in the unwind area".into());
    }
    mem.write(scratch.0, &cstr).map_err(|e| e.to_string())?;
    let mut handle = 0;
    with_borrowed_thread(pid, |session, tid| {
        handle = session.remote_call(
            tid,
            loader.dlopen,
            "dlopen",
            &[scratch.0, (libc::RTLD_NOW | libc::RTLD_LOCAL) as u64],
            CALL_TIMEOUT,
        )?;
        Ok(())
    })?;
    let _ = mem.write(scratch.0, &vec![0u8; cstr.len()]);
    if handle == 0 {
        let _ = std::fs::remove_file(&path);
        return Err(format!("dlopen of {} failed in the target", path.display()));
    }
    let helper = loaded_helper(pid).ok_or("the helper is not mapped after dlopen")?;
    mem.write(helper.handle, &handle.to_le_bytes())
        .and_then(|()| mem.write(helper.dlclose, &loader.dlclose.to_le_bytes()))
        .map_err(|e| e.to_string())?;
    Ok(helper)
}

/// Links every hook's symbol file into the target's JIT descriptor (loading the helper first).
pub fn register(
    pid: i32,
    mem: &dyn Memory,
    loader: Option<&Loader>,
    hooks: &[UnwindHook],
    report: &mut UnwindReport,
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
            match load_helper(pid, loader, files[0].0.area.scratch(), mem) {
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
        let linked = (|| -> Result<(), crate::memory::MemoryError> {
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
pub fn unregister(pid: i32, mem: &dyn Memory, hooks: &[UnwindHook], report: &mut UnwindReport) {
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
        let unlinked = (|| -> Result<(), crate::memory::MemoryError> {
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
    let (Ok(handle), Ok(dlclose)) = (mem.read_u64(helper.handle), mem.read_u64(helper.dlclose))
    else {
        return;
    };
    if handle == 0 || dlclose == 0 {
        return;
    }
    let closed = with_borrowed_thread(pid, |session, tid| {
        session.remote_call(tid, dlclose, "dlclose", &[handle], CALL_TIMEOUT)?;
        Ok(())
    });
    match closed {
        Ok(()) => {
            let _ = std::fs::remove_file(helper_path(pid));
        }
        Err(e) => report
            .notes
            .push(format!("the gdb JIT helper stays loaded: {e}")),
    }
}
