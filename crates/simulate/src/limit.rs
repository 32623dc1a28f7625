//! The device's limit as the trace shows it, without an OOM. When
//! cudaMalloc fails, PyTorch's `malloc` releases cached segments
//! (`release_available_cached_blocks`, then `release_cached_blocks`) and
//! tries again: the trace holds a burst of `segment_free` entries followed
//! by the `segment_alloc` that then succeeded. Each such burst bounds what
//! PyTorch could reserve then (reserved plus the device's free memory):
//! below the reserved bytes before the burst plus the new segment (the
//! first try failed), at least the reserved bytes after the release plus
//! the new segment (the retry succeeded). A replay that ignores the limit
//! keeps segments the GPU made it release, and its later segment events
//! drift from the recorded ones.

use serde::Serialize;
use vramscope_snapshot::{Action, Snapshot};

use crate::start::reserved_before;

/// One release-and-retry burst.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Retry {
    /// The entry of the segment allocation that succeeded on the retry.
    pub entry: usize,
    /// Reserved before the burst, released by it, and the new segment.
    pub reserved_before: u64,
    pub released: u64,
    pub segment: u64,
}

/// What the bursts say of the limit: every burst's bounds, intersected.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SeenLimit {
    pub retries: Vec<Retry>,
    /// The limit was at least this (the largest lower bound, and the
    /// recorded peak reserved) and below `below` (the smallest upper bound).
    pub at_least: u64,
    pub below: u64,
    /// Whether the bounds agree; they do not when memory held outside the
    /// allocator changed while the program ran.
    pub consistent: bool,
}

impl SeenLimit {
    /// The capacity a replay runs under: the highest the bursts allow.
    pub fn capacity(&self) -> u64 {
        if self.consistent {
            self.below - 1
        } else {
            self.at_least
        }
    }
}

/// The release-and-retry bursts of `device`'s trace (not those of
/// `empty_cache` calls: `program_releases`), if any.
pub fn seen_limit(snap: &Snapshot, device: u32, program_releases: &[usize]) -> Option<SeenLimit> {
    let t = snap.trace(device)?;
    let releases = |a: Action| matches!(a, Action::SegmentFree | Action::SegmentUnmap);
    let grows = |a: Action| matches!(a, Action::SegmentAlloc | Action::SegmentMap);
    let mut reserved = reserved_before(snap, device, 0);
    let mut peak = reserved;
    let mut retries = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if !releases(t.action[i]) {
            if grows(t.action[i]) {
                reserved += t.size[i];
                peak = peak.max(reserved);
            }
            i += 1;
            continue;
        }
        let start = i;
        let before = reserved;
        let mut released = 0;
        while i < t.len() && releases(t.action[i]) {
            released += t.size[i];
            i += 1;
        }
        reserved = reserved.saturating_sub(released);
        if program_releases.binary_search(&start).is_ok() {
            continue;
        }
        if let Some(j) = (i..t.len()).find(|&j| t.action[j] != Action::Snapshot) {
            if grows(t.action[j]) {
                retries.push(Retry {
                    entry: j,
                    reserved_before: before,
                    released,
                    segment: t.size[j],
                });
            }
        }
    }
    if retries.is_empty() {
        return None;
    }
    let below = retries
        .iter()
        .map(|r| r.reserved_before + r.segment)
        .min()
        .unwrap_or(u64::MAX);
    let at_least = retries
        .iter()
        .map(|r| r.reserved_before - r.released + r.segment)
        .max()
        .unwrap_or(0)
        .max(peak);
    Some(SeenLimit {
        retries,
        at_least,
        below,
        consistent: at_least < below,
    })
}
