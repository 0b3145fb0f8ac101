//! Reading a chain of `_PyInterpreterFrame`s from the innermost outward.
//!
//! Each frame gives its code object's qualified name, file and current line (the
//! location table at `prev_instr`), whether it is an entry frame (the first frame a
//! C-level `_PyEval_EvalFrameDefault` call runs; 3.11 inlines Python-to-Python
//! calls, so one C call runs several frames), and its arguments by name.
//!
//! Nothing read is trusted: the chain ends at a frame limit, at a frame seen
//! before, and at the first frame that cannot be read or whose `f_code` is not a
//! code object, with a [`ChainEnd`] saying which. Code objects repeat (a deep
//! recursion runs one function), so each is decoded once per chain.
//!
//! Frames CPython hides are kept in the chain, marked [`PyFrame::incomplete`]: in
//! 3.11 a frame not owned by a generator whose `prev_instr` is before the code's
//! first traceable instruction is still being set up (`_PyFrame_IsIncomplete`).
//! Tracebacks and `sys._getframe` skip them; so should a display. They stay in the
//! chain because a native frame's stashed `frame` argument may point at one.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::rc::Rc;

use crate::memory::Memory;

use super::layout::Layout;
use super::linetable::line_for;
use super::value::{Objects, PyValue};

/// The most frames a chain is ever read to, whatever limit the caller gives.
pub const MAX_FRAMES: usize = 100_000;
/// The most code points of a qualified name, file name or parameter name.
const MAX_NAME_CHARS: usize = 4096;
/// The most parameters read by name.
const MAX_PARAMS: usize = 256;
/// The most bytes of a location table read.
const MAX_LINETABLE: usize = 1 << 20;
/// The most locals a code object may declare.
const MAX_LOCALS: usize = 1 << 16;

/// How a parameter is passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// Positional-only (before `/`).
    PositionalOnly,
    /// Positional or keyword.
    Positional,
    /// Keyword-only (after `*` or `*args`).
    KeywordOnly,
    /// `*args`.
    VarArgs,
    /// `**kwargs`.
    VarKeywords,
}

/// One parameter of a Python frame with its current value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyParam {
    /// Its name.
    pub name: String,
    /// How it is passed.
    pub kind: ParamKind,
    /// Its value now (the function may have rebound it).
    pub value: PyValue,
}

/// Who owns a frame's memory (`_PyInterpreterFrame.owner`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameOwner {
    /// The thread's frame stack.
    Thread,
    /// A generator or coroutine.
    Generator,
    /// Another value (a frame object, or a future CPython's C-stack marker).
    Other(u8),
}

/// One Python frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyFrame {
    /// Address of the `_PyInterpreterFrame`.
    pub addr: u64,
    /// Address of its code object.
    pub code: u64,
    /// `co_qualname` (`Outer.method`).
    pub qualname: String,
    /// `co_filename`.
    pub file: String,
    /// The line of the current instruction; `None` when the code unit has no line.
    pub line: Option<i32>,
    /// `co_firstlineno`.
    pub first_line: i32,
    /// Whether a C-level call of the evaluator started at this frame.
    pub is_entry: bool,
    /// 3.12+: the frame that runs no code which that C-level call keeps on its
    /// own C stack, right after this one in the chain; its address lies inside
    /// the evaluator's native frame (the key to exact entry-frame pairing).
    pub entry_frame: Option<u64>,
    /// Who owns the frame.
    pub owner: FrameOwner,
    /// Still being set up: CPython hides such frames (see the module docs).
    pub incomplete: bool,
    /// Parameters in declaration order; empty when they could not be read (see `params_note`).
    pub params: Vec<PyParam>,
    /// Why `params` is empty or short, if something was wrong (borrowed when
    /// read here, owned when it came from elsewhere, e.g. over D-Bus).
    pub params_note: Option<std::borrow::Cow<'static, str>>,
}

impl fmt::Display for PyFrame {
    /// `outer (depth=0, *rest=<tuple object at 0x..., len 2>) at /srv/app.py:27`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (", self.qualname)?;
        for (i, p) in self.params.iter().enumerate() {
            let stars = match p.kind {
                ParamKind::VarArgs => "*",
                ParamKind::VarKeywords => "**",
                _ => "",
            };
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{stars}{}={}", p.name, p.value.display)?;
        }
        write!(f, ") at {}", self.file)?;
        match self.line {
            Some(line) => write!(f, ":{line}"),
            None => Ok(()),
        }
    }
}

