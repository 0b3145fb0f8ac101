//! Tests of the shared algorithm, and the synthetic processes every unwinder
//! test builds on: a module made from a tiny ELF image whose `.eh_frame` is
//! written with `gimli::write`, hooks in an arena, and a stack of bytes.

use std::collections::BTreeMap;
use std::io;

use gimli::write::{
    Address, CallFrameInstruction, CommonInformationEntry, EhFrame, EndianVec,
    FrameDescriptionEntry, FrameTable,
};
use gimli::{Encoding, Format, LittleEndian, Register};
use trampolines::arena::{Arena, ArenaHeader, HookRecord, HookState};
use trampolines::x86_64::TrampolineOffsets;

use super::*;
use crate::memory::MemoryError;
use crate::procfs::Perms;
use crate::symbols::Module;

/// Memory made of byte regions at addresses; anything else is unreadable.
#[derive(Default)]
pub(crate) struct Mem {
    regions: BTreeMap<u64, Vec<u8>>,
}

impl Mem {
    /// Places `bytes` at `addr`.
    pub(crate) fn put(&mut self, addr: u64, bytes: &[u8]) {
        self.regions.insert(addr, bytes.to_vec());
    }

    /// Places 64-bit words from `addr` on.
    pub(crate) fn words64(&mut self, addr: u64, words: &[u64]) {
        let b: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        self.put(addr, &b);
    }

    /// Places 32-bit words from `addr` on.
    pub(crate) fn words32(&mut self, addr: u64, words: &[u32]) {
        let b: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        self.put(addr, &b);
    }
}

