//! argstash benchmarks: `cargo bench -p argstash-tests --bench bench [-- FILTER...]`.
//!
//! Five groups (a FILTER runs only the groups whose name contains it):
//!
//! - `call`: per-call cost of a hooked function (`tests/fixtures/bench_call.c`);
//! - `call32`: the same in a 32-bit (`-m32`, i386) build of it;
//! - `args`: per-call cost with arguments beyond the six integer registers
//!   (stack window, variadic, xmm stash; `tests/fixtures/bench_args.c`);
//! - `parts`: the same cost split into the pieces a hook executes, with
//!   hand-written copies of the trampoline (`tests/fixtures/bench_parts.c`);
//! - `gap`: how long install and eject freeze a process with 2 and 64 threads,
//!   from the injector's side and from a thread inside the target
//!   (`tests/fixtures/bench_gap.c`);
//! - `cli`: wall time of `argstash inject` and `argstash bt` on the seed fixture,
//!   against `gdb -batch -p PID -ex bt`;
//! - `core`: wall time of `argstash bt --core` on the core of a hooked crash.c
//!   (and of `CoreFile::open` + `backtrace_core` in-process), against
//!   `gdb -batch -c CORE EXE -ex bt`;
//! - `dwarf`: `argstash bt` on a 30-frame stack with debug info (source lines,
//!   DWARF arguments), cold (a new `argstash` process) and warm (one
//!   `ProcessReader` kept), with the thread's stop time, against gdb (the
//!   on-disk DWARF cache off, so that cold stays cold);
//! - `dwarf_cache`: `argstash bt` on the same stack with libc's debug file:
//!   first run (empty cache), second run (the cache's entry mapped), cache off,
//!   and without libc's debug file; `ARGSTASH_BASELINE_BIN=PATH` adds another
//!   build's cold run (e.g. one from before the cache).
//!
//! This is a measurement, not a test: nothing fails on a slow figure. Machines
//! are noisy, so compared variants are interleaved within one run and every
//! figure is a median of many samples. `docs/BENCHMARKS.md` explains the
//! method and records a run.
//!
//! `cargo test --benches` runs this binary without `--bench`; it then only
//! says so and exits, so test runs stay fast.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use argstash_tests::{argstash, build, consts, Opt, Target, Variant};
use injector::{backtrace, BacktraceOptions, ProcessReader};
use injector::{eject, install, EjectOptions, InstallOptions, InstallReport, Pid};
use reader::symbols::FuncSpec;

/// Timeout for one fixture reply.
const REPLY: Duration = Duration::from_secs(30);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") {
        println!("bench: not run (use `cargo bench -p argstash-tests --bench bench`)");
        return;
    }
    let filters: Vec<&str> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(String::as_str)
        .collect();
    let want = |group: &str| filters.is_empty() || filters.contains(&group);

    print_machine();
    let started = Instant::now();
    let groups: [(&str, fn()); 9] = [
        ("call", bench_call),
        ("call32", bench_call32),
        ("args", bench_args),
        ("parts", bench_parts),
        ("gap", bench_gap),
        ("cli", bench_cli),
        ("core", bench_core),
        ("dwarf", bench_dwarf),
        ("dwarf_cache", bench_dwarf_cache),
    ];
    for (name, run) in groups {
        if want(name) {
            let before = CpuSnapshot::now();
            run();
            before.report();
        }
    }
    println!(
        "\nall benchmarks took {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------
// Statistics and tables
// ---------------------------------------------------------------------------

/// Sorted copy of the samples (NaN-free input).
fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).expect("no NaN samples"));
    s
}

/// The `q` quantile (0..=1), nearest rank; NaN when there are no samples.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let s = sorted(v);
    let i = ((s.len() - 1) as f64 * q).round() as usize;
    s[i]
}

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let s = sorted(v);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NAN, f64::max)
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NAN, f64::min)
}

/// A Markdown table: the first `left` columns left-aligned, the others right-aligned.
struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    left: usize,
}

