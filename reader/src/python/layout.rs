//! Every CPython memory layout fact the reader uses, one table per minor version.
//!
//! A [`Layout`] names each offset the reader follows, from `_PyRuntime` down to a
//! string's characters. 3.11 has a whole table ([`PY311`]): it was checked
//! against the headers of both 3.11 builds on the development machine (a test
//! compiles an `offsetof` program against each interpreter's headers and
//! compares).
//!
//! CPython 3.13 and later publish their own offsets at the start of `_PyRuntime`
//! (`_Py_DebugOffsets`, CPython gh-106598), read by [`super::debug_offsets`].
//! What those do not carry (frame owner values, `_PyStackRef` tags, a few code
//! object fields) is in one small [`VersionFacts`] per minor version; together
//! they make the version's [`Layout`] ([`Layout::from_debug_offsets`]).
//! [`layout_for`] refuses by name a version with neither (3.12, a future 3.16),
//! a free-threaded build, and offsets that disagree with the version found
//! elsewhere or fail a check.

use crate::memory::Memory;

use super::debug_offsets::{self, DebugOffsets, OffsetsProblem, Probe};
use super::error::PythonError;
use super::release::PythonVersion;

/// Offsets in `_PyRuntimeState` (the `_PyRuntime` global).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeLayout {
    /// `interpreters.head`: the newest `PyInterpreterState*`.
    pub interpreters_head: u64,
}

/// Offsets in `PyInterpreterState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterpLayout {
    /// `next`: the next (older) interpreter.
    pub next: u64,
    /// `threads.head`: the newest `PyThreadState*`.
    pub threads_head: u64,
    /// `id` (an `int64_t`, 0 for the main interpreter): 3.13+, from the debug
    /// offsets; `None` in the 3.11 table (interpreters are then named by address).
    pub id: Option<u64>,
}

/// Offsets in `PyThreadState` and the way to its current frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadLayout {
    /// `next`: the next (older) thread state.
    pub next: u64,
    /// `interp`: the owning interpreter.
    pub interp: u64,
    /// `native_thread_id`: the OS thread id (Linux tid).
    pub native_thread_id: u64,
    /// How the current `_PyInterpreterFrame*` is reached from the thread state.
    pub current_frame: CurrentFrame,
    /// 3.15+: offset of the pointer to the thread's base frame, the frame every
    /// chain of the thread ends in.
    pub base_frame: Option<u64>,
}

/// How a thread state points at its innermost `_PyInterpreterFrame`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CurrentFrame {
    /// 3.11, 3.12: `tstate->cframe->current_frame`.
    ViaCFrame {
        /// Offset of `cframe` (`_PyCFrame*`) in the thread state.
        cframe: u64,
        /// Offset of `current_frame` in `_PyCFrame`.
        current_frame: u64,
    },
    /// 3.13+: `tstate->current_frame`.
    Direct {
        /// Offset of `current_frame` in the thread state.
        current_frame: u64,
    },
}

/// Offsets in `_PyInterpreterFrame`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLayout {
    /// `f_code` (3.11, 3.12; `f_executable` later).
    pub f_code: u64,
    /// `previous`: the caller's frame.
    pub previous: u64,
    /// `prev_instr` (3.11: the code unit before the next instruction) or
    /// `instr_ptr` (3.13+: the code unit being run); either way the line is
    /// that of the code unit it points at.
    pub prev_instr: u64,
    /// 3.11: `is_entry` (a `bool`): the first frame a C-level
    /// `_PyEval_EvalFrameDefault` call runs. `None` from 3.12 on, where each such
    /// call puts a frame that runs no code (see `no_code_owner`) after its first.
    pub is_entry: Option<u64>,
    /// `owner` (a `char`): thread, generator or frame object.
    pub owner: u64,
    /// `localsplus`: locals, cells, free variables, then the value stack.
    pub localsplus: u64,
    /// Value of `owner` for a frame embedded in a generator (`FRAME_OWNED_BY_GENERATOR`).
    pub owned_by_generator: u8,
    /// 3.13+: `owner` values from this one up mark frames that run no code: the
    /// entry frame each C-level evaluator call keeps on its C stack, and 3.15's
    /// base frame of a thread.
    pub no_code_owner: Option<u8>,
    /// 3.14+: `f_executable` and the locals are `_PyStackRef`s, whose low bits
    /// are tags: the pointer is the value without these bits.
    pub stackref_tag_bits: u64,
    /// 3.14+: a `_PyStackRef` whose tag bits are this value holds a small int
    /// (shifted left by 2), not a pointer.
    pub stackref_int_tag: Option<u64>,
}

