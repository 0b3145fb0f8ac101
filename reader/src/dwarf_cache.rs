//! A per-user on-disk cache of inflated DWARF: what a cold `bt` would otherwise
//! redo on every run when a module's debug file is compressed (libc's, from
//! libc6-dbg, holds 10 MB of DWARF behind 4 MB of zlib).
//!
//! One entry per debug file, named by its build-id, holds the inflated DWARF
//! sections and the address index of its units (which unit covers which
//! addresses). A hit maps the entry and reads the sections in place: no
//! inflating, no copying, and no pass over every unit.
//!
//! An entry is never trusted blindly: its header (magic, version, the debug
//! file's build-id, size and modification time, the lengths of everything, the
//! unit index) is covered by a CRC-32, every range must lie inside the file, and
//! the file must be exactly as long as the header says. Anything else is a miss,
//! and the entry is rebuilt. The section bytes themselves are not checksummed:
//! hashing 10 MB would cost what the cache saves; a damaged byte there reads as
//! malformed DWARF would from a damaged debug file.
//!
//! Writers never modify an entry in place: each writes a temporary file in the
//! same directory and renames it over the entry, so concurrent writers race
//! harmlessly (the last rename wins, every version is whole) and a reader's
//! mapping stays valid. The directory is bounded in total size: after a write,
//! the least recently used entries are removed until it fits.
//!
//! Where: `$XDG_CACHE_HOME/argstash`, else `$HOME/.cache/argstash`;
//! `ARGSTASH_CACHE=off` turns it off.

use std::fs::{self, File};
use std::io::Write;
use std::ops::{Deref, Range};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use thiserror::Error;

use crate::debugfile::crc32;
use crate::dwarf::SharedBytes;

/// Default bound on the cache directory's total size.
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;

/// The environment variable that turns the cache off (`off`, `0`, `no`, `false`).
pub const CACHE_ENV: &str = "ARGSTASH_CACHE";

const MAGIC: &[u8; 8] = b"ARGSTDWC";
const VERSION: u32 = 1;
const SUFFIX: &str = ".dwarf";
const TMP_SUFFIX: &str = ".tmp";
/// Suffix of the symbolization answers saved beside the DWARF entries
/// ([`crate::debuginfo::answers`]): the cache bounds and evicts both kinds.
pub(crate) const ANSWERS_SUFFIX: &str = ".answers";
/// Bytes of the fixed part of the header.
const FIXED: usize = 120;
const MAX_BUILD_ID: usize = 64;
const NAME_LEN: usize = 24;
/// Bytes of one section record: name, offset, length.
const SECTION_REC: usize = NAME_LEN + 16;
/// Bytes of one index record: start, end, unit offset.
const INDEX_REC: usize = 24;
const MAX_SECTIONS: usize = 64;
/// A writer's temporary file older than this is taken as left by a crash.
const STALE_TMP: Duration = Duration::from_secs(600);
/// A hit refreshes the entry's age for eviction at most this often.
const TOUCH_EVERY: Duration = Duration::from_secs(60);

/// What identifies the debug file an entry was built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryKey {
    /// The file's GNU build-id (names the entry).
    pub build_id: Vec<u8>,
    /// The file's size in bytes.
    pub size: u64,
    /// The file's modification time, in nanoseconds since the epoch.
    pub mtime_ns: i64,
}

impl EntryKey {
    /// The key of the file at `path` with build-id `build_id`; `None` when the
    /// file cannot be examined or the build-id is unusable.
    pub fn of_file(path: &Path, build_id: Vec<u8>) -> Option<EntryKey> {
        use std::os::unix::fs::MetadataExt;
        if build_id.is_empty() || build_id.len() > MAX_BUILD_ID {
            return None;
        }
        let m = fs::metadata(path).ok()?;
        Some(EntryKey {
            build_id,
            size: m.size(),
            mtime_ns: m.mtime().saturating_mul(1_000_000_000) + m.mtime_nsec(),
        })
    }

    fn file_name(&self) -> String {
        self.file_name_with(SUFFIX)
    }

    /// The name of this key's entry of a kind: its build-id in hex, then `suffix`.
    pub(crate) fn file_name_with(&self, suffix: &str) -> String {
        let hex: String = self.build_id.iter().map(|b| format!("{b:02x}")).collect();
        format!("{hex}{suffix}")
    }
}

