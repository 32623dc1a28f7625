//! L-BFGS's history: the pairs of vectors `torch.optim.LBFGS` keeps.
//!
//! Each evaluation after the first makes `y = flat_grad.sub(prev_flat_grad)`
//! and `s = d.mul(t)`, two vectors the size of all parameters, and stores
//! them (`old_dirs`, `old_stps`) when their curvature is positive; once
//! `history_size` pairs are stored (100 by default), the oldest pair is
//! dropped as the next is stored (`torch/optim/lbfgs.py`, `step`). The
//! history therefore grows by one pair per evaluation for the first
//! `history_size` of them, across `step()` calls, and then stays: read as
//! iterations, it looks like a leak for as long as a short recording
//! lasts, and it is not one.
//!
//! The blocks are found by what made them and how long they lived: made
//! in `lbfgs.py`'s `step` at a line whose blocks are the size of the flat
//! parameters, more than three of them alive at once (the direction `d`,
//! kept in the state through the next step, and `prev_flat_grad` are
//! never more), each alive past the next two of its
//! line, or to the end, or freed with the optimizer after the last of its
//! line (a pair not stored, its curvature not positive, is freed as the
//! next evaluation makes its own, or when `step` returns).

use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::{Snapshot, StackId};

use crate::lifetimes::{Lifetimes, BEFORE_WINDOW, STILL_ALIVE};
use crate::sites::{frame_location, python_frames};

/// `torch.optim.LBFGS`'s `history_size` when the recording does not say.
pub const DEFAULT_HISTORY_SIZE: u64 = 100;

/// The history a recording's L-BFGS kept.
#[derive(Clone, Debug, PartialEq)]
pub struct LbfgsHistory {
    /// `history_size`: as the recorder read it, else PyTorch's default.
    pub history_size: u64,
    /// Whether `history_size` was read from the optimizer.
    pub recorded_size: bool,
    /// The blocks of each stored pair, in the order the pairs were stored.
    pub pairs: Vec<Vec<usize>>,
    /// Bytes of one pair (its blocks' sizes).
    pub pair_bytes: u64,
    /// The lines of `lbfgs.py` that made the stored vectors.
    pub lines: Vec<u32>,
    /// The 0-d tensors `step` made (512 bytes or less): one `ro` per
    /// stored pair and one `al` per pair in each evaluation, bounded by
    /// the history too, and the scalars of the line search.
    pub scalars: Vec<usize>,
}

/// The most a 0-d tensor takes (CUDA's smallest block).
const SCALAR_BYTES: u64 = 512;

/// The line of `lbfgs.py`'s `step` that made a block: its innermost
/// Python frame, or beneath only `torch/_tensor.py` (`1.0 / ys` goes
/// through `Tensor.__rtruediv__`). Not the closure `step` calls, whose
/// forward and backward allocate beneath it in the program's code.
fn step_line(snap: &Snapshot, l: &Lifetimes, b: usize) -> Option<u32> {
    let frames = python_frames(snap, snap.stacks.get(l.stack[b]));
    for &f in &frames {
        let (file, line, name) = frame_location(snap, snap.frames.get(f));
        let file = file.replace('\\', "/");
        if file.ends_with("torch/optim/lbfgs.py") {
            return (name == "step").then_some(line);
        }
        if !file.ends_with("torch/_tensor.py") {
            return None;
        }
    }
    None
}

