//! `argstash record` next to perf and py-spy, in one run:
//! `cargo bench -p argstash-tests --bench record_bench`.
//!
//! 1. Attribution on the ground-truth fixtures (`tests/fixtures/profsplit.c`
//!    split, `tests/fixtures/python/profsplit.py`): what each profiler gives
//!    against what the fixture measured with its thread CPU clocks.
//! 2. Target slowdown at 99 Hz on the CPU-bound `profsplit spin` with 1, 8
//!    and 64 threads (work units a second against a run without a profiler),
//!    and on the Python fixture; the variants interleaved, best of `ROUNDS`.
//! 3. Cost per sample: how long a thread is held, how long it takes to stop,
//!    and argstash's CPU time per sample (its rusage).
//!
//! This is a measurement, not a test: nothing fails on a slow figure. perf and
//! py-spy are skipped with a message when absent. `docs/BENCHMARKS.md` records
//! a run and explains the differences.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use argstash_tests::{argstash, build, count, Variant};

/// Runs per slowdown variant (the best is kept: noise only slows things down).
const ROUNDS: usize = 2;
const SECS: &str = "3";

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("record_bench: a measurement; run it with cargo bench");
        return;
    }
    let exe = build("profsplit", Variant::O2G);
    let bin = argstash();
    let tmp = std::env::temp_dir().join(format!("argstash-record-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let lib = tmp.join("libcwork.so");
    let src = argstash_tests::fixtures_dir().join("python/c_work.c");
    argstash_tests::compile_c(&src, &lib, &["-O2", "-g", "-shared", "-fPIC"]);
    let script = argstash_tests::fixtures_dir().join("python/profsplit.py");
    let python = which("python3").map(|_| {
        let out = run(Command::new("python3").args(["-c", "import sys; print(sys.executable)"]));
        PathBuf::from(out.trim())
    });
    let has_perf = which("perf").is_some();
    let has_pyspy = which("py-spy").is_some();

    println!("== attribution (499 Hz, {SECS} s) ==");
    attribution_c(&bin, &exe, &tmp, has_perf);
    if let Some(py) = &python {
        attribution_py(&bin, py, &script, &lib, &tmp, has_pyspy);
    }

    println!(
        "\n== target slowdown at 99 Hz (work units/s against no profiler, best of {ROUNDS}) =="
    );
    for threads in ["1", "8", "64"] {
        let mut best: HashMap<&str, f64> = HashMap::new();
        let mut cost = Vec::new();
        for _ in 0..ROUNDS {
            let none = spin_rate(&run(Command::new(&exe).args(["spin", SECS, threads])));
            keep(&mut best, "none", none);
            // The fixture is ours, not argstash's child: argstash's rusage is its own.
            let txt = tmp.join("spin.txt");
            let fixture = Command::new(&exe)
                .args(["spin", SECS, threads])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn profsplit");
            let (out, cpu) = run_timed(
                Command::new(&bin)
                    .args(["record", "--rate", "99", "--duration", "60", "--pid"])
                    .arg(fixture.id().to_string())
                    .arg("-o")
                    .arg(&txt),
            );
            let spun = fixture.wait_with_output().expect("profsplit");
            keep(
                &mut best,
                "argstash",
                spin_rate(&String::from_utf8_lossy(&spun.stdout)),
            );
            cost.push((summary(&out.1), cpu));
            if has_perf {
                let data = tmp.join("perf.data");
                let out = perf_record(&data, "99", &exe, &["spin", SECS, threads]);
                keep(&mut best, "perf", spin_rate(&out));
            }
        }
        let none = best["none"];
        let mut line = format!("spin {threads:>2} threads:");
        for tool in ["argstash", "perf"] {
            if let Some(r) = best.get(tool) {
                line += &format!("  {tool} {:+.1}%", 100.0 * (r / none - 1.0));
            }
        }
        println!("{line}");
        for (s, cpu) in cost {
            let per = cpu.as_micros() as f64 / s.samples.max(1) as f64;
            println!(
                "    {} samples, held {} us/sample, {} us to stop, argstash CPU {per:.0} us/sample, {} lost",
                s.samples, s.held_us, s.latency_us, s.lost
            );
        }
    }
    if let Some(py) = &python {
        let mut best: HashMap<&str, f64> = HashMap::new();
        for _ in 0..ROUNDS {
            let cmd = |c: &mut Command| {
                c.arg(py).arg(&script).arg(&lib).arg(SECS);
            };
            let mut c = Command::new(py);
            c.arg(&script).arg(&lib).arg(SECS);
            keep(&mut best, "none", py_rate(&run(&mut c)));
            let mut c = Command::new(&bin);
            c.args(["record", "--rate", "99", "--python", "-o"])
                .arg(tmp.join("py.txt"))
                .arg("--");
            cmd(&mut c);
            keep(&mut best, "argstash", py_rate(&run(&mut c)));
            if has_pyspy {
                let mut c = Command::new("py-spy");
                c.args(["record", "--native", "--rate", "99", "-f", "raw", "-o"])
                    .arg(tmp.join("pyspy.txt"))
                    .arg("--");
                cmd(&mut c);
                keep(&mut best, "py-spy", py_rate(&run(&mut c)));
            }
        }
        let none = best["none"];
        let mut line = "python (1 thread):".to_string();
        for tool in ["argstash", "py-spy"] {
            if let Some(r) = best.get(tool) {
                line += &format!("  {tool} {:+.1}%", 100.0 * (r / none - 1.0));
            }
        }
        println!("{line}");
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

fn keep(best: &mut HashMap<&'static str, f64>, tool: &'static str, rate: f64) {
    let e = best.entry(tool).or_insert(0.0);
    *e = e.max(rate);
}

fn which(tool: &str) -> Option<()> {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .ok()
        .filter(|s| s.success())
        .map(drop)
}

/// `perf record -g --call-graph dwarf` at `rate` Hz of `exe args` into `data`;
/// the program's stdout.
fn perf_record(data: &Path, rate: &str, exe: &Path, args: &[&str]) -> String {
    run(Command::new("perf")
        .args([
            "record",
            "-F",
            rate,
            "-g",
            "--call-graph",
            "dwarf",
            "-q",
            "-o",
        ])
        .arg(data)
        .arg("--")
        .arg(exe)
        .args(args))
}

/// Runs a command; its stdout.
fn run(cmd: &mut Command) -> String {
    let out = cmd.stderr(Stdio::null()).output().expect("run");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command; (stdout, stderr) and the CPU time it used (user + system,
/// its own: wait4's rusage of that child).
#[allow(clippy::zombie_processes)] // reaped by wait4, which also gives its rusage
fn run_timed(cmd: &mut Command) -> ((String, String), Duration) {
    let dir = std::env::temp_dir();
    let (o, e) = (
        dir.join(format!("record-bench-{}.out", std::process::id())),
        dir.join(format!("record-bench-{}.err", std::process::id())),
    );
    let child = cmd
        .stdout(std::fs::File::create(&o).expect("stdout file"))
        .stderr(std::fs::File::create(&e).expect("stderr file"))
        .spawn()
        .expect("spawn");
    // SAFETY: wait4 writes the status and one rusage through pointers to live locals;
    // the pid is our unreaped child (Child never waits for it afterwards).
    let ru = unsafe {
        let mut status = 0;
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::wait4(child.id() as i32, &mut status, 0, &mut ru);
        ru
    };
    let micros = |t: libc::timeval| (t.tv_sec * 1_000_000 + t.tv_usec) as u64;
    let used = Duration::from_micros(micros(ru.ru_utime) + micros(ru.ru_stime));
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let out = (read(&o), read(&e));
    let _ = std::fs::remove_file(o);
    let _ = std::fs::remove_file(e);
    (out, used)
}

/// Work units a second from `spin units=N threads=T ns=NS`.
fn spin_rate(out: &str) -> f64 {
    let f = fields(out, "spin");
    f["units"] / f["ns"] * 1e9
}

/// Python work loops a second: (py_self + c) CPU ns are fixed per loop, so
/// the loops done in the fixed wall time are their sum over the loop's cost.
fn py_rate(out: &str) -> f64 {
    let f = fields(out, "pysplit");
    f["py_self"] + f["c"]
}

fn fields(out: &str, tag: &str) -> HashMap<String, f64> {
    out.lines()
        .find(|l| l.starts_with(tag))
        .unwrap_or_else(|| panic!("no {tag} line in {out}"))
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap_or(0.0)))
        .collect()
}

/// The figures of argstash's summary line.
struct Summary {
    samples: u64,
    held_us: u64,
    latency_us: u64,
    lost: u64,
}

fn summary(stderr: &str) -> Summary {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("argstash record:"))
        .unwrap_or_default();
    let w: Vec<&str> = line.split_whitespace().collect();
    let before = |word: &str| {
        w.iter()
            .position(|x| *x == word)
            .and_then(|i| w.get(i.wrapping_sub(1)))
            .and_then(|n| n.trim_start_matches('(').parse().ok())
            .unwrap_or(0)
    };
    Summary {
        samples: before("samples"),
        held_us: w
            .iter()
            .position(|x| *x == "held")
            .and_then(|i| w.get(i + 1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
        latency_us: w
            .iter()
            .position(|x| *x == "after")
            .and_then(|i| w.get(i + 1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
        lost: line
            .split("; ")
            .find(|p| p.contains("samples lost"))
            .and_then(|p| p.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
    }
}

/// Collapsed stacks (`a;b;c N`) of a file.
fn folded(text: &str) -> Vec<(Vec<String>, u64)> {
    text.lines()
        .filter_map(|l| {
            let (s, n) = l.rsplit_once(' ')?;
            Some((s.split(';').map(str::to_string).collect(), n.parse().ok()?))
        })
        .collect()
}

/// `perf script` output folded into collapsed stacks (root first).
fn fold_perf(script: &str) -> Vec<(Vec<String>, u64)> {
    let mut counts: HashMap<Vec<String>, u64> = HashMap::new();
    let mut stack: Vec<String> = Vec::new();
    let mut flush = |stack: &mut Vec<String>| {
        if !stack.is_empty() {
            stack.reverse();
            *counts.entry(std::mem::take(stack)).or_default() += 1;
        }
    };
    for line in script.lines() {
        if line.trim().is_empty() {
            flush(&mut stack);
        } else if line.starts_with(char::is_whitespace) {
            // "\t    5555 hot_a+0x12 (/path)"
            let mut parts = line.split_whitespace().skip(1);
            let sym = parts.next().unwrap_or("[unknown]");
            let sym = sym.split_once("+0x").map_or(sym, |(s, _)| s);
            stack.push(sym.to_string());
        }
    }
    flush(&mut stack);
    counts.into_iter().collect()
}

/// All samples, and those in the fixture's own `clock_gettime` calls.
fn total_and_clock(s: &[(Vec<String>, u64)]) -> (u64, u64) {
    let total = s.iter().map(|(_, n)| n).sum();
    (total, count(s, |f| f.contains("clock_gettime")))
}

fn share(a: u64, b: u64) -> String {
    match a + b {
        0 => "-".into(),
        t => format!("{:.1}%", 100.0 * a as f64 / t as f64),
    }
}

fn attribution_c(bin: &Path, exe: &Path, tmp: &Path, has_perf: bool) {
    let txt = tmp.join("split.txt");
    let out = run(Command::new(bin)
        .args(["record", "--rate", "499", "-o"])
        .arg(&txt)
        .arg("--")
        .arg(exe)
        .args(["split", SECS]));
    let f = fields(&out, "split");
    let (ta, tb) = (f["hot_a"], f["hot_b"]);
    println!(
        "C split: fixture measured hot_a {:.1}%",
        100.0 * ta / (ta + tb)
    );
    let s = folded(&std::fs::read_to_string(&txt).unwrap_or_default());
    let (a, b) = (count(&s, |f| f == "hot_a"), count(&s, |f| f == "hot_b"));
    let (total, clock) = total_and_clock(&s);
    println!(
        "  argstash: hot_a {} of hot_a+hot_b ({a}+{b} samples); clock_gettime {} of all {total}",
        share(a, b),
        share(clock, total - clock)
    );
    if has_perf {
        let data = tmp.join("split.perf");
        let out = perf_record(&data, "499", exe, &["split", SECS]);
        let f = fields(&out, "split");
        let script = run(Command::new("perf").args(["script", "-i"]).arg(&data));
        let s = fold_perf(&script);
        let (a, b) = (count(&s, |f| f == "hot_a"), count(&s, |f| f == "hot_b"));
        let (total, clock) = total_and_clock(&s);
        println!(
            "  perf -g --call-graph dwarf: hot_a {} ({a}+{b}; fixture this run {:.1}%); clock_gettime {} of all {total}",
            share(a, b),
            100.0 * f["hot_a"] / (f["hot_a"] + f["hot_b"]),
            share(clock, total - clock)
        );
    }
}

fn attribution_py(bin: &Path, py: &Path, script: &Path, lib: &Path, tmp: &Path, has_pyspy: bool) {
    let txt = tmp.join("py.txt");
    let out = run(Command::new(bin)
        .args(["record", "--rate", "499", "--python", "-o"])
        .arg(&txt)
        .arg("--")
        .arg(py)
        .arg(script)
        .arg(lib)
        .arg(SECS));
    let f = fields(&out, "pysplit");
    println!(
        "Python: fixture measured py_loop {:.1}% of py_loop + c_work",
        100.0 * f["py_self"] / (f["py_self"] + f["c"])
    );
    let s = folded(&std::fs::read_to_string(&txt).unwrap_or_default());
    let c = count(&s, |f| f == "c_work");
    let p = count(&s, |f| f == "[py] py_loop");
    let (total, clock) = total_and_clock(&s);
    println!(
        "  argstash --python: py_loop {} ({p}+{c}); clock_gettime {} of all {total}",
        share(p, c),
        share(clock, total - clock)
    );
    if has_pyspy {
        let raw = tmp.join("pyspy.txt");
        let out = run(Command::new("py-spy")
            .args(["record", "--native", "--rate", "499", "-f", "raw", "-o"])
            .arg(&raw)
            .arg("--")
            .arg(py)
            .arg(script)
            .arg(lib)
            .arg(SECS));
        let f = fields(&out, "pysplit");
        let s = folded(&std::fs::read_to_string(&raw).unwrap_or_default());
        let c = count(&s, |f| f.starts_with("c_work "));
        let p = count(&s, |f| f.starts_with("py_loop "));
        let total: u64 = s.iter().map(|(_, n)| n).sum();
        println!(
            "  py-spy --native: py_loop {} ({p}+{c}; fixture this run {:.1}%), {total} samples",
            share(p, c),
            100.0 * f["py_self"] / (f["py_self"] + f["c"])
        );
    }
}
