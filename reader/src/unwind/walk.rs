//! The frame loop, written once for every architecture.
//!
//! Each step looks at the frame's pc first: in a hook's trampoline, the frame
//! is either the stash frame the hooked function returned to (its return
//! address is the hook's `after_call`: read at its known place, its arguments
//! go to the hooked function's frame) or a thread stopped inside the trampoline
//! itself; in a relocated prologue, the frame is unwound as the original bytes
//! it came from; anywhere else, the architecture's CFI step moves it to its
//! caller. The architecture then says whether the caller is a frame to go on
//! with. At most [`MAX_FRAMES`] steps are taken.

use trampolines::arena::HookRecord;

use crate::args::FrameState;
use crate::memory::Memory;
use crate::unwind::{
    ArchUnwind, CodeAddress, Frame, FrameKind, Scope, Stepped, StopReason, MAX_FRAMES,
};

/// What the loop returns: frames, what DWARF evaluation needs of each (`None`
/// for trampoline frames), and why it stopped early.
pub(crate) type Walked = (Vec<Frame>, Vec<Option<FrameState>>, Option<StopReason>);

/// One thread's unwind over one architecture.
pub(crate) struct Walker<'a, A: ArchUnwind> {
    pub(crate) arch: &'a A,
    pub(crate) scope: &'a Scope,
    pub(crate) mem: &'a dyn Memory,
}

impl<A: ArchUnwind> Walker<'_, A> {
    /// Unwinds from the innermost frame's registers `start`; frames are named by
    /// ELF symbols only (see [`super::annotate`] for the rest).
    pub(crate) fn frames(
        &self,
        cache: &mut A::Cache,
        start: A::Regs,
        show_trampolines: bool,
    ) -> Walked {
        let mut frames: Vec<Frame> = Vec::new();
        let mut states: Vec<Option<FrameState>> = Vec::new();
        let mut regs = start;
        for depth in 0..MAX_FRAMES {
            let pc = A::pc(&regs);
            let first = depth == 0;
            let at = if first {
                CodeAddress::Instruction(pc)
            } else {
                CodeAddress::Return(pc)
            };
            let hook = self.scope.hook_at(pc);
            let step = match hook {
                Some(hook) if hook.in_trampoline(pc) => {
                    let step = if !first && pc == hook.after_call() {
                        // The hooked function returned here: a stash frame, at a known place.
                        match A::read_stash(hook, &regs, self.mem) {
                            Ok((stash, step)) => {
                                if let Some(callee) = frames.last_mut() {
                                    callee.stash = Some(stash);
                                }
                                Ok(Some(step))
                            }
                            Err(why) => return (frames, states, Some(why)),
                        }
                    } else {
                        // Stopped inside the trampoline itself.
                        Ok(A::step_in_trampoline(hook, &regs, self.mem))
                    };
                    if show_trampolines || first {
                        frames.push(trampoline_frame(hook, pc, first && !show_trampolines));
                        states.push(None);
                    }
                    step
                }
                Some(hook) => {
                    // A relocated prologue behaves like the original bytes it came from.
                    let orig = hook.relocated_to_original(pc).unwrap_or(hook.patch_addr);
                    let mut f = self.symbolize(orig, orig, FrameKind::Relocated);
                    f.pc = pc;
                    frames.push(f);
                    states.push(Some(A::frame_state(&regs, orig)));
                    let at = CodeAddress::Instruction(orig);
                    self.arch.step(cache, at, &regs, self.mem)
                }
                None => {
                    frames.push(self.symbolize(pc, at.lookup(), FrameKind::Normal));
                    states.push(Some(A::frame_state(&regs, at.lookup())));
                    self.arch.step(cache, at, &regs, self.mem)
                }
            };
            let Stepped { caller, cfa } = match step {
                Ok(Some(s)) => s,
                Ok(None) => return (frames, states, None),
                Err(why) => return (frames, states, Some(why)),
            };
            let from_trampoline = hook.is_some_and(|h| h.in_trampoline(pc));
            if !from_trampoline {
                if let Some(Some(st)) = states.last_mut() {
                    st.cfa = cfa;
                }
                // The frame's stack: from its sp to where its caller's begins.
                let (sp, up) = (A::sp(&regs), A::sp(&caller));
                if let Some(f) = frames.last_mut().filter(|_| up > sp) {
                    f.stack = Some((sp, up));
                }
            }
            match A::goes_on(self.scope, &regs, &caller, first, from_trampoline) {
                Ok(true) => regs = caller,
                Ok(false) => return (frames, states, None),
                Err(why) => return (frames, states, Some(why)),
            }
        }
        let shown = frames.len();
        let why = StopReason::FrameLimit {
            steps: MAX_FRAMES,
            shown,
        };
        (frames, states, Some(why))
    }

    /// A frame at `pc` named by the ELF symbol covering `lookup` (the pc, or a
    /// return address minus one), without debug info.
    fn symbolize(&self, pc: u64, lookup: u64, kind: FrameKind) -> Frame {
        let symbols = &self.scope.symbols;
        let (function, offset, module) = match symbols.lookup(lookup) {
            Some((m, s, off)) => (
                Some(s.name.clone()),
                off + (pc - lookup),
                Some(m.path.clone()),
            ),
            None => (None, 0, symbols.module_for(lookup).map(|m| m.path.clone())),
        };
        Frame {
            pc,
            function,
            offset,
            module,
            kind,
            ..Frame::default()
        }
    }
}

/// The frame of a trampoline at `pc`; `as_hooked` names it as the hooked
/// function instead (a thread stopped in a trampoline, trampolines not shown).
fn trampoline_frame(hook: &HookRecord, pc: u64, as_hooked: bool) -> Frame {
    if as_hooked {
        return Frame {
            pc,
            function: Some(hook.name.clone()),
            offset: 0,
            module: Some(hook.module.clone()),
            kind: FrameKind::Trampoline,
            ..Frame::default()
        };
    }
    Frame {
        pc,
        function: Some(format!("argstash_trampoline.{}", hook.name)),
        offset: pc - hook.trampoline,
        module: None,
        kind: FrameKind::Trampoline,
        ..Frame::default()
    }
}
