//! The caching allocator's state and its `malloc`/`free`, following
//! `DeviceCachingAllocator` in `c10/cuda/CUDACachingAllocator.cpp`
//! (pytorch/pytorch@001074d2): two pools of free blocks ordered by
//! (stream, size, address), best fit (`get_free_block`), block splitting
//! (`should_split`, `alloc_found_block`), merging with free neighbours
//! (`free_block`, `try_merge_blocks`) and, when no cached block fits, the
//! sequence of `malloc`: garbage collection, a new segment (`alloc_block`),
//! the release of oversize cached blocks, of every cached block, then an
//! out-of-memory error. New device memory comes from `cudaMalloc` segments
//! ([`crate::expandable`] holds the expandable-segment path);
//! [`crate::release`] gives it back.

use std::collections::BTreeSet;

use vramscope_snapshot::hash::FxHashMap as HashMap;

use crate::settings::{Settings, MIN_BLOCK, SMALL_SIZE};
use vramscope_gpus::allocator::GRANULE;

/// What the model did to the device, in order (the trace's segment events).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentEvent {
    /// `cudaMalloc` of a segment of this many bytes (`segment_alloc`).
    Alloc(u64),
    /// `cudaFree` of a segment of this many bytes (`segment_free`).
    Free(u64),
    /// Pages mapped into an expandable segment (`segment_map`).
    Map(u64),
    /// Pages unmapped from an expandable segment (`segment_unmap`).
    Unmap(u64),
}

impl SegmentEvent {
    /// Whether the event adds device memory.
    pub fn grows(self) -> bool {
        matches!(self, SegmentEvent::Alloc(_) | SegmentEvent::Map(_))
    }
}

/// A request the device could not serve even after releasing the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfMemory {
    /// The rounded request.
    pub size: u64,
    pub reserved: u64,
    pub allocated: u64,
}

#[derive(Clone, Debug)]
pub(crate) struct Block {
    pub size: u64,
    pub stream: u64,
    pub small: bool,
    pub allocated: bool,
    /// Backed by device memory; false only for the unmapped address space
    /// of an expandable segment.
    pub mapped: bool,
    /// The expandable segment the block lies in.
    pub expandable: Option<usize>,
    /// Neighbours inside the same segment (addresses).
    pub prev: Option<u64>,
    pub next: Option<u64>,
    /// The pool's `get_free_blocks_call_count` when the block was cached:
    /// its age for the garbage collector is the count now minus this.
    pub gc_base: u64,
}

impl Block {
    /// A whole new segment: one free, mapped block with no neighbours.
    pub fn segment(size: u64, stream: u64, small: bool) -> Block {
        Block {
            size,
            stream,
            small,
            allocated: false,
            mapped: true,
            expandable: None,
            prev: None,
            next: None,
            gc_base: 0,
        }
    }

    pub fn is_split(&self) -> bool {
        self.prev.is_some() || self.next.is_some()
    }
}

/// An expandable segment: address space for the whole device, mapped in
/// pages of 2 MiB (small pool) or 20 MiB (large pool).
#[derive(Clone, Debug)]
pub(crate) struct Expandable {
    pub base: u64,
    pub page: u64,
}

/// The allocator of one device.
#[derive(Clone, Debug)]
pub struct Allocator {
    pub settings: Settings,
    /// Device memory PyTorch may reserve (`None`: unlimited).
    pub capacity: Option<u64>,
    /// `allowed_memory_maximum` when `torch.cuda.set_per_process_memory_fraction`
    /// was called: a limit checked against each new segment's size, and
    /// the condition for `garbage_collection_threshold` to act at all.
    pub fraction_limit: Option<u64>,
    pub(crate) blocks: HashMap<u64, Block>,
    /// Free mapped blocks: (stream, size, address); index 1 is the small pool.
    pub(crate) free: [BTreeSet<(u64, u64, u64)>; 2],
    /// Unmapped ranges of expandable segments: (stream, address).
    pub(crate) unmapped: [BTreeSet<(u64, u64)>; 2],
    pub(crate) expandables: Vec<Option<Expandable>>,
    /// `get_free_blocks_call_count` of each pool.
    pub(crate) gc_calls: [u64; 2],
    pub(crate) next_address: u64,
    /// Base and size of each whole (not expandable) segment.
    pub(crate) segments: std::collections::BTreeMap<u64, u64>,
    /// Where the recording put the segment the next request made, if it
    /// made one ([`Allocator::hint_segment`]).
    pub(crate) hint: Option<(u64, u64)>,
    pub reserved: u64,
    pub allocated: u64,
    pub peak_reserved: u64,
    pub peak_allocated: u64,
    pub events: Vec<SegmentEvent>,
    /// Private pools the program released ([`crate::pools`]): their cached
    /// segments may go.
    pub(crate) released_pools: vramscope_snapshot::hash::FxHashSet<u64>,
}

