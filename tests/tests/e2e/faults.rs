//! Issue 9: faults during an operation, at random instants.
//!
//! - `target_killed_during_inject`: SIGKILL of a 4-thread target
//!   (pause_workers.c) while `argstash inject` works on it, at a random
//!   point: half the trials 0..T after argstash starts (T = a measured
//!   inject), half 0-5 ms after the target first shows a tracer (inside the
//!   stop window). The test process is the target's parent and does not reap
//!   it until argstash is done (a parent that never reaps). argstash must
//!   exit within 10 s, with success (it finished first), an error saying the
//!   process exited, or "no process with pid" (killed before it attached);
//!   afterwards the dead target must be untraced and reapable.
//! - `argstash_killed_during_inject_or_eject`: SIGKILL of `argstash` itself
//!   at a random point of an inject or an eject on an 8-thread target whose
//!   main thread sleeps in pause(). Afterwards: within 2 s no thread is
//!   stopped or traced; `mix`'s entry is pristine or a whole patch (never
//!   torn); `argstash list` and `argstash eject --all` succeed and the entry
//!   is pristine again; the workers still compute right (they check every
//!   result) and progress; and the FIRST SIGUSR2 makes pause() return (the
//!   fixture prints "woke ..."; if only a second one does, that is the
//!   failure the issue describes, and the message says so).
//!
//! Every failure is collected and all are reported at the end, with the
//! counts. `ARGSTASH_SEED` repeats a run (the seed is printed);
//! `ARGSTASH_FAULT_TRIALS` changes the number of trials (default 100 for the
//! first test, 80 inject + 80 eject for the second).

use std::thread;
use std::time::{Duration, Instant};

use argstash_tests::*;

const FUNC: &str = "mix";
/// Bound for argstash to exit after its target died.
const EXIT_BOUND: Duration = Duration::from_secs(10);
/// Hangs after which a test stops early (each costs the full bound).
const MAX_HANGS: usize = 3;
/// Bound of each follow-up argstash run (list, eject --all, a full inject).
const RUN_BOUND: Duration = Duration::from_secs(30);
const SHOWN_FAILURES: usize = 8;

