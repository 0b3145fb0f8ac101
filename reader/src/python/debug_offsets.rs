//! CPython's own description of its memory layout: `_Py_DebugOffsets` (3.13+).
//!
//! Since 3.13 the first member of `_PyRuntime` is a struct of 64-bit words
//! written by the interpreter's own compiler: an 8-byte cookie (`xdebugpy`), the
//! interpreter's `PY_VERSION_HEX`, a free-threaded flag, then one sub-struct per
//! C type (runtime state, interpreter state, thread state, interpreter frame,
//! code object, object, type, tuple, ...). Each sub-struct but the last few
//! starts with the C type's `sizeof`, followed by `offsetof`s of its fields.
//!
//! The words carry no names, so the order of the sub-structs and of their fields
//! is a fact of each minor version: [`shape_for`] has one [`Shape`] per version,
//! learnt from CPython's headers (`pycore_runtime.h` in 3.13,
//! `pycore_debug_offsets.h` later) and checked word by word against Debian's
//! 3.13.18, 3.14.10 and 3.15.2 (`tests/tests/e2e/python313.rs`). A version
//! without a shape is never guessed at: [`DebugOffsets::parse`] refuses it.
//!
//! The bytes come from the target, so nothing is trusted: every offset the
//! reader uses must lie inside its C type's stated size, every size must be
//! plausible, and a failed check names the field ([`OffsetsProblem`]).

use std::fmt;

use crate::memory::Memory;

/// The cookie that starts `_Py_DebugOffsets`.
pub const COOKIE: [u8; 8] = *b"xdebugpy";
/// The most bytes of `_Py_DebugOffsets` read (3.15's is under 900).
pub const MAX_LEN: usize = 2048;
/// The largest `sizeof` of a C type believed (3.15's `PyInterpreterState` is 220 KiB).
pub const MAX_STRUCT_SIZE: u64 = 1 << 24;

/// The head of `_Py_DebugOffsets`: cookie found, the version and build it states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// `version`: the interpreter's `PY_VERSION_HEX`.
    pub version_hex: u64,
    /// `free_threaded`: nonzero in a free-threaded (no-GIL) build.
    pub free_threaded: u64,
}

/// What the words at `_PyRuntime` say about `_Py_DebugOffsets`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// `_PyRuntime` cannot be read.
    Unreadable,
    /// No cookie: an interpreter before 3.13, or a damaged one.
    NoCookie {
        /// The first 8 bytes found instead.
        found: [u8; 8],
    },
    /// The cookie, and the head that follows it.
    Found(Header),
}

/// Reads the head of `_Py_DebugOffsets` at `runtime` (the `_PyRuntime` address).
pub fn probe(mem: &dyn Memory, runtime: u64) -> Probe {
    let mut head = [0u8; 24];
    if mem.read(runtime, &mut head).is_err() {
        return Probe::Unreadable;
    }
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&head[i * 8..i * 8 + 8]);
        w
    };
    if word(0) != COOKIE {
        return Probe::NoCookie { found: word(0) };
    }
    Probe::Found(Header {
        version_hex: u64::from_le_bytes(word(1)),
        free_threaded: u64::from_le_bytes(word(2)),
    })
}

/// One sub-struct of `_Py_DebugOffsets` in one version: its name and its words' names, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// The sub-struct (`thread_state`).
    pub name: &'static str,
    /// Its words in order; the first is `size` for sub-structs that have one.
    pub fields: &'static [&'static str],
}

/// The order of `_Py_DebugOffsets`' sub-structs in one minor version, up to the
/// last one the reader uses (the words after it are not read). Sub-structs whose
/// first word is not `size` describe no C type of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The minor version (`13` for 3.13).
    pub minor: u8,
    /// The sub-structs after the cookie, version and free-threaded words.
    pub parts: &'static [Part],
}

