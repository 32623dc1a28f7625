//! Where FSDP2's units run: each pass's forward and backward, and where
//! backward reaches each unit, read from the repeated blocks' calls, from
//! checkpointed blocks' recomputations, or (the whole model one unit) from
//! the phases alone.

use vramscope_analysis::categories::{Phase, Phases};

use super::super::checkpoint::SavedCall;

/// One forward and backward pass.
pub(super) struct Pass {
    /// The entry after which the forward starts: the root is gathered.
    pub(super) start: usize,
    /// The forward's last event: the last flat buffer is freed after it.
    pub(super) fwd_end: usize,
    /// Backward's first and last events.
    pub(super) bwd_start: usize,
    pub(super) bwd_end: usize,
    /// Per unit, in forward order: its call's first and last events and
    /// the entry after which backward reaches it. Empty: the whole model
    /// is one unit, the root.
    pub(super) units: Vec<(usize, usize, usize)>,
}

/// The first and last events of the run of equal phases holding `i`.
fn run_bounds(phases: &Phases, i: usize) -> (usize, usize) {
    let r = phases.run.get(i).copied();
    let (mut a, mut z) = (i, i);
    while a > 0 && phases.run.get(a - 1).copied() == r {
        a -= 1;
    }
    while z + 1 < phases.run.len() && phases.run.get(z + 1).copied() == r {
        z += 1;
    }
    (a, z)
}

/// The passes of the repeated blocks: the calls of each name once, in
/// forward order, backward reaching them in the reverse order.
pub(super) fn block_passes(calls: &[SavedCall], names: &[String], phases: &Phases) -> Vec<Pass> {
    let k_units = names.len();
    let mut out = Vec::new();
    let mut k = 0;
    while k + k_units <= calls.len() {
        let group = &calls[k..k + k_units];
        if group.iter().zip(names).all(|(c, n)| c.name == *n)
            && group.windows(2).all(|w| w[0].again > w[1].again)
        {
            out.push(Pass {
                start: run_bounds(phases, group[0].first).0.saturating_sub(1),
                fwd_end: run_bounds(phases, group[k_units - 1].last).1,
                bwd_start: run_bounds(phases, group[k_units - 1].again).0,
                bwd_end: run_bounds(phases, group[0].again).1,
                units: group.iter().map(|c| (c.first, c.last, c.again)).collect(),
            });
            k += k_units;
        } else {
            k += 1;
        }
    }
    out
}

/// One backward, scanned from its first event `start`.
struct Backward {
    /// Its last event.
    end: usize,
    /// Where the scan stopped: the optimizer, zero_grad or a forward that
    /// is not a recomputation, which end it (or the end of the trace).
    stop: usize,
    /// The first event of each run of recomputation in it.
    recomputations: Vec<usize>,
}

fn backward_from(phases: &Phases, start: usize) -> Backward {
    let ph = &phases.phase;
    let mut b = Backward {
        end: start,
        stop: ph.len(),
        recomputations: Vec::new(),
    };
    for (i, &p) in ph.iter().enumerate().skip(start) {
        match p {
            Phase::Optimizer | Phase::ZeroGrad => {
                b.stop = i;
                break;
            }
            Phase::Forward if !phases.is_recomputation(i) => {
                b.stop = i;
                break;
            }
            Phase::Forward if i > 0 && ph[i - 1] != Phase::Forward => b.recomputations.push(i),
            Phase::Backward => b.end = i,
            _ => {}
        }
    }
    b
}

