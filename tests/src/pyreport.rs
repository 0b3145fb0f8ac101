//! The Python fixtures' own report of their stack (`tests/fixtures/python/*.py`):
//! a `frame\tQUALNAME\tFILE\tLINE` line per frame, innermost first, each
//! followed by its `param\tNAME\tDISPLAY` lines, then `end`. The oracle the
//! Python tests compare argstash's frames with.

use std::time::Duration;

use crate::command::wait_until;
use crate::process::Target;

/// One frame as the fixture reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedFrame {
    /// Qualified name.
    pub function: String,
    /// Source file.
    pub file: String,
    /// Current line.
    pub line: i64,
    /// `(name, display)` of each parameter, in order.
    pub params: Vec<(String, String)>,
}

/// Reads `t`'s report up to its `end` line, waiting up to `timeout` for each line.
pub fn read_python_report(t: &mut Target, timeout: Duration) -> Vec<ReportedFrame> {
    let mut frames: Vec<ReportedFrame> = Vec::new();
    loop {
        let line = t.expect_line(timeout);
        let f: Vec<&str> = line.split('\t').collect();
        match f.as_slice() {
            ["frame", q, file, l] => frames.push(ReportedFrame {
                function: q.to_string(),
                file: file.to_string(),
                line: l.parse().unwrap(),
                params: Vec::new(),
            }),
            ["param", n, d] => frames
                .last_mut()
                .unwrap()
                .params
                .push((n.to_string(), d.to_string())),
            ["end"] => return frames,
            _ => t.fail(&format!("unexpected report line {line:?}")),
        }
    }
}

/// Waits (up to 10 s) until thread `pid` of process `pid` blocks in `read`
/// (syscall 0): a fixture that reported its stack and waits for a line.
pub fn wait_main_thread_reading(pid: i32) {
    let blocked = wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/syscall"))
            .is_ok_and(|s| s.split(' ').next() == Some("0"))
    });
    assert!(blocked, "pid {pid} did not block reading stdin");
}
