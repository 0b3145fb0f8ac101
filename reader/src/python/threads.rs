//! Walking `_PyRuntime`'s interpreters and their thread states.
//!
//! Both lists are linked lists in target memory, so the walk is bounded
//! ([`MAX_INTERPRETERS`], [`MAX_THREADS`]) and remembers what it visited: a loop
//! or an unreadable link ends that list with a [`WalkProblem`] and keeps what was
//! read before it.

use std::collections::HashSet;
use std::fmt;

use crate::memory::Memory;

use super::error::PythonError;
use super::layout::{CurrentFrame, Layout};

/// The most interpreters walked.
pub const MAX_INTERPRETERS: usize = 256;
/// The most thread states walked, over all interpreters.
pub const MAX_THREADS: usize = 16384;

/// One `PyThreadState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadState {
    /// Address of the thread state.
    pub addr: u64,
    /// Address of the interpreter whose list holds it.
    pub interp: u64,
    /// That interpreter's id (0: the main interpreter), when the layout has it
    /// and it could be read.
    pub interp_id: Option<i64>,
    /// The OS thread id (`native_thread_id`; a Linux tid), 0 if never set.
    pub native_thread_id: u64,
    /// The innermost `_PyInterpreterFrame*`, `None` when the thread runs no Python
    /// code (or its frame pointer could not be read; see the walk's problems).
    pub current_frame: Option<u64>,
    /// 3.15+: the thread's base frame, where its chain must end; `None` before
    /// 3.15 or when unreadable.
    pub base_frame: Option<u64>,
}

/// Why a list of the walk ended early or a thread state is incomplete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkReason {
    /// The named field could not be read.
    Unreadable(&'static str),
    /// The list came back to an element already visited.
    Loop,
    /// The list is longer than the limit.
    TooMany(usize),
    /// The thread state names another interpreter than the list it is in (being torn down?).
    WrongInterpreter {
        /// What its `interp` field holds.
        found: u64,
    },
}

impl fmt::Display for WalkReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalkReason::Unreadable(what) => write!(f, "cannot read its {what}"),
            WalkReason::Loop => write!(f, "the list loops back to it"),
            WalkReason::TooMany(n) => write!(f, "more than {n} entries"),
            WalkReason::WrongInterpreter { found } => {
                write!(f, "it names interpreter 0x{found:x} instead")
            }
        }
    }
}

/// Something wrong in the interpreter or thread lists, at `addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkProblem {
    /// The interpreter or thread state concerned.
    pub addr: u64,
    /// What is wrong.
    pub reason: WalkReason,
}

/// Every thread state found, and what cut the walk short.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadWalk {
    /// Addresses of the interpreters, newest first.
    pub interpreters: Vec<u64>,
    /// Thread states, per interpreter newest first.
    pub threads: Vec<ThreadState>,
    /// Problems met; the walk went on where it could.
    pub problems: Vec<WalkProblem>,
}

impl ThreadWalk {
    /// The thread state of OS thread `tid`, if one names it (the newest
    /// interpreter's, when several do: see [`ThreadWalk::all_for_tid`]).
    pub fn for_tid(&self, tid: u64) -> Option<&ThreadState> {
        self.threads.iter().find(|t| t.native_thread_id == tid)
    }

    /// Every thread state of OS thread `tid`: one per interpreter the thread
    /// has run code of (a thread that calls into a subinterpreter keeps its
    /// state in the calling interpreter too), newest interpreter first.
    pub fn all_for_tid(&self, tid: u64) -> impl Iterator<Item = &ThreadState> {
        self.threads
            .iter()
            .filter(move |t| t.native_thread_id == tid)
    }
}

/// Walks every interpreter and thread state from `_PyRuntime` at `runtime`.
///
/// Fails only when `_PyRuntime` itself cannot be read.
pub fn walk_threads(
    mem: &dyn Memory,
    layout: &Layout,
    runtime: u64,
) -> Result<ThreadWalk, PythonError> {
    let mut walk = ThreadWalk::default();
    let mut interp = mem.read_u64(runtime.wrapping_add(layout.runtime.interpreters_head))?;
    let mut seen_interps = HashSet::new();
    let mut seen_threads = HashSet::new();
    while interp != 0 {
        if !seen_interps.insert(interp) {
            walk.problems.push(WalkProblem {
                addr: interp,
                reason: WalkReason::Loop,
            });
            break;
        }
        if walk.interpreters.len() >= MAX_INTERPRETERS {
            walk.problems.push(WalkProblem {
                addr: interp,
                reason: WalkReason::TooMany(MAX_INTERPRETERS),
            });
            break;
        }
        walk.interpreters.push(interp);
        let id = layout
            .interp
            .id
            .and_then(|off| mem.read_u64(interp.wrapping_add(off)).ok())
            .map(|v| v as i64);
        match mem.read_u64(interp.wrapping_add(layout.interp.threads_head)) {
            Ok(head) => walk_one(
                mem,
                layout,
                (interp, id),
                head,
                &mut seen_threads,
                &mut walk,
            ),
            Err(_) => walk.problems.push(WalkProblem {
                addr: interp,
                reason: WalkReason::Unreadable("thread list"),
            }),
        }
        match mem.read_u64(interp.wrapping_add(layout.interp.next)) {
            Ok(next) => interp = next,
            Err(_) => {
                walk.problems.push(WalkProblem {
                    addr: interp,
                    reason: WalkReason::Unreadable("next interpreter"),
                });
                break;
            }
        }
    }
    Ok(walk)
}

