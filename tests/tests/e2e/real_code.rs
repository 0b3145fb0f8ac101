//! End-to-end on code no one here wrote: functions of Debian's libstdc++ and of a
//! Rust crate built in release mode, hooked by the names their languages write,
//! throwing and panicking through the hooks.
//!
//! - libstdc++ (`/usr/lib/x86_64-linux-gnu/libstdc++.so.6`, -O2, stripped to its
//!   dynamic symbols): tests/fixtures/realcpp.cpp calls five of its exported
//!   functions in a loop (a `const` member of `std::__cxx11::basic_string`, a
//!   member taking four arguments, a free function, a variadic function that
//!   throws, a function without parameters). Their names come from
//!   `nm -D --demangle`, not from this file; the arguments `bt` must show from
//!   the driver's own `args` line.
//! - A fresh cargo crate (tests/fixtures/crashy.rs as its `src/main.rs`), built
//!   with `cargo build --release --offline`, legacy and v0 symbol mangling: a
//!   function in a module, a generic function monomorphised twice, a closure, a
//!   trait method, a function that panics (caught by `catch_unwind`).
//!
//! Each test compares the program's results with and without hooks, counts the
//! exceptions (panics) the program caught, and checks that eject leaves the
//! code as it was.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use argstash_tests::*;

const LINE: Duration = Duration::from_secs(20);
const CATCH: Duration = Duration::from_secs(30);

/// The `key=value` pairs of the line the program prints first after `ready`
/// (`args this=0x... hlen=32768 ...`), numbers decimal or `0x` hex.
fn args_line(t: &mut Target) -> HashMap<String, u64> {
    let line = t.wait_for_line(LINE, |l| l.starts_with("args "));
    line.split_whitespace()
        .skip(1)
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("key=value");
            let n = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            }
            .unwrap_or_else(|e| panic!("{kv} in {line:?}: {e}"));
            (k.to_string(), n)
        })
        .collect()
}

/// What the program says on `check`: `(iterations, caught, bad, results)`.
fn check(t: &mut Target) -> (u64, u64, u64, String) {
    t.write_stdin("check\n");
    let line = t.wait_for_line(LINE, |l| l.starts_with("iters="));
    let (counts, results) = line.split_once(" results ").expect("results");
    let n: Vec<u64> = counts
        .split_whitespace()
        .map(|kv| kv.split_once('=').unwrap().1.parse().unwrap())
        .collect();
    (n[0], n[1], n[2], results.to_string())
}

