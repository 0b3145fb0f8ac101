//! End-to-end: how `--func MODULE!NAME` names a module (path, symlink path, file
//! name, soname, a prefix ending at a name boundary), what an IFUNC refusal says,
//! and hooking a function that only a separate debug file's `.symtab` names.
//!
//! Fixtures: modnames.c (calls memset, a glibc IFUNC, through its PLT, and
//! `modlib_twin` of every library it loads) and modlib.c, built here as
//! `libsdemo.so.1.2.3` (soname `libsdemo.so.1`, loaded through that symlink, the
//! way the dynamic loader finds a library), `libsdemo-extra.so.1` and
//! `libsdemocrypt.so.1`. Expected addresses are read independently: GOT slots
//! from `readelf -r` and the process's memory, names from `nm`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use argstash_tests::*;

/// The three copies of modlib.c and where they are.
struct ModLibs {
    dir: PathBuf,
}

impl ModLibs {
    /// Builds the libraries into a fresh directory.
    fn build(tag: &str) -> ModLibs {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = fixture_cache_dir().join(format!(
            "modlibs-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        for (file, soname, tag) in [
            ("libsdemo.so.1.2.3", "libsdemo.so.1", 1),
            ("libsdemo-extra.so.1", "libsdemo-extra.so.1", 2),
            ("libsdemocrypt.so.1", "libsdemocrypt.so.1", 3),
        ] {
            let out = Command::new("cc")
                .args([
                    "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                ])
                .arg("-fcf-protection=none")
                .arg(format!("-DMODLIB_TAG={tag}"))
                .arg(format!("-Wl,-soname,{soname}"))
                .arg("-o")
                .arg(dir.join(file))
                .arg(fixtures_dir().join("modlib.c"))
                .output()
                .expect("run cc (scripts/setup.sh installs it)");
            assert!(
                out.status.success(),
                "cc modlib.c -> {file}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::os::unix::fs::symlink("libsdemo.so.1.2.3", dir.join("libsdemo.so.1")).unwrap();
        ModLibs { dir }
    }

    /// Starts modnames loading the soname symlink and the two other libraries.
    fn start(&self) -> Target {
        let exe = build("modnames", Variant::O2G);
        let args: Vec<String> = ["libsdemo.so.1", "libsdemo-extra.so.1", "libsdemocrypt.so.1"]
            .iter()
            .map(|f| self.dir.join(f).to_string_lossy().into_owned())
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut t = Target::spawn_with_args(&exe, &args);
        t.wait_for_line(E2E_TIMEOUT, |l| l.starts_with("iter "));
        t
    }

    /// The canonical path of a library, as maps and argstash show it.
    fn path(&self, file: &str) -> String {
        module_path(&self.dir.join(file))
    }
}

impl Drop for ModLibs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The active hooks of `name`, as `(module, address)`.
fn active(pid: i32, name: &str) -> Vec<(String, u64)> {
    list_hooks(pid)
        .iter()
        .filter(|h| h["function"].as_str() == Some(name) && h["state"].as_str() == Some("active"))
        .map(|h| {
            (
                h["module"].as_str().unwrap_or_default().to_string(),
                json_hex(&h["address"]),
            )
        })
        .collect()
}

/// Injects `spec`, checks exactly one hook of `name` in `module`, lets the
/// fixture run a few checked iterations, ejects by `eject_spec` and checks it is gone.
#[track_caller]
fn hook_and_eject(t: &mut Target, spec: &str, eject_spec: &str, name: &str, module: &str) {
    let pid = t.pid().to_string();
    run_ok(&["inject", "--pid", &pid, "--func", spec]);
    let hooks = active(t.pid(), name);
    assert_eq!(hooks.len(), 1, "{spec}: {hooks:?}");
    assert_eq!(hooks[0].0, module, "{spec} hooked the wrong module");
    t.drain_lines();
    for _ in 0..3 {
        t.wait_for_line(E2E_TIMEOUT, |l| l.starts_with("iter "));
    }
    t.assert_healthy();
    run_ok(&["eject", "--pid", &pid, "--func", eject_spec]);
    assert!(active(t.pid(), name).is_empty(), "{eject_spec} left a hook");
}

#[test]
fn modules_by_path_soname_file_name_and_prefix() {
    let libs = ModLibs::build("names");
    let mut t = libs.start();
    let sdemo = libs.path("libsdemo.so.1.2.3");
    let link = libs
        .dir
        .join("libsdemo.so.1")
        .to_string_lossy()
        .into_owned();
    // Everything that names libsdemo.so.1.2.3 alone; eject takes the same forms.
    let forms = [
        "libsdemo.so.1",     // the soname, as ldd prints it
        "libsdemo.so.1.2.3", // the file name
        "libsdemo.so.1.2",   // prefixes that end at a name boundary
        "libsdemo.so",
        link.as_str(),  // the symlink the loader opened
        sdemo.as_str(), // the path maps shows
    ];
    for (i, module) in forms.iter().enumerate() {
        let spec = format!("{module}!modlib_twin");
        let other = format!("{}!modlib_twin", forms[(i + 1) % forms.len()]);
        hook_and_eject(&mut t, &spec, &other, "modlib_twin", &sdemo);
    }
    // A prefix of another library's name: `libsdemo` must not reach libsdemocrypt.
    hook_and_eject(
        &mut t,
        "libsdemocrypt!modlib_twin",
        "libsdemocrypt.so.1!modlib_twin",
        "modlib_twin",
        &libs.path("libsdemocrypt.so.1"),
    );

    // Not at a name boundary, or nothing loaded by that name.
    let pid = t.pid().to_string();
    for bad in [
        "libsdemo.s",
        "libsdemo.",
        "lib",
        "libsdemo.so.1.2.",
        "libsdem",
    ] {
        let spec = format!("{bad}!modlib_twin");
        let stderr = refused(
            &mut t,
            &["inject", "--pid", &pid, "--func", &spec],
            1,
            &format!("no loaded module matches `{bad}`"),
        );
        assert!(
            stderr.contains("libsdemo.so.1.2.3 (soname libsdemo.so.1)"),
            "lists loaded modules with their sonames: {stderr}"
        );
    }

    // `libsdemo` ends at a boundary of two loaded names that both define the
    // function: name both and say how to write each.
    let stderr = refused(
        &mut t,
        &["inject", "--pid", &pid, "--func", "libsdemo!modlib_twin"],
        1,
        "`libsdemo!modlib_twin` is ambiguous: `libsdemo` matches 2 loaded modules that define `modlib_twin`",
    );
    for (path, spelling) in [
        (sdemo.clone(), "libsdemo.so.1.2.3"),
        (libs.path("libsdemo-extra.so.1"), "libsdemo-extra.so.1"),
    ] {
        assert!(
            stderr.contains(&format!("modlib_twin in {path} (0x")),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!("write `{spelling}!modlib_twin`")),
            "{stderr}"
        );
    }
    t.assert_healthy();
}

#[test]
fn libc_by_file_name_and_prefix() {
    let mut t = Target::start("seed", Variant::O2G);
    let libc = mapped_module(t.pid(), "libc.so.6");
    hook_and_eject(
        &mut t,
        "libc.so.6!unlinkat",
        "libc!unlinkat",
        "unlinkat",
        &libc,
    );
    hook_and_eject(
        &mut t,
        "libc!unlinkat",
        "libc.so!unlinkat",
        "unlinkat",
        &libc,
    );
    let pid = t.pid().to_string();
    refused(
        &mut t,
        &["inject", "--pid", &pid, "--func", "libc.s!unlinkat"],
        1,
        "no loaded module matches `libc.s`",
    );
    t.assert_function_pristine("bar");
}

// ---------------------------------------------------------------------------
// IFUNCs and separate debug files
// ---------------------------------------------------------------------------

/// One relocation as `readelf -r -W` prints it: (offset, type, symbol or addend).
fn relocations(path: &Path) -> Vec<(u64, String, String)> {
    let out = Command::new("readelf")
        .args(["-r", "-W"])
        .arg(path)
        .output()
        .expect("run readelf (binutils)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let offset = u64::from_str_radix(f.first()?, 16).ok()?;
            let kind = f.get(2)?.to_string();
            if !kind.starts_with("R_") {
                return None;
            }
            // JUMP_SLOT/GLOB_DAT: value, NAME@VERSION, +, addend; IRELATIVE: addend.
            let what = match f.len() {
                4 => f[3].to_string(),
                _ => f.get(4)?.split('@').next()?.to_string(),
            };
            Some((offset, kind, what))
        })
        .collect()
}

/// `(st_value, type)` of `name` in the `.dynsym` of `path` (`readelf --dyn-syms`).
fn dynsym(path: &Path, name: &str) -> Option<(u64, String)> {
    let out = Command::new("readelf")
        .args(["--dyn-syms", "-W"])
        .arg(path)
        .output()
        .expect("run readelf (binutils)");
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let sym = f.get(7)?;
        if sym.split('@').next()? != name || sym.contains("@GLIBC") && !sym.contains("@@") {
            return None;
        }
        Some((
            u64::from_str_radix(f.get(1)?, 16).ok()?,
            f.get(3)?.to_string(),
        ))
    })
}

/// The build-id file of `module` under /usr/lib/debug, if installed.
fn debug_file(module: &Path) -> Option<PathBuf> {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(module)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let id = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))?
        .trim()
        .to_string();
    let path = PathBuf::from(format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        &id[..2],
        &id[2..]
    ));
    path.is_file().then_some(path)
}

