//! Which incoming stack words a function touches, found from its machine code.
//!
//! A function that takes arguments on the stack (the 7th integer argument and up,
//! structs by value, `long double`, spilled `__int128`) reads them above its
//! return address. Hooked, it runs under the trampoline, which must copy exactly
//! those words, so this module walks the function's code and bounds them.
//!
//! The walk follows control flow from the entry (direct jumps and conditional
//! branches inside the function; code after an indirect jump, such as switch
//! cases, is walked with the state of that jump) and tracks where `rsp` and `rbp`
//! point relative to the entry `rsp`: through `push`/`pop`, `sub`/`add rsp, imm`,
//! `lea rsp, [...]`, `mov rbp, rsp`, `mov rsp, rbp` and `leave`. `and rsp, imm`
//! (stack realignment), `sub rsp, reg` (`alloca`, variable-length arrays: a size
//! the code computed, never negative) and paths that meet with different heights
//! keep only an upper bound. Every explicit memory operand based on `rsp` (or on `rbp` while it
//! is a frame pointer) is then placed exactly; an access above the return address
//! marks words `0..n` as read (word 0 is at entry `rsp + 8`).
//!
//! The analysis is *unsure* (and says why) when an access above the return address
//! cannot be placed exactly, when the address of an incoming stack word is taken
//! (`lea` into another register: `va_list` set-up, a struct by value passed on by
//! reference), when an indexed access may reach the incoming area, or when code
//! cannot be decoded. Callers then refuse unless the user gives a window.
//!
//! It also recognises the register-save prologue of variadic functions (`test al,
//! al` and stores of all of `xmm0`-`xmm7`, or `va_start`'s integer save area). In
//! such a function, taking the address of an incoming word is `va_start` setting
//! up its overflow area: the function then reads what its caller passes on the
//! stack, no more (an ABI-conforming caller), which is recorded
//! ([`StackReads::va_area`]) instead of making the analysis unsure, so that a
//! function tail-calling it can be bounded by what *it* passes.
//!
//! It lists every jump out of the function with the stack state at the jump
//! ([`StackReads::exits`]) and the direct tail calls among them. A jump out with
//! the frame still allocated cannot be a tail call (the callee would not find its
//! return address at `rsp`): it goes to a further part of the same function (gcc's
//! `.cold` blocks). [`classify_exit`] decides from the call-frame information at
//! the target, which must agree with the state at the jump, whether the target
//! continues the function, is a tail call, or cannot be told.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess,
    OpKind, Register,
};

/// Offset of incoming stack word 0 from the entry `rsp` (just above the return address).
const FIRST_WORD: i64 = 8;

/// Why the analysis cannot bound the incoming stack words a function touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsure {
    /// The address of an incoming stack word is taken (`va_list`, a struct by value passed on).
    AddressTaken {
        /// Address of the instruction.
        at: u64,
    },
    /// An access may reach the incoming area but the stack height there is not exact.
    UnknownHeight {
        /// Address of the instruction.
        at: u64,
    },
    /// An indexed access may reach the incoming area.
    Indexed {
        /// Address of the instruction.
        at: u64,
    },
    /// Reachable bytes do not decode as an instruction.
    Undecodable {
        /// Address of the bytes.
        at: u64,
    },
    /// A jump leaves the function to code that neither a symbol nor call-frame
    /// information shows to be a tail call or a part of the function.
    UnknownJump {
        /// Address of the jump.
        at: u64,
    },
}

impl Unsure {
    /// Address of the instruction (or bytes) the analysis met.
    pub fn at(&self) -> u64 {
        match *self {
            Unsure::AddressTaken { at }
            | Unsure::UnknownHeight { at }
            | Unsure::Indexed { at }
            | Unsure::Undecodable { at }
            | Unsure::UnknownJump { at } => at,
        }
    }
}

/// The first instruction of `code` (at `addr`) in NASM syntax, if it decodes.
pub fn disassemble_one(addr: u64, code: &[u8]) -> Option<String> {
    use iced_x86::{Formatter, NasmFormatter};
    let ins = Decoder::with_ip(64, code, addr, DecoderOptions::NONE).decode();
    if ins.is_invalid() {
        return None;
    }
    let mut text = String::new();
    NasmFormatter::new().format(&ins, &mut text);
    Some(text)
}

impl fmt::Display for Unsure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unsure::AddressTaken { at } => write!(
                f,
                "the instruction at 0x{at:x} takes the address of an incoming stack argument"
            ),
            Unsure::UnknownHeight { at } => write!(
                f,
                "the instruction at 0x{at:x} may read incoming stack arguments at an offset that is not known exactly"
            ),
            Unsure::Indexed { at } => write!(
                f,
                "the instruction at 0x{at:x} indexes into its incoming stack arguments"
            ),
            Unsure::Undecodable { at } => {
                write!(f, "the bytes at 0x{at:x} do not decode as an instruction")
            }
            Unsure::UnknownJump { at } => write!(
                f,
                "the instruction at 0x{at:x} jumps out of the function to code that no symbol \
                 or unwind information shows to be a tail call or a part of the function"
            ),
        }
    }
}

