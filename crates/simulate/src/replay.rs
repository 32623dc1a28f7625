//! Replaying a recorded trace through the model: every `alloc` is a
//! `malloc` of its requested size on its stream, every `free_completed` a
//! `free` (frees are applied when completed, as the allocator does). The
//! recorded segment events and reserved curve are set beside the model's.

use vramscope_snapshot::hash::FxHashMap as HashMap;

use crate::edits::{Edits, Extra, Rerun};
use serde::Serialize;
use vramscope_snapshot::{Action, Snapshot};

use crate::horizon::Tail;
use crate::model::{Allocator, OutOfMemory, SegmentEvent};
use crate::pools::{is_private, pool_of, Lanes};
use crate::settings::Settings;
use crate::start::{reserved_before, seed, seed_cold};

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
    /// the blocks in use then (`seed`).
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
    /// The first projected request the model could not serve: the earlier
    /// iteration's entry it was copied from and its rounded size (only
    /// with a [`Tail`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projected_oom: Option<(usize, u64)>,
    /// Reserved when that request failed, after the allocator released
    /// every cached segment it could (what live blocks pin).
    pub reserved_at_oom: u64,
    /// Allocated just before the entry where the file recorded its OOM
    /// (whether or not the replay fails there).
    pub allocated_before_recorded_oom: Option<u64>,
    /// The same in bytes requested (before the allocator's rounding).
    pub requested_before_recorded_oom: Option<u64>,
    /// Reserved bytes after entries of the trace, (entry, bytes), at most
    /// [`ReplaySetup::curve_points`] of them, the largest value of each
    /// stretch of entries: the simulated curve, to draw over the recorded.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub curve: Vec<(u32, u64)>,
    /// `torch.cuda.empty_cache()` calls seen in the trace (segment frees
    /// that no request caused), made in the replay too.
    pub empty_cache_calls: usize,
    /// cudaMalloc and cudaFree calls the model made (page maps and unmaps
    /// with expandable segments); each one synchronises the device.
    pub cuda_mallocs: usize,
    pub cuda_frees: usize,
    /// Private pools (CUDA graphs, `torch.cuda.MemPool`) the replay kept
    /// apart from the default pool, and how their events were told
    /// ([`crate::pools`]); absent when the file has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub private_pools: Option<PrivatePools>,
}

/// The private pools of a replay.
#[derive(Clone, Debug, Serialize)]
pub struct PrivatePools {
    /// Their ids, `(0, n)` a graph's own, `(n, 0)` the program's.
    pub ids: Vec<(i64, i64)>,
    /// `trace` (PyTorch 2.15's `pool_id` on each entry) or `dump` (the
    /// segments the file was written with: only pools still alive then).
    pub told_by: &'static str,
}

/// What a replay runs on besides the settings. `Default`: an unlimited
/// device, the program as recorded, no curve.
#[derive(Clone, Debug, Default)]
pub struct ReplaySetup<'a> {
    /// Device memory PyTorch may reserve (`None`: unlimited).
    pub capacity: Option<u64>,
    /// Program changes ([`crate::edits`]).
    pub edits: Option<&'a Edits>,
    /// Points of the reserved curve to keep (0: none).
    pub curve_points: usize,
    /// Replay the recorded entries before `tail.cut`, then these projected
    /// ones ([`crate::horizon`]).
    pub tail: Option<&'a Tail>,
    /// Start from an empty cache, the blocks in use when the trace starts
    /// allocated first (`start::seed_cold`), instead of from the
    /// file's segments: how a program change is replayed as if made from
    /// the program's start.
    pub cold_start: bool,
}