/// Why an entry was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// There is no entry for the build-id.
    Absent,
    /// The entry was built from another file with that build-id (size or
    /// modification time differ), or by another version of argstash.
    Stale,
    /// The entry is damaged: truncated, bad checksum, ranges out of bounds.
    Corrupt,
}

/// Why an entry could not be written.
#[derive(Debug, Error)]
pub enum StoreError {
    /// Creating, writing or renaming the file failed.
    #[error("cannot write the DWARF cache entry {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The entry would not fit the rules (too big for the bound, too many sections).
    #[error("DWARF cache entry not written: {0}")]
    Refused(RefusedReason),
}

/// Why an entry was refused before writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedReason {
    /// It is larger than the whole cache may be.
    TooLarge,
    /// A section name is too long, or there are too many sections.
    BadSections,
    /// The build-id is empty or too long.
    BadKey,
    /// The cache directory is not ours alone (a link, another owner, or writable
    /// by others): entries are neither trusted nor written there.
    SharedDirectory,
}

impl std::fmt::Display for RefusedReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RefusedReason::TooLarge => "larger than the cache's size bound",
            RefusedReason::BadSections => "unsupported section table",
            RefusedReason::BadKey => "unusable build-id",
            RefusedReason::SharedDirectory => {
                "the cache directory is not private (owned by this user, mode 0700)"
            }
        })
    }
}

/// One unit's address range: `(svma range, offset of the unit in .debug_info)`.
pub type IndexEntry = (Range<u64>, u64);

/// A validated entry, mapped.
pub struct Entry {
    map: Arc<memmap2::Mmap>,
    sections: Vec<(String, Range<usize>)>,
    /// The unit index, as stored.
    pub index: Vec<IndexEntry>,
}

/// A range of a shared mapping, as bytes.
struct MapSlice {
    map: Arc<memmap2::Mmap>,
    range: Range<usize>,
}

impl Deref for MapSlice {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.map[self.range.clone()]
    }
}

impl Entry {
    /// The bytes of section `name`, read in place from the mapping.
    pub fn section(&self, name: &str) -> Option<SharedBytes> {
        let (_, range) = self.sections.iter().find(|(n, _)| n == name)?;
        Some(SharedBytes::new(MapSlice {
            map: self.map.clone(),
            range: range.clone(),
        }))
    }

    /// The names of the sections held.
    pub fn section_names(&self) -> impl Iterator<Item = &str> {
        self.sections.iter().map(|(n, _)| n.as_str())
    }
}

/// The on-disk cache: a directory and a bound on its size.
#[derive(Debug, Clone)]
pub struct DiskCache {
    root: PathBuf,
    max_bytes: u64,
}

impl DiskCache {
    /// A cache in `root` (created when first written) holding at most `max_bytes`.
    pub fn new(root: PathBuf, max_bytes: u64) -> DiskCache {
        DiskCache { root, max_bytes }
    }

    /// The user's cache as the environment says: `None` when `ARGSTASH_CACHE`
    /// turns it off or no directory is known.
    pub fn from_env() -> Option<DiskCache> {
        let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(v) = var(CACHE_ENV) {
            let v = v.to_string_lossy().to_ascii_lowercase();
            if matches!(v.as_str(), "off" | "0" | "no" | "false") {
                return None;
            }
        }
        let base = match var("XDG_CACHE_HOME").map(PathBuf::from) {
            Some(p) if p.is_absolute() => p,
            _ => PathBuf::from(var("HOME")?).join(".cache"),
        };
        Some(DiskCache::new(base.join("argstash"), DEFAULT_MAX_BYTES))
    }

    /// The directory entries live in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the entry of `key` lives (whether or not it exists).
    pub fn entry_path(&self, key: &EntryKey) -> PathBuf {
        self.root.join(key.file_name())
    }