/// Waits until the program has caught `more` exceptions (panics) beyond `from`.
fn let_it_run(t: &mut Target, from: u64, more: u64) -> (u64, u64, u64, String) {
    let started = Instant::now();
    loop {
        let now = check(t);
        if now.1 >= from + more {
            return now;
        }
        if !t.is_alive() || started.elapsed() > LINE {
            t.fail(&format!("{more} more exceptions did not come ({now:?})"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The executable mappings of `path` in `pid` with their bytes.
fn code_of(pid: i32, path: &str) -> Vec<(u64, Vec<u8>)> {
    let code: Vec<_> = maps(pid)
        .into_iter()
        .filter(|m| m.path == path && m.perms.contains('x'))
        .map(|m| (m.start, read_mem(pid, m.start, (m.end - m.start) as usize)))
        .collect();
    assert!(!code.is_empty(), "no executable mapping of {path} in {pid}");
    code
}

/// The hooked frame of the main thread that carries the stash of the hook
/// whose function (mangled name) is `function`, waiting until one is live.
fn stashed_frame(pid: i32, function: &str) -> serde_json::Value {
    let find = |bt: &serde_json::Value| {
        thread_frames(&bt["threads"][0])
            .iter()
            .find(|f| f["hooked"] == true && f["hook"] == function)
            .cloned()
    };
    let bt = wait_bt(pid, Some(pid), CATCH, |bt| find(bt).is_some());
    find(&bt).unwrap()
}

#[track_caller]
fn assert_args(frame: &serde_json::Value, want: &[(&str, u64)]) {
    for (reg, value) in want {
        assert_eq!(frame_arg(frame, reg), Some(*value), "{reg}: {frame:#}");
    }
}

/// The active hook `list --json` shows for the function at `addr`.
fn hook_at(pid: i32, addr: u64) -> serde_json::Value {
    let hooks = list_hooks(pid);
    hooks
        .iter()
        .find(|h| h["state"] == "active" && json_hex(&h["address"]) == addr)
        .unwrap_or_else(|| panic!("no active hook at {addr:#x}: {hooks:#?}"))
        .clone()
}

/// A function of a shared library as `nm -D --demangle` names it.
struct NmFunction {
    /// The demangled name with its parameter list, without `@VERSION`.
    name: String,
    /// Its address in the file.
    addr: u64,
}

/// Every defined function of `lib`'s dynamic symbol table, demangled by nm.
fn nm_functions(lib: &str) -> Vec<NmFunction> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only", "--demangle"])
        .arg(lib)
        .output()
        .expect("nm (binutils; run scripts/setup.sh)");
    assert!(out.status.success(), "nm {lib} failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (addr, rest) = l.split_once(' ')?;
            let (kind, name) = rest.split_once(' ')?;
            if !matches!(kind, "T" | "W" | "t" | "i") {
                return None;
            }
            let name = name.split('@').next()?.to_string();
            Some(NmFunction {
                name,
                addr: u64::from_str_radix(addr, 16).ok()?,
            })
        })
        .collect()
}

/// The one function of `all` for which `pred` holds.
#[track_caller]
fn one<'a>(all: &'a [NmFunction], what: &str, pred: impl Fn(&str) -> bool) -> &'a NmFunction {
    let found: Vec<_> = all.iter().filter(|f| pred(&f.name)).collect();
    assert_eq!(
        found.len(),
        1,
        "{what}: {:?}",
        found.iter().map(|f| &f.name).collect::<Vec<_>>()
    );
    found[0]
}

/// `name` without whitespace.
fn squeeze(name: &str) -> String {
    name.chars().filter(|c| !c.is_whitespace()).collect()
}

/// `name` up to its parameter list.
fn path_of(name: &str) -> &str {
    &name[..name.rfind('(').expect("a parameter list")]
}

/// A parameter list as people write it, not as the demangler does:
/// `const char *` for `char const*`, `unsigned long int` for `unsigned long`.
fn as_people_write(name: &str) -> String {
    name.replace("char const*", "const char *")
        .replace("unsigned long", "unsigned long int")
}

#[test]
fn libstdcxx_functions_by_demangled_name_with_exceptions_through_the_hook() {
    let exe = build_cpp("realcpp");
    let mut t = Target::spawn(&exe);
    let pid = t.pid();
    let p = pid.to_string();
    let args = args_line(&mut t);
    let lib = maps(pid)
        .into_iter()
        .find(|m| m.path.contains("/libstdc++.so"))
        .expect("the driver maps libstdc++")
        .path;
    let base = maps(pid)
        .into_iter()
        .find(|m| m.path == lib && m.offset == 0)
        .unwrap()
        .start;

    // The functions, named by nm (binutils' demangler, not argstash's).
    let all = nm_functions(&lib);
    let string_char =
        "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::";
    let compare = one(&all, "compare(char const*) const", |n| {
        n.starts_with(string_char) && n.ends_with("::compare(char const*) const")
    });
    let hash = one(&all, "_Hash_bytes", |n| n.starts_with("std::_Hash_bytes("));
    let replace = one(&all, "_M_replace of char", |n| {
        n.starts_with(string_char) && n.contains("::_M_replace(")
    });
    let replaces: Vec<_> = all
        .iter()
        .filter(|f| f.name.contains("::_M_replace("))
        .collect();
    let throw_fmt = one(&all, "__throw_out_of_range_fmt", |n| {
        n.starts_with("std::__throw_out_of_range_fmt(")
    });
    let now = one(&all, "steady_clock::now", |n| {
        n.starts_with("std::chrono::") && n.ends_with("::steady_clock::now()")
    });

    let before = check(&mut t);
    assert_eq!(before.2, 0, "wrong results before any hook: {before:?}");
    let code_before = code_of(pid, &lib);

    // `_M_replace` alone names the char and the wchar_t strings' functions:
    // each is listed with how to write it alone; nothing is hooked.
    let out = expect_fail(
        &["inject", "--pid", &p, "--func", "_M_replace"],
        1,
        "ambiguous",
    );
    let err = squeeze(&String::from_utf8_lossy(&out.stderr));
    assert!(
        replaces.len() >= 2,
        "{:?}",
        replaces.iter().map(|f| &f.name).collect::<Vec<_>>()
    );
    for r in &replaces {
        assert!(
            err.contains(&squeeze(&r.name)),
            "{} not listed: {err}",
            r.name
        );
    }
    // A list that names no function of that path: the functions of the path
    // are suggested as the demangler spells them.
    let wrong = format!("{}(std::string const&)", path_of(&hash.name));
    let out = expect_fail(
        &["inject", "--pid", &p, "--func", &wrong],
        1,
        "did you mean",
    );
    let err = squeeze(&String::from_utf8_lossy(&out.stderr));
    assert!(err.contains(&squeeze(&hash.name)), "{err}");
    assert!(list_hooks(pid).is_empty(), "a refusal hooks nothing");
    assert_eq!(code_of(pid, &lib), code_before, "a refusal changes no code");

    // Qualified with the parameter list as nm prints it; qualified without it;
    // a suffix at a `::` with the list as people write it; a suffix of a
    // variadic function with people's spelling; a list with no parameters.
    let replace_suffix = as_people_write(
        replace
            .name
            .strip_prefix("std::__cxx11::")
            .expect("in std::__cxx11"),
    );
    let throw_suffix = as_people_write(throw_fmt.name.strip_prefix("std::").unwrap());
    let names = [
        compare.name.clone(),
        path_of(&hash.name).to_string(),
        replace_suffix,
        throw_suffix,
        now.name.clone(),
    ];
    let mut cmd = vec!["inject", "--pid", &p];
    for n in &names {
        cmd.extend(["--func", n.as_str()]);
    }
    let text = run_ok(&cmd);
    assert!(
        text.contains("for 5 hooks"),
        "registered with libgcc: {text}"
    );
    let mut mangled = Vec::new();
    for f in [compare, hash, replace, throw_fmt, now] {
        let hook = hook_at(pid, base + f.addr);
        assert_eq!(
            squeeze(hook["demangled"].as_str().unwrap()),
            squeeze(&f.name),
            "{hook:#}"
        );
        assert_eq!(hook["module"].as_str(), Some(lib.as_str()), "{hook:#}");
        mangled.push(hook["function"].as_str().unwrap().to_string());
    }

    // The stashed arguments are the driver's own.
    let a = |k: &str| args[k];
    let frame = stashed_frame(pid, &mangled[0]);
    assert_args(&frame, &[("rdi", a("this")), ("rsi", a("probe"))]);
    let frame = stashed_frame(pid, &mangled[1]);
    assert_args(
        &frame,
        &[("rdi", a("hbuf")), ("rsi", a("hlen")), ("rdx", a("seed"))],
    );
    let frame = stashed_frame(pid, &mangled[2]);
    assert_args(
        &frame,
        &[
            ("rdi", a("work")),
            ("rsi", a("pos")),
            ("rdx", a("n")),
            ("rcx", a("rbuf")),
            ("r8", a("n")),
        ],
    );
    // Caught while the exception it throws is on its way through the hook.
    let frame = stashed_frame(pid, &mangled[3]);
    assert_args(
        &frame,
        &[("rdi", a("fmt")), ("rsi", a("a")), ("rdx", a("b"))],
    );
    assert_eq!(frame["variadic"], true, "{frame:#}");
    // The text names the hook as nm does (its throwing code is an unnamed
    // `.cold` part here, so the frame itself may have no name).
    let want = format!("rdi={:#x}, rsi={}, rdx={:#x}", a("fmt"), a("a"), a("b"));
    let started = Instant::now();
    let line = loop {
        let text = run_ok(&["bt", "--pid", &p, "--tid", &p]);
        if let Some(l) = text.lines().find(|l| l.contains(&want)) {
            break l.to_string();
        }
        assert!(started.elapsed() < CATCH, "no frame with {want}: {text}");
    };
    assert!(line.contains(path_of(&throw_fmt.name)), "{line}");
    assert!(!line.contains(&mangled[3]), "{line}");

    // Thousands of exceptions through the hook, every one caught; the same results.
    let hooked = let_it_run(&mut t, before.1, 2000);
    assert_eq!(hooked.2, 0, "wrong results while hooked: {hooked:?}");
    assert_eq!(hooked.3, before.3, "results changed by the hooks");
    assert!(
        hooked.1 - before.1 >= hooked.0 - before.0,
        "an exception per iteration: {before:?} -> {hooked:?}"
    );

    // Eject by the same names: the library's code is byte for byte as before.
    let mut cmd = vec!["eject", "--pid", &p];
    for n in &names {
        cmd.extend(["--func", n.as_str()]);
    }
    run_ok(&cmd);
    assert!(
        list_hooks(pid).iter().all(|h| h["state"] != "active"),
        "{:#?}",
        list_hooks(pid)
    );
    let code_after = code_of(pid, &lib);
    assert_eq!(code_after.len(), code_before.len());
    for ((start, was), (_, now)) in code_before.iter().zip(&code_after) {
        if let Some(at) = was.iter().zip(now).position(|(x, y)| x != y) {
            panic!("libstdc++ differs after eject at {:#x}", start + at as u64);
        }
    }
    let after = let_it_run(&mut t, hooked.1, 200);
    assert_eq!(after.2, 0, "wrong results after eject: {after:?}");
    assert_eq!(after.3, before.3);
    t.write_stdin("quit\n");
    let status = t.wait_exit(LINE).expect("the driver exits on quit");
    assert_eq!(status.code(), Some(0), "{}", t.stderr_text());
    remove_argstash_tmp_files(pid);
}

/// Builds tests/fixtures/crashy.rs as the `src/main.rs` of a fresh cargo crate
/// with `cargo build --release --offline` (no dependencies; release: -O3 minus
/// nothing, no debug info, panic=unwind), legacy or v0 symbol mangling.
fn cargo_crate(v0: bool) -> PathBuf {
    let dir = fixture_cache_dir().join(format!(
        "real_code-crashy-{}-{}",
        if v0 { "v0" } else { "legacy" },
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("src")).unwrap();
    fs::write(
        dir.join("Cargo.toml"),
        // `[workspace]`: a crate of its own, though under this workspace's target dir.
        "[package]\nname = \"crashy\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\n\n[workspace]\n",
    )
    .unwrap();
    fs::copy(fixtures_dir().join("crashy.rs"), dir.join("src/main.rs")).unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--release", "--offline", "--quiet"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env(
            "RUSTFLAGS",
            if v0 {
                "-Csymbol-mangling-version=v0"
            } else {
                ""
            },
        )
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .output()
        .expect("cargo (run scripts/setup.sh)");
    assert!(
        out.status.success(),
        "cargo build --release failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("target/release/crashy")
}

/// The functions of `exe`'s symbol table, demangled by the Rust demangler nm
/// carries (`nm --demangle=rust`), without hash: `(name, mangled)`.
fn nm_rust(exe: &Path) -> Vec<(String, String)> {
    let run = |demangle: bool| {
        let mut cmd = Command::new("nm");
        cmd.arg("--defined-only");
        if demangle {
            cmd.arg("--demangle=rust");
        }
        let out = cmd.arg(exe).output().expect("nm (run scripts/setup.sh)");
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut it = l.splitn(3, ' ');
                let (addr, kind, name) = (it.next()?, it.next()?, it.next()?);
                matches!(kind, "t" | "T").then(|| (addr.to_string(), name.to_string()))
            })
            .collect::<Vec<_>>()
    };
    let mangled: HashMap<String, Vec<String>> =
        run(false)
            .into_iter()
            .fold(HashMap::new(), |mut m, (a, n)| {
                m.entry(a).or_default().push(n);
                m
            });
    run(true)
        .into_iter()
        .filter_map(|(addr, name)| {
            // Legacy names end in `::h<16 hex digits>`; v0 names carry no hash.
            let name = match name.rsplit_once("::h") {
                Some((path, hash))
                    if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) =>
                {
                    path.to_string()
                }
                _ => name,
            };
            let m = mangled.get(&addr)?.first()?.clone();
            Some((name, m))
        })
        .collect()
}

