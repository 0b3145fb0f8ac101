//! `record -- CMD ARGS...`: the program argstash starts and records. Started
//! here as a plain child until `argstash run`'s spawner can take its place:
//! everything else only needs [`Program::pid`], [`Program::exited`] and
//! [`Program::stop`].

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use injector::Pid;

/// A program started for recording.
pub struct Program {
    child: Child,
    pid: Pid,
    status: Option<String>,
}

impl Program {
    /// Starts `argv` with argstash's stdin, stdout and stderr.
    pub fn spawn(argv: &[String]) -> Result<Program> {
        let (cmd, args) = argv
            .split_first()
            .context("give the program to run after --")?;
        let child = Command::new(cmd)
            .args(args)
            .spawn()
            .with_context(|| format!("cannot start {cmd}"))?;
        let pid = Pid::try_from(child.id()).context("the program's pid")?;
        Ok(Program {
            child,
            pid,
            status: None,
        })
    }

    /// Its pid.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// How it ended (`exited with code 0`, `killed by signal 9`), once it has.
    pub fn exited(&mut self) -> Option<&str> {
        if self.status.is_none() {
            match self.child.try_wait() {
                Ok(Some(st)) => self.status = Some(describe(st)),
                Ok(None) => {}
                // Reaped by a sample's release that saw it die: it ended, how is unknown.
                Err(_) => self.status = Some("ended".to_string()),
            }
        }
        self.status.as_deref()
    }

    /// Ends a program still running when the recording ends: SIGTERM, then
    /// SIGKILL after `grace`. Returns how it ended.
    pub fn stop(&mut self, grace: Duration) -> String {
        if self.exited().is_none() {
            // SAFETY: kill takes two integers; the pid is our own unreaped child.
            unsafe {
                libc::kill(self.pid.as_raw(), libc::SIGTERM);
            }
            let deadline = Instant::now() + grace;
            while self.exited().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if self.exited().is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait().map(|st| self.status = Some(describe(st)));
            }
        }
        self.exited().unwrap_or("ended").to_string()
    }
}

fn describe(st: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "ended".to_string(),
    }
}
