//! The XSAVE layout of this machine, and the extended-state image a signal frame
//! carries for a thread.
//!
//! ptrace's `NT_X86_XSTATE` and the kernel's signal frames both use the standard
//! (non-compacted) XSAVE format: the 512-byte legacy FXSAVE region, the 64-byte
//! header (`XSTATE_BV`, the components in use), then each state component at a fixed
//! offset. Which components exist is XCR0 (read with `xgetbv`; the kernel sets it the
//! same for every process); where each sits and how big it is, CPUID leaf 0xD.
//!
//! `rt_sigreturn` only restores the extended state from a frame whose software bytes
//! (`struct _fpx_sw_bytes` in the FXSAVE region's reserved tail) describe an area no
//! bigger than the thread's own buffer in the kernel (`fpstate->user_size`). A thread
//! that never used a dynamically enabled feature (AMX tile data, enabled per process
//! through `arch_prctl` and armed lazily through XFD) has a buffer that stops before
//! that feature, although ptrace hands out an image sized for every feature. A frame
//! sized like that image is refused: the kernel then restores only x87/SSE and resets
//! the rest (AVX upper halves, AVX-512 opmasks and zmm16-31) to their initial state.
//! So the frame carries the image cut at the end of the last component the thread
//! can have: every enabled component except the XFD-capable ones it is not using.

use std::sync::OnceLock;

/// Bytes of the legacy FXSAVE region.
pub const LEGACY_LEN: usize = 512;
/// Bytes of the XSAVE header after it.
pub const HEADER_LEN: usize = 64;
/// Offset of the header's `XSTATE_BV` (the components whose state the image holds).
pub const XSTATE_BV_AT: usize = LEGACY_LEN;
/// Offset of the software-reserved bytes in the FXSAVE region (`_fpx_sw_bytes` in a
/// signal frame; ptrace puts XCR0 in their first word).
pub const SW_RESERVED_AT: usize = 464;
/// `FP_XSTATE_MAGIC1`, first word of the software bytes of a frame with extended state.
pub const FP_XSTATE_MAGIC1: u32 = 0x4650_5853;
/// `FP_XSTATE_MAGIC2`, the word right after the extended area of a signal frame.
pub const FP_XSTATE_MAGIC2: u32 = 0x4650_5845;
/// The smallest area with extended state: legacy region and header.
pub const MIN_AREA: usize = LEGACY_LEN + HEADER_LEN;

/// One state component beyond x87 and SSE (bit 2 and up), from CPUID leaf 0xD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Component {
    /// Its bit in XCR0 and `XSTATE_BV`.
    pub bit: u32,
    /// Offset in the standard format.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
    /// Whether XFD can arm it (the kernel may leave it out of a thread's buffer).
    pub xfd: bool,
}

impl Component {
    /// First byte past the component.
    pub fn end(&self) -> usize {
        self.offset as usize + self.size as usize
    }
}

/// Why CPUID's description of the XSAVE layout cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// XCR0 lacks x87 or SSE, which every XSAVE-enabled x86-64 kernel turns on.
    #[error("XCR0 {xcr0:#x} lacks x87 or SSE state")]
    NoLegacy {
        /// The XCR0 read.
        xcr0: u64,
    },
    /// A component enabled in XCR0 has no usable size or offset.
    #[error("CPUID leaf 0xD gives state component {bit} size {size} at offset {offset}")]
    BadComponent {
        /// Its bit.
        bit: u32,
        /// The size CPUID gave.
        size: u32,
        /// The offset CPUID gave.
        offset: u32,
    },
}

/// The components XCR0 enables and where they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XsaveLayout {
    /// The enabled features.
    pub xcr0: u64,
    /// Every enabled component of bit 2 and up, by bit.
    pub components: Vec<Component>,
}

/// x87 and SSE: always in the legacy region.
const LEGACY_FEATURES: u64 = 0b11;

