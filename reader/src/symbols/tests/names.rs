//! Functions named as C++ and Rust write them, in real programs built here with
//! `cc` (C++, no `-g`) and `rustc` (legacy and v0 mangling).

use super::*;

const CPP: &str = r#"
#include <stdio.h>
#include <unistd.h>
namespace ns {
struct Parser {
    long base;
    long parse(long a, long b);
    long parse(int a);
};
__attribute__((noipa)) long Parser::parse(long a, long b) { return base + a * b; }
__attribute__((noipa)) long Parser::parse(int a) { return base - a; }
template <typename T> __attribute__((noipa)) T twice(T x) { return x + x; }
template int twice<int>(int);
template long twice<long>(long);
__attribute__((noipa)) bool operator!=(const Parser &a, const Parser &b) { return a.base != b.base; }
}
namespace other { __attribute__((noipa)) long parse(long a, long b) { return a - b; } }
int main() {
    ns::Parser p{3}, q{4};
    volatile long v = p.parse(1L, 2L) + p.parse(5) + ns::twice(2) + ns::twice(3L)
        + (p != q) + other::parse(7, 8);
    (void)v;
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
}
"#;

const RUST_LIB: &str = r#"
#[inline(never)]
pub fn parse_record(x: u64) -> u64 { std::hint::black_box(x) * 3 }
"#;

const RUST_MAIN: &str = r#"
use std::io::Write;
#[inline(never)]
pub fn parse_record(x: u64) -> u64 { std::hint::black_box(x) + 1 }
#[inline(never)]
pub fn only_here(x: u64) -> u64 { std::hint::black_box(x) ^ 5 }
fn main() {
    let f = std::hint::black_box(parse_record as fn(u64) -> u64);
    let g = std::hint::black_box(only_here as fn(u64) -> u64);
    let h = std::hint::black_box(recordlib::parse_record as fn(u64) -> u64);
    std::hint::black_box(f(1) + g(2) + h(3));
    println!("ready");
    std::io::stdout().flush().unwrap();
    loop { std::thread::park(); }
}
"#;

fn cpp_program() -> Target {
    build_and_spawn("cppnames", &[("names.cpp", CPP)], &["-O2", "-fno-inline"])
        .expect("cc must build the C++ test program")
}