impl Table {
    fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
            left: 1,
        }
    }

    fn left_aligned(mut self, columns: usize) -> Table {
        self.left = columns;
        self
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn print(&self) {
        let cols = self.header.len();
        let width: Vec<usize> = (0..cols)
            .map(|c| {
                self.rows
                    .iter()
                    .chain([&self.header])
                    .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |r: &[String]| {
            let mut out = String::new();
            for (c, w) in width.iter().enumerate() {
                let cell = r.get(c).map_or("", String::as_str);
                if c < self.left {
                    let _ = write!(out, "| {cell:<w$} ");
                } else {
                    let _ = write!(out, "| {cell:>w$} ");
                }
            }
            out.push('|');
            out
        };
        println!("{}", line(&self.header));
        let sep: String = width
            .iter()
            .enumerate()
            .map(|(c, w)| {
                if c < self.left {
                    format!("|{}", "-".repeat(w + 2))
                } else {
                    format!("|{}:", "-".repeat(w + 1))
                }
            })
            .collect();
        println!("{sep}|");
        for r in &self.rows {
            println!("{}", line(r));
        }
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `n`, median, p90 and max of microsecond samples, formatted.
fn us_cells(v: &[f64]) -> Vec<String> {
    vec![
        v.len().to_string(),
        format!("{:.0}", median(v)),
        format!("{:.0}", quantile(v, 0.9)),
        format!("{:.0}", max(v)),
    ]
}

/// System-wide and own CPU time, to tell how much else ran during a group.
struct CpuSnapshot {
    at: Instant,
    /// Busy (non-idle, non-iowait, non-steal) seconds of all CPUs.
    busy: f64,
    /// Seconds stolen by the hypervisor.
    steal: f64,
    /// This process and its reaped children (fixtures, argstash, gdb).
    own: f64,
}

impl CpuSnapshot {
    fn now() -> CpuSnapshot {
        // SAFETY: sysconf and getrusage only write to the struct passed in.
        let (hz, own) = unsafe {
            let hz = libc::sysconf(libc::_SC_CLK_TCK).max(1) as f64;
            let mut own = 0.0;
            for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
                let mut ru: libc::rusage = std::mem::zeroed();
                if libc::getrusage(who, &mut ru) == 0 {
                    for tv in [ru.ru_utime, ru.ru_stime] {
                        own += tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
                    }
                }
            }
            (hz, own)
        };
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let f: Vec<f64> = stat
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        let field = |i: usize| f.get(i).copied().unwrap_or(0.0) / hz;
        // user nice system idle iowait irq softirq steal
        CpuSnapshot {
            at: Instant::now(),
            busy: field(0) + field(1) + field(2) + field(5) + field(6),
            steal: field(7),
            own,
        }
    }

    /// Prints how much CPU other processes used since `self` (children must be reaped by now).
    fn report(&self) {
        let now = CpuSnapshot::now();
        let wall = now.at.duration_since(self.at).as_secs_f64();
        let other = (now.busy - self.busy) - (now.own - self.own);
        println!(
            "\n(group took {wall:.1} s; CPU used by unrelated processes meanwhile: {:.2} s = {:.0}% \
             of one CPU; hypervisor steal {:.2} s; load average now {})",
            other,
            100.0 * other / wall,
            now.steal - self.steal,
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
}

fn print_machine() {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "?".into());
    let hypervisor = cpuinfo.contains(" hypervisor");
    let cpus = thread::available_parallelism().map_or(0, |n| n.get());
    println!("# argstash benchmarks");
    println!(
        "machine: {cpus} CPUs, {model}{}, kernel {}",
        if hypervisor { " (virtualised)" } else { "" },
        release.trim()
    );
}

// ---------------------------------------------------------------------------
// 1. Per-call overhead
// ---------------------------------------------------------------------------

/// Calls per timed loop.
const CALLS: u64 = 100_000;
/// Rounds (one timed loop of each copy) per measurement.
const ROUNDS: usize = 100;
/// Measurement cycles; each measures every condition once, in a rotating order.
const CYCLES: usize = 8;

/// Per-round nanoseconds per call of (work, work_plain).
fn measure_calls(t: &mut Target, rounds: usize) -> Vec<(f64, f64)> {
    t.write_stdin(&format!("run {rounds} {CALLS}\n"));
    let mut out = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let line = t.expect_line(REPLY);
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["round", n, "work", w, "plain", p] if n.parse() == Ok(r) => {
                let w: f64 = w.parse().expect("work ns");
                let p: f64 = p.parse().expect("plain ns");
                out.push((w / CALLS as f64, p / CALLS as f64));
            }
            _ => t.fail(&format!("unexpected line {line:?} (round {r})")),
        }
    }
    let done = t.expect_line(REPLY);
    if done != "done" {
        t.fail(&format!("expected done, got {done:?}"));
    }
    out
}

fn bench_call() {
    run_call_bench(
        "## 1. Per-call overhead (bench_call.c: work hooked, work_plain never)",
        Variant::O2G,
        [
            ("unhooked (calibration)", None),
            ("hooked, registers only", Some(0)),
            ("hooked, --stack-args 8", Some(8)),
        ],
    );
}

/// The same on a 32-bit (`-m32`, i386 cdecl: all six arguments on the stack) build.
fn bench_call32() {
    run_call_bench(
        "## 1c. Per-call overhead, i386 (bench_call.c built -m32: cdecl, six stack arguments)",
        Variant::new(Opt::O2g, true).with_flags(&["-m32"]),
        [
            ("unhooked (calibration)", None),
            ("hooked, default window (8 words)", Some(0)),
            ("hooked, --stack-args 16", Some(16)),
        ],
    );
}

/// Times `work` unhooked and hooked with each stack window of `conds` (`None`: unhooked first).
fn run_call_bench(title: &str, variant: Variant, conds: [(&str, Option<u16>); 3]) {
    println!("\n{title}\n");
    let mut t = Target::start("bench_call", variant);
    let pid = t.pid();
    let work = [FuncSpec::parse("work")];
    let eject_work = EjectOptions::functions(work.to_vec());

    measure_calls(&mut t, 20); // warm-up: caches, branch predictors, CPU frequency

    // Per condition: every round's (work, plain), and per cycle the median of work - plain.
    let mut rounds: Vec<Vec<(f64, f64)>> = vec![Vec::new(); 3];
    let mut cycle_diff: Vec<Vec<f64>> = vec![Vec::new(); 3];
    let mut stops: Vec<f64> = Vec::new();
    for cycle in 0..CYCLES {
        for k in 0..3 {
            let ci = (cycle + k) % 3;
            let words = conds[ci].1;
            if let Some(stack_words) = words {
                let r = install(
                    Pid::from_raw(pid),
                    &work,
                    &InstallOptions {
                        stack_words,
                        force_stack_words: true,
                        ..InstallOptions::default()
                    },
                )
                .unwrap_or_else(|e| panic!("install work: {e}"));
                stops.push(us(r.stopped));
            }
            let m = measure_calls(&mut t, ROUNDS);
            if words.is_some() {
                eject(Pid::from_raw(pid), &eject_work)
                    .unwrap_or_else(|e| panic!("eject work: {e}"));
            }
            let diffs: Vec<f64> = m.iter().map(|(w, p)| w - p).collect();
            cycle_diff[ci].push(median(&diffs));
            rounds[ci].extend(m);
        }
    }
    t.assert_healthy();
    drop(t);

    let names = conds.map(|c| c.0);
    // Overheads are taken per cycle (hooked and unhooked measured minutes apart at
    // most), then the median over cycles. The ratio column divides by work_plain
    // of the same round, so a machine-wide slowdown (host load, clock) cancels.
    let ratio = |ci: usize| -> Vec<f64> { rounds[ci].iter().map(|(w, p)| w / p).collect() };
    let calib_ratio = median(&ratio(0));
    let plain_ns = median(&rounds[0].iter().map(|r| r.1).collect::<Vec<_>>());
    let mut table = Table::new(&[
        "condition",
        "rounds",
        "work ns/call",
        "work_plain ns/call",
        "work - plain",
        "overhead ns/call",
        "min..max over cycles",
        "overhead in plain calls",
    ]);
    for ci in 0..3 {
        let w: Vec<f64> = rounds[ci].iter().map(|r| r.0).collect();
        let p: Vec<f64> = rounds[ci].iter().map(|r| r.1).collect();
        let d: Vec<f64> = rounds[ci].iter().map(|r| r.0 - r.1).collect();
        let (overhead, range, units) = if ci == 0 {
            ("(0)".to_string(), "-".to_string(), "(0)".to_string())
        } else {
            let per_cycle: Vec<f64> = cycle_diff[ci]
                .iter()
                .zip(&cycle_diff[0])
                .map(|(h, c)| h - c)
                .collect();
            let excess = median(&ratio(ci)) - calib_ratio;
            (
                format!("{:+.2}", median(&per_cycle)),
                format!("{:+.2} .. {:+.2}", min(&per_cycle), max(&per_cycle)),
                format!("{excess:+.2} (= {:+.2} ns)", excess * plain_ns),
            )
        };
        table.row(vec![
            names[ci].to_string(),
            rounds[ci].len().to_string(),
            format!("{:.2}", median(&w)),
            format!("{:.2}", median(&p)),
            format!("{:+.2}", median(&d)),
            overhead,
            range,
            units,
        ]);
    }
    table.print();
    println!(
        "\n{CALLS} calls per timed loop, {ROUNDS} rounds per measurement, {CYCLES} cycles \
         (the three conditions in rotating order; work and work_plain alternate \
         inside every round). overhead ns/call = median over cycles of [median(work - plain) \
         hooked - median(work - plain) unhooked]. overhead in plain calls = median(work / \
         plain) hooked - median(work / plain) unhooked, and that times the unhooked \
         work_plain ns/call ({plain_ns:.2})."
    );
    println!(
        "install stop while measuring: median {:.0} us over {} installs",
        median(&stops),
        stops.len()
    );
}

// ---------------------------------------------------------------------------
// 1c. Arguments beyond the registers
// ---------------------------------------------------------------------------

/// Per-round nanoseconds per call of (SHAPE, SHAPE_plain) in bench_args.c.
fn measure_shape(t: &mut Target, shape: &str, rounds: usize) -> Vec<(f64, f64)> {
    t.write_stdin(&format!("run {shape} {rounds} {CALLS}\n"));
    let mut out = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let line = t.expect_line(REPLY);
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["round", n, "work", w, "plain", p] if n.parse() == Ok(r) => {
                let w: f64 = w.parse().expect("work ns");
                let p: f64 = p.parse().expect("plain ns");
                out.push((w / CALLS as f64, p / CALLS as f64));
            }
            _ => t.fail(&format!("unexpected line {line:?} (round {r})")),
        }
    }
    let done = t.expect_line(REPLY);
    if done != "done" {
        t.fail(&format!("expected done, got {done:?}"));
    }
    out
}

