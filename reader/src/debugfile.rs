//! Module files on disk and their separate debug files: a section table read
//! without trusting the file, and the search for the debug file that belongs to
//! a module.
//!
//! Debug info is looked for the way distributions ship it, in gdb's order: the
//! module's own sections; `DIR/.build-id/xx/rest.debug` under each debug
//! directory; the `.gnu_debuglink` name next to the module, in its `.debug/`
//! directory and under each debug directory. A separate file is trusted only when
//! its build-id (or, without build-ids, the debuglink CRC) matches the module; a
//! mismatch is reported as a warning and the file ignored.
//!
//! A leaf: [`crate::symbols`] (a stripped module's names from its debug file) and
//! [`crate::debuginfo`] (DWARF) both build on it.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;

use crate::dwarf::SharedBytes;

/// The directory distributions install separate debug files under.
pub const DEFAULT_DEBUG_DIR: &str = "/usr/lib/debug";

/// Largest decompressed section or MiniDebugInfo image accepted (hostile input guard).
pub(crate) const MAX_DECOMPRESSED: usize = 1 << 30;

/// Why debug info could not be read.
#[derive(Debug, Error)]
pub enum DebugInfoError {
    /// A file could not be opened or mapped.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A file is not a usable ELF file.
    #[error("{path} is not a usable ELF file: {msg}")]
    Elf {
        /// The file.
        path: String,
        /// What is wrong.
        msg: String,
    },
    /// The DWARF data is malformed.
    #[error("malformed DWARF in {path}: {source}")]
    Dwarf {
        /// The file.
        path: String,
        /// The parser's error.
        source: gimli::Error,
    },
}

/// Where a module's DWARF came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DebugSource {
    /// The module file itself.
    Embedded,
    /// A separate file found by build-id.
    BuildId(PathBuf),
    /// A separate file found by `.gnu_debuglink`.
    DebugLink(PathBuf),
}

/// Where to look for separate debug files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugSearch {
    /// Global debug directories, searched in order (default: `/usr/lib/debug`).
    pub dirs: Vec<PathBuf>,
    /// The directory the module files lie under when they are another root's (a
    /// core's `--sysroot`): that root's copy of each of `dirs` is searched before
    /// `dirs` themselves, and a `.gnu_debuglink` name is looked for by the module's
    /// path within the root. A file found either way must still match the module.
    pub root: Option<PathBuf>,
}

impl DebugSearch {
    /// The directories searched, in order: the root's copies of `dirs` first.
    pub fn all_dirs(&self) -> Vec<PathBuf> {
        let Some(root) = &self.root else {
            return self.dirs.clone();
        };
        self.dirs
            .iter()
            .map(|d| root.join(d.strip_prefix("/").unwrap_or(d)))
            .chain(self.dirs.iter().cloned())
            .collect()
    }

    /// This search for modules under `root` (see [`DebugSearch::root`]); unchanged
    /// when `root` is `None` or a root is already set.
    pub fn under(&self, root: Option<&Path>) -> DebugSearch {
        let mut s = self.clone();
        if s.root.is_none() {
            s.root = root.map(Path::to_path_buf);
        }
        s
    }
}

impl Default for DebugSearch {
    fn default() -> Self {
        DebugSearch {
            dirs: vec![PathBuf::from(DEFAULT_DEBUG_DIR)],
            root: None,
        }
    }
}

/// The bytes of a file: mapped from disk or decompressed in memory.
enum Bytes {
    Mapped(Arc<memmap2::Mmap>),
    Owned(Vec<u8>),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// A range of a shared file mapping, as bytes.
struct MapRange {
    map: Arc<memmap2::Mmap>,
    range: std::ops::Range<usize>,
}

impl std::ops::Deref for MapRange {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.map[self.range.clone()]
    }
}

/// One section header, reduced to what is needed here.
#[derive(Debug, Clone)]
pub(crate) struct SectionHeader {
    pub(crate) name: String,
    pub(crate) kind: u32,
    pub(crate) flags: u64,
    pub(crate) offset: u64,
    pub(crate) size: u64,
    pub(crate) link: u32,
}

const SHT_NOBITS: u32 = 8;
pub(crate) const SHT_SYMTAB: u32 = 2;
const SHF_COMPRESSED: u64 = 0x800;
const ELFCOMPRESS_ZLIB: u32 = 1;

/// A little-endian ELF file's section table (64-bit, or 32-bit for i386), parsed
/// without trusting it.
pub struct ElfSections {
    pub(crate) path: String,
    bytes: Bytes,
    pub(crate) sections: Vec<SectionHeader>,
    /// ELFCLASS32: 32-bit headers, section headers, symbols and compression headers.
    pub(crate) class32: bool,
}

