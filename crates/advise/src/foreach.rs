//! `foreach=False`: what the optimizer step needs when it updates one
//! parameter at a time instead of all at once.
//!
//! A foreach step (PyTorch's default on CUDA, `foreach=True` elsewhere)
//! makes each temporary for every parameter at once: `_foreach_sqrt` of
//! all second moments, then divides them in place. The recorded step shows
//! those temporaries, but not what the one-at-a-time step would make; that
//! is a rule, read from `torch/optim/adam.py`'s `_single_tensor_adam`:
//!
//! ```text
//! denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
//! ```
//!
//! makes, for parameter i, the square root and the quotient (two tensors
//! its size) while `denom` still holds parameter i−1's: at most
//! `max_i (P[i−1] + 2·P[i])` at once, where P are the parameters' sizes in
//! the optimizer's order. That order and those sizes are read from the
//! recorded foreach step itself: its largest list of temporaries (one per
//! parameter, made in order at one line). The change is replayed with the
//! step's temporaries gone but one per step, which takes the rule's size.
//! Adam and AdamW only: the other optimizers' one-at-a-time steps are not
//! written down here, so they are not offered.

use std::collections::BTreeMap;

use vramscope_analysis::categories::{Labelled, Rule};
use vramscope_analysis::iterations::Iterations;
use vramscope_analysis::optimizers::alternatives::Stepped;
use vramscope_analysis::sites::frame_location;
use vramscope_simulate::edits::{for_blocks, ChangeKind};
use vramscope_snapshot::Snapshot;
use vramscope_text::units::bytes;

use super::{refuse, Candidate, ChangeClass, Method, NotOffered};
use vramscope_simulate::settings::Settings;

/// The one-at-a-time step's largest transient for parameters of sizes `p`
/// in order (Adam, AdamW).
pub fn single_tensor_adam_transient(p: &[u64]) -> u64 {
    (0..p.len())
        .map(|i| 2 * p[i] + if i > 0 { p[i - 1] } else { 0 })
        .max()
        .unwrap_or(0)
}

/// What the step's stacks say about how it ran.
#[derive(PartialEq)]
enum StepKind {
    Foreach,
    SingleTensor,
    Fused,
    Unknown,
}

fn step_kind(
    snap: &Snapshot,
    stacks: impl Iterator<Item = vramscope_snapshot::StackId>,
) -> StepKind {
    let mut kind = StepKind::Unknown;
    for s in stacks {
        for &f in snap.stacks.get(s) {
            let (_, _, name) = frame_location(snap, snap.frames.get(f));
            if name.starts_with("_multi_tensor_") {
                return StepKind::Foreach;
            }
            if name.starts_with("_single_tensor_") {
                kind = StepKind::SingleTensor;
            } else if name.starts_with("_fused_") && kind == StepKind::Unknown {
                kind = StepKind::Fused;
            }
        }
    }
    kind
}

/// `foreach=False`, where the recorded step is a foreach Adam or AdamW step.
pub(super) fn foreach_candidate(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    its: &Iterations,
    recorded: &Settings,
    not_offered: &mut Vec<NotOffered>,
) -> Option<Candidate> {
    let l = &labelled.lifetimes;
    let cats = &labelled.categories;
    let temps: Vec<usize> = (0..l.len())
        .filter(|&b| cats.rule.get(b) == Some(&Rule::OptimizerFreed))
        .collect();
    let mut refuse = |why: String| refuse(not_offered, "foreach=False in the optimizer", why);
    if temps.is_empty() {
        return refuse("no optimizer step in this trace allocates a temporary".into());
    }
    match step_kind(snap, temps.iter().map(|&b| l.stack[b])) {
        StepKind::Foreach => {}
        StepKind::SingleTensor => {
            return refuse(
                "the optimizer already updates one parameter at a time (foreach=False, PyTorch's default off CUDA)"
                    .into(),
            )
        }
        StepKind::Fused => return refuse("the optimizer step is fused (fused=True): it makes no per-parameter temporaries".into()),
        StepKind::Unknown => {
            return refuse(
                "the step's stacks show neither of torch.optim's implementations (no `_multi_tensor_` or \
                 `_single_tensor_` frame: no Python stacks, or an optimizer of its own)"
                    .into(),
            )
        }
    }
    let class = Stepped::of(snap).map(|s| s.class).unwrap_or_default();
    if class != "Adam" && class != "AdamW" {
        return refuse(format!(
            "what the one-at-a-time step of {} allocates is not written down here (Adam and AdamW are)",
            if class.is_empty() { "this optimizer" } else { &class }
        ));
    }
    // Each step's temporaries, by iteration; the largest list made at one
    // line gives the parameters' sizes in order.
    let mut by_step: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for &b in &temps {
        by_step
            .entry(its.of_event(l.birth[b] as usize))
            .or_default()
            .push(b);
    }
    let mut changes: Vec<(usize, ChangeKind)> = Vec::new();
    let mut transient = 0;
    let mut params = 0;
    for blocks in by_step.values() {
        let Some(&largest) = blocks
            .iter()
            .max_by_key(|&&b| (l.size[b], std::cmp::Reverse(b)))
        else {
            continue;
        };
        let mut list: Vec<usize> = blocks
            .iter()
            .copied()
            .filter(|&b| l.stack[b] == l.stack[largest])
            .collect();
        list.sort_by_key(|&b| l.birth[b]);
        let sizes: Vec<u64> = list.iter().map(|&b| l.size[b]).collect();
        let need = single_tensor_adam_transient(&sizes);
        transient = transient.max(need);
        params = params.max(sizes.len());
        for &b in blocks {
            if b == largest {
                let f = need as f64 / l.size[b].max(1) as f64;
                changes.push((b, ChangeKind::Scale(f)));
            } else {
                changes.push((b, ChangeKind::Drop));
            }
        }
    }
    let edits = for_blocks(snap, device, l, &changes, "optimizer step temporaries");
    Some(Candidate {
        class: ChangeClass::ForeachOff,
        change: "the optimizer without foreach (one parameter at a time)".into(),
        code: format!("optimizer = torch.optim.{class}(model.parameters(), lr=lr, foreach=False)"),
        settings: recorded.clone(),
        edits: Some(edits),
        method: Method::Rule,
        how: format!(
            "replayed with each foreach step's {} temporaries replaced by what {class}'s one-at-a-time step holds \
             at once, by the rule max(P[i-1] + 2 P[i]) over the {params} parameters' sizes in the order the step \
             made them ({}: the square root and quotient of one parameter while the previous one's denominator is \
             still bound); slower steps",
            temps.len(),
            bytes(transient)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::single_tensor_adam_transient;

    #[test]
    fn the_transient_is_the_worst_pair_of_neighbours() {
        // The MLP of the CPU check: 8 MiB, 8 KiB, 16 MiB, 8 KiB, 80 KiB, 40 B.
        let p = [8 << 20, 8 << 10, 16 << 20, 8 << 10, 80 << 10, 40];
        assert_eq!(single_tensor_adam_transient(&p), (8 << 10) + (32 << 20));
        assert_eq!(single_tensor_adam_transient(&[]), 0);
        assert_eq!(single_tensor_adam_transient(&[10, 3]), 20);
    }
}
