//! Seed inputs recorded from real inputs, written as `DIR/<target>/<name>`.
//!
//! Nothing here is made up where a real input exists: ELF and DWARF seeds are
//! compiled fixtures, prologues are the bytes of libc's functions, the Python
//! seeds are exactly the bytes the Python reader read from a live CPython, the
//! unwind seeds the bytes the unwinder read from this process's own stack, and
//! the cache and arena seeds are written by argstash's own encoders.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use reader::debugfile::DebugSearch;
use reader::debuginfo::{DwarfCache, ModuleDebug};
use reader::dwarf_cache::DiskCache;
use trampolines::arena::{encode_signature, ArenaHeader, HookRecord, HookState};

use crate::image::{Image, LiveMemory, Recording};
use crate::targets::cache_key;

/// What `seed` was given: real files to start from.
#[derive(Debug, Default)]
pub struct Sources {
    /// ELF files (compiled fixtures, `cc -O2 -g`), for `elf`, `dwarf`, `dwarf_cache`, `answers`.
    pub elfs: Vec<PathBuf>,
    /// Core files, for `core`.
    pub cores: Vec<PathBuf>,
    /// A CPython 3.11 interpreter to record the Python reader against.
    pub python: Option<PathBuf>,
}

/// Writes every target's seeds under `dir`; returns `(target, seeds written)`.
pub fn generate(dir: &Path, src: &Sources) -> io::Result<Vec<(&'static str, usize)>> {
    let mut counts = Vec::new();
    let mut out = |target: &'static str, seeds: Vec<(String, Vec<u8>)>| -> io::Result<()> {
        let d = dir.join(target);
        std::fs::create_dir_all(&d)?;
        counts.push((target, seeds.len()));
        for (name, bytes) in seeds {
            std::fs::write(d.join(name), bytes)?;
        }
        Ok(())
    };
    out("signature", signatures())?;
    out("prologue_x86_64", prologues(&x86_64_libcs(&src.elfs), true))?;
    out("prologue_i386", prologues(&i386_libcs(), false))?;
    let small: Vec<&PathBuf> = src
        .elfs
        .iter()
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() <= 512 << 10))
        .collect();
    let files: Vec<(String, Vec<u8>)> = small
        .iter()
        .filter_map(|p| Some((file_name(p), std::fs::read(p).ok()?)))
        .collect();
    out("elf", files.clone())?;
    out("dwarf", files)?;
    out("dwarf_cache", dwarf_cache_entries(&small)?)?;
    out("answers", answers_entries(&small))?;
    let cores = src
        .cores
        .iter()
        .filter_map(|p| Some((file_name(p), std::fs::read(p).ok()?)))
        .collect();
    out("core", cores)?;
    let mut arena_seeds = arenas();
    for (i, core) in src.cores.iter().enumerate() {
        if let Some(seed) = core_arenas(core) {
            arena_seeds.push((format!("core-{i}"), seed));
        }
    }
    out("arena", arena_seeds)?;
    out("unwind", own_stacks())?;
    let python = match &src.python {
        Some(py) => python_seeds(py)?,
        None => Vec::new(),
    };
    out("python", python)?;
    out("python_offsets", debug_offsets_seeds())?;
    out("coredump_meta", coredump_meta_seeds())?;
    out("coredump_stream", coredump_stream_seeds(&src.cores))?;
    Ok(counts)
}

/// The `_Py_DebugOffsets` of the Debian sid root's interpreters (3.13, 3.14,
/// 3.15; `scripts/sid-root.sh`), as written in their `.PyRuntime` sections, each
/// at its own address with word 0 pointing at it; none without the root.
fn debug_offsets_seeds() -> Vec<(String, Vec<u8>)> {
    let root = std::env::var_os("ARGSTASH_SID_ROOT").map_or_else(
        || PathBuf::from("/var/cache/argstash-sid/root"),
        PathBuf::from,
    );
    let mut seeds = Vec::new();
    for minor in [13, 14, 15] {
        let path = root.join(format!("usr/bin/python3.{minor}"));
        let Ok(data) = std::fs::read(&path) else {
            continue;
        };
        let Ok(elf) = goblin::elf::Elf::parse(&data) else {
            continue;
        };
        let Some(sh) = elf
            .section_headers
            .iter()
            .find(|sh| elf.shdr_strtab.get_at(sh.sh_name) == Some(".PyRuntime"))
        else {
            continue;
        };
        let start = sh.sh_offset as usize;
        let len = (sh.sh_size as usize).min(reader::python::DEBUG_OFFSETS_MAX_LEN);
        let Some(bytes) = data.get(start..start + len) else {
            continue;
        };
        let mut regions = BTreeMap::new();
        regions.insert(sh.sh_addr, bytes.to_vec());
        let mut words = vec![0u64; crate::targets::PYTHON_WORDS];
        words[0] = sh.sh_addr;
        seeds.push((format!("python3.{minor}"), Image::encode(&words, &regions)));
    }
    seeds
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(|| "input".into(), |n| n.to_string_lossy().into_owned())
}

