//! Replaying a recorded trace through the model: every `alloc` is a
//! `malloc` of its requested size on its stream, every `free_completed` a
//! `free` (frees are applied when completed, as the allocator does). The
//! recorded segment events and reserved curve are set beside the model's.

use std::collections::HashMap;

use serde::Serialize;
use vramscope_snapshot::{Action, Snapshot};

use crate::model::{Allocator, OutOfMemory, SegmentEvent};
use crate::settings::Settings;

/// The outcome of a replay.
#[derive(Clone, Debug, Serialize)]
pub struct Replayed {
    /// Trace entries replayed.
    pub entries: usize,
    /// Segment events the trace recorded, and how many the model made.
    pub recorded_segment_events: usize,
    pub simulated_segment_events: usize,
    /// Recorded segment events the model made too, same kind and size, in
    /// the same order (longest common subsequence).
    pub matched_segment_events: usize,
    /// Reserved bytes when the trace starts (from the dumped segments, with
    /// the trace undone): the model starts with those segments, and in them
    /// the blocks in use then ([`seed`]).
    pub initial_reserved: u64,
    /// Blocks in use at the start that no seeded segment could hold.
    pub seed_misses: usize,
    pub recorded_peak_reserved: u64,
    pub simulated_peak_reserved: u64,
    pub simulated_peak_allocated: u64,
    /// Largest |simulated − recorded| reserved after any `alloc` or
    /// `free_completed`, as a share of the recorded value then.
    pub max_reserved_error: f64,
    /// The first request the model could not serve: entry index and its
    /// rounded size.
    pub oom: Option<(usize, u64)>,
    /// Allocated when that request failed.
    pub allocated_at_oom: u64,
    /// cudaMalloc and cudaFree calls the model made.
    pub cuda_mallocs: usize,
    pub cuda_frees: usize,
}

