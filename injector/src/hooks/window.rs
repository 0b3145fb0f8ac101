//! How much of a hooked call's stack the trampoline copies, and whether it stashes xmm0-7.
//!
//! The window comes, in order of precedence, from the user (`--stack-args N`);
//! for a variadic function (by its code or its signature) from
//! [`DEFAULT_VARIADIC_WORDS`]; from a known signature (classified with
//! [`trampolines::x86_64::place_arguments`]), raised to what the code provably
//! reads when that is more (a tail call passing more on); or from the function's
//! code ([`trampolines::x86_64::analyse_stack_reads`], following direct tail
//! calls into functions the symbol tables name, and `.cold` parts found by symbol
//! or by the module's call-frame information). A function reaching a variadic
//! function by tail calls, without a signature, gets the variadic default: it may
//! forward its own stack arguments untouched. When neither signature nor code
//! bounds the window, [`decide_window`] refuses and names `--stack-args N`.
//! The xmm area is stashed with `--float-args` or when the signature puts a
//! parameter in an xmm register.
//!
//! A signature is known when the user typed one (`--func 'f(int, double)'`) or
//! the module's DWARF describes the function; [`placement_of`] converts its
//! parameter types ([`reader::args::x86_64::param_type`]) and refuses (returns `None`, so the code
//! decides) whenever one of them cannot be classified with certainty: unknown or
//! incomplete types, bit-fields, `_Float128`, complex numbers, and C++ class
//! types (which may be passed by invisible reference).

use std::ops::Range;

use reader::unwind::ModuleCfa;
use trampolines::x86_64::{
    analyse_stack_reads_with_parts, classify_exit, disassemble_one, ArgPlacement, ExitKind,
    StackReads, TargetCfa, Unsure, MAX_STACK_WORDS,
};

use crate::error::UnsureWindow;
use crate::memory::Memory;
pub use reader::args::x86_64::placement_of;
use reader::symbols::ProcessSymbols;

/// Stack words copied for a variadic function when the user gives no `--stack-args`.
pub const DEFAULT_VARIADIC_WORDS: u16 = 8;

/// How deep [`analyse_code`] follows tail calls.
const MAX_TAIL_DEPTH: usize = 4;

/// Largest function body analysed.
const MAX_BODY: u64 = 1 << 20;

/// Where a hook's window size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowSource {
    /// `--stack-args N`.
    User,
    /// The parameter types (debug info).
    Signature,
    /// The function's instructions.
    Code,
    /// The variadic default (`DEFAULT_VARIADIC_WORDS`).
    VariadicDefault,
}

impl WindowSource {
    /// Every source.
    pub const ALL: [WindowSource; 4] = [
        WindowSource::User,
        WindowSource::Signature,
        WindowSource::Code,
        WindowSource::VariadicDefault,
    ];

    /// The source whose [`WindowSource::name`] is `name`.
    pub fn from_name(name: &str) -> Option<WindowSource> {
        WindowSource::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Lower-case name for listings.
    pub fn name(self) -> &'static str {
        match self {
            WindowSource::User => "user",
            WindowSource::Signature => "signature",
            WindowSource::Code => "code",
            WindowSource::VariadicDefault => "variadic-default",
        }
    }
}

/// The decided window and xmm stash of one hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowPlan {
    /// Incoming stack words to copy.
    pub words: u16,
    /// The function is variadic.
    pub variadic: bool,
    /// Stash xmm0-xmm7.
    pub xmm: bool,
    /// Where `words` came from.
    pub source: WindowSource,
}

/// What the code analysis concluded, tail calls included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeVerdict {
    /// The function and the functions it tail-calls, merged.
    pub reads: StackReads,
    /// Why the window is unknown, naming the function where it was found.
    pub unsure: Option<UnsureWindow>,
    /// A variadic function the hooked one reaches by tail calls (its name): it reads
    /// whatever the hooked function passes on the stack, which the code cannot count.
    pub variadic_tail: Option<String>,
}

