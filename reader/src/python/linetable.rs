//! CPython 3.11's location table (`co_linetable`): which source line a code unit is on.
//!
//! The table is a sequence of entries, each covering 1 to 8 code units. An entry
//! starts with a byte whose top bit is set; bits 3-6 hold a code and bits 0-2 the
//! number of code units minus one. The code says what follows:
//!
//! | code  | line change              | then                                     |
//! |-------|--------------------------|------------------------------------------|
//! | 0-9   | none                     | one column byte                          |
//! | 10-12 | `code - 10`              | start and end column bytes               |
//! | 13    | signed varint            | nothing (no columns)                     |
//! | 14    | signed varint            | end-line delta, column, end column (varints) |
//! | 15    | none                     | nothing: these code units have no line   |
//!
//! A varint is little-endian 6-bit groups, bit 6 set on all but the last; a signed
//! varint keeps the sign in bit 0. The line starts at `co_firstlineno`.

/// The most 6-bit groups a varint may have (32 bits of value).
const MAX_VARINT_GROUPS: usize = 6;

/// Why a location table could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineTableError {
    /// An entry does not start with a byte whose top bit is set.
    BadEntry {
        /// Offset in the table.
        at: usize,
    },
    /// The table ends inside an entry.
    Truncated,
    /// A varint is longer than any line number.
    VarintTooLong {
        /// Offset in the table.
        at: usize,
    },
}

/// The source line of the code unit at byte offset `addr` into the code, or
/// `None` when the table says it has no line or does not reach it.
///
/// A negative `addr` (a frame that has not run its first instruction) is on
/// `first_line`, as CPython says.
pub fn line_for(table: &[u8], first_line: i32, addr: i64) -> Result<Option<i32>, LineTableError> {
    if addr < 0 {
        return Ok(Some(first_line));
    }
    let mut line = i64::from(first_line);
    let mut start: i64 = 0;
    let mut i = 0usize;
    while i < table.len() {
        let head = table[i];
        if head & 0x80 == 0 {
            return Err(LineTableError::BadEntry { at: i });
        }
        let code = (head >> 3) & 0xf;
        let units = i64::from(head & 7) + 1;
        i += 1;
        let (delta, has_line) = match code {
            15 => (0, false),
            14 => {
                let d = signed_varint(table, &mut i)?;
                for _ in 0..3 {
                    varint(table, &mut i)?;
                }
                (d, true)
            }
            13 => (signed_varint(table, &mut i)?, true),
            10..=12 => {
                skip(table, &mut i, 2)?;
                (i64::from(code) - 10, true)
            }
            _ => {
                skip(table, &mut i, 1)?;
                (0, true)
            }
        };
        line += delta;
        let end = start + units * 2;
        if addr < end {
            return Ok(has_line.then(|| i32::try_from(line).ok()).flatten());
        }
        start = end;
    }
    Ok(None)
}

fn skip(table: &[u8], i: &mut usize, n: usize) -> Result<(), LineTableError> {
    if table.len() - *i < n {
        return Err(LineTableError::Truncated);
    }
    *i += n;
    Ok(())
}

fn varint(table: &[u8], i: &mut usize) -> Result<u64, LineTableError> {
    let at = *i;
    let mut value = 0u64;
    for group in 0..MAX_VARINT_GROUPS {
        let b = *table.get(*i).ok_or(LineTableError::Truncated)?;
        *i += 1;
        value |= u64::from(b & 63) << (6 * group);
        if b & 64 == 0 {
            return Ok(value);
        }
    }
    Err(LineTableError::VarintTooLong { at })
}

fn signed_varint(table: &[u8], i: &mut usize) -> Result<i64, LineTableError> {
    let u = varint(table, i)?;
    let magnitude = (u >> 1) as i64;
    Ok(if u & 1 != 0 { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(code: u8, units: u8) -> u8 {
        0x80 | (code << 3) | (units - 1)
    }

    #[test]
    fn forms() {
        // 2 units no-line, 1 unit short form (line +0), 1 unit one-line form +1,
        // 3 units no-column with -3 (svarint 7), 1 unit long form +70 (svarint 140
        // = 0b10_001100: groups 12|64, 2), 1 unit no-line.
        let table = [
            head(15, 2),
            head(3, 1),
            0x25,
            head(11, 1),
            4,
            9,
            head(13, 3),
            7,
            head(14, 1),
            12 | 64,
            2,
            0,
            5,
            8,
            head(15, 1),
        ];
        let line = |addr| line_for(&table, 100, addr).unwrap();
        assert_eq!(line(-2), Some(100));
        assert_eq!(line(0), None);
        assert_eq!(line(3), None);
        assert_eq!(line(4), Some(100));
        assert_eq!(line(6), Some(101));
        assert_eq!(line(8), Some(98));
        assert_eq!(line(13), Some(98));
        assert_eq!(line(14), Some(168));
        assert_eq!(line(16), None);
        assert_eq!(line(18), None, "past the table");
    }

    #[test]
    fn broken_tables() {
        assert_eq!(
            line_for(&[0x05], 1, 0),
            Err(LineTableError::BadEntry { at: 0 })
        );
        assert_eq!(
            line_for(&[head(3, 1)], 1, 0),
            Err(LineTableError::Truncated)
        );
        assert_eq!(
            line_for(&[head(13, 1), 64], 1, 0),
            Err(LineTableError::Truncated)
        );
        assert_eq!(
            line_for(&[head(13, 1), 64, 64, 64, 64, 64, 64, 64], 1, 0),
            Err(LineTableError::VarintTooLong { at: 1 })
        );
        assert_eq!(line_for(&[], 1, 0), Ok(None));
    }
}
