//! Private pools in the replay: which pool each event's memory came from.
//!
//! PyTorch's caching allocator keeps a separate pool of blocks for each
//! CUDA graph capture and each `torch.cuda.MemPool`
//! (`c10/cuda/CUDACachingAllocator.cpp`: `PrivatePool`, `get_pool`): a
//! request made while the pool is in use is served from that pool's cached
//! blocks or a new segment of its own, never from the default pool's, and
//! a block freed there is cached for that pool only. `empty_cache()` and
//! the release that retries a failed `cudaMalloc` (`release_cached_blocks`)
//! leave a pool's segments alone while a graph or a `MemPool` still uses
//! it; they go when the pool is released (`release_pool`, then
//! `empty_cache`), which the trace shows as `segment_free` events of the
//! pool's segments.
//!
//! Which pool an event belongs to: PyTorch 2.15 and later write `pool_id`
//! on every trace entry (read into [`DeviceTrace::pools`]). Older versions
//! write it only on the segments of the dump (`segment_pool_id`): an event
//! whose address lies in a private pool's segment at the dump belongs to
//! that pool, from the segment's own `segment_alloc` on (before it, the
//! range may have been another segment's).
//!
//! The model keeps pools apart the way it keeps streams apart: a private
//! pool's events run on a *lane*, the stream with the pool's number in the
//! bits above any stream pointer (user-space addresses stay below 2^48),
//! so best fit never crosses pools, and the release paths skip lanes with
//! a pool.

use vramscope_snapshot::{Action, DeviceTrace, Snapshot};

/// Bits of a lane that hold the pool's number (0: the default pool).
const POOL_SHIFT: u32 = 48;

/// Whether `lane` is a private pool's (never released by `empty_cache()`).
pub fn is_private(lane: u64) -> bool {
    lane >> POOL_SHIFT != 0
}

/// The pool number of `lane` (0: the default pool).
pub fn pool_of(lane: u64) -> u64 {
    lane >> POOL_SHIFT
}

/// The lane of each event of a device's trace.
#[derive(Clone, Debug, Default)]
pub struct Lanes {
    /// Private pools seen, by number - 1.
    pub pools: Vec<(i64, i64)>,
    /// The pool number of each event (empty: every event in the default pool).
    event_pool: Vec<u16>,
    /// How the pools were told: from the trace's `pool_id`, or from the
    /// dump's segments.
    pub from_trace: bool,
}

impl Lanes {
    /// The lanes of `device`'s trace in `snap`.
    pub fn new(snap: &Snapshot, device: u32) -> Lanes {
        let empty = DeviceTrace::default();
        let t = snap.trace(device).unwrap_or(&empty);
        let mut lanes = Lanes::default();
        // Every private pool of the dump has a number, events or not.
        for s in snap.segments_of(device).filter(|s| s.pool_id != (0, 0)) {
            lanes.number(s.pool_id);
        }
        if !t.pools.is_empty() {
            lanes.from_trace = true;
            lanes.event_pool = vec![0; t.len()];
            for &(i, p) in &t.pools {
                let n = lanes.number(p);
                if let Some(e) = lanes.event_pool.get_mut(i as usize) {
                    *e = n;
                }
            }
            return lanes;
        }
        // The dump's private segments, each from its own segment_alloc on:
        // (start, end, pool number), by start. One pass for the last
        // segment_alloc at each start, one binary search an event.
        let mut private: Vec<(u64, u64, u16)> = snap
            .segments_of(device)
            .filter(|s| s.pool_id != (0, 0))
            .map(|s| (s.address, s.address + s.total_size, lanes.number(s.pool_id)))
            .collect();
        if private.is_empty() {
            return lanes;
        }
        private.sort_unstable_by_key(|r| r.0);
        let start_of = |addr: u64| private.binary_search_by_key(&addr, |r| r.0).ok();
        let mut first = vec![0usize; private.len()];
        for i in 0..t.len() {
            if t.action[i] == Action::SegmentAlloc {
                if let Some(k) = start_of(t.addr[i]) {
                    first[k] = i;
                }
            }
        }
        lanes.event_pool = vec![0; t.len()];
        for i in 0..t.len() {
            if t.action[i] == Action::Oom {
                continue;
            }
            let addr = t.addr[i];
            let k = private.partition_point(|r| r.0 <= addr);
            if k == 0 {
                continue;
            }
            let (_, hi, n) = private[k - 1];
            if addr < hi && i >= first[k - 1] {
                lanes.event_pool[i] = n;
            }
        }
        lanes
    }

    /// The pool number of `id`, given one when first seen.
    fn number(&mut self, id: (i64, i64)) -> u16 {
        let k = match self.pools.iter().position(|&p| p == id) {
            Some(k) => k,
            None => {
                self.pools.push(id);
                self.pools.len() - 1
            }
        };
        (k + 1).min(u16::MAX as usize) as u16
    }

    /// Whether any event is in a private pool.
    pub fn any(&self) -> bool {
        !self.pools.is_empty()
    }

    /// The lane of event `i` on `stream`.
    pub fn of(&self, i: usize, stream: u64) -> u64 {
        lane(self.event_pool.get(i).copied().unwrap_or(0) as u64, stream)
    }

    /// The lane of a dump's segment of pool `id` on `stream`.
    pub fn of_segment(&self, id: (i64, i64), stream: u64) -> u64 {
        let n = self
            .pools
            .iter()
            .position(|&p| p == id)
            .map_or(0, |k| k as u64 + 1);
        lane(n, stream)
    }
}

fn lane(pool: u64, stream: u64) -> u64 {
    (pool << POOL_SHIFT) | (stream & ((1 << POOL_SHIFT) - 1))
}
