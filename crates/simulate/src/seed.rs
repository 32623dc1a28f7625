//! The allocator's state when a trace starts, rebuilt from the file:
//! segments that existed before it (at their recorded addresses, as one
//! free block each, or as mapped ranges of an expandable segment) and, in
//! them, the blocks in use then.

use crate::model::{Allocator, Block};
use vramscope_gpus::allocator::GRANULE;

impl Allocator {
    /// A segment that existed before the replay, at its recorded address:
    /// one free block (`seed_allocated` then carves out what was in use).
    /// One that overlaps a segment already seeded is left out: only a
    /// damaged file gives two (a trace cut short, whose segment freed at an
    /// address is back in the dump, made again after the cut in a size of
    /// its own), and two blocks over the same bytes break the model.
    pub fn seed_segment(&mut self, addr: u64, size: u64, stream: u64, small: bool) {
        if size == 0 || self.blocks.contains_key(&addr) || !self.vacant(addr, size) {
            return;
        }
        self.blocks
            .insert(addr, Block::segment(size, stream, small));
        self.segments.insert(addr, size);
        self.cache(addr);
        self.reserved += size;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        // New segments of the replay go above every recorded one.
        let end = (addr + size).div_ceil(GRANULE) * GRANULE;
        self.next_address = self.next_address.max(end);
    }

    /// The mapped ranges of one expandable segment, in address order: one
    /// virtual segment from the first range's start, free blocks where
    /// pages were mapped, unmapped blocks between and after them.
    pub fn seed_expandable(&mut self, stream: u64, small: bool, ranges: &[(u64, u64)]) {
        let Some(&(base, _)) = ranges.first() else {
            return;
        };
        let page = self.page(small);
        let end = ranges.iter().map(|r| r.0 + r.1).max().unwrap_or(base);
        let default_space = self.capacity.map_or(1 << 44, |c| c + c / 8);
        let span = (end - base).max(default_space).div_ceil(page) * page;
        let mut at = self.new_expandable(stream, small, Some(base), Some(span));
        for &(addr, size) in ranges {
            // `at` is the unmapped block holding the rest of the segment.
            let Some(b) = self.blocks.get(&at) else {
                return;
            };
            if b.mapped || addr < at || addr + size > at + b.size {
                continue;
            }
            let unmapped = if addr > at {
                // Split off the unmapped gap before this range.
                let gap = addr - at;
                let b = self.blocks[&at].clone();
                self.uncache(at);
                self.blocks.insert(
                    addr,
                    Block {
                        size: b.size - gap,
                        prev: Some(at),
                        ..b.clone()
                    },
                );
                self.relink_prev(b.next, addr);
                if let Some(g) = self.blocks.get_mut(&at) {
                    g.size = gap;
                    g.next = Some(addr);
                }
                self.cache(at);
                self.cache(addr);
                addr
            } else {
                at
            };
            let Some(mapped) = self.map_block_unlimited(unmapped, size) else {
                return;
            };
            at = self.blocks[&mapped].next.unwrap_or(mapped);
        }
    }

    /// `map_block` with no capacity check (the memory was there).
    fn map_block_unlimited(&mut self, addr: u64, size: u64) -> Option<u64> {
        let capacity = self.capacity.take();
        let r = self.map_block(addr, size);
        self.capacity = capacity;
        r
    }

    /// A block in use before the replay: `size` bytes at `addr`, taken out
    /// of the free seeded block that holds them. Returns false when no free
    /// block holds them, or `size` is 0 (a damaged file's block: it would
    /// take the address of the free rest after it).
    pub fn seed_allocated(&mut self, addr: u64, size: u64) -> bool {
        if size == 0 {
            return false;
        }
        let holder = self
            .free
            .iter()
            .flat_map(|p| p.iter())
            .find(|&&(_, bsize, start)| start <= addr && addr + size <= start + bsize)
            .map(|k| k.2);
        let Some(start) = holder else {
            return false;
        };
        let b = self.blocks[&start].clone();
        self.uncache(start);
        let end = start + b.size;
        // Up to three pieces: free before, the allocated block, free after.
        let mut prev = b.prev;
        if addr > start {
            self.blocks.insert(
                start,
                Block {
                    size: addr - start,
                    next: Some(addr),
                    ..b.clone()
                },
            );
            self.cache(start);
            prev = Some(start);
        } else {
            self.blocks.remove(&start);
        }
        let after = addr + size;
        let next = if after < end {
            self.blocks.insert(
                after,
                Block {
                    size: end - after,
                    prev: Some(addr),
                    ..b.clone()
                },
            );
            self.relink_prev(b.next, after);
            self.cache(after);
            Some(after)
        } else {
            self.relink_prev(b.next, addr);
            b.next
        };
        self.relink_next(prev, addr);
        self.blocks.insert(
            addr,
            Block {
                size,
                allocated: true,
                prev,
                next,
                ..b
            },
        );
        self.allocated += size;
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        true
    }
}
