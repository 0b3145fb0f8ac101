//! `argstash demo`: the main job on a bundled target.
//!
//! Builds the seed example (main -> foo(5) -> bar(28)) at -O2 without debug info
//! with the system C compiler, starts it, shows a plain unwind (what a debugger sees
//! without debug info), hooks `bar` and `foo`, shows the backtrace with the stashed
//! arguments, ejects, checks the code is byte-for-byte original again, and stops it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use injector::names::FuncSpec;
use injector::{backtrace, Backtrace, BacktraceOptions};
use injector::{eject, install, EjectOptions, InstallOptions, Pid};

use injector::render::frame_text;

const DEMO_SOURCE: &str = include_str!("../demo/demo.c");

/// Kills and reaps the demo target however the demo ends.
struct Target(Child);

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn build() -> Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("argstash-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let src = dir.join("demo.c");
    let exe = dir.join("demo");
    std::fs::write(&src, DEMO_SOURCE)?;
    let out = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .context("running `cc`: the demo needs a C compiler (install one with `apt-get install gcc`, or run scripts/setup.sh)")?;
    if !out.status.success() {
        bail!(
            "cc failed to build the demo target:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(exe)
}

/// The main thread's backtrace as text, if `bar` is on its stack.
fn bar_frame(bt: &Backtrace) -> Option<String> {
    let t = bt.threads.first()?;
    let text = t
        .frames
        .iter()
        .enumerate()
        .map(|(n, f)| format!("    {}", frame_text(n, f)));
    t.frames
        .iter()
        .any(|f| f.function.as_deref() == Some("bar"))
        .then(|| text.collect::<Vec<_>>().join("\n"))
}

/// Takes backtraces until `want` holds for bar's frame (bar sleeps 20 ms per call).
fn backtrace_until(pid: i32, want: impl Fn(&Backtrace) -> bool) -> Result<Backtrace> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let bt = backtrace(Pid::from_raw(pid), &BacktraceOptions::default())?;
        if want(&bt) || Instant::now() > deadline {
            return Ok(bt);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn hooked(bt: &Backtrace, name: &str) -> bool {
    bt.threads.iter().any(|t| {
        t.frames
            .iter()
            .any(|f| f.function.as_deref() == Some(name) && f.stash.is_some())
    })
}

/// Runs the demo.
pub fn run() -> Result<()> {
    println!("argstash demo: building the seed example (main -> foo(5) -> bar(foo_arg + 23)) at -O2, no debug info");
    let exe = build()?;
    let child = Command::new(&exe)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting the demo target")?;
    let mut target = Target(child);
    let mut lines = BufReader::new(target.0.stdout.take().context("demo stdout")?).lines();
    let ready = lines
        .next()
        .context("the demo target exited before it was ready")??;
    let pid = target.0.id() as i32;
    if ready != format!("ready {pid}") {
        bail!("unexpected first line from the demo target: {ready:?}");
    }
    println!("started {} as pid {pid}\n", exe.display());

    let before = backtrace_until(pid, |bt| bar_frame(bt).is_some())?;
    println!(
        "A plain unwind of the -O2 binary (what a debugger shows without debug info: `bar ()`):"
    );
    println!(
        "{}\n",
        bar_frame(&before).unwrap_or_else(|| "    (bar was not on the stack)".into())
    );

    let report = install(
        Pid::from_raw(pid),
        &[FuncSpec::parse("bar"), FuncSpec::parse("foo")],
        &InstallOptions::default(),
    )?;
    println!("$ argstash inject --pid {pid} --func bar --func foo");
    crate::output::print_install(&report);
    println!();

    let after = backtrace_until(pid, |bt| hooked(bt, "bar") && hooked(bt, "foo"))?;
    println!("$ argstash bt --pid {pid}");
    println!(
        "{}\n",
        bar_frame(&after).unwrap_or_else(|| "    (bar was not on the stack)".into())
    );
    if !hooked(&after, "bar") {
        bail!("the hooked bar frame did not show its stashed arguments within 5 s");
    }

    let ejected = eject(Pid::from_raw(pid), &EjectOptions::all())?;
    println!("$ argstash eject --pid {pid} --all");
    crate::output::print_eject(&ejected);
    // The code in memory must equal the file on disk again.
    let mem = injector::ProcessMemory::open(pid)?;
    let maps = injector::process::read_maps(pid)?;
    let symbols = injector::process::ProcessSymbols::load(pid, &maps)?;
    for h in &ejected.hooks {
        let module = symbols
            .module_for(h.function)
            .context("module of an ejected hook")?;
        let on_disk = module
            .file_bytes(h.patch_addr, h.patch_len as u64)
            .context("the patch's bytes in the file")?;
        let in_memory = injector::Memory::read_vec(&mem, h.patch_addr, h.patch_len)?;
        if on_disk != in_memory.as_slice() {
            bail!(
                "{} was not restored: memory {:02x?} vs file {:02x?}",
                h.name,
                in_memory,
                on_disk
            );
        }
    }
    println!(
        "verified: the code of bar and foo in memory equals {} again",
        exe.display()
    );
    drop(target);
    let _ = std::fs::remove_dir_all(exe.parent().unwrap_or(&exe));
    println!("\ndemo target stopped. Done.");
    Ok(())
}