impl Memory for Mem {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let fail = || MemoryError::Read {
            addr,
            len: buf.len(),
            source: io::Error::other("not in the test's memory"),
        };
        let (start, bytes) = self.regions.range(..=addr).next_back().ok_or_else(fail)?;
        let off = (addr - start) as usize;
        let src = bytes.get(off..off + buf.len()).ok_or_else(fail)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// One function's CFI: its svma range and rows (offset into it, instruction).
pub(crate) struct Fde {
    pub(crate) start: u64,
    pub(crate) len: u32,
    pub(crate) rows: Vec<(u32, CallFrameInstruction)>,
}

/// `.eh_frame` bytes with one CIE (CFA = sp + word, return address just below
/// it) and `fdes`; `wide` for x86-64, else i386.
pub(crate) fn eh_frame(wide: bool, fdes: Vec<Fde>) -> Vec<u8> {
    let (size, sp, ra) = if wide {
        (8u8, Register(7), Register(16))
    } else {
        (4u8, Register(4), Register(8))
    };
    let encoding = Encoding {
        format: Format::Dwarf32,
        version: 1,
        address_size: size,
    };
    let word = i32::from(size);
    let mut cie = CommonInformationEntry::new(encoding, 1, -(size as i8), ra);
    cie.add_instruction(CallFrameInstruction::Cfa(sp, word));
    cie.add_instruction(CallFrameInstruction::Offset(ra, -word));
    let mut table = FrameTable::default();
    let cie_id = table.add_cie(cie);
    for f in fdes {
        let mut fde = FrameDescriptionEntry::new(Address::Constant(f.start), f.len);
        for (at, insn) in f.rows {
            fde.add_instruction(at, insn);
        }
        table.add_fde(cie_id, fde);
    }
    let mut out = EhFrame(EndianVec::new(LittleEndian));
    table.write_eh_frame(&mut out).expect("write .eh_frame");
    let mut bytes = out.0.into_vec();
    bytes.extend_from_slice(&[0; 4]);
    bytes
}

/// Svma of the test module's `.text` and its length.
pub(crate) const TEXT: u64 = 0x1000;
pub(crate) const TEXT_LEN: u64 = 0x1000;
/// Svma of the test module's `.eh_frame`.
const EH_FRAME: u64 = 0x2000;

/// A minimal ELF shared object (64-bit when `wide`): one `PT_LOAD` covering the
/// file at svma 0, and the sections `.text` (at [`TEXT`]), `.eh_frame` and
/// `.shstrtab`. File offsets equal svmas.
pub(crate) fn elf_image(wide: bool, eh_frame: &[u8]) -> Vec<u8> {
    let word = |out: &mut Vec<u8>, v: u64| {
        if wide {
            out.extend(v.to_le_bytes());
        } else {
            out.extend((v as u32).to_le_bytes());
        }
    };
    let (ehsize, phentsize, shentsize) = if wide { (64, 56, 64) } else { (52, 32, 40) };
    let shstrtab = b"\0.text\0.eh_frame\0.shstrtab\0";
    let mut body = vec![0xccu8; (EH_FRAME - TEXT) as usize];
    body.extend_from_slice(eh_frame);
    let strtab_at = TEXT + body.len() as u64;
    body.extend_from_slice(shstrtab);
    body.resize(body.len().div_ceil(8) * 8, 0);
    let shoff = TEXT + body.len() as u64;
    let file_len = shoff + 4 * shentsize;

    let mut out = b"\x7fELF".to_vec();
    out.extend([if wide { 2 } else { 1 }, 1, 1, 0]);
    out.resize(16, 0);
    out.extend(3u16.to_le_bytes()); // ET_DYN
    out.extend((if wide { 62u16 } else { 3 }).to_le_bytes());
    out.extend(1u32.to_le_bytes());
    word(&mut out, 0); // e_entry
    word(&mut out, ehsize); // e_phoff
    word(&mut out, shoff);
    out.extend(0u32.to_le_bytes());
    out.extend((ehsize as u16).to_le_bytes());
    out.extend((phentsize as u16).to_le_bytes());
    out.extend(1u16.to_le_bytes());
    out.extend((shentsize as u16).to_le_bytes());
    out.extend(4u16.to_le_bytes());
    out.extend(3u16.to_le_bytes());
    // PT_LOAD, r-x, the whole file at svma 0.
    let flags = 5u32;
    out.extend(1u32.to_le_bytes());
    if wide {
        out.extend(flags.to_le_bytes());
    }
    for v in [0, 0, 0, file_len, file_len] {
        word(&mut out, v);
    }
    if !wide {
        out.extend(flags.to_le_bytes());
    }
    word(&mut out, 0x1000);
    out.resize(TEXT as usize, 0);
    out.extend(body);
    // Section headers: null, .text, .eh_frame, .shstrtab.
    let sections = [
        (0u32, 0u32, 0u64, 0u64, 0u64),
        (1, 1, 6, TEXT, TEXT_LEN),
        (7, 1, 2, EH_FRAME, eh_frame.len() as u64),
        (17, 3, 0, strtab_at, shstrtab.len() as u64),
    ];
    for (name, ty, flags, addr, size) in sections {
        out.extend(name.to_le_bytes());
        out.extend(ty.to_le_bytes());
        word(&mut out, flags);
        word(&mut out, if ty == 3 { 0 } else { addr });
        word(&mut out, addr); // sh_offset = svma
        word(&mut out, size);
        out.extend(0u32.to_le_bytes());
        out.extend(0u32.to_le_bytes());
        word(&mut out, 1);
        word(&mut out, 0);
    }
    assert_eq!(out.len() as u64, file_len);
    out
}

/// The test module loaded at `base` (its bias), named without a path so no
/// debug info is looked for.
pub(crate) fn module(wide: bool, base: u64, eh_frame: &[u8]) -> Module {
    let image = elf_image(wide, eh_frame);
    let map = MapEntry {
        start: base,
        end: base + (image.len() as u64).div_ceil(0x1000) * 0x1000,
        perms: Perms {
            read: true,
            exec: true,
            private: true,
            ..Perms::default()
        },
        offset: 0,
        inode: 1,
        path: "unwind-test".into(),
    };
    Module::from_image("unwind-test", image, &[&map]).expect("test module")
}

/// A hook of the function at `function` (`name`), its trampoline at `trampoline`.
pub(crate) fn hook(name: &str, function: u64, trampoline: u64) -> HookRecord {
    HookRecord {
        state: HookState::Active,
        endbr64: false,
        function,
        function_size: 0x40,
        patch_addr: function,
        original: vec![0x55, 0x48, 0x89, 0xe5, 0x53],
        layout_version: 1,
        stack_words: 0,
        xmm: false,
        variadic: false,
        trampoline,
        trampoline_len: 80,
        offsets: TrampolineOffsets {
            after_push_rbp: 1,
            after_mov_rbp: 4,
            after_call: 70,
            ret: 72,
        },
        relocated: trampoline + 0x60,
        relocated_len: 10,
        map: vec![(0, 0), (1, 1), (4, 4), (5, 5)],
        installed_ns: 0,
        name: name.into(),
        module: "unwind-test".into(),
    }
}

/// An arena holding `hooks` (anywhere: the unwinder only reads its records).
pub(crate) fn arena(hooks: Vec<HookRecord>) -> Arena {
    let n = hooks.len();
    Arena {
        header: ArenaHeader::new(0x7e00_0000, 16),
        records: hooks,
        signatures: vec![None; n],
    }
}

/// An unwinding scope over `modules` and `arenas`.
pub(crate) fn scope(modules: Vec<Module>, arenas: Vec<Arena>) -> Scope {
    let symbols = ProcessSymbols::from_modules(1, modules);
    let debug = ModulesDebug::new(symbols.modules.len(), DwarfCache::new());
    Scope {
        symbols,
        arenas,
        debug,
    }
}

/// The frames, states and stop reason of one walk over architecture `A`.
pub(crate) fn walk<A: ArchUnwind>(
    scope: &Scope,
    regs: &DwarfRegisters,
    mem: &dyn Memory,
    show_trampolines: bool,
) -> walk::Walked {
    let arch = A::new(&scope.symbols);
    let mut cache = A::Cache::default();
    let walker = walk::Walker {
        arch: &arch,
        scope,
        mem,
    };
    walker.frames(&mut cache, A::initial(regs), show_trampolines)
}

/// The pcs of `frames`.
pub(crate) fn pcs(frames: &[Frame]) -> Vec<u64> {
    frames.iter().map(|f| f.pc).collect()
}

#[test]
fn stop_reasons_read_as_before() {
    for e in [
        framehop::Error::CouldNotReadStack(0x7ffd_1234),
        framehop::Error::FramepointerUnwindingMovedBackwards,
        framehop::Error::DidNotAdvance,
        framehop::Error::IntegerOverflow,
        framehop::Error::ReturnAddressIsNull,
    ] {
        assert_eq!(StopReason::from(e).to_string(), e.to_string());
    }
    assert_eq!(
        StopReason::FrameLimit {
            steps: MAX_FRAMES,
            shown: 200
        }
        .to_string(),
        "stopped after 256 unwind steps (200 frames shown; each hooked call takes two steps)"
    );
    assert_eq!(
        StopReason::StackDidNotGrow {
            caller_sp: 0xff00,
            callee_sp: 0xff10
        }
        .to_string(),
        "the stack pointer did not grow (0xff00 after 0xff10)"
    );
    assert_eq!(StopReason::Text("as sent".into()).to_string(), "as sent");
}

#[test]
fn a_frame_pointer_loop_stops_at_the_frame_limit() {
    // No module: framehop follows rbp. Each frame's saved rbp points 16 bytes
    // higher and its return address is code nobody describes.
    let base = 0x7000_0000u64;
    let mut mem = Mem::default();
    let words: Vec<u64> = (0..2 * MAX_FRAMES as u64 + 4)
        .map(|i| {
            if i % 2 == 0 {
                base + 8 * (i + 2)
            } else {
                0x40_1000 + i
            }
        })
        .collect();
    mem.words64(base, &words);
    // The innermost frame (no CFI) just returns: its return address is at rsp.
    mem.words64(base - 0x20, &[0x40_0200]);
    let s = scope(Vec::new(), Vec::new());
    let mut regs = [None; 17];
    regs[16] = Some(0x40_0100);
    regs[7] = Some(base - 0x20);
    regs[6] = Some(base);
    let (frames, states, stop) = walk::<x86_64::X86_64>(&s, &regs, &mem, false);
    assert_eq!(frames.len(), MAX_FRAMES);
    assert_eq!(states.len(), MAX_FRAMES);
    assert_eq!(
        stop,
        Some(StopReason::FrameLimit {
            steps: MAX_FRAMES,
            shown: MAX_FRAMES
        })
    );
}

#[test]
fn the_unwinder_entry_serves_both_architectures() {
    let s = |arch| {
        Unwinder::new(
            arch,
            ProcessSymbols::from_modules(1, Vec::new()),
            Vec::new(),
        )
    };
    assert_eq!(s(Arch::X86_64).arch(), Arch::X86_64);
    assert_eq!(s(Arch::I386).arch(), Arch::I386);
    // An i386 thread stopped at a pc no module holds, with a null frame pointer:
    // one frame, and the end of the stack.
    let mut regs = [None; 17];
    regs[8] = Some(0x0804_9000);
    regs[4] = Some(0xffff_d000);
    regs[5] = Some(0);
    let (frames, stop) = s(Arch::I386).unwind(&regs, &Mem::default(), false);
    assert_eq!(pcs(&frames), [0x0804_9000]);
    assert_eq!(stop, None);
}
