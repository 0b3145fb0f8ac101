//! One thread's Python frames placed among its native frames: the Python part
//! of a backtrace.
//!
//! Reading comes in two steps so that a live reader can do the first while the
//! thread is stopped, as it copies the thread's stack, and the second after it
//! unwound that copy:
//!
//! 1. [`StackReader::read`]: the thread state whose `native_thread_id` is the
//!    thread's tid, and its frame chain ([`ThreadRead`]).
//! 2. [`ThreadRead::assemble`]: pair the chain with the native frames (as
//!    [`NativeEval`]s, innermost first) and keep the frames a display shows
//!    ([`PythonStack`]).
//!
//! Nothing here fails: an unreadable interpreter, thread list or frame becomes a
//! note, and the native backtrace stands on its own.

use std::fmt;

use crate::memory::Memory;
use crate::symbols::ProcessSymbols;

use super::frames::{ChainEnd, FrameChain, FrameReader, ParamKind, PyFrame};
use super::pair::{Merged, NativeEval, Pairing, Placement};
use super::threads::ThreadState;
use super::{Interpreter, PythonError};

/// The most Python frames read per thread.
pub const STACK_LIMIT: usize = 1024;

/// A process's interpreter as a backtrace sees it.
#[derive(Debug, Clone)]
pub enum ProcessPython {
    /// No module has CPython's evaluator: the process shows native frames only.
    NotPython,
    /// A CPython that cannot be read (no layout for its version, a missing
    /// symbol...): the reason, noted on threads that evaluate Python.
    Unreadable(String),
    /// A CPython with a known layout.
    Found(Interpreter),
}

impl ProcessPython {
    /// Finds the interpreter of a process (never fails: see the variants).
    pub fn attach(symbols: &ProcessSymbols, mem: &dyn Memory) -> ProcessPython {
        match Interpreter::attach(symbols, mem) {
            Ok(i) => ProcessPython::Found(i),
            Err(PythonError::NotPython { .. }) => ProcessPython::NotPython,
            Err(e) => ProcessPython::Unreadable(e.to_string()),
        }
    }

    /// The interpreter, when one was found and can be read.
    pub fn interpreter(&self) -> Option<&Interpreter> {
        match self {
            ProcessPython::Found(i) => Some(i),
            _ => None,
        }
    }

    /// A reader of the threads' Python frames in `mem`, for one backtrace.
    pub fn reader<'a>(&'a self, mem: &'a dyn Memory) -> StackReader<'a> {
        StackReader {
            python: self,
            frames: self.interpreter().map(|i| i.frame_reader(mem)),
            mem,
        }
    }
}

/// How many times a thread list is read, at most, before what the last read
/// found is taken as it is.
const WALK_ATTEMPTS: usize = 6;

/// How many whole, consecutive reads of a thread list must agree that a thread
/// has no thread state before it counts as a thread that runs no Python.
const CLEAN_MISSES: usize = 2;

/// Reads the Python frames of threads, one at a time (code objects are decoded
/// once per reader).
pub struct StackReader<'a> {
    python: &'a ProcessPython,
    frames: Option<FrameReader<'a>>,
    mem: &'a dyn Memory,
}

