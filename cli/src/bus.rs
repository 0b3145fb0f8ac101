//! `--bus`: the operations sent through `argstashd` over D-Bus.
//!
//! Requests are built from the subcommand's arguments; replies come back as the
//! `argstash-dbus` wire types and are read back into the injector's types by
//! [`argstash_dbus::from_wire`], the inverse of what the daemon sends, so the
//! shared printers print exactly what the standalone command prints.

use std::cell::OnceCell;
use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use argstash_dbus::{from_wire, Injector1ProxyBlocking};
use argstash_dbus::{
    OPT_ALWAYS_STOP, OPT_FLOAT_ARGS, OPT_FUNCTION_STACK_ARGS, OPT_PYTHON, OPT_SHOW_TRAMPOLINES,
    OPT_STACK_ARGS,
};
use injector::{Backtrace, EjectReport, HookInfo, HookUnwindStatus, InstallReport, Pid};
use zbus::blocking::{connection, Connection};
use zbus::zvariant::Value;

use crate::args::{BtArgs, CallArgs, EjectArgs, InjectArgs};
use crate::ops::{Operations, Standalone};

/// argstashd on a bus, connected at the first call.
pub struct Bus {
    /// `system`, `session` or a D-Bus address.
    bus: String,
    conn: OnceCell<Connection>,
}

impl Bus {
    /// The daemon on `bus` (`system`, `session` or a D-Bus address).
    pub fn new(bus: &str) -> Bus {
        Bus {
            bus: bus.to_string(),
            conn: OnceCell::new(),
        }
    }

    /// The manager object's proxy, connecting first if need be.
    fn proxy(&self) -> Result<Injector1ProxyBlocking<'_>> {
        let conn = match self.conn.get() {
            Some(c) => c,
            None => {
                let c = connect(&self.bus)?;
                self.conn.get_or_init(|| c)
            }
        };
        Ok(Injector1ProxyBlocking::builder(conn)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()?)
    }
}

/// Connects to `system`, `session` or a D-Bus address.
fn connect(bus: &str) -> Result<Connection> {
    let conn = match bus {
        "system" => Connection::system(),
        "session" => Connection::session(),
        addr => connection::Builder::address(addr)
            .with_context(|| format!("bad bus address `{addr}`"))?
            .build(),
    };
    // zbus's message already names its cause: print it once.
    conn.map_err(|e| anyhow::anyhow!("cannot connect to the {bus} bus: {e}"))
}

fn pid_arg(pid: Pid) -> Result<u32> {
    u32::try_from(pid.as_raw()).with_context(|| format!("{pid} is not a valid pid"))
}

/// The daemon always uses the default call policy: other flags are refused.
fn default_calls_only(calls: &CallArgs) -> Result<()> {
    if !calls.is_default() {
        bail!(
            "--unwind-registration and --safe-point-wait are not carried over D-Bus: \
             argstashd registers at safe points found within 500 ms; run argstash \
             without --bus to choose"
        );
    }
    Ok(())
}

impl Operations for Bus {
    fn inject(&self, a: &InjectArgs) -> Result<InstallReport> {
        default_calls_only(&a.stash.calls)?;
        let pid = pid_arg(a.pid)?;
        let mut funcs = a.funcs.clone();
        funcs.extend(a.addr.iter().map(|x| format!("0x{x:x}")));
        let names: Vec<&str> = funcs.iter().map(String::as_str).collect();
        let mut opts = HashMap::new();
        if a.stash.float_args {
            opts.insert(OPT_FLOAT_ARGS, Value::from(true));
        }
        let func_names: Vec<&str> = a
            .funcs
            .iter()
            .map(|f| injector::names::split_function(f).map_or(f.as_str(), |(name, _)| name))
            .collect();
        let windows: HashMap<String, u16> =
            a.stash.function_windows(&func_names)?.into_iter().collect();
        if !windows.is_empty() {
            opts.insert(OPT_FUNCTION_STACK_ARGS, Value::from(windows));
        }
        if let Some(n) = a.stash.global_window() {
            opts.insert(OPT_STACK_ARGS, Value::from(n));
        }
        if a.python > 0 {
            opts.insert(OPT_PYTHON, Value::from(true));
        }
        let report = self.proxy()?.inject_with_report(pid, &names, opts)?;
        Ok(from_wire::install_report(report)?)
    }