/// Offsets in `PyCodeObject`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeLayout {
    /// `co_flags` (int).
    pub co_flags: u64,
    /// `co_argcount` (int).
    pub co_argcount: u64,
    /// `co_posonlyargcount` (int).
    pub co_posonlyargcount: u64,
    /// `co_kwonlyargcount` (int).
    pub co_kwonlyargcount: u64,
    /// `co_firstlineno` (int).
    pub co_firstlineno: u64,
    /// `co_nlocalsplus` (int).
    pub co_nlocalsplus: u64,
    /// `co_localsplusnames` (tuple of str).
    pub co_localsplusnames: u64,
    /// `co_localspluskinds` (bytes, one kind per local).
    pub co_localspluskinds: u64,
    /// `co_filename` (str).
    pub co_filename: u64,
    /// `co_name` (str).
    pub co_name: u64,
    /// `co_qualname` (str).
    pub co_qualname: u64,
    /// `co_linetable` (bytes, the location table).
    pub co_linetable: u64,
    /// `_co_firsttraceable` (int): index of the first traceable code unit.
    pub co_firsttraceable: u64,
    /// `co_code_adaptive`: the first code unit.
    pub co_code_adaptive: u64,
    /// `CO_VARARGS` flag.
    pub flag_varargs: u32,
    /// `CO_VARKEYWORDS` flag.
    pub flag_varkeywords: u32,
    /// `CO_FAST_CELL` local kind: the slot holds a cell once the frame started.
    pub kind_cell: u8,
}

/// Offsets in objects and the builtin types the values display reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectLayout {
    /// `PyObject.ob_type`.
    pub ob_type: u64,
    /// `PyVarObject.ob_size`.
    pub ob_size: u64,
    /// `PyTypeObject.tp_name` (`const char*`).
    pub tp_name: u64,
    /// `PyTypeObject.tp_flags` (unsigned long).
    pub tp_flags: u64,
    /// `PyLongObject.ob_digit`.
    pub long_digits: u64,
    /// Where an int's sign and digit count are.
    pub long_format: LongFormat,
    /// Value bits per int digit (`PyLong_SHIFT`).
    pub long_digit_bits: u32,
    /// Bytes per int digit (`sizeof(digit)`).
    pub long_digit_size: u64,
    /// `PyFloatObject.ob_fval`.
    pub float_value: u64,
    /// `PyASCIIObject.length` (code points).
    pub str_length: u64,
    /// `PyASCIIObject.state` (a 32-bit bit field).
    pub str_state: u64,
    /// Mask of `state.kind` (1, 2 or 4 bytes per code point).
    pub str_kind_mask: u32,
    /// Bit of `state.compact`.
    pub str_compact_bit: u32,
    /// Bit of `state.ascii`.
    pub str_ascii_bit: u32,
    /// Bit of `state.ready` (3.11); 0 from 3.12 on, where every string is ready.
    pub str_ready_bit: u32,
    /// Characters of a compact ASCII string (`sizeof(PyASCIIObject)`).
    pub str_ascii_data: u64,
    /// Characters of a compact non-ASCII string (`sizeof(PyCompactUnicodeObject)`).
    pub str_compact_data: u64,
    /// `PyUnicodeObject.data` (pointer to the characters of a non-compact string).
    pub str_legacy_data: u64,
    /// `PyBytesObject.ob_sval`.
    pub bytes_data: u64,
    /// `PyTupleObject.ob_item`.
    pub tuple_items: u64,
    /// `PyCellObject.ob_ref`.
    pub cell_ref: u64,
    /// `PyDictObject.ma_used`.
    pub dict_used: u64,
}

/// Where a `PyLongObject` keeps its sign and number of digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongFormat {
    /// 3.11: `ob_size` holds the digit count, negative for a negative int.
    ObSize,
    /// 3.12+: `long_value.lv_tag` at this offset: the digit count shifted left by
    /// 3, and in the low 2 bits the sign (0 positive, 1 zero, 2 negative).
    LvTag {
        /// Offset of `lv_tag`.
        offset: u64,
    },
}

