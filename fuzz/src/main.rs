//! `argstash-fuzz`: a fuzzing driver for the targets of the `argstash-fuzz`
//! crate that runs on stable Rust.
//!
//! ```text
//! argstash-fuzz list
//! argstash-fuzz seed DIR [--elf FILE]... [--core FILE]... [--python PYTHON]
//! argstash-fuzz run <TARGET|all> --seconds N --corpus DIR [--corpus DIR]...
//!               [--findings DIR] [--hang-ms 2000] [--mem-cap-mib 256] [--max-findings 3]
//! argstash-fuzz exec <TARGET> FILE...
//! ```
//!
//! `run` fuzzes each target in a child process (this program again) for N
//! seconds: the child mutates the inputs under `DIR/<TARGET>/`, runs each, and
//! keeps the current input in a file shared with the parent. A panic, an
//! allocation over the cap (the child's allocator refuses it, which aborts), a
//! crash (stack overflow, signal) or an input running longer than the hang
//! limit (the parent kills the child) is a finding: the input is saved under
//! `--findings` and the child restarted. The exit status is 1 when anything was
//! found.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use argstash_fuzz::mutate::{mutate, Rng};
use argstash_fuzz::targets::{target, Target, TARGETS};

/// Live heap bytes and the cap on them (usize::MAX: no cap, as in the parent).
static LIVE: AtomicUsize = AtomicUsize::new(0);
static CAP: AtomicUsize = AtomicUsize::new(usize::MAX);
/// The shared state's header in a child, for the allocator to leave its reason.
static SHARED: AtomicPtr<AtomicU64> = AtomicPtr::new(std::ptr::null_mut());

/// The system allocator, refusing allocations that would take the live heap over [`CAP`].
struct Capped;

// SAFETY: forwards to the system allocator unchanged; only counts and may refuse.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !reserve(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout is passed on as is.
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !reserve(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout is passed on as is.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: ptr was allocated by System with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let grow = new_size.saturating_sub(layout.size());
        if !reserve(grow) {
            return std::ptr::null_mut();
        }
        // SAFETY: ptr was allocated by System with this layout.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            LIVE.fetch_sub(grow, Ordering::Relaxed);
        } else {
            LIVE.fetch_sub(layout.size().saturating_sub(new_size), Ordering::Relaxed);
        }
        p
    }
}

/// Counts `n` more live bytes, or refuses (leaving the reason for the parent) over the cap.
fn reserve(n: usize) -> bool {
    let live = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    if live > CAP.load(Ordering::Relaxed) {
        LIVE.fetch_sub(n, Ordering::Relaxed);
        // Lift the cap (this process aborts next) so that the backtrace naming
        // the allocation's site can itself allocate.
        CAP.store(usize::MAX, Ordering::Relaxed);
        eprintln!(
            "argstash-fuzz: allocation of {n} bytes over the cap, at\n{}",
            std::backtrace::Backtrace::force_capture()
        );
        let shared = SHARED.load(Ordering::Relaxed);
        if !shared.is_null() {
            // SAFETY: SHARED points at the header of the child's live shared mapping.
            unsafe {
                (*shared.add(H_REASON)).store(REASON_ALLOC, Ordering::Relaxed);
                (*shared.add(H_MSG_LEN)).store(n as u64, Ordering::Relaxed);
            }
        }
        return false;
    }
    true
}

#[global_allocator]
static ALLOC: Capped = Capped;

// The shared file: a header of u64 words, then the current input.
const H_EXECS: usize = 0;
const H_RUNNING: usize = 1;
const H_LEN: usize = 2;
const H_REASON: usize = 3;
const H_MSG_LEN: usize = 4;
const H_COVERAGE: usize = 5;
const H_GROWN: usize = 6;
const H_WORDS: usize = 512;
const INPUT_AT: usize = H_WORDS * 8;
const REASON_PANIC: u64 = 1;
const REASON_ALLOC: u64 = 2;