    /// The entry of `key`, validated and mapped.
    pub fn load(&self, key: &EntryKey) -> Result<Entry, Miss> {
        if key.build_id.is_empty() || key.build_id.len() > MAX_BUILD_ID {
            return Err(Miss::Absent);
        }
        let path = self.entry_path(key);
        if !crate::shared_file::is_private_dir(&self.root) {
            return Err(Miss::Absent);
        }
        // Never follows a link nor blocks on a FIFO planted in place of an entry.
        let file = match crate::shared_file::open_read(&path, &[crate::shared_file::own_uid()]) {
            Ok(Some(f)) => f,
            Ok(None) => return Err(Miss::Absent),
            Err(_) => return Err(Miss::Corrupt),
        };
        let meta = file.metadata().map_err(|_| Miss::Absent)?;
        if meta.len() < FIXED as u64 {
            return Err(Miss::Corrupt);
        }
        // SAFETY: read-only private mapping never written through. Entries are
        // replaced by rename and removed by unlink, never truncated in place, so
        // the mapping stays whole while it lives.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|_| Miss::Corrupt)?;
        let (sections, index) = parse(&map, key)?;
        if meta.modified().is_ok_and(|m| {
            SystemTime::now()
                .duration_since(m)
                .is_ok_and(|age| age > TOUCH_EVERY)
        }) {
            // Marks it recently used for eviction; failing is harmless.
            let _ = file.set_modified(SystemTime::now());
        }
        Ok(Entry {
            map: Arc::new(map),
            sections,
            index,
        })
    }

    /// Writes the entry of `key` (replacing any), then evicts the oldest entries
    /// while the directory is over its bound. Returns the entry's path.
    pub fn store(
        &self,
        key: &EntryKey,
        sections: &[(&str, &[u8])],
        index: &[IndexEntry],
    ) -> Result<PathBuf, StoreError> {
        if key.build_id.is_empty() || key.build_id.len() > MAX_BUILD_ID {
            return Err(StoreError::Refused(RefusedReason::BadKey));
        }
        if sections.len() > MAX_SECTIONS || sections.iter().any(|(n, _)| n.len() > NAME_LEN) {
            return Err(StoreError::Refused(RefusedReason::BadSections));
        }
        let header_len = header_len(sections.len(), index.len());
        let mut offsets = Vec::with_capacity(sections.len());
        let mut at = header_len as u64;
        for (_, data) in sections {
            offsets.push(at);
            at = align8(at + data.len() as u64);
        }
        let total = at;
        if total > self.max_bytes {
            return Err(StoreError::Refused(RefusedReason::TooLarge));
        }
        let mut head = Vec::with_capacity(header_len);
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&VERSION.to_le_bytes());
        head.extend_from_slice(&(header_len as u32).to_le_bytes());
        head.extend_from_slice(&total.to_le_bytes());
        head.extend_from_slice(&key.size.to_le_bytes());
        head.extend_from_slice(&key.mtime_ns.to_le_bytes());
        head.extend_from_slice(&(key.build_id.len() as u32).to_le_bytes());
        head.extend_from_slice(&(sections.len() as u32).to_le_bytes());
        head.extend_from_slice(&(index.len() as u64).to_le_bytes());
        let mut id = [0u8; MAX_BUILD_ID];
        id[..key.build_id.len()].copy_from_slice(&key.build_id);
        head.extend_from_slice(&id);
        debug_assert_eq!(head.len(), FIXED);
        for ((name, data), off) in sections.iter().zip(&offsets) {
            let mut n = [0u8; NAME_LEN];
            n[..name.len()].copy_from_slice(name.as_bytes());
            head.extend_from_slice(&n);
            head.extend_from_slice(&off.to_le_bytes());
            head.extend_from_slice(&(data.len() as u64).to_le_bytes());
        }
        for (range, unit) in index {
            head.extend_from_slice(&range.start.to_le_bytes());
            head.extend_from_slice(&range.end.to_le_bytes());
            head.extend_from_slice(&unit.to_le_bytes());
        }
        let crc = crc32(&head);
        head.extend_from_slice(&crc.to_le_bytes());
        head.resize(header_len, 0);

