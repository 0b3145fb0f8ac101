//! Call-frame information (`.eh_frame`) of a process's modules: indexed once per
//! unwinding context, evaluated with gimli.
//!
//! This is the one CFI rule evaluator of the reader. The i386 unwinder steps its
//! frames with it; the x86-64 unwinder steps with framehop (rule cache, prologue
//! analysis of the innermost frame) and uses this to move the callee-saved
//! registers to the caller, which framehop does not track.
//!
//! A module's FDEs are found through `.eh_frame_hdr`'s binary-search table when
//! the module has one (it is an index already: nothing is built), else through a
//! table of FDE start addresses read from `.eh_frame` when the context is built.

use std::ops::Range;
use std::sync::Arc;

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, EhFrameHdr, EhFrameOffset, EndianSlice,
    LittleEndian, RegisterRule, UnwindContext, UnwindSection, UnwindTableRow,
};

use crate::symbols::{Module, ProcessSymbols};

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// The rule row of one address, as gimli evaluates it.
pub(crate) type Row = UnwindTableRow<usize>;

/// Scratch space of CFI evaluation, reused from step to step.
pub(crate) type Scratch = UnwindContext<usize>;

/// One section's bytes and its svma range.
#[derive(Clone)]
pub(crate) struct SectionData {
    /// First svma.
    pub(crate) start: u64,
    /// The bytes.
    pub(crate) data: Arc<[u8]>,
}

impl SectionData {
    /// The section `name` of `m`, copied out.
    pub(crate) fn of(m: &Module, name: &str) -> Option<SectionData> {
        m.section(name).map(|(r, d)| SectionData {
            start: r.start,
            data: Arc::from(d),
        })
    }
}

/// How an address's FDE is found.
enum FdeIndex {
    /// `.eh_frame_hdr`'s table.
    Hdr(SectionData),
    /// FDEs sorted by start svma: (start, end, offset in `.eh_frame`).
    Sorted(Vec<(u64, u64, usize)>),
}

/// One module's call-frame information.
pub(crate) struct ModuleCfi {
    range: Range<u64>,
    bias: u64,
    address_size: u8,
    eh_frame: SectionData,
    bases: BaseAddresses,
    index: FdeIndex,
}

impl ModuleCfi {
    /// Indexes `eh_frame` (with `eh_frame_hdr`, if any) of module `m`, whose
    /// addresses are `address_size` bytes wide.
    pub(crate) fn new(
        m: &Module,
        eh_frame: SectionData,
        eh_frame_hdr: Option<SectionData>,
        address_size: u8,
    ) -> ModuleCfi {
        let mut bases = BaseAddresses::default().set_eh_frame(eh_frame.start);
        if let Some((r, _)) = m.section(".text") {
            bases = bases.set_text(r.start);
        }
        if let Some((r, _)) = m.section(".got") {
            bases = bases.set_got(r.start);
        }
        if let Some(h) = &eh_frame_hdr {
            bases = bases.set_eh_frame_hdr(h.start);
        }
        let mut cfi = ModuleCfi {
            range: m.range.clone(),
            bias: m.bias,
            address_size,
            eh_frame,
            bases,
            index: FdeIndex::Sorted(Vec::new()),
        };
        cfi.index = match eh_frame_hdr {
            Some(h) if cfi.hdr_has_table(&h) => FdeIndex::Hdr(h),
            _ => FdeIndex::Sorted(cfi.sorted_fdes()),
        };
        cfi
    }

