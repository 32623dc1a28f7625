//! One device's `[memory]` events as a trace whose replay gives back the
//! trace's own totals.
//!
//! Each event is an allocation (`Bytes` > 0) or a free (`Bytes` < 0) at
//! `Addr`, with the allocator's `Total Allocated` and `Total Reserved` after
//! it. They become `alloc` and `free_completed` entries (the replay applies
//! frees at `free_completed`; a trace has no separate request). Exactness:
//!
//! * **allocated**: the replay starts from the blocks alive before the
//!   window (frees without an allocation, blocks alive at the end without
//!   one) and adds each entry's size. Starting from `Total Allocated - Bytes`
//!   of the first event, that is the recorded total after every event as
//!   long as the totals follow from `Bytes`; where one does not, an
//!   unattributed allocation or free of the difference follows the event.
//!   Memory allocated before the trace and never freed in it is one block
//!   alive at the end.
//! * **reserved**: see `emit::Reserved`; the end's segment has `Total
//!   Reserved` of the last event, and each change is a segment entry placed
//!   before the event, so the backward derivation meets every recorded value.
//!
//! Events are ordered by time: Kineto writes each thread's events in
//! batches, and only time order makes the totals follow from `Bytes`.
//! Older traces without `Addr` get made-up addresses, a free
//! ending a live block of its size; without `Total Allocated` the curve is
//! the running sum of `Bytes`.

use crate::hash::FxHashMap;
use crate::intern::StackId;
use crate::model::Action;

use super::emit::{Builder, Reserved};
use super::parse::MemEvent;

/// Ties longer than this keep their file order (reordering is quadratic).
const MAX_TIE: usize = 64;

/// What was made up, over all devices, for the warnings.
#[derive(Default)]
pub(super) struct Notes {
    reserved: bool,
    no_reserved: bool,
    no_addr: u64,
    no_totals: bool,
    before: Vec<(u32, u64)>,
    corrections: u64,
    overfreed: Vec<(u32, u64)>,
}

impl Notes {
    pub(super) fn lines(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.reserved {
            w.push(
                "a profiler trace records no segments: each device's reserved memory (Total \
                 Reserved) is one segment, and its changes are segment_alloc/segment_free entries"
                    .into(),
            );
        }
        if self.no_reserved {
            w.push(
                "the trace records no reserved memory (no Total Reserved): reserved shows as 0"
                    .into(),
            );
        }
        if self.no_addr > 0 {
            w.push(format!(
                "{} [memory] events record no address (Addr; an older trace): each \
                 allocation is a block of its own and each free ends a live block of the same \
                 size, so totals are exact but which allocation a free ended is not",
                self.no_addr
            ));
        }
        if self.no_totals {
            w.push(
                "the trace records no Total Allocated: the allocated curve is the running sum of \
                 Bytes, from the frees of memory allocated before the trace"
                    .into(),
            );
        }
        for &(d, bytes) in &self.before {
            w.push(format!(
                "device {d}: {bytes} bytes allocated before the trace and not freed in it are one \
                 block alive from its start (the trace has no per-allocation record of them)"
            ));
        }
        if self.corrections > 0 {
            w.push(format!(
                "{} events' Total Allocated does not follow from their Bytes; the difference is an \
                 allocation or free without a stack, so that the allocated curve is the recorded one",
                self.corrections
            ));
        }
        for &(d, bytes) in &self.overfreed {
            w.push(format!(
                "device {d}: the trace frees {bytes} bytes more than it says were allocated before \
                 it began; the allocated curve is that much above Total Allocated"
            ));
        }
        w
    }
}

/// Sort by time; within one timestamp, put first the event whose totals
/// follow from the previous one (threads that allocate in the same µs are
/// written in any order).
fn order(ev: &mut [MemEvent]) {
    ev.sort_by_key(|e| e.ts_ns);
    let mut prev: Option<i64> = None;
    let mut i = 0;
    while i < ev.len() {
        let mut j = i + 1;
        while j < ev.len() && ev[j].ts_ns == ev[i].ts_ns {
            j += 1;
        }
        if let (Some(mut cur), 2..=MAX_TIE) = (prev, j - i) {
            for k in i..j {
                let fits = |e: &MemEvent| e.total_allocated == Some(cur + e.bytes);
                if let Some(m) = (k..j).find(|&m| fits(&ev[m])) {
                    ev[k..=m].rotate_right(1);
                }
                cur = ev[k].total_allocated.unwrap_or(cur + ev[k].bytes);
            }
        }
        prev = ev[j - 1]
            .total_allocated
            .or(prev.map(|p| p + ev[j - 1].bytes));
        i = j;
    }
}

