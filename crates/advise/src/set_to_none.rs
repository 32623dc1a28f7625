//! `optimizer.zero_grad(set_to_none=True)` for a program that keeps its
//! gradients from one step to the next (`set_to_none=False`, or no
//! `zero_grad`).
//!
//! A kept gradient is added to in place, with no event of its own, but the
//! trace still shows where the next one would be made: each backward makes
//! the new gradient of every parameter (the output of the parameter's
//! backward op, a block of the gradient's size), adds it to the kept one
//! and frees it. Set to None, that block *is* the gradient (autograd's
//! `AccumulateGrad` steals it) and lives until the next `zero_grad`. The
//! first backward of the recording made the kept gradients that way, so
//! the block of each later backward that plays the same part is found by
//! lining up that iteration's allocations of the gradients' sizes with the
//! first one's ([`align`]: the heaviest common subsequence of their sizes,
//! each kept gradient weighing more than all the rest), so that an
//! activation that has a weight's size in some steps only (sequence lengths
//! that vary) or the optimizer state made once is passed over, not a shift.
//!
//! The replay frees each kept gradient at the first `zero_grad` after it
//! was made, and keeps each later backward's matching block until the
//! `zero_grad` after it. Checked on the CPU (`advise_runs.py` variant
//! `keep_grads` against `baseline`, and `keep_grads_varlen` against
//! `varlen`): the CNN, the Transformer and the MLP predicted to the byte,
//! the Transformer with varying lengths too.

use std::collections::{HashMap, HashSet};

use vramscope_analysis::categories::{Category, Labelled, Phase};
use vramscope_analysis::iterations::Iterations;
use vramscope_analysis::lifetimes::{Lifetimes, BEFORE_WINDOW, STILL_ALIVE};
use vramscope_simulate::edits::{for_blocks, ChangeKind, Edits};
use vramscope_snapshot::{Action, AnnotationStage, DeviceTrace, Snapshot};
use vramscope_text::units::bytes;

use super::{refuse, Candidate, ChangeClass, Method, NotOffered};
use vramscope_simulate::settings::Settings;

const CHANGE: &str = "optimizer.zero_grad(set_to_none=True), PyTorch's default since 2.0";

/// The gradients kept from one step to the next, and their replay with
/// `set_to_none=True` or why it cannot be made.
pub(super) struct KeptGradients {
    /// Their blocks.
    pub(super) blocks: HashSet<usize>,
    /// What they are, for the note where the change is not predicted.
    what: String,
    pub(super) replay: Result<Replayed, String>,
}

/// The edits that set the gradients to None, and how they were made.
pub(super) struct Replayed {
    pub(super) edits: Edits,
    pub(super) how: String,
}

/// The gradients of `device`'s trace alive across two iteration ends,
/// with their replay; `None` where no gradient is kept.
pub(super) fn kept_gradients(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    its: &Iterations,
) -> Option<KeptGradients> {
    let l = &labelled.lifetimes;
    let t = snap.trace(device)?;
    // The ends of training steps: an evaluation loop's iterations (a
    // program with no optimizer counts its module calls) run with the last
    // step's gradients alive, which zero_grad at the next step's top frees
    // whatever set_to_none says.
    let phase = &labelled.categories.phases.phase;
    let ends: Vec<usize> = its
        .list
        .iter()
        .filter(|it| it.complete)
        .filter(|it| {
            phase
                .get(it.start..it.end)
                .is_some_and(|p| p.contains(&Phase::Backward))
        })
        .map(|it| it.end)
        .collect();
    if ends.len() < 2 {
        return None;
    }
    // Alive across two iteration ends: kept through a whole step. Where the
    // recorder named the optimizers' gradients, only those (an input's
    // gradient kept by a leak is the leak's, freed with it).
    let named = labelled.categories.named_gradients();
    let kept: Vec<usize> = (0..l.len())
        .filter(|&b| {
            let (birth, death) = l.span(b);
            labelled.categories.category.get(b) == Some(&Category::Gradient)
                && named.as_ref().is_none_or(|n| n[b])
                && ends.iter().filter(|&&e| birth < e && e < death).count() >= 2
        })
        .collect();
    if kept.is_empty() {
        return None;
    }
    let what = format!(
        "the gradients ({}, {} blocks) stay allocated from one step to the next here; set to None they are freed \
         at each zero_grad and made again as the next backward reaches each parameter, so any peak before the \
         backward ends is lower by up to that much",
        bytes(kept.iter().map(|&b| l.size[b]).sum()),
        kept.len()
    );
    let replay = replay(snap, device, t, l, its, &kept);
    Some(KeptGradients {
        blocks: kept.into_iter().collect(),
        what,
        replay,
    })
}