const RUNTIME: Part = Part {
    name: "runtime_state",
    fields: &["size", "finalizing", "interpreters_head"],
};
const INTERP_313: Part = Part {
    name: "interpreter_state",
    fields: &[
        "size",
        "id",
        "next",
        "threads_head",
        "gc",
        "imports_modules",
        "sysdict",
        "builtins",
        "ceval_gil",
        "gil_runtime_state",
        "gil_runtime_state_enabled",
        "gil_runtime_state_locked",
        "gil_runtime_state_holder",
    ],
};
const INTERP_314: Part = Part {
    name: "interpreter_state",
    fields: &[
        "size",
        "id",
        "next",
        "threads_head",
        "threads_main",
        "gc",
        "imports_modules",
        "sysdict",
        "builtins",
        "ceval_gil",
        "gil_runtime_state",
        "gil_runtime_state_enabled",
        "gil_runtime_state_locked",
        "gil_runtime_state_holder",
        "code_object_generation",
        "tlbc_generation",
    ],
};
const THREAD_313: Part = Part {
    name: "thread_state",
    fields: &[
        "size",
        "prev",
        "next",
        "interp",
        "current_frame",
        "thread_id",
        "native_thread_id",
        "datastack_chunk",
        "status",
    ],
};
/// 3.15 adds the base frame and the profiler's last frame after `current_frame`,
/// and GIL and exception fields after `status`.
const THREAD_315: Part = Part {
    name: "thread_state",
    fields: &[
        "size",
        "prev",
        "next",
        "interp",
        "current_frame",
        "base_frame",
        "last_profiled_frame",
        "last_profiled_frame_seq",
        "thread_id",
        "native_thread_id",
        "datastack_chunk",
        "status",
        "holds_gil",
        "gil_requested",
        "current_exception",
        "exc_state",
    ],
};
/// 3.15: the exception stack item (no size word).
const ERR_STACKITEM: Part = Part {
    name: "err_stackitem",
    fields: &["exc_value"],
};
const FRAME_313: Part = Part {
    name: "interpreter_frame",
    fields: &[
        "size",
        "previous",
        "executable",
        "instr_ptr",
        "localsplus",
        "owner",
    ],
};
const FRAME_314: Part = Part {
    name: "interpreter_frame",
    fields: &[
        "size",
        "previous",
        "executable",
        "instr_ptr",
        "localsplus",
        "owner",
        "stackpointer",
        "tlbc_index",
    ],
};
const CODE_313: Part = Part {
    name: "code_object",
    fields: &[
        "size",
        "filename",
        "name",
        "qualname",
        "linetable",
        "firstlineno",
        "argcount",
        "localsplusnames",
        "localspluskinds",
        "co_code_adaptive",
    ],
};
const CODE_314: Part = Part {
    name: "code_object",
    fields: &[
        "size",
        "filename",
        "name",
        "qualname",
        "linetable",
        "firstlineno",
        "argcount",
        "localsplusnames",
        "localspluskinds",
        "co_code_adaptive",
        "co_tlbc",
    ],
};
const PYOBJECT: Part = Part {
    name: "pyobject",
    fields: &["size", "ob_type"],
};
const TYPE_313: Part = Part {
    name: "type_object",
    fields: &["size", "tp_name", "tp_repr", "tp_flags"],
};
/// 3.15: two more type fields, then the heap type.
const TYPE_315: Part = Part {
    name: "type_object",
    fields: &[
        "size",
        "tp_name",
        "tp_repr",
        "tp_flags",
        "tp_basicsize",
        "tp_dictoffset",
    ],
};
const HEAP_TYPE: Part = Part {
    name: "heap_type_object",
    fields: &["size", "ht_cached_keys"],
};
const TUPLE: Part = Part {
    name: "tuple_object",
    fields: &["size", "ob_item", "ob_size"],
};
const LIST: Part = Part {
    name: "list_object",
    fields: &["size", "ob_item", "ob_size"],
};
const SET: Part = Part {
    name: "set_object",
    fields: &["size", "used", "table", "mask"],
};
const DICT: Part = Part {
    name: "dict_object",
    fields: &["size", "ma_keys", "ma_values"],
};
const FLOAT: Part = Part {
    name: "float_object",
    fields: &["size", "ob_fval"],
};
const LONG: Part = Part {
    name: "long_object",
    fields: &["size", "lv_tag", "ob_digit"],
};
const BYTES: Part = Part {
    name: "bytes_object",
    fields: &["size", "ob_size", "ob_sval"],
};
const UNICODE: Part = Part {
    name: "unicode_object",
    fields: &["size", "state", "length", "asciiobject_size"],
};
/// 3.15 adds `sizeof(PyCompactUnicodeObject)`.
const UNICODE_315: Part = Part {
    name: "unicode_object",
    fields: &[
        "size",
        "state",
        "length",
        "asciiobject_size",
        "compactunicodeobject_size",
    ],
};

