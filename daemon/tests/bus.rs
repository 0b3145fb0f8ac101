//! argstashd on a private bus, driven by the zbus proxy, `busctl` and `dbus-send`.

mod common;

use std::collections::HashMap;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use argstash_dbus::{
    ErrorKind, Hook1ProxyBlocking, HookEntry, Thread, BUS_NAME, HOOKS_PATH, MANAGER_PATH,
    OPT_FLOAT_ARGS, OPT_FUNCTION_STACK_ARGS, OPT_SIGNATURES, OPT_STACK_ARGS,
};
use argstash_tests::{Opt, Target, Variant};
use common::{build_local, text, Bus, SHORT_TIMEOUT_MS};
use zbus::zvariant::{Type, Value};

const IFACE: &str = "org.argstash.Injector1";

fn seed() -> Target {
    Target::start("seed", Variant::O2G)
}

/// The stashed `rdi` of the first `bar` frame of any thread, if hooked.
fn bar_rdi(threads: &[Thread]) -> Option<u64> {
    threads
        .iter()
        .flat_map(|t| &t.frames)
        .find(|f| f.function == "bar" && f.hooked)
        .and_then(|f| f.args.iter().find(|a| a.register == "rdi"))
        .map(|a| a.value)
}

/// Backtraces until `bar` is on the stack (it sleeps 50 ms of every iteration).
fn rdi_of_bar(bus: &Bus, pid: u32) -> u64 {
    let proxy = bus.proxy();
    for _ in 0..50 {
        let threads = proxy.backtrace(pid, 0, HashMap::new()).unwrap();
        if let Some(v) = bar_rdi(&threads) {
            return v;
        }
        thread::sleep(Duration::from_millis(7));
    }
    panic!("bar never showed up hooked in a backtrace of {pid}");
}

#[test]
fn inject_bt_eject_with_every_client() {
    let bus = Bus::start();
    let mut t = seed();
    let pid = t.pid() as u32;
    let proxy = bus.proxy();

    // zbus proxy: inject.
    let mut opts = HashMap::new();
    opts.insert(OPT_STACK_ARGS, Value::from(0u16));
    let hooks = proxy.inject(pid, &["bar"], opts).unwrap();
    assert_eq!(hooks.len(), 1);
    assert!(hooks[0].as_str().starts_with(HOOKS_PATH), "{hooks:?}");
    assert_eq!(proxy.hook_count().unwrap(), 1);
    assert_eq!(proxy.pids().unwrap(), vec![pid]);

    // The hook object.
    let hook = Hook1ProxyBlocking::builder(&bus.conn())
        .path(hooks[0].clone())
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(hook.function().unwrap(), "bar");
    assert_eq!(hook.pid().unwrap(), pid);
    assert_eq!(hook.state().unwrap(), "active");
    assert_eq!(hook.address().unwrap(), t.addr_of("bar"));

    // zbus proxy: backtrace shows the stashed argument.
    assert_eq!(rdi_of_bar(&bus, pid), 28);

    // busctl: backtrace, printed readably.
    let mut found = false;
    for _ in 0..50 {
        let out = bus.busctl(&[
            "call",
            BUS_NAME,
            MANAGER_PATH,
            IFACE,
            "Backtrace",
            "uua{sv}",
            &pid.to_string(),
            "0",
            "0",
        ]);
        let s = text(&out);
        assert!(out.status.success(), "{s}");
        assert!(s.starts_with(&format!("a{}", Thread::SIGNATURE)), "{s}");
        if s.contains("\"bar\"") && s.contains("true \"normal\"") && s.contains("\"rdi\" 28") {
            found = true;
            break;
        }
        thread::sleep(Duration::from_millis(7));
    }
    assert!(found, "busctl never showed bar with rdi 28");

    // busctl: a second Inject of the same function is a named error with the CLI's message.
    let out = bus.busctl(&[
        "call",
        BUS_NAME,
        MANAGER_PATH,
        IFACE,
        "Inject",
        "uasa{sv}",
        &pid.to_string(),
        "1",
        "bar",
        "0",
    ]);
    assert!(!out.status.success());
    assert!(text(&out).contains("is already hooked"), "{}", text(&out));
    let err = proxy.inject(pid, &["bar"], HashMap::new()).unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::AlreadyHooked), "{err}");
    let err = proxy
        .inject(pid, &["no_such_function"], HashMap::new())
        .unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::FunctionNotFound), "{err}");
    assert!(err.to_string().contains("no_such_function"), "{err}");
    let err = proxy
        .inject(999_999_999, &["bar"], HashMap::new())
        .unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::NoSuchProcess), "{err}");

    // dbus-send: list, then eject everything.
    let out = bus.dbus_send(&[
        &format!("--dest={BUS_NAME}"),
        MANAGER_PATH,
        &format!("{IFACE}.ListHooks"),
        &format!("uint32:{pid}"),
    ]);
    let s = text(&out);
    assert!(out.status.success(), "{s}");
    assert!(s.contains("\"bar\"") && s.contains("\"active\""), "{s}");
    let out = bus.dbus_send(&[
        &format!("--dest={BUS_NAME}"),
        MANAGER_PATH,
        &format!("{IFACE}.EjectAll"),
        &format!("uint32:{pid}"),
    ]);
    let s = text(&out);
    assert!(out.status.success(), "{s}");
    assert!(s.contains("uint32 1"), "{s}");
    assert_eq!(proxy.hook_count().unwrap(), 0);
    let listed = proxy.list_hooks(pid).unwrap();
    assert!(listed.iter().all(|h| h.state == "ejected"), "{listed:?}");

    // Eject by name through the proxy: nothing left to eject is NotHooked.
    let err = proxy.eject(pid, &["bar"]).unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::NotHooked), "{err}");

    // Re-hook, eject through the hook object.
    let hooks = proxy.inject(pid, &["bar", "foo"], HashMap::new()).unwrap();
    assert_eq!(hooks.len(), 2);
    let hook = Hook1ProxyBlocking::builder(&bus.conn())
        .path(hooks[0].clone())
        .unwrap()
        .build()
        .unwrap();
    hook.eject().unwrap();
    assert_eq!(proxy.hook_count().unwrap(), 1);
    assert_eq!(
        proxy.eject(pid, &["foo", "bar"]).map_err(|e| e.kind()),
        Err(Some(ErrorKind::NotHooked))
    );
    assert_eq!(proxy.eject_all(pid).unwrap(), 1);
    t.assert_healthy();
}

#[test]
fn introspection_lists_everything() {
    let bus = Bus::start();
    let mut t = seed();
    let proxy = bus.proxy();
    let hooks = proxy
        .inject(t.pid() as u32, &["bar"], HashMap::new())
        .unwrap();
    let out = bus.busctl(&["introspect", BUS_NAME, MANAGER_PATH]);
    let s = text(&out);
    assert!(out.status.success(), "{s}");
    for (name, kind) in [
        (".Inject", "method"),
        (".Eject", "method"),
        (".EjectAll", "method"),
        (".ListHooks", "method"),
        (".Backtrace", "method"),
        (".InjectWithReport", "method"),
        (".EjectWithReport", "method"),
        (".EjectAllWithReport", "method"),
        (".UnwindStatus", "method"),
        (".Version", "property"),
        (".HookCount", "property"),
        (".Pids", "property"),
        (".HookInstalled", "signal"),
        (".HookRemoved", "signal"),
        (".ProcessExited", "signal"),
    ] {
        assert!(
            s.lines()
                .any(|l| l.starts_with(&format!("{name} ")) && l.contains(kind)),
            "{name} ({kind}) missing from:\n{s}"
        );
    }
    let out = bus.busctl(&["introspect", BUS_NAME, hooks[0].as_str()]);
    let s = text(&out);
    assert!(s.contains("org.argstash.Hook1"), "{s}");
    for name in [
        ".Eject",
        ".Pid",
        ".Function",
        ".Module",
        ".Address",
        ".State",
        ".InstalledAt",
    ] {
        assert!(
            s.lines().any(|l| l.starts_with(&format!("{name} "))),
            "{name} missing from:\n{s}"
        );
    }
    let out = bus.busctl(&["tree", "--list", BUS_NAME]);
    assert!(text(&out).contains(hooks[0].as_str()), "{}", text(&out));
    let v = bus.busctl(&["get-property", BUS_NAME, MANAGER_PATH, IFACE, "Version"]);
    assert_eq!(
        text(&v).trim(),
        format!("s \"{}\"", env!("CARGO_PKG_VERSION"))
    );
    proxy.eject_all(t.pid() as u32).unwrap();
    t.assert_healthy();
}

