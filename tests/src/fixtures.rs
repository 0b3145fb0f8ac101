//! Building the C fixtures of `tests/fixtures/` (and the i386 assembly one)
//! in a chosen [`Variant`], into a content-hashed cache under `target/fixtures/`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::command::check_tool;

/// Names of all fixtures (`tests/fixtures/<name>.c`).
pub const FIXTURES: &[&str] = &[
    "seed",
    "threads",
    "riprel",
    "badfuncs",
    "sigwait",
    "ambig",
    "crowded",
    "prologues",
    "manyargs",
    "crash",
    "lifecycle",
    "edgefuncs",
    "abiargs",
    "dwarfargs",
    "deepstack",
    "tailcall",
    "modnames",
    "busy_malloc",
    "busy_dlopen",
    "busy_printf",
    "pause_workers",
    "profsplit",
    "vartail",
    "coldwide",
];

/// Extra flags that turn on CET instrumentation (`endbr64` at function entry).
pub const CET: &[&str] = &["-fcf-protection=full"];

/// Optimisation / debug-info level of a fixture build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Opt {
    /// `-O0 -g`.
    O0g,
    /// `-O2 -g`.
    O2g,
    /// `-O2 -g`, then `strip --strip-debug` (symbol table kept, same code as `O2g`).
    O2,
}

/// One way of compiling a fixture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    /// Optimisation and debug info.
    pub opt: Opt,
    /// `-fPIE -pie` when true, `-fno-pie -no-pie` when false.
    pub pie: bool,
    /// Appended last to the `cc` command line (so they override the defaults).
    pub extra_flags: &'static [&'static str],
}

impl Variant {
    /// `-O2 -g`, PIE: the default build.
    pub const O2G: Variant = Variant::new(Opt::O2g, true);

    /// A variant without extra flags.
    pub const fn new(opt: Opt, pie: bool) -> Variant {
        Variant {
            opt,
            pie,
            extra_flags: &[],
        }
    }

    /// The same variant with `flags` as its extra flags.
    pub const fn with_flags(self, flags: &'static [&'static str]) -> Variant {
        Variant {
            extra_flags: flags,
            ..self
        }
    }

    /// The same variant built with CET (`-fcf-protection=full`, `endbr64`).
    pub const fn cet(self) -> Variant {
        self.with_flags(CET)
    }

    /// Whether this is an `-O2` build (where the fixtures' -O2 code shapes hold).
    pub fn optimized(&self) -> bool {
        matches!(self.opt, Opt::O2g | Opt::O2)
    }

    /// Whether the extra flags turn on CET (`endbr64` at function entry).
    pub fn has_cet(&self) -> bool {
        self.extra_flags
            .iter()
            .rev()
            .find(|f| f.starts_with("-fcf-protection"))
            .is_some_and(|f| *f != "-fcf-protection=none")
    }

    /// The six basic variants: {O0g, O2g, O2} x {PIE, no-PIE}.
    pub fn all() -> Vec<Variant> {
        let mut v = Vec::new();
        for opt in [Opt::O0g, Opt::O2g, Opt::O2] {
            for pie in [true, false] {
                v.push(Variant::new(opt, pie));
            }
        }
        v
    }

    /// [`Variant::all`] plus the CET version of each.
    pub fn all_with_cet() -> Vec<Variant> {
        let mut v = Variant::all();
        v.extend(Variant::all().into_iter().map(Variant::cet));
        v
    }

    /// Short name used in file names and messages, e.g. `O2g-pie-cet`.
    pub fn name(&self) -> String {
        let mut s = format!("{:?}-{}", self.opt, if self.pie { "pie" } else { "nopie" });
        if self.extra_flags == CET {
            s.push_str("-cet");
        } else if !self.extra_flags.is_empty() {
            s.push_str("-x");
        }
        s
    }

    /// The full `cc` argument list except input and output files.
    pub fn cc_flags(&self) -> Vec<String> {
        let mut f: Vec<&str> = match self.opt {
            Opt::O0g => vec!["-O0", "-g"],
            Opt::O2g | Opt::O2 => vec!["-O2", "-g"],
        };
        f.extend(["-Wall", "-Wextra", "-pthread", "-fcf-protection=none"]);
        f.extend(if self.pie {
            ["-fPIE", "-pie"]
        } else {
            ["-fno-pie", "-no-pie"]
        });
        f.extend(self.extra_flags);
        f.into_iter().map(String::from).collect()
    }
}

