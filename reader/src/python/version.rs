//! Finding the interpreter in a process: the module that holds CPython, its
//! version, and the addresses of `_PyRuntime` and the builtin type objects.
//!
//! The interpreter module is the one whose symbols include the frame evaluator
//! `_PyEval_EvalFrameDefault`: a shared `libpython3.X.so` or the executable itself
//! when libpython is linked statically. Data symbols (`_PyRuntime`, `Py_Version`,
//! `PyLong_Type`, ...) are read from that module's `.dynsym` (then `.symtab`),
//! which [`crate::symbols::Module`] keeps mapped, so a libpython deleted or
//! replaced on disk still reads as the process mapped it; without a
//! `_PyRuntime` symbol, the `.PyRuntime` section (3.14+) locates it. The version
//! comes from the `Py_Version` constant in memory (exported since 3.11), else
//! from the file name (`libpython3.10.so.1.0`, `python3.10`); for 3.13+ the
//! layout then checks it against `_Py_DebugOffsets`' own.

use crate::memory::Memory;
use crate::symbols::{Module, ProcessSymbols, SymbolError};

use super::error::PythonError;
pub use super::release::PythonVersion;

/// The ELF section CPython 3.14+ puts `_PyRuntime` in (`_Py_DebugOffsets` first).
pub const PYRUNTIME_SECTION: &str = ".PyRuntime";

/// The function every C-level evaluation of Python code runs in.
pub const EVAL_FRAME_FUNCTION: &str = "_PyEval_EvalFrameDefault";

/// Where the version was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionSource {
    /// The `Py_Version` constant in the target's memory.
    PyVersion,
    /// The module's file name (micro version unknown).
    FileName,
}

/// Runtime addresses of the builtin types (and singletons) the value display
/// recognises exactly; 0 where the module does not export the symbol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BuiltinTypes {
    /// `PyCode_Type`.
    pub code: u64,
    /// `PyLong_Type`.
    pub int: u64,
    /// `PyBool_Type`.
    pub bool: u64,
    /// `PyFloat_Type`.
    pub float: u64,
    /// `PyUnicode_Type`.
    pub str: u64,
    /// `PyBytes_Type`.
    pub bytes: u64,
    /// `PyTuple_Type`.
    pub tuple: u64,
    /// `PyList_Type`.
    pub list: u64,
    /// `PyDict_Type`.
    pub dict: u64,
    /// `PyCell_Type`.
    pub cell: u64,
    /// `_PyNone_Type`.
    pub none_type: u64,
    /// `_Py_NoneStruct`: the `None` object.
    pub none: u64,
    /// `_Py_TrueStruct`.
    pub true_obj: u64,
    /// `_Py_FalseStruct`.
    pub false_obj: u64,
}

/// The interpreter found in a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// Path of the module holding the interpreter (libpython or the executable).
    pub module: String,
    /// Its version.
    pub version: PythonVersion,
    /// Where the version came from.
    pub version_source: VersionSource,
    /// Runtime address of `_PyRuntime`.
    pub runtime: u64,
    /// Runtime address of `_PyEval_EvalFrameDefault`.
    pub eval_frame: u64,
    /// Builtin type addresses.
    pub types: BuiltinTypes,
}

/// Why no module is CPython's: an interpreter file (`python3.X`, `libpython3.X`)
/// deleted or replaced on disk and unreadable as mapped, else not a CPython.
fn not_python(symbols: &ProcessSymbols) -> PythonError {
    let interpreter = |path: &str| {
        let name = path.rsplit('/').next().unwrap_or(path);
        name.starts_with("python") || name.starts_with("libpython")
    };
    symbols
        .refused
        .iter()
        .find(|e| matches!(&***e, SymbolError::ReplacedOnDisk { path, .. } if interpreter(path)))
        .map_or(PythonError::NotPython { pid: symbols.pid }, |e| {
            PythonError::FileReplaced { source: e.clone() }
        })
}

