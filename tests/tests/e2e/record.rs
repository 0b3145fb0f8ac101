//! End-to-end: `argstash record`, the sampling profiler. The SVG is opened in
//! headless Chromium; every bad input of the command is refused or survived as
//! documented. Its accuracy against ground truth is the `accuracy` test binary.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use argstash_tests::*;
use serde_json::Value;

/// A file under the temp dir named after this process and `name`.
fn temp(name: &str) -> PathBuf {
    temp_file("record", name)
}

/// Renders `svg` in headless Chromium; the DOM after load (scripts ran) and a screenshot.
fn render(svg: &Path) -> Option<(String, PathBuf)> {
    let chromium = ["chromium", "chromium-browser"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })?;
    let profile = temp("chromium-profile");
    let base = |cmd: &mut Command| {
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()));
    };
    let url = format!("file://{}", svg.display());
    let mut dom = Command::new(chromium);
    base(&mut dom);
    dom.args(["--virtual-time-budget=2000", "--dump-dom", &url]);
    let dom = run_command(&mut dom, Duration::from_secs(60));
    let shot = temp("flame.png");
    let mut png = Command::new(chromium);
    base(&mut png);
    png.arg(format!("--screenshot={}", shot.display()))
        .args(["--window-size=1200,900", &url]);
    run_command(&mut png, Duration::from_secs(60));
    let _ = fs::remove_dir_all(&profile);
    Some((text(&dom.stdout), shot))
}

#[test]
fn svg_flame_graph_renders_in_a_browser_and_json_is_speedscope() {
    let svg = temp("flame.svg");
    let json = temp("flame.json");
    let exe = profsplit();
    for out in [&svg, &json] {
        record_ok(&[
            "--rate",
            "499",
            "-o",
            out.to_str().unwrap(),
            "--",
            exe.to_str().unwrap(),
            "split",
            "1",
        ]);
    }
    // speedscope: frames shared, each profile's samples index them.
    let doc: Value = serde_json::from_str(&fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(
        doc["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );
    let frames = doc["shared"]["frames"].as_array().unwrap();
    assert!(frames.iter().any(|f| f["name"] == "hot_a"), "{frames:?}");
    let profile = &doc["profiles"][0];
    assert_eq!(profile["type"], "sampled");
    let samples = profile["samples"].as_array().unwrap();
    assert_eq!(samples.len(), profile["weights"].as_array().unwrap().len());
    assert!(samples
        .iter()
        .flat_map(|s| s.as_array().unwrap())
        .all(|i| (i.as_u64().unwrap() as usize) < frames.len()));
    let static_svg = fs::read_to_string(&svg).unwrap();
    let Some((dom, shot)) = render(&svg) else {
        eprintln!("skipped the browser check: no chromium (scripts/setup.sh installs it)");
        return;
    };
    // After the flame graph's script ran: frames with their names and sample counts.
    assert!(dom.contains("<svg"), "no SVG document in the DOM:\n{dom}");
    // The script ran: it placed the labels (the file has them where inferno guessed).
    assert_ne!(
        dom.trim(),
        static_svg.trim(),
        "the page's script did not run"
    );
    for name in ["hot_a", "hot_b", "split_worker"] {
        assert!(
            dom.contains(&format!("<title>{name} (")),
            "no frame {name} in the rendered DOM"
        );
        // inferno's script fits the labels to the frames' widths when the page loads.
        let label = |doc: &str| {
            doc.contains(&format!(">{name}</text>")) || doc.contains(&format!(">{name} </text>"))
        };
        assert!(
            label(&dom),
            "frame {name} shows no label in the rendered DOM"
        );
    }
    let png = fs::read(&shot).unwrap_or_default();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "no screenshot of the flame graph ({} bytes)",
        png.len()
    );
    for f in [svg, json, shot] {
        let _ = fs::remove_file(f);
    }
}

#[test]
fn a_process_that_exits_mid_recording_leaves_the_profile_so_far() {
    let exe = profsplit();
    // Built before the target starts, so that its seconds go to the recording.
    argstash();
    let t = Target::spawn_with_args(&exe, &["spin", "3"]);
    let out_file = temp("exits.txt");
    let started = Instant::now();
    // This test is about the end, not about where the time goes: --idle keeps
    // every sample a round takes. An on-CPU profile keeps only the samples that
    // find the worker running, and beside other tests' real-time recordings it
    // barely runs (4 kept in 2.6 s, 368 left out as waiting for a CPU and 1902
    // lost behind schedule, with two 5000 Hz recordings of a 4-thread spinner
    // beside it): the right profile of a starved process, not a failure.
    let out = record_ok(&[
        "--pid",
        &t.pid().to_string(),
        "--idle",
        "--rate",
        "499",
        "--duration",
        "60",
        "-o",
        out_file.to_str().unwrap(),
    ]);
    assert!(started.elapsed() < Duration::from_secs(20));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("process {} exited after", t.pid()))
            && stderr.contains("the profile holds the samples taken until then"),
        "{stderr}"
    );
    let stacks = collapsed(&out_file);
    // The samples taken until the exit, kept: all those the summary counts.
    assert!(
        count(&stacks, |f| f == "hot_a") >= 5,
        "{stacks:?}\n{stderr}"
    );
    assert_eq!(
        stacks.iter().map(|(_, n)| *n).sum::<u64>(),
        summary_number(&stderr, "samples"),
        "{stacks:?}\n{stderr}"
    );
    let _ = fs::remove_file(out_file);
}