/// Why a frame could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CorruptReason {
    /// The frame itself cannot be read.
    UnreadableFrame,
    /// `f_code` is null.
    NullCode,
    /// `f_code` does not point at a code object.
    NotCode,
    /// The code object's fields cannot be read.
    UnreadableCode,
    /// The code's qualified name or file name is not a readable `str`.
    BadName,
    /// The code's location table cannot be read or decoded.
    BadLineTable,
}

impl fmt::Display for CorruptReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CorruptReason::UnreadableFrame => "the frame cannot be read",
            CorruptReason::NullCode => "its code pointer is null",
            CorruptReason::NotCode => "its code pointer does not point at a code object",
            CorruptReason::UnreadableCode => "its code object cannot be read",
            CorruptReason::BadName => "its code object's names cannot be read",
            CorruptReason::BadLineTable => "its code object's line table is malformed",
        })
    }
}

/// How a chain of frames ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainEnd {
    /// At the outermost frame (`previous` is null).
    Root,
    /// At the frame limit; the frame at `next` was not read.
    Limit {
        /// The limit.
        limit: usize,
        /// The first frame not read.
        next: u64,
    },
    /// A frame's `previous` points back at a frame already read.
    Loop {
        /// The frame seen twice.
        addr: u64,
    },
    /// 3.15+: the chain ended (`previous` null) at `last`, which is not the
    /// thread's base frame: the thread changed its frames while they were read.
    NoBase {
        /// The last frame of the chain.
        last: u64,
        /// The thread's base frame.
        base: u64,
    },
    /// The frame at `addr` could not be read.
    Corrupt {
        /// The frame.
        addr: u64,
        /// What is wrong with it.
        reason: CorruptReason,
    },
}

impl fmt::Display for ChainEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChainEnd::Root => f.write_str("outermost frame reached"),
            ChainEnd::Limit { limit, .. } => write!(f, "stopped at the limit of {limit} frames"),
            ChainEnd::Loop { addr } => {
                write!(f, "the frame chain loops back to 0x{addr:x}")
            }
            ChainEnd::NoBase { last, base } => write!(
                f,
                "the frame chain ends at 0x{last:x}, not at the thread's base frame 0x{base:x} (the thread changed its frames while read; frames may be missing)"
            ),
            ChainEnd::Corrupt { addr, reason } => {
                write!(f, "Python frame at 0x{addr:x} is unreadable: {reason}")
            }
        }
    }
}

/// The frames read from one frame pointer outward, and how the chain ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameChain {
    /// Innermost first.
    pub frames: Vec<PyFrame>,
    /// Why no more frames follow.
    pub end: ChainEnd,
}

/// One frame read: a frame running code, or one that runs none.
enum Read {
    /// A frame running a code object, and its `previous`.
    Code(Box<PyFrame>, u64),
    /// A frame that runs no code (an entry frame on the C stack, a base frame).
    NoCode {
        /// Its `previous`.
        previous: u64,
    },
}

/// What a code object says, decoded once per chain.
struct CodeInfo {
    qualname: String,
    file: String,
    first_line: i32,
    first_traceable: i64,
    code_start: u64,
    linetable: Vec<u8>,
    params: Result<Vec<(String, ParamKind, bool)>, &'static str>,
}

/// Reads frame chains of one interpreter.
pub struct FrameReader<'a> {
    mem: &'a dyn Memory,
    layout: &'a Layout,
    objects: Objects<'a>,
    codes: HashMap<u64, Rc<CodeInfo>>,
}

impl<'a> FrameReader<'a> {
    /// A reader of frames in `mem` laid out as `layout`, showing values with `objects`.
    pub fn new(mem: &'a dyn Memory, layout: &'a Layout, objects: Objects<'a>) -> Self {
        FrameReader {
            mem,
            layout,
            objects,
            codes: HashMap::new(),
        }
    }

    /// Reads the chain from `frame` outward, at most `limit` frames (and never
    /// more than [`MAX_FRAMES`]).
    pub fn chain(&mut self, frame: u64, limit: usize) -> FrameChain {
        self.chain_to(frame, None, limit)
    }