/// What the code of one function does with its incoming stack words.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StackReads {
    /// The function touches incoming stack words `0..words` (0: none).
    pub words: u16,
    /// The function has the variadic register-save prologue (`test al, al` and all of `xmm0`-`xmm7` saved).
    pub variadic: bool,
    /// Why `words` is not a bound, if it is not.
    pub unsure: Option<Unsure>,
    /// Every jump that leaves the function, with the stack state at the jump
    /// (their targets: [`StackReads::tail_calls`]).
    pub exits: Vec<Exit>,
    /// The function has indirect jumps (switch tables or indirect tail calls).
    pub indirect_jumps: bool,
    /// In a variadic function, the first instruction taking the address of its
    /// incoming stack words (`va_start`'s overflow area): it may read every word
    /// its caller passes on the stack.
    pub va_area: Option<u64>,
}

impl StackReads {
    /// Targets of the jumps that leave the function (tail calls: they see the
    /// same incoming words), each once, in the order they were found.
    pub fn tail_calls(&self) -> Vec<u64> {
        let mut targets: Vec<u64> = Vec::new();
        for e in &self.exits {
            if !targets.contains(&e.to) {
                targets.push(e.to);
            }
        }
        targets
    }
}

/// A jump that leaves the function's known bytes, with the stack state at the jump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// Address of the jump.
    pub from: u64,
    /// Its target.
    pub to: u64,
    /// `rsp` at the jump relative to the entry `rsp`, when known exactly.
    pub rsp: Option<i64>,
    /// `rbp` relative to the entry `rsp` when it is an exactly known frame pointer.
    pub rbp: Option<i64>,
}

impl Exit {
    /// True when the stack is as at the entry (`rsp` back at the return address,
    /// `rbp` not a frame pointer): the state of a tail call.
    pub fn at_entry_state(&self) -> bool {
        self.rsp == Some(0) && self.rbp.is_none()
    }
}

/// The canonical frame address rule at an exit's target, from the module's call-frame
/// information (the CFA is the entry `rsp` + 8 of the function the code belongs to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetCfa {
    /// CFA = `rsp` + offset.
    Rsp(i64),
    /// CFA = `rbp` + offset.
    Rbp(i64),
}

/// What a jump out of a function's known bytes is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    /// It continues the function (a `.cold` part, or code run in the same frame):
    /// the target is walked with the stack state of the jump.
    Continuation,
    /// A tail call: the target is a function entered with the same incoming words.
    TailCall,
    /// Neither can be shown.
    Unknown,
}

/// Classifies a jump to a target that no symbol names as a function start.
/// `in_text` is true when the target lies in the module's `.text` section (PLT
/// stubs do not); `cfa` is the CFA rule at the target, when call-frame
/// information covers it with a register rule.
///
/// The target's CFA must agree with the state at the jump: CFA = `rsp + N` means
/// `rsp` is at entry offset `8 - N` there, CFA = `rbp + K` that `rbp` is at `8 - K`.
/// Agreement makes it a continuation (for a jump in the entry state and CFA
/// `rsp + 8` this also covers a tail call to an unnamed function, walked exactly
/// as its own entry would be). A jump in the entry state out of `.text` (a PLT
/// stub) is a tail call. Anything else is unknown.
pub fn classify_exit(exit: &Exit, in_text: bool, cfa: Option<TargetCfa>) -> ExitKind {
    if exit.at_entry_state() && !in_text {
        return ExitKind::TailCall;
    }
    let agrees = match cfa {
        Some(TargetCfa::Rsp(n)) => exit.rsp == Some(FIRST_WORD.wrapping_sub(n)),
        Some(TargetCfa::Rbp(k)) => exit.rbp == Some(FIRST_WORD.wrapping_sub(k)),
        None => false,
    };
    if agrees {
        ExitKind::Continuation
    } else {
        ExitKind::Unknown
    }
}

/// A stack address as an offset from the entry `rsp`: exact, or an upper bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StackPtr {
    off: i64,
    exact: bool,
}

impl StackPtr {
    fn add(self, d: i64) -> StackPtr {
        StackPtr {
            off: self.off.wrapping_add(d),
            exact: self.exact,
        }
    }

    /// Joins the value already recorded at a point (`old`) with a new one; an
    /// inexact value that would still change is dropped, so loops converge.
    fn merge(old: Option<StackPtr>, new: Option<StackPtr>) -> Option<StackPtr> {
        match (old, new) {
            (Some(a), Some(b)) if a == b => Some(a),
            (Some(a), Some(b)) if a.exact || a.off >= b.off => Some(StackPtr {
                off: a.off.max(b.off),
                exact: false,
            }),
            _ => None,
        }
    }
}

/// Where `rsp` and (if it is a frame pointer) `rbp` point before an instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    rsp: Option<StackPtr>,
    rbp: Option<StackPtr>,
}

impl State {
    const ENTRY: State = State {
        rsp: Some(StackPtr {
            off: 0,
            exact: true,
        }),
        rbp: None,
    };

    fn merge(self, other: State) -> State {
        State {
            rsp: StackPtr::merge(self.rsp, other.rsp),
            rbp: StackPtr::merge(self.rbp, other.rbp),
        }
    }
}

struct Walker<'a> {
    entry: u64,
    code: &'a [u8],
    /// Further parts of the same function (`NAME.cold`), walked as its continuation.
    parts: &'a [(u64, &'a [u8])],
    info: InstructionInfoFactory,
    words: u64,
    unsure: Option<Unsure>,
    exits: Vec<Exit>,
    indirect: Option<State>,
    /// The function has a variadic register-save area: taking an incoming word's
    /// address is `va_start` (recorded in `va_area`), not a reason to be unsure.
    variadic_prologue: bool,
    va_area: Option<u64>,
}

