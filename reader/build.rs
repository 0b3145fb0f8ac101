//! Fingerprints the reader's code for the on-disk answers cache (`src/answers.rs`):
//! a hash of every source file and of the workspace's `Cargo.lock`, so answers
//! written by one build are never read by another.

use std::path::{Path, PathBuf};

/// FNV-1a, 64-bit: stable across Rust versions, unlike `DefaultHasher`.
fn fnv(hash: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *hash ^= u64::from(b);
        *hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let mut inputs = Vec::new();
    files(&root.join("src"), &mut inputs);
    inputs.sort();
    inputs.push(root.join("../Cargo.lock"));
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    for path in &inputs {
        if let Ok(rel) = path.strip_prefix(&root) {
            fnv(&mut hash, rel.to_string_lossy().as_bytes());
        }
        fnv(&mut hash, &std::fs::read(path).unwrap_or_default());
    }
    println!("cargo:rustc-env=ARGSTASH_READER_FINGERPRINT={hash}");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=../Cargo.lock");
}
