//! The Debian package on a clean machine under a real systemd: `cargo deb -p argstash`
//! builds it (release profile, as users get it); a fresh bookworm root
//! (scripts/deb-root.sh) boots with `systemd-nspawn -b`; inside, `apt-get install
//! ./argstash_*.deb` installs it, `argstash demo` works, and inject/bt/eject go through
//! `argstash --bus system` to an argstashd that the first bus call started by D-Bus
//! activation through systemd.
//!
//! Skips, saying why, where it cannot run: not root, no systemd-nspawn or cargo-deb
//! (scripts/setup.sh installs both), no bookworm root (scripts/deb-root.sh builds it).
//! The root itself is never changed: the container runs on a throwaway overlay of it
//! (`--volatile=overlay`), so every run starts from the same clean machine.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use argstash_tests::{output_text, profile_dir, run_command, workspace_root, Background};

/// The cached root (scripts/deb-root.sh) and the stamp file it writes last.
const ROOT: &str = "/var/cache/argstash-deb/root";
const STAMP: &str = ".argstash-deb-root";

/// A release build of both binaries, when nothing is cached yet, on two busy cores.
const BUILD_TIMEOUT: Duration = Duration::from_secs(40 * 60);
/// One command inside the container (apt-get install unpacks gcc: the slowest).
const STEP_TIMEOUT: Duration = Duration::from_secs(300);

fn skip(why: &str) {
    eprintln!("deb: skipped: {why}");
}

