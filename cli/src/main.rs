//! `argstash`: make function arguments recoverable from any later stack unwind.
//!
//! A thin driver of the `injector` library: parse arguments, call the library,
//! print text or JSON. Exit codes: 0 success, 1 the operation failed, 2 usage error.

mod bus;
mod demo;
mod errors;
mod ops;
mod output;
mod python_output;
mod record;
mod run;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use injector::{backtrace_core, BacktraceOptions, CoreFile, CoreOptions, InstallOptions, Pid, Tid};
use ops::{Operations, Standalone};

/// Stash function arguments on the stack of a running process, then read them back from any unwind.
#[derive(Parser)]
#[command(name = "argstash", version, about, long_about = None)]
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
}

#[derive(Args)]
struct InjectArgs {
    /// Target process id.
    #[arg(long)]
    pid: Pid,
    /// Function to hook: NAME, MODULE!NAME (e.g. libc.so.6!write) or 0xADDR, optionally
    /// with its parameter list for `bt` when there is no DWARF: 'bar(int, const char *)'. Repeatable.
    #[arg(long = "func", value_name = "FUNC", required_unless_present_any = ["addr", "python"])]
    funcs: Vec<String>,
    /// Function entry address to hook (same as --func 0xADDR). Repeatable.
    #[arg(long = "addr", value_name = "0xADDR", value_parser = parse_addr)]
    addr: Vec<u64>,
    /// Hook CPython's frame evaluator (_PyEval_EvalFrameDefault, in libpython or the
    /// executable), so `bt` pairs each native evaluator frame with its Python frames exactly.
    #[arg(long, action = clap::ArgAction::Count)]
    python: u8,
    /// How each hook stashes, and how its unwind information is registered.
    #[command(flatten)]
    stash: StashArgs,
}

#[derive(Args)]
struct EjectArgs {
    /// Target process id.
    #[arg(long)]
    pid: Pid,
    /// Function whose hook to remove: NAME, MODULE!NAME or 0xADDR. Repeatable.
    #[arg(
        long = "func",
        value_name = "FUNC",
        required_unless_present_any = ["all", "python"],
        conflicts_with = "all"
    )]
    funcs: Vec<String>,
    /// Remove every hook (the PEP 523 extension's call-through hooks stay: only it can remove them).
    #[arg(long)]
    all: bool,
    /// Remove the Python hook (`inject --python`).
    #[arg(long, action = clap::ArgAction::Count, conflicts_with = "all")]
    python: u8,
    /// How deregistering the hooks' unwind information may run code in the target.
    #[command(flatten)]
    calls: CallArgs,
}

/// How each hook stashes (`inject`, `run`).
#[derive(Args)]
struct StashArgs {
    /// Incoming 8-byte stack words to copy (arguments beyond the registers), 0-16: `N` for
    /// every function, `NAME=N` for the --func NAME alone (repeatable; wins over `N`).
    /// Default: found from each function's code; variadic functions get 8. Give it when
    /// argstash cannot tell.
    #[arg(long, value_name = "[NAME=]N", value_parser = parse_stack_args)]
    stack_args: Vec<StackArgs>,
    /// Also stash xmm0-xmm7 (float and double arguments); `bt` shows them as doubles.
    #[arg(long)]
    float_args: bool,
    /// How the hooks' unwind information is registered.
    #[command(flatten)]
    calls: CallArgs,
}

/// One `--stack-args` value: for every function, or for one `--func` name.
#[derive(Clone, Debug, PartialEq, Eq)]
enum StackArgs {
    /// `N`.
    All(u16),
    /// `NAME=N`.
    Function(String, u16),
}

fn parse_stack_args(s: &str) -> Result<StackArgs, String> {
    let words = |n: &str| match n.trim().parse::<u16>() {
        Ok(n) if n <= 16 => Ok(n),
        _ => Err(format!(
            "`{n}` is not a number of stack words from 0 to 16 (write N or NAME=N)"
        )),
    };
    match s.rsplit_once('=') {
        None => words(s).map(StackArgs::All),
        Some((name, _)) if name.trim().is_empty() => {
            Err("write NAME=N, with the --func name before the `=`".to_string())
        }
        Some((name, n)) => Ok(StackArgs::Function(name.trim().to_string(), words(n)?)),
    }
}

impl StashArgs {
    /// The window for every function (`--stack-args N`), if given.
    fn global_window(&self) -> Option<u16> {
        self.stack_args.iter().rev().find_map(|s| match s {
            StackArgs::All(n) => Some(*n),
            StackArgs::Function(..) => None,
        })
    }

    /// The `--stack-args NAME=N` windows by name; refuses a NAME that is not one of
    /// the `--func` names (`funcs`, their parameter lists left out) and a name given twice.
    fn function_windows(&self, funcs: &[&str]) -> Result<Vec<(String, u16)>> {
        let mut out: Vec<(String, u16)> = Vec::new();
        for s in &self.stack_args {
            let StackArgs::Function(name, n) = s else {
                continue;
            };
            if !funcs.contains(&name.as_str()) {
                anyhow::bail!(
                    "--stack-args {name}={n}: no --func names `{name}` (the --func names: {}); \
                     write NAME as it is given to --func, without its parameter list, or \
                     add --func '{name}'",
                    if funcs.is_empty() {
                        "none".to_string()
                    } else {
                        funcs.join(", ")
                    }
                );
            }
            if out.iter().any(|(m, _)| m == name) {
                anyhow::bail!("--stack-args gives `{name}` a window twice; give it once");
            }
            out.push((name.clone(), *n));
        }
        Ok(out)
    }