/// Finds the CPython interpreter among a process's modules.
pub fn locate(symbols: &ProcessSymbols, mem: &dyn Memory) -> Result<Located, PythonError> {
    // CPython exports its evaluator (extension modules link against it), so the
    // dynamic symbols find it without reading every module's whole symbol table;
    // a libpython is looked at first, then the other modules in address order.
    let mut candidates: Vec<&Module> = symbols.modules.iter().collect();
    candidates.sort_by_key(|m| !m.file_name().starts_with("libpython"));
    let (module, eval_frame) = candidates
        .iter()
        .find_map(|m| m.exported(EVAL_FRAME_FUNCTION).map(|addr| (*m, addr)))
        .or_else(|| {
            symbols.modules.iter().find_map(|m| {
                m.symbols_named(EVAL_FRAME_FUNCTION)
                    .next()
                    .map(|s| (m, s.addr))
            })
        })
        .ok_or_else(|| not_python(symbols))?;
    if !module.is_64 {
        return Err(PythonError::Not64Bit {
            module: module.path.clone(),
        });
    }
    let data = DataSymbols::of(module);
    // 3.14+ (and Debian's 3.13) also place `_PyRuntime` in a section of its own,
    // which a module stripped of the symbol still has.
    let runtime = data
        .get("_PyRuntime")
        .or_else(|| {
            module
                .section(PYRUNTIME_SECTION)
                .map(|(svma, _)| svma.start.wrapping_add(module.bias))
        })
        .ok_or_else(|| PythonError::MissingSymbol {
            module: module.path.clone(),
            symbol: "_PyRuntime",
        })?;
    let from_memory = data
        .get("Py_Version")
        .and_then(|addr| {
            let mut b = [0u8; 4];
            mem.read(addr, &mut b)
                .ok()
                .map(|()| u32::from_le_bytes(b))
                .or_else(|| {
                    module
                        .file_bytes(addr, 4)
                        .and_then(|f| f.try_into().ok())
                        .map(u32::from_le_bytes)
                })
        })
        .map(|hex| PythonVersion::from_hex(u64::from(hex)))
        .filter(|v| v.major == 3);
    let (version, version_source) = match from_memory {
        Some(v) => (v, VersionSource::PyVersion),
        None => {
            let by_name = PythonVersion::from_file_name(module.file_name()).or_else(|| {
                module
                    .soname
                    .as_deref()
                    .and_then(PythonVersion::from_file_name)
            });
            match by_name {
                Some(v) => (v, VersionSource::FileName),
                None => {
                    return Err(PythonError::UnknownVersion {
                        module: module.path.clone(),
                    })
                }
            }
        }
    };
    let t = |name| data.get(name).unwrap_or(0);
    let types = BuiltinTypes {
        code: t("PyCode_Type"),
        int: t("PyLong_Type"),
        bool: t("PyBool_Type"),
        float: t("PyFloat_Type"),
        str: t("PyUnicode_Type"),
        bytes: t("PyBytes_Type"),
        tuple: t("PyTuple_Type"),
        list: t("PyList_Type"),
        dict: t("PyDict_Type"),
        cell: t("PyCell_Type"),
        none_type: t("_PyNone_Type"),
        none: t("_Py_NoneStruct"),
        true_obj: t("_Py_TrueStruct"),
        false_obj: t("_Py_FalseStruct"),
    };
    Ok(Located {
        module: module.path.clone(),
        version,
        version_source,
        runtime,
        eval_frame,
        types,
    })
}