impl XsaveLayout {
    /// The layout for `xcr0`, with `cpuid(leaf, subleaf)` returning `[eax, ebx, ecx, edx]`.
    ///
    /// Only the per-component subleaves are trusted: some hypervisors report a total
    /// size (subleaf 0, ECX) for features that XCR0 does not enable.
    pub fn from_cpuid(
        xcr0: u64,
        cpuid: impl Fn(u32, u32) -> [u32; 4],
    ) -> Result<XsaveLayout, LayoutError> {
        if xcr0 & LEGACY_FEATURES != LEGACY_FEATURES {
            return Err(LayoutError::NoLegacy { xcr0 });
        }
        let mut components = Vec::new();
        for bit in 2..64u32 {
            if xcr0 & (1 << bit) == 0 {
                continue;
            }
            let [size, offset, flags, _] = cpuid(0xd, bit);
            // A user component (ECX bit 0 clear) lies past the header in the standard format.
            if size == 0 || (offset as usize) < MIN_AREA || flags & 1 != 0 {
                return Err(LayoutError::BadComponent { bit, size, offset });
            }
            components.push(Component {
                bit,
                offset,
                size,
                xfd: flags & 4 != 0,
            });
        }
        Ok(XsaveLayout { xcr0, components })
    }

    /// This machine's layout, read once; `None` without XSAVE enabled by the kernel.
    pub fn host() -> Option<&'static XsaveLayout> {
        static HOST: OnceLock<Option<XsaveLayout>> = OnceLock::new();
        HOST.get_or_init(read_host).as_ref()
    }

    /// Bytes of a standard-format area holding `features` (at least [`MIN_AREA`]).
    pub fn size_of(&self, features: u64) -> usize {
        self.components
            .iter()
            .filter(|c| features & (1 << c.bit) != 0)
            .map(Component::end)
            .fold(MIN_AREA, usize::max)
    }

    /// Bytes of an area holding every enabled feature (what ptrace's image spans).
    pub fn max_size(&self) -> usize {
        self.size_of(self.xcr0)
    }

    /// The features a frame restores for a thread whose image has `in_use` set in
    /// `XSTATE_BV`: all enabled ones but the XFD-capable ones not in use (the kernel
    /// may not have room for those in the thread's buffer; their state is the initial
    /// one, which `rt_sigreturn` gives every feature a frame leaves out).
    pub fn frame_features(&self, in_use: u64) -> u64 {
        let armable = self
            .components
            .iter()
            .filter(|c| c.xfd)
            .fold(0u64, |m, c| m | 1 << c.bit);
        self.xcr0 & !(armable & !in_use)
    }
}

#[cfg(target_arch = "x86_64")]
fn read_host() -> Option<XsaveLayout> {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    let cpuid = |leaf: u32, sub: u32| {
        let r = __cpuid_count(leaf, sub);
        [r.eax, r.ebx, r.ecx, r.edx]
    };
    if __cpuid(0).eax < 0xd {
        return None;
    }
    // CPUID.1:ECX.OSXSAVE: the kernel enabled XSAVE, so xgetbv may run.
    if __cpuid(1).ecx & (1 << 27) == 0 {
        return None;
    }
    let (lo, hi): (u32, u32);
    // SAFETY: xgetbv with ECX = 0 reads XCR0; it exists when OSXSAVE is set (checked
    // above), touches no memory and only writes EAX and EDX.
    unsafe {
        std::arch::asm!(
            "xgetbv",
            in("ecx") 0u32,
            out("eax") lo,
            out("edx") hi,
            options(nomem, nostack, preserves_flags)
        );
    }
    let xcr0 = (u64::from(hi) << 32) | u64::from(lo);
    XsaveLayout::from_cpuid(xcr0, cpuid).ok()
}

#[cfg(not(target_arch = "x86_64"))]
fn read_host() -> Option<XsaveLayout> {
    None
}

