//! The caching allocator's state and its `malloc`/`free`, following
//! `DeviceCachingAllocator` in `c10/cuda/CUDACachingAllocator.cpp`: two
//! pools of free blocks ordered by (stream, size, address), best fit, block
//! splitting, merging with free neighbours on free, and on a failed
//! `cudaMalloc` the release of oversize cached blocks, then of every cached
//! segment, before an out-of-memory error.

use std::collections::{BTreeSet, HashMap};

use crate::settings::{Settings, MIN_BLOCK, SMALL_SIZE};

/// What the model did to the device, in order (the trace's segment events).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentEvent {
    /// `cudaMalloc` of a segment of this many bytes.
    Alloc(u64),
    /// `cudaFree` of a segment of this many bytes.
    Free(u64),
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
struct Block {
    size: u64,
    stream: u64,
    small: bool,
    allocated: bool,
    /// Neighbours inside the same segment (addresses).
    prev: Option<u64>,
    next: Option<u64>,
}

/// The allocator of one device.
#[derive(Clone, Debug)]
pub struct Allocator {
    pub settings: Settings,
    /// Device memory PyTorch may reserve (`None`: unlimited).
    pub capacity: Option<u64>,
    blocks: HashMap<u64, Block>,
    /// Free blocks: (stream, size, address), per pool.
    small_free: BTreeSet<(u64, u64, u64)>,
    large_free: BTreeSet<(u64, u64, u64)>,
    next_address: u64,
    pub reserved: u64,
    pub allocated: u64,
    pub peak_reserved: u64,
    pub peak_allocated: u64,
    pub events: Vec<SegmentEvent>,
}

impl Allocator {
    pub fn new(settings: Settings, capacity: Option<u64>) -> Allocator {
        Allocator {
            settings,
            capacity,
            blocks: HashMap::new(),
            small_free: BTreeSet::new(),
            large_free: BTreeSet::new(),
            // Segments get addresses in increasing order, 2 MiB aligned, as
            // fresh cudaMalloc results usually are.
            next_address: 1 << 40,
            reserved: 0,
            allocated: 0,
            peak_reserved: 0,
            peak_allocated: 0,
            events: Vec::new(),
        }
    }

    fn pool(&mut self, small: bool) -> &mut BTreeSet<(u64, u64, u64)> {
        if small {
            &mut self.small_free
        } else {
            &mut self.large_free
        }
    }

    /// Allocate `request` bytes on `stream`; the block's address.
    pub fn malloc(&mut self, request: u64, stream: u64) -> Result<u64, OutOfMemory> {
        let size = self.settings.round_size(request);
        let small = self.settings.is_small(size);
        let addr = match self.best_fit(size, stream, small) {
            Some(a) => a,
            None => match self.new_segment(size, stream, small) {
                Some(a) => a,
                None => {
                    // Free-and-retry: oversize cached blocks first (only with
                    // max_split_size), then every cached segment.
                    if self.settings.max_split_size.is_some() {
                        self.release_cached(true);
                    }
                    match self.new_segment(size, stream, small) {
                        Some(a) => a,
                        None => {
                            self.release_cached(false);
                            self.new_segment(size, stream, small).ok_or(OutOfMemory {
                                size,
                                reserved: self.reserved,
                                allocated: self.allocated,
                            })?
                        }
                    }
                }
            },
        };
        self.take(addr, size, small);
        Ok(addr)
    }

    /// `get_free_block`: the smallest free block of the stream that fits,
    /// lowest address first, within the max_split_size rules.
    fn best_fit(&mut self, size: u64, stream: u64, small: bool) -> Option<u64> {
        let max_split = self.settings.max_split_size;
        let rounding = self.settings.max_non_split_rounding;
        let &(s, bsize, addr) = self.pool(small).range((stream, size, 0)..).next()?;
        if s != stream {
            return None;
        }
        if let Some(ms) = max_split {
            // Do not split an oversize block for a small request, and do not
            // hand a much bigger oversize block to a big one.
            if (size < ms && bsize >= ms) || (size >= ms && bsize >= size + rounding) {
                return None;
            }
        }
        self.pool(small).remove(&(s, bsize, addr));
        Some(addr)
    }

    /// `alloc_block`: a new segment (one free block) if the device has room.
    fn new_segment(&mut self, size: u64, stream: u64, small: bool) -> Option<u64> {
        let seg = self.settings.allocation_size(size);
        if self.capacity.is_some_and(|c| self.reserved + seg > c) {
            return None;
        }
        let addr = self.next_address;
        self.next_address += seg.div_ceil(2 << 20) * (2 << 20);
        self.blocks.insert(
            addr,
            Block {
                size: seg,
                stream,
                small,
                allocated: false,
                prev: None,
                next: None,
            },
        );
        self.reserved += seg;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        self.events.push(SegmentEvent::Alloc(seg));
        Some(addr)
    }

