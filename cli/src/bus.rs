//! `--bus`: the same subcommands, sent through `argstashd` over D-Bus.
//!
//! Results come back as the `argstash-dbus` wire types and are turned into the
//! injector's types, so `list` and `bt` print exactly what the standalone CLI prints.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use argstash_dbus::{HookEntry, Injector1ProxyBlocking, OPT_SHOW_TRAMPOLINES, OPT_STACK_ARGS};
use injector::backtrace::{Backtrace, Frame, FrameKind, StashedArgs, ThreadBacktrace};
use injector::hooks::HookInfo;
use trampolines::arena::HookState;
use zbus::blocking::{connection, Connection};
use zbus::zvariant::Value;

use crate::{output, Command};

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

fn pid_arg(pid: i32) -> Result<u32> {
    u32::try_from(pid).with_context(|| format!("{pid} is not a valid pid"))
}

fn hook_info(e: &HookEntry) -> HookInfo {
    HookInfo {
        name: e.function.clone(),
        module: e.module.clone(),
        function: e.address,
        patch_addr: e.patch_address,
        patch_len: e.patch_len as usize,
        trampoline: e.trampoline,
        arena: e.arena,
        slot: e.slot,
        stack_words: e.stack_words,
        // The bus protocol does not carry these yet.
        variadic: false,
        xmm: false,
        state: match e.state.as_str() {
            "active" => HookState::Active,
            "ejected" => HookState::Ejected,
            _ => HookState::Free,
        },
        installed_ns: e.installed_ns,
        signature: None,
        window_source: None,
    }
}

/// The injector's static register names (the wire carries strings).
fn register(name: &str) -> Option<&'static str> {
    ["rdi", "rsi", "rdx", "rcx", "r8", "r9"]
        .into_iter()
        .find(|r| *r == name)
}

fn frame(f: &argstash_dbus::Frame) -> Frame {
    let stash = f.hooked.then(|| StashedArgs {
        registers: f
            .args
            .iter()
            .filter_map(|a| Some((register(&a.register)?, a.value)))
            .collect(),
        stack: f
            .args
            .iter()
            .filter(|a| a.register.starts_with("stack+"))
            .map(|a| a.value)
            .collect(),
        xmm: Vec::new(),
        variadic: false,
        frame: f.stash_frame,
        function: 0,
    });
    Frame {
        pc: f.pc,
        function: (!f.function.is_empty()).then(|| f.function.clone()),
        offset: f.offset,
        module: (!f.module.is_empty()).then(|| f.module.clone()),
        kind: match f.kind.as_str() {
            "trampoline" => FrameKind::Trampoline,
            "relocated" => FrameKind::Relocated,
            _ => FrameKind::Normal,
        },
        stash,
        ..Frame::default()
    }
}

/// Runs `command` through the daemon on `bus`.
pub fn run(bus: &str, command: Command) -> Result<()> {
    let conn = connect(bus)?;
    let proxy = Injector1ProxyBlocking::builder(&conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()?;
    match command {
        Command::Inject(a) => {
            let pid = pid_arg(a.pid)?;
            let mut funcs = a.funcs.clone();
            funcs.extend(a.addr.iter().map(|x| format!("0x{x:x}")));
            let names: Vec<&str> = funcs.iter().map(String::as_str).collect();
            let mut opts = HashMap::new();
            if a.float_args {
                anyhow::bail!(
                    "--float-args is not available through --bus yet; run argstash without --bus"
                );
            }
            if let Some(n) = a.stack_args {
                opts.insert(OPT_STACK_ARGS, Value::from(n));
            }
            let paths = proxy.inject(pid, &names, opts)?;
            for e in proxy
                .list_hooks(pid)?
                .iter()
                .filter(|e| paths.contains(&e.path))
            {
                println!(
                    "hooked {} in {} at 0x{:x} ({} bytes patched at 0x{:x}, trampoline 0x{:x}, stack window {} words) as {}",
                    e.function, e.module, e.address, e.patch_len, e.patch_address, e.trampoline, e.stack_words, e.path.as_str()
                );
            }
        }
        Command::Eject(a) => {
            let pid = pid_arg(a.pid)?;
            let n = if a.all {
                proxy.eject_all(pid)?
            } else {
                let names: Vec<&str> = a.funcs.iter().map(String::as_str).collect();
                proxy.eject(pid, &names)?
            };
            if n == 0 {
                println!("no active hooks: nothing to eject");
            } else {
                println!("ejected {n} hook(s)");
            }
        }
        Command::List(a) => {
            let hooks: Vec<HookInfo> = proxy
                .list_hooks(pid_arg(a.pid)?)?
                .iter()
                .map(hook_info)
                .collect();
            output::print_list(a.pid, &hooks, a.json);
        }
        Command::Bt(a) => {
            let Some(pid) = a.pid else {
                bail!("`bt --core` reads the core file here, not through the daemon: drop --bus");
            };
            let tid = match a.tid {
                Some(t) => u32::try_from(t).with_context(|| format!("{t} is not a valid tid"))?,
                None => 0,
            };
            let mut opts = HashMap::new();
            opts.insert(OPT_SHOW_TRAMPOLINES, Value::from(a.show_trampolines));
            let threads = proxy.backtrace(pid_arg(pid)?, tid, opts)?;
            let bt = Backtrace {
                pid,
                threads: threads
                    .iter()
                    .map(|t| ThreadBacktrace {
                        tid: t.tid as i32,
                        name: t.name.clone(),
                        frames: t.frames.iter().map(frame).collect(),
                        truncated: (!t.truncated.is_empty()).then(|| t.truncated.clone()),
                        stopped: Duration::from_micros(t.stopped_us),
                    })
                    .collect(),
            };
            output::print_backtrace(&bt, a.json);
        }
        Command::Demo => bail!("`demo` runs standalone only: drop --bus"),
    }
    Ok(())
}