fn le_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The NUL-terminated UTF-8 string at `at` of `b` (a string table), if it is
/// in bounds, terminated and UTF-8.
pub(crate) fn c_string(b: &[u8], at: usize) -> Option<&str> {
    let rest = b.get(at..)?;
    let end = rest.iter().position(|&c| c == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

impl ElfSections {
    /// Maps and parses the file at `path`.
    pub fn open(path: &Path) -> Result<ElfSections, DebugInfoError> {
        let shown = path.display().to_string();
        let io = |source| DebugInfoError::Io {
            path: shown.clone(),
            source,
        };
        let file = crate::shared_file::open_regular(path).map_err(io)?;
        // SAFETY: read-only private mapping that is never written through. Another
        // process truncating the file meanwhile could raise SIGBUS; debug files and
        // binaries are replaced by rename, the risk every debugger accepts.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        ElfSections::parse(shown, Bytes::Mapped(Arc::new(map)))
    }

    pub(crate) fn from_vec(path: String, bytes: Vec<u8>) -> Result<ElfSections, DebugInfoError> {
        ElfSections::parse(path, Bytes::Owned(bytes))
    }

    fn parse(path: String, bytes: Bytes) -> Result<ElfSections, DebugInfoError> {
        let bad = |msg: &str| DebugInfoError::Elf {
            path: path.clone(),
            msg: msg.to_string(),
        };
        let b = bytes.as_slice();
        if b.get(..4) != Some(b"\x7fELF".as_slice()) {
            return Err(bad("no ELF header"));
        }
        let class32 = match (b.get(4), b.get(5)) {
            (Some(2), Some(1)) => false,
            (Some(1), Some(1)) => true,
            _ => return Err(bad("not a 64-bit or 32-bit little-endian ELF file")),
        };
        // Header fields: (e_shoff, e_shentsize) and the size of one section header.
        let (shoff, at_shentsize, min_shentsize) = if class32 {
            (le_u32(b, 0x20).map(u64::from), 0x2e, 40)
        } else {
            (le_u64(b, 0x28), 0x3a, 64)
        };
        let shoff = shoff.ok_or_else(|| bad("truncated header"))?;
        let field = |at: usize| le_u16(b, at).ok_or_else(|| bad("truncated header"));
        let shentsize = field(at_shentsize)? as u64;
        let shnum = field(at_shentsize + 2)? as u64;
        let shstrndx = field(at_shentsize + 4)? as u64;
        if shnum == 0 {
            return Ok(ElfSections {
                path,
                bytes,
                sections: Vec::new(),
                class32,
            });
        }
        if shentsize < min_shentsize {
            return Err(bad("section header size"));
        }
        let header = |i: u64| -> Option<&[u8]> {
            let at = usize::try_from(shoff.checked_add(i.checked_mul(shentsize)?)?).ok()?;
            b.get(at..at.checked_add(min_shentsize as usize)?)
        };
        let mut raw = Vec::with_capacity(shnum as usize);
        for i in 0..shnum {
            let h = header(i).ok_or_else(|| bad("section headers past the end of the file"))?;
            let word32 = |at| le_u32(h, at).map(u64::from).unwrap_or(0);
            let (flags, offset, size, link) = if class32 {
                (word32(8), word32(16), word32(20), le_u32(h, 24))
            } else {
                (
                    le_u64(h, 8).unwrap_or(0),
                    le_u64(h, 24).unwrap_or(0),
                    le_u64(h, 32).unwrap_or(0),
                    le_u32(h, 40),
                )
            };
            raw.push((
                le_u32(h, 0).unwrap_or(0),
                SectionHeader {
                    name: String::new(),
                    kind: le_u32(h, 4).unwrap_or(0),
                    flags,
                    offset,
                    size,
                    link: link.unwrap_or(0),
                },
            ));
        }
        let strtab = raw.get(shstrndx as usize).map(|(_, s)| (s.offset, s.size));
        let sections = raw
            .into_iter()
            .map(|(name_off, mut s)| {
                if let Some((off, size)) = strtab {
                    if u64::from(name_off) < size {
                        let at = off.saturating_add(u64::from(name_off));
                        s.name = usize::try_from(at)
                            .ok()
                            .and_then(|at| c_string(b, at))
                            .unwrap_or("")
                            .to_string();
                    }
                }
                s
            })
            .collect();
        Ok(ElfSections {
            path,
            bytes,
            sections,
            class32,
        })
    }

    pub(crate) fn raw(&self, s: &SectionHeader) -> Option<&[u8]> {
        if s.kind == SHT_NOBITS {
            return None;
        }
        let start = usize::try_from(s.offset).ok()?;
        let end = start.checked_add(usize::try_from(s.size).ok()?)?;
        self.bytes.as_slice().get(start..end)
    }

    pub(crate) fn header(&self, name: &str) -> Option<&SectionHeader> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// True when the file has a section `name` with contents.
    pub fn has(&self, name: &str) -> bool {
        self.header(name)
            .is_some_and(|s| s.kind != SHT_NOBITS && s.size > 0)
    }

    /// The contents of section `name`, decompressed if it is `SHF_COMPRESSED` (zlib).
    pub fn section(&self, name: &str) -> Option<Cow<'_, [u8]>> {
        let s = self.header(name)?;
        let data = self.raw(s)?;
        if s.flags & SHF_COMPRESSED == 0 {
            return Some(Cow::Borrowed(data));
        }
        self.section_shared(name).map(|a| Cow::Owned(a.to_vec()))
    }

    /// Like [`Self::section`], as one shared buffer (compressed sections are
    /// inflated straight into it, without another copy).
    pub fn section_shared(&self, name: &str) -> Option<Arc<[u8]>> {
        let s = self.header(name)?;
        let data = self.raw(s)?;
        if s.flags & SHF_COMPRESSED == 0 {
            return Some(Arc::from(data));
        }
        // The header gives the exact size: inflate into it in one go (no
        // regrowth, no zeroing first). zlib-rs inflates about twice as fast as
        // miniz_oxide, and a cold `bt` spends a third of its time here when
        // libc's debug file is installed.
        let (size, _) = self.compressed(data)?;
        let out = self.section_prefix(name, size)?;
        (out.len() == size).then_some(out)
    }

    /// Like [`Self::section_shared`], without copying an uncompressed section
    /// of a mapped file: the bytes are read in place from the mapping.
    pub fn section_bytes(&self, name: &str) -> Option<SharedBytes> {
        let s = self.header(name)?;
        match &self.bytes {
            Bytes::Mapped(map) if s.flags & SHF_COMPRESSED == 0 => {
                self.raw(s)?;
                let start = usize::try_from(s.offset).ok()?;
                let end = start.checked_add(usize::try_from(s.size).ok()?)?;
                Some(SharedBytes::new(MapRange {
                    map: map.clone(),
                    range: start..end,
                }))
            }
            _ => self.section_shared(name).map(SharedBytes::from),
        }
    }

    /// True when section `name` is present and `SHF_COMPRESSED`.
    pub fn is_compressed(&self, name: &str) -> bool {
        self.header(name)
            .is_some_and(|s| s.kind != SHT_NOBITS && s.flags & SHF_COMPRESSED != 0)
    }

    /// The inflated size and the zlib stream of a compressed section's bytes
    /// (`Elf64_Chdr`: type, reserved, size, alignment; `Elf32_Chdr`: type, size,
    /// alignment); `None` for another compression or a size over the bound.
    fn compressed<'d>(&self, data: &'d [u8]) -> Option<(usize, &'d [u8])> {
        if le_u32(data, 0)? != ELFCOMPRESS_ZLIB {
            return None;
        }
        let (size, payload) = if self.class32 {
            (u64::from(le_u32(data, 4)?), 12)
        } else {
            (le_u64(data, 8)?, 24)
        };
        let size = usize::try_from(size).ok()?;
        let stream = data.get(payload..)?;
        plausible_inflated_size(size, stream.len()).then_some((size, stream))
    }

    /// The first `len` bytes of section `name` (all of it when shorter), inflating
    /// only as far as needed when it is compressed; `None` when missing or unreadable.
    pub(crate) fn section_prefix(&self, name: &str, len: usize) -> Option<Arc<[u8]>> {
        let s = self.header(name)?;
        let data = self.raw(s)?;
        if s.flags & SHF_COMPRESSED == 0 {
            return Some(Arc::from(data.get(..len.min(data.len()))?));
        }
        let (size, payload) = self.compressed(data)?;
        let want = len.min(size);
        let input = payload;
        // Inflated straight into uninitialised memory (zeroing megabytes first
        // cost a fifth of the time), and only as far as asked.
        let mut out: Arc<[std::mem::MaybeUninit<u8>]> = Arc::new_uninit_slice(want);
        let buf = Arc::get_mut(&mut out)?;
        let mut inflater = zlib_rs::Inflate::new(true, 15);
        loop {
            let (done_in, done_out) = (inflater.total_in(), inflater.total_out());
            let written = usize::try_from(done_out).ok()?;
            if written >= want {
                break;
            }
            let status = inflater
                .decompress_uninit(
                    input.get(usize::try_from(done_in).ok()?..)?,
                    buf.get_mut(written..)?,
                    zlib_rs::InflateFlush::NoFlush,
                )
                .ok()?;
            let progressed = inflater.total_in() != done_in || inflater.total_out() != done_out;
            if matches!(status, zlib_rs::Status::StreamEnd) || !progressed {
                break;
            }
        }
        if inflater.total_out() != want as u64 {
            return None;
        }
        // SAFETY: the inflater wrote `want` bytes contiguously from the start of
        // the buffer (`total_out` counts them), i.e. every byte is initialised.
        Some(unsafe { out.assume_init() })
    }

    /// The uncompressed size of section `name`.
    pub(crate) fn section_size(&self, name: &str) -> Option<usize> {
        let s = self.header(name)?;
        if s.flags & SHF_COMPRESSED == 0 {
            return usize::try_from(s.size).ok();
        }
        let data = self.raw(s)?;
        let size = if self.class32 {
            u64::from(le_u32(data, 4)?)
        } else {
            le_u64(data, 8)?
        };
        usize::try_from(size).ok()
    }

    /// The GNU build-id note (`.note.gnu.build-id`), if any.
    pub fn build_id(&self) -> Option<Vec<u8>> {
        let note = self.section(".note.gnu.build-id")?;
        // namesz, descsz, type, "GNU\0", desc.
        let namesz = le_u32(&note, 0)? as usize;
        let descsz = le_u32(&note, 4)? as usize;
        if le_u32(&note, 8)? != 3 {
            return None;
        }
        let desc = 12 + namesz.div_ceil(4) * 4;
        note.get(desc..desc.checked_add(descsz)?)
            .map(<[u8]>::to_vec)
    }

    /// The `.gnu_debuglink` file name and CRC, if any.
    pub fn debuglink(&self) -> Option<(String, u32)> {
        let link = self.section(".gnu_debuglink")?;
        let name = c_string(&link, 0)?.to_string();
        let crc_at = (name.len() + 1).div_ceil(4) * 4;
        Some((name, le_u32(&link, crc_at)?))
    }

    /// Function symbols of `.symtab` as `(name, svma, size, local)`.
    pub(crate) fn function_symbols(&self) -> Vec<(String, u64, u64, bool)> {
        let Some(symtab) = self.sections.iter().find(|s| s.kind == SHT_SYMTAB) else {
            return Vec::new();
        };
        let (Some(syms), Some(strs)) = (
            self.raw(symtab),
            self.sections
                .get(symtab.link as usize)
                .and_then(|s| self.raw(s)),
        ) else {
            return Vec::new();
        };
        // Elf64_Sym: name, info, other, shndx, value, size; Elf32_Sym: name, value,
        // size, info, other, shndx.
        let entry_size = if self.class32 { 16 } else { 24 };
        syms.chunks_exact(entry_size)
            .filter_map(|e| {
                let (info, shndx, value, size) = if self.class32 {
                    (
                        e[12],
                        le_u16(e, 14)?,
                        u64::from(le_u32(e, 4)?),
                        u64::from(le_u32(e, 8)?),
                    )
                } else {
                    (e[4], le_u16(e, 6)?, le_u64(e, 8)?, le_u64(e, 16)?)
                };
                if info & 0xf != 2 || shndx == 0 || value == 0 {
                    return None;
                }
                let name = c_string(strs, le_u32(e, 0)? as usize)?;
                Some((name.to_string(), value, size, info >> 4 == 0))
            })
            .collect()
    }

    /// CRC-32 of the whole file, as `.gnu_debuglink` records it.
    pub(crate) fn crc32(&self) -> u32 {
        crc32(self.bytes.as_slice())
    }
}

