//! The state of the allocator when a trace starts, from the file: the
//! segments dumped at its end with the trace undone (a ring buffer keeps
//! only the last entries, so most traces start long after the program
//! did), and in them the blocks in use then.

use std::collections::BTreeMap;

use vramscope_snapshot::hash::FxHashMap as HashMap;

use crate::edits::Edits;
use vramscope_snapshot::{Action, Snapshot};

use crate::model::Allocator;
use crate::pools::Lanes;
use vramscope_gpus::allocator::LARGE_BUFFER;

/// Reserved bytes just before trace entry `from`: the dumped segments with
/// the segment events from `from` on undone.
pub(crate) fn reserved_before(snap: &Snapshot, device: u32, from: usize) -> u64 {
    let end: u64 = snap.segments_of(device).map(|s| s.total_size).sum();
    let mut reserved = end as i128;
    if let Some(t) = snap.trace(device) {
        for j in from..t.len() {
            match t.action[j] {
                Action::SegmentAlloc | Action::SegmentMap => reserved -= t.size[j] as i128,
                Action::SegmentFree | Action::SegmentUnmap => reserved += t.size[j] as i128,
                _ => {}
            }
        }
    }
    reserved.max(0) as u64
}

/// The allocator's state when the trace starts, rebuilt from the file: the
/// dumped segments that the trace did not allocate, plus those it freed;
/// in them, the blocks in use then: those the trace frees before any
/// allocation at their address (size: their request, rounded) and those
/// alive at the dump that the trace never allocated. Free space around them
/// stays merged, as the allocator keeps it. Returns the blocks that found
/// no segment.
pub(crate) fn seed(
    a: &mut Allocator,
    snap: &Snapshot,
    device: u32,
    addr_of: &mut HashMap<u64, (u64, u64)>,
    edits: &Edits,
    lanes: &Lanes,
) -> usize {
    let empty = Default::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let small_segment = crate::settings::SMALL_BUFFER;
    let mut made_in_trace = vramscope_snapshot::hash::FxHashSet::default();
    let mut freed_first: Vec<(u64, u64, u64)> = Vec::new();
    for i in 0..t.len() {
        match t.action[i] {
            Action::SegmentAlloc => {
                made_in_trace.insert(t.addr[i]);
            }
            Action::SegmentFree if !made_in_trace.contains(&t.addr[i]) => {
                freed_first.push((t.addr[i], t.size[i], lanes.of(i, t.stream[i])));
            }
            _ => {}
        }
    }
    for s in snap.segments_of(device) {
        if !made_in_trace.contains(&s.address) && !s.is_expandable {
            let small = match s.segment_type {
                vramscope_snapshot::SegmentType::Small => true,
                vramscope_snapshot::SegmentType::Large => false,
                vramscope_snapshot::SegmentType::Unknown => s.total_size == small_segment,
            };
            a.seed_segment(
                s.address,
                s.total_size,
                lanes.of_segment(s.pool_id, s.stream),
                small,
            );
        }
    }
    for (addr, size, stream) in freed_first {
        a.seed_segment(addr, size, stream, size == small_segment);
    }
    let mut groups: BTreeMap<(u64, bool), Vec<(u64, u64)>> = BTreeMap::new();
    for (start, end, stream, small) in mapped_at_start(snap, device, lanes) {
        groups
            .entry((stream, small))
            .or_default()
            .push((start, end - start));
    }
    for ((stream, small), mut ranges) in groups {
        ranges.sort_unstable();
        a.seed_expandable(stream, small, &ranges);
    }
    let mut misses = 0;
    for (addr, size, _) in in_use_at_start(a, snap, device, lanes) {
        let Some(size) = edited_size(a, edits, addr, size) else {
            continue;
        };
        if a.seed_allocated(addr, size) {
            addr_of.insert(addr, (addr, size));
        } else {
            misses += 1;
        }
    }
    // The replay's peaks start from here.
    a.events.clear();
    misses
}

/// The size a block in use at the start has under `edits` (scaled and
/// rounded), or `None` when the edits drop it.
fn edited_size(a: &Allocator, edits: &Edits, addr: u64, size: u64) -> Option<u64> {
    if edits.drop_seed.contains(&addr) {
        return None;
    }
    Some(match edits.scale_seed.get(&addr) {
        Some(f) => a.settings.round_size(((size as f64 * f) as u64).max(1)),
        None => size,
    })
}