#[test]
fn unwritable_output_is_refused_before_the_target_is_touched() {
    let mut t = Target::start("seed", Variant::O2G);
    let pid = t.pid().to_string();
    let started = Instant::now();
    refused(
        &mut t,
        &[
            "record",
            "--pid",
            &pid,
            "--func",
            "bar",
            "-o",
            "/nonexistent-dir/x.svg",
        ],
        1,
        "cannot write the profile to /nonexistent-dir/x.svg",
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(list_hooks(t.pid()).is_empty());
}

#[test]
fn bad_rates_and_extensions_are_usage_errors() {
    let mut t = Target::start("seed", Variant::O2G);
    let pid = t.pid().to_string();
    let ok = temp("never.svg");
    let o = ok.to_str().unwrap();
    for (args, needle) in [
        (vec!["--rate", "0"], "0 Hz is out of range: give 1..=10000"),
        (vec!["--rate", "10001"], "10001 Hz is out of range"),
    ] {
        let mut a = vec!["record", "--pid", &pid, "-o", o];
        a.extend(args);
        refused(&mut t, &a, 2, needle);
    }
    for (file, needle) in [
        ("x.png", "unknown output extension .png: use .svg (flame graph), .json (speedscope), .txt (collapsed stacks), .pb.gz (pprof)"),
        ("x.pb", "pprof profiles are written gzip-compressed"),
        ("noext", "unknown output extension"),
    ] {
        refused(&mut t, &["record", "--pid", &pid, "-o", file], 2, needle);
    }
    assert!(!ok.exists());
}

#[test]
fn a_crowded_target_costs_the_same_per_sample_and_says_how_many_threads_were_sampled() {
    let exe = profsplit();
    let t = Target::spawn_with_args(&exe, &["idle", "60", "500"]);
    assert!(wait_until(Duration::from_secs(10), || t.tids().len() >= 500));
    let out_file = temp("crowded.txt");
    let out = record_ok(&[
        "--pid",
        &t.pid().to_string(),
        "--idle",
        "--duration",
        "3",
        "-o",
        out_file.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(summary_number(&stderr, "seen,"), 500, "{stderr}");
    // Rounds that cannot reach every thread start where the last one stopped:
    // every thread gets sampled.
    assert_eq!(summary_number(&stderr, "threads"), 500, "{stderr}");
    assert!(
        stderr.contains("over the time budget of a round"),
        "{stderr}"
    );
    // Each sample holds one thread only: the hold does not grow with the count.
    let held = summary_number(&stderr, "us");
    assert!(held < 3000, "threads held {held} us per sample: {stderr}");
    let _ = fs::remove_file(out_file);
}

#[test]
fn ctrl_c_twice_ends_at_once_and_leaves_the_target_as_found() {
    let mut t = Target::start("seed", Variant::O2G);
    let out_file = temp("ctrlc.txt");
    let pid = t.pid().to_string();
    let mut rec = Background::argstash(&[
        "record",
        "--pid",
        &pid,
        "--idle",
        "--func",
        "bar",
        "-o",
        out_file.to_str().unwrap(),
    ]);
    assert!(
        wait_until(Duration::from_secs(20), || !list_hooks(t.pid()).is_empty()),
        "record never hooked bar"
    );
    std::thread::sleep(Duration::from_millis(300));
    let interrupted = Instant::now();
    for _ in 0..2 {
        // SAFETY: kill takes two integers.
        unsafe {
            libc::kill(rec.pid(), libc::SIGINT);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let status = rec.wait_timeout(Duration::from_secs(10));
    assert!(status.is_some(), "record did not end after Ctrl-C twice");
    assert!(interrupted.elapsed() < Duration::from_secs(5));
    let (out, _) = rec.finish(Duration::from_secs(1));
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Two SIGINTs in a row may reach it as one (standard signals do not queue), or
    // the first may have ended the recording already: the note says when it saw two.
    assert!(!collapsed(&out_file).is_empty());
    // Its own hook ejected, nothing traced or stopped, still printing.
    let hooks = list_hooks(t.pid());
    assert!(hooks.iter().all(|h| h["state"] == "ejected"), "{hooks:?}");
    assert_eq!(tracer_pid(t.pid()), None);
    t.drain_lines();
    t.expect_line(E2E_TIMEOUT);
    t.assert_healthy();
    let _ = fs::remove_file(out_file);
}

/// The fixture that runs a command under a seccomp filter failing
/// perf_event_open with EPERM (tests/fixtures/noperf.c).
fn noperf() -> PathBuf {
    build("noperf", Variant::O2G)
}

#[test]
fn the_kernel_sampler_is_the_default_and_a_seccomp_refusal_falls_back_with_a_note() {
    let exe = profsplit();
    let out_file = temp("noperf.txt");
    let record = |wrap: bool, sampler: &[&str]| {
        let mut cmd = match wrap {
            true => {
                let mut c = Command::new(noperf());
                c.arg(argstash());
                c
            }
            false => Command::new(argstash()),
        };
        cmd.arg("record")
            .args(sampler)
            .args(["--rate", "499", "-o", out_file.to_str().unwrap(), "--"])
            .arg(&exe)
            .args(["split", "1"]);
        let out = run_command(&mut cmd, RUN_TIMEOUT);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            count(&collapsed(&out_file), |f| f == "hot_a") > 0,
            "{stderr}"
        );
        stderr
    };
    // Where the kernel allows it, `record` alone samples through the kernel,
    // and the summary says why; `--sampler ptrace` still picks ptrace.
    let stderr = record(false, &[]);
    assert!(
        stderr.contains("by the kernel (perf_event_open) sampler (the default; 499 Hz asked"),
        "{stderr}"
    );
    assert!(!stderr.contains("sampled with ptrace instead"), "{stderr}");
    let stderr = record(false, &["--sampler", "ptrace"]);
    assert!(
        stderr.contains("by the ptrace sampler (asked with --sampler ptrace;"),
        "{stderr}"
    );
    // Under a seccomp filter that fails perf_event_open, by default or asked:
    // the kernel's refusal, its cause, and what ran instead.
    for sampler in [&[][..], &["--sampler", "kernel"][..]] {
        let stderr = record(true, sampler);
        assert!(
            stderr.contains("the kernel sampler cannot run (the kernel refused to sample thread")
                && stderr.contains("Operation not permitted")
                && stderr.contains("argstash runs under a seccomp filter")
                && stderr.contains("sampled with ptrace instead"),
            "{sampler:?}: {stderr}"
        );
        assert!(
            stderr
                .contains("by the ptrace sampler (perf_event_open refused under a seccomp filter;"),
            "{sampler:?}: {stderr}"
        );
    }
    let _ = fs::remove_file(out_file);
}

#[test]
fn kernel_sampler_reports_the_samples_the_kernel_dropped() {
    let exe = profsplit();
    let out_file = temp("kernel-lost.txt");
    // A ring holds a few dozen 32 KiB stack copies: argstash, stopped for 300 ms
    // while its target runs on, cannot read them in time, so the kernel drops
    // samples and says how many. (Left to run freely, a fast reader on a quiet
    // machine kept up even at 10000 Hz.)
    let marker = out_file.to_string_lossy().into_owned();
    let pauser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(600));
        let pid = recorder_pid(&marker).expect("the recording argstash is running");
        // SAFETY: kill(2) on a process this test started; no memory is involved.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
    });
    let out = record_ok(&[
        "--sampler",
        "kernel",
        "--rate",
        "999",
        "-o",
        out_file.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
        "split",
        "2",
    ]);
    pauser.join().expect("the pausing thread");
    let stderr = text(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("argstash record:"))
        .unwrap_or_else(|| panic!("no summary: {stderr}"));
    assert!(
        line.contains("by the kernel (perf_event_open) sampler"),
        "{line}"
    );
    // "N samples lost (M dropped by the kernel, ring buffer full...)": M > 0.
    let dropped = line
        .split(['(', ','])
        .find_map(|p| {
            let (n, _) = p.trim().split_once(" dropped by the kernel")?;
            n.parse::<u64>().ok()
        })
        .unwrap_or(0);
    assert!(dropped > 0, "{line}");
    assert!(summary_number(&stderr, "samples") > 0, "{line}");
    let stacks = collapsed(&out_file);
    assert!(count(&stacks, |f| f == "hot_a") > 0, "{stacks:?}");
    let _ = fs::remove_file(out_file);
}

/// The pid of the `argstash record` whose command line names `marker` (its output file).
fn recorder_pid(marker: &str) -> Option<i32> {
    fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let is_record = args.contains(&&b"record"[..]);
        let names = args.contains(&marker.as_bytes());
        (is_record && names).then_some(pid)
    })
}