/// 3.13 (`pycore_runtime.h`).
pub const SHAPE_313: Shape = Shape {
    minor: 13,
    parts: &[
        RUNTIME, INTERP_313, THREAD_313, FRAME_313, CODE_313, PYOBJECT, TYPE_313, TUPLE, LIST,
        DICT, FLOAT, LONG, BYTES, UNICODE,
    ],
};
/// 3.14 (`pycore_debug_offsets.h`): more interpreter fields, the frame's stack
/// pointer, the code's per-thread bytecode, and a set object.
pub const SHAPE_314: Shape = Shape {
    minor: 14,
    parts: &[
        RUNTIME, INTERP_314, THREAD_313, FRAME_314, CODE_314, PYOBJECT, TYPE_313, TUPLE, LIST, SET,
        DICT, FLOAT, LONG, BYTES, UNICODE,
    ],
};
/// 3.15: the thread state's base frame, the exception stack item, more type
/// fields and the heap type, the size of compact strings.
pub const SHAPE_315: Shape = Shape {
    minor: 15,
    parts: &[
        RUNTIME,
        INTERP_314,
        THREAD_315,
        ERR_STACKITEM,
        FRAME_314,
        CODE_314,
        PYOBJECT,
        TYPE_315,
        HEAP_TYPE,
        TUPLE,
        LIST,
        SET,
        DICT,
        FLOAT,
        LONG,
        BYTES,
        UNICODE_315,
    ],
};

/// The shape of `_Py_DebugOffsets` in CPython 3.`minor`, if known.
pub fn shape_for(minor: u8) -> Option<&'static Shape> {
    [&SHAPE_313, &SHAPE_314, &SHAPE_315]
        .into_iter()
        .find(|s| s.minor == minor)
}

/// The offsets the reader uses, read from `_Py_DebugOffsets` and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugOffsets {
    /// The stated `PY_VERSION_HEX`.
    pub version_hex: u64,
    /// The shape they were read with.
    pub minor: u8,
    /// Every word read, by `part.field` (`thread_state.current_frame`), in order.
    pub words: Vec<(&'static str, &'static str, u64)>,
}

/// Why `_Py_DebugOffsets` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetsProblem {
    /// The struct cannot be read (`_PyRuntime` unmapped or short).
    Unreadable,
    /// The cookie is not there although the version has one.
    NoCookie {
        /// What is there instead.
        found: [u8; 8],
    },
    /// A free-threaded build: its objects and frames are laid out differently.
    FreeThreaded,
    /// The stated version is not the one the interpreter's `Py_Version` (or file name) says.
    VersionDisagrees {
        /// `PY_VERSION_HEX` in the offsets.
        offsets: u64,
        /// The version found elsewhere.
        found: String,
    },
    /// No shape for the stated minor version: its order of words is unknown.
    UnknownShape {
        /// The minor version.
        minor: u8,
    },
    /// A C type's stated size is impossible.
    BadSize {
        /// The sub-struct.
        part: &'static str,
        /// Its stated size.
        size: u64,
    },
    /// An offset does not fit inside its C type.
    OutOfRange {
        /// The sub-struct.
        part: &'static str,
        /// The field.
        field: &'static str,
        /// Its stated offset.
        offset: u64,
        /// The C type's stated size.
        size: u64,
    },
}