/// Analyses the code of the function at `entry` (`size` bytes) and of the functions it tail-calls.
pub fn analyse_code(
    mem: &dyn Memory,
    symbols: &ProcessSymbols,
    entry: u64,
    size: u64,
) -> Result<CodeVerdict, crate::memory::MemoryError> {
    let mut merged = StackReads::default();
    let mut unsure = None;
    let mut variadic_tail = None;
    let mut seen = vec![entry];
    let mut queue = vec![(entry, size, 0usize)];
    while let Some((addr, len, depth)) = queue.pop() {
        let code = match mem.read_vec(addr, len.min(MAX_BODY) as usize) {
            Ok(code) => code,
            Err(e) if addr == entry => return Err(e),
            // An unreadable tail-call target is skipped like an unnamed one.
            Err(_) => continue,
        };
        let name = symbols
            .lookup(addr)
            .map_or_else(|| format!("0x{addr:x}"), |(_, s, _)| s.name.clone());
        let reads = analyse_with_cold_parts(mem, symbols, addr, &code, &name);
        if addr == entry {
            merged.variadic = reads.variadic;
            merged.indirect_jumps = reads.indirect_jumps;
        } else if reads.variadic && variadic_tail.is_none() {
            variadic_tail = Some(name.clone());
        }
        merged.words = merged.words.max(reads.words);
        if unsure.is_none() {
            if let Some(why) = &reads.unsure {
                unsure = Some(UnsureWindow {
                    tail_called: (addr != entry).then(|| name.clone()),
                    why: why.clone(),
                    instruction: instruction_at(mem, why.at()),
                });
            }
        }
        for target in reads.tail_calls() {
            if seen.contains(&target) || depth + 1 > MAX_TAIL_DEPTH {
                continue;
            }
            seen.push(target);
            // Only functions that start at a named symbol are followed; PLT stubs and
            // unnamed code are not (a documented limit).
            if let Some((_, s, 0)) = symbols.lookup(target) {
                if s.size > 0 {
                    queue.push((target, s.size, depth + 1));
                }
            }
        }
    }
    Ok(CodeVerdict {
        reads: merged,
        unsure,
        variadic_tail,
    })
}

/// The instruction at `at` in NASM syntax, for a refusal that names it.
fn instruction_at(mem: &dyn Memory, at: u64) -> Option<String> {
    // An instruction is at most 15 bytes; near the end of a mapping fewer may be readable.
    (1..=15usize)
        .rev()
        .step_by(7)
        .find_map(|len| mem.read_vec(at, len).ok())
        .and_then(|code| disassemble_one(at, &code))
}

/// How many `.cold` parts of one function [`analyse_with_cold_parts`] follows.
const MAX_COLD_PARTS: usize = 4;

/// DWARF register numbers of rsp and rbp.
const DWARF_RSP: u16 = 7;
const DWARF_RBP: u16 = 6;

/// Analyses the function `name` at `addr`, walking the further parts of it that it
/// jumps into (gcc and g++ move unlikely paths to `.cold` blocks) as its
/// continuation, with the stack state of the jump, instead of as tail calls entered
/// with a fresh frame. A part is found by its symbol (`NAME.cold`, `NAME.cold.N`),
/// or, where no symbol names the target (stripped modules), by the module's
/// call-frame information: the FDE covering the target gives the part's extent, and
/// its CFA there must agree with the stack at the jump ([`classify_exit`]). A jump
/// that is shown to be neither a tail call nor a part makes the analysis unsure,
/// naming the jump.
fn analyse_with_cold_parts(
    mem: &dyn Memory,
    symbols: &ProcessSymbols,
    addr: u64,
    code: &[u8],
    name: &str,
) -> StackReads {
    let cold = format!("{name}.cold");
    let mut frames = PartFinder::new(symbols, addr);
    let mut parts: Vec<(u64, Vec<u8>)> = Vec::new();
    loop {
        let borrowed: Vec<(u64, &[u8])> = parts.iter().map(|(a, c)| (*a, c.as_slice())).collect();
        let mut reads = analyse_stack_reads_with_parts(addr, code, &borrowed);
        let known = |start: u64| parts.iter().any(|(a, _)| *a == start);
        let by_symbol = reads.tail_calls().into_iter().find_map(|target| {
            let (_, s, off) = symbols.lookup(target)?;
            let is_cold = s.name == cold
                || s.name
                    .strip_prefix(&cold)
                    .is_some_and(|rest| rest.starts_with('.'));
            let start = target - off;
            (is_cold && s.size > 0 && s.size <= MAX_BODY && !known(start))
                .then_some((start, s.size))
        });
        let mut by_frame = None;
        if by_symbol.is_none() {
            for exit in &reads.exits {
                // A jump to a function's start is a tail call (analysed by the caller).
                if matches!(symbols.lookup(exit.to), Some((_, _, 0))) {
                    continue;
                }
                let (in_text, cfa) = frames.at(exit.to);
                match classify_exit(exit, in_text, cfa) {
                    ExitKind::TailCall => {}
                    ExitKind::Continuation => match frames.extent(exit.to) {
                        Some(r) if !known(r.start) => {
                            by_frame = Some((r.start, r.end - r.start));
                            break;
                        }
                        // Already a part (cannot happen: it would contain the target).
                        Some(_) => {}
                        None => {
                            reads
                                .unsure
                                .get_or_insert(Unsure::UnknownJump { at: exit.from });
                        }
                    },
                    ExitKind::Unknown => {
                        reads
                            .unsure
                            .get_or_insert(Unsure::UnknownJump { at: exit.from });
                    }
                }
            }
        }
        let Some((start, size)) = by_symbol.or(by_frame) else {
            return reads;
        };
        if parts.len() >= MAX_COLD_PARTS {
            if by_frame.is_some() {
                let at = reads
                    .exits
                    .iter()
                    .find(|e| e.to >= start && e.to - start < size);
                if let Some(e) = at {
                    reads
                        .unsure
                        .get_or_insert(Unsure::UnknownJump { at: e.from });
                }
            }
            return reads;
        }
        match mem.read_vec(start, size as usize) {
            Ok(bytes) => parts.push((start, bytes)),
            // An unreadable part stays a tail call (analysed, or skipped, as before).
            Err(_) => return reads,
        }
    }
}