#[test]
fn signals_and_process_exit() {
    let bus = Bus::start();
    let mut t = seed();
    let pid = t.pid() as u32;
    let (tx, rx) = mpsc::channel();
    let listener = bus.proxy();
    let installed = listener.receive_hook_installed().unwrap();
    let exited = listener.receive_process_exited().unwrap();
    let tx2 = tx.clone();
    thread::spawn(move || {
        for s in installed {
            let a = s.args().unwrap();
            let _ = tx2.send(("installed", 0, vec![a.hook.to_string()]));
        }
    });
    thread::spawn(move || {
        for s in exited {
            let a = s.args().unwrap();
            let _ = tx.send((
                "exited",
                a.pid,
                a.hooks.iter().map(|p| p.to_string()).collect(),
            ));
        }
    });
    let hooks = bus.proxy().inject(pid, &["bar"], HashMap::new()).unwrap();
    let path = hooks[0].to_string();
    let got = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(got, ("installed", 0, vec![path.clone()]));
    t.kill();
    let got = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(got, ("exited", pid, vec![path.clone()]));
    let proxy = bus.proxy();
    assert_eq!(proxy.hook_count().unwrap(), 0);
    assert!(proxy.pids().unwrap().is_empty());
    let out = bus.busctl(&["tree", "--list", BUS_NAME]);
    assert!(!text(&out).contains(&path), "{}", text(&out));
    let hints = std::fs::read_to_string(bus.state_dir().join("arenas")).unwrap();
    assert!(!hints.contains(&format!("{pid} ")), "{hints}");
}

#[test]
fn restart_after_kill_9_keeps_hooks_ejectable() {
    let mut bus = Bus::start();
    let mut t = seed();
    let pid = t.pid() as u32;
    let hooks = bus
        .proxy()
        .inject(pid, &["bar", "foo"], HashMap::new())
        .unwrap();
    let hints = std::fs::read_to_string(bus.state_dir().join("arenas")).unwrap();
    assert!(hints.starts_with(&format!("{pid} ")), "{hints}");
    bus.kill_daemon();
    // A stale hint (a pid that is gone, and garbage) must not confuse the restart.
    std::fs::write(
        bus.state_dir().join("arenas"),
        format!(
            "{hints}999999999 1\nnot a line\n{} 12345\n",
            std::process::id()
        ),
    )
    .unwrap();
    bus.start_daemon();
    let proxy = bus.proxy();
    assert_eq!(proxy.hook_count().unwrap(), 2);
    assert_eq!(proxy.pids().unwrap(), vec![pid]);
    let listed = proxy.list_hooks(0).unwrap();
    let mut paths: Vec<String> = listed.iter().map(|h| h.path.to_string()).collect();
    let mut want: Vec<String> = hooks.iter().map(|p| p.to_string()).collect();
    paths.sort();
    want.sort();
    assert_eq!(paths, want);
    assert_eq!(rdi_of_bar(&bus, pid), 28);
    let hook = Hook1ProxyBlocking::builder(&bus.conn())
        .path(hooks[0].clone())
        .unwrap()
        .build()
        .unwrap();
    hook.eject().unwrap();
    assert_eq!(proxy.eject_all(pid).unwrap(), 1);
    assert_eq!(proxy.hook_count().unwrap(), 0);
    t.assert_healthy();
}

