//! End-to-end: two argstash processes working on one target at once. Either
//! may be refused (the other one is tracing it, or changed the arena it
//! read), but never both, and the result must be consistent: exactly the
//! successful hooks are active, in distinct slots, with the right bytes.

use std::process::Output;

use argstash_tests::*;

const ROUNDS: usize = 12;

/// The refusals a racing argstash may get.
///
/// Also the misdiagnosis "ptrace ... refused (EPERM) although we are root: a
/// security module ... forbids it", which a racing `bt` (attached to one
/// thread for a moment) causes today; the bug has its own test below,
/// `a_passing_tracer_is_not_blamed_on_a_security_module`.
fn acceptable_refusal(out: &Output) -> bool {
    let stderr = String::from_utf8_lossy(&out.stderr);
    out.status.code() == Some(1)
        && (stderr.contains("is already traced by PID")
            || stderr.contains("changed since it was read")
            || stderr.contains("refused (EPERM) although we are root"))
}

#[test]
fn racing_injects_stay_consistent() {
    let mut t = Target::start("seed", Variant::O2G);
    let p = t.pid().to_string();
    let funcs = ["bar", "foo"];
    let pristine: Vec<Vec<u8>> = funcs.iter().map(|f| t.live_function_bytes(f)).collect();
    let mut both = 0;
    for round in 0..ROUNDS {
        let outs: Vec<Output> = std::thread::scope(|s| {
            let handles: Vec<_> = funcs
                .iter()
                .map(|f| {
                    let p = &p;
                    s.spawn(move || run(&["inject", "--pid", p, "--func", f]))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let ok: Vec<bool> = outs.iter().map(|o| o.status.success()).collect();
        for (f, out) in funcs.iter().zip(&outs) {
            assert!(
                out.status.success() || acceptable_refusal(out),
                "round {round}, inject {f}: {out:?}"
            );
        }
        assert!(
            ok.iter().any(|&b| b),
            "round {round}: both refused: {outs:?}"
        );
        both += usize::from(ok.iter().all(|&b| b));

        let hooks = list_hooks(t.pid());
        let mut slots = Vec::new();
        for ((f, &hooked), old) in funcs.iter().zip(&ok).zip(&pristine) {
            let active = hooks_named(&hooks, f, "active");
            assert_eq!(
                active.len(),
                usize::from(hooked),
                "round {round}, {f}: {hooks:#?}"
            );
            if let Some(h) = active.first() {
                slots.push((json_hex(&h["arena"]), h["slot"].as_u64().unwrap()));
                let live = t.live_function_bytes(f);
                let (skip, _) = expected_patch(t.exe(), f);
                assert_eq!(
                    jmp_rel32_target(t.addr_of(f) + skip, &live[skip as usize..]),
                    Some(json_hex(&h["trampoline"])),
                    "round {round}, {f}"
                );
            } else {
                assert_eq!(&t.live_function_bytes(f), old, "round {round}, {f}");
            }
        }
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(slots.len(), ok.iter().filter(|&&b| b).count(), "{hooks:#?}");
        run_ok(&["eject", "--pid", &p, "--all"]);
        for f in funcs {
            t.assert_function_pristine(f);
        }
        t.assert_healthy();
    }
    eprintln!("both injects succeeded in {both} of {ROUNDS} rounds");
    t.drain_lines();
    let line = t.wait_for_line(E2E_TIMEOUT, |l| l.starts_with("iter "));
    assert!(
        line.ends_with(&format!(" result {}", consts::SEED_RESULT)),
        "{line}"
    );
    assert_eq!(tracer_pid(t.pid()), None);
}

/// Runs argstash until it succeeds; it may be refused while a `bt` holds the target.
fn retry(args: &[&str]) {
    for _ in 0..100 {
        let out = run(args);
        if out.status.success() {
            return;
        }
        assert!(acceptable_refusal(&out), "argstash {args:?}: {out:?}");
    }
    panic!("argstash {args:?} refused 100 times in a row");
}

#[test]
fn backtraces_racing_with_inject_and_eject() {
    let mut t = Target::start("threads", Variant::O2G);
    let p = t.pid().to_string();
    let tids = t.tids();
    std::thread::scope(|s| {
        let cycler = s.spawn(|| {
            for _ in 0..8 {
                retry(&["inject", "--pid", &p, "--func", "work", "--func", "parked"]);
                retry(&["eject", "--pid", &p, "--all"]);
            }
        });
        let mut ok = 0;
        while !cycler.is_finished() {
            let out = run(&["bt", "--pid", &p, "--json"]);
            if out.status.success() {
                let bt: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                assert_eq!(bt_threads(&bt).len(), tids.len(), "{bt:#}");
                ok += 1;
            } else {
                assert!(acceptable_refusal(&out), "{out:?}");
            }
        }
        cycler.join().unwrap();
        eprintln!("{ok} backtraces succeeded during the cycles");
    });
    t.assert_function_pristine("work");
    t.assert_function_pristine("parked");
    assert_eq!(t.tids(), tids);
    t.drain_lines();
    t.wait_for_line(E2E_TIMEOUT, |l| l.starts_with("tick "));
    t.assert_healthy();
}

/// Another tracer that attaches to one thread now and then (as a concurrent
/// `argstash bt` does, thread by thread): an inject that meets it must say
/// the thread is traced (or just work), never blame a security module.
///
/// Before the seize retry, about one refusal in 50 was misdiagnosed; 150
/// attempts showed it in most runs.
#[test]
#[ignore = "the test's own tracer loop can hang in waitpid (seen twice in ~10 runs on a loaded 2-core machine: its seized thread sits in ptrace-stop but the stop is never reported); run by hand with --ignored until that is understood"]
fn a_passing_tracer_is_not_blamed_on_a_security_module() {
    use nix::sys::ptrace;
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    use nix::unistd::Pid;
    use std::sync::atomic::{AtomicBool, Ordering};

    let mut t = Target::start("threads", Variant::O2G);
    let p = t.pid().to_string();
    let worker = Pid::from_raw(
        thread_names(t.pid())
            .into_iter()
            .find(|(_, n)| n == "work0")
            .unwrap()
            .0,
    );
    let done = AtomicBool::new(false);
    let mut holds = 0;
    let refusals: Vec<String> = std::thread::scope(|s| {
        let injector = s.spawn(|| {
            let mut refusals = Vec::new();
            for _ in 0..150 {
                let out = run(&["inject", "--pid", &p, "--func", "work"]);
                if out.status.success() {
                    retry(&["eject", "--pid", &p, "--all"]);
                } else {
                    refusals.push(String::from_utf8_lossy(&out.stderr).into_owned());
                }
            }
            done.store(true, Ordering::SeqCst);
            refusals
        });
        // This thread is the passing tracer: attach to work0, stop it, let
        // go, again and again until the injects are done. Short holds make
        // it likely that an inject's PTRACE_SEIZE fails (EPERM) while we hold
        // the thread and that we are gone when it then looks at the thread.
        while !done.load(Ordering::SeqCst) {
            if ptrace::seize(worker, ptrace::Options::empty()).is_ok() {
                ptrace::interrupt(worker).expect("PTRACE_INTERRUPT");
                let sig = match waitpid(worker, Some(WaitPidFlag::__WALL)).expect("waitpid") {
                    WaitStatus::Stopped(_, sig) => Some(sig),
                    _ => None,
                };
                ptrace::detach(worker, sig).expect("PTRACE_DETACH");
                holds += 1;
            }
        }
        injector.join().unwrap()
    });
    eprintln!("{holds} holds, {} refused injects", refusals.len());
    t.assert_function_pristine("work");
    t.assert_healthy();
    let blamed: Vec<&String> = refusals
        .iter()
        .filter(|r| r.contains("security module"))
        .collect();
    assert!(
        blamed.is_empty(),
        "{} of {} refusals blame a security module for another tracer:\n{}",
        blamed.len(),
        refusals.len(),
        blamed.first().map_or("", |s| s.as_str())
    );
    for r in &refusals {
        assert!(r.contains("already traced by PID"), "{r}");
    }
}
