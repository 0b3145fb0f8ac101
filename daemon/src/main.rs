//! `argstashd`: the argstash injector as a D-Bus service.
//!
//! Serves `org.argstash.Injector1` (see the `argstash-dbus` crate for the contract)
//! on the system bus, the session bus or any bus address. Every injector call runs
//! on a dedicated thread per target pid; each caller is authorised against the
//! target the way the kernel authorises ptrace.

mod auth;
mod hints;
mod publish;
mod readers;
mod requests;
mod service;
mod shared;
mod worker;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use argstash_dbus::{BUS_NAME, MANAGER_PATH};
use clap::{CommandFactory, Parser};
use zbus::connection::Builder;

use crate::readers::ReaderCache;
use crate::service::Manager;
use crate::shared::Shared;
use crate::worker::Workers;
use injector::DebugSearch;

/// Serve the argstash injector on D-Bus.
#[derive(Parser)]
#[command(name = "argstashd", version, about, long_about = None)]
struct Args {
    /// Use the system bus (the default).
    #[arg(long, conflicts_with_all = ["session", "address"])]
    system: bool,
    /// Use the session bus.
    #[arg(long, conflicts_with = "address")]
    session: bool,
    /// Use the bus at this D-Bus address, e.g. unix:path=/tmp/bus.
    #[arg(long, value_name = "ADDR")]
    address: Option<String>,
    /// Directory of the hint file listing pids with arenas.
    #[arg(long, value_name = "DIR", default_value = "/run/argstash")]
    state_dir: PathBuf,
    /// How long a call waits for its target before failing with Busy, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    timeout_ms: u64,
    /// How many processes' symbols and unwind tables to keep between Backtrace
    /// calls (least recently used go first; 0 keeps none).
    #[arg(long, value_name = "N", default_value_t = 8)]
    reader_cache: usize,
    /// Keep a module's debug info between calls only when its DWARF is at most
    /// this many KiB; larger debug info is loaded again by each Backtrace.
    #[arg(long, value_name = "KIB", default_value_t = 65536)]
    debug_cache_kib: usize,
    /// Look for separate debug files (by build-id or .gnu_debuglink) in DIR
    /// instead of /usr/lib/debug; repeat for several, in order.
    #[arg(long, value_name = "DIR")]
    debug_dir: Vec<PathBuf>,
    /// Print the argstashd(8) man page (roff) and exit.
    #[arg(long, hide = true, exclusive = true)]
    print_man_page: bool,
}

async fn serve(args: Args) -> Result<()> {
    let shared = Shared::new(
        Workers::new(Duration::from_millis(args.timeout_ms)),
        args.state_dir.clone(),
        ReaderCache::new(
            args.reader_cache,
            args.debug_cache_kib.saturating_mul(1024),
            (!args.debug_dir.is_empty()).then(|| DebugSearch {
                dirs: args.debug_dir.clone(),
                root: None,
            }),
        ),
    );
    let (builder, which) = if let Some(addr) = &args.address {
        let b = Builder::address(addr.as_str()).with_context(|| {
            format!("bad bus address {addr} (write it as D-Bus does, e.g. unix:path=/run/bus)")
        })?;
        (b, format!("the bus at {addr}"))
    } else if args.session {
        (Builder::session()?, "the session bus".to_string())
    } else {
        (Builder::system()?, "the system bus".to_string())
    };
    let conn = builder
        .serve_at(
            MANAGER_PATH,
            Manager {
                shared: shared.clone(),
            },
        )?
        .build()
        .await
        .with_context(|| {
            format!(
                "cannot connect to {which} (is a dbus-daemon listening there? \
                 --session, --system or --address ADDR choose another bus)"
            )
        })?;
    shared.connect(&conn).await.context("talking to the bus")?;
    shared.restore(&conn).await;
    conn.request_name(BUS_NAME).await.with_context(|| {
        format!(
            "cannot own {BUS_NAME} (is another argstashd running? does the bus policy allow it?)"
        )
    })?;
    eprintln!(
        "argstashd {}: serving {BUS_NAME} on {}",
        env!("CARGO_PKG_VERSION"),
        conn.unique_name().map(|n| n.as_str()).unwrap_or("?")
    );
    std::future::pending::<()>().await;
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.print_man_page {
        return match print_man_page() {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("argstashd: writing the man page: {e}");
                std::process::ExitCode::from(1)
            }
        };
    }
    // The daemon lives long and parses large files now and then (debug info), so
    // keep its heap from holding on to them: one glibc arena per worker thread
    // (one thread per target pid) would keep each thread's freed memory apart,
    // and a fixed mmap threshold (glibc raises it after each large free) makes
    // large buffers separate mappings that go back to the system when freed.
    // SAFETY: mallopt only sets glibc allocator parameters; no thread runs yet.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
    match zbus::block_on(serve(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("argstashd: {}", error_text(&e));
            std::process::ExitCode::from(1)
        }
    }
}

/// Writes argstashd(8) to stdout (scripts/packaging-files.sh keeps packaging/man/ current).
fn print_man_page() -> std::io::Result<()> {
    clap_mangen::Man::new(Args::command())
        .section("8")
        .render(&mut std::io::stdout())
}

/// `e` and its causes, each said once: a cause whose text an outer message
/// already quotes (zbus repeats its I/O error's text) is not repeated.
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
