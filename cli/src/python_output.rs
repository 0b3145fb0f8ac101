//! Backtraces of Python processes: native and Python frames interleaved, as
//! text or JSON, or one side only (`bt --python`, `bt --native`).
//!
//! The native frames render exactly as in [`crate::output`]; each Python frame
//! goes right before (on the inner side of) the native evaluator frame that runs
//! it. In JSON every frame has `"kind"`: `"native"` or `"python"`, and `"index"`
//! is its position in the printed `frames` list; a Python frame's
//! `"eval_frame"` is the index of its evaluator frame there (`null` when no
//! native frame claims it, or with `--python`, which prints no native frame).

use injector::reader::python::pair::Merged;
use injector::reader::python::{PairedBy, PythonStack, StackFrame};
use injector::{Backtrace, Frame, FrameKind, ThreadBacktrace};
use serde_json::{json, Value};

use crate::output;

/// Which frames `bt` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Native and Python frames, interleaved.
    All,
    /// Python frames only (`--python`).
    Python,
    /// Native frames only (`--native`): the backtrace as without Python support.
    Native,
}

/// One printed frame of a thread.
enum Row<'a> {
    Native(&'a Frame),
    Python(&'a StackFrame),
}

/// The frames of `t` that `view` prints, innermost first, with the printed
/// index of each Python frame's evaluator frame.
fn rows(t: &ThreadBacktrace, view: View) -> Vec<(Row<'_>, Option<usize>)> {
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

/// Prints a backtrace as text or one JSON object, showing the frames `view` asks for.
pub fn print_backtrace(bt: &Backtrace, json: bool, view: View) {
    if json {
        println!("{}", backtrace_json(bt, view));
        return;
    }
    for (n, t) in bt.threads.iter().enumerate() {
        if n > 0 {
            println!();
        }
        for line in thread_lines(t, view) {
            println!("{line}");
        }
    }
}

/// `[py] outer (depth=0, name='zed') at /srv/app.py:27`, with how it was paired
/// when that is not exact.
fn python_text(f: &StackFrame) -> String {
    let how = match f.placement.map(|p| p.paired_by) {
        Some(PairedBy::Stash) => "",
        Some(PairedBy::Order) => " [paired by order]",
        None => " [no evaluator frame found]",
    };
    format!("[py] {}{how}", f.frame)
}

/// The text lines of one thread.
fn thread_lines(t: &ThreadBacktrace, view: View) -> Vec<String> {
    let mut lines = vec![format!(
        "Thread {} \"{}\" (stopped {} us):",
        t.tid,
        t.name,
        t.stopped.as_micros()
    )];
    let rows = rows(t, view);
    let mut index = 0;
    for (row, _) in &rows {
        match row {
            Row::Native(f) => {
                lines.extend(output::frame_lines(index, f));
                index += output::frame_line_count(f);
            }
            Row::Python(f) => {
                lines.push(format!("#{index:<2} {}", python_text(f)));
                index += 1;
            }
        }
    }
    if view == View::Python && rows.is_empty() {
        lines.push("   (no Python frames)".to_string());
    }
    if view != View::Python {
        if let Some(why) = &t.truncated {
            lines.push(format!("   (unwinding stopped: {why})"));
        }
    }
    if view != View::Native {
        for note in t.python.iter().flat_map(|p| &p.notes) {
            lines.push(format!("   (python: {note})"));
        }
    }
    lines
}

/// One Python frame in JSON.
fn python_json(index: usize, f: &StackFrame, eval_frame: Option<usize>) -> Value {
    let p = &f.frame;
    json!({
        "index": index,
        "kind": "python",
        "function": p.qualname,
        "file": p.file,
        "line": p.line,
        "params": p.params.iter().map(|a| json!({
            "name": a.name,
            "type": a.value.type_name,
            "display": a.value.display,
            "kind": injector::reader::python::stack::param_kind_name(a.kind),
        })).collect::<Vec<_>>(),
        "paired_by": f.placement.map(|pl| pl.paired_by.to_string()),
        "eval_frame": eval_frame,
        "frame": format!("0x{:x}", p.addr),
        "entry": p.is_entry,
    })
}

/// One native frame in JSON: the plain renderer's object with `"kind": "native"`
/// (a trampoline or relocated prologue says so in `"code"`).
fn native_json(index: usize, f: &Frame) -> Value {
    let mut v = output::frame_json(index, f);
    if f.kind != FrameKind::Normal {
        v["code"] = v["kind"].clone();
    }
    v["kind"] = json!("native");
    v
}

/// The whole backtrace in JSON.
fn backtrace_json(bt: &Backtrace, view: View) -> Value {
    let threads: Vec<Value> = bt
        .threads
        .iter()
        .map(|t| {
            let frames: Vec<Value> = rows(t, view)
                .iter()
                .enumerate()
                .map(|(i, (row, eval))| match row {
                    Row::Native(f) => native_json(i, f),
                    Row::Python(f) => python_json(i, f, *eval),
                })
                .collect();
            let mut v = json!({
                "tid": t.tid.as_raw(),
                "name": t.name,
                "stopped_us": t.stopped.as_micros() as u64,
                "frames": frames,
            });
            if let Some(why) = &t.truncated {
                v["truncated"] = json!(why.to_string());
            }
            if let Some(p) = &t.python {
                v["python_notes"] = json!(p.notes);
            }
            v
        })
        .collect();
    json!({ "pid": bt.pid.as_raw(), "threads": threads })
}

/// A thread's Python side back from its D-Bus form (`None` when it runs no Python).
pub fn from_wire(t: &argstash_dbus::Thread) -> Option<PythonStack> {
    use injector::reader::python::frames::FrameOwner;
    use injector::reader::python::pair::Placement;
    use injector::reader::python::stack::param_kind_from_name;
    use injector::reader::python::{PyFrame, PyParam, PyValue};
    if !t.has_python {
        return None;
    }
    let frames = t
        .python
        .iter()
        .map(|f| StackFrame {
            frame: PyFrame {
                addr: f.frame,
                code: 0,
                qualname: f.function.clone(),
                file: f.file.clone(),
                line: (f.line != 0).then_some(f.line),
                first_line: 0,
                is_entry: f.entry,
                owner: FrameOwner::Thread,
                incomplete: false,
                params: f
                    .params
                    .iter()
                    .map(|p| PyParam {
                        name: p.name.clone(),
                        kind: param_kind_from_name(&p.kind),
                        value: PyValue {
                            type_name: p.type_name.clone(),
                            display: p.display.clone(),
                        },
                    })
                    .collect(),
                params_note: None,
            },
            placement: usize::try_from(f.eval_frame).ok().and_then(|eval_frame| {
                let paired_by = match f.paired_by.as_str() {
                    "stash" => PairedBy::Stash,
                    "order" => PairedBy::Order,
                    _ => return None,
                };
                Some(Placement {
                    eval_frame,
                    paired_by,
                })
            }),
        })
        .collect();
    Some(PythonStack {
        frames,
        notes: t.python_notes.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use injector::reader::python::frames::{FrameOwner, ParamKind};
    use injector::reader::python::pair::Placement;
    use injector::reader::python::{PyFrame, PyParam, PyValue};

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
        }
    }

    fn thread() -> ThreadBacktrace {
        ThreadBacktrace {
            tid: injector::Tid::from_raw(7),
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
        }
    }

    #[test]
    fn python_frames_go_before_their_evaluator() {
        let t = thread();
        let lines = thread_lines(&t, View::All);
        assert_eq!(lines[2], "#1  [py] inner (depth=0) at /srv/app.py:27");
        assert!(lines[3].ends_with("[paired by order]"), "{lines:?}");
        assert!(lines[4].contains("_PyEval_EvalFrameDefault"), "{lines:?}");
        assert!(lines[6].contains("lost") && lines[6].contains("no evaluator"));
        assert_eq!(lines[7], "   (python: a note)");
        let bt = Backtrace {
            pid: injector::Pid::from_raw(7),
            threads: vec![t],
        };
        let v = backtrace_json(&bt, View::All);
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
        let only = backtrace_json(&bt, View::Python);
        let frames = only["threads"][0]["frames"].as_array().unwrap();
        assert_eq!(frames.len(), 3);
        assert!(frames.iter().all(|f| f["eval_frame"].is_null()));
        let native = backtrace_json(&bt, View::Native);
        let frames = native["threads"][0]["frames"].as_array().unwrap();
        assert_eq!(frames.len(), 3);
        assert!(frames.iter().all(|f| f["kind"] == "native"));
    }
}