    fn eject(&self, a: &EjectArgs) -> Result<EjectReport> {
        default_calls_only(&a.calls)?;
        let pid = pid_arg(a.pid)?;
        let proxy = self.proxy()?;
        let report = if a.all {
            proxy.eject_all_with_report(pid)?
        } else {
            let mut names: Vec<&str> = a.funcs.iter().map(String::as_str).collect();
            if a.python > 0 {
                names.push(injector::pyframes::EVAL_FRAME_FUNCTION);
            }
            proxy.eject_with_report(pid, &names)?
        };
        Ok(from_wire::eject_report(report)?)
    }

    fn list(&self, pid: Pid) -> Result<Vec<HookInfo>> {
        let entries = self.proxy()?.list_hooks(pid_arg(pid)?)?;
        Ok(entries
            .iter()
            .map(from_wire::hook_info)
            .collect::<Result<_, _>>()?)
    }

    fn unwind_status(&self, pid: Pid) -> Result<(Vec<HookUnwindStatus>, bool)> {
        let status = self.proxy()?.unwind_status(pid_arg(pid)?)?;
        Ok(from_wire::unwind_status(status)?)
    }

    fn backtrace(&self, pid: Pid, a: &BtArgs) -> Result<(Backtrace, Vec<String>)> {
        if !a.debug_dirs.is_empty() {
            bail!(
                "--debug-dir is not carried over D-Bus: argstashd looks for debug files \
                 under /usr/lib/debug; run argstash without --bus to choose"
            );
        }
        let tid = match a.tid {
            Some(t) => {
                u32::try_from(t.as_raw()).with_context(|| format!("{t} is not a valid tid"))?
            }
            None => 0,
        };
        let mut opts = HashMap::new();
        opts.insert(OPT_SHOW_TRAMPOLINES, Value::from(a.show_trampolines));
        if a.always_stop {
            opts.insert(OPT_ALWAYS_STOP, Value::from(true));
        }
        let threads = self.proxy()?.backtrace(pid_arg(pid)?, tid, opts)?;
        // The daemon does not send the warnings about debug information it reads.
        Ok((from_wire::backtrace(pid, &threads)?, Vec::new()))
    }

    fn allows(&self, what: Standalone) -> Result<()> {
        match what {
            Standalone::Core => {
                bail!("`bt --core` and `bt --coredump` read the core here, not through the daemon: drop --bus")
            }
            Standalone::Demo => bail!("`demo` runs standalone only: drop --bus"),
            Standalone::Run => bail!("`run` starts the command itself: drop --bus"),
            Standalone::Record => bail!(
                "`record` runs standalone only: drop --bus (a sampling loop stops the target \
                 hundreds of times a second and must run next to it)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `bt` arguments as the command line parses them.
    fn bt_args(args: &[&str]) -> BtArgs {
        let cli = crate::Cli::try_parse_from(["argstash", "bt"].iter().chain(args)).unwrap();
        match cli.command {
            crate::Command::Bt(a) => a,
            _ => unreachable!("parsed as bt"),
        }
    }

    #[test]
    fn options_the_daemon_cannot_honour_are_refused_before_connecting() {
        // No bus at this address: a refusal proves nothing was sent.
        let bus = Bus::new("unix:path=/nonexistent/argstash-test-bus");
        let a = bt_args(&["--pid", "1", "--debug-dir", "/srv/debug"]);
        let err = bus.backtrace(Pid::from_raw(1), &a).unwrap_err().to_string();
        assert!(
            err.starts_with("--debug-dir is not carried over D-Bus"),
            "{err}"
        );
        assert!(bus.conn.get().is_none());
        // Without it, the call goes to the bus (here: a connection error).
        let a = bt_args(&["--pid", "1"]);
        let err = bus.backtrace(Pid::from_raw(1), &a).unwrap_err().to_string();
        assert!(err.starts_with("cannot connect to the "), "{err}");
    }
}
