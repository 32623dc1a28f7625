//! Expandable segments as PyTorch's caching allocator runs them
//! (`c10/cuda/CUDACachingAllocator.cpp` at pytorch/pytorch@001074d2), kept
//! as one address-ordered list of pieces per pool (this generator has one
//! stream): a piece is allocated, free (mapped) or unmapped address space.
//!
//! * Best fit, `get_free_block`: the free blocks that fit, in (size,
//!   address) order; from the first, move on while the next one's "size it
//!   can expand to" (its size plus an unmapped piece right after it) is
//!   smaller.
//! * Split, `should_split`: with expandable segments whenever 512 bytes or
//!   more remain, in the large pool too.
//! * Growth, `find_expandable_block` + `try_allocate_expandable_block`: the
//!   lowest unmapped piece (taking the free piece before it when there is
//!   one) from which free and unmapped pieces in a row reach the request;
//!   each unmapped piece on the way is mapped (`map_block`, one
//!   `segment_map` each) for what is still missing, rounded up to whole
//!   pages of 2 MiB (small pool) or 20 MiB (large pool, `kLargeBuffer`),
//!   and merged with the free pieces around it.
//! * Release, `release_blocks` + `unmap_block`: every free piece, in
//!   (size, address) order, large pool first, gives back the whole pages
//!   inside it (one `segment_unmap` each); a segment left with nothing
//!   mapped is dropped (`release_expandable_segment`), the next growth
//!   reserves a new one.
//! * Snapshot, `snapshot()`: one segment per contiguous mapped range.

use crate::allocator::Block;
use crate::stacks::StackId;
use crate::trace::Action;
use vramscope_gpus::allocator::{LARGE_BUFFER, SMALL_BUFFER};

/// A segment event: (action, address, bytes).
pub(crate) type SegmentEvent = (Action, u64, u64);

/// Address space of one segment (PyTorch reserves 1⅛ of the device).
pub(crate) const SPAN: u64 = 96 << 30;

/// One expandable segment and everything in it, by address.
#[derive(Clone, Debug)]
pub(crate) struct Space {
    pub base: u64,
    pub page: u64,
    pub small: bool,
    /// Contiguous pieces from `base` to `base + SPAN`.
    pub pieces: Vec<Block>,
    pub mapped: u64,
}

fn piece(addr: u64, size: u64, mapped: bool) -> Block {
    Block {
        addr,
        size,
        requested: 0,
        allocated: false,
        mapped,
        ctx: 0,
        stack: StackId(0),
        seg: 0,
        prev: None,
        next: None,
    }
}

impl Space {
    pub(crate) fn new(base: u64, small: bool) -> Space {
        let page = if small { SMALL_BUFFER } else { LARGE_BUFFER };
        Space {
            base,
            page,
            small,
            pieces: vec![piece(base, SPAN, false)],
            mapped: 0,
        }
    }

    fn is_free(&self, i: usize) -> bool {
        self.pieces.get(i).is_some_and(|p| p.mapped && !p.allocated)
    }

    fn is_unmapped(&self, i: usize) -> bool {
        self.pieces.get(i).is_some_and(|p| !p.mapped)
    }

    /// `get_free_block`: the index of the free piece to use for `size`.
    pub(crate) fn fit(&self, size: u64) -> Option<usize> {
        let mut fits: Vec<usize> = (0..self.pieces.len())
            .filter(|&i| self.is_free(i) && self.pieces[i].size >= size)
            .collect();
        fits.sort_by_key(|&i| (self.pieces[i].size, self.pieces[i].addr));
        let room = |i: usize| {
            self.pieces[i].size
                + if self.is_unmapped(i + 1) {
                    self.pieces[i + 1].size
                } else {
                    0
                }
        };
        let mut cur = *fits.first()?;
        for &next in &fits[1..] {
            if room(next) >= room(cur) {
                break;
            }
            cur = next;
        }
        Some(cur)
    }

    /// `find_expandable_block`: the first piece of the lowest run of free
    /// and unmapped pieces that holds `size`, and the unmapped pieces in it
    /// that must be mapped (their count is the number of `segment_map`s).
    fn growth(&self, size: u64) -> Option<(usize, usize)> {
        for u in (0..self.pieces.len()).filter(|&i| self.is_unmapped(i)) {
            let start = if u > 0 && self.is_free(u - 1) {
                u - 1
            } else {
                u
            };
            let (mut bytes, mut maps, mut i) = (0, 0, start);
            while bytes < size && (self.is_free(i) || self.is_unmapped(i)) {
                bytes += self.pieces[i].size;
                maps += self.is_unmapped(i) as usize;
                i += 1;
            }
            if bytes >= size {
                return Some((start, maps));
            }
        }
        None
    }

    /// How many `segment_map`s growing for `size` takes (None: no room).
    pub(crate) fn growth_events(&self, size: u64) -> Option<usize> {
        self.growth(size).map(|g| g.1)
    }

    /// `try_allocate_expandable_block`: map what `size` needs; the index
    /// of the free piece that now holds it, and the `segment_map`s.
    pub(crate) fn grow(&mut self, size: u64) -> Option<(usize, Vec<SegmentEvent>)> {
        let (mut c, _) = self.growth(size)?;
        let mut events = Vec::new();
        if self.is_unmapped(c) {
            let len = self.pieces[c].size.min(size);
            c = self.map(c, len, &mut events);
        }
        while self.pieces[c].size < size {
            let len = (size - self.pieces[c].size).min(self.pieces[c + 1].size);
            c = self.map(c + 1, len, &mut events);
        }
        Some((c, events))
    }

