//! How often inference agrees with the labels a file came with: every block
//! is labelled twice, once from the file's labels (the Memory Profiler's
//! categories, or the recorder's tags) and once by inference alone, and the
//! bytes are compared over time (each block weighted by size × lifetime)
//! and at the peak.

use serde::Serialize;
use vramscope_snapshot::{DeviceTrace, Snapshot, NO_TIME};

use super::{categorize_with, Categories, Category, CategoryOptions, Source};
use crate::lifetimes::{Lifetimes, BEFORE_WINDOW, STILL_ALIVE};
use crate::liveness::{LiveBlock, Liveness};

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

/// How one labelling agrees with the reference.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Shares {
    /// Share of Σ size × lifetime labelled as the reference labels it
    /// (blocks the reference calls `unknown` left out).
    pub over_time: f64,
    /// Share of the bytes alive at the peak labelled as the reference.
    pub at_peak: f64,
    /// Bytes alive at the peak without a reference label (none, or the
    /// profiler's `unknown`), left out of the shares.
    pub unlabelled_peak_bytes: u64,
    /// Every (reference, inferred) pair that received bytes, largest first.
    pub confusion: Vec<ConfusionCell>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Agreement {
    pub device: u32,
    /// Where the reference labels came from: the profiler's when the file
    /// has them, else the recorder's tags.
    pub reference: Source,
    /// Blocks with a reference label (the others are left out).
    pub blocks: u64,
    /// Inference alone, no label from the file.
    #[serde(flatten)]
    pub inference: Shares,
    /// The recorder's tags, with inference for what they do not cover,
    /// against the profiler's labels (files that have both).
    pub with_tags: Option<Shares>,
}

/// Inference (and the recorder's tags) against the file's own labels on
/// `device`; `None` when the file has none.
pub fn agreement(snap: &Snapshot, device: u32) -> Option<Agreement> {
    let empty = DeviceTrace::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let l = Lifetimes::new(snap, device);
    let profiler = categorize_with(
        snap,
        device,
        &l,
        &CategoryOptions {
            use_profiler_labels: true,
            use_recorder_tags: false,
        },
    );
    let tagged = categorize_with(
        snap,
        device,
        &l,
        &CategoryOptions {
            use_profiler_labels: false,
            use_recorder_tags: true,
        },
    );
    let has = |c: &Categories, s: Source| c.source.contains(&Some(s));
    let (reference, refs, with_tags) = if has(&profiler, Source::Profiler) {
        let with = has(&tagged, Source::Recorder).then_some(&tagged);
        (Source::Profiler, &profiler, with)
    } else if has(&tagged, Source::Recorder) {
        (Source::Recorder, &tagged, None)
    } else {
        return None;
    };
    let inferred = categorize_with(snap, device, &l, &CategoryOptions::inference_only());
    let liveness = Liveness::new(snap, device);
    let live = liveness.live_after(t, liveness.peak_index);
    let ctx = Ctx {
        l: &l,
        refs,
        reference,
        clock: Clock::new(t),
        live: &live,
    };
    Some(Agreement {
        device,
        reference,
        blocks: refs
            .source
            .iter()
            .filter(|s| **s == Some(reference))
            .count() as u64,
        inference: ctx.shares(&inferred),
        with_tags: with_tags.map(|c| ctx.shares(c)),
    })
}

struct Ctx<'a> {
    l: &'a Lifetimes,
    refs: &'a Categories,
    reference: Source,
    clock: Clock<'a>,
    live: &'a [LiveBlock],
}

impl Ctx<'_> {
    /// `cand` against the reference labels.
    fn shares(&self, cand: &Categories) -> Shares {
        let (l, refs) = (self.l, self.refs);
        let is_ref = |b: usize| refs.source[b] == Some(self.reference);
        // `unknown` from the profiler is the absence of a label (it could
        // not tie the memory to a tensor, e.g. library workspaces), not one
        // to agree with: those blocks are listed but left out of the shares.
        let mut cells: Vec<ConfusionCell> = Vec::new();
        let (mut agree_t, mut total_t) = (0f64, 0f64);
        for b in (0..l.len()).filter(|&b| is_ref(b)) {
            let w = l.size[b] as f64 * self.clock.lifetime(l.birth[b], l.death[b]);
            let k = cell(&mut cells, refs.category[b], cand.category[b]);
            cells[k].byte_time += w;
            if refs.category[b] == Category::Unknown {
                continue;
            }
            total_t += w;
            if refs.category[b] == cand.category[b] {
                agree_t += w;
            }
        }
        // At the peak: the liveness walk's live blocks, matched to their labels.
        let (mut agree_p, mut total_p, mut unlabelled) = (0u64, 0u64, 0u64);
        for lb in self.live {
            match refs.block_of(l, lb).filter(|&b| is_ref(b)) {
                Some(b) => {
                    let k = cell(&mut cells, refs.category[b], cand.category[b]);
                    cells[k].peak_bytes += lb.size;
                    if refs.category[b] == Category::Unknown {
                        unlabelled += lb.size;
                        continue;
                    }
                    total_p += lb.size;
                    if refs.category[b] == cand.category[b] {
                        agree_p += lb.size;
                    }
                }
                None => unlabelled += lb.size,
            }
        }
        cells.sort_by(|a, b| b.byte_time.total_cmp(&a.byte_time));
        let share = |a: f64, t: f64| if t > 0.0 { a / t } else { 1.0 };
        Shares {
            over_time: share(agree_t, total_t),
            at_peak: share(agree_p as f64, total_p as f64),
            unlabelled_peak_bytes: unlabelled,
            confusion: cells,
        }
    }
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
