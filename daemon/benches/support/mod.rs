//! What the Python `bt` benchmarks share (`python_bt`, `python_bt_sid`): timing
//! summaries, finding the tools, running them, and checking that a tool's text
//! shows the expected frames in order.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// `argstash` next to this bench's profile directory.
pub fn cli() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent().unwrap().parent().unwrap().join("argstash");
    assert!(
        p.exists(),
        "{} missing: cargo build --release -p argstash",
        p.display()
    );
    p
}

/// A program on PATH, if there.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

pub fn run(cmd: &Path, args: &[&str]) -> Output {
    Command::new(cmd).args(args).output().expect("run")
}

/// Whether `line` holds `word` delimited by non-identifier characters.
pub fn has_word(line: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    line.match_indices(word).any(|(i, _)| {
        !line[..i].chars().next_back().is_some_and(ident)
            && !line[i + word.len()..].chars().next().is_some_and(ident)
    })
}

/// The lines of a tool's output that can name a frame: not the source lines
/// pystack prints under each Python frame (indented 8 spaces).
pub fn frame_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.starts_with("        "))
        .collect()
}

/// Whether `text` names `order` innermost first, each on a later line than the
/// previous (`outermost_first`: the tool prints the other way round, as pystack).
pub fn in_order(text: &str, order: &[&str], outermost_first: bool) -> Result<(), String> {
    let mut lines = frame_lines(text);
    if outermost_first {
        lines.reverse();
    }
    let mut at = 0;
    for w in order {
        match lines[at..].iter().position(|l| has_word(l, w)) {
            Some(i) => at += i + 1,
            None => return Err(format!("no {w:?} after line {at}")),
        }
    }
    Ok(())
}

/// A running Python fixture: stdin to release it, stdout to read its report.
/// It prints `ready PID` first; `PID` is checked against the child's own pid
/// (a `chroot` in front of the interpreter must exec it, not fork).
pub struct Py {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Py {
    /// Starts `command` with piped stdin and stdout and reads its `ready PID` line.
    pub fn spawn(mut command: Command) -> Py {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the Python fixture");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut py = Py {
            child,
            stdin,
            stdout,
        };
        let first = py.line();
        assert_eq!(
            first,
            format!("ready {}", py.pid()),
            "the fixture's first line"
        );
        py
    }

    /// The fixture's pid.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The next line it prints.
    pub fn line(&mut self) -> String {
        let mut l = String::new();
        self.stdout.read_line(&mut l).unwrap();
        l.trim_end().to_string()
    }

    /// Releases it and waits until it prints `until` and its main thread blocks in `read`.
    pub fn go(&mut self, until: &str) {
        self.stdin.write_all(b"go\n").unwrap();
        self.stdin.flush().unwrap();
        while self.line() != until {}
        let pid = self.pid();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/syscall"))
            .is_ok_and(|s| s.starts_with("0 "))
        {
            assert!(Instant::now() < deadline, "pid {pid} did not block");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Py {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
