//! Builds the GDB JIT helper shared object (src/jit_helper.c) that argstash loads into
//! targets so that gdb finds the hooks' symbols and unwind information.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "src/jit_helper.c";
    println!("cargo:rerun-if-changed={src}");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("jit_helper.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args([
            "-shared",
            "-nostdlib",
            "-fPIC",
            "-O2",
            "-Wl,-z,noexecstack",
            "-Wl,-z,norelro",
            "-Wl,--build-id=none",
            "-o",
        ])
        .arg(&out)
        .arg(src)
        .status()
        .unwrap_or_else(|e| panic!("cannot run `{cc}` to build {src}: {e} (install a C compiler, e.g. scripts/setup.sh)"));
    assert!(status.success(), "`{cc}` failed to build {src}");
}
