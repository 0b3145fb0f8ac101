//! Passes the Python version pyo3 builds for to the code (`ffi::BUILT_FOR`) and
//! enables pyo3's `Py_3_*` / `Py_GIL_DISABLED` cfgs here, so that a build for a
//! free-threaded interpreter stops with a message naming it (`ffi.rs`).

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
    let config = pyo3_build_config::get();
    println!(
        "cargo:rustc-env=ARGSTASH_PYTHON_BUILT_FOR={}.{}",
        config.version().major,
        config.version().minor
    );
}
