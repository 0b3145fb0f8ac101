//! SysV x86-64 argument classification: where each parameter of a known
//! signature arrives, and how many incoming stack words the call occupies.
//!
//! The input is a small, debug-format-neutral description of parameter types
//! ([`ParamType`]), meant to be filled from DWARF (or typed by hand); the output
//! says, per parameter, which registers or stack words hold it
//! ([`ArgLocation`]), plus the stack-window size and whether any vector
//! register carries an argument (so the xmm area is worth stashing).
//!
//! Rules implemented (System V AMD64 ABI, "Parameter Passing"): integers,
//! pointers and enums take the next of rdi, rsi, rdx, rcx, r8, r9; `float` and
//! `double` the next of xmm0-xmm7; `long double` always goes on the stack (16
//! bytes, 16-aligned); `__int128` takes two integer registers or, if fewer are
//! left, two 16-aligned stack words; aggregates larger than 16 bytes (or with
//! unaligned fields, or containing `long double`) go on the stack, smaller ones
//! are split into eightbytes classified INTEGER or SSE and take registers only
//! if all their eightbytes fit, else they go on the stack whole. A hidden
//! return pointer (an aggregate returned in memory) takes rdi first.

use super::frame::{StashedReg, ARGUMENT_REGS};

/// A parameter (or return) type, as far as the calling convention cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamType {
    /// An integer, `bool`, `char` or enum of `size` bytes (1, 2, 4 or 8).
    Int {
        /// Size in bytes.
        size: u8,
    },
    /// A data or function pointer.
    Pointer,
    /// `float`.
    Float,
    /// `double`.
    Double,
    /// x87 `long double` (80-bit, stored in 16 bytes).
    LongDouble,
    /// `__int128` / `unsigned __int128`.
    Int128,
    /// A struct or union of `size` bytes and alignment `align`, with its fields at their byte offsets.
    Aggregate {
        /// Size in bytes.
        size: u64,
        /// Alignment in bytes.
        align: u64,
        /// Fields (for unions: every member at offset 0; arrays: one field per element).
        fields: Vec<Field>,
    },
}

/// One field of an aggregate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Byte offset in the aggregate.
    pub offset: u64,
    /// Its type.
    pub ty: ParamType,
}

/// A function signature, as far as the calling convention cares.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Signature {
    /// The return type (`None`: `void`).
    pub ret: Option<ParamType>,
    /// The declared parameters, first first.
    pub params: Vec<ParamType>,
    /// `...` follows the declared parameters.
    pub variadic: bool,
}

/// Where one parameter arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgLocation {
    /// In registers: integer registers and xmm register numbers, in eightbyte order.
    Registers {
        /// Integer registers used.
        int: Vec<StashedReg>,
        /// xmm registers used (0-7).
        sse: Vec<u8>,
    },
    /// On the stack: incoming words `first..first + words` (word 0 at entry `rsp + 8`).
    Stack {
        /// First word.
        first: u16,
        /// Number of words.
        words: u16,
    },
}

/// Where every parameter of a signature arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgPlacement {
    /// One location per declared parameter.
    pub params: Vec<ArgLocation>,
    /// Incoming stack words the declared parameters occupy (the window to copy).
    pub stack_words: u16,
    /// Some parameter arrives in an xmm register.
    pub uses_sse: bool,
    /// The signature is variadic: more (unknown) arguments may follow.
    pub variadic: bool,
    /// rdi holds a hidden pointer for a returned aggregate.
    pub hidden_return_pointer: bool,
}

/// Classes of one eightbyte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Unused,
    Integer,
    Sse,
    Memory,
}

impl Class {
    fn merge(a: Class, b: Class) -> Class {
        match (a, b) {
            (x, y) if x == y => x,
            (Class::Unused, x) | (x, Class::Unused) => x,
            (Class::Memory, _) | (_, Class::Memory) => Class::Memory,
            (Class::Integer, _) | (_, Class::Integer) => Class::Integer,
            _ => Class::Sse,
        }
    }
}