/// The pointer in process `pid` at `addr`.
fn read_u64(pid: i32, addr: u64) -> u64 {
    u64::from_le_bytes(read_mem(pid, addr, 8).try_into().unwrap())
}

/// What `memset` resolved to in `t`, read from the executable's own
/// `R_X86_64_JUMP_SLOT` (or `GLOB_DAT`) slot for it.
fn memset_from_got(t: &Target) -> u64 {
    let (offset, _, _) = relocations(t.exe())
        .into_iter()
        .find(|(_, kind, sym)| {
            (kind == "R_X86_64_JUMP_SLOT" || kind == "R_X86_64_GLOB_DAT") && sym == "memset"
        })
        .expect("modnames imports memset");
    read_u64(t.pid(), load_bias(t.pid(), t.exe()) + offset)
}

/// Names `nm` gives the sized function at link-time address `svma` of `file`.
fn names_at(file: &Path, svma: u64) -> Vec<Symbol> {
    symbols(file)
        .into_iter()
        .filter(|s| s.addr == svma && s.size > 0 && matches!(s.kind, 'T' | 't' | 'W' | 'i'))
        .collect()
}

#[test]
fn ifunc_refusal_names_what_the_got_holds() {
    let mut t = Target::start("modnames", Variant::O2G);
    let pid = t.pid();
    let exe = module_path(t.exe());
    let libc = mapped_module(pid, "libc.so.6");
    let libc_path = Path::new(&libc);
    let libc_bias = load_bias(pid, libc_path);
    assert_eq!(
        dynsym(libc_path, "memset").map(|(_, kind)| kind).as_deref(),
        Some("IFUNC"),
        "this test expects glibc's memset to be an IFUNC"
    );

    // The executable's GOT slot, read here.
    let called = memset_from_got(&t);
    let debug = debug_file(libc_path);
    let p = pid.to_string();
    let stderr = refused(
        &mut t,
        &["inject", "--pid", &p, "--func", "memset"],
        1,
        &format!("`memset` in {libc} is a GNU indirect function (IFUNC)"),
    );
    assert!(
        stderr.contains(&format!("({called:#x}, {libc})")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("resolved through the GOT of {exe}")),
        "{stderr}"
    );
    match &debug {
        Some(d) => {
            let names = names_at(d, called - libc_bias);
            assert!(!names.is_empty(), "nm names nothing at {called:#x}");
            assert!(
                names.iter().any(|s| stderr
                    .contains(&format!("this process calls {} ({called:#x}", s.name))
                    && stderr.contains(&format!("--func libc.so.6!{}", s.name))),
                "names {names:?}: {stderr}"
            );
        }
        None => eprintln!("libc6-dbg is not installed: the implementation's name is not checked"),
    }

    // libc's own calls to strlen go through IRELATIVE slots whose addend is
    // strlen's resolver; the process does not import strlen itself.
    let (resolver, kind) = dynsym(libc_path, "strlen").expect("libc defines strlen");
    assert_eq!(kind, "IFUNC");
    let slots: Vec<u64> = relocations(libc_path)
        .into_iter()
        .filter(|(_, kind, addend)| {
            kind == "R_X86_64_IRELATIVE" && u64::from_str_radix(addend, 16).ok() == Some(resolver)
        })
        .map(|(offset, _, _)| libc_bias + offset)
        .collect();
    assert!(!slots.is_empty(), "libc has no IRELATIVE slot for strlen");
    let stderr = refused(
        &mut t,
        &["inject", "--pid", &p, "--func", "libc!strlen"],
        1,
        "`strlen` in ",
    );
    for slot in slots {
        let value = read_u64(pid, slot);
        assert!(
            stderr.contains(&format!("({value:#x}, {libc})")),
            "{stderr}"
        );
    }
    assert!(
        stderr.contains(&format!("resolved through the GOT of {libc}")),
        "{stderr}"
    );
}