/// The CRC-32 (IEEE, reflected) that `.gnu_debuglink` uses.
pub(crate) fn crc32(data: &[u8]) -> u32 {
    let mut table = [0u32; 256];
    for (i, slot) in table.iter_mut().enumerate() {
        let mut c = i as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        *slot = c;
    }
    let mut crc = !0u32;
    for &b in data {
        crc = table[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The candidate separate debug files of a module, in gdb's search order.
pub(crate) fn candidates(
    module_path: &Path,
    build_id: Option<&[u8]>,
    debuglink: Option<&str>,
    search: &DebugSearch,
) -> Vec<(PathBuf, bool)> {
    let mut out = Vec::new();
    let dirs = search.all_dirs();
    if let Some(id) = build_id.filter(|id| id.len() >= 2) {
        let h = hex(id);
        for dir in &dirs {
            out.push((
                dir.join(".build-id")
                    .join(&h[..2])
                    .join(format!("{}.debug", &h[2..])),
                true,
            ));
        }
    }
    if let Some(link) = debuglink {
        let dir = module_path.parent().unwrap_or(Path::new("/"));
        out.push((dir.join(link), false));
        out.push((dir.join(".debug").join(link), false));
        // The module's directory as its own root sees it.
        let inside = search
            .root
            .as_deref()
            .and_then(|root| dir.strip_prefix(root).ok())
            .unwrap_or(dir);
        let rel = inside.strip_prefix("/").unwrap_or(inside);
        for root in &dirs {
            out.push((root.join(rel).join(link), false));
        }
    }
    out.retain(|(p, _)| p != module_path);
    out
}

/// The separate debug files of `module` (the file at `path`) that exist and belong
/// to it, in gdb's search order, opened lazily; files of another build are skipped
/// with a warning.
pub(crate) fn separate_files<'a>(
    module: &'a ElfSections,
    path: &'a Path,
    search: &DebugSearch,
    warnings: &'a mut Vec<String>,
) -> impl Iterator<Item = (ElfSections, DebugSource)> + 'a {
    let build_id = module.build_id();
    let link = module.debuglink();
    let found = candidates(
        path,
        build_id.as_deref(),
        link.as_ref().map(|(n, _)| n.as_str()),
        search,
    );
    found.into_iter().filter_map(move |(candidate, by_id)| {
        if !candidate.is_file() {
            return None;
        }
        let file = match ElfSections::open(&candidate) {
            Ok(f) => f,
            Err(e) => {
                warnings.push(format!("ignoring debug file: {e}"));
                return None;
            }
        };
        if let Some(why) = mismatch(module, &file, build_id.as_deref(), link.as_ref()) {
            warnings.push(format!(
                "ignoring {}: {why}; it belongs to another build of {} \
                 (install the matching debug package or remove the stale file)",
                candidate.display(),
                path.display()
            ));
            return None;
        }
        let source = if by_id {
            DebugSource::BuildId(candidate)
        } else {
            DebugSource::DebugLink(candidate)
        };
        Some((file, source))
    })
}

/// Why `file` is not the debug file of `module`, if it is not.
fn mismatch(
    module: &ElfSections,
    file: &ElfSections,
    build_id: Option<&[u8]>,
    link: Option<&(String, u32)>,
) -> Option<String> {
    match (build_id, file.build_id()) {
        (Some(want), Some(got)) if want != got.as_slice() => Some(format!(
            "its build-id {} does not match {}",
            hex(&got),
            hex(want)
        )),
        (Some(_), Some(_)) => None,
        (Some(want), None) => Some(format!("it has no build-id, expected {}", hex(want))),
        (None, _) => match link {
            Some((_, crc)) if file.crc32() != *crc => Some(format!(
                "its CRC {:08x} does not match the debuglink CRC {crc:08x} of {}",
                file.crc32(),
                module.path
            )),
            Some(_) => None,
            None => {
                Some("the module has neither build-id nor debuglink to check it against".into())
            }
        },
    }
}

/// Most bytes deflate can give per compressed byte: its longest match (258
/// bytes) costs at least two bits.
const MAX_INFLATE_RATIO: usize = 1032;

/// True when a compressed section's stated size is one its `stream_len` bytes
/// of zlib stream can inflate to: within [`MAX_DECOMPRESSED`] and deflate's
/// ratio. The buffer is allocated at the stated size before inflating, so a
/// small hostile file claiming gigabytes must not get that far.
fn plausible_inflated_size(size: usize, stream_len: usize) -> bool {
    size <= MAX_DECOMPRESSED && size <= stream_len.saturating_mul(MAX_INFLATE_RATIO)
}

/// A byte sink that refuses to grow past [`MAX_DECOMPRESSED`].
pub(crate) struct BoundedSink(pub(crate) Vec<u8>);

impl std::io::Write for BoundedSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_DECOMPRESSED {
            return Err(std::io::Error::other("decompressed data too large"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compressed_sections_size_must_be_one_its_stream_can_inflate_to() {
        // Found by the fuzzer (elf, dwarf): a 20 KiB file whose section header
        // claimed 900 MB made the reader allocate that much before inflating.
        assert!(plausible_inflated_size(1032 * 100, 100));
        assert!(!plausible_inflated_size(1032 * 100 + 1, 100));
        assert!(!plausible_inflated_size(922_747_784, 20_000));
        assert!(!plausible_inflated_size(MAX_DECOMPRESSED + 1, usize::MAX));
        assert!(plausible_inflated_size(0, 0));
    }
}
