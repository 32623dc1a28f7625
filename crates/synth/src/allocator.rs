//! A simulation of PyTorch's CUDA caching allocator (one device, one
//! stream): sizes rounded to 512 bytes, a small pool (requests up to 1 MiB,
//! 2 MiB segments) and a large pool (20 MiB segments, or the request
//! rounded up to 2 MiB from 10 MiB on), best-fit reuse of cached blocks,
//! splitting when the remainder is useful, coalescing with free neighbours,
//! and optionally expandable segments ([`crate::expandable`]).
//!
//! This is deliberately a second, independent implementation of the
//! allocator that `crates/simulate` models: the generator's truth is an
//! oracle for the reader and the replay, so the two must not share code (a
//! bug shared would agree with itself). Change one, check the other against
//! it (`crates/synth/tests/snapshots.rs` and `crates/cli/tests/simulate.rs`
//! compare what is read and replayed with [`crate::SynthTruth`]).

use crate::expandable::{Space, SPAN};
use crate::stacks::StackId;
use crate::trace::Action;
use std::collections::{BTreeSet, HashMap};

pub(crate) use vramscope_gpus::allocator::SMALL_SIZE;
use vramscope_gpus::allocator::{
    LARGE_BUFFER, MIN_BLOCK, MIN_LARGE_ALLOC, ROUND_LARGE, SMALL_BUFFER,
};

#[derive(Clone, Debug)]
pub(crate) struct Block {
    pub addr: u64,
    pub size: u64,
    /// Size asked for by the last allocation of this block.
    pub requested: u64,
    pub allocated: bool,
    /// False for the unmapped address space of an expandable segment.
    pub mapped: bool,
    /// The allocation call: its frames list in the trace.
    pub ctx: u64,
    pub stack: StackId,
    pub(crate) seg: usize,
    pub(crate) prev: Option<u64>,
    pub(crate) next: Option<u64>,
}

#[derive(Clone, Debug)]
pub(crate) struct Segment {
    pub addr: u64,
    /// Bytes reserved (mapped, for an expandable segment).
    pub size: u64,
    pub small: bool,
    pub expandable: bool,
    live: bool,
}

/// Allocator state; the caller records the events it reports.
pub(crate) struct Allocator {
    blocks: HashMap<u64, Block>,
    segments: Vec<Segment>,
    free: [BTreeSet<(u64, u64)>; 2],
    /// With expandable segments: one per pool (index 1: large).
    spaces: Option<[Option<Space>; 2]>,
    next_va: u64,
    /// Non-expandable segments that are entirely free (releasable).
    idle_segments: u64,
    pub reserved: u64,
}

/// `size` rounded as the allocator does (at least 512, multiple of 512).
pub(crate) fn round_size(size: u64) -> u64 {
    vramscope_gpus::allocator::block_size(size)
}

fn pool(size: u64) -> usize {
    (size > SMALL_SIZE) as usize
}

impl Allocator {
    pub(crate) fn new(base: u64, expandable: bool) -> Allocator {
        Allocator {
            blocks: HashMap::new(),
            segments: Vec::new(),
            free: [BTreeSet::new(), BTreeSet::new()],
            spaces: expandable.then_some([None, None]),
            next_va: base,
            idle_segments: 0,
            reserved: 0,
        }
    }

    /// How many `segment_alloc`/`segment_map` entries allocating
    /// `requested` bytes makes.
    pub(crate) fn growth_events(&self, requested: u64) -> u64 {
        let size = round_size(requested);
        let p = pool(size);
        match &self.spaces {
            Some(spaces) => match &spaces[p] {
                Some(sp) if sp.fit(size).is_some() => 0,
                Some(sp) => sp.growth_events(size).unwrap_or(1) as u64,
                None => 1,
            },
            None => self.free[p].range((size, 0)..).next().is_none() as u64,
        }
    }