fn bench_args() {
    println!(
        "\n## 1c. Arguments beyond the registers (bench_args.c: SHAPE hooked, SHAPE_plain never)\n"
    );
    // Stripped of debug info: the windows come from the code, and `fl` without
    // `--float-args` keeps no xmm stash (with DWARF its doubles would turn it on).
    let mut t = Target::start("bench_args", Variant::new(Opt::O2, true));
    let pid = t.pid();
    // (label, shape, install options; None = unhooked calibration of that shape)
    let auto = InstallOptions::default();
    let xmm = InstallOptions {
        float_args: true,
        ..InstallOptions::default()
    };
    let conds: [(&str, &str, Option<InstallOptions>); 9] = [
        ("r6 unhooked", "r6", None),
        ("r6 hooked (6 register args, window 0)", "r6", Some(auto)),
        ("s10 unhooked", "s10", None),
        (
            "s10 hooked (10 args, window 4 from code)",
            "s10",
            Some(auto),
        ),
        ("va unhooked", "va", None),
        ("va hooked (variadic, window 8)", "va", Some(auto)),
        ("fl unhooked", "fl", None),
        ("fl hooked, no xmm stash", "fl", Some(auto)),
        ("fl hooked, --float-args (xmm0-7 stash)", "fl", Some(xmm)),
    ];
    for shape in ["r6", "s10", "va", "fl"] {
        measure_shape(&mut t, shape, 20); // warm-up
    }
    let n = conds.len();
    let mut rounds: Vec<Vec<(f64, f64)>> = vec![Vec::new(); n];
    let mut cycle_diff: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut windows: Vec<String> = vec![String::new(); n];
    let cycles = 6;
    for cycle in 0..cycles {
        for k in 0..n {
            let ci = (cycle + k) % n;
            let (_, shape, opts) = conds[ci];
            let spec = [FuncSpec::parse(shape)];
            if let Some(opts) = opts {
                let r = install(Pid::from_raw(pid), &spec, &opts)
                    .unwrap_or_else(|e| panic!("install {shape}: {e}"));
                let h = &r.hooks[0];
                windows[ci] = format!(
                    "{}{}{}",
                    h.stack_words,
                    if h.variadic { " variadic" } else { "" },
                    if h.xmm { " +xmm" } else { "" }
                );
            }
            let m = measure_shape(&mut t, shape, ROUNDS);
            if opts.is_some() {
                eject(Pid::from_raw(pid), &EjectOptions::functions(spec.to_vec()))
                    .unwrap_or_else(|e| panic!("eject {shape}: {e}"));
            }
            let diffs: Vec<f64> = m.iter().map(|(w, p)| w - p).collect();
            cycle_diff[ci].push(median(&diffs));
            rounds[ci].extend(m);
        }
    }
    t.assert_healthy();
    drop(t);

    let mut table = Table::new(&[
        "condition",
        "window",
        "rounds",
        "SHAPE ns/call",
        "plain ns/call",
        "overhead ns/call",
        "min..max over cycles",
        "hooked/plain ratio",
        "ratio excess",
    ]);
    for ci in 0..n {
        let (label, shape, opts) = conds[ci];
        let calib = conds
            .iter()
            .position(|(_, s, o)| *s == shape && o.is_none())
            .expect("calibration row");
        let w: Vec<f64> = rounds[ci].iter().map(|r| r.0).collect();
        let p: Vec<f64> = rounds[ci].iter().map(|r| r.1).collect();
        let ratio = |i: usize| -> Vec<f64> { rounds[i].iter().map(|(w, p)| w / p).collect() };
        let (overhead, range, excess) = if opts.is_none() {
            ("(0)".to_string(), "-".to_string(), "(0)".to_string())
        } else {
            let per_cycle: Vec<f64> = cycle_diff[ci]
                .iter()
                .zip(&cycle_diff[calib])
                .map(|(h, c)| h - c)
                .collect();
            (
                format!("{:+.2}", median(&per_cycle)),
                format!("{:+.2} .. {:+.2}", min(&per_cycle), max(&per_cycle)),
                format!("{:+.3}", median(&ratio(ci)) - median(&ratio(calib))),
            )
        };
        table.row(vec![
            label.to_string(),
            if opts.is_some() {
                windows[ci].clone()
            } else {
                "-".to_string()
            },
            rounds[ci].len().to_string(),
            format!("{:.2}", median(&w)),
            format!("{:.2}", median(&p)),
            overhead,
            range,
            format!("{:.3}", median(&ratio(ci))),
            excess,
        ]);
    }
    table.print();
    println!(
        "\n{CALLS} calls per timed loop, {ROUNDS} rounds per measurement, {cycles} cycles over \
         all conditions in rotating order; SHAPE and SHAPE_plain alternate inside every round. \
         overhead ns/call = median over cycles of [median(SHAPE - plain) hooked - the same \
         unhooked]; ratio excess = median(SHAPE / plain) hooked - the same unhooked. Windows \
         were decided by argstash (no --stack-args)."
    );
}