impl ParamType {
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        match self {
            ParamType::Int { size } => u64::from(*size),
            ParamType::Pointer | ParamType::Double => 8,
            ParamType::Float => 4,
            ParamType::LongDouble | ParamType::Int128 => 16,
            ParamType::Aggregate { size, .. } => *size,
        }
    }

    /// Alignment in bytes.
    pub fn align(&self) -> u64 {
        match self {
            ParamType::Aggregate { align, .. } => (*align).max(1),
            other => other.size().max(1),
        }
    }

    /// Classifies `self` at byte `offset` into `classes` (one per eightbyte of the outer argument).
    fn classify_into(&self, offset: u64, classes: &mut [Class]) {
        let align = self.align();
        if !offset.is_multiple_of(align) {
            // Unaligned fields force the whole argument into memory.
            classes.iter_mut().for_each(|c| *c = Class::Memory);
            return;
        }
        let mut put = |at: u64, class: Class| {
            if let Some(c) = classes.get_mut((at / 8) as usize) {
                *c = Class::merge(*c, class);
            }
        };
        match self {
            ParamType::Int { .. } | ParamType::Pointer => put(offset, Class::Integer),
            ParamType::Int128 => {
                put(offset, Class::Integer);
                put(offset + 8, Class::Integer);
            }
            ParamType::Float | ParamType::Double => put(offset, Class::Sse),
            ParamType::LongDouble => {
                put(offset, Class::Memory);
                put(offset + 8, Class::Memory);
            }
            ParamType::Aggregate { fields, .. } => {
                for f in fields {
                    f.ty.classify_into(offset + f.offset, classes);
                }
            }
        }
    }

    /// The eightbyte classes of a whole argument, or `None` when it is passed in memory.
    fn classes(&self) -> Option<Vec<Class>> {
        let size = self.size();
        if size == 0 {
            return Some(Vec::new());
        }
        if size > 16 || matches!(self, ParamType::LongDouble) {
            return None;
        }
        let mut classes = vec![Class::Unused; size.div_ceil(8) as usize];
        self.classify_into(0, &mut classes);
        if classes.contains(&Class::Memory) {
            return None;
        }
        // Padding-only eightbytes of an aggregate count as SSE in the ABI's post-merge; they use no register here.
        Some(classes)
    }
}

