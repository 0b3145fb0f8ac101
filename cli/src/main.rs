//! `argstash`: make function arguments recoverable from any later stack unwind.
//!
//! A thin driver of the `injector` library: parse arguments, call the library,
//! print text or JSON. Exit codes: 0 success, 1 the operation failed, 2 usage error.

mod args;
mod bus;
mod demo;
mod docs;
mod errors;
mod ops;
mod output;
mod record;
mod run;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use args::{BtArgs, EjectArgs, InjectArgs, ListArgs};
use clap::{CommandFactory, Parser, Subcommand};
use injector::{
    backtrace_core_cached, coredump, BacktraceOptions, CoreFile, CoreOptions, DwarfCache,
};
use ops::{Operations, Standalone};

/// Keep function arguments readable from any unwind: inject, eject and list hooks; read them with bt, record and run; try it with demo; completions for your shell.
#[derive(Parser)]
#[command(name = "argstash", version)]
struct Cli {
    /// Send the subcommand through argstashd on this bus: system, session or a D-Bus address.
    #[arg(long, global = true, value_name = "BUS")]
    bus: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Hook functions so their arguments are stashed on the stack while they run.
    Inject(InjectArgs),
    /// Remove hooks, restoring the original bytes exactly.
    Eject(EjectArgs),
    /// List the hooks recorded in a process.
    List(ListArgs),
    /// Print the backtrace of every thread (or one), with stashed arguments.
    Bt(BtArgs),
    /// Sample every thread's stack into a flame graph (.svg), speedscope (.json), collapsed stacks (.txt) or pprof (.pb.gz).
    Record(record::RecordArgs),
    /// Build and run the bundled demo target, hook it, and show the difference.
    Demo,
    /// Start a command with hooks in place before its main; print every thread's
    /// backtrace if it crashes, times out or gets a chosen signal.
    Run(run::RunArgs),
    /// Print a shell completion script for bash, zsh, fish, elvish or powershell.
    ///
    /// The Debian package installs those for bash, zsh and fish. Otherwise, e.g. for bash:
    /// argstash completions bash > ~/.local/share/bash-completion/completions/argstash
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (argstash.1, argstash-SUBCOMMAND.1) into DIR.
    #[command(hide = true)]
    ManPages {
        /// Directory to write them into (created if missing).
        dir: PathBuf,
    },
}

fn run(cli: Cli) -> Result<()> {
    let ops: Box<dyn Operations> = match &cli.bus {
        Some(bus) => Box::new(bus::Bus::new(bus)),
        None => Box::new(ops::Local),
    };
    match cli.command {
        Command::Inject(a) => output::print_install(&ops.inject(&a)?),
        Command::Eject(a) => output::print_eject(&ops.eject(&a)?),
        Command::List(a) => {
            let hooks = ops.list(a.pid)?;
            output::print_list(a.pid, &hooks, a.json);
            if !a.json {
                // The rows are extra: a failure to read them is not an error.
                if let Ok((status, has_libgcc)) = ops.unwind_status(a.pid) {
                    output::print_unwind_status(&status, has_libgcc, &hooks);
                }
            }
        }
        Command::Bt(a) => {
            let view = bt_view(&a);
            match (a.pid, &a.core) {
                (_, Some(core)) => {
                    ops.allows(Standalone::Core)?;
                    let opts = ops::bt_options(&a);
                    let core = open_core(core, a.exe.clone(), a.sysroot.clone())?;
                    bt_core(&core, &opts, a.json, view)?
                }
                (_, None) if a.coredump.is_some() => {
                    ops.allows(Standalone::Core)?;
                    let opts = ops::bt_options(&a);
                    let spec = a.coredump.as_deref().unwrap_or("latest");
                    let core = open_coredump(spec, a.exe.clone(), a.sysroot.clone())?;
                    bt_core(&core, &opts, a.json, view)?
                }
                (Some(pid), None) => {
                    let (bt, warnings) = ops.backtrace(pid, &a)?;
                    for w in warnings {
                        eprintln!("argstash: warning: {w}");
                    }
                    output::print_backtrace(&bt, a.json, view);
                }
                (None, None) => {
                    anyhow::bail!("give --pid PID, --core FILE or --coredump PID|latest|NAME")
                }
            }
        }
        Command::Record(a) => {
            ops.allows(Standalone::Record)?;
            record::run(a)?
        }
        Command::Demo => {
            ops.allows(Standalone::Demo)?;
            demo::run()?
        }
        Command::Run(a) => {
            ops.allows(Standalone::Run)?;
            std::process::exit(run::main(a))
        }
        Command::Completions { shell } => docs::completions(Cli::command(), shell),
        Command::ManPages { dir } => docs::man_pages(Cli::command(), &dir)?,
    }
    Ok(())
}