// ---------------------------------------------------------------------------
// 1b. Where the per-call cost goes
// ---------------------------------------------------------------------------

/// Versions in bench_parts.c.
const PARTS: [&str; 7] = [
    "v0 plain function",
    "v1 + jmp to trampoline, relocated prologue, jmp back",
    "v2 + call/ret pair (trampoline calls the relocated prologue)",
    "v3 + push rbp; mov rbp, rsp ... leave",
    "v4 + marker and record words (2 push imm32, 2 mov dword)",
    "v5 + 8 register pushes (= argstash register-only trampoline)",
    "v6 + 8 push qword [rbp+x] (= --stack-args 8)",
];
/// Rounds of bench_parts.c (every round times each version once).
const PARTS_ROUNDS: usize = 300;

fn bench_parts() {
    println!("\n## 1b. Where the per-call cost goes (bench_parts.c: hand-written trampolines)\n");
    let mut t = Target::start("bench_parts", Variant::O2G);
    let run = |t: &mut Target, rounds: usize| -> Vec<Vec<f64>> {
        t.write_stdin(&format!("run {rounds} {CALLS}\n"));
        let mut per: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); PARTS.len()];
        for r in 0..rounds {
            let line = t.expect_line(REPLY);
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() != PARTS.len() + 2 || f[0] != "round" || f[1].parse() != Ok(r) {
                t.fail(&format!("unexpected line {line:?} (round {r})"));
            }
            for (v, ns) in f[2..].iter().enumerate() {
                per[v].push(ns.parse::<f64>().expect("ns") / CALLS as f64);
            }
        }
        let done = t.expect_line(REPLY);
        if done != "done" {
            t.fail(&format!("expected done, got {done:?}"));
        }
        per
    };
    run(&mut t, 20); // warm-up
    let per = run(&mut t, PARTS_ROUNDS);
    t.assert_healthy();
    drop(t);
    // Differences are taken within each round (all versions ran back to back).
    let diff = |a: usize, b: usize| -> Vec<f64> {
        per[a].iter().zip(&per[b]).map(|(x, y)| x - y).collect()
    };
    let mut table = Table::new(&["version", "ns/call", "step ns/call", "vs v0 ns/call"]);
    for (v, name) in PARTS.iter().enumerate() {
        let (step, total) = if v == 0 {
            ("-".to_string(), "-".to_string())
        } else {
            (
                format!("{:+.2}", median(&diff(v, v - 1))),
                format!("{:+.2}", median(&diff(v, 0))),
            )
        };
        table.row(vec![
            name.to_string(),
            format!("{:.2}", median(&per[v])),
            step,
            total,
        ]);
    }
    table.print();
    println!(
        "\n{PARTS_ROUNDS} rounds of {CALLS} calls per version, versions in rotating order within \
         each round; step = median over rounds of (this version - previous version)."
    );
}

// ---------------------------------------------------------------------------
// 2. Stop window
// ---------------------------------------------------------------------------

/// Fresh processes per thread count (each gives one arena-creating install).
const GAP_PROCS: usize = 10;
/// Measured iterations per process (GAP_PROCS * GAP_ITERS samples in all).
const GAP_ITERS: usize = 3;

fn gap_cmd(t: &mut Target, cmd: &str) -> String {
    t.write_stdin(&format!("{cmd}\n"));
    t.expect_line(REPLY)
}

fn gap_reset(t: &mut Target) {
    let l = gap_cmd(t, "reset");
    if l != "reset" {
        t.fail(&format!("expected reset, got {l:?}"));
    }
}

/// Largest gap the watcher saw since the last reset, in microseconds.
fn gap_report(t: &mut Target) -> f64 {
    let l = gap_cmd(t, "report");
    match l.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["gap", ns, "reads", _] => ns.parse::<f64>().expect("gap ns") / 1e3,
        _ => t.fail(&format!("expected gap, got {l:?}")),
    }
}

#[derive(Default)]
struct GapSamples {
    stop_arena: Vec<f64>,
    gap_arena: Vec<f64>,
    stop_inject: Vec<f64>,
    stop_eject: Vec<f64>,
    gap_inject: Vec<f64>,
    gap_eject: Vec<f64>,
    gap_baseline: Vec<f64>,
    wall_install: Vec<f64>,
    wall_eject: Vec<f64>,
    threads_seen: Vec<usize>,
    cli_stop_inject: Vec<f64>,
    cli_stop_eject: Vec<f64>,
    cli_gap_inject: Vec<f64>,
    cli_gap_eject: Vec<f64>,
}

/// The stop an `argstash inject`/`eject` printed ("... stopped for N us ..."), if it did.
fn printed_stop_us(out: &str) -> Option<f64> {
    let rest = &out[out.find("stopped for ")? + "stopped for ".len()..];
    let mut words = rest.split_whitespace();
    let n: f64 = words.next()?.parse().ok()?;
    match words.next()? {
        "us" => Some(n),
        "ms" => Some(n * 1e3),
        _ => None,
    }
}

/// Runs `argstash args` between a reset and a report: (printed stop, watcher gap).
fn cli_with_gap(t: &mut Target, bin: &Path, args: &[&str]) -> (Option<f64>, f64) {
    gap_reset(t);
    let (_, out) = time_cmd(&mut argstash_at(bin, args));
    (printed_stop_us(&out), gap_report(t))
}

/// Install on `handler` between a reset and a report: (report, watcher gap, wall time).
fn timed_install(t: &mut Target) -> (InstallReport, f64, Duration) {
    let pid = t.pid();
    gap_reset(t);
    let t0 = Instant::now();
    let r = install(
        Pid::from_raw(pid),
        &[FuncSpec::parse("handler")],
        &InstallOptions::default(),
    )
    .unwrap_or_else(|e| panic!("install handler: {e}"));
    let wall = t0.elapsed();
    (r, gap_report(t), wall)
}

