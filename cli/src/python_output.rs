//! Backtraces as `bt` prints them: rendered by [`injector::render`] (native and
//! Python frames interleaved, or one side only with `--python` / `--native`), and
//! the Python side of a D-Bus backtrace turned back into library types.

use injector::reader::python::{PairedBy, PythonStack, StackFrame};
pub use injector::render::View;
use injector::Backtrace;

/// Prints a backtrace as text or one JSON object, showing the frames `view` asks for.
pub fn print_backtrace(bt: &Backtrace, json: bool, view: View) {
    if json {
        println!("{}", injector::render::backtrace_json(bt, view));
    } else {
        print!("{}", injector::render::backtrace_text(bt, view));
    }
}

/// A thread's Python side back from its D-Bus form (`None` when it runs no Python).
pub fn from_wire(t: &argstash_dbus::Thread) -> Option<PythonStack> {
    use injector::reader::python::frames::FrameOwner;
    use injector::reader::python::pair::Placement;
    use injector::reader::python::stack::{param_kind_from_name, InterpreterLabel};
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
                entry_frame: None,
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
                    "entry-frame" => PairedBy::EntryFrame,
                    _ => return None,
                };
                Some(Placement {
                    eval_frame,
                    paired_by,
                })
            }),
            interpreter: (f.interpreter != 0).then_some(InterpreterLabel {
                addr: f.interpreter,
                id: (f.interpreter_id >= 0).then_some(f.interpreter_id),
            }),
        })
        .collect();
    Some(PythonStack {
        frames,
        notes: t.python_notes.clone(),
    })
}
