//! Giving device memory back, as `c10/cuda/CUDACachingAllocator.cpp`
//! (pytorch/pytorch@001074d2) does when a new segment does not fit:
//! `release_available_cached_blocks` (with `max_split_size` only: one
//! oversize cached block big enough, else the largest ones until enough),
//! `release_cached_blocks` (every unsplit cached segment, large pool then
//! small, and the whole free pages of expandable segments), and
//! `garbage_collect_cached_blocks` (with a memory fraction and
//! `garbage_collection_threshold`: the oldest unsplit large blocks until
//! reserved memory is back under the threshold).

use crate::model::{pool_index, Allocator, SegmentEvent};
use crate::pools::{is_private, pool_of};

impl Allocator {
    /// `release_block`: cudaFree of the unsplit free segment at `addr`.
    fn release_block(&mut self, addr: u64) {
        let Some(b) = self.blocks.get(&addr) else {
            return;
        };
        if b.allocated || b.is_split() || b.expandable.is_some() {
            return;
        }
        let size = b.size;
        self.uncache(addr);
        self.blocks.remove(&addr);
        self.segments.remove(&addr);
        self.reserved -= size;
        self.events.push(SegmentEvent::Free(size));
    }

    /// Whether cached blocks of `lane` may be given back: the default
    /// pool's always, a private pool's once the program released the pool.
    fn releasable(&self, lane: u64) -> bool {
        !is_private(lane) || self.released_pools.contains(&pool_of(lane))
    }

    /// The program released private pool `pool` (its graphs or `MemPool`
    /// are gone): its cached segments go at the next release.
    pub fn release_pool(&mut self, pool: u64) {
        self.released_pools.insert(pool);
    }

    /// `release_available_cached_blocks`: with `max_split_size`, free the
    /// smallest oversize cached block of the stream that is at least the
    /// request (and at least max_split_size), or else the largest oversize
    /// ones until their total is. Whether enough was freed.
    pub(crate) fn release_available(&mut self, size: u64, stream: u64, small: bool) -> bool {
        let Some(ms) = self.settings.max_split_size else {
            return false;
        };
        let p = pool_index(small);
        let key = size.max(ms);
        if let Some(&(s, _, a)) = self.free[p].range((stream, key, 0)..).next() {
            if s == stream {
                self.release_block(a);
                return true;
            }
        }
        let mut released = 0;
        let largest: Vec<(u64, u64, u64)> = self.free[p]
            .range(..(stream, key, 0))
            .rev()
            .take_while(|&&(s, bsize, _)| s == stream && bsize >= ms)
            .copied()
            .collect();
        for (_, bsize, a) in largest {
            if released >= key {
                break;
            }
            released += bsize;
            self.release_block(a);
        }
        released >= key
    }

    /// `release_cached_blocks` (also `torch.cuda.empty_cache()`): every
    /// unsplit cached segment of the default pool, large then small, then
    /// those of the private pools the program released, large then small
    /// (`graph_pools_freeable`); free blocks of expandable segments give
    /// back their whole pages, and a segment left with nothing mapped is
    /// dropped. A private pool still in use keeps its cached blocks.
    pub fn release_cached(&mut self) {
        for private in [false, true] {
            for small in [false, true] {
                let p = pool_index(small);
                let blocks: Vec<(u64, u64, u64)> = self.free[p]
                    .iter()
                    .filter(|&&(lane, _, _)| is_private(lane) == private && self.releasable(lane))
                    .copied()
                    .collect();
                let mut to_unmap = Vec::new();
                for (_, _, a) in blocks {
                    let b = &self.blocks[&a];
                    if b.expandable.is_some() {
                        to_unmap.push(a);
                    } else if !b.is_split() {
                        self.release_block(a);
                    }
                }
                for a in to_unmap {
                    if let Some(u) = self.unmap_block(a) {
                        self.drop_expandable(u);
                    }
                }
            }
        }
    }

    /// `garbage_collect_cached_blocks`: when reserved memory is above
    /// `garbage_collection_threshold` of the allowed maximum, free unsplit
    /// cached large blocks at least as old as the average (age: searches of
    /// the pool since the block was cached), round after round, until the
    /// excess is reclaimed or nothing more can go.
    pub(crate) fn garbage_collect(&mut self) {
        let Some(allowed) = self.fraction_limit else {
            return;
        };
        let threshold = (self.settings.garbage_collection_threshold * allowed as f64) as u64;
        if self.reserved <= threshold {
            return;
        }
        let target = self.reserved - threshold;
        let p = pool_index(false);
        let now = self.gc_calls[p];
        let freeable = |a: &Allocator| -> Vec<(u64, u64, u64)> {
            a.free[p]
                .iter()
                .filter(|k| {
                    let b = &a.blocks[&k.2];
                    !b.is_split() && b.expandable.is_none() && !is_private(k.0)
                })
                .map(|&(_, size, addr)| (addr, size, now - a.blocks[&addr].gc_base))
                .collect()
        };
        let mut reclaimed = 0;
        loop {
            let blocks = freeable(self);
            if blocks.is_empty() || reclaimed >= target {
                return;
            }
            let total: u64 = blocks.iter().map(|b| b.2).sum();
            let average = total as f64 / blocks.len() as f64;
            let mut freed = false;
            for (addr, size, age) in blocks {
                if age as f64 >= average {
                    self.release_block(addr);
                    reclaimed += size;
                    freed = true;
                }
            }
            if !freed {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::model::SegmentEvent::*;
    use crate::settings::MIB;
    use crate::{Allocator, Settings};

    #[test]
    fn oversize_release_frees_one_block_big_enough() {
        let mut s = Settings::default();
        s.apply("max_split_size_mb:64").expect("valid");
        let mut a = Allocator::new(s, Some(400 * MIB));
        let x = a.malloc(100 * MIB, 0).expect("fits");
        let y = a.malloc(150 * MIB, 0).expect("fits");
        let z = a.malloc(120 * MIB, 0).expect("fits");
        for p in [x, y, z] {
            a.free(p);
        }
        // 200 MiB: no cached block is that big and only 30 MiB are left on
        // the device; no single oversize block reaches 200 MiB, so the
        // largest go first, 150 then 120, until 200 are freed.
        a.malloc(200 * MIB, 0).expect("fits after releasing two");
        assert_eq!(
            a.events[3..],
            [Free(150 * MIB), Free(120 * MIB), Alloc(200 * MIB)]
        );
        assert_eq!(a.reserved, 300 * MIB);
    }

    #[test]
    fn garbage_collection_needs_a_memory_fraction() {
        let mut s = Settings::default();
        s.apply("garbage_collection_threshold:0.5").expect("valid");
        let run = |fraction: Option<u64>| {
            let mut a = Allocator::new(s.clone(), Some(100 * MIB));
            a.fraction_limit = fraction;
            let x = a.malloc(40 * MIB, 0).expect("fits");
            a.free(x);
            // Another stream cannot use x's cached block.
            a.malloc(30 * MIB, 1).expect("fits");
            a.malloc(20 * MIB, 1).expect("fits");
            a.events
        };
        // Without a fraction the threshold does nothing: 90 MiB reserved.
        assert_eq!(
            run(None),
            vec![Alloc(40 * MIB), Alloc(30 * MIB), Alloc(20 * MIB)]
        );
        // With one, 70 MiB reserved is above half of 100: the cached 40
        // MiB block is collected before the new segment.
        assert_eq!(
            run(Some(100 * MIB)),
            vec![
                Alloc(40 * MIB),
                Alloc(30 * MIB),
                Free(40 * MIB),
                Alloc(20 * MIB)
            ]
        );
    }
}
