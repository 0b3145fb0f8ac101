//! `record --sampler kernel`: the samples are taken by the kernel
//! (`injector::KernelSampler`, one `perf_event_open` CPU-clock event per
//! thread, no thread stopped); this loop reads the rings every few
//! milliseconds, unwinds, and gives new threads an event of their own.

use std::time::{Duration, Instant};

use anyhow::Result;
use injector::{KernelSampler, KernelStats};

use super::hooks::Hooks;
use super::naming::Naming;
use super::profile::Profile;
use super::progress::Progress;
use super::spawn::Program;
use super::{chosen_threads, end_now, refresh_failed, End, RecordArgs, ThreadSelection};

/// How often the rings are read.
const DRAIN: Duration = Duration::from_millis(5);
/// How often `/proc/PID/task` is listed for new threads (and hooks and
/// mappings refreshed): a thread that lives less than this may go unsampled.
const FOLLOW: Duration = Duration::from_millis(20);

/// Reads the kernel's samples until the duration passes, Ctrl-C, or the process ends.
pub(super) fn sample_loop(
    a: &RecordArgs,
    kernel: &mut KernelSampler,
    hooks: &mut Hooks,
    naming: &mut Naming,
    profile: &mut Profile,
    program: &mut Option<&mut Program>,
    start: Instant,
) -> Result<End> {
    let mut last_follow = start;
    // The first pass lists the threads at once (the summary's threads seen).
    let mut listed = false;
    let mut progress = Progress::new();
    let mut threads = kernel.watched();
    // As the ptrace loop (priority.rs): reads the rings on time on a busy
    // machine, before a ring fills and the kernel drops samples.
    let _realtime = injector::Realtime::enter();
    let mut python_noted = false;
    let end = loop {
        if !python_noted && kernel.sampler().is_python() {
            python_noted = true;
            // Not asked for by name: ptrace takes over, for exact [py] frames.
            if a.sampler.is_none() {
                break End::PythonFound;
            }
            profile.sampler_why += "; a Python target: its Python frames read right after each sample ([py~]), --sampler ptrace reads them while each thread is stopped ([py])";
        }
        profile.elapsed = start.elapsed();
        take(a, kernel, naming, profile);
        if let Some(end) = end_now(a, start, program) {
            break end;
        }
        if !listed || last_follow.elapsed() >= FOLLOW {
            listed = true;
            last_follow = Instant::now();
            let refreshed = match hooks.poll() {
                Ok(_) => kernel.sampler_mut().refresh().map_err(anyhow::Error::from),
                Err(e) => Err(e),
            };
            if let Err(e) = refreshed {
                break refresh_failed(e, kernel.sampler().pid(), program)?;
            }
            // Only the threads chosen keep an event (the others' are closed).
            let tids = match chosen_threads(a, kernel.sampler(), profile)? {
                Ok(chosen) => chosen,
                Err(end) => break end,
            };
            // The rings of exited threads are read before they are closed.
            take(a, kernel, naming, profile);
            if let Err(e) = kernel.follow(&tids) {
                let note = format!("a thread could not be sampled: {e}");
                if !profile.notes.contains(&note) {
                    profile.notes.push(note);
                }
            }
            threads = threads.max(kernel.watched());
        }
        progress.update(
            profile.samples(),
            profile.lost_total() + kernel.stats.lost,
            threads,
            start.elapsed(),
        );
        // A Python target's rings wake this loop at each sample, so that its
        // Python frames are read soon after (KernelSampler::wait).
        kernel.wait(DRAIN);
    };
    take(a, kernel, naming, profile);
    profile.elapsed = start.elapsed();
    progress.finish();
    account(&kernel.stats, profile);
    if let (End::ProcessExited, Some(p)) = (&end, program.as_deref_mut()) {
        std::thread::sleep(Duration::from_millis(20));
        if let Some(how) = p.exited() {
            return Ok(End::ProgramExited(how.to_string()));
        }
    }
    Ok(end)
}

/// Unwinds the samples in the rings into the profile.
fn take(a: &RecordArgs, kernel: &mut KernelSampler, naming: &mut Naming, profile: &mut Profile) {
    for record in kernel.drain() {
        let tid = record.tid();
        if let ThreadSelection::Only(only) = &a.threads {
            if !only.contains(&tid.as_raw()) {
                continue;
            }
        }
        let Some(mut s) = kernel.unwind(&record, false) else {
            continue;
        };
        naming.name_from_debug(&mut s, |pc| kernel.sampler().debug_name(pc));
        // A hooked function seen for the first time: its parameter names come
        // from the same sample unwound with DWARF.
        if naming.needs_names(&s) {
            if let Some(annotated) = kernel.unwind(&record, true) {
                naming.learn(&annotated);
            }
        }
        let name = match profile.threads.contains_key(&tid.as_raw()) {
            true => String::new(),
            false => {
                injector::process::read_task_comm(kernel.sampler().pid().as_raw(), tid.as_raw())
                    .unwrap_or_default()
            }
        };
        let stack = naming.stack(&s);
        profile.add_timed(tid.as_raw(), &name, stack, Duration::ZERO, Duration::ZERO);
        profile.label_last(tid.as_raw(), naming.sample_labels(&s));
    }
}

/// The kernel's counts in the profile's lost samples and notes.
fn account(stats: &KernelStats, profile: &mut Profile) {
    profile.rounds = stats.samples;
    profile.lose("dropped by the kernel, ring buffer full", stats.lost);
    profile.lose("no user registers", stats.no_user_regs);
    profile.lose("malformed", stats.malformed);
    if stats.throttled > 0 {
        profile.notes.push(format!(
            "the kernel throttled the sampling {} times (kernel.perf_cpu_time_max_percent): fewer samples than asked",
            stats.throttled
        ));
    }
    if stats.python_after + stats.python_moved > 0 {
        profile.notes.push(format!(
            "Python frames ([py~]) were read right after each kernel sample, while the thread ran on: {} samples had Python frames consistent with their copied stack, {} had moved on and show native frames only (--sampler ptrace reads them exactly, [py])",
            stats.python_after, stats.python_moved
        ));
    }
    if stats.beyond_copy > 0 {
        profile.notes.push(format!(
            "{} samples had stacks deeper than the kernel's {} KiB copy: their outer frames are missing (--sampler ptrace copies up to 256 KiB)",
            stats.beyond_copy,
            injector::KERNEL_STACK_COPY / 1024
        ));
    }
}