    /// Mark the block at `addr` allocated for `size` bytes, splitting off
    /// the remainder when `should_split` says so.
    fn take(&mut self, addr: u64, size: u64, small: bool) {
        let max_split = self.settings.max_split_size.unwrap_or(u64::MAX);
        let Some(b) = self.blocks.get(&addr).cloned() else {
            return;
        };
        let remaining = b.size - size;
        let split = if small {
            remaining >= MIN_BLOCK
        } else {
            size < max_split && remaining > SMALL_SIZE
        };
        let mut taken = b.size;
        if split {
            taken = size;
            let rest = addr + size;
            self.blocks.insert(
                rest,
                Block {
                    size: remaining,
                    stream: b.stream,
                    small,
                    allocated: false,
                    prev: Some(addr),
                    next: b.next,
                },
            );
            if let Some(n) = b.next {
                if let Some(nb) = self.blocks.get_mut(&n) {
                    nb.prev = Some(rest);
                }
            }
            self.pool(small).insert((b.stream, remaining, rest));
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

    /// Free the block at `addr`, merging it with free neighbours.
    pub fn free(&mut self, addr: u64) {
        let Some(b) = self.blocks.get(&addr).cloned() else {
            return;
        };
        if !b.allocated {
            return;
        }
        self.allocated -= b.size;
        let (mut start, mut size, mut next) = (addr, b.size, b.next);
        let mut prev = b.prev;
        if let Some(p) = prev {
            if let Some(pb) = self.blocks.get(&p).cloned().filter(|pb| !pb.allocated) {
                self.pool(b.small).remove(&(pb.stream, pb.size, p));
                self.blocks.remove(&addr);
                start = p;
                size += pb.size;
                prev = pb.prev;
            }
        }
        if let Some(n) = next {
            if let Some(nb) = self.blocks.get(&n).cloned().filter(|nb| !nb.allocated) {
                self.pool(b.small).remove(&(nb.stream, nb.size, n));
                self.blocks.remove(&n);
                size += nb.size;
                next = nb.next;
            }
        }
        if let Some(n) = next {
            if let Some(nb) = self.blocks.get_mut(&n) {
                nb.prev = Some(start);
            }
        }
        self.blocks.insert(
            start,
            Block {
                size,
                stream: b.stream,
                small: b.small,
                allocated: false,
                prev,
                next,
            },
        );
        self.pool(b.small).insert((b.stream, size, start));
    }

    /// A segment that existed before the replay, at its recorded address:
    /// one free block (`seed_allocated` then carves out what was in use).
    pub fn seed_segment(&mut self, addr: u64, size: u64, stream: u64, small: bool) {
        if size == 0 || self.blocks.contains_key(&addr) {
            return;
        }
        self.blocks.insert(
            addr,
            Block {
                size,
                stream,
                small,
                allocated: false,
                prev: None,
                next: None,
            },
        );
        self.pool(small).insert((stream, size, addr));
        self.reserved += size;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        // New segments of the replay go above every recorded one.
        let end = (addr + size).div_ceil(2 << 20) * (2 << 20);
        self.next_address = self.next_address.max(end);
    }

    /// A block in use before the replay: `size` bytes at `addr`, taken out
    /// of the free seeded block that holds them. Returns false when no free
    /// block holds them.
    pub fn seed_allocated(&mut self, addr: u64, size: u64) -> bool {
        let holder = self
            .small_free
            .iter()
            .chain(self.large_free.iter())
            .find(|&&(_, bsize, start)| start <= addr && addr + size <= start + bsize)
            .copied();
        let Some((stream, bsize, start)) = holder else {
            return false;
        };
        let Some(b) = self.blocks.get(&start).cloned() else {
            return false;
        };
        self.pool(b.small).remove(&(stream, bsize, start));
        let end = start + bsize;
        // Up to three pieces: free before, the allocated block, free after.
        let mut prev = b.prev;
        if addr > start {
            self.blocks.insert(
                start,
                Block {
                    size: addr - start,
                    stream,
                    small: b.small,
                    allocated: false,
                    prev,
                    next: Some(addr),
                },
            );
            self.pool(b.small).insert((stream, addr - start, start));
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
                    stream,
                    small: b.small,
                    allocated: false,
                    prev: Some(addr),
                    next: b.next,
                },
            );
            self.pool(b.small).insert((stream, end - after, after));
            if let Some(n) = b.next {
                if let Some(nb) = self.blocks.get_mut(&n) {
                    nb.prev = Some(after);
                }
            }
            Some(after)
        } else {
            if let Some(n) = b.next {
                if let Some(nb) = self.blocks.get_mut(&n) {
                    nb.prev = Some(addr);
                }
            }
            b.next
        };
        if let Some(p) = prev {
            if let Some(pb) = self.blocks.get_mut(&p) {
                pb.next = Some(addr);
            }
        }
        self.blocks.insert(
            addr,
            Block {
                size,
                stream,
                small: b.small,
                allocated: true,
                prev,
                next,
            },
        );
        self.allocated += size;
        self.peak_allocated = self.peak_allocated.max(self.allocated);
        true
    }

    /// `release_cached_blocks` (or, with `oversize_only`,
    /// `release_available_cached_blocks`): cudaFree every free block that is
    /// a whole segment, large pool then small.
    pub fn release_cached(&mut self, oversize_only: bool) {
        let max_split = self.settings.max_split_size.unwrap_or(u64::MAX);
        for small in [false, true] {
            let pool = if small {
                &self.small_free
            } else {
                &self.large_free
            };
            let whole: Vec<(u64, u64, u64)> = pool
                .iter()
                .copied()
                .filter(|&(_, size, a)| {
                    let b = &self.blocks[&a];
                    b.prev.is_none() && b.next.is_none() && (!oversize_only || size >= max_split)
                })
                .collect();
            for key @ (_, size, a) in whole {
                self.pool(small).remove(&key);
                self.blocks.remove(&a);
                self.reserved -= size;
                self.events.push(SegmentEvent::Free(size));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::MIB;

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
        // Merged back into one block: reusing it makes no new segment.
        let z = a.malloc(2 * MIB - 512, 0).expect("fits");
        assert_eq!(a.events.len(), 2, "{:?}", a.events);
        a.free(z);
        a.release_cached(false);
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
                   // 36 MiB does not fit next to the cached 30: the cache is released.
        a.malloc(36 * MIB, 0).expect("fits after release");
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
