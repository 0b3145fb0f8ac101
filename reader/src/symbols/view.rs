//! A lean read of the parts of an ELF file that a symbol table needs.
//!
//! goblin's `Elf::parse` also decodes every relocation and builds a sorted index
//! of each string table. For a library with a large `.symtab` (a libpython built
//! with symbols has 14,000 entries and 380 KB of names) that was most of the time
//! a cold `argstash bt` spent on symbols. [`ElfView`] uses goblin's header,
//! program-header and section-header parsers and its lazy symbol tables, and reads
//! each name straight out of its string section when it is asked for.

use goblin::container::Ctx;
use goblin::elf::dynamic::Dynamic;
use goblin::elf::program_header::ProgramHeader;
use goblin::elf::section_header::{SectionHeader, SHT_DYNSYM, SHT_NOBITS, SHT_SYMTAB};
use goblin::elf::sym::Symtab;
use goblin::elf::symver::{VerdefSection, VersymSection};
use goblin::elf::Elf;

use crate::debugfile::c_string;

/// A symbol section and the string section its names are in.
pub(super) struct SymbolSection<'a> {
    /// The symbols (decoded one at a time while iterating).
    pub syms: Symtab<'a>,
    /// The bytes of the linked string table.
    pub names: &'a [u8],
}

impl<'a> SymbolSection<'a> {
    /// The name at `offset` of the string table, if it is in bounds and UTF-8.
    pub fn name(&self, offset: usize) -> Option<&'a str> {
        c_string(self.names, offset)
    }
}

/// The headers, symbol tables, version sections and `DT_SONAME` of one ELF image.
pub(super) struct ElfView<'a> {
    /// True for ELFCLASS64.
    pub is_64: bool,
    /// All program headers.
    pub program_headers: Vec<ProgramHeader>,
    /// All section headers (empty when the file has none).
    pub section_headers: Vec<SectionHeader>,
    /// The section-name string table.
    section_names: &'a [u8],
    /// `.symtab` and `.strtab`, when present.
    pub symtab: Option<SymbolSection<'a>>,
    /// `.dynsym` and `.dynstr`, when present.
    pub dynsym: Option<SymbolSection<'a>>,
    /// `.gnu.version`, when present.
    pub versym: Option<VersymSection<'a>>,
    /// `.gnu.version_d`, when present.
    pub verdef: Option<VerdefSection<'a>>,
    /// The shared library's `DT_SONAME`.
    pub soname: Option<&'a str>,
}

impl<'a> ElfView<'a> {
    /// Reads the view out of `bytes`; only the ELF and program headers must be sound,
    /// anything else that is malformed is left out.
    pub fn parse(bytes: &'a [u8]) -> Result<ElfView<'a>, goblin::error::Error> {
        let header = Elf::parse_header(bytes)?;
        let ctx = Ctx::new(header.container()?, header.endianness()?);
        let program_headers =
            ProgramHeader::parse(bytes, header.e_phoff as usize, header.e_phnum as usize, ctx)?;
        let section_headers =
            SectionHeader::parse(bytes, header.e_shoff as usize, header.e_shnum as usize, ctx)
                .unwrap_or_default();
        let linked = |sh: &SectionHeader| {
            section_headers
                .get(sh.sh_link as usize)
                .and_then(|link| section_bytes(bytes, link))
        };
        let section_names = section_headers
            .get(header.e_shstrndx as usize)
            .and_then(|sh| section_bytes(bytes, sh))
            .unwrap_or_default();
        let symbol_section = |kind: u32| {
            let sh = section_headers.iter().rfind(|sh| sh.sh_type == kind)?;
            let count = sh.sh_size.checked_div(sh.sh_entsize)?;
            let syms = Symtab::parse(
                bytes,
                sh.sh_offset as usize,
                usize::try_from(count).ok()?,
                ctx,
            )
            .ok()?;
            Some(SymbolSection {
                syms,
                names: linked(sh)?,
            })
        };
        let symtab = symbol_section(SHT_SYMTAB);
        let mut dynsym = symbol_section(SHT_DYNSYM);

        let dynamic = Dynamic::parse(bytes, &program_headers, ctx).ok().flatten();
        let dynstr = dynamic.as_ref().and_then(|d| {
            let start = d.info.strtab;
            bytes.get(start..start.checked_add(d.info.strsz)?)
        });
        if dynsym.is_none() {
            // No section headers: `.dynstr` follows `.dynsym` in every linker's layout,
            // so the symbols are the entries between DT_SYMTAB and DT_STRTAB.
            dynsym = dynamic.as_ref().and_then(|d| {
                let entry = if ctx.is_big() { 24 } else { 16 };
                let count = d.info.strtab.checked_sub(d.info.symtab)? / entry;
                Some(SymbolSection {
                    syms: Symtab::parse(bytes, d.info.symtab, count, ctx).ok()?,
                    names: dynstr?,
                })
            });
        }
        let soname = dynamic
            .as_ref()
            .filter(|d| d.info.soname != 0)
            .and_then(|d| c_string(dynstr?, d.info.soname));

        Ok(ElfView {
            is_64: ctx.is_big(),
            versym: VersymSection::parse(bytes, &section_headers, ctx)
                .ok()
                .flatten(),
            verdef: VerdefSection::parse(bytes, &section_headers, ctx)
                .ok()
                .flatten(),
            program_headers,
            section_headers,
            section_names,
            symtab,
            dynsym,
            soname,
        })
    }

    /// The name of section `sh` (empty when it has none or it is unreadable).
    pub fn section_name(&self, sh: &SectionHeader) -> &'a str {
        c_string(self.section_names, sh.sh_name).unwrap_or("")
    }
}

