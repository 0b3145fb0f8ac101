//! Pairing one thread's Python frames with the native evaluator frames that run them.
//!
//! Both stacks are given innermost first. Every C-level call of
//! `_PyEval_EvalFrameDefault` runs a run of Python frames: from where the
//! previous (inner) call's frames end, outward up to and including its own first
//! frame (3.11 inlines Python-to-Python calls, so one call runs several frames;
//! its first frame is marked `is_entry`).
//!
//! - An evaluator frame whose entry stash holds its `frame` argument is paired
//!   exactly: it runs the frames up to the one at that address ([`PairedBy::Stash`]).
//! - One without a stash (it started before the hook) is paired by order: it runs
//!   the frames up to the next entry frame ([`PairedBy::Order`]), as pystack does.
//! - From 3.12 each call of the evaluator links an entry frame that lives on its
//!   own C stack into the chain, so the run a call evaluates ends at the frame
//!   linked to an entry frame inside that native frame's stack range: exact, for
//!   every call, hooked or not, named or not ([`PairedBy::EntryFrame`]). Used
//!   whenever the chain carries entry-frame addresses (3.13+ here).
//!
//! Anything that does not fit is reported as a [`PairNote`], never guessed over:
//! a stashed frame that is not in the chain, an entry frame inside a stashed run
//! (an evaluator frame the native unwind missed), Python frames no evaluator frame
//! claims. A pure function over plain data, so every case has a unit test.

use std::fmt;

/// One native frame as the pairing sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeEval {
    /// The frame is in `_PyEval_EvalFrameDefault`.
    pub is_eval: bool,
    /// The `frame` argument its entry stash holds, if it was hooked when it started.
    pub stashed_frame: Option<u64>,
    /// The stack the frame occupies, `[sp, cfa)`, when the unwind knows it.
    pub stack: Option<(u64, u64)>,
}

/// One Python frame as the pairing sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PyLink {
    /// Address of the `_PyInterpreterFrame`.
    pub addr: u64,
    /// Its `is_entry` flag.
    pub is_entry: bool,
    /// Address of the C-stack entry frame linked right after it (3.12+): the
    /// frame is the first one of the evaluator call whose native frame holds that
    /// address.
    pub entry_frame: Option<u64>,
}

/// How a Python frame was matched to its evaluator frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairedBy {
    /// By the `frame` argument stashed at the evaluator's entry: exact.
    Stash,
    /// By counting entry frames: right when the native unwind found every evaluator frame.
    Order,
    /// By the address of the evaluator's entry frame, which lies on that
    /// evaluator call's own C stack (3.12+): exact, without a hook.
    EntryFrame,
}

impl fmt::Display for PairedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PairedBy::Stash => "stash",
            PairedBy::Order => "order",
            PairedBy::EntryFrame => "entry-frame",
        })
    }
}

/// Where a Python frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Index of the native evaluator frame that runs it.
    pub eval_frame: usize,
    /// How that was found.
    pub paired_by: PairedBy,
}

/// Something in the two stacks that does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairNote {
    /// The stashed `frame` of native frame `native` is not among the Python frames
    /// left (the call had not linked its frame yet, or the stacks disagree); it
    /// was given no Python frames.
    StashNotFound {
        /// The native frame.
        native: usize,
        /// Its stashed frame pointer.
        frame: u64,
    },
    /// The Python chain was cut short before the stashed `frame` of `native`; it
    /// was given every Python frame left.
    StashBeyondChain {
        /// The native frame.
        native: usize,
        /// Its stashed frame pointer.
        frame: u64,
    },
    /// The frame a stash points at is not marked as an entry frame.
    StashNotEntry {
        /// The native frame.
        native: usize,
        /// The Python frame.
        python: usize,
    },
    /// An entry frame inside the run a stash gave native frame `native`: an
    /// evaluator frame between them is missing from the native stack.
    EntryInside {
        /// The native frame.
        native: usize,
        /// The entry frame.
        python: usize,
    },
    /// Paired by order, but no entry frame ended the run: it took every frame left.
    NoEntry {
        /// The native frame.
        native: usize,
    },
    /// An evaluator frame found no Python frames left to run.
    EvalWithoutPython {
        /// The native frame.
        native: usize,
    },
    /// The entry frame after Python frame `python` lies in no native frame's
    /// stack (the native unwind stopped early, or lost the frame's extent).
    EntryFrameOffStack {
        /// The Python frame.
        python: usize,
        /// The entry frame's address.
        entry: u64,
    },
    /// Entry frames put an outer run of Python frames in a native frame inner to
    /// the previous run's: the stacks disagree; the run was left unplaced.
    EntryFrameOutOfOrder {
        /// The Python frame that ends the run.
        python: usize,
        /// The native frame its entry frame lies in.
        native: usize,
    },
    /// Python frames no evaluator frame claims (the native unwind stopped early).
    Leftover {
        /// Index of the first such Python frame.
        first: usize,
        /// How many.
        count: usize,
    },
}