/// Replay device `device` of `snap` under `settings` on a device of
/// `capacity` bytes (`None`: unlimited).
pub fn replay(snap: &Snapshot, device: u32, settings: Settings, capacity: Option<u64>) -> Replayed {
    let empty = Default::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let recorded: Vec<SegmentEvent> = (0..t.len())
        .filter_map(|i| match t.action[i] {
            Action::SegmentAlloc | Action::SegmentMap => Some(SegmentEvent::Alloc(t.size[i])),
            Action::SegmentFree | Action::SegmentUnmap => Some(SegmentEvent::Free(t.size[i])),
            _ => None,
        })
        .collect();
    let initial_reserved = reserved_before(snap, device, 0);

    let mut a = Allocator::new(settings, capacity);
    let mut addr_of: HashMap<u64, u64> = HashMap::new();
    let seed_misses = seed(&mut a, snap, device, &mut addr_of);
    let mut rec_reserved = initial_reserved;
    let mut rec_peak = initial_reserved;
    let mut max_err: f64 = 0.0;
    let mut oom = None;
    let mut allocated_at_oom = 0;
    for i in 0..t.len() {
        match t.action[i] {
            // An `oom` entry is the request that failed when the trace was
            // recorded: tried again here. If it fits, its lifetime is
            // unknown: it is freed at once, so what follows replays as recorded.
            Action::Alloc | Action::Oom => match a.malloc(t.size[i], t.stream[i]) {
                Ok(p) if t.action[i] == Action::Oom => a.free(p),
                Ok(p) => {
                    addr_of.insert(t.addr[i], p);
                }
                Err(OutOfMemory {
                    size, allocated, ..
                }) => {
                    if oom.is_none() {
                        oom = Some((i, size));
                        allocated_at_oom = allocated;
                    }
                }
            },
            Action::FreeCompleted => {
                if let Some(p) = addr_of.remove(&t.addr[i]) {
                    a.free(p);
                }
            }
            Action::SegmentAlloc | Action::SegmentMap => rec_reserved += t.size[i],
            Action::SegmentFree | Action::SegmentUnmap => {
                rec_reserved = rec_reserved.saturating_sub(t.size[i])
            }
            _ => {}
        }
        rec_peak = rec_peak.max(rec_reserved);
        // Compared after each request and free: a recorded segment_alloc
        // comes just before the alloc that caused it.
        let sim = a.reserved;
        if rec_reserved > 0
            && matches!(
                t.action[i],
                Action::Alloc | Action::FreeCompleted | Action::Oom
            )
        {
            let err = (sim as f64 - rec_reserved as f64).abs() / rec_reserved as f64;
            max_err = max_err.max(err);
        }
    }
    let simulated = a.events.clone();
    Replayed {
        entries: t.len(),
        recorded_segment_events: recorded.len(),
        simulated_segment_events: simulated.len(),
        matched_segment_events: common_subsequence(&recorded, &simulated),
        initial_reserved,
        recorded_peak_reserved: rec_peak,
        simulated_peak_reserved: a.peak_reserved,
        seed_misses,
        simulated_peak_allocated: a.peak_allocated,
        max_reserved_error: max_err,
        oom,
        allocated_at_oom,
        cuda_mallocs: simulated
            .iter()
            .filter(|e| matches!(e, SegmentEvent::Alloc(_)))
            .count(),
        cuda_frees: simulated
            .iter()
            .filter(|e| matches!(e, SegmentEvent::Free(_)))
            .count(),
    }
}

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
fn seed(a: &mut Allocator, snap: &Snapshot, device: u32, addr_of: &mut HashMap<u64, u64>) -> usize {
    let empty = Default::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let small_segment = crate::settings::SMALL_BUFFER;
    let mut made_in_trace = std::collections::HashSet::new();
    let mut freed_first: Vec<(u64, u64, u64)> = Vec::new();
    for i in 0..t.len() {
        match t.action[i] {
            Action::SegmentAlloc | Action::SegmentMap => {
                made_in_trace.insert(t.addr[i]);
            }
            Action::SegmentFree | Action::SegmentUnmap if !made_in_trace.contains(&t.addr[i]) => {
                freed_first.push((t.addr[i], t.size[i], t.stream[i]));
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
            a.seed_segment(s.address, s.total_size, s.stream, small);
        }
    }
    for (addr, size, stream) in freed_first {
        a.seed_segment(addr, size, stream, size == small_segment);
    }
    // Blocks in use at the start.
    let mut seen = std::collections::HashSet::new();
    let mut in_use: Vec<(u64, u64)> = Vec::new();
    for i in 0..t.len() {
        match t.action[i] {
            Action::Alloc => {
                seen.insert(t.addr[i]);
            }
            Action::FreeRequested | Action::FreeCompleted if seen.insert(t.addr[i]) => {
                in_use.push((t.addr[i], a.settings.round_size(t.size[i])));
            }
            _ => {}
        }
    }
    for s in snap.segments_of(device) {
        for b in snap.blocks_of(s) {
            if b.state == vramscope_snapshot::BlockState::ActiveAllocated
                && !seen.contains(&b.address)
            {
                in_use.push((b.address, b.size));
            }
        }
    }
    let mut misses = 0;
    for (addr, size) in in_use {
        if a.seed_allocated(addr, size) {
            addr_of.insert(addr, addr);
        } else {
            misses += 1;
        }
    }
    // The replay's peaks start from here.
    a.events.clear();
    misses
}

/// Length of the longest common subsequence (two rows of the table).
fn common_subsequence(a: &[SegmentEvent], b: &[SegmentEvent]) -> usize {
    if a.is_empty() || b.is_empty() {
        return 0;
    }
    let mut prev = vec![0usize; b.len() + 1];
    let mut cur = vec![0usize; b.len() + 1];
    for x in a {
        for (j, y) in b.iter().enumerate() {
            cur[j + 1] = if x == y {
                prev[j] + 1
            } else {
                prev[j + 1].max(cur[j])
            };
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_subsequence_counts_in_order() {
        use SegmentEvent::*;
        let a = [Alloc(1), Alloc(2), Free(1), Alloc(3)];
        let b = [Alloc(1), Free(1), Alloc(2), Alloc(3)];
        assert_eq!(common_subsequence(&a, &b), 3);
        assert_eq!(common_subsequence(&a, &[]), 0);
    }
}