/// Every layout fact of one CPython minor version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The minor version (`11` for 3.11).
    pub minor: u8,
    /// `_PyRuntime`.
    pub runtime: RuntimeLayout,
    /// `PyInterpreterState`.
    pub interp: InterpLayout,
    /// `PyThreadState`.
    pub thread: ThreadLayout,
    /// `_PyInterpreterFrame`.
    pub frame: FrameLayout,
    /// `PyCodeObject`.
    pub code: CodeLayout,
    /// Objects and builtin types.
    pub object: ObjectLayout,
}

/// CPython 3.11 on 64-bit Linux, checked against 3.11.2 (Debian) and 3.11.7 (pyenv).
pub const PY311: Layout = Layout {
    minor: 11,
    runtime: RuntimeLayout {
        interpreters_head: 40,
    },
    interp: InterpLayout {
        next: 0,
        threads_head: 16,
        id: None,
    },
    thread: ThreadLayout {
        next: 8,
        interp: 16,
        native_thread_id: 160,
        current_frame: CurrentFrame::ViaCFrame {
            cframe: 56,
            current_frame: 8,
        },
        base_frame: None,
    },
    frame: FrameLayout {
        f_code: 32,
        previous: 48,
        prev_instr: 56,
        is_entry: Some(68),
        owner: 69,
        localsplus: 72,
        owned_by_generator: 1,
        no_code_owner: None,
        stackref_tag_bits: 0,
        stackref_int_tag: None,
    },
    code: CodeLayout {
        co_flags: 48,
        co_argcount: 56,
        co_posonlyargcount: 60,
        co_kwonlyargcount: 64,
        co_firstlineno: 72,
        co_nlocalsplus: 76,
        co_localsplusnames: 96,
        co_localspluskinds: 104,
        co_filename: 112,
        co_name: 120,
        co_qualname: 128,
        co_linetable: 136,
        co_firsttraceable: 168,
        co_code_adaptive: 184,
        flag_varargs: 0x4,
        flag_varkeywords: 0x8,
        kind_cell: 0x40,
    },
    object: ObjectLayout {
        ob_type: 8,
        ob_size: 16,
        tp_name: 24,
        tp_flags: 168,
        long_digits: 24,
        long_format: LongFormat::ObSize,
        long_digit_bits: 30,
        long_digit_size: 4,
        float_value: 16,
        str_length: 16,
        str_state: 32,
        str_kind_mask: 0x1c,
        str_compact_bit: 0x20,
        str_ascii_bit: 0x40,
        str_ready_bit: 0x80,
        str_ascii_data: 48,
        str_compact_data: 72,
        str_legacy_data: 72,
        bytes_data: 32,
        tuple_items: 24,
        cell_ref: 16,
        dict_used: 16,
    },
};

/// What `_Py_DebugOffsets` does not carry, for one minor version (3.13+).
///
/// Offsets are stated relative to ones the debug offsets give, so a build
/// whose headers moved everything (a debug build) still reads right or fails
/// the checks of [`Layout::from_debug_offsets`]. Learnt from CPython's headers
/// and checked against Debian's 3.13.18, 3.14.10 and 3.15.2 (each value read
/// back through `ctypes` from a running interpreter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionFacts {
    /// The minor version (`13` for 3.13).
    pub minor: u8,
    /// `owner` of a generator's frame (`FRAME_OWNED_BY_GENERATOR`).
    pub owned_by_generator: u8,
    /// The lowest `owner` of a frame that runs no code: `FRAME_OWNED_BY_CSTACK`
    /// (3) in 3.13; `FRAME_OWNED_BY_INTERPRETER` (3, renumbered in front of
    /// `CSTACK`, now 4) in 3.14; 3 in 3.15, which dropped `CSTACK`.
    pub no_code_owner: u8,
    /// Low tag bits of a `_PyStackRef` (0: plain `PyObject*`, 3.13).
    pub stackref_tag_bits: u64,
    /// Tag of a small int held in a `_PyStackRef` itself.
    pub stackref_int_tag: Option<u64>,
    /// The thread state points at a base frame (3.15).
    pub base_frame: bool,
    /// `co_flags`, relative to `co_argcount` (the int before it).
    pub co_flags_from_argcount: i64,
    /// `co_posonlyargcount`, relative to `co_argcount`.
    pub co_posonly_from_argcount: i64,
    /// `co_kwonlyargcount`, relative to `co_argcount`.
    pub co_kwonly_from_argcount: i64,
    /// `co_nlocalsplus`, relative to `co_firstlineno` (the int after it).
    pub co_nlocalsplus_from_firstlineno: i64,
    /// `_co_firsttraceable`, relative to `co_code_adaptive`.
    pub co_firsttraceable_from_code: i64,
    /// The characters of a compact non-ASCII `str`, after `sizeof(PyASCIIObject)`
    /// (`utf8_length` and `utf8`).
    pub str_compact_after_ascii: u64,
}