impl Walker<'_> {
    /// The part of the function (its body or a further part) that holds `addr`.
    fn region(&self, addr: u64) -> Option<(u64, &[u8])> {
        std::iter::once((self.entry, self.code))
            .chain(self.parts.iter().copied())
            .find(|(start, code)| addr >= *start && addr - start < code.len() as u64)
    }

    fn contains(&self, addr: u64) -> bool {
        self.region(addr).is_some()
    }

    fn decode(&self, addr: u64) -> Option<Instruction> {
        let (start, code) = self.region(addr)?;
        let off = usize::try_from(addr - start).ok()?;
        let mut d = Decoder::with_ip(64, code.get(off..)?, addr, DecoderOptions::NONE);
        let ins = d.decode();
        (!ins.is_invalid()).then_some(ins)
    }

    fn unsure(&mut self, why: Unsure) {
        if self.unsure.is_none() {
            self.unsure = Some(why);
        }
    }

    /// The stack address a memory operand's base points to, if it is a tracked stack pointer.
    fn base_ptr(ins: &Instruction, st: &State) -> Option<Option<StackPtr>> {
        match ins.memory_base() {
            Register::RSP => Some(st.rsp),
            // rbp is an ordinary register unless it was set from rsp.
            Register::RBP => st.rbp.map(Some),
            _ => None,
        }
    }

    /// Records what the instruction's explicit memory operands touch.
    fn check_memory(&mut self, ins: &Instruction, st: &State) {
        let at = ins.ip();
        let has_memory = (0..ins.op_count()).any(|i| ins.op_kind(i) == OpKind::Memory);
        if !has_memory {
            return;
        }
        let Some(base) = Self::base_ptr(ins, st) else {
            return;
        };
        let disp = ins.memory_displacement64() as i64;
        let lea = ins.mnemonic() == Mnemonic::Lea;
        let Some(base) = base else {
            // rsp-based, with rsp lost: only a lea computing a new rsp is harmless.
            if !(lea && ins.op0_register() == Register::RSP) {
                self.unsure(Unsure::UnknownHeight { at });
            }
            return;
        };
        let addr = base.add(disp);
        if lea {
            let dest = ins.op0_register();
            if dest != Register::RSP && dest != Register::RBP && addr.off >= FIRST_WORD {
                if self.variadic_prologue && addr.exact {
                    self.va_area.get_or_insert(at);
                } else {
                    self.unsure(Unsure::AddressTaken { at });
                }
            }
            return;
        }
        let size = ins.memory_size().size().max(1) as i64;
        let end = addr.off.saturating_add(size);
        if end <= FIRST_WORD {
            return;
        }
        if ins.memory_index() != Register::None {
            self.unsure(Unsure::Indexed { at });
        } else if !addr.exact {
            self.unsure(Unsure::UnknownHeight { at });
        } else {
            let words = (end - FIRST_WORD + 7) / 8;
            self.words = self.words.max(words as u64);
        }
    }

    /// The state after `ins` (for its fall-through and branch successors).
    fn apply(&mut self, ins: &Instruction, st: State) -> State {
        let mut next = st;
        let reg = |i: u32| {
            if ins.op_count() > i && ins.op_kind(i) == OpKind::Register {
                ins.op_register(i)
            } else {
                Register::None
            }
        };
        let imm = || -> Option<i64> {
            (ins.op_count() == 2)
                .then(|| ins.op_kind(1))
                .filter(|k| {
                    matches!(
                        k,
                        OpKind::Immediate8to64 | OpKind::Immediate32to64 | OpKind::Immediate32
                    )
                })
                .map(|_| ins.immediate(1) as i64)
        };
        let (r0, r1) = (reg(0), reg(1));
        let mut rsp_done = false;
        let mut rbp_done = false;
        match ins.mnemonic() {
            Mnemonic::Push | Mnemonic::Pop | Mnemonic::Pushfq | Mnemonic::Popfq => {
                next.rsp = st
                    .rsp
                    .map(|p| p.add(i64::from(ins.stack_pointer_increment())));
                rsp_done = true;
                if ins.mnemonic() == Mnemonic::Pop && r0 == Register::RBP {
                    next.rbp = None;
                    rbp_done = true;
                }
            }
            Mnemonic::Call => {
                // The callee pops its return address: no net change.
                rsp_done = true;
            }
            Mnemonic::Leave => {
                next.rsp = st.rbp.map(|p| p.add(8));
                next.rbp = None;
                rsp_done = true;
                rbp_done = true;
            }
            Mnemonic::Sub if r0 == Register::RSP && r1 != Register::None && r1.is_gpr64() => {
                // alloca / a variable-length array: rsp goes down by a size the code
                // computed; keep the old value as an upper bound.
                next.rsp = st.rsp.map(|p| StackPtr {
                    off: p.off,
                    exact: false,
                });
                rsp_done = true;
            }
            Mnemonic::Sub | Mnemonic::Add if r0 == Register::RSP => {
                if let Some(v) = imm() {
                    let d = if ins.mnemonic() == Mnemonic::Sub {
                        -v
                    } else {
                        v
                    };
                    next.rsp = st.rsp.map(|p| p.add(d));
                    rsp_done = true;
                }
            }
            Mnemonic::And if r0 == Register::RSP && imm().is_some() => {
                // Realignment only lowers rsp: keep the old value as an upper bound.
                next.rsp = st.rsp.map(|p| StackPtr {
                    off: p.off,
                    exact: false,
                });
                rsp_done = true;
            }
            Mnemonic::Mov if r0 == Register::RBP && r1 == Register::RSP => {
                next.rbp = st.rsp;
                rbp_done = true;
            }
            Mnemonic::Mov if r0 == Register::RSP && r1 == Register::RBP => {
                next.rsp = st.rbp;
                rsp_done = true;
            }
            Mnemonic::Lea if r0 == Register::RSP || r0 == Register::RBP => {
                let value = match ins.memory_base() {
                    Register::RSP if ins.memory_index() == Register::None => {
                        st.rsp.map(|p| p.add(ins.memory_displacement64() as i64))
                    }
                    Register::RBP if ins.memory_index() == Register::None => {
                        st.rbp.map(|p| p.add(ins.memory_displacement64() as i64))
                    }
                    _ => None,
                };
                if r0 == Register::RSP {
                    next.rsp = value;
                    rsp_done = true;
                } else {
                    next.rbp = value;
                    rbp_done = true;
                }
            }
            _ => {}
        }
        if !rsp_done || !rbp_done {
            let info = self.info.info(ins);
            for used in info.used_registers() {
                let writes = matches!(
                    used.access(),
                    OpAccess::Write
                        | OpAccess::CondWrite
                        | OpAccess::ReadWrite
                        | OpAccess::ReadCondWrite
                );
                if !writes {
                    continue;
                }
                let full = used.register().full_register();
                if full == Register::RSP && !rsp_done {
                    next.rsp = None;
                }
                if full == Register::RBP && !rbp_done {
                    next.rbp = None;
                }
            }
        }
        next
    }

    /// Walks from `start` in `state`, merging into `seen`.
    fn walk(&mut self, start: u64, state: State, seen: &mut HashMap<u64, State>) {
        let mut work = vec![(start, state)];
        while let Some((addr, st)) = work.pop() {
            let st = match seen.get(&addr) {
                Some(old) => {
                    let merged = old.merge(st);
                    if merged == *old {
                        continue;
                    }
                    merged
                }
                None => st,
            };
            seen.insert(addr, st);
            let Some(ins) = self.decode(addr) else {
                self.unsure(Unsure::Undecodable { at: addr });
                continue;
            };
            self.check_memory(&ins, &st);
            let next = self.apply(&ins, st);
            let fall = ins.next_ip();
            let mut branch_to = |target: u64, work: &mut Vec<(u64, State)>| {
                if self.contains(target) {
                    work.push((target, next));
                    return;
                }
                let exact = |p: Option<StackPtr>| p.filter(|p| p.exact).map(|p| p.off);
                let exit = Exit {
                    from: ins.ip(),
                    to: target,
                    rsp: exact(next.rsp),
                    rbp: exact(next.rbp),
                };
                if !self.exits.contains(&exit) {
                    self.exits.push(exit);
                }
            };
            let falls_through = match ins.flow_control() {
                FlowControl::Next | FlowControl::Call | FlowControl::IndirectCall => true,
                FlowControl::ConditionalBranch => {
                    branch_to(ins.near_branch_target(), &mut work);
                    true
                }
                FlowControl::UnconditionalBranch => {
                    branch_to(ins.near_branch_target(), &mut work);
                    false
                }
                FlowControl::IndirectBranch => {
                    self.indirect = Some(match self.indirect {
                        Some(s) => s.merge(next),
                        None => next,
                    });
                    false
                }
                FlowControl::Interrupt => ins.mnemonic() != Mnemonic::Int3,
                // ret, ud2 and the like end the path.
                _ => false,
            };
            if falls_through && self.contains(fall) {
                work.push((fall, next));
            }
        }
    }
}