impl LbfgsHistory {
    /// The history of the recording's L-BFGS; `None` where no L-BFGS
    /// stepped, the stacks do not show `lbfgs.py`, or fewer than four
    /// pairs were stored (then the history is not told from `d`).
    pub fn find(snap: &Snapshot, l: &Lifetimes) -> Option<LbfgsHistory> {
        let recorded = super::recorded(snap)
            .iter()
            .find(|o| o.type_name == "LBFGS");
        let annotated = super::annotated_classes(snap).iter().any(|c| c == "LBFGS");
        if recorded.is_none() && !annotated {
            return None;
        }
        let size = recorded
            .and_then(|o| o.setting("history_size"))
            .and_then(|v| v.parse::<u64>().ok());
        let history_size = size.unwrap_or(DEFAULT_HISTORY_SIZE).max(1);
        // By line and size: a line makes its vector and, on some
        // versions, a 0-d tensor beside it.
        let mut by_line: HashMap<(u32, u64), Vec<usize>> = HashMap::default();
        // Blocks share stacks: each stack read once.
        let mut line_of: HashMap<StackId, Option<u32>> = HashMap::default();
        for b in 0..l.len() {
            let line = *line_of
                .entry(l.stack[b])
                .or_insert_with(|| step_line(snap, l, b));
            if let Some(line) = line {
                by_line.entry((line, l.size[b])).or_default().push(b);
            }
        }
        let flat = by_line.values().flatten().map(|&b| l.size[b]).max()?;
        let mut scalars: Vec<usize> = by_line
            .values()
            .flatten()
            .copied()
            .filter(|&b| l.size[b] <= SCALAR_BYTES && l.size[b] < flat)
            .collect();
        scalars.sort_unstable();
        let mut lines: Vec<(u32, Vec<usize>)> = Vec::new();
        // Blocks made before the window that a recorder names by the
        // stack that freed them (vramscope's CPU recorders; PyTorch's
        // CUDA history keeps the allocation's): `old_dirs.pop(0)`,
        // `old_stps.pop(0)`. Dealt to the history's lines below.
        let mut popped: Vec<usize> = Vec::new();
        for ((line, size), mut blocks) in by_line {
            if size != flat {
                continue;
            }
            if blocks.iter().all(|&b| l.birth[b] == BEFORE_WINDOW) {
                if blocks.len() >= 4 {
                    popped.extend(blocks);
                }
                continue;
            }
            // Those made before the trace's window first, in the order
            // they are freed (the history drops its oldest first).
            blocks.sort_by_key(|&b| match l.birth[b] {
                BEFORE_WINDOW => (0, l.death[b]),
                t => (1, t),
            });
            let births: Vec<u32> = blocks.iter().map(|&b| born(l, b)).collect();
            // Stored: alive at the end, freed once `history_size` more of
            // the line were made (dropped from the front), or with the
            // optimizer, after the last of the line. One not stored is
            // freed as the next is made (the variable bound again), or
            // when `step` returns.
            let at_least = history_size.min(2);
            let stored: Vec<usize> = blocks
                .iter()
                .copied()
                .enumerate()
                .filter(|&(i, b)| {
                    let later = births
                        .partition_point(|&t| t < l.death[b])
                        .saturating_sub(i + 1);
                    let remaining = births.len() - (i + 1);
                    l.death[b] == STILL_ALIVE || later as u64 >= at_least || later == remaining
                })
                .map(|(_, b)| b)
                .collect();
            // The direction `d` is kept in the state through the next
            // step, beside the one being made and the one before it:
            // never more than three at once.
            if most_alive(l, &stored) >= 4 {
                lines.push((line, stored));
            }
        }
        if lines.is_empty() {
            return None;
        }
        lines.sort_by_key(|x| x.0);
        // In the order freed, one per line in turn: `step` drops the
        // oldest direction, then the oldest step, made in that order
        // (`y` at a line before `s`'s).
        popped.sort_by_key(|&b| (l.death[b], b));
        let k = lines.len();
        let skip = popped.len() % k;
        for (i, &b) in popped.iter().skip(skip).enumerate() {
            lines[i % k].1.insert(i / k, b);
        }
        let n = lines.iter().map(|x| x.1.len()).min()?;
        let pairs: Vec<Vec<usize>> = (0..n)
            .map(|j| lines.iter().map(|x| x.1[j]).collect())
            .collect();
        Some(LbfgsHistory {
            history_size,
            recorded_size: size.is_some(),
            pair_bytes: flat * lines.len() as u64,
            pairs,
            lines: lines.iter().map(|x| x.0).collect(),
            scalars,
        })
    }

    /// Every block of the history.
    pub fn blocks(&self) -> impl Iterator<Item = usize> + '_ {
        self.pairs.iter().flatten().copied()
    }

    /// Most pairs alive at once, as recorded.
    pub fn most_alive(&self, l: &Lifetimes) -> usize {
        let firsts: Vec<usize> = self
            .pairs
            .iter()
            .filter_map(|p| p.first().copied())
            .collect();
        most_alive(l, &firsts)
    }

    /// Bytes the history holds once full: `history_size` pairs.
    pub fn full_bytes(&self) -> u64 {
        self.history_size * self.pair_bytes
    }

    /// With `history_size` = `h`: each block of pair `j` freed right after
    /// pair `j + h` is made (its last block's birth), where it lived past
    /// that, as `(block, event)`. Empty where `h` pairs or fewer were
    /// stored.
    pub fn shortened(&self, l: &Lifetimes, h: usize) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for j in 0..self.pairs.len().saturating_sub(h) {
            let Some(at) = self.pairs[j + h].iter().map(|&b| born(l, b)).max() else {
                continue;
            };
            for &b in &self.pairs[j] {
                if l.death[b] > at {
                    out.push((b, at as usize));
                }
            }
        }
        out
    }
}

/// A block's birth event, 0 for one made before the trace's window.
fn born(l: &Lifetimes, b: usize) -> u32 {
    match l.birth[b] {
        BEFORE_WINDOW => 0,
        t => t,
    }
}

/// Most of `blocks` alive at once.
fn most_alive(l: &Lifetimes, blocks: &[usize]) -> usize {
    let mut ev: Vec<(u32, i32)> = Vec::new();
    for &b in blocks {
        // A death sorts before a birth at the same event.
        ev.push((born(l, b), 1));
        if l.death[b] != STILL_ALIVE {
            ev.push((l.death[b], -1));
        }
    }
    ev.sort_unstable();
    let mut alive = 0i32;
    let mut most = 0i32;
    for (_, d) in ev {
        alive += d;
        most = most.max(alive);
    }
    most.max(0) as usize
}
