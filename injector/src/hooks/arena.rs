//! Choosing where each hook of an install goes: a free slot of an arena already in
//! the target within rel32 reach of the hooked module, or a slot of a new arena
//! placed in a free gap of the address space near it (`Placement`); with no room
//! near, anywhere (the hook is then patched with an absolute jump). (Finding
//! arenas already in a target is [`reader::arena`].)

use std::collections::HashSet;
use std::ops::Range;

use trampolines::arena::{Arena, ArenaHeader, HookState, PAGE};

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
#[cfg(test)]
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

/// Where a planned hook goes: a slot of the `n`th arena found in the target, or
/// a slot of the `n`th arena this install creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArenaChoice {
    /// Arena `.0` of those found, slot `.1`.
    Existing(usize, u32),
    /// Arena `.0` of those created, slot `.1`.
    New(usize, u32),
}

/// An arena this install will create: places to try, nearest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewArena {
    /// Base addresses to try, in order.
    pub(crate) candidates: Vec<u64>,
    /// The candidate in use (the commit moves on when one is taken meanwhile).
    pub(crate) chosen: usize,
    /// Slots given out.
    pub(crate) used: u32,
}

impl NewArena {
    /// The header of the arena at the chosen candidate.
    pub(crate) fn header(&self) -> ArenaHeader {
        ArenaHeader::new(self.candidates[self.chosen], ARENA_CAPACITY)
    }

    fn range(&self) -> Range<u64> {
        let h = self.header();
        h.base..h.base + h.arena_len
    }
}

/// The slots one install has given out so far, in the arenas found in the target
/// and in the arenas it will create.
pub(crate) struct Placement<'a> {
    maps: &'a [MapEntry],
    arenas: &'a [Arena],
    /// One past the highest address an arena may end at.
    limit: u64,
    taken: Vec<HashSet<u32>>,
    new: Vec<NewArena>,
}

impl<'a> Placement<'a> {
    /// Nothing placed yet in the address space `maps` holding `arenas`, below `limit`.
    pub(crate) fn new(maps: &'a [MapEntry], arenas: &'a [Arena], limit: u64) -> Placement<'a> {
        Placement {
            maps,
            arenas,
            limit,
            taken: vec![HashSet::new(); arenas.len()],
            new: Vec::new(),
        }
    }

    /// The length of a new arena.
    fn arena_len() -> u64 {
        ArenaHeader::new(0, ARENA_CAPACITY).arena_len
    }

    /// A slot within rel32 reach of `module`: in an arena found in the target, in a
    /// new arena already planned, or in another new arena placed nearest to it;
    /// `None` when no free gap is near enough.
    pub(crate) fn near(&mut self, module: &Range<u64>) -> Option<ArenaChoice> {
        let existing = self.arenas.iter().enumerate().find_map(|(i, a)| {
            let range = a.header.base..a.header.base + a.header.arena_len;
            if !within_reach(&range, module) {
                return None;
            }
            free_slot(a, &self.taken[i]).map(|s| (i, s))
        });
        if let Some((i, slot)) = existing {
            self.taken[i].insert(slot);
            return Some(ArenaChoice::Existing(i, slot));
        }
        let reusable = self
            .new
            .iter()
            .position(|n| n.used < ARENA_CAPACITY && within_reach(&n.range(), module));
        let index = match reusable {
            Some(i) => i,
            None => {
                let near = placement_candidates_below(
                    &self.occupied(),
                    module,
                    Self::arena_len(),
                    self.limit,
                );
                if near.is_empty() {
                    return None;
                }
                self.create(near)
            }
        };
        Some(self.give(index))
    }

    /// A slot anywhere, for a hook patched with an absolute jump: any arena found
    /// with a free slot, any new arena with room, or a new arena in the middle of
    /// the largest free gap; `None` when the address space has no room.
    pub(crate) fn anywhere(&mut self) -> Option<ArenaChoice> {
        let existing = self
            .arenas
            .iter()
            .enumerate()
            .find_map(|(i, a)| free_slot(a, &self.taken[i]).map(|s| (i, s)));
        if let Some((i, slot)) = existing {
            self.taken[i].insert(slot);
            return Some(ArenaChoice::Existing(i, slot));
        }
        let index = match self.new.iter().position(|n| n.used < ARENA_CAPACITY) {
            Some(i) => i,
            None => {
                let anywhere = anywhere_candidates(&self.occupied(), Self::arena_len());
                if anywhere.is_empty() {
                    return None;
                }
                self.create(anywhere)
            }
        };
        Some(self.give(index))
    }

    /// The arenas to create.
    pub(crate) fn into_new_arenas(self) -> Vec<NewArena> {
        self.new
    }

    /// The mappings, with the new arenas planned so far added.
    fn occupied(&self) -> Vec<MapEntry> {
        let mut occupied = self.maps.to_vec();
        for n in &self.new {
            let r = n.range();
            occupied.push(MapEntry {
                start: r.start,
                end: r.end,
                perms: Default::default(),
                offset: 0,
                inode: 0,
                path: String::new(),
            });
        }
        occupied
    }

    fn create(&mut self, candidates: Vec<u64>) -> usize {
        self.new.push(NewArena {
            candidates,
            chosen: 0,
            used: 0,
        });
        self.new.len() - 1
    }

    fn give(&mut self, index: usize) -> ArenaChoice {
        let n = &mut self.new[index];
        let slot = n.used;
        n.used += 1;
        ArenaChoice::New(index, slot)
    }
}

