//! The Rust crate of docs/guide/crash-reports.md (its `src/main.rs`): under the
//! guide's cargo runner, `cargo run -- 7 16` crashes in `parse_record(7, 16)`
//! and `argstash run` prints the backtrace with its arguments first.
//! tests/tests/e2e/runners.rs builds it the same way.

use std::io::Write;

/// Parses one record; a length over 8 writes through a null pointer: the crash.
#[inline(never)]
fn parse_record(id: u64, len: u64) -> u64 {
    if len > 8 {
        let header = std::hint::black_box(std::ptr::null_mut::<u64>());
        // SAFETY: none: the crash the runner must report.
        unsafe { std::ptr::write_volatile(header, id) };
    }
    id * 31 + len
}

/// Prints the call first, on stderr written directly (not captured by libtest).
fn announce(id: u64, len: u64) {
    let _ = writeln!(std::io::stderr(), "parse_record({id}, {len})");
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    announce(args[0], args[1]);
    println!("{}", parse_record(args[0], args[1]));
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_record() {
        let id: u64 = std::env::var("CRASHY_ID").unwrap().parse().unwrap();
        let len: u64 = std::env::var("CRASHY_LEN").unwrap().parse().unwrap();
        super::announce(id, len);
        assert_eq!(super::parse_record(id, len), id * 31 + len);
    }
}
