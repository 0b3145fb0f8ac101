//! How the `MODULE` of `MODULE!NAME` names a loaded module: path, file name,
//! soname, or a prefix of either.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::elf::{map_elf_file, parse_view};
use super::symbol::VDSO;
/// How the `MODULE` of a `MODULE!NAME` names a loaded module; better matches sort first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ModuleMatch {
    /// Its path as in `/proc/PID/maps`, or another path to the same file.
    Path,
    /// Its file name (`libc.so.6`) or `DT_SONAME` (`libz.so.1`).
    Name,
    /// A prefix of its file name or soname ending at a name boundary (`libz`, `libz.so.1`).
    Prefix,
}

/// True when `prefix` is a leading part of the file name `name` that ends at a name
/// boundary: right before a `.` or `-` of `name` (`libz`, `libz.so`, `libz.so.1` of
/// `libz.so.1.2.13`; `libc` of `libc-2.31.so`), or all of it. `libz.s`, `lib` and
/// `libz.` are not (and `libc` is no prefix of `libcrypt.so.1`).
pub fn name_prefix_at_boundary(name: &str, prefix: &str) -> bool {
    !prefix.is_empty()
        && name
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '-']))
}

/// How well `module` (a path, a file name, a soname, or a prefix of one of them)
/// names the module at `path` whose soname is `soname`; `None` if it does not.
/// `vdso` names the `[vdso]`.
pub fn module_match(path: &str, soname: Option<&str>, module: &str) -> Option<ModuleMatch> {
    let module = if module == "vdso" { VDSO } else { module };
    let file = path.rsplit('/').next().unwrap_or(path);
    if path == module {
        Some(ModuleMatch::Path)
    } else if module.contains('/') {
        None
    } else if file == module || soname == Some(module) {
        Some(ModuleMatch::Name)
    } else if name_prefix_at_boundary(file, module)
        || soname.is_some_and(|s| name_prefix_at_boundary(s, module))
    {
        Some(ModuleMatch::Prefix)
    } else {
        None
    }
}

/// True when `module` (as [`module_match`] reads it) names the module at `path`;
/// its soname is not known here, so only path and file-name forms count.
pub fn module_name_matches(path: &str, module: &str) -> bool {
    module_match(path, None, module).is_some()
}

/// The `DT_SONAME` of the file at `path` in process `pid`'s mount namespace, if
/// it is a readable ELF shared library that has one.
pub fn soname_of(pid: i32, path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let file = crate::shared_file::open_regular(Path::new(&crate::procfs::path_in_root(pid, path)))
        .ok()?;
    let data = map_elf_file(file, path, path).ok()?;
    let elf = parse_view(data.bytes()).ok()?;
    elf.soname.filter(|n| !n.is_empty()).map(str::to_string)
}

/// True when the paths `a` and `b` name the same file inside process `pid`'s
/// mount namespace (a symlink such as `/lib/x86_64-linux-gnu/libz.so.1` and the
/// `libz.so.1.2.13` it points to).
pub fn same_file_in(pid: i32, a: &str, b: &str) -> bool {
    let id = |p: &str| {
        std::fs::metadata(crate::procfs::path_in_root(pid, p))
            .ok()
            .map(|m| (m.dev(), m.ino()))
    };
    match (id(a), id(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}