pub(crate) fn pool_index(small: bool) -> usize {
    small as usize
}

impl Allocator {
    pub fn new(settings: Settings, capacity: Option<u64>) -> Allocator {
        Allocator {
            settings,
            capacity,
            fraction_limit: None,
            blocks: HashMap::default(),
            free: [BTreeSet::new(), BTreeSet::new()],
            unmapped: [BTreeSet::new(), BTreeSet::new()],
            expandables: Vec::new(),
            gc_calls: [0; 2],
            // Segments get addresses in increasing order, 2 MiB aligned, as
            // fresh cudaMalloc results usually are.
            next_address: 1 << 40,
            segments: std::collections::BTreeMap::new(),
            hint: None,
            reserved: 0,
            allocated: 0,
            peak_reserved: 0,
            peak_allocated: 0,
            events: Vec::new(),
            released_pools: Default::default(),
        }
    }

    /// Whether the garbage collector runs: only with a memory fraction set
    /// (`malloc`: `set_fraction && garbage_collection_threshold() > 0.0`).
    pub fn gc_enabled(&self) -> bool {
        self.fraction_limit.is_some() && self.settings.garbage_collection_threshold > 0.0
    }

    /// Put the free block at `addr` into its pool (`insert_into_blocks`,
    /// which stamps the block's garbage-collection age).
    pub(crate) fn cache(&mut self, addr: u64) {
        let Some(b) = self.blocks.get_mut(&addr) else {
            return;
        };
        let p = pool_index(b.small);
        if b.mapped {
            b.gc_base = self.gc_calls[p];
            self.free[p].insert((b.stream, b.size, addr));
        } else {
            self.unmapped[p].insert((b.stream, addr));
        }
    }

    /// Take the block at `addr` out of whichever free set holds it.
    pub(crate) fn uncache(&mut self, addr: u64) {
        if let Some(b) = self.blocks.get(&addr) {
            let p = pool_index(b.small);
            if b.mapped {
                self.free[p].remove(&(b.stream, b.size, addr));
            } else {
                self.unmapped[p].remove(&(b.stream, addr));
            }
        }
    }

    pub(crate) fn grew(&mut self, bytes: u64, event: SegmentEvent) {
        self.reserved += bytes;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        self.events.push(event);
    }

    /// Allocate `request` bytes on `stream`; the block's address.
    pub fn malloc(&mut self, request: u64, stream: u64) -> Result<u64, OutOfMemory> {
        let size = self.settings.round_size(request);
        let small = self.settings.is_small(size);
        let addr = match self.best_fit(size, stream, small) {
            Some(a) => a,
            None => {
                if self.gc_enabled() {
                    self.garbage_collect();
                }
                let found = self.alloc_block(size, stream, small).or_else(|| {
                    if self.release_available(size, stream, small) {
                        self.alloc_block(size, stream, small)
                    } else {
                        None
                    }
                });
                match found {
                    Some(a) => a,
                    None => {
                        self.release_cached();
                        self.alloc_block(size, stream, small).ok_or(OutOfMemory {
                            size,
                            reserved: self.reserved,
                            allocated: self.allocated,
                        })?
                    }
                }
            }
        };
        self.take(addr, size);
        Ok(addr)
    }