        self.replace_entry(&key.file_name(), |f| {
            f.write_all(&head)?;
            let mut at = header_len as u64;
            for (_, data) in sections {
                f.write_all(data)?;
                at += data.len() as u64;
                let pad = align8(at) - at;
                f.write_all(&[0u8; 8][..pad as usize])?;
                at += pad;
            }
            Ok(())
        })
    }

    /// Writes the entry file `name` whole with `write`: into a temporary file in
    /// the directory, renamed over any earlier entry (writers race harmlessly,
    /// readers' mappings stay valid), then evicts the oldest entries while the
    /// directory is over its bound. Returns the entry's path.
    pub(crate) fn replace_entry(
        &self,
        name: &str,
        write: impl FnOnce(&mut File) -> std::io::Result<()>,
    ) -> Result<PathBuf, StoreError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| StoreError::Io { path, source }
        };
        create_dir(&self.root).map_err(io(&self.root))?;
        if !crate::shared_file::is_private_dir(&self.root) {
            return Err(StoreError::Refused(RefusedReason::SharedDirectory));
        }
        let final_path = self.root.join(name);
        let tmp = self.root.join(format!(
            ".{name}.{}.{}{TMP_SUFFIX}",
            std::process::id(),
            unique()
        ));
        let written = (|| {
            let mut f = crate::shared_file::create_new(&tmp, 0o600)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            write(&mut f)?;
            // No fsync: a crash may leave a short or empty entry, which the
            // length checks reject and the next run rebuilds.
            drop(f);
            fs::rename(&tmp, &final_path)
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(io(&final_path)(e));
        }
        self.evict();
        Ok(final_path)
    }

    /// Removes writers' leftovers and, while the entries total more than the
    /// bound, the least recently used ones (DWARF and answers entries alike).
    pub fn evict(&self) {
        // Only in a directory no one else writes: every file there is then ours.
        if !crate::shared_file::is_private_dir(&self.root) {
            return;
        }
        let Ok(dir) = fs::read_dir(&self.root) else {
            return;
        };
        let now = SystemTime::now();
        let mut entries = Vec::new();
        for e in dir.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            // The entry's own metadata (a link is not followed): only regular
            // files of ours with one name are removed, never what a link points at.
            let Ok(meta) = e.metadata() else { continue };
            if !meta.is_file() || meta.uid() != crate::shared_file::own_uid() || meta.nlink() != 1 {
                continue;
            }
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            if name.ends_with(TMP_SUFFIX) {
                if now
                    .duration_since(modified)
                    .is_ok_and(|age| age > STALE_TMP)
                {
                    let _ = fs::remove_file(e.path());
                }
            } else if name.ends_with(SUFFIX) || name.ends_with(ANSWERS_SUFFIX) {
                entries.push((modified, meta.len(), e.path()));
            }
        }
        let mut total: u64 = entries.iter().map(|(_, len, _)| len).sum();
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
    }
}

fn align8(n: u64) -> u64 {
    n.div_ceil(8) * 8
}

fn header_len(sections: usize, index: usize) -> usize {
    // The fixed part, the tables and the CRC, padded to 8 bytes.
    (FIXED + sections * SECTION_REC + index * INDEX_REC + 4).div_ceil(8) * 8
}

/// A number no other temporary file of this process has used.
fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (NEXT.fetch_add(1, Ordering::Relaxed) << 32) | u64::from(nanos)
}