#[test]
fn other_uid_is_denied_root_targets_and_allowed_its_own() {
    let bus = Bus::start();
    let mut root_target = seed();
    let exe = argstash_tests::build("seed", Variant::O2G);
    let mut own = Target::spawn_with_args(
        std::path::Path::new("/usr/bin/setpriv"),
        &[
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            exe.to_str().unwrap(),
        ],
    );
    let inject = |pid: i32| {
        bus.busctl_as_nobody(&[
            "call",
            BUS_NAME,
            MANAGER_PATH,
            IFACE,
            "Inject",
            "uasa{sv}",
            &pid.to_string(),
            "1",
            "bar",
            "0",
        ])
    };
    let out = inject(root_target.pid());
    assert!(!out.status.success());
    assert!(
        text(&out).contains("Access denied") || text(&out).contains("may not trace"),
        "{}",
        text(&out)
    );
    // The name of the error, as a raw client sees it.
    let out = run_nobody_dbus_send(&bus, root_target.pid());
    assert!(
        text(&out).contains("org.freedesktop.DBus.Error.AccessDenied"),
        "{}",
        text(&out)
    );
    let out = inject(own.pid());
    assert!(out.status.success(), "{}", text(&out));
    // Root hooks its target too; nobody's ListHooks(0) shows only its own process.
    bus.proxy()
        .inject(root_target.pid() as u32, &["bar"], HashMap::new())
        .unwrap();
    let out = bus.busctl_as_nobody(&["call", BUS_NAME, MANAGER_PATH, IFACE, "ListHooks", "u", "0"]);
    let s = text(&out);
    assert!(out.status.success(), "{s}");
    assert!(
        s.starts_with(&format!("a{} 1 ", HookEntry::SIGNATURE)),
        "{s}"
    );
    assert!(s.contains(&format!(" {} \"bar\"", own.pid())), "{s}");
    assert_eq!(bus.proxy().list_hooks(0).unwrap().len(), 2);

    // Properties are answered per caller too: nobody counts and sees only its own
    // process, and may not read the properties of root's hook object.
    let get = |path: &str, iface: &str, prop: &str| {
        bus.busctl_as_nobody(&["get-property", BUS_NAME, path, iface, prop])
    };
    let out = get(MANAGER_PATH, IFACE, "Pids");
    assert_eq!(text(&out).trim(), format!("au 1 {}", own.pid()));
    let out = get(MANAGER_PATH, IFACE, "HookCount");
    assert_eq!(text(&out).trim(), "u 1");
    assert_eq!(bus.proxy().hook_count().unwrap(), 2);
    let mut root_pids = bus.proxy().pids().unwrap();
    root_pids.sort_unstable();
    let mut both = vec![root_target.pid() as u32, own.pid() as u32];
    both.sort_unstable();
    assert_eq!(root_pids, both);
    let listed = bus.proxy().list_hooks(0).unwrap();
    let path_of = |pid: i32| {
        listed
            .iter()
            .find(|h| h.pid == pid as u32)
            .map(|h| h.path.to_string())
            .unwrap()
    };
    let hook_iface = argstash_dbus::HOOK_INTERFACE;
    let out = get(&path_of(root_target.pid()), hook_iface, "Function");
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("Access denied") || text(&out).contains("may not trace"),
        "{}",
        text(&out)
    );
    // GetAll leaves out what the caller may not read (zbus drops failing getters).
    let get_all = |pid: i32| {
        bus.busctl_as_nobody(&[
            "call",
            BUS_NAME,
            &path_of(pid),
            "org.freedesktop.DBus.Properties",
            "GetAll",
            "s",
            hook_iface,
        ])
    };
    assert_eq!(text(&get_all(root_target.pid())).trim(), "a{sv} 0");
    let own_all = text(&get_all(own.pid()));
    assert!(own_all.starts_with("a{sv} 6 "), "{own_all}");
    assert!(own_all.contains("\"Function\" s \"bar\""), "{own_all}");
    let out = get(&path_of(own.pid()), hook_iface, "Function");
    assert_eq!(text(&out).trim(), "s \"bar\"");
    let out = bus.busctl_as_nobody(&[
        "call",
        BUS_NAME,
        MANAGER_PATH,
        IFACE,
        "EjectAll",
        "u",
        &root_target.pid().to_string(),
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    let out = bus.busctl_as_nobody(&[
        "call",
        BUS_NAME,
        MANAGER_PATH,
        IFACE,
        "EjectAll",
        "u",
        &own.pid().to_string(),
    ]);
    assert_eq!(text(&out).trim(), "u 1");
    bus.proxy().eject_all(root_target.pid() as u32).unwrap();
    root_target.assert_healthy();
    own.assert_healthy();
}

/// The kernel also compares groups: the same uid in another group may not trace.
#[test]
fn same_uid_in_another_group_is_denied() {
    let bus = Bus::start();
    let exe = argstash_tests::build("seed", Variant::O2G);
    let mut target = Target::spawn_with_args(
        std::path::Path::new("/usr/bin/setpriv"),
        &[
            "--reuid=65534",
            "--regid=65533",
            "--clear-groups",
            exe.to_str().unwrap(),
        ],
    );
    let pid = target.pid().to_string();
    let call = |gid: u32| {
        bus.busctl_as(
            65534,
            gid,
            &[
                "call",
                BUS_NAME,
                MANAGER_PATH,
                IFACE,
                "Inject",
                "uasa{sv}",
                &pid,
                "1",
                "bar",
                "0",
            ],
        )
    };
    let out = call(65534);
    assert!(!out.status.success(), "{}", text(&out));
    let out = run_dbus_send_as(&bus, 65534, 65534, target.pid());
    let s = text(&out);
    assert!(s.contains("org.freedesktop.DBus.Error.AccessDenied"), "{s}");
    assert!(s.contains("gids are 65533, 65533 and 65533"), "{s}");
    assert!(s.contains("the caller's gid is 65534"), "{s}");
    assert_eq!(
        bus.proxy().list_hooks(target.pid() as u32).unwrap().len(),
        0
    );
    let out = call(65533);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(bus.proxy().eject_all(target.pid() as u32).unwrap(), 1);
    target.assert_healthy();
}

fn run_nobody_dbus_send(bus: &Bus, pid: i32) -> std::process::Output {
    run_dbus_send_as(bus, 65534, 65534, pid)
}

/// `EjectAll(pid)` sent by `dbus-send` running as `uid`:`gid`.
fn run_dbus_send_as(bus: &Bus, uid: u32, gid: u32, pid: i32) -> std::process::Output {
    std::process::Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .args(["--clear-groups", "dbus-send"])
        .arg(format!("--bus={}", bus.address))
        .arg("--print-reply")
        .arg(format!("--dest={BUS_NAME}"))
        .arg(MANAGER_PATH)
        .arg(format!("{IFACE}.EjectAll"))
        .arg(format!("uint32:{pid}"))
        .output()
        .unwrap()
}

#[test]
fn twenty_clients_on_twenty_processes() {
    let bus = Bus::start();
    let mut targets: Vec<Target> = (0..20).map(|_| seed()).collect();
    let pids: Vec<u32> = targets.iter().map(|t| t.pid() as u32).collect();
    let handles: Vec<_> = pids
        .iter()
        .map(|&pid| {
            let proxy = bus.proxy();
            thread::spawn(move || {
                let hooks = proxy.inject(pid, &["bar"], HashMap::new()).unwrap();
                assert_eq!(hooks.len(), 1);
                let listed = proxy.list_hooks(pid).unwrap();
                assert_eq!(listed.len(), 1);
                assert_eq!(listed[0].function, "bar");
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let proxy = bus.proxy();
    assert_eq!(proxy.hook_count().unwrap(), 20);
    let mut want = pids.clone();
    want.sort_unstable();
    assert_eq!(proxy.pids().unwrap(), want);
    assert_eq!(proxy.list_hooks(0).unwrap().len(), 20);
    let handles: Vec<_> = pids
        .iter()
        .map(|&pid| {
            let proxy = bus.proxy();
            thread::spawn(move || proxy.eject_all(pid).unwrap())
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 1);
    }
    assert_eq!(proxy.hook_count().unwrap(), 0);
    for t in &mut targets {
        t.assert_healthy();
    }
}

#[test]
fn hung_target_is_busy_and_blocks_no_one() {
    let bus = Bus::start_with_short_timeout();
    let mut ok = seed();
    let exe = build_local("vfork_hang");
    let mut hung = Target::spawn(&exe);
    std::fs::remove_file(&exe).unwrap();
    // Wait until the parent sits in the vfork wait.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let status = std::fs::read_to_string(format!("/proc/{}/status", hung.pid())).unwrap();
        if status.contains("State:\tD") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the vfork parent never blocked:\n{status}"
        );
        thread::sleep(Duration::from_millis(10));
    }
    let hung_pid = hung.pid() as u32;
    // No stop can reach the vfork parent, but it is blocked in a system call
    // (vfork), so a plain backtrace reads it without one.
    let free = bus.proxy().backtrace(hung_pid, 0, HashMap::new()).unwrap();
    assert!(free.iter().all(|t| t.without_stop), "{free:?}");
    let stuck = {
        let proxy = bus.proxy();
        thread::spawn(move || {
            let start = Instant::now();
            let mut opts = HashMap::new();
            opts.insert(argstash_dbus::OPT_ALWAYS_STOP, Value::from(true));
            let r = proxy.backtrace(hung_pid, 0, opts);
            (r.map(|_| ()), start.elapsed())
        })
    };
    // Meanwhile another process is served at once.
    thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    let proxy = bus.proxy();
    proxy
        .inject(ok.pid() as u32, &["bar"], HashMap::new())
        .unwrap();
    assert!(proxy.backtrace(ok.pid() as u32, 0, HashMap::new()).is_ok());
    let quick = start.elapsed();
    assert!(
        quick < Duration::from_millis(SHORT_TIMEOUT_MS),
        "a call on another pid took {quick:?}"
    );
    let (r, took) = stuck.join().unwrap();
    let err = r.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::Busy), "{err}");
    assert!(err.to_string().contains("did not stop"), "{err}");
    assert!(
        took >= Duration::from_millis(SHORT_TIMEOUT_MS)
            && took < Duration::from_millis(SHORT_TIMEOUT_MS + 3000),
        "Busy after {took:?}"
    );
    // A second call on the hung pid is Busy too, and the bus still answers.
    let err = proxy.eject_all(hung_pid).unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::Busy), "{err}");
    assert_eq!(proxy.hook_count().unwrap(), 1);
    proxy.eject_all(ok.pid() as u32).unwrap();
    // Kill the vfork child first, then the parent.
    let child: Vec<i32> =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", hung.pid()))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
    for c in child {
        // SAFETY: plain kill(2) of the fixture's own vfork child.
        unsafe { libc::kill(c, libc::SIGKILL) };
    }
    hung.kill();
    ok.assert_healthy();
}

#[test]
fn second_tracer_is_busy_naming_it() {
    let bus = Bus::start();
    let mut t = seed();
    let pid = nix::unistd::Pid::from_raw(t.pid());
    // This test thread becomes the tracer; the daemon must refuse, not hang.
    nix::sys::ptrace::seize(pid, nix::sys::ptrace::Options::empty()).unwrap();
    let err = bus
        .proxy()
        .inject(t.pid() as u32, &["bar"], HashMap::new())
        .unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::Busy), "{err}");
    assert!(
        err.to_string()
            .contains(&format!("already traced by PID {}", nix::unistd::gettid())),
        "{err}"
    );
    nix::sys::ptrace::interrupt(pid).unwrap();
    nix::sys::wait::waitpid(pid, Some(nix::sys::wait::WaitPidFlag::__WALL)).unwrap();
    nix::sys::ptrace::detach(pid, None).unwrap();
    t.assert_healthy();
}

#[test]
fn packaged_policy_lets_anyone_call_but_only_root_own() {
    // argstashd (root) owns the name under the shipped policy, or start() would fail.
    let bus = Bus::start_with_packaged_policy();
    let mut t = seed();
    let out = bus.busctl_as_nobody(&["call", BUS_NAME, MANAGER_PATH, IFACE, "ListHooks", "u", "0"]);
    assert_eq!(text(&out).trim(), format!("a{} 0", HookEntry::SIGNATURE));
    let out = bus.busctl_as_nobody(&["get-property", BUS_NAME, MANAGER_PATH, IFACE, "HookCount"]);
    assert_eq!(text(&out).trim(), "u 0");
    // Denied by argstashd, not by the bus: dbus-send prints the daemon's message.
    let out = run_nobody_dbus_send(&bus, t.pid());
    let s = text(&out);
    assert!(s.contains("org.freedesktop.DBus.Error.AccessDenied"), "{s}");
    assert!(s.contains("may not trace"), "{s}");
    // Nobody may take the name.
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "dbus-send",
        ])
        .arg(format!("--bus={}", bus.address))
        .args([
            "--print-reply",
            "--dest=org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.RequestName",
            "string:org.argstash.Injector1",
            "uint32:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out).contains("AccessDenied") || text(&out).contains("not allowed to own"),
        "{}",
        text(&out)
    );
    t.assert_healthy();
}

