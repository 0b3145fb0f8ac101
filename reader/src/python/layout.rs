//! Every CPython memory layout fact the reader uses, one table per minor version.
//!
//! A [`Layout`] names each offset the reader follows, from `_PyRuntime` down to a
//! string's characters. Adding a version is adding a table and a line in
//! [`layout_for`]. Only 3.11 has a table: it was checked against the headers of
//! both 3.11 builds on the development machine (a test compiles an `offsetof`
//! program against each interpreter's headers and compares).
//!
//! CPython 3.13 and later publish their own offsets at the start of `_PyRuntime`
//! (`_Py_DebugOffsets`, CPython gh-106598), behind an 8-byte cookie. [`probe_debug_offsets`]
//! detects them; reading them into a [`Layout`] is the way to support those
//! versions, but no 3.13+ interpreter has run here, so none is claimed:
//! [`layout_for`] names the version it has no layout for.

use crate::memory::Memory;

use super::error::PythonError;
use super::version::PythonVersion;

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
    /// `prev_instr`: the code unit before the next instruction.
    pub prev_instr: u64,
    /// `is_entry` (a `bool`): the first frame a C-level `_PyEval_EvalFrameDefault` call runs.
    pub is_entry: u64,
    /// `owner` (a `char`): thread, generator or frame object.
    pub owner: u64,
    /// `localsplus`: locals, cells, free variables, then the value stack.
    pub localsplus: u64,
    /// Value of `owner` for a frame embedded in a generator (`FRAME_OWNED_BY_GENERATOR`).
    pub owned_by_generator: u8,
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
    /// `PyLongObject.ob_digit` (3.11: sign and digit count in `ob_size`).
    pub long_digits: u64,
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
    /// Bit of `state.ready`.
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
    },
    thread: ThreadLayout {
        next: 8,
        interp: 16,
        native_thread_id: 160,
        current_frame: CurrentFrame::ViaCFrame {
            cframe: 56,
            current_frame: 8,
        },
    },
    frame: FrameLayout {
        f_code: 32,
        previous: 48,
        prev_instr: 56,
        is_entry: 68,
        owner: 69,
        localsplus: 72,
        owned_by_generator: 1,
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

/// The layout table of `version`, or [`PythonError::NoLayout`] naming it.
///
/// `debug_offsets` says whether the interpreter publishes `_Py_DebugOffsets`
/// (see [`probe_debug_offsets`]); the error then says so, since those versions
/// are the ones to support by reading the offsets rather than adding a table.
pub fn layout_for(
    version: PythonVersion,
    debug_offsets: Option<DebugOffsetsHeader>,
) -> Result<&'static Layout, PythonError> {
    match (version.major, version.minor) {
        (3, 11) => Ok(&PY311),
        _ => Err(PythonError::NoLayout {
            version,
            debug_offsets: debug_offsets.is_some(),
        }),
    }
}

/// The cookie that starts `_Py_DebugOffsets` at the start of `_PyRuntime` (3.13+).
pub const DEBUG_OFFSETS_COOKIE: [u8; 8] = *b"xdebugpy";

/// The head of `_Py_DebugOffsets`: its cookie was found, and the version it states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DebugOffsetsHeader {
    /// `version`: the interpreter's `PY_VERSION_HEX`.
    pub version_hex: u64,
}

/// Reads the `_Py_DebugOffsets` header at `runtime` (the `_PyRuntime` address),
/// if the interpreter has one (3.13+); `None` for older versions or unreadable memory.
pub fn probe_debug_offsets(mem: &dyn Memory, runtime: u64) -> Option<DebugOffsetsHeader> {
    let mut head = [0u8; 16];
    mem.read(runtime, &mut head).ok()?;
    let (cookie, version) = head.split_at(8);
    if cookie != DEBUG_OFFSETS_COOKIE {
        return None;
    }
    let version_hex = u64::from_le_bytes(version.try_into().ok()?);
    Some(DebugOffsetsHeader { version_hex })
}

impl Layout {
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
            ("frame.is_entry", f.is_entry),
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
    use super::*;

    #[test]
    fn only_311_has_a_table() {
        let v = |minor| PythonVersion {
            major: 3,
            minor,
            micro: 0,
            level: 0xf,
            serial: 0,
        };
        assert_eq!(layout_for(v(11), None).unwrap().minor, 11);
        for minor in [10, 12, 13, 14] {
            let err = layout_for(v(minor), None).unwrap_err();
            assert!(err.to_string().contains(&format!("3.{minor}")), "{err}");
        }
        let err = layout_for(v(13), Some(DebugOffsetsHeader { version_hex: 0 })).unwrap_err();
        assert!(err.to_string().contains("_Py_DebugOffsets"), "{err}");
    }

    #[test]
    fn entries_are_named_once() {
        let e = PY311.entries();
        let mut names: Vec<_> = e.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), e.len());
    }

    #[test]
    fn debug_offsets_cookie_is_detected() {
        struct Bytes(Vec<u8>);
        impl Memory for Bytes {
            fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), crate::memory::MemoryError> {
                let a = addr as usize;
                match self.0.get(a..a + buf.len()) {
                    Some(s) => {
                        buf.copy_from_slice(s);
                        Ok(())
                    }
                    None => Err(crate::memory::MemoryError::Read {
                        addr,
                        len: buf.len(),
                        source: std::io::ErrorKind::UnexpectedEof.into(),
                    }),
                }
            }
        }
        let mut b = b"xdebugpy".to_vec();
        b.extend(0x030d00f0u64.to_le_bytes());
        let h = probe_debug_offsets(&Bytes(b), 0).unwrap();
        assert_eq!(h.version_hex, 0x030d00f0);
        assert_eq!(probe_debug_offsets(&Bytes(vec![0; 16]), 0), None);
        assert_eq!(probe_debug_offsets(&Bytes(vec![]), 0), None);
    }
}
