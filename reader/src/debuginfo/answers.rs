//! Symbolization answers kept on disk between runs: what a module's DWARF said
//! about each address a backtrace asked about.
//!
//! A cold `argstash bt` of a Python process spends most of its time in
//! libpython's DWARF: source frames, inlined calls and typed parameters of the
//! dozen evaluator frames, each needing a pass over a large compilation unit
//! (ceval.c). Those answers depend only on the debug file and on this reader's
//! code, and the same return addresses come back in every backtrace of every
//! process running that build. A [`ModuleDebug`](crate::debuginfo::ModuleDebug)
//! therefore opens the answers an earlier run saved for its debug file
//! ([`Saved`]), asks it before the DWARF, and saves what it found in the DWARF
//! ([`store`]).
//!
//! An entry `<build-id>.answers` sits beside the DWARF entries of the
//! [`DiskCache`] and shares its bound and eviction. It is used only when it was
//! written for the same debug file (build-id, size, modification time) by a
//! reader built from the same sources and dependency versions (a fingerprint
//! computed at build time), and only when the CRC-32 of its header and sorted
//! index matches. Each answer is a record of its own, with its own CRC-32,
//! decoded only when asked for: opening an entry of thousands of answers costs
//! a read and a check of the index, not decoding them all. A damaged record is
//! a miss for its address alone (and is dropped at the next save). Decoding
//! bounds every length by the bytes left and nests types at most [`MAX_DEPTH`]
//! deep: a damaged entry is a miss, never a panic or a huge allocation.
//! Addresses are stored relative to the module's load bias, so a process that
//! maps the library elsewhere hits the same entry; they are moved while
//! encoding and decoding, not copied.

use std::collections::HashMap;
use std::io::Write;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use super::source::{CallSiteParam, SourceFrame};
use crate::args::{FunctionInfo, Location, Member, Param, TypeDesc, TypeKind};
use crate::debugfile::crc32;
use crate::dwarf_cache::{DiskCache, EntryKey, StoreError, ANSWERS_SUFFIX as SUFFIX};

const MAGIC: &[u8; 8] = b"ARGSTANS";
const VERSION: u32 = 1;
/// Deepest type nesting read back (pointers to pointers, arrays of structs).
pub const MAX_DEPTH: usize = 64;
/// Largest answers entry read.
const MAX_LEN: u64 = 16 << 20;

/// What this reader's code is: a hash of its sources and of the workspace's
/// `Cargo.lock`, computed by `build.rs`. Answers written by another build are
/// stale (its DWARF reading may differ).
fn fingerprint() -> u64 {
    env!("ARGSTASH_READER_FINGERPRINT").parse().unwrap_or(0)
}

/// The answers about one debug file, by runtime address (an entry holds them
/// relative to the load bias: they are moved by it when written and read).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Answers {
    /// Source frames at an address.
    pub frames: HashMap<u64, Arc<[SourceFrame]>>,
    /// Call-site parameters by (address in the caller, return address).
    pub call_sites: HashMap<(u64, u64), Vec<CallSiteParam>>,
}

/// Where the answers entry of `key` lives in `disk`.
pub fn entry_path(disk: &DiskCache, key: &EntryKey) -> PathBuf {
    disk.root().join(key.file_name_with(SUFFIX))
}

/// Most answers of each kind an entry keeps (the ones found last are kept first).
const MAX_RECORDS: usize = 8192;
/// Bytes of one index row of a frames answer: address, offset, length.
const FRAME_ROW: usize = 16;
/// Bytes of one index row of a call-site answer: two addresses, offset, length.
const SITE_ROW: usize = 24;

/// A saved entry, validated and indexed; each answer is decoded (and its own
/// CRC-32 checked) only when it is asked for, so a large entry costs little
/// more to open than a small one.
#[derive(Debug)]
pub struct Saved {
    bytes: Vec<u8>,
    /// Bias-relative address, and the record's bytes (payload, then its CRC-32).
    frames: Vec<(u64, Range<usize>)>,
    /// Bias-relative (address in the caller, return address), and the record's bytes.
    sites: Vec<((u64, u64), Range<usize>)>,
    /// The load bias of the module the answers are asked for.
    bias: u64,
}