impl fmt::Display for PairNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PairNote::StashNotFound { native, frame } => write!(
                f,
                "native frame #{native} stashed Python frame 0x{frame:x}, which is not in the thread's frame chain"
            ),
            PairNote::StashBeyondChain { native, frame } => write!(
                f,
                "native frame #{native} stashed Python frame 0x{frame:x}, beyond the frames read"
            ),
            PairNote::StashNotEntry { native, python } => write!(
                f,
                "Python frame {python}, stashed by native frame #{native}, is not marked as an entry frame"
            ),
            PairNote::EntryInside { native, python } => write!(
                f,
                "Python entry frame {python} lies inside the frames native frame #{native} runs: an evaluator frame is missing"
            ),
            PairNote::NoEntry { native } => write!(
                f,
                "native frame #{native} was paired by order but no entry frame ended its Python frames"
            ),
            PairNote::EvalWithoutPython { native } => {
                write!(f, "native frame #{native} evaluates Python but no Python frame is left for it")
            }
            PairNote::EntryFrameOffStack { python, entry } => write!(
                f,
                "the entry frame 0x{entry:x} after Python frame {python} lies in no native frame's stack"
            ),
            PairNote::EntryFrameOutOfOrder { python, native } => write!(
                f,
                "the entry frame after Python frame {python} lies in native frame #{native}, inside an inner run's: the stacks disagree"
            ),
            PairNote::Leftover { first, count } => write!(
                f,
                "{count} Python frame(s) from {first} outward are run by no native frame found"
            ),
        }
    }
}

/// The result of pairing one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pairing {
    /// Per Python frame (same order as given), its evaluator frame, if any.
    pub python: Vec<Option<Placement>>,
    /// What did not fit.
    pub notes: Vec<PairNote>,
}

/// One entry of the merged stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merged {
    /// Native frame by index.
    Native(usize),
    /// Python frame by index.
    Python(usize),
}