/// Every instruction start of a linear sweep over `code` at `entry`.
fn linear(entry: u64, code: &[u8]) -> BTreeMap<u64, Instruction> {
    let mut d = Decoder::with_ip(64, code, entry, DecoderOptions::NONE);
    let mut out = BTreeMap::new();
    while d.can_decode() {
        let ins = d.decode();
        out.insert(ins.ip(), ins);
    }
    out
}

/// True for gcc's and clang's variadic prologue: `test al, al` and stores of all of `xmm0`-`xmm7`.
fn has_variadic_save(instructions: &BTreeMap<u64, Instruction>) -> bool {
    let mut test_al = false;
    let mut saved = [false; 8];
    for ins in instructions.values() {
        if ins.mnemonic() == Mnemonic::Test
            && ins.op_count() == 2
            && ins.op_kind(0) == OpKind::Register
            && ins.op_kind(1) == OpKind::Register
            && ins.op0_register() == Register::AL
            && ins.op1_register() == Register::AL
        {
            test_al = true;
        }
        let store = matches!(
            ins.mnemonic(),
            Mnemonic::Movaps
                | Mnemonic::Movups
                | Mnemonic::Movapd
                | Mnemonic::Movupd
                | Mnemonic::Movdqa
                | Mnemonic::Movdqu
                | Mnemonic::Vmovaps
                | Mnemonic::Vmovups
        );
        if store
            && ins.op_count() == 2
            && ins.op_kind(0) == OpKind::Memory
            && matches!(ins.memory_base(), Register::RSP | Register::RBP)
            && ins.op_kind(1) == OpKind::Register
        {
            let r = ins.op1_register();
            if r >= Register::XMM0 && r <= Register::XMM7 {
                saved[r as usize - Register::XMM0 as usize] = true;
            }
        }
    }
    test_al && saved.iter().all(|s| *s)
}

