//! ELF symbol loading and lookup for a live process.
//!
//! Every executable file mapping of the target (plus its `[vdso]`) becomes one
//! [`Module`]: the file is opened through `/proc/PID/root/<path>` so that targets in
//! containers work, parsed once with goblin, and reduced to a sorted table of
//! function symbols at their runtime addresses. [`ProcessSymbols`] resolves what the
//! user asked to hook ([`FuncSpec`]) to one function entry, or explains why it
//! cannot.
//!
//! Only `STT_FUNC` symbols are functions here. `STT_GNU_IFUNC` symbols (e.g. glibc's
//! `memcpy`) name a resolver that picks the real implementation at load time, not the
//! code that runs, so they are never hook targets; naming one gives
//! [`SymbolError::Ifunc`]. [`ProcessSymbols::resolve_for_hook`] also says which
//! implementation the process calls, read from the GOT slots the dynamic linker
//! filled (no code runs in the target), and finds local functions of stripped
//! libraries in their separate debug file's `.symtab`.
//!
//! `MODULE!NAME` names a module by its path (or a symlink to it), its file name,
//! its `DT_SONAME`, or a prefix of either that ends before a `.` or `-`
//! ([`module_match`]).
//!
//! Symbol versions: a `.dynsym` entry whose version is hidden (a compatibility
//! version such as `realpath@GLIBC_2.2.5`) is named `NAME@VERSION`; the default
//! version keeps the plain name. `.symtab` names of the form `NAME@@VERSION` are
//! shortened to `NAME`.

mod demangled;
mod elf;
mod error;
mod module;
mod module_match;
mod process;
mod resolve;
mod spec;
mod suggest;
mod symbol;
mod view;

pub use demangled::{demangle_parts, shown_name, NameProblem};
pub use elf::separate_symbols;
pub use error::{AddressPlace, ElfProblem, SymbolError};
pub use module::Module;
pub use module_match::{
    module_match, module_name_matches, name_prefix_at_boundary, same_file_in, soname_of,
    ModuleMatch,
};
pub use process::ProcessSymbols;
pub use resolve::{name_match, NameMatch};
pub use spec::FuncSpec;
pub use symbol::{IfuncTarget, Resolved, Symbol, VDSO};

#[cfg(test)]
mod tests {
    use super::suggest::bounded_levenshtein;
    use super::*;
    use crate::hint::Hint;
    use crate::memory::Memory;
    use crate::procfs::MapEntry;
    use std::fs::File;
    use std::os::unix::fs::{FileExt, MetadataExt};

    mod names;

    /// A live process's memory read through `/proc/PID/mem` (the tests' own backend).
    struct ProcMem(std::fs::File);

    impl Memory for ProcMem {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), crate::memory::MemoryError> {
            self.0
                .read_exact_at(buf, addr)
                .map_err(|source| crate::memory::MemoryError::Read {
                    addr,
                    len: buf.len(),
                    source,
                })
        }
    }
    use crate::procfs::read_maps;
    use argstash_tests::{try_build_sources, ScratchDir, Target};
    use std::process::Command;
    use std::time::Instant;

    const MAIN_C: &str = r#"
#include <stdio.h>
#include <unistd.h>

int call_twin_a(int);
int call_twin_b(int);

__attribute__((noipa)) int bar(int x) { return x * 3 + 1; }
__attribute__((noipa)) int foo(int x) { return bar(x + 1) * 2 + call_twin_a(x) + call_twin_b(x); }
/* Same name as glibc's strfry: ambiguous across modules. */
__attribute__((noipa)) char *strfry(char *s) { return s; }

/* A function symbol with no size. */
__asm__(".text\n.globl nosize\n.type nosize,@function\nnosize:\n\tret\n");

int main(void) {
    volatile int v = foo(5);
    (void)v;
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
}
"#;
    const TWIN_A_C: &str = "static __attribute__((noipa)) int twin(int x) { return x + 7; }\n\
                            int call_twin_a(int x) { return twin(x) + 1; }\n";
    const TWIN_B_C: &str = "static __attribute__((noipa)) int twin(int x) { return x * 9; }\n\
                            int call_twin_b(int x) { return twin(x) - 1; }\n";
    const I386_C: &str = r#"
