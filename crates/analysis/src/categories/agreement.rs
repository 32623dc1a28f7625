//! How often inference agrees with the labels a file came with: every block
//! is labelled twice, once from the file's labels (the Memory Profiler's
//! categories, or the recorder's tags) and once by inference alone, and the
//! bytes are compared over time (each block weighted by size × lifetime)
//! and at the peak.

use serde::Serialize;
use vramscope_snapshot::{DeviceTrace, Snapshot, NO_TIME};

use super::{categorize_with, Category, CategoryOptions, Source};
use crate::lifetimes::{Lifetimes, BEFORE_WINDOW, STILL_ALIVE};
use crate::replay::Replay;

/// Bytes one reference label received from inference.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConfusionCell {
    /// The file's label.
    pub reference: Category,
    /// What inference said.
    pub inferred: Category,
    /// Σ size × lifetime (byte·µs, or byte·events without times).
    pub byte_time: f64,
    /// Bytes alive at the peak.
    pub peak_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Agreement {
    pub device: u32,
    /// Where the reference labels came from.
    pub reference: Source,
    /// Blocks with a reference label (the others are left out).
    pub blocks: u64,
    /// Share of Σ size × lifetime inferred as the reference labels it
    /// (blocks the reference calls `unknown` left out).
    pub over_time: f64,
    /// Share of the bytes alive at the peak inferred as labelled.
    pub at_peak: f64,
    /// Bytes alive at the peak without a reference label (none, or the
    /// profiler's `unknown`), left out of the shares.
    pub unlabelled_peak_bytes: u64,
    /// Every (reference, inferred) pair that received bytes, largest first.
    pub confusion: Vec<ConfusionCell>,
}

/// Inference against the file's own labels on `device`; `None` when the
/// file has none.
pub fn agreement(snap: &Snapshot, device: u32) -> Option<Agreement> {
    let empty = DeviceTrace::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let l = Lifetimes::new(snap, device);
    let given = categorize_with(snap, device, &l, &CategoryOptions { use_given: true });
    let inferred = categorize_with(snap, device, &l, &CategoryOptions { use_given: false });
    // `unknown` from the profiler is the absence of a label (it could not
    // tie the memory to a tensor, e.g. library workspaces), not one to
    // agree with: those blocks are listed but left out of the shares.
    let labelled: Vec<usize> = (0..l.len())
        .filter(|&b| matches!(given.source[b], Some(Source::Profiler | Source::Recorder)))
        .collect();
    let reference = labelled.first().and_then(|&b| given.source[b])?;
    let clock = Clock::new(t);
    let mut cells: Vec<ConfusionCell> = Vec::new();
    let (mut agree_t, mut total_t) = (0f64, 0f64);
    for &b in &labelled {
        let w = l.size[b] as f64 * clock.lifetime(l.birth[b], l.death[b]);
        let k = cell(&mut cells, given.category[b], inferred.category[b]);
        cells[k].byte_time += w;
        if given.category[b] == Category::Unknown {
            continue;
        }
        total_t += w;
        if given.category[b] == inferred.category[b] {
            agree_t += w;
        }
    }
    // At the peak: the replay's live blocks, matched to their labels.
    let replay = Replay::new(snap, device);
    let live = replay.live_after(t, replay.peak_index);
    let (mut agree_p, mut total_p, mut unlabelled) = (0u64, 0u64, 0u64);
    for lb in &live {
        let b = given.block_of(&l, lb);
        match b.filter(|&b| matches!(given.source[b], Some(Source::Profiler | Source::Recorder))) {
            Some(b) => {
                let k = cell(&mut cells, given.category[b], inferred.category[b]);
                cells[k].peak_bytes += lb.size;
                if given.category[b] == Category::Unknown {
                    unlabelled += lb.size;
                    continue;
                }
                total_p += lb.size;
                if given.category[b] == inferred.category[b] {
                    agree_p += lb.size;
                }
            }
            None => unlabelled += lb.size,
        }
    }
    cells.sort_by(|a, b| b.byte_time.total_cmp(&a.byte_time));
    let share = |a: f64, t: f64| if t > 0.0 { a / t } else { 1.0 };
    Some(Agreement {
        device,
        reference,
        blocks: labelled.len() as u64,
        over_time: share(agree_t, total_t),
        at_peak: share(agree_p as f64, total_p as f64),
        unlabelled_peak_bytes: unlabelled,
        confusion: cells,
    })
}

/// The cell of `(r, i)`, added when new.
fn cell(cells: &mut Vec<ConfusionCell>, r: Category, i: Category) -> usize {
    if let Some(k) = cells
        .iter()
        .position(|c| c.reference == r && c.inferred == i)
    {
        return k;
    }
    cells.push(ConfusionCell {
        reference: r,
        inferred: i,
        byte_time: 0.0,
        peak_bytes: 0,
    });
    cells.len() - 1
}

/// Event index → time, for lifetimes: µs when the trace has times, else
/// event counts.
struct Clock<'t> {
    t: &'t DeviceTrace,
    timed: bool,
    first: i64,
    last: i64,
}

impl<'t> Clock<'t> {
    fn new(t: &'t DeviceTrace) -> Clock<'t> {
        let times = || t.time_us.iter().copied().filter(|&x| x != NO_TIME);
        Clock {
            t,
            timed: t.has_time(),
            first: times().min().unwrap_or(0),
            last: times().max().unwrap_or(0),
        }
    }

    fn at(&self, i: u32, default: i64) -> i64 {
        if !self.timed {
            return if i == BEFORE_WINDOW || i == STILL_ALIVE {
                default
            } else {
                i as i64
            };
        }
        self.t
            .time_us
            .get(i as usize)
            .copied()
            .filter(|&x| x != NO_TIME)
            .unwrap_or(default)
    }

    /// Lifetime of a block, at least one unit so that nothing weighs zero.
    fn lifetime(&self, birth: u32, death: u32) -> f64 {
        let (start, end) = if self.timed {
            (self.first, self.last)
        } else {
            (0, self.t.len() as i64)
        };
        let b = self.at(birth, start);
        let d = self.at(death, end);
        (d - b).max(1) as f64
    }
}