    /// `get_free_block`: the smallest free block of the stream that fits,
    /// lowest address first, within the max_split_size rules; for blocks of
    /// expandable segments, the size they can grow to decides.
    fn best_fit(&mut self, size: u64, stream: u64, small: bool) -> Option<u64> {
        let p = pool_index(small);
        self.gc_calls[p] += 1;
        let mut it = self.free[p].range((stream, size, 0)..).peekable();
        let mut cur = *it.next()?;
        if cur.0 != stream {
            return None;
        }
        if self.blocks[&cur.2].expandable.is_some() {
            if self.settings.expandable_segments {
                // Prefer, among the blocks that fit, one whose room to grow
                // (its unmapped successor) is smaller.
                let room = |a: u64| {
                    let b = &self.blocks[&a];
                    b.size
                        + b.next
                            .and_then(|n| self.blocks.get(&n))
                            .filter(|n| !n.mapped)
                            .map_or(0, |n| n.size)
                };
                while let Some(&&next) = it.peek() {
                    if self.blocks[&cur.2].expandable.is_none()
                        || next.0 != stream
                        || room(next.2) >= room(cur.2)
                    {
                        break;
                    }
                    cur = next;
                    it.next();
                }
            } else {
                // Expandable segments turned off: only ordinary blocks.
                cur = *it.find(|k| self.blocks[&k.2].expandable.is_none())?;
                if cur.0 != stream {
                    return None;
                }
            }
        }
        if let Some(ms) = self.settings.max_split_size {
            let bsize = cur.1;
            // Do not split an oversize block for a small request, and do not
            // hand a much bigger oversize block to a big one.
            if (size < ms && bsize >= ms)
                || (size >= ms && bsize >= size + self.settings.max_non_split_rounding)
            {
                return None;
            }
        }
        self.free[p].remove(&cur);
        Some(cur.2)
    }

    /// `alloc_block`: new device memory holding a free block of `size`.
    fn alloc_block(&mut self, size: u64, stream: u64, small: bool) -> Option<u64> {
        let seg = self.settings.allocation_size(size);
        if self.fraction_limit.is_some_and(|l| self.reserved + seg > l) {
            return None;
        }
        if self.settings.expandable_segments {
            return self.allocate_expandable(size, stream, small);
        }
        if self.capacity.is_some_and(|c| self.reserved + seg > c) {
            return None;
        }
        let addr = match self.hint.take() {
            Some((size, at)) if size == seg && self.vacant(at, seg) => at,
            _ => {
                // Past any segment put where the recording had it (a hint
                // above the model's own addresses): two segments over the
                // same bytes break the model.
                let mut a = self.next_address;
                while let Some(end) = self.overlap_end(a, seg) {
                    a = end.div_ceil(GRANULE) * GRANULE;
                }
                self.next_address = a + seg.div_ceil(GRANULE) * GRANULE;
                a
            }
        };
        self.segments.insert(addr, seg);
        self.blocks.insert(addr, Block::segment(seg, stream, small));
        self.grew(seg, SegmentEvent::Alloc(seg));
        Some(addr)
    }

    /// The recording made a segment of `size` bytes at `addr` for the next
    /// request: if the model makes one of that size too, it goes there.
    /// Best fit breaks ties between free blocks of one size by address, as
    /// PyTorch's `BlockComparatorSize` does, so which of two equal blocks a
    /// request takes, and so where the pieces of later splits lie, follows
    /// the device's addresses only if the model's are the same (a 12 MiB
    /// segment of a real GPT run was missed for want of this).
    pub fn hint_segment(&mut self, size: u64, addr: u64) {
        self.hint = Some((size, addr));
    }

    /// Whether no segment of the model overlaps `[addr, addr + size)`.
    pub(crate) fn vacant(&self, addr: u64, size: u64) -> bool {
        self.overlap_end(addr, size).is_none()
    }

    /// The end of the highest segment that overlaps `[addr, addr + size)`,
    /// if one does.
    fn overlap_end(&self, addr: u64, size: u64) -> Option<u64> {
        let (&b, &n) = self.segments.range(..addr + size).next_back()?;
        (b + n > addr).then_some(b + n)
    }