    fn section(&self) -> EhFrame<Slice<'_>> {
        let mut s = EhFrame::new(&self.eh_frame.data, LittleEndian);
        s.set_address_size(self.address_size);
        s
    }

    fn hdr_has_table(&self, hdr: &SectionData) -> bool {
        EhFrameHdr::new(&hdr.data, LittleEndian)
            .parse(&self.bases, self.address_size)
            .is_ok_and(|p| p.table().is_some())
    }

    /// Every FDE's svma range and offset, sorted by start.
    fn sorted_fdes(&self) -> Vec<(u64, u64, usize)> {
        let section = self.section();
        let mut entries = section.entries(&self.bases);
        let mut out = Vec::new();
        while let Ok(Some(entry)) = entries.next() {
            if let CieOrFde::Fde(partial) = entry {
                if let Ok(fde) = partial.parse(EhFrame::cie_from_offset) {
                    out.push((fde.initial_address(), fde.end_address(), fde.offset()));
                }
            }
        }
        out.sort_unstable_by_key(|(start, _, _)| *start);
        out
    }

    /// The runtime address range of the FDE that covers runtime address `pc`.
    pub(crate) fn fde_range(&self, pc: u64) -> Option<Range<u64>> {
        let svma = pc.wrapping_sub(self.bias);
        let section = self.section();
        let (start, end) = match &self.index {
            FdeIndex::Hdr(h) => {
                let hdr = EhFrameHdr::new(&h.data, LittleEndian)
                    .parse(&self.bases, self.address_size)
                    .ok()?;
                let fde = hdr
                    .table()?
                    .fde_for_address(&section, &self.bases, svma, EhFrame::cie_from_offset)
                    .ok()?;
                (fde.initial_address(), fde.end_address())
            }
            FdeIndex::Sorted(fdes) => {
                let i = fdes.partition_point(|(start, _, _)| *start <= svma);
                let (start, end, _) = *fdes.get(i.checked_sub(1)?)?;
                (start, end)
            }
        };
        (start <= svma && svma < end)
            .then(|| start.wrapping_add(self.bias)..end.wrapping_add(self.bias))
    }

    /// The rule row for runtime address `pc`, if an FDE covers it.
    pub(crate) fn row(&self, pc: u64, scratch: &mut Scratch) -> Option<Row> {
        let svma = pc.wrapping_sub(self.bias);
        let section = self.section();
        let row = match &self.index {
            FdeIndex::Hdr(h) => {
                let hdr = EhFrameHdr::new(&h.data, LittleEndian)
                    .parse(&self.bases, self.address_size)
                    .ok()?;
                hdr.table()?
                    .unwind_info_for_address(
                        &section,
                        &self.bases,
                        scratch,
                        svma,
                        EhFrame::cie_from_offset,
                    )
                    .ok()?
            }
            FdeIndex::Sorted(fdes) => {
                let i = fdes.partition_point(|(start, _, _)| *start <= svma);
                let (_, end, offset) = *fdes.get(i.checked_sub(1)?)?;
                if svma >= end {
                    return None;
                }
                section
                    .fde_from_offset(&self.bases, EhFrameOffset(offset), EhFrame::cie_from_offset)
                    .ok()?
                    .unwind_info_for_address(&section, &self.bases, scratch, svma)
                    .ok()?
            }
        };
        Some(row.clone())
    }
}

/// The call-frame information of every module of a process that has `.eh_frame`.
pub(crate) struct CfiIndex {
    modules: Vec<ModuleCfi>,
}

impl CfiIndex {
    /// Indexes the modules of `symbols` (addresses `address_size` bytes wide).
    pub(crate) fn new(symbols: &ProcessSymbols, address_size: u8) -> CfiIndex {
        CfiIndex {
            modules: symbols
                .modules
                .iter()
                .filter_map(|m| {
                    let eh = SectionData::of(m, ".eh_frame")?;
                    let hdr = SectionData::of(m, ".eh_frame_hdr");
                    Some(ModuleCfi::new(m, eh, hdr, address_size))
                })
                .collect(),
        }
    }

    /// An index of the given modules' CFI.
    pub(crate) fn from_modules(modules: Vec<ModuleCfi>) -> CfiIndex {
        CfiIndex { modules }
    }

    /// The rule row for runtime address `pc`, from the module whose range holds it.
    pub(crate) fn row(&self, pc: u64, scratch: &mut Scratch) -> Option<Row> {
        self.modules
            .iter()
            .find(|m| m.range.contains(&pc))?
            .row(pc, scratch)
    }
}

/// A register's value in the caller, by a row's rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restored {
    /// The value.
    Value(u64),
    /// The rule says the register has no value (e.g. `_start`'s return address).
    Undefined,
    /// The rule could not be evaluated (unreadable memory, an expression, an unknown register).
    Unknown,
}

/// Evaluates rows over registers `mask` wide (`u32::MAX` for i386): register
/// values come from `regs`, memory words from `read`.
pub(crate) struct Eval<'a> {
    /// All-ones in the address width.
    pub(crate) mask: u64,
    /// A register of the frame by DWARF number, if known.
    pub(crate) regs: &'a dyn Fn(u16) -> Option<u64>,
    /// One address-sized word of memory.
    pub(crate) read: &'a dyn Fn(u64) -> Option<u64>,
}

impl Eval<'_> {
    fn offset(&self, base: u64, offset: i64) -> u64 {
        base.wrapping_add_signed(offset) & self.mask
    }

    /// The frame's CFA (`None` for an expression or an unknown register).
    pub(crate) fn cfa(&self, row: &Row) -> Option<u64> {
        match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => {
                Some(self.offset((self.regs)(register.0)?, *offset))
            }
            CfaRule::Expression(_) => None,
        }
    }

    /// Register `reg` in the caller, given the frame's CFA and the register's
    /// value in the frame (`current`, kept by "same value" and by no rule).
    pub(crate) fn register(&self, row: &Row, reg: u16, cfa: u64, current: Option<u64>) -> Restored {
        let known = |v: Option<u64>| v.map_or(Restored::Unknown, Restored::Value);
        match row.register(gimli::Register(reg)) {
            None | Some(RegisterRule::SameValue) => known(current),
            Some(RegisterRule::Undefined) => Restored::Undefined,
            Some(RegisterRule::Offset(off)) => known((self.read)(self.offset(cfa, off))),
            Some(RegisterRule::ValOffset(off)) => Restored::Value(self.offset(cfa, off)),
            Some(RegisterRule::Register(from)) => known((self.regs)(from.0)),
            Some(_) => Restored::Unknown,
        }
    }
}
