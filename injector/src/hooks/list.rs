//! Listing the hooks recorded in a target: read from its arenas alone, without
//! stopping it.

use crate::error::Error;
use crate::hooks::HookInfo;
use crate::memory::ProcessMemory;
use crate::target::{Access, ProcessInfo};
use reader::arena::discover;
use reader::ids::Pid;

/// Lists every hook recorded in the target's arenas (active and ejected).
pub fn list(pid: Pid) -> Result<Vec<HookInfo>, Error> {
    let pid = pid.as_raw();
    let ctx = ProcessInfo::read(pid, Access::Read)?;
    let mem = ProcessMemory::open(pid)?;
    let arenas = discover(&ctx.maps, &mem)?;
    Ok(arenas
        .iter()
        .flat_map(|a| {
            a.hooks().map(|(slot, r)| HookInfo {
                signature: a.signature(slot).map(str::to_string),
                ..HookInfo::new(&a.header, slot, r)
            })
        })
        .collect())
}
