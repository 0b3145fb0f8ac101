//! A private bus with its own `dbus-daemon` and `argstashd`, per test.

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::Duration;

use argstash_dbus::{Injector1ProxyBlocking, BUS_NAME};
use argstash_tests::{build_file, wait_until};

/// Call timeout of the daemon under test (long: loaded test machines are slow).
pub const TIMEOUT_MS: u64 = 15_000;

/// Call timeout of [`Bus::start_with_short_timeout`].
pub const SHORT_TIMEOUT_MS: u64 = 1500;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Everyone may connect, own any name and send anything.
pub const OPEN_POLICY: &str = r#"<policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
  </policy>"#;

/// The default policy of Debian's `system.conf`: nobody owns or is called unless allowed.
pub const SYSTEM_DEFAULT_POLICY: &str = r#"<policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
  </policy>"#;

/// A `dbus-daemon` on a Unix socket in a fresh directory, and `argstashd` on it.
pub struct Bus {
    /// The directory holding the config, the socket and the state dir.
    pub dir: PathBuf,
    /// D-Bus address of the bus.
    pub address: String,
    bus: Child,
    daemon: Option<Child>,
    timeout_ms: u64,
    /// More `argstashd` arguments, used by the next [`Bus::start_daemon`].
    pub daemon_args: Vec<String>,
}

impl Bus {
    /// Starts a private bus (anyone may connect and own names) and `argstashd` on it.
    pub fn start() -> Bus {
        Bus::start_with_policy(OPEN_POLICY, TIMEOUT_MS)
    }

    /// Like [`Bus::start`], with a daemon that gives up on a target after [`SHORT_TIMEOUT_MS`].
    pub fn start_with_short_timeout() -> Bus {
        Bus::start_with_policy(OPEN_POLICY, SHORT_TIMEOUT_MS)
    }

    /// Starts a bus whose policy is the system bus's default plus the shipped
    /// `packaging/org.argstash.Injector1.conf`, and `argstashd` on it.
    pub fn start_with_packaged_policy() -> Bus {
        let conf = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../packaging/org.argstash.Injector1.conf")
            .canonicalize()
            .unwrap();
        Bus::start_with_policy(
            &format!(
                "{SYSTEM_DEFAULT_POLICY}\n  <include>{}</include>",
                conf.display()
            ),
            TIMEOUT_MS,
        )
    }

    /// Starts a private bus with these `<policy>`/`<include>` elements, and `argstashd` on it.
    pub fn start_with_policy(policy: &str, timeout_ms: u64) -> Bus {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("argstashd-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Other uids (the setpriv clients) must reach the socket.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let socket = dir.join("bus");
        let config = dir.join("bus.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  {policy}
</busconfig>
"#,
                socket.display()
            ),
        )
        .unwrap();
        let bus = Command::new("dbus-daemon")
            .arg("--config-file")
            .arg(&config)
            .arg("--nofork")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-daemon");
        assert!(
            // The socket file appears at bind(), before listen(): wait for a connection.
            wait_until(Duration::from_secs(10), || {
                std::os::unix::net::UnixStream::connect(&socket).is_ok()
            }),
            "dbus-daemon does not listen on {}",
            socket.display()
        );
        let mut b = Bus {
            address: format!("unix:path={}", socket.display()),
            dir,
            bus,
            daemon: None,
            timeout_ms,
            daemon_args: Vec::new(),
        };
        b.start_daemon();
        b
    }

    /// The daemon's state directory.
    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// Starts `argstashd` and waits until it owns its name.
    pub fn start_daemon(&mut self) {
        assert!(self.daemon.is_none());
        let child = Command::new(env!("CARGO_BIN_EXE_argstashd"))
            .arg("--address")
            .arg(&self.address)
            .arg("--state-dir")
            .arg(self.state_dir())
            .arg("--timeout-ms")
            .arg(self.timeout_ms.to_string())
            .args(&self.daemon_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.dir.join("argstashd.log"))
                    .unwrap(),
            )
            .spawn()
            .expect("argstashd");
        self.daemon = Some(child);
        let conn = self.conn();
        let dbus = zbus::blocking::fdo::DBusProxy::new(&conn).unwrap();
        assert!(
            wait_until(Duration::from_secs(10), || dbus
                .name_has_owner(BUS_NAME.try_into().unwrap())
                .unwrap_or(false)),
            "argstashd did not take its name"
        );
    }

    /// Pid of the running daemon.
    pub fn daemon_pid(&self) -> i32 {
        self.daemon.as_ref().expect("daemon running").id() as i32
    }

    /// `kill -9` the daemon and reap it.
    pub fn kill_daemon(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }

    /// A new client connection.
    pub fn conn(&self) -> zbus::blocking::Connection {
        zbus::blocking::connection::Builder::address(self.address.as_str())
            .unwrap()
            .build()
            .expect("connect to the test bus")
    }

    /// A manager proxy on a new connection; properties are read fresh on every get.
    pub fn proxy(&self) -> Injector1ProxyBlocking<'static> {
        Injector1ProxyBlocking::builder(&self.conn())
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .unwrap()
    }

    /// Runs `busctl --address=... ARGS`.
    pub fn busctl(&self, args: &[&str]) -> Output {
        run(Command::new("busctl")
            .arg(format!("--address={}", self.address))
            .args(args))
    }

    /// Runs `dbus-send --bus=... --print-reply ARGS`.
    pub fn dbus_send(&self, args: &[&str]) -> Output {
        run(Command::new("dbus-send")
            .arg(format!("--bus={}", self.address))
            .arg("--print-reply")
            .args(args))
    }

    /// Runs `busctl` as uid/gid 65534 through `setpriv`.
    pub fn busctl_as_nobody(&self, args: &[&str]) -> Output {
        self.busctl_as(65534, 65534, args)
    }

    /// Runs `busctl` on this bus as `uid`:`gid` with no supplementary groups.
    pub fn busctl_as(&self, uid: u32, gid: u32, args: &[&str]) -> Output {
        run(Command::new("setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .args(["--clear-groups", "busctl"])
            .arg(format!("--address={}", self.address))
            .args(args))
    }
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.stdin(Stdio::null()).output().expect("run a client");
    out
}

/// stdout and stderr of `out` as one string.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Path of a daemon test fixture source.
pub fn fixture_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("{name}.c"))
}

/// `daemon/tests/fixtures/NAME.c` built with `cc -O0 -g` (cached by the harness).
pub fn build_local(name: &str) -> PathBuf {
    build_file(&fixture_source(name), &["-O0", "-g"])
}

impl Drop for Bus {
    fn drop(&mut self) {
        self.kill_daemon();
        if thread::panicking() {
            let log = std::fs::read_to_string(self.dir.join("argstashd.log")).unwrap_or_default();
            eprintln!("argstashd log:\n{log}");
        }
        let _ = self.bus.kill();
        let _ = self.bus.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `argstash [--bus ADDR] ARGS` stdout; asserts success.
pub fn cli(bus: Option<&Bus>, args: &[&str]) -> String {
    let mut all: Vec<&str> = Vec::new();
    if let Some(b) = bus {
        all.extend(["--bus", b.address.as_str()]);
    }
    all.extend(args);
    let out = argstash_tests::argstash_cmd(&all).output().unwrap();
    assert!(
        out.status.success(),
        "argstash {all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The backtrace JSON without what differs from one stop to the next.
pub fn steady(text: &str) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
    for t in v["threads"].as_array_mut().unwrap() {
        t["stopped_us"] = 0.into();
    }
    v
}
