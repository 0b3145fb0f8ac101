//! `argstash`: make function arguments recoverable from any later stack unwind.
//!
//! A thin driver of the `injector` library: parse arguments, call the library,
//! print text or JSON. Exit codes: 0 success, 1 the operation failed, 2 usage error.

mod bus;
mod demo;
mod output;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use injector::backtrace::{BacktraceOptions, ProcessReader};
use injector::debuginfo::DebugSearch;
use injector::hooks::{eject, install_with_signatures, list, EjectWhat, InstallOptions};
use injector::symbols::FuncSpec;

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
    /// Build and run the bundled demo target, hook it, and show the difference.
    Demo,
}

#[derive(Args)]
struct InjectArgs {
    /// Target process id.
    #[arg(long)]
    pid: i32,
    /// Function to hook: NAME, MODULE!NAME (e.g. libc.so.6!write) or 0xADDR, optionally
    /// with its parameter list for `bt` when there is no DWARF: 'bar(int, const char *)'. Repeatable.
    #[arg(long = "func", value_name = "FUNC", required_unless_present = "addr")]
    funcs: Vec<String>,
    /// Function entry address to hook (same as --func 0xADDR). Repeatable.
    #[arg(long = "addr", value_name = "0xADDR", value_parser = parse_addr)]
    addr: Vec<u64>,
    /// Incoming stack words to copy for functions that take arguments on the stack (7+ integer args).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=16))]
    stack_args: u16,
}

#[derive(Args)]
struct EjectArgs {
    /// Target process id.
    #[arg(long)]
    pid: i32,
    /// Function whose hook to remove: NAME, MODULE!NAME or 0xADDR. Repeatable.
    #[arg(
        long = "func",
        value_name = "FUNC",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    funcs: Vec<String>,
    /// Remove every hook.
    #[arg(long)]
    all: bool,
}

#[derive(Args)]
struct ListArgs {
    /// Target process id.
    #[arg(long)]
    pid: i32,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct BtArgs {
    /// Target process id.
    #[arg(long)]
    pid: i32,
    /// Only this thread.
    #[arg(long)]
    tid: Option<i32>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Show trampoline frames too.
    #[arg(long)]
    show_trampolines: bool,
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
    if let Some(bus) = &cli.bus {
        return bus::run(bus, cli.command);
    }
    match cli.command {
        Command::Inject(a) => {
            let mut specs: Vec<FuncSpec> = Vec::new();
            let mut signatures = Vec::new();
            for f in &a.funcs {
                let (name, sig) = injector::args::split_signature(f)?;
                specs.push(FuncSpec::parse(name));
                signatures.push(sig);
            }
            specs.extend(a.addr.iter().map(|x| FuncSpec::Addr(*x)));
            let report = install_with_signatures(
                a.pid,
                &specs,
                &signatures,
                &InstallOptions {
                    stack_words: a.stack_args,
                },
            )?;
            output::print_install(&report);
        }
        Command::Eject(a) => {
            let what = if a.all {
                EjectWhat::All
            } else {
                EjectWhat::Functions(a.funcs.iter().map(|f| FuncSpec::parse(f)).collect())
            };
            let report = eject(a.pid, &what)?;
            output::print_eject(&report);
        }
        Command::List(a) => {
            let hooks = list(a.pid)?;
            output::print_list(a.pid, &hooks, a.json);
        }
        Command::Bt(a) => {
            let mut reader = ProcessReader::new(a.pid);
            if !a.debug_dirs.is_empty() {
                reader.set_debug_search(DebugSearch {
                    dirs: a.debug_dirs.clone(),
                });
            }
            let bt = reader.backtrace(&BacktraceOptions {
                tid: a.tid,
                show_trampolines: a.show_trampolines,
            })?;
            for w in reader.debug_warnings() {
                eprintln!("argstash: warning: {w}");
            }
            output::print_backtrace(&bt, a.json);
            // The process exits next: skip freeing megabytes of parsed debug info.
            std::mem::forget(reader);
        }
        Command::Demo => demo::run()?,
    }
    Ok(())
}

/// The error and its causes, each cause once: library errors already put their
/// cause in their own message, so a cause whose text is there is not repeated.
fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("argstash: {}", error_text(&e));
            ExitCode::from(1)
        }
    }
}
