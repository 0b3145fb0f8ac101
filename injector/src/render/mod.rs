//! Backtraces as people and programs read them: the text `argstash bt` prints
//! (gdb's layout, stashed arguments marked) and the `bt --json` object. The
//! command line, the daemon's clients and the Python bindings all render
//! through here, so they print the same thing.
//!
//! ```
//! use injector::render::{backtrace_json, backtrace_text, View};
//! use injector::{Backtrace, Frame, Pid, ThreadBacktrace, Tid};
//!
//! let bt = Backtrace {
//!     pid: Pid::from_raw(42),
//!     threads: vec![ThreadBacktrace {
//!         tid: Tid::from_raw(42),
//!         name: "demo".into(),
//!         frames: vec![Frame { pc: 0x401136, function: Some("main".into()), ..Default::default() }],
//!         truncated: None,
//!         stopped: std::time::Duration::ZERO,
//!         python: None,
//!         capture: injector::Capture::Stopped,
//!     }],
//! };
//! assert!(backtrace_text(&bt, View::All).starts_with("Thread 42 \"demo\""));
//! assert_eq!(backtrace_json(&bt, View::All)["threads"][0]["frames"][0]["function"], "main");
//! ```

mod json;
mod text;

use reader::python::Merged;
use reader::python::{PythonStack, StackFrame};
use reader::unwind::{Frame, ThreadBacktrace};

pub use json::{backtrace_json, frame_json};
pub use text::{
    backtrace_text, display_value, frame_line_count, frame_lines, frame_text, stashed_by,
    thread_lines,
};

/// Which frames `bt` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum View {
    /// Native and Python frames, interleaved.
    #[default]
    All,
    /// Python frames only (`--python`).
    Python,
    /// Native frames only (`--native`): the backtrace as without Python support.
    Native,
}