fn usage() -> ExitCode {
    eprintln!(
        "usage:\n  argstash-fuzz list\n  argstash-fuzz seed DIR [--elf FILE]... [--core FILE]... [--python PYTHON]\n  \
         argstash-fuzz run <TARGET|all> --seconds N --corpus DIR [--corpus DIR]... [--findings DIR] \
         [--hang-ms MS] [--mem-cap-mib MIB] [--max-findings N]\n  argstash-fuzz exec <TARGET> FILE..."
    );
    ExitCode::from(2)
}

/// Options of `run` (and of the child it starts).
#[derive(Debug, Clone)]
struct RunOpts {
    seconds: f64,
    corpus: Vec<PathBuf>,
    findings: PathBuf,
    hang_ms: u64,
    mem_cap_mib: usize,
    max_findings: usize,
    shm: Option<PathBuf>,
}

fn parse_run(args: &[String]) -> Option<RunOpts> {
    let mut o = RunOpts {
        seconds: 10.0,
        corpus: Vec::new(),
        findings: PathBuf::from("target/fuzz-findings"),
        hang_ms: 2000,
        mem_cap_mib: 256,
        max_findings: 3,
        shm: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next()?;
        match a.as_str() {
            "--seconds" => o.seconds = v.parse().ok()?,
            "--corpus" => o.corpus.push(PathBuf::from(v)),
            "--findings" => o.findings = PathBuf::from(v),
            "--hang-ms" => o.hang_ms = v.parse().ok()?,
            "--mem-cap-mib" => o.mem_cap_mib = v.parse().ok()?,
            "--max-findings" => o.max_findings = v.parse().ok()?,
            "--shm" => o.shm = Some(PathBuf::from(v)),
            _ => return None,
        }
    }
    Some(o)
}

/// Runs this program again without address-space randomisation (once), so the
/// addresses in the `unwind` seeds (this program's own stacks and modules) mean
/// the same in every run of this build.
fn without_aslr() {
    const ADDR_NO_RANDOMIZE: libc::c_ulong = 0x0040000;
    // SAFETY: 0xffffffff only queries the current personality.
    let current = unsafe { libc::personality(0xffff_ffff) };
    if current < 0 || current as libc::c_ulong & ADDR_NO_RANDOMIZE != 0 {
        return;
    }
    // SAFETY: sets a flag of this process's personality; takes effect at exec.
    if unsafe { libc::personality(current as libc::c_ulong | ADDR_NO_RANDOMIZE) } < 0 {
        return;
    }
    if let Ok(exe) = std::env::current_exe() {
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new(exe);
        cmd.args(std::env::args_os().skip(1));
        if std::env::var_os("LLVM_PROFILE_FILE").is_none() {
            // An instrumented build would write a profile at each exit; the
            // counters are only read live.
            cmd.env("LLVM_PROFILE_FILE", "/dev/null");
        }
        let err = cmd.exec();
        eprintln!("argstash-fuzz: cannot run again without ASLR ({err}); going on with it");
    }
}

fn main() -> ExitCode {
    without_aslr();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("list") => {
            for t in TARGETS {
                println!("{:<16} {}", t.name, t.about);
            }
            ExitCode::SUCCESS
        }
        Some("seed") if args.len() >= 2 => seed(&args[1], &args[2..]),
        Some("exec") if args.len() >= 3 => match target(&args[1]) {
            Some(t) => exec(t, &args[2..]),
            None => usage(),
        },
        Some("run") if args.len() >= 2 => {
            let Some(opts) = parse_run(&args[2..]) else {
                return usage();
            };
            let chosen: Vec<&Target> = if args[1] == "all" {
                TARGETS.iter().collect()
            } else {
                match args[1].split(',').map(target).collect::<Option<Vec<_>>>() {
                    Some(t) => t,
                    None => return usage(),
                }
            };
            run(&chosen, &opts)
        }
        Some("child") if args.len() >= 2 => {
            let (Some(t), Some(opts)) = (target(&args[1]), parse_run(&args[2..])) else {
                return usage();
            };
            child(t, &opts)
        }
        _ => usage(),
    }
}

