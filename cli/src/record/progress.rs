//! The progress line on a terminal (samples taken, lost, elapsed); nothing when
//! stderr is not a terminal.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Redraws one status line on stderr at most four times a second.
pub struct Progress {
    on: bool,
    last: Option<Instant>,
}

impl Progress {
    /// A progress line, shown only when stderr is a terminal.
    pub fn new() -> Progress {
        Progress {
            on: std::io::stderr().is_terminal(),
            last: None,
        }
    }

    /// Redraws the line if a quarter second passed since the last time.
    pub fn update(&mut self, samples: u64, lost: u64, threads: usize, elapsed: Duration) {
        if !self.on
            || self
                .last
                .is_some_and(|t| t.elapsed() < Duration::from_millis(250))
        {
            return;
        }
        self.last = Some(Instant::now());
        let mut e = std::io::stderr().lock();
        let _ = write!(
            e,
            "\r\x1b[Kargstash record: {samples} samples, {lost} lost, {threads} threads, {:.1} s (Ctrl-C to stop)",
            elapsed.as_secs_f64()
        );
        let _ = e.flush();
    }

    /// Clears the line.
    pub fn finish(&mut self) {
        if self.on && self.last.is_some() {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[K");
            let _ = e.flush();
        }
    }
}