impl Saved {
    /// The entry saved for the debug file `key`, for a module loaded at `bias`,
    /// if a valid one exists.
    pub fn load(disk: &DiskCache, key: &EntryKey, bias: u64) -> Option<Saved> {
        if !crate::shared_file::is_private_dir(disk.root()) {
            return None;
        }
        // Never follows a link nor blocks on a FIFO planted in place of an entry.
        let file =
            crate::shared_file::open_read(&entry_path(disk, key), &[crate::shared_file::own_uid()])
                .ok()??;
        if file.metadata().ok()?.len() > MAX_LEN {
            return None;
        }
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_LEN), &mut bytes).ok()?;
        Saved::parse(bytes, key, bias)
    }

    /// Validates an entry's header and index (CRC-32, bounds, order).
    pub fn parse(bytes: Vec<u8>, key: &EntryKey, bias: u64) -> Option<Saved> {
        let mut r = In {
            b: &bytes,
            at: 0,
            delta: 0,
        };
        if r.take(MAGIC.len())? != MAGIC
            || r.u32()? != VERSION
            || r.u64()? != fingerprint()
            || r.u64()? != key.size
            || r.u64()? != key.mtime_ns as u64
            || r.bytes()? != key.build_id.as_slice()
        {
            return None;
        }
        let nframes = usize::try_from(r.u32()?).ok()?;
        let nsites = usize::try_from(r.u32()?).ok()?;
        let index_len = nframes
            .checked_mul(FRAME_ROW)?
            .checked_add(nsites.checked_mul(SITE_ROW)?)?;
        let head_len = r.at.checked_add(index_len)?;
        let head = bytes.get(..head_len)?;
        let crc = u32::from_le_bytes(bytes.get(head_len..head_len + 4)?.try_into().ok()?);
        if crc32(head) != crc {
            return None;
        }
        let blob = head_len + 4;
        let record = |off: u32, len: u32| {
            let start = blob.checked_add(usize::try_from(off).ok()?)?;
            let end = start.checked_add(usize::try_from(len).ok()?)?;
            (len >= 4 && end <= bytes.len()).then_some(start..end)
        };
        let mut frames = Vec::with_capacity(nframes);
        for _ in 0..nframes {
            let pc = r.u64()?;
            let range = record(r.u32()?, r.u32()?)?;
            if frames.last().is_some_and(|(last, _)| *last >= pc) {
                return None;
            }
            frames.push((pc, range));
        }
        let mut sites = Vec::with_capacity(nsites);
        for _ in 0..nsites {
            let at = (r.u64()?, r.u64()?);
            let range = record(r.u32()?, r.u32()?)?;
            if sites.last().is_some_and(|(last, _)| *last >= at) {
                return None;
            }
            sites.push((at, range));
        }
        Some(Saved {
            bytes,
            frames,
            sites,
            bias,
        })
    }

    /// How many answers the entry holds.
    pub fn len(&self) -> usize {
        self.frames.len() + self.sites.len()
    }

    /// True when the entry holds no answer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The saved source frames at runtime address `pc`; `None` when none were
    /// saved or the record is damaged.
    pub fn frames(&self, pc: u64) -> Option<Arc<[SourceFrame]>> {
        let rel = pc.wrapping_sub(self.bias);
        let i = self.frames.binary_search_by_key(&rel, |(p, _)| *p).ok()?;
        let mut r = self.reader(&self.frames[i].1)?;
        let list = (0..r.len()?)
            .map(|_| r.frame())
            .collect::<Option<Arc<[_]>>>()?;
        r.done().then_some(list)
    }

    /// The saved call-site parameters of the call in the caller at `caller_pc`
    /// returning to `return_address` (runtime addresses).
    pub fn call_sites(&self, caller_pc: u64, return_address: u64) -> Option<Vec<CallSiteParam>> {
        let rel = (
            caller_pc.wrapping_sub(self.bias),
            return_address.wrapping_sub(self.bias),
        );
        let i = self.sites.binary_search_by_key(&rel, |(k, _)| *k).ok()?;
        let mut r = self.reader(&self.sites[i].1)?;
        let params = (0..r.len()?)
            .map(|_| Some((r.bytes()?.to_vec(), r.bytes()?.to_vec())))
            .collect::<Option<Vec<_>>>()?;
        r.done().then_some(params)
    }

    /// A reader of the record's payload, when its CRC-32 matches.
    fn reader(&self, range: &Range<usize>) -> Option<In<'_>> {
        let payload = self.intact(range)?;
        Some(In {
            b: payload,
            at: 0,
            delta: self.bias,
        })
    }

    /// The record's payload, when its CRC-32 matches.
    fn intact(&self, range: &Range<usize>) -> Option<&[u8]> {
        let record = self.bytes.get(range.clone())?;
        let (payload, crc) = record.split_at_checked(record.len().checked_sub(4)?)?;
        (crc32(payload) == u32::from_le_bytes(crc.try_into().ok()?)).then_some(payload)
    }
}

