//! Streaming decompression of a stored core, with a bound on what it may write.
//!
//! systemd-coredump compresses a core as one stream (zstd, LZ4 frame, or xz) whose
//! header need not state the decompressed size, so the output is counted as it is
//! written and the copy stops, with [`DecompressProblem::TooLarge`], at the bound:
//! a corrupt or hostile file cannot fill the disk or memory it is written to.

use super::name::Compression;
use std::io::{self, BufReader, Read, Write};

/// systemd-coredump's own ceiling on what it stores: `ExternalSizeMax=` and
/// `ProcessSizeMax=` cannot be raised past 32 GiB on 64-bit machines, so no core it
/// stored decompresses to more.
pub const SYSTEMD_MAX_CORE: u64 = 32 << 30;

/// Most memory the xz decoder may take for its dictionary, in KiB: 256 MiB, four
/// times what `xz -9` (64 MiB dictionary) needs; a stream asking for more is refused.
const XZ_MEMORY_KIB: u32 = 256 * 1024;

/// Why a stored core could not be decompressed.
#[derive(Debug, thiserror::Error)]
pub enum DecompressProblem {
    /// The stream is not valid in its format (damaged, cut short, or not that format).
    #[error("the {format} stream is corrupt: {detail}")]
    Corrupt {
        /// The format.
        format: &'static str,
        /// The decoder's words.
        detail: String,
    },
    /// It decompresses to more than the bound.
    #[error("it decompresses to more than {limit} bytes ({why})")]
    TooLarge {
        /// The bound.
        limit: u64,
        /// Where the bound comes from.
        why: LimitReason,
    },
    /// Writing the decompressed bytes failed.
    #[error("writing the decompressed core failed: {0}")]
    Write(io::Error),
    /// Reading the compressed file failed.
    #[error("reading it failed: {0}")]
    Read(io::Error),
}

/// Where a decompression bound comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitReason {
    /// systemd-coredump never stores a larger core ([`SYSTEMD_MAX_CORE`]).
    SystemdMaximum,
    /// The free space where the decompressed core is written.
    FreeSpace,
    /// A bound the caller chose.
    Caller,
}

impl std::fmt::Display for LimitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LimitReason::SystemdMaximum => {
                "no core systemd-coredump stores is larger: its size limits stop at 32 GiB"
            }
            LimitReason::FreeSpace => "the free space of the temporary directory",
            LimitReason::Caller => "the bound given",
        })
    }
}

/// A writer that refuses to take more than `limit` bytes in all.
struct Bounded<W> {
    inner: W,
    written: u64,
    limit: u64,
    over: bool,
}

impl<W: Write> Write for Bounded<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.written.saturating_add(buf.len() as u64) > self.limit {
            self.over = true;
            return Err(io::Error::other("decompression bound reached"));
        }
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A reader that remembers whether the file itself failed, so a read error is not
/// reported as corruption.
struct Tracked<R> {
    inner: R,
    failed: Option<io::ErrorKind>,
}

impl<R: Read> Read for Tracked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).inspect_err(|e| {
            self.failed = Some(e.kind());
        })
    }
}

/// Decompresses `src` (in `format`) into `dst`, writing at most `limit` bytes
/// (`why` says where the bound comes from); returns the number of bytes written.
pub fn decompress<R: Read, W: Write>(
    src: R,
    format: Compression,
    dst: W,
    limit: u64,
    why: LimitReason,
) -> Result<u64, DecompressProblem> {
    let mut out = Bounded {
        inner: dst,
        written: 0,
        limit,
        over: false,
    };
    let mut src = Tracked {
        inner: BufReader::with_capacity(1 << 16, src),
        failed: None,
    };
    let name = format.name();
    let result: Result<(), String> = match format {
        Compression::None => io::copy(&mut src, &mut out)
            .map(drop)
            .map_err(|e| e.to_string()),
        // libzstd, as systemd-coredump itself links; its decoder refuses windows
        // over 128 MiB (ZSTD_WINDOWLOG_LIMIT_DEFAULT), which bounds its memory.
        Compression::Zstd => match zstd::stream::read::Decoder::new(&mut src) {
            Ok(mut d) => io::copy(&mut d, &mut out)
                .map(drop)
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        },
        Compression::Lz4 => {
            let mut d = lz4_flex::frame::FrameDecoder::new(&mut src);
            io::copy(&mut d, &mut out)
                .map(drop)
                .map_err(|e| e.to_string())
        }
        Compression::Xz => {
            // Streams with a bounded dictionary (lzma-rs's xz decoder keeps its
            // whole output in memory until the stream ends).
            let mut d = lzma_rust2::XzReader::new_mem_limit(&mut src, true, XZ_MEMORY_KIB);
            io::copy(&mut d, &mut out)
                .map(drop)
                .map_err(|e| e.to_string())
        }
    };
    if out.over {
        return Err(DecompressProblem::TooLarge { limit, why });
    }
    if let Some(kind) = src.failed {
        return Err(DecompressProblem::Read(io::Error::from(kind)));
    }
    if let Err(detail) = result {
        return Err(DecompressProblem::Corrupt {
            format: name,
            detail,
        });
    }
    out.flush().map_err(DecompressProblem::Write)?;
    Ok(out.written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xz(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        lzma_rs::xz_compress(&mut &data[..], &mut out).unwrap();
        out
    }

    #[test]
    fn round_trips_and_bounds() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let packed = xz(&data);
        let mut out = Vec::new();
        let n = decompress(
            &packed[..],
            Compression::Xz,
            &mut out,
            1 << 20,
            LimitReason::Caller,
        )
        .unwrap();
        assert_eq!(n, data.len() as u64);
        assert_eq!(out, data);

        let lz4 = lz4_flex::frame::FrameEncoder::new(Vec::new());
        let mut lz4 = lz4;
        lz4.write_all(&data).unwrap();
        let lz4 = lz4.finish().unwrap();
        let mut out = Vec::new();
        decompress(
            &lz4[..],
            Compression::Lz4,
            &mut out,
            1 << 20,
            LimitReason::Caller,
        )
        .unwrap();
        assert_eq!(out, data);

        let mut out = Vec::new();
        match decompress(
            &packed[..],
            Compression::Xz,
            &mut out,
            1000,
            LimitReason::Caller,
        ) {
            Err(DecompressProblem::TooLarge { limit: 1000, .. }) => {}
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert!(out.len() <= 1000);
    }

    #[test]
    fn corrupt_streams_are_named() {
        for format in [Compression::Zstd, Compression::Lz4, Compression::Xz] {
            let mut out = Vec::new();
            match decompress(
                &b"definitely not compressed"[..],
                format,
                &mut out,
                1 << 20,
                LimitReason::Caller,
            ) {
                Err(DecompressProblem::Corrupt { format: f, .. }) => assert_eq!(f, format.name()),
                other => panic!("{format:?}: expected Corrupt, got {other:?}"),
            }
        }
    }
}