/// Why this machine cannot run the test, if it cannot.
fn unavailable() -> Option<String> {
    if std::env::var_os("ARGSTASH_DEB_ROOT_UNAVAILABLE").is_some_and(|v| v == "1") {
        return Some("ARGSTASH_DEB_ROOT_UNAVAILABLE=1".into());
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("booting a container with systemd-nspawn needs root".into());
    }
    let works = |cmd: &mut Command| {
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !works(Command::new("systemd-nspawn").arg("--version")) {
        return Some(
            "no systemd-nspawn (apt-get install systemd-container, or run scripts/setup.sh)".into(),
        );
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    if !works(Command::new(cargo).args(["deb", "--version"])) {
        return Some(
            "no cargo-deb (cargo install --locked cargo-deb, or run scripts/setup.sh)".into(),
        );
    }
    if !root().join(STAMP).is_file() {
        return Some(format!(
            "no bookworm root at {} (scripts/deb-root.sh builds it; set ARGSTASH_DEB_ROOT for another place)",
            root().display()
        ));
    }
    None
}

fn root() -> PathBuf {
    std::env::var_os("ARGSTASH_DEB_ROOT").map_or_else(|| PathBuf::from(ROOT), PathBuf::from)
}

/// `cargo deb -p argstash`: the path of the .deb it wrote (into `<target>/debian/`).
fn build_deb() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    // --fast: lighter compression of the same files (the dbgsym package's xz takes minutes).
    cmd.current_dir(workspace_root())
        .args(["deb", "-p", "argstash", "--fast"]);
    // The same target directory as this test executable's (see cli::argstash).
    if let Some(target) = profile_dir()
        .parent()
        .filter(|t| t.join("CACHEDIR.TAG").is_file())
    {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    let started = Instant::now();
    let out = run_command(&mut cmd, BUILD_TIMEOUT);
    assert!(
        out.status.success(),
        "cargo deb -p argstash:\n{}",
        output_text(&out)
    );
    eprintln!(
        "deb: cargo deb took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let deb = stdout
        .lines()
        .map(str::trim)
        .find(|l| {
            l.ends_with(".deb")
                && Path::new(l)
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("argstash_"))
        })
        .unwrap_or_else(|| {
            panic!(
                "cargo deb printed no argstash_*.deb path:\n{}",
                output_text(&out)
            )
        });
    PathBuf::from(deb)
}

/// A booted container: systemd-nspawn in the background, and its PID 1 (the
/// container's systemd) to enter with nsenter. Powered off when dropped.
struct Machine {
    nspawn: Option<Background>,
    leader: i32,
}

impl Machine {
    /// Boots `root` (read-only lower layer under a tmpfs overlay) with `deb` and the demo
    /// source bound into /root, and waits until systemd says the boot is done.
    fn boot(root: &Path, deb: &Path) -> Machine {
        let name = format!("argstash-deb-{}", std::process::id());
        let deb_name = deb.file_name().unwrap().to_string_lossy().into_owned();
        let demo = workspace_root().join("cli/demo/demo.c");
        let mut cmd = Command::new("systemd-nspawn");
        cmd.args([
            // PID 1 here is not systemd: no scope to ask for, no machined to register with.
            "--keep-unit",
            "--register=no",
            "--volatile=overlay",
            "--console=pipe",
            "--boot",
        ])
        .arg(format!("--machine={name}"))
        .arg("--directory")
        .arg(root)
        .arg(format!("--bind-ro={}:/root/{deb_name}", deb.display()))
        .arg(format!("--bind-ro={}:/root/demo.c", demo.display()))
        .stdin(Stdio::null());
        let nspawn = Background::spawn(&mut cmd);
        let mut m = Machine {
            leader: 0,
            nspawn: Some(nspawn),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while m.leader == 0 {
            let pid = m.nspawn.as_ref().unwrap().pid();
            // nspawn's child becomes the container's PID 1 when it executes systemd.
            m.leader = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .ok()
                .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
                .filter(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .is_ok_and(|c| c.trim() == "systemd")
                })
                .unwrap_or(0);
            if m.leader == 0 {
                if Instant::now() > deadline
                    || m.nspawn
                        .as_mut()
                        .unwrap()
                        .wait_timeout(Duration::ZERO)
                        .is_some()
                {
                    let (out, _) = m.nspawn.take().unwrap().finish(Duration::ZERO);
                    panic!(
                        "systemd-nspawn started no container:\n{}",
                        output_text(&out)
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // `--wait`: until the boot is done; then "running", or "degraded" if a unit failed.
        // Early in the boot, before systemd has made its socket, it prints nothing or
        // "offline" (it cannot connect yet: seen on a loaded machine): asked again.
        let deadline = Instant::now() + Duration::from_secs(60);
        let state = loop {
            let out = m.sh("systemctl is-system-running --wait");
            let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let early = state.is_empty() || state == "offline";
            if !early || Instant::now() > deadline {
                break state;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if state != "running" {
            let failed = m.sh(
                "systemctl --failed --no-legend; journalctl -b -p warning --no-pager | tail -n 40",
            );
            panic!(
                "the container's systemd reached {state:?}, not running:\n{}",
                output_text(&failed)
            );
        }
        m
    }

    /// `sh -c script` inside the container, as root, with a clean environment.
    fn sh(&self, script: &str) -> Output {
        let mut cmd = Command::new("nsenter");
        cmd.arg("--target")
            .arg(self.leader.to_string())
            .args(["--all", "--", "/bin/sh", "-c", script])
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", "/root")
            .env("LANG", "C.UTF-8")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .current_dir("/")
            .stdin(Stdio::null());
        run_command(&mut cmd, STEP_TIMEOUT)
    }

    /// [`Machine::sh`], which must exit 0; returns stdout.
    #[track_caller]
    fn ok(&self, script: &str) -> String {
        let out = self.sh(script);
        assert!(
            out.status.success(),
            "in the container: {script}\n{}",
            output_text(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `script` until its stdout satisfies `want` (for at most 10 s); the last stdout.
    fn until(&self, script: &str, want: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.ok(script);
            if want(&text) || Instant::now() > deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        let Some(mut nspawn) = self.nspawn.take() else {
            return;
        };
        if self.leader != 0 {
            let _ = Command::new("nsenter")
                .arg("--target")
                .arg(self.leader.to_string())
                .args(["--all", "--", "systemctl", "poweroff"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        if nspawn.wait_timeout(Duration::from_secs(30)).is_none() {
            eprintln!("deb: the container did not power off within 30 s; killing systemd-nspawn");
            nspawn.kill();
        }
        let _ = nspawn.finish(Duration::from_secs(5));
    }
}

#[test]
fn deb_installs_on_a_clean_machine_and_argstashd_activates_under_systemd() {
    if let Some(why) = unavailable() {
        return skip(&why);
    }
    let deb = build_deb();
    let deb_name = deb.file_name().unwrap().to_string_lossy().into_owned();
    let m = Machine::boot(&root(), &deb);
    assert!(
        m.sh("command -v argstash || command -v cc")
            .stdout
            .is_empty(),
        "the clean machine already has argstash or a C compiler"
    );

    // What a user types. The .deb recommends gcc and libc6-dev for `argstash demo`.
    let install = m.ok(&format!("apt-get install -y -q ./root/{deb_name} 2>&1"));
    assert!(install.contains("Setting up argstash "), "{install}");
    let files = m.ok("dpkg -L argstash");
    for path in [
        "/usr/bin/argstash",
        "/usr/sbin/argstashd",
        "/usr/lib/systemd/system/argstashd.service",
        "/usr/share/dbus-1/system-services/org.argstash.Injector1.service",
        "/usr/share/dbus-1/system.d/org.argstash.Injector1.conf",
        "/usr/share/man/man1/argstash.1.gz",
        "/usr/share/man/man1/argstash-bt.1.gz",
        "/usr/share/man/man8/argstashd.8.gz",
        "/usr/share/bash-completion/completions/argstash",
        "/usr/share/zsh/vendor-completions/_argstash",
        "/usr/share/fish/vendor_completions.d/argstash.fish",
    ] {
        assert!(
            files.lines().any(|l| l == path),
            "the package lacks {path}:\n{files}"
        );
    }
    // Installed and known to systemd (postinst reloaded it), not started: the first bus call starts it.
    assert_eq!(
        m.sh("systemctl show -P LoadState argstashd").stdout,
        b"loaded\n"
    );
    assert_eq!(m.sh("systemctl is-active argstashd").stdout, b"inactive\n");

    let demo = m.ok("argstash demo 2>&1");
    for want in [
        " in bar (rdi=28, ",
        " in foo (rdi=5, ",
        "verified: the code of bar and foo in memory equals",
    ] {
        assert!(
            demo.contains(want),
            "argstash demo printed no {want:?}:\n{demo}"
        );
    }

    // A target of its own, as a service of the container's systemd.
    m.ok("cc -O2 -o /root/target /root/demo.c");
    m.ok("systemd-run --quiet --unit=argstash-deb-target /root/target");
    let pid = m.until("systemctl show -P MainPID argstash-deb-target", |s| {
        s.trim() != "0"
    });
    let pid = pid.trim().to_string();
    assert_ne!(pid, "0", "the target service has no main pid");

    // The first call through the system bus activates argstashd via systemd.
    let inject = m.ok(&format!(
        "argstash --bus system inject --pid {pid} --func bar --func foo 2>&1"
    ));
    assert!(inject.contains("bar") && inject.contains("foo"), "{inject}");
    assert_eq!(m.sh("systemctl is-active argstashd").stdout, b"active\n");
    let activation = m.ok("journalctl -b --no-pager -o cat _COMM=dbus-daemon");
    assert!(
        activation.contains("Activating via systemd: service name='org.argstash.Injector1' unit='argstashd.service'"),
        "dbus-daemon did not activate argstashd through systemd:\n{activation}"
    );
    let journal = m.ok("journalctl -b --no-pager -o cat -u argstashd");
    assert!(
        journal.contains("serving org.argstash.Injector1"),
        "{journal}"
    );
    let main_pid = m.ok("systemctl show -P MainPID argstashd");
    let comm = m.ok(&format!("cat /proc/{}/comm", main_pid.trim()));
    assert_eq!(comm.trim(), "argstashd", "argstashd.service's main process");

    let bt = m.until(&format!("argstash --bus system bt --pid {pid}"), |t| {
        t.contains(" in bar (rdi=28, ") && t.contains(" in foo (rdi=5, ")
    });
    let bar = bt.lines().find(|l| l.contains(" in bar (rdi=28, "));
    assert!(
        bar.is_some_and(|l| l.contains("[stashed]")),
        "no stashed bar in:\n{bt}"
    );
    // The bus policy lets anyone call; argstashd refuses a caller who could not ptrace the target.
    let refused = m.sh(&format!(
        "setpriv --reuid=65534 --regid=65534 --clear-groups argstash --bus system eject --pid {pid} --all"
    ));
    assert!(
        refused.status.code() == Some(1)
            && String::from_utf8_lossy(&refused.stderr).starts_with("argstash: "),
        "nobody's eject of root's process was not refused:\n{}",
        output_text(&refused)
    );
    let list = m.ok(&format!("argstash --bus system list --pid {pid}"));
    let active = |name: &str| {
        list.lines()
            .any(|l| l.starts_with("active") && l.split_whitespace().nth(1) == Some(name))
    };
    assert!(active("bar") && active("foo"), "{list}");

    let eject = m.ok(&format!(
        "argstash --bus system eject --pid {pid} --all 2>&1"
    ));
    assert!(
        eject.contains("ejected bar") && eject.contains("ejected foo"),
        "{eject}"
    );
    let bt = m.ok(&format!("argstash --bus system bt --pid {pid}"));
    assert!(
        !bt.contains("[stashed]"),
        "stashed frames after eject:\n{bt}"
    );
    // The target ran on with the right results all along (it aborts on a wrong one).
    assert_eq!(
        m.sh("systemctl is-active argstash-deb-target").stdout,
        b"active\n"
    );
    m.ok("systemctl stop argstash-deb-target");

    // Removing the package stops the daemon (prerm) and systemd forgets the unit (postrm).
    m.ok("apt-get remove -y -q argstash 2>&1");
    assert_eq!(m.sh("systemctl is-active argstashd").stdout, b"inactive\n");
    assert_eq!(
        m.sh("systemctl show -P LoadState argstashd").stdout,
        b"not-found\n"
    );
}