/// The mangled symbol nm names `name` (exactly one).
#[track_caller]
fn mangled_named(all: &[(String, String)], name: &str) -> String {
    let found: Vec<_> = all.iter().filter(|(n, _)| n == name).collect();
    assert_eq!(found.len(), 1, "{name}: {found:?}");
    found[0].1.clone()
}

fn rust_release_crate(v0: bool) {
    let exe = cargo_crate(v0);
    let all = nm_rust(&exe);
    let mut t = Target::spawn(&exe);
    let pid = t.pid();
    let p = pid.to_string();
    let args = args_line(&mut t);
    let a = |k: &str| args[k];
    let exe_path = exe.to_str().unwrap().to_string();
    let code_before = code_of(pid, &fs::canonicalize(&exe).unwrap().to_string_lossy());

    let before = let_it_run(&mut t, 0, 3);
    assert_eq!(before.2, 0, "wrong results before any hook: {before:?}");

    // `crashy::sum` is two functions. Legacy mangling has no generic arguments
    // in the name: each is written by its mangled name. v0 has them: each is
    // written `crashy::sum::<u32>`.
    let sums: Vec<&(String, String)> = all
        .iter()
        .filter(|(n, _)| n == "crashy::sum" || n.starts_with("crashy::sum::<"))
        .collect();
    assert_eq!(sums.len(), 2, "{sums:?}");
    let out = expect_fail(
        &["inject", "--pid", &p, "--func", "crashy::sum"],
        1,
        "ambiguous",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    for (name, mangled) in &sums {
        let alone = if v0 { name.as_str() } else { mangled.as_str() };
        assert!(err.contains(&format!("--func '{alone}'")), "{alone}: {err}");
    }
    assert!(list_hooks(pid).is_empty(), "a refusal hooks nothing");

    // Legacy: both by their mangled names; which is which shows in their stashes.
    let (sum_1, sum_2) = if v0 {
        (
            "crashy::sum::<u32>".to_string(),
            "crashy::sum::<u64>".to_string(),
        )
    } else {
        (sums[0].1.clone(), sums[1].1.clone())
    };
    let closure_name = if v0 {
        "crashy::scaler::{closure#0}"
    } else {
        "crashy::scaler::{{closure}}"
    };
    let names = [
        "crashy::parser::parse_record".to_string(),
        sum_1,
        sum_2,
        "<crashy::Foo as crashy::Parse>::parse".to_string(),
        closure_name.to_string(),
        "checked_div".to_string(),
    ];
    let mut cmd = vec!["inject", "--pid", &p];
    for n in &names {
        cmd.extend(["--func", n.as_str()]);
    }
    let text = run_ok(&cmd);
    assert!(
        text.contains("for 6 hooks"),
        "registered with libgcc: {text}"
    );
    let listed = list_hooks(pid);
    let function_of = |name: &str| -> String {
        let mangled = if name.starts_with("_R") || name.starts_with("_ZN") {
            name.to_string()
        } else {
            mangled_named(&all, name)
        };
        assert!(
            listed
                .iter()
                .any(|h| h["state"] == "active" && h["function"] == mangled.as_str()),
            "{name} ({mangled}) hooked: {listed:#?}"
        );
        mangled
    };
    let parse_record = function_of("crashy::parser::parse_record");
    let trait_parse = function_of("<crashy::Foo as crashy::Parse>::parse");
    let closure = function_of(closure_name);
    let div = function_of("crashy::checked_div");
    let sum_a = function_of(&names[1]);
    let sum_b = function_of(&names[2]);

    let frame = stashed_frame(pid, &parse_record);
    assert_args(
        &frame,
        &[("rdi", a("line")), ("rsi", a("len")), ("rdx", a("base"))],
    );
    let frame = stashed_frame(pid, &trait_parse);
    assert_args(&frame, &[("rdi", a("foo")), ("rsi", a("input"))]);
    let frame = stashed_frame(pid, &closure);
    assert_args(&frame, &[("rdi", a("closure")), ("rsi", a("x"))]);
    // The panicking call, caught while the panic unwinds through the hook.
    let frame = wait_bt(pid, Some(pid), CATCH, |bt| {
        thread_frames(&bt["threads"][0])
            .iter()
            .any(|f| f["hook"] == div.as_str() && frame_arg(f, "rsi") == Some(a("den")))
    });
    let frame = thread_frames(&frame["threads"][0])
        .iter()
        .find(|f| f["hook"] == div.as_str() && frame_arg(f, "rsi") == Some(a("den")))
        .unwrap()
        .clone();
    assert_args(&frame, &[("rdi", a("num")), ("rsi", a("den"))]);
    // Each monomorphisation gets its own slice.
    let (fa, fb) = (stashed_frame(pid, &sum_a), stashed_frame(pid, &sum_b));
    let mut seen = [frame_arg(&fa, "rdi"), frame_arg(&fb, "rdi")];
    seen.sort();
    let mut want = [Some(a("small")), Some(a("wide"))];
    want.sort();
    assert_eq!(seen, want, "{fa:#} {fb:#}");
    if v0 {
        assert_args(&fa, &[("rdi", a("small")), ("rsi", a("small_len"))]);
        assert_args(&fb, &[("rdi", a("wide")), ("rsi", a("wide_len"))]);
    }

    // Panics through the hook, every one caught; the same results.
    let hooked = let_it_run(&mut t, before.1, 100);
    assert_eq!(hooked.2, 0, "wrong results while hooked: {hooked:?}");
    assert_eq!(hooked.3, before.3, "results changed by the hooks");

    // Eject by the same names; the program's code is as before.
    let mut cmd = vec!["eject", "--pid", &p];
    for n in &names {
        cmd.extend(["--func", n.as_str()]);
    }
    run_ok(&cmd);
    assert!(list_hooks(pid).iter().all(|h| h["state"] != "active"));
    assert!(
        code_of(pid, &fs::canonicalize(&exe).unwrap().to_string_lossy()) == code_before,
        "{exe_path} differs after eject"
    );
    let after = let_it_run(&mut t, hooked.1, 20);
    assert_eq!(after.2, 0, "wrong results after eject: {after:?}");
    assert_eq!(after.3, before.3);
    t.write_stdin("quit\n");
    let status = t.wait_exit(LINE).expect("crashy exits on quit");
    assert_eq!(status.code(), Some(0), "{}", t.stderr_text());
    remove_argstash_tmp_files(pid);
    let _ = fs::remove_dir_all(exe.ancestors().nth(3).unwrap());
}

#[test]
fn rust_release_crate_by_path_legacy_mangling_with_a_panic_through_the_hook() {
    rust_release_crate(false);
}

#[test]
fn rust_release_crate_by_path_v0_mangling_with_a_panic_through_the_hook() {
    rust_release_crate(true);
}

/// Characters before the needle in the CMake script's haystack.
const HAY: usize = 200_000;
/// `string(FIND)` calls per round of the script.
const FINDS: usize = 50;
const NEEDLE: &str = "needle";

/// The rounds CMake has printed since the last call: `(round, total)`.
fn cmake_rounds(t: &mut Target, want: usize) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    while out.len() < want {
        let line = t.wait_for_line(LINE, |l| l.starts_with("-- round "));
        let mut it = line
            .split_whitespace()
            .filter_map(|w| w.parse::<u64>().ok());
        out.push((it.next().unwrap(), it.next().unwrap()));
    }
    out
}

