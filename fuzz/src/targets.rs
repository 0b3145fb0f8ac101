//! One function per fuzz target: each drives a reader's public entry points
//! with the bytes and ignores the answers (a finding is a panic, a hang or an
//! allocation over the driver's cap; the driver watches for those).
//!
//! Targets reading files write the bytes into the scratch directory
//! ([`crate::scratch`]) first, since those readers map a path.

use std::hint::black_box;
use std::path::PathBuf;

use reader::args::{parse_params, split_signature, FrameState};
use reader::core::{backtrace_core, CoreFile, CoreOptions};
use reader::debugfile::{DebugSearch, ElfSections};
use reader::debuginfo::{EntryDebug, ModuleDebug};
use reader::dwarf_cache::{DiskCache, EntryKey};
use reader::memory::Memory;
use reader::procfs::{MapEntry, Perms};
use reader::python::BuiltinTypes;
use reader::python::Objects;
use reader::python::{facts_for, Layout, PY311};
use reader::python::{probe_debug_offsets, DebugOffsets};
use reader::python::{FrameReader, NativeEval};
use reader::symbols::{FuncSpec, Module, ProcessSymbols};
use reader::unwind::{Arch, BacktraceOptions, Unwinder};

use crate::image::Image;

/// A fuzz target: a name and the function that runs one input.
pub struct Target {
    /// Name on the command line and of its corpus directory.
    pub name: &'static str,
    /// What it reads.
    pub about: &'static str,
    /// Runs one input.
    pub run: fn(&[u8]),
}

