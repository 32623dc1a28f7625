//! The liveness walk of a device trace: which blocks are alive when, and the allocated
//! total after every event.
//!
//! The trace is a window (PyTorch keeps the last `max_entries` events), so a
//! block can be freed in the window without having been allocated in it, or
//! be alive at the end without an `alloc` event. Both kinds were allocated
//! before the window and count as live from its start; this is also how
//! PyTorch's own viewer draws them. (Not in a file cut inside its trace:
//! there a block alive at the dump may have been allocated after the cut.)

use vramscope_snapshot::hash::FxHashMap as HashMap;

use vramscope_snapshot::{Action, DeviceTrace, Snapshot, StackId};

/// A block alive at some point of the liveness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveBlock {
    pub addr: u64,
    pub size: u64,
    pub stack: StackId,
    /// Index of the `alloc` event, or `None` if allocated before the window.
    pub alloc_index: Option<u32>,
}

/// Blocks allocated before the trace window, and the walk's starting point.
#[derive(Debug, Default)]
pub struct Liveness {
    /// Live at the start of the window (freed later, or alive at the end).
    pub pre_window: Vec<LiveBlock>,
    /// Sum of `pre_window` sizes.
    pub initial_bytes: u64,
    /// Highest allocated total over the trace.
    pub peak_bytes: u64,
    /// First event after which the peak holds; `None` if the peak is the
    /// starting state.
    pub peak_index: Option<usize>,
    /// Allocated total after the last event.
    pub final_bytes: u64,
}

/// Live blocks at the end of the snapshot for `device` (allocated or pending
/// free), by address.
pub(crate) fn live_at_end(snap: &Snapshot, device: u32) -> Vec<LiveBlock> {
    snap.segments_of(device)
        .flat_map(|s| snap.blocks_of(s))
        .filter(|b| b.state.is_allocated())
        .map(|b| LiveBlock {
            addr: b.address,
            size: b.size,
            stack: b.stack,
            alloc_index: None,
        })
        .collect()
}

/// Whether blocks alive at the dump without an `alloc` in the trace count
/// as allocated before the window. Not in a file cut inside its trace: it
/// has the dump's segments (written first) but not the events before the
/// dump, so such a block may as well have been allocated after the cut, and
/// counting it from the start would raise every figure above what was
/// recorded; there only blocks freed in the recovered part count as from
/// before the window.
pub fn dump_counts_from_start(snap: &Snapshot, t: &DeviceTrace) -> bool {
    !snap.source.truncated || t.is_empty()
}

impl Liveness {
    /// Find the pre-window blocks and the peak of `device`.
    pub fn new(snap: &Snapshot, device: u32) -> Liveness {
        let empty = DeviceTrace::default();
        let t = snap.trace(device).unwrap_or(&empty);
        let mut open: HashMap<u64, u32> = HashMap::default();
        let mut pre_window = Vec::new();
        for i in 0..t.len() {
            match t.action[i] {
                Action::Alloc => {
                    open.insert(t.addr[i], i as u32);
                }
                Action::FreeCompleted if open.remove(&t.addr[i]).is_none() => {
                    pre_window.push(LiveBlock {
                        addr: t.addr[i],
                        size: t.size[i],
                        stack: t.stack[i],
                        alloc_index: None,
                    });
                }
                _ => {}
            }
        }
        if dump_counts_from_start(snap, t) {
            pre_window.extend(
                live_at_end(snap, device)
                    .into_iter()
                    .filter(|b| !open.contains_key(&b.addr)),
            );
        }
        let initial_bytes: u64 = pre_window.iter().map(|b| b.size).sum();
        let (mut cur, mut peak, mut peak_index) =
            (initial_bytes as i128, initial_bytes as i128, None);
        for i in 0..t.len() {
            match t.action[i] {
                Action::Alloc => cur += t.size[i] as i128,
                Action::FreeCompleted => cur -= t.size[i] as i128,
                _ => continue,
            }
            if cur > peak {
                peak = cur;
                peak_index = Some(i);
            }
        }
        Liveness {
            pre_window,
            initial_bytes,
            peak_bytes: peak.max(0) as u64,
            peak_index,
            final_bytes: cur.max(0) as u64,
        }
    }

    /// Blocks alive right after event `index` (`None`: at the start).
    pub fn live_after(&self, t: &DeviceTrace, index: Option<usize>) -> Vec<LiveBlock> {
        self.live_at_points(t, &[index]).pop().unwrap_or_default()
    }

    /// Blocks alive right after each of `points` (`None`: at the start), in
    /// one pass over the trace. Each result is sorted by address.
    pub fn live_at_points(&self, t: &DeviceTrace, points: &[Option<usize>]) -> Vec<Vec<LiveBlock>> {
        let mut order: Vec<usize> = (0..points.len()).collect();
        order.sort_by_key(|&k| points[k].map_or(0, |i| i + 1));
        let mut out = vec![Vec::new(); points.len()];
        let mut live: HashMap<u64, LiveBlock> =
            self.pre_window.iter().map(|b| (b.addr, *b)).collect();
        let mut next = 0usize; // events applied so far
        for k in order {
            let upto = points[k].map_or(0, |i| (i + 1).min(t.len()));
            while next < upto {
                let i = next;
                match t.action[i] {
                    Action::Alloc => {
                        live.insert(
                            t.addr[i],
                            LiveBlock {
                                addr: t.addr[i],
                                size: t.size[i],
                                stack: t.stack[i],
                                alloc_index: Some(i as u32),
                            },
                        );
                    }
                    Action::FreeCompleted => {
                        live.remove(&t.addr[i]);
                    }
                    _ => {}
                }
                next += 1;
            }
            let mut v: Vec<LiveBlock> = live.values().copied().collect();
            v.sort_unstable_by_key(|b| b.addr);
            out[k] = v;
        }
        out
    }
}

/// Allocated bytes after each event (the walk's running total).
pub fn allocated_series(liveness: &Liveness, t: &DeviceTrace) -> Vec<u64> {
    let mut cur = liveness.initial_bytes as i128;
    t.action
        .iter()
        .zip(&t.size)
        .map(|(a, &sz)| {
            match a {
                Action::Alloc => cur += sz as i128,
                Action::FreeCompleted => cur -= sz as i128,
                _ => {}
            }
            cur.max(0) as u64
        })
        .collect()
}

/// Reserved bytes after each event, derived backwards from the segments at
/// the end (segment events before the window are unknown, the end state is not).
pub fn reserved_after(snap: &Snapshot, device: u32) -> Vec<u64> {
    let empty = DeviceTrace::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let end: u64 = snap.segments_of(device).map(|s| s.total_size).sum();
    let mut out = vec![0u64; t.len()];
    let mut cur = end as i128;
    for i in (0..t.len()).rev() {
        out[i] = cur.max(0) as u64;
        match t.action[i] {
            Action::SegmentAlloc | Action::SegmentMap => cur -= t.size[i] as i128,
            Action::SegmentFree | Action::SegmentUnmap => cur += t.size[i] as i128,
            _ => {}
        }
    }
    out
}
