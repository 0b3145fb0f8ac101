//! Placing a new arena: a free gap of the address space within rel32 reach of the
//! hooked module. (Finding arenas already in a target is [`reader::arena`].)

use std::ops::Range;

use trampolines::arena::PAGE;

use reader::procfs::MapEntry;

/// Records per arena.
pub const ARENA_CAPACITY: u32 = 128;

/// Largest distance a rel32 jump or RIP-relative operand may span (with a margin).
const REACH: u64 = (1 << 31) - (1 << 20);

/// Lowest address we ever place an arena at (above `vm.mmap_min_addr`).
const MIN_ADDR: u64 = 1 << 20;

/// True when every address of `a` is within rel32 reach of every address of `b`.
pub fn within_reach(a: &Range<u64>, b: &Range<u64>) -> bool {
    let lo = a.start.min(b.start);
    let hi = a.end.max(b.end);
    hi - lo <= REACH
}

/// Candidate base addresses for a new arena of `len` bytes within reach of `near`,
/// nearest first, each inside a currently free gap of the address space.
pub fn placement_candidates(maps: &[MapEntry], near: &Range<u64>, len: u64) -> Vec<u64> {
    placement_candidates_below(maps, near, len, 0x7fff_ffff_f000)
}

/// [`placement_candidates`] in an address space ending at `top` (`0xffff_e000` for a 32-bit process).
pub fn placement_candidates_below(
    maps: &[MapEntry],
    near: &Range<u64>,
    len: u64,
    top: u64,
) -> Vec<u64> {
    let mut sorted: Vec<Range<u64>> = maps.iter().map(|m| m.range()).collect();
    sorted.sort_by_key(|r| r.start);
    let page = PAGE as u64;
    // Free gaps between mappings, keeping one guard page on each side.
    let mut gaps = Vec::new();
    let mut prev_end = MIN_ADDR;
    for r in &sorted {
        let end = r.start.min(top);
        if end > prev_end + 2 * page {
            gaps.push(prev_end + page..end - page);
        }
        prev_end = prev_end.max(r.end);
    }
    if top > prev_end + 2 * page {
        gaps.push(prev_end + page..top);
    }
    let mut candidates = Vec::new();
    for gap in gaps {
        if gap.end - gap.start < len {
            continue;
        }
        // The highest spot below the module, or the lowest above it.
        let below = (gap.end - len) & !(page - 1);
        let above = gap.start.div_ceil(page) * page;
        for base in [below, above] {
            if base >= gap.start && base + len <= gap.end && within_reach(&(base..base + len), near)
            {
                candidates.push(base);
            }
        }
    }
    let distance = |b: &u64| {
        if *b >= near.end {
            *b - near.end
        } else {
            near.start.saturating_sub(*b + len)
        }
    };
    candidates.sort_by_key(distance);
    candidates.dedup();
    candidates
}

/// Candidate base addresses for a new arena of `len` bytes anywhere in the free
/// address space (for hooks patched with an absolute jump): the middle of each
/// free gap, largest gap first, so the arena stays clear of the heap, stack and
/// mmap areas growing towards it.
pub fn anywhere_candidates(maps: &[MapEntry], len: u64) -> Vec<u64> {
    let mut sorted: Vec<Range<u64>> = maps.iter().map(|m| m.range()).collect();
    sorted.sort_by_key(|r| r.start);
    let page = PAGE as u64;
    let top = 0x7fff_ffff_f000u64;
    let mut gaps = Vec::new();
    let mut prev_end = MIN_ADDR;
    let ends = sorted.iter().map(|r| (r.start, r.end));
    for (start, end) in ends.chain(std::iter::once((top, top))) {
        let start = start.min(top);
        // One guard page on each side.
        if start > prev_end + 2 * page && start - prev_end - 2 * page >= len {
            gaps.push(prev_end + page..start - page);
        }
        prev_end = prev_end.max(end);
    }
    gaps.sort_by_key(|g| std::cmp::Reverse(g.end - g.start));
    gaps.truncate(16);
    gaps.iter()
        .map(|g| (g.start + (g.end - g.start - len) / 2) & !(page - 1))
        .filter(|&base| base >= MIN_ADDR)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use reader::procfs::parse_maps;
    use trampolines::arena::ArenaHeader;

    #[test]
    fn candidates_are_free_near_and_in_reach() {
        let maps = parse_maps(
            "555555554000-555555556000 r--p 00000000 fe:01 1 /prog
555555556000-555555558000 r-xp 00002000 fe:01 1 /prog
555555558000-55555555a000 rw-p 00004000 fe:01 1 /prog
555555600000-555555700000 rw-p 00000000 00:00 0 [heap]
7ffff7d00000-7ffff7f00000 r-xp 00000000 fe:01 2 /lib/libc.so.6
7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0 [stack]
",
        );
        let near = 0x555555554000..0x55555555a000;
        let len = ArenaHeader::new(0, ARENA_CAPACITY).arena_len;
        let c = placement_candidates(&maps, &near, len);
        assert!(!c.is_empty());
        assert_eq!(
            c[0],
            0x555555554000 - 0x1000 - len,
            "nearest spot is just below the module"
        );
        for base in &c {
            assert!(within_reach(&(*base..*base + len), &near));
            assert!(
                maps.iter()
                    .all(|m| m.end <= *base || m.start >= *base + len),
                "overlaps a mapping"
            );
        }
        // A 32-bit process: only below 4 GiB, even with room above.
        let maps32 = parse_maps(
            "08048000-0804a000 r-xp 00000000 fe:01 1 /prog32
f7c00000-f7e00000 r-xp 00000000 fe:01 2 /lib32/libc.so.6
",
        );
        let near32 = 0x0804_8000..0x0804_a000;
        let c = placement_candidates_below(&maps32, &near32, len, 0xffff_e000);
        assert!(!c.is_empty());
        for base in &c {
            assert!(base + len <= 0xffff_e000, "{base:#x} above 4 GiB");
        }
        // Nothing in reach when the module's neighbourhood is full.
        let full = parse_maps("100000-7ffffffff000 r-xp 00000000 fe:01 1 /huge\n");
        assert!(placement_candidates(&full, &(0x200000..0x300000), len).is_empty());
        assert!(anywhere_candidates(&full, len).is_empty());
        // Anywhere: free, in the middle of the largest gap first (below the program).
        let far = anywhere_candidates(&maps, len);
        assert!(!far.is_empty());
        let mid = MIN_ADDR + 0x1000 + (0x555555554000 - MIN_ADDR - 0x2000 - len) / 2;
        assert_eq!(far[0], mid & !0xfff);
        for base in &far {
            assert!(maps
                .iter()
                .all(|m| m.end <= *base || m.start >= *base + len));
        }
    }
}
