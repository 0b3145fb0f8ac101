//! pprof's `profile.proto` (what `go tool pprof`, Grafana Pyroscope and Parca
//! read), gzip-compressed. The messages are declared here for `prost`, field by
//! field as profile.proto numbers them; only what a profile without addresses
//! needs is declared (a reader skips the fields it finds absent).
//!
//! Each distinct frame of the profile is one `Function` and one `Location`
//! (no address, no mapping: frames are named when sampled). Each sample is one
//! stack of one thread, its values the sample count and the time it stands for
//! (a period of the requested rate); its labels name the thread. A hooked
//! frame's arguments are in its function name under `--with-args`, as in the
//! other formats; without it they are labels of the sample, keyed
//! `FUNCTION.PARAMETER` (a label belongs to the whole sample, so its key names
//! the hooked function it comes from).

use std::collections::HashMap;
use std::io::Write;
use std::time::SystemTime;

use anyhow::{bail, Result};
use prost::Message;

use super::profile::Profile;

/// `perftools.profiles.Profile`.
#[derive(Clone, PartialEq, Message)]
pub struct PbProfile {
    /// What each sample value is.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<PbSample>,
    /// The locations samples refer to.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// The functions locations refer to.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string, indexed by the other messages; entry 0 is "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// When the recording started (ns since the epoch).
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// How long it lasted.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What the period counts.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// The sampling period.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form notes (string indices).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The sample type shown first (string index).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `perftools.profiles.ValueType`: a kind of value and its unit.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    /// String index of the type (`samples`, `cpu`).
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// String index of the unit (`count`, `nanoseconds`).
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `perftools.profiles.Sample`.
#[derive(Clone, PartialEq, Message)]
pub struct PbSample {
    /// Location ids, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels of the whole sample.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// `perftools.profiles.Label`: a string or a number under a key.
#[derive(Clone, PartialEq, Message)]
pub struct Label {
    /// String index of the key.
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String index of the value, or 0.
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// The numeric value, when `str` is 0.
    #[prost(int64, tag = "3")]
    pub num: i64,
}

/// `perftools.profiles.Location`.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    /// Its id (non-zero).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The functions at this location, innermost (inlined) first.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

/// `perftools.profiles.Line`.
#[derive(Clone, PartialEq, Message)]
pub struct Line {
    /// The function's id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
}

/// `perftools.profiles.Function`.
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    /// Its id (non-zero).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// String index of the name shown.
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// String index of the name as in the binary.
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// String index of its source or module file.
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// The string table being built: index 0 is the empty string.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        Strings {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }

    fn at(&mut self, s: &str) -> i64 {
        if let Some(i) = self.index.get(s) {
            return *i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The profile as pprof's message. `wall`: the samples stand for wall-clock
/// time (`--idle`), else CPU time.
pub fn message(p: &Profile, wall: bool) -> PbProfile {
    let mut strings = Strings::new();
    let samples = strings.at("samples");
    let count = strings.at("count");
    let time = strings.at(if wall { "wall" } else { "cpu" });
    let ns = strings.at("nanoseconds");
    let period = 1_000_000_000 / i64::from(p.rate.max(1));
    // Frame i of the profile is function and location i + 1.
    let function: Vec<Function> = p
        .frames
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let name = strings.at(&f.name);
            Function {
                id: i as u64 + 1,
                name,
                system_name: name,
                filename: f.file.as_deref().map_or(0, |file| strings.at(file)),
            }
        })
        .collect();
    let location = (1..=p.frames.len() as u64)
        .map(|id| Location {
            id,
            line: vec![Line { function_id: id }],
        })
        .collect();
    let thread_key = strings.at("thread");
    let tid_key = strings.at("thread_id");
    let mut sample = Vec::new();
    for (tid, t) in &p.threads {
        let mut per_stack: HashMap<(u32, u32), i64> = HashMap::new();
        for (i, s) in t.samples.iter().enumerate() {
            let labels = t.labels.get(i).copied().unwrap_or(0);
            *per_stack.entry((*s, labels)).or_default() += 1;
        }
        let mut stacks: Vec<((u32, u32), i64)> = per_stack.into_iter().collect();
        stacks.sort_unstable();
        let thread = strings.at(&t.name);
        for ((stack, labels), n) in stacks {
            let mut label = vec![
                Label {
                    key: thread_key,
                    str: thread,
                    num: 0,
                },
                Label {
                    key: tid_key,
                    str: 0,
                    num: i64::from(*tid),
                },
            ];
            // Hooked arguments: a whole number as a number (pprof filters
            // ranges of those), anything else as text.
            for (k, v) in p.label_sets.get(labels as usize).into_iter().flatten() {
                let key = strings.at(k);
                label.push(match v.parse::<i64>() {
                    Ok(num) => Label { key, str: 0, num },
                    Err(_) => Label {
                        key,
                        str: strings.at(v),
                        num: 0,
                    },
                });
            }
            sample.push(PbSample {
                // Profile stacks are root first; pprof's are leaf first.
                location_id: p.stacks[stack as usize]
                    .iter()
                    .rev()
                    .map(|f| u64::from(*f) + 1)
                    .collect(),
                value: vec![n, n * period],
                label,
            });
        }
    }
    let mut comment: Vec<i64> = p.notes.iter().map(|n| strings.at(n)).collect();
    comment.push(strings.at(&format!("argstash record, {} sampler", p.sampler)));
    let started = SystemTime::now()
        .checked_sub(p.elapsed)
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as i64);
    PbProfile {
        sample_type: vec![
            ValueType {
                r#type: samples,
                unit: count,
            },
            ValueType {
                r#type: time,
                unit: ns,
            },
        ],
        sample,
        location,
        function,
        string_table: strings.table,
        time_nanos: started,
        duration_nanos: p.elapsed.as_nanos() as i64,
        period_type: Some(ValueType {
            r#type: time,
            unit: ns,
        }),
        period,
        comment,
        default_sample_type: time,
    }
}

/// Writes the profile, gzip-compressed (what `.pb.gz` readers expect).
pub fn write(p: &Profile, wall: bool, w: &mut dyn Write) -> Result<()> {
    let raw = message(p, wall).encode_to_vec();
    w.write_all(&gzip(&raw)?)?;
    Ok(())
}

/// `data` as one gzip member (zlib-rs's deflate, with the gzip wrapper).
fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    // Window bits 16 + 15: the gzip header and trailer around deflate.
    let config = zlib_rs::DeflateConfig {
        window_bits: 31,
        ..zlib_rs::DeflateConfig::default()
    };
    // The bound is for zlib's 6-byte wrapper; gzip's is 18 bytes.
    let mut out = vec![0u8; zlib_rs::compress_bound(data.len()) + 32];
    let (written, rc) = zlib_rs::compress_slice(&mut out, data, config);
    if rc != zlib_rs::ReturnCode::Ok {
        bail!("gzip compression failed ({rc:?})");
    }
    let n = written.len();
    out.truncate(n);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::profile::{FrameInfo, FrameOrigin};
    use std::time::Duration;

    fn f(name: &str) -> FrameInfo {
        FrameInfo {
            name: name.into(),
            file: Some("/srv/app".into()),
            origin: FrameOrigin::Native,
        }
    }

    #[test]
    fn frames_are_functions_and_stacks_leaf_first() {
        let mut p = Profile::new(100);
        for _ in 0..3 {
            p.add(7, "w", vec![f("hot"), f("main")], Duration::ZERO);
        }
        p.add(7, "w", vec![f("main")], Duration::ZERO);
        let m = message(&p, false);
        assert_eq!(m.string_table[0], "");
        assert_eq!(m.function.len(), 2);
        let name = |id: u64| &m.string_table[m.function[id as usize - 1].name as usize];
        let hot = m.sample.iter().find(|s| s.location_id.len() == 2).unwrap();
        assert_eq!(name(hot.location_id[0]), "hot");
        assert_eq!(name(hot.location_id[1]), "main");
        assert_eq!(hot.value, vec![3, 3 * 10_000_000]);
        assert_eq!(m.period, 10_000_000);
        // Hooked arguments as labels: numbers as numbers, the rest as text.
        p.add(7, "w", vec![f("hot"), f("main")], Duration::ZERO);
        p.label_last(
            7,
            vec![
                ("hot.n".into(), "42".into()),
                ("hot.p".into(), "0x7f00".into()),
            ],
        );
        let m = message(&p, false);
        let labelled = m.sample.iter().find(|s| s.label.len() == 4).unwrap();
        assert_eq!(labelled.value[0], 1);
        let key = |l: &Label| m.string_table[l.key as usize].as_str();
        assert_eq!(
            (key(&labelled.label[2]), labelled.label[2].num),
            ("hot.n", 42)
        );
        assert_eq!(m.string_table[labelled.label[3].str as usize], "0x7f00");
        // Decodes as written, through the gzip wrapper.
        let gz = gzip(&m.encode_to_vec()).unwrap();
        assert_eq!(&gz[..2], &[0x1f, 0x8b]);
    }
}