impl StackReader<'_> {
    /// Reads thread `tid`'s frame chain; a live caller calls it while the thread
    /// is stopped, so the chain and the native stack agree.
    pub fn read(&mut self, tid: i32) -> ThreadRead {
        let (interp, frames) = match (self.python, self.frames.as_mut()) {
            (ProcessPython::NotPython, _) => return ThreadRead::default(),
            (ProcessPython::Unreadable(why), _) => {
                return ThreadRead {
                    chain: None,
                    notes: vec![why.clone()],
                    on_every_thread: true,
                    interpreters: Vec::new(),
                }
            }
            (ProcessPython::Found(i), Some(f)) => (i, f),
            (ProcessPython::Found(_), None) => return ThreadRead::default(),
        };
        // A live process changes its thread list while it is read: a thread
        // state torn down under the walk cuts the list short, with a problem
        // (its freed memory names no interpreter, or links to nowhere) or without
        // one (the allocator hands the freed state out again, its `next` field
        // zeroed while the rest still reads as a thread state: the list then
        // ends there, cleanly). So a walk that did not reach `tid` is read again,
        // from the target's memory as it is now (a cache would give the torn list
        // again), until `tid` is found or whole walks agree that it is not there.
        let mut attempts = 0;
        let mut clean_misses = 0;
        let walk = loop {
            if attempts > 0 {
                self.mem.forget_cached();
            }
            attempts += 1;
            let walk = match interp.threads(self.mem) {
                Ok(w) => w,
                Err(e) => {
                    return ThreadRead {
                        chain: None,
                        notes: vec![format!("cannot read CPython's thread states: {e}")],
                        on_every_thread: false,
                        interpreters: Vec::new(),
                    }
                }
            };
            let found = u64::try_from(tid)
                .ok()
                .is_some_and(|t| walk.for_tid(t).is_some());
            if walk.problems.is_empty() {
                clean_misses += 1;
            }
            if found || clean_misses >= CLEAN_MISSES || attempts >= WALK_ATTEMPTS {
                break walk;
            }
        };
        let states: Vec<&ThreadState> = u64::try_from(tid)
            .ok()
            .map(|t| walk.all_for_tid(t).collect())
            .unwrap_or_default();
        if states.is_empty() {
            // Not a Python thread, unless the list was cut before its state: then
            // whether it runs Python is unknown, and the note says so on any thread
            // (a stripped 3.13+ evaluator has no named native frame to show it by).
            let notes: Vec<String> = walk
                .problems
                .iter()
                .map(|p| {
                    format!(
                        "CPython's thread list is incomplete (at 0x{:x}: {})",
                        p.addr, p.reason
                    )
                })
                .collect();
            return ThreadRead {
                chain: None,
                on_every_thread: !notes.is_empty(),
                notes,
                interpreters: Vec::new(),
            };
        }
        let mut notes: Vec<String> = walk
            .problems
            .iter()
            .filter(|p| states.iter().any(|ts| ts.addr == p.addr))
            .map(|p| format!("thread state 0x{:x}: {}", p.addr, p.reason))
            .collect();
        // One chain per interpreter the thread is in (subinterpreters), inner first.
        let several = walk.interpreters.len() > 1;
        let mut chains: Vec<(FrameChain, InterpreterLabel)> = states
            .iter()
            .filter_map(|ts| {
                let frame = ts.current_frame?;
                let label = InterpreterLabel {
                    addr: ts.interp,
                    id: ts.interp_id,
                };
                Some((frames.chain_to(frame, ts.base_frame, STACK_LIMIT), label))
            })
            .collect();
        chains.sort_by_key(|(c, _)| innermost_entry(c));
        let Some((mut chain, label)) = (!chains.is_empty()).then(|| chains.remove(0)) else {
            return ThreadRead {
                chain: None,
                notes,
                on_every_thread: false,
                interpreters: Vec::new(),
            };
        };
        let mut interpreters = vec![label; chain.frames.len()];
        let mut inner = label;
        for (outer, label) in chains {
            if chain.end != ChainEnd::Root {
                notes.push(format!(
                    "the Python frames of {inner} end early: {}",
                    chain.end
                ));
            }
            interpreters.extend(std::iter::repeat_n(label, outer.frames.len()));
            chain.frames.extend(outer.frames);
            chain.end = outer.end;
            inner = label;
        }
        ThreadRead {
            chain: Some(chain),
            notes,
            on_every_thread: false,
            interpreters: if several { interpreters } else { Vec::new() },
        }
    }
}

/// Where a chain sits on the C stack: the address of its innermost entry frame
/// (3.12+: an evaluator call's entry frame is a local of its native frame, so a
/// lower address is a deeper call); `u64::MAX` without one (the walk's order
/// stands: the newest interpreter first).
fn innermost_entry(chain: &FrameChain) -> u64 {
    chain
        .frames
        .iter()
        .find_map(|f| f.entry_frame)
        .unwrap_or(u64::MAX)
}