    /// As [`FrameReader::chain`], for a thread whose chain must end at its base
    /// frame `base` (3.15+); ending elsewhere is [`ChainEnd::NoBase`].
    ///
    /// Frames that run no code (3.12+: each C-level evaluator call's entry
    /// frame, 3.15's base frame) are not in the chain: each marks the frame
    /// before it as an entry frame ([`PyFrame::entry_frame`]).
    pub fn chain_to(&mut self, frame: u64, base: Option<u64>, limit: usize) -> FrameChain {
        let limit = limit.min(MAX_FRAMES);
        let mut frames: Vec<PyFrame> = Vec::new();
        let mut seen = HashSet::new();
        let mut at = frame;
        let mut last = 0;
        let mut after_code = false;
        let end = loop {
            if at == 0 {
                match base {
                    Some(base) if last != base => break ChainEnd::NoBase { last, base },
                    _ => break ChainEnd::Root,
                }
            }
            // Frames without code count too, so that a hostile chain of them ends.
            if frames.len() >= limit || seen.len() >= limit.saturating_mul(2).saturating_add(2) {
                break ChainEnd::Limit { limit, next: at };
            }
            if !seen.insert(at) {
                break ChainEnd::Loop { addr: at };
            }
            match self.frame(at) {
                Ok(Read::Code(f, previous)) => {
                    frames.push(*f);
                    after_code = true;
                    last = at;
                    at = previous;
                }
                Ok(Read::NoCode { previous }) => {
                    if let Some(inner) = frames.last_mut().filter(|_| after_code) {
                        inner.is_entry = true;
                        inner.entry_frame = Some(at);
                    }
                    after_code = false;
                    last = at;
                    at = previous;
                }
                Err(reason) => break ChainEnd::Corrupt { addr: at, reason },
            }
        };
        FrameChain { frames, end }
    }

    /// The object a `_PyStackRef` (or, before 3.14, a `PyObject*`) refers to, or
    /// the small int it holds itself.
    fn untag(&self, raw: u64) -> Result<u64, i64> {
        let fl = &self.layout.frame;
        match fl.stackref_int_tag {
            Some(tag) if raw & fl.stackref_tag_bits == tag => Err((raw as i64) >> 2),
            _ => Ok(raw & !fl.stackref_tag_bits),
        }
    }

    /// Reads the frame at `addr` and its `previous` pointer.
    fn frame(&mut self, addr: u64) -> Result<Read, CorruptReason> {
        let fl = &self.layout.frame;
        let head_len = fl.localsplus as usize;
        let head = self
            .mem
            .read_vec(addr, head_len)
            .map_err(|_| CorruptReason::UnreadableFrame)?;
        let word = |off: u64| -> u64 {
            let o = off as usize;
            head.get(o..o + 8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes)
        };
        let byte = |off: u64| head.get(off as usize).copied().unwrap_or(0);
        let previous = word(fl.previous);
        if fl.no_code_owner.is_some_and(|o| byte(fl.owner) >= o) {
            return Ok(Read::NoCode { previous });
        }
        let code = self.untag(word(fl.f_code)).unwrap_or(0);
        let prev_instr = word(fl.prev_instr);
        let is_entry = fl.is_entry.is_some_and(|o| byte(o) != 0);
        let owner = match byte(fl.owner) {
            0 => FrameOwner::Thread,
            o if o == fl.owned_by_generator => FrameOwner::Generator,
            o => FrameOwner::Other(o),
        };
        if code == 0 {
            return Err(CorruptReason::NullCode);
        }
        let info = self.code_info(code)?;
        let lasti_bytes = (prev_instr.wrapping_sub(info.code_start) as i64).clamp(-2, i64::MAX);
        let incomplete = owner != FrameOwner::Generator && lasti_bytes / 2 < info.first_traceable;
        let line = line_for(&info.linetable, info.first_line, lasti_bytes)
            .map_err(|_| CorruptReason::BadLineTable)?;
        let (params, params_note) = match &info.params {
            Ok(p) => (self.params(addr, p), None),
            Err(note) => (Vec::new(), Some(std::borrow::Cow::Borrowed(*note))),
        };
        let frame = PyFrame {
            addr,
            code,
            qualname: info.qualname.clone(),
            file: info.file.clone(),
            line,
            first_line: info.first_line,
            is_entry,
            entry_frame: None,
            owner,
            incomplete,
            params,
            params_note,
        };
        Ok(Read::Code(Box::new(frame), previous))
    }

