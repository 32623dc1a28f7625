//! Segments at an earlier moment, rebuilt from the end state and the trace.
//!
//! Segment events before the trace window are unknown, but the end state is
//! not: undoing the window's segment events from the last one back to the
//! moment gives exactly the memory reserved then. Segments created in the
//! window and gone by the end are known only by address and size; their
//! pool is inferred from the size (the small pool allocates 2 MiB segments,
//! the large pool never does).
//!
//! Traces record requested sizes; blocks are sized as the allocator rounds
//! them (512-byte multiples, and a large-pool remainder of 1 MiB or less
//! left inside the block). On the real snapshots this reproduces every
//! block of the dump when reconstructing at the last event.

use std::collections::{BTreeMap, HashSet};

use crate::Liveness;
use vramscope_snapshot::{Action, DeviceTrace, Snapshot};

use super::{totals, BlockView, SegmentView, SegmentsMap, SEGMENTS_SCHEMA_VERSION};

// In the large pool, a block is split only when more than SMALL_SIZE
// remains; small-pool segments are SMALL_BUFFER.
use vramscope_gpus::allocator::{SMALL_BUFFER as SMALL_SEGMENT, SMALL_SIZE};

/// The block the allocator hands out for a request: traces record the
/// requested size, blocks are rounded up to 512 bytes.
fn rounded(requested: u64) -> u64 {
    vramscope_gpus::allocator::block_size(requested)
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Attrs {
    segment_type: &'static str,
    expandable: bool,
    pool_id: [i64; 2],
    stream: u64,
}

/// Disjoint address ranges `[start, end)` with the attributes of the
/// segment they belong to, by start.
#[derive(Default)]
struct Ranges(BTreeMap<u64, (u64, Attrs)>);

impl Ranges {
    /// Take `[a, b)` out, splitting ranges that straddle its ends.
    fn remove(&mut self, a: u64, b: u64) {
        let hit: Vec<u64> = self
            .0
            .range(..b)
            .rev()
            .take_while(|(_, (end, _))| *end > a)
            .map(|(&s, _)| s)
            .collect();
        for s in hit {
            if let Some((end, attrs)) = self.0.remove(&s) {
                if s < a {
                    self.0.insert(s, (a, attrs));
                }
                if end > b {
                    self.0.insert(b, (end, attrs));
                }
            }
        }
    }

    fn insert(&mut self, a: u64, b: u64, attrs: Attrs) {
        self.remove(a, b);
        self.0.insert(a, (b, attrs));
    }

    /// Attributes of the range ending at `a` or starting at `b`: an unmapped
    /// piece of an expandable segment belongs with its neighbours.
    fn neighbour(&self, a: u64, b: u64) -> Option<Attrs> {
        let before = self
            .0
            .range(..a)
            .next_back()
            .filter(|(_, (end, _))| *end == a);
        let after = self.0.get(&b);
        before.map(|(_, (_, x))| *x).or(after.map(|(_, x)| *x))
    }
}

fn inferred(size: u64, stream: u64, expandable: bool) -> Attrs {
    Attrs {
        segment_type: if size == SMALL_SEGMENT && !expandable {
            "small"
        } else {
            "large"
        },
        expandable,
        pool_id: [0, 0],
        stream,
    }
}

/// Addresses whose free was requested but not completed right after `point`.
fn pending_at(t: &DeviceTrace, point: Option<usize>) -> HashSet<u64> {
    let mut pending = HashSet::new();
    let upto = point.map_or(0, |i| (i + 1).min(t.len()));
    for i in 0..upto {
        match t.action[i] {
            Action::FreeRequested => {
                pending.insert(t.addr[i]);
            }
            Action::FreeCompleted | Action::Alloc => {
                pending.remove(&t.addr[i]);
            }
            _ => {}
        }
    }
    pending
}

/// Segments and blocks of `device` right after event `point` (`None`: at
/// the start of the trace window).
pub fn reconstruct(
    snap: &Snapshot,
    device: u32,
    liveness: &Liveness,
    point: Option<usize>,
) -> SegmentsMap {
    let empty = DeviceTrace::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let mut ranges = Ranges::default();
    for s in snap.segments_of(device) {
        let attrs = Attrs {
            segment_type: s.segment_type.as_str(),
            expandable: s.is_expandable,
            pool_id: [s.pool_id.0, s.pool_id.1],
            stream: s.stream,
        };
        ranges.insert(s.address, s.address.saturating_add(s.total_size), attrs);
    }
    let first = point.map_or(0, |i| i + 1);
    for j in (first..t.len()).rev() {
        let (a, size) = (t.addr[j], t.size[j]);
        let b = a.saturating_add(size);
        match t.action[j] {
            Action::SegmentAlloc | Action::SegmentMap => ranges.remove(a, b),
            Action::SegmentFree => ranges.insert(a, b, inferred(size, t.stream[j], false)),
            Action::SegmentUnmap => {
                let attrs = ranges
                    .neighbour(a, b)
                    .unwrap_or_else(|| inferred(size, t.stream[j], true));
                ranges.insert(a, b, attrs);
            }
            _ => {}
        }
    }
    // Expandable segments grow and shrink by mapped pieces; adjacent
    // pieces with the same attributes are one segment, as in the dump.
    let mut merged: Vec<(u64, u64, Attrs)> = Vec::new();
    for (&s, &(e, attrs)) in &ranges.0 {
        match merged.last_mut() {
            Some(last) if attrs.expandable && last.2 == attrs && last.1 == s => last.1 = e,
            _ => merged.push((s, e, attrs)),
        }
    }
    let pending = pending_at(t, point);
    let mut live = liveness.live_after(t, point);
    live.sort_unstable_by_key(|b| b.addr);
    let mut per_segment: Vec<Vec<BlockView>> = vec![Vec::new(); merged.len()];
    let (mut unplaced_blocks, mut unplaced_bytes) = (0u64, 0u64);
    let mut k = 0;
    for b in &live {
        while k < merged.len() && merged[k].1 <= b.addr {
            k += 1;
        }
        let Some(&(s, e, _)) = merged.get(k) else {
            unplaced_blocks += 1;
            unplaced_bytes += b.size;
            continue;
        };
        let size = rounded(b.size);
        let overlaps = per_segment[k]
            .last()
            .is_some_and(|p| p.address.saturating_add(p.size) > b.addr);
        if b.addr < s || b.addr.saturating_add(size) > e || overlaps {
            unplaced_blocks += 1;
            unplaced_bytes += b.size;
            continue;
        }
        let state = if pending.contains(&b.addr) {
            "active_pending_free"
        } else {
            "active_allocated"
        };
        per_segment[k].push(BlockView {
            address: b.addr,
            size,
            requested_size: b.size,
            state,
        });
    }
    let segments: Vec<SegmentView> = merged
        .into_iter()
        .zip(per_segment)
        .map(|((s, e, attrs), used)| {
            let mut blocks: Vec<BlockView> = Vec::with_capacity(used.len() * 2 + 1);
            let mut cursor = s;
            let large = attrs.segment_type != "small";
            for b in used.into_iter().map(Some).chain([None]) {
                let next = b.map_or(e, |b| b.address);
                if next > cursor {
                    match blocks.last_mut() {
                        // The allocator leaves a remainder of 1 MiB or less
                        // in the large pool unsplit, inside the block.
                        Some(prev) if large && next - cursor <= SMALL_SIZE => {
                            prev.size += next - cursor
                        }
                        _ => blocks.push(gap(cursor, next)),
                    }
                }
                if let Some(b) = b {
                    cursor = b.address + b.size;
                    blocks.push(b);
                }
            }
            SegmentView::new(
                s,
                e - s,
                attrs.segment_type,
                attrs.expandable,
                attrs.pool_id,
                attrs.stream,
                blocks,
            )
        })
        .collect();
    SegmentsMap {
        schema_version: SEGMENTS_SCHEMA_VERSION,
        device,
        moment: match point {
            Some(i) => format!("event #{i}"),
            None => "start of the trace".into(),
        },
        event_index: point.map(|i| i as u64),
        reconstructed: true,
        unplaced_blocks,
        unplaced_bytes,
        totals: totals(&segments),
        segments,
    }
}

fn gap(a: u64, b: u64) -> BlockView {
    BlockView {
        address: a,
        size: b - a,
        requested_size: 0,
        state: "inactive",
    }
}