/// 3.13: plain object pointers; the C-stack entry frame's owner is 3.
pub const FACTS_313: VersionFacts = VersionFacts {
    minor: 13,
    owned_by_generator: 1,
    no_code_owner: 3,
    stackref_tag_bits: 0,
    stackref_int_tag: None,
    base_frame: false,
    co_flags_from_argcount: -4,
    co_posonly_from_argcount: 4,
    co_kwonly_from_argcount: 8,
    co_nlocalsplus_from_firstlineno: 4,
    co_firsttraceable_from_code: -16,
    str_compact_after_ascii: 16,
};

/// 3.14: `_PyStackRef`s (tag bits 0b11, ints tagged 0b11), owners renumbered.
pub const FACTS_314: VersionFacts = VersionFacts {
    minor: 14,
    stackref_tag_bits: 3,
    stackref_int_tag: Some(3),
    ..FACTS_313
};

/// 3.15: as 3.14, and every thread's chain ends in its base frame.
pub const FACTS_315: VersionFacts = VersionFacts {
    minor: 15,
    base_frame: true,
    ..FACTS_314
};

/// The facts table of CPython 3.`minor`, if it has one.
pub fn facts_for(minor: u8) -> Option<&'static VersionFacts> {
    [&FACTS_313, &FACTS_314, &FACTS_315]
        .into_iter()
        .find(|f| f.minor == minor)
}

/// The versions the reader has a layout for, as the messages list them.
pub const KNOWN_VERSIONS: &str = "3.11, 3.13, 3.14, 3.15";

/// The layout of CPython `version`: the 3.11 table, or for 3.13+ the target's
/// `_Py_DebugOffsets` (at `runtime`) with the version's [`VersionFacts`].
///
/// `version_exact` says that `version` came from `Py_Version` (so the offsets'
/// own version must equal it in full), not only from a file name (then only
/// the minor version is compared). A version with no table is refused by name
/// ([`PythonError::NoLayout`]), and so are offsets that fail a check
/// ([`PythonError::DebugOffsets`]): nothing is guessed.
pub fn layout_for(
    mem: &dyn Memory,
    runtime: u64,
    version: PythonVersion,
    version_exact: bool,
) -> Result<Layout, PythonError> {
    let refuse = |problem| PythonError::DebugOffsets {
        version,
        runtime,
        problem,
    };
    let probe = debug_offsets::probe(mem, runtime);
    if let Probe::Found(h) = probe {
        if h.free_threaded != 0 {
            return Err(refuse(OffsetsProblem::FreeThreaded));
        }
    }
    if (version.major, version.minor) == (3, 11) {
        return Ok(PY311);
    }
    let facts = match facts_for(version.minor).filter(|_| version.major == 3) {
        Some(f) => f,
        None => {
            return Err(PythonError::NoLayout {
                version,
                known: KNOWN_VERSIONS,
                debug_offsets: matches!(probe, Probe::Found(_)),
            })
        }
    };
    let header = match probe {
        Probe::Found(h) => h,
        Probe::NoCookie { found } => return Err(refuse(OffsetsProblem::NoCookie { found })),
        Probe::Unreadable => return Err(refuse(OffsetsProblem::Unreadable)),
    };
    let stated = PythonVersion::from_hex(header.version_hex);
    let agrees = if version_exact {
        stated == version
    } else {
        (stated.major, stated.minor) == (version.major, version.minor)
    };
    if !agrees || header.version_hex >> 32 != 0 {
        return Err(refuse(OffsetsProblem::VersionDisagrees {
            offsets: header.version_hex,
            found: version.to_string(),
        }));
    }
    let offsets = DebugOffsets::read(mem, runtime, facts.minor).map_err(refuse)?;
    Ok(Layout::from_debug_offsets(&offsets, facts))
}