/// The contents of a section that has bytes in the file, if they are in bounds.
fn section_bytes<'a>(bytes: &'a [u8], sh: &SectionHeader) -> Option<&'a [u8]> {
    if sh.sh_type == SHT_NOBITS {
        return None;
    }
    let start = usize::try_from(sh.sh_offset).ok()?;
    let len = usize::try_from(sh.sh_size).ok()?;
    bytes.get(start..start.checked_add(len)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_bounded_and_checked() {
        let table = b"\0main\0bad\xff\0open";
        assert_eq!(c_string(table, 1), Some("main"));
        assert_eq!(c_string(table, 3), Some("in"));
        assert_eq!(c_string(table, 0), Some(""));
        assert_eq!(c_string(table, 6), None, "invalid UTF-8");
        assert_eq!(c_string(table, 11), None, "no terminating NUL");
        assert_eq!(c_string(table, 99), None, "out of bounds");
    }

    /// Compares the view of the file at `path` with goblin's full parse of it.
    fn matches_goblin(path: &std::path::Path) {
        let bytes = std::fs::read(path).unwrap();
        let view = ElfView::parse(&bytes).unwrap();
        let elf = Elf::parse(&bytes).unwrap();
        assert_eq!(view.is_64, elf.is_64);
        assert_eq!(view.program_headers.len(), elf.program_headers.len());
        let names: Vec<&str> = view
            .section_headers
            .iter()
            .map(|sh| view.section_name(sh))
            .collect();
        let expected: Vec<&str> = elf
            .section_headers
            .iter()
            .map(|sh| elf.shdr_strtab.get_at(sh.sh_name).unwrap_or(""))
            .collect();
        assert_eq!(names, expected);
        let symtab_len = view.symtab.as_ref().map_or(0, |t| t.syms.len());
        assert_eq!(symtab_len, elf.syms.len());
        if let Some(symtab) = &view.symtab {
            let ours: Vec<Option<&str>> =
                symtab.syms.iter().map(|s| symtab.name(s.st_name)).collect();
            let theirs: Vec<Option<&str>> = elf
                .syms
                .iter()
                .map(|s| elf.strtab.get_at(s.st_name))
                .collect();
            assert_eq!(ours, theirs);
        }
        let dynsym = view.dynsym.as_ref().map_or(0, |d| d.syms.len());
        assert_eq!(dynsym, elf.dynsyms.len());
        assert_eq!(view.soname, elf.soname);
        assert_eq!(view.versym.is_some(), elf.versym.is_some());
        assert_eq!(view.verdef.is_some(), elf.verdef.is_some());
    }

    #[test]
    fn view_of_this_test_binary_matches_goblin() {
        matches_goblin(&std::env::current_exe().unwrap());
    }

    #[test]
    fn view_of_the_c_library_matches_goblin() {
        // The C library has a soname, symbol versions and (on Debian) no .symtab.
        let libc = ["/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"]
            .into_iter()
            .map(std::path::Path::new)
            .find(|p| p.exists())
            .expect("a C library");
        matches_goblin(libc);
    }
}