/// Replay device `device` of `snap` under `settings`.
pub fn replay(snap: &Snapshot, device: u32, settings: Settings, setup: &ReplaySetup) -> Replayed {
    let capacity = setup.capacity;
    let no_edits = Edits::default();
    let edits = setup.edits.unwrap_or(&no_edits);
    let empty = Default::default();
    let t = snap.trace(device).unwrap_or(&empty);
    // An estimate's trace gives each block a segment of its own: they are
    // not segments the allocator made, and nothing to compare against.
    let estimate = snap.is_estimate();
    let recorded: Vec<SegmentEvent> = (0..t.len())
        .filter(|_| !estimate)
        .filter_map(|i| match t.action[i] {
            Action::SegmentAlloc => Some(SegmentEvent::Alloc(t.size[i])),
            Action::SegmentFree => Some(SegmentEvent::Free(t.size[i])),
            Action::SegmentMap => Some(SegmentEvent::Map(t.size[i])),
            Action::SegmentUnmap => Some(SegmentEvent::Unmap(t.size[i])),
            _ => None,
        })
        .collect();
    let initial_reserved = reserved_before(snap, device, 0);

    let mut a = Allocator::new(settings, capacity);
    if let (Some(f), Some(c)) = (a.settings.memory_fraction, capacity) {
        a.fraction_limit = Some((f * c as f64) as u64);
    }
    // Recorded address → the model's address and the bytes requested.
    let mut addr_of: HashMap<u64, (u64, u64)> = HashMap::default();
    // Each event's lane: its stream, and its private pool where it has one.
    let lanes = Lanes::new(snap, device);
    let lane = |i: usize| lanes.of(i, t.stream[i]);
    let seed_misses = if setup.cold_start {
        seed_cold(&mut a, snap, device, &mut addr_of, edits, &lanes)
    } else {
        seed(&mut a, snap, device, &mut addr_of, edits, &lanes)
    };
    let mut requested: u64 = addr_of.values().map(|v| v.1).sum();
    let recorded_oom = (0..t.len()).find(|&i| t.action[i] == Action::Oom);
    let empty_cache = empty_cache_calls(snap, t);
    let mut allocated_before_recorded_oom = None;
    let mut requested_before_recorded_oom = None;
    let stride = match setup.curve_points {
        0 => usize::MAX,
        n => t.len().div_ceil(n).max(1),
    };
    let mut curve = Vec::new();
    let mut stretch_max = 0u64;
    let mut rec_reserved = initial_reserved;
    let mut rec_peak = initial_reserved;
    let mut max_err: f64 = 0.0;
    // The first request the model could not serve, and at which entry.
    let mut first_oom: Option<(usize, OutOfMemory)> = None;
    let end = setup.tail.map_or(t.len(), |x| x.cut.min(t.len()));
    // Blocks made ahead of their recorded alloc live under a key no
    // recorded address has (bit 63) until that alloc, when they take its
    // address: another block may hold that address in between.
    const EARLY: u64 = 1 << 63;
    let born_early = edits.born_early();
    // Blocks freed after their recorded free live under a key no recorded
    // address has (bit 62) from their alloc: their recorded free finds
    // nothing, and their address may be taken again before they go.
    const LATE: u64 = 1 << 62;
    let late = edits.freed_late();
    // Blocks the change makes that the recorded run never made (bit 61).
    const EXTRA: u64 = 1 << 61;
    for i in 0..end {
        if !edits.keep_cache && empty_cache.binary_search(&i).is_ok() {
            // The program called torch.cuda.empty_cache() here: so does
            // the model, whatever its settings. Private pools whose
            // segments this release frees were released by the program.
            for j in (i..t.len()).take_while(|&j| t.action[j] == Action::SegmentFree) {
                if is_private(lane(j)) {
                    a.release_pool(pool_of(lane(j)));
                }
            }
            a.release_cached();
        }
        if Some(i) == recorded_oom {
            allocated_before_recorded_oom = Some(a.allocated);
            requested_before_recorded_oom = Some(requested);
        }
        let size = edits.scaled(i, t.size[i]);
        match t.action[i] {
            Action::Alloc if born_early.contains_key(&i) => {
                if let Some(v) = addr_of.remove(&(EARLY | i as u64)) {
                    addr_of.insert(t.addr[i], v);
                }
            }
            Action::Alloc if edits.drop_alloc.contains(&i) => {}
            // An `oom` entry is the request that failed when the trace was
            // recorded: tried again here. If it fits, its lifetime is
            // unknown: it is freed at once, so what follows replays as recorded.
            Action::Alloc | Action::Oom => match malloc_hinted(&mut a, t, i, size, lane(i)) {
                Ok(p) if t.action[i] == Action::Oom => a.free(p),
                Ok(p) => {
                    requested += size;
                    let key = if late.contains_key(&i) {
                        LATE | i as u64
                    } else {
                        t.addr[i]
                    };
                    addr_of.insert(key, (p, size));
                }
                Err(e) => {
                    first_oom.get_or_insert((i, e));
                }
            },
            Action::FreeCompleted => requested -= free_key(&mut a, &mut addr_of, t.addr[i]),
            Action::SegmentAlloc | Action::SegmentMap if !estimate => rec_reserved += t.size[i],
            Action::SegmentFree | Action::SegmentUnmap if !estimate => {
                // A private pool's segment given back: the program released
                // the pool, whose cached segments may go from now on.
                if is_private(lane(i)) {
                    a.release_pool(pool_of(lane(i)));
                }
                rec_reserved = rec_reserved.saturating_sub(t.size[i])
            }
            _ => {}
        }
        // Blocks a change frees at the end of their phase.
        for &k in edits.free_after.get(&i).map_or(&[][..], |v| v.as_slice()) {
            requested -= free_key(&mut a, &mut addr_of, t.addr[k]);
        }
        for &addr in edits
            .free_seed_after
            .get(&i)
            .map_or(&[][..], |v| v.as_slice())
        {
            requested -= free_key(&mut a, &mut addr_of, addr);
        }
        for &k in edits.free_late.get(&i).map_or(&[][..], |v| v.as_slice()) {
            if k < i {
                requested -= free_key(&mut a, &mut addr_of, LATE | k as u64);
            }
        }
        // A stretch run again (a checkpointed layer's recomputation): its
        // saved blocks made to stay, its temporaries made and freed again.
        if let Some(steps) = edits.rerun_after.get(&i) {
            let mut pulse: Vec<(usize, _, u64)> = Vec::new();
            for step in steps {
                match *step {
                    Rerun::Make(k) if k < t.len() => {
                        let size = edits.scaled(k, t.size[k]);
                        match make_key(&mut a, &mut addr_of, t.addr[k], size, lane(k)) {
                            Ok(n) => requested += n,
                            Err(e) => {
                                first_oom.get_or_insert((i, e));
                            }
                        }
                    }
                    Rerun::Pulse(k) if k < t.len() => {
                        let size = edits.scaled(k, t.size[k]);
                        match a.malloc(size, lane(k)) {
                            Ok(p) => {
                                requested += size;
                                pulse.push((k, p, size));
                            }
                            Err(e) => {
                                first_oom.get_or_insert((i, e));
                            }
                        }
                    }
                    Rerun::Unpulse(k) => {
                        if let Some(x) = pulse.iter().position(|q| q.0 == k) {
                            let (_, p, n) = pulse.swap_remove(x);
                            a.free(p);
                            requested -= n;
                        }
                    }
                    _ => {}
                }
            }
            for (_, p, n) in pulse {
                a.free(p);
                requested -= n;
            }
        }
        if let Some(births) = edits.born_after.get(&i) {
            for &k in births.iter().filter(|&&k| k > i && k < t.len()) {
                let size = edits.scaled(k, t.size[k]);
                match make_key(&mut a, &mut addr_of, EARLY | k as u64, size, lane(k)) {
                    Ok(n) => requested += n,
                    Err(e) => {
                        first_oom.get_or_insert((i, e));
                    }
                }
            }
        }
        // Blocks the change makes that the recorded run never made.
        for x in edits.extra_after.get(&i).map_or(&[][..], |v| v.as_slice()) {
            match *x {
                Extra::Make { id, size } => {
                    match make_key(&mut a, &mut addr_of, EXTRA | id as u64, size, lane(i)) {
                        Ok(n) => requested += n,
                        Err(e) => {
                            first_oom.get_or_insert((i, e));
                        }
                    }
                }
                Extra::Free(id) => requested -= free_key(&mut a, &mut addr_of, EXTRA | id as u64),
            }
            stretch_max = stretch_max.max(a.reserved);
        }
        stretch_max = stretch_max.max(a.reserved);
        if (i + 1) % stride == 0 || (stride != usize::MAX && i + 1 == t.len()) {
            curve.push((i as u32, stretch_max));
            stretch_max = 0;
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
    let mut projected_oom = None;
    for x in setup.tail.map(|x| x.entries.as_slice()).unwrap_or(&[]) {
        if x.free {
            if let Some((p, _)) = addr_of.remove(&x.addr) {
                a.free(p);
            }
            continue;
        }
        if edits.drop_alloc.contains(&x.from) {
            continue;
        }
        let size = edits.scaled(x.from, x.size);
        // A projected entry runs on the lane of the recorded one it copies.
        match a.malloc(size, lanes.of(x.from, x.stream)) {
            Ok(p) => {
                addr_of.insert(x.addr, (p, size));
            }
            Err(e) => {
                projected_oom.get_or_insert((x.from, e.size));
            }
        }
    }
    let simulated = a.events.clone();
    Replayed {
        projected_oom,
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
        oom: first_oom.map(|(i, e)| (i, e.size)),
        allocated_at_oom: first_oom.map_or(0, |(_, e)| e.allocated),
        reserved_at_oom: first_oom.map_or(0, |(_, e)| e.reserved),
        allocated_before_recorded_oom,
        requested_before_recorded_oom,
        empty_cache_calls: empty_cache.len(),
        curve,
        cuda_mallocs: simulated.iter().filter(|e| e.grows()).count(),
        cuda_frees: simulated.iter().filter(|e| !e.grows()).count(),
        private_pools: lanes.any().then(|| PrivatePools {
            ids: lanes.pools.clone(),
            told_by: if lanes.from_trace { "trace" } else { "dump" },
        }),
    }
}

/// Entries where the program released the cache itself
/// (`torch.cuda.empty_cache()`): the first of a run of
/// `segment_free`/`segment_unmap` entries that is not followed by what a
/// request's own release leads to (a `segment_alloc`/`segment_map` or an
/// `oom`: inside `malloc`, PyTorch frees cached segments only to make room
/// for the request it serves), or whose stack passes through `empty_cache`.
pub fn empty_cache_calls(snap: &Snapshot, t: &vramscope_snapshot::DeviceTrace) -> Vec<usize> {
    // An estimate's segments are its blocks, one each (`vramscope.estimate`
    // writes no allocator's segments): their frees are no empty_cache().
    if snap.is_estimate() {
        return Vec::new();
    }
    let through_empty_cache = |i: usize| {
        snap.stacks.get(t.stack[i]).iter().any(|&f| {
            let (_, _, name) = vramscope_analysis::sites::frame_location(snap, snap.frames.get(f));
            name == "empty_cache" || name.ends_with("::emptyCache") || name.contains("emptyCache(")
        })
    };
    let releases = |a: Action| matches!(a, Action::SegmentFree | Action::SegmentUnmap);
    let mut calls = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if !releases(t.action[i]) {
            i += 1;
            continue;
        }
        let start = i;
        let mut named = false;
        while i < t.len() && releases(t.action[i]) {
            named |= through_empty_cache(i);
            i += 1;
        }
        // What comes next, past entries that do not touch the allocator's
        // state (snapshots, user annotations).
        let next = (i..t.len()).find(|&j| {
            matches!(
                t.action[j],
                Action::Alloc
                    | Action::Oom
                    | Action::SegmentAlloc
                    | Action::SegmentMap
                    | Action::FreeRequested
                    | Action::FreeCompleted
            )
        });
        let for_a_request = next.is_some_and(|j| {
            matches!(
                t.action[j],
                Action::SegmentAlloc | Action::SegmentMap | Action::Oom
            )
        });
        if named || !for_a_request {
            calls.push(start);
        }
    }
    calls
}

/// Requests `size` for entry `i`, placing it where the recording says its
/// segment went: PyTorch records a segment_alloc just before the request
/// that made it.
/// Free the block kept under `key`, if any: the bytes it asked for (0 if
/// none).
fn free_key(a: &mut Allocator, addr_of: &mut HashMap<u64, (u64, u64)>, key: u64) -> u64 {
    match addr_of.remove(&key) {
        Some((p, n)) => {
            a.free(p);
            n
        }
        None => 0,
    }
}

/// Make a block of `size` kept under `key` (a recorded address, or an
/// edit's own key): the bytes it asked for.
fn make_key(
    a: &mut Allocator,
    addr_of: &mut HashMap<u64, (u64, u64)>,
    key: u64,
    size: u64,
    stream: u64,
) -> Result<u64, OutOfMemory> {
    let p = a.malloc(size, stream)?;
    addr_of.insert(key, (p, size));
    Ok(size)
}

fn malloc_hinted(
    a: &mut Allocator,
    t: &vramscope_snapshot::DeviceTrace,
    i: usize,
    size: u64,
    lane: u64,
) -> Result<u64, OutOfMemory> {
    if i > 0 && t.action[i - 1] == Action::SegmentAlloc {
        a.hint_segment(t.size[i - 1], t.addr[i - 1]);
    }
    let got = a.malloc(size, lane);
    a.hint = None;
    got
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