/// The call-frame information of the hooked function's module, asked about the
/// targets of jumps out of it.
struct PartFinder<'a> {
    module: Option<&'a reader::symbols::Module>,
    /// The module's `.text` (runtime addresses).
    text: Option<Range<u64>>,
    /// Indexed on first use (most functions jump nowhere unnamed).
    cfa: Option<Option<ModuleCfa>>,
}

impl<'a> PartFinder<'a> {
    fn new(symbols: &'a ProcessSymbols, addr: u64) -> PartFinder<'a> {
        let module = symbols.module_for(addr).filter(|m| m.is_64);
        PartFinder {
            module,
            text: module.and_then(|m| {
                let (r, _) = m.section(".text")?;
                Some(r.start.wrapping_add(m.bias)..r.end.wrapping_add(m.bias))
            }),
            cfa: None,
        }
    }

    fn cfa(&mut self) -> Option<&mut ModuleCfa> {
        let module = self.module;
        self.cfa
            .get_or_insert_with(|| module.and_then(ModuleCfa::new))
            .as_mut()
    }

    /// Whether `to` lies in the module's `.text`, and the CFA rule there.
    fn at(&mut self, to: u64) -> (bool, Option<TargetCfa>) {
        let in_text = self.text.as_ref().is_some_and(|r| r.contains(&to));
        let cfa = if in_text {
            self.cfa()
                .and_then(|c| c.rule(to))
                .and_then(|r| match r.register {
                    DWARF_RSP => Some(TargetCfa::Rsp(r.offset)),
                    DWARF_RBP => Some(TargetCfa::Rbp(r.offset)),
                    _ => None,
                })
        } else {
            None
        };
        (in_text, cfa)
    }

    /// The FDE range holding `to`, when it lies in `.text` and is not too large.
    fn extent(&mut self, to: u64) -> Option<Range<u64>> {
        let r = self.cfa()?.fde_range(to)?;
        let text = self.text.as_ref()?;
        (text.contains(&r.start) && r.end <= text.end && r.end - r.start <= MAX_BODY).then_some(r)
    }
}

/// Why no window could be decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowRefusal {
    /// The code does not bound the incoming stack words it reads.
    Unsure(UnsureWindow),
    /// The function reads more stack words than a trampoline copies.
    TooLarge(u16),
}