/// Blocks in use when the trace starts, (address, size as allocated,
/// lane): those the trace frees before any allocation at their address
/// (their request, rounded) and those alive at the dump that the trace
/// never allocated.
fn in_use_at_start(
    a: &Allocator,
    snap: &Snapshot,
    device: u32,
    lanes: &Lanes,
) -> Vec<(u64, u64, u64)> {
    let empty = Default::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let mut seen = vramscope_snapshot::hash::FxHashSet::default();
    let mut in_use: Vec<(u64, u64, u64)> = Vec::new();
    for i in 0..t.len() {
        match t.action[i] {
            Action::Alloc => {
                seen.insert(t.addr[i]);
            }
            Action::FreeRequested | Action::FreeCompleted if seen.insert(t.addr[i]) => {
                in_use.push((
                    t.addr[i],
                    a.settings.round_size(t.size[i]),
                    lanes.of(i, t.stream[i]),
                ));
            }
            _ => {}
        }
    }
    for s in snap.segments_of(device) {
        for b in snap.blocks_of(s) {
            if b.state == vramscope_snapshot::BlockState::ActiveAllocated
                && !seen.contains(&b.address)
            {
                in_use.push((b.address, b.size, lanes.of_segment(s.pool_id, s.stream)));
            }
        }
    }
    in_use
}

/// The allocator's state when the trace starts as if the program had run
/// its earlier part under these settings and edits: no segment from the
/// file, the blocks in use then allocated one by one (largest first, as
/// a program makes its weights before its batches). What a program change
/// saves shows only so: from the file's segments, memory cached by the
/// unchanged program stays reserved whatever the change. Returns the
/// blocks the model could not allocate.
pub(crate) fn seed_cold(
    a: &mut Allocator,
    snap: &Snapshot,
    device: u32,
    addr_of: &mut HashMap<u64, (u64, u64)>,
    edits: &Edits,
    lanes: &Lanes,
) -> usize {
    let mut in_use = in_use_at_start(a, snap, device, lanes);
    in_use.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
    let mut misses = 0;
    for (addr, size, stream) in in_use {
        let Some(size) = edited_size(a, edits, addr, size) else {
            continue;
        };
        match a.malloc(size, stream) {
            Ok(p) => {
                addr_of.insert(addr, (p, size));
            }
            Err(_) => misses += 1,
        }
    }
    a.events.clear();
    misses
}

/// The mapped ranges of expandable segments when the trace starts: those
/// dumped, with the trace's `segment_map`s taken out and its
/// `segment_unmap`s put back, walking it backwards. (start, end, lane,
/// small pool); a range known only from an unmap is in the small pool when
/// it is not a whole number of 20 MiB pages. The lane keeps a private
/// pool's expandable segment apart from the default pool's, as PyTorch
/// keeps one per stream and pool.
fn mapped_at_start(snap: &Snapshot, device: u32, lanes: &Lanes) -> Vec<(u64, u64, u64, bool)> {
    let mut ranges: Vec<(u64, u64, u64, bool)> = snap
        .segments_of(device)
        .filter(|s| s.is_expandable)
        .map(|s| {
            let small = match s.segment_type {
                vramscope_snapshot::SegmentType::Small => true,
                vramscope_snapshot::SegmentType::Large => false,
                vramscope_snapshot::SegmentType::Unknown => s.total_size % LARGE_BUFFER != 0,
            };
            (
                s.address,
                s.address + s.total_size,
                lanes.of_segment(s.pool_id, s.stream),
                small,
            )
        })
        .collect();
    let Some(t) = snap.trace(device) else {
        return ranges;
    };
    for i in (0..t.len()).rev() {
        let (lo, hi) = (t.addr[i], t.addr[i] + t.size[i]);
        match t.action[i] {
            Action::SegmentMap => {
                let mut kept = Vec::with_capacity(ranges.len() + 1);
                for r in ranges {
                    if r.1 <= lo || r.0 >= hi {
                        kept.push(r);
                        continue;
                    }
                    if r.0 < lo {
                        kept.push((r.0, lo, r.2, r.3));
                    }
                    if r.1 > hi {
                        kept.push((hi, r.1, r.2, r.3));
                    }
                }
                ranges = kept;
            }
            Action::SegmentUnmap => {
                // Its pool: that of a range it touches, else from its size.
                let small = ranges
                    .iter()
                    .find(|r| r.1 == lo || r.0 == hi)
                    .map_or(t.size[i] % LARGE_BUFFER != 0, |r| r.3);
                ranges.push((lo, hi, lanes.of(i, t.stream[i]), small));
                ranges.sort_unstable();
                // Merge touching ranges of one stream and pool.
                let mut merged: Vec<(u64, u64, u64, bool)> = Vec::with_capacity(ranges.len());
                for r in ranges {
                    match merged.last_mut() {
                        Some(m) if m.1 == r.0 && m.2 == r.2 && m.3 == r.3 => m.1 = r.1,
                        _ => merged.push(r),
                    }
                }
                ranges = merged;
            }
            _ => {}
        }
    }
    ranges
}