fn bench_gap() {
    println!("\n## 2. Stop window (bench_gap.c: watcher thread + idle threads, hook on handler)\n");
    let exe = build("bench_gap", Variant::O2G);
    let bin = argstash();
    let eject_handler = EjectOptions::functions(vec![FuncSpec::parse("handler")]);
    let mut table =
        Table::new(&["threads", "what", "n", "median us", "p90 us", "max us"]).left_aligned(2);
    for threads in [2usize, 64] {
        let mut s = GapSamples::default();
        for _ in 0..GAP_PROCS {
            let mut t = Target::spawn_with_args(&exe, &[&threads.to_string()]);
            let pid = t.pid();
            let p = pid.to_string();
            assert_eq!(t.tids().len(), threads, "bench_gap thread count");
            // First install in a fresh process: creates the arena.
            let (r, gap, wall) = timed_install(&mut t);
            assert!(!r.new_arenas.is_empty(), "first install created no arena");
            s.stop_arena.push(us(r.stopped));
            s.gap_arena.push(gap);
            s.threads_seen.push(r.threads);
            let mut window = wall;
            eject(Pid::from_raw(pid), &eject_handler).unwrap_or_else(|e| panic!("eject: {e}"));
            for i in 0..GAP_ITERS {
                let baseline = |t: &mut Target, window: Duration| {
                    gap_reset(t);
                    thread::sleep(window);
                    gap_report(t)
                };
                if i % 2 == 1 {
                    s.gap_baseline.push(baseline(&mut t, window));
                }
                let (r, gap, wall) = timed_install(&mut t);
                assert!(
                    r.new_arenas.is_empty(),
                    "steady-state install created an arena"
                );
                s.stop_inject.push(us(r.stopped));
                s.gap_inject.push(gap);
                s.wall_install.push(ms(wall));
                s.threads_seen.push(r.threads);
                window = wall;
                gap_reset(&mut t);
                let t0 = Instant::now();
                let e = eject(Pid::from_raw(pid), &eject_handler)
                    .unwrap_or_else(|e| panic!("eject: {e}"));
                s.wall_eject.push(ms(t0.elapsed()));
                s.stop_eject.push(us(e.stopped));
                s.gap_eject.push(gap_report(&mut t));
                // The same through the CLI (a fresh process each time).
                let (stop, gap) =
                    cli_with_gap(&mut t, &bin, &["inject", "--pid", &p, "--func", "handler"]);
                s.cli_stop_inject.extend(stop);
                s.cli_gap_inject.push(gap);
                let (stop, gap) =
                    cli_with_gap(&mut t, &bin, &["eject", "--pid", &p, "--func", "handler"]);
                s.cli_stop_eject.extend(stop);
                s.cli_gap_eject.push(gap);
                if i % 2 == 0 {
                    s.gap_baseline.push(baseline(&mut t, window));
                }
            }
            t.assert_healthy();
        }
        assert!(
            s.threads_seen.iter().all(|&n| n == threads),
            "install stopped {:?} threads, expected {threads}",
            s.threads_seen
        );
        let n = threads.to_string();
        let mut row = |what: &str, v: &[f64]| {
            let mut cells = vec![n.clone(), what.to_string()];
            cells.extend(us_cells(v));
            table.row(cells);
        };
        row("injector stop: inject, new arena", &s.stop_arena);
        row("injector stop: inject", &s.stop_inject);
        row("injector stop: eject", &s.stop_eject);
        row("watcher gap: inject, new arena", &s.gap_arena);
        row("watcher gap: inject", &s.gap_inject);
        row("watcher gap: eject", &s.gap_eject);
        row("watcher gap: no injection (baseline)", &s.gap_baseline);
        row("CLI `argstash inject`: printed stop", &s.cli_stop_inject);
        row("CLI `argstash inject`: watcher gap", &s.cli_gap_inject);
        row("CLI `argstash eject`: printed stop", &s.cli_stop_eject);
        row("CLI `argstash eject`: watcher gap", &s.cli_gap_eject);
        let mut wall = |what: &str, v: &[f64]| {
            table.row(vec![
                n.clone(),
                what.to_string(),
                v.len().to_string(),
                format!("{:.0}", median(v) * 1e3),
                format!("{:.0}", quantile(v, 0.9) * 1e3),
                format!("{:.0}", max(v) * 1e3),
            ]);
        };
        wall("install() call, wall (in-process)", &s.wall_install);
        wall("eject() call, wall (in-process)", &s.wall_eject);
    }
    table.print();
    println!(
        "\n{GAP_PROCS} fresh processes per thread count; in each, one arena-creating install, \
         then {GAP_ITERS} iterations of (install(), eject(), argstash inject, argstash eject) interleaved with a baseline window \
         of the same length as the install call with no injection. Injector stop = \
         InstallReport/EjectReport.stopped; watcher gap = largest gap between consecutive \
         clock_gettime reads in the target's spinning thread."
    );
}

// ---------------------------------------------------------------------------
// 3. Whole commands
// ---------------------------------------------------------------------------

/// Timed runs of each argstash command.
const CLI_RUNS: usize = 30;
/// Fresh seed processes for the arena-creating `inject`.
const CLI_FRESH: usize = 10;
/// Timed gdb runs.
const GDB_RUNS: usize = 5;

/// Runs `cmd` to completion (output captured), returns its wall time and stdout; panics on failure.
fn time_cmd(cmd: &mut Command) -> (Duration, String) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let wall = t0.elapsed();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (wall, String::from_utf8_lossy(&out.stdout).into_owned())
}

fn argstash_at(bin: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(bin);
    c.args(args);
    c
}

