//! [`DwarfCache`]: parsed DWARF shared by file between the readers given the
//! same cache, optionally backed by the on-disk cache.

use super::data::{parse_dwarf, DwarfData};
use crate::debugfile::DebugInfoError;
use crate::debugfile::ElfSections;
use crate::dwarf_cache::DiskCache;
use std::sync::Arc;

/// Identity of a file's contents: device, inode, size and modification time.
pub(super) type FileKey = (u64, u64, u64, i64, i64);

pub(super) fn file_key(path: &str) -> Option<FileKey> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// The parses a [`DwarfCache`] knows, by file; each lives as long as a reader holds it.
pub(super) type SharedFiles = Vec<(FileKey, std::sync::Weak<DwarfData>)>;

/// Parsed DWARF by file, shared by every reader given the same cache.
///
/// The caller owns it and hands a clone (a handle to the same cache) to each
/// reader that should share parses: the daemon gives one to all its process
/// readers, so libc's DWARF is parsed once however many processes it serves. An
/// entry lives as long as some [`ModuleDebug`](crate::debuginfo::ModuleDebug) uses it; the cache itself holds
/// no parse alive.
///
/// It may also keep what it parses on disk ([`DiskCache`]), for the next
/// process: [`DwarfCache::from_env`] is the one place that decides where from the
/// environment (the user's cache directory, unless `ARGSTASH_CACHE=off`); the
/// default keeps everything in memory and touches no file.
#[derive(Clone)]
pub struct DwarfCache {
    files: Arc<std::sync::Mutex<SharedFiles>>,
    disk: Option<DiskCache>,
}

impl Default for DwarfCache {
    fn default() -> Self {
        DwarfCache::with_disk(None)
    }
}

impl std::fmt::Debug for DwarfCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DwarfCache")
            .field("files", &self.lock().len())
            .field("disk", &self.disk)
            .finish()
    }
}

impl DwarfCache {
    /// An empty cache, shared by nothing yet, in memory only.
    pub fn new() -> DwarfCache {
        DwarfCache::default()
    }

    /// An empty cache backed by the user's on-disk cache as the environment
    /// says ([`DiskCache::from_env`]: `ARGSTASH_CACHE`, `XDG_CACHE_HOME`,
    /// `HOME`): what the command-line tools and argstashd choose.
    pub fn from_env() -> DwarfCache {
        DwarfCache::with_disk(DiskCache::from_env())
    }

    /// An empty cache backed by `disk` (none: memory only).
    pub fn with_disk(disk: Option<DiskCache>) -> DwarfCache {
        DwarfCache {
            files: Arc::default(),
            disk,
        }
    }

    /// The on-disk cache behind this one, if any.
    pub fn disk(&self) -> Option<&DiskCache> {
        self.disk.as_ref()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SharedFiles> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The parse of the file `key` names, if some reader still holds it.
    pub(super) fn get(&self, key: FileKey) -> Option<Arc<DwarfData>> {
        let mut files = self.lock();
        files.retain(|(_, w)| w.strong_count() > 0);
        files
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, w)| w.upgrade())
    }

    fn insert(&self, key: FileKey, data: &Arc<DwarfData>) {
        self.lock().push((key, Arc::downgrade(data)));
    }
}

/// The parsed DWARF of `file`, shared through `cache` with any other user of the same file.
pub(super) fn load_dwarf(
    file: &ElfSections,
    cache: &DwarfCache,
) -> Result<Arc<DwarfData>, DebugInfoError> {
    let key = file_key(&file.path);
    if let Some(d) = key.and_then(|k| cache.get(k)) {
        return Ok(d);
    }
    // Parsed without holding the cache's lock: two threads may parse the same
    // file at once, and both results are correct.
    let data = Arc::new(parse_dwarf(file, cache.disk.as_ref())?);
    if let Some(key) = key {
        cache.insert(key, &data);
    }
    Ok(data)
}