/// The passes of checkpointed blocks (`all`: every call found, in trace
/// order): each block called once in forward, keeping nothing, and reached
/// again in backward, the blocks in the reverse order there: by the span
/// the recorder marks around a block's backward, or by its recomputation
/// (a call read from the stacks). Backward reaches a block where that
/// starts: FSDP2's pre-backward hook, on the block's output, gathers its
/// parameters before autograd asks for what the block saved, which makes
/// the block run again (FSDP2 leaves them gathered through that forward:
/// it is in backward). No passes where the calls do not pair up so.
pub(super) fn recomputed_passes(
    all: &[(String, usize, usize)],
    phases: &Phases,
    makes_grads: &dyn Fn(usize, usize) -> bool,
) -> Checkpointed {
    let ph = &phases.phase;
    let in_backward = |i: usize| ph.get(i) == Some(&Phase::Backward) || phases.is_recomputation(i);
    let (mut names, mut out, mut recomputes) = (Vec::new(), Vec::new(), false);
    let mut k = 0;
    while k < all.len() {
        // A forward's calls, then backward reaching them.
        let mut fwd_n = 0;
        while k + fwd_n < all.len() && !in_backward(all[k + fwd_n].1) {
            // A backward between two calls ends the forward.
            let gap = fwd_n > 0
                && (all[k + fwd_n - 1].2..all[k + fwd_n].1).any(|i| ph[i] == Phase::Backward);
            if gap {
                break;
            }
            fwd_n += 1;
        }
        let bwd_n = all[k + fwd_n..]
            .iter()
            .take_while(|c| in_backward(c.1))
            .count();
        let (fwd, bwd) = (&all[k..k + fwd_n], &all[k + fwd_n..k + fwd_n + bwd_n]);
        k += (fwd_n + bwd_n).max(1);
        let distinct = fwd
            .iter()
            .enumerate()
            .all(|(i, c)| fwd[..i].iter().all(|d| d.0 != c.0));
        if fwd_n < 2
            || !distinct
            || (!names.is_empty() && fwd.iter().map(|c| &c.0).ne(names.iter()))
        {
            continue;
        }
        let fwd_end = run_bounds(phases, fwd[fwd_n - 1].2).1;
        let Some(bwd_start) = (fwd_end + 1..ph.len()).find(|&i| ph[i] == Phase::Backward) else {
            continue;
        };
        let b = backward_from(phases, bwd_start);
        let bwd_end = b.end;
        recomputes |= !b.recomputations.is_empty();
        // A block's recomputation, or more of it: an allocation in it can
        // carry only the backward call's frames (the CPU recorder's stack
        // of an op it did not see dispatched), which splits it. One block's
        // backward makes its gradients after its recomputation: none made
        // since the last one, it goes on.
        let mut reruns: Vec<usize> = Vec::new();
        for r in b.recomputations {
            if reruns.last().is_none_or(|&q| makes_grads(q, r)) {
                reruns.push(r);
            }
        }
        // Where backward reaches each block, from the last: the spans
        // marked around the blocks' backward (or their recomputations)
        // where they name the blocks in the reverse order, else the
        // recomputations themselves where there is one a block (the
        // recorder marks no span in them under Hugging Face's checkpointing).
        let reached: Vec<usize> =
            if bwd_n == fwd_n && fwd.iter().zip(bwd.iter().rev()).all(|(f, b)| f.0 == b.0) {
                bwd.iter().map(|b| b.1).collect()
            } else if bwd_n == 0 && reruns.len() == fwd_n {
                reruns
            } else {
                continue;
            };
        if names.is_empty() {
            names = fwd.iter().map(|c| c.0.clone()).collect();
        }
        out.push(Pass {
            start: run_bounds(phases, fwd[0].1).0.saturating_sub(1),
            fwd_end,
            bwd_start,
            bwd_end,
            units: fwd
                .iter()
                .zip(reached.iter().rev())
                .map(|(f, &r)| (f.1, f.2, r.saturating_sub(1)))
                .collect(),
        });
    }
    Checkpointed {
        names,
        passes: out,
        recomputes,
    }
}

/// What [`recomputed_passes`] read.
pub(super) struct Checkpointed {
    /// The blocks' names in forward order.
    pub(super) names: Vec<String>,
    pub(super) passes: Vec<Pass>,
    /// Whether backward recomputes the blocks (checkpointed), rather than
    /// only reaching them at the spans the recorder marks.
    pub(super) recomputes: bool,
}

/// The passes read from the phases alone, for the whole model as one
/// unit: from each forward's first event to the end of the backward after
/// it, where that backward makes gradients. A forward that backward runs
/// (a checkpointed block made again) is part of backward, not the next
/// pass's forward.
pub(super) fn phase_passes(
    phases: &Phases,
    makes_grads: &dyn Fn(usize, usize) -> bool,
) -> Vec<Pass> {
    let ph = &phases.phase;
    let mut out = Vec::new();
    let mut i = 0;
    while i < ph.len() {
        if ph[i] != Phase::Forward {
            i += 1;
            continue;
        }
        let (start, mut fwd_end) = (i, i);
        let mut k = i;
        while k < ph.len() && ph[k] != Phase::Backward {
            if ph[k] == Phase::Forward {
                fwd_end = k;
            }
            k += 1;
        }
        if k == ph.len() {
            break;
        }
        let bwd_start = k;
        let b = backward_from(phases, bwd_start);
        let bwd_end = b.end;
        k = b.stop;
        if makes_grads(bwd_start, bwd_end + 1) {
            out.push(Pass {
                start: start.saturating_sub(1),
                fwd_end,
                bwd_start,
                bwd_end,
                units: Vec::new(),
            });
        }
        i = k.max(i + 1);
    }
    out
}
