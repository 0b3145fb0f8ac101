//! Issue 9 through argstashd: SIGKILL of the target while the daemon injects.
//!
//! `argstash --bus ADDR inject` on a 4-thread target (tests/fixtures/
//! pause_workers.c), which the test SIGKILLs at a random point (half the
//! trials 0..T after the client starts, T = a measured inject through the
//! bus; half 0-5 ms after the target first shows a tracer) without reaping
//! it. The client must return within 10 s with success, an error saying the
//! process exited, or "no process with pid"; the dead target must be
//! reapable; and the daemon's worker must not stay busy: within 3 s no
//! daemon thread may still sit in wait4/waitid, and a final inject + eject on
//! a live process through the same daemon must work. 30 trials by default
//! (`ARGSTASH_FAULT_TRIALS`); the seed is printed (`ARGSTASH_SEED`).

mod common;

use std::time::{Duration, Instant};

use argstash_tests::*;
use common::Bus;

const FUNC: &str = "mix";
const EXIT_BOUND: Duration = Duration::from_secs(10);
const MAX_HANGS: usize = 3;

/// Daemon threads blocked in wait4 (61) or waitid (247): `(tid, syscall)`.
fn daemon_waiting(daemon: i32) -> Vec<(i32, i64)> {
    thread_ids(daemon)
        .into_iter()
        .filter_map(|tid| {
            let s = blocked_syscall(daemon, tid)?;
            matches!(s, 61 | 247).then_some((tid, s))
        })
        .collect()
}

fn bus_args<'a>(bus: &'a Bus, rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["--bus", bus.address.as_str()];
    v.extend_from_slice(rest);
    v
}

/// One bounded `argstash --bus` run that must succeed; returns its wall time.
fn bus_ok(bus: &Bus, rest: &[&str]) -> Duration {
    let args = bus_args(bus, rest);
    let start = Instant::now();
    let (out, in_time) = Background::argstash(&args).finish(Duration::from_secs(30));
    assert!(
        in_time && out.status.success(),
        "argstash {} failed:\n{}",
        args.join(" "),
        output_text(&out)
    );
    start.elapsed()
}

#[test]
fn target_killed_during_inject_through_argstashd() {
    let trials = count_from_env("ARGSTASH_FAULT_TRIALS", 30);
    let seed = seed_from_env("ARGSTASH_SEED");
    println!("target_killed_during_inject_through_argstashd: seed {seed}");
    let mut rng = Lcg::new(seed);
    let exe = build("pause_workers", Variant::O2G);
    let mut bus = Bus::start();
    let mut daemon = bus.daemon_pid();

    let inject_time = {
        let t = Target::spawn_with_args(&exe, &["4"]);
        let p = t.pid().to_string();
        let mut v: Vec<Duration> = (0..3)
            .map(|_| {
                let d = bus_ok(&bus, &["inject", "--pid", &p, "--func", FUNC]);
                bus_ok(&bus, &["eject", "--pid", &p, "--all"]);
                d
            })
            .collect();
        v.sort();
        v[1]
    };
    println!("an inject through argstashd takes {inject_time:?}");

    let started = Instant::now();
    let mut failures = Vec::new();
    let (mut done, mut completed, mut exited, mut gone, mut hangs, mut busy_after) =
        (0, 0, 0, 0, 0, 0);
    for i in 0..trials {
        let mut t = Target::spawn_with_args(&exe, &["4"]);
        let pid = t.pid();
        let p = pid.to_string();
        let point = KillPoint::target_kill(i, &mut rng, inject_time);
        let args = bus_args(&bus, &["inject", "--pid", &p, "--func", FUNC]);
        let o = kill_target_during(&mut t, &args, point, EXIT_BOUND);
        done += 1;
        if o.kind == TargetKillKind::Hang || o.kind == TargetKillKind::TargetLeftBehind {
            // The daemon may still trace the dead target, which its parent (this
            // test) then cannot reap: restart the daemon to let it go.
            let waiting = daemon_waiting(daemon);
            if !waiting.is_empty() {
                busy_after += 1;
                failures.push(format!(
                    "trial {i} (pid {pid}): argstashd's worker is stuck waiting for the dead target: threads (tid, syscall) {waiting:?} (argstashd restarted to go on)"
                ));
            }
            bus.kill_daemon();
            if t.wait_exit(Duration::from_secs(5)).is_none() {
                failures.push(format!(
                    "trial {i}: pid {pid} not reapable even after argstashd was killed"
                ));
            }
            bus.start_daemon();
            daemon = bus.daemon_pid();
        }
        match o.kind {
            TargetKillKind::Completed => completed += 1,
            TargetKillKind::ExitedError => exited += 1,
            TargetKillKind::GoneBeforeAttach => gone += 1,
            kind => {
                if kind == TargetKillKind::Hang {
                    hangs += 1;
                }
                failures.push(format!(
                    "trial {i} (pid {pid}, kill {}): {kind:?}, the client exited {:?} after the kill\n{}",
                    o.detail,
                    o.exit_after_kill,
                    output_text(&o.output)
                ));
            }
        }
        if !wait_until(Duration::from_secs(3), || daemon_waiting(daemon).is_empty()) {
            busy_after += 1;
            failures.push(format!(
                "trial {i} (pid {pid}): 3 s after the client returned, argstashd threads still wait for a child: {:?}",
                daemon_waiting(daemon)
            ));
        }
        assert!(
            proc_state(daemon).is_some_and(|s| s != 'Z'),
            "argstashd died in trial {i}"
        );
        if hangs >= MAX_HANGS {
            println!("stopping after {MAX_HANGS} hangs");
            break;
        }
    }
    // The daemon still serves a live process.
    let mut t = Target::spawn_with_args(&exe, &["4"]);
    let p = t.pid().to_string();
    bus_ok(&bus, &["inject", "--pid", &p, "--func", FUNC]);
    bus_ok(&bus, &["eject", "--pid", &p, "--all"]);
    t.assert_healthy();
    remove_argstash_tmp_files(t.pid());
    println!(
        "fault-summary test=target_killed_during_inject_through_argstashd trials={done} completed={completed} exited_error={exited} gone_before_attach={gone} hangs={hangs} daemon_still_waiting={busy_after} failures={} elapsed_ms={} seed={seed}",
        failures.len(),
        started.elapsed().as_millis()
    );
    assert!(
        failures.is_empty(),
        "{} failed trials of {done} (completed {completed}, exited error {exited}, gone before attach {gone}, hangs {hangs}, daemon still waiting {busy_after}); seed {seed} (repeat with ARGSTASH_SEED={seed}); first failures:\n\n{}",
        failures.len(),
        failures.iter().take(8).cloned().collect::<Vec<_>>().join("\n\n")
    );
}