/// Pairs Python frames with evaluator frames; `chain_complete` says the Python
/// chain was read to its outermost frame (not cut by a limit or a corrupt frame).
pub fn pair(native: &[NativeEval], python: &[PyLink], chain_complete: bool) -> Pairing {
    if python.iter().any(|p| p.entry_frame.is_some()) {
        return pair_by_entry_frames(native, python);
    }
    let mut placed = vec![None; python.len()];
    let mut notes = Vec::new();
    let mut next = 0usize;
    for (n, frame) in native.iter().enumerate() {
        if !frame.is_eval {
            continue;
        }
        if next >= python.len() {
            if chain_complete {
                notes.push(PairNote::EvalWithoutPython { native: n });
            }
            continue;
        }
        let rest = &python[next..];
        let (last, by) = match frame.stashed_frame {
            Some(addr) => match rest.iter().position(|p| p.addr == addr) {
                Some(i) => {
                    if !rest[i].is_entry {
                        notes.push(PairNote::StashNotEntry {
                            native: n,
                            python: next + i,
                        });
                    }
                    if let Some(inner) = rest[..i].iter().position(|p| p.is_entry) {
                        notes.push(PairNote::EntryInside {
                            native: n,
                            python: next + inner,
                        });
                    }
                    (next + i, PairedBy::Stash)
                }
                None if chain_complete => {
                    notes.push(PairNote::StashNotFound {
                        native: n,
                        frame: addr,
                    });
                    continue;
                }
                None => {
                    notes.push(PairNote::StashBeyondChain {
                        native: n,
                        frame: addr,
                    });
                    (python.len() - 1, PairedBy::Stash)
                }
            },
            None => match rest.iter().position(|p| p.is_entry) {
                Some(i) => (next + i, PairedBy::Order),
                None => {
                    if chain_complete {
                        notes.push(PairNote::NoEntry { native: n });
                    }
                    (python.len() - 1, PairedBy::Order)
                }
            },
        };
        for slot in &mut placed[next..=last] {
            *slot = Some(Placement {
                eval_frame: n,
                paired_by: by,
            });
        }
        next = last + 1;
    }
    if next < python.len() {
        notes.push(PairNote::Leftover {
            first: next,
            count: python.len() - next,
        });
    }
    Pairing {
        python: placed,
        notes,
    }
}

/// Pairs by entry-frame addresses (3.12+): each run of Python frames, innermost
/// first, ends at a frame linked to an entry frame, and goes to the native frame
/// whose stack holds that entry frame. Runs left without one, or whose entry frame
/// no native frame holds, are noted and left unplaced.
fn pair_by_entry_frames(native: &[NativeEval], python: &[PyLink]) -> Pairing {
    let mut placed = vec![None; python.len()];
    let mut notes = Vec::new();
    let mut start = 0usize;
    let mut inner_native = 0usize;
    for (j, link) in python.iter().enumerate() {
        let Some(entry) = link.entry_frame else {
            continue;
        };
        let holder = native
            .iter()
            .position(|n| n.stack.is_some_and(|(lo, hi)| lo <= entry && entry < hi));
        match holder {
            Some(n) if n >= inner_native => {
                for slot in &mut placed[start..=j] {
                    *slot = Some(Placement {
                        eval_frame: n,
                        paired_by: PairedBy::EntryFrame,
                    });
                }
                inner_native = n;
            }
            Some(n) => notes.push(PairNote::EntryFrameOutOfOrder {
                python: j,
                native: n,
            }),
            None => notes.push(PairNote::EntryFrameOffStack { python: j, entry }),
        }
        start = j + 1;
    }
    if start < python.len() {
        notes.push(PairNote::Leftover {
            first: start,
            count: python.len() - start,
        });
    }
    Pairing {
        python: placed,
        notes,
    }
}

