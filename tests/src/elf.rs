//! Oracles read from ELF files with independent tools: program headers,
//! symbols (`nm`) and disassembly (`objdump`), so tests do not check the
//! injector with its own decoder.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

use crate::command::check_tool;

/// A `PT_LOAD` program header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadSegment {
    /// `p_offset`.
    pub offset: u64,
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_filesz`.
    pub filesz: u64,
    /// `p_memsz`.
    pub memsz: u64,
    /// `p_flags` (PF_X = 1, PF_W = 2, PF_R = 4).
    pub flags: u32,
}

/// The `PT_LOAD` segments of a 64-bit little-endian ELF file.
#[track_caller]
pub fn elf_load_segments(path: &Path) -> Vec<LoadSegment> {
    let data = fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let bad =
        |what: &str| -> ! { panic!("{}: not a usable ELF64 LE file ({what})", path.display()) };
    if data.len() < 64 || &data[..4] != b"\x7fELF" || data[4] != 2 || data[5] != 1 {
        bad("header");
    }
    let u16_at = |o: usize| u16::from_le_bytes(data[o..o + 2].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(data[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(data[o..o + 8].try_into().unwrap());
    let phoff = u64_at(0x20) as usize;
    let phentsize = u16_at(0x36) as usize;
    let phnum = u16_at(0x38) as usize;
    if phentsize < 56 || phoff + phnum * phentsize > data.len() {
        bad("program headers");
    }
    (0..phnum)
        .map(|i| phoff + i * phentsize)
        .filter(|&p| u32_at(p) == 1) // PT_LOAD
        .map(|p| LoadSegment {
            flags: u32_at(p + 4),
            offset: u64_at(p + 8),
            vaddr: u64_at(p + 16),
            filesz: u64_at(p + 32),
            memsz: u64_at(p + 40),
        })
        .collect()
}

/// `len` bytes of the file at link-time virtual address `vaddr` (as in `nm`/`objdump`).
///
/// For comparing a live process's code (at `vaddr + load_bias`) with the file on disk.
#[track_caller]
pub fn file_bytes_at_vaddr(path: &Path, vaddr: u64, len: usize) -> Vec<u8> {
    let seg = elf_load_segments(path)
        .into_iter()
        .find(|s| vaddr >= s.vaddr && vaddr + len as u64 <= s.vaddr + s.filesz)
        .unwrap_or_else(|| {
            panic!(
                "{}: {vaddr:#x}+{len} is not inside one PT_LOAD's file bytes",
                path.display()
            )
        });
    let f = fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut buf = vec![0; len];
    f.read_exact_at(&mut buf, seg.offset + (vaddr - seg.vaddr))
        .unwrap_or_else(|e| panic!("{}: read at {vaddr:#x}: {e}", path.display()));
    buf
}

/// A symbol from `nm`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Name.
    pub name: String,
    /// Link-time address (`st_value`).
    pub addr: u64,
    /// Size (`st_size`), 0 if nm shows none.
    pub size: u64,
    /// nm's type letter (`T` global text, `t` local text, `D`, `B`...).
    pub kind: char,
}

/// All defined symbols of `path` (`nm -S --defined-only`; `.symtab`, or `.dynsym` if stripped).
#[track_caller]
pub fn symbols(path: &Path) -> Vec<Symbol> {
    let mut cmd = Command::new("nm");
    cmd.args(["-S", "--defined-only"]).arg(path);
    let mut text = check_tool(&mut cmd, "list symbols");
    if text.trim().is_empty() {
        let mut cmd = Command::new("nm");
        cmd.args(["-D", "-S", "--defined-only"]).arg(path);
        text = check_tool(&mut cmd, "list dynamic symbols");
    }
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (addr, size, kind, name) = match f.as_slice() {
                [a, s, k, n] => (a, Some(s), k, n),
                [a, k, n] => (a, None, k, n),
                _ => return None,
            };
            Some(Symbol {
                name: name.to_string(),
                addr: u64::from_str_radix(addr, 16).ok()?,
                size: size.map_or(Some(0), |s| u64::from_str_radix(s, 16).ok())?,
                kind: kind.chars().next()?,
            })
        })
        .collect()
}

/// The symbol `name` of `path` (the first if several), if defined.
pub fn symbol(path: &Path, name: &str) -> Option<Symbol> {
    symbols(path).into_iter().find(|s| s.name == name)
}

/// The bytes of function `name` (`st_size` bytes from the file).
#[track_caller]
pub fn function_bytes(path: &Path, name: &str) -> Vec<u8> {
    let s = symbol(path, name).unwrap_or_else(|| panic!("no symbol {name} in {}", path.display()));
    file_bytes_at_vaddr(path, s.addr, s.size as usize)
}

/// One instruction as disassembled by objdump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Link-time address.
    pub addr: u64,
    /// Encoded bytes.
    pub bytes: Vec<u8>,
    /// AT&T text, e.g. `mov    0x2be6(%rip),%eax        # 408c <counter>`.
    pub text: String,
}

impl Insn {
    /// Encoded length.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false (objdump never prints empty instructions); for clippy.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The mnemonic, skipping prefixes such as `bnd`, `notrack`, `lock`, `rep`, `data16`, `cs`.
    pub fn mnemonic(&self) -> &str {
        const PREFIXES: &[&str] = &[
            "bnd", "notrack", "lock", "rep", "repz", "repnz", "repe", "repne", "data16", "addr32",
            "cs", "ds", "es", "ss", "fs", "gs", "rex", "rex.W",
        ];
        self.text
            .split_whitespace()
            .find(|w| !PREFIXES.contains(w))
            .unwrap_or("")
    }

