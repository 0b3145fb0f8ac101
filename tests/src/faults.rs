//! Fault and soak helpers: reproducible random seeds, when to strike during
//! an `argstash` run, and how a run met a target killed under it.

use std::path::Path;
use std::process::Output;
use std::thread;
use std::time::{Duration, Instant};

use crate::cli::remove_argstash_tmp_files;
use crate::command::{wait_until, Background};
use crate::process::Target;
use crate::procfs::{
    blocked_syscall, proc_state, proc_status_field, thread_ids, thread_state, traced_threads,
};

/// A small deterministic PRNG (64-bit LCG, high bits out) for random kill points.
///
/// Tests print the seed so that a failing run can be repeated with
/// [`seed_from_env`]'s variable.
#[derive(Clone, Debug)]
pub struct Lcg(u64);

impl Lcg {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Lcg {
        Lcg(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    /// The next 64 bits (Knuth's MMIX constants; the high half is mixed down).
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let x = self.0;
        (x >> 32) ^ (x << 32) ^ (x >> 17)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        (self.next_u64() >> 11) % n
    }

    /// A duration in `0..=max`, at microsecond resolution.
    pub fn duration_upto(&mut self, max: Duration) -> Duration {
        Duration::from_micros(self.below(max.as_micros() as u64 + 1))
    }
}

/// The seed in environment variable `var` (decimal), else one taken from the clock.
pub fn seed_from_env(var: &str) -> u64 {
    if let Some(s) = std::env::var_os(var) {
        let s = s.to_string_lossy();
        return s
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{var}={s:?} is not a decimal seed: {e}"));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    now.as_secs() ^ (u64::from(now.subsec_nanos()) << 20) ^ u64::from(std::process::id())
}

/// A positive count from environment variable `var`, else `default`.
pub fn count_from_env(var: &str, default: usize) -> usize {
    match std::env::var(var) {
        Ok(s) => s
            .trim()
            .parse()
            .ok()
            .filter(|&n: &usize| n > 0)
            .unwrap_or_else(|| panic!("{var}={s:?} is not a positive count")),
        Err(_) => default,
    }
}

/// When a fault test strikes, relative to an `argstash` run it started.
#[derive(Clone, Copy, Debug)]
pub enum KillPoint {
    /// This long after `argstash` was started.
    FromStart(Duration),
    /// This long after the target first shows a tracer (`TracerPid` of the
    /// process), i.e. inside the stop window; falls back to "now" if no
    /// tracer shows up within `bound` (the run may already be over).
    AfterAttach(Duration, Duration),
}

impl KillPoint {
    /// Where trial `i` of a target-kill test strikes an inject that takes about
    /// `inject_time`: even trials anywhere in the run (up to 1.2 times it), odd ones
    /// up to 5 ms after argstash attaches.
    pub fn target_kill(i: usize, rng: &mut Lcg, inject_time: Duration) -> KillPoint {
        if i.is_multiple_of(2) {
            KillPoint::FromStart(rng.duration_upto(inject_time + inject_time / 5))
        } else {
            KillPoint::AfterAttach(
                rng.duration_upto(Duration::from_millis(5)),
                inject_time * 4 + Duration::from_secs(1),
            )
        }
    }

    /// Sleep until the point is reached for `target_pid`; returns a description.
    pub fn wait(&self, target_pid: i32, runner: &mut Background) -> String {
        match *self {
            KillPoint::FromStart(d) => {
                let left = d.saturating_sub(runner.elapsed());
                thread::sleep(left);
                format!("{d:?} after start")
            }
            KillPoint::AfterAttach(d, bound) => {
                let deadline = Instant::now() + bound;
                let mut seen = false;
                while Instant::now() < deadline {
                    let traced =
                        proc_status_field(target_pid, "TracerPid").is_some_and(|v| v != "0");
                    if traced {
                        seen = true;
                        break;
                    }
                    if runner.has_exited() {
                        break;
                    }
                    thread::sleep(Duration::from_micros(50));
                }
                thread::sleep(d);
                if seen {
                    format!("{d:?} after attach (seen at {:?})", runner.elapsed() - d)
                } else {
                    format!("{d:?} after the run (no tracer seen)")
                }
            }
        }
    }
}

/// How an `argstash` run met a target SIGKILLed under it (see [`kill_target_during`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKillKind {
    /// It finished its work before the kill and exited 0.
    Completed,
    /// It failed saying the process exited (the wanted error).
    ExitedError,
    /// The process was gone before it attached: "no process with pid".
    GoneBeforeAttach,
    /// It did not exit within the bound (killed by the test).
    Hang,
    /// It failed with another message.
    Unclear,
    /// It exited, but the target could not be reaped or stayed traced.
    TargetLeftBehind,
}

/// The outcome of [`kill_target_during`].
#[derive(Debug)]
pub struct TargetKillOutcome {
    /// Classification.
    pub kind: TargetKillKind,
    /// `argstash`'s output.
    pub output: Output,
    /// From the target's SIGKILL to `argstash`'s exit (or the bound).
    pub exit_after_kill: Duration,
    /// Where the kill struck, and what was seen (for messages).
    pub detail: String,
}

/// Start `argstash args...` (`args` naming `target`'s pid), SIGKILL the
/// target at `point` *without reaping it* (the test process is its parent
/// and stays silent, like a parent that never reaps), and classify how
/// `argstash` ends within `bound`. Afterwards the target is reaped (bounded)
/// and checked to be gone and untraced.
pub fn kill_target_during(
    target: &mut Target,
    args: &[&str],
    point: KillPoint,
    bound: Duration,
) -> TargetKillOutcome {
    let pid = target.pid();
    let mut runner = Background::argstash(args);
    let mut detail = point.wait(pid, &mut runner);
    target.kill_unreaped();
    let killed_at = Instant::now();
    let finished = runner.wait_timeout(bound);
    let exit_after_kill = killed_at.elapsed();
    if finished.is_none() {
        let tids: Vec<i32> = thread_ids(runner.pid());
        let calls: Vec<_> = tids
            .iter()
            .map(|&t| (t, blocked_syscall(runner.pid(), t)))
            .collect();
        detail.push_str(&format!(
            "; argstash still running {bound:?} after the kill, its threads (tid, syscall): {calls:?}; target threads (tid, state): {:?}",
            thread_ids(pid)
                .into_iter()
                .map(|t| (t, thread_state(pid, t)))
                .collect::<Vec<_>>()
        ));
    }
    let (output, _) = runner.finish(Duration::ZERO);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let mut kind = if finished.is_none() {
        TargetKillKind::Hang
    } else if output.status.success() {
        TargetKillKind::Completed
    } else if stderr.contains("exited") {
        TargetKillKind::ExitedError
    } else if stderr.contains(&format!("no process with pid {pid}")) {
        TargetKillKind::GoneBeforeAttach
    } else {
        TargetKillKind::Unclear
    };
    // Nothing of the dead target may stay traced, and it must be reapable.
    let traced = traced_threads(pid);
    if !traced.is_empty() && kind != TargetKillKind::Hang {
        detail.push_str(&format!(
            "; after argstash exited the dead target still has traced threads {traced:?}"
        ));
        kind = TargetKillKind::TargetLeftBehind;
    }
    if target.wait_exit(Duration::from_secs(5)).is_none() {
        detail.push_str(&format!(
            "; the target was not reapable 5 s after argstash ended (state {:?}, tracer {:?})",
            proc_state(pid),
            proc_status_field(pid, "TracerPid")
        ));
        if kind != TargetKillKind::Hang {
            kind = TargetKillKind::TargetLeftBehind;
        }
    } else if !wait_until(Duration::from_secs(2), || {
        !Path::new(&format!("/proc/{pid}")).exists()
    }) {
        detail.push_str("; /proc/PID still exists after the target was reaped");
        kind = TargetKillKind::TargetLeftBehind;
    }
    remove_argstash_tmp_files(pid);
    TargetKillOutcome {
        kind,
        output,
        exit_after_kill,
        detail,
    }
}