fn word(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The extended area of a signal frame for a thread whose ptrace image
/// (`PTRACE_GETREGSET NT_X86_XSTATE`) is `image`: the image cut to the components the
/// thread can have, its software bytes describing that size and those features, and
/// `FP_XSTATE_MAGIC2` appended. `None` when the image is too short for the layout.
pub fn frame_area(image: &[u8], layout: &XsaveLayout) -> Option<Vec<u8>> {
    if image.len() < MIN_AREA {
        return None;
    }
    let in_use = word(image, XSTATE_BV_AT);
    let mut features = layout.frame_features(in_use);
    // ptrace reports the kernel's own feature mask there; never restore beyond it.
    let reported = word(image, SW_RESERVED_AT);
    if reported & LEGACY_FEATURES == LEGACY_FEATURES {
        features &= reported;
    }
    let size = layout.size_of(features);
    if size > image.len() {
        return None;
    }
    let mut area = image[..size].to_vec();
    let sw = &mut area[SW_RESERVED_AT..LEGACY_LEN];
    sw.fill(0);
    sw[0..4].copy_from_slice(&FP_XSTATE_MAGIC1.to_le_bytes());
    sw[4..8].copy_from_slice(&((size + 4) as u32).to_le_bytes());
    sw[8..16].copy_from_slice(&features.to_le_bytes());
    sw[16..20].copy_from_slice(&(size as u32).to_le_bytes());
    // XRSTOR faults on a header with bits beyond what it restores, a compacted-format
    // flag or nonzero reserved bytes; a fault in rt_sigreturn kills the thread.
    area[XSTATE_BV_AT..XSTATE_BV_AT + 8].copy_from_slice(&(in_use & features).to_le_bytes());
    area[XSTATE_BV_AT + 8..MIN_AREA].fill(0);
    area.extend_from_slice(&FP_XSTATE_MAGIC2.to_le_bytes());
    Some(area)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CPUID leaf 0xD of a Sapphire Rapids Xeon (AVX-512, PKRU, AMX).
    fn sapphire_rapids(leaf: u32, sub: u32) -> [u32; 4] {
        assert_eq!(leaf, 0xd);
        match sub {
            2 => [256, 576, 0, 0],
            5 => [64, 1088, 0, 0],
            6 => [512, 1152, 0, 0],
            7 => [1024, 1664, 0, 0],
            9 => [8, 2688, 0, 0],
            17 => [64, 2752, 2, 0],
            18 => [8192, 2816, 6, 0],
            _ => [0, 0, 0, 0],
        }
    }

    /// This machine's kind: an AMD EPYC under KVM that reports the AMX components
    /// (and a total size counting them) although XCR0 = 0xe7 does not enable them.
    fn epyc_kvm(leaf: u32, sub: u32) -> [u32; 4] {
        match (leaf, sub) {
            (0xd, 0) => [0xe7, 2688, 11008, 0],
            (0xd, 9) => [0, 0, 0, 0],
            _ => sapphire_rapids(leaf, sub),
        }
    }

    const SPR_XCR0: u64 = 0x602e7;

    /// A ptrace image of `len` bytes with `in_use` in its header, XCR0 in the software
    /// bytes and each byte of the rest numbered.
    fn image(len: usize, in_use: u64, xcr0: u64) -> Vec<u8> {
        let mut b: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        b[SW_RESERVED_AT..LEGACY_LEN].fill(0);
        b[SW_RESERVED_AT..SW_RESERVED_AT + 8].copy_from_slice(&xcr0.to_le_bytes());
        b[XSTATE_BV_AT..MIN_AREA].fill(0);
        b[XSTATE_BV_AT..XSTATE_BV_AT + 8].copy_from_slice(&in_use.to_le_bytes());
        b
    }

    fn sw(area: &[u8]) -> (u32, u32, u64, u32) {
        let u32_at = |at| u32::from_le_bytes(area[at..at + 4].try_into().unwrap());
        (
            u32_at(SW_RESERVED_AT),
            u32_at(SW_RESERVED_AT + 4),
            word(area, SW_RESERVED_AT + 8),
            u32_at(SW_RESERVED_AT + 16),
        )
    }

    #[test]
    fn amx_layout_and_sizes() {
        let l = XsaveLayout::from_cpuid(SPR_XCR0, sapphire_rapids).unwrap();
        let bits: Vec<u32> = l.components.iter().map(|c| c.bit).collect();
        assert_eq!(bits, [2, 5, 6, 7, 9, 17, 18]);
        assert_eq!(l.max_size(), 11008);
        // Only the tile data can be armed by XFD.
        let xfd: Vec<u32> = l
            .components
            .iter()
            .filter(|c| c.xfd)
            .map(|c| c.bit)
            .collect();
        assert_eq!(xfd, [18]);
        // The kernel's default buffer: every feature but the tile data.
        assert_eq!(l.size_of(SPR_XCR0 & !(1 << 18)), 2816);
        assert_eq!(l.size_of(0b11), MIN_AREA);
        assert_eq!(l.size_of(0b111), 832);
    }

    #[test]
    fn thread_without_amx_gets_a_frame_its_buffer_takes() {
        let l = XsaveLayout::from_cpuid(SPR_XCR0, sapphire_rapids).unwrap();
        // AVX-512 in use (opmask, zmm hi256, hi16 zmm), PKRU; tiles never used.
        let in_use = 0b10_1110_0111;
        let img = image(11008, in_use, SPR_XCR0);
        let area = frame_area(&img, &l).unwrap();
        assert_eq!(area.len(), 2816 + 4);
        assert_eq!(
            sw(&area),
            (FP_XSTATE_MAGIC1, 2820, SPR_XCR0 & !(1 << 18), 2816)
        );
        assert_eq!(
            u32::from_le_bytes(area[2816..].try_into().unwrap()),
            FP_XSTATE_MAGIC2
        );
        // Every byte of every component is the image's, the header keeps its bitmap.
        assert_eq!(area[..SW_RESERVED_AT], img[..SW_RESERVED_AT]);
        assert_eq!(area[XSTATE_BV_AT..2816], img[XSTATE_BV_AT..2816]);
    }

    #[test]
    fn thread_using_amx_tiles_gets_the_whole_image() {
        let l = XsaveLayout::from_cpuid(SPR_XCR0, sapphire_rapids).unwrap();
        let in_use = SPR_XCR0;
        let img = image(11008, in_use, SPR_XCR0);
        let area = frame_area(&img, &l).unwrap();
        assert_eq!(area.len(), 11008 + 4);
        assert_eq!(sw(&area), (FP_XSTATE_MAGIC1, 11012, SPR_XCR0, 11008));
        assert_eq!(area[XSTATE_BV_AT..11008], img[XSTATE_BV_AT..11008]);
    }

    #[test]
    fn hypervisor_total_size_is_not_trusted() {
        // XCR0 0xe7: the AMX subleaves are ignored, and so is subleaf 0's 11008.
        let l = XsaveLayout::from_cpuid(0xe7, epyc_kvm).unwrap();
        assert_eq!(l.max_size(), 2688);
        assert!(l.components.iter().all(|c| !c.xfd));
        let img = image(2688, 0xe7, 0xe7);
        let area = frame_area(&img, &l).unwrap();
        assert_eq!(sw(&area), (FP_XSTATE_MAGIC1, 2692, 0xe7, 2688));
        assert_eq!(area.len(), 2692);
    }

    #[test]
    fn header_is_made_valid_for_xrstor() {
        let l = XsaveLayout::from_cpuid(SPR_XCR0, sapphire_rapids).unwrap();
        let mut img = image(11008, 0b111 | 1 << 18, SPR_XCR0);
        // A stray compacted-format flag and a reserved byte.
        img[XSTATE_BV_AT + 15] = 0x80;
        img[XSTATE_BV_AT + 40] = 1;
        let area = frame_area(&img, &l).unwrap();
        assert!(area[XSTATE_BV_AT + 8..MIN_AREA].iter().all(|b| *b == 0));
        // Features beyond what ptrace says the kernel has are left out.
        let img = image(11008, 0b111, 0b111);
        let area = frame_area(&img, &l).unwrap();
        assert_eq!(sw(&area), (FP_XSTATE_MAGIC1, 836, 0b111, 832));
    }

    #[test]
    fn short_image_or_bad_cpuid_is_refused() {
        let l = XsaveLayout::from_cpuid(SPR_XCR0, sapphire_rapids).unwrap();
        assert_eq!(frame_area(&image(2000, 0xe7, SPR_XCR0), &l), None);
        assert_eq!(frame_area(&[0; 100], &l), None);
        assert_eq!(
            XsaveLayout::from_cpuid(0x1, sapphire_rapids),
            Err(LayoutError::NoLegacy { xcr0: 1 })
        );
        // Bit 3 (MPX) enabled but CPUID says nothing about it.
        assert_eq!(
            XsaveLayout::from_cpuid(0b1111, sapphire_rapids),
            Err(LayoutError::BadComponent {
                bit: 3,
                size: 0,
                offset: 0
            })
        );
    }

    #[test]
    fn host_layout_is_well_formed() {
        let Some(l) = XsaveLayout::host() else {
            println!("no XSAVE here: nothing to compare");
            return;
        };
        println!(
            "host XCR0 {:#x}, standard-format size {}",
            l.xcr0,
            l.max_size()
        );
        assert!(l.max_size() >= MIN_AREA);
        // Components do not overlap each other or the header.
        let mut spans: Vec<(usize, usize)> = l
            .components
            .iter()
            .map(|c| (c.offset as usize, c.end()))
            .collect();
        spans.sort();
        let mut end = MIN_AREA;
        for (start, stop) in spans {
            assert!(start >= end, "{:?}", l.components);
            end = stop;
        }
    }
}