/// The interpreter a Python frame runs in, shown when a process has several
/// (subinterpreters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterpreterLabel {
    /// Address of its `PyInterpreterState`.
    pub addr: u64,
    /// Its id (0: the main interpreter), when read.
    pub id: Option<i64>,
}

impl fmt::Display for InterpreterLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.id {
            Some(id) => write!(f, "interpreter {id}"),
            None => write!(f, "interpreter 0x{:x}", self.addr),
        }
    }
}

/// One thread's Python frames as read, before pairing.
#[derive(Debug, Clone, Default)]
pub struct ThreadRead {
    /// The chain from the thread's innermost frame, `None` when it runs no Python.
    pub chain: Option<FrameChain>,
    /// What went wrong finding it.
    pub notes: Vec<String>,
    /// The notes concern this thread whatever its native frames, so they are
    /// shown even where no native frame is a named evaluator (3.13+ builds keep
    /// its body in unnamed code): the process is a CPython whose state cannot be
    /// read at all (a version without a layout, damaged debug offsets), or its
    /// thread list was cut short before this thread's state was found.
    pub on_every_thread: bool,
    /// The interpreter of each frame of `chain`, when the process has more
    /// than one (else empty).
    pub interpreters: Vec<InterpreterLabel>,
}

impl ThreadRead {
    /// Pairs the chain with the thread's native frames (innermost first); `None`
    /// when the thread shows no Python at all (no frames, nothing to say, or
    /// nothing to say about a thread that evaluates no Python).
    pub fn assemble(self, native: &[NativeEval]) -> Option<PythonStack> {
        let evaluates = native.iter().any(|n| n.is_eval);
        let Some(chain) = self.chain else {
            return ((evaluates || self.on_every_thread) && !self.notes.is_empty()).then(|| {
                PythonStack {
                    frames: Vec::new(),
                    notes: self.notes,
                }
            });
        };
        let pairing = chain.pair_with(native);
        let mut notes = self.notes;
        notes.extend(pairing.notes.iter().map(ToString::to_string));
        match chain.end {
            ChainEnd::Root => {}
            end => notes.push(format!("Python frames end early: {end}")),
        }
        let mut labels = self.interpreters.into_iter();
        let frames = chain
            .frames
            .into_iter()
            .zip(pairing.python)
            .map(|(frame, placement)| (frame, placement, labels.next()))
            .filter(|(f, ..)| !f.incomplete)
            .map(|(frame, placement, interpreter)| StackFrame {
                frame,
                placement,
                interpreter,
            })
            .collect();
        Some(PythonStack { frames, notes })
    }
}

/// One Python frame of a backtrace, with the native frame that runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackFrame {
    /// The frame.
    pub frame: PyFrame,
    /// Its native evaluator frame (index among the thread's native frames) and
    /// how it was paired; `None` when no native frame claims it.
    pub placement: Option<Placement>,
    /// Its interpreter, when the process has several (subinterpreters).
    pub interpreter: Option<InterpreterLabel>,
}

/// A thread's Python frames, innermost first, as a backtrace shows them
/// (frames CPython hides are left out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PythonStack {
    /// The frames.
    pub frames: Vec<StackFrame>,
    /// What did not fit or could not be read.
    pub notes: Vec<String>,
}

impl PythonStack {
    /// The merged stack over `native_len` native frames, innermost first: each
    /// evaluator frame's Python frames right before it; unclaimed ones at the end.
    pub fn interleave(&self, native_len: usize) -> Vec<Merged> {
        Pairing {
            python: self.frames.iter().map(|f| f.placement).collect(),
            notes: Vec::new(),
        }
        .interleave(native_len)
    }
}

/// The name a parameter kind has in wire forms (`positional`, `*`, ...).
pub fn param_kind_name(kind: ParamKind) -> &'static str {
    match kind {
        ParamKind::PositionalOnly => "positional-only",
        ParamKind::Positional => "positional",
        ParamKind::KeywordOnly => "keyword-only",
        ParamKind::VarArgs => "varargs",
        ParamKind::VarKeywords => "varkeywords",
    }
}

