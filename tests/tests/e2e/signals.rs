//! End-to-end: sigwait.c, threads blocked in read(), sigwaitinfo() and
//! nanosleep(), with a SIGUSR1 handler. Hooking them must not make a system
//! call fail with EINTR (the fixture checks), nor lose or duplicate a signal,
//! and the sleeping thread's argument must show in `bt`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use argstash_tests::*;
use serde_json::json;

const SOON: Duration = Duration::from_secs(5);
const FUNCS: [&str; 4] = ["echo_fn", "on_sigwait", "in_handler", "sleeper_fn"];

/// One round of the fixture's three services, checking each answer:
/// SIGUSR1 -> "handler k", SIGUSR2 -> "sigwait k R", "n" on stdin -> "echo n R".
fn round(t: &mut Target, k: i64, n: i64) {
    t.signal(libc::SIGUSR1);
    assert_eq!(t.expect_line(SOON), format!("handler {k}"));
    t.signal(libc::SIGUSR2);
    assert_eq!(
        t.expect_line(SOON),
        format!("sigwait {k} {}", k * 1000 + 12)
    );
    t.write_stdin(&format!("{n}\n"));
    assert_eq!(t.expect_line(SOON), format!("echo {n} {}", n * 1000 + 7));
}

fn finish(mut t: Target) {
    t.assert_healthy();
    assert_eq!(t.drain_lines(), Vec::<String>::new(), "unexpected output");
    t.close_stdin();
    assert_eq!(t.expect_line(SOON), "bye");
    let status = t.wait_exit(SOON).expect("exits on EOF");
    assert_eq!(status.code(), Some(0), "stderr: {}", t.stderr_text());
}

fn hooks_around_blocking_calls(v: Variant) {
    let mut t = Target::start("sigwait", v);
    let p = t.pid().to_string();
    let sleeper = t.tid_named("sleeper", SOON);
    round(&mut t, 1, 3);

    let mut args = vec!["inject", "--pid", &p];
    for f in FUNCS {
        args.extend(["--func", f]);
    }
    run_ok(&args);
    let hooks = list_hooks(t.pid());
    for f in FUNCS {
        assert_eq!(hooks_named(&hooks, f, "active").len(), 1, "{f}: {hooks:#?}");
    }
    let bt = wait_bt(t.pid(), None, SOON, |bt| {
        bt_thread(bt, sleeper)
            .and_then(|th| frame_named(th, "sleeper_fn"))
            .is_some_and(|(_, f)| f["hooked"] == json!(true))
    });
    let th = bt_thread(&bt, sleeper).unwrap();
    let (i, f) = frame_named(th, "sleeper_fn").unwrap();
    assert_eq!(
        raw_arg(&f["args"][0]),
        json!({"register": "rdi", "value": consts::SIGWAIT_SLEEPER_TAG}),
        "{th:#}"
    );
    assert_eq!(
        thread_frames(th)[i + 1]["function"].as_str(),
        Some("sleeper"),
        "{th:#}"
    );
    // The blocked threads unwind to their entry functions.
    let main = bt_thread(&bt, t.pid()).unwrap();
    assert!(frame_named(main, "main").is_some(), "{main:#}");
    let waiter = bt_thread(&bt, t.tid_named("sigwaiter", SOON)).unwrap();
    assert!(frame_named(waiter, "sigwaiter").is_some(), "{waiter:#}");

    for k in 2..5 {
        round(&mut t, k, -k * 7);
    }
    run_ok(&["eject", "--pid", &p, "--all"]);
    for f in FUNCS {
        t.assert_function_pristine(f);
    }
    round(&mut t, 5, 1_999_999);
    finish(t);
}

#[test]
fn blocking_calls_o2g_pie() {
    hooks_around_blocking_calls(Variant::O2G);
}

#[test]
fn blocking_calls_o0g_nopie() {
    hooks_around_blocking_calls(Variant::new(Opt::O0g, false));
}

#[test]
fn signals_and_input_during_inject_eject_cycles() {
    let mut t = Target::start("sigwait", Variant::O2G);
    let pid = t.pid();
    let done = AtomicBool::new(false);
    let mut rounds = 0;
    std::thread::scope(|s| {
        let cycler = s.spawn(|| {
            let p = pid.to_string();
            let mut args = vec!["inject", "--pid", &p];
            for f in FUNCS {
                args.extend(["--func", f]);
            }
            let result = std::panic::catch_unwind(|| {
                for _ in 0..15 {
                    run_ok(&args);
                    bt_json(pid, None);
                    run_ok(&["eject", "--pid", &p, "--all"]);
                }
            });
            done.store(true, Ordering::SeqCst);
            if let Err(e) = result {
                std::panic::resume_unwind(e);
            }
        });
        while (!done.load(Ordering::SeqCst) || rounds < 10) && rounds < 1_000_000 {
            rounds += 1;
            round(&mut t, rounds, rounds);
        }
        cycler.join().expect("inject/eject cycles");
    });
    eprintln!("{rounds} rounds of signals and input during the cycles");
    for f in FUNCS {
        t.assert_function_pristine(f);
    }
    let hooks = list_hooks(pid);
    for f in FUNCS {
        assert_eq!(
            hooks_named(&hooks, f, "ejected").len(),
            15,
            "{f}: {hooks:#?}"
        );
    }
    finish(t);
}
