//! The `bt --json` object.

use reader::args::ArgValue;
use reader::procfs::x86_64_syscall_name;
use reader::python::StackFrame;
use reader::unwind::{Backtrace, Frame, FrameKind};
use serde_json::{json, Value};

use super::{rows, Row, View};

fn arg_json(a: &ArgValue) -> Value {
    json!({
        "name": a.name,
        "type": a.ty,
        "display": a.display,
        "source": a.source.map(|s| s.name()),
        "register": a.register,
        "value": a.value,
    })
}

/// One native frame in JSON, as the plain (non-Python) renderer gives it.
pub fn frame_json(index: usize, f: &Frame) -> Value {
    let slots = f.stash.as_ref().map(|s| s.slots()).unwrap_or_default();
    let args: Vec<Value> = slots
        .iter()
        .map(|slot| {
            let low = slot.value as u64;
            let mut a = json!({ "register": slot.name, "value": low });
            if slot.xmm {
                a["double"] = json!(f64::from_bits(low));
                a["raw"] = json!(format!("0x{:032x}", slot.value));
            }
            // A stashed register that holds a known parameter carries its name and type too.
            if let Some(p) = f.stashed_param(&slot.name) {
                a["name"] = json!(p.name);
                a["type"] = json!(p.ty);
                a["display"] = json!(p.display);
                a["source"] = json!("stash");
            }
            a
        })
        .collect();
    let mut v = json!({
        "index": index,
        "pc": format!("0x{:x}", f.pc),
        "function": f.function,
        "offset": f.offset,
        "module": f.module,
        "hooked": f.stash.is_some(),
        "variadic": f.stash.as_ref().is_some_and(|s| s.variadic),
        "args": args,
    });
    if f.kind != FrameKind::Normal {
        v["kind"] = json!(match f.kind {
            FrameKind::Trampoline => "trampoline",
            FrameKind::Relocated => "relocated",
            FrameKind::Normal => "normal",
        });
    }
    if let Some(s) = &f.stash {
        v["stash_frame"] = json!(format!("0x{:x}", s.frame));
        v["hook"] = json!(s.hook);
    }
    v["source_function"] = json!(f.source_function);
    v["file"] = json!(f.file);
    v["line"] = json!(f.line);
    v["params"] = json!(f.args.iter().map(arg_json).collect::<Vec<_>>());
    v["inlined"] = json!(f
        .inlined
        .iter()
        .map(|i| json!({
            "function": i.function,
            "file": i.file,
            "line": i.line,
            "params": i.args.iter().map(arg_json).collect::<Vec<_>>(),
        }))
        .collect::<Vec<_>>());
    v
}

/// One Python frame in JSON.
fn python_json(index: usize, f: &StackFrame, eval_frame: Option<usize>) -> Value {
    let p = &f.frame;
    let mut v = json!({
        "index": index,
        "kind": "python",
        "function": p.qualname,
        "file": p.file,
        "line": p.line,
        "params": p.params.iter().map(|a| json!({
            "name": a.name,
            "type": a.value.type_name,
            "display": a.value.display,
            "kind": reader::python::param_kind_name(a.kind),
        })).collect::<Vec<_>>(),
        "paired_by": f.placement.map(|pl| pl.paired_by.to_string()),
        "eval_frame": eval_frame,
        "frame": format!("0x{:x}", p.addr),
        "entry": p.is_entry,
    });
    // Only in a process with several interpreters (subinterpreters).
    if let Some(i) = f.interpreter {
        v["interpreter"] = json!({"id": i.id, "state": format!("0x{:x}", i.addr)});
    }
    v
}

/// One native frame in JSON: the plain renderer's object with `"kind": "native"`
/// (a trampoline or relocated prologue says so in `"code"`).
fn native_json(index: usize, f: &Frame) -> Value {
    let mut v = frame_json(index, f);
    if f.kind != FrameKind::Normal {
        v["code"] = v["kind"].clone();
    }
    v["kind"] = json!("native");
    v
}

/// The whole backtrace in JSON.
pub fn backtrace_json(bt: &Backtrace, view: View) -> Value {
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
            v["without_stop"] = json!(t.capture.without_stop());
            if let Some(nr) = t.capture.syscall() {
                v["syscall"] = json!(nr);
                if let Some(name) = x86_64_syscall_name(nr) {
                    v["syscall_name"] = json!(name);
                }
            }
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