/// True for a `va_start` register-save area without the xmm part (gcc omits it when
/// only integers are read): the last two or more integer argument registers, up to
/// r9, stored to consecutive stack slots.
fn has_integer_save_area(instructions: &BTreeMap<u64, Instruction>) -> bool {
    const REGS: [Register; 6] = [
        Register::RDI,
        Register::RSI,
        Register::RDX,
        Register::RCX,
        Register::R8,
        Register::R9,
    ];
    let mut slot: [Option<(Register, i64)>; 6] = [None; 6];
    for ins in instructions.values() {
        if ins.mnemonic() == Mnemonic::Mov
            && ins.op_count() == 2
            && ins.op_kind(0) == OpKind::Memory
            && ins.op_kind(1) == OpKind::Register
            && matches!(ins.memory_base(), Register::RSP | Register::RBP)
            && ins.memory_index() == Register::None
        {
            if let Some(i) = REGS.iter().position(|r| *r == ins.op1_register()) {
                if slot[i].is_none() {
                    slot[i] = Some((ins.memory_base(), ins.memory_displacement64() as i64));
                }
            }
        }
    }
    let Some((base, r9_at)) = slot[5] else {
        return false;
    };
    let consecutive = (0..5)
        .rev()
        .take_while(|&i| slot[i] == Some((base, r9_at - 8 * (5 - i as i64))))
        .count();
    consecutive >= 1
}

/// Analyses the function whose code (its symbol's bytes) starts at `entry`.
pub fn analyse_stack_reads(entry: u64, code: &[u8]) -> StackReads {
    analyse_stack_reads_with_parts(entry, code, &[])
}

