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
use injector::{backtrace_core_cached, BacktraceOptions, CoreFile, CoreOptions, DwarfCache};
use ops::{Operations, Standalone};

/// Stash function arguments on the stack of a running process, then read them back from any unwind.
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
    /// Sample every thread's stack into a flame graph (.svg), speedscope (.json) or collapsed stacks (.txt).
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
                    bt_core(core, a.exe.clone(), a.sysroot.clone(), &opts, a.json, view)?
                }
                (Some(pid), None) => {
                    let (bt, warnings) = ops.backtrace(pid, &a)?;
                    for w in warnings {
                        eprintln!("argstash: warning: {w}");
                    }
                    output::print_backtrace(&bt, a.json, view);
                }
                (None, None) => anyhow::bail!("give --pid PID or --core FILE"),
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

/// `bt --core`: unwinds a core file; files it maps that are missing here are named on stderr.
fn bt_core(
    path: &Path,
    exe: Option<PathBuf>,
    sysroot: Option<PathBuf>,
    opts: &BacktraceOptions,
    json: bool,
    view: output::View,
) -> Result<()> {
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
    let core = CoreFile::open(path, CoreOptions { exe, sysroot })?;
    let bt = backtrace_core_cached(&core, opts, &DwarfCache::from_env())?;
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