#[test]
fn symtab_only_libc_functions_hook() {
    let mut t = Target::start("modnames", Variant::O2G);
    let pid = t.pid();
    let libc = mapped_module(pid, "libc.so.6");
    let libc_path = Path::new(&libc);
    let Some(debug) = debug_file(libc_path) else {
        eprintln!(
            "symtab_only_libc_functions_hook: skipped, libc's separate debug file is not \
             installed (apt-get install libc6-dbg; scripts/setup.sh does)"
        );
        return;
    };
    let libc_bias = load_bias(pid, libc_path);
    let called = memset_from_got(&t);
    let exported: Vec<String> = {
        let out = Command::new("nm")
            .args(["-D", "--defined-only"])
            .arg(libc_path)
            .output()
            .expect("nm");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().nth(2))
            .map(|n| n.split('@').next().unwrap_or(n).to_string())
            .collect()
    };
    let sym = names_at(&debug, called - libc_bias)
        .into_iter()
        .find(|s| !exported.contains(&s.name))
        .expect("the memset implementation has a name only the debug file knows");

    // Installed by the name bt shows, called on every iteration of the fixture
    // (which checks memset's result), then ejected byte-exact.
    let p = pid.to_string();
    run_ok(&["inject", "--pid", &p, "--func", &sym.name]);
    assert_eq!(active(pid, &sym.name), [(libc.clone(), called)]);
    t.drain_lines();
    for _ in 0..5 {
        t.wait_for_line(E2E_TIMEOUT, |l| l.starts_with("iter "));
    }
    t.assert_healthy();
    run_ok(&[
        "eject",
        "--pid",
        &p,
        "--func",
        &format!("libc.so.6!{}", sym.name),
    ]);
    assert!(active(pid, &sym.name).is_empty());
    assert_eq!(
        read_mem(pid, called, sym.size as usize),
        file_bytes_at_vaddr(libc_path, sym.addr, sym.size as usize),
        "{} restored",
        sym.name
    );

    // A sizeless symbol only the debug file names is still refused.
    let sizeless = symbols(&debug)
        .into_iter()
        .find(|s| s.name == "__restore_rt" && s.size == 0);
    if sizeless.is_some() && !exported.iter().any(|n| n == "__restore_rt") {
        refused(
            &mut t,
            &["inject", "--pid", &p, "--func", "libc.so.6!__restore_rt"],
            1,
            "`__restore_rt`: symbol has no size",
        );
    } else {
        eprintln!("libc's debug file has no sizeless __restore_rt: that check is skipped");
    }
    t.assert_healthy();
}