/// `base + delta` for a table's relative offset (never below 0).
fn rel(base: u64, delta: i64) -> u64 {
    base.saturating_add_signed(delta)
}

impl Layout {
    /// The layout of a 3.13+ interpreter from its checked `_Py_DebugOffsets` and
    /// its version's facts.
    pub fn from_debug_offsets(o: &DebugOffsets, facts: &VersionFacts) -> Layout {
        let at = |part, field| o.at(part, field);
        let argcount = at("code_object", "argcount");
        let firstlineno = at("code_object", "firstlineno");
        let code_adaptive = at("code_object", "co_code_adaptive");
        let pyobject_size = at("pyobject", "size");
        let ascii_size = at("unicode_object", "asciiobject_size");
        Layout {
            minor: facts.minor,
            runtime: RuntimeLayout {
                interpreters_head: at("runtime_state", "interpreters_head"),
            },
            interp: InterpLayout {
                next: at("interpreter_state", "next"),
                threads_head: at("interpreter_state", "threads_head"),
                id: o.get("interpreter_state", "id"),
            },
            thread: ThreadLayout {
                next: at("thread_state", "next"),
                interp: at("thread_state", "interp"),
                native_thread_id: at("thread_state", "native_thread_id"),
                current_frame: CurrentFrame::Direct {
                    current_frame: at("thread_state", "current_frame"),
                },
                base_frame: if facts.base_frame {
                    o.get("thread_state", "base_frame")
                } else {
                    None
                },
            },
            frame: FrameLayout {
                f_code: at("interpreter_frame", "executable"),
                previous: at("interpreter_frame", "previous"),
                prev_instr: at("interpreter_frame", "instr_ptr"),
                is_entry: None,
                owner: at("interpreter_frame", "owner"),
                localsplus: at("interpreter_frame", "localsplus"),
                owned_by_generator: facts.owned_by_generator,
                no_code_owner: Some(facts.no_code_owner),
                stackref_tag_bits: facts.stackref_tag_bits,
                stackref_int_tag: facts.stackref_int_tag,
            },
            code: CodeLayout {
                co_flags: rel(argcount, facts.co_flags_from_argcount),
                co_argcount: argcount,
                co_posonlyargcount: rel(argcount, facts.co_posonly_from_argcount),
                co_kwonlyargcount: rel(argcount, facts.co_kwonly_from_argcount),
                co_firstlineno: firstlineno,
                co_nlocalsplus: rel(firstlineno, facts.co_nlocalsplus_from_firstlineno),
                co_localsplusnames: at("code_object", "localsplusnames"),
                co_localspluskinds: at("code_object", "localspluskinds"),
                co_filename: at("code_object", "filename"),
                co_name: at("code_object", "name"),
                co_qualname: at("code_object", "qualname"),
                co_linetable: at("code_object", "linetable"),
                co_firsttraceable: rel(code_adaptive, facts.co_firsttraceable_from_code),
                co_code_adaptive: code_adaptive,
                flag_varargs: 0x4,
                flag_varkeywords: 0x8,
                kind_cell: 0x40,
            },
            object: ObjectLayout {
                ob_type: at("pyobject", "ob_type"),
                ob_size: at("tuple_object", "ob_size"),
                tp_name: at("type_object", "tp_name"),
                tp_flags: at("type_object", "tp_flags"),
                long_digits: at("long_object", "ob_digit"),
                long_format: LongFormat::LvTag {
                    offset: at("long_object", "lv_tag"),
                },
                long_digit_bits: 30,
                long_digit_size: 4,
                float_value: at("float_object", "ob_fval"),
                str_length: at("unicode_object", "length"),
                str_state: at("unicode_object", "state"),
                str_kind_mask: 0x1c,
                str_compact_bit: 0x20,
                str_ascii_bit: 0x40,
                str_ready_bit: 0,
                str_ascii_data: ascii_size,
                str_compact_data: o
                    .get("unicode_object", "compactunicodeobject_size")
                    .unwrap_or(ascii_size.saturating_add(facts.str_compact_after_ascii)),
                // The data pointer is the last member of PyUnicodeObject.
                str_legacy_data: at("unicode_object", "size").saturating_sub(8),
                bytes_data: at("bytes_object", "ob_sval"),
                tuple_items: at("tuple_object", "ob_item"),
                // PyCellObject's ob_ref and PyDictObject's ma_used follow the object header.
                cell_ref: pyobject_size,
                dict_used: pyobject_size,
            },
        }
    }

