//! Expandable segments (`expandable_segments:True`), as in
//! `c10/cuda/CUDACachingAllocator.cpp` (pytorch/pytorch@001074d2, "Note
//! [Expandable Segments]", `ExpandableSegment::map`/`unmap`,
//! `find_expandable_block`, `map_block`, `try_allocate_expandable_block`,
//! `unmap_block`): one virtual segment per stream and pool, sized for
//! 1⅛ of the device; physical pages of 2 MiB (small pool) or 20 MiB (large
//! pool) are mapped at the lowest address where the free and unmapped space
//! in a row can hold the request, and unmapped only when cached memory is
//! released. Each mapping is one `segment_map` of whole pages; each release
//! of a free block's whole pages one `segment_unmap`.

use crate::model::{pool_index, Allocator, Block, Expandable, SegmentEvent};
use crate::settings::SMALL_BUFFER;
use vramscope_gpus::allocator::GRANULE;

/// Address space of a segment when the device's size is unknown.
const UNBOUNDED_SPACE: u64 = 1 << 44;

impl Allocator {
    /// The page size of a pool's expandable segments.
    pub(crate) fn page(&self, small: bool) -> u64 {
        if small {
            SMALL_BUFFER
        } else {
            self.settings.large_segment_size
        }
    }

    /// A new expandable segment for (stream, pool) at `base` (or the next
    /// free address), one unmapped block over all its address space, or
    /// `span` bytes of it. Returns the block's address.
    pub(crate) fn new_expandable(
        &mut self,
        stream: u64,
        small: bool,
        base: Option<u64>,
        span: Option<u64>,
    ) -> u64 {
        let page = self.page(small);
        // ExpandableSegment: address space for 1 1/8 of the device.
        let space = self
            .capacity
            .map_or(UNBOUNDED_SPACE, |c| c + c / 8)
            .div_ceil(page)
            * page;
        let space = span.unwrap_or(space).max(page);
        let base = base.unwrap_or_else(|| self.next_address.div_ceil(page) * page);
        self.next_address = self
            .next_address
            .max((base + space).div_ceil(GRANULE) * GRANULE);
        let id = self.expandables.len();
        self.expandables.push(Some(Expandable { base, page }));
        self.blocks.insert(
            base,
            // Address space only: mapped page by page as allocations need it.
            Block {
                mapped: false,
                expandable: Some(id),
                ..Block::segment(space, stream, small)
            },
        );
        self.cache(base);
        base
    }

    /// `try_allocate_expandable_block`: map pages until a free block of at
    /// least `size` exists; that block, out of the pool.
    pub(crate) fn allocate_expandable(
        &mut self,
        size: u64,
        stream: u64,
        small: bool,
    ) -> Option<u64> {
        let mut c = self.find_expandable(size, stream, small);
        if !self.blocks[&c].mapped {
            let len = self.blocks[&c].size.min(size);
            c = self.map_block(c, len)?;
        }
        while self.blocks[&c].size < size {
            // Free mapped space followed by unmapped space: map the rest.
            let remaining = size - self.blocks[&c].size;
            let next = self.blocks[&c].next?;
            let len = remaining.min(self.blocks[&next].size);
            c = self.map_block(next, len)?;
        }
        self.uncache(c);
        Some(c)
    }

    /// `find_expandable_block`: the lowest unmapped range of the stream's
    /// segments (with the free block before it) that, with what follows,
    /// has room for `size`; else a new segment.
    fn find_expandable(&mut self, size: u64, stream: u64, small: bool) -> u64 {
        let p = pool_index(small);
        let free = |a: &Allocator, x: Option<u64>| {
            x.filter(|x| a.blocks.get(x).is_some_and(|b| !b.allocated))
        };
        let found = self.unmapped[p]
            .range((stream, 0)..)
            .take_while(|k| k.0 == stream)
            .map(|&(_, a)| free(self, self.blocks[&a].prev).unwrap_or(a))
            .find(|&c| {
                let (mut bytes, mut at) = (0, Some(c));
                while let Some(b) = free(self, at).map(|x| &self.blocks[&x]) {
                    if bytes >= size {
                        break;
                    }
                    bytes += b.size;
                    at = b.next;
                }
                bytes >= size
            });
        match found {
            Some(c) => c,
            None => self.new_expandable(stream, small, None, None),
        }
    }

    /// `map_block`: back the first `size` bytes (whole pages) of the
    /// unmapped block at `addr`; merge them with free neighbours. The
    /// merged free block's address, or `None` when the device is full.
    pub(crate) fn map_block(&mut self, addr: u64, size: u64) -> Option<u64> {
        let b = self.blocks.get(&addr)?.clone();
        let es = self.expandables.get(b.expandable?)?.clone()?;
        let begin = (addr - es.base) / es.page;
        let end = (addr + size - es.base).div_ceil(es.page);
        let bytes = ((end - begin) * es.page).min(b.size);
        if bytes == 0 || self.capacity.is_some_and(|c| self.reserved + bytes > c) {
            return None;
        }
        self.uncache(addr);
        if bytes < b.size {
            let rest = addr + bytes;
            self.blocks.insert(
                rest,
                Block {
                    size: b.size - bytes,
                    prev: Some(addr),
                    ..b.clone()
                },
            );
            self.relink_prev(b.next, rest);
            self.cache(rest);
        }
        let blk = self.blocks.get_mut(&addr)?;
        blk.mapped = true;
        blk.size = bytes;
        if bytes < b.size {
            blk.next = Some(addr + bytes);
        }
        let next = blk.next;
        let at = self.try_merge(addr, b.prev);
        let at = self.try_merge(at, next);
        self.cache(at);
        self.grew(bytes, SegmentEvent::Map(bytes));
        Some(at)
    }

