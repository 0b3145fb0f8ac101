//! The process readers `Backtrace` reuses, bounded in number and in debug-info size.
//!
//! A reader caches a process's symbols, unwind tables and debug info, so a
//! repeated `Backtrace` of the same process costs a fraction of the first one.
//! The daemon may serve many processes for a long time, so the cache is bounded:
//! at most `capacity` readers (least recently used go first), and a module's
//! debug info stays only when it holds at most `debug_bytes` of DWARF (libc's
//! from `libc6-dbg` alone decompresses to tens of MiB). What is evicted is
//! dropped on a janitor thread, off the caller's path: freeing a large module's
//! DWARF takes milliseconds.
//!
//! When a cached reader's symbols must be reloaded (a library loaded, an
//! `exec`) is not this cache's business: each reader holds a
//! `reader::process_view::ProcessView`, whose one rule decides that on every
//! call. The cache only tells processes apart, by pid and start time.

use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::Mutex;

use injector::{Backtrace, BacktraceOptions, Pid, ProcessReader};
use injector::{DebugSearch, DwarfCache};

/// One cached reader: a process is identified by its pid and start time.
struct Entry {
    pid: i32,
    start: Option<u64>,
    reader: ProcessReader,
}

/// What the janitor thread frees (evicted readers, released debug info).
type Garbage = Box<dyn Send>;

/// Readers by process, most recently used first.
pub struct ReaderCache {
    entries: Mutex<VecDeque<Entry>>,
    capacity: usize,
    debug_bytes: usize,
    search: Option<DebugSearch>,
    /// Given to every reader: one parse of a file's DWARF (libc's) serves them all.
    dwarf: DwarfCache,
    janitor: mpsc::Sender<Garbage>,
}

impl ReaderCache {
    /// Keeps up to `capacity` readers, each with debug info of at most
    /// `debug_bytes` per module, found through `search` (default places if `None`).
    pub fn new(capacity: usize, debug_bytes: usize, search: Option<DebugSearch>) -> ReaderCache {
        let (janitor, garbage) = mpsc::channel::<Garbage>();
        let spawned = std::thread::Builder::new()
            .name("argstashd-janitor".into())
            .spawn(move || run_janitor(garbage));
        if let Err(e) = spawned {
            // The sender then fails and garbage is dropped where it is made.
            eprintln!("argstashd: no janitor thread ({e}); evicted caches are freed inline");
        }
        ReaderCache {
            entries: Mutex::new(VecDeque::new()),
            capacity,
            debug_bytes,
            search,
            dwarf: DwarfCache::from_env(),
            janitor,
        }
    }

    /// A backtrace of `pid` (started at `start`) through its cached reader, if any.
    pub fn backtrace(
        &self,
        pid: i32,
        start: Option<u64>,
        opts: &BacktraceOptions,
    ) -> Result<Backtrace, injector::Error> {
        let (mut reader, stale) = self.take(pid, start);
        let bt = match &self.search {
            Some(search) => reader.backtrace(&BacktraceOptions {
                debug_search: search.clone(),
                ..opts.clone()
            }),
            None => reader.backtrace(opts),
        };
        let debug = reader.take_debug_over(self.debug_bytes);
        let mut evicted = self.put(Entry { pid, start, reader });
        evicted.extend(stale);
        if !debug.is_empty() {
            self.discard(Box::new(debug));
        }
        if !evicted.is_empty() {
            self.discard(Box::new(evicted));
        }
        bt
    }