    /// The library's install options for these flags.
    fn install_options(&self) -> InstallOptions {
        let global = self.global_window();
        InstallOptions {
            stack_words: global.unwrap_or(0),
            force_stack_words: global.is_some(),
            float_args: self.float_args,
            calls: self.calls.policy(),
        }
    }
}

/// Whether and how argstash may run the target's own functions (`inject`,
/// `eject`, `run`).
#[derive(Args, Clone, Copy)]
struct CallArgs {
    /// Whether argstash may run the target's own functions after the stop, to register
    /// the hooks' unwind information with libgcc (C++ exceptions) and load the gdb JIT
    /// helper: `safe` (default) only on a thread proved to be outside the allocator,
    /// the loader and libgcc (skipped, with a note, when none is found in time); `off`
    /// never.
    #[arg(long, value_name = "WHEN", default_value = "safe")]
    unwind_registration: Registration,
    /// How long to look for a thread at a safe point, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    safe_point_wait: u64,
    /// Hook functions that a C++ exception could cross even when their unwind information
    /// cannot be registered with the program's unwinder first. Without it such an install
    /// is refused; with it, an exception thrown through such a hook ends the program.
    #[arg(long)]
    accept_unwind_loss: bool,
}

impl CallArgs {
    /// The library's call policy for these flags.
    fn policy(&self) -> injector::CallPolicy {
        injector::CallPolicy {
            calls: match self.unwind_registration {
                Registration::Safe => injector::RemoteCalls::AtSafePoints,
                Registration::Off => injector::RemoteCalls::Off,
            },
            wait: std::time::Duration::from_millis(self.safe_point_wait),
            unprotected: if self.accept_unwind_loss {
                injector::UnprotectedHooks::Accept
            } else {
                injector::UnprotectedHooks::Refuse
            },
        }
    }

    /// Whether these are the defaults, the only policy argstashd uses.
    fn is_default(&self) -> bool {
        self.unwind_registration == Registration::Safe
            && self.safe_point_wait == 500
            && !self.accept_unwind_loss
    }
}

/// `--unwind-registration` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Registration {
    /// Only at a proved safe point.
    Safe,
    /// Never run code in the target.
    Off,
}

#[derive(Args)]
struct ListArgs {
    /// Target process id.
    #[arg(long)]
    pid: Pid,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct BtArgs {
    /// Target process id.
    #[arg(long, required_unless_present = "core", conflicts_with_all = ["core", "exe", "sysroot"])]
    pid: Option<Pid>,
    /// Read a core file instead of a live process.
    #[arg(long, value_name = "FILE")]
    core: Option<PathBuf>,
    /// With --core: the crashed program's executable, if not at the path the core records.
    #[arg(long, value_name = "PATH", requires = "core")]
    exe: Option<PathBuf>,
    /// With --core: resolve the core's mapped file paths under this directory.
    #[arg(long, value_name = "DIR", requires = "core")]
    sysroot: Option<PathBuf>,
    /// Only this thread.
    #[arg(long)]
    tid: Option<Tid>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Show trampoline frames too.
    #[arg(long)]
    show_trampolines: bool,
    /// Stop every thread to read it, even one blocked in a system call (read
    /// without a stop by default, so its call is not interrupted).
    #[arg(long, conflicts_with = "core")]
    always_stop: bool,
    /// Show only the Python frames of a CPython process.
    #[arg(long, action = clap::ArgAction::Count, conflicts_with = "native")]
    python: u8,
    /// Show only the native frames (no Python frames interleaved).
    #[arg(long, action = clap::ArgAction::Count)]
    native: u8,
    /// Look for separate debug files under DIR instead of /usr/lib/debug (build-id and
    /// debuglink layout). Repeatable; searched in order.
    #[arg(long = "debug-dir", value_name = "DIR")]
    debug_dirs: Vec<std::path::PathBuf>,
}

fn parse_addr(s: &str) -> Result<u64, String> {
    let hex = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .ok_or("write the address in hex, e.g. 0x401136")?;
    u64::from_str_radix(hex, 16).map_err(|e| format!("not a hex address: {e}"))
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
                    python_output::print_backtrace(&bt, a.json, view);
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
    view: python_output::View,
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
    let bt = backtrace_core(&core, opts)?;
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
    python_output::print_backtrace(&bt.backtrace, json, view);
    Ok(())
}

/// Which frames `bt` prints (`--python`, `--native`).
fn bt_view(a: &BtArgs) -> python_output::View {
    match (a.python > 0, a.native > 0) {
        (true, _) => python_output::View::Python,
        (_, true) => python_output::View::Native,
        _ => python_output::View::All,
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