__attribute__((noinline)) int bar32(int x) { return x * 3 + 1; }
void _start(void) {
    static const char msg[] = "ready\n";
    int r;
    __asm__ volatile("int $0x80" : "=a"(r) : "a"(4), "b"(1), "c"(msg), "d"(6) : "memory");
    for (;;) __asm__ volatile("int $0x80" : "=a"(r) : "a"(29) : "memory");
}
"#;

    /// Compiles `sources` with `flags` and starts the program; returns once it printed "ready".
    /// `None` if the compiler cannot build it.
    fn build_and_spawn(tag: &str, sources: &[(&str, &str)], flags: &[&str]) -> Option<Target> {
        match try_build_sources(&format!("symtest_{tag}"), sources, flags) {
            Ok(exe) => Some(Target::spawn(&exe)),
            Err(e) => {
                eprintln!("{e}");
                None
            }
        }
    }

    fn spawn_c_program(tag: &str, pie: bool) -> Target {
        let flags: &[&str] = if pie {
            &["-O2", "-fPIE", "-pie"]
        } else {
            &["-O2", "-fno-pie", "-no-pie"]
        };
        build_and_spawn(
            tag,
            &[
                ("main.c", MAIN_C),
                ("twin_a.c", TWIN_A_C),
                ("twin_b.c", TWIN_B_C),
            ],
            flags,
        )
        .expect("cc must build the test program")
    }

    fn read_mem(pid: i32, addr: u64, len: u64) -> Vec<u8> {
        let mut buf = vec![0u8; len as usize];
        File::open(format!("/proc/{pid}/mem"))
            .unwrap()
            .read_exact_at(&mut buf, addr)
            .unwrap();
        buf
    }

    /// The file bytes of a function, found through the `.text` section header.
    fn text_bytes(m: &Module, addr: u64, len: u64) -> Vec<u8> {
        let (svma, bytes) = m.section(".text").expect(".text");
        let at = addr.wrapping_sub(m.bias);
        assert!(svma.contains(&at), "{at:#x} not in .text {svma:?}");
        let start = (at - svma.start) as usize;
        bytes[start..start + len as usize].to_vec()
    }

    fn module<'a>(ps: &'a ProcessSymbols, path: &str) -> &'a Module {
        ps.modules
            .iter()
            .find(|m| m.path == path)
            .unwrap_or_else(|| panic!("{path} not loaded"))
    }

    fn check_program(pie: bool) {
        let target = spawn_c_program(if pie { "pie" } else { "nopie" }, pie);
        let pid = target.pid();
        let exe = target.exe().to_string_lossy().into_owned();
        let maps = read_maps(pid).unwrap();
        let ps = ProcessSymbols::load(pid, &maps).unwrap();
        let prog = module(&ps, &exe);
        assert!(prog.is_64);
        if pie {
            assert_ne!(prog.bias, 0);
        } else {
            assert_eq!(prog.bias, 0);
        }
        assert!(
            ps.modules.iter().any(|m| m.path == VDSO),
            "vdso not loaded: {:?}",
            ps.modules
        );

        // A function of the program: runtime bytes equal file bytes.
        let bar = ps.resolve(&FuncSpec::parse("bar")).unwrap();
        assert_eq!(bar.name, "bar");
        assert_eq!(bar.module_path, exe);
        assert!(bar.size >= 3);
        assert!(prog.exec_ranges.iter().any(|r| r.contains(&bar.addr)));
        let live = read_mem(pid, bar.addr, bar.size);
        assert_eq!(live, text_bytes(prog, bar.addr, bar.size));
        assert_eq!(prog.file_bytes(bar.addr, bar.size), Some(live.as_slice()));

        // Qualified by file name, and the same function through its name as module.
        let q = ps
            .resolve(&FuncSpec::parse(&format!("{}!bar", prog.file_name())))
            .unwrap();
        assert_eq!(q, bar);

        // libc's write, by file name and by prefix.
        let write = ps.resolve(&FuncSpec::parse("libc.so.6!write")).unwrap();
        assert!(write.module_path.ends_with("/libc.so.6"), "{write:?}");
        let libc = module(&ps, &write.module_path);
        assert!(libc.exec_ranges.iter().any(|r| r.contains(&write.addr)));
        assert_eq!(
            read_mem(pid, write.addr, write.size),
            text_bytes(libc, write.addr, write.size)
        );
        assert_eq!(ps.resolve(&FuncSpec::parse("libc!write")).unwrap(), write);
        assert_eq!(ps.resolve(&FuncSpec::parse("write")).unwrap(), write);

        // Ambiguous: two static `twin` in the program; `strfry` in the program and libc.
        match ps.resolve(&FuncSpec::parse("twin")) {
            Err(e @ SymbolError::Ambiguous { .. }) => {
                let SymbolError::Ambiguous { candidates, .. } = &e else {
                    unreachable!()
                };
                assert_eq!(candidates.len(), 2, "{candidates:?}");
                assert!(candidates
                    .iter()
                    .all(|c| c.starts_with(&format!("twin in {exe} (0x"))));
                assert!(e.to_string().contains("MODULE!NAME"), "{e}");
            }
            other => panic!("twin: {other:?}"),
        }
        match ps.resolve(&FuncSpec::parse("strfry")) {
            Err(e @ SymbolError::Ambiguous { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(&format!("strfry in {exe} (0x")), "{msg}");
                assert!(msg.contains("libc.so.6 (0x"), "{msg}");
                assert!(msg.contains("libc.so.6!write"), "{msg}");
            }
            other => panic!("strfry: {other:?}"),
        }
        let own = ps
            .resolve(&FuncSpec::parse(&format!("{exe}!strfry")))
            .unwrap();
        assert_eq!(own.module_path, exe);
        let theirs = ps.resolve(&FuncSpec::parse("libc.so.6!strfry")).unwrap();
        assert_eq!(theirs.module_path, write.module_path);

        // Not found, with a suggestion.
        match ps.resolve(&FuncSpec::parse("baar")) {
            Err(e @ SymbolError::NotFound { .. }) => {
                let SymbolError::NotFound { suggestions, .. } = &e else {
                    unreachable!()
                };
                assert_eq!(
                    suggestions.first(),
                    Some(&format!("bar (in {exe})")),
                    "{suggestions:?}"
                );
                assert!(e.to_string().contains("did you mean: bar (in "), "{e}");
            }
            other => panic!("baar: {other:?}"),
        }
        match ps.resolve(&FuncSpec::parse("nosuchlib!write")) {
            Err(SymbolError::ModuleNotFound { loaded, .. }) => {
                assert!(loaded.iter().any(|l| l == "libc.so.6"), "{loaded:?}")
            }
            other => panic!("nosuchlib: {other:?}"),
        }

        // Zero-sized and indirect functions.
        assert!(matches!(
            ps.resolve(&FuncSpec::parse("nosize")),
            Err(SymbolError::ZeroSize { .. })
        ));
        let nosize = prog
            .symbols()
            .iter()
            .find(|s| s.name == "nosize")
            .unwrap()
            .addr;
        if prog.lookup(nosize).map(|(s, _)| s.name.as_str()) != Some("nosize") {
            panic!("lookup(nosize) = {:?}", prog.lookup(nosize));
        }
        assert!(matches!(
            ps.resolve(&FuncSpec::parse("memcpy")),
            Err(SymbolError::Ifunc { .. })
        ));
        // Read from the live GOT: libc's own IRELATIVE slot for memcpy holds the
        // implementation it chose, inside libc's code.
        let mem = ProcMem(std::fs::File::open(format!("/proc/{pid}/mem")).unwrap());
        match ps.resolve_for_hook(&FuncSpec::parse("memcpy"), &mem) {
            Err(e @ SymbolError::Ifunc { .. }) => {
                let SymbolError::Ifunc { targets, .. } = &e else {
                    unreachable!()
                };
                let libc = module(&ps, &write.module_path);
                assert!(!targets.is_empty(), "{e}");
                for t in targets {
                    assert!(
                        libc.exec_ranges.iter().any(|r| r.contains(&t.addr)),
                        "{t:?}"
                    );
                    assert!(t.via.contains(&libc.path), "{t:?}");
                    assert_eq!(t.spelling, "libc.so.6");
                    let live = read_mem(pid, t.addr, 4);
                    assert_eq!(Some(live.as_slice()), libc.file_bytes(t.addr, 4));
                }
                assert!(e.to_string().contains("this process calls "), "{e}");
            }
            other => panic!("memcpy for a hook: {other:?}"),
        }
        // Sonames: libc's is its file name; a prefix must end at a name boundary.
        assert_eq!(
            module(&ps, &write.module_path).soname.as_deref(),
            Some("libc.so.6")
        );
        assert_eq!(
            ps.resolve(&FuncSpec::parse("libc.so!write")).unwrap(),
            write
        );
        assert!(matches!(
            ps.resolve(&FuncSpec::parse("libc.s!write")),
            Err(SymbolError::ModuleNotFound { .. })
        ));
        // glibc's compatibility versions are named NAME@VERSION; the default keeps the name.
        let realpath = ps.resolve(&FuncSpec::parse("realpath")).unwrap();
        let old = ps
            .resolve(&FuncSpec::parse("realpath@GLIBC_2.2.5"))
            .unwrap();
        assert_ne!(realpath.addr, old.addr);

        // The vdso is searched by plain name only when nothing else has the name.
        let clock = ps.resolve(&FuncSpec::parse("clock_gettime")).unwrap();
        assert_eq!(clock.module_path, write.module_path);
        let vdso_clock = ps
            .resolve(&FuncSpec::parse("[vdso]!clock_gettime"))
            .unwrap();
        assert_eq!(vdso_clock.module_path, VDSO);
        assert_eq!(
            ps.resolve(&FuncSpec::parse("vdso!clock_gettime")).unwrap(),
            vdso_clock
        );
        assert_eq!(
            ps.resolve(&FuncSpec::parse("__vdso_clock_gettime"))
                .unwrap()
                .addr,
            vdso_clock.addr
        );
        let vdso = module(&ps, VDSO);
        assert_eq!(
            read_mem(pid, vdso_clock.addr, 16),
            vdso.file_bytes(vdso_clock.addr, 16).unwrap()
        );

        // An unsized symbol (`_init` in .init) does not swallow the PLT after it.
        if let Some((plt, _)) = prog.section(".plt") {
            let at = plt.start.wrapping_add(prog.bias) + 0x10;
            assert!(prog.lookup(at).is_none(), "{:?}", prog.lookup(at));
        }

        // Addresses.
        let by_addr = ps
            .resolve(&FuncSpec::parse(&format!("{:#x}", bar.addr)))
            .unwrap();
        assert_eq!(by_addr, bar);
        match ps.resolve(&FuncSpec::Addr(bar.addr + 1)) {
            Err(e @ SymbolError::AddressNotInFunction { .. }) => {
                let SymbolError::AddressNotInFunction { addr, .. } = &e else {
                    unreachable!()
                };
                assert_eq!(*addr, bar.addr + 1);
                assert!(e.to_string().contains("bar+0x1"), "{e}");
                // The fix is the entry, which each front end spells (`--addr 0x...`).
                assert_eq!(e.hint(), Some(Hint::UseEntry { entry: bar.addr }));
            }
            other => panic!("bar+1: {other:?}"),
        }
        match ps.resolve(&FuncSpec::Addr(0x10)) {
            Err(e @ SymbolError::AddressNotInFunction { .. }) => {
                assert!(e.to_string().contains("0x10"), "{e}")
            }
            other => panic!("0x10: {other:?}"),
        }
        let (m, s, off) = ps.lookup(bar.addr + 1).unwrap();
        assert_eq!(
            (m.path.as_str(), s.name.as_str(), off),
            (exe.as_str(), "bar", 1)
        );
        assert!(ps
            .lookup(write.addr + 3)
            .is_some_and(|(_, s, off)| s.addr == write.addr && off == 3));
    }

    #[test]
    fn pie_program() {
        check_program(true);
    }

    #[test]
    fn non_pie_program() {
        check_program(false);
    }

    #[test]
    fn i386_program_symbols_resolve() {
        let flags = ["-m32", "-O2", "-static", "-nostdlib", "-fno-pie", "-no-pie"];
        let Some(target) = build_and_spawn("i386", &[("main32.c", I386_C)], &flags) else {
            eprintln!("skipping: cc cannot build i386 programs here");
            return;
        };
        let maps = read_maps(target.pid()).unwrap();
        let ps = ProcessSymbols::load(target.pid(), &maps).unwrap();
        let m = module(&ps, &target.exe().to_string_lossy());
        assert!(!m.is_64);
        assert!(m.symbols().iter().any(|s| s.name == "bar32"));
        assert!(ps.is_32bit());
        let bar = m.symbols().iter().find(|s| s.name == "bar32").unwrap();
        let resolved = ps.resolve(&FuncSpec::parse("bar32")).unwrap();
        assert_eq!(resolved.size, bar.size);
        assert!(m.exec_ranges.iter().any(|r| r.contains(&resolved.addr)));
    }

    #[test]
    fn gone_process_is_an_error() {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert!(matches!(
            ProcessSymbols::load(pid, &[]),
            Err(SymbolError::Io { .. })
        ));
    }

    #[test]
    fn malformed_files_do_not_panic() {
        let scratch = ScratchDir::new("malformed");
        let dir = scratch.path();
        let pid = std::process::id() as i32;
        let own_exe = std::fs::read("/proc/self/exe").unwrap();
        let mut cases: Vec<Vec<u8>> = vec![
            Vec::new(),
            b"\x7fELF".to_vec(),
            own_exe[..64.min(own_exe.len())].to_vec(),
            own_exe[..4096.min(own_exe.len())].to_vec(),
        ];
        // Flip bytes all over the header tables of a real binary.
        for (i, pos) in (0..64).chain([0x20, 0x28, 0x3c, 0x3e]).enumerate() {
            let mut bad = own_exe.clone();
            if let Some(b) = bad.get_mut(pos) {
                *b ^= 0xff;
            }
            if i % 2 == 0 {
                bad.truncate(own_exe.len() / 2);
            }
            cases.push(bad);
        }
        for (i, bytes) in cases.iter().enumerate() {
            let path = dir.join(format!("bad{i}"));
            std::fs::write(&path, bytes).unwrap();
            let path = std::fs::canonicalize(&path)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let ino = std::fs::metadata(&path).unwrap().ino();
            let maps = [MapEntry {
                start: 0x10000,
                end: 0x11000,
                perms: crate::procfs::Perms::parse("r-xp"),
                offset: 0,
                inode: ino,
                path: path.clone(),
            }];
            if let Ok(m) = Module::load(pid, &path, &maps) {
                let _ = m.lookup(0x10010);
                let _ = m.section(".text");
                let _ = m.file_bytes(0x10000, 16);
            }
        }
    }

    #[test]
    fn spec_parse_and_display() {
        assert_eq!(FuncSpec::parse("0x1234"), FuncSpec::Addr(0x1234));
        assert_eq!(
            FuncSpec::parse("libc.so.6!write"),
            FuncSpec::Qualified {
                module: "libc.so.6".into(),
                name: "write".into()
            }
        );
        assert_eq!(FuncSpec::parse("write"), FuncSpec::Name("write".into()));
        assert_eq!(FuncSpec::parse("0xzz"), FuncSpec::Name("0xzz".into()));
        assert_eq!(FuncSpec::parse("!write"), FuncSpec::Name("!write".into()));
        for s in ["0x1234", "libc.so.6!write", "write"] {
            assert_eq!(FuncSpec::parse(s).to_string(), s);
        }
    }

    #[test]
    fn name_prefixes_end_at_a_boundary() {
        let z = "libz.so.1.2.13";
        for good in [
            "libz",
            "libz.so",
            "libz.so.1",
            "libz.so.1.2",
            "libz.so.1.2.13",
        ] {
            assert!(name_prefix_at_boundary(z, good), "{good}");
        }
        for bad in [
            "",
            "l",
            "lib",
            "libz.",
            "libz.s",
            "libz.so.",
            "libz.so.1.2.1",
            "libzz",
        ] {
            assert!(!name_prefix_at_boundary(z, bad), "{bad}");
        }
        assert!(!name_prefix_at_boundary("libcrypt.so.1", "libc"));
        assert!(name_prefix_at_boundary("libc.so.6", "libc"));
        assert!(name_prefix_at_boundary("libc-2.31.so", "libc"));
        assert!(name_prefix_at_boundary(
            "ld-linux-x86-64.so.2",
            "ld-linux-x86-64"
        ));
        assert!(!name_prefix_at_boundary("libc-2.31.so", "libc-"));
    }

    #[test]
    fn module_match_ranks_path_name_soname_prefix() {
        let z = "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13";
        let so = Some("libz.so.1");
        assert_eq!(module_match(z, so, z), Some(ModuleMatch::Path));
        assert_eq!(
            module_match(z, so, "libz.so.1.2.13"),
            Some(ModuleMatch::Name)
        );
        assert_eq!(module_match(z, so, "libz.so.1"), Some(ModuleMatch::Name));
        assert_eq!(
            module_match(z, None, "libz.so.1"),
            Some(ModuleMatch::Prefix)
        );
        for prefix in ["libz", "libz.so", "libz.so.1.2"] {
            assert_eq!(
                module_match(z, so, prefix),
                Some(ModuleMatch::Prefix),
                "{prefix}"
            );
        }
        for bad in ["libz.s", "lib", "z.so.1", "/lib/libz.so.1", "so.1"] {
            assert_eq!(module_match(z, so, bad), None, "{bad}");
        }
        // A soname that is not a prefix of the file name is matched on its own.
        let odd = "/opt/lib/libfoo-2.3.so";
        let odd_so = Some("libfoo.so.2");
        assert_eq!(
            module_match(odd, odd_so, "libfoo.so.2"),
            Some(ModuleMatch::Name)
        );
        assert_eq!(
            module_match(odd, odd_so, "libfoo.so"),
            Some(ModuleMatch::Prefix)
        );
        assert_eq!(
            module_match(odd, odd_so, "libfoo"),
            Some(ModuleMatch::Prefix)
        );
        assert_eq!(module_match("/lib/libcrypt.so.1", None, "libc"), None);
        assert_eq!(module_match(VDSO, None, "vdso"), Some(ModuleMatch::Path));
        assert!(module_name_matches(z, "libz"));
        assert!(!module_name_matches(z, "libz.s"));
    }

    #[test]
    fn levenshtein() {
        assert_eq!(bounded_levenshtein("baar", "bar", 3), Some(1));
        assert_eq!(bounded_levenshtein("kitten", "sitting", 3), Some(3));
        assert_eq!(bounded_levenshtein("kitten", "sitting", 2), None);
        assert_eq!(bounded_levenshtein("", "abc", 3), Some(3));
    }

    /// Prints how long loading a small process's symbols takes (run with --nocapture).
    #[test]
    fn find_function_agrees_with_resolve_and_builds_no_suggestions() {
        let target = spawn_c_program("find", true);
        let pid = target.pid();
        let ps = ProcessSymbols::load(pid, &read_maps(pid).unwrap()).unwrap();
        let by_resolve = ps.resolve(&FuncSpec::Name("call_twin_a".into())).unwrap();
        let found = ps
            .find_function("call_twin_a")
            .expect("defined in the program");
        assert_eq!(
            (found.addr, &found.module_path),
            (by_resolve.addr, &by_resolve.module_path)
        );
        // `twin` is defined twice (two static functions): ambiguous, as for resolve.
        assert!(ps.find_function("twin").is_none());
        assert!(ps.find_function("no_such_function_anywhere").is_none());
        match ps.resolve(&FuncSpec::Name("call_twin_c".into())) {
            Err(SymbolError::NotFound { suggestions, .. }) => {
                assert!(
                    suggestions.iter().any(|s| s.contains("call_twin_")),
                    "{suggestions:?}"
                )
            }
            other => panic!("expected NotFound with suggestions, got {other:?}"),
        }
    }

    #[test]
    fn exported_finds_dynamic_symbols_only() {
        let target = spawn_c_program("exported", true);
        let pid = target.pid();
        let ps = ProcessSymbols::load(pid, &read_maps(pid).unwrap()).unwrap();
        let libc = ps
            .modules
            .iter()
            .find(|m| m.file_name().starts_with("libc.so"))
            .expect("libc is mapped");
        let printf = ps.resolve(&FuncSpec::Name("printf".into())).unwrap();
        assert_eq!(libc.exported("printf"), Some(printf.addr));
        let exe = module(&ps, &target.exe().to_string_lossy());
        assert_eq!(
            exe.exported("call_twin_a"),
            None,
            "not in the program's .dynsym"
        );
        assert!(
            exe.symbols_named("call_twin_a").next().is_some(),
            "but in .symtab"
        );
    }

    #[test]
    fn load_time_small_process() {
        let target = spawn_c_program("timing", true);
        let pid = target.pid();
        let mut times = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            let maps = read_maps(pid).unwrap();
            let ps = ProcessSymbols::load(pid, &maps).unwrap();
            times.push(t.elapsed());
            assert!(ps.modules.len() >= 3);
        }
        times.sort();
        eprintln!(
            "read_maps + ProcessSymbols::load of a small process: median {:?}, min {:?}, max {:?}",
            times[times.len() / 2],
            times[0],
            times[times.len() - 1]
        );
    }
}
