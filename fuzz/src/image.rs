//! A target's memory decoded from fuzz bytes: a few header words, then regions.
//!
//! Layout (all little-endian): `words` 64-bit header words the target uses as it
//! likes (registers, addresses), then regions until the input ends, each
//! `address: u64, length: u16, bytes[length]` (a short last region keeps the bytes
//! there are). Regions that touch are joined, so a read may span them; a read
//! that leaves the regions fails, as an unmapped page does. The same type writes
//! seeds ([`Image::encode`]), so recorded real memory round-trips.

use std::collections::BTreeMap;

use reader::memory::{Memory, MemoryError};
use reader::procfs::{MapEntry, Perms};

/// Most bytes one region holds in the encoding.
const MAX_REGION: usize = u16::MAX as usize;

/// Header words and sparse memory decoded from one input.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Image {
    /// The header words (missing ones read as 0).
    pub words: Vec<u64>,
    /// Joined regions by start address.
    pub regions: BTreeMap<u64, Vec<u8>>,
}

impl Image {
    /// Decodes `data`, expecting `words` header words.
    pub fn decode(data: &[u8], words: usize) -> Image {
        let mut at = 0;
        let mut take = |n: usize| {
            let end = (at + n).min(data.len());
            let s = &data[at.min(data.len())..end];
            at = end;
            s
        };
        let word = |s: &[u8]| {
            let mut w = [0u8; 8];
            w[..s.len()].copy_from_slice(s);
            u64::from_le_bytes(w)
        };
        let header: Vec<u64> = (0..words).map(|_| word(take(8))).collect();
        let mut raw: Vec<(u64, Vec<u8>)> = Vec::new();
        loop {
            let addr = take(8);
            if addr.len() < 8 {
                break;
            }
            let addr = word(addr);
            let len = take(2);
            if len.len() < 2 {
                break;
            }
            let len = u16::from_le_bytes([len[0], len[1]]) as usize;
            let bytes = take(len);
            if bytes.is_empty() {
                continue;
            }
            // A region running past the top of the address space is cut there.
            let room = (u64::MAX - addr).min(bytes.len() as u64) as usize;
            raw.push((addr, bytes[..room].to_vec()));
        }
        raw.sort_by_key(|(a, _)| *a);
        let mut regions: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        let mut last: Option<(u64, u64)> = None; // (start, end) of the last joined region
        for (addr, bytes) in raw {
            match last {
                Some((start, end)) if addr <= end => {
                    let r = regions.get_mut(&start).expect("joined region exists");
                    let skip = (end - addr) as usize;
                    if skip < bytes.len() {
                        r.extend_from_slice(&bytes[skip..]);
                    }
                    last = Some((start, start + r.len() as u64));
                }
                _ => {
                    last = Some((addr, addr + bytes.len() as u64));
                    regions.insert(addr, bytes);
                }
            }
        }
        Image {
            words: header,
            regions,
        }
    }

    /// Header word `i` (0 when the input was too short).
    pub fn word(&self, i: usize) -> u64 {
        self.words.get(i).copied().unwrap_or(0)
    }

    /// Encodes header words and regions (long regions split) as [`Image::decode`] reads them.
    pub fn encode(words: &[u64], regions: &BTreeMap<u64, Vec<u8>>) -> Vec<u8> {
        let mut out = Vec::new();
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for (addr, bytes) in regions {
            for (i, chunk) in bytes.chunks(MAX_REGION).enumerate() {
                out.extend_from_slice(&(addr + (i * MAX_REGION) as u64).to_le_bytes());
                out.extend_from_slice(&(chunk.len() as u16).to_le_bytes());
                out.extend_from_slice(chunk);
            }
        }
        out
    }

    /// One anonymous private `r-x` mapping per region, page-aligned, as an arena has.
    pub fn maps(&self) -> Vec<MapEntry> {
        self.regions
            .iter()
            .map(|(addr, bytes)| MapEntry {
                start: addr & !0xfff,
                end: (addr.saturating_add(bytes.len() as u64)).saturating_add(0xfff) & !0xfff,
                perms: Perms {
                    read: true,
                    write: false,
                    exec: true,
                    private: true,
                },
                offset: 0,
                inode: 0,
                path: String::new(),
            })
            .collect()
    }
}

