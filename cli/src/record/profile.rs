//! What a recording collects: each thread's samples as stacks of named frames
//! (root first), the samples lost and why, and notes; the summary printed at the end.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// Where a frame comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameOrigin {
    /// Native code (a symbol, or a module when no symbol covers the pc).
    Native,
    /// A Python function (`[py] NAME`).
    Python,
}

/// One distinct frame of the profile.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FrameInfo {
    /// The name shown (with arguments under `--with-args`).
    pub name: String,
    /// Source or module file, when known.
    pub file: Option<String>,
    /// Native or Python.
    pub origin: FrameOrigin,
}

/// One sampled thread.
#[derive(Debug, Clone, Default)]
pub struct ThreadSamples {
    /// Its name (`comm`) when first sampled.
    pub name: String,
    /// Stack ids, in sampling order.
    pub samples: Vec<u32>,
    /// Each sample's label set ([`Profile::label_sets`]; 0: none), when any
    /// sample has labels, else empty.
    pub labels: Vec<u32>,
}

/// Everything recorded.
#[derive(Debug, Default)]
pub struct Profile {
    /// Distinct frames; a stack holds indices into it.
    pub frames: Vec<FrameInfo>,
    frame_ids: HashMap<FrameInfo, u32>,
    /// Distinct stacks, root first.
    pub stacks: Vec<Vec<u32>>,
    stack_ids: HashMap<Vec<u32>, u32>,
    /// Samples by thread id.
    pub threads: BTreeMap<i32, ThreadSamples>,
    /// Distinct label sets of samples (pprof's labels: hooked arguments as
    /// `FUNCTION.PARAMETER`); set 0 is empty.
    pub label_sets: Vec<Vec<(String, String)>>,
    label_ids: HashMap<Vec<(String, String)>, u32>,
    /// Samples lost, by reason.
    pub lost: BTreeMap<String, u64>,
    /// What the reader of the profile should know (e.g. the process exited).
    pub notes: Vec<String>,
    /// Threads found in the process during the recording (of those
    /// `--threads` selects), whether or not they were sampled.
    pub seen: BTreeSet<i32>,
    /// The most of them found alive at one listing.
    pub most_at_once: usize,
    /// Rounds that could not start on time (ptrace sampler): no thread was
    /// asked, so they count as rounds, not as samples lost.
    pub rounds_missed: u64,
    /// Time spent sampling.
    pub elapsed: Duration,
    /// The requested rate per thread.
    pub rate: u32,
    /// Total time threads were stopped, over all samples.
    pub stopped: Duration,
    /// The longest stop of one sample.
    pub max_stop: Duration,
    /// Total time from asking a thread to stop until it had (it ran meanwhile).
    pub latency: Duration,
    /// Rounds over the threads (each thread gets at most one sample a round).
    pub rounds: u64,
    /// Samples left out because the thread was waiting for a CPU when asked to
    /// stop, so it stopped where it had been preempted (without `--idle`).
    pub off_cpu: u64,
    /// Samples not taken because the thread was off the CPU (without `--idle`).
    pub idle: u64,
    /// Samples of threads blocked in a system call, read without a stop.
    pub unstopped: u64,
    /// Which sampler ran (`ptrace`, or `kernel (perf_event_open)`).
    pub sampler: &'static str,
    /// Why that sampler ran (`the default`, `--idle needs it`, ...).
    pub sampler_why: String,
    /// Hooked functions named without arguments under `--with-args`: no
    /// signature is known for them.
    pub without_signature: Vec<String>,
}

impl Profile {
    /// An empty profile at `rate` Hz per thread.
    pub fn new(rate: u32) -> Profile {
        Profile {
            rate,
            sampler: "ptrace",
            sampler_why: String::new(),
            ..Profile::default()
        }
    }

    /// Adds one sample of thread `tid` (`stack` innermost first).
    #[cfg(test)]
    pub fn add(&mut self, tid: i32, thread_name: &str, stack: Vec<FrameInfo>, stopped: Duration) {
        self.add_timed(tid, thread_name, stack, stopped, Duration::ZERO);
    }

