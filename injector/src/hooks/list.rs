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
                signature: shown_signature(a.signature(slot)),
                ..HookInfo::new(&a.header, slot, r)
            })
        })
        .collect())
}

/// A signature read from an arena as `list` shows it: normalized when it parses,
/// else not at all (never a malformed list).
fn shown_signature(stored: Option<&str>) -> Option<String> {
    let sig = reader::args::parse_params(stored?).ok()?;
    Some(sig.text().to_string()).filter(|text| !text.is_empty())
}

#[cfg(test)]
mod tests {
    use super::shown_signature;

    #[test]
    fn only_signatures_that_parse_are_shown() {
        assert_eq!(
            shown_signature(Some("int n, const char *s, ...")).as_deref(),
            Some("int n, const char *s, ...")
        );
        assert_eq!(
            shown_signature(Some("unsigned  int a[4]")).as_deref(),
            Some("unsigned int *a")
        );
        // What argstash stored before the grammar (issue 19), or garbage from the target.
        for bad in [
            "int a)",
            "int a[",
            "int 3x",
            "long a;",
            "void, int",
            "\u{fffd}",
        ] {
            assert_eq!(shown_signature(Some(bad)), None, "{bad}");
        }
        assert_eq!(shown_signature(Some("")), None);
        assert_eq!(shown_signature(None), None);
    }
}
