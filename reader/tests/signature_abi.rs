//! Generated signatures against the C compiler.
//!
//! A seeded generator writes valid parameter lists from the grammar (every integer
//! width and signedness in any word order, typedef names, `_Bool`, floating types,
//! pointers with qualifiers and `restrict`, arrays, tagged pointers, `...`, up to
//! 20 parameters so many go to the stack). Each batch becomes one C file compiled
//! with the system `cc` (and `cc -m32` when it can build i386 programs) whose
//! program:
//!
//! - checks with `__builtin_types_compatible_p` that the list as written and the
//!   parser's normalized list declare the same function type;
//! - prints `sizeof` and the bytes of every parameter (inside a function taking
//!   the normalized list);
//! - calls an assembly stub through a pointer of the written type with the same
//!   values; the stub dumps the argument registers (rdi..r9, xmm0-7) and the
//!   incoming stack words.
//!
//! The test then asserts the parser's layout ([`placement_of`] for x86-64,
//! [`signature_layout_i386`] for i386) finds every value's bytes where the
//! compiler put them. A second test mutates valid lists (tokens deleted,
//! inserted, swapped, duplicated): the parser must refuse a mutant at a position
//! inside it, or accept one that `cc` accepts, whose layout then matches too.
//!
//! `ARGSTASH_SIG_SEED` overrides the seed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use reader::args::i386::signature_layout_i386;
use reader::args::x86_64::placement_of;
use reader::args::{parse_params, Signature, TypeKind, TYPEDEFS};
use trampolines::x86_64::frame::ARGUMENT_REGS;
use trampolines::x86_64::ArgLocation;

/// SplitMix64: small, deterministic, good enough to pick grammar branches.
struct Rng(u64);