/// Checks `--exe` and `--sysroot` as given with `--core` or `--coredump`.
fn core_options(exe: Option<PathBuf>, sysroot: Option<PathBuf>) -> Result<CoreOptions> {
    if let Some(exe) = &exe {
        anyhow::ensure!(
            exe.is_file(),
            "--exe {}: no such file; give the path of the program that crashed",
            exe.display()
        );
    }
    if let Some(root) = &sysroot {
        anyhow::ensure!(
            root.is_dir(),
            "--sysroot {}: not a directory; give the directory holding a copy of the crashed machine's files",
            root.display()
        );
    }
    Ok(CoreOptions { exe, sysroot })
}

/// `bt --core FILE`: the core file, opened where it is.
fn open_core(path: &Path, exe: Option<PathBuf>, sysroot: Option<PathBuf>) -> Result<CoreFile> {
    Ok(CoreFile::open(path, core_options(exe, sysroot)?)?)
}

/// `bt --coredump SPEC`: the newest core systemd-coredump stored that `spec`
/// names; which one, and the other matches, are named on stderr.
fn open_coredump(spec: &str, exe: Option<PathBuf>, sysroot: Option<PathBuf>) -> Result<CoreFile> {
    let options = core_options(exe, sysroot)?;
    let selector = coredump::Selector::parse(spec);
    let dir = Path::new(coredump::SYSTEMD_COREDUMP_DIR);
    let found = coredump::select(dir, &selector).map_err(coredump_error)?;
    let c = &found.chosen;
    eprintln!(
        "argstash: reading {} (pid {}, {}, crashed {})",
        c.path.display(),
        c.pid(),
        c.comm(),
        coredump::utc_time(c.usec())
    );
    if !found.others.is_empty() {
        let pids: Vec<String> = found.others.iter().map(|o| o.pid().to_string()).collect();
        eprintln!(
            "argstash: note: {} older core(s) match {selector} too (pid {}); read one with --coredump PID",
            found.others.len(),
            pids.join(", ")
        );
    }
    coredump::open(c, options).map_err(coredump_error)
}

/// A coredump error with the command-line hint its cause calls for.
fn coredump_error(e: coredump::CoredumpError) -> anyhow::Error {
    use coredump::CoredumpError as E;
    let hint = match &e {
        E::NoMatch { .. } => Some("give one of the pids above, a name above, or `latest`"),
        E::Decompress { .. } => Some(
            "the stored file is damaged (test it with `zstd -t`, `lz4 -t` or `xz -t` as its suffix says); read another core with --coredump PID, or reproduce the crash",
        ),
        E::TempFile { .. } => Some("set TMPDIR to a writable directory with room for the core"),
        _ => None,
    };
    match hint {
        Some(h) => anyhow::anyhow!("{e}\n  {h}"),
        None => anyhow::Error::new(e),
    }
}

/// `bt --core`/`--coredump`: unwinds a core; files it maps that are missing here are named on stderr.
fn bt_core(core: &CoreFile, opts: &BacktraceOptions, json: bool, view: output::View) -> Result<()> {
    let bt = backtrace_core_cached(core, opts, &DwarfCache::from_env())?;
    for w in &bt.debug_warnings {
        eprintln!("argstash: warning: {w}");
    }
    for m in &bt.missing {
        eprintln!(
            "argstash: note: no symbols for {} (looked at {}: {}); its frames show addresses only (use --sysroot DIR or --exe PATH)",
            m.path,
            m.looked_at.display(),
            m.reason
        );
    }
    if !json {
        let how = match bt.signal {
            0 => "taken without a fatal signal (e.g. by gcore)".to_string(),
            sig => format!("killed by signal {}", signal_name(sig)),
        };
        println!("Core of process {} ({}), {how}:", core.pid, core.command);
    }
    output::print_backtrace(&bt.backtrace, json, view);
    Ok(())
}

/// Which frames `bt` prints (`--python`, `--native`).
fn bt_view(a: &BtArgs) -> output::View {
    match (a.python > 0, a.native > 0) {
        (true, _) => output::View::Python,
        (_, true) => output::View::Native,
        _ => output::View::All,
    }
}

/// `11 (SIGSEGV)`: a signal number with its name when it has one.
fn signal_name(sig: i32) -> String {
    match nix::sys::signal::Signal::try_from(sig) {
        Ok(s) => format!("{sig} ({})", s.as_str()),
        Err(_) => sig.to_string(),
    }
}

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away
    // (`argstash bt | head`) instead of panicking in println!. Output is printed only
    // after an operation on the target has finished, so this never interrupts one.
    // SAFETY: setting a signal disposition to SIG_DFL before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("argstash: {}", errors::error_text(&e));
            ExitCode::from(1)
        }
    }
}