/// Saves the answers found since `saved` was read (`new`, by runtime address,
/// for a module loaded at `bias`) together with the intact ones `saved` holds,
/// replacing the entry, then keeps the cache directory within its bound.
/// Failing only costs the next run time.
pub fn store(
    disk: &DiskCache,
    key: &EntryKey,
    bias: u64,
    saved: Option<&Saved>,
    new: &Answers,
) -> Result<PathBuf, StoreError> {
    let bytes = encode(key, bias, saved, new);
    disk.replace_entry(&key.file_name_with(SUFFIX), |f| f.write_all(&bytes))
}

/// An entry's bytes: the header, the index of every answer (sorted), the
/// header's CRC-32, then each answer's record (payload and its own CRC-32).
/// Addresses are written less `bias`. `new` answers replace saved ones at the
/// same address; at most 8,192 of each kind are kept, new ones first.
pub fn encode(key: &EntryKey, bias: u64, saved: Option<&Saved>, new: &Answers) -> Vec<u8> {
    let delta = bias.wrapping_neg();
    let record = |write: &dyn Fn(&mut Out)| {
        let mut out = Out {
            bytes: Vec::new(),
            delta,
        };
        write(&mut out);
        let crc = crc32(&out.bytes);
        out.u32(crc);
        std::borrow::Cow::Owned(out.bytes)
    };
    let mut frames: std::collections::BTreeMap<u64, std::borrow::Cow<'_, [u8]>> =
        std::collections::BTreeMap::new();
    for (pc, list) in &new.frames {
        if frames.len() == MAX_RECORDS {
            break;
        }
        let bytes = record(&|out: &mut Out| {
            out.len(list.len());
            for f in list.iter() {
                out.frame(f);
            }
        });
        frames.insert(pc.wrapping_add(delta), bytes);
    }
    let mut sites: std::collections::BTreeMap<(u64, u64), std::borrow::Cow<'_, [u8]>> =
        std::collections::BTreeMap::new();
    for ((caller, ret), params) in &new.call_sites {
        if sites.len() == MAX_RECORDS {
            break;
        }
        let bytes = record(&|out: &mut Out| {
            out.len(params.len());
            for (loc, value) in params {
                out.bytes(loc);
                out.bytes(value);
            }
        });
        sites.insert((caller.wrapping_add(delta), ret.wrapping_add(delta)), bytes);
    }
    if let Some(saved) = saved {
        for (pc, range) in &saved.frames {
            if frames.len() == MAX_RECORDS {
                break;
            }
            if let (false, Some(_)) = (frames.contains_key(pc), saved.intact(range)) {
                frames.insert(*pc, std::borrow::Cow::Borrowed(&saved.bytes[range.clone()]));
            }
        }
        for (at, range) in &saved.sites {
            if sites.len() == MAX_RECORDS {
                break;
            }
            if let (false, Some(_)) = (sites.contains_key(at), saved.intact(range)) {
                sites.insert(*at, std::borrow::Cow::Borrowed(&saved.bytes[range.clone()]));
            }
        }
    }

    let mut out = Out::header(key);
    out.len(frames.len());
    out.len(sites.len());
    let mut offset = 0usize;
    let mut place = |out: &mut Out, len: usize| {
        out.u32(u32::try_from(offset).unwrap_or(u32::MAX));
        out.u32(u32::try_from(len).unwrap_or(u32::MAX));
        offset += len;
    };
    for (pc, bytes) in &frames {
        out.u64(*pc);
        place(&mut out, bytes.len());
    }
    for ((caller, ret), bytes) in &sites {
        out.u64(*caller);
        out.u64(*ret);
        place(&mut out, bytes.len());
    }
    let crc = crc32(&out.bytes);
    out.u32(crc);
    for bytes in frames.values().chain(sites.values()) {
        out.bytes.extend_from_slice(bytes);
    }
    out.bytes
}

