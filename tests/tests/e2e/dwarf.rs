//! End-to-end: symbols, source lines and typed arguments from DWARF.
//!
//! Fixtures: dwarfargs.c (main -> outer(depth, tag) -> report(int, unsigned char,
//! bool, enum, const char *, struct point *)) and dwarfcpp.cpp (a C++ method with
//! an inlined callee). Every expected value comes from the fixture's own
//! `arg NAME VALUE` lines or from gdb's `bt` on the same process; separate debug
//! files, build-id directories and MiniDebugInfo are made here with objcopy/xz.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use argstash_tests::*;
use serde_json::Value;

const SOON: Duration = Duration::from_secs(10);

/// The `arg NAME VALUE` lines a fixture prints after its ready line.
fn fixture_args(t: &mut Target) -> HashMap<String, String> {
    let mut args = HashMap::new();
    loop {
        let line = t.expect_line(SOON);
        if line == "args done" {
            return args;
        }
        if let Some(rest) = line.strip_prefix("arg ") {
            let (name, value) = rest.split_once(' ').expect("arg NAME VALUE");
            args.insert(name.to_string(), value.to_string());
        }
    }
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = fixture_cache_dir().join(format!("dwarf-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

#[track_caller]
fn tool(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (run scripts/setup.sh)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Compiles a fixture source with `compiler` and `flags` to `out`.
fn compile(compiler: &str, src: &str, flags: &[&str], out: &Path) {
    tool(
        Command::new(compiler)
            .args(flags)
            .args(["-fcf-protection=none", "-pthread", "-I"])
            .arg(fixtures_dir())
            .arg("-o")
            .arg(out)
            .arg(fixtures_dir().join(src)),
    );
}

/// The GNU build-id of an ELF file, in hex.
fn build_id(path: &Path) -> String {
    let notes = tool(Command::new("readelf").arg("-n").arg(path));
    notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("{} has no build-id:\n{notes}", path.display()))
        .trim()
        .to_string()
}

/// `bt --json` of the process's main thread.
fn main_thread(pid: i32, extra: &[&str]) -> (Value, String) {
    let p = pid.to_string();
    let mut args = vec!["bt", "--pid", &p, "--tid", &p, "--json"];
    args.extend_from_slice(extra);
    let out = run(&args);
    assert!(
        out.status.success(),
        "bt failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bt: Value = serde_json::from_slice(&out.stdout).expect("bt JSON");
    (
        bt["threads"][0].clone(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn params(frame: &Value) -> Vec<&Value> {
    frame["params"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

fn param<'a>(frame: &'a Value, name: &str) -> &'a Value {
    params(frame)
        .into_iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no parameter {name}: {frame:#}"))
}

/// Checks report's six parameters against what the fixture says it passes.
fn check_report_params(frame: &Value, want: &HashMap<String, String>, source: &str) {
    let names: Vec<&str> = params(frame)
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, ["n", "c", "b", "col", "s", "p"], "{frame:#}");
    let shown = |n: &str| param(frame, n)["display"].as_str().unwrap().to_string();
    assert_eq!(shown("n"), want["n"]);
    assert_eq!(param(frame, "n")["type"], "int");
    // unsigned char: the number, then the character as gdb shows it.
    assert!(
        shown("c").starts_with(&format!("{} '", want["c"])),
        "{}",
        shown("c")
    );
    assert_eq!(param(frame, "c")["type"], "unsigned char");
    assert_eq!(shown("b"), want["b"]);
    assert!(shown("col") == want["col"] || shown("col") == want["colnum"]);
    assert!(
        shown("s").ends_with(&format!("\"{}\"", want["s"])),
        "{} vs {}",
        shown("s"),
        want["s"]
    );
    assert_eq!(param(frame, "s")["type"], "const char *");
    let p = want["p"].trim_start_matches("0x");
    assert_eq!(shown("p"), format!("(struct point *) 0x{p}"), "{frame:#}");
    for p in params(frame) {
        assert_eq!(p["source"], source, "{p}");
    }
}

fn typed_args_of_hooked_frame(v: Variant) {
    let mut t = Target::start("dwarfargs", v);
    let want = fixture_args(&mut t);
    let pid = t.pid().to_string();
    run_ok(&["inject", "--pid", &pid, "--func", "report"]);
    let bt = wait_bt(t.pid(), Some(t.pid()), SOON, |bt| {
        bt["threads"][0]["frames"].as_array().is_some_and(|f| {
            f.iter()
                .any(|f| f["function"] == "report" && f["hooked"] == true)
        })
    });
    let th = &bt["threads"][0];
    let (i, report) = frame_named(th, "report").unwrap();
    check_report_params(report, &want, "stash");
    assert!(report["file"].as_str().unwrap().ends_with("dwarfargs.c"));
    assert!(report["line"].as_u64().unwrap() > 0);
    // The legacy raw registers are still there.
    assert_eq!(
        frame_arg(report, "rdi"),
        Some(want["n"].parse::<i32>().unwrap() as u32 as u64)
    );
    let outer = &thread_frames(th)[i + 1];
    assert_eq!(outer["function"], "outer");

    let text = run_ok(&["bt", "--pid", &pid, "--tid", &pid]);
    let line = text
        .lines()
        .find(|l| l.contains(" in report ("))
        .unwrap_or_else(|| panic!("no report line:\n{text}"));
    assert!(
        line.contains(&format!("(n={}, c={} '", want["n"], want["c"])),
        "{line}"
    );
    assert!(line.contains(" at dwarfargs.c:"), "{line}");
    run_ok(&["eject", "--pid", &pid, "--all"]);
    t.assert_healthy();
}

#[test]
fn typed_args_of_hooked_frame_o0() {
    typed_args_of_hooked_frame(Variant::new(Opt::O0g, true));
}

#[test]
fn typed_args_of_hooked_frame_o2() {
    typed_args_of_hooked_frame(Variant::O2G);
}

/// gdb's `name=value` arguments of the first frame of function `func` in its `bt`.
fn gdb_args(bt: &str, func: &str) -> Option<Vec<(String, String)>> {
    let needle = format!(" {func} (");
    let line = bt
        .lines()
        .find(|l| l.starts_with('#') && l.contains(&needle))?;
    let start = line.find(&needle)? + needle.len();
    let end = line.rfind(") at ").or_else(|| line.rfind(") from "))?;
    let inner = &line[start..end];
    Some(
        inner
            .split(", ")
            .filter_map(|kv| kv.split_once('='))
            // `x@entry=V` alone is the entry value only: not a value of x now.
            .filter(|(k, _)| !k.contains('@'))
            // `x=x@entry=V`: x is V now and was V at entry.
            .map(|(k, v)| match v.split_once("@entry=") {
                Some((_, entry)) => (k.to_string(), entry.to_string()),
                None => (k.to_string(), v.to_string()),
            })
            .collect(),
    )
}

/// The value part of a gdb or argstash display, for comparison: no
/// `(type) ` prefix, no ` <symbol>` annotation.
fn normalized(display: &str) -> String {
    let mut d = display.to_string();
    if d.starts_with('(') {
        if let Some(close) = d.find(") ") {
            d = d[close + 2..].to_string();
        }
    }
    if let Some(open) = d.find(" <") {
        if let Some(close) = d[open..].find('>') {
            d.replace_range(open..open + close + 1, "");
        }
    }
    d
}

fn unhooked_args_match_gdb(v: Variant) {
    if !have("gdb") {
        println!("SKIP: gdb is not installed (scripts/setup.sh installs it)");
        return;
    }
    let mut t = Target::start("dwarfargs", v);
    let _ = fixture_args(&mut t);
    let pid = t.pid().to_string();
    let mut compared = 0;
    let mut recovered = 0;
    for _attempt in 0..5 {
        let (ours, _) = main_thread(t.pid(), &[]);
        let gdb = tool(
            Command::new("gdb")
                .args(["-batch", "-nx", "-p", &pid, "-ex", "bt"])
                .env("LC_ALL", "C"),
        );
        let (Some(_), Some(gdb_outer)) = (frame_named(&ours, "outer"), gdb_args(&gdb, "outer"))
        else {
            continue;
        };
        if frame_named(&ours, "report").is_none() || gdb_args(&gdb, "report").is_none() {
            continue;
        }
        for func in ["report", "outer"] {
            let (_, frame) = frame_named(&ours, func).unwrap();
            let theirs = if func == "outer" {
                gdb_outer.clone()
            } else {
                gdb_args(&gdb, func).unwrap()
            };
            assert_eq!(
                params(frame).len(),
                theirs.len(),
                "{func}: same parameters as gdb:\n{gdb}\n{frame:#}"
            );
            for (name, value) in &theirs {
                let mine = param(frame, name)["display"].as_str().unwrap();
                if value == "<optimized out>" {
                    // gdb has nothing: argstash must not invent a value.
                    assert_eq!(mine, "<optimized out>", "{func} {name}");
                    continue;
                }
                compared += 1;
                if mine == "<optimized out>" {
                    continue;
                }
                recovered += 1;
                assert_eq!(
                    normalized(mine),
                    normalized(value),
                    "{func} {name}: gdb says {value}, argstash {mine}\n{gdb}"
                );
                assert_eq!(param(frame, name)["source"], "dwarf");
            }
        }
        break;
    }
    println!("{v}: {recovered} of {compared} values gdb shows recovered");
    assert!(
        compared > 0,
        "gdb and argstash never both saw report and outer"
    );
    if v.optimized() {
        // outer keeps `tag` in a callee-saved register across its call of report:
        // recovered through report's CFI.
        assert!(
            recovered > 0,
            "no value recovered from callee-saved registers"
        );
    } else {
        assert_eq!(
            recovered, compared,
            "at -O0 every argument is in a stack slot"
        );
    }
    t.assert_healthy();
}

#[test]
fn unhooked_args_match_gdb_o0() {
    unhooked_args_match_gdb(Variant::new(Opt::O0g, true));
}

#[test]
fn unhooked_args_match_gdb_o2() {
    unhooked_args_match_gdb(Variant::O2G);
}

#[test]
fn cpp_names_are_demangled_and_inlined_frames_shown() {
    if !have("g++") {
        println!("SKIP: g++ is not installed (scripts/setup.sh installs it)");
        return;
    }
    let dir = scratch("cpp");
    let exe = dir.join("dwarfcpp");
    compile("g++", "dwarfcpp.cpp", &["-O2", "-g"], &exe);
    let mut t = Target::spawn(&exe);
    let want = fixture_args(&mut t);
    let pid = t.pid().to_string();

    let (th, _) = main_thread(t.pid(), &[]);
    let (_, poke) = frame_named(&th, "shapes::Widget::poke")
        .unwrap_or_else(|| panic!("a demangled poke frame: {th:#}"));
    let inlined = poke["inlined"].as_array().unwrap();
    assert_eq!(inlined.len(), 1, "{poke:#}");
    assert_eq!(inlined[0]["function"], "shapes::settle");
    assert_eq!(poke["source_function"], "shapes::Widget::poke");

    // The same functions, in the same order, as gdb shows them.
    let text = run_ok(&["bt", "--pid", &pid, "--tid", &pid]);
    let ours: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("settle (") || l.contains("poke ("))
        .map(|l| {
            if l.contains("settle") {
                "settle"
            } else {
                "poke"
            }
        })
        .collect();
    assert_eq!(ours, ["settle", "poke"], "{text}");
    let poke_line = text.lines().find(|l| l.contains("poke (")).unwrap();
    assert!(
        !poke_line.contains(" 0x") || poke_line.contains("this="),
        "an inlined caller line has no address: {poke_line}"
    );
    if have("gdb") {
        let gdb = tool(Command::new("gdb").args(["-batch", "-nx", "-p", &pid, "-ex", "bt"]));
        let theirs: Vec<&str> = gdb
            .lines()
            .filter(|l| l.starts_with('#'))
            .filter(|l| l.contains("settle (") || l.contains("poke ("))
            .map(|l| {
                if l.contains("settle") {
                    "settle"
                } else {
                    "poke"
                }
            })
            .collect();
        assert_eq!(ours, theirs, "ours:\n{text}\ngdb:\n{gdb}");
        assert!(gdb.contains("shapes::settle (") && gdb.contains("shapes::Widget::poke ("));
    }

    // Hook the method by its mangled name: `this` and `amount` come from the stash.
    run_ok(&[
        "inject",
        "--pid",
        &pid,
        "--func",
        "_ZN6shapes6Widget4pokeEi",
    ]);
    let bt = wait_bt(t.pid(), Some(t.pid()), SOON, |bt| {
        frame_named(&bt["threads"][0], "shapes::Widget::poke")
            .is_some_and(|(_, f)| f["hooked"] == true)
    });
    let (_, poke) = frame_named(&bt["threads"][0], "shapes::Widget::poke").unwrap();
    assert_eq!(param(poke, "this")["source"], "stash");
    // Types are named by their scope, as gdb names them.
    let this_type = param(poke, "this")["type"].as_str().unwrap().to_string();
    assert!(
        this_type.starts_with("shapes::Widget *"),
        "this has type {this_type}"
    );
    assert!(param(poke, "this")["display"]
        .as_str()
        .unwrap()
        .contains(") 0x7"));
    assert_eq!(param(poke, "amount")["display"], want["amount"].as_str());
    run_ok(&["eject", "--pid", &pid, "--all"]);
    t.assert_healthy();
    let _ = fs::remove_dir_all(&dir);
}

/// Builds dwarfargs at -O2 -g in `dir` and returns (full, debug-only) files.
fn with_separate_debug(dir: &Path, name: &str, define: &[&str]) -> (PathBuf, PathBuf) {
    let full = dir.join(format!("{name}.full"));
    let mut flags = vec!["-O2", "-g", "-fPIE", "-pie"];
    flags.extend_from_slice(define);
    compile("cc", "dwarfargs.c", &flags, &full);
    let debug = dir.join(format!("{name}.debug"));
    tool(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&full)
            .arg(&debug),
    );
    (full, debug)
}

fn has_source_lines(th: &Value) -> bool {
    frame_named(th, "report").is_some_and(|(_, f)| {
        f["file"]
            .as_str()
            .is_some_and(|s| s.ends_with("dwarfargs.c"))
            && params(f)
                .iter()
                .any(|p| p["name"] == "col" && p["display"] == "GREEN")
    })
}

#[test]
fn separate_debug_file_by_debuglink() {
    let dir = scratch("debuglink");
    let (full, debug) = with_separate_debug(&dir, "prog", &[]);
    let prog = dir.join("prog");
    // objcopy records the debug file's name and CRC; it is looked for next to prog.
    tool(
        Command::new("objcopy")
            .arg("--strip-debug")
            .arg(format!("--add-gnu-debuglink={}", debug.display()))
            .arg(&full)
            .arg(&prog),
    );
    let mut t = Target::spawn(&prog);
    let _ = fixture_args(&mut t);
    let (th, warnings) = main_thread(t.pid(), &[]);
    assert!(
        has_source_lines(&th),
        "debuglink file used: {th:#}\n{warnings}"
    );

    // A debug file in .debug/ is found too.
    let sub = dir.join(".debug");
    fs::create_dir_all(&sub).unwrap();
    fs::rename(&debug, sub.join("prog.debug")).unwrap();
    let (th, warnings) = main_thread(t.pid(), &[]);
    assert!(has_source_lines(&th), ".debug/ used: {th:#}\n{warnings}");
    drop(t);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn separate_debug_file_by_build_id_and_mismatch_ignored() {
    let dir = scratch("buildid");
    let (full, debug) = with_separate_debug(&dir, "prog", &[]);
    let prog = dir.join("prog");
    tool(
        Command::new("objcopy")
            .arg("--strip-debug")
            .arg(&full)
            .arg(&prog),
    );
    let id = build_id(&prog);
    let place = |root: &Path, file: &Path| {
        let d = root.join(".build-id").join(&id[..2]);
        fs::create_dir_all(&d).unwrap();
        fs::copy(file, d.join(format!("{}.debug", &id[2..]))).unwrap();
    };
    let good = dir.join("root-good");
    place(&good, &debug);
    // Another build (a different build-id) put where prog's debug file belongs.
    let (_, other_debug) = with_separate_debug(&dir, "other", &["-DOTHER_BUILD=1", "-O1"]);
    assert_ne!(build_id(&other_debug), id);
    let bad = dir.join("root-bad");
    place(&bad, &other_debug);

    let mut t = Target::spawn(&prog);
    let _ = fixture_args(&mut t);
    let (th, _) = main_thread(t.pid(), &[]);
    assert!(!has_source_lines(&th), "no debug info without --debug-dir");
    let good_s = good.to_string_lossy().into_owned();
    let (th, warnings) = main_thread(t.pid(), &["--debug-dir", &good_s]);
    assert!(
        has_source_lines(&th),
        "build-id file used: {th:#}\n{warnings}"
    );

    let bad_s = bad.to_string_lossy().into_owned();
    let (th, warnings) = main_thread(t.pid(), &["--debug-dir", &bad_s]);
    assert!(
        !has_source_lines(&th),
        "a mismatched file is not trusted: {th:#}"
    );
    let (_, report) = frame_named(&th, "report").expect("report from .symtab");
    assert!(report["file"].is_null(), "{report:#}");
    assert!(
        warnings.contains("does not match") && warnings.contains(&id),
        "warning names the mismatch: {warnings}"
    );
    // Both roots: the mismatched file is skipped, the good one used.
    let (th, _) = main_thread(t.pid(), &["--debug-dir", &bad_s, "--debug-dir", &good_s]);
    assert!(has_source_lines(&th));
    drop(t);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn minidebuginfo_names_stripped_functions() {
    if !have("xz") {
        println!("SKIP: xz is not installed (scripts/setup.sh installs xz-utils)");
        return;
    }
    let dir = scratch("minidebug");
    let full = dir.join("prog.full");
    compile("cc", "dwarfargs.c", &["-O2", "-g", "-fPIE", "-pie"], &full);
    // Fedora's recipe in short: the symbol table of a debug-only copy, xz-compressed,
    // in .gnu_debugdata of a fully stripped binary.
    let keep = dir.join("keep");
    tool(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&full)
            .arg(&keep),
    );
    let mini = dir.join("mini");
    tool(
        Command::new("objcopy")
            .args(["--strip-debug", "--remove-section=.comment"])
            .arg(&keep)
            .arg(&mini),
    );
    tool(Command::new("xz").arg("-k").arg(&mini));
    let plain = dir.join("plain");
    tool(
        Command::new("strip")
            .arg("--strip-all")
            .arg("-o")
            .arg(&plain)
            .arg(&full),
    );
    let prog = dir.join("prog");
    tool(
        Command::new("objcopy")
            .arg(format!(
                "--add-section=.gnu_debugdata={}",
                dir.join("mini.xz").display()
            ))
            .arg(&plain)
            .arg(&prog),
    );
    let names = |exe: &Path| {
        let mut t = Target::spawn(exe);
        let _ = fixture_args(&mut t);
        let (th, _) = main_thread(t.pid(), &[]);
        thread_frames(&th)
            .iter()
            .filter_map(|f| f["function"].as_str().map(str::to_string))
            .collect::<Vec<_>>()
    };
    let without = names(&plain);
    assert!(
        !without.iter().any(|n| n == "report" || n == "outer"),
        "a fully stripped binary names neither: {without:?}"
    );
    let with = names(&prog);
    let pos = |n: &str| with.iter().position(|f| f == n);
    assert!(
        matches!((pos("report"), pos("outer"), pos("main")), (Some(r), Some(o), Some(m)) if r < o && o < m),
        "MiniDebugInfo names report, outer, main in order: {with:?}"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn signature_types_stashed_values_without_dwarf() {
    let mut t = Target::start("dwarfargs", Variant::new(Opt::O2, true));
    let want = fixture_args(&mut t);
    let pid = t.pid().to_string();
    expect_fail(
        &["inject", "--pid", &pid, "--func", "report(int"],
        1,
        "cannot read the signature",
    );
    let sig =
        "report(int n, unsigned char c, _Bool b, enum color col, const char *s, struct point *p)";
    run_ok(&["inject", "--pid", &pid, "--func", sig]);
    // The signature lives in the target: a later `list` (another process) shows it.
    let hooks = list_hooks(t.pid());
    let h = hooks_named(&hooks, "report", "active");
    assert_eq!(
        h[0]["signature"],
        "int n, unsigned char c, _Bool b, enum color col, const char *s, struct point *p"
    );
    let listed = run_ok(&["list", "--pid", &pid]);
    assert!(listed.contains("report(int n, unsigned char c"), "{listed}");

    let bt = wait_bt(t.pid(), Some(t.pid()), SOON, |bt| {
        frame_named(&bt["threads"][0], "report").is_some_and(|(_, f)| f["hooked"] == true)
    });
    let (_, report) = frame_named(&bt["threads"][0], "report").unwrap();
    assert!(
        report["file"].is_null(),
        "the stripped variant has no DWARF"
    );
    check_report_params(report, &want, "stash");
    assert_eq!(param(report, "n")["register"], "rdi");
    run_ok(&["eject", "--pid", &pid, "--all"]);
    t.assert_healthy();
}
