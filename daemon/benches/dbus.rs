//! D-Bus round trips versus the library and the CLI on the same target, and the
//! daemon's RSS with 50 hooked processes.
//!
//! `cargo bench -p argstashd` (builds `argstash` too if it is missing from the profile).

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use argstash_tests::{Target, Variant};
use common::Bus;
use injector::names::FuncSpec;
use injector::{backtrace, BacktraceOptions, ProcessReader};
use injector::{eject, install, EjectOptions, InstallOptions, Pid};

const ROUNDS: usize = 30;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// `argstash` next to this bench's profile directory, if built.
fn cli() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join("argstash");
    p.exists().then_some(p)
}

fn time(f: impl FnOnce()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

/// A `/proc/PID/status` memory field (`VmRSS`, `RssAnon`, `RssFile`), KiB.
fn status_kib(pid: i32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `VmRSS` with its anonymous and file-backed parts: file pages (the modules'
/// ELF files the daemon maps to read symbols and unwind tables) are shared with
/// the page cache and between mappings of the same file, but each mapping counts.
fn rss(pid: i32) -> String {
    format!(
        "{} KiB (anon {}, file {})",
        status_kib(pid, "VmRSS"),
        status_kib(pid, "RssAnon"),
        status_kib(pid, "RssFile")
    )
}

fn main() {
    let bus = Bus::start();
    let t = Target::start("seed", Variant::O2G);
    let pid = t.pid();
    let proxy = bus.proxy();
    let spec = [FuncSpec::parse("bar")];

    let (mut lib_inj, mut lib_bt, mut bus_inj, mut bus_bt, mut cli_inj, mut cli_bt) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    // Cold: a fresh reader, as one CLI run has, with no parsed debug info to share.
    let lib_cold: Vec<Duration> = (0..10)
        .map(|_| {
            time(|| drop(backtrace(Pid::from_raw(pid), &BacktraceOptions::default()).unwrap()))
        })
        .collect();
    // The daemon keeps a reader per process; so does the library side here.
    let mut reader = ProcessReader::new(Pid::from_raw(pid));
    let cli = cli();
    for _ in 0..ROUNDS {
        lib_inj.push(time(|| {
            install(Pid::from_raw(pid), &spec, &InstallOptions::default()).unwrap();
        }));
        lib_bt.push(time(|| {
            reader.backtrace(&BacktraceOptions::default()).unwrap();
        }));
        eject(Pid::from_raw(pid), &EjectOptions::all()).unwrap();

        bus_inj.push(time(|| {
            proxy.inject(pid as u32, &["bar"], HashMap::new()).unwrap();
        }));
        bus_bt.push(time(|| {
            proxy.backtrace(pid as u32, 0, HashMap::new()).unwrap();
        }));
        proxy.eject_all(pid as u32).unwrap();

        if let Some(cli) = &cli {
            let p = pid.to_string();
            cli_inj.push(time(|| {
                let o = Command::new(cli)
                    .args(["inject", "--pid", &p, "--func", "bar"])
                    .output()
                    .unwrap();
                assert!(o.status.success());
            }));
            cli_bt.push(time(|| {
                let o = Command::new(cli)
                    .args(["bt", "--pid", &p, "--json"])
                    .output()
                    .unwrap();
                assert!(o.status.success());
            }));
            eject(Pid::from_raw(pid), &EjectOptions::all()).unwrap();
        }
    }
    println!("argstashd round trips on seed (O2g, 1 thread), median of {ROUNDS}:");
    let row = |name: &str, lib: &[Duration], bus: &[Duration], cli: &[Duration]| {
        let (l, b) = (median(lib.to_vec()), median(bus.to_vec()));
        let c = if cli.is_empty() {
            "n/a".to_string()
        } else {
            let c = median(cli.to_vec());
            format!(
                "{} (D-Bus/CLI {:.2}x)",
                ms(c),
                b.as_secs_f64() / c.as_secs_f64()
            )
        };
        println!(
            "  {name:<10} library {}  D-Bus {}  (+{})  CLI {}",
            ms(l),
            ms(b),
            ms(b.saturating_sub(l)),
            c
        );
    };
    row("Inject", &lib_inj, &bus_inj, &cli_inj);
    row("Backtrace", &lib_bt, &bus_bt, &cli_bt);
    println!(
        "  (Backtrace with a fresh reader and nothing parsed yet, as one CLI run: {}; \
         the library and D-Bus rows reuse one reader per process)",
        ms(median(lib_cold))
    );
    drop(t);
    drop(proxy);
    drop(bus);

    rss_with_50_processes(
        "default debug directory (/usr/lib/debug; libc6-dbg is installed here)",
        &[],
    );
    let none = std::env::temp_dir().join(format!("argstashd-bench-nodebug-{}", std::process::id()));
    std::fs::create_dir_all(&none).unwrap();
    rss_with_50_processes(
        "no separate debug files (--debug-dir EMPTY)",
        &["--debug-dir", none.to_str().unwrap()],
    );
    let _ = std::fs::remove_dir(&none);
}

/// Daemon RSS idle, after hooking 50 processes, and after one backtrace of each,
/// on a fresh bus and daemon started with `daemon_args`.
fn rss_with_50_processes(what: &str, daemon_args: &[&str]) {
    let mut bus = Bus::start();
    bus.kill_daemon();
    bus.daemon_args = daemon_args.iter().map(|a| a.to_string()).collect();
    bus.start_daemon();
    let proxy = bus.proxy();
    // RSS at rest: the daemon frees evicted caches and trims its heap once calls pause.
    let at_rest = || {
        std::thread::sleep(Duration::from_secs(1));
        rss(bus.daemon_pid())
    };
    let base = at_rest();
    let targets: Vec<Target> = (0..50)
        .map(|_| Target::start("seed", Variant::O2G))
        .collect();
    for t in &targets {
        proxy
            .inject(t.pid() as u32, &["bar", "foo"], HashMap::new())
            .unwrap();
    }
    let injected = at_rest();
    for t in &targets {
        proxy.backtrace(t.pid() as u32, 0, HashMap::new()).unwrap();
    }
    assert_eq!(proxy.hook_count().unwrap(), 100);
    println!(
        "  argstashd RSS, {what}:\n    idle {base}\n    after injecting into 50 processes \
         (100 hooks): {injected}\n    after one backtrace of each: {}",
        at_rest()
    );
}
