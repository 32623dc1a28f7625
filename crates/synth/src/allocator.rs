//! A simulation of PyTorch's CUDA caching allocator (one device, one
//! stream): sizes rounded to 512 bytes, a small pool (requests up to 1 MiB,
//! 2 MiB segments) and a large pool (20 MiB segments, or the request
//! rounded up to 2 MiB from 10 MiB on), best-fit reuse of cached blocks,
//! splitting when the remainder is useful, coalescing with free neighbours,
//! and optionally expandable segments grown page by page.

use crate::stacks::StackId;
use crate::trace::Action;
use std::collections::{BTreeSet, HashMap};

pub(crate) const SMALL_SIZE: u64 = 1 << 20;
const SMALL_BUFFER: u64 = 2 << 20;
const LARGE_BUFFER: u64 = 20 << 20;
const MIN_LARGE_ALLOC: u64 = 10 << 20;
const ROUND_LARGE: u64 = 2 << 20;
const MIN_BLOCK: u64 = 512;
/// Address space reserved for each expandable segment.
const EXPANDABLE_SPAN: u64 = 128 << 30;

#[derive(Clone, Debug)]
pub(crate) struct Block {
    pub addr: u64,
    pub size: u64,
    /// Size asked for by the last allocation of this block.
    pub requested: u64,
    pub allocated: bool,
    /// The allocation call: its frames list in the trace.
    pub ctx: u64,
    pub stack: StackId,
    seg: usize,
    prev: Option<u64>,
    next: Option<u64>,
}

#[derive(Clone, Debug)]
pub(crate) struct Segment {
    pub addr: u64,
    /// Bytes reserved (mapped, for an expandable segment).
    pub size: u64,
    pub small: bool,
    pub expandable: bool,
    live: bool,
    /// Last block (expandable segments grow at the end).
    tail: u64,
}

/// Allocator state; the caller records the events it reports.
pub(crate) struct Allocator {
    blocks: HashMap<u64, Block>,
    segments: Vec<Segment>,
    free: [BTreeSet<(u64, u64)>; 2],
    expandable: Option<[Option<usize>; 2]>,
    next_va: u64,
    /// Non-expandable segments that are entirely free (releasable).
    idle_segments: u64,
    pub reserved: u64,
}