    /// Allocates; returns the block address and the segment events it
    /// needed, as `(action, address, size)`.
    pub(crate) fn malloc(
        &mut self,
        requested: u64,
        ctx: u64,
        stack: StackId,
    ) -> (u64, Vec<(Action, u64, u64)>) {
        let size = round_size(requested);
        let p = pool(size);
        if self.spaces.is_some() {
            return self.malloc_expandable(size, requested, ctx, stack);
        }
        let mut grow = Vec::new();
        let addr = match self.free[p].range((size, 0)..).next() {
            Some(&(_, addr)) => addr,
            None => {
                let (addr, event) = self.new_segment(p, size);
                grow.push(event);
                addr
            }
        };
        let b = self.blocks.get(&addr).expect("free block");
        let (bsize, seg) = (b.size, b.seg);
        self.free[p].remove(&(bsize, addr));
        if b.prev.is_none() && b.next.is_none() && !self.segments[seg].expandable {
            self.idle_segments -= 1;
        }
        let remaining = bsize - size;
        let split = if p == 0 {
            remaining >= MIN_BLOCK
        } else {
            remaining > SMALL_SIZE
        };
        if split {
            let rest = addr + size;
            let next = self.blocks[&addr].next;
            if let Some(n) = next {
                self.blocks.get_mut(&n).expect("next").prev = Some(rest);
            }
            let block = Block {
                addr: rest,
                size: remaining,
                requested: 0,
                allocated: false,
                mapped: true,
                ctx: 0,
                stack,
                seg,
                prev: Some(addr),
                next,
            };
            self.blocks.insert(rest, block);
            self.free[p].insert((remaining, rest));
        }
        let b = self.blocks.get_mut(&addr).expect("block");
        if split {
            b.size = size;
            b.next = Some(addr + size);
        }
        b.allocated = true;
        b.requested = requested;
        b.ctx = ctx;
        b.stack = stack;
        (addr, grow)
    }

    fn malloc_expandable(
        &mut self,
        size: u64,
        requested: u64,
        ctx: u64,
        stack: StackId,
    ) -> (u64, Vec<(Action, u64, u64)>) {
        let p = pool(size);
        let next_va = &mut self.next_va;
        let spaces = self.spaces.as_mut().expect("expandable");
        let space = spaces[p].get_or_insert_with(|| {
            // A new segment, aligned to its pages.
            let base = next_va.div_ceil(LARGE_BUFFER) * LARGE_BUFFER;
            *next_va = base + SPAN;
            Space::new(base, p == 0)
        });
        let before = space.mapped;
        let (i, events) = match space.fit(size) {
            Some(i) => (i, Vec::new()),
            None => space
                .grow(size)
                .expect("the segment spans more than the device"),
        };
        let addr = space.take(i, size);
        let b = &mut space.pieces[i];
        (b.requested, b.ctx, b.stack) = (requested, ctx, stack);
        self.reserved += space.mapped - before;
        (addr, events)
    }

    /// Frees the block at `addr`; returns its requested size.
    pub(crate) fn free(&mut self, addr: u64) -> u64 {
        if let Some(spaces) = self.spaces.as_mut() {
            for sp in spaces.iter_mut().flatten() {
                if let Some(i) = sp.find(addr).filter(|&i| sp.pieces[i].allocated) {
                    let requested = sp.pieces[i].requested;
                    sp.free(i);
                    return requested;
                }
            }
            debug_assert!(false, "free of an unknown block");
            return 0;
        }
        let b = self.blocks.get_mut(&addr).expect("allocated block");
        debug_assert!(b.allocated, "double free");
        b.allocated = false;
        let (requested, seg) = (b.requested, b.seg);
        let (mut head, p) = (addr, self.seg_pool(seg));
        if let Some(prev) = self.blocks[&addr].prev {
            if !self.blocks[&prev].allocated {
                self.merge(prev, addr, p);
                head = prev;
            }
        }
        if let Some(next) = self.blocks[&head].next {
            if !self.blocks[&next].allocated {
                self.merge(head, next, p);
            }
        }
        let b = &self.blocks[&head];
        self.free[p].insert((b.size, head));
        if b.prev.is_none() && b.next.is_none() && !self.segments[b.seg].expandable {
            self.idle_segments += 1;
        }
        requested
    }

    /// Absorbs free block `b` into the block before it, `a` (both leave the
    /// free set; the caller inserts the result).
    fn merge(&mut self, a: u64, b: u64, p: usize) {
        let gone = self.blocks.remove(&b).expect("block");
        self.free[p].remove(&(gone.size, b));
        self.free[p].remove(&(self.blocks[&a].size, a));
        if let Some(n) = gone.next {
            self.blocks.get_mut(&n).expect("next").prev = Some(a);
        }
        let a_block = self.blocks.get_mut(&a).expect("block");
        a_block.size += gone.size;
        a_block.next = gone.next;
    }

    fn seg_pool(&self, seg: usize) -> usize {
        (!self.segments[seg].small) as usize
    }