impl Memory for Image {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let fail = || MemoryError::Read {
            addr,
            len: buf.len(),
            source: std::io::Error::from_raw_os_error(libc::EFAULT),
        };
        let Some((start, bytes)) = self.regions.range(..=addr).next_back() else {
            return Err(fail());
        };
        let off = (addr - start) as usize;
        match off.checked_add(buf.len()) {
            Some(end) if end <= bytes.len() && (addr - start) <= bytes.len() as u64 => {
                buf.copy_from_slice(&bytes[off..end]);
                Ok(())
            }
            _ => Err(fail()),
        }
    }
}

/// Records the ranges a reader read through it, to keep exactly those bytes as a seed.
pub struct Recording<'a> {
    inner: &'a dyn Memory,
    /// The successful reads, `(address, bytes)`.
    pub reads: std::cell::RefCell<Vec<(u64, Vec<u8>)>>,
}

impl<'a> Recording<'a> {
    /// Records reads of `inner`.
    pub fn new(inner: &'a dyn Memory) -> Recording<'a> {
        Recording {
            inner,
            reads: Default::default(),
        }
    }

    /// The bytes read, joined into regions (at most `max` bytes of each read).
    pub fn regions(&self, max: usize) -> BTreeMap<u64, Vec<u8>> {
        let mut data = Vec::new();
        for (addr, bytes) in self.reads.borrow().iter() {
            let mut one = BTreeMap::new();
            one.insert(*addr, bytes[..bytes.len().min(max)].to_vec());
            data.extend_from_slice(&Image::encode(&[], &one));
        }
        Image::decode(&data, 0).regions
    }
}

impl Memory for Recording<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        self.inner.read(addr, buf)?;
        self.reads.borrow_mut().push((addr, buf.to_vec()));
        Ok(())
    }
}

/// A live process's memory through `/proc/PID/mem` (for recording seeds only).
pub struct LiveMemory(std::fs::File);

impl LiveMemory {
    /// Opens `/proc/PID/mem` read-only.
    pub fn open(pid: i32) -> std::io::Result<LiveMemory> {
        Ok(LiveMemory(std::fs::File::open(format!("/proc/{pid}/mem"))?))
    }
}

impl Memory for LiveMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        use std::os::unix::fs::FileExt;
        self.0
            .read_exact_at(buf, addr)
            .map_err(|source| MemoryError::Read {
                addr,
                len: buf.len(),
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_then_decode_gives_the_same_words_and_joined_regions() {
        let mut regions = BTreeMap::new();
        regions.insert(0x1000, vec![1u8; 70_000]);
        regions.insert(0x9_0000, vec![2u8; 3]);
        let bytes = Image::encode(&[7, 8], &regions);
        let image = Image::decode(&bytes, 2);
        assert_eq!(image.words, vec![7, 8]);
        assert_eq!(
            image.regions, regions,
            "the split long region is joined again"
        );
        assert_eq!(
            image.read_u64(0x1000 + 65_530).unwrap(),
            0x0101_0101_0101_0101
        );
        assert!(image.read_u64(0x9_0000).is_err(), "only 3 bytes there");
        assert!(image.read_u64(u64::MAX - 3).is_err());
    }

    #[test]
    fn short_and_wrapping_inputs_decode_without_panicking() {
        let mut data = u64::MAX.to_le_bytes().to_vec();
        data.extend_from_slice(&(u64::MAX - 1).to_le_bytes());
        data.extend_from_slice(&[10, 0, 1, 2, 3, 4, 5]);
        let image = Image::decode(&data, 1);
        assert_eq!(image.word(0), u64::MAX);
        assert_eq!(image.word(5), 0);
        assert_eq!(image.regions.get(&(u64::MAX - 1)), Some(&vec![1u8]));
    }
}
