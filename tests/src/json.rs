//! Accessors of the JSON that `argstash bt --json` and `list --json` print:
//! threads, frames, stashed arguments, hooks, hex addresses.

/// A `"0x1234"` JSON string (how argstash's JSON prints addresses) as a number.
#[track_caller]
pub fn json_hex(v: &serde_json::Value) -> u64 {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("expected a hex string, got {v}"));
    let hex = s
        .strip_prefix("0x")
        .unwrap_or_else(|| panic!("expected 0x..., got {s:?}"));
    u64::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("bad hex {s:?}: {e}"))
}

/// The thread objects of a `bt --json` value.
#[track_caller]
pub fn bt_threads(bt: &serde_json::Value) -> &Vec<serde_json::Value> {
    bt["threads"]
        .as_array()
        .unwrap_or_else(|| panic!("bt JSON without a threads array: {bt}"))
}

/// The thread `tid` of a `bt --json` value, if it is there.
pub fn bt_thread(bt: &serde_json::Value, tid: i32) -> Option<&serde_json::Value> {
    bt["threads"]
        .as_array()?
        .iter()
        .find(|t| t["tid"].as_i64() == Some(i64::from(tid)))
}

/// The frames of one thread object of `bt --json`.
#[track_caller]
pub fn thread_frames(thread: &serde_json::Value) -> &Vec<serde_json::Value> {
    thread["frames"]
        .as_array()
        .unwrap_or_else(|| panic!("thread without a frames array: {thread}"))
}

/// Index (in the frames array) and frame of the first frame of `thread` in function `name`.
pub fn frame_named<'a>(
    thread: &'a serde_json::Value,
    name: &str,
) -> Option<(usize, &'a serde_json::Value)> {
    thread["frames"]
        .as_array()?
        .iter()
        .enumerate()
        .find(|(_, f)| f["function"].as_str() == Some(name))
}

/// The raw part of one `args` entry of `bt --json` (`register` and `value`), without
/// the parameter name, type and display that debug info adds.
pub fn raw_arg(arg: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "register": arg["register"], "value": arg["value"] })
}

/// The value stashed for `register` (`rdi`, ...) in a hooked frame, if any.
pub fn frame_arg(frame: &serde_json::Value, register: &str) -> Option<u64> {
    frame["args"]
        .as_array()?
        .iter()
        .find(|a| a["register"].as_str() == Some(register))?["value"]
        .as_u64()
}

/// The hooks of a `list --json` array for function `name` in state `state` (`active`, `ejected`).
pub fn hooks_named<'a>(
    hooks: &'a [serde_json::Value],
    name: &str,
    state: &str,
) -> Vec<&'a serde_json::Value> {
    hooks
        .iter()
        .filter(|h| h["function"].as_str() == Some(name) && h["state"].as_str() == Some(state))
        .collect()
}