    /// The processes whose readers are cached, most recent first.
    #[cfg(test)]
    fn cached(&self) -> Vec<(i32, Option<u64>)> {
        self.lock().iter().map(|e| (e.pid, e.start)).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached reader of this process (or a new one), and readers of an
    /// earlier process with the same pid.
    fn take(&self, pid: i32, start: Option<u64>) -> (ProcessReader, Vec<ProcessReader>) {
        let mut entries = self.lock();
        let mut stale = Vec::new();
        let mut found = None;
        let mut i = 0;
        while i < entries.len() {
            if entries[i].pid != pid {
                i += 1;
                continue;
            }
            let e = entries.remove(i).expect("index checked");
            if e.start == start && found.is_none() {
                found = Some(e.reader);
            } else {
                stale.push(e.reader);
            }
        }
        let reader = found.unwrap_or_else(|| {
            let mut r = ProcessReader::new(Pid::from_raw(pid));
            r.set_dwarf_cache(self.dwarf.clone());
            r
        });
        (reader, stale)
    }

    /// Caches `entry` as the most recent; returns the readers that no longer fit.
    fn put(&self, entry: Entry) -> Vec<ProcessReader> {
        if self.capacity == 0 {
            return vec![entry.reader];
        }
        let mut entries = self.lock();
        entries.push_front(entry);
        let mut evicted = Vec::new();
        while entries.len() > self.capacity {
            if let Some(e) = entries.pop_back() {
                evicted.push(e.reader);
            }
        }
        evicted
    }

    fn discard(&self, garbage: Garbage) {
        if let Err(mpsc::SendError(g)) = self.janitor.send(garbage) {
            drop(g);
        }
    }
}

/// Frees what it is sent; once nothing more has come for [`QUIET`], hands the
/// freed memory back to the system. Trimming walks the whole heap under the
/// allocator's lock, so it waits for a quiet moment instead of slowing down
/// every call of a burst.
fn run_janitor(garbage: mpsc::Receiver<Garbage>) {
    while let Ok(g) = garbage.recv() {
        drop(g);
        loop {
            match garbage.recv_timeout(QUIET) {
                Ok(g) => drop(g),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    release_free_memory();
                    break;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

/// How long the janitor waits for more garbage before it trims the heap.
const QUIET: std::time::Duration = std::time::Duration::from_millis(200);

/// Returns freed heap memory to the system (glibc keeps it in its arenas otherwise).
fn release_free_memory() {
    // SAFETY: malloc_trim only walks glibc's own heap arenas; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};

    fn sleeper() -> Child {
        Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep")
    }

    fn start_of(pid: i32) -> Option<u64> {
        crate::hints::start_time(pid)
    }

    #[test]
    fn keeps_the_most_recent_readers_and_drops_other_processes_with_the_same_pid() {
        let cache = ReaderCache::new(2, 0, None);
        let mut kids: Vec<Child> = (0..3).map(|_| sleeper()).collect();
        // Give each child time to exec `sleep`.
        std::thread::sleep(std::time::Duration::from_millis(100));
        let pids: Vec<i32> = kids.iter().map(|k| k.id() as i32).collect();
        let opts = BacktraceOptions::default();
        for &pid in &pids {
            let bt = cache
                .backtrace(pid, start_of(pid), &opts)
                .expect("backtrace");
            assert_eq!(bt.pid, pid);
            assert!(!bt.threads.is_empty());
        }
        assert_eq!(
            cache.cached(),
            vec![(pids[2], start_of(pids[2])), (pids[1], start_of(pids[1]))]
        );
        // Reused: the oldest cached one becomes the most recent.
        cache.backtrace(pids[1], start_of(pids[1]), &opts).unwrap();
        assert_eq!(cache.cached()[0].0, pids[1]);
        // Another start time under the same pid replaces the entry, never reuses it.
        cache.backtrace(pids[2], Some(1), &opts).unwrap();
        let cached = cache.cached();
        assert_eq!(cached[0], (pids[2], Some(1)));
        assert_eq!(cached.iter().filter(|(p, _)| *p == pids[2]).count(), 1);
        for k in &mut kids {
            let _ = k.kill();
            let _ = k.wait();
        }
    }

    #[test]
    fn capacity_zero_caches_nothing() {
        let cache = ReaderCache::new(0, 0, None);
        let mut kid = sleeper();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let pid = kid.id() as i32;
        cache
            .backtrace(pid, start_of(pid), &BacktraceOptions::default())
            .unwrap();
        assert!(cache.cached().is_empty());
        let _ = kid.kill();
        let _ = kid.wait();
    }
}