/// The encoder.
struct Out {
    bytes: Vec<u8>,
    /// Added (wrapping) to every address written.
    delta: u64,
}

impl Out {
    /// An entry's fixed start: magic, version, this build's fingerprint and the
    /// debug file's key (addresses written after it are not moved).
    fn header(key: &EntryKey) -> Out {
        let mut out = Out {
            bytes: Vec::new(),
            delta: 0,
        };
        out.bytes.extend_from_slice(MAGIC);
        out.u32(VERSION);
        out.u64(fingerprint());
        out.u64(key.size);
        out.u64(key.mtime_ns as u64);
        out.bytes(&key.build_id);
        out
    }

    fn u8(&mut self, v: u8) {
        self.bytes.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    fn addr(&mut self, v: u64) {
        self.u64(v.wrapping_add(self.delta));
    }
    fn len(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }
    fn bytes(&mut self, b: &[u8]) {
        self.len(b.len());
        self.bytes.extend_from_slice(b);
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    fn opt_str(&mut self, s: Option<&str>) {
        self.u8(u8::from(s.is_some()));
        if let Some(s) = s {
            self.str(s);
        }
    }
    fn opt_u64(&mut self, v: Option<u64>) {
        self.u8(u8::from(v.is_some()));
        if let Some(v) = v {
            self.u64(v);
        }
    }
    fn frame(&mut self, f: &SourceFrame) {
        self.opt_str(f.function.as_deref());
        self.opt_str(f.file.as_deref());
        self.opt_u64(f.line.map(u64::from));
        self.u8(u8::from(f.info.is_some()));
        if let Some(info) = &f.info {
            self.info(info);
        }
    }
    fn info(&mut self, info: &FunctionInfo) {
        self.opt_str(info.name.as_deref());
        self.u8(u8::from(info.entry.is_some()));
        if let Some(entry) = info.entry {
            self.addr(entry);
        }
        self.len(info.params.len());
        for p in &info.params {
            self.opt_str(p.name.as_deref());
            self.ty(&p.ty);
            self.location(&p.location);
        }
        self.u8(u8::from(info.variadic));
        self.u8(u8::from(info.returns.is_some()));
        if let Some(t) = &info.returns {
            self.ty(t);
        }
        self.location(&info.frame_base);
        self.u8(u8::from(info.encoding.is_some()));
        if let Some(e) = info.encoding {
            self.u8(e.address_size);
            self.u8(u8::from(e.format == gimli::Format::Dwarf64));
            self.u32(u32::from(e.version));
        }
        self.u8(u8::from(info.cpp));
    }
    fn location(&mut self, l: &Location) {
        self.len(l.ranges.len());
        for (range, expr) in &l.ranges {
            self.u8(u8::from(range.is_some()));
            if let Some(r) = range {
                self.addr(r.start);
                self.addr(r.end);
            }
            self.bytes(expr);
        }
    }
    fn ty(&mut self, t: &TypeDesc) {
        self.str(&t.name);
        self.u64(t.size);
        match &t.kind {
            TypeKind::Void => self.u8(0),
            TypeKind::Signed => self.u8(1),
            TypeKind::Unsigned => self.u8(2),
            TypeKind::Bool => self.u8(3),
            TypeKind::Char { signed } => {
                self.u8(4);
                self.u8(u8::from(*signed));
            }
            TypeKind::Float => self.u8(5),
            TypeKind::Enum {
                enumerators,
                signed,
            } => {
                self.u8(6);
                self.u8(u8::from(*signed));
                self.len(enumerators.len());
                for (name, value) in enumerators {
                    self.str(name);
                    self.u64(*value as u64);
                }
            }
            TypeKind::Pointer(to) => {
                self.u8(7);
                self.ty(to);
            }
            TypeKind::Struct { members } => {
                self.u8(8);
                self.members(members);
            }
            TypeKind::Union { members } => {
                self.u8(9);
                self.members(members);
            }
            TypeKind::Array { element, count } => {
                self.u8(10);
                self.ty(element);
                self.opt_u64(*count);
            }
            TypeKind::Function => self.u8(11),
            TypeKind::Unknown => self.u8(12),
        }
    }
    fn members(&mut self, members: &[Member]) {
        self.len(members.len());
        for m in members {
            self.opt_str(m.name.as_deref());
            self.u64(m.offset);
            self.ty(&m.ty);
            self.u8(u8::from(m.bit_field));
        }
    }
}

/// The decoder: every read is bounds-checked and `None` past the end.
struct In<'a> {
    b: &'a [u8],
    at: usize,
    /// Added (wrapping) to every address read.
    delta: u64,
}

impl<'a> In<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let out = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(out)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    /// True when every byte was read.
    fn done(&self) -> bool {
        self.at == self.b.len()
    }
    fn flag(&mut self) -> Option<bool> {
        match self.u8()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn addr(&mut self) -> Option<u64> {
        Some(self.u64()?.wrapping_add(self.delta))
    }
    /// A count; never more than the bytes left, as every element takes at least one.
    fn len(&mut self) -> Option<usize> {
        let n = usize::try_from(self.u32()?).ok()?;
        (n <= self.b.len() - self.at).then_some(n)
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.len()?;
        self.take(n)
    }
    fn str(&mut self) -> Option<String> {
        Some(std::str::from_utf8(self.bytes()?).ok()?.to_string())
    }
    fn opt<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.flag()? {
            Some(Some(read(self)?))
        } else {
            Some(None)
        }
    }
    fn frame(&mut self) -> Option<SourceFrame> {
        Some(SourceFrame {
            function: self.opt(Self::str)?,
            file: self.opt(Self::str)?,
            line: self.opt(|r| u32::try_from(r.u64()?).ok())?,
            info: self.opt(Self::info)?,
        })
    }
    fn info(&mut self) -> Option<FunctionInfo> {
        let name = self.opt(Self::str)?;
        let entry = self.opt(Self::addr)?;
        let params = (0..self.len()?)
            .map(|_| {
                Some(Param {
                    name: self.opt(Self::str)?,
                    ty: self.ty(0)?,
                    location: self.location()?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let variadic = self.flag()?;
        let returns = self.opt(|r| r.ty(0))?;
        let frame_base = self.location()?;
        let encoding = self.opt(|r| {
            Some(gimli::Encoding {
                address_size: r.u8()?,
                format: if r.flag()? {
                    gimli::Format::Dwarf64
                } else {
                    gimli::Format::Dwarf32
                },
                version: u16::try_from(r.u32()?).ok()?,
            })
        })?;
        Some(FunctionInfo {
            name,
            entry,
            params,
            variadic,
            returns,
            frame_base,
            encoding,
            cpp: self.flag()?,
        })
    }
    fn location(&mut self) -> Option<Location> {
        let ranges = (0..self.len()?)
            .map(|_| {
                let range: Option<Range<u64>> = self.opt(|r| Some(r.addr()?..r.addr()?))?;
                Some((range, self.bytes()?.to_vec()))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Location { ranges })
    }
    fn ty(&mut self, depth: usize) -> Option<TypeDesc> {
        if depth > MAX_DEPTH {
            return None;
        }
        let name = self.str()?;
        let size = self.u64()?;
        let kind = match self.u8()? {
            0 => TypeKind::Void,
            1 => TypeKind::Signed,
            2 => TypeKind::Unsigned,
            3 => TypeKind::Bool,
            4 => TypeKind::Char {
                signed: self.flag()?,
            },
            5 => TypeKind::Float,
            6 => {
                let signed = self.flag()?;
                let enumerators = (0..self.len()?)
                    .map(|_| Some((self.str()?, self.u64()? as i64)))
                    .collect::<Option<Vec<_>>>()?;
                TypeKind::Enum {
                    enumerators,
                    signed,
                }
            }
            7 => TypeKind::Pointer(Box::new(self.ty(depth + 1)?)),
            8 => TypeKind::Struct {
                members: self.members(depth)?,
            },
            9 => TypeKind::Union {
                members: self.members(depth)?,
            },
            10 => TypeKind::Array {
                element: Box::new(self.ty(depth + 1)?),
                count: self.opt(Self::u64)?,
            },
            11 => TypeKind::Function,
            12 => TypeKind::Unknown,
            _ => return None,
        };
        Some(TypeDesc { name, kind, size })
    }
    fn members(&mut self, depth: usize) -> Option<Vec<Member>> {
        (0..self.len()?)
            .map(|_| {
                Some(Member {
                    name: self.opt(Self::str)?,
                    offset: self.u64()?,
                    ty: self.ty(depth + 1)?,
                    bit_field: self.flag()?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn key() -> EntryKey {
        EntryKey {
            build_id: vec![0xab, 0xcd, 0x01],
            size: 12345,
            mtime_ns: 1_700_000_000_123_456_789,
        }
    }

    fn int(name: &str) -> TypeDesc {
        TypeDesc {
            name: name.into(),
            kind: TypeKind::Signed,
            size: 4,
        }
    }

    /// Answers using every kind of type, location and option.
    fn sample() -> Answers {
        let point = TypeDesc {
            name: "struct point".into(),
            kind: TypeKind::Struct {
                members: vec![
                    Member {
                        name: Some("x".into()),
                        offset: 0,
                        ty: int("int"),
                        bit_field: false,
                    },
                    Member {
                        name: None,
                        offset: 4,
                        ty: TypeDesc {
                            name: "union u".into(),
                            kind: TypeKind::Union { members: vec![] },
                            size: 4,
                        },
                        bit_field: true,
                    },
                ],
            },
            size: 8,
        };
        let kinds = vec![
            TypeDesc {
                name: "void".into(),
                kind: TypeKind::Void,
                size: 0,
            },
            TypeDesc {
                name: "enum color".into(),
                kind: TypeKind::Enum {
                    enumerators: vec![("RED".into(), -1), ("BLUE".into(), i64::MAX)],
                    signed: true,
                },
                size: 4,
            },
            TypeDesc {
                name: "struct point *".into(),
                kind: TypeKind::Pointer(Box::new(point.clone())),
                size: 8,
            },
            TypeDesc {
                name: "char [16]".into(),
                kind: TypeKind::Array {
                    element: Box::new(TypeDesc {
                        name: "char".into(),
                        kind: TypeKind::Char { signed: true },
                        size: 1,
                    }),
                    count: Some(16),
                },
                size: 16,
            },
            TypeDesc {
                name: "_Bool".into(),
                kind: TypeKind::Bool,
                size: 1,
            },
            TypeDesc {
                name: "double".into(),
                kind: TypeKind::Float,
                size: 8,
            },
            TypeDesc {
                name: "unsigned long".into(),
                kind: TypeKind::Unsigned,
                size: 8,
            },
            TypeDesc {
                name: "int (*)(void)".into(),
                kind: TypeKind::Function,
                size: 0,
            },
            TypeDesc {
                name: "?".into(),
                kind: TypeKind::Unknown,
                size: 0,
            },
        ];
        let params = kinds
            .into_iter()
            .enumerate()
            .map(|(i, ty)| Param {
                name: (i % 2 == 0).then(|| format!("p{i}")),
                ty,
                location: Location {
                    ranges: vec![
                        (Some(0x1000 + i as u64..0x1010), vec![0x55]),
                        (None, vec![0x91, 0x68]),
                    ],
                },
            })
            .collect();
        let info = FunctionInfo {
            name: Some("ns::work".into()),
            entry: Some(0x1000),
            params,
            variadic: true,
            returns: Some(point),
            frame_base: Location {
                ranges: vec![(None, vec![0x9c])],
            },
            encoding: Some(gimli::Encoding {
                address_size: 8,
                format: gimli::Format::Dwarf32,
                version: 5,
            }),
            cpp: true,
        };
        let mut answers = Answers::default();
        answers.frames.insert(
            0x1004,
            Arc::from(vec![
                SourceFrame {
                    function: Some("inlined".into()),
                    file: Some("a.c".into()),
                    line: Some(7),
                    info: None,
                },
                SourceFrame {
                    function: Some("ns::work".into()),
                    file: None,
                    line: None,
                    info: Some(info),
                },
            ]),
        );
        answers.frames.insert(0x2000, Arc::from([]));
        answers
            .call_sites
            .insert((0x1004, 0x1009), vec![(vec![0x55], vec![0x73, 0x00])]);
        answers.call_sites.insert((0x1, 0x2), Vec::new());
        answers
    }

    /// Every answer of `answers` as `saved` gives it back.
    fn assert_holds(saved: &Saved, answers: &Answers) {
        assert_eq!(saved.len(), answers.frames.len() + answers.call_sites.len());
        for (pc, list) in &answers.frames {
            assert_eq!(saved.frames(*pc).as_ref(), Some(list), "frames at {pc:#x}");
        }
        for ((caller, ret), params) in &answers.call_sites {
            assert_eq!(saved.call_sites(*caller, *ret).as_ref(), Some(params));
        }
    }

    #[test]
    fn answers_round_trip() {
        let answers = sample();
        let bias = 0x5555_0000_0000;
        let bytes = encode(&key(), bias, None, &answers);
        let saved = Saved::parse(bytes, &key(), bias).unwrap();
        assert_holds(&saved, &answers);
        assert_eq!(saved.frames(0x3000), None, "never asked");
    }

    #[test]
    fn another_bias_moves_every_address() {
        // Saved by a process with the module at 0, read by one with it at 0x7f00_0000_0000.
        let bytes = encode(&key(), 0, None, &sample());
        let moved = Saved::parse(bytes.clone(), &key(), 0x7f00_0000_0000).unwrap();
        assert_eq!(moved.frames(0x1004), None);
        let list = moved.frames(0x7f00_0000_1004).unwrap();
        let info = list[1].info.clone().unwrap();
        assert_eq!(info.entry, Some(0x7f00_0000_1000));
        assert_eq!(
            info.params[0].location.ranges[0].0,
            Some(0x7f00_0000_1000..0x7f00_0000_1010)
        );
        assert_eq!(info.params[0].location.ranges[1].0, None);
        assert!(moved
            .call_sites(0x7f00_0000_1004, 0x7f00_0000_1009)
            .is_some());
        // Saved again from the moved process: the same bytes.
        let mut again = Answers::default();
        again.frames.insert(0x7f00_0000_1004, list);
        let resaved = encode(&key(), 0x7f00_0000_0000, Some(&moved), &again);
        assert_eq!(resaved, bytes, "and back");
    }

    #[test]
    fn new_answers_join_the_saved_ones() {
        let first = sample();
        let saved = Saved::parse(encode(&key(), 0, None, &first), &key(), 0).unwrap();
        let mut new = Answers::default();
        new.frames.insert(0x5000, Arc::from([]));
        new.call_sites.insert((0x1004, 0x1009), Vec::new()); // replaces the saved one
        let merged = Saved::parse(encode(&key(), 0, Some(&saved), &new), &key(), 0).unwrap();
        let mut all = first.clone();
        all.frames.insert(0x5000, Arc::from([]));
        all.call_sites.insert((0x1004, 0x1009), Vec::new());
        assert_holds(&merged, &all);
    }

    #[test]
    fn another_file_or_a_damaged_entry_never_gives_a_wrong_answer() {
        let answers = sample();
        let bytes = encode(&key(), 0, None, &answers);
        let mut other = key();
        other.mtime_ns += 1;
        assert!(
            Saved::parse(bytes.clone(), &other, 0).is_none(),
            "another mtime"
        );
        // Every truncation and every single flipped bit: the entry is refused, or
        // each answer is either right or a miss. Never a panic.
        let check = |bytes: Vec<u8>, what: &str| {
            let Some(saved) = Saved::parse(bytes, &key(), 0) else {
                return;
            };
            for (pc, list) in &answers.frames {
                let got = saved.frames(*pc);
                assert!(
                    got.is_none() || got.as_ref() == Some(list),
                    "{what}: frames at {pc:#x}"
                );
            }
            for ((caller, ret), params) in &answers.call_sites {
                let got = saved.call_sites(*caller, *ret);
                assert!(
                    got.is_none() || got.as_ref() == Some(params),
                    "{what}: call site"
                );
            }
        };
        for len in 0..bytes.len() {
            check(bytes[..len].to_vec(), &format!("cut at {len}"));
        }
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            check(bad, &format!("byte {at} flipped"));
        }
        // A damaged record is left out when the entry is saved again.
        let last = bytes.len() - 10;
        let mut bad = bytes.clone();
        bad[last] ^= 0x01;
        let damaged = Saved::parse(bad, &key(), 0).unwrap();
        let kept = Saved::parse(
            encode(&key(), 0, Some(&damaged), &Answers::default()),
            &key(),
            0,
        );
        assert_eq!(
            kept.unwrap().len(),
            answers.frames.len() + answers.call_sites.len() - 1
        );
    }

    #[test]
    fn hostile_contents_with_valid_checksums_do_not_panic() {
        // A count far beyond the entry's length, with a valid header CRC: refused.
        let mut out = Out::header(&key());
        out.u32(u32::MAX);
        out.u32(0);
        let crc = crc32(&out.bytes);
        out.u32(crc);
        assert!(Saved::parse(out.bytes, &key(), 0).is_none());

        // A type nested past the limit, in a record with a valid CRC: a miss.
        let mut deep = TypeDesc {
            name: "int".into(),
            kind: TypeKind::Signed,
            size: 4,
        };
        for _ in 0..MAX_DEPTH + 2 {
            deep = TypeDesc {
                name: "p".into(),
                kind: TypeKind::Pointer(Box::new(deep)),
                size: 8,
            };
        }
        let mut answers = Answers::default();
        let mut info = sample().frames[&0x1004][1].info.clone().unwrap();
        info.returns = Some(deep);
        answers.frames.insert(
            1,
            Arc::from(vec![SourceFrame {
                function: None,
                file: None,
                line: None,
                info: Some(info),
            }]),
        );
        let saved = Saved::parse(encode(&key(), 0, None, &answers), &key(), 0).unwrap();
        assert_eq!(saved.frames(1), None, "nested too deep");
    }

    #[test]
    fn stored_answers_load_back_and_count_in_the_bound() {
        let dir = std::env::temp_dir().join(format!("argstash-answers-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let disk = DiskCache::new(dir.clone(), 1 << 20);
        assert!(Saved::load(&disk, &key(), 0).is_none());
        store(&disk, &key(), 0, None, &sample()).unwrap();
        assert_holds(&Saved::load(&disk, &key(), 0).unwrap(), &sample());
        // A bound smaller than the entry evicts it at the next write.
        let small = DiskCache::new(dir.clone(), 16);
        let mut other = key();
        other.build_id = vec![0x99];
        store(&small, &other, 0, None, &Answers::default()).unwrap();
        assert!(Saved::load(&disk, &key(), 0).is_none(), "evicted");
        let _ = fs::remove_dir_all(&dir);
    }
}