/// A C++ program from Debian's archive: CMake (`cmake -P`, stripped: its own
/// functions have no names), whose calls into libstdc++ are hooked by their
/// demangled names, with `MODULE!NAME`. Its script searches a needle in a
/// haystack it builds, round after round; every round's total is the same
/// with and without the hook, and `bt` shows the needle's length and start
/// position the script passes to `std::string::find`.
#[test]
fn cmake_from_debian_calls_libstdcxx_through_a_hook() {
    let dir = fixture_cache_dir().join(format!("real_code-cmake-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let script = dir.join("loop.cmake");
    fs::write(
        &script,
        format!(
            "string(REPEAT \"a\" {HAY} hay)\n\
             string(APPEND hay \"{NEEDLE}\")\n\
             set(round 0)\n\
             while(1)\n\
               set(total 0)\n\
               foreach(i RANGE 1 {FINDS})\n\
                 string(FIND \"${{hay}}\" \"{NEEDLE}\" pos)\n\
                 math(EXPR total \"${{total}} + ${{pos}}\")\n\
               endforeach()\n\
               math(EXPR round \"${{round}} + 1\")\n\
               message(STATUS \"round ${{round}} total ${{total}}\")\n\
             endwhile()\n"
        ),
    )
    .unwrap();
    // The shell prints the pid CMake keeps when the shell execs it.
    let mut t = Target::spawn_with_args(
        Path::new("/bin/sh"),
        &[
            "-c",
            &format!("echo ready $$; exec cmake -P {}", script.display()),
        ],
    );
    let pid = t.pid();
    let p = pid.to_string();
    let expected = (HAY * FINDS) as u64;
    for (_, total) in cmake_rounds(&mut t, 1) {
        assert_eq!(total, expected, "CMake's own result before any hook");
    }
    let lib = maps(pid)
        .into_iter()
        .find(|m| m.path.contains("/libstdc++.so"))
        .expect("cmake maps libstdc++")
        .path;
    let exe = fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    let exe = exe.to_str().unwrap().to_string();
    assert!(exe.ends_with("/cmake"), "{exe}");
    let all = nm_functions(&lib);
    let find = one(
        &all,
        "find(char const*, unsigned long, unsigned long) const",
        |n| {
            n.starts_with("std::__cxx11::basic_string<char,")
                && n.ends_with("::find(char const*, unsigned long, unsigned long) const")
        },
    );
    let lib_code = code_of(pid, &lib);
    let exe_code = code_of(pid, &exe);

    let soname = Path::new(&lib).file_name().unwrap().to_str().unwrap();
    let soname = &soname[..soname.find(".so").unwrap() + 5]; // libstdc++.so.6
    let name = format!("{soname}!{}", as_people_write(&find.name));
    run_ok(&["inject", "--pid", &p, "--func", &name]);
    let hooks = list_hooks(pid);
    assert_eq!(hooks.len(), 1, "{hooks:#?}");
    assert_eq!(
        squeeze(hooks[0]["demangled"].as_str().unwrap()),
        squeeze(&find.name)
    );
    let mangled = hooks[0]["function"].as_str().unwrap().to_string();
    // The script's call: this string, the needle, from position 0, its length;
    // CMake's own frames (unnamed) below the hooked one.
    let bt = wait_bt(pid, Some(pid), CATCH, |bt| {
        thread_frames(&bt["threads"][0]).iter().any(|f| {
            f["hook"] == mangled.as_str()
                && frame_arg(f, "rdx") == Some(0)
                && frame_arg(f, "rcx") == Some(NEEDLE.len() as u64)
        })
    });
    let frames = thread_frames(&bt["threads"][0]);
    let at = frames
        .iter()
        .position(|f| f["hook"] == mangled.as_str())
        .unwrap();
    assert!(
        frames[at + 1..].iter().any(|f| f["module"] == exe.as_str()),
        "CMake's frames below the hook: {bt:#}"
    );
    for (_, total) in cmake_rounds(&mut t, 2) {
        assert_eq!(total, expected, "CMake's result with the hook");
    }
    run_ok(&["eject", "--pid", &p, "--func", &name]);
    assert!(list_hooks(pid).iter().all(|h| h["state"] != "active"));
    assert!(
        code_of(pid, &lib) == lib_code,
        "libstdc++ differs after eject"
    );
    assert!(code_of(pid, &exe) == exe_code, "cmake differs after eject");
    for (_, total) in cmake_rounds(&mut t, 1) {
        assert_eq!(total, expected, "CMake's result after eject");
    }
    t.assert_healthy();
    remove_argstash_tmp_files(pid);
    let _ = fs::remove_dir_all(&dir);
}