impl fmt::Display for OffsetsProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OffsetsProblem::Unreadable => f.write_str("they cannot be read"),
            OffsetsProblem::NoCookie { found } => write!(
                f,
                "their cookie is missing (found {:?} instead of \"xdebugpy\")",
                String::from_utf8_lossy(found)
            ),
            OffsetsProblem::FreeThreaded => f.write_str(
                "it is a free-threaded build (free_threaded flag set), whose objects and frames this reader does not know",
            ),
            OffsetsProblem::VersionDisagrees { offsets, found } => write!(
                f,
                "they state version 0x{offsets:08x} but the interpreter is {found}: memory corrupted or a mixed-up build"
            ),
            OffsetsProblem::UnknownShape { minor } => write!(
                f,
                "the order of their fields in 3.{minor} is not known here (known: 3.13, 3.14, 3.15), and is never guessed"
            ),
            OffsetsProblem::BadSize { part, size } => {
                write!(f, "{part}.size is {size}, not a possible size")
            }
            OffsetsProblem::OutOfRange {
                part,
                field,
                offset,
                size,
            } => write!(
                f,
                "{part}.{field} is {offset}, outside the {size} bytes of {part}"
            ),
        }
    }
}

/// Widths of the fields the reader reads, to check that each lies inside its type.
const USED: &[(&str, &str, u64)] = &[
    ("runtime_state", "interpreters_head", 8),
    ("interpreter_state", "next", 8),
    ("interpreter_state", "threads_head", 8),
    ("thread_state", "next", 8),
    ("thread_state", "interp", 8),
    ("thread_state", "current_frame", 8),
    ("thread_state", "native_thread_id", 8),
    ("interpreter_frame", "previous", 8),
    ("interpreter_frame", "executable", 8),
    ("interpreter_frame", "instr_ptr", 8),
    ("interpreter_frame", "owner", 1),
    ("interpreter_frame", "localsplus", 0),
    ("code_object", "filename", 8),
    ("code_object", "qualname", 8),
    ("code_object", "linetable", 8),
    ("code_object", "firstlineno", 4),
    ("code_object", "argcount", 4),
    ("code_object", "localsplusnames", 8),
    ("code_object", "localspluskinds", 8),
    ("code_object", "co_code_adaptive", 0),
    ("pyobject", "ob_type", 8),
    ("type_object", "tp_name", 8),
    ("type_object", "tp_flags", 8),
    ("tuple_object", "ob_item", 0),
    ("tuple_object", "ob_size", 8),
    ("float_object", "ob_fval", 8),
    ("long_object", "lv_tag", 8),
    ("long_object", "ob_digit", 0),
    ("bytes_object", "ob_size", 8),
    ("bytes_object", "ob_sval", 0),
    ("unicode_object", "state", 4),
    ("unicode_object", "length", 8),
    ("unicode_object", "asciiobject_size", 0),
];

impl DebugOffsets {
    /// Reads `_Py_DebugOffsets` at `runtime` with the shape of CPython 3.`minor`.
    pub fn read(mem: &dyn Memory, runtime: u64, minor: u8) -> Result<DebugOffsets, OffsetsProblem> {
        let shape = shape_for(minor).ok_or(OffsetsProblem::UnknownShape { minor })?;
        let len = 24 + 8 * shape.parts.iter().map(|p| p.fields.len()).sum::<usize>();
        let bytes = mem
            .read_vec(runtime, len)
            .map_err(|_| OffsetsProblem::Unreadable)?;
        DebugOffsets::parse(&bytes, minor)
    }

