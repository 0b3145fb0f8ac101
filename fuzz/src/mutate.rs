//! The mutator: deterministic for a seed, no dependencies.

/// A small xorshift random number generator.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator started from `seed` (any value; 0 is replaced).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

/// Values that often sit on boundaries: 0, ±1, powers of two and their neighbours.
const INTERESTING: &[u64] = &[
    0,
    1,
    2,
    7,
    8,
    0x10,
    0x7f,
    0x80,
    0xff,
    0x100,
    0x7fff,
    0x8000,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x1_0000_0000,
    0x7fff_ffff_ffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX - 1,
    u64::MAX,
];

/// Changes `data` in place with 1 to 4 random edits, taking splices from `other`,
/// keeping it at most `max_len` bytes.
pub fn mutate(data: &mut Vec<u8>, other: &[u8], rng: &mut Rng, max_len: usize) {
    for _ in 0..1 + rng.below(4) {
        edit(data, other, rng);
    }
    data.truncate(max_len);
}

fn edit(data: &mut Vec<u8>, other: &[u8], rng: &mut Rng) {
    let len = data.len();
    match rng.below(10) {
        // Flip one bit.
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        // Set a random byte.
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = rng.next_u64() as u8;
        }
        // Add or subtract a little to a byte or an aligned word.
        2 if len > 0 => {
            let width = [1usize, 2, 4, 8][rng.below(4)];
            let i = rng.below(len);
            let i = i - i % width;
            let n = width.min(len - i);
            let mut w = [0u8; 8];
            w[..n].copy_from_slice(&data[i..i + n]);
            let delta = 1 + rng.below(16) as u64;
            let v = if rng.below(2) == 0 {
                u64::from_le_bytes(w).wrapping_add(delta)
            } else {
                u64::from_le_bytes(w).wrapping_sub(delta)
            };
            data[i..i + n].copy_from_slice(&v.to_le_bytes()[..n]);
        }
        // Write an interesting integer, little-endian, 1, 2, 4 or 8 bytes wide.
        3 if len > 0 => {
            let width = [1usize, 2, 4, 8][rng.below(4)];
            let i = rng.below(len);
            let n = width.min(len - i);
            let v = INTERESTING[rng.below(INTERESTING.len())];
            data[i..i + n].copy_from_slice(&v.to_le_bytes()[..n]);
        }
        // Insert random bytes.
        4 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            data.splice(at..at, bytes);
        }
        // Delete a range.
        5 if len > 1 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(64));
            data.drain(at..at + n);
        }
        // Truncate.
        6 if len > 1 => {
            data.truncate(rng.below(len));
        }
        // Copy a range within the input (overwrite).
        7 if len > 1 => {
            let from = rng.below(len);
            let to = rng.below(len);
            let n = 1 + rng.below((len - from).min(len - to).min(64));
            let chunk = data[from..from + n].to_vec();
            data[to..to + n].copy_from_slice(&chunk);
        }
        // Splice in a range of another input.
        8 if !other.is_empty() => {
            let from = rng.below(other.len());
            let n = 1 + rng.below((other.len() - from).min(256));
            let at = rng.below(len + 1);
            if rng.below(2) == 0 {
                data.splice(at..at, other[from..from + n].iter().copied());
            } else {
                let end = (at + n).min(len);
                data.splice(at..end, other[from..from + n].iter().copied());
            }
        }
        // Repeat a byte run (long fields, big counts).
        _ if len > 0 => {
            let i = rng.below(len);
            let n = 1 + rng.below(64);
            let b = data[i];
            data.splice(i..i, std::iter::repeat_n(b, n));
        }
        _ => data.push(rng.next_u64() as u8),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutation_changes_inputs_and_respects_the_length_bound() {
        let mut rng = Rng::new(42);
        let seed: Vec<u8> = (0..200u8).collect();
        let mut changed = 0;
        for _ in 0..1000 {
            let mut d = seed.clone();
            mutate(&mut d, &seed[..50], &mut rng, 220);
            assert!(d.len() <= 220);
            changed += usize::from(d != seed);
        }
        assert!(
            changed > 900,
            "only {changed} of 1000 mutations changed the input"
        );
        let mut empty = Vec::new();
        mutate(&mut empty, &[], &mut rng, 16);
        assert!(empty.len() <= 16);
    }
}
