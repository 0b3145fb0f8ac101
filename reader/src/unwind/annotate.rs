//! Naming unwound frames from debug info, for every architecture: source
//! functions, files and lines, inlined calls, DWARF arguments, and the stashed
//! arguments of hooked frames named by DWARF or by the hook's user signature.

use crate::args::{dwarf_values, FrameState, FunctionInfo, Location};
use crate::debuginfo::{ModuleDebug, SourceFrame};
use crate::memory::Memory;
use crate::unwind::{
    hook_signature, ArchUnwind, Frame, FrameKind, InlinedFrame, Scope, StashedArgs,
};

/// Adds source locations, inlined frames and typed arguments to unwound frames.
pub(crate) fn annotate<A: ArchUnwind>(
    scope: &Scope,
    frames: &mut [Frame],
    states: &[Option<FrameState>],
    mem: &dyn Memory,
) {
    for i in 0..frames.len().min(states.len()) {
        let Some(st) = &states[i] else { continue };
        let with_entry;
        let st = if A::ENTRY_VALUES {
            with_entry = with_entry_values(scope, st, frames.get(i + 1), states.get(i + 1), mem);
            &with_entry
        } else {
            st
        };
        let f = &mut frames[i];
        let source = add_source(f, scope.debug_for(st.pc), st, mem);
        let info = source.last().and_then(|p| p.info.as_ref());
        let tail_info = f
            .stash
            .as_ref()
            .and_then(|s| hooked_info(s, info, |a| scope.debug_for(a)));
        let info = tail_info.as_ref().or(info);
        f.args = match (&f.stash, info) {
            (Some(stash), Some(i)) => A::stashed_values(i, stash, mem),
            (Some(stash), None) => {
                match hook_signature(&scope.arenas, stash.function).map(crate::args::parse_params) {
                    Some(Ok(sig)) => A::signature_values(&sig.to_function_info(None), stash, mem),
                    _ => Vec::new(),
                }
            }
            (None, Some(i)) => dwarf_values(i, &i.frame_base, st, mem),
            (None, None) => Vec::new(),
        };
    }
}

/// `state` with the entry values its caller's call site gives, when the frame's
/// parameter locations ask for them (gdb's `x@entry=` values).
fn with_entry_values(
    scope: &Scope,
    state: &FrameState,
    caller: Option<&Frame>,
    caller_state: Option<&Option<FrameState>>,
    mem: &dyn Memory,
) -> FrameState {
    let mut st = state.clone();
    let (Some(caller), Some(Some(cs))) = (caller, caller_state) else {
        return st;
    };
    if caller.kind != FrameKind::Normal {
        return st;
    }
    let Some(debug) = scope.debug_for(st.pc) else {
        return st;
    };
    let wants = debug
        .frames(st.pc)
        .iter()
        .filter_map(|s| s.info.as_ref())
        .any(|i| crate::args::wants_entry_values(i, st.pc));
    if !wants {
        return st;
    }
    let Some(caller_debug) = scope.debug_for(cs.pc) else {
        return st;
    };
    let Some(caller_info) = caller_debug.function_info(cs.pc) else {
        return st;
    };
    let Some(encoding) = caller_info.encoding else {
        return st;
    };
    for (loc, value) in caller_debug.call_site_params(cs.pc, caller.pc) {
        if let Some(v) = crate::args::call_value(&value, &caller_info.frame_base, encoding, cs, mem)
        {
            st.entry_values.push((loc, v));
        }
    }
    st
}

/// Names `f` from `debug` at the frame's lookup pc (`st.pc`): the demangled (or
/// MiniDebugInfo) function, source function, file, line and inlined calls with
/// their DWARF arguments. Returns the source frames, the physical function's last.
fn add_source(
    f: &mut Frame,
    debug: Option<&ModuleDebug>,
    st: &FrameState,
    mem: &dyn Memory,
) -> std::sync::Arc<[SourceFrame]> {
    let source = debug.map_or_else(|| std::sync::Arc::from([]), |d| d.frames(st.pc));
    let (physical, inlined) = match source.split_last() {
        Some((p, rest)) => (Some(p), rest),
        None => (None, &[][..]),
    };
    // MiniDebugInfo is the module's full symbol table: it wins over `.dynsym`.
    match (&f.function, debug.and_then(|d| d.mini_symbol(st.pc))) {
        (_, Some((s, off))) if f.kind == FrameKind::Normal => {
            f.function = Some(crate::debuginfo::demangle(&s.name));
            f.offset = off + (f.pc - st.pc);
        }
        (Some(name), _) => f.function = Some(crate::debuginfo::demangle(name)),
        (None, _) => {}
    }
    if let Some(p) = physical {
        f.source_function = p.function.clone();
        f.file = p.file.clone();
        f.line = p.line;
    }
    let info = physical.and_then(|p| p.info.as_ref());
    let no_base = Location::default();
    let frame_base = info.map_or(&no_base, |i| &i.frame_base);
    f.inlined = inlined
        .iter()
        .map(|s| InlinedFrame {
            args: s
                .info
                .as_ref()
                .map(|i| dwarf_values(i, frame_base, st, mem))
                .unwrap_or_default(),
            function: s.function.clone(),
            file: s.file.clone(),
            line: s.line,
        })
        .collect();
    source
}

/// The hooked function's own description, when the frame holding `stash` is
/// another function (`frame_info`'s entry is not the hook's): the hooked function
/// tail-called it, and the stashed registers hold the hooked function's
/// parameters, not the frame's. `None` when `frame_info` is the right one (or
/// nothing better is known): then the frame's own description names the values.
fn hooked_info<'d>(
    stash: &StashedArgs,
    frame_info: Option<&FunctionInfo>,
    debug_for: impl Fn(u64) -> Option<&'d ModuleDebug>,
) -> Option<FunctionInfo> {
    if stash.function == 0 {
        return None;
    }
    match frame_info.and_then(|i| i.entry) {
        Some(entry) if entry == stash.function => None,
        _ => debug_for(stash.function)?
            .function_info(stash.function)
            .filter(|i| i.entry == Some(stash.function)),
    }
}