/// One device's trace; also the blocks alive at the end (address, size,
/// stack) and the reserved bytes at the end.
#[allow(clippy::type_complexity)]
pub(super) fn device_trace(
    device: u32,
    mut ev: Vec<MemEvent>,
    base_ns: i64,
    notes: &mut Notes,
) -> (Builder, Vec<(u64, u64, StackId)>, u64) {
    order(&mut ev);
    let mut b = Builder::new(device);
    // Live blocks by address; blocks without a recorded address by size.
    let mut open: FxHashMap<u64, (u64, StackId)> = FxHashMap::default();
    let mut by_size: FxHashMap<u64, Vec<u64>> = FxHashMap::default();
    // Blocks whose address was allocated again without a free: the replay
    // still counts them, so the end state must hold them.
    let mut shadowed: Vec<(u64, u64, StackId)> = Vec::new();
    // Unattributed blocks that make the totals match, newest last.
    let mut extra: Vec<(u64, u64)> = Vec::new();
    // Bytes freed that were allocated before the trace.
    let mut freed_before: u64 = 0;
    // Sum of the sizes written so far (allocations minus frees).
    let mut sum: i128 = 0;
    // Allocated before the first event, from the first recorded total.
    let mut start: Option<i128> = None;
    let mut reserved: Option<Reserved> = None;
    let time = |ns: i64| base_ns.saturating_add(ns).div_euclid(1000);
    for e in &ev {
        let t = time(e.ts_ns);
        if let Some(r) = e.total_reserved {
            let r = r.max(0) as u64;
            match reserved.as_mut() {
                Some(res) => res.set(r, &mut b, t, e.stack),
                None => reserved = Some(Reserved::new(r)),
            }
        }
        let size = e.bytes.unsigned_abs();
        if e.addr.is_none() && e.bytes != 0 {
            notes.no_addr += 1;
        }
        if e.bytes > 0 {
            let addr = e.addr.unwrap_or_else(|| {
                let a = b.synth_addr(size);
                by_size.entry(size).or_default().push(a);
                a
            });
            if let Some((s, st)) = open.insert(addr, (size, e.stack)) {
                shadowed.push((addr, s, st));
            }
            b.push(Action::Alloc, addr, size, t, e.stack);
            sum += size as i128;
        } else if e.bytes < 0 {
            let addr = match e.addr {
                Some(a) => a,
                None => match by_size.get_mut(&size).and_then(Vec::pop) {
                    Some(a) => a,
                    None => b.synth_addr(size),
                },
            };
            if open.remove(&addr).is_none() {
                freed_before += size;
            }
            b.push(Action::FreeCompleted, addr, size, t, e.stack);
            sum -= size as i128;
        }
        let Some(total) = e.total_allocated else {
            continue;
        };
        let s0 = *start.get_or_insert(total as i128 - sum);
        let drift = total as i128 - (s0 + sum);
        if drift == 0 {
            continue;
        }
        notes.corrections += 1;
        if drift > 0 {
            let size = drift as u64;
            let a = b.synth_addr(size);
            b.push(Action::Alloc, a, size, t, StackId::NONE);
            open.insert(a, (size, StackId::NONE));
            extra.push((a, size));
            sum += drift;
            continue;
        }
        let mut need = drift.unsigned_abs() as u64;
        while need > 0 {
            // Free the newest unattributed block, splitting it if larger;
            // with none left, the bytes were allocated before the trace.
            let Some((a, s)) = extra.pop() else {
                let a = b.synth_addr(need);
                b.push(Action::FreeCompleted, a, need, t, StackId::NONE);
                freed_before += need;
                sum -= need as i128;
                break;
            };
            b.push(Action::FreeCompleted, a, s, t, StackId::NONE);
            open.remove(&a);
            sum -= s as i128;
            if s > need {
                let rest = s - need;
                let na = b.synth_addr(rest);
                b.push(Action::Alloc, na, rest, t, StackId::NONE);
                open.insert(na, (rest, StackId::NONE));
                extra.push((na, rest));
                sum += rest as i128;
                need = 0;
            } else {
                need -= s;
            }
        }
    }
    if start.is_none() {
        notes.no_totals = true;
    }
    let mut live: Vec<(u64, u64, StackId)> =
        open.into_iter().map(|(a, (s, st))| (a, s, st)).collect();
    live.extend(shadowed);
    // What the replay must find alive before the window beyond the frees
    // it sees: the rest of the first event's starting total.
    let before = start.unwrap_or(freed_before as i128) - freed_before as i128;
    if before > 0 {
        let size = before as u64;
        live.push((b.synth_addr(size), size, StackId::NONE));
        notes.before.push((device, size));
    } else if before < 0 {
        notes.overfreed.push((device, before.unsigned_abs() as u64));
    }
    match &reserved {
        Some(_) => notes.reserved = true,
        None => notes.no_reserved = true,
    }
    (b, live, reserved.map_or(0, |r| r.total()))
}
