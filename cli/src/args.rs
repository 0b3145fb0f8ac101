//! The subcommands' arguments as the command line gives them (clap), and what
//! they mean to the library: install options, call policy, stack windows.

use anyhow::Result;
use clap::Args;
use injector::{InstallOptions, Pid, Tid};
use std::path::PathBuf;

/// `inject`.
#[derive(Args)]
pub struct InjectArgs {
    /// Target process id.
    #[arg(long)]
    pub pid: Pid,
    /// Function to hook: NAME, MODULE!NAME (e.g. libc.so.6!write) or 0xADDR, optionally
    /// with its parameter list for `bt` when there is no DWARF: 'bar(int, const char *)'. Repeatable.
    #[arg(long = "func", value_name = "FUNC", required_unless_present_any = ["addr", "python"])]
    pub funcs: Vec<String>,
    /// Function entry address to hook (same as --func 0xADDR). Repeatable.
    #[arg(long = "addr", value_name = "0xADDR", value_parser = parse_addr)]
    pub addr: Vec<u64>,
    /// Hook CPython's frame evaluator (_PyEval_EvalFrameDefault, in libpython or the
    /// executable), so `bt` pairs each native evaluator frame with its Python frames exactly.
    #[arg(long, action = clap::ArgAction::Count)]
    pub python: u8,
    /// How each hook stashes, and how its unwind information is registered.
    #[command(flatten)]
    pub stash: StashArgs,
}

/// `eject`.
#[derive(Args)]
pub struct EjectArgs {
    /// Target process id.
    #[arg(long)]
    pub pid: Pid,
    /// Function whose hook to remove: NAME, MODULE!NAME or 0xADDR. Repeatable.
    #[arg(
        long = "func",
        value_name = "FUNC",
        required_unless_present_any = ["all", "python"],
        conflicts_with = "all"
    )]
    pub funcs: Vec<String>,
    /// Remove every hook (the PEP 523 extension's call-through hooks stay: only it can remove them).
    #[arg(long)]
    pub all: bool,
    /// Remove the Python hook (`inject --python`).
    #[arg(long, action = clap::ArgAction::Count, conflicts_with = "all")]
    pub python: u8,
    /// How deregistering the hooks' unwind information may run code in the target.
    #[command(flatten)]
    pub calls: CallArgs,
}

/// How each hook stashes (`inject`, `run`).
#[derive(Args)]
pub struct StashArgs {
    /// Incoming 8-byte stack words to copy (arguments beyond the registers), 0-16: `N` for
    /// every function, `NAME=N` for the --func NAME alone (repeatable; wins over `N`).
    /// Default: found from each function's code; variadic functions get 8. Give it when
    /// argstash cannot tell.
    #[arg(long, value_name = "[NAME=]N", value_parser = parse_stack_args)]
    pub stack_args: Vec<StackArgs>,
    /// Also stash xmm0-xmm7 (float and double arguments); `bt` shows them as doubles.
    #[arg(long)]
    pub float_args: bool,
    /// How the hooks' unwind information is registered.
    #[command(flatten)]
    pub calls: CallArgs,
}

/// One `--stack-args` value: for every function, or for one `--func` name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StackArgs {
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
    pub fn global_window(&self) -> Option<u16> {
        self.stack_args.iter().rev().find_map(|s| match s {
            StackArgs::All(n) => Some(*n),
            StackArgs::Function(..) => None,
        })
    }

    /// The `--stack-args NAME=N` windows by name; refuses a NAME that is not one of
    /// the `--func` names (`funcs`, their parameter lists left out) and a name given twice.
    pub fn function_windows(&self, funcs: &[&str]) -> Result<Vec<(String, u16)>> {
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
    pub fn install_options(&self) -> InstallOptions {
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
pub struct CallArgs {
    /// Whether argstash may run the target's own functions after the stop, to register
    /// the hooks' unwind information with libgcc (C++ exceptions) and load the gdb JIT
    /// helper: `safe` (default) only on a thread proved to be outside the allocator,
    /// the loader and libgcc (skipped, with a note, when none is found in time); `off`
    /// never.
    #[arg(long, value_name = "WHEN", default_value = "safe")]
    pub unwind_registration: Registration,
    /// How long to look for a thread at a safe point, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub safe_point_wait: u64,
    /// Hook functions that a C++ exception could cross even when their unwind information
    /// cannot be registered with the program's unwinder first. Without it such an install
    /// is refused; with it, an exception thrown through such a hook ends the program.
    #[arg(long)]
    pub accept_unwind_loss: bool,
}

impl CallArgs {
    /// The library's call policy for these flags.
    pub fn policy(&self) -> injector::CallPolicy {
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
    pub fn is_default(&self) -> bool {
        self.unwind_registration == Registration::Safe
            && self.safe_point_wait == 500
            && !self.accept_unwind_loss
    }
}

/// `--unwind-registration` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Registration {
    /// Only at a proved safe point.
    Safe,
    /// Never run code in the target.
    Off,
}

/// `list`.
#[derive(Args)]
pub struct ListArgs {
    /// Target process id.
    #[arg(long)]
    pub pid: Pid,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `bt`.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("from_core").args(["core", "coredump"])))]
pub struct BtArgs {
    /// Target process id.
    #[arg(long, required_unless_present_any = ["core", "coredump"], conflicts_with_all = ["core", "coredump", "exe", "sysroot"])]
    pub pid: Option<Pid>,
    /// Read a core file instead of a live process.
    #[arg(long, value_name = "FILE", conflicts_with = "coredump")]
    pub core: Option<PathBuf>,
    /// Read a core stored by systemd-coredump: `latest`, a crashed PID, or a program
    /// NAME (its command name or executable); the newest match is read.
    #[arg(long, value_name = "PID|latest|NAME")]
    pub coredump: Option<String>,
    /// With --core or --coredump: the crashed program's executable, if not at the path the core records.
    #[arg(long, value_name = "PATH", requires = "from_core")]
    pub exe: Option<PathBuf>,
    /// With --core or --coredump: resolve the core's mapped file paths under this directory.
    #[arg(long, value_name = "DIR", requires = "from_core")]
    pub sysroot: Option<PathBuf>,
    /// Only this thread.
    #[arg(long)]
    pub tid: Option<Tid>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Show trampoline frames too.
    #[arg(long)]
    pub show_trampolines: bool,
    /// Stop every thread to read it, even one blocked in a system call (read
    /// without a stop by default, so its call is not interrupted).
    #[arg(long, conflicts_with = "from_core")]
    pub always_stop: bool,
    /// Show only the Python frames of a CPython process.
    #[arg(long, action = clap::ArgAction::Count, conflicts_with = "native")]
    pub python: u8,
    /// Show only the native frames (no Python frames interleaved).
    #[arg(long, action = clap::ArgAction::Count)]
    pub native: u8,
    /// Look for separate debug files under DIR instead of /usr/lib/debug (build-id and
    /// debuglink layout). Repeatable; searched in order.
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dirs: Vec<std::path::PathBuf>,
}

fn parse_addr(s: &str) -> Result<u64, String> {
    let hex = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .ok_or("write the address in hex, e.g. 0x401136")?;
    u64::from_str_radix(hex, 16).map_err(|e| format!("not a hex address: {e}"))
}