/// Places every parameter of `sig` (System V AMD64).
pub fn place_arguments(sig: &Signature) -> ArgPlacement {
    let mut next_int = 0usize;
    let mut next_sse = 0u8;
    let mut stack_bytes = 0u64;
    let hidden_return_pointer = sig
        .ret
        .as_ref()
        .is_some_and(|r| matches!(r, ParamType::Aggregate { .. }) && r.classes().is_none());
    if hidden_return_pointer {
        next_int = 1;
    }
    let mut uses_sse = false;
    let mut params = Vec::with_capacity(sig.params.len());
    for p in &sig.params {
        let in_regs = p.classes().and_then(|classes| {
            let ints = classes.iter().filter(|c| **c == Class::Integer).count();
            let sses = classes.iter().filter(|c| **c == Class::Sse).count() as u8;
            (next_int + ints <= ARGUMENT_REGS.len() && next_sse + sses <= 8).then_some(classes)
        });
        match in_regs {
            Some(classes) => {
                let mut int = Vec::new();
                let mut sse = Vec::new();
                for c in classes {
                    match c {
                        Class::Integer => {
                            int.push(ARGUMENT_REGS[next_int]);
                            next_int += 1;
                        }
                        Class::Sse => {
                            sse.push(next_sse);
                            next_sse += 1;
                        }
                        Class::Unused | Class::Memory => {}
                    }
                }
                uses_sse |= !sse.is_empty();
                params.push(ArgLocation::Registers { int, sse });
            }
            None => {
                let align = if p.align() > 8 { 16 } else { 8 };
                stack_bytes = stack_bytes.div_ceil(align) * align;
                let words = p.size().div_ceil(8).max(1);
                params.push(ArgLocation::Stack {
                    first: u16::try_from(stack_bytes / 8).unwrap_or(u16::MAX),
                    words: u16::try_from(words).unwrap_or(u16::MAX),
                });
                stack_bytes += 8 * words;
            }
        }
    }
    ArgPlacement {
        params,
        stack_words: u16::try_from(stack_bytes / 8).unwrap_or(u16::MAX),
        uses_sse,
        variadic: sig.variadic,
        hidden_return_pointer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: ParamType = ParamType::Int { size: 8 };
    const INT: ParamType = ParamType::Int { size: 4 };

    fn sig(params: Vec<ParamType>) -> Signature {
        Signature {
            params,
            ..Signature::default()
        }
    }

    fn strukt(size: u64, align: u64, fields: Vec<(u64, ParamType)>) -> ParamType {
        ParamType::Aggregate {
            size,
            align,
            fields: fields
                .into_iter()
                .map(|(offset, ty)| Field { offset, ty })
                .collect(),
        }
    }

    #[test]
    fn six_integers_use_registers_only() {
        let p = place_arguments(&sig(vec![LONG; 6]));
        assert_eq!(p.stack_words, 0);
        assert_eq!(
            p.params[5],
            ArgLocation::Registers {
                int: vec![StashedReg::R9],
                sse: vec![]
            }
        );
        assert!(!p.uses_sse);
    }

    #[test]
    fn ten_integers_take_four_stack_words() {
        let p = place_arguments(&sig(vec![LONG; 10]));
        assert_eq!(p.stack_words, 4);
        assert_eq!(p.params[6], ArgLocation::Stack { first: 0, words: 1 });
        assert_eq!(p.params[9], ArgLocation::Stack { first: 3, words: 1 });
    }

    #[test]
    fn doubles_use_xmm_then_the_stack() {
        let mut params = vec![ParamType::Double; 9];
        params.insert(0, INT);
        let p = place_arguments(&sig(params));
        assert!(p.uses_sse);
        assert_eq!(
            p.params[8],
            ArgLocation::Registers {
                int: vec![],
                sse: vec![7]
            }
        );
        assert_eq!(p.params[9], ArgLocation::Stack { first: 0, words: 1 });
        assert_eq!(p.stack_words, 1);
    }

    #[test]
    fn big_struct_by_value_goes_on_the_stack() {
        let quad = strukt(32, 8, (0..4).map(|i| (8 * i, LONG)).collect());
        let p = place_arguments(&sig(vec![INT, quad, LONG]));
        assert_eq!(p.params[1], ArgLocation::Stack { first: 0, words: 4 });
        assert_eq!(
            p.params[2],
            ArgLocation::Registers {
                int: vec![StashedReg::Rsi],
                sse: vec![]
            }
        );
        assert_eq!(p.stack_words, 4);
    }

    #[test]
    fn small_structs_split_into_eightbytes() {
        // struct { double x; long y; }: xmm0 + rdi.
        let mixed = strukt(16, 8, vec![(0, ParamType::Double), (8, LONG)]);
        // struct { float a, b; int c; }: both eightbytes: SSE then INTEGER.
        let floats = strukt(
            12,
            4,
            vec![(0, ParamType::Float), (4, ParamType::Float), (8, INT)],
        );
        let p = place_arguments(&sig(vec![mixed, floats]));
        assert_eq!(
            p.params[0],
            ArgLocation::Registers {
                int: vec![StashedReg::Rdi],
                sse: vec![0]
            }
        );
        assert_eq!(
            p.params[1],
            ArgLocation::Registers {
                int: vec![StashedReg::Rsi],
                sse: vec![1]
            }
        );
        assert_eq!(p.stack_words, 0);
    }

    #[test]
    fn struct_that_does_not_fit_goes_on_the_stack_whole() {
        let pair = strukt(16, 8, vec![(0, LONG), (8, LONG)]);
        let mut params = vec![LONG; 5];
        params.push(pair);
        let p = place_arguments(&sig(params));
        assert_eq!(p.params[5], ArgLocation::Stack { first: 0, words: 2 });
        assert_eq!(p.stack_words, 2);
    }

    #[test]
    fn long_double_and_int128_are_16_aligned_on_the_stack() {
        let mut params = vec![LONG; 6];
        params.push(LONG); // word 0
        params.push(ParamType::LongDouble); // words 2-3 (16-aligned)
        params.push(ParamType::Int128); // words 4-5
        let p = place_arguments(&sig(params));
        assert_eq!(p.params[7], ArgLocation::Stack { first: 2, words: 2 });
        assert_eq!(p.params[8], ArgLocation::Stack { first: 4, words: 2 });
        assert_eq!(p.stack_words, 6);
        // With registers left, __int128 takes two of them; long double still goes on the stack.
        let p = place_arguments(&sig(vec![ParamType::Int128, ParamType::LongDouble]));
        assert_eq!(
            p.params[0],
            ArgLocation::Registers {
                int: vec![StashedReg::Rdi, StashedReg::Rsi],
                sse: vec![]
            }
        );
        assert_eq!(p.params[1], ArgLocation::Stack { first: 0, words: 2 });
    }

    #[test]
    fn struct_with_long_double_or_unaligned_field_is_in_memory() {
        let with_ld = strukt(16, 16, vec![(0, ParamType::LongDouble)]);
        let packed = strukt(9, 1, vec![(0, ParamType::Int { size: 1 }), (1, LONG)]);
        let p = place_arguments(&sig(vec![with_ld, packed]));
        assert_eq!(p.params[0], ArgLocation::Stack { first: 0, words: 2 });
        assert_eq!(p.params[1], ArgLocation::Stack { first: 2, words: 2 });
    }

    #[test]
    fn returned_big_struct_takes_rdi() {
        let big = strukt(24, 8, (0..3).map(|i| (8 * i, LONG)).collect());
        let p = place_arguments(&Signature {
            ret: Some(big),
            params: vec![LONG; 6],
            variadic: false,
        });
        assert!(p.hidden_return_pointer);
        assert_eq!(
            p.params[0],
            ArgLocation::Registers {
                int: vec![StashedReg::Rsi],
                sse: vec![]
            }
        );
        assert_eq!(p.params[5], ArgLocation::Stack { first: 0, words: 1 });
    }

    #[test]
    fn variadic_is_reported() {
        let p = place_arguments(&Signature {
            ret: Some(INT),
            params: vec![ParamType::Pointer],
            variadic: true,
        });
        assert!(p.variadic);
        assert_eq!(p.stack_words, 0);
    }
}