/// Median wall time of `n` runs of `argstash args`, each followed by `then`.
fn measure(args: &[&str], then: &[&str], n: usize) -> Duration {
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let d = timed(args);
            timed(then);
            d
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// Wall time of one successful `argstash args` run.
fn timed(args: &[&str]) -> Duration {
    timed_with_stop(args).0
}

/// Wall time of one successful `argstash args` run, and the time it says the
/// target was stopped ("target stopped for N us"; zero if it does not say).
fn timed_with_stop(args: &[&str]) -> (Duration, Duration) {
    let start = Instant::now();
    let (out, in_time) = Background::argstash(args).finish(RUN_BOUND);
    assert!(
        in_time && out.status.success(),
        "argstash {} failed:\n{}",
        args.join(" "),
        output_text(&out)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let stop = text
        .split("target stopped for ")
        .nth(1)
        .and_then(|r| r.split(" us").next())
        .and_then(|n| n.trim().parse().ok())
        .map(Duration::from_micros)
        .unwrap_or_default();
    (start.elapsed(), stop)
}

fn report(name: &str, seed: u64, counts: &[(&str, usize)], failures: &[String], elapsed: Duration) {
    let summary = counts
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    println!(
        "fault-summary test={name} {summary} failures={} elapsed_ms={} seed={seed}",
        failures.len(),
        elapsed.as_millis()
    );
    assert!(
        failures.is_empty(),
        "{name}: {} failed trials ({summary}); seed {seed} (repeat with ARGSTASH_SEED={seed}); first failures:\n\n{}",
        failures.len(),
        failures
            .iter()
            .take(SHOWN_FAILURES)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

#[test]
fn target_killed_during_inject() {
    let trials = count_from_env("ARGSTASH_FAULT_TRIALS", 100);
    let seed = seed_from_env("ARGSTASH_SEED");
    println!("target_killed_during_inject: seed {seed}");
    let mut rng = Lcg::new(seed);
    let exe = build("pause_workers", Variant::O2G);

    // How long an inject takes here (the window to strike in).
    let inject_time = {
        let t = Target::spawn_with_args(&exe, &["4"]);
        let p = t.pid().to_string();
        measure(
            &["inject", "--pid", &p, "--func", FUNC],
            &["eject", "--pid", &p, "--all"],
            3,
        )
    };
    println!("an inject takes {inject_time:?}");

    let started = Instant::now();
    let mut counts = [0usize; 6];
    let mut failures = Vec::new();
    let mut slowest = Duration::ZERO;
    let mut done = 0;
    for i in 0..trials {
        let mut t = Target::spawn_with_args(&exe, &["4"]);
        let pid = t.pid();
        let p = pid.to_string();
        let point = KillPoint::target_kill(i, &mut rng, inject_time);
        let o = kill_target_during(
            &mut t,
            &["inject", "--pid", &p, "--func", FUNC],
            point,
            EXIT_BOUND,
        );
        done += 1;
        slowest = slowest.max(o.exit_after_kill);
        let k = o.kind as usize;
        counts[k] += 1;
        match o.kind {
            TargetKillKind::Completed
            | TargetKillKind::ExitedError
            | TargetKillKind::GoneBeforeAttach => {}
            _ => failures.push(format!(
                "trial {i} (pid {pid}, kill {}): {:?}, argstash exited {:?} after the kill\n{}",
                o.detail,
                o.kind,
                o.exit_after_kill,
                output_text(&o.output)
            )),
        }
        if counts[TargetKillKind::Hang as usize] >= MAX_HANGS {
            println!("stopping after {MAX_HANGS} hangs");
            break;
        }
    }
    println!("slowest exit after the target's kill: {slowest:?}");
    report(
        "target_killed_during_inject",
        seed,
        &[
            ("trials", done),
            ("completed", counts[TargetKillKind::Completed as usize]),
            ("exited_error", counts[TargetKillKind::ExitedError as usize]),
            (
                "gone_before_attach",
                counts[TargetKillKind::GoneBeforeAttach as usize],
            ),
            ("hangs", counts[TargetKillKind::Hang as usize]),
            ("unclear_errors", counts[TargetKillKind::Unclear as usize]),
            (
                "target_left_behind",
                counts[TargetKillKind::TargetLeftBehind as usize],
            ),
        ],
        &failures,
        started.elapsed(),
    );
}

/// One bounded argstash run; `Err` with its output unless it exits 0.
fn must_succeed(args: &[&str]) -> Result<String, String> {
    let (out, in_time) = Background::argstash(args).finish(RUN_BOUND);
    if in_time && out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "argstash {} {}:\n{}",
            args.join(" "),
            if in_time {
                "failed"
            } else {
                "did not finish (killed)"
            },
            output_text(&out)
        ))
    }
}

/// The `calls` count of a "woke N calls C" line.
fn woke_calls(line: &str) -> Option<u64> {
    let rest = line.strip_prefix("woke ")?;
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// Send SIGUSR2 once (after the main thread is back in pause(), bounded) and
/// expect "woke ..." within 3 s. Returns the calls count, or a description.
fn first_sigusr2_wakes(t: &mut Target) -> Result<u64, String> {
    let pid = t.pid();
    let stray = t.drain_lines();
    if !stray.is_empty() {
        return Err(format!("unexpected lines before SIGUSR2: {stray:?}"));
    }
    // pause() is system call 34; wait until the main thread sits in it.
    let in_pause = wait_until(Duration::from_secs(2), || {
        blocked_syscall(pid, pid) == Some(34)
    });
    let where_before = (thread_state(pid, pid), blocked_syscall(pid, pid));
    t.signal(libc::SIGUSR2);
    match t.next_line(Duration::from_secs(3)) {
        Some(l) if l.starts_with("woke ") => woke_calls(&l).ok_or(format!("bad line {l:?}")),
        Some(l) => Err(format!(
            "after the first SIGUSR2 the fixture printed {l:?} (pause() returned without the handler's flag)"
        )),
        None => {
            // Diagnose: does a second one wake it?
            t.signal(libc::SIGUSR2);
            let second = t.next_line(Duration::from_secs(3));
            Err(format!(
                "the first SIGUSR2 did not make pause() return within 3 s (main thread before the signal: state {:?}, syscall {:?}, in pause: {in_pause}); after a second SIGUSR2: {second:?}",
                where_before.0, where_before.1
            ))
        }
    }
}

/// How the target ended, if it did (its exit status: a crash signal shows here).
fn death(t: &mut Target) -> String {
    if t.is_alive() {
        return "still running".into();
    }
    match t.wait_exit(Duration::from_secs(2)) {
        Some(st) => format!("{st}"),
        None => format!("not reaped (state {:?})", proc_state(t.pid())),
    }
}

/// Checks after argstash was killed mid-operation; `Err` says what is wrong.
fn check_after_kill(
    t: &mut Target,
    oracle: &EntryOracle,
    last_calls: &mut u64,
) -> Result<String, String> {
    let pid = t.pid();
    let p = pid.to_string();
    wait_released(pid, Duration::from_secs(2))
        .map_err(|e| format!("target left stopped/traced: {e}"))?;
    let entry = oracle.state();
    let entry_desc = match &entry {
        EntryState::Pristine => "pristine".to_string(),
        EntryState::Patched { target } => format!("patched (jmp {target:#x})"),
        EntryState::Torn(why) => return Err(format!("half-patched entry: {why}")),
        EntryState::Unreadable(why) => {
            return Err(format!(
                "cannot read the entry: {why}; the target {}",
                death(t)
            ))
        }
    };
    if !t.is_alive() || t.stderr_text().contains("WRONG") {
        return Err(format!(
            "the target died or computed a wrong result (entry {entry_desc}; {}); stderr:\n{}",
            death(t),
            t.stderr_text()
        ));
    }
    must_succeed(&["list", "--pid", &p])?;
    must_succeed(&["eject", "--pid", &p, "--all"])?;
    if !t.is_alive() || t.stderr_text().contains("WRONG") {
        return Err(format!(
            "the target died during list/eject --all ({}); stderr:\n{}",
            death(t),
            t.stderr_text()
        ));
    }
    let after = oracle.state();
    if after != EntryState::Pristine {
        return Err(format!("eject --all left {FUNC} not pristine: {after:?}"));
    }
    let calls = first_sigusr2_wakes(t)?;
    if calls <= *last_calls {
        return Err(format!(
            "the workers stopped: calls {calls} after {last_calls}"
        ));
    }
    *last_calls = calls;
    if !t.is_alive() || t.stderr_text().contains("WRONG") {
        return Err(format!(
            "the target died afterwards ({}); stderr:\n{}",
            death(t),
            t.stderr_text()
        ));
    }
    Ok(entry_desc)
}

#[test]
fn argstash_killed_during_inject_or_eject() {
    let per_op = count_from_env("ARGSTASH_FAULT_TRIALS", 80);
    let seed = seed_from_env("ARGSTASH_SEED");
    println!("argstash_killed_during_inject_or_eject: seed {seed}");
    let mut rng = Lcg::new(seed);
    let exe = build("pause_workers", Variant::O2G);

    let mut t = Target::spawn_with_args(&exe, &["8"]);
    // How long each operation takes, and how long it keeps the target stopped
    // (the stop window, where most kill points are aimed).
    let ((inject_time, inject_stop), (eject_time, eject_stop)) = {
        let p = t.pid().to_string();
        let inject = ["inject", "--pid", &p, "--func", FUNC];
        let eject = ["eject", "--pid", &p, "--all"];
        let mut i = Vec::new();
        let mut e = Vec::new();
        for _ in 0..3 {
            i.push(timed_with_stop(&inject));
            e.push(timed_with_stop(&eject));
        }
        let median = |v: &mut Vec<(Duration, Duration)>| {
            let mut a: Vec<_> = v.iter().map(|x| x.0).collect();
            let mut b: Vec<_> = v.iter().map(|x| x.1).collect();
            a.sort();
            b.sort();
            (a[1], b[1])
        };
        (median(&mut i), median(&mut e))
    };
    println!("an inject takes {inject_time:?} (target stopped {inject_stop:?}), an eject {eject_time:?} (stopped {eject_stop:?})");
    let mut oracle = EntryOracle::new(&t, FUNC);

    let started = Instant::now();
    let mut failures = Vec::new();
    let (mut trials, mut pristine, mut patched) = (0, 0, 0);
    let mut last_calls = 0;
    let mut in_this_process = 0;
    for i in 0..2 * per_op {
        if in_this_process == 10 {
            remove_argstash_tmp_files(t.pid());
            t = Target::spawn_with_args(&exe, &["8"]);
            oracle = EntryOracle::new(&t, FUNC);
            last_calls = 0;
            in_this_process = 0;
        }
        in_this_process += 1;
        let pid = t.pid();
        let p = pid.to_string();
        let eject = i % 2 == 1;
        if eject {
            if let Err(e) = must_succeed(&["inject", "--pid", &p, "--func", FUNC]) {
                failures.push(format!(
                    "trial {i}: the inject before the eject failed: {e}"
                ));
                remove_argstash_tmp_files(pid);
                t = Target::spawn_with_args(&exe, &["8"]);
                oracle = EntryOracle::new(&t, FUNC);
                last_calls = 0;
                in_this_process = 0;
                continue;
            }
        }
        let (args, window, stop): (Vec<&str>, Duration, Duration) = if eject {
            (vec!["eject", "--pid", &p, "--all"], eject_time, eject_stop)
        } else {
            (
                vec!["inject", "--pid", &p, "--func", FUNC],
                inject_time,
                inject_stop,
            )
        };
        // A quarter of the kills anywhere in the run, the rest inside the stop
        // window (from the first sight of the tracer to 1.5 times the stop).
        let point = if (i / 2) % 4 == 0 {
            KillPoint::FromStart(rng.duration_upto(window + window / 5))
        } else {
            KillPoint::AfterAttach(
                rng.duration_upto((stop * 3 / 2).max(Duration::from_millis(1))),
                window * 4 + Duration::from_secs(1),
            )
        };
        let mut runner = Background::argstash(&args);
        let at = point.wait(pid, &mut runner);
        runner.kill();
        let (out, _) = runner.finish(Duration::from_secs(5));
        trials += 1;
        match check_after_kill(&mut t, &oracle, &mut last_calls) {
            Ok(entry) => {
                if entry == "pristine" {
                    pristine += 1;
                } else {
                    patched += 1;
                }
            }
            Err(e) => {
                failures.push(format!(
                    "trial {i}: argstash {} killed {at} (pid {pid}): {e}\n  killed argstash's output:\n{}\n  fixture stderr:\n{}",
                    args.join(" "),
                    output_text(&out),
                    t.stderr_text()
                ));
                // Go on with a fresh process.
                remove_argstash_tmp_files(pid);
                t = Target::spawn_with_args(&exe, &["8"]);
                oracle = EntryOracle::new(&t, FUNC);
                last_calls = 0;
                in_this_process = 0;
            }
        }
    }
    remove_argstash_tmp_files(t.pid());
    report(
        "argstash_killed_during_inject_or_eject",
        seed,
        &[
            ("trials", trials),
            ("entry_pristine_after_kill", pristine),
            ("entry_patched_after_kill", patched),
        ],
        &failures,
        started.elapsed(),
    );
}

/// Keep the helper list honest: a stopped thread is what the checks look for.
#[test]
fn the_checks_see_a_stopped_thread_and_a_torn_entry() {
    let t = Target::start_with_args("pause_workers", Variant::O2G, &["2"]);
    let pid = t.pid();
    t.signal(libc::SIGSTOP);
    assert!(
        wait_until(Duration::from_secs(5), || !stopped_threads(pid).is_empty()),
        "SIGSTOP did not show as a stopped thread"
    );
    assert!(wait_released(pid, Duration::from_millis(100)).is_err());
    // A torn entry: the first byte of a jmp without its displacement.
    let addr = t.addr_of(FUNC);
    let orig = read_mem(pid, addr, 1);
    write_mem(pid, addr, &[0xe9]);
    assert!(matches!(entry_state(&t, FUNC), EntryState::Torn(_)));
    write_mem(pid, addr, &orig);
    assert_eq!(entry_state(&t, FUNC), EntryState::Pristine);
    t.signal(libc::SIGCONT);
    assert!(wait_released(pid, Duration::from_secs(5)).is_ok());
    thread::sleep(Duration::from_millis(1));
}
