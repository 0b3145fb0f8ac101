//! How fast a stored core decompresses (`bt --coredump` pays this before it reads
//! the core): zstd, LZ4 frame and xz streams of core-like bytes through
//! `reader::coredump::decompress`, median of 5 runs each, in MB/s of output.
//!
//! The input is real machine code and data: the files this benchmark has mapped
//! (its own executable, libc, ...), concatenated and repeated to 64 MiB, or the
//! file named by `ARGSTASH_BENCH_CORE` (e.g. a kernel core). It is compressed by
//! the `zstd`, `lz4` and `xz` tools (the C libraries systemd-coredump uses), or by
//! the Rust crates' encoders where a tool is missing.
//!
//! `cargo bench -p reader --bench coredump_decompress`

use std::io::Write;
use std::time::Instant;

use reader::coredump::{decompress, Compression, LimitReason};

const SIZE: usize = 64 << 20;

fn input() -> Vec<u8> {
    if let Some(p) = std::env::var_os("ARGSTASH_BENCH_CORE") {
        return std::fs::read(&p).expect("ARGSTASH_BENCH_CORE is readable");
    }
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    let mut files: Vec<&str> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.starts_with('/'))
        .collect();
    files.dedup();
    let mut data = Vec::with_capacity(SIZE);
    while data.len() < SIZE {
        for f in &files {
            data.extend(std::fs::read(f).unwrap_or_default());
        }
    }
    data.truncate(SIZE);
    data
}

/// `data` compressed by the command-line tool `tool` (the libraries systemd-coredump
/// links: libzstd, liblz4, liblzma), or `None` when it is not installed.
fn with_tool(tool: &str, args: &[&str], data: &[u8]) -> Option<Vec<u8>> {
    use std::process::{Command, Stdio};
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let input = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().ok()?;
    writer.join().ok()?.ok()?;
    out.status.success().then_some(out.stdout)
}

fn main() {
    let data = input();
    let zstd = with_tool("zstd", &["-c", "-3", "-q"], &data).unwrap_or_else(|| {
        ruzstd::encoding::compress_to_vec(&data[..], ruzstd::encoding::CompressionLevel::Fastest)
    });
    let lz4 = with_tool("lz4", &["-c", "-q"], &data).unwrap_or_else(|| {
        let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
        e.write_all(&data).unwrap();
        e.finish().unwrap()
    });
    let xz = with_tool("xz", &["-c", "-q"], &data).unwrap_or_else(|| {
        let mut xz = Vec::new();
        lzma_rs::xz_compress(&mut &data[..], &mut xz).unwrap();
        xz
    });
    println!(
        "input {} MiB ({}); compressed: zstd {} KiB, lz4 {} KiB, xz {} KiB",
        data.len() >> 20,
        if std::env::var_os("ARGSTASH_BENCH_CORE").is_some() {
            "ARGSTASH_BENCH_CORE"
        } else {
            "mapped files"
        },
        zstd.len() >> 10,
        lz4.len() >> 10,
        xz.len() >> 10
    );
    for (name, format, packed) in [
        ("zstd", Compression::Zstd, &zstd),
        ("lz4", Compression::Lz4, &lz4),
        ("xz", Compression::Xz, &xz),
    ] {
        let mut times = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            let n = decompress(
                &packed[..],
                format,
                std::io::sink(),
                u64::MAX,
                LimitReason::Caller,
            )
            .expect("decompresses");
            times.push(t.elapsed().as_secs_f64());
            assert_eq!(n as usize, data.len());
        }
        times.sort_by(f64::total_cmp);
        let median = times[2];
        println!(
            "{name:5} median {:7.1} ms  {:7.1} MB/s (min {:.1} ms, max {:.1} ms)",
            median * 1e3,
            data.len() as f64 / median / 1e6,
            times[0] * 1e3,
            times[4] * 1e3
        );
    }
}