/// Decides the window: the user's `requested` size, else the signature's, else the code's.
pub fn decide_window(
    requested: Option<u16>,
    signature: Option<&ArgPlacement>,
    code: &CodeVerdict,
    float_args: bool,
) -> Result<WindowPlan, WindowRefusal> {
    let variadic = code.reads.variadic || signature.is_some_and(|s| s.variadic);
    let xmm = float_args || signature.is_some_and(|s| s.uses_sse);
    let (words, source) = match (requested, signature) {
        (Some(n), _) => (n, WindowSource::User),
        (None, _) if variadic => (DEFAULT_VARIADIC_WORDS, WindowSource::VariadicDefault),
        (None, Some(sig)) => {
            // Code that provably reads more (a tail call passing more on) wins.
            let from_code = if code.unsure.is_none() {
                code.reads.words
            } else {
                0
            };
            (sig.stack_words.max(from_code), WindowSource::Signature)
        }
        (None, None) => match &code.unsure {
            Some(why) => return Err(WindowRefusal::Unsure(why.clone())),
            // A tail call into a variadic function passes it the hooked function's own
            // stack arguments, which the code may never touch (`f(long double x)`
            // ending in `jmp vlog` with x in place): the variadic default.
            None if code.variadic_tail.is_some() => (
                code.reads.words.max(DEFAULT_VARIADIC_WORDS),
                WindowSource::VariadicDefault,
            ),
            None => (code.reads.words, WindowSource::Code),
        },
    };
    if words > MAX_STACK_WORDS {
        return Err(WindowRefusal::TooLarge(words));
    }
    Ok(WindowPlan {
        words,
        variadic,
        xmm,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use trampolines::x86_64::{place_arguments, ParamType, Signature};

    use reader::args::parse_params;

    fn verdict(words: u16, variadic: bool, unsure: bool) -> CodeVerdict {
        CodeVerdict {
            reads: StackReads {
                words,
                variadic,
                unsure: unsure.then_some(Unsure::AddressTaken { at: 0x10 }),
                ..StackReads::default()
            },
            unsure: unsure.then_some(UnsureWindow {
                tail_called: None,
                why: Unsure::AddressTaken { at: 0x10 },
                instruction: None,
            }),
            variadic_tail: None,
        }
    }

    #[test]
    fn a_tail_call_into_a_variadic_function_gets_the_variadic_default_without_a_signature() {
        let mut v = verdict(0, false, false);
        v.variadic_tail = Some("vlog".into());
        let p = decide_window(None, None, &v, false).unwrap();
        assert_eq!(
            (p.words, p.variadic, p.source),
            (DEFAULT_VARIADIC_WORDS, false, WindowSource::VariadicDefault)
        );
        // Words the code provably touches beyond the default still count.
        v.reads.words = 11;
        assert_eq!(decide_window(None, None, &v, false).unwrap().words, 11);
        // The signature bounds what the caller passes (a sibling call's stack
        // arguments fit in the caller's own incoming area).
        let sig = place_arguments(&Signature {
            ret: None,
            params: vec![ParamType::Int { size: 8 }; 8],
            variadic: false,
        });
        v.reads.words = 0;
        let p = decide_window(None, Some(&sig), &v, false).unwrap();
        assert_eq!((p.words, p.source), (2, WindowSource::Signature));
        // Another reason to be unsure still refuses.
        let mut u = verdict(0, false, true);
        u.variadic_tail = Some("vlog".into());
        assert!(matches!(
            decide_window(None, None, &u, false),
            Err(WindowRefusal::Unsure(_))
        ));
    }

    #[test]
    fn user_request_wins() {
        let p = decide_window(Some(3), None, &verdict(0, false, true), false).unwrap();
        assert_eq!((p.words, p.source), (3, WindowSource::User));
    }

    #[test]
    fn code_decides_without_signature_and_refuses_when_unsure() {
        let p = decide_window(None, None, &verdict(4, false, false), false).unwrap();
        assert_eq!((p.words, p.source, p.xmm), (4, WindowSource::Code, false));
        assert_eq!(
            decide_window(None, None, &verdict(0, false, true), false),
            Err(WindowRefusal::Unsure(UnsureWindow {
                tail_called: None,
                why: Unsure::AddressTaken { at: 0x10 },
                instruction: None,
            }))
        );
        assert_eq!(
            decide_window(None, None, &verdict(17, false, false), false),
            Err(WindowRefusal::TooLarge(17))
        );
    }

    #[test]
    fn variadic_gets_the_default_window() {
        let p = decide_window(None, None, &verdict(0, true, true), false).unwrap();
        assert_eq!(
            (p.words, p.variadic, p.source),
            (DEFAULT_VARIADIC_WORDS, true, WindowSource::VariadicDefault)
        );
        let p = decide_window(Some(12), None, &verdict(0, true, true), false).unwrap();
        assert_eq!((p.words, p.variadic), (12, true));
    }

    #[test]
    fn signature_decides_and_turns_on_xmm_for_doubles() {
        let mut params = vec![ParamType::Int { size: 8 }];
        params.extend(vec![ParamType::Double; 9]);
        let sig = place_arguments(&Signature {
            ret: Some(ParamType::Double),
            params,
            variadic: false,
        });
        // Even where the code alone is unsure, the signature bounds the window.
        let p = decide_window(None, Some(&sig), &verdict(0, false, true), false).unwrap();
        assert_eq!(
            (p.words, p.xmm, p.source),
            (1, true, WindowSource::Signature)
        );
    }

    #[test]
    fn user_signature_places_doubles_and_the_stack() {
        let sig = parse_params("long n, double a, double b, double c, double d, double e, double f, double g, double h, double i").unwrap();
        let p = placement_of(&sig.to_function_info(None)).unwrap();
        assert_eq!((p.stack_words, p.uses_sse, p.variadic), (1, true, false));
        let dec = decide_window(None, Some(&p), &verdict(0, false, false), false).unwrap();
        assert_eq!(
            (dec.words, dec.xmm, dec.source),
            (1, true, WindowSource::Signature)
        );
    }
}
