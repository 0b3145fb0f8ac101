//! A small ELF symbol file describing hook code for debuggers.
//!
//! The file is an `ET_EXEC` x86-64 ELF without program headers: one `SHT_NOBITS`
//! code section per hook at the hook's real address (trampoline and relocated
//! prologue), `FUNC` symbols `argstash_trampoline.NAME` and `argstash_prologue.NAME`,
//! and an `.eh_frame` section holding every hook's call-frame information (absolute
//! addresses, so the section's own address does not matter). Loaded into gdb with
//! `add-symbol-file FILE` (no address: the sections carry their own), it names the
//! trampoline frames and unwinds through them.

/// One hook as the symbol file describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolFileHook {
    /// Function name.
    pub name: String,
    /// Start of the hook's code (trampoline) and length of its slot.
    pub code: (u64, u64),
    /// Trampoline address and length.
    pub trampoline: (u64, u64),
    /// Relocated prologue address and length.
    pub relocated: (u64, u64),
    /// The hook's `.eh_frame` bytes (CIE, FDEs, optional zero terminator).
    pub eh_frame: Vec<u8>,
}

const SHT_PROGBITS: u32 = 1;
const SHT_SYMTAB: u32 = 2;
const SHT_STRTAB: u32 = 3;
const SHT_NOBITS: u32 = 8;
const SHF_ALLOC: u64 = 2;
const SHF_EXECINSTR: u64 = 4;

struct Section {
    name: u32,
    kind: u32,
    flags: u64,
    addr: u64,
    offset: u64,
    size: u64,
    link: u32,
    info: u32,
    align: u64,
    entsize: u64,
}

fn add_str(table: &mut Vec<u8>, s: &str) -> u32 {
    let at = table.len() as u32;
    table.extend_from_slice(s.as_bytes());
    table.push(0);
    at
}

fn pad_to(buf: &mut Vec<u8>, align: usize) {
    while !buf.len().is_multiple_of(align) {
        buf.push(0);
    }
}

/// `.eh_frame` blobs joined into one section: each without its terminator, one at the end.
fn joined_eh_frame(hooks: &[SymbolFileHook]) -> Vec<u8> {
    let mut out = Vec::new();
    for h in hooks {
        let mut blob = h.eh_frame.as_slice();
        if blob.ends_with(&[0; 4]) {
            blob = &blob[..blob.len() - 4];
        }
        out.extend_from_slice(blob);
    }
    out.extend_from_slice(&[0; 4]);
    out
}

