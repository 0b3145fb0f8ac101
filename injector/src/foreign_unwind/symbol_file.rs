//! The gdb symbol file `/tmp/argstash-PID.elf`: one ELF file naming every active
//! hook's trampoline and relocated prologue, with their `.eh_frame`, for
//! `add-symbol-file` when the gdb JIT interface is not available.

use trampolines::arena::{HookState, SLOT_LEN};
use trampolines::symbol_file::{symbol_file, SymbolFileHook};

use reader::shared_file::{self, own_uid};

use super::files::symbol_file_path;
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
        shared_file::remove_ours(&path, &[own_uid()], MAX_SYMBOL_FILE, is_symbol_file).map(|_| ())
    } else {
        shared_file::replace(
            &path,
            &symbol_file(&hooks, eh_frame_addr),
            0o644,
            &[own_uid()],
        )
    };
    match result {
        Ok(()) => report.symbol_file = (!hooks.is_empty()).then_some(path),
        Err(e) => report.notes.push(format!("gdb symbol file: {e}")),
    }
}

/// Largest symbol file read back to prove it is ours.
pub(super) const MAX_SYMBOL_FILE: u64 = 64 << 20;

/// True when `bytes` are a symbol file argstash wrote: an ELF file naming hook code.
pub(super) fn is_symbol_file(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF") && bytes.windows(PROOF.len()).any(|w| w == PROOF)
}

/// The symbol prefix every symbol file of argstash holds.
const PROOF: &[u8] = b"argstash_trampoline.";