    /// [`Self::add`] with the time the thread took to stop.
    pub fn add_timed(
        &mut self,
        tid: i32,
        thread_name: &str,
        stack: Vec<FrameInfo>,
        stopped: Duration,
        latency: Duration,
    ) {
        self.latency += latency;
        let mut ids: Vec<u32> = stack.into_iter().rev().map(|f| self.frame_id(f)).collect();
        ids.shrink_to_fit();
        let next = self.stacks.len() as u32;
        let id = *self.stack_ids.entry(ids.clone()).or_insert(next);
        if id == next {
            self.stacks.push(ids);
        }
        let t = self.threads.entry(tid).or_default();
        if t.name.is_empty() {
            t.name = thread_name.to_string();
        }
        t.samples.push(id);
        self.stopped += stopped;
        self.max_stop = self.max_stop.max(stopped);
    }

    /// Labels the sample of `tid` added last.
    pub fn label_last(&mut self, tid: i32, labels: Vec<(String, String)>) {
        if labels.is_empty() {
            return;
        }
        if self.label_sets.is_empty() {
            self.label_sets.push(Vec::new());
            self.label_ids.insert(Vec::new(), 0);
        }
        let next = self.label_sets.len() as u32;
        let id = *self.label_ids.entry(labels.clone()).or_insert(next);
        if id == next {
            self.label_sets.push(labels);
        }
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        t.labels.resize(t.samples.len(), 0);
        if let Some(last) = t.labels.last_mut() {
            *last = id;
        }
    }

    fn frame_id(&mut self, f: FrameInfo) -> u32 {
        let next = self.frames.len() as u32;
        let id = *self.frame_ids.entry(f.clone()).or_insert(next);
        if id == next {
            self.frames.push(f);
        }
        id
    }

    /// Notes one listing of the threads the recording follows.
    pub fn saw(&mut self, tids: impl ExactSizeIterator<Item = i32>) {
        self.most_at_once = self.most_at_once.max(tids.len());
        self.seen.extend(tids);
    }

    /// Threads seen during the recording: those listed, and any sampled
    /// between two listings.
    pub fn threads_seen(&self) -> usize {
        self.seen
            .union(&self.threads.keys().copied().collect())
            .count()
    }

    /// Counts `n` samples lost for `reason`.
    pub fn lose(&mut self, reason: &str, n: u64) {
        if n > 0 {
            *self.lost.entry(reason.to_string()).or_default() += n;
        }
    }

    /// Samples taken.
    pub fn samples(&self) -> u64 {
        self.threads.values().map(|t| t.samples.len() as u64).sum()
    }

    /// Samples lost, all reasons.
    pub fn lost_total(&self) -> u64 {
        self.lost.values().sum()
    }

    /// How many samples each distinct stack got, over all threads.
    pub fn stack_counts(&self) -> Vec<u64> {
        let mut counts = vec![0u64; self.stacks.len()];
        for t in self.threads.values() {
            for s in &t.samples {
                counts[*s as usize] += 1;
            }
        }
        counts
    }

    /// Functions by self time (the innermost frame of a sample), most first.
    pub fn top_self(&self, n: usize) -> Vec<(&str, u64)> {
        let mut by_name: HashMap<&str, u64> = HashMap::new();
        for (stack, count) in self.stacks.iter().zip(self.stack_counts()) {
            if let Some(leaf) = stack.last() {
                *by_name
                    .entry(self.frames[*leaf as usize].name.as_str())
                    .or_default() += count;
            }
        }
        let mut v: Vec<(&str, u64)> = by_name.into_iter().filter(|(_, c)| *c > 0).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        v.truncate(n);
        v
    }