/// `size` rounded as the allocator does (at least 512, multiple of 512).
pub(crate) fn round_size(size: u64) -> u64 {
    size.max(1).div_ceil(MIN_BLOCK) * MIN_BLOCK
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
            expandable: expandable.then_some([None, None]),
            next_va: base,
            idle_segments: 0,
            reserved: 0,
        }
    }

    /// Whether allocating `requested` bytes needs new device memory (a
    /// `segment_alloc` or `segment_map` entry).
    pub(crate) fn needs_growth(&self, requested: u64) -> bool {
        let size = round_size(requested);
        self.free[pool(size)].range((size, 0)..).next().is_none()
    }

    /// Allocates; returns the block address and the segment event, if one
    /// was needed, as `(action, address, size)`.
    pub(crate) fn malloc(
        &mut self,
        requested: u64,
        ctx: u64,
        stack: StackId,
    ) -> (u64, Option<(Action, u64, u64)>) {
        let size = round_size(requested);
        let p = pool(size);
        let mut grow = None;
        let addr = match self.free[p].range((size, 0)..).next() {
            Some(&(_, addr)) => addr,
            None => {
                let (addr, event) = match self.expandable {
                    Some(_) => self.map_more(p, size),
                    None => self.new_segment(p, size),
                };
                grow = Some(event);
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
            } else {
                self.segments[seg].tail = rest;
            }
            let block = Block {
                addr: rest,
                size: remaining,
                requested: 0,
                allocated: false,
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

    /// Frees the block at `addr`; returns its requested size.
    pub(crate) fn free(&mut self, addr: u64) -> u64 {
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
        match gone.next {
            Some(n) => self.blocks.get_mut(&n).expect("next").prev = Some(a),
            None => self.segments[gone.seg].tail = a,
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
            tail: addr,
        });
        self.add_free(addr, seg_size, seg, None, p);
        self.reserved += seg_size;
        self.idle_segments += 1;
        (addr, (Action::SegmentAlloc, addr, seg_size))
    }

    /// Grows the pool's expandable segment by whole pages so that its free
    /// tail holds `size` bytes.
    fn map_more(&mut self, p: usize, size: u64) -> (u64, (Action, u64, u64)) {
        let page = if p == 0 { SMALL_BUFFER } else { LARGE_BUFFER };
        let seg = match self.expandable.as_ref().and_then(|e| e[p]) {
            Some(seg) => seg,
            None => {
                let addr = self.next_va.div_ceil(LARGE_BUFFER) * LARGE_BUFFER;
                self.next_va = addr + EXPANDABLE_SPAN;
                let seg = self.segments.len();
                self.segments.push(Segment {
                    addr,
                    size: 0,
                    small: p == 0,
                    expandable: true,
                    live: true,
                    tail: addr,
                });
                if let Some(e) = self.expandable.as_mut() {
                    e[p] = Some(seg);
                }
                seg
            }
        };
        let (base, mapped, tail) = (
            self.segments[seg].addr,
            self.segments[seg].size,
            self.segments[seg].tail,
        );
        let tail_free = self
            .blocks
            .get(&tail)
            .filter(|b| !b.allocated)
            .map_or(0, |b| b.size);
        let grow = (size - tail_free).div_ceil(page) * page;
        let end = base + mapped;
        self.segments[seg].size += grow;
        self.reserved += grow;
        if tail_free > 0 {
            self.free[p].remove(&(tail_free, tail));
            self.blocks.get_mut(&tail).expect("tail").size += grow;
            self.free[p].insert((tail_free + grow, tail));
            (tail, (Action::SegmentMap, end, grow))
        } else {
            let prev = self.blocks.contains_key(&tail).then_some(tail);
            if let Some(t) = prev {
                self.blocks.get_mut(&t).expect("tail").next = Some(end);
            }
            self.add_free(end, grow, seg, prev, p);
            self.segments[seg].tail = end;
            (end, (Action::SegmentMap, end, grow))
        }
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
        match self.expandable {
            None => self.idle_segments,
            Some(e) => e
                .iter()
                .flatten()
                .filter(|&&s| self.unmappable(s).is_some())
                .count() as u64,
        }
    }

    /// The page-aligned free tail of an expandable segment: `(start, bytes)`.
    fn unmappable(&self, seg: usize) -> Option<(u64, u64)> {
        let s = &self.segments[seg];
        let page = if s.small { SMALL_BUFFER } else { LARGE_BUFFER };
        let t = self.blocks.get(&s.tail).filter(|b| !b.allocated)?;
        let start = s.addr + (t.addr - s.addr).div_ceil(page) * page;
        let end = s.addr + s.size;
        (start < end).then_some((start, end - start))
    }

    /// Releases up to `max` cached segments (or unmaps free expandable
    /// tails), as PyTorch does before reporting out-of-memory: large pool
    /// first, smallest blocks first. Returns the events.
    pub(crate) fn release_cached(&mut self, max: u64) -> Vec<(Action, u64, u64)> {
        let mut out = Vec::new();
        if let Some(e) = self.expandable {
            for seg in [e[1], e[0]].into_iter().flatten() {
                if let Some((start, bytes)) =
                    self.unmappable(seg).filter(|_| (out.len() as u64) < max)
                {
                    let tail = self.segments[seg].tail;
                    let p = self.seg_pool(seg);
                    let t = self.blocks.get_mut(&tail).expect("tail");
                    self.free[p].remove(&(t.size, tail));
                    t.size -= bytes;
                    let (size, prev) = (t.size, t.prev);
                    if size == 0 {
                        self.blocks.remove(&tail);
                        if let Some(pv) = prev {
                            self.blocks.get_mut(&pv).expect("prev").next = None;
                        }
                        self.segments[seg].tail = prev.unwrap_or(self.segments[seg].addr);
                    } else {
                        self.free[p].insert((size, tail));
                    }
                    self.segments[seg].size -= bytes;
                    self.reserved -= bytes;
                    out.push((Action::SegmentUnmap, start, bytes));
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
        self.blocks.values().filter(|b| b.allocated)
    }

    /// Live segments in address order, each with its blocks in address
    /// order (an expandable segment that maps nothing is left out).
    pub(crate) fn segments(&self) -> Vec<(&Segment, Vec<&Block>)> {
        let mut segs: Vec<&Segment> = self
            .segments
            .iter()
            .filter(|s| s.live && s.size > 0)
            .collect();
        segs.sort_by_key(|s| s.addr);
        segs.into_iter()
            .map(|s| {
                let mut blocks = Vec::new();
                let mut at = self.blocks.get(&s.addr);
                while let Some(b) = at {
                    blocks.push(b);
                    at = b.next.and_then(|n| self.blocks.get(&n));
                }
                (s, blocks)
            })
            .collect()
    }
}