fn signatures() -> Vec<(String, Vec<u8>)> {
    [
        "bar(int)",
        "foo(int n, const char *s, ...)",
        "f(unsigned long long, double, float, struct point, char **)",
        "g(void)",
        "h(int, ...)",
        "qsort(void *base, size_t nmemb, size_t size, int (*compar)(const void *, const void *))",
        "libc.so.6:write(int fd, const void *buf, size_t count)",
        "int, long, short, signed char, unsigned, _Bool, long double",
        "ns::Class::method(int)",
        "0x401136(int)",
    ]
    .iter()
    .enumerate()
    .map(|(i, s)| (format!("sig-{i}"), s.as_bytes().to_vec()))
    .collect()
}

fn x86_64_libcs(elfs: &[PathBuf]) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6"]
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .take(1)
        .collect();
    v.extend(elfs.iter().cloned());
    v
}

fn i386_libcs() -> Vec<PathBuf> {
    ["/usr/lib32/libc.so.6", "/lib/i386-linux-gnu/libc.so.6"]
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .take(1)
        .collect()
}

/// The code of up to 40 function symbols of each file (of the wanted class), as
/// the prologue targets read it (x86-64: an options byte first).
fn prologues(files: &[PathBuf], is_64: bool) -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    for (f, path) in files.iter().enumerate() {
        let Ok(bytes) = std::fs::read(path) else {
            continue;
        };
        let Ok(elf) = goblin::elf::Elf::parse(&bytes) else {
            continue;
        };
        if elf.is_64 != is_64 {
            continue;
        }
        let funcs: Vec<_> = elf
            .syms
            .iter()
            .chain(elf.dynsyms.iter())
            .filter(|s| s.is_function() && (8..=2048).contains(&s.st_size))
            .collect();
        let step = (funcs.len() / 40).max(1);
        for (i, s) in funcs.iter().step_by(step).take(40).enumerate() {
            let Some(sh) = elf.section_headers.iter().find(|sh| {
                sh.sh_type == goblin::elf::section_header::SHT_PROGBITS
                    && (sh.sh_addr..sh.sh_addr + sh.sh_size).contains(&s.st_value)
            }) else {
                continue;
            };
            let off = (sh.sh_offset + (s.st_value - sh.sh_addr)) as usize;
            let Some(code) = bytes.get(off..off + s.st_size as usize) else {
                continue;
            };
            let mut seed = Vec::new();
            if is_64 {
                seed.push((i % 2) as u8);
            }
            seed.extend_from_slice(code);
            seeds.push((format!("fn-{f}-{i}"), seed));
        }
    }
    seeds
}

/// Entries the DWARF cache's own writer makes from each file's DWARF sections.
fn dwarf_cache_entries(elfs: &[&PathBuf]) -> io::Result<Vec<(String, Vec<u8>)>> {
    let root = crate::scratch().join("seed-cache");
    std::fs::create_dir_all(&root)?;
    let disk = DiskCache::new(root, 1 << 30);
    let key = cache_key();
    let mut seeds = Vec::new();
    for (i, path) in elfs.iter().enumerate() {
        let Ok(sections) = reader::debugfile::ElfSections::open(path) else {
            continue;
        };
        let names = [
            ".debug_info",
            ".debug_abbrev",
            ".debug_line",
            ".debug_str",
            ".debug_aranges",
        ];
        let held: Vec<(&str, Vec<u8>)> = names
            .iter()
            // The entry's parser never looks into section bytes: 2 KiB of each
            // keeps the seed small and the fuzzer fast.
            .filter_map(|n| {
                let mut b = sections.section(n)?.into_owned();
                b.truncate(2048);
                Some((*n, b))
            })
            .collect();
        let refs: Vec<(&str, &[u8])> = held.iter().map(|(n, b)| (*n, b.as_slice())).collect();
        let index = [(0x1000..0x2000, 0), (0x2000..0x2400, 0x40)];
        if let Ok(p) = disk.store(&key, &refs, &index) {
            seeds.push((format!("entry-{i}"), std::fs::read(p)?));
        }
    }
    Ok(seeds)
}