#[test]
fn kernel_sampler_on_a_running_process_that_exits_keeps_the_samples_and_its_threads() {
    let exe = profsplit();
    argstash();
    // Two workers, started before the recording: both get an event of their own.
    let t = Target::spawn_with_args(&exe, &["split", "2", "2"]);
    let out_file = temp("kernel-exits.txt");
    let out = record_ok(&[
        "--pid",
        &t.pid().to_string(),
        "--sampler",
        "kernel",
        "--rate",
        "499",
        "--duration",
        "60",
        "-o",
        out_file.to_str().unwrap(),
    ]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("process {} exited after", t.pid()))
            && stderr.contains("by the kernel (perf_event_open) sampler"),
        "{stderr}"
    );
    // Kernel samples of both workers, with their frames unwound from the copy.
    assert!(summary_number(&stderr, "threads") >= 2, "{stderr}");
    let stacks = collapsed(&out_file);
    assert!(
        count(&stacks, |f| f == "hot_a") > 0
            && stacks
                .iter()
                .filter(|(s, _)| s.iter().any(|f| f == "hot_a"))
                .all(|(s, _)| s.iter().any(|f| f == "split_worker")),
        "{stacks:?}"
    );
    let _ = fs::remove_file(out_file);
}

#[test]
fn kernel_sampler_leaves_idle_profiles_and_python_targets_to_ptrace_and_says_so() {
    // --idle: a CPU clock never samples a sleeping thread.
    let exe = profsplit();
    let out_file = temp("kernel-idle.txt");
    let out = record_ok(&[
        "--sampler",
        "kernel",
        "--idle",
        "-o",
        out_file.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
        "split",
        "1",
    ]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("--idle records sleeping threads, which the kernel sampler (CPU time only) never samples: sampled with ptrace instead")
            && stderr.contains("by the ptrace sampler"),
        "{stderr}"
    );
    assert!(
        count(&collapsed(&out_file), |f| f == "hot_a") > 0,
        "{stderr}"
    );
    // A CPython whose frames argstash reads (3.11 here): its Python frames are
    // not in the kernel's stack copy. --python falls back to ptrace; without
    // it the profile is of native frames, and a note says so.
    let py = Command::new("python3")
        .args(["-c", "import sys; print(sys.version_info[:2] == (3, 11))"])
        .output()
        .map(|o| text(&o.stdout).trim() == "True")
        .unwrap_or(false);
    if !py {
        eprintln!("skipped the Python half: no CPython 3.11 as python3");
        return;
    }
    let script = "import time\ndef spin():\n    t = time.time()\n    while time.time() - t < 1.5: pass\nspin()";
    let out = record_ok(&[
        "--sampler",
        "kernel",
        "--python",
        "-o",
        out_file.to_str().unwrap(),
        "--",
        "python3",
        "-c",
        script,
    ]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("--python pairs Python frames through a hook, read while each thread is stopped: sampled with ptrace instead")
            && stderr.contains("by the ptrace sampler"),
        "{stderr}"
    );
    // Asked for by name, the kernel sampler reads the Python frames right after
    // each sample, marks them [py~] and says so.
    let out = record_ok(&[
        "--sampler",
        "kernel",
        "-o",
        out_file.to_str().unwrap(),
        "--",
        "python3",
        "-c",
        script,
    ]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("by the kernel (perf_event_open) sampler")
            && stderr.contains(
                "a Python target: its Python frames read right after each sample ([py~])"
            )
            && stderr.contains("samples had Python frames consistent with their copied stack"),
        "{stderr}"
    );
    let stacks = collapsed(&out_file);
    assert!(
        count(&stacks, |f| f == "[py~] spin") > 0
            && count(&stacks, |f| f.starts_with("[py] ")) == 0,
        "{stacks:?}\n{stderr}"
    );
    for (s, _) in stacks
        .iter()
        .filter(|(s, _)| s.iter().any(|f| f == "[py~] spin"))
    {
        let eval = s.iter().position(|f| f.starts_with("_PyEval_EvalFrame"));
        let spin = s.iter().position(|f| f == "[py~] spin");
        assert!(eval < spin, "{s:?}");
    }
    // By default a Python target keeps its [py] frames: ptrace samples it
    // (from the start, or from when its interpreter is found), and says so.
    let out = record_ok(&[
        "-o",
        out_file.to_str().unwrap(),
        "--",
        "python3",
        "-c",
        script,
    ]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("by the ptrace sampler (a Python target;")
            && (stderr.contains("only the ptrace sampler reads exactly: it took over after")
                || stderr
                    .contains("sampled with ptrace, which reads its Python frames exactly ([py])")),
        "{stderr}"
    );
    let stacks = collapsed(&out_file);
    assert!(
        count(&stacks, |f| f.starts_with("[py]")) > 0,
        "{stacks:?}\n{stderr}"
    );
    let _ = fs::remove_file(out_file);
}