    fn new_segment(&mut self, p: usize, size: u64) -> (u64, (Action, u64, u64)) {
        let seg_size = match (p, size) {
            (0, _) => SMALL_BUFFER,
            (_, s) if s < MIN_LARGE_ALLOC => LARGE_BUFFER,
            (_, s) => s.div_ceil(ROUND_LARGE) * ROUND_LARGE,
        };
        let addr = self.next_va;
        self.next_va += seg_size.div_ceil(ROUND_LARGE) * ROUND_LARGE;
        let seg = self.segments.len();
        self.segments.push(Segment {
            addr,
            size: seg_size,
            small: p == 0,
            expandable: false,
            live: true,
        });
        self.add_free(addr, seg_size, seg, None, p);
        self.reserved += seg_size;
        self.idle_segments += 1;
        (addr, (Action::SegmentAlloc, addr, seg_size))
    }

    fn add_free(&mut self, addr: u64, size: u64, seg: usize, prev: Option<u64>, p: usize) {
        let stack = StackId(0);
        self.blocks.insert(
            addr,
            Block {
                addr,
                size,
                requested: 0,
                allocated: false,
                mapped: true,
                ctx: 0,
                stack,
                seg,
                prev,
                next: None,
            },
        );
        self.free[p].insert((size, addr));
    }

    /// How many release events [`release_cached`](Self::release_cached)
    /// would report.
    pub(crate) fn releasable(&self) -> u64 {
        match &self.spaces {
            None => self.idle_segments,
            Some(spaces) => spaces.iter().flatten().map(Space::releasable).sum(),
        }
    }

    /// Releases up to `max` cached segments (or the whole free pages of
    /// expandable segments), as PyTorch does before reporting
    /// out-of-memory: large pool first, smallest blocks first. Returns the
    /// events.
    pub(crate) fn release_cached(&mut self, max: u64) -> Vec<(Action, u64, u64)> {
        let mut out = Vec::new();
        if let Some(spaces) = self.spaces.as_mut() {
            for p in [1, 0] {
                let before = out.len();
                let emptied = spaces[p]
                    .as_mut()
                    .is_some_and(|sp| sp.release(max, &mut out));
                for e in &out[before..] {
                    self.reserved -= e.2;
                }
                if emptied {
                    spaces[p] = None;
                }
            }
            return out;
        }
        for p in [1, 0] {
            let idle: Vec<(u64, u64)> = self.free[p]
                .iter()
                .filter(|(_, a)| {
                    let b = &self.blocks[a];
                    b.prev.is_none() && b.next.is_none()
                })
                .copied()
                .collect();
            for (size, addr) in idle {
                if out.len() as u64 >= max {
                    return out;
                }
                let b = self.blocks.remove(&addr).expect("block");
                self.free[p].remove(&(size, addr));
                self.segments[b.seg].live = false;
                self.reserved -= size;
                self.idle_segments -= 1;
                out.push((Action::SegmentFree, addr, size));
            }
        }
        out
    }

    /// Blocks currently allocated.
    pub(crate) fn live_blocks(&self) -> impl Iterator<Item = &Block> {
        let pieces = self
            .spaces
            .iter()
            .flatten()
            .flatten()
            .flat_map(|sp| sp.pieces.iter());
        self.blocks.values().chain(pieces).filter(|b| b.allocated)
    }

    /// Live segments in address order, each with its blocks in address
    /// order; an expandable segment is one segment per contiguous mapped
    /// range, as PyTorch's `snapshot()` reports it.
    pub(crate) fn segments(&self) -> Vec<(Segment, Vec<&Block>)> {
        let mut out: Vec<(Segment, Vec<&Block>)> = self
            .segments
            .iter()
            .filter(|s| s.live && s.size > 0)
            .map(|s| {
                let mut blocks = Vec::new();
                let mut at = self.blocks.get(&s.addr);
                while let Some(b) = at {
                    blocks.push(b);
                    at = b.next.and_then(|n| self.blocks.get(&n));
                }
                (s.clone(), blocks)
            })
            .collect();
        for sp in self.spaces.iter().flatten().flatten() {
            for (addr, size, blocks) in sp.mapped_runs() {
                let seg = Segment {
                    addr,
                    size,
                    small: sp.small,
                    expandable: true,
                    live: true,
                };
                out.push((seg, blocks));
            }
        }
        out.sort_by_key(|s| s.0.addr);
        out
    }
}