    /// `map_block`: map whole pages covering the first `len` bytes of the
    /// unmapped piece `i`, then merge with free neighbours; the merged
    /// piece's index.
    fn map(&mut self, i: usize, len: u64, events: &mut Vec<SegmentEvent>) -> usize {
        let p = &self.pieces[i];
        let bytes = (len.div_ceil(self.page) * self.page).min(p.size);
        let (addr, size) = (p.addr, p.size);
        if bytes < size {
            self.pieces
                .insert(i + 1, piece(addr + bytes, size - bytes, false));
        }
        self.pieces[i] = piece(addr, bytes, true);
        self.mapped += bytes;
        events.push((Action::SegmentMap, addr, bytes));
        self.merge_free(i)
    }

    /// Merge the free piece `i` with free pieces on either side.
    fn merge_free(&mut self, mut i: usize) -> usize {
        if i + 1 < self.pieces.len() && self.is_free(i + 1) {
            self.pieces[i].size += self.pieces.remove(i + 1).size;
        }
        if i > 0 && self.is_free(i - 1) {
            let size = self.pieces.remove(i).size;
            i -= 1;
            self.pieces[i].size += size;
        }
        i
    }

    /// `alloc_found_block` with `should_split` for expandable segments.
    pub(crate) fn take(&mut self, i: usize, size: u64) -> u64 {
        let p = &self.pieces[i];
        let (addr, remaining) = (p.addr, p.size - size);
        if remaining >= 512 {
            self.pieces[i].size = size;
            self.pieces
                .insert(i + 1, piece(addr + size, remaining, true));
        }
        self.pieces[i].allocated = true;
        addr
    }

    /// The index of the piece at `addr`.
    pub(crate) fn find(&self, addr: u64) -> Option<usize> {
        self.pieces.binary_search_by_key(&addr, |p| p.addr).ok()
    }

    /// `free_block`: the piece at `addr` becomes free and merges.
    pub(crate) fn free(&mut self, i: usize) {
        self.pieces[i].allocated = false;
        self.merge_free(i);
    }

    /// Free pieces in the order `release_blocks` visits them.
    fn release_order(&self) -> Vec<u64> {
        let mut free: Vec<(u64, u64)> = self
            .pieces
            .iter()
            .filter(|p| p.mapped && !p.allocated)
            .map(|p| (p.size, p.addr))
            .collect();
        free.sort_unstable();
        free.into_iter().map(|f| f.1).collect()
    }

    /// The whole pages inside the piece at `addr`: (start, bytes).
    fn whole_pages(&self, addr: u64, size: u64) -> Option<(u64, u64)> {
        let begin = (addr - self.base).div_ceil(self.page);
        let end = (addr + size - self.base) / self.page;
        (begin < end).then(|| (self.base + begin * self.page, (end - begin) * self.page))
    }

    /// How many `segment_unmap`s a release makes.
    pub(crate) fn releasable(&self) -> u64 {
        self.pieces
            .iter()
            .filter(|p| p.mapped && !p.allocated && self.whole_pages(p.addr, p.size).is_some())
            .count() as u64
    }

    /// `release_blocks` for this segment: at most `max` unmaps. Whether
    /// the segment has nothing mapped left.
    pub(crate) fn release(&mut self, max: u64, out: &mut Vec<SegmentEvent>) -> bool {
        for addr in self.release_order() {
            if out.len() as u64 >= max {
                break;
            }
            let Some(i) = self.find(addr) else { continue };
            let size = self.pieces[i].size;
            let Some((start, bytes)) = self.whole_pages(addr, size) else {
                continue;
            };
            // before (free) | the pages (unmapped) | after (free)
            let mut parts = Vec::new();
            if start > addr {
                parts.push(piece(addr, start - addr, true));
            }
            parts.push(piece(start, bytes, false));
            if start + bytes < addr + size {
                parts.push(piece(start + bytes, addr + size - start - bytes, true));
            }
            let at = i + (start > addr) as usize;
            self.pieces.splice(i..=i, parts);
            // Merge the unmapped pages with unmapped neighbours.
            let mut u = at;
            if u + 1 < self.pieces.len() && self.is_unmapped(u + 1) {
                self.pieces[u].size += self.pieces.remove(u + 1).size;
            }
            if u > 0 && self.is_unmapped(u - 1) {
                let s = self.pieces.remove(u).size;
                u -= 1;
                self.pieces[u].size += s;
            }
            self.mapped -= bytes;
            out.push((Action::SegmentUnmap, start, bytes));
        }
        self.mapped == 0
    }

    /// Contiguous mapped ranges: (start, bytes, pieces).
    pub(crate) fn mapped_runs(&self) -> Vec<(u64, u64, Vec<&Block>)> {
        let mut runs: Vec<(u64, u64, Vec<&Block>)> = Vec::new();
        let mut in_run = false;
        for p in &self.pieces {
            if !p.mapped {
                in_run = false;
                continue;
            }
            match runs.last_mut() {
                Some(r) if in_run => {
                    r.1 += p.size;
                    r.2.push(p);
                }
                _ => runs.push((p.addr, p.size, vec![p])),
            }
            in_run = true;
        }
        runs
    }
}