    /// Every number in the table by a stable dotted name (`frame.f_code`), for
    /// checking the table against compiled headers.
    pub fn entries(&self) -> Vec<(&'static str, u64)> {
        let (cframe, current_frame) = match self.thread.current_frame {
            CurrentFrame::ViaCFrame {
                cframe,
                current_frame,
            } => (Some(cframe), current_frame),
            CurrentFrame::Direct { current_frame } => (None, current_frame),
        };
        let t = &self.thread;
        let f = &self.frame;
        let c = &self.code;
        let o = &self.object;
        let mut v = vec![
            ("runtime.interpreters_head", self.runtime.interpreters_head),
            ("interp.next", self.interp.next),
            ("interp.threads_head", self.interp.threads_head),
            ("tstate.next", t.next),
            ("tstate.interp", t.interp),
            ("tstate.native_thread_id", t.native_thread_id),
        ];
        match cframe {
            Some(cf) => {
                v.push(("tstate.cframe", cf));
                v.push(("cframe.current_frame", current_frame));
            }
            None => v.push(("tstate.current_frame", current_frame)),
        }
        v.extend([
            ("frame.f_code", f.f_code),
            ("frame.previous", f.previous),
            ("frame.prev_instr", f.prev_instr),
            ("frame.is_entry", f.is_entry.unwrap_or(u64::MAX)),
            ("frame.owner", f.owner),
            ("frame.localsplus", f.localsplus),
            ("frame.owned_by_generator", u64::from(f.owned_by_generator)),
            ("code.co_flags", c.co_flags),
            ("code.co_argcount", c.co_argcount),
            ("code.co_posonlyargcount", c.co_posonlyargcount),
            ("code.co_kwonlyargcount", c.co_kwonlyargcount),
            ("code.co_firstlineno", c.co_firstlineno),
            ("code.co_nlocalsplus", c.co_nlocalsplus),
            ("code.co_localsplusnames", c.co_localsplusnames),
            ("code.co_localspluskinds", c.co_localspluskinds),
            ("code.co_filename", c.co_filename),
            ("code.co_name", c.co_name),
            ("code.co_qualname", c.co_qualname),
            ("code.co_linetable", c.co_linetable),
            ("code.co_firsttraceable", c.co_firsttraceable),
            ("code.co_code_adaptive", c.co_code_adaptive),
            ("code.varargs", u64::from(c.flag_varargs)),
            ("code.varkeywords", u64::from(c.flag_varkeywords)),
            ("code.fast_cell", u64::from(c.kind_cell)),
            ("object.ob_type", o.ob_type),
            ("object.ob_size", o.ob_size),
            ("type.tp_name", o.tp_name),
            ("type.tp_flags", o.tp_flags),
            ("long.ob_digit", o.long_digits),
            ("long.digit_bits", u64::from(o.long_digit_bits)),
            ("long.digit_size", o.long_digit_size),
            ("float.ob_fval", o.float_value),
            ("str.length", o.str_length),
            ("str.state", o.str_state),
            ("str.kind_mask", u64::from(o.str_kind_mask)),
            ("str.compact_bit", u64::from(o.str_compact_bit)),
            ("str.ascii_bit", u64::from(o.str_ascii_bit)),
            ("str.ready_bit", u64::from(o.str_ready_bit)),
            ("str.ascii_data", o.str_ascii_data),
            ("str.compact_data", o.str_compact_data),
            ("str.legacy_data", o.str_legacy_data),
            ("bytes.ob_sval", o.bytes_data),
            ("tuple.ob_item", o.tuple_items),
            ("cell.ob_ref", o.cell_ref),
            ("dict.ma_used", o.dict_used),
        ]);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::super::debug_offsets::tests::{image, DEBIAN_313};
    use super::super::testmem::FakeMem;
    use super::*;

    fn v(minor: u8, micro: u8) -> PythonVersion {
        PythonVersion {
            major: 3,
            minor,
            micro,
            level: 0xf,
            serial: 0,
        }
    }

    const RT: u64 = 0x10_0000;

    fn runtime(words: &[u64]) -> FakeMem {
        let mut m = FakeMem::default();
        m.put(RT, &image(words));
        m
    }

    #[test]
    fn versions_without_a_table_are_named() {
        let none = FakeMem::default();
        assert_eq!(layout_for(&none, RT, v(11, 7), true).unwrap().minor, 11);
        for minor in [10, 12, 16] {
            let err = layout_for(&none, RT, v(minor, 0), true).unwrap_err();
            assert!(err.to_string().contains(&format!("3.{minor}")), "{err}");
            assert!(err.to_string().contains("only native frames"), "{err}");
        }
        // A fake 3.16 that publishes offsets: refused by name, never guessed.
        let mut words = DEBIAN_313.to_vec();
        words[0] = 0x031000f0;
        let err = layout_for(&runtime(&words), RT, v(16, 0), true).unwrap_err();
        assert!(matches!(
            err,
            PythonError::NoLayout {
                debug_offsets: true,
                ..
            }
        ));
        assert!(err.to_string().contains("3.16.0"), "{err}");
        assert!(err.to_string().contains("_Py_DebugOffsets"), "{err}");
    }

    #[test]
    fn debian_313_offsets_make_its_layout() {
        let m = runtime(DEBIAN_313);
        let l = layout_for(&m, RT, v(13, 18), true).unwrap();
        assert_eq!(l.minor, 13);
        assert_eq!(
            l.thread.current_frame,
            CurrentFrame::Direct {
                current_frame: 0x48
            }
        );
        assert_eq!(l.thread.base_frame, None);
        assert_eq!((l.frame.f_code, l.frame.prev_instr), (0, 0x38));
        assert_eq!((l.frame.owner, l.frame.localsplus), (0x46, 0x48));
        assert_eq!(l.frame.is_entry, None);
        assert_eq!(l.frame.no_code_owner, Some(3));
        // Read back from a running 3.13.18 with ctypes: flags 0x30, posonly 0x38,
        // kwonly 0x3c, nlocalsplus 0x48, _co_firsttraceable 0xb8.
        let c = &l.code;
        assert_eq!(
            (c.co_flags, c.co_posonlyargcount, c.co_kwonlyargcount),
            (0x30, 0x38, 0x3c)
        );
        assert_eq!((c.co_nlocalsplus, c.co_firsttraceable), (0x48, 0xb8));
        assert_eq!(l.object.long_format, LongFormat::LvTag { offset: 0x10 });
        assert_eq!(
            (l.object.str_ascii_data, l.object.str_compact_data),
            (0x28, 0x38)
        );
        assert_eq!((l.object.cell_ref, l.object.dict_used), (0x10, 0x10));
        // Known by file name only: the minor version must agree.
        assert!(layout_for(&m, RT, v(13, 0), false).is_ok());
    }

    #[test]
    fn offsets_that_disagree_or_are_damaged_are_refused() {
        let m = runtime(DEBIAN_313);
        // Py_Version says 3.13.17: the offsets say 3.13.18.
        let err = layout_for(&m, RT, v(13, 17), true).unwrap_err();
        assert!(err.to_string().contains("3.13.17"), "{err}");
        assert!(err.to_string().contains("0x030d12f0"), "{err}");
        // 3.14 by name, 3.13 offsets.
        assert!(layout_for(&m, RT, v(14, 0), false).is_err());
        // The cookie damaged.
        let mut b = image(DEBIAN_313);
        b[0] = b'X';
        let mut m = FakeMem::default();
        m.put(RT, &b);
        let err = layout_for(&m, RT, v(13, 18), true).unwrap_err();
        assert!(err.to_string().contains("cookie"), "{err}");
        // Unreadable _PyRuntime.
        let err = layout_for(&FakeMem::default(), RT, v(13, 18), true).unwrap_err();
        assert!(err.to_string().contains("cannot be read"), "{err}");
        // Free-threaded: refused by name whatever the version.
        let mut words = DEBIAN_313.to_vec();
        words[1] = 1;
        for minor in [13, 16] {
            let err = layout_for(&runtime(&words), RT, v(minor, 0), false).unwrap_err();
            assert!(err.to_string().contains("free-threaded"), "{err}");
        }
    }

    #[test]
    fn entries_are_named_once() {
        let e = PY311.entries();
        let mut names: Vec<_> = e.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), e.len());
    }
}