    /// True for jumps, calls, returns, loops and other control transfers.
    pub fn is_control_flow(&self) -> bool {
        let m = self.mnemonic();
        m.starts_with('j')
            || m.starts_with("call")
            || m.starts_with("ret")
            || m.starts_with("loop")
            || m.starts_with("iret")
            || matches!(m, "int3" | "ud2" | "xbegin")
    }

    /// Target of a direct jump/call/loop (`jne 13f0 <bar+0x20>` -> `0x13f0`).
    pub fn branch_target(&self) -> Option<u64> {
        let m = self.mnemonic();
        if !(m.starts_with('j') || m.starts_with("call") || m.starts_with("loop") || m == "xbegin")
        {
            return None;
        }
        let mut words = self.text.split_whitespace();
        words.find(|w| *w == m)?;
        u64::from_str_radix(words.next()?, 16).ok()
    }

    /// True if an operand is addressed relative to `%rip`.
    pub fn is_rip_relative(&self) -> bool {
        self.text.contains("(%rip)")
    }
}

/// Parse `objdump -d --insn-width=16` output (instruction lines only).
fn parse_objdump(text: &str) -> Vec<Insn> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, '\t');
            let addr = f.next()?.trim().strip_suffix(':')?;
            let addr = u64::from_str_radix(addr, 16).ok()?;
            let bytes = f
                .next()?
                .split_whitespace()
                .map(|b| u8::from_str_radix(b, 16).ok())
                .collect::<Option<Vec<u8>>>()?;
            let text = f.next().unwrap_or("").trim().to_string();
            (!bytes.is_empty()).then_some(Insn { addr, bytes, text })
        })
        .collect()
}

/// Instructions of function `sym` in `path`, cut at its `st_size` (no padding).
#[track_caller]
pub fn disassemble(path: &Path, sym: &str) -> Vec<Insn> {
    let s = symbol(path, sym).unwrap_or_else(|| panic!("no symbol {sym} in {}", path.display()));
    let mut cmd = Command::new("objdump");
    cmd.args(["-d", "--insn-width=16"])
        .arg(format!("--start-address={:#x}", s.addr))
        .arg(format!("--stop-address={:#x}", s.addr + s.size.max(1)))
        .arg(path);
    let insns = parse_objdump(&check_tool(&mut cmd, "disassemble"));
    assert!(
        !insns.is_empty(),
        "objdump printed no instructions for {sym} in {}",
        path.display()
    );
    insns
}

/// Targets of every direct jump/call in the executable sections of `path`.
#[track_caller]
pub fn branch_targets(path: &Path) -> Vec<u64> {
    let mut cmd = Command::new("objdump");
    cmd.args(["-d", "--insn-width=16"]).arg(path);
    parse_objdump(&check_tool(&mut cmd, "disassemble"))
        .iter()
        .filter_map(Insn::branch_target)
        .collect()
}

/// The patch objdump predicts for `sym`: (offset of the patch: 4 after endbr64, else 0; length).
///
/// The length is that of the whole instructions covering the 5 bytes of a `jmp rel32`.
#[track_caller]
pub fn expected_patch(exe: &Path, sym: &str) -> (u64, usize) {
    let insns = disassemble(exe, sym);
    let skip = usize::from(insns[0].mnemonic() == "endbr64");
    let mut len = 0;
    for i in &insns[skip..] {
        if len >= 5 {
            break;
        }
        len += i.len();
    }
    assert!(
        len >= 5,
        "{sym} in {} is too short: {insns:#?}",
        exe.display()
    );
    (if skip == 1 { 4 } else { 0 }, len)
}

/// Target of the `jmp rel32` (`e9`) at `addr` whose bytes start `code`; `None` if it is not one.
pub fn jmp_rel32_target(addr: u64, code: &[u8]) -> Option<u64> {
    if code.len() < 5 || code[0] != 0xe9 {
        return None;
    }
    let rel = i32::from_le_bytes(code[1..5].try_into().ok()?);
    Some((addr + 5).wrapping_add_signed(i64::from(rel)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objdump_parsing() {
        let text = "\n0000000000001410 <foo>:\n    1410:\t48 83 ec 08          \tsub    $0x8,%rsp\n    1417:\te8 b4 ff ff ff       \tcall   13d0 <bar>\n    1420:\tf3 0f 1e fa          \tendbr64\n    1424:\tf2 ff e0             \tbnd jmp *%rax\n    1427:\t7f f9                \tjg     1422 <looper+0x2>\n";
        let insns = parse_objdump(text);
        assert_eq!(insns.len(), 5);
        assert_eq!(insns[0].len(), 4);
        assert!(!insns[0].is_control_flow());
        assert_eq!(insns[1].branch_target(), Some(0x13d0));
        assert_eq!(insns[2].mnemonic(), "endbr64");
        assert_eq!(insns[3].mnemonic(), "jmp");
        assert_eq!(insns[3].branch_target(), None);
        assert!(insns[3].is_control_flow());
        assert_eq!(insns[4].branch_target(), Some(0x1422));
    }
}