    /// `unmap_block`: give back the whole pages inside the free block at
    /// `addr`; the pieces of pages around them stay free and mapped.
    /// Returns the unmapped block's address when pages were unmapped.
    pub(crate) fn unmap_block(&mut self, addr: u64) -> Option<u64> {
        let b = self.blocks.get(&addr)?.clone();
        let es = self.expandables.get(b.expandable?)?.clone()?;
        let begin = (addr - es.base).div_ceil(es.page);
        let end = (addr + b.size - es.base) / es.page;
        if begin >= end {
            return None;
        }
        self.uncache(addr);
        self.blocks.remove(&addr);
        let start = es.base + begin * es.page;
        let bytes = (end - begin) * es.page;
        let (mut prev, mut next) = (b.prev, b.next);
        if start > addr {
            // prev -> before (free, mapped) -> the unmapped pages
            self.blocks.insert(
                addr,
                Block {
                    size: start - addr,
                    next: Some(start),
                    ..b.clone()
                },
            );
            self.cache(addr);
            prev = Some(addr);
        } else {
            self.relink_next(b.prev, start);
        }
        let after = start + bytes;
        if after < addr + b.size {
            self.blocks.insert(
                after,
                Block {
                    size: addr + b.size - after,
                    prev: Some(start),
                    ..b.clone()
                },
            );
            self.relink_prev(b.next, after);
            self.cache(after);
            next = Some(after);
        } else {
            self.relink_prev(b.next, start);
        }
        self.blocks.insert(
            start,
            Block {
                size: bytes,
                mapped: false,
                prev,
                next,
                ..b
            },
        );
        let at = self.try_merge(start, prev);
        let next = self.blocks[&at].next;
        let at = self.try_merge(at, next);
        self.cache(at);
        self.reserved -= bytes;
        self.events.push(SegmentEvent::Unmap(bytes));
        Some(at)
    }

    /// `release_expandable_segment`: a segment with nothing mapped left.
    pub(crate) fn drop_expandable(&mut self, addr: u64) {
        let Some(b) = self.blocks.get(&addr) else {
            return;
        };
        if b.mapped || b.is_split() {
            return;
        }
        let id = b.expandable;
        self.uncache(addr);
        self.blocks.remove(&addr);
        if let Some(slot) = id.and_then(|i| self.expandables.get_mut(i)) {
            *slot = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::model::SegmentEvent::*;
    use crate::settings::MIB;
    use crate::{Allocator, Settings};

    fn expandable(capacity: Option<u64>) -> Allocator {
        let mut s = Settings::default();
        s.apply("expandable_segments:True").expect("valid");
        Allocator::new(s, capacity)
    }

    #[test]
    fn maps_whole_pages_and_grows_in_place() {
        let mut a = expandable(None);
        let x = a.malloc(30 * MIB, 0).expect("fits");
        // 30 MiB: two 20 MiB pages; the 10 MiB left stays free behind it.
        assert_eq!(a.events, vec![Map(40 * MIB)]);
        let y = a.malloc(25 * MIB, 0).expect("fits");
        // 10 MiB free at the end of the mapping + one more page, contiguous.
        assert_eq!(y, x + 30 * MIB);
        assert_eq!(a.events, vec![Map(40 * MIB), Map(20 * MIB)]);
        assert_eq!(a.reserved, 60 * MIB);
        // A small request has its own segment, mapped in 2 MiB pages.
        a.malloc(1000, 0).expect("fits");
        assert_eq!(a.events.last(), Some(&Map(2 * MIB)));
        a.free(x);
        a.free(y);
        a.release_cached();
        // The large segment's free pages go back in one unmap; the small
        // one still has its block.
        assert_eq!(a.events[3..], [Unmap(60 * MIB)]);
        assert_eq!(a.reserved, 2 * MIB);
    }

    #[test]
    fn an_unmapped_hole_is_refilled_first() {
        let mut a = expandable(None);
        let x = a.malloc(20 * MIB, 0).expect("fits");
        let y = a.malloc(20 * MIB, 0).expect("fits");
        a.free(x);
        a.release_cached(); // unmaps x's page: a hole below y
        assert_eq!(a.reserved, 20 * MIB);
        let z = a.malloc(20 * MIB, 0).expect("fits");
        assert_eq!(z, x, "lowest address first");
        assert!(y > z);
        assert_eq!(
            a.events,
            vec![Map(20 * MIB), Map(20 * MIB), Unmap(20 * MIB), Map(20 * MIB)]
        );
    }

    #[test]
    fn capacity_counts_pages_not_requests() {
        // Two 30 MiB tensors share three 20 MiB pages; a 32 MiB one after
        // the first is freed maps two more pages at the end (x's 30 MiB
        // is too small), which still fits in 100 MiB.
        let mut a = expandable(Some(100 * MIB));
        let x = a.malloc(30 * MIB, 0).expect("fits");
        let _y = a.malloc(30 * MIB, 0).expect("fits");
        a.free(x);
        a.malloc(32 * MIB, 0).expect("fits at the end");
        assert_eq!(a.reserved, 100 * MIB);
        assert!(a.reserved <= 100 * MIB);
        assert!(a.malloc(60 * MIB, 0).is_err());
    }
}
