//! Listing the hooks recorded in a target: read from its arenas alone, without
//! stopping it.

use crate::error::Error;
use crate::hooks::HookInfo;
use crate::memory::ProcessMemory;
use crate::target::{Access, ProcessInfo};
use reader::arena::discover;
use reader::ids::Pid;

/// Lists every hook recorded in the target's arenas (active and ejected).
///
/// A stored signature is shown only when it parses (normalized): the arena lives
/// in the target, so its text may have been written by an older argstash that
/// stored malformed lists, or by the target itself.
pub fn list(pid: Pid) -> Result<Vec<HookInfo>, Error> {
    let pid = pid.as_raw();
    let ctx = ProcessInfo::read(pid, Access::Read)?;
    let mem = ProcessMemory::open(pid)?;
    let arenas = discover(&ctx.maps, &mem)?;
    Ok(arenas
        .iter()
        .flat_map(|a| {
            a.hooks().map(|(slot, r)| HookInfo {
                signature: a
                    .signature(slot)
                    .and_then(|s| reader::args::parse_params(s).ok())
                    .map(|sig| sig.text().to_string())
                    .filter(|text| !text.is_empty()),
                ..HookInfo::new(&a.header, slot, r)
            })
        })
        .collect())
}