/// A program whose hot loop runs under 96 frames of 1 KiB each (about 100 KiB
/// of stack), deeper than the kernel's 32 KiB stack copy, for `argv[1]` seconds.
const DEEP: &str = r#"
#include <stdlib.h>
#include <time.h>
static volatile unsigned long sink;
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
__attribute__((noinline)) void deep_leaf(double end) {
    while (now() < end)
        for (int i = 0; i < 100000; i++) sink += i;
}
__attribute__((noinline)) void descend(int n, double end) {
    volatile char pad[1024];
    pad[0] = (char)n;
    if (n > 0) descend(n - 1, end);
    else deep_leaf(end);
    sink += pad[0];
}
int main(int argc, char **argv) {
    descend(96, now() + atof(argv[1]));
    return 0;
}
"#;

#[test]
fn a_stack_deeper_than_the_kernels_copy_is_cut_at_the_copy_and_said() {
    let exe = build_source(
        "deep_stack",
        DEEP,
        &["-O1", "-g", "-fno-omit-frame-pointer"],
    );
    let out_file = temp("deep.txt");
    let run = |sampler: &str| {
        let out = record_ok(&[
            "--sampler",
            sampler,
            "--rate",
            "199",
            "-o",
            out_file.to_str().unwrap(),
            "--",
            exe.to_str().unwrap(),
            "1.5",
        ]);
        (text(&out.stderr), collapsed(&out_file))
    };
    // The kernel sampler: the hot loop and the frames in the copy, not main;
    // the summary's notes say how many samples were cut and what reaches further.
    let (stderr, stacks) = run("kernel");
    assert!(
        stderr.contains("samples had stacks deeper than the kernel's 32 KiB copy: their outer frames are missing (--sampler ptrace copies up to 256 KiB)"),
        "{stderr}"
    );
    let leaf: Vec<_> = stacks
        .iter()
        .filter(|(s, _)| s.iter().any(|f| f == "deep_leaf"))
        .collect();
    assert!(!leaf.is_empty(), "{stacks:?}\n{stderr}");
    for (s, _) in &leaf {
        let depth = s.iter().filter(|f| *f == "descend").count();
        assert!(
            (10..96).contains(&depth) && !s.iter().any(|f| f == "main"),
            "{depth} descend frames: {s:?}"
        );
    }
    // The ptrace sampler copies the whole stack: main is reached.
    let (stderr, stacks) = run("ptrace");
    assert!(!stderr.contains("deeper than the kernel's"), "{stderr}");
    assert!(
        stacks
            .iter()
            .any(|(s, _)| s.iter().any(|f| f == "deep_leaf")
                && s.iter().any(|f| f == "main")
                && s.iter().filter(|f| *f == "descend").count() == 97),
        "{stacks:?}\n{stderr}"
    );
    let _ = fs::remove_file(out_file);
}