    /// `alloc_found_block`: mark the block at `addr` allocated for `size`
    /// bytes, splitting off the rest when `should_split` says so.
    fn take(&mut self, addr: u64, size: u64) {
        let Some(b) = self.blocks.get(&addr).cloned() else {
            return;
        };
        let remaining = b.size - size;
        let split = if b.small || self.settings.expandable_segments {
            remaining >= MIN_BLOCK
        } else {
            size < self.settings.max_split_size.unwrap_or(u64::MAX) && remaining > SMALL_SIZE
        };
        let mut taken = b.size;
        if split {
            taken = size;
            let rest = addr + size;
            self.blocks.insert(
                rest,
                Block {
                    size: remaining,
                    allocated: false,
                    prev: Some(addr),
                    ..b.clone()
                },
            );
            self.relink_prev(b.next, rest);
            self.cache(rest);
        }
        if let Some(blk) = self.blocks.get_mut(&addr) {
            blk.size = taken;
            blk.allocated = true;
            if split {
                blk.next = Some(addr + size);
            }
        }
        self.allocated += taken;
        self.peak_allocated = self.peak_allocated.max(self.allocated);
    }

    /// Point `next`'s `prev` at `to`.
    pub(crate) fn relink_prev(&mut self, next: Option<u64>, to: u64) {
        if let Some(nb) = next.and_then(|n| self.blocks.get_mut(&n)) {
            nb.prev = Some(to);
        }
    }

    /// Point `prev`'s `next` at `to`.
    pub(crate) fn relink_next(&mut self, prev: Option<u64>, to: u64) {
        if let Some(pb) = prev.and_then(|p| self.blocks.get_mut(&p)) {
            pb.next = Some(to);
        }
    }

    /// `try_merge_blocks`: absorb the neighbour `src` of the uncached block
    /// `dst` when it is free and mapped alike. Returns the merged block's
    /// address (`src`'s when it came first).
    pub(crate) fn try_merge(&mut self, dst: u64, src: Option<u64>) -> u64 {
        let Some(src) = src else {
            return dst;
        };
        let (Some(d), Some(s)) = (self.blocks.get(&dst), self.blocks.get(&src)) else {
            return dst;
        };
        if s.allocated || s.mapped != d.mapped {
            return dst;
        }
        self.uncache(src);
        let s = self.blocks.remove(&src).expect("checked above");
        let mut d = self.blocks.remove(&dst).expect("checked above");
        d.size += s.size;
        let start = if d.prev == Some(src) {
            d.prev = s.prev;
            self.relink_next(s.prev, src);
            self.relink_prev(d.next, src);
            src
        } else {
            d.next = s.next;
            self.relink_prev(s.next, dst);
            dst
        };
        self.blocks.insert(start, d);
        start
    }

    /// Free the block at `addr` (`free_block`), merging it with free
    /// neighbours.
    pub fn free(&mut self, addr: u64) {
        let Some(b) = self.blocks.get_mut(&addr) else {
            return;
        };
        if !b.allocated {
            return;
        }
        b.allocated = false;
        let (size, prev, next) = (b.size, b.prev, b.next);
        self.allocated -= size;
        let at = self.try_merge(addr, prev);
        let at = self.try_merge(at, next);
        self.cache(at);
    }