/// Builds the ELF bytes; `eh_frame_addr` is the address given to the `.eh_frame` section.
pub fn symbol_file(hooks: &[SymbolFileHook], eh_frame_addr: u64) -> Vec<u8> {
    let mut shstr = vec![0u8];
    let mut strtab = vec![0u8];
    let mut sections = vec![Section {
        name: 0,
        kind: 0,
        flags: 0,
        addr: 0,
        offset: 0,
        size: 0,
        link: 0,
        info: 0,
        align: 0,
        entsize: 0,
    }];
    let mut body = vec![0u8; 64];

    let text_name = add_str(&mut shstr, ".text");
    for h in hooks {
        sections.push(Section {
            name: text_name,
            kind: SHT_NOBITS,
            flags: SHF_ALLOC | SHF_EXECINSTR,
            addr: h.code.0,
            offset: body.len() as u64,
            size: h.code.1,
            link: 0,
            info: 0,
            align: 16,
            entsize: 0,
        });
    }

    let eh = joined_eh_frame(hooks);
    pad_to(&mut body, 8);
    sections.push(Section {
        name: add_str(&mut shstr, ".eh_frame"),
        kind: SHT_PROGBITS,
        flags: SHF_ALLOC,
        addr: eh_frame_addr,
        offset: body.len() as u64,
        size: eh.len() as u64,
        link: 0,
        info: 0,
        align: 8,
        entsize: 0,
    });
    body.extend_from_slice(&eh);

    // Symbols: the null symbol, then two global functions per hook.
    let mut symtab = vec![0u8; 24];
    for (i, h) in hooks.iter().enumerate() {
        let shndx = (1 + i) as u16;
        for (prefix, (addr, len)) in [
            ("argstash_trampoline", h.trampoline),
            ("argstash_prologue", h.relocated),
        ] {
            let name = add_str(&mut strtab, &format!("{prefix}.{}", h.name));
            symtab.extend_from_slice(&name.to_le_bytes());
            symtab.push(0x12); // STB_GLOBAL, STT_FUNC
            symtab.push(0);
            symtab.extend_from_slice(&shndx.to_le_bytes());
            symtab.extend_from_slice(&addr.to_le_bytes());
            symtab.extend_from_slice(&len.to_le_bytes());
        }
    }
    let strtab_index = sections.len() as u32 + 1;
    pad_to(&mut body, 8);
    sections.push(Section {
        name: add_str(&mut shstr, ".symtab"),
        kind: SHT_SYMTAB,
        flags: 0,
        addr: 0,
        offset: body.len() as u64,
        size: symtab.len() as u64,
        link: strtab_index,
        info: 1,
        align: 8,
        entsize: 24,
    });
    body.extend_from_slice(&symtab);
    sections.push(Section {
        name: add_str(&mut shstr, ".strtab"),
        kind: SHT_STRTAB,
        flags: 0,
        addr: 0,
        offset: body.len() as u64,
        size: strtab.len() as u64,
        link: 0,
        info: 0,
        align: 1,
        entsize: 0,
    });
    body.extend_from_slice(&strtab);
    let shstr_name = add_str(&mut shstr, ".shstrtab");
    sections.push(Section {
        name: shstr_name,
        kind: SHT_STRTAB,
        flags: 0,
        addr: 0,
        offset: body.len() as u64,
        size: shstr.len() as u64,
        link: 0,
        info: 0,
        align: 1,
        entsize: 0,
    });
    body.extend_from_slice(&shstr);
    pad_to(&mut body, 8);
    let shoff = body.len() as u64;
    for s in &sections {
        body.extend_from_slice(&s.name.to_le_bytes());
        body.extend_from_slice(&s.kind.to_le_bytes());
        body.extend_from_slice(&s.flags.to_le_bytes());
        body.extend_from_slice(&s.addr.to_le_bytes());
        body.extend_from_slice(&s.offset.to_le_bytes());
        body.extend_from_slice(&s.size.to_le_bytes());
        body.extend_from_slice(&s.link.to_le_bytes());
        body.extend_from_slice(&s.info.to_le_bytes());
        body.extend_from_slice(&s.align.to_le_bytes());
        body.extend_from_slice(&s.entsize.to_le_bytes());
    }

    let mut h = [0u8; 64];
    h[0..4].copy_from_slice(b"\x7fELF");
    h[4] = 2; // ELFCLASS64
    h[5] = 1; // little-endian
    h[6] = 1; // EV_CURRENT
    h[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    h[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    h[20..24].copy_from_slice(&1u32.to_le_bytes());
    h[40..48].copy_from_slice(&shoff.to_le_bytes());
    h[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    h[58..60].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
    h[60..62].copy_from_slice(&(sections.len() as u16).to_le_bytes());
    h[62..64].copy_from_slice(&(sections.len() as u16 - 1).to_le_bytes()); // e_shstrndx
    body[..64].copy_from_slice(&h);
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u16_at(b: &[u8], at: usize) -> u16 {
        u16::from_le_bytes([b[at], b[at + 1]])
    }
    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }
    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }
    fn cstr(b: &[u8], at: usize) -> String {
        let end = b[at..].iter().position(|c| *c == 0).unwrap();
        String::from_utf8(b[at..at + end].to_vec()).unwrap()
    }

    #[test]
    fn sections_and_symbols_parse_back() {
        let hooks = vec![
            SymbolFileHook {
                name: "bar".into(),
                code: (0x5000, 0x100),
                trampoline: (0x5000, 0x30),
                relocated: (0x5080, 0xe),
                eh_frame: vec![1, 2, 3, 4, 0, 0, 0, 0],
            },
            SymbolFileHook {
                name: "foo".into(),
                code: (0x5100, 0x100),
                trampoline: (0x5100, 0x30),
                relocated: (0x5180, 0xe),
                eh_frame: vec![5, 6, 7, 8, 0, 0, 0, 0],
            },
        ];
        let elf = symbol_file(&hooks, 0x9000);
        assert_eq!(&elf[..4], b"\x7fELF");
        let shoff = u64_at(&elf, 40) as usize;
        let shnum = u16_at(&elf, 60) as usize;
        let shstrndx = u16_at(&elf, 62) as usize;
        let sh = |i: usize| shoff + 64 * i;
        let shstr_off = u64_at(&elf, sh(shstrndx) + 24) as usize;
        let names: Vec<String> = (0..shnum)
            .map(|i| cstr(&elf, shstr_off + u32_at(&elf, sh(i)) as usize))
            .collect();
        assert_eq!(
            names,
            [
                "",
                ".text",
                ".text",
                ".eh_frame",
                ".symtab",
                ".strtab",
                ".shstrtab"
            ]
        );
        assert_eq!(u64_at(&elf, sh(2) + 16), 0x5100);
        let eh_off = u64_at(&elf, sh(3) + 24) as usize;
        let eh_len = u64_at(&elf, sh(3) + 32) as usize;
        assert_eq!(
            &elf[eh_off..eh_off + eh_len],
            &[1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0]
        );
        let sym_off = u64_at(&elf, sh(4) + 24) as usize;
        let str_off = u64_at(&elf, sh(5) + 24) as usize;
        let syms: Vec<(String, u64, u64, u16)> = (1..5)
            .map(|i| {
                let s = sym_off + 24 * i;
                (
                    cstr(&elf, str_off + u32_at(&elf, s) as usize),
                    u64_at(&elf, s + 8),
                    u64_at(&elf, s + 16),
                    u16_at(&elf, s + 6),
                )
            })
            .collect();
        assert_eq!(syms[0], ("argstash_trampoline.bar".into(), 0x5000, 0x30, 1));
        assert_eq!(syms[3], ("argstash_prologue.foo".into(), 0x5180, 0xe, 2));
    }
}