/// Analyses the function at `entry` together with its further `parts` (`(address,
/// bytes)` of `NAME.cold` and the like): a jump into a part continues the walk
/// there with the state of the jump, rather than counting as a tail call.
pub fn analyse_stack_reads_with_parts(
    entry: u64,
    code: &[u8],
    parts: &[(u64, &[u8])],
) -> StackReads {
    let instructions = linear(entry, code);
    let variadic_save = has_variadic_save(&instructions);
    let integer_save = has_integer_save_area(&instructions);
    let mut w = Walker {
        entry,
        code,
        parts,
        info: InstructionInfoFactory::new(),
        words: 0,
        unsure: None,
        exits: Vec::new(),
        indirect: None,
        variadic_prologue: variadic_save || integer_save,
        va_area: None,
    };
    let mut seen = HashMap::new();
    w.walk(entry, State::ENTRY, &mut seen);
    let indirect_jumps = w.indirect.is_some();
    // Code only an indirect jump reaches (switch cases) runs with that jump's state.
    while let Some(state) = w.indirect {
        let unseen = instructions
            .iter()
            .find(|(a, i)| !seen.contains_key(a) && !i.is_invalid())
            .map(|(a, _)| *a);
        let Some(start) = unseen else {
            break;
        };
        w.walk(start, state, &mut seen);
    }
    // An integer save area alone counts only with va_start's overflow-area `lea`.
    let variadic = variadic_save || (integer_save && w.va_area.is_some());
    StackReads {
        words: u16::try_from(w.words).unwrap_or(u16::MAX),
        variadic,
        unsure: w.unsure,
        exits: w.exits,
        indirect_jumps,
        va_area: w.va_area.filter(|_| variadic),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynasmrt::x64::X64Relocation;
    use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi, VecAssembler};

    const AT: u64 = 0x40_1000;

    fn asm(f: impl FnOnce(&mut VecAssembler<X64Relocation>)) -> Vec<u8> {
        let mut ops = VecAssembler::new(AT as usize);
        f(&mut ops);
        ops.finalize().unwrap()
    }

    #[test]
    fn register_only_leaf_reads_nothing() {
        let code = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; lea rax, [rdi + rsi]
                ; mov [rsp - 8], rax     // red zone, below the return address
                ; mov rax, [rsp - 8]
                ; ret
            )
        });
        let r = analyse_stack_reads(AT, &code);
        assert_eq!(r, StackReads::default());
    }

    #[test]
    fn leaf_reading_two_stack_words() {
        let code = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; mov rax, [rsp + 8]
                ; add rax, [rsp + 16]
                ; ret
            )
        });
        let r = analyse_stack_reads(AT, &code);
        assert_eq!((r.words, r.unsure), (2, None));
    }

    #[test]
    fn pushes_and_sub_are_followed() {
        // After push rbx; push r12; sub rsp, 0x18, entry rsp+8+24 (word 3) is at rsp+0x38.
        let code = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; push rbx
                ; push r12
                ; sub rsp, 0x18
                ; mov rax, [rsp + 0x48]
                ; add rsp, 0x18
                ; pop r12
                ; pop rbx
                ; ret
            )
        });
        let r = analyse_stack_reads(AT, &code);
        assert_eq!((r.words, r.unsure.clone()), (4, None), "{r:?}");
    }

    #[test]
    fn frame_pointer_accesses_are_placed() {
        // -O0 style: push rbp; mov rbp, rsp; [rbp+0x10] is word 0, [rbp+0x20] word 2.
        let code = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; push rbp
                ; mov rbp, rsp
                ; sub rsp, 0x40
                ; mov [rbp - 8], rdi
                ; mov rax, [rbp + 0x10]
                ; mov rdx, [rbp + 0x20]
                ; leave
                ; ret
            )
        });
        let r = analyse_stack_reads(AT, &code);
        assert_eq!((r.words, r.unsure.clone()), (3, None), "{r:?}");
    }

    #[test]
    fn rbp_as_a_general_register_is_ignored() {
        let code = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; push rbp
                ; mov rbp, rdi
                ; mov rax, [rbp + 0x40]
                ; pop rbp
                ; ret
            )
        });
        assert_eq!(analyse_stack_reads(AT, &code), StackReads::default());
    }

    #[test]
    fn branches_keep_their_own_heights() {
        // Two epilogues: the second path pushes more, and code after the first
        // ret must not inherit the popped height.
        let code = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; push rbx
                ; test rdi, rdi
                ; jz >other
                ; pop rbx
                ; ret
                ; other:
                ; mov rax, [rsp + 0x10]   // word 0 (one push deep)
                ; pop rbx
                ; ret
            )
        });
        let r = analyse_stack_reads(AT, &code);
        assert_eq!((r.words, r.unsure.clone()), (1, None), "{r:?}");
    }

    #[test]
    fn wide_loads_count_every_word() {
        let code = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; movdqu xmm0, [rsp + 8]
                ; movdqu xmm1, [rsp + 24]
                ; ret
            )
        });
        let r = analyse_stack_reads(AT, &code);
        assert_eq!((r.words, r.unsure), (4, None));
    }

    #[test]
    fn address_of_incoming_words_is_unsure() {
        let code = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; sub rsp, 8
                ; lea rdi, [rsp + 0x10]
                ; call >callee
                ; add rsp, 8
                ; ret
                ; callee:
                ; ret
            )
        });
        let r = analyse_stack_reads(AT, &code);
        assert_eq!(r.unsure, Some(Unsure::AddressTaken { at: AT + 4 }), "{r:?}");
        assert!(r.unsure.unwrap().to_string().contains("address"));
    }

    #[test]
    fn realigned_stack_is_an_upper_bound() {
        // Locals after `and rsp, -32` are fine; a possible incoming read is not.
        let local = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; push rbp
                ; mov rbp, rsp
                ; and rsp, -32
                ; sub rsp, 0x40
                ; vmovaps [rsp], ymm0
                ; mov rax, [rbp + 0x10]
                ; leave
                ; ret
            )
        });
        let r = analyse_stack_reads(AT, &local);
        assert_eq!((r.words, r.unsure.clone()), (1, None), "{r:?}");
        let far = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; and rsp, -32
                ; mov rax, [rsp + 0x100]
                ; ret
            )
        });
        assert!(matches!(
            analyse_stack_reads(AT, &far).unsure,
            Some(Unsure::UnknownHeight { .. })
        ));
    }

    #[test]
    fn alloca_keeps_an_upper_bound() {
        // A variable-length array below a frame pointer: addresses of the array
        // are locals; a later possible incoming read through rsp is not placed.
        let local = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; push rbp
                ; mov rbp, rsp
                ; sub rsp, 0x48
                ; sub rsp, rax
                ; lea r12, [rsp + 4]
                ; mov rax, [rbp + 0x10]
                ; leave
                ; ret
            )
        });
        let r = analyse_stack_reads(AT, &local);
        assert_eq!((r.words, r.unsure.clone()), (1, None), "{r:?}");
        let far = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; sub rsp, rax
                ; mov rax, [rsp + 0x10]
                ; ret
            )
        });
        assert!(matches!(
            analyse_stack_reads(AT, &far).unsure,
            Some(Unsure::UnknownHeight { .. })
        ));
    }

    #[test]
    fn indexed_incoming_access_is_unsure_but_locals_are_fine() {
        let local = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; sub rsp, 0x48
                ; mov rax, [rsp + rdi * 8]
                ; add rsp, 0x48
                ; ret
            )
        });
        assert_eq!(analyse_stack_reads(AT, &local).unsure, None);
        let incoming = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; mov rax, [rsp + rdi * 8 + 8]
                ; ret
            )
        });
        assert!(matches!(
            analyse_stack_reads(AT, &incoming).unsure,
            Some(Unsure::Indexed { .. })
        ));
    }

    #[test]
    fn refusals_can_show_their_instruction() {
        let code = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; lea rdi, [rsp + 0x10]
                ; ret
            )
        });
        let why = analyse_stack_reads(AT, &code).unsure.unwrap();
        assert_eq!(why.at(), AT);
        assert_eq!(
            disassemble_one(why.at(), &code).as_deref(),
            Some("lea rdi,[rsp+10h]")
        );
        assert_eq!(disassemble_one(AT, &[0x0f, 0x0b][..1]), None);
    }

    #[test]
    fn a_cold_part_continues_with_the_state_of_the_jump() {
        const COLD: u64 = 0x40_2000;
        let hot = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; push rbx
                ; sub rsp, 0x20
                ; test edi, edi
                ; jz extern COLD as usize
                ; add rsp, 0x20
                ; pop rbx
                ; ret
            )
        });
        // In the cold part rsp is 0x28 below the entry rsp: [rsp + 0x10] is a local,
        // [rsp + 0x30] is incoming word 0.
        let mut ops = VecAssembler::<X64Relocation>::new(COLD as usize);
        dynasm!(ops ; .arch x64
            ; lea rdi, [rsp + 0x10]
            ; mov rax, [rsp + 0x30]
            ; add rsp, 0x20
            ; pop rbx
            ; ret
        );
        let cold = ops.finalize().unwrap();
        // Alone, the cold part looks like code taking the address of an incoming word.
        let alone = analyse_stack_reads(COLD, &cold);
        assert_eq!(alone.unsure, Some(Unsure::AddressTaken { at: COLD }));
        // As a tail call, the hot part lists it; as a part, it is walked in place.
        assert_eq!(analyse_stack_reads(AT, &hot).tail_calls(), vec![COLD]);
        let r = analyse_stack_reads_with_parts(AT, &hot, &[(COLD, &cold)]);
        assert_eq!(r.unsure, None, "{r:?}");
        assert_eq!(r.words, 1, "{r:?}");
        assert!(r.tail_calls().is_empty(), "{r:?}");
    }

    #[test]
    fn tail_calls_are_listed() {
        let code = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; test edi, edi
                ; jz >done
                ; jmp extern 0x40_2000usize
                ; done:
                ; xor eax, eax
                ; ret
            )
        });
        let r = analyse_stack_reads(AT, &code);
        assert_eq!(r.tail_calls(), vec![0x40_2000]);
        assert_eq!(r.words, 0);
    }

    #[test]
    fn switch_cases_after_an_indirect_jump_are_walked() {
        let code = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; push rbx
                ; jmp rax
                ; mov rax, [rsp + 0x18]   // a "case": one push deep, word 1
                ; pop rbx
                ; ret
            )
        });
        let r = analyse_stack_reads(AT, &code);
        assert!(r.indirect_jumps);
        assert_eq!((r.words, r.unsure.clone()), (2, None), "{r:?}");
    }

    #[test]
    fn variadic_save_area_is_recognised() {
        let code = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; sub rsp, 0xd8
                ; mov [rsp + 0x28], rsi
                ; test al, al
                ; je >skip
                ; movaps [rsp + 0x50], xmm0
                ; movaps [rsp + 0x60], xmm1
                ; movaps [rsp + 0x70], xmm2
                ; movaps [rsp + 0x80], xmm3
                ; movaps [rsp + 0x90], xmm4
                ; movaps [rsp + 0xa0], xmm5
                ; movaps [rsp + 0xb0], xmm6
                ; movaps [rsp + 0xc0], xmm7
                ; skip:
                ; lea rax, [rsp + 0xe0]   // overflow_arg_area
                ; add rsp, 0xd8
                ; ret
            )
        });
        let r = analyse_stack_reads(AT, &code);
        assert!(r.variadic, "{r:?}");
        // va_start's overflow area: reads what the caller passes, not a reason to be unsure.
        assert_eq!(r.unsure, None, "{r:?}");
        let va = r.va_area.expect("va_start's lea") - AT;
        assert_eq!(
            disassemble_one(AT + va, &code[va as usize..]).as_deref(),
            Some("lea rax,[rsp+0E0h]")
        );
    }

    #[test]
    fn a_variadic_function_keeps_its_other_reasons_to_be_unsure() {
        // Named stack reads are still counted; an indexed access into the incoming
        // area is still unsure (it is not va_start).
        let code = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; sub rsp, 0x58
                ; mov [rsp + 0x28], rsi
                ; mov [rsp + 0x30], rdx
                ; mov [rsp + 0x38], rcx
                ; mov [rsp + 0x40], r8
                ; mov [rsp + 0x48], r9
                ; lea rax, [rsp + 0x60]
                ; mov rdx, [rsp + 0x68]
                ; add rsp, 0x58
                ; ret
            )
        });
        let r = analyse_stack_reads(AT, &code);
        assert!(r.variadic, "{r:?}");
        assert_eq!((r.words, r.unsure.clone()), (2, None), "{r:?}");
        assert!(r.va_area.is_some(), "{r:?}");
        let code = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; sub rsp, 0x58
                ; mov [rsp + 0x40], r8
                ; mov [rsp + 0x48], r9
                ; lea rax, [rsp + 0x60]
                ; mov rdx, [rsp + rdi * 8 + 0x60]
                ; add rsp, 0x58
                ; ret
            )
        });
        let r = analyse_stack_reads(AT, &code);
        assert!(r.variadic, "{r:?}");
        assert!(matches!(r.unsure, Some(Unsure::Indexed { .. })), "{r:?}");
    }

    #[test]
    fn exits_carry_the_stack_state_of_the_jump() {
        const OUT: u64 = 0x40_2000;
        const TAIL: u64 = 0x40_3000;
        let code = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; test edi, edi
                ; jz extern TAIL as usize     // entry state: a tail call's
                ; push rbp
                ; mov rbp, rsp
                ; push rbx
                ; sub rsp, 0x18
                ; test esi, esi
                ; jnz extern OUT as usize      // frame in use
                ; add rsp, 0x18
                ; pop rbx
                ; pop rbp
                ; ret
            )
        });
        let r = analyse_stack_reads(AT, &code);
        let tail = r.exits.iter().find(|e| e.to == TAIL).expect("tail exit");
        assert!(tail.at_entry_state(), "{r:?}");
        let out = r.exits.iter().find(|e| e.to == OUT).expect("frame exit");
        assert_eq!((out.rsp, out.rbp), (Some(-0x28), Some(-8)), "{r:?}");
        assert!(!out.at_entry_state());
        assert_eq!(r.tail_calls(), vec![TAIL, OUT]);
    }

    #[test]
    fn a_cold_part_reading_stack_arguments_and_jumping_back_is_counted() {
        // coldwide.c's shape: the hot part never touches g and h; its cold part
        // reads them with the frame allocated and jumps back to the epilogue.
        const COLD: u64 = 0x40_2000;
        let mut ops = VecAssembler::<X64Relocation>::new(AT as usize);
        dynasm!(ops ; .arch x64
            ; push rbx
            ; sub rsp, 0x30
            ; test rdi, rdi
            ; js extern COLD as usize
            ; xor eax, eax
            ; add rsp, 0x30
            ; pop rbx
            ; ret
        );
        let hot = ops.finalize().unwrap();
        // push (1) + sub (4) + test (3) + js rel32 (6) + xor (2).
        let back = AT + 16;
        assert_eq!(
            disassemble_one(back, &hot[16..]).as_deref(),
            Some("add rsp,30h")
        );
        let mut ops = VecAssembler::<X64Relocation>::new(COLD as usize);
        dynasm!(ops ; .arch x64
            ; mov rsi, [rsp + 0x40]     // g: entry rsp + 8
            ; mov rdx, [rsp + 0x48]     // h
            ; jmp extern back as usize
        );
        let cold = ops.finalize().unwrap();
        let alone = analyse_stack_reads(AT, &hot);
        assert_eq!(alone.words, 0);
        let exit = alone.exits[0];
        assert_eq!((exit.to, exit.rsp), (COLD, Some(-0x38)));
        // gcc's FDE for such a part: CFA = rsp + 0x40.
        assert_eq!(
            classify_exit(&exit, true, Some(TargetCfa::Rsp(0x40))),
            ExitKind::Continuation
        );
        let r = analyse_stack_reads_with_parts(AT, &hot, &[(COLD, &cold)]);
        assert_eq!((r.words, r.unsure.clone()), (2, None), "{r:?}");
        assert!(r.exits.is_empty(), "{r:?}");
    }

    #[test]
    fn exits_are_classified_by_the_cfa_at_their_target() {
        let exit = |rsp: Option<i64>, rbp: Option<i64>| Exit {
            from: AT,
            to: 0x40_2000,
            rsp,
            rbp,
        };
        // A cold part: six pushes and `sub rsp, 0x58` before the jump; gcc's FDE
        // for the part starts with CFA = rsp + 144.
        let cold = exit(Some(8 - 144), None);
        assert_eq!(
            classify_exit(&cold, true, Some(TargetCfa::Rsp(144))),
            ExitKind::Continuation
        );
        // A CFA that disagrees with the jump, none at all, or an inexact height: unknown.
        assert_eq!(
            classify_exit(&cold, true, Some(TargetCfa::Rsp(136))),
            ExitKind::Unknown
        );
        assert_eq!(classify_exit(&cold, true, None), ExitKind::Unknown);
        assert_eq!(
            classify_exit(&exit(None, None), true, Some(TargetCfa::Rsp(144))),
            ExitKind::Unknown
        );
        // Frame-pointer code: CFA = rbp + 16 with rbp at entry - 8.
        let fp = exit(None, Some(-8));
        assert_eq!(
            classify_exit(&fp, true, Some(TargetCfa::Rbp(16))),
            ExitKind::Continuation
        );
        assert_eq!(
            classify_exit(&fp, true, Some(TargetCfa::Rsp(16))),
            ExitKind::Unknown
        );
        // The entry state: a tail call out of .text (a PLT stub) whatever the CFA;
        // into .text, unnamed code whose CFA is that of an entry is walked in place
        // (exactly as its own entry would be); other CFAs are unknown.
        let tail = exit(Some(0), None);
        assert_eq!(classify_exit(&tail, false, None), ExitKind::TailCall);
        assert_eq!(
            classify_exit(&tail, true, Some(TargetCfa::Rsp(8))),
            ExitKind::Continuation
        );
        assert_eq!(classify_exit(&tail, true, None), ExitKind::Unknown);
        assert_eq!(
            classify_exit(&tail, true, Some(TargetCfa::Rsp(48))),
            ExitKind::Unknown
        );
        let why = Unsure::UnknownJump { at: AT };
        assert_eq!(why.at(), AT);
        assert!(
            why.to_string().contains("jumps out of the function"),
            "{why}"
        );
    }

    #[test]
    fn integer_only_va_start_is_recognised() {
        // gcc -O2 for a variadic function that reads only longs: no xmm saves.
        let code = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; lea rax, [rsp + 8]
                ; mov [rsp - 0x28], rsi
                ; mov [rsp - 0x40], rax
                ; mov [rsp - 0x20], rdx
                ; mov [rsp - 0x18], rcx
                ; mov [rsp - 0x10], r8
                ; mov [rsp - 8], r9
                ; ret
            )
        });
        assert!(analyse_stack_reads(AT, &code).variadic);
        // A spill of r9 alone next to an address-taken argument is not enough.
        let code = asm(|ops| {
            dynasm!(ops ; .arch x64
                ; lea rax, [rsp + 8]
                ; mov [rsp - 8], r9
                ; mov [rsp - 0x30], r8
                ; ret
            )
        });
        assert!(!analyse_stack_reads(AT, &code).variadic);
    }

    #[test]
    fn garbage_never_panics() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for len in 0..400 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = analyse_stack_reads(AT, &bytes);
        }
        // ud2 ends the only path; the stray byte after it is never reached.
        assert_eq!(analyse_stack_reads(AT, &[0x0f, 0x0b, 0xff]).unsure, None);
        assert!(matches!(
            analyse_stack_reads(AT, &[0x48]).unsure,
            Some(Unsure::Undecodable { at: AT })
        ));
    }
}