/// Answers entries the answers writer makes from each file's real source frames
/// and call sites (asked at its function symbols).
fn answers_entries(elfs: &[&PathBuf]) -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    let search = DebugSearch {
        dirs: Vec::new(),
        root: None,
    };
    for (i, path) in elfs.iter().enumerate() {
        let Ok(bytes) = std::fs::read(path) else {
            continue;
        };
        let md = ModuleDebug::load_cached(path, 0, &search, &DwarfCache::new());
        let mut answers = reader::debuginfo::answers::Answers::default();
        let Ok(elf) = goblin::elf::Elf::parse(&bytes) else {
            continue;
        };
        for s in elf
            .syms
            .iter()
            .filter(|s| s.is_function() && s.st_value != 0)
            .take(32)
        {
            answers.frames.insert(s.st_value, md.frames(s.st_value));
            answers
                .frames
                .insert(s.st_value + 4, md.frames(s.st_value + 4));
            let sites = md.call_site_params(s.st_value + 8, s.st_value + 13);
            answers
                .call_sites
                .insert((s.st_value + 8, s.st_value + 13), sites);
        }
        let entry = reader::debuginfo::answers::encode(&cache_key(), 0, None, &answers);
        seeds.push((format!("answers-{i}"), entry));
    }
    seeds
}

/// A hook record as an install writes it.
fn record(i: u64, base: u64, name: &str) -> HookRecord {
    HookRecord {
        state: if i % 3 == 2 {
            HookState::Ejected
        } else {
            HookState::Active
        },
        endbr64: i.is_multiple_of(2),
        function: 0x5555_0000_1130 + i * 0x40,
        function_size: 42 + i,
        patch_addr: 0x5555_0000_1134 + i * 0x40,
        original: vec![0x55, 0x48, 0x89, 0xe5, 0x53],
        layout_version: 1 + (i % 2) as u16,
        stack_words: (i % 4) as u16,
        xmm: i % 2 == 1,
        variadic: i == 3,
        trampoline: base + 0x1000 + i * 256,
        trampoline_len: 77,
        offsets: trampolines::x86_64::TrampolineOffsets {
            after_push_rbp: 5,
            after_mov_rbp: 8,
            after_call: 70,
            ret: 71,
        },
        relocated: base + 0x1000 + i * 256 + 0x60,
        relocated_len: 10,
        map: vec![(0, 0), (1, 1), (4, 4), (5, 5)],
        installed_ns: 1_700_000_000_000_000_000 + i,
        name: name.into(),
        module: "/opt/app/prog".into(),
    }
}

/// The header, records and signatures of an arena at `base` with `hooks` hooks.
fn arena_bytes(base: u64, capacity: u32, version: u32, hooks: &[&str]) -> Vec<u8> {
    let header = ArenaHeader::with_version(base, capacity, version);
    let mut bytes = vec![0u8; header.header_len()];
    bytes[..trampolines::arena::HEADER_LEN].copy_from_slice(&header.encode());
    for (i, name) in hooks.iter().enumerate() {
        let at = (header.record_addr(i as u32) - base) as usize;
        let rec = record(i as u64, base, name).encode().expect("valid record");
        bytes[at..at + rec.len()].copy_from_slice(&rec);
        if let Some(sig) = header.signature_addr(i as u32) {
            let at = (sig - base) as usize;
            let text = encode_signature("int n, const char *s").expect("short signature");
            bytes[at..at + text.len()].copy_from_slice(&text);
        }
    }
    bytes
}

fn arenas() -> Vec<(String, Vec<u8>)> {
    let base = 0x7f00_1000_0000;
    let mut seeds = Vec::new();
    for (i, (cap, version, hooks)) in [
        (4, 2, &["bar", "foo", "baz"][..]),
        (2, 1, &["bar"][..]),
        (8, 2, &["a", "b", "c", "d", "e"][..]),
    ]
    .into_iter()
    .enumerate()
    {
        let mut regions = BTreeMap::new();
        regions.insert(base, arena_bytes(base, cap, version, hooks));
        seeds.push((format!("arena-{i}"), Image::encode(&[], &regions)));
    }
    seeds
}

