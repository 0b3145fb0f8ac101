//! What making hooked frames unwindable by other tools costs `inject` and `eject`.
//!
//! `cargo bench -p argstash-tests --bench unwind_bench`
//!
//! For a C++ target (throws.cpp: libgcc_s loaded, so the hook's `.eh_frame` is
//! registered with `__register_frame_info`) and a C target (seed.c: no libgcc_s),
//! each round starts a fresh process and runs `install()` then `eject()` of one
//! function twice: the first install creates the arena and loads the GDB JIT helper
//! (remote `dlopen`), the first eject unloads it again (`dlclose`). Printed per
//! case: the stop window, the time spent after the stop on unwind registration
//! (libgcc, perf map, perf jitdump, gdb symbol file, GDB JIT; only one borrowed thread
//! is held meanwhile), the part of it spent on the perf jitdump (file write, remote
//! open/mmap/close; munmap and removal at the last eject), and the whole call's wall
//! time. A measurement, not a test.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use argstash_tests::*;
use injector::{eject, install, EjectOptions, InstallOptions, Pid};
use reader::symbols::FuncSpec;

const ROUNDS: usize = 15;

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn build_throws() -> PathBuf {
    let src = fixtures_dir().join("throws.cpp");
    let out = fixture_cache_dir().join("throws-bench-O2");
    let status = Command::new("c++")
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("run c++");
    assert!(status.success(), "c++ failed");
    out
}

#[derive(Default)]
struct Figures {
    stop: Vec<f64>,
    unwind: Vec<f64>,
    jitdump: Vec<f64>,
    wall: Vec<f64>,
}

impl Figures {
    fn print(&mut self, what: &str) {
        println!(
            "{what:<44} stop {:>5.0} us   unwind registration {:>5.0} us (perf jitdump {:>4.0} us)   wall {:>5.0} us",
            median(&mut self.stop),
            median(&mut self.unwind),
            median(&mut self.jitdump),
            median(&mut self.wall)
        );
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("unwind_bench: run with `cargo bench` to measure");
        return;
    }
    let cases = [
        ("C++ (libgcc_s)", build_throws(), "relay"),
        ("C (no libgcc_s)", build("seed", Variant::default()), "bar"),
    ];
    for (label, exe, func) in cases {
        let mut inject_first = Figures::default();
        let mut eject_first = Figures::default();
        let mut inject_again = Figures::default();
        let mut eject_again = Figures::default();
        for _ in 0..ROUNDS {
            let t = Target::spawn(&exe);
            let spec = [FuncSpec::Name(func.into())];
            for (inj, ej) in [
                (&mut inject_first, &mut eject_first),
                (&mut inject_again, &mut eject_again),
            ] {
                let started = Instant::now();
                let r = install(Pid::from_raw(t.pid()), &spec, &InstallOptions::default())
                    .expect("install");
                inj.wall.push(us(started.elapsed()));
                inj.stop.push(us(r.stopped));
                inj.unwind.push(us(r.unwind.elapsed));
                inj.jitdump.push(us(r.unwind.perf_jitdump_elapsed));
                let started = Instant::now();
                let r = eject(Pid::from_raw(t.pid()), &EjectOptions::all()).expect("eject");
                ej.wall.push(us(started.elapsed()));
                ej.stop.push(us(r.stopped));
                ej.unwind.push(us(r.unwind.elapsed));
                ej.jitdump.push(us(r.unwind.perf_jitdump_elapsed));
            }
        }
        println!("{label}, median of {ROUNDS} fresh processes:");
        inject_first.print("  inject (new arena, loads the gdb helper)");
        eject_first.print("  eject (unloads the gdb helper)");
        inject_again.print("  inject again (arena exists)");
        eject_again.print("  eject again");
    }
}