/// The parameter kind named by [`param_kind_name`] (`Positional` for anything else).
pub fn param_kind_from_name(name: &str) -> ParamKind {
    match name {
        "positional-only" => ParamKind::PositionalOnly,
        "keyword-only" => ParamKind::KeywordOnly,
        "varargs" => ParamKind::VarArgs,
        "varkeywords" => ParamKind::VarKeywords,
        _ => ParamKind::Positional,
    }
}

impl fmt::Display for PythonStack {
    /// One frame per line, innermost first (tests and logs).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in &self.frames {
            writeln!(f, "{}", s.frame)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::frames::FrameOwner;
    use super::super::pair::PairedBy;
    use super::*;

    fn frame(addr: u64, is_entry: bool, incomplete: bool) -> PyFrame {
        PyFrame {
            addr,
            code: 0,
            qualname: format!("f{addr:x}"),
            file: "/x.py".into(),
            line: Some(1),
            first_line: 1,
            is_entry,
            entry_frame: None,
            owner: FrameOwner::Thread,
            incomplete,
            params: Vec::new(),
            params_note: None,
        }
    }

    const C: NativeEval = NativeEval {
        is_eval: false,
        stashed_frame: None,
        stack: None,
    };

    #[test]
    fn assembles_pairs_and_hides_incomplete_frames() {
        let read = ThreadRead {
            chain: Some(FrameChain {
                frames: vec![
                    frame(0x100, false, true),
                    frame(0x200, true, false),
                    frame(0x300, true, false),
                ],
                end: ChainEnd::Root,
            }),
            notes: Vec::new(),
            on_every_thread: false,
            interpreters: Vec::new(),
        };
        let stashed = NativeEval {
            is_eval: true,
            stashed_frame: Some(0x200),
            stack: None,
        };
        let eval = NativeEval {
            is_eval: true,
            stashed_frame: None,
            stack: None,
        };
        let stack = read.assemble(&[C, stashed, C, eval]).unwrap();
        assert!(stack.notes.is_empty(), "{:?}", stack.notes);
        let got: Vec<_> = stack
            .frames
            .iter()
            .map(|f| {
                (
                    f.frame.addr,
                    f.placement.map(|p| (p.eval_frame, p.paired_by)),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (0x200, Some((1, PairedBy::Stash))),
                (0x300, Some((3, PairedBy::Order)))
            ]
        );
        use Merged::{Native as N, Python as P};
        assert_eq!(
            stack.interleave(4),
            vec![N(0), P(0), N(1), N(2), P(1), N(3)]
        );
    }

    #[test]
    fn problems_become_notes_not_errors() {
        let eval = NativeEval {
            is_eval: true,
            stashed_frame: None,
            stack: None,
        };
        // A corrupt chain: frames before it, then a note.
        let read = ThreadRead {
            chain: Some(FrameChain {
                frames: vec![frame(0x100, true, false)],
                end: ChainEnd::Loop { addr: 0x100 },
            }),
            notes: Vec::new(),
            on_every_thread: false,
            interpreters: Vec::new(),
        };
        let stack = read.assemble(&[eval]).unwrap();
        assert_eq!(stack.frames.len(), 1);
        assert!(stack.notes[0].contains("loops"), "{:?}", stack.notes);
        // No chain: a note only where Python is evaluated...
        let mut unreadable = ThreadRead {
            chain: None,
            notes: vec!["cannot read CPython's thread states".into()],
            on_every_thread: false,
            interpreters: Vec::new(),
        };
        assert!(unreadable.clone().assemble(&[C]).is_none());
        assert_eq!(unreadable.clone().assemble(&[eval]).unwrap().notes.len(), 1);
        // ...unless the whole interpreter cannot be read: then on every thread.
        unreadable.on_every_thread = true;
        assert_eq!(unreadable.assemble(&[C]).unwrap().notes.len(), 1);
        assert!(ThreadRead::default().assemble(&[eval]).is_none());
    }

    #[test]
    fn kinds_roundtrip_by_name() {
        for k in [
            ParamKind::PositionalOnly,
            ParamKind::Positional,
            ParamKind::KeywordOnly,
            ParamKind::VarArgs,
            ParamKind::VarKeywords,
        ] {
            assert_eq!(param_kind_from_name(param_kind_name(k)), k);
        }
    }
}