/// The change on its own row, where no leak finding's fix carries it
/// (`covered`: a finding of these gradients is replayed with it); the
/// reason it is not predicted otherwise.
pub(super) fn set_to_none_candidate(
    kept: &KeptGradients,
    covered: bool,
    recorded: &Settings,
    not_offered: &mut Vec<NotOffered>,
) -> Option<Candidate> {
    let r = match &kept.replay {
        Ok(r) => r,
        Err(why) => {
            return refuse(
                not_offered,
                CHANGE,
                format!("{}. Not predicted: {why}", kept.what),
            )
        }
    };
    if covered {
        return None;
    }
    Some(Candidate {
        class: ChangeClass::SetToNone,
        change: "set the gradients to None at each zero_grad instead of zeroing them in place"
            .into(),
        code: CODE.into(),
        settings: recorded.clone(),
        method: Method::Replayed,
        edits: Some(r.edits.clone()),
        how: format!("replayed with {}", r.how),
    })
}

/// The code of the change.
pub(super) const CODE: &str =
    "optimizer.step()\noptimizer.zero_grad(set_to_none=True)  # frees the gradients; the next backward makes them again";

fn replay(
    snap: &Snapshot,
    device: u32,
    t: &DeviceTrace,
    l: &Lifetimes,
    its: &Iterations,
    kept: &[usize],
) -> Result<Replayed, String> {
    if kept.iter().any(|&b| l.birth[b] == BEFORE_WINDOW) {
        return Err("the recording starts after they were made, so it does not show which block of each backward \
                    becomes the gradient; record from the first step"
            .into());
    }
    let zero_grads = zero_grad_points(snap, t, device);
    // Where a gradient made at entry `i` is freed: after the entry before
    // the next zero_grad, else at the end of its iteration.
    let freed_at = |i: usize| -> Option<usize> {
        match zero_grads.iter().find(|&&z| z > i) {
            Some(&z) => Some(z - 1),
            None if zero_grads.is_empty() => {
                let k = its.of_event(i) as usize;
                its.list
                    .get(k.checked_sub(1)?)
                    .filter(|it| it.complete)
                    .map(|it| it.end - 1)
            }
            None => None,
        }
    };
    // Per iteration: its allocations of the kept gradients' sizes, in order.
    let sizes: HashSet<u64> = kept.iter().map(|&b| l.size[b]).collect();
    let seq: Vec<Vec<usize>> = its
        .list
        .iter()
        .map(|it| {
            (it.start..it.end.min(t.len()))
                .filter(|&i| t.action[i] == Action::Alloc && sizes.contains(&t.size[i]))
                .collect()
        })
        .collect();
    let block_of: HashMap<usize, usize> = (0..l.len())
        .filter(|&b| l.birth[b] != BEFORE_WINDOW)
        .map(|b| (l.birth[b] as usize, b))
        .collect();
    let mismatch = |iteration: u32| {
        format!(
            "iteration {iteration}'s allocations do not line up with the first backward's (no block of a \
             gradient's size, in its place, that is freed before the next zero_grad)"
        )
    };
    let kept_births: HashSet<usize> = kept.iter().map(|&b| l.birth[b] as usize).collect();
    // Each later iteration lined up with the one that made the gradients,
    // once per pair.
    let mut aligned: HashMap<(usize, usize), Vec<Option<u32>>> = HashMap::new();
    let mut frees: Vec<(usize, ChangeKind)> = Vec::new();
    let mut late: Vec<(usize, usize)> = Vec::new();
    let mut remade_bytes = 0u64;
    for &g in kept {
        let birth = l.birth[g] as usize;
        let Some(k0) = (its.of_event(birth) as usize).checked_sub(1) else {
            return Err("they were made before the first iteration, not by a backward".into());
        };
        let size = l.size[g];
        let Some(at_ref) = seq.get(k0).and_then(|v| v.iter().position(|&i| i == birth)) else {
            continue;
        };
        if let Some(at) = freed_at(birth) {
            frees.push((g, ChangeKind::FreeAfter(at)));
        }
        for (k, it) in its.list.iter().enumerate().skip(k0 + 1) {
            if let std::collections::hash_map::Entry::Vacant(e) = aligned.entry((k0, k)) {
                let of = |v: &[usize]| v.iter().map(|&i| t.size[i]).collect::<Vec<u64>>();
                let weight: Vec<u32> = seq[k0]
                    .iter()
                    .map(|i| {
                        if kept_births.contains(i) {
                            GRADIENT_WEIGHT
                        } else {
                            1
                        }
                    })
                    .collect();
                let pairs = align(&of(&seq[k0]), &of(&seq[k]), &weight).ok_or_else(|| {
                    format!(
                        "iterations {} and {} are too long to line up ({} and {} allocations of the gradients' \
                         sizes)",
                        its.list[k0].number,
                        it.number,
                        seq[k0].len(),
                        seq[k].len()
                    )
                })?;
                e.insert(pairs);
            }
            let found = aligned[&(k0, k)][at_ref].map(|q| seq[k][q as usize]);
            let Some(b) = found.and_then(|entry| block_of.get(&entry).copied()) else {
                if it.complete {
                    return Err(mismatch(it.number));
                }
                continue;
            };
            let (entry, death) = (l.birth[b] as usize, l.death[b]);
            match freed_at(entry) {
                // A block added in place and freed before the zero_grad:
                // kept as the gradient until then.
                Some(at) if death != STILL_ALIVE && (death as usize) < at => {
                    late.push((entry, at));
                    remade_bytes += size;
                }
                // The last iteration's, with no zero_grad after it: alive to the end.
                None if death != STILL_ALIVE => late.push((entry, t.len().saturating_sub(1))),
                _ if it.complete => return Err(mismatch(it.number)),
                _ => {}
            }
        }
    }
    if frees.is_empty() {
        return Err("no zero_grad or iteration end follows them".into());
    }
    let mut edits = for_blocks(snap, device, l, &frees, "gradients kept between steps");
    for (entry, at) in late {
        edits.free_late.entry(at).or_default().push(entry);
    }
    let from = if zero_grads.is_empty() {
        "at the end of each iteration (the file has no Optimizer.zero_grad annotations)"
    } else {
        "at each zero_grad (the file's Optimizer.zero_grad annotations)"
    };
    let kept_bytes: u64 = kept.iter().map(|&b| l.size[b]).sum();
    Ok(Replayed {
        edits,
        how: format!(
            "the {} kept gradient blocks ({}) freed {from}, and each later backward's new gradients ({}; the \
             blocks in the places the first backward made the kept ones, its allocations lined up with each \
             later iteration's by size, added in place and freed as recorded) kept as the gradients until the \
             next zero_grad",
            kept.len(),
            bytes(kept_bytes),
            bytes(remade_bytes),
        ),
    })
}