impl Rng {
    fn seeded(salt: u64) -> Rng {
        let seed = std::env::var("ARGSTASH_SIG_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x5eed_1900_0003_u64);
        Rng(seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `percent`%.
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

/// The target ABI of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Abi {
    X86_64,
    I386,
}

/// Every C spelling (as a multiset of type words) of each basic type.
const BASIC: &[&[&[&str]]] = &[
    &[&["char"]],
    &[&["signed", "char"]],
    &[&["unsigned", "char"]],
    &[
        &["short"],
        &["short", "int"],
        &["signed", "short"],
        &["signed", "short", "int"],
    ],
    &[&["unsigned", "short"], &["unsigned", "short", "int"]],
    &[&["int"], &["signed"], &["signed", "int"]],
    &[&["unsigned"], &["unsigned", "int"]],
    &[
        &["long"],
        &["long", "int"],
        &["signed", "long"],
        &["signed", "long", "int"],
    ],
    &[&["unsigned", "long"], &["unsigned", "long", "int"]],
    &[
        &["long", "long"],
        &["long", "long", "int"],
        &["signed", "long", "long"],
        &["signed", "long", "long", "int"],
    ],
    &[
        &["unsigned", "long", "long"],
        &["unsigned", "long", "long", "int"],
    ],
    &[&["_Bool"]],
    &[&["bool"]],
    &[&["float"]],
    &[&["double"]],
    &[&["long", "double"]],
];

/// GCC's 128-bit integers (x86-64 only).
const INT128: &[&[&str]] = &[
    &["__int128"],
    &["signed", "__int128"],
    &["unsigned", "__int128"],
];

/// Tokens of one generated parameter.
fn gen_param(rng: &mut Rng, abi: Abi, index: usize, out: &mut Vec<String>) {
    // The type words, in any order, qualifiers mixed in.
    let kind = rng.below(20);
    let mut words: Vec<String>;
    let mut needs_pointer = false;
    if kind < 13 {
        let spellings = rng.pick(BASIC);
        words = rng.pick(spellings).iter().map(|w| w.to_string()).collect();
        rng.shuffle(&mut words);
    } else if kind < 14 && abi == Abi::X86_64 {
        words = rng.pick(INT128).iter().map(|w| w.to_string()).collect();
        rng.shuffle(&mut words);
    } else if kind < 17 {
        words = vec![rng.pick(&TYPEDEFS).to_string()];
    } else if kind < 18 {
        words = vec!["void".into()];
        needs_pointer = true;
    } else {
        let tag = *rng.pick(&["struct", "union", "enum"]);
        // One kind per tag name: a tag names one type in a list.
        words = vec![tag.into(), format!("{}{}", &tag[..1], rng.below(5))];
        needs_pointer = true;
    }
    let tagged = matches!(words[0].as_str(), "struct" | "union" | "enum");
    for q in ["const", "volatile"] {
        if rng.chance(20) {
            // A tagged type is two tokens that stay together.
            let at = if tagged {
                if rng.chance(50) {
                    0
                } else {
                    words.len()
                }
            } else {
                rng.below(words.len() + 1)
            };
            words.insert(at, q.to_string());
        }
    }
    out.extend(words);
    // The declarator: `void` and tagged types only behind a `*`.
    let stars = if needs_pointer || rng.chance(25) {
        1 + rng.below(2)
    } else {
        0
    };
    let array = rng.chance(15);
    for _ in 0..stars {
        out.push("*".into());
        let mut quals: Vec<&str> = ["const", "volatile", "restrict"]
            .into_iter()
            .filter(|_| rng.chance(15))
            .collect();
        rng.shuffle(&mut quals);
        out.extend(quals.iter().map(|q| q.to_string()));
    }
    if rng.chance(75) {
        out.push(format!("{}{index}", rng.pick(&["a", "arg_", "_x", "N"])));
    }
    if array {
        out.push("[".into());
        if rng.chance(60) {
            out.push((1 + rng.below(64)).to_string());
        }
        out.push("]".into());
    }
}

/// Tokens of one generated parameter list.
fn gen_list(rng: &mut Rng, abi: Abi) -> Vec<String> {
    let n = rng.below(21);
    let mut toks = Vec::new();
    if n == 0 {
        if rng.chance(50) {
            toks.push("void".into());
        }
        return toks;
    }
    for i in 0..n {
        if i > 0 {
            toks.push(",".into());
        }
        gen_param(rng, abi, i, &mut toks);
    }
    if rng.chance(20) {
        toks.push(",".into());
        toks.push("...".into());
    }
    toks
}

fn wordy(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The tokens joined with varied whitespace (at least one blank between two words).
fn spell(rng: &mut Rng, toks: &[String]) -> String {
    let mut s = String::new();
    for (i, t) in toks.iter().enumerate() {
        let must = i > 0 && wordy(&toks[i - 1]) && wordy(t);
        let blanks = if must { 1 + rng.below(2) } else { rng.below(3) };
        for _ in 0..blanks {
            s.push(*rng.pick(&[' ', ' ', ' ', '\t', '\n']));
        }
        s.push_str(t);
    }
    if rng.chance(20) {
        s.push(' ');
    }
    s
}

/// A C literal of a parameter's type with the given ABI size (random bytes).
fn literal(rng: &mut Rng, kind: &TypeKind, size: u64, abi: Abi) -> Option<String> {
    let bits = |rng: &mut Rng, n: u64| {
        let v = rng.next() | 0x0101_0101_0101_0101;
        if n >= 8 {
            v & 0x7fff_ffff_ffff_ffff
        } else {
            v & ((1u64 << (8 * n - 1)) - 1)
        }
    };
    Some(match kind {
        TypeKind::Pointer(_) => {
            let v = bits(rng, if abi == Abi::X86_64 { 6 } else { 4 });
            format!("(void *)(uintptr_t)0x{v:x}ULL")
        }
        TypeKind::Bool => "1".into(),
        TypeKind::Char { .. } | TypeKind::Signed | TypeKind::Unsigned if size == 16 => {
            let (hi, lo) = (bits(rng, 8), rng.next());
            format!("(((unsigned __int128)0x{hi:x}ULL << 64) | 0x{lo:x}ULL)")
        }
        TypeKind::Char { .. } | TypeKind::Signed | TypeKind::Unsigned => {
            format!("0x{:x}ULL", bits(rng, size))
        }
        TypeKind::Float => {
            let n = match size {
                4 => rng.next() % (1 << 20),
                _ => rng.next() % (1 << 50),
            };
            if size > 8 {
                format!("({n}.0L / 3.0L)")
            } else {
                format!("({n}.0 / 1024.0)")
            }
        }
        _ => return None,
    })
}

/// One signature of a batch: the list as written and as parsed.
struct Case {
    written: String,
    sig: Signature,
}

/// The sizes the ABI gives the parameters, or `None` when the parser cannot place them.
fn abi_sizes(sig: &Signature, abi: Abi) -> Option<Vec<u64>> {
    match abi {
        Abi::X86_64 => {
            placement_of(&sig.to_function_info(None))?;
            Some(sig.params().iter().map(|p| p.ty.size).collect())
        }
        Abi::I386 => Some(
            signature_layout_i386(&sig.to_function_info(None))?
                .into_iter()
                .map(|(_, size)| size)
                .collect(),
        ),
    }
}

/// The C program that prints the compiler's view of every case.
fn program(cases: &[Case], abi: Abi, rng: &mut Rng) -> String {
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdint.h>\n#include <stdbool.h>\n#include <sys/types.h>\n\
         #include <stdio.h>\n\
         unsigned char dump_regs[48], dump_xmm[128], dump_stack[512];\n\
         void argdump(void);\n\
         static void hex(const char *tag, int k, int i, const void *p, size_t n) {\n\
           const unsigned char *b = p; printf(\"%s %d %d %zu \", tag, k, i, n);\n\
           for (size_t j = 0; j < n; j++) printf(\"%02x\", b[j]);\n\
           printf(\"\\n\");\n}\n",
    );
    c.push_str(match abi {
        Abi::X86_64 => {
            "__asm__(\".text\\n.globl argdump\\n.type argdump,@function\\nargdump:\\n\"\n\
             \"movq %rdi, dump_regs+0(%rip)\\nmovq %rsi, dump_regs+8(%rip)\\n\"\n\
             \"movq %rdx, dump_regs+16(%rip)\\nmovq %rcx, dump_regs+24(%rip)\\n\"\n\
             \"movq %r8, dump_regs+32(%rip)\\nmovq %r9, dump_regs+40(%rip)\\n\"\n\
             \"movdqu %xmm0, dump_xmm+0(%rip)\\nmovdqu %xmm1, dump_xmm+16(%rip)\\n\"\n\
             \"movdqu %xmm2, dump_xmm+32(%rip)\\nmovdqu %xmm3, dump_xmm+48(%rip)\\n\"\n\
             \"movdqu %xmm4, dump_xmm+64(%rip)\\nmovdqu %xmm5, dump_xmm+80(%rip)\\n\"\n\
             \"movdqu %xmm6, dump_xmm+96(%rip)\\nmovdqu %xmm7, dump_xmm+112(%rip)\\n\"\n\
             \"leaq 8(%rsp), %rsi\\nleaq dump_stack(%rip), %rdi\\nmovl $64, %ecx\\ncld\\nrep movsq\\nret\\n\");\n"
        }
        Abi::I386 => {
            "__asm__(\".text\\n.globl argdump\\n.type argdump,@function\\nargdump:\\n\"\n\
             \"pushl %esi\\npushl %edi\\nleal 12(%esp), %esi\\nmovl $dump_stack, %edi\\n\"\n\
             \"movl $128, %ecx\\ncld\\nrep movsl\\npopl %edi\\npopl %esi\\nret\\n\");\n"
        }
    });
    // File-scope tags: each prototype would otherwise declare its own, incompatible one.
    for i in 0..5 {
        c.push_str(&format!("struct s{i}; union u{i}; enum e{i};\n"));
    }
    let mut main = String::from("int main(void) {\n");
    for (k, case) in cases.iter().enumerate() {
        let sig = &case.sig;
        let sizes = abi_sizes(sig, abi).expect("generated types are placed");
        let mut named: Vec<String> = sig
            .params()
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{} p{i}", p.ty.name))
            .collect();
        if sig.variadic() {
            named.push("...".into());
        }
        let named = if named.is_empty() {
            "void".to_string()
        } else {
            named.join(", ")
        };
        let written = if case.written.trim().is_empty() {
            "void".to_string()
        } else {
            case.written.replace('\n', " ")
        };
        let lits: Vec<String> = sig
            .params()
            .iter()
            .zip(&sizes)
            .map(|(p, size)| literal(rng, &p.ty.kind, *size, abi).expect("literal"))
            .collect();
        let lits = lits.join(", ");
        c.push_str(&format!(
            "typedef void fn_{k}({written});\nvoid norm_{k}({named});\n\
             static void describe_{k}({named}) {{\n"
        ));
        for i in 0..sig.params().len() {
            c.push_str(&format!("  hex(\"p\", {k}, {i}, &p{i}, sizeof p{i});\n"));
        }
        c.push_str("}\n");
        c.push_str(&format!(
            "static void run_{k}(void) {{\n\
               printf(\"compat {k} %d\\n\", __builtin_types_compatible_p(fn_{k}, __typeof__(norm_{k})));\n\
               describe_{k}({lits});\n\
               ((fn_{k} *)(void *)argdump)({lits});\n\
               hex(\"regs\", {k}, 0, dump_regs, 48);\n\
               hex(\"xmm\", {k}, 0, dump_xmm, 128);\n\
               hex(\"stack\", {k}, 0, dump_stack, 512);\n}}\n"
        ));
        main.push_str(&format!("  run_{k}();\n"));
    }
    main.push_str("  return 0;\n}\n");
    c.push_str(&main);
    c
}

/// A scratch directory under Cargo's per-test temp dir.
fn scratch(tag: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("sigabi-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn cc_flags(abi: Abi) -> Vec<&'static str> {
    let mut f = vec!["-std=gnu11", "-O0", "-w", "-fno-pie", "-no-pie"];
    if abi == Abi::I386 {
        f.push("-m32");
    }
    f
}

/// True when `cc -m32` builds and runs a program here.
fn m32_works(dir: &Path) -> bool {
    let src = dir.join("m32.c");
    std::fs::write(&src, "#include <stdio.h>\nint main(void){return 0;}\n").unwrap();
    let exe = dir.join("m32");
    Command::new("cc")
        .args(["-m32", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .is_ok_and(|o| o.status.success())
        && Command::new(&exe).status().is_ok_and(|s| s.success())
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// What one case's run printed.
#[derive(Default)]
struct Seen {
    compat: Option<bool>,
    params: HashMap<usize, (u64, Vec<u8>)>,
    regs: Vec<u8>,
    xmm: Vec<u8>,
    stack: Vec<u8>,
}

/// Compiles and runs `cases` for `abi`; returns the disagreements and how many
/// parameters were checked (in registers, on the stack).
fn check_batch(
    cases: &[Case],
    abi: Abi,
    rng: &mut Rng,
    dir: &Path,
    n: usize,
) -> (Vec<String>, usize, usize) {
    let src = dir.join(format!("batch{n}.c"));
    let exe = dir.join(format!("batch{n}"));
    std::fs::write(&src, program(cases, abi, rng)).unwrap();
    let out = Command::new("cc")
        .args(cc_flags(abi))
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("running cc");
    assert!(
        out.status.success(),
        "cc {abi:?} refused {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("running the batch");
    assert!(run.status.success(), "{} failed", exe.display());
    let mut seen: HashMap<usize, Seen> = HashMap::new();
    for line in String::from_utf8_lossy(&run.stdout).lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let k: usize = f[1].parse().unwrap();
        let s = seen.entry(k).or_default();
        match f[0] {
            "compat" => s.compat = Some(f[2] == "1"),
            "p" => {
                let i = f[2].parse().unwrap();
                s.params
                    .insert(i, (f[3].parse().unwrap(), unhex(f.get(4).unwrap_or(&""))));
            }
            "regs" => s.regs = unhex(f[4]),
            "xmm" => s.xmm = unhex(f[4]),
            "stack" => s.stack = unhex(f[4]),
            other => panic!("unexpected line {other}"),
        }
    }
    let mut bad = Vec::new();
    let (mut in_regs, mut on_stack) = (0, 0);
    for (k, case) in cases.iter().enumerate() {
        let s = &seen[&k];
        let what = format!("{abi:?} `{}`", case.written.replace('\n', " "));
        if s.compat != Some(true) {
            bad.push(format!(
                "{what}: cc finds the normalized `{}` a different function type",
                case.sig.text()
            ));
        }
        let info = case.sig.to_function_info(None);
        let places: Vec<(Vec<u8>, u64)> = match abi {
            Abi::X86_64 => {
                let placement = placement_of(&info).unwrap();
                case.sig
                    .params()
                    .iter()
                    .zip(&placement.params)
                    .map(|(p, loc)| {
                        let bytes = match loc {
                            ArgLocation::Registers { int, sse } => {
                                in_regs += 1;
                                let mut b = Vec::new();
                                for r in int {
                                    let i = ARGUMENT_REGS.iter().position(|x| x == r).unwrap();
                                    b.extend_from_slice(&s.regs[8 * i..8 * i + 8]);
                                }
                                for x in sse {
                                    let x = usize::from(*x);
                                    b.extend_from_slice(&s.xmm[16 * x..16 * x + 8]);
                                }
                                b
                            }
                            ArgLocation::Stack { first, words } => {
                                on_stack += 1;
                                let from = 8 * usize::from(*first);
                                s.stack[from..from + 8 * usize::from(*words)].to_vec()
                            }
                        };
                        (bytes, p.ty.size)
                    })
                    .collect()
            }
            Abi::I386 => signature_layout_i386(&info)
                .unwrap()
                .into_iter()
                .map(|(at, size)| {
                    on_stack += 1;
                    let from = at as usize - 4;
                    (s.stack[from..from + size as usize].to_vec(), size)
                })
                .collect(),
        };
        for (i, (p, (bytes, size))) in case.sig.params().iter().zip(places).enumerate() {
            let Some((cc_size, value)) = s.params.get(&i) else {
                bad.push(format!("{what}: parameter {i} not printed"));
                continue;
            };
            if *cc_size != size {
                bad.push(format!(
                    "{what}: parameter {i} (`{}`) is {cc_size} bytes for cc, {size} for the parser",
                    p.ty.name
                ));
                continue;
            }
            // x87 long double: 10 bytes of value, the rest padding.
            let meaningful = if p.ty.kind == TypeKind::Float && size > 8 {
                10
            } else {
                size as usize
            };
            if bytes.len() < meaningful || bytes[..meaningful] != value[..meaningful] {
                bad.push(format!(
                    "{what}: parameter {i} (`{}`) is not where the parser places it: \
                     value {:02x?}, found {:02x?}",
                    p.ty.name,
                    &value[..meaningful],
                    &bytes[..meaningful.min(bytes.len())]
                ));
            }
        }
    }
    (bad, in_regs, on_stack)
}

/// Parses a generated (valid) list; it must be accepted, and its text must read back the same.
#[track_caller]
fn parse_valid(written: &str) -> Signature {
    let sig =
        parse_params(written).unwrap_or_else(|e| panic!("valid list `{written}` refused: {e}"));
    assert_eq!(
        parse_params(sig.text()).as_ref(),
        Ok(&sig),
        "`{written}` normalizes to `{}`, which reads back differently",
        sig.text()
    );
    sig
}

const BATCHES: usize = 10;
const PER_BATCH: usize = 40;

#[test]
fn generated_signatures_match_the_compiler_layout() {
    let dir = scratch("valid");
    let mut abis = vec![Abi::X86_64];
    if m32_works(&dir) {
        abis.push(Abi::I386);
    } else {
        println!("cc -m32 cannot build i386 programs here (no gcc-multilib?): i386 half skipped");
    }
    for abi in abis {
        let mut rng = Rng::seeded(abi as u64 + 1);
        let (mut params, mut regs, mut stack, mut lists) = (0, 0, 0, 0);
        let mut bad = Vec::new();
        for n in 0..BATCHES {
            let cases: Vec<Case> = (0..PER_BATCH)
                .map(|_| {
                    let toks = gen_list(&mut rng, abi);
                    let written = spell(&mut rng, &toks);
                    let sig = parse_valid(&written);
                    Case { written, sig }
                })
                .collect();
            lists += cases.len();
            params += cases.iter().map(|c| c.sig.params().len()).sum::<usize>();
            let (b, r, s) = check_batch(&cases, abi, &mut rng, &dir, n);
            bad.extend(b);
            regs += r;
            stack += s;
        }
        println!(
            "{abi:?}: {lists} generated lists, {params} parameters checked against cc \
             ({regs} in registers, {stack} on the stack), {} disagreements",
            bad.len()
        );
        assert!(params > 1000 && stack > 100, "too few parameters checked");
        assert!(
            bad.is_empty(),
            "{} disagreements:\n{}",
            bad.len(),
            bad.join("\n")
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Tokens a mutation inserts.
const INSERTS: &[&str] = &[
    "(", ")", ",", "*", "[", "]", "...", "3", "3x", "0", "int", "void", "long", "short", "char",
    "double", "unsigned", "signed", "const", "restrict", "struct", "size_t", ";", "x", "a0",
    "register", "=", "{",
];

/// One mutant of `toks`: a token deleted, inserted, duplicated, or two swapped.
fn mutate(rng: &mut Rng, toks: &[String]) -> Vec<String> {
    let mut t = toks.to_vec();
    let ops = 1 + rng.below(2);
    for _ in 0..ops {
        let at = rng.below(t.len() + 1);
        match rng.below(4) {
            0 if at < t.len() => {
                t.remove(at);
            }
            1 if at < t.len() => {
                let dup = t[at].clone();
                t.insert(at, dup);
            }
            2 if at + 1 < t.len() => t.swap(at, at + 1),
            _ => t.insert(at, rng.pick(INSERTS).to_string()),
        }
    }
    t
}

/// Which of `lists` `cc` accepts as `void f(LIST);`.
fn cc_accepts(lists: &[String], dir: &Path, tag: &str) -> Vec<bool> {
    let src = dir.join(format!("{tag}.c"));
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdint.h>\n#include <stdbool.h>\n#include <sys/types.h>\n",
    );
    let first_line = 5;
    for (k, l) in lists.iter().enumerate() {
        c.push_str(&format!("void f{k}({});\n", l.replace('\n', " ")));
    }
    std::fs::write(&src, c).unwrap();
    let out = Command::new("cc")
        .args(["-std=gnu11", "-fsyntax-only", "-w", "-fmax-errors=0"])
        .arg(&src)
        .output()
        .expect("running cc");
    let mut ok = vec![true; lists.len()];
    let prefix = format!("{}:", src.display());
    for line in String::from_utf8_lossy(&out.stderr).lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let mut f = rest.split(':');
        let (Some(n), Some(_col), Some(kind)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if kind.trim() == "error" {
            if let Some(k) = n
                .parse::<usize>()
                .ok()
                .and_then(|n| n.checked_sub(first_line))
            {
                if k < ok.len() {
                    ok[k] = false;
                }
            }
        }
    }
    assert!(
        out.status.success() || ok.iter().any(|a| !a),
        "cc failed without naming a line: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    ok
}

#[test]
fn mutated_lists_are_refused_or_match_the_compiler() {
    let dir = scratch("mutants");
    let mut rng = Rng::seeded(99);
    let (mut refused, mut accepted) = (Vec::new(), Vec::new());
    while refused.len() + accepted.len() < 1500 {
        let toks = gen_list(&mut rng, Abi::X86_64);
        if toks.is_empty() {
            continue;
        }
        let mutant = mutate(&mut rng, &toks);
        let written = spell(&mut rng, &mutant);
        match parse_params(&written) {
            Ok(sig) => accepted.push(Case { written, sig }),
            Err(e) => {
                assert!(
                    e.at <= written.len() && written.is_char_boundary(e.at),
                    "`{written}`: position {} is outside the text",
                    e.at
                );
                refused.push(written);
            }
        }
    }
    // Everything the parser accepts, cc accepts.
    let texts: Vec<String> = accepted.iter().map(|c| c.written.clone()).collect();
    let valid = cc_accepts(&texts, &dir, "accepted");
    let wrong: Vec<&String> = texts
        .iter()
        .zip(&valid)
        .filter(|(_, ok)| !**ok)
        .map(|(t, _)| t)
        .collect();
    assert!(wrong.is_empty(), "accepted, but cc refuses: {wrong:#?}");
    // Their layout matches cc's too (when every type is placeable).
    let placeable: Vec<Case> = accepted
        .into_iter()
        .filter(|c| {
            abi_sizes(&c.sig, Abi::X86_64).is_some()
                && c.sig.params().iter().all(|p| {
                    !matches!(
                        p.ty.kind,
                        TypeKind::Struct { .. } | TypeKind::Union { .. } | TypeKind::Enum { .. }
                    )
                })
        })
        .collect();
    let mut bad = Vec::new();
    let mut params = 0;
    for (n, chunk) in placeable.chunks(PER_BATCH).enumerate() {
        for c in chunk {
            parse_valid(&c.written);
        }
        params += chunk.iter().map(|c| c.sig.params().len()).sum::<usize>();
        bad.extend(check_batch(chunk, Abi::X86_64, &mut rng, &dir, n).0);
    }
    // How much valid C the subset refuses (for the report only): one compile per
    // mutant of a sample, as a broken declaration can swallow the lines after it.
    let sample: Vec<&String> = refused.iter().step_by(refused.len() / 60 + 1).collect();
    let mut refused_valid = Vec::new();
    for (n, t) in sample.iter().enumerate() {
        if cc_accepts(std::slice::from_ref(*t), &dir, &format!("refused{n}"))[0] {
            refused_valid.push(format!(
                "`{}`: {}",
                t.replace('\n', " "),
                parse_params(t).unwrap_err()
            ));
        }
    }
    if std::env::var_os("ARGSTASH_SIG_SHOW").is_some() {
        println!(
            "valid C that the grammar refuses:\n{}",
            refused_valid.join("\n")
        );
    }
    println!(
        "mutants: {} refused ({} of a sample of {} valid C outside the grammar), {} accepted \
         and valid C, {} with placeable types, {params} parameters checked against cc, {} \
         disagreements",
        refused.len(),
        refused_valid.len(),
        sample.len(),
        texts.len(),
        placeable.len(),
        bad.len()
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(
        texts.len() > 50 && refused.len() > 500,
        "too few mutants of each kind"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