impl Default for Variant {
    fn default() -> Self {
        Variant::O2G
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// Directory holding the fixture sources (`tests/fixtures`).
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Path of a fixture's source, e.g. `fixture_path("seed")` (a `.c` suffix is optional;
/// C++ fixtures are named with their `.cpp` suffix, e.g. `"busy_throw.cpp"`).
pub fn fixture_path(name: &str) -> PathBuf {
    let file = if name.ends_with(".c") || name.ends_with(".cpp") {
        name.to_string()
    } else {
        format!("{name}.c")
    };
    let p = fixtures_dir().join(file);
    assert!(p.is_file(), "no fixture source {}", p.display());
    p
}

/// Root of the workspace (parent of `tests/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests crate has a parent directory")
        .to_path_buf()
}

/// Cargo's profile directory this test executable was built into (`target/debug`).
///
/// Found from `std::env::current_exe()`: test executables live in
/// `<profile dir>/deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("exe has a directory");
    if dir.file_name() == Some(OsStr::new("deps")) {
        dir.parent().expect("deps has a parent").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// Cache directory for compiled fixtures: `$ARGSTASH_FIXTURE_DIR`, else `target/fixtures`.
pub fn fixture_cache_dir() -> PathBuf {
    let dir = match std::env::var_os("ARGSTASH_FIXTURE_DIR") {
        Some(d) => PathBuf::from(d),
        None => match profile_dir().parent() {
            Some(target) => target.join("fixtures"),
            None => std::env::temp_dir().join("argstash-fixtures"),
        },
    };
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// Bump when the build recipe changes in a way the hash would not see.
const RECIPE_VERSION: &str = "argstash-fixtures-1";

/// 64-bit FNV-1a: a hash that is stable across Rust versions (file names depend on it).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.iter().chain(&[0xffu8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// `cc --version` output, part of the cache key.
fn cc_identity() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let out = Command::new("cc")
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("cannot run `cc --version` ({e}); run scripts/setup.sh"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
}

/// Compile `fixture` (a name from [`FIXTURES`]) in `variant`; returns the executable's path.
///
/// A name ending in `.cpp` (e.g. `"busy_throw.cpp"`) is a C++ fixture, compiled
/// with `c++` and the same flags.
///
/// The output is cached in [`fixture_cache_dir`] under a name containing a
/// hash of the sources (the fixture and every `.h` in `tests/fixtures`), the
/// flags and the compiler version, so unchanged fixtures are not rebuilt.
/// Safe to call concurrently from many threads and processes: each build
/// goes to a unique temporary name and is renamed into place.
pub fn build(fixture: &str, variant: Variant) -> PathBuf {
    type Memo = Mutex<HashMap<(String, Variant), Arc<OnceLock<PathBuf>>>>;
    static BUILDS: OnceLock<Memo> = OnceLock::new();
    let cell = BUILDS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry((fixture.to_string(), variant))
        .or_default()
        .clone();
    cell.get_or_init(|| build_uncached(fixture, variant))
        .clone()
}

fn build_uncached(fixture: &str, variant: Variant) -> PathBuf {
    let src = fixture_path(fixture);
    let flags = variant.cc_flags();
    let strip = variant.opt == Opt::O2;
    let compiler = if fixture.ends_with(".cpp") {
        "c++"
    } else {
        "cc"
    };

    let mut key: Vec<Vec<u8>> = vec![
        fs::read(&src).unwrap_or_else(|e| panic!("read {}: {e}", src.display())),
        cc_identity().into(),
        vec![u8::from(strip)],
    ];
    key.extend(flags.iter().map(|f| f.as_bytes().to_vec()));
    if compiler != "cc" {
        key.push(compiler.into());
    }
    let mut headers: Vec<PathBuf> = fs::read_dir(fixtures_dir())
        .expect("read fixtures dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension() == Some(OsStr::new("h")))
        .collect();
    headers.sort();
    for h in &headers {
        key.push(h.file_name().unwrap().as_encoded_bytes().to_vec());
        key.push(fs::read(h).expect("read header"));
    }
    let parts: Vec<&[u8]> = key.iter().map(Vec::as_slice).collect();
    let name = format!("{fixture}-{}", variant.name());
    let built = build_cached(&name, &parts, |tmp| {
        let mut cmd = Command::new(compiler);
        cmd.args(&flags).arg("-o").arg(tmp).arg(&src);
        check_tool(&mut cmd, &format!("compile fixture {fixture} ({variant})"));
        if strip {
            check_tool(
                Command::new("strip").arg("--strip-debug").arg(tmp),
                &format!("strip fixture {fixture} ({variant})"),
            );
        }
        Ok(())
    });
    built.unwrap_or_else(|e| panic!("{e}"))
}

/// Assemble and link `tests/fixtures/<name>.s` as a static i386 program (`as --32`, `ld -m elf_i386`).
///
/// Cached in [`fixture_cache_dir`] under a hash of the source, like [`build`].
pub fn build_i386(name: &str) -> PathBuf {
    let src = fixtures_dir().join(format!("{name}.s"));
    let text = fs::read(&src).unwrap_or_else(|e| panic!("read {}: {e}", src.display()));
    let built = build_cached(&format!("{name}-i386"), &[&text], |tmp| {
        let mut obj = tmp.as_os_str().to_owned();
        obj.push(".o");
        let obj = PathBuf::from(obj);
        check_tool(
            Command::new("as").args(["--32", "-o"]).arg(&obj).arg(&src),
            &format!("assemble {name}.s"),
        );
        check_tool(
            Command::new("ld")
                .args(["-m", "elf_i386", "-o"])
                .arg(tmp)
                .arg(&obj),
            &format!("link {name}"),
        );
        let _ = fs::remove_file(&obj);
        Ok(())
    });
    built.unwrap_or_else(|e| panic!("{e}"))
}

/// Compiles `src` into `out` with the system `cc` (`cc -o OUT SRC FLAGS...`:
/// libraries given as `-l` come after the source); panics with cc's messages
/// when it fails. Returns `out`.
pub fn compile_c(src: &Path, out: &Path, flags: &[&str]) -> PathBuf {
    let built = Command::new("cc")
        .arg("-o")
        .arg(out)
        .arg(src)
        .args(flags)
        .output()
        .expect("run cc (scripts/setup.sh installs it)");
    assert!(
        built.status.success(),
        "cc {} {}: {}",
        src.display(),
        flags.join(" "),
        String::from_utf8_lossy(&built.stderr)
    );
    out.to_path_buf()
}

/// Compiles `tests/fixtures/NAME.cpp` at `-O2` (no debug info) with `c++ -pthread`,
/// once per content: the result is cached under [`fixture_cache_dir`].
pub fn build_cpp(name: &str) -> PathBuf {
    build_cpp_with(name, &[])
}

/// [`build_cpp`] with `extra` flags after `-O2 -pthread` (e.g. `-rdynamic`), cached
/// per content and flags.
pub fn build_cpp_with(name: &str, extra: &[&str]) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let memo_key = format!("{name} {}", extra.join(" "));
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap();
    if let Some(p) = built.get(&memo_key) {
        return p.clone();
    }
    let src = fixtures_dir().join(format!("{name}.cpp"));
    let text = fs::read(&src).unwrap_or_else(|e| panic!("read {}: {e}", src.display()));
    let mut key: Vec<&[u8]> = vec![b"c++", cc_identity().as_bytes(), &text];
    key.extend(extra.iter().map(|f| f.as_bytes()));
    let out = build_cached(&format!("{name}-O2"), &key, |tmp| {
        let mut cmd = Command::new("c++");
        cmd.args(["-O2", "-pthread"])
            .args(extra)
            .arg("-o")
            .arg(tmp)
            .arg(&src);
        check_tool(&mut cmd, &format!("compile {}", src.display()));
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    built.insert(memo_key, out.clone());
    out
}

/// A copy of the built executable `exe` with every symbol table but `.dynsym`
/// removed (`strip --strip-all`), cached beside it as `EXE-stripped`.
pub fn strip_all(exe: &Path) -> PathBuf {
    let out = exe.with_file_name(format!(
        "{}-stripped",
        exe.file_name().expect("file name").to_string_lossy()
    ));
    if out.is_file() {
        return out;
    }
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tmp = out.with_extension(format!(
        "tmp{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    check_tool(
        Command::new("strip")
            .arg("--strip-all")
            .arg("-o")
            .arg(&tmp)
            .arg(exe),
        &format!("strip --strip-all {}", exe.display()),
    );
    if out.is_file() {
        let _ = fs::remove_file(&tmp);
    } else {
        fs::rename(&tmp, &out)
            .unwrap_or_else(|e| panic!("rename {} -> {}: {e}", tmp.display(), out.display()));
    }
    out
}

/// `cc -O1 -g -pthread`: the flags of a test's own program given as text (see [`build_source`]).
pub const SOURCE_FLAGS: &[&str] = &["-O1", "-g", "-pthread"];

/// Compiles a C program given as text (a test's own, small program) with
/// `cc FLAGS`; panics with cc's messages when it fails. Cached like
/// [`try_build_sources`].
pub fn build_source(name: &str, source: &str, flags: &[&str]) -> PathBuf {
    try_build_sources(name, &[(&format!("{name}.c"), source)], flags)
        .unwrap_or_else(|e| panic!("compile {name}: {e}"))
}

/// Compiles the C files `sources` (`(file name, text)`, linked together) with
/// `cc FLAGS` into an executable named after `name`; `Err` holds cc's messages
/// (a test that needs an optional toolchain, such as `-m32`, skips on it).
///
/// Cached in [`fixture_cache_dir`] under a hash of the texts, the flags and the
/// compiler version, like [`build`]; safe to call from many threads and processes.
pub fn try_build_sources(
    name: &str,
    sources: &[(&str, &str)],
    flags: &[&str],
) -> Result<PathBuf, String> {
    let mut key: Vec<&[u8]> = vec![b"cc", cc_identity().as_bytes()];
    for (file, text) in sources {
        key.extend([file.as_bytes(), text.as_bytes()]);
    }
    key.extend(flags.iter().map(|f| f.as_bytes()));
    build_cached(name, &key, |tmp| {
        let mut dir = tmp.as_os_str().to_owned();
        dir.push(".src");
        let dir = PathBuf::from(dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let mut cc = Command::new("cc");
        cc.arg("-o").arg(tmp);
        for (file, text) in sources {
            let path = dir.join(file);
            fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
            cc.arg(path);
        }
        let out = cc
            .args(flags)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run cc ({e}); run scripts/setup.sh"));
        let _ = fs::remove_dir_all(&dir);
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "cc {}: {}",
                flags.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    })
}

/// Compiles the C file `src` (from any directory, e.g. a crate's own
/// `tests/fixtures`) with `cc FLAGS`, cached by its content like [`try_build_sources`].
pub fn build_file(src: &Path, flags: &[&str]) -> PathBuf {
    let text = fs::read_to_string(src).unwrap_or_else(|e| panic!("read {}: {e}", src.display()));
    let stem = src
        .file_stem()
        .unwrap_or_else(|| panic!("{} has no file name", src.display()))
        .to_string_lossy();
    let file = format!("{stem}.c");
    try_build_sources(&stem, &[(&file, &text)], flags)
        .unwrap_or_else(|e| panic!("compile {}: {e}", src.display()))
}

/// An executable built by `make`, cached in [`fixture_cache_dir`] under `name`
/// and a hash of `key` (everything the build depends on: sources, flags, tool
/// versions). `make` writes it to the temporary path it is given, which is then
/// renamed into place (whoever finishes first wins: every build of one key is
/// identical); its `Err` is returned as it is, and nothing is cached.
pub fn build_cached(
    name: &str,
    key: &[&[u8]],
    make: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<PathBuf, String> {
    let mut parts = vec![RECIPE_VERSION.as_bytes(), name.as_bytes()];
    parts.extend_from_slice(key);
    let name = format!("{name}-{:016x}", fnv1a(&parts));
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = fixture_cache_dir();
    let out = dir.join(&name);
    if out.is_file() {
        return Ok(out);
    }
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    if let Err(e) = make(&tmp) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    if out.is_file() {
        let _ = fs::remove_file(&tmp);
    } else {
        fs::rename(&tmp, &out)
            .unwrap_or_else(|e| panic!("rename {} -> {}: {e}", tmp.display(), out.display()));
    }
    Ok(out)
}

/// A fresh empty directory under the temp dir, named after the process, a
/// tag and a counter; removed with its contents on drop.
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// Creates `$TMPDIR/argstash-TAG-PID-N`.
    pub fn new(tag: &str) -> ScratchDir {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "argstash-{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        ScratchDir(dir)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// True when `cc -m32` links a program here; otherwise prints why the calling test skips.
///
/// The probe runs once per test process; the message is printed on every call
/// that returns false, so each skipped test says why.
pub fn m32_available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    let ok = *OK.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("argstash-m32-probe-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("temp dir");
        let src = dir.join("probe.c");
        fs::write(
            &src,
            "#include <stdio.h>\nint main(void) { puts(\"\"); return 0; }\n",
        )
        .expect("write probe");
        let ok = Command::new("cc")
            .arg("-m32")
            .arg("-o")
            .arg(dir.join("probe"))
            .arg(&src)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let _ = fs::remove_dir_all(&dir);
        ok
    });
    if !ok {
        eprintln!("SKIP: `cc -m32` cannot link here (install gcc-multilib: scripts/setup.sh)");
    }
    ok
}

#[cfg(test)]
mod tests;