/// Walks one interpreter's thread states from `head`.
fn walk_one(
    mem: &dyn Memory,
    layout: &Layout,
    (interp, interp_id): (u64, Option<i64>),
    head: u64,
    seen: &mut HashSet<u64>,
    walk: &mut ThreadWalk,
) {
    let t = &layout.thread;
    let mut ts = head;
    while ts != 0 {
        let problem = |reason| WalkProblem { addr: ts, reason };
        if !seen.insert(ts) {
            walk.problems.push(problem(WalkReason::Loop));
            return;
        }
        if walk.threads.len() >= MAX_THREADS {
            walk.problems
                .push(problem(WalkReason::TooMany(MAX_THREADS)));
            return;
        }
        let field = |off: u64| mem.read_u64(ts.wrapping_add(off));
        let (Ok(next), Ok(owner), Ok(tid)) =
            (field(t.next), field(t.interp), field(t.native_thread_id))
        else {
            walk.problems
                .push(problem(WalkReason::Unreadable("thread state")));
            return;
        };
        if owner != interp {
            walk.problems
                .push(problem(WalkReason::WrongInterpreter { found: owner }));
        }
        let current_frame = match current_frame(mem, t.current_frame, ts) {
            Ok(f) => f,
            Err(()) => {
                walk.problems
                    .push(problem(WalkReason::Unreadable("current frame")));
                None
            }
        };
        let base_frame = t
            .base_frame
            .and_then(|off| field(off).ok())
            .filter(|&b| b != 0);
        walk.threads.push(ThreadState {
            addr: ts,
            interp,
            interp_id,
            native_thread_id: tid,
            current_frame,
            base_frame,
        });
        ts = next;
    }
}

/// The innermost frame pointer of thread state `ts`, `None` for a null pointer.
fn current_frame(mem: &dyn Memory, how: CurrentFrame, ts: u64) -> Result<Option<u64>, ()> {
    let frame = match how {
        CurrentFrame::ViaCFrame {
            cframe,
            current_frame,
        } => {
            let cf = mem.read_u64(ts.wrapping_add(cframe)).map_err(|_| ())?;
            if cf == 0 {
                return Ok(None);
            }
            mem.read_u64(cf.wrapping_add(current_frame))
                .map_err(|_| ())?
        }
        CurrentFrame::Direct { current_frame } => mem
            .read_u64(ts.wrapping_add(current_frame))
            .map_err(|_| ())?,
    };
    Ok((frame != 0).then_some(frame))
}

#[cfg(test)]
mod tests {
    use super::super::layout::PY311;
    use super::super::testmem::FakeMem;
    use super::*;

    const RT: u64 = 0x1000;

    fn tstate(m: &mut FakeMem, at: u64, next: u64, interp: u64, tid: u64, frame: u64) {
        let t = &PY311.thread;
        m.put_u64(at + t.next, next);
        m.put_u64(at + t.interp, interp);
        m.put_u64(at + t.native_thread_id, tid);
        let cframe = at + 0x800;
        m.put_u64(at + 56, cframe);
        m.put_u64(cframe + 8, frame);
    }

    #[test]
    fn walks_two_interpreters() {
        let mut m = FakeMem::default();
        m.put_u64(RT + 40, 0x2000);
        m.put_u64(0x2000, 0x3000); // next interp
        m.put_u64(0x2000 + 16, 0x10000);
        m.put_u64(0x3000, 0);
        m.put_u64(0x3000 + 16, 0x20000);
        tstate(&mut m, 0x10000, 0x11000, 0x2000, 101, 0x5000);
        tstate(&mut m, 0x11000, 0, 0x2000, 102, 0);
        tstate(&mut m, 0x20000, 0, 0x3000, 201, 0x6000);
        let w = walk_threads(&m, &PY311, RT).unwrap();
        assert_eq!(w.interpreters, vec![0x2000, 0x3000]);
        let tids: Vec<_> = w.threads.iter().map(|t| t.native_thread_id).collect();
        assert_eq!(tids, vec![101, 102, 201]);
        assert_eq!(w.for_tid(101).unwrap().current_frame, Some(0x5000));
        assert_eq!(w.for_tid(102).unwrap().current_frame, None);
        assert!(w.problems.is_empty(), "{:?}", w.problems);
    }

    #[test]
    fn loops_and_holes_end_a_list() {
        let mut m = FakeMem::default();
        m.put_u64(RT + 40, 0x2000);
        m.put_u64(0x2000, 0x2000); // interpreter list loops
        m.put_u64(0x2000 + 16, 0x10000);
        tstate(&mut m, 0x10000, 0x11000, 0x2000, 1, 0);
        tstate(&mut m, 0x11000, 0x10000, 0x9999, 2, 0); // loops, wrong interp
        let w = walk_threads(&m, &PY311, RT).unwrap();
        assert_eq!(w.threads.len(), 2);
        assert!(w.problems.contains(&WalkProblem {
            addr: 0x10000,
            reason: WalkReason::Loop
        }));
        assert!(w.problems.contains(&WalkProblem {
            addr: 0x2000,
            reason: WalkReason::Loop
        }));
        assert!(w
            .problems
            .iter()
            .any(|p| matches!(p.reason, WalkReason::WrongInterpreter { found: 0x9999 })));

        let mut m = FakeMem::default();
        m.put_u64(RT + 40, 0x2000);
        m.put_u64(0x2000, 0);
        m.put_u64(0x2000 + 16, 0x77_0000); // unreadable thread state
        let w = walk_threads(&m, &PY311, RT).unwrap();
        assert!(w.threads.is_empty());
        assert_eq!(w.problems.len(), 1);
        assert!(walk_threads(&m, &PY311, 0xdead_0000).is_err());
    }
}