fn bench_cli() {
    println!("\n## 3. Whole commands (seed.c, -O2, debug info stripped)\n");
    let bin = argstash();
    let seed = Variant::new(Opt::O2, true);
    let exe = build("seed", seed);
    println!("argstash binary: {}", bin.display());

    // Warm the page cache and the binary's first run in a throwaway process.
    {
        let t = Target::spawn(&exe);
        let p = t.pid().to_string();
        time_cmd(&mut argstash_at(
            &bin,
            &["inject", "--pid", &p, "--func", "bar"],
        ));
        time_cmd(&mut argstash_at(&bin, &["bt", "--pid", &p]));
        time_cmd(&mut argstash_at(
            &bin,
            &["eject", "--pid", &p, "--func", "bar"],
        ));
    }

    let mut fresh_inject = Vec::new();
    for _ in 0..CLI_FRESH {
        let t = Target::spawn(&exe);
        let p = t.pid().to_string();
        let (w, out) = time_cmd(&mut argstash_at(
            &bin,
            &["inject", "--pid", &p, "--func", "bar"],
        ));
        assert!(
            out.contains("created arena"),
            "fresh inject made no arena:\n{out}"
        );
        fresh_inject.push(ms(w));
    }

    let mut t = Target::spawn(&exe);
    let pid = t.pid();
    let p = pid.to_string();
    let spec = [FuncSpec::parse("bar")];
    let eject_bar = EjectOptions::functions(spec.to_vec());
    // Create the arena once (untimed), so every timed inject reuses it.
    time_cmd(&mut argstash_at(
        &bin,
        &["inject", "--pid", &p, "--func", "bar"],
    ));
    time_cmd(&mut argstash_at(
        &bin,
        &["eject", "--pid", &p, "--func", "bar"],
    ));

    let (mut inject_w, mut bt_w, mut eject_w, mut version_w) = (vec![], vec![], vec![], vec![]);
    let (mut lib_install, mut lib_bt, mut bt_stop) = (vec![], vec![], vec![]);
    let mut sample_bt = String::new();
    let mut stashed = 0;
    for i in 0..CLI_RUNS {
        version_w.push(ms(time_cmd(&mut argstash_at(&bin, &["--version"])).0));
        let (w, _) = time_cmd(&mut argstash_at(
            &bin,
            &["inject", "--pid", &p, "--func", "bar"],
        ));
        inject_w.push(ms(w));
        // Untimed: let the bar() call that was live during inject return, so
        // the one bt sees was entered through the hook and has a stash frame.
        wait_next_iter(&mut t);
        let (w, out) = time_cmd(&mut argstash_at(&bin, &["bt", "--pid", &p]));
        bt_w.push(ms(w));
        if out.contains(&format!("={}", consts::SEED_BAR_ARG)) {
            stashed += 1;
        }
        if i == 0 {
            sample_bt = out;
        }
        let (w, _) = time_cmd(&mut argstash_at(
            &bin,
            &["eject", "--pid", &p, "--func", "bar"],
        ));
        eject_w.push(ms(w));
        // The same operations through the library, in this process (no exec, no output).
        let t0 = Instant::now();
        install(Pid::from_raw(pid), &spec, &InstallOptions::default())
            .unwrap_or_else(|e| panic!("{e}"));
        lib_install.push(ms(t0.elapsed()));
        wait_next_iter(&mut t);
        let t0 = Instant::now();
        // Stopped as before (a sleeping thread is otherwise read without a
        // stop): the stop window is what this measures.
        let stopping = BacktraceOptions {
            always_stop: true,
            ..BacktraceOptions::default()
        };
        let bt = backtrace(Pid::from_raw(pid), &stopping).unwrap_or_else(|e| panic!("{e}"));
        lib_bt.push(ms(t0.elapsed()));
        bt_stop.extend(bt.threads.iter().map(|th| ms(th.stopped)));
        eject(Pid::from_raw(pid), &eject_bar).unwrap_or_else(|e| panic!("{e}"));
    }

    let mut gdb_w = Vec::new();
    let mut sample_gdb = String::new();
    for i in 0..GDB_RUNS {
        let mut c = Command::new("gdb");
        c.args(["-batch", "-p", &p, "-ex", "bt"])
            .env_remove("DEBUGINFOD_URLS");
        let (w, out) = time_cmd(&mut c);
        gdb_w.push(ms(w));
        if i == 0 {
            sample_gdb = out;
        }
    }
    t.assert_healthy();
    drop(t);

    let mut table = Table::new(&["command", "n", "median ms", "p90 ms", "max ms"]);
    let mut row = |what: &str, v: &[f64]| {
        table.row(vec![
            what.to_string(),
            v.len().to_string(),
            format!("{:.2}", median(v)),
            format!("{:.2}", quantile(v, 0.9)),
            format!("{:.2}", max(v)),
        ]);
    };
    row("argstash inject --pid P --func bar", &inject_w);
    row(
        "argstash inject ... (fresh process, creates arena)",
        &fresh_inject,
    );
    row("argstash bt --pid P (bar hooked)", &bt_w);
    row("argstash eject --pid P --func bar", &eject_w);
    row("argstash --version (exec + exit only)", &version_w);
    row("install() in-process (library)", &lib_install);
    row("backtrace() in-process (library)", &lib_bt);
    row("  of which one thread stopped (per thread)", &bt_stop);
    row("gdb -batch -p P -ex bt", &gdb_w);
    table.print();
    println!(
        "\n{CLI_RUNS} iterations of (--version, inject, bt, eject, library install, \
         library backtrace, library eject); gdb {GDB_RUNS} runs afterwards."
    );
    println!(
        "`argstash bt` showed bar's stashed argument ({}) in {stashed} of {CLI_RUNS} runs.",
        consts::SEED_BAR_ARG
    );
    println!(
        "\nsample `argstash bt --pid P` output:\n{}",
        indent(&sample_bt)
    );
    println!(
        "sample `gdb -batch -p P -ex bt` output:\n{}",
        indent(&sample_gdb)
    );
}

/// Waits until seed.c prints its next "iter" line (its current foo/bar call
/// returned), then 10 ms more so it is inside the next one (bar sleeps 50 ms).
fn wait_next_iter(t: &mut Target) {
    t.drain_lines();
    t.wait_for_line(REPLY, |l| l.starts_with("iter "));
    thread::sleep(Duration::from_millis(10));
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("    {l}\n")).collect()
}

/// Timed `bt --core` runs.
const CORE_RUNS: usize = 30;