/// A free slot of arena `a` not yet `taken` by this install.
fn free_slot(a: &Arena, taken: &HashSet<u32>) -> Option<u32> {
    a.records
        .iter()
        .enumerate()
        .find(|(s, r)| r.state == HookState::Free && !taken.contains(&(*s as u32)))
        .map(|(s, _)| s as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reader::procfs::{parse_maps, Perms};

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

    /// An arena at `base` whose first `used` slots hold active hooks.
    fn arena_at(base: u64, used: usize) -> Arena {
        let header = ArenaHeader::new(base, ARENA_CAPACITY);
        let mut bytes = vec![0u8; header.header_len()];
        bytes[..trampolines::arena::HEADER_LEN].copy_from_slice(&header.encode());
        let mut a = Arena::decode(base, &bytes).unwrap();
        for r in a.records.iter_mut().take(used) {
            r.state = HookState::Active;
        }
        a
    }

    #[test]
    fn placement_reuses_arenas_in_reach_and_creates_the_rest() {
        let maps = parse_maps(
            "555555554000-55555555a000 r-xp 00000000 fe:01 1 /prog
7ffff7d00000-7ffff7f00000 r-xp 00000000 fe:01 2 /lib/libc.so.6
7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0 [stack]
",
        );
        let prog = 0x555555554000..0x55555555a000;
        let libc = 0x7ffff7d00000..0x7ffff7f00000;
        let len = ArenaHeader::new(0, ARENA_CAPACITY).arena_len;
        // An arena near the program with slot 0 taken; none near libc.
        let near_prog = 0x555555554000 - 0x1000 - len;
        let arenas = [arena_at(near_prog, 1)];
        let mut maps_with_arena = maps.clone();
        maps_with_arena.push(MapEntry {
            start: near_prog,
            end: near_prog + len,
            perms: Perms::parse("r-xp"),
            offset: 0,
            inode: 0,
            path: String::new(),
        });
        let mut p = Placement::new(&maps_with_arena, &arenas, 0x7fff_ffff_f000);
        assert_eq!(p.near(&prog), Some(ArenaChoice::Existing(0, 1)));
        assert_eq!(
            p.near(&prog),
            Some(ArenaChoice::Existing(0, 2)),
            "slots are not given twice"
        );
        assert_eq!(p.near(&libc), Some(ArenaChoice::New(0, 0)));
        assert_eq!(
            p.near(&libc),
            Some(ArenaChoice::New(0, 1)),
            "the new arena is shared"
        );
        let new = p.into_new_arenas();
        assert_eq!(new.len(), 1);
        assert_eq!(new[0].used, 2);
        let base = new[0].header().base;
        assert!(within_reach(&(base..base + len), &libc));
        assert!(maps_with_arena
            .iter()
            .all(|m| m.end <= base || m.start >= base + len));
    }

    #[test]
    fn placement_fills_arenas_then_opens_new_ones_apart() {
        let maps = parse_maps("555555554000-55555555a000 r-xp 00000000 fe:01 1 /prog\n");
        let prog = 0x555555554000..0x55555555a000;
        let full = [arena_at(0x5555_0000_0000, ARENA_CAPACITY as usize)];
        let mut p = Placement::new(&maps, &full, 0x7fff_ffff_f000);
        for slot in 0..ARENA_CAPACITY {
            assert_eq!(p.near(&prog), Some(ArenaChoice::New(0, slot)));
        }
        assert_eq!(
            p.near(&prog),
            Some(ArenaChoice::New(1, 0)),
            "a second arena when the first is full"
        );
        let new = p.into_new_arenas();
        let (a, b) = (new[0].header(), new[1].header());
        assert!(
            a.base + a.arena_len <= b.base || b.base + b.arena_len <= a.base,
            "they do not overlap"
        );
    }

    #[test]
    fn far_hooks_go_anywhere_when_nothing_is_in_reach() {
        // The module's whole neighbourhood is mapped.
        let maps = parse_maps(
            "100000-7f0000000000 r-xp 00000000 fe:01 1 /huge
7ff000000000-7ff000001000 r-xp 00000000 fe:01 2 /lib/libc.so.6
",
        );
        let module = 0x200000..0x300000;
        let mut p = Placement::new(&maps, &[], 0x7fff_ffff_f000);
        assert_eq!(p.near(&module), None);
        assert_eq!(p.anywhere(), Some(ArenaChoice::New(0, 0)));
        assert_eq!(p.anywhere(), Some(ArenaChoice::New(0, 1)));
        let base = p.into_new_arenas()[0].header().base;
        assert!(base >= 0x7f0000000000);
        // A free slot of any arena comes first.
        let arenas = [arena_at(0x7f8000000000, 3)];
        let mut p = Placement::new(&maps, &arenas, 0x7fff_ffff_f000);
        assert_eq!(p.near(&module), None);
        assert_eq!(p.anywhere(), Some(ArenaChoice::Existing(0, 3)));
        // A 32-bit address space with no room below 4 GiB.
        let maps32 = parse_maps("00100000-ffffe000 r-xp 00000000 fe:01 1 /huge32\n");
        let mut p = Placement::new(&maps32, &[], 0xffff_e000);
        assert_eq!(p.near(&(0x0804_8000..0x0804_a000)), None);
    }
}