/// The entries before which `zero_grad` ran (`Optimizer.zero_grad#…`
/// annotations of `device`): the first entry at or after each start.
fn zero_grad_points(snap: &Snapshot, t: &DeviceTrace, device: u32) -> Vec<usize> {
    if !t.has_time() {
        return Vec::new();
    }
    let mut out: Vec<usize> = snap
        .annotations
        .iter()
        .filter(|a| {
            a.stage == AnnotationStage::Start
                && (a.device < 0 || a.device == i64::from(device))
                && snap.str(a.name).starts_with("Optimizer.zero_grad#")
        })
        .map(|a| t.time_us.partition_point(|&x| x < a.time_us))
        .filter(|&i| i > 0 && i < t.len())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Most cells of the table that lines up two iterations (32 MiB of u64).
const ALIGN_CELLS: usize = 1 << 22;

/// What lining up a kept gradient's allocation is worth against any other:
/// more than all the others of an iteration together, so that no number
/// of other allocations lined up is taken over a gradient.
const GRADIENT_WEIGHT: u32 = 1 << 22;

/// Line up two iterations' allocation sizes: for each of `a`'s, the place
/// in `b` of the same allocation, by the heaviest common subsequence
/// (`weight`: what lining up each of `a`'s is worth). The gradients' sizes
/// are the same every iteration; an activation of one of those sizes (a
/// 16 × 32 × 128 fp32 activation is a 128 × 512 weight's size) comes and
/// goes with the sequence length, and is an insertion here rather than a
/// shift of every later one; the first iteration's optimizer state, made
/// once, is a deletion. `None`: too long to line up.
fn align(a: &[u64], b: &[u64], weight: &[u32]) -> Option<Vec<Option<u32>>> {
    let (n, m) = (a.len(), b.len());
    if (n + 1).checked_mul(m + 1)? > ALIGN_CELLS {
        return None;
    }
    let wt = |i: usize| u64::from(weight.get(i).copied().unwrap_or(1));
    // best[i * (m + 1) + j]: the heaviest common subsequence of a[i..] and b[j..].
    let w = m + 1;
    let mut best = vec![0u64; (n + 1) * w];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            let skip = best[(i + 1) * w + j].max(best[i * w + j + 1]);
            best[i * w + j] = if a[i] == b[j] {
                skip.max(best[(i + 1) * w + j + 1] + wt(i))
            } else {
                skip
            };
        }
    }
    let mut out = vec![None; n];
    let (mut i, mut j) = (0, 0);
    while i < n && j < m {
        if a[i] == b[j] && best[i * w + j] == best[(i + 1) * w + j + 1] + wt(i) {
            out[i] = Some(j as u32);
            i += 1;
            j += 1;
        } else if best[(i + 1) * w + j] >= best[i * w + j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::align;

    #[test]
    fn an_allocation_that_comes_and_goes_is_an_insertion() {
        // Gradients of sizes 7 and 9; an activation of size 9 appears in
        // the second iteration only, before them.
        let first = [5, 7, 3, 9];
        let later = [5, 9, 7, 3, 9];
        assert_eq!(
            align(&first, &later, &[]),
            Some(vec![Some(0), Some(2), Some(3), Some(4)])
        );
        // Nothing in common: nothing lined up.
        assert_eq!(align(&[1, 2], &[3], &[]), Some(vec![None, None]));
    }

    #[test]
    fn a_gradient_is_lined_up_before_any_number_of_others() {
        // The gradient (size 7, weight heavy) comes first in `a`; two 3s
        // after it could line up only by leaving it out.
        let a = [7, 3, 3];
        let b = [3, 3, 7];
        assert_eq!(
            align(&a, &b, &[1, 1, 1]),
            Some(vec![None, Some(0), Some(1)])
        );
        assert_eq!(
            align(&a, &b, &[super::GRADIENT_WEIGHT, 1, 1]),
            Some(vec![Some(2), None, None])
        );
    }
}