/// Crashes crash.c (hooked `stash_me`, RLIMIT_CORE raised, cwd `dir`) and returns
/// its executable and core path; `None` (with a message) when core_pattern is not a
/// plain file name.
fn crash_for_core(dir: &Path) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    let pattern = pattern.trim();
    if pattern.is_empty() || pattern.contains(['|', '/', '%']) {
        println!("skipped: core_pattern {pattern:?} is not a plain file name in the cwd");
        return None;
    }
    let exe = build("crash", Variant::O2G);
    let mut t = Target::spawn_with_args(&exe, &[dir.to_str().expect("UTF-8 path")]);
    let limit = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: prlimit reads `limit` and writes nothing (old limit pointer null).
    let rc = unsafe { libc::prlimit(t.pid(), libc::RLIMIT_CORE, &limit, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
    let p = t.pid().to_string();
    time_cmd(&mut argstash_at(
        &argstash(),
        &["inject", "--pid", &p, "--func", "stash_me"],
    ));
    t.write_stdin("call\n");
    t.wait_for_line(REPLY, |l| l == "waiting");
    t.write_stdin("crash\n");
    t.wait_exit(REPLY).expect("crash.c exits");
    let core = [
        dir.join(pattern),
        dir.join(format!("{pattern}.{}", t.pid())),
    ]
    .into_iter()
    .find(|c| c.is_file())
    .expect("core file written");
    Some((exe, core))
}

fn bench_core() {
    println!("\n## 4. bt --core (crash.c, -O2 -g, stash_me hooked, SIGSEGV in a callee)\n");
    let bin = argstash();
    let dir = std::env::temp_dir().join(format!("argstash-bench-core-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench temp dir");
    let Some((exe, core)) = crash_for_core(&dir) else {
        let _ = std::fs::remove_dir_all(&dir);
        return;
    };
    let core_s = core.to_str().expect("UTF-8 path");
    let size = std::fs::metadata(&core).map_or(0, |m| m.len());
    println!("core: {} bytes", size);
    // Warm the page cache.
    let (_, sample) = time_cmd(&mut argstash_at(&bin, &["bt", "--core", core_s]));
    let (mut cli, mut lib, mut gdb) = (vec![], vec![], vec![]);
    for _ in 0..CORE_RUNS {
        cli.push(ms(time_cmd(&mut argstash_at(
            &bin,
            &["bt", "--core", core_s],
        ))
        .0));
        let t0 = Instant::now();
        let c = reader::core::CoreFile::open(&core, Default::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let bt = reader::core::backtrace_core(&c, &BacktraceOptions::default())
            .unwrap_or_else(|e| panic!("{e}"));
        lib.push(ms(t0.elapsed()));
        assert!(bt.backtrace.threads[0]
            .frames
            .iter()
            .any(|f| f.stash.is_some()));
    }
    let mut sample_gdb = String::new();
    for i in 0..GDB_RUNS {
        let mut c = Command::new("gdb");
        c.args(["-batch", "-c", core_s])
            .arg(&exe)
            .args(["-ex", "bt"])
            .env_remove("DEBUGINFOD_URLS");
        let (w, out) = time_cmd(&mut c);
        gdb.push(ms(w));
        if i == 0 {
            sample_gdb = out;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let mut table = Table::new(&["command", "n", "median ms", "p90 ms", "max ms"]);
    for (what, v) in [
        ("argstash bt --core CORE", &cli),
        ("CoreFile::open + backtrace_core (library)", &lib),
        ("gdb -batch -c CORE EXE -ex bt", &gdb),
    ] {
        table.row(vec![
            what.to_string(),
            v.len().to_string(),
            format!("{:.2}", median(v)),
            format!("{:.2}", quantile(v, 0.9)),
            format!("{:.2}", max(v)),
        ]);
    }
    table.print();
    println!(
        "\nsample `argstash bt --core CORE` output:\n{}",
        indent(&sample)
    );
    println!("sample gdb output:\n{}", indent(&sample_gdb));
}

/// The stop time `argstash bt` printed ("(stopped N us)") for the first thread.
fn printed_bt_stop_us(out: &str) -> Option<f64> {
    let rest = &out[out.find("(stopped ")? + "(stopped ".len()..];
    let mut words = rest.split_whitespace();
    let n: f64 = words.next()?.parse().ok()?;
    match words.next()?.trim_end_matches("):") {
        "us" => Some(n),
        "ms" => Some(n * 1e3),
        _ => None,
    }
}

const DWARF_COLD: usize = 15;
const DWARF_WARM: usize = 50;

fn bench_dwarf() {
    println!("\n## 4. bt with debug info (deepstack.c, -O2 -g, ~30 frames)\n");
    let bin = argstash();
    let exe = build("deepstack", Variant::new(Opt::O2g, true));
    let t = Target::spawn(&exe);
    let p = t.pid().to_string();
    let pid = t.pid();
    // Let the recursion reach its sleep, and warm the page cache once.
    thread::sleep(Duration::from_millis(100));
    let cache_off = |mut c: Command| {
        c.env("ARGSTASH_CACHE", "off");
        c
    };
    let (_, sample) = time_cmd(&mut cache_off(argstash_at(&bin, &["bt", "--pid", &p])));
    let frames = sample.lines().filter(|l| l.starts_with('#')).count();

    let mut cold_wall = Vec::new();
    let mut cold_stop = Vec::new();
    let mut nodebug_wall = Vec::new();
    for _ in 0..DWARF_COLD {
        // --always-stop: the sleeping thread's stop window is measured.
        let (w, out) = time_cmd(&mut cache_off(argstash_at(
            &bin,
            &["bt", "--pid", &p, "--always-stop"],
        )));
        cold_wall.push(ms(w));
        cold_stop.extend(printed_bt_stop_us(&out).map(|u| u / 1e3));
        // The same without any debug info found (an empty debug directory and
        // a stripped copy are not needed: --debug-dir only moves the separate
        // files; the fixture's own DWARF is still read).
        let (w, _) = time_cmd(&mut cache_off(argstash_at(
            &bin,
            &["bt", "--pid", &p, "--debug-dir", "/nonexistent"],
        )));
        nodebug_wall.push(ms(w));
    }

    let mut reader = ProcessReader::new(Pid::from_raw(pid));
    reader.set_dwarf_cache(injector::DwarfCache::with_disk(None));
    let stopping = BacktraceOptions {
        always_stop: true,
        ..BacktraceOptions::default()
    };
    let t0 = Instant::now();
    let bt = reader
        .backtrace(&stopping)
        .unwrap_or_else(|e| panic!("{e}"));
    let lib_cold = ms(t0.elapsed());
    let lib_cold_stop = ms(bt.threads[0].stopped);
    let mut warm_wall = Vec::new();
    let mut warm_stop = Vec::new();
    for _ in 0..DWARF_WARM {
        let t0 = Instant::now();
        let bt = reader
            .backtrace(&stopping)
            .unwrap_or_else(|e| panic!("{e}"));
        warm_wall.push(ms(t0.elapsed()));
        warm_stop.extend(bt.threads.iter().map(|th| ms(th.stopped)));
    }

    let mut gdb_w = Vec::new();
    let mut sample_gdb = String::new();
    for i in 0..GDB_RUNS {
        let mut c = Command::new("gdb");
        c.args(["-batch", "-p", &p, "-ex", "bt"])
            .env_remove("DEBUGINFOD_URLS");
        let (w, out) = time_cmd(&mut c);
        gdb_w.push(ms(w));
        if i == 0 {
            sample_gdb = out;
        }
    }
    drop(t);

    let mut table = Table::new(&["what", "n", "median ms", "p90 ms", "max ms"]);
    let mut row = |what: &str, v: &[f64]| {
        table.row(vec![
            what.to_string(),
            v.len().to_string(),
            format!("{:.2}", median(v)),
            format!("{:.2}", quantile(v, 0.9)),
            format!("{:.2}", max(v)),
        ]);
    };
    row(
        "argstash bt --pid P, cold (new process each run, ARGSTASH_CACHE=off)",
        &cold_wall,
    );
    row("  thread stopped (as printed)", &cold_stop);
    row(
        "argstash bt --pid P --debug-dir /nonexistent (no libc debug file)",
        &nodebug_wall,
    );
    row("ProcessReader::backtrace, first call (cold)", &[lib_cold]);
    row("  thread stopped", &[lib_cold_stop]);
    row(
        "ProcessReader::backtrace, warm (parsed debug info kept)",
        &warm_wall,
    );
    row("  thread stopped", &warm_stop);
    row("gdb -batch -p P -ex bt", &gdb_w);
    table.print();
    println!("\n`argstash bt` printed {frames} frame lines.");
    println!(
        "\nsample `argstash bt --pid P` output:\n{}",
        indent(&sample)
    );
    println!(
        "sample `gdb -batch -p P -ex bt` output:\n{}",
        indent(&sample_gdb)
    );
}

const DWARF_CACHE_RUNS: usize = 20;

/// Wall and CPU (user + system) milliseconds of one run of `cmd`, and its output.
fn time_cmd_cpu(cmd: &mut Command) -> (f64, f64, String) {
    let before = CpuSnapshot::now().own;
    let (w, out) = time_cmd(cmd);
    (ms(w), (CpuSnapshot::now().own - before) * 1e3, out)
}

/// The output of `argstash bt` without the thread's stop time.
fn without_stop_time(out: &str) -> String {
    out.lines()
        .map(|l| l.find(" (stopped ").map_or(l, |at| &l[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

fn bench_dwarf_cache() {
    println!("\n## 4b. bt cold with the on-disk DWARF cache (deepstack.c, libc6-dbg)\n");
    let libc_debug = Command::new("sh")
        .args(["-c", "ls /usr/lib/debug/.build-id/*/*.debug | head -1"])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty());
    if !libc_debug {
        println!(
            "skipped: no separate debug files under /usr/lib/debug (apt-get install libc6-dbg)"
        );
        return;
    }
    let bin = argstash();
    let baseline = std::env::var_os("ARGSTASH_BASELINE_BIN").map(std::path::PathBuf::from);
    let exe = build("deepstack", Variant::new(Opt::O2g, true));
    let t = Target::spawn(&exe);
    let p = t.pid().to_string();
    thread::sleep(Duration::from_millis(100));
    let dir =
        std::env::temp_dir().join(format!("argstash-bench-dwarf-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bt = |bin: &Path, cache: Option<&Path>, extra: &[&str]| {
        let mut c = argstash_at(bin, &["bt", "--pid", &p]);
        c.args(extra);
        match cache {
            Some(xdg) => c.env("XDG_CACHE_HOME", xdg).env_remove("ARGSTASH_CACHE"),
            None => c.env("ARGSTASH_CACHE", "off"),
        };
        c
    };
    // Warm the page cache (binary, libc's debug file) once.
    let (_, _, reference) = time_cmd_cpu(&mut bt(&bin, None, &[]));
    let reference = without_stop_time(&reference);

    let names = [
        "first (empty cache: inflate, index, write the entry)",
        "second (entry mapped)",
        "cache off (ARGSTASH_CACHE=off)",
        "no libc debug file (--debug-dir /nonexistent)",
        "baseline binary, cold (ARGSTASH_BASELINE_BIN)",
    ];
    let mut wall: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut mismatches = 0;
    for i in 0..DWARF_CACHE_RUNS {
        // Interleaved: each round runs every variant once.
        let xdg = dir.join(i.to_string());
        let runs: [(usize, Command); 4] = [
            (0, bt(&bin, Some(&xdg), &[])),
            (1, bt(&bin, Some(&xdg), &[])),
            (2, bt(&bin, None, &[])),
            (3, bt(&bin, None, &["--debug-dir", "/nonexistent"])),
        ];
        for (k, mut c) in runs {
            let (w, c_ms, out) = time_cmd_cpu(&mut c);
            wall[k].push(w);
            cpu[k].push(c_ms);
            if k < 3 && without_stop_time(&out) != reference {
                mismatches += 1;
            }
        }
        if let Some(base) = &baseline {
            let (w, c_ms, _) = time_cmd_cpu(&mut bt(base, None, &[]));
            wall[4].push(w);
            cpu[4].push(c_ms);
        }
        let _ = std::fs::remove_dir_all(&xdg);
    }
    drop(t);
    let _ = std::fs::remove_dir_all(&dir);

    let mut table = Table::new(&[
        "argstash bt --pid P",
        "n",
        "median ms",
        "p90 ms",
        "max ms",
        "CPU median ms",
    ]);
    for (k, name) in names.iter().enumerate() {
        if wall[k].is_empty() {
            continue;
        }
        table.row(vec![
            name.to_string(),
            wall[k].len().to_string(),
            format!("{:.2}", median(&wall[k])),
            format!("{:.2}", quantile(&wall[k], 0.9)),
            format!("{:.2}", max(&wall[k])),
            format!("{:.2}", median(&cpu[k])),
        ]);
    }
    table.print();
    let off = median(&wall[2]);
    println!(
        "\nmedian wall: second / first = {:.3}, second / cache off = {:.3}, first / cache off = {:.2}",
        median(&wall[1]) / median(&wall[0]),
        median(&wall[1]) / off,
        median(&wall[0]) / off,
    );
    if !wall[4].is_empty() {
        println!(
            "median wall: first / baseline = {:.2}, second / baseline = {:.3}",
            median(&wall[0]) / median(&wall[4]),
            median(&wall[1]) / median(&wall[4]),
        );
    }
    println!("outputs differing from the cache-off reference: {mismatches} (expected 0)");
    println!("\nsample output:\n{}", indent(&reference));
}