fn create_dir(root: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

type Parsed = (Vec<(String, Range<usize>)>, Vec<IndexEntry>);

/// Validates the entry `b` against `key` and reads its tables.
fn parse(b: &[u8], key: &EntryKey) -> Result<Parsed, Miss> {
    fn corrupt<E>(_: E) -> Miss {
        Miss::Corrupt
    }
    let field32 = |at| u32_at(b, at).ok_or(Miss::Corrupt);
    let field64 = |at| u64_at(b, at).ok_or(Miss::Corrupt);
    if b.get(..8) != Some(MAGIC.as_slice()) {
        return Err(Miss::Corrupt);
    }
    if field32(8)? != VERSION {
        return Err(Miss::Stale);
    }
    let header = field32(12)? as usize;
    let total = field64(16)?;
    let id_len = field32(40)? as usize;
    let nsections = field32(44)? as usize;
    let nindex = usize::try_from(field64(48)?).map_err(corrupt)?;
    if nsections > MAX_SECTIONS || id_len > MAX_BUILD_ID || nindex > b.len() / INDEX_REC {
        return Err(Miss::Corrupt);
    }
    if header != header_len(nsections, nindex) || header > b.len() {
        return Err(Miss::Corrupt);
    }
    let crc_at = FIXED + nsections * SECTION_REC + nindex * INDEX_REC;
    if u32_at(b, crc_at) != Some(crc32(&b[..crc_at])) {
        return Err(Miss::Corrupt);
    }
    // The header is whole from here on: now the length of the file.
    if total != b.len() as u64 {
        return Err(Miss::Corrupt);
    }
    let id = &b[56..56 + id_len];
    if id != key.build_id.as_slice()
        || field64(24)? != key.size
        || field64(32)? as i64 != key.mtime_ns
    {
        return Err(Miss::Stale);
    }
    let mut sections = Vec::with_capacity(nsections);
    for i in 0..nsections {
        let at = FIXED + i * SECTION_REC;
        let name = &b[at..at + NAME_LEN];
        let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(NAME_LEN)];
        let name = std::str::from_utf8(name).map_err(corrupt)?.to_string();
        let off = usize::try_from(field64(at + NAME_LEN)?).map_err(corrupt)?;
        let len = usize::try_from(field64(at + NAME_LEN + 8)?).map_err(corrupt)?;
        let end = off.checked_add(len).ok_or(Miss::Corrupt)?;
        if off < header || end > b.len() {
            return Err(Miss::Corrupt);
        }
        sections.push((name, off..end));
    }
    let mut index = Vec::with_capacity(nindex);
    for i in 0..nindex {
        let at = FIXED + nsections * SECTION_REC + i * INDEX_REC;
        let (start, end, unit) = (field64(at)?, field64(at + 8)?, field64(at + 16)?);
        if start >= end {
            return Err(Miss::Corrupt);
        }
        index.push((start..end, unit));
    }
    Ok((sections, index))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary directory (never the
    /// user's cache), removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let p = std::env::temp_dir().join(format!(
                "argstash-dwarf-cache-{tag}-{}-{}",
                std::process::id(),
                unique()
            ));
            let _ = fs::remove_dir_all(&p);
            TempDir(p)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn key(id: u8) -> EntryKey {
        EntryKey {
            build_id: vec![id, 0xab, 0xcd, 0xef],
            size: 4096,
            mtime_ns: 1_700_000_000_123_456_789,
        }
    }

    fn sample() -> (Vec<(&'static str, Vec<u8>)>, Vec<IndexEntry>) {
        let info: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let abbrev = vec![1, 17, 1, 0, 0, 0];
        let index = vec![(0x1000..0x1100, 0), (0x2000..0x2400, 0x40)];
        (
            vec![(".debug_info", info), (".debug_abbrev", abbrev)],
            index,
        )
    }

    fn store(cache: &DiskCache, key: &EntryKey) -> PathBuf {
        let (sections, index) = sample();
        let refs: Vec<(&str, &[u8])> = sections.iter().map(|(n, d)| (*n, d.as_slice())).collect();
        cache.store(key, &refs, &index).unwrap()
    }

    fn check(entry: &Entry) {
        let (sections, index) = sample();
        for (name, data) in &sections {
            assert_eq!(&*entry.section(name).unwrap(), data.as_slice(), "{name}");
        }
        assert!(entry.section(".debug_line").is_none());
        assert_eq!(entry.index, index);
    }

    #[test]
    fn a_stored_entry_is_a_hit() {
        let dir = TempDir::new("hit");
        let cache = DiskCache::new(dir.0.clone(), DEFAULT_MAX_BYTES);
        let k = key(1);
        assert_eq!(cache.load(&k).err(), Some(Miss::Absent));
        let path = store(&cache, &k);
        assert!(path.starts_with(&dir.0) && path.is_file());
        check(&cache.load(&k).unwrap());
        // Only the entry is left: no temporary files.
        assert_eq!(fs::read_dir(&dir.0).unwrap().count(), 1);
    }

    #[test]
    fn another_key_is_a_miss() {
        let dir = TempDir::new("stale");
        let cache = DiskCache::new(dir.0.clone(), DEFAULT_MAX_BYTES);
        let k = key(2);
        store(&cache, &k);
        let other_id = EntryKey {
            build_id: vec![9, 9],
            ..k.clone()
        };
        assert_eq!(cache.load(&other_id).err(), Some(Miss::Absent));
        // Same build-id, another file (rebuilt, reinstalled): stale.
        let resized = EntryKey {
            size: k.size + 1,
            ..k.clone()
        };
        assert_eq!(cache.load(&resized).err(), Some(Miss::Stale));
        let touched = EntryKey {
            mtime_ns: k.mtime_ns + 1,
            ..k.clone()
        };
        assert_eq!(cache.load(&touched).err(), Some(Miss::Stale));
        // A stale entry is replaced by the next store.
        store(&cache, &touched);
        check(&cache.load(&touched).unwrap());
        assert_eq!(cache.load(&k).err(), Some(Miss::Stale));
    }

    #[test]
    fn corrupt_entries_are_misses_and_rebuilt() {
        let dir = TempDir::new("corrupt");
        let cache = DiskCache::new(dir.0.clone(), DEFAULT_MAX_BYTES);
        let k = key(3);
        let path = store(&cache, &k);
        let good = fs::read(&path).unwrap();
        let header = header_len(2, 2);
        let mut damaged: Vec<(&str, Vec<u8>)> = vec![
            ("empty", Vec::new()),
            ("short", good[..50].to_vec()),
            ("truncated data", good[..good.len() - 1].to_vec()),
            ("truncated header", good[..header - 8].to_vec()),
            ("longer", [good.as_slice(), &[0]].concat()),
        ];
        for at in [0, 9, 13, 17, 45, 49, 60, FIXED + 2, FIXED + 30, header - 10] {
            let mut b = good.clone();
            b[at] ^= 0x40;
            damaged.push(("flipped header byte", b));
        }
        let mut wrong_version = good.clone();
        wrong_version[8] = 2;
        for (what, bytes) in damaged {
            fs::write(&path, &bytes).unwrap();
            assert!(cache.load(&k).is_err(), "{what} accepted");
        }
        fs::write(&path, &wrong_version).unwrap();
        assert_eq!(cache.load(&k).err(), Some(Miss::Stale));
        // Random garbage of every length up to the header's: never accepted, never a panic.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..header + 64 {
            let b: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            fs::write(&path, &b).unwrap();
            assert!(cache.load(&k).is_err());
        }
        store(&cache, &k);
        check(&cache.load(&k).unwrap());
    }

    #[test]
    fn the_directory_stays_within_its_bound() {
        let dir = TempDir::new("bound");
        let (sections, _) = sample();
        let one = header_len(2, 2) as u64
            + sections
                .iter()
                .map(|(_, d)| align8(d.len() as u64))
                .sum::<u64>();
        let cache = DiskCache::new(dir.0.clone(), one * 3);
        let keys: Vec<EntryKey> = (10..15).map(key).collect();
        for k in &keys {
            store(&cache, k);
            // Distinct ages, oldest first.
            let f = File::options()
                .write(true)
                .open(cache.entry_path(k))
                .unwrap();
            let age = Duration::from_secs(100 * (20 - u64::from(k.build_id[0])));
            f.set_modified(SystemTime::now() - age).unwrap();
        }
        // The last store evicted down to the bound; the newest three remain.
        store(&cache, &keys[4]);
        let left: Vec<bool> = keys.iter().map(|k| cache.load(k).is_ok()).collect();
        assert_eq!(left, [false, false, true, true, true]);
        let total: u64 = fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(total <= one * 3);
        // An entry larger than the whole bound is refused.
        let tiny = DiskCache::new(dir.0.clone(), 100);
        let refs: Vec<(&str, &[u8])> = sections.iter().map(|(n, d)| (*n, d.as_slice())).collect();
        assert!(matches!(
            tiny.store(&key(20), &refs, &[]),
            Err(StoreError::Refused(RefusedReason::TooLarge))
        ));
    }

    #[test]
    fn concurrent_writers_leave_one_whole_entry() {
        let dir = TempDir::new("race");
        let cache = DiskCache::new(dir.0.clone(), DEFAULT_MAX_BYTES);
        let k = key(30);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..20 {
                        store(&cache, &k);
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..200 {
                    match cache.load(&k) {
                        Ok(e) => check(&e),
                        Err(m) => assert_eq!(m, Miss::Absent),
                    }
                }
            });
        });
        check(&cache.load(&k).unwrap());
        let names: Vec<String> = fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, [k.file_name()]);
    }

    #[test]
    fn the_environment_picks_or_disables_the_directory() {
        // Only the parsing of values: the process environment is shared by
        // the tests, so it is not changed here.
        let cache = DiskCache::new(PathBuf::from("/x/argstash"), 1);
        assert_eq!(cache.root(), Path::new("/x/argstash"));
        assert_eq!(
            cache.entry_path(&key(1)),
            Path::new("/x/argstash/01abcdef.dwarf")
        );
    }
}