/// `crashy` (a binary crate) using `recordlib` (an rlib); both define `parse_record`.
fn rust_program(tag: &str, mangling: &str) -> Target {
    let rustc_version = Command::new("rustc")
        .arg("-V")
        .output()
        .expect("running rustc")
        .stdout;
    let key: [&[u8]; 4] = [
        &rustc_version,
        mangling.as_bytes(),
        RUST_LIB.as_bytes(),
        RUST_MAIN.as_bytes(),
    ];
    let exe = argstash_tests::build_cached(&format!("crashy-{tag}"), &key, |out| {
        let dir = ScratchDir::new(tag);
        let rustc = |args: &[&std::ffi::OsStr]| {
            let mut cmd = Command::new("rustc");
            cmd.args(["-C", "opt-level=2"]);
            // Legacy mangling is rustc's default (naming it needs `-Z unstable-options`).
            if mangling == "v0" {
                cmd.args(["-C", "symbol-mangling-version=v0"]);
            }
            let out = cmd
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("running rustc");
            assert!(
                out.status.success(),
                "rustc {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        std::fs::write(dir.path().join("recordlib.rs"), RUST_LIB).unwrap();
        std::fs::write(dir.path().join("main.rs"), RUST_MAIN).unwrap();
        let os = |a: &'static str| std::ffi::OsStr::new(a);
        rustc(&[
            os("--crate-type"),
            os("rlib"),
            os("--crate-name"),
            os("recordlib"),
            os("recordlib.rs"),
        ]);
        rustc(&[
            os("--crate-name"),
            os("crashy"),
            os("--extern"),
            os("recordlib=librecordlib.rlib"),
            os("-o"),
            out.as_os_str(),
            os("main.rs"),
        ]);
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    Target::spawn(&exe)
}

/// The symbol `nm` would show for the function whose demangled name `shown` is,
/// found independently of the matcher: by demangling every symbol of the module.
fn mangled_of(m: &Module, shown: &str) -> Symbol {
    let found: Vec<&Symbol> = m
        .symbols()
        .iter()
        .filter(|s| {
            demangle_parts(&s.name)
                .is_some_and(|(path, full)| full.as_deref() == Some(shown) || path == shown)
        })
        .collect();
    assert_eq!(found.len(), 1, "one symbol demangles to {shown}: {found:?}");
    found[0].clone()
}

#[test]
fn cpp_functions_are_found_by_qualified_name_parameters_and_suffix() {
    let target = cpp_program();
    let pid = target.pid();
    let ps = ProcessSymbols::load(pid, &read_maps(pid).unwrap()).unwrap();
    let exe = target.exe().to_string_lossy().into_owned();
    let prog = module(&ps, &exe);
    let ll = mangled_of(prog, "ns::Parser::parse(long, long)");
    let int = mangled_of(prog, "ns::Parser::parse(int)");
    let other = mangled_of(prog, "other::parse(long, long)");
    assert_ne!(ll.addr, int.addr);
    let at = |text: &str| ps.resolve(&FuncSpec::parse(text)).map(|r| r.addr);

    // The mangled name keeps working; the full form, with or without spaces.
    assert_eq!(at(&ll.name).unwrap(), ll.addr);
    assert_eq!(at("ns::Parser::parse(long, long)").unwrap(), ll.addr);
    assert_eq!(at("ns::Parser::parse(long,long)").unwrap(), ll.addr);
    assert_eq!(at("Parser::parse(int)").unwrap(), int.addr);
    assert_eq!(at("::ns::Parser::parse(int)").unwrap(), int.addr);
    assert_eq!(at("other::parse").unwrap(), other.addr);
    assert_eq!(
        at(&format!("{}!ns::Parser::parse(int)", prog.file_name())).unwrap(),
        int.addr
    );

    // Templates as demangled; `operator!=` is a name, not `MODULE!NAME`.
    let twice_int = mangled_of(prog, "ns::twice<int>(int)");
    assert_eq!(at("ns::twice<int>").unwrap(), twice_int.addr);
    assert_eq!(at("twice<int>(int)").unwrap(), twice_int.addr);
    let neq = mangled_of(prog, "ns::operator!=(ns::Parser const&, ns::Parser const&)");
    assert_eq!(at("ns::operator!=").unwrap(), neq.addr);
    assert_eq!(
        FuncSpec::parse("ns::operator!="),
        FuncSpec::Name("ns::operator!=".into())
    );

    // Overloads: every one is listed with how to write it alone.
    let overloads = at("ns::Parser::parse");
    match &overloads {
        Err(
            e @ SymbolError::AmbiguousName {
                candidates,
                spellings,
                ..
            },
        ) => {
            assert_eq!(candidates.len(), 2, "{candidates:?}");
            for (shown, s) in [
                ("ns::Parser::parse(long, long)", &ll),
                ("ns::Parser::parse(int)", &int),
            ] {
                let i = candidates
                    .iter()
                    .position(|c| c.starts_with(&format!("{shown} in {exe}")))
                    .unwrap_or_else(|| panic!("{shown} listed: {candidates:?}"));
                assert!(
                    candidates[i].ends_with(&format!("({:#x})", s.addr)),
                    "{candidates:?}"
                );
                assert_eq!(spellings[i], shown, "{spellings:?}");
            }
            assert_eq!(
                e.hint(),
                Some(Hint::WriteOneAlone {
                    read_as: None,
                    names: spellings.clone()
                })
            );
        }
        other => panic!("two overloads: {other:?}"),
    }
    // `parse(long, long)` is in two namespaces: both listed, by path or full name.
    match at("parse(long, long)") {
        Err(SymbolError::AmbiguousName { spellings, .. }) => {
            assert!(
                spellings.iter().any(|s| s == "other::parse"),
                "{spellings:?}"
            );
            assert!(
                spellings
                    .iter()
                    .any(|s| s == "ns::Parser::parse(long, long)"),
                "{spellings:?}"
            );
        }
        other => panic!("two namespaces: {other:?}"),
    }
    // Three functions end in `parse`.
    match at("parse") {
        Err(SymbolError::AmbiguousName { candidates, .. }) => assert_eq!(candidates.len(), 3),
        other => panic!("three parse: {other:?}"),
    }

    // Malformed and unknown names.
    for (bad, problem) in [
        ("ns::Parser::", NameProblem::EmptyComponent),
        (
            "ns::twice<int",
            NameProblem::Unbalanced {
                open: '<',
                close: '>',
            },
        ),
    ] {
        match at(bad) {
            Err(SymbolError::BadName { problem: p, .. }) => assert_eq!(p, problem, "{bad}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    // People's spellings of the list: `long int`, `const T &`, spaces anywhere.
    assert_eq!(
        at("ns::Parser::parse(long int, signed long)").unwrap(),
        ll.addr
    );
    assert_eq!(
        at("ns::operator!=(const ns::Parser &, const ns::Parser&)").unwrap(),
        neq.addr
    );
    // A list that names no overload suggests the overloads as the demangler
    // spells them.
    match at("ns::Parser::parse(char)") {
        Err(SymbolError::NotFound { suggestions, .. }) => {
            for shown in ["ns::Parser::parse(long, long)", "ns::Parser::parse(int)"] {
                assert!(
                    suggestions.contains(&format!("{shown} (in {exe})")),
                    "{shown}: {suggestions:?}"
                );
            }
        }
        other => panic!("no parse(char): {other:?}"),
    }
    // What reads as a name in a malformed one lists the functions it names.
    let bad = at("parse(long");
    match &bad {
        Err(
            e @ SymbolError::BadName {
                read_as, spellings, ..
            },
        ) => {
            assert_eq!(read_as.as_deref(), Some("parse"));
            assert_eq!(spellings.len(), 3, "{spellings:?}");
            assert!(
                spellings.iter().any(|s| s == "other::parse"),
                "{spellings:?}"
            );
            assert_eq!(
                e.hint(),
                Some(Hint::WriteOneAlone {
                    read_as: read_as.clone(),
                    names: spellings.clone()
                })
            );
        }
        other => panic!("parse(long: {other:?}"),
    }
    match at("ns::twice<int") {
        Err(SymbolError::BadName {
            read_as, spellings, ..
        }) => {
            assert_eq!(read_as.as_deref(), Some("ns::twice"));
            assert_eq!(spellings, ["ns::twice<int>", "ns::twice<long>"]);
        }
        other => panic!("ns::twice<int: {other:?}"),
    }
    assert!(matches!(
        at("ns::Parser::parse(char)"),
        Err(SymbolError::NotFound { .. })
    ));
    assert!(matches!(
        at("arser::parse"),
        Err(SymbolError::NotFound { .. })
    ));
    // A misspelt path suggests the demangled names close to it.
    match at("Parser::pars") {
        Err(SymbolError::NotFound { suggestions, .. }) => assert!(
            suggestions
                .iter()
                .any(|s| s == &format!("ns::Parser::parse(int) (in {exe})")),
            "{suggestions:?}"
        ),
        other => panic!("misspelt: {other:?}"),
    }
}

#[test]
fn a_parameter_list_is_a_cpp_overload_only_when_no_c_symbol_has_the_name() {
    let target = cpp_program();
    let pid = target.pid();
    let ps = ProcessSymbols::load(pid, &read_maps(pid).unwrap()).unwrap();
    let prog = module(&ps, &target.exe().to_string_lossy());
    let int = mangled_of(prog, "ns::Parser::parse(int)");
    // `Parser::parse(int)`: no symbol is called `Parser::parse`, so the list is C++'s.
    let found = ps
        .resolve_with_parameter_list(&FuncSpec::parse("Parser::parse"), "int")
        .expect("a C++ overload")
        .unwrap();
    assert_eq!(found.addr, int.addr);
    // `main(int)`: `main` is a symbol, so `int` is a C signature for it.
    assert!(ps
        .resolve_with_parameter_list(&FuncSpec::parse("main"), "int")
        .is_none());
    // The list as C writes it (what the signature parser renders) finds it too.
    let found = ps
        .resolve_with_parameter_list(&FuncSpec::parse("Parser::parse"), "long int, long")
        .expect("a C++ overload")
        .unwrap();
    assert_eq!(
        found.addr,
        mangled_of(prog, "ns::Parser::parse(long, long)").addr
    );
    // No overload takes `char`: the list stays a C signature (and `parse` then
    // fails to resolve as a name on its own).
    assert!(ps
        .resolve_with_parameter_list(&FuncSpec::parse("parse"), "char")
        .is_none());
}

fn check_rust(mangling: &str) {
    let target = rust_program(&format!("rust-{mangling}"), mangling);
    let pid = target.pid();
    let ps = ProcessSymbols::load(pid, &read_maps(pid).unwrap()).unwrap();
    let exe = target.exe().to_string_lossy().into_owned();
    let prog = module(&ps, &exe);
    let ours = mangled_of(prog, "crashy::parse_record");
    let theirs = mangled_of(prog, "recordlib::parse_record");
    let only = mangled_of(prog, "crashy::only_here");
    if mangling == "v0" {
        assert!(ours.name.starts_with("_R"), "{}", ours.name);
    } else {
        assert!(ours.name.starts_with("_ZN"), "{}", ours.name);
    }
    let at = |text: &str| ps.resolve(&FuncSpec::parse(text)).map(|r| r.addr);
    assert_eq!(at(&ours.name).unwrap(), ours.addr);
    assert_eq!(at("crashy::parse_record").unwrap(), ours.addr);
    assert_eq!(at("recordlib::parse_record").unwrap(), theirs.addr);
    assert_eq!(at("only_here").unwrap(), only.addr);
    assert_eq!(at("crashy::only_here").unwrap(), only.addr);
    match at("parse_record") {
        Err(SymbolError::AmbiguousName { spellings, .. }) => {
            assert!(
                spellings.iter().any(|s| s == "crashy::parse_record"),
                "{spellings:?}"
            );
            assert!(
                spellings.iter().any(|s| s == "recordlib::parse_record"),
                "{spellings:?}"
            );
        }
        other => panic!("two crates: {other:?}"),
    }
    assert_eq!(
        name_match("parse_record", &ours.name),
        Some(NameMatch::Suffix)
    );
    assert_eq!(
        name_match("crashy::parse_record", &ours.name),
        Some(NameMatch::Path)
    );
    assert_eq!(name_match("recordlib::parse_record", &ours.name), None);
}

#[test]
fn rust_paths_are_found_without_hash_legacy_mangling() {
    check_rust("legacy");
}

#[test]
fn rust_paths_are_found_without_hash_v0_mangling() {
    check_rust("v0");
}