/// A program that for `argv[1]` seconds starts a thread that spins 100 ms in
/// `short_lived` and exits, one after another.
const COME_AND_GO: &str = r#"
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
static volatile unsigned long sink;
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
__attribute__((noinline)) static void *short_lived(void *arg) {
    double end = now() + 0.1;
    while (now() < end)
        for (int i = 0; i < 10000; i++) sink += i;
    return arg;
}
int main(int argc, char **argv) {
    double end = now() + atof(argv[1]);
    while (now() < end) {
        pthread_t t;
        pthread_create(&t, 0, short_lived, 0);
        pthread_join(t, 0);
    }
    return 0;
}
"#;

#[test]
fn kernel_sampler_follows_threads_that_exit_between_samples() {
    let exe = build_source("come_and_go", COME_AND_GO, &["-O1", "-g", "-pthread"]);
    let out_file = temp("come-and-go.txt");
    let out = record_ok(&[
        "--sampler",
        "kernel",
        "--rate",
        "499",
        "-o",
        out_file.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
        "2",
    ]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("by the kernel (perf_event_open) sampler")
            && stderr.contains("the program exited with code 0"),
        "{stderr}"
    );
    // About 20 threads lived 100 ms each: each is given an event at the next
    // listing of the threads (every 20 ms) and sampled until it exits; on a
    // busy machine fewer of them get a CPU, so the bounds are loose.
    let sampled = summary_number(&stderr, "threads");
    assert!(sampled >= 5, "{sampled} threads sampled: {stderr}");
    assert!(!stderr.contains("could not be sampled"), "{stderr}");
    let stacks = collapsed(&out_file);
    let n = count(&stacks, |f| f == "short_lived");
    assert!(n >= 30, "{n} samples in short_lived: {stacks:?}\n{stderr}");
    let _ = fs::remove_file(out_file);
}