/// Every target, in the order `all` runs them.
pub const TARGETS: &[Target] = &[
    Target { name: "core", about: "core files: CoreFile::open, maps, backtrace_core (arenas, unwinder, Python reader over the core)", run: fuzz_core },
    Target { name: "elf", about: "ELF symbol tables, sections (compressed), build-id, debuglink, separate debug files", run: fuzz_elf },
    Target { name: "dwarf", about: "DWARF of an ELF: source frames (line tables, inlining), function info (types), locations, call sites, aranges", run: fuzz_dwarf },
    Target { name: "arena", about: "arenas and hook records found in target memory (arena::discover)", run: fuzz_arena },
    Target { name: "unwind", about: "the x86-64 and i386 unwinders with stash frames over hostile stack memory", run: fuzz_unwind },
    Target { name: "python", about: "CPython 3.11 thread states, frames, code and argument objects over hostile memory", run: fuzz_python },
    Target { name: "python_offsets", about: "CPython 3.13+ _Py_DebugOffsets (parse and checks for each known shape), then threads and frames with the layout they give", run: fuzz_python_offsets },
    Target { name: "dwarf_cache", about: "on-disk DWARF cache entries (DiskCache::load)", run: fuzz_dwarf_cache },
    Target { name: "answers", about: "on-disk answers cache entries (answers::Saved::parse and lookups)", run: fuzz_answers },
    Target { name: "signature", about: "user signatures (split_signature, parse_params) and arena signature slots", run: fuzz_signature },
    Target { name: "prologue_x86_64", about: "x86-64 prologue analysis and relocation, jump tables, stack-read analysis", run: fuzz_prologue_x86_64 },
    Target { name: "prologue_i386", about: "i386 prologue analysis and relocation, get-PC thunks", run: fuzz_prologue_i386 },
    Target { name: "coredump_meta", about: "systemd-coredump's stored file names and user.coredump.* attributes (parse_name, unescape, parse_attrs)", run: fuzz_coredump_meta },
    Target { name: "coredump_stream", about: "systemd-coredump's compressed cores: zstd, LZ4 frame and xz streams through the bounded decompress", run: fuzz_coredump_stream },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// True when `ARGSTASH_FUZZ_SHOW` is set: targets print what they read (to check seeds).
fn show() -> bool {
    std::env::var_os("ARGSTASH_FUZZ_SHOW").is_some()
}

/// Writes `data` to the scratch file `name` and returns its path.
fn scratch_file(name: &str, data: &[u8]) -> PathBuf {
    let path = crate::scratch().join(name);
    std::fs::write(&path, data).expect("scratch directory is writable");
    path
}

/// A debug search that finds nothing outside the scratch directory.
fn empty_search() -> DebugSearch {
    DebugSearch {
        dirs: vec![crate::scratch().join("debug")],
        root: None,
    }
}

/// Every 8-byte-aligned little-endian word of `data`, at most `max`: candidate addresses.
fn words_of(data: &[u8], max: usize) -> Vec<u64> {
    data.chunks_exact(8)
        .take(max)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

/// A core file: parsed, its mappings rebuilt, every thread unwound with arenas and
/// Python. Mapped files are looked for where the core says (read-only, regular
/// files only), so the seeds, dumped on this machine, unwind through real modules.
pub fn fuzz_core(data: &[u8]) {
    let path = scratch_file("core", data);
    let options = CoreOptions::default();
    let Ok(core) = CoreFile::open(&path, options) else {
        return;
    };
    let maps = core.maps();
    for m in maps.iter().take(64) {
        let mut b = [0u8; 16];
        black_box(core.read(m.start, &mut b).is_ok());
        black_box(core.read(m.end.wrapping_sub(8), &mut b).is_ok());
    }
    black_box(core.exe_path());
    let opts = BacktraceOptions {
        tid: None,
        show_trampolines: true,
        debug_search: empty_search(),
        always_stop: false,
    };
    let bt = backtrace_core(&core, &opts);
    if show() {
        eprintln!("core: {bt:#?}");
    }
    black_box(bt.ok());
}

/// The mapping an ELF under test is placed at: one `r-x` file mapping of `len` bytes.
fn elf_entry(path: &str, len: usize) -> MapEntry {
    MapEntry {
        start: 0x40_0000,
        end: 0x40_0000 + ((len as u64 + 0xfff) & !0xfff).max(0x1000),
        perms: Perms {
            read: true,
            write: false,
            exec: true,
            private: true,
        },
        offset: 0,
        inode: 1,
        path: path.to_string(),
    }
}

/// An ELF file: symbol tables (module and process views), sections with
/// decompression, build-id and debuglink, separate debug symbols.
pub fn fuzz_elf(data: &[u8]) {
    let path = scratch_file("elf", data);
    let shown = path.to_string_lossy().into_owned();
    let entry = elf_entry(&shown, data.len());
    if let Ok(m) = Module::from_image(&shown, data.to_vec(), &[&entry]) {
        let addrs: Vec<u64> = m.symbols().iter().take(32).map(|s| s.addr).collect();
        for a in &addrs {
            black_box(m.lookup(*a + 1));
            black_box(m.name_at(*a));
        }
        black_box(m.exported("main"));
        black_box(m.section(".text").map(|(r, b)| (r, b.len())));
        black_box(m.ifunc_names().count());
        black_box(m.file_bytes(entry.start, 64));
        black_box(m.separate_symbols().len());
        let procs = ProcessSymbols::from_modules(0, vec![m]);
        black_box(procs.resolve(&FuncSpec::parse("main")).ok());
        for a in &addrs {
            black_box(procs.lookup(*a));
        }
    }
    if let Ok(sections) = ElfSections::open(&path) {
        for name in [
            ".debug_info",
            ".debug_line",
            ".eh_frame",
            ".gnu_debugdata",
            ".symtab",
        ] {
            black_box(sections.section(name).map(|s| s.len()));
            black_box(sections.is_compressed(name));
        }
        black_box(sections.build_id());
        black_box(sections.debuglink());
    }
    black_box(reader::symbols::separate_symbols(&path, 0, &empty_search()).len());
}

/// The function symbols' addresses of an ELF (for the DWARF target to ask about).
fn function_addrs(data: &[u8], max: usize) -> Vec<u64> {
    let Ok(elf) = goblin::elf::Elf::parse(data) else {
        return Vec::new();
    };
    elf.syms
        .iter()
        .chain(elf.dynsyms.iter())
        .filter(|s| s.is_function() && s.st_value != 0)
        .take(max)
        .map(|s| s.st_value)
        .collect()
}

/// The DWARF of an ELF file, at every function symbol: source frames (line
/// programs, inlined calls), function info (types, locations) evaluated against
/// empty memory, call-site parameters, and the aranges-based entry reader.
pub fn fuzz_dwarf(data: &[u8]) {
    let path = scratch_file("dwarf", data);
    let pcs = function_addrs(data, 24);
    let search = empty_search();
    let md = ModuleDebug::load(&path, 0, &search);
    if show() {
        let frames: Vec<_> = pcs.iter().map(|&pc| md.frames(pc)).collect();
        eprintln!("dwarf: has DWARF {}: {frames:?}", md.has_dwarf());
    }
    let mem = Image::default();
    for &pc in &pcs {
        for at in [pc, pc.wrapping_add(4)] {
            black_box(md.frames(at));
            black_box(md.call_site_params(at, at.wrapping_add(5)));
            if let Some(info) = md.function_info(at) {
                let state = FrameState {
                    pc: at,
                    cfa: Some(0x7ffe_0000),
                    regs: [Some(0x7ffe_0000); 17],
                    entry_values: Vec::new(),
                };
                black_box(reader::args::dwarf_values(
                    &info,
                    &info.frame_base,
                    &state,
                    &mem,
                ));
                black_box(reader::args::wants_entry_values(&info, at));
            }
        }
    }
    let mut entry = EntryDebug::load(&path, 0, &search);
    for &pc in &pcs {
        black_box(entry.function_info(pc));
    }
}

/// Arenas and hook records in memory: each region is an anonymous `r-x` mapping.
pub fn fuzz_arena(data: &[u8]) {
    let image = Image::decode(data, 0);
    let maps = image.maps();
    let found = reader::arena::discover(&maps, &image);
    if show() {
        eprintln!("arena: maps {maps:x?}: {:?}", found.as_ref().err());
    }
    let Ok(arenas) = found else {
        return;
    };
    if show() {
        eprintln!(
            "arena: {} arenas, {} hooks",
            arenas.len(),
            arenas.iter().map(|a| a.hooks().count()).sum::<usize>()
        );
    }
    for a in &arenas {
        for (slot, r) in a.hooks() {
            // An oracle: a record the reader accepted reads back the same after
            // the writer encodes it (else one of them is confidently wrong).
            // Texts that were not UTF-8 are shown with replacement characters,
            // which the writer then clips to its byte limit: not compared.
            let lossy = r.name.contains('\u{fffd}') || r.module.contains('\u{fffd}');
            if let (false, Ok(bytes)) = (lossy, r.encode()) {
                let again = trampolines::arena::HookRecord::decode(&bytes);
                assert_eq!(
                    again.as_ref(),
                    Ok(r),
                    "a hook record changed in an encode round trip"
                );
            }
            black_box(a.signature(slot));
            black_box(r.layout());
            black_box(r.original_to_relocated(r.patch_addr.wrapping_add(1)));
            black_box(r.relocated_to_original(r.relocated.wrapping_add(1)));
            black_box(reader::unwind::hook_at(&arenas, r.trampoline));
            black_box(reader::unwind::hook_signature(&arenas, r.function));
        }
        black_box(a.by_after_call(a.header.base));
        black_box(a.free_slot());
    }
}

/// Header words of the unwind target: flags (bit 0: i386), then 17 registers.
pub(crate) const UNWIND_WORDS: usize = 18;

thread_local! {
    /// The unwinders of this process's own modules (their CFI and DWARF) for
    /// x86-64 and of no modules for i386, built once: the unwind seeds are this
    /// process's stacks (see `seeds`).
    static UNWINDERS: std::cell::RefCell<(Unwinder, Unwinder)> = {
        let pid = std::process::id() as i32;
        let own = reader::procfs::read_maps(pid)
            .ok()
            .and_then(|maps| ProcessSymbols::load(pid, &maps).ok())
            .unwrap_or_else(|| ProcessSymbols::from_modules(pid, Vec::new()));
        std::cell::RefCell::new((
            Unwinder::new(Arch::X86_64, own, Vec::new()),
            Unwinder::new(Arch::I386, ProcessSymbols::from_modules(pid, Vec::new()), Vec::new()),
        ))
    };
}

/// The unwinders over a stack from the input, with any arenas in it (header:
/// flags, bit 0 for i386, then the 17 DWARF registers, 0 for unknown).
pub fn fuzz_unwind(data: &[u8]) {
    let image = Image::decode(data, UNWIND_WORDS);
    let i386 = image.word(0) & 1 != 0;
    let mut regs = [None; 17];
    for (i, r) in regs.iter_mut().enumerate() {
        let v = image.word(i + 1);
        *r = (v != 0).then_some(v);
    }
    let arenas = reader::arena::discover(&image.maps(), &image).unwrap_or_default();
    UNWINDERS.with(|u| {
        let mut u = u.borrow_mut();
        let unwinder = if i386 { &mut u.1 } else { &mut u.0 };
        unwinder.set_arenas(arenas);
        let (frames, stop) = unwinder.unwind(&regs, &image, true);
        for f in &frames {
            black_box(f.python_eval());
            black_box(f.foreign_hook());
        }
        if show() {
            eprintln!(
                "unwind: {} frames, stop {stop:?}: {:?}",
                frames.len(),
                frames
                    .iter()
                    .map(|f| f.function.as_deref().unwrap_or("?"))
                    .collect::<Vec<_>>()
            );
        }
        black_box((frames.len(), stop));
        black_box(unwinder.walk(&regs, &image).0.len());
    });
}

/// Header words of the Python target: `_PyRuntime`, a frame, then the 14 builtin type addresses.
pub const PYTHON_WORDS: usize = 16;

/// CPython 3.11's thread walk from `_PyRuntime`, each thread's frame chain (code
/// objects, line tables, arguments) and its pairing, over memory from the input.
pub fn fuzz_python(data: &[u8]) {
    let image = Image::decode(data, PYTHON_WORDS);
    python_over(&image, &PY311);
}

/// `_Py_DebugOffsets` from the input's memory at word 0 (`_PyRuntime`), parsed
/// with the shape of 3.13, 3.14 and 3.15; each that passes the checks makes a
/// layout, with which the threads and frames are read as [`fuzz_python`] does.
pub fn fuzz_python_offsets(data: &[u8]) {
    let image = Image::decode(data, PYTHON_WORDS);
    let runtime = image.word(0);
    black_box(probe_debug_offsets(&image, runtime));
    for minor in [13, 14, 15] {
        let Some(facts) = facts_for(minor) else {
            continue;
        };
        match DebugOffsets::read(&image, runtime, minor) {
            Ok(offsets) => {
                let layout = Layout::from_debug_offsets(&offsets, facts);
                if show() {
                    eprintln!("python_offsets: 3.{minor}: {layout:?}");
                }
                python_over(&image, &layout);
            }
            Err(e) => {
                if show() {
                    eprintln!("python_offsets: 3.{minor}: {e}");
                }
            }
        }
    }
}

/// The thread walk, frame chains and pairing of [`fuzz_python`] with `layout`.
fn python_over(image: &Image, layout: &Layout) {
    let w = |i| image.word(i);
    let types = BuiltinTypes {
        code: w(2),
        int: w(3),
        bool: w(4),
        float: w(5),
        str: w(6),
        bytes: w(7),
        tuple: w(8),
        list: w(9),
        dict: w(10),
        cell: w(11),
        none_type: w(12),
        none: w(13),
        true_obj: w(14),
        false_obj: w(15),
    };
    let mem: &dyn Memory = image;
    let mut frames = FrameReader::new(mem, layout, Objects::new(mem, layout, &types));
    let mut starts = vec![w(1)];
    let mut bases = vec![None];
    if let Ok(walk) = reader::python::walk_threads(mem, layout, w(0)) {
        black_box(walk.for_tid(1));
        for t in &walk.threads {
            if let Some(f) = t.current_frame {
                starts.push(f);
                bases.push(t.base_frame);
            }
        }
    }
    for (frame, base) in starts.into_iter().zip(bases).take(8) {
        let chain = frames.chain_to(frame, base, 64);
        let native = [
            NativeEval {
                is_eval: true,
                stashed_frame: Some(frame),
                stack: None,
            },
            NativeEval {
                is_eval: false,
                stashed_frame: None,
                stack: None,
            },
            NativeEval {
                is_eval: true,
                stashed_frame: None,
                stack: None,
            },
        ];
        let pairing = chain.pair_with(&native);
        black_box(pairing.interleave(native.len()));
        if show() {
            eprintln!("python: chain from 0x{frame:x}: {:?}", chain.frames);
        }
    }
}

/// The key every seed and input of the cache targets is stored under.
pub fn cache_key() -> EntryKey {
    EntryKey {
        build_id: vec![0xa5; 20],
        size: 4096,
        mtime_ns: 1_700_000_000_000_000_000,
    }
}

/// The CRC-32 (IEEE, reflected) the cache formats use.
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                0xedb8_8320 ^ (crc >> 1)
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn put_u32(b: &mut [u8], at: usize, v: u32) -> Option<()> {
    b.get_mut(at..at.checked_add(4)?)?
        .copy_from_slice(&v.to_le_bytes());
    Some(())
}

fn get_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn get_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// A DWARF cache entry with its length field and header CRC made right again
/// after a mutation, so the fuzzer gets past them to the tables.
pub fn fix_dwarf_cache(mut b: Vec<u8>) -> Vec<u8> {
    // Offsets of reader/src/dwarf_cache.rs: total at 16, section count at 44,
    // index count at 48, a fixed part of 120 bytes, 80-byte section and 24-byte
    // index records, then the CRC of everything before it.
    let len = b.len() as u64;
    if let Some(total) = b.get_mut(16..24) {
        total.copy_from_slice(&len.to_le_bytes());
    }
    let (Some(ns), Some(ni)) = (get_u32(&b, 44), get_u64(&b, 48)) else {
        return b;
    };
    let crc_at = (ns as u64)
        .checked_mul(80)
        .and_then(|s| s.checked_add(ni.checked_mul(24)?))
        .and_then(|t| t.checked_add(120));
    if let Some(at) = crc_at.and_then(|a| usize::try_from(a).ok()) {
        if let Some(head) = b.get(..at) {
            let crc = crc32(head);
            put_u32(&mut b, at, crc);
        }
    }
    b
}

/// An answers entry with its index CRC and every record's CRC made right again
/// after a mutation.
pub fn fix_answers(mut b: Vec<u8>) -> Vec<u8> {
    // Layout of reader/src/answers.rs: magic 8, version 4, fingerprint 8, size 8,
    // mtime 8, build-id (u32 length, bytes), frame and site counts (u32 each),
    // index rows (16 and 24 bytes), the CRC of all that, then the records.
    let Some(id_len) = get_u32(&b, 36) else {
        return b;
    };
    let counts = 40 + id_len as usize;
    let (Some(nf), Some(ns)) = (get_u32(&b, counts), get_u32(&b, counts + 4)) else {
        return b;
    };
    let rows = counts + 8;
    let Some(head_len) = (nf as usize)
        .checked_mul(16)
        .and_then(|f| f.checked_add((ns as usize).checked_mul(24)?))
        .and_then(|i| i.checked_add(rows))
    else {
        return b;
    };
    let Some(head) = b.get(..head_len) else {
        return b;
    };
    let crc = crc32(head);
    put_u32(&mut b, head_len, crc);
    let blob = head_len + 4;
    let records: Vec<(u32, u32)> = (0..nf as usize)
        .map(|i| rows + 16 * i + 8)
        .chain((0..ns as usize).map(|i| rows + 16 * nf as usize + 24 * i + 16))
        .filter_map(|at| Some((get_u32(&b, at)?, get_u32(&b, at + 4)?)))
        .collect();
    for (off, len) in records {
        let start = blob + off as usize;
        let Some(end) = start.checked_add(len as usize) else {
            continue;
        };
        if len >= 4 && end <= b.len() {
            let crc = crc32(&b[start..end - 4]);
            put_u32(&mut b, end - 4, crc);
        }
    }
    b
}

/// An on-disk DWARF cache entry, loaded and its sections read: as mutated, and
/// with its CRC and length made right (to reach the tables).
pub fn fuzz_dwarf_cache(data: &[u8]) {
    dwarf_cache_once(data);
    dwarf_cache_once(&fix_dwarf_cache(data.to_vec()));
}

fn dwarf_cache_once(data: &[u8]) {
    let root = crate::scratch().join("cache");
    let _ = std::fs::create_dir_all(&root);
    let disk = DiskCache::new(root, 1 << 30);
    let key = cache_key();
    std::fs::write(disk.entry_path(&key), data).expect("scratch directory is writable");
    let loaded = disk.load(&key);
    if show() {
        eprintln!(
            "dwarf_cache: {:?}",
            loaded.as_ref().map(|e| e.index.len()).err()
        );
    }
    if let Ok(entry) = loaded {
        let names: Vec<String> = entry.section_names().map(str::to_string).collect();
        for n in names {
            if let Some(bytes) = entry.section(&n) {
                black_box((bytes.len(), bytes.first(), bytes.last()));
            }
        }
        black_box(entry.index.len());
    }
}

/// An answers entry, parsed, then asked about every word in it as an address:
/// as mutated, and with its CRCs made right (to reach the records' decoder).
pub fn fuzz_answers(data: &[u8]) {
    answers_once(data);
    answers_once(&fix_answers(data.to_vec()));
}

fn answers_once(data: &[u8]) {
    let key = cache_key();
    for bias in [0, 0x5555_5555_4000] {
        let Some(saved) = reader::debuginfo::answers::Saved::parse(data.to_vec(), &key, bias)
        else {
            return;
        };
        if show() {
            eprintln!("answers: {} answers", saved.len());
        }
        black_box(saved.len());
        let words = words_of(data, 128);
        for pair in words.windows(2) {
            black_box(saved.frames(pair[0].wrapping_add(bias)));
            black_box(saved.call_sites(pair[0].wrapping_add(bias), pair[1].wrapping_add(bias)));
        }
    }
}

/// User signatures, as `argstash hook 'f(int, char *)'` and the arena's slots take them.
pub fn fuzz_signature(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok((name, Some(sig))) = split_signature(&text) {
        black_box(sig.to_function_info(Some(name.to_string())));
    }
    if let Ok(sig) = parse_params(&text) {
        black_box(sig.to_function_info(None));
    }
    black_box(FuncSpec::parse(&text).to_string());
    // The name as a demangled C++ or Rust name (parameter lists brought to one
    // spelling, generic arguments dropped) against real symbols of each kind.
    black_box(reader::args::split_function(&text).ok());
    for symbol in [
        "_ZNKSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE7compareEPKc",
        "_ZSt24__throw_out_of_range_fmtPKcz",
        "_ZN2ns5twiceIiEET_S1_",
        "_RINvCs1234_6crashy3summEB2_",
    ] {
        black_box(reader::symbols::name_match(&text, symbol));
    }
    black_box(trampolines::arena::decode_signature(data).ok());
    if let Ok(slot) = trampolines::arena::encode_signature(&text) {
        black_box(trampolines::arena::decode_signature(&slot).ok());
    }
}

/// Where the prologue targets place the function.
const FUNCTION: u64 = 0x40_1000;

/// x86-64: the first byte holds options (bit 0: the 14-byte absolute patch; bits
/// 1-7: padding length), then the function's code; the bytes after the code up to
/// the padding are its padding. Planned, relocated near and far; jump tables read
/// from the input; the stack-read analysis.
pub fn fuzz_prologue_x86_64(data: &[u8]) {
    use trampolines::x86_64::relocate::{plan_patch_in, FunctionContext, JMP_ABS_LEN};
    let Some((&opts, rest)) = data.split_first() else {
        return;
    };
    let pad = usize::from(opts >> 1).min(rest.len());
    let (code, padding) = rest.split_at(rest.len() - pad);
    let read = |addr: u64, len: usize| -> Option<Vec<u8>> {
        let off = usize::try_from(addr.checked_sub(FUNCTION)?).ok()?;
        rest.get(off..off.checked_add(len)?).map(<[u8]>::to_vec)
    };
    let ctx = FunctionContext {
        padding,
        returns_twice: false,
        read_file: Some(&read),
        min_len: if opts & 1 != 0 { JMP_ABS_LEN } else { 5 },
        may_land: None,
    };
    if let Ok(plan) = plan_patch_in(FUNCTION, code, &ctx) {
        black_box(plan.disassembly());
        black_box(plan.patch_offset());
        for at in [FUNCTION + 0x1000_0000, 0x7fff_0000_0000] {
            if let Ok(r) = plan.relocate(at) {
                black_box(r.relocated_for(0));
            }
        }
    }
    black_box(trampolines::x86_64::analysis::indirect_jumps(
        FUNCTION, code, &read,
    ));
    black_box(trampolines::x86_64::stack_reads::analyse_stack_reads(
        FUNCTION, code,
    ));
}

/// i386: the function's code (get-PC thunks are looked for in the input itself), planned and relocated.
pub fn fuzz_prologue_i386(data: &[u8]) {
    use trampolines::i386::relocate::{pc_thunk_register, plan_patch};
    let thunk = |target: u64| {
        let off = usize::try_from(target.checked_sub(FUNCTION)?).ok()?;
        pc_thunk_register(data.get(off..)?)
    };
    if let Ok(plan) = plan_patch(FUNCTION, data, &thunk) {
        black_box(plan.disassembly());
        black_box(plan.patch_offset());
        for at in [FUNCTION + 0x100_0000, 0x0800_0000] {
            black_box(plan.relocate(at).ok());
        }
    }
}

/// A stored core's file name (the first line) and its extended attributes (the
/// rest: `name NUL value NUL` pairs), as systemd-coredump leaves them.
pub fn fuzz_coredump_meta(data: &[u8]) {
    let (line, rest) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let name = String::from_utf8_lossy(line);
    let parsed = reader::coredump::parse_name(&name);
    black_box(reader::coredump::unescape(&name));
    let mut fields = rest.split(|&b| b == 0);
    let mut pairs = Vec::new();
    while let (Some(k), Some(v)) = (fields.next(), fields.next()) {
        pairs.push((String::from_utf8_lossy(k).into_owned(), v));
    }
    let attrs = reader::coredump::parse_attrs(pairs.iter().map(|(k, v)| (k.as_str(), *v)));
    if let Some(n) = &parsed {
        black_box(reader::coredump::utc_time(n.usec));
    }
    if show() {
        eprintln!("coredump_meta: {parsed:?} {attrs:?}");
    }
    black_box((parsed, attrs));
}

/// Most a `coredump_stream` input may decompress to (well under the driver's heap cap).
const STREAM_LIMIT: u64 = 8 << 20;

/// A compressed core: the first byte picks the format (zstd, LZ4 frame, xz,
/// none), the rest is the stream, decompressed into memory under a bound.
pub fn fuzz_coredump_stream(data: &[u8]) {
    use reader::coredump::{decompress, Compression, LimitReason};
    let Some((&which, stream)) = data.split_first() else {
        return;
    };
    let format = match which % 4 {
        0 => Compression::Zstd,
        1 => Compression::Lz4,
        2 => Compression::Xz,
        _ => Compression::None,
    };
    let mut out = Vec::new();
    let r = decompress(stream, format, &mut out, STREAM_LIMIT, LimitReason::Caller);
    assert!(out.len() as u64 <= STREAM_LIMIT, "the bound was passed");
    if show() {
        eprintln!("coredump_stream: {format:?} {:?} ({} bytes)", r, out.len());
    }
    black_box(r.ok());
}
