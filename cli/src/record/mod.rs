//! `argstash record`: a sampling profiler over the warm reader. Every selected
//! thread is sampled `--rate` times a second (the threads of a round asked to
//! stop together, each held only for the copy of its registers and stack), hooks named with `--func` or
//! `--python` are installed first and ejected at the end (only those this run
//! installed), and the profile is written in the format `-o`'s extension names.

mod collapsed;
mod format;
mod hooks;
mod kernel;
mod naming;
mod pprof;
mod priority;
mod profile;
mod progress;
mod signals;
mod spawn;
mod speedscope;
mod svg;

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use injector::{
    DebugSearch, DwarfCache, KernelError, KernelSampler, Lost, Pid, SampleOptions, Sampler, Tid,
};

use self::format::Output;
use self::hooks::Hooks;
use self::naming::Naming;
use self::profile::Profile;
use self::progress::Progress;
use self::spawn::Program;

/// The highest rate accepted, per thread.
pub const MAX_RATE: u32 = 10_000;

/// `argstash record` arguments.
#[derive(Args)]
pub struct RecordArgs {
    /// Record this running process (or give the program to start after --).
    #[arg(long, required_unless_present = "command", conflicts_with = "command")]
    pid: Option<Pid>,
    /// Stop after this many seconds (default: at Ctrl-C or when the program exits).
    #[arg(long, value_name = "SECS", value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Samples per second, per thread (1..=10000).
    #[arg(long, value_name = "HZ", default_value_t = 99, value_parser = parse_rate)]
    rate: u32,
    /// Hook this function first (NAME, MODULE!NAME, 0xADDR, optionally with a
    /// parameter list), so its frames carry its arguments. Repeatable.
    #[arg(long = "func", value_name = "FUNC")]
    funcs: Vec<String>,
    /// Hook CPython's frame evaluator first, so Python frames are placed exactly.
    #[arg(long)]
    python: bool,
    /// Sample sleeping threads too (wall-clock time); by default only threads on
    /// the CPU are stopped and counted.
    #[arg(long)]
    idle: bool,
    /// Put a hooked frame's arguments into its name (`apply_entry(account=1003, ...)`).
    #[arg(long)]
    with_args: bool,
    /// Only these arguments in names (parameter or register names); implies --with-args.
    #[arg(long = "args", value_name = "NAME[,NAME]", value_delimiter = ',')]
    args: Vec<String>,
    /// Threads to sample: `all` or a comma-separated list of thread ids.
    #[arg(long, value_name = "all|TID,...", default_value = "all", value_parser = parse_threads)]
    threads: ThreadSelection,
    /// Output file; its extension chooses the format: .svg, .json (speedscope),
    /// .txt (collapsed), .pb.gz (pprof). Repeatable: one recording, several files.
    #[arg(short = 'o', long = "output", value_name = "FILE", required = true, value_parser = format::parse_output)]
    outputs: Vec<Output>,
    /// Who takes the samples: `kernel` (the default) has the kernel copy each
    /// thread's stack (perf_event_open, no thread stopped; falls back to ptrace
    /// with a note where it cannot serve, and for Python targets, whose frames
    /// only ptrace reads exactly); `ptrace` stops each thread for a moment and
    /// copies its stack and Python frames (`[py]`). `--sampler kernel` on a
    /// Python target reads its Python frames right after each sample (`[py~]`).
    #[arg(long, value_enum)]
    sampler: Option<SamplerKind>,
    /// Look for separate debug files under DIR instead of /usr/lib/debug. Repeatable.
    #[arg(long = "debug-dir", value_name = "DIR")]
    debug_dirs: Vec<std::path::PathBuf>,
    /// The program to start and record (after --).
    #[arg(last = true, value_name = "CMD ARGS")]
    command: Vec<String>,
}

/// `--sampler`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SamplerKind {
    /// Threads stopped with ptrace, one at a time.
    Ptrace,
    /// The kernel's sampler (perf_event_open): no thread stopped.
    Kernel,
}

/// `--threads`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadSelection {
    /// Every thread, including those started while recording.
    All,
    /// These threads only.
    Only(Vec<i32>),
}

