//! Debug information of a mapped module: where it is, whether it belongs to the
//! module, and what it says about an address.
//!
//! Debug info is looked for the way distributions ship it, in gdb's order: the
//! module's own `.debug_info`; `DIR/.build-id/xx/rest.debug` under each debug
//! directory; the `.gnu_debuglink` name next to the module, in its `.debug/`
//! directory and under each debug directory. A separate file is trusted only when
//! its build-id (or, without build-ids, the debuglink CRC) matches the module; a
//! mismatch is reported as a warning and the file ignored. MiniDebugInfo (an
//! xz-compressed ELF in `.gnu_debugdata`, as Fedora ships) adds the symbols a
//! stripped module's `.dynsym` lacks.
//!
//! Parsing is lazy: [`ModuleDebug::load`] finds and maps the files and builds the
//! addr2line context; units and functions are parsed on first lookup and kept.

pub mod answers;
mod cache;
mod data;
mod entry;
mod module;
mod source;

pub use cache::DwarfCache;
pub use entry::{EntryDebug, EntryInfo};
pub use module::ModuleDebug;
pub use source::{CallSiteParam, SourceFrame};

pub use crate::debugfile::{DebugInfoError, DebugSearch, DebugSource, DEFAULT_DEBUG_DIR};

/// The debug info of a process's modules, in the order of its
/// [`ProcessSymbols::modules`](crate::symbols::ProcessSymbols), each loaded on first use.
pub struct ModulesDebug {
    cells: Vec<std::cell::OnceCell<ModuleDebug>>,
    search: DebugSearch,
    cache: DwarfCache,
}

impl ModulesDebug {
    /// Nothing loaded yet for `modules` modules; separate files are searched in the
    /// default places, and DWARF parses are shared through `cache`.
    pub fn new(modules: usize, cache: DwarfCache) -> ModulesDebug {
        ModulesDebug {
            cells: (0..modules).map(|_| std::cell::OnceCell::new()).collect(),
            search: DebugSearch::default(),
            cache,
        }
    }

    /// Sets where separate debug files are looked for (forgets what was loaded so far).
    pub fn set_search(&mut self, search: DebugSearch) {
        self.save_answers();
        self.search = search;
        let n = self.cells.len();
        self.cells = (0..n).map(|_| std::cell::OnceCell::new()).collect();
    }

    /// Shares DWARF parses through `cache` (forgets what was loaded so far).
    pub fn set_cache(&mut self, cache: DwarfCache) {
        self.save_answers();
        self.cache = cache;
        let n = self.cells.len();
        self.cells = (0..n).map(|_| std::cell::OnceCell::new()).collect();
    }

    /// The debug info of the module of `symbols` containing runtime address `addr`.
    pub fn for_addr(
        &self,
        symbols: &crate::symbols::ProcessSymbols,
        addr: u64,
    ) -> Option<&ModuleDebug> {
        let i = symbols
            .modules
            .iter()
            .position(|m| m.range.contains(&addr))?;
        let m = &symbols.modules[i];
        if !m.path.starts_with('/') {
            return None;
        }
        Some(self.cells.get(i)?.get_or_init(|| {
            let search = self.search.under(m.root.as_deref());
            ModuleDebug::load_cached(&m.file, m.bias, &search, &self.cache)
        }))
    }

    /// Takes out the loaded debug info of every module holding more than
    /// `max_bytes` of DWARF (it is loaded again when next needed). The caller
    /// decides where to drop it: freeing a large module's DWARF takes milliseconds.
    pub fn take_over(&mut self, max_bytes: usize) -> Vec<ModuleDebug> {
        self.save_answers();
        self.cells
            .iter_mut()
            .filter(|cell| cell.get().is_some_and(|d| d.dwarf_bytes() > max_bytes))
            .filter_map(std::cell::OnceCell::take)
            .collect()
    }

    /// Saves what every loaded module learned from its DWARF ([`ModuleDebug::save_answers`]).
    pub fn save_answers(&self) {
        for debug in self.cells.iter().filter_map(std::cell::OnceCell::get) {
            debug.save_answers();
        }
    }

    /// Problems met while loading debug info so far (e.g. a debug file of another build).
    pub fn warnings(&self) -> Vec<String> {
        self.cells
            .iter()
            .filter_map(std::cell::OnceCell::get)
            .flat_map(|d| d.warnings.iter().cloned())
            .collect()
    }
}