    /// The one-paragraph summary printed at the end.
    pub fn summary(&self, file: &str) -> String {
        let samples = self.samples();
        let secs = self.elapsed.as_secs_f64();
        let sampled = self.threads.len();
        let per_thread = if secs > 0.0 {
            self.rounds as f64 / secs
        } else {
            0.0
        };
        let per_sample = |d: Duration| match samples {
            0 => 0.0,
            n => d.as_micros() as f64 / n as f64,
        };
        let mean_stop = per_sample(self.stopped);
        let mean_latency = per_sample(self.latency);
        let mut s = format!(
            "argstash record: {samples} samples of {sampled} threads (of {} seen, at most {} at \
             once) in {secs:.1} s by the {} sampler",
            self.threads_seen(),
            self.most_at_once.max(sampled.min(1)),
            self.sampler,
        );
        let why = match self.sampler_why.as_str() {
            "" => String::new(),
            w => format!("{w}; "),
        };
        if self.sampler == "ptrace" {
            let missed = match self.rounds_missed {
                0 => String::new(),
                n => format!(", {n} rounds missed: the sampler was behind schedule"),
            };
            s += &format!(
                " ({why}{per_thread:.0} rounds a second, {} Hz asked{missed}); threads held \
                 {mean_stop:.0} us per sample on average ({} us at most), after {mean_latency:.0} \
                 us to stop",
                self.rate,
                self.max_stop.as_micros()
            );
        } else {
            s += &format!(" ({why}{} Hz asked, no thread stopped)", self.rate);
        }
        let lost = self.lost_total();
        if lost > 0 {
            let why: Vec<String> = self.lost.iter().map(|(r, n)| format!("{n} {r}")).collect();
            s += &format!("; {lost} samples lost ({})", why.join(", "));
        } else {
            s += "; no sample lost";
        }
        if self.idle > 0 {
            s += &format!(
                "; {} samples of sleeping threads skipped (--idle records them)",
                self.idle
            );
        }
        if self.unstopped > 0 {
            s += &format!(
                "; {} samples of threads blocked in a system call read without a stop",
                self.unstopped
            );
        }
        if self.off_cpu > 0 {
            s += &format!(
                "; {} samples left out of runnable threads that waited for a CPU during the round (no fair pick of where their time goes; --idle keeps them)",
                self.off_cpu
            );
        }
        if !self.without_signature.is_empty() {
            let first = &self.without_signature[0];
            s += &format!(
                "; {} named without arguments: no signature is known (no DWARF, no --func \
                 signature), so neither is which registers hold arguments (give one with \
                 --func '{first}(long a, ...)', or name registers with --args rdi,rsi)",
                self.without_signature.join(", ")
            );
        }
        let top = self.top_self(5);
        if !top.is_empty() && samples > 0 {
            let parts: Vec<String> = top
                .iter()
                .map(|(name, c)| format!("{name} {:.1}%", 100.0 * *c as f64 / samples as f64))
                .collect();
            s += &format!(". Top self time: {}", parts.join(", "));
        }
        s += &format!(". Written to {file}.");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &str) -> FrameInfo {
        FrameInfo {
            name: name.into(),
            file: None,
            origin: FrameOrigin::Native,
        }
    }

    #[test]
    fn stacks_are_shared_and_self_time_is_the_leaf() {
        let mut p = Profile::new(99);
        for _ in 0..7 {
            p.add(
                1,
                "t",
                vec![f("hot_a"), f("main")],
                Duration::from_micros(10),
            );
        }
        for _ in 0..3 {
            p.add(
                2,
                "u",
                vec![f("hot_b"), f("main")],
                Duration::from_micros(30),
            );
        }
        assert_eq!(p.stacks.len(), 2);
        assert_eq!(p.frames.len(), 3);
        assert_eq!(p.stacks[0], vec![0, 1]);
        assert_eq!(p.frames[0].name, "main");
        assert_eq!(p.samples(), 10);
        assert_eq!(p.top_self(5), vec![("hot_a", 7), ("hot_b", 3)]);
        assert_eq!(p.max_stop, Duration::from_micros(30));
        p.lose("thread exited", 2);
        p.lose("nothing", 0);
        let s = p.summary("out.svg");
        assert!(
            s.contains("10 samples of 2 threads (of 2 seen, at most 1 at once)"),
            "{s}"
        );
        // Threads listed but never sampled count as seen, not as sampled.
        p.saw([1, 3].into_iter());
        p.saw([3].into_iter());
        let s = p.summary("out.svg");
        assert!(
            s.contains("10 samples of 2 threads (of 3 seen, at most 2 at once)"),
            "{s}"
        );
        assert!(s.contains("by the ptrace sampler"), "{s}");
        p.sampler = "kernel (perf_event_open)";
        p.sampler_why = "the default".into();
        let s = p.summary("out.svg");
        assert!(
            s.contains(
                "by the kernel (perf_event_open) sampler (the default; 99 Hz asked, no thread stopped)"
            ),
            "{s}"
        );
        assert!(s.contains("2 samples lost (2 thread exited)"), "{s}");
        assert!(s.contains("hot_a 70.0%, hot_b 30.0%"), "{s}");
    }
}