    /// The values of the parameters `names` in the frame at `addr`.
    fn params(&self, addr: u64, names: &[(String, ParamKind, bool)]) -> Vec<PyParam> {
        let base = addr.wrapping_add(self.layout.frame.localsplus);
        let slots = self.mem.read_vec(base, names.len() * 8).ok();
        names
            .iter()
            .enumerate()
            .map(|(i, (name, kind, cell))| {
                let obj = slots
                    .as_ref()
                    .and_then(|s| s.get(i * 8..i * 8 + 8))
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_le_bytes);
                let value = match obj.map(|raw| self.untag(raw)) {
                    None => PyValue {
                        type_name: "?".into(),
                        display: "<unreadable>".into(),
                    },
                    Some(Err(small)) => PyValue {
                        type_name: "int".into(),
                        display: small.to_string(),
                    },
                    Some(Ok(obj)) => {
                        let obj = if *cell && obj != 0 {
                            self.objects.deref_cell(obj).unwrap_or(obj)
                        } else {
                            obj
                        };
                        self.objects.value(obj)
                    }
                };
                PyParam {
                    name: name.clone(),
                    kind: *kind,
                    value,
                }
            })
            .collect()
    }

    fn code_info(&mut self, code: u64) -> Result<Rc<CodeInfo>, CorruptReason> {
        if let Some(info) = self.codes.get(&code) {
            return Ok(Rc::clone(info));
        }
        let info = Rc::new(self.read_code(code)?);
        self.codes.insert(code, Rc::clone(&info));
        Ok(info)
    }

    fn read_code(&self, code: u64) -> Result<CodeInfo, CorruptReason> {
        let c = &self.layout.code;
        if !self.objects.is_code(code) {
            return Err(CorruptReason::NotCode);
        }
        let fields = self
            .mem
            .read_vec(code, c.co_code_adaptive as usize)
            .map_err(|_| CorruptReason::UnreadableCode)?;
        let int = |off: u64| -> i32 {
            let o = off as usize;
            fields
                .get(o..o + 4)
                .and_then(|b| b.try_into().ok())
                .map_or(0, i32::from_le_bytes)
        };
        let ptr = |off: u64| -> u64 {
            let o = off as usize;
            fields
                .get(o..o + 8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes)
        };
        let objs = &self.objects;
        let qualname = objs
            .text(ptr(c.co_qualname), MAX_NAME_CHARS)
            .map_err(|_| CorruptReason::BadName)?;
        let file = objs
            .text(ptr(c.co_filename), MAX_NAME_CHARS)
            .map_err(|_| CorruptReason::BadName)?;
        let linetable = objs
            .bytes_content(ptr(c.co_linetable), MAX_LINETABLE)
            .map_err(|_| CorruptReason::BadLineTable)?;
        let params = self.param_names(
            ptr(c.co_localsplusnames),
            ptr(c.co_localspluskinds),
            int(c.co_flags) as u32,
            [
                int(c.co_argcount),
                int(c.co_posonlyargcount),
                int(c.co_kwonlyargcount),
                int(c.co_nlocalsplus),
            ],
        );
        Ok(CodeInfo {
            qualname,
            file,
            first_line: int(c.co_firstlineno),
            first_traceable: i64::from(int(c.co_firsttraceable)),
            code_start: code.wrapping_add(c.co_code_adaptive),
            linetable,
            params,
        })
    }

    /// Names, kinds and cell flags of a code object's parameters.
    fn param_names(
        &self,
        names: u64,
        kinds: u64,
        flags: u32,
        [argc, posonly, kwonly, nlocalsplus]: [i32; 4],
    ) -> Result<Vec<(String, ParamKind, bool)>, &'static str> {
        let c = &self.layout.code;
        let count = |n: i32| usize::try_from(n).map_err(|_| "negative parameter count");
        let (argc, posonly, kwonly) = (count(argc)?, count(posonly)?, count(kwonly)?);
        let nlocals = count(nlocalsplus)?.min(MAX_LOCALS);
        let varargs = flags & c.flag_varargs != 0;
        let varkw = flags & c.flag_varkeywords != 0;
        let total = argc + kwonly + usize::from(varargs) + usize::from(varkw);
        if total > MAX_PARAMS {
            return Err("too many parameters to show");
        }
        if total > nlocals || posonly > argc {
            return Err("parameter counts do not fit the code object");
        }
        let name_objs = self
            .objects
            .tuple_items(names, MAX_LOCALS)
            .map_err(|_| "parameter names unreadable")?;
        let kind_bytes = self
            .objects
            .bytes_content(kinds, MAX_LOCALS)
            .map_err(|_| "parameter kinds unreadable")?;
        if name_objs.len() < total || kind_bytes.len() < total {
            return Err("parameter names do not fit the code object");
        }
        (0..total)
            .map(|i| {
                let kind = if i < posonly {
                    ParamKind::PositionalOnly
                } else if i < argc {
                    ParamKind::Positional
                } else if i < argc + kwonly {
                    ParamKind::KeywordOnly
                } else if varargs && i == argc + kwonly {
                    ParamKind::VarArgs
                } else {
                    ParamKind::VarKeywords
                };
                let name = self
                    .objects
                    .text(name_objs[i], MAX_NAME_CHARS)
                    .map_err(|_| "parameter name unreadable")?;
                Ok((name, kind, kind_bytes[i] & c.kind_cell != 0))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::PY311;
    use super::super::testmem::FakeMem;
    use super::super::version::BuiltinTypes;
    use super::*;

    const CODE_T: u64 = 0x1000;
    const STR_T: u64 = 0x1100;
    const BYTES_T: u64 = 0x1200;
    const TUPLE_T: u64 = 0x1300;
    const INT_T: u64 = 0x1400;
    const CODE: u64 = 0x10000;
    const A: u64 = 0x20000;
    const B: u64 = 0x21000;
    const C: u64 = 0x22000;

    fn types() -> BuiltinTypes {
        BuiltinTypes {
            code: CODE_T,
            str: STR_T,
            bytes: BYTES_T,
            tuple: TUPLE_T,
            int: INT_T,
            ..BuiltinTypes::default()
        }
    }

    fn object(m: &mut FakeMem, at: u64, ty: u64, size: u64) {
        m.put_u64(at, 1);
        m.put_u64(at + 8, ty);
        m.put_u64(at + 16, size);
    }

    fn text(m: &mut FakeMem, at: u64, s: &str) -> u64 {
        object(m, at, STR_T, s.len() as u64);
        m.put_u64(at + 24, 0); // hash
        m.put_u32(at + 32, 0x80 | 0x40 | 0x20 | (1 << 2));
        m.put(at + 48, s.as_bytes());
        at
    }

    fn bytes(m: &mut FakeMem, at: u64, b: &[u8]) -> u64 {
        object(m, at, BYTES_T, b.len() as u64);
        m.put(at + 32, b);
        at
    }

    fn frame(m: &mut FakeMem, at: u64, code: u64, previous: u64, lasti: i64, locals: &[u64]) {
        m.put(at, &[0; 72]);
        m.put_u64(at + 32, code);
        m.put_u64(at + 48, previous);
        m.put_u64(at + 56, (CODE + 184).wrapping_add((lasti * 2) as u64));
        m.put(at + 68, &[1, 0]);
        for (i, v) in locals.iter().enumerate() {
            m.put_u64(at + 72 + 8 * i as u64, *v);
        }
    }

    /// `def f(a, *rest)` (qualname `C.f`, in `/f.py`, first line 10, every code
    /// unit on line 11), a frame A calling it from B, and a small int.
    fn mem() -> FakeMem {
        let mut m = FakeMem::default();
        m.put(CODE, &[0; 184]);
        object(&mut m, CODE, CODE_T, 8);
        m.put_u32(CODE + 48, 0x4);
        m.put_u32(CODE + 56, 1);
        m.put_u32(CODE + 72, 10);
        m.put_u32(CODE + 76, 3);
        let names = 0x30000;
        object(&mut m, names, TUPLE_T, 3);
        for (i, n) in ["a", "rest", "x"].iter().enumerate() {
            let s = text(&mut m, 0x31000 + 0x100 * i as u64, n);
            m.put_u64(names + 24 + 8 * i as u64, s);
        }
        m.put_u64(CODE + 96, names);
        let p = bytes(&mut m, 0x32000, &[0x26, 0x26, 0x20]);
        m.put_u64(CODE + 104, p);
        let p = text(&mut m, 0x33000, "/f.py");
        m.put_u64(CODE + 112, p);
        let p = text(&mut m, 0x34000, "f");
        m.put_u64(CODE + 120, p);
        let p = text(&mut m, 0x35000, "C.f");
        m.put_u64(CODE + 128, p);
        let p = bytes(&mut m, 0x36000, &[0x80 | (13 << 3) | 7, 2]);
        m.put_u64(CODE + 136, p);
        m.put_u32(CODE + 168, 0);
        object(&mut m, 0x40000, INT_T, 1);
        m.put_u32(0x40000 + 24, 5);
        object(&mut m, 0x41000, TUPLE_T, 2);
        for (t, name) in [(STR_T, "str"), (TUPLE_T, "tuple"), (INT_T, "int")] {
            m.put_u64(t + 24, t + 0x80);
            m.put(t + 0x80, format!("{name}\0").as_bytes());
        }
        m
    }

    fn chain(m: &FakeMem, start: u64, limit: usize) -> FrameChain {
        let t = types();
        let objects = Objects::new(m, &PY311, &t);
        FrameReader::new(m, &PY311, objects).chain(start, limit)
    }

    #[test]
    fn reads_names_lines_and_params() {
        let mut m = mem();
        frame(&mut m, A, CODE, B, 1, &[0x40000, 0x41000]);
        frame(&mut m, B, CODE, 0, -1, &[0x40000, 0]);
        let c = chain(&m, A, 10);
        assert_eq!(c.end, ChainEnd::Root);
        assert_eq!(c.frames.len(), 2);
        let f = &c.frames[0];
        assert_eq!((f.qualname.as_str(), f.file.as_str()), ("C.f", "/f.py"));
        assert_eq!((f.line, f.first_line, f.incomplete), (Some(11), 10, false));
        assert!(f.is_entry);
        let params: Vec<_> = f
            .params
            .iter()
            .map(|p| (p.name.as_str(), p.kind, p.value.display.as_str()))
            .collect();
        assert_eq!(
            params,
            vec![
                ("a", ParamKind::Positional, "5"),
                (
                    "rest",
                    ParamKind::VarArgs,
                    "<tuple object at 0x41000, len 2>"
                )
            ]
        );
        // Not started yet: hidden by CPython, on its first line.
        let g = &c.frames[1];
        assert!(g.incomplete);
        assert_eq!(g.line, Some(10));
        assert_eq!(g.params[1].value.display, "<unbound>");
        assert_eq!(
            f.to_string(),
            "C.f (a=5, *rest=<tuple object at 0x41000, len 2>) at /f.py:11"
        );
    }

    #[test]
    fn loops_limits_and_corruption_end_the_chain() {
        let mut m = mem();
        frame(&mut m, A, CODE, B, 1, &[0x40000, 0x41000]);
        frame(&mut m, B, CODE, A, 1, &[0x40000, 0x41000]);
        let c = chain(&m, A, 10);
        assert_eq!(c.frames.len(), 2);
        assert_eq!(c.end, ChainEnd::Loop { addr: A });
        let c = chain(&m, A, 1);
        assert_eq!(c.end, ChainEnd::Limit { limit: 1, next: B });

        // f_code points at a string; a frame beyond readable memory; a null code.
        frame(&mut m, C, 0x33000, 0, 1, &[]);
        frame(&mut m, B, CODE, C, 1, &[0x40000, 0x41000]);
        let c = chain(&m, A, 10);
        assert_eq!(c.frames.len(), 2);
        assert_eq!(
            c.end,
            ChainEnd::Corrupt {
                addr: C,
                reason: CorruptReason::NotCode
            }
        );
        frame(&mut m, B, CODE, 0x9_0000_0000, 1, &[0x40000, 0x41000]);
        assert_eq!(
            chain(&m, A, 10).end,
            ChainEnd::Corrupt {
                addr: 0x9_0000_0000,
                reason: CorruptReason::UnreadableFrame
            }
        );
        frame(&mut m, C, 0, 0, 1, &[]);
        assert!(matches!(
            chain(&m, C, 10).end,
            ChainEnd::Corrupt {
                reason: CorruptReason::NullCode,
                ..
            }
        ));

        // Parameter counts that do not fit the code object: the frame stays, without them.
        m.put_u32(CODE + 56, 1000);
        let c = chain(&m, A, 1);
        assert_eq!(c.frames.len(), 1);
        assert!(c.frames[0].params.is_empty());
        assert!(c.frames[0].params_note.is_some());
        // A broken line table ends the chain.
        let mut m = mem();
        frame(&mut m, A, CODE, 0, 1, &[0x40000, 0x41000]);
        m.put(0x36000 + 32, &[0x05]);
        assert!(matches!(
            chain(&m, A, 10).end,
            ChainEnd::Corrupt {
                reason: CorruptReason::BadLineTable,
                ..
            }
        ));
    }

    /// 3.13+ frames as Debian's 3.13.18 lays them out (from its own
    /// `_Py_DebugOffsets`), with 3.14's `_PyStackRef` tags when `tagged`.
    fn layout_313(tagged: bool) -> Layout {
        use super::super::debug_offsets::tests::{image, DEBIAN_313};
        use super::super::layout::layout_for;
        use super::super::release::PythonVersion;
        let mut m = FakeMem::default();
        m.put(0x100, &image(DEBIAN_313));
        let v = PythonVersion::from_hex(0x030d12f0);
        let mut l = layout_for(&m, 0x100, v, true).unwrap();
        if tagged {
            l.frame.stackref_tag_bits = 3;
            l.frame.stackref_int_tag = Some(3);
        }
        l
    }

    /// `def f(a, *rest)` (`C.f` in `/f.py`, line 11) laid out as 3.13 does.
    fn mem_313(l: &Layout) -> FakeMem {
        let mut m = FakeMem::default();
        let str_obj = |m: &mut FakeMem, at: u64, s: &str| {
            object(m, at, STR_T, s.len() as u64);
            m.put_u64(at + 24, 0); // hash
            m.put_u32(at + l.object.str_state, 0x40 | 0x20 | (1 << 2));
            m.put(at + l.object.str_ascii_data, s.as_bytes());
            at
        };
        let c = &l.code;
        m.put(CODE, &[0; 0xd0]);
        object(&mut m, CODE, CODE_T, 8);
        m.put_u32(CODE + c.co_flags, 0x4);
        m.put_u32(CODE + c.co_argcount, 1);
        m.put_u32(CODE + c.co_firstlineno, 10);
        m.put_u32(CODE + c.co_nlocalsplus, 3);
        let names = 0x30000;
        object(&mut m, names, TUPLE_T, 3);
        for (i, n) in ["a", "rest", "x"].iter().enumerate() {
            let s = str_obj(&mut m, 0x31000 + 0x100 * i as u64, n);
            m.put_u64(names + l.object.tuple_items + 8 * i as u64, s);
        }
        m.put_u64(CODE + c.co_localsplusnames, names);
        object(&mut m, 0x32000, BYTES_T, 3);
        m.put(0x32000 + l.object.bytes_data, &[0x26, 0x26, 0x20]);
        m.put_u64(CODE + c.co_localspluskinds, 0x32000);
        let p = str_obj(&mut m, 0x33000, "/f.py");
        m.put_u64(CODE + c.co_filename, p);
        let p = str_obj(&mut m, 0x35000, "C.f");
        m.put_u64(CODE + c.co_qualname, p);
        object(&mut m, 0x36000, BYTES_T, 2);
        m.put(0x36000 + l.object.bytes_data, &[0x80 | (13 << 3) | 7, 2]);
        m.put_u64(CODE + c.co_linetable, 0x36000);
        // int 5: one digit, lv_tag = 1 << 3.
        object(&mut m, 0x40000, INT_T, 1 << 3);
        m.put_u32(0x40000 + l.object.long_digits, 5);
        for (t, name) in [(STR_T, "str"), (TUPLE_T, "tuple"), (INT_T, "int")] {
            m.put_u64(t + 24, t + 0x80);
            m.put(t + 0x80, format!("{name}\0").as_bytes());
        }
        m
    }

    /// A 3.13+ frame: code (tagged with `tag`), `previous`, owner and locals.
    fn frame_313(
        m: &mut FakeMem,
        l: &Layout,
        at: u64,
        code: u64,
        previous: u64,
        owner: u8,
        locals: &[u64],
    ) {
        let f = &l.frame;
        m.put(at, &vec![0; f.localsplus as usize]);
        m.put_u64(at + f.f_code, code);
        m.put_u64(at + f.previous, previous);
        m.put_u64(at + f.prev_instr, CODE + l.code.co_code_adaptive + 2);
        m.put(at + f.owner, &[owner]);
        for (i, v) in locals.iter().enumerate() {
            m.put_u64(at + f.localsplus + 8 * i as u64, *v);
        }
    }

    #[test]
    fn entry_frames_without_code_mark_the_frame_before_them() {
        let l = layout_313(false);
        let mut m = mem_313(&l);
        let (s1, s2, base) = (0x7000_0000, 0x7000_1000, 0x7000_2000);
        // A runs first in one evaluator call (entry S1), B in the outer one (entry
        // S2), then the thread's base frame.
        frame_313(&mut m, &l, A, CODE, s1, 0, &[0x40000, 0x40000]);
        frame_313(&mut m, &l, s1, 0x9999, B, 3, &[]);
        frame_313(&mut m, &l, B, CODE, s2, 0, &[0x40000, 0]);
        frame_313(&mut m, &l, s2, 0x9999, base, 3, &[]);
        frame_313(&mut m, &l, base, 0x9999, 0, 3, &[]);
        let t = types();
        let mut r = FrameReader::new(&m, &l, Objects::new(&m, &l, &t));
        let c = r.chain_to(A, Some(base), 10);
        assert_eq!(c.end, ChainEnd::Root);
        let got: Vec<_> = c
            .frames
            .iter()
            .map(|f| (f.addr, f.is_entry, f.entry_frame))
            .collect();
        assert_eq!(got, vec![(A, true, Some(s1)), (B, true, Some(s2))]);
        assert_eq!(c.frames[0].params[0].value.display, "5");
        assert_eq!(c.frames[1].params[1].value.display, "<unbound>");
        // A chain that stops short of the thread's base frame says so.
        let c = r.chain_to(A, Some(0x7000_9000), 10);
        assert_eq!(c.frames.len(), 2);
        assert_eq!(
            c.end,
            ChainEnd::NoBase {
                last: base,
                base: 0x7000_9000
            }
        );
        assert!(c.end.to_string().contains("base frame"), "{}", c.end);
        // Loops through frames without code, and chains of nothing but them, end.
        drop(r);
        frame_313(&mut m, &l, s2, 0x9999, s1, 3, &[]);
        frame_313(&mut m, &l, s1, 0x9999, s2, 3, &[]);
        let mut r = FrameReader::new(&m, &l, Objects::new(&m, &l, &t));
        assert_eq!(r.chain(s1, 10).end, ChainEnd::Loop { addr: s1 });
        drop(r);
        for i in 0..100u64 {
            let at = 0x6000_0000 + i * 0x100;
            frame_313(&mut m, &l, at, 0, at + 0x100, 3, &[]);
        }
        let mut r = FrameReader::new(&m, &l, Objects::new(&m, &l, &t));
        let c = r.chain(0x6000_0000, 10);
        assert!(c.frames.is_empty());
        assert!(
            matches!(c.end, ChainEnd::Limit { limit: 10, .. }),
            "{:?}",
            c.end
        );
    }

    #[test]
    fn stack_refs_are_untagged_and_small_ints_shown() {
        let l = layout_313(true);
        let mut m = mem_313(&l);
        // f_executable and `a` carry the deferred-reference tag; `rest` holds a
        // tagged small int (-3 << 2 | 3).
        frame_313(
            &mut m,
            &l,
            A,
            CODE | 1,
            0,
            0,
            &[0x40000 | 1, ((-3i64 << 2) | 3) as u64],
        );
        let t = types();
        let c = FrameReader::new(&m, &l, Objects::new(&m, &l, &t)).chain(A, 10);
        assert_eq!(c.end, ChainEnd::Root);
        let shown: Vec<_> = c.frames[0]
            .params
            .iter()
            .map(|p| p.value.display.as_str())
            .collect();
        assert_eq!(shown, vec!["5", "-3"]);
        assert_eq!(c.frames[0].qualname, "C.f");
        assert_eq!(c.frames[0].line, Some(11));
        // A code pointer tagged as an int is no code object.
        frame_313(&mut m, &l, A, CODE | 3, 0, 0, &[]);
        let c = FrameReader::new(&m, &l, Objects::new(&m, &l, &t)).chain(A, 10);
        assert!(
            matches!(
                c.end,
                ChainEnd::Corrupt {
                    reason: CorruptReason::NullCode,
                    ..
                }
            ),
            "{:?}",
            c.end
        );
    }
}