#[test]
fn exec_removes_the_hooks() {
    let bus = Bus::start();
    // A shell that execs `sleep` once it reads a line.
    let mut t = Target::spawn_with_args(
        std::path::Path::new("/bin/sh"),
        &["-c", "echo ready $$; read x; exec sleep 1000"],
    );
    let pid = t.pid() as u32;
    let listener = bus.proxy();
    let removed = listener.receive_hook_removed().unwrap();
    let hooks = bus
        .proxy()
        .inject(pid, &["libc.so.6!getpid"], HashMap::new())
        .unwrap();
    assert_eq!(bus.proxy().hook_count().unwrap(), 1);
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        if let Some(s) = removed.into_iter().next() {
            let _ = tx.send(s.args().unwrap().hook.to_string());
        }
    });
    t.write_stdin("go\n");
    let got = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(got, hooks[0].to_string());
    let proxy = bus.proxy();
    assert_eq!(proxy.hook_count().unwrap(), 0);
    assert!(proxy.list_hooks(pid).unwrap().is_empty());
    t.kill();
}

/// `argstash --bus ADDR ...` output, as JSON when it parses.
fn cli(bus: Option<&Bus>, args: &[&str]) -> std::process::Output {
    let mut all: Vec<String> = Vec::new();
    if let Some(b) = bus {
        all.push("--bus".into());
        all.push(b.address.clone());
    }
    all.extend(args.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    argstash_tests::argstash_cmd(&refs).output().unwrap()
}

fn bar_frame_rdi(bt: &serde_json::Value) -> Option<u64> {
    bt["threads"]
        .as_array()?
        .iter()
        .flat_map(|t| t["frames"].as_array().cloned().unwrap_or_default())
        .find(|f| f["function"] == "bar" && f["hooked"] == true)
        .and_then(|f| {
            f["args"]
                .as_array()?
                .iter()
                .find(|a| a["register"] == "rdi")
                .and_then(|a| a["value"].as_u64())
        })
}

#[test]
fn cli_over_the_bus_prints_what_the_standalone_cli_prints() {
    let bus = Bus::start();
    let mut t = seed();
    let p = t.pid().to_string();
    let out = cli(Some(&bus), &["inject", "--pid", &p, "--func", "bar"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).starts_with("hooked bar in "), "{}", text(&out));
    // list --json: identical through the daemon and standalone.
    let via_bus = cli(Some(&bus), &["list", "--pid", &p, "--json"]);
    let direct = cli(None, &["list", "--pid", &p, "--json"]);
    assert!(via_bus.status.success(), "{}", text(&via_bus));
    assert_eq!(
        String::from_utf8_lossy(&via_bus.stdout),
        String::from_utf8_lossy(&direct.stdout)
    );
    // bt --json: same shape, and the stashed argument.
    let mut seen = None;
    for _ in 0..50 {
        let out = cli(Some(&bus), &["bt", "--pid", &p, "--json"]);
        assert!(out.status.success(), "{}", text(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["pid"], t.pid());
        if let Some(rdi) = bar_frame_rdi(&v) {
            seen = Some(rdi);
            break;
        }
        thread::sleep(Duration::from_millis(7));
    }
    assert_eq!(seen, Some(28));
    let direct: serde_json::Value =
        serde_json::from_slice(&cli(None, &["bt", "--pid", &p, "--json"]).stdout).unwrap();
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = v["threads"][0]["frames"][0]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        k.sort();
        k
    };
    let via: serde_json::Value =
        serde_json::from_slice(&cli(Some(&bus), &["bt", "--pid", &p, "--json"]).stdout).unwrap();
    assert_eq!(keys(&via), keys(&direct));
    // Errors: the same message.
    let a = cli(Some(&bus), &["inject", "--pid", &p, "--func", "bar"]);
    let b = cli(None, &["inject", "--pid", &p, "--func", "bar"]);
    assert!(!a.status.success() && !b.status.success());
    assert_eq!(
        String::from_utf8_lossy(&a.stderr),
        String::from_utf8_lossy(&b.stderr)
    );
    let out = cli(Some(&bus), &["eject", "--pid", &p, "--all"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).starts_with("ejected bar in "), "{}", text(&out));
    t.assert_healthy();
}

/// `text` with what legitimately differs between two runs on two processes of
/// the same program made equal: the target's pid (`/tmp/perf-PID.map`, ...),
/// addresses (ASLR), durations (`target stopped for N us`) and install times.
fn normalise(text: &str, pid: i32) -> String {
    let mut text = text.to_string();
    // `list --json`: each process's install time.
    while let Some(i) = text.find("\"installed_ns\":") {
        let start = i + "\"installed_ns\":".len();
        let end = text[start..]
            .find(|c: char| !c.is_ascii_digit())
            .map_or(text.len(), |n| start + n);
        text.replace_range(i..end, "\"installed\":N");
    }
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("0x") {
        out.push_str(&rest[..i]);
        let hex = rest[i + 2..]
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(rest.len() - i - 2);
        out.push_str("0x?");
        // Addresses are column-padded in `list`: drop the padding with them.
        rest = rest[i + 2 + hex..].trim_start_matches(' ');
        if hex > 0 && !rest.starts_with('\n') {
            out.push(' ');
        }
    }
    out.push_str(rest);
    // Durations: the digits before each ` us`.
    let mut done = String::new();
    let mut rest = out.as_str();
    while let Some(i) = rest.find(" us") {
        let digits = rest[..i].len()
            - rest[..i]
                .trim_end_matches(|c: char| c.is_ascii_digit())
                .len();
        done.push_str(&rest[..i - digits]);
        done.push_str(if digits > 0 { "N us" } else { " us" });
        rest = &rest[i + 3..];
    }
    done.push_str(rest);
    // The pid, as a whole number (not digits inside another number or a name).
    let pid = pid.to_string();
    let mut out = String::new();
    let mut run = String::new();
    for c in done.chars().chain(std::iter::once('\0')) {
        if c.is_ascii_digit() {
            run.push(c);
            continue;
        }
        let whole = !out.ends_with(char::is_alphanumeric) && !c.is_alphanumeric();
        out.push_str(if run == pid && whole { "PID" } else { &run });
        run.clear();
        if c != '\0' {
            out.push(c);
        }
    }
    out
}

/// Runs `args` (with `{pid}` for the target's pid) standalone on `direct` and
/// through the daemon on `via`; asserts both succeed and print the same,
/// normalised; returns the standalone output.
fn same_both_ways(bus: &Bus, direct: &Target, via: &Target, args: &[&str]) -> String {
    let run = |b: Option<&Bus>, t: &Target| {
        let pid = t.pid().to_string();
        let args: Vec<&str> = args
            .iter()
            .map(|a| if *a == "{pid}" { pid.as_str() } else { a })
            .collect();
        let out = cli(b, &args);
        assert!(
            out.status.success(),
            "argstash {args:?} (bus: {}): {}",
            b.is_some(),
            text(&out)
        );
        normalise(&text(&out), t.pid())
    };
    let a = run(None, direct);
    let b = run(Some(bus), via);
    assert_eq!(
        a, b,
        "argstash {args:?}: standalone, then through the daemon"
    );
    println!("argstash {args:?}, both ways:\n{a}");
    a
}

#[test]
fn inject_list_eject_print_the_same_through_the_daemon() {
    let bus = Bus::start();
    // A C program (no libgcc: the unwind report carries a note) and a C++ one
    // (libgcc's unwinder: registration counts and `libgcc yes` rows).
    let cases = [
        (argstash_tests::build("seed", Variant::O2G), "bar", false),
        (argstash_tests::build_cpp("throws"), "relay", true),
    ];
    for (exe, func, cpp) in cases {
        let mut direct = Target::spawn(&exe);
        let mut via = Target::spawn(&exe);
        let inject = same_both_ways(
            &bus,
            &direct,
            &via,
            &["inject", "--pid", "{pid}", "--func", func],
        );
        assert!(
            inject.contains(&format!("hooked {func} in ")) && inject.contains(" words from "),
            "{inject}"
        );
        assert!(inject.contains("target stopped for N us"), "{inject}");
        if cpp {
            assert!(inject.contains("unwind info registered with "), "{inject}");
        } else {
            assert!(inject.contains("note: "), "{inject}");
        }
        let list = same_both_ways(&bus, &direct, &via, &["list", "--pid", "{pid}"]);
        assert!(list.contains(&format!("unwind   {func}")), "{list}");
        if cpp {
            assert!(list.contains("libgcc yes"), "{list}");
        } else {
            assert!(list.contains("no in-process unwinder"), "{list}");
        }
        same_both_ways(&bus, &direct, &via, &["list", "--pid", "{pid}", "--json"]);
        let eject = same_both_ways(&bus, &direct, &via, &["eject", "--pid", "{pid}", "--all"]);
        assert!(eject.contains(&format!("ejected {func} in ")), "{eject}");
        assert!(
            eject.contains("gdb JIT interface: removed 1 hooks"),
            "{eject}"
        );
        // eject by name, and nothing left to eject, also alike.
        same_both_ways(
            &bus,
            &direct,
            &via,
            &["inject", "--pid", "{pid}", "--func", func],
        );
        same_both_ways(
            &bus,
            &direct,
            &via,
            &["eject", "--pid", "{pid}", "--func", func],
        );
        let none = same_both_ways(&bus, &direct, &via, &["eject", "--pid", "{pid}", "--all"]);
        assert_eq!(none.trim(), "no active hooks: nothing to eject");
        let list = same_both_ways(&bus, &direct, &via, &["list", "--pid", "{pid}"]);
        assert!(list.contains("ejected"), "{list}");
        if !cpp {
            direct.assert_healthy();
            via.assert_healthy();
        }
        direct.kill();
        via.kill();
    }
}

/// blocked.c: the argument its sleeper thread passes to `nap(long)`.
const NAP_TAG: u64 = 0x6e61705461670001;

#[test]
fn bt_of_a_thread_prints_the_same_through_the_daemon_byte_for_byte() {
    // blocked.c's sleeper, inside a hooked call of nap(NAP_TAG) and blocked in
    // read(2) below it, is read without a stop both ways: nothing wakes it, so
    // both reads see the same stack and the outputs can be compared whole.
    let bus = Bus::start();
    let mut t = Target::start("blocked", Variant::O2G);
    let pid = t.pid();
    let p = pid.to_string();
    let sleeper = t.tid_named("sleeper", Duration::ZERO);
    let out = cli(None, &["inject", "--pid", &p, "--func", "nap"]);
    assert!(out.status.success(), "{}", text(&out));
    // Wake it from the nap it was in before the hook; its next nap is hooked.
    t.write_stdin("wake\n");
    let mut napped = || {
        t.drain_lines();
        t.write_stdin("stats\n");
        let line = t.wait_for_line(Duration::from_secs(5), |l| l.starts_with("stats "));
        let naps = line
            .split_whitespace()
            .nth(6)
            .and_then(|n| n.parse::<u64>().ok());
        naps.is_some_and(|n| n >= 1)
    };
    assert!(
        argstash_tests::wait_until(Duration::from_secs(5), &mut napped),
        "the sleeper did not return from its nap"
    );
    assert!(
        argstash_tests::wait_until(Duration::from_secs(5), || {
            argstash_tests::blocked_syscall(pid, sleeper) == Some(0)
        }),
        "the sleeper is not blocked in read(2)"
    );
    let tid = sleeper.to_string();
    for json in [false, true] {
        let mut args = vec!["bt", "--pid", &p, "--tid", &tid];
        if json {
            args.push("--json");
        }
        let direct = cli(None, &args);
        let via_bus = cli(Some(&bus), &args);
        assert!(direct.status.success(), "{}", text(&direct));
        assert!(via_bus.status.success(), "{}", text(&via_bus));
        let direct = String::from_utf8_lossy(&direct.stdout).into_owned();
        assert_eq!(
            String::from_utf8_lossy(&via_bus.stdout),
            direct,
            "argstash {args:?}: through the daemon, then standalone"
        );
        // What both printed is the hooked call, with its argument.
        if json {
            let v: serde_json::Value = serde_json::from_str(&direct).unwrap();
            let thread = &v["threads"][0];
            assert_eq!(thread["without_stop"], true, "{direct}");
            let nap = thread["frames"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["function"] == "nap" && f["hooked"] == true)
                .unwrap_or_else(|| panic!("no hooked nap frame:\n{direct}"));
            let rdi = nap["args"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["register"] == "rdi")
                .and_then(|a| a["value"].as_u64());
            assert_eq!(rdi, Some(NAP_TAG), "{direct}");
        } else {
            assert!(
                direct.starts_with(&format!(
                    "Thread {sleeper} \"sleeper\" (read without a stop, blocked in read):"
                )),
                "{direct}"
            );
            assert!(
                direct.contains(&format!(" in nap (tag={}) [stashed]", NAP_TAG as i64)),
                "{direct}"
            );
        }
    }
    t.kill();
}

#[test]
fn a_tail_call_names_its_hook_through_the_daemon() {
    let bus = Bus::start();
    let mut t = Target::start("tailcall", Variant::O2G);
    let p = t.pid().to_string();
    let out = cli(Some(&bus), &["inject", "--pid", &p, "--func", "tail_entry"]);
    assert!(out.status.success(), "{}", text(&out));
    let mut frame = None;
    for _ in 0..100 {
        let out = cli(Some(&bus), &["bt", "--pid", &p, "--json"]);
        assert!(out.status.success(), "{}", text(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        frame = v["threads"][0]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["function"] == "tail_target" && f["hooked"] == true)
            .cloned();
        if frame.is_some() {
            break;
        }
        thread::sleep(Duration::from_millis(7));
    }
    let frame = frame.expect("tail_target hooked on the stack");
    assert_eq!(frame["hook"], "tail_entry", "{frame:#}");
    assert_eq!(frame["params"][0]["name"], "x", "{frame:#}");
    assert_eq!(frame["params"][0]["display"], "7", "{frame:#}");
    let shown = (0..100).any(|_| {
        let out = cli(Some(&bus), &["bt", "--pid", &p]);
        assert!(out.status.success(), "{}", text(&out));
        thread::sleep(Duration::from_millis(7));
        text(&out)
            .contains("in tail_target (x=7, y=9, z=0) [stashed by hook tail_entry] at tailcall.c:")
    });
    assert!(shown, "bt through the daemon never named the hook");
    run_ok_eject(&bus, &p);
    t.assert_healthy();
}

#[test]
fn one_thread_options_and_bad_arguments() {
    let bus = Bus::start();
    let mut t = Target::start("threads", Variant::O2G);
    let pid = t.pid() as u32;
    let proxy = bus.proxy();
    let all = proxy.backtrace(pid, 0, HashMap::new()).unwrap();
    assert!(all.len() > 1, "{all:?}");
    let one = proxy.backtrace(pid, all[1].tid, HashMap::new()).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].tid, all[1].tid);
    let mut opts = HashMap::new();
    opts.insert(argstash_dbus::OPT_SHOW_TRAMPOLINES, Value::from(true));
    proxy.backtrace(pid, 0, opts).unwrap();
    let err = proxy
        .backtrace(pid, 999_999_999, HashMap::new())
        .unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::NoSuchProcess), "{err}");
    let mut opts = HashMap::new();
    opts.insert("no-such-option", Value::from(1u32));
    let err = proxy.backtrace(pid, 0, opts).unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidArgs), "{err}");
    // The parked thread, asleep in nanosleep nearly all the time, is read
    // without a stop and says so; always-stop stops every thread.
    let parked = all
        .iter()
        .find(|t| t.name == "parked")
        .expect("a parked thread");
    let read_free = (0..50).any(|_| {
        let one = proxy.backtrace(pid, parked.tid, HashMap::new()).unwrap();
        thread::sleep(Duration::from_millis(3));
        one[0].without_stop && one[0].stopped_us == 0 && [35, 230].contains(&one[0].syscall)
    });
    assert!(read_free, "the parked thread was never read without a stop");
    let mut opts = HashMap::new();
    opts.insert(argstash_dbus::OPT_ALWAYS_STOP, Value::from(true));
    let stopped = proxy.backtrace(pid, 0, opts).unwrap();
    assert!(
        stopped.iter().all(|t| !t.without_stop && t.syscall == 0),
        "{stopped:?}"
    );
    let mut opts = HashMap::new();
    opts.insert(argstash_dbus::OPT_ALWAYS_STOP, Value::from(1u32));
    let err = proxy.backtrace(pid, 0, opts).unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidArgs), "{err}");
    // `bt --bus` prints it as the standalone CLI does.
    let (p, tid) = (pid.to_string(), parked.tid.to_string());
    let said = (0..50).any(|_| {
        let out = cli(Some(&bus), &["bt", "--pid", &p, "--tid", &tid]);
        assert!(out.status.success(), "{}", text(&out));
        text(&out).contains("\"parked\" (read without a stop, blocked in ")
    });
    assert!(
        said,
        "bt --bus never said the parked thread was read without a stop"
    );
    let out = cli(
        Some(&bus),
        &["bt", "--pid", &p, "--tid", &tid, "--always-stop"],
    );
    assert!(
        text(&out).contains("\"parked\" (stopped "),
        "{}",
        text(&out)
    );
    let mut opts = HashMap::new();
    opts.insert(OPT_STACK_ARGS, Value::from(17u32));
    let err = proxy.inject(pid, &["main"], opts).unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidArgs), "{err}");
    let err = proxy.inject(pid, &[], HashMap::new()).unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidArgs), "{err}");
    let err = proxy.inject(1, &["main"], HashMap::new()).unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::NotPermitted), "{err}");
    t.assert_healthy();
}