/// The arenas of a real core (of a hooked process), exactly as `discover` read them.
fn core_arenas(path: &Path) -> Option<Vec<u8>> {
    let core = reader::core::CoreFile::open(path, Default::default()).ok()?;
    let rec = Recording::new(&core);
    let arenas = reader::arena::discover(&core.maps(), &rec).ok()?;
    if arenas.is_empty() {
        return None;
    }
    Some(Image::encode(&[], &rec.regions(1 << 20)))
}

/// The unwind target's header for these registers (x86-64 DWARF numbering).
fn unwind_header(i386: bool, rip: u64, rsp: u64, rbp: u64) -> Vec<u64> {
    let mut words = vec![u64::from(i386)];
    let mut regs = [0u64; 17];
    regs[6] = rbp;
    regs[7] = rsp;
    regs[16] = rip;
    words.extend_from_slice(&regs);
    words
}

/// This process's own stack at a few depths, as the unwinder read it, with an arena.
fn own_stacks() -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    for depth in [0, 3, 9] {
        if let Some(seed) = record_own_stack(depth) {
            seeds.push((format!("stack-{depth}"), seed));
        }
    }
    if let Some(first) = seeds.first().map(|(_, s)| s.clone()) {
        // The same stack with an arena mapped next to it.
        let base = 0x7f00_1000_0000u64;
        let mut image = Image::decode(&first, crate::targets::UNWIND_WORDS);
        image
            .regions
            .insert(base, arena_bytes(base, 4, 2, &["bar", "foo"]));
        seeds.push((
            "stack-arena".into(),
            Image::encode(&image.words, &image.regions),
        ));
        // And read as an i386 thread.
        let mut words = image.words.clone();
        words[0] = 1;
        seeds.push(("stack-i386".into(), Image::encode(&words, &image.regions)));
    }
    seeds
}

#[inline(never)]
fn record_own_stack(depth: u32) -> Option<Vec<u8>> {
    if depth > 0 {
        let r = record_own_stack(depth - 1);
        return std::hint::black_box(r);
    }
    let (rip, rsp, rbp): (u64, u64, u64);
    // SAFETY: reads three registers into locals; touches no memory.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) rip,
            sp = out(reg) rsp,
            bp = out(reg) rbp,
        );
    }
    let live = LiveMemory::open(std::process::id() as i32).ok()?;
    let rec = Recording::new(&live);
    let mut regs = [None; 17];
    regs[6] = Some(rbp);
    regs[7] = Some(rsp);
    regs[16] = Some(rip);
    let pid = std::process::id() as i32;
    let maps = reader::procfs::read_maps(pid).ok()?;
    let symbols = reader::symbols::ProcessSymbols::load(pid, &maps).ok()?;
    let unwinder = reader::unwind::Unwinder::new(reader::unwind::Arch::X86_64, symbols, Vec::new());
    let (frames, _) = unwinder.walk(&regs, &rec);
    if frames.is_empty() {
        return None;
    }
    Some(Image::encode(
        &unwind_header(false, rip, rsp, rbp),
        &rec.regions(4096),
    ))
}

/// Runs `python` with a script that sleeps inside a call with arguments of many
/// types, reads its threads and frames as `bt` does, and keeps what was read.
fn python_seeds(python: &Path) -> io::Result<Vec<(String, Vec<u8>)>> {
    let script = "import time, sys\n\
        def leaf(n, s, f, b, t, l, d, none, flag, *rest, key=None, **kw):\n    \
            sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(600)\n\
        def middle(x):\n    return leaf(x, 'text \u{e9}', 2.5, b'\\x00bytes', (1, 'a'), [1], {'k': 1}, None, True, 7, 8, key='v', extra=-(1 << 70))\n\
        middle(42)\n";
    let mut child = std::process::Command::new(python)
        .args(["-c", script])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = io::BufRead::read_line(&mut io::BufReader::new(out), &mut line);
    }
    let pid = child.id() as i32;
    let seeds = record_python(pid);
    let _ = child.kill();
    let _ = child.wait();
    Ok(seeds.into_iter().collect())
}