fn parse_rate(s: &str) -> Result<u32, String> {
    let r: u32 = s
        .parse()
        .map_err(|_| format!("{s}: give the rate as a whole number of Hz"))?;
    if r == 0 || r > MAX_RATE {
        return Err(format!(
            "{r} Hz is out of range: give 1..={MAX_RATE} samples per second per thread"
        ));
    }
    Ok(r)
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("{s}: give the duration in seconds, e.g. 10 or 0.5"))?;
    if !(secs > 0.0 && secs < 1e7) {
        return Err(format!("{s}: the duration must be positive"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_threads(s: &str) -> Result<ThreadSelection, String> {
    if s == "all" {
        return Ok(ThreadSelection::All);
    }
    s.split(',')
        .map(|t| {
            t.trim()
                .parse::<i32>()
                .ok()
                .filter(|t| *t > 0)
                .ok_or_else(|| format!("{t}: give `all` or thread ids separated by commas"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(ThreadSelection::Only)
}

/// Why the recording ended.
enum End {
    Duration,
    Interrupted,
    ProgramExited(String),
    ProcessExited,
    /// The default kernel sampler found CPython in the target: ptrace takes over.
    PythonFound,
}

/// Runs `argstash record`.
pub fn run(a: RecordArgs) -> Result<()> {
    signals::install();
    // Checked before anything touches the target.
    let mut outs = Vec::with_capacity(a.outputs.len());
    for o in &a.outputs {
        match o.open() {
            Ok(out) => outs.push(out),
            Err(e) => {
                // The files opened before this one are taken back.
                outs.into_iter().for_each(format::OpenOutput::discard);
                return Err(e);
            }
        }
    }
    let mut program = match a.command.is_empty() {
        true => None,
        false => Some(Program::spawn(&a.command)?),
    };
    let pid = match (&program, a.pid) {
        (Some(p), _) => p.pid(),
        (None, Some(pid)) => pid,
        (None, None) => anyhow::bail!("give --pid PID or -- CMD ARGS"),
    };
    let result = record(&a, pid, program.as_mut());
    let (profile, notes) = match result {
        Ok(r) => r,
        Err(e) => {
            outs.into_iter().for_each(format::OpenOutput::discard);
            if let Some(p) = program.as_mut() {
                p.stop(Duration::from_secs(2));
            }
            return Err(e);
        }
    };
    for (out, o) in outs.into_iter().zip(&a.outputs) {
        out.write(&profile, a.idle)
            .with_context(|| format!("cannot write {}", o.path.display()))?;
    }
    for n in notes.iter().chain(&profile.notes) {
        eprintln!("argstash: note: {n}");
    }
    let files: Vec<String> = a
        .outputs
        .iter()
        .map(|o| o.path.display().to_string())
        .collect();
    eprintln!("{}", profile.summary(&files.join(", ")));
    Ok(())
}

/// Hooks, samples until the end, ejects; returns the profile and notes.
fn record(
    a: &RecordArgs,
    pid: Pid,
    mut program: Option<&mut Program>,
) -> Result<(Profile, Vec<String>)> {
    let spawned = program.is_some();
    if spawned {
        wait_for_exec(pid);
    }
    let mut naming = Naming::new(a.with_args || !a.args.is_empty(), a.args.clone());
    // Without --with-args a pprof profile carries the hooked arguments as labels.
    naming.labels =
        !naming.with_args && a.outputs.iter().any(|o| o.format == format::Format::Pprof);
    let mut opts = SampleOptions {
        annotate: false,
        debug_search: DebugSearch::default(),
        dwarf_cache: DwarfCache::from_env(),
    };
    if !a.debug_dirs.is_empty() {
        opts.debug_search = DebugSearch {
            dirs: a.debug_dirs.clone(),
            root: None,
        };
    }
    let mut hooks = Hooks::new(pid, &a.funcs, a.python, spawned)?;
    // Hooks first (a running process now; a started one as soon as its code is loaded).
    hooks.poll()?;
    let mut profile = Profile::new(a.rate);
    let mut notes = Vec::new();
    let (kernel, why) = choose_sampler(a, pid, &opts, &mut notes)?;
    profile.sampler_why = why;
    let start = Instant::now();
    if let Some(mut kernel) = kernel {
        check_threads(a, kernel.sampler(), pid)?;
        profile.sampler = "kernel (perf_event_open)";
        let end = kernel::sample_loop(
            a,
            &mut kernel,
            &mut hooks,
            &mut naming,
            &mut profile,
            &mut program,
            start,
        )?;
        for w in kernel.sampler().debug_warnings() {
            notes.push(format!("warning: {w}"));
        }
        kernel.sampler().save_debug_answers();
        drop(kernel);
        if !matches!(end, End::PythonFound) {
            profile.without_signature = naming.without_signature();
            return finish(pid, end, profile, notes, hooks, program);
        }
        // A started program became CPython once it ran (its interpreter is
        // found only then): the rest of the recording is ptrace's.
        notes.push(format!(
            "the target runs CPython, whose Python frames only the ptrace sampler reads exactly: \
             it took over after {:.1} s, the samples before have native frames only \
             (--sampler kernel keeps the kernel sampler, with Python frames read after each sample, [py~])",
            start.elapsed().as_secs_f64()
        ));
        profile.sampler = "ptrace";
        profile.sampler_why = "a Python target".into();
        profile.rounds = 0;
    }
    let mut sampler = Sampler::new(pid, opts)?;
    check_threads(a, &sampler, pid)?;
    let end = sample_loop(
        a,
        &mut sampler,
        &mut hooks,
        &mut naming,
        &mut profile,
        &mut program,
        start,
    )?;
    profile.without_signature = naming.without_signature();
    for w in sampler.debug_warnings() {
        notes.push(format!("warning: {w}"));
    }
    sampler.save_debug_answers();
    drop(sampler);
    finish(pid, end, profile, notes, hooks, program)
}

/// The kernel sampler where it can serve (the default, or `--sampler
/// kernel`), else `None` for ptrace, with a note saying why; and, for the
/// summary, why the sampler that runs was chosen.
fn choose_sampler(
    a: &RecordArgs,
    pid: Pid,
    opts: &SampleOptions,
    notes: &mut Vec<String>,
) -> Result<(Option<KernelSampler>, String)> {
    let asked = a.sampler.is_some();
    let mut fall_back = |why: &str, note: String| {
        notes.push(note);
        Ok((None, why.to_string()))
    };
    match a.sampler {
        Some(SamplerKind::Ptrace) => return Ok((None, "asked with --sampler ptrace".into())),
        _ if a.idle => {
            return fall_back(
                "--idle needs it",
                "--idle records sleeping threads, which the kernel sampler (CPU time only) never samples: sampled with ptrace instead".into(),
            )
        }
        _ if a.python => {
            return fall_back(
                "--python needs it",
                "--python pairs Python frames through a hook, read while each thread is stopped: sampled with ptrace instead".into(),
            )
        }
        _ => {}
    }
    let kernel = match KernelSampler::new(pid, opts.clone(), a.rate) {
        Ok(k) => k,
        Err(KernelError::Setup(e)) => return Err(e.into()),
        Err(e) => {
            let why = match &e {
                KernelError::NotPermitted { seccomp: true, .. } => {
                    "perf_event_open refused under a seccomp filter"
                }
                KernelError::NotPermitted { .. } => {
                    "perf_event_open refused by kernel.perf_event_paranoid"
                }
                KernelError::Unsupported { .. } => "the kernel sampler cannot serve this target",
                _ => "the kernel sampler could not start",
            };
            return fall_back(
                why,
                format!(
                    "the kernel sampler cannot run ({e}): sampled with ptrace instead{}",
                    refusal_hint(&e)
                ),
            );
        }
    };
    // By default a Python target keeps exact [py] frames: only ptrace reads them
    // while the thread is stopped. Read after each kernel sample, frames of short
    // calls are lost more often than those of long ones (docs/BENCHMARKS.md).
    if !asked && kernel.sampler().is_python() {
        return fall_back(
            "a Python target",
            "a Python target: sampled with ptrace, which reads its Python frames exactly ([py]); --sampler kernel reads them right after each sample instead ([py~], cheaper, approximate)".into(),
        );
    }
    let why = match asked {
        true => "asked with --sampler kernel",
        false => "the default",
    };
    Ok((Some(kernel), why.into()))
}

/// What lets the kernel sampler run, for a refusal (command-line syntax: the CLI's).
fn refusal_hint(e: &KernelError) -> &'static str {
    match e {
        KernelError::NotPermitted { seccomp: true, .. } => {
            " (run argstash without the seccomp filter, e.g. outside the container, for the kernel sampler)"
        }
        KernelError::NotPermitted { .. } => {
            " (sysctl kernel.perf_event_paranoid=1, or CAP_PERFMON, lets the kernel sample)"
        }
        KernelError::TooManyFiles { .. } => " (raise the limit with ulimit -n: one event per thread)",
        _ => "",
    }
}

/// `--threads` lists threads of the process.
fn check_threads(a: &RecordArgs, sampler: &Sampler, pid: Pid) -> Result<()> {
    if let ThreadSelection::Only(tids) = &a.threads {
        let now = sampler.threads().map_err(|e| anyhow::anyhow!("{e}"))?;
        for t in tids {
            anyhow::ensure!(
                now.contains(&Tid::from_raw(*t)),
                "--threads: no thread {t} in process {pid} (list them with ls /proc/{pid}/task)"
            );
        }
    }
    Ok(())
}

/// Notes how the recording ended, ejects the hooks, stops a started program.
fn finish(
    pid: Pid,
    end: End,
    mut profile: Profile,
    mut notes: Vec<String>,
    hooks: Hooks,
    program: Option<&mut Program>,
) -> Result<(Profile, Vec<String>)> {
    let secs = profile.elapsed.as_secs_f64();
    match &end {
        End::ProcessExited => profile.notes.push(format!(
            "process {pid} exited after {secs:.1} s of recording: the profile holds the samples taken until then"
        )),
        End::ProgramExited(how) => {
            profile
                .notes
                .push(format!("the program {how} after {secs:.1} s"))
        }
        End::Interrupted | End::Duration | End::PythonFound => {}
    }
    let alive = matches!(end, End::Duration | End::Interrupted);
    notes.extend(hooks.eject(alive, signals::count() > 1));
    if let (Some(p), true) = (program, alive) {
        let how = p.stop(Duration::from_secs(2));
        notes.push(format!(
            "stopped the program at the end of the recording: it {how}"
        ));
    }
    Ok((profile, notes))
}

/// Waits (at most 2 s) until a started program runs its own executable, not
/// argstash's image between fork and exec, and has it mapped. `execve` names
/// the new file (`/proc/PID/exe`) and lets the parent go on before it maps the
/// file and its loader; the kernel fills the aux vector (`/proc/PID/auxv`) only
/// when those are mapped, so a lookup of `--func` names before that would find
/// no module (under load a name the program has was refused as unknown).
fn wait_for_exec(pid: Pid) {
    let own = std::fs::read_link("/proc/self/exe").ok();
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
        if exe.is_none() {
            return;
        }
        if exe != own && aux_vector_filled(pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// True when `/proc/PID/auxv` holds an entry (its first key is not `AT_NULL`), or
/// cannot be read (nothing to wait for then).
fn aux_vector_filled(pid: Pid) -> bool {
    match std::fs::read(format!("/proc/{pid}/auxv")) {
        Ok(bytes) => bytes.iter().take(8).any(|&b| b != 0),
        Err(_) => true,
    }
}

/// How many threads are asked to stop together: bounds how many a round holds
/// at once in a target with hundreds of busy threads.
const BATCH: usize = 16;

/// Whether `s` is a fair pick of where its thread's CPU time goes, for an
/// on-CPU profile: the thread ran from the start of the round until it stopped
/// (`Round::since_round_start`), so it stopped where it ran. One that was
/// waiting for a CPU stopped where it had been preempted, which with lazy
/// preemption is mostly just after a system call, or at a tick when no system
/// call came first: long stretches without system calls are then seen more
/// often than their share (measured: 80% for a 70% function, 4 busy threads on
/// 2 CPUs). Without scheduler statistics, a stop at a system call's return is
/// taken for a preempted thread.
fn fair(s: &injector::Sample) -> bool {
    s.on_cpu.unwrap_or(!s.at_syscall)
}

/// Keeps the time between rounds independent of what the last round found
/// when the sampler cannot keep the asked rate. A round's cost after the
/// threads are let go (unwinding, naming) depends on where they were: a deep
/// native stack costs more than an interpreter loop. Were the next round
/// started as soon as this one ended, a thread would run longer before its
/// next sample after a costly one, and the places that cost little to sample
/// would be seen more often than their share (measured: a Python loop 5
/// points over its share beside a C function, CPython 3.14, 999 Hz asked and
/// 438 kept; docs/BENCHMARKS.md). The rate is lowered evenly instead: each
/// gap gets a delay that leaves room for a round half again as dear as the
/// recent ones on average, whatever this one cost.
#[derive(Default)]
struct Pace {
    /// The recent rounds' mean cost (moving average over about 16 rounds).
    mean: Duration,
    /// Rounds of the asked rate given up by the delays, not yet counted.
    skipped: f64,
}

impl Pace {
    /// The delay added to the jittered period (at least half a period) after a
    /// round that took `cost`: none while the rounds are cheap.
    fn delay(&mut self, period: Duration, cost: Duration) -> Duration {
        self.mean = if self.mean.is_zero() {
            cost
        } else {
            (self.mean * 15 + cost) / 16
        };
        self.mean.mul_f64(1.5).saturating_sub(period / 2)
    }

    /// The rounds of `period` given up by a `delay` (counted as missed
    /// rounds, whole ones as they add up).
    fn skipped(&mut self, delay: Duration, period: Duration) -> u64 {
        self.skipped += delay.as_secs_f64() / period.as_secs_f64();
        let whole = self.skipped.floor();
        self.skipped -= whole;
        whole as u64
    }
}

/// Spreads the rounds: each waits a period times a uniform draw in [0.5, 1.5),
/// the same rate on average. Evenly spaced samples can alias with a target's
/// own regular cycles: a sample stops the thread for about the same time each
/// round, so the samples fall at nearly evenly spaced points of its CPU time,
/// and a loop whose length is near a multiple of that spacing would be seen at
/// the same few places.
struct Jitter(u64);

impl Jitter {
    fn new() -> Jitter {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Jitter(seed | 1)
    }

    /// The next interval for `period` (xorshift64: statistical, not secret).
    fn next(&mut self, period: Duration) -> Duration {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        let unit = (x >> 11) as f64 / (1u64 << 53) as f64;
        period.mul_f64(0.5 + unit)
    }
}

/// Why recording ends now, if it does: Ctrl-C, the duration, or the program's exit.
fn end_now(a: &RecordArgs, start: Instant, program: &mut Option<&mut Program>) -> Option<End> {
    if signals::count() > 0 {
        return Some(End::Interrupted);
    }
    if a.duration.is_some_and(|d| start.elapsed() >= d) {
        return Some(End::Duration);
    }
    program
        .as_deref_mut()
        .and_then(|p| p.exited().map(str::to_string))
        .map(End::ProgramExited)
}

/// How long a failed refresh waits for the process to finish exiting.
const EXIT_GRACE: Duration = Duration::from_millis(200);

/// What a failed refresh of the target's mappings and hooks means: its end (a
/// process that ends between the checks and these reads fails them: its
/// executable link goes first), else the error itself. The kernel drops the
/// executable link while the process exits, before its threads are zombies, so
/// the end is waited for a moment ([`EXIT_GRACE`]) before the error is believed.
fn refresh_failed(
    e: anyhow::Error,
    pid: injector::Pid,
    program: &mut Option<&mut Program>,
) -> Result<End> {
    let deadline = Instant::now() + EXIT_GRACE;
    loop {
        if let Some(how) = program
            .as_deref_mut()
            .and_then(|p| p.exited().map(str::to_string))
        {
            return Ok(End::ProgramExited(how));
        }
        if injector::process_ended(pid) {
            return Ok(End::ProcessExited);
        }
        if Instant::now() >= deadline {
            return Err(e);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The threads `--threads` keeps of the target's, now (noted in the profile's
/// threads seen: both samplers count them alike); `Err(end)` when the process
/// is gone or every chosen thread has exited (with a note).
fn chosen_threads(
    a: &RecordArgs,
    sampler: &Sampler,
    profile: &mut Profile,
) -> Result<std::result::Result<Vec<Tid>, End>> {
    let mut tids: Vec<Tid> = match sampler.threads() {
        Ok(t) => t,
        Err(Lost::ProcessGone) => return Ok(Err(End::ProcessExited)),
        Err(e) => return Err(anyhow::anyhow!("{e}")),
    };
    if let ThreadSelection::Only(only) = &a.threads {
        tids.retain(|t| only.contains(&t.as_raw()));
        if tids.is_empty() {
            profile
                .notes
                .push("every thread chosen with --threads has exited".into());
            return Ok(Err(End::Duration));
        }
    }
    profile.saw(tids.iter().map(|t| t.as_raw()));
    Ok(Ok(tids))
}

/// Samples until the duration passes, Ctrl-C, or the process ends.
fn sample_loop(
    a: &RecordArgs,
    sampler: &mut Sampler,
    hooks: &mut Hooks,
    naming: &mut Naming,
    profile: &mut Profile,
    program: &mut Option<&mut Program>,
    start: Instant,
) -> Result<End> {
    let period = Duration::from_secs_f64(1.0 / f64::from(a.rate));
    // After a handover from the kernel sampler `start` is past: rounds start now.
    let mut next = Instant::now();
    let mut last_refresh = next;
    let mut rotate = 0usize;
    let mut progress = Progress::new();
    let mut tids: Vec<Tid> = Vec::new();
    let mut jitter = Jitter::new();
    let mut pace = Pace::default();
    // See priority.rs: the samples start on time on a busy machine, and the
    // sampler does not share its targets' CPUs.
    let _realtime = injector::Realtime::enter();
    let mut placement = priority::Placement::new();
    let mut busy_cpus: Vec<u32> = Vec::new();
    let end = loop {
        profile.elapsed = start.elapsed();
        if let Some(end) = end_now(a, start, program) {
            break end;
        }
        let now = Instant::now();
        if next > now {
            std::thread::sleep((next - now).min(Duration::from_millis(10)));
            continue;
        }
        // Rounds that could not start on time (counted as rounds: which of the
        // threads would have been running then, and so sampled, is unknown).
        let behind = ((now - next).as_nanos() / period.as_nanos()) as u64;
        profile.rounds_missed += behind;
        if tids.is_empty() || last_refresh.elapsed() >= Duration::from_millis(100) {
            last_refresh = Instant::now();
            let refreshed = match hooks.poll() {
                Ok(true) | Ok(false) => sampler.refresh().map_err(anyhow::Error::from),
                Err(e) => Err(e),
            };
            if let Err(e) = refreshed {
                break refresh_failed(e, sampler.pid(), program)?;
            }
            tids = match chosen_threads(a, sampler, profile)? {
                Ok(tids) => tids,
                Err(end) => break end,
            };
        }
        profile.rounds += 1;
        let mut round = sampler.round();
        if !a.idle {
            round.since_round_start(&tids);
        }
        let round_start = Instant::now();
        let n = tids.len();
        let mut gone = false;
        let mut done = n;
        let mut k = 0;
        'round: while k < n {
            // A round gets one period; threads it does not reach are taken first next time.
            if k > 0 && round_start.elapsed() >= period {
                profile.lose("over the time budget of a round", (n - k) as u64);
                done = k;
                break;
            }
            // Up to BATCH threads are asked to stop together (Round::sample_many).
            let mut batch = Vec::new();
            while k < n && batch.len() < BATCH {
                let tid = tids[(rotate + k) % n];
                k += 1;
                if !a.idle && sampler.is_idle(tid) {
                    profile.idle += 1;
                } else {
                    batch.push(tid);
                }
            }
            let results = round.sample_many(&batch);
            // Where the released threads are queued now: the sampler moves off
            // those CPUs before it sleeps (priority.rs).
            busy_cpus.extend(batch.iter().filter_map(|&t| sampler.cpu_of(t)));
            for (tid, sample) in results {
                let sample = match sample {
                    // On-CPU profile: a sample is left out when the thread stopped
                    // where the scheduler had taken it off rather than where it ran.
                    Ok(s) if !a.idle && !fair(&s) => {
                        profile.off_cpu += 1;
                        continue;
                    }
                    // A hooked function seen for the first time: its parameter names
                    // come from one annotated sample, taken right away (the profile
                    // keeps the fair one).
                    Ok(s) if naming.needs_names(&s) => {
                        if let Ok(annotated) = round.sample_with(tid, true) {
                            naming.learn(&annotated);
                        }
                        Ok(s)
                    }
                    other => other,
                };
                match sample {
                    Ok(mut s) => {
                        naming.name_from_debug(&mut s, |pc| sampler.debug_name(pc));
                        let name = match profile.threads.contains_key(&tid.as_raw()) {
                            true => String::new(),
                            false => injector::process::read_task_comm(
                                sampler.pid().as_raw(),
                                tid.as_raw(),
                            )
                            .unwrap_or_default(),
                        };
                        let stack = naming.stack(&s);
                        profile.unstopped += u64::from(s.capture.without_stop());
                        profile.add_timed(tid.as_raw(), &name, stack, s.stopped, s.latency);
                        profile.label_last(tid.as_raw(), naming.sample_labels(&s));
                    }
                    Err(Lost::Rescheduled) => profile.off_cpu += 1,
                    Err(Lost::ProcessGone) => {
                        gone = true;
                        break 'round;
                    }
                    Err(e) => profile.lose(e.reason(), 1),
                }
            }
        }
        // The next round is drawn from this one's start, with room for its
        // cost whatever it is (Pace).
        let delay = pace.delay(period, round_start.elapsed());
        profile.rounds_missed += pace.skipped(delay, period);
        next = round_start + delay + jitter.next(period);
        rotate = (rotate + done) % n.max(1);
        if let Some(p) = placement.as_mut() {
            p.avoid(&busy_cpus);
            busy_cpus.clear();
        }
        progress.update(
            profile.samples(),
            profile.lost_total(),
            tids.len(),
            start.elapsed(),
        );
        if gone {
            break End::ProcessExited;
        }
    };
    profile.elapsed = start.elapsed();
    progress.finish();
    // A program that exited during the last round is reported as such.
    if let (End::ProcessExited, Some(p)) = (&end, program.as_deref_mut()) {
        std::thread::sleep(Duration::from_millis(20));
        if let Some(how) = p.exited() {
            return Ok(End::ProgramExited(how.to_string()));
        }
    }
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_threads_parse() {
        assert_eq!(parse_rate("99"), Ok(99));
        assert!(parse_rate("0").unwrap_err().contains("out of range"));
        assert!(parse_rate("10001").unwrap_err().contains("1..=10000"));
        assert!(parse_rate("x").is_err());
        assert_eq!(parse_threads("all"), Ok(ThreadSelection::All));
        assert_eq!(parse_threads("3,4"), Ok(ThreadSelection::Only(vec![3, 4])));
        assert!(parse_threads("3,x").is_err());
        assert!(parse_duration("0").is_err());
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
    }

    #[test]
    fn pace_adds_no_delay_to_cheap_rounds_and_the_same_to_any_dear_one() {
        let period = Duration::from_millis(1);
        let mut cheap = Pace::default();
        for _ in 0..50 {
            assert_eq!(
                cheap.delay(period, Duration::from_micros(200)),
                Duration::ZERO
            );
        }
        assert_eq!(cheap.skipped(Duration::ZERO, period), 0);
        // Rounds of 2 ms: the delay leaves room for 3 ms, half a period in the jitter.
        let mut dear = Pace::default();
        let mut last = Duration::ZERO;
        for _ in 0..200 {
            last = dear.delay(period, Duration::from_millis(2));
        }
        assert_eq!(last, Duration::from_micros(2500));
        // One round dearer or cheaper than the others barely moves the next gap.
        let mean = dear.mean;
        let after_dear = Pace { mean, skipped: 0.0 }.delay(period, Duration::from_millis(3));
        let after_cheap = Pace { mean, skipped: 0.0 }.delay(period, Duration::from_millis(1));
        assert!(after_dear - after_cheap < Duration::from_micros(200));
        // 2.5 periods a round given up, counted as whole rounds as they add up.
        let skipped: u64 = (0..4).map(|_| dear.skipped(last, period)).sum();
        assert_eq!(skipped, 10);
    }
}