/// The first hooked `bar` frame of a `bt --json` object.
fn hooked_bar(bt: &serde_json::Value) -> Option<serde_json::Value> {
    bt["threads"]
        .as_array()?
        .iter()
        .flat_map(|t| t["frames"].as_array().cloned().unwrap_or_default())
        .find(|f| f["function"] == "bar" && f["hooked"] == true)
}

/// `bt --json` through the daemon (`bus`) or standalone, until a hooked `bar` is on the stack.
fn bar_frame(bus: Option<&Bus>, pid: &str) -> serde_json::Value {
    for _ in 0..100 {
        let out = cli(bus, &["bt", "--pid", pid, "--json"]);
        assert!(out.status.success(), "{}", text(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if let Some(f) = hooked_bar(&v) {
            return f;
        }
        thread::sleep(Duration::from_millis(7));
    }
    panic!("bar was never on the stack, hooked");
}

/// The keys of a JSON object, sorted.
fn keys(v: &serde_json::Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

/// Asserts that two `bar` frames, taken at different moments, say the same:
/// every field but the stashed values of registers other than `rdi` (those hold
/// whatever the caller left there, which may change between iterations).
fn assert_same_bar_frame(via_bus: &serde_json::Value, direct: &serde_json::Value) {
    assert_eq!(keys(via_bus), keys(direct), "{via_bus:#}\n{direct:#}");
    for k in keys(direct) {
        if k != "args" {
            assert_eq!(
                via_bus[&k], direct[&k],
                "field {k}: {via_bus:#}\n{direct:#}"
            );
        }
    }
    let (a, b) = (
        via_bus["args"].as_array().unwrap(),
        direct["args"].as_array().unwrap(),
    );
    assert_eq!(a.len(), b.len(), "{via_bus:#}\n{direct:#}");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(keys(x), keys(y), "{x:#} vs {y:#}");
        assert_eq!(x["register"], y["register"]);
        if x["register"] == "rdi" {
            assert_eq!(x, y);
        }
    }
}

#[test]
fn typed_and_float_arguments_cross_the_bus() {
    let bus = Bus::start();
    // Stripped of debug info: bar's parameter name and type come from the
    // signature the caller gives, and the xmm stash from --float-args.
    let mut t = Target::start("seed", Variant::new(Opt::O2, true));
    let p = t.pid().to_string();
    let out = cli(
        Some(&bus),
        &[
            "inject",
            "--pid",
            &p,
            "--func",
            "bar(int bar_arg)",
            "--float-args",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("xmm0-7 stashed"), "{}", text(&out));

    // list --json: identical through the daemon and standalone, signature and xmm included.
    let via_bus = cli(Some(&bus), &["list", "--pid", &p, "--json"]);
    let direct = cli(None, &["list", "--pid", &p, "--json"]);
    assert!(via_bus.status.success(), "{}", text(&via_bus));
    assert_eq!(text(&via_bus), text(&direct));
    let listed: serde_json::Value = serde_json::from_slice(&via_bus.stdout).unwrap();
    let hook = &listed["hooks"][0];
    assert_eq!(hook["signature"], "int bar_arg", "{listed:#}");
    assert_eq!(hook["xmm"], true, "{listed:#}");

    // bt --json: the bar frame carries the typed parameter and the xmm registers.
    let via_bus = bar_frame(Some(&bus), &p);
    let direct = bar_frame(None, &p);
    assert_same_bar_frame(&via_bus, &direct);
    let params = via_bus["params"].as_array().unwrap();
    assert_eq!(params.len(), 1, "{via_bus:#}");
    assert_eq!(params[0]["name"], "bar_arg");
    assert_eq!(params[0]["type"], "int");
    assert_eq!(params[0]["display"], "28");
    assert_eq!(params[0]["source"], "stash");
    let args = via_bus["args"].as_array().unwrap();
    let rdi = args.iter().find(|a| a["register"] == "rdi").unwrap();
    assert_eq!(rdi["name"], "bar_arg", "{rdi:#}");
    assert_eq!(rdi["value"], 28, "{rdi:#}");
    let xmm: Vec<&serde_json::Value> = args
        .iter()
        .filter(|a| a["register"].as_str().is_some_and(|r| r.starts_with("xmm")))
        .collect();
    assert_eq!(xmm.len(), 8, "{via_bus:#}");
    for x in xmm {
        let raw =
            u128::from_str_radix(x["raw"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
        assert_eq!(x["value"].as_u64(), Some(raw as u64), "{x:#}");
    }

    // Text: the gdb-like line shows the name, through the daemon too.
    let shown = (0..100).any(|_| {
        let out = cli(Some(&bus), &["bt", "--pid", &p]);
        assert!(out.status.success(), "{}", text(&out));
        thread::sleep(Duration::from_millis(7));
        text(&out).contains("bar (bar_arg=28) [stashed]")
    });
    assert!(
        shown,
        "bt through the daemon never showed `bar (bar_arg=28) [stashed]`"
    );
    run_ok_eject(&bus, &p);
    t.assert_healthy();
}

fn run_ok_eject(bus: &Bus, pid: &str) {
    let out = cli(Some(bus), &["eject", "--pid", pid, "--all"]);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn debug_info_names_and_lines_cross_the_bus() {
    let bus = Bus::start();
    let mut t = seed();
    let p = t.pid().to_string();
    let out = cli(Some(&bus), &["inject", "--pid", &p, "--func", "bar"]);
    assert!(out.status.success(), "{}", text(&out));
    let via_bus = bar_frame(Some(&bus), &p);
    let direct = bar_frame(None, &p);
    assert_same_bar_frame(&via_bus, &direct);
    // From DWARF: the source function, file and line, and the named parameter.
    assert_eq!(via_bus["source_function"], "bar", "{via_bus:#}");
    assert!(
        via_bus["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("seed.c")),
        "{via_bus:#}"
    );
    assert!(
        via_bus["line"].as_u64().is_some_and(|l| l > 0),
        "{via_bus:#}"
    );
    assert_eq!(via_bus["params"][0]["name"], "bar_arg", "{via_bus:#}");
    assert_eq!(via_bus["params"][0]["display"], "28", "{via_bus:#}");
    run_ok_eject(&bus, &p);
    t.assert_healthy();
}

#[test]
fn inject_options_signatures_float_args_and_a_forced_window() {
    let bus = Bus::start();
    let mut t = Target::start("seed", Variant::new(Opt::O2, true));
    let pid = t.pid() as u32;
    let proxy = bus.proxy();

    // Bad options are InvalidArgs naming the cause, and leave the target untouched.
    let cases: Vec<(Vec<&str>, HashMap<&str, Value>, &str)> = vec![
        (
            vec!["bar"],
            HashMap::from([(OPT_FLOAT_ARGS, Value::from(1u32))]),
            "must be a boolean",
        ),
        (
            vec!["bar"],
            HashMap::from([(OPT_SIGNATURES, Value::from("int"))]),
            "must map function names",
        ),
        (
            vec!["bar"],
            HashMap::from([(
                OPT_SIGNATURES,
                Value::from(HashMap::from([("foo", "int foo_arg")])),
            )]),
            "not among the functions",
        ),
        (
            vec!["bar(int)"],
            HashMap::from([(
                OPT_SIGNATURES,
                Value::from(HashMap::from([("bar", "int bar_arg")])),
            )]),
            "give it once",
        ),
        (
            vec!["bar"],
            HashMap::from([(
                OPT_SIGNATURES,
                Value::from(HashMap::from([("bar", "int bar_arg,")])),
            )]),
            "of `bar` in option signatures: an empty parameter (at byte 12)",
        ),
        (
            vec!["bar(int"],
            HashMap::new(),
            "the parameter list is not closed (at byte 7)",
        ),
        (
            vec!["bar(int a))"],
            HashMap::new(),
            "`)` follows the `)` that closes the parameter list (at byte 10)",
        ),
    ];
    for (funcs, opts, why) in cases {
        let err = proxy.inject(pid, &funcs, opts).unwrap_err();
        assert_eq!(err.kind(), Some(ErrorKind::InvalidArgs), "{funcs:?}: {err}");
        assert!(err.to_string().contains(why), "{funcs:?}: {err}");
    }
    assert!(proxy.list_hooks(pid).unwrap().is_empty());
    t.assert_function_pristine("bar");

    // The a{ss} option, float-args, and stack-args 0 kept as given.
    let opts = HashMap::from([
        (
            OPT_SIGNATURES,
            Value::from(HashMap::from([("foo", "int foo_arg")])),
        ),
        (OPT_FLOAT_ARGS, Value::from(true)),
        (OPT_STACK_ARGS, Value::from(0u16)),
    ]);
    let paths = proxy.inject(pid, &["foo", "bar(int n)"], opts).unwrap();
    assert_eq!(paths.len(), 2);
    let hooks = proxy.list_hooks(pid).unwrap();
    let by_name = |n: &str| hooks.iter().find(|h| h.function == n).unwrap().clone();
    assert_eq!(by_name("foo").signature, "int foo_arg");
    assert_eq!(by_name("bar").signature, "int n");
    assert!(
        hooks.iter().all(|h| h.xmm && h.stack_words == 0),
        "{hooks:?}"
    );
    let threads = (0..100)
        .map(|_| {
            thread::sleep(Duration::from_millis(7));
            proxy.backtrace(pid, 0, HashMap::new()).unwrap()
        })
        .find(|th| bar_rdi(th).is_some())
        .expect("bar on the stack");
    let frames: Vec<&argstash_dbus::Frame> = threads.iter().flat_map(|t| &t.frames).collect();
    let foo = frames.iter().find(|f| f.function == "foo").unwrap();
    assert_eq!(foo.params.len(), 1, "{foo:?}");
    assert_eq!(foo.params[0].name, "foo_arg");
    assert_eq!(foo.params[0].display, "5");
    let bar = frames.iter().find(|f| f.function == "bar").unwrap();
    assert_eq!(bar.params[0].name, "n");
    assert_eq!(
        bar.args
            .iter()
            .filter(|a| a.register.starts_with("xmm"))
            .count(),
        8
    );
    assert_eq!(proxy.eject_all(pid).unwrap(), 2);
    t.assert_healthy();
}

/// Environment variable that turns [`signal_listener`] on (the bus address).
const LISTENER_ADDRESS: &str = "ARGSTASH_TEST_SIGNAL_LISTENER";

/// Not a test by itself: the other-uid client of
/// `signals_reach_only_peers_that_may_trace_the_process`, which runs this test
/// binary again under `setpriv`. Prints `listening`, then one line per signal.
#[test]
#[ignore = "helper process of signals_reach_only_peers_that_may_trace_the_process"]
fn signal_listener() {
    let Ok(address) = std::env::var(LISTENER_ADDRESS) else {
        return;
    };
    let conn = zbus::blocking::connection::Builder::address(address.as_str())
        .unwrap()
        .build()
        .unwrap();
    let proxy = argstash_dbus::Injector1ProxyBlocking::new(&conn).unwrap();
    let installed = proxy.receive_hook_installed().unwrap();
    let exited = proxy.receive_process_exited().unwrap();
    thread::spawn(move || {
        for s in exited {
            println!("exited {}", s.args().unwrap().pid);
        }
    });
    println!("listening");
    for s in installed {
        println!("installed {}", s.args().unwrap().hook);
    }
}

#[test]
fn signals_reach_only_peers_that_may_trace_the_process() {
    use std::io::BufRead;
    let bus = Bus::start();
    let mut root_target = seed();
    let exe = argstash_tests::build("seed", Variant::O2G);
    let mut own = Target::spawn_with_args(
        std::path::Path::new("/usr/bin/setpriv"),
        &[
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            exe.to_str().unwrap(),
        ],
    );
    // The listener: this test binary again, as nobody.
    let mut listener = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "signal_listener", "--nocapture"])
        .env(LISTENER_ADDRESS, &bus.address)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel();
    let stdout = listener.stdout.take().unwrap();
    thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = |what: &str| loop {
        let line = lines
            .recv_timeout(Duration::from_secs(15))
            .unwrap_or_else(|_| panic!("the listener never printed {what}"));
        if line.starts_with("listening")
            || line.starts_with("installed ")
            || line.starts_with("exited ")
        {
            return line;
        }
    };
    assert_eq!(next("listening"), "listening");

    // Root hooks root's process first, then nobody's: nobody hears only of its own.
    let proxy = bus.proxy();
    let root_hooks = proxy
        .inject(root_target.pid() as u32, &["bar"], HashMap::new())
        .unwrap();
    let own_hooks = proxy
        .inject(own.pid() as u32, &["bar"], HashMap::new())
        .unwrap();
    assert_eq!(
        next("HookInstalled"),
        format!("installed {}", own_hooks[0].as_str())
    );
    // Root's process exits first, and root hears of it before nobody's exits:
    // signals to one peer arrive in the order they were sent, so had root's
    // exit reached nobody, it would come first.
    let root_exits = bus.proxy().receive_process_exited().unwrap();
    let (exit_tx, exits) = mpsc::channel();
    thread::spawn(move || {
        for s in root_exits {
            if s.args().is_ok_and(|a| exit_tx.send(a.pid).is_err()) {
                break;
            }
        }
    });
    let root_pid = root_target.pid() as u32;
    root_target.kill();
    let heard = std::iter::from_fn(|| exits.recv_timeout(Duration::from_secs(15)).ok())
        .any(|pid| pid == root_pid);
    assert!(heard, "root never heard that process {root_pid} exited");
    own.kill();
    let exited = next("ProcessExited");
    assert_eq!(
        exited,
        format!("exited {}", own.pid()),
        "root's hook was {root_hooks:?}"
    );
    let _ = listener.kill();
    let _ = listener.wait();
}

#[test]
fn a_target_with_a_private_tmp_gets_the_files_it_opens_in_its_own_tmp() {
    // The daemon's unit has `PrivateTmp=yes`: it and its targets never share a
    // /tmp. Here the target has the private /tmp (its own mount namespace with a
    // fresh tmpfs on /tmp); the files it must open (the jitdump it maps, the gdb
    // helper it dlopens) and the perf map perf looks for in its namespace must
    // be written into that /tmp, through /proc/PID/root.
    let bus = Bus::start();
    let exe = argstash_tests::build("seed", Variant::O2G);
    let mut t = Target::spawn_with_args(
        std::path::Path::new("unshare"),
        &[
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount -t tmpfs argstash-private-tmp /tmp && exec \"$0\"",
            exe.to_str().unwrap(),
        ],
    );
    let pid = t.pid();
    let proxy = bus.proxy();
    let report = proxy
        .inject_with_report(pid as u32, &["bar"], HashMap::new())
        .unwrap();
    let unwind = report.unwind.expect("unwind report");
    let notes = unwind.notes.clone().unwrap_or_default();
    assert!(!notes.iter().any(|n| n.contains("cannot map")), "{notes:?}");
    assert_eq!(unwind.gdb_jit, Some(1), "{unwind:?}");
    let theirs = std::path::PathBuf::from(format!("/proc/{pid}/root/tmp"));
    let names = [
        format!("jit-{pid}.dump"),
        format!("argstash-jit-{pid}.so"),
        format!("perf-{pid}.map"),
    ];
    for name in &names {
        assert!(theirs.join(name).is_file(), "{name}: {unwind:?}");
        assert!(
            !std::path::Path::new("/tmp").join(name).exists(),
            "{name} is not in the daemon's /tmp"
        );
    }
    // The hook works: its stashed argument shows in a backtrace.
    assert_eq!(rdi_of_bar(&bus, pid as u32), 28);
    assert_eq!(proxy.eject_all(pid as u32).unwrap(), 1);
    for name in &names {
        assert!(!theirs.join(name).exists(), "eject removes {name}");
    }
    t.assert_healthy();
}

#[test]
fn hostile_files_at_the_targets_tmp_paths_are_noted_and_left_alone() {
    // uid 65534 plants FIFOs at every /tmp name argstashd uses for a root
    // target: the call returns in time, the report names each file, the FIFOs
    // stay, and the hook works.
    let bus = Bus::start();
    let mut t = seed();
    let pid = t.pid();
    let paths = [
        format!("/tmp/perf-{pid}.map"),
        format!("/tmp/jit-{pid}.dump"),
        format!("/tmp/argstash-jit-{pid}.so"),
        format!("/tmp/argstash-{pid}.elf"),
    ];
    struct Cleanup<'a>(&'a [String]);
    impl Drop for Cleanup<'_> {
        fn drop(&mut self) {
            for p in self.0 {
                let _ = std::fs::remove_file(p);
            }
        }
    }
    let _cleanup = Cleanup(&paths);
    for p in &paths {
        let _ = std::fs::remove_file(p);
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(["mkfifo", "-m", "666", p])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let proxy = bus.proxy();
    let report = proxy
        .inject_with_report(pid as u32, &["bar"], HashMap::new())
        .unwrap();
    let notes = report.unwind.and_then(|u| u.notes).unwrap_or_default();
    for p in &paths {
        assert!(
            notes.iter().any(|n| n.contains(&format!("{p} left alone"))),
            "{p}: {notes:?}"
        );
        let meta = std::fs::symlink_metadata(p).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type()));
    }
    assert_eq!(rdi_of_bar(&bus, pid as u32), 28);
    assert_eq!(proxy.eject_all(pid as u32).unwrap(), 1);
    t.assert_healthy();
}

#[test]
fn a_stack_window_for_one_function_crosses_the_bus() {
    let bus = Bus::start();
    let mut t = Target::start("seed", Variant::new(Opt::O2, true));
    let pid = t.pid() as u32;
    let proxy = bus.proxy();
    for (opts, why) in [
        (
            HashMap::from([(OPT_FUNCTION_STACK_ARGS, Value::from(2u16))]),
            "must map function names to stack words",
        ),
        (
            HashMap::from([(
                OPT_FUNCTION_STACK_ARGS,
                Value::from(HashMap::from([("foo", 2u16)])),
            )]),
            "names `foo`, which is not among the functions",
        ),
        (
            HashMap::from([(
                OPT_FUNCTION_STACK_ARGS,
                Value::from(HashMap::from([("bar", 17u16)])),
            )]),
            "gives `bar` 17 stack words",
        ),
    ] {
        let err = proxy.inject(pid, &["bar"], opts).unwrap_err();
        assert_eq!(err.kind(), Some(ErrorKind::InvalidArgs), "{err}");
        assert!(err.to_string().contains(why), "{err}");
    }
    assert!(proxy.list_hooks(pid).unwrap().is_empty());
    t.assert_function_pristine("bar");

    // The CLI's --stack-args NAME=N over the bus: bar gets 3 words, foo keeps its own.
    let p = t.pid().to_string();
    let out = cli(
        Some(&bus),
        &[
            "inject",
            "--pid",
            &p,
            "--func",
            "bar",
            "--func",
            "foo",
            "--stack-args",
            "bar=3",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let hooks = proxy.list_hooks(pid).unwrap();
    let by_name = |n: &str| hooks.iter().find(|h| h.function == n).unwrap().clone();
    assert_eq!(by_name("bar").stack_words, 3, "{hooks:?}");
    assert_eq!(by_name("foo").stack_words, 0, "{hooks:?}");
    run_ok_eject(&bus, &p);
    t.assert_function_pristine("bar");
    t.assert_healthy();
}

/// tests/fixtures/cppnames.cpp (C++ names only the symbol table holds) at -O2.
fn build_cppnames() -> std::path::PathBuf {
    let include = argstash_tests::fixtures_dir();
    let include = include.to_str().expect("a UTF-8 path");
    argstash_tests::build_cpp_with("cppnames", &["-fcf-protection=none", "-I", include])
}

/// The mangled name of the function `nm -C` shows as `demangled` in `exe`.
fn mangled_in(exe: &std::path::Path, demangled: &str) -> String {
    let plain = std::process::Command::new("nm").arg(exe).output().unwrap();
    let shown = std::process::Command::new("nm")
        .arg("-C")
        .arg(exe)
        .output()
        .unwrap();
    let plain = String::from_utf8_lossy(&plain.stdout).into_owned();
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    // Both listings are in the same order: the same line of each.
    plain
        .lines()
        .zip(shown.lines())
        .find(|(_, s)| {
            s.ends_with(&format!(" {demangled}")) || s.contains(&format!(" {demangled}("))
        })
        .and_then(|(p, _)| p.rsplit(' ').next())
        .unwrap_or_else(|| panic!("nm -C shows no {demangled}"))
        .to_string()
}

#[test]
fn cpp_names_as_demangled_cross_the_bus_and_refusals_say_how_to_write_one_alone() {
    let bus = Bus::start();
    let exe = build_cppnames();
    let mut t = Target::spawn(&exe);
    let pid = t.pid() as u32;
    let p = t.pid().to_string();
    let proxy = bus.proxy();

    // Several overloads: Ambiguous, each written alone, in D-Bus terms and typed.
    let err = proxy
        .inject(pid, &["parse(long, long)"], HashMap::new())
        .unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::Ambiguous), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("hook one alone: give as the function `ns::Parser::parse(long, long)` or `other::parse`"),
        "{msg}"
    );
    assert!(!msg.contains("--func"), "no command-line syntax: {msg}");
    let hint = err.hint().expect("a typed hint");
    assert_eq!(
        hint.kind.as_deref(),
        Some(argstash_dbus::HINT_WRITE_ONE_ALONE)
    );
    assert_eq!(
        hint.functions.as_deref(),
        Some(
            &[
                "ns::Parser::parse(long, long)".to_string(),
                "other::parse".to_string()
            ][..]
        )
    );
    assert_eq!(hint.read_as, None);
    // A malformed name: InvalidArgs, what it could be read as, and its functions.
    let err = proxy
        .inject(pid, &["ns::Parser::parse(long"], HashMap::new())
        .unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidArgs), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("`(` and `)` do not pair up"), "{msg}");
    assert!(
        msg.contains("to hook one of them, give as the function `ns::Parser::parse(long, long)` or `ns::Parser::parse(int)`"),
        "{msg}"
    );
    assert_eq!(
        err.hint().and_then(|h| h.read_as.as_deref()),
        Some("ns::Parser::parse")
    );
    // The CLI through the daemon prints what it prints alone: the hint as flags.
    for args in [
        ["inject", "--pid", &p, "--func", "parse(long, long)"],
        ["inject", "--pid", &p, "--func", "ns::Parser::parse(long"],
    ] {
        let alone = cli(None, &args);
        let via = cli(Some(&bus), &args);
        assert_eq!(alone.status.code(), Some(1), "{}", text(&alone));
        assert_eq!(via.status.code(), Some(1), "{}", text(&via));
        assert_eq!(text(&alone), text(&via), "{args:?}");
        assert!(
            text(&via).contains("--func 'ns::Parser::parse(long, long)'"),
            "{}",
            text(&via)
        );
    }
    assert!(
        proxy.list_hooks(pid).unwrap().is_empty(),
        "refusals hook nothing"
    );

    // Names as demangled hook; ListHooks shows them as `list` does.
    let names = ["ns::Parser::parse(long, long)", "ns::call<long (*)(long)>"];
    proxy.inject(pid, &names, HashMap::new()).unwrap();
    let hooks = proxy.list_hooks(pid).unwrap();
    for (written, shown) in [
        (names[0], "ns::Parser::parse(long, long)"),
        (names[1], "ns::call<long (*)(long)>(long (*)(long), long)"),
    ] {
        let h = hooks
            .iter()
            .find(|h| h.demangled == shown)
            .unwrap_or_else(|| panic!("no hook shown as {shown} for {written}: {hooks:#?}"));
        assert_eq!(h.function, mangled_in(&exe, shown), "{h:#?}");
    }
    // Backtrace: the hooked frame, named as `bt` names it, with the fixture's arguments.
    let mut found = None;
    for _ in 0..100 {
        let threads = proxy.backtrace(pid, 0, HashMap::new()).unwrap();
        found = threads[0]
            .frames
            .iter()
            .find(|f| f.function == "ns::Parser::parse" && f.hooked)
            .cloned();
        if found.is_some() {
            break;
        }
        thread::sleep(Duration::from_millis(7));
    }
    let frame = found.expect("ns::Parser::parse hooked on the stack");
    let arg = |r: &str| frame.args.iter().find(|a| a.register == r).map(|a| a.value);
    assert_eq!((arg("rsi"), arg("rdx")), (Some(11), Some(22)), "{frame:#?}");
    assert_eq!(
        proxy
            .eject(pid, &["ns::call<long (*)(long)>", "parse(long,long)"])
            .unwrap(),
        2
    );
    t.assert_healthy();
    t.kill();
}