fn record_python(pid: i32) -> Option<(String, Vec<u8>)> {
    let maps = reader::procfs::read_maps(pid).ok()?;
    let symbols = match reader::symbols::ProcessSymbols::load(pid, &maps) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("argstash-fuzz seed: no Python seed: {e}");
            return None;
        }
    };
    let live = LiveMemory::open(pid).ok()?;
    let interp = match reader::python::Interpreter::attach(&symbols, &live) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("argstash-fuzz seed: no Python seed: {e}");
            return None;
        }
    };
    let rec = Recording::new(&live);
    let walk = match interp.threads(&rec) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("argstash-fuzz seed: no Python seed: {e}");
            return None;
        }
    };
    let mut first = 0;
    for t in &walk.threads {
        if let Some(frame) = t.current_frame {
            first = if first == 0 { frame } else { first };
            let chain = interp.frames(&rec, frame, 64);
            for f in &chain.frames {
                std::hint::black_box(f);
            }
        }
    }
    let located = interp.located();
    let ty = located.types;
    let words = [
        located.runtime,
        first,
        ty.code,
        ty.int,
        ty.bool,
        ty.float,
        ty.str,
        ty.bytes,
        ty.tuple,
        ty.list,
        ty.dict,
        ty.cell,
        ty.none_type,
        ty.none,
        ty.true_obj,
        ty.false_obj,
    ];
    let regions = rec.regions(4096);
    if first == 0 || regions.is_empty() {
        eprintln!("argstash-fuzz seed: no Python seed: no thread runs Python code");
        return None;
    }
    Some(("python-3.11".into(), Image::encode(&words, &regions)))
}

/// Names and attributes as systemd-coredump 252 wrote them on this machine
/// (a root `sleep` killed by SIGSEGV; a crashed user program with a dot, a space
/// and a non-ASCII byte in its command name; an uncompressed one).
fn coredump_meta_seeds() -> Vec<(String, Vec<u8>)> {
    let attrs = |pid: &str, uid: &str, comm: &str, exe: &str| -> Vec<u8> {
        let mut b = Vec::new();
        for (k, v) in [
            ("user.coredump.pid", pid),
            ("user.coredump.uid", uid),
            ("user.coredump.gid", uid),
            ("user.coredump.comm", comm),
            ("user.coredump.exe", exe),
            ("user.coredump.rlimit", "9223372036854775808"),
            ("user.coredump.signal", "11"),
            ("user.coredump.hostname", "vm"),
            ("user.coredump.timestamp", "1795918376000000"),
        ] {
            b.extend_from_slice(k.as_bytes());
            b.push(0);
            b.extend_from_slice(v.as_bytes());
            b.push(0);
        }
        b
    };
    let seed = |name: &str, attrs: Vec<u8>| {
        let mut b = name.as_bytes().to_vec();
        b.push(b'\n');
        b.extend(attrs);
        b
    };
    vec![
        (
            "sleep-zst".to_string(),
            seed(
                "core.sleep.0.b98cbf3ea0bd48ee9b9873a22f3a2334.30015.1795918376000000.zst",
                attrs("30015", "0", "sleep", "/usr/bin/sleep"),
            ),
        ),
        (
            "escaped-lz4".to_string(),
            seed(
                "core.a.b\\x20c\\xc3\\xa9.1000.b98cbf3ea0bd48ee9b9873a22f3a2334.7.1795918376000000.lz4",
                attrs("7", "1000", "a.b c\u{e9}", "/home/u/a.b c"),
            ),
        ),
        (
            "plain".to_string(),
            seed(
                "core.crash.0.b98cbf3ea0bd48ee9b9873a22f3a2334.4242.1795918376123456",
                Vec::new(),
            ),
        ),
    ]
}

/// The first core seed (else a small ELF-like buffer) compressed in each format
/// systemd-coredump writes, by the encoders of the crates the reader decodes with.
fn coredump_stream_seeds(cores: &[PathBuf]) -> Vec<(String, Vec<u8>)> {
    use std::io::Write;
    let mut data = cores
        .first()
        .and_then(|p| std::fs::read(p).ok())
        .unwrap_or_else(|| b"\x7fELF core seed".repeat(64));
    data.truncate(1 << 20);
    let tagged = |tag: u8, body: Vec<u8>| {
        let mut b = vec![tag];
        b.extend(body);
        b
    };
    let zstd =
        ruzstd::encoding::compress_to_vec(&data[..], ruzstd::encoding::CompressionLevel::Fastest);
    let mut lz4 = lz4_flex::frame::FrameEncoder::new(Vec::new());
    lz4.write_all(&data).expect("lz4 into memory");
    let lz4 = lz4.finish().expect("lz4 into memory");
    let mut xz = Vec::new();
    lzma_rs::xz_compress(&mut &data[..], &mut xz).expect("xz into memory");
    vec![
        ("zstd".to_string(), tagged(0, zstd)),
        ("lz4".to_string(), tagged(1, lz4)),
        ("xz".to_string(), tagged(2, xz)),
        (
            "plain".to_string(),
            tagged(3, data[..4096.min(data.len())].to_vec()),
        ),
    ]
}