    /// Parses the bytes of `_Py_DebugOffsets` (from its cookie on) as CPython
    /// 3.`minor` lays them out, and checks every offset the reader uses.
    ///
    /// Does not compare the stated version with anything: [`DebugOffsets::check_version`] does.
    pub fn parse(bytes: &[u8], minor: u8) -> Result<DebugOffsets, OffsetsProblem> {
        let shape = shape_for(minor).ok_or(OffsetsProblem::UnknownShape { minor })?;
        let word = |i: usize| -> Option<u64> {
            bytes
                .get(i * 8..i * 8 + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let mut cookie = [0u8; 8];
        cookie.copy_from_slice(bytes.get(..8).ok_or(OffsetsProblem::Unreadable)?);
        if cookie != COOKIE {
            return Err(OffsetsProblem::NoCookie { found: cookie });
        }
        let version_hex = word(1).ok_or(OffsetsProblem::Unreadable)?;
        if word(2).ok_or(OffsetsProblem::Unreadable)? != 0 {
            return Err(OffsetsProblem::FreeThreaded);
        }
        let mut words = Vec::new();
        let mut i = 3;
        for part in shape.parts {
            for field in part.fields {
                words.push((
                    part.name,
                    *field,
                    word(i).ok_or(OffsetsProblem::Unreadable)?,
                ));
                i += 1;
            }
        }
        let offsets = DebugOffsets {
            version_hex,
            minor,
            words,
        };
        for part in shape.parts.iter().filter(|p| p.fields[0] == "size") {
            let size = offsets.get(part.name, "size").unwrap_or(0);
            if size == 0 || size > MAX_STRUCT_SIZE {
                return Err(OffsetsProblem::BadSize {
                    part: part.name,
                    size,
                });
            }
        }
        for (part, field, width) in USED {
            let offset = offsets.get(part, field).unwrap_or(u64::MAX);
            let size = offsets.get(part, "size").unwrap_or(0);
            if offset.checked_add(*width).is_none_or(|end| end > size) {
                return Err(OffsetsProblem::OutOfRange {
                    part,
                    field,
                    offset,
                    size,
                });
            }
        }
        if minor >= 15 {
            let base = offsets
                .get("thread_state", "base_frame")
                .unwrap_or(u64::MAX);
            let size = offsets.get("thread_state", "size").unwrap_or(0);
            if base.checked_add(8).is_none_or(|end| end > size) {
                return Err(OffsetsProblem::OutOfRange {
                    part: "thread_state",
                    field: "base_frame",
                    offset: base,
                    size,
                });
            }
        }
        Ok(offsets)
    }

    /// The word `part.field`, if the shape has it.
    pub fn get(&self, part: &str, field: &str) -> Option<u64> {
        self.words
            .iter()
            .find(|(p, f, _)| *p == part && *f == field)
            .map(|w| w.2)
    }

    /// The word `part.field`; 0 when missing (only for fields [`DebugOffsets::parse`] checked).
    pub fn at(&self, part: &str, field: &str) -> u64 {
        self.get(part, field).unwrap_or(0)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::python::testmem::FakeMem;

    /// The words of Debian's CPython 3.13.18 `_Py_DebugOffsets` after the cookie,
    /// as its `/usr/bin/python3.13` holds them (`.PyRuntime`, words 1-72).
    pub const DEBIAN_313: &[u64] = &[
        0x030d12f0, 0, 0x45310, 0x260, 0x278, 0x2f9a8, 0x1c68, 0x1c60, 0x1cb0, 0x1ce8, 0x1de8,
        0x1dd8, 0x1de0, 0x10, 0x1e48, 0, 0x1e58, 0x1e50, 0x138, 0, 8, 0x10, 0x48, 0x98, 0xa0, 0xe8,
        0x20, 0x50, 8, 0, 0x38, 0x48, 0x46, 0xd0, 0x70, 0x78, 0x80, 0x88, 0x44, 0x34, 0x60, 0x68,
        0xc8, 0x10, 8, 0x1a0, 0x18, 0x58, 0xa8, 0x20, 0x18, 0x10, 0x28, 0x18, 0x10, 0x30, 0x20,
        0x28, 0x18, 0x10, 0x20, 0x10, 0x18, 0x28, 0x10, 0x20, 0x40, 0x20, 0x10, 0x28, 0xf0, 0xc8,
    ];

    /// `_Py_DebugOffsets` bytes: the cookie then `words`.
    pub fn image(words: &[u64]) -> Vec<u8> {
        let mut b = COOKIE.to_vec();
        for w in words {
            b.extend(w.to_le_bytes());
        }
        b
    }

    #[test]
    fn debian_313_parses() {
        let o = DebugOffsets::parse(&image(DEBIAN_313), 13).unwrap();
        assert_eq!(o.version_hex, 0x030d12f0);
        assert_eq!(o.at("thread_state", "current_frame"), 0x48);
        assert_eq!(o.at("thread_state", "native_thread_id"), 0xa0);
        assert_eq!(o.at("interpreter_frame", "owner"), 0x46);
        assert_eq!(o.at("code_object", "co_code_adaptive"), 0xc8);
        assert_eq!(o.at("unicode_object", "asciiobject_size"), 0x28);
        assert_eq!(o.get("thread_state", "base_frame"), None);
        // Read through memory as well.
        let mut m = FakeMem::default();
        m.put(0x1000, &image(DEBIAN_313));
        assert_eq!(DebugOffsets::read(&m, 0x1000, 13).unwrap(), o);
        assert_eq!(
            probe(&m, 0x1000),
            Probe::Found(Header {
                version_hex: 0x030d12f0,
                free_threaded: 0
            })
        );
    }

    #[test]
    fn hostile_offsets_are_refused_naming_the_field() {
        let mut words = DEBIAN_313.to_vec();
        // Cookie broken.
        let mut b = image(&words);
        b[7] = b'x';
        assert!(matches!(
            DebugOffsets::parse(&b, 13),
            Err(OffsetsProblem::NoCookie { .. })
        ));
        // Free-threaded.
        words[1] = 1;
        assert_eq!(
            DebugOffsets::parse(&image(&words), 13),
            Err(OffsetsProblem::FreeThreaded)
        );
        words[1] = 0;
        // An offset outside its type: thread_state.current_frame past its size.
        words[22] = 0x1000;
        let err = DebugOffsets::parse(&image(&words), 13).unwrap_err();
        assert!(
            matches!(
                err,
                OffsetsProblem::OutOfRange {
                    part: "thread_state",
                    field: "current_frame",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("thread_state.current_frame"),
            "{err}"
        );
        words[22] = 0x48;
        // A zero size, and an absurd one.
        words[2] = 0;
        assert!(matches!(
            DebugOffsets::parse(&image(&words), 13),
            Err(OffsetsProblem::BadSize {
                part: "runtime_state",
                ..
            })
        ));
        words[2] = u64::MAX;
        assert!(DebugOffsets::parse(&image(&words), 13).is_err());
        // Offset + width overflowing.
        words[2] = 0x45310;
        words[4] = u64::MAX - 2;
        assert!(DebugOffsets::parse(&image(&words), 13).is_err());
        // Cut short, and unknown shapes.
        let b = image(DEBIAN_313);
        assert_eq!(
            DebugOffsets::parse(&b[..100], 13),
            Err(OffsetsProblem::Unreadable)
        );
        assert_eq!(
            DebugOffsets::parse(&[], 13),
            Err(OffsetsProblem::Unreadable)
        );
        for minor in [11, 12, 16, 255] {
            assert_eq!(
                DebugOffsets::parse(&b, minor),
                Err(OffsetsProblem::UnknownShape { minor })
            );
        }
        // Unreadable memory.
        let m = FakeMem::default();
        assert_eq!(probe(&m, 0x1000), Probe::Unreadable);
        assert_eq!(
            DebugOffsets::read(&m, 0x1000, 13),
            Err(OffsetsProblem::Unreadable)
        );
    }

    #[test]
    fn shapes_name_each_used_field_once() {
        for shape in [&SHAPE_313, &SHAPE_314, &SHAPE_315] {
            for (part, field, _) in USED {
                let n = shape
                    .parts
                    .iter()
                    .filter(|p| p.name == *part)
                    .flat_map(|p| p.fields.iter())
                    .filter(|f| *f == field)
                    .count();
                assert_eq!(n, 1, "3.{} {part}.{field}", shape.minor);
            }
            let sized = shape.parts.iter().filter(|p| p.fields[0] == "size");
            assert!(sized.count() >= shape.parts.len() - 1);
        }
    }
}