/// Demangles a C++ (`_Z...`) or Rust name; gdb style: without the parameter list
/// and, for Rust, without the hash. Other names are returned as they are.
pub fn demangle(name: &str) -> String {
    if let Ok(r) = rustc_demangle::try_demangle(name) {
        return format!("{r:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            let opts = cpp_demangle::DemangleOptions::new().no_params();
            if let Ok(s) = sym.demangle_with_options(&opts) {
                return s;
            }
        }
    }
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::cache::file_key;
    use super::data::lock;
    use super::*;
    use crate::debugfile::ElfSections;
    use crate::dwarf_cache::DiskCache;
    use crate::symbols::Symbol;
    use std::path::Path;
    use std::sync::Arc;

    #[test]
    fn crc32_matches_the_reference_value() {
        assert_eq!(crate::debugfile::crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn demangles_cpp_and_rust_like_gdb() {
        assert_eq!(demangle("_ZN2ns3Foo3barEi"), "ns::Foo::bar");
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("bar"), "bar");
    }

    #[test]
    fn hostile_elf_bytes_are_errors() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..500 {
            let mut b = vec![0u8; 256];
            for v in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *v = x as u8;
            }
            b[..6].copy_from_slice(b"\x7fELF\x02\x01");
            if let Ok(e) = ElfSections::from_vec("fuzz".into(), b) {
                let _ = e.build_id();
                let _ = e.debuglink();
                let _ = e.function_symbols();
                let _ = e.section(".debug_info");
            }
        }
    }

    /// The narrow reader describes libc's functions as the full one does (the
    /// calling-convention view install uses), without reading all the DWARF.
    #[test]
    fn entry_reader_agrees_with_the_full_reader_on_libc() {
        let libc = [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/x86_64-linux-gnu/libc.so.6",
        ]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_file());
        let Some(libc) = libc else {
            eprintln!("skipped: no x86-64 libc.so.6");
            return;
        };
        let search = DebugSearch::default();
        let full = ModuleDebug::load_dwarf(libc, 0, &search);
        if !full.has_dwarf() {
            eprintln!("skipped: libc has no debug info here (apt-get install libc6-dbg)");
            return;
        }
        let mut narrow = EntryDebug::load(libc, 0, &search);
        assert!(narrow.has_dwarf());
        let syms = crate::symbols::separate_symbols(libc, 0, &search);
        let mut picked: Vec<&Symbol> = syms.iter().filter(|s| s.size > 0).step_by(11).collect();
        for name in [
            "unlinkat",
            "write",
            "printf",
            "qsort",
            "__memset_avx2_unaligned_erms",
        ] {
            picked.extend(syms.iter().filter(|s| s.name == name));
        }
        let (mut found, mut not_described, mut unknown) = (0, 0, 0);
        for s in picked {
            let want = full
                .function_info(s.addr)
                .filter(|i| i.entry == Some(s.addr));
            match (narrow.function_info(s.addr), want) {
                (EntryInfo::Found(got), Some(want)) => {
                    // Names may differ: GNU as describes each alias of an assembly
                    // function (`__sigsetjmp`, `__GI___sigsetjmp`) at one address.
                    assert_eq!(got.params.len(), want.params.len(), "{}", s.name);
                    assert_eq!(got.variadic, want.variadic, "{}", s.name);
                    assert_eq!(
                        format!("{:?}", crate::args::x86_64::placement_of(&got)),
                        format!("{:?}", crate::args::x86_64::placement_of(&want)),
                        "{}",
                        s.name
                    );
                    found += 1;
                }
                (EntryInfo::NotDescribed, None) => not_described += 1,
                (EntryInfo::Unknown, _) => unknown += 1,
                (got, want) => panic!("{} at {:#x}: narrow {got:?}, full {want:?}", s.name, s.addr),
            }
        }
        eprintln!(
            "libc: {found} functions described alike, {not_described} by neither, \
             {unknown} left to the full reader"
        );
        assert!(found > 50, "only {found} functions compared");
    }

    /// Readers given one cache share a file's parse; readers with their own do not.
    #[test]
    fn a_dwarf_cache_shares_parses_between_its_users() {
        let exe = std::env::current_exe().unwrap();
        let search = DebugSearch::default();
        let cache = DwarfCache::new();
        let a = ModuleDebug::load_cached(&exe, 0, &search, &cache);
        let Some(da) = a.dwarf().cloned() else {
            eprintln!("skipped: this test binary has no DWARF");
            return;
        };
        let b = ModuleDebug::load_cached(&exe, 0, &search, &cache.clone());
        assert!(Arc::ptr_eq(&da, b.dwarf().unwrap()), "one parse");
        let own = ModuleDebug::load(&exe, 0, &search);
        assert!(
            !Arc::ptr_eq(&da, own.dwarf().unwrap()),
            "a parse of its own"
        );
        // The cache holds no parse alive by itself.
        drop((a, b, da));
        assert!(cache
            .get(file_key(&exe.to_string_lossy()).unwrap())
            .is_none());
    }

    /// libc's DWARF (when its debug file is installed) answers alike from one
    /// context over the whole file, from per-unit contexts, from a disk cache
    /// entry, and after that entry was damaged (it is rebuilt).
    #[test]
    fn per_unit_contexts_and_the_disk_cache_answer_as_one_context() {
        let Some(libc) = [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/lib/x86_64-linux-gnu/libc.so.6",
        ]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_file()) else {
            eprintln!("skipped: no x86-64 libc.so.6");
            return;
        };
        let search = DebugSearch::default();
        let plain = ModuleDebug::load(libc, 0, &search);
        let Some(whole) = plain.dwarf().and_then(|d| d.whole()) else {
            eprintln!("skipped: libc has no debug info here (apt-get install libc6-dbg)");
            return;
        };
        let dir =
            std::env::temp_dir().join(format!("argstash-debuginfo-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let disk = DiskCache::new(dir.clone(), crate::dwarf_cache::DEFAULT_MAX_BYTES);
        let load = || {
            ModuleDebug::load_cached(libc, 0, &search, &DwarfCache::with_disk(Some(disk.clone())))
        };
        let first = load();
        let entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert_eq!(entries.len(), 1, "one entry written: {entries:?}");
        let second = load();
        // Damage the entry's header: the next load rebuilds it.
        let mut bytes = std::fs::read(&entries[0]).unwrap();
        bytes[100] ^= 1;
        std::fs::write(&entries[0], &bytes).unwrap();
        let third = load();
        assert_ne!(std::fs::read(&entries[0]).unwrap(), bytes, "rebuilt");

        let syms = crate::symbols::separate_symbols(libc, 0, &search);
        type Shown = (Option<String>, Option<String>, Option<u32>, Option<usize>);
        let shown = |f: Arc<[SourceFrame]>| -> Vec<Shown> {
            f.iter()
                .map(|f| {
                    let params = f.info.as_ref().map(|i| i.params.len());
                    (f.function.clone(), f.file.clone(), f.line, params)
                })
                .collect()
        };
        let mut compared = 0;
        for s in syms.iter().filter(|s| s.size > 0).step_by(13) {
            let pc = s.addr + s.size / 2;
            let mut want = Vec::new();
            {
                let context = lock(&whole);
                let mut it = context.find_frames(pc).skip_all_loads().unwrap();
                while let Ok(Some(f)) = it.next() {
                    want.push((
                        f.function
                            .as_ref()
                            .and_then(|n| n.raw_name().ok())
                            .map(|n| demangle(&n)),
                        f.location.as_ref().and_then(|l| l.line),
                    ));
                }
            }
            let got = shown(plain.frames(pc));
            let lines: Vec<_> = got.iter().map(|g| g.2).collect();
            assert_eq!(
                lines,
                want.iter().map(|w| w.1).collect::<Vec<_>>(),
                "{} at {pc:#x}",
                s.name
            );
            for other in [&first, &second, &third] {
                assert_eq!(shown(other.frames(pc)), got, "{} at {pc:#x}", s.name);
            }
            compared += 1;
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(compared > 100, "only {compared} addresses compared");
    }

    #[test]
    fn candidate_paths_follow_gdb() {
        let search = DebugSearch {
            dirs: vec![std::path::PathBuf::from("/dbg")],
            root: None,
        };
        let c = crate::debugfile::candidates(
            Path::new("/opt/app/prog"),
            Some(&[0xab, 0xcd, 0xef]),
            Some("prog.debug"),
            &search,
        );
        let paths: Vec<String> = c.iter().map(|(p, _)| p.display().to_string()).collect();
        assert_eq!(
            paths,
            [
                "/dbg/.build-id/ab/cdef.debug",
                "/opt/app/prog.debug",
                "/opt/app/.debug/prog.debug",
                "/dbg/opt/app/prog.debug"
            ]
        );
    }

    #[test]
    fn candidate_paths_under_a_sysroot_search_its_debug_dirs_first() {
        let search = DebugSearch {
            dirs: vec![std::path::PathBuf::from("/dbg")],
            root: Some(std::path::PathBuf::from("/sys/root")),
        };
        let c = crate::debugfile::candidates(
            Path::new("/sys/root/opt/app/prog"),
            Some(&[0xab, 0xcd, 0xef]),
            Some("prog.debug"),
            &search,
        );
        let paths: Vec<String> = c.iter().map(|(p, _)| p.display().to_string()).collect();
        assert_eq!(
            paths,
            [
                "/sys/root/dbg/.build-id/ab/cdef.debug",
                "/dbg/.build-id/ab/cdef.debug",
                "/sys/root/opt/app/prog.debug",
                "/sys/root/opt/app/.debug/prog.debug",
                "/sys/root/dbg/opt/app/prog.debug",
                "/dbg/opt/app/prog.debug"
            ]
        );
    }
}