/// Data symbols looked up by name in one 64-bit module's `.dynsym`, then `.symtab`.
struct DataSymbols {
    found: Vec<(&'static str, u64)>,
}

/// Size of an `Elf64_Sym`.
const SYM64: usize = 24;
/// `STT_OBJECT`.
const STT_OBJECT: u8 = 1;

/// Every data symbol the reader looks up.
const DATA_SYMBOLS: [&str; 16] = [
    "_PyRuntime",
    "Py_Version",
    "PyCode_Type",
    "PyLong_Type",
    "PyBool_Type",
    "PyFloat_Type",
    "PyUnicode_Type",
    "PyBytes_Type",
    "PyTuple_Type",
    "PyList_Type",
    "PyDict_Type",
    "PyCell_Type",
    "_PyNone_Type",
    "_Py_NoneStruct",
    "_Py_TrueStruct",
    "_Py_FalseStruct",
];

impl DataSymbols {
    /// Looks up every name of [`DATA_SYMBOLS`] in one pass per table.
    fn of(module: &Module) -> DataSymbols {
        let mut found: Vec<(&'static str, u64)> = Vec::new();
        for (syms, strs) in [(".dynsym", ".dynstr"), (".symtab", ".strtab")] {
            if found.len() == DATA_SYMBOLS.len() {
                break;
            }
            let (Some((_, syms)), Some((_, strs))) = (module.section(syms), module.section(strs))
            else {
                continue;
            };
            for (name, value) in find_objects(syms, strs, &DATA_SYMBOLS) {
                if !found.iter().any(|(n, _)| *n == name) {
                    found.push((name, value.wrapping_add(module.bias)));
                }
            }
        }
        DataSymbols { found }
    }

    /// Runtime address of the defined data object `name`.
    fn get(&self, name: &str) -> Option<u64> {
        self.found.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }
}

/// The `st_value` of each defined `STT_OBJECT` symbol of `names` in an `Elf64_Sym` table.
fn find_objects(syms: &[u8], strs: &[u8], names: &[&'static str]) -> Vec<(&'static str, u64)> {
    let mut out = Vec::new();
    for s in syms.chunks_exact(SYM64) {
        let field = |r: std::ops::Range<usize>| s.get(r);
        let (Some(st_name), Some(&st_info), Some(st_shndx), Some(st_value)) = (
            field(0..4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_le_bytes),
            s.get(4),
            field(6..8)
                .and_then(|b| b.try_into().ok())
                .map(u16::from_le_bytes),
            field(8..16)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes),
        ) else {
            continue;
        };
        if st_info & 0xf != STT_OBJECT || st_shndx == 0 || st_value == 0 {
            continue;
        }
        let Some(rest) = strs.get(st_name as usize..) else {
            continue;
        };
        let Some(end) = rest.iter().position(|&b| b == 0) else {
            continue;
        };
        let name = &rest[..end];
        if let Some(n) = names.iter().find(|n| n.as_bytes() == name) {
            out.push((*n, st_value));
        }
    }
    out
}

/// The `st_value` of the defined `STT_OBJECT` symbol `name` (tests).
#[cfg(test)]
fn find_object(syms: &[u8], strs: &[u8], name: &'static str) -> Option<u64> {
    find_objects(syms, strs, &[name]).first().map(|(_, v)| *v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_from_hex_and_names() {
        let v = PythonVersion::from_hex(0x030b07f0);
        assert_eq!((v.major, v.minor, v.micro), (3, 11, 7));
        assert_eq!(v.to_string(), "3.11.7");
        assert_eq!(PythonVersion::from_hex(0x030d00a2).to_string(), "3.13.0a2");
        assert_eq!(PythonVersion::from_hex(0x030c01c1).to_string(), "3.12.1rc1");
        let n = PythonVersion::from_file_name("libpython3.10.so.1.0").unwrap();
        assert_eq!((n.major, n.minor), (3, 10));
        assert_eq!(
            PythonVersion::from_file_name("python3.12").unwrap().minor,
            12
        );
        assert_eq!(PythonVersion::from_file_name("python3"), None);
        assert_eq!(PythonVersion::from_file_name("libc.so.6"), None);
    }

    #[test]
    fn object_symbols_by_name() {
        let strs = b"\0_PyRuntime\0Py_Version\0func\0";
        let sym = |name: u32, info: u8, shndx: u16, value: u64| {
            let mut s = Vec::new();
            s.extend(name.to_le_bytes());
            s.push(info);
            s.push(0);
            s.extend(shndx.to_le_bytes());
            s.extend(value.to_le_bytes());
            s.extend(8u64.to_le_bytes());
            s
        };
        let mut syms = vec![0u8; SYM64];
        syms.extend(sym(1, 0x11, 5, 0x1000));
        syms.extend(sym(12, 0x11, 0, 0x2000));
        syms.extend(sym(23, 0x12, 5, 0x3000));
        assert_eq!(find_object(&syms, strs, "_PyRuntime"), Some(0x1000));
        assert_eq!(find_object(&syms, strs, "Py_Version"), None, "undefined");
        assert_eq!(find_object(&syms, strs, "func"), None, "a function");
        assert_eq!(
            find_object(&syms[..2 * SYM64 + 5], strs, "_PyRuntime"),
            Some(0x1000)
        );
        assert_eq!(find_object(&syms, b"\0_PyRun", "_PyRuntime"), None);
    }
}