    /// Bytes of device memory in free blocks (reserved but unallocated).
    pub fn cached(&self) -> u64 {
        self.reserved - self.allocated
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::MIB;

    /// A segment put where the recording had it can lie ahead of the
    /// model's own addresses; the model's next segments go past it rather
    /// than over it. (Found on a cut file: two segments over the same bytes
    /// left a free block the model had lost, and the replay panicked.)
    #[test]
    fn segments_never_overlap_one_put_where_the_recording_had_it() {
        let mut a = Allocator::new(Settings::default(), None);
        let first = a.malloc(30 * MIB, 0).expect("fits");
        // The recording's next segment, 60 MiB above the first.
        a.hint_segment(40 * MIB, first + 60 * MIB);
        let hinted = a.malloc(40 * MIB, 0).expect("fits");
        assert_eq!(hinted, first + 60 * MIB);
        // The model's own segments: the third would run into the hinted one.
        let mut mine = Vec::new();
        for _ in 0..4 {
            mine.push(a.malloc(30 * MIB, 0).expect("fits"));
        }
        let segs: Vec<(u64, u64)> = a.segments.iter().map(|(&b, &n)| (b, n)).collect();
        for w in segs.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "segments overlap: {segs:x?}");
        }
        for (i, &m) in mine.iter().enumerate() {
            assert!(
                m + 30 * MIB <= hinted || m >= hinted + 40 * MIB,
                "segment {i} at {m:#x} is inside the hinted one"
            );
        }
        // Every block freed merges back into whole segments.
        for m in mine.into_iter().chain([first, hinted]) {
            a.free(m);
        }
        assert_eq!(a.allocated, 0);
        assert_eq!(a.free.iter().map(|p| p.len()).sum::<usize>(), segs.len());
    }

    /// Two segments of a damaged file over the same bytes: the second is
    /// left out of the start state.
    #[test]
    fn a_seeded_segment_over_another_is_left_out() {
        let mut a = Allocator::new(Settings::default(), None);
        a.seed_segment(1 << 32, 20 * MIB, 0, false);
        a.seed_segment((1 << 32) + 2 * MIB, 20 * MIB, 0, false);
        a.seed_segment((1 << 32) - 2 * MIB, 4 * MIB, 0, false);
        a.seed_segment((1 << 32) + 20 * MIB, 2 * MIB, 0, true);
        assert_eq!(a.segments.len(), 2);
        assert_eq!(a.reserved, 22 * MIB);
        // A block of no size in use is left out; one of some size is carved.
        assert!(!a.seed_allocated(1 << 32, 0));
        assert!(a.seed_allocated(1 << 32, MIB));
        let x = a.malloc(19 * MIB, 0).expect("the rest of the segment");
        assert_eq!(x, (1 << 32) + MIB);
    }

    #[test]
    fn best_fit_split_merge_and_release() {
        let mut a = Allocator::new(Settings::default(), None);
        let x = a.malloc(100, 0).expect("fits");
        let y = a.malloc(1000, 0).expect("fits");
        // One 2 MiB small segment serves both, split.
        assert_eq!(a.events, vec![SegmentEvent::Alloc(2 * MIB)]);
        assert_eq!(y, x + 512);
        assert_eq!(a.allocated, 512 + 1024);
        a.free(x);
        a.free(y);
        assert_eq!(a.allocated, 0);
        // Merged back into one block: a request of all of it reuses it.
        let z = a.malloc(MIB, 0).expect("fits");
        assert_eq!(z, x);
        assert_eq!(a.events.len(), 1, "{:?}", a.events);
        a.free(z);
        a.release_cached();
        assert_eq!(a.reserved, 0);
        // Large: a 5 MiB request takes a 20 MiB segment, the rest splits off.
        let big = a.malloc(5 * MIB, 0).expect("fits");
        let big2 = a.malloc(5 * MIB, 0).expect("fits");
        assert_eq!(big2, big + 5 * MIB);
        assert_eq!(a.reserved, 20 * MIB);
        // Another stream does not share the cache.
        a.malloc(5 * MIB, 1).expect("fits");
        assert_eq!(a.reserved, 40 * MIB);
    }

    #[test]
    fn capacity_free_and_retry_then_oom() {
        let mut a = Allocator::new(Settings::default(), Some(40 * MIB));
        let p = a.malloc(30 * MIB, 0).expect("fits");
        a.free(p); // cached, not returned
        a.malloc(36 * MIB, 0).expect("fits after release");
        // 36 MiB did not fit next to the cached 30: the cache was released.
        assert_eq!(
            a.events,
            vec![
                SegmentEvent::Alloc(30 * MIB),
                SegmentEvent::Free(30 * MIB),
                SegmentEvent::Alloc(36 * MIB)
            ]
        );
        let e = a.malloc(8 * MIB, 0).expect_err("no room");
        assert_eq!(e.reserved, 36 * MIB);
    }

    #[test]
    fn max_split_size_keeps_oversize_blocks_whole() {
        let mut s = Settings::default();
        s.apply("max_split_size_mb:64").expect("valid");
        let mut a = Allocator::new(s, None);
        let p = a.malloc(100 * MIB, 0).expect("fits");
        a.free(p);
        // A small request may not split the 100 MiB block: new segment.
        a.malloc(30 * MIB, 0).expect("fits");
        assert_eq!(a.reserved, 130 * MIB);
    }
}