fn seed(dir: &str, rest: &[String]) -> ExitCode {
    let mut src = argstash_fuzz::seeds::Sources::default();
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        let Some(v) = it.next() else {
            return usage();
        };
        match a.as_str() {
            "--elf" => src.elfs.push(PathBuf::from(v)),
            "--core" => src.cores.push(PathBuf::from(v)),
            "--python" => src.python = Some(PathBuf::from(v)),
            _ => return usage(),
        }
    }
    let scratch = Path::new(dir).join(".scratch");
    if let Err(e) = argstash_fuzz::set_scratch(&scratch) {
        eprintln!("argstash-fuzz: cannot make {}: {e}", scratch.display());
        return ExitCode::FAILURE;
    }
    match argstash_fuzz::seeds::generate(Path::new(dir), &src) {
        Ok(counts) => {
            let _ = std::fs::remove_dir_all(&scratch);
            for (t, n) in counts {
                println!("{t:<16} {n} seeds");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("argstash-fuzz: writing seeds under {dir}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs each file once through `t`, in this process; fails on the first panic.
fn exec(t: &Target, files: &[String]) -> ExitCode {
    let _ = argstash_fuzz::scratch();
    let mut failed = false;
    for f in files {
        let Ok(data) = std::fs::read(f) else {
            eprintln!("argstash-fuzz: cannot read {f}");
            return ExitCode::FAILURE;
        };
        let start = Instant::now();
        CAP.store(
            LIVE.load(Ordering::Relaxed) + (256 << 20),
            Ordering::Relaxed,
        );
        let ok = std::panic::catch_unwind(|| (t.run)(&data)).is_ok();
        CAP.store(usize::MAX, Ordering::Relaxed);
        println!(
            "{f}: {} in {:.3} s",
            if ok { "ok" } else { "PANIC" },
            start.elapsed().as_secs_f64()
        );
        failed |= !ok;
    }
    let _ = std::fs::remove_dir_all(argstash_fuzz::scratch());
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The inputs of `t` in the corpus directories (`DIR/<target>/*`), smallest first.
fn load_corpus(t: &Target, dirs: &[PathBuf]) -> Vec<Vec<u8>> {
    let mut inputs = Vec::new();
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(d.join(t.name)) else {
            continue;
        };
        for e in rd.flatten() {
            if e.path().is_file() {
                if let Ok(b) = std::fs::read(e.path()) {
                    inputs.push(b);
                }
            }
        }
    }
    inputs.sort_by_key(Vec::len);
    inputs
}

/// The shared file mapped: header words and the input area.
struct Shared {
    map: memmap2::MmapMut,
}

impl Shared {
    fn create(path: &Path, max_len: usize) -> std::io::Result<Shared> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        f.set_len((INPUT_AT + max_len) as u64)?;
        Shared::open_file(&f)
    }

    fn open(path: &Path) -> std::io::Result<Shared> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        Shared::open_file(&f)
    }

    fn open_file(f: &std::fs::File) -> std::io::Result<Shared> {
        // SAFETY: a file only this program's parent and child map; they coordinate
        // through the atomic header words, and the input area is written only by the
        // child and read by the parent after the child stopped.
        let map = unsafe { memmap2::MmapMut::map_mut(f)? };
        Ok(Shared { map })
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < H_WORDS);
        // SAFETY: the mapping is page-aligned and at least H_WORDS words long.
        unsafe { &*(self.map.as_ptr() as *const AtomicU64).add(i) }
    }

    fn input(&self) -> &[u8] {
        let len =
            (self.word(H_LEN).load(Ordering::Acquire) as usize).min(self.map.len() - INPUT_AT);
        &self.map[INPUT_AT..INPUT_AT + len]
    }
}

/// The coverage counters of a build with `-C instrument-coverage` (stable
/// rustc): LLVM's `__llvm_prf_cnts` section of this executable, one 64-bit
/// counter per code region, found through the file's section headers and the
/// load bias. An input that makes a counter non-zero for the first time found
/// new code and joins the corpus.
struct Coverage {
    counters: *const u64,
    /// Per counter: `u64::MAX` once hit, else 0 (a mask, for the fast scan).
    seen: Vec<u64>,
    hit: usize,
}

impl Coverage {
    fn find() -> Option<Coverage> {
        let exe = std::fs::read("/proc/self/exe").ok()?;
        let elf = goblin::elf::Elf::parse(&exe).ok()?;
        let sh = elf
            .section_headers
            .iter()
            .find(|sh| elf.shdr_strtab.get_at(sh.sh_name) == Some("__llvm_prf_cnts"))?;
        let phdr = elf
            .program_headers
            .iter()
            .find(|p| p.p_type == goblin::elf::program_header::PT_PHDR)?;
        // SAFETY: getauxval only reads the auxiliary vector.
        let at_phdr = unsafe { libc::getauxval(libc::AT_PHDR) };
        let bias = at_phdr.checked_sub(phdr.p_vaddr)?;
        let len = (sh.sh_size / 8) as usize;
        Some(Coverage {
            counters: (bias + sh.sh_addr) as *const u64,
            seen: vec![0; len],
            hit: 0,
        })
    }

    /// Notes the counters hit so far; true when one was hit for the first time.
    fn update(&mut self) -> bool {
        // SAFETY: the counters of the loaded section, which lives as long as the
        // program; only the instrumented code on this thread writes them, and
        // none of it runs while this slice is alive.
        let counters = unsafe { std::slice::from_raw_parts(self.counters, self.seen.len()) };
        let mut new = false;
        for (c, s) in counters.chunks(64).zip(self.seen.chunks_mut(64)) {
            // Fast path: no counter of the chunk is both hit and unseen.
            if c.iter().zip(s.iter()).fold(0, |a, (c, s)| a | (c & !s)) == 0 {
                continue;
            }
            for (c, s) in c.iter().zip(s.iter_mut()) {
                if *c != 0 && *s == 0 {
                    *s = u64::MAX;
                    self.hit += 1;
                    new = true;
                }
            }
        }
        new
    }
}

/// The child: fuzzes `t` until its time is up, keeping each input in the shared file.
fn child(t: &Target, opts: &RunOpts) -> ExitCode {
    let Some(shm) = &opts.shm else {
        return usage();
    };
    let Ok(mut shared) = Shared::open(shm) else {
        eprintln!("argstash-fuzz child: cannot map {}", shm.display());
        return ExitCode::FAILURE;
    };
    let max_len = shared.map.len() - INPUT_AT;
    let scratch = shm.with_extension("scratch");
    if argstash_fuzz::set_scratch(&scratch).is_err() {
        return ExitCode::FAILURE;
    }
    let mut corpus = load_corpus(t, &opts.corpus);
    if corpus.is_empty() {
        corpus.push(Vec::new());
    }
    SHARED.store(
        shared.word(0) as *const AtomicU64 as *mut AtomicU64,
        Ordering::Relaxed,
    );
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
    }));
    // Build anything a target keeps across inputs before the cap applies.
    shared.map[INPUT_AT..INPUT_AT + corpus[0].len().min(max_len)]
        .copy_from_slice(&corpus[0][..corpus[0].len().min(max_len)]);
    shared
        .word(H_LEN)
        .store(corpus[0].len().min(max_len) as u64, Ordering::Release);
    (t.run)(&corpus[0]);
    CAP.store(
        LIVE.load(Ordering::Relaxed) + (opts.mem_cap_mib << 20),
        Ordering::Relaxed,
    );
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let mut rng = Rng::new(seed);
    let deadline = Instant::now() + Duration::from_secs_f64(opts.seconds);
    let mut execs: u64 = 0;
    let mut input = Vec::new();
    let mut coverage = Coverage::find();
    let grow = opts.findings.join("corpus").join(t.name);
    if coverage.is_some() {
        let _ = std::fs::create_dir_all(&grow);
    }
    let mut grown = 0u64;
    while Instant::now() < deadline {
        for _ in 0..16 {
            let i = execs as usize;
            input.clear();
            if i < corpus.len() {
                // Every seed once as it is first.
                input.extend_from_slice(&corpus[i]);
            } else {
                input.extend_from_slice(&corpus[rng.below(corpus.len())]);
                let other = &corpus[rng.below(corpus.len())];
                mutate(&mut input, other, &mut rng, max_len);
            }
            shared.map[INPUT_AT..INPUT_AT + input.len()].copy_from_slice(&input);
            shared
                .word(H_LEN)
                .store(input.len() as u64, Ordering::Release);
            shared.word(H_RUNNING).store(1, Ordering::Release);
            let ok = std::panic::catch_unwind(|| (t.run)(&input)).is_ok();
            if !ok {
                shared.word(H_REASON).store(REASON_PANIC, Ordering::Release);
                return ExitCode::from(101);
            }
            shared.word(H_RUNNING).store(0, Ordering::Release);
            if let Some(cov) = coverage.as_mut() {
                if cov.update() && i >= corpus.len() {
                    let _ = std::fs::write(grow.join(format!("{:016x}", fnv(&input))), &input);
                    corpus.push(input.clone());
                    grown += 1;
                    shared.word(H_GROWN).store(grown, Ordering::Release);
                }
                shared
                    .word(H_COVERAGE)
                    .store(cov.hit as u64, Ordering::Release);
            }
            execs += 1;
            shared.word(H_EXECS).store(execs, Ordering::Release);
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    ExitCode::SUCCESS
}

/// Results of one target's run.
struct Tally {
    execs: u64,
    /// Coverage counters hit (0 without an instrumented build).
    coverage: u64,
    /// Inputs added to the corpus for new coverage.
    grown: u64,
    /// Apparent hangs that did not happen again when the input was re-run alone.
    stalls: u64,
    secs: f64,
    findings: Vec<String>,
}

fn run(targets: &[&Target], opts: &RunOpts) -> ExitCode {
    let mut any = false;
    let mut rows = Vec::new();
    for t in targets {
        let tally = match fuzz_target(t, opts) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("argstash-fuzz: {}: {e}", t.name);
                return ExitCode::FAILURE;
            }
        };
        any |= !tally.findings.is_empty();
        let mut cov = if tally.coverage > 0 {
            format!("  coverage {} (+{} inputs)", tally.coverage, tally.grown)
        } else {
            String::new()
        };
        if tally.stalls > 0 {
            cov.push_str(&format!("  stalls {}", tally.stalls));
        }
        println!(
            "{:<16} execs {:>10}  {:>8.0} exec/s  {:>6.1} s  findings {}{cov}",
            t.name,
            tally.execs,
            tally.execs as f64 / tally.secs.max(1e-9),
            tally.secs,
            tally.findings.len()
        );
        for f in &tally.findings {
            println!("    {f}");
        }
        let _ = std::io::stdout().flush();
        rows.push(tally);
    }
    if any {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs the saved input alone (`exec`) with the same limit; true when it hangs
/// or fails again, false when it finishes in time.
fn hangs_again(exe: &Path, t: &Target, input: &Path, opts: &RunOpts) -> std::io::Result<bool> {
    let mut child = std::process::Command::new(exe)
        .arg("exec")
        .arg(t.name)
        .arg(input)
        .stdout(std::process::Stdio::null())
        .spawn()?;
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(!status.success());
        }
        if start.elapsed() > Duration::from_millis(opts.hang_ms) {
            // Ours: kill it by its own handle.
            let _ = child.kill();
            let _ = child.wait();
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A short content hash for naming saved inputs.
fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn fuzz_target(t: &Target, opts: &RunOpts) -> std::io::Result<Tally> {
    let corpus = load_corpus(t, &opts.corpus);
    let largest = corpus.iter().map(Vec::len).max().unwrap_or(0);
    let max_len = (largest * 2).clamp(4096, 64 << 20);
    let work = opts.findings.join(".work");
    std::fs::create_dir_all(&work)?;
    let shm_path = work.join(format!("{}-{}.shm", t.name, std::process::id()));
    // The running binary itself, even if a rebuild replaced its file meanwhile.
    let exe = PathBuf::from("/proc/self/exe");
    let start = Instant::now();
    let total = Duration::from_secs_f64(opts.seconds);
    let mut tally = Tally {
        execs: 0,
        coverage: 0,
        grown: 0,
        stalls: 0,
        secs: 0.0,
        findings: Vec::new(),
    };
    while start.elapsed() < total && tally.findings.len() < opts.max_findings {
        let shared = Shared::create(&shm_path, max_len)?;
        let left = (total - start.elapsed()).as_secs_f64();
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("child").arg(t.name);
        cmd.args(["--seconds", &format!("{left:.3}")]);
        for c in &opts.corpus {
            cmd.arg("--corpus").arg(c);
        }
        cmd.arg("--corpus").arg(opts.findings.join("corpus"));
        cmd.arg("--findings").arg(&opts.findings);
        cmd.args(["--mem-cap-mib", &opts.mem_cap_mib.to_string()]);
        cmd.arg("--shm").arg(&shm_path);
        let mut child = cmd.spawn()?;
        let mut last = (0u64, Instant::now());
        let finding = loop {
            std::thread::sleep(Duration::from_millis(20));
            if let Some(status) = child.try_wait()? {
                if status.success() {
                    break None;
                }
                let why = match shared.word(H_REASON).load(Ordering::Acquire) {
                    REASON_PANIC => "panic".to_string(),
                    REASON_ALLOC => format!(
                        "allocation of {} bytes over the {} MiB cap",
                        shared.word(H_MSG_LEN).load(Ordering::Acquire),
                        opts.mem_cap_mib
                    ),
                    _ => format!("crash ({status})"),
                };
                break Some(why);
            }
            let execs = shared.word(H_EXECS).load(Ordering::Acquire);
            if execs != last.0 {
                last = (execs, Instant::now());
            } else if shared.word(H_RUNNING).load(Ordering::Acquire) == 1
                && last.1.elapsed() > Duration::from_millis(opts.hang_ms)
            {
                // The child is ours: kill it by its own handle.
                let _ = child.kill();
                let _ = child.wait();
                break Some(format!("hang (an input ran over {} ms)", opts.hang_ms));
            }
            if start.elapsed() > total + Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        };
        tally.execs += shared.word(H_EXECS).load(Ordering::Acquire);
        tally.coverage = tally
            .coverage
            .max(shared.word(H_COVERAGE).load(Ordering::Acquire));
        tally.grown += shared.word(H_GROWN).load(Ordering::Acquire);
        if let Some(why) = finding {
            let input = shared.input().to_vec();
            let dir = opts.findings.join(t.name);
            std::fs::create_dir_all(&dir)?;
            let kind = why.split(' ').next().unwrap_or("finding").to_string();
            let path = dir.join(format!("{kind}-{:016x}", fnv(&input)));
            std::fs::write(&path, &input)?;
            if kind == "hang" && !hangs_again(&exe, t, &path, opts)? {
                // Stalled once (a loaded machine, blocked disk writes), not by the input.
                eprintln!(
                    "argstash-fuzz: {}: an input ran over {} ms once but not when run again alone; not a finding",
                    t.name, opts.hang_ms
                );
                tally.stalls += 1;
                let _ = std::fs::remove_file(&path);
            } else {
                tally
                    .findings
                    .push(format!("{why}: {} ({} bytes)", path.display(), input.len()));
            }
        }
        let _ = std::fs::remove_file(&shm_path);
        let _ = std::fs::remove_dir_all(shm_path.with_extension("scratch"));
    }
    tally.secs = start.elapsed().as_secs_f64();
    Ok(tally)
}
