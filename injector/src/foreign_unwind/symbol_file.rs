//! The gdb symbol file `/tmp/argstash-PID.elf`: one ELF file naming every active
//! hook's trampoline and relocated prologue, with their `.eh_frame`, for
//! `add-symbol-file` when the gdb JIT interface is not available.

use trampolines::arena::{HookState, SLOT_LEN};
use trampolines::symbol_file::{symbol_file, SymbolFileHook};

use super::files::{replace_file, symbol_file_path};
use super::report::UnwindReport;
use super::slots::{hook_of, read_area, read_slot};
use crate::memory::Memory;

/// Rewrites the gdb symbol file from the active hooks in the target (removes it when none are left).
pub fn refresh_symbol_file(pid: i32, mem: &dyn Memory, report: &mut UnwindReport) {
    let path = symbol_file_path(pid);
    let arenas = reader::procfs::read_maps(pid)
        .ok()
        .and_then(|maps| reader::arena::discover(&maps, mem).ok())
        .unwrap_or_default();
    let mut hooks = Vec::new();
    let mut eh_frame_addr = 0;
    for a in &arenas {
        let Some(area) = read_area(mem, &a.header) else {
            continue;
        };
        for (slot, r) in a.hooks().filter(|(_, r)| r.state == HookState::Active) {
            let Ok(s) = read_slot(mem, &hook_of(area, slot, r)) else {
                continue;
            };
            if s.eh_frame.is_empty() {
                continue;
            }
            if eh_frame_addr == 0 {
                eh_frame_addr = area.eh_frame_addr(slot);
            }
            hooks.push(SymbolFileHook {
                name: r.name.clone(),
                code: (a.header.slot_addr(slot), SLOT_LEN as u64),
                trampoline: (r.trampoline, u64::from(r.trampoline_len)),
                relocated: (r.relocated, u64::from(r.relocated_len)),
                eh_frame: s.eh_frame,
            });
        }
    }
    let result = if hooks.is_empty() {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    } else {
        let tmp = path.with_extension(format!("elf.tmp{}", std::process::id()));
        replace_file(&path, &tmp, &symbol_file(&hooks, eh_frame_addr))
    };
    match result {
        Ok(()) => report.symbol_file = (!hooks.is_empty()).then_some(path),
        Err(e) => report
            .notes
            .push(format!("cannot write {}: {e}", path.display())),
    }
}