/// One printed frame of a thread.
pub(crate) enum Row<'a> {
    Native(&'a Frame),
    Python(&'a StackFrame),
}

/// The frames of `t` that `view` prints, innermost first, with the printed
/// index of each Python frame's evaluator frame.
pub(crate) fn rows(t: &ThreadBacktrace, view: View) -> Vec<(Row<'_>, Option<usize>)> {
    static EMPTY: PythonStack = PythonStack {
        frames: Vec::new(),
        notes: Vec::new(),
    };
    let python = match view {
        View::Native => &EMPTY,
        _ => t.python.as_ref().unwrap_or(&EMPTY),
    };
    let merged = python.interleave(t.frames.len());
    // Printed position of every native frame (in the merged list).
    let mut native_at = vec![None; t.frames.len()];
    let mut printed = 0usize;
    for m in &merged {
        let shown = match m {
            Merged::Native(_) => view != View::Python,
            Merged::Python(_) => true,
        };
        if let (Merged::Native(n), true) = (m, shown) {
            native_at[*n] = Some(printed);
        }
        printed += usize::from(shown);
    }
    merged
        .iter()
        .filter_map(|m| match *m {
            Merged::Native(n) => (view != View::Python).then(|| (Row::Native(&t.frames[n]), None)),
            Merged::Python(p) => {
                let f = &python.frames[p];
                let eval = f
                    .placement
                    .and_then(|pl| native_at.get(pl.eval_frame).copied().flatten());
                Some((Row::Python(f), eval))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use reader::python::Placement;
    use reader::python::{FrameOwner, ParamKind};
    use reader::python::{PairedBy, PythonStack};
    use reader::python::{PyFrame, PyParam, PyValue};
    use reader::unwind::Backtrace;
    use serde_json::Value;

    fn native(name: &str) -> Frame {
        Frame {
            pc: 0x1000,
            function: Some(name.to_string()),
            module: Some("/lib/libpython3.11.so".into()),
            ..Default::default()
        }
    }

    fn py(name: &str, eval: Option<usize>, by: PairedBy) -> StackFrame {
        StackFrame {
            frame: PyFrame {
                addr: 0x7000,
                code: 0,
                qualname: name.to_string(),
                file: "/srv/app.py".into(),
                line: Some(27),
                first_line: 20,
                is_entry: true,
                entry_frame: None,
                owner: FrameOwner::Thread,
                incomplete: false,
                params: vec![PyParam {
                    name: "depth".into(),
                    kind: ParamKind::Positional,
                    value: PyValue {
                        type_name: "int".into(),
                        display: "0".into(),
                    },
                }],
                params_note: None,
            },
            placement: eval.map(|eval_frame| Placement {
                eval_frame,
                paired_by: by,
            }),
            interpreter: None,
        }
    }

    fn thread() -> ThreadBacktrace {
        ThreadBacktrace {
            tid: reader::ids::Tid::from_raw(7),
            name: "python3".into(),
            frames: vec![
                native("read"),
                native("_PyEval_EvalFrameDefault"),
                native("main"),
            ],
            truncated: None,
            stopped: std::time::Duration::ZERO,
            python: Some(PythonStack {
                frames: vec![
                    py("inner", Some(1), PairedBy::Stash),
                    py("outer", Some(1), PairedBy::Order),
                    py("lost", None, PairedBy::Order),
                ],
                notes: vec!["a note".into()],
            }),
            capture: reader::unwind::Capture::Stopped,
        }
    }

    #[test]
    fn a_thread_read_without_a_stop_says_so() {
        let mut t = thread();
        t.capture = reader::unwind::Capture::WithoutStop { syscall: 1 };
        let lines = text::thread_lines(&t, View::Native);
        assert_eq!(
            lines[0],
            "Thread 7 \"python3\" (read without a stop, blocked in write):"
        );
        let bt = reader::unwind::Backtrace {
            pid: reader::ids::Pid::from_raw(7),
            threads: vec![t.clone()],
        };
        let v = json::backtrace_json(&bt, View::Native);
        assert_eq!(v["threads"][0]["without_stop"], true);
        assert_eq!(v["threads"][0]["syscall"], 1);
        assert_eq!(v["threads"][0]["syscall_name"], "write");
        t.capture = reader::unwind::Capture::WithoutStop { syscall: 999 };
        assert!(text::thread_lines(&t, View::Native)[0].ends_with("blocked in system call 999):"));
        t.capture = reader::unwind::Capture::Stopped;
        let bt = reader::unwind::Backtrace {
            pid: reader::ids::Pid::from_raw(7),
            threads: vec![t],
        };
        let v = json::backtrace_json(&bt, View::Native);
        assert_eq!(v["threads"][0]["without_stop"], false);
        assert!(v["threads"][0].get("syscall").is_none());
    }

    #[test]
    fn python_frames_go_before_their_evaluator() {
        let t = thread();
        let lines = text::thread_lines(&t, View::All);
        assert_eq!(lines[2], "#1  [py] inner (depth=0) at /srv/app.py:27");
        assert!(lines[3].ends_with("[paired by order]"), "{lines:?}");
        assert!(lines[4].contains("_PyEval_EvalFrameDefault"), "{lines:?}");
        assert!(lines[6].contains("lost") && lines[6].contains("no evaluator"));
        assert_eq!(lines[7], "   (python: a note)");
        let bt = Backtrace {
            pid: reader::ids::Pid::from_raw(7),
            threads: vec![t],
        };
        let v = json::backtrace_json(&bt, View::All);
        let frames = v["threads"][0]["frames"].as_array().unwrap();
        let kinds: Vec<&str> = frames.iter().map(|f| f["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            ["native", "python", "python", "native", "native", "python"]
        );
        assert_eq!(frames[1]["eval_frame"], 3);
        assert_eq!(frames[1]["paired_by"], "stash");
        assert_eq!(frames[2]["paired_by"], "order");
        assert_eq!(frames[5]["eval_frame"], Value::Null);
        assert_eq!(frames[1]["params"][0]["display"], "0");
        assert_eq!(frames[1]["params"][0]["type"], "int");
        // One side only.
        let only = json::backtrace_json(&bt, View::Python);
        let frames = only["threads"][0]["frames"].as_array().unwrap();
        assert_eq!(frames.len(), 3);
        assert!(frames.iter().all(|f| f["eval_frame"].is_null()));
        let native = json::backtrace_json(&bt, View::Native);
        let frames = native["threads"][0]["frames"].as_array().unwrap();
        assert_eq!(frames.len(), 3);
        assert!(frames.iter().all(|f| f["kind"] == "native"));
    }

    #[test]
    fn values_read_naturally() {
        assert_eq!(display_value(28), "28");
        assert_eq!(display_value(u64::MAX), "-1");
        assert_eq!(display_value(0x7ffd_1234_5678), "0x7ffd12345678");
    }
}