impl Pairing {
    /// The merged stack, innermost first: each evaluator frame's Python frames
    /// right before it; Python frames no evaluator frame claims at the end.
    pub fn interleave(&self, native_len: usize) -> Vec<Merged> {
        let mut out = Vec::with_capacity(native_len + self.python.len());
        for n in 0..native_len {
            out.extend(
                self.python
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.is_some_and(|p| p.eval_frame == n))
                    .map(|(i, _)| Merged::Python(i)),
            );
            out.push(Merged::Native(n));
        }
        out.extend(
            self.python
                .iter()
                .enumerate()
                .filter(|(_, p)| p.is_none_or(|p| p.eval_frame >= native_len))
                .map(|(i, _)| Merged::Python(i)),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: NativeEval = NativeEval {
        is_eval: false,
        stashed_frame: None,
        stack: None,
    };
    const EVAL: NativeEval = NativeEval {
        is_eval: true,
        stashed_frame: None,
        stack: None,
    };

    fn stashed(frame: u64) -> NativeEval {
        NativeEval {
            is_eval: true,
            stashed_frame: Some(frame),
            stack: None,
        }
    }

    /// Python frames at 0x100, 0x200, ...; `entries` lists the entry ones by index.
    fn py(n: usize, entries: &[usize]) -> Vec<PyLink> {
        (0..n)
            .map(|i| PyLink {
                addr: 0x100 * (i as u64 + 1),
                is_entry: entries.contains(&i),
                entry_frame: None,
            })
            .collect()
    }

    fn owners(p: &Pairing) -> Vec<Option<(usize, PairedBy)>> {
        p.python
            .iter()
            .map(|x| x.map(|x| (x.eval_frame, x.paired_by)))
            .collect()
    }

    /// An unnamed native frame occupying `[lo, hi)` of the stack.
    fn at(lo: u64, hi: u64) -> NativeEval {
        NativeEval {
            is_eval: false,
            stashed_frame: None,
            stack: Some((lo, hi)),
        }
    }

    /// Python frames at 0x100, 0x200, ...; `entries` gives (index, entry-frame address).
    fn py_entries(n: usize, entries: &[(usize, u64)]) -> Vec<PyLink> {
        (0..n)
            .map(|i| PyLink {
                addr: 0x100 * (i as u64 + 1),
                is_entry: false,
                entry_frame: entries.iter().find(|(j, _)| *j == i).map(|(_, a)| *a),
            })
            .collect()
    }

    #[test]
    fn entry_frames_pair_runs_with_the_native_frames_that_hold_them_without_names() {
        // Native, innermost first: libc, evaluator call 1, a C builtin, evaluator call 2.
        let native = [
            at(0x7000, 0x7800),
            at(0x7800, 0x8000),
            at(0x8000, 0x8800),
            at(0x8800, 0x9000),
        ];
        // Frames 0-1 run in call 1 (entry frame at 0x7f00), frame 2 in call 2.
        let python = py_entries(3, &[(1, 0x7f00), (2, 0x8f00)]);
        let p = pair(&native, &python, true);
        assert!(p.notes.is_empty(), "{:?}", p.notes);
        let e = PairedBy::EntryFrame;
        assert_eq!(owners(&p), [Some((1, e)), Some((1, e)), Some((3, e))]);
        assert_eq!(
            p.interleave(native.len()),
            [
                Merged::Native(0),
                Merged::Python(0),
                Merged::Python(1),
                Merged::Native(1),
                Merged::Native(2),
                Merged::Python(2),
                Merged::Native(3),
            ]
        );
        assert_eq!(e.to_string(), "entry-frame");
    }

    #[test]
    fn entry_frames_that_fit_no_native_frame_are_noted_not_guessed() {
        let native = [at(0x7000, 0x7800), at(0x8800, 0x9000)];
        // 0x8100 lies in no native frame (the unwind lost it); frame 3 ends no run.
        let python = py_entries(4, &[(0, 0x7100), (1, 0x8100), (2, 0x8f00)]);
        let p = pair(&native, &python, true);
        let e = PairedBy::EntryFrame;
        assert_eq!(owners(&p), [Some((0, e)), None, Some((1, e)), None]);
        assert_eq!(
            p.notes,
            [
                PairNote::EntryFrameOffStack {
                    python: 1,
                    entry: 0x8100
                },
                PairNote::Leftover { first: 3, count: 1 },
            ]
        );
        // An outer run whose entry frame lies in an inner native frame than the
        // previous run's: the stacks disagree, nothing is placed for it.
        let python = py_entries(2, &[(0, 0x8f00), (1, 0x7100)]);
        let p = pair(&native, &python, true);
        assert_eq!(owners(&p), [Some((1, e)), None]);
        assert_eq!(
            p.notes,
            [PairNote::EntryFrameOutOfOrder {
                python: 1,
                native: 0
            }]
        );
    }

    use PairedBy::{Order, Stash};

    #[test]
    fn python_calling_c_calling_python_by_stash() {
        // native: #0 C, #1 eval (runs py 0,1), #2 C (builtin), #3 eval (runs py 2..4), #4 main
        let native = [C, stashed(0x200), C, stashed(0x500), C];
        let p = pair(&native, &py(5, &[1, 4]), true);
        assert_eq!(
            owners(&p),
            vec![
                Some((1, Stash)),
                Some((1, Stash)),
                Some((3, Stash)),
                Some((3, Stash)),
                Some((3, Stash))
            ]
        );
        assert!(p.notes.is_empty(), "{:?}", p.notes);
        use Merged::{Native as N, Python as P};
        assert_eq!(
            p.interleave(native.len()),
            vec![N(0), P(0), P(1), N(1), N(2), P(2), P(3), P(4), N(3), N(4)]
        );
    }

    #[test]
    fn unstashed_frames_pair_by_order() {
        // Outer eval started before the hook; the inner one is stashed.
        let native = [stashed(0x100), C, EVAL];
        let p = pair(&native, &py(3, &[0, 2]), true);
        assert_eq!(
            owners(&p),
            vec![Some((0, Stash)), Some((2, Order)), Some((2, Order))]
        );
        assert!(p.notes.is_empty());
        // All by order.
        let p = pair(&[EVAL, C, EVAL], &py(3, &[0, 2]), true);
        assert_eq!(
            owners(&p),
            vec![Some((0, Order)), Some((2, Order)), Some((2, Order))]
        );
    }

    #[test]
    fn mismatches_are_reported() {
        // The stash names a frame not in the chain: that eval frame gets nothing and
        // the next one pairs by its own stash.
        let p = pair(&[stashed(0x999), stashed(0x200)], &py(2, &[1]), true);
        assert_eq!(owners(&p), vec![Some((1, Stash)), Some((1, Stash))]);
        assert_eq!(
            p.notes,
            vec![PairNote::StashNotFound {
                native: 0,
                frame: 0x999
            }]
        );
        // An entry frame inside a stashed run: an eval frame is missing natively.
        let p = pair(&[stashed(0x300)], &py(3, &[0, 2]), true);
        assert_eq!(
            p.notes,
            vec![PairNote::EntryInside {
                native: 0,
                python: 0
            }]
        );
        // The stashed frame is not an entry frame.
        let p = pair(&[stashed(0x100)], &py(1, &[]), true);
        assert_eq!(
            p.notes,
            vec![PairNote::StashNotEntry {
                native: 0,
                python: 0
            }]
        );
        // More evals than Python runs; frames nobody claims.
        let p = pair(&[EVAL, EVAL], &py(1, &[0]), true);
        assert_eq!(p.notes, vec![PairNote::EvalWithoutPython { native: 1 }]);
        let p = pair(&[EVAL, C], &py(3, &[0, 2]), true);
        assert_eq!(owners(&p), vec![Some((0, Order)), None, None]);
        assert_eq!(p.notes, vec![PairNote::Leftover { first: 1, count: 2 }]);
        use Merged::{Native as N, Python as P};
        assert_eq!(p.interleave(2), vec![P(0), N(0), N(1), P(1), P(2)]);
        // Order pairing with no entry frame left takes the rest, and says so.
        let p = pair(&[EVAL], &py(2, &[]), true);
        assert_eq!(owners(&p), vec![Some((0, Order)), Some((0, Order))]);
        assert_eq!(p.notes, vec![PairNote::NoEntry { native: 0 }]);
        // Nothing at all.
        let p = pair(&[], &[], true);
        assert!(p.python.is_empty() && p.notes.is_empty());
        assert!(pair(&[C, C], &[], true).notes.is_empty());
    }

    #[test]
    fn cut_chains() {
        // The chain was cut before the outer eval's stashed frame: it takes the rest.
        let p = pair(&[stashed(0x100), stashed(0x900)], &py(3, &[0]), false);
        assert_eq!(
            owners(&p),
            vec![Some((0, Stash)), Some((1, Stash)), Some((1, Stash))]
        );
        assert_eq!(
            p.notes,
            vec![PairNote::StashBeyondChain {
                native: 1,
                frame: 0x900
            }]
        );
        // Outer evals find no frames: expected when the chain is cut, no note.
        let p = pair(&[EVAL, EVAL, EVAL], &py(2, &[]), false);
        assert_eq!(owners(&p), vec![Some((0, Order)), Some((0, Order))]);
        assert!(p.notes.is_empty());
    }
}
