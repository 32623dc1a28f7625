//! Parameters, gradients and optimizer state sharded over ranks (FSDP2's
//! `fully_shard`, ZeRO-3), each repeated block a unit and the root the
//! rest, replayed with what FSDP2 allocates beside the program's own
//! memory.
//!
//! Each rank keeps 1/N of every parameter, gradient and optimizer state,
//! and runs the optimizer step on its shard (its temporaries at 1/N too).
//! What FSDP adds is what it gathers: a unit's parameters are all-gathered
//! into one flat buffer and copied out whole just before the unit runs,
//! forward and backward, and its gradients are made whole by autograd and
//! copied into a flat buffer for the reduce-scatter, which leaves each
//! rank its 1/N. FSDP2's order (`torch/distributed/fsdp/_fully_shard`),
//! which the replay follows:
//!
//! * forward, each unit: its flat buffer made, the previous unit's freed
//!   (kept until then: the next copy-in must not overwrite it), its
//!   parameters copied out whole; freed when its forward ends; the last
//!   flat buffer freed when the forward ends;
//! * the root (the parameters outside the units, e.g. embeddings and the
//!   output layer) gathered when the forward starts and kept whole until
//!   the end of backward: FSDP2 does not free the root's after forward;
//! * backward, each unit from the last: its parameters whole (gathered by
//!   the previous unit's prefetch), the next unit's flat buffer prefetched;
//!   when the next unit's backward starts, its parameters freed and its
//!   whole gradients copied into a reduce-scatter buffer (freed at the next
//!   reduce-scatter), the gradients themselves then 1/N.
//!
//! Which allocations are a unit's: the repeated blocks' calls
//! ([`super::checkpoint`]'s, marked by the recorder or read from the
//! stacks) give each unit's forward and where backward reaches it. A
//! unit's parameter bytes are the gradients born while backward runs
//! through one block (the same for each copy of a repeated block); the
//! root's are the rest of the iteration's gradients. No communication
//! library's own buffers are replayed (gloo's copies on the CPU, NCCL's on
//! CUDA), nor the all-gathers' and reduce-scatters' streams on CUDA, whose
//! blocks the caching allocator keeps apart.

use vramscope_analysis::categories::{Category, Labelled, Rule};
use vramscope_analysis::edits::{for_blocks, ChangeKind, Extra};
use vramscope_analysis::lifetimes::BEFORE_WINDOW;
use vramscope_analysis::units::bytes;
use vramscope_snapshot::Snapshot;

use super::checkpoint::{block_calls, container, forward_order, is_site, saved_calls, shown};
use super::{refuse, Candidate, ChangeClass, Method, NotOffered};
use crate::settings::Settings;

/// One forward and backward of the units: per unit (forward order) its
/// call's first and last events and the entry after which backward
/// reaches it.
struct Pass {
    first: Vec<usize>,
    last: Vec<usize>,
    again: Vec<usize>,
}

/// Sharding the parameters, gradients and optimizer state with FSDP2.
pub(super) fn fsdp_candidate(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    recorded: &Settings,
    ranks: u32,
    not_offered: &mut Vec<NotOffered>,
) -> Option<Candidate> {
    const CHANGE: &str = "parameters, gradients and optimizer state sharded (FSDP, ZeRO-3)";
    let l = &labelled.lifetimes;
    let cats = &labelled.categories;
    let phases = &cats.phases;
    let calls = saved_calls(snap, device, labelled, block_calls(snap, device));
    let names: Vec<String> = forward_order(&calls)
        .iter()
        .map(|s| s.to_string())
        .collect();
    if names.len() < 2 {
        return refuse(
            not_offered,
            CHANGE,
            "no repeated blocks with saved activations found (the units FSDP wraps): each unit's parameters \
             are gathered whole while it runs, so what sharding saves depends on the units, which this trace \
             does not show; the optimizer state's share is the ZeRO-1 row",
        );
    }
    // The passes: the calls of each name once, in forward order.
    let mut passes: Vec<Pass> = Vec::new();
    let mut k = 0;
    while k + names.len() <= calls.len() {
        let group = &calls[k..k + names.len()];
        if group.iter().zip(&names).all(|(c, n)| c.name == *n)
            && group.windows(2).all(|w| w[0].again > w[1].again)
        {
            passes.push(Pass {
                first: group.iter().map(|c| c.first).collect(),
                last: group.iter().map(|c| c.last).collect(),
                again: group.iter().map(|c| c.again).collect(),
            });
            k += names.len();
        } else {
            k += 1;
        }
    }
    if passes.is_empty() {
        return refuse(
            not_offered,
            CHANGE,
            "the repeated blocks' calls do not form whole forward and backward passes",
        );
    }
    let units = names.len();
    let is_grad =
        |b: usize| cats.category.get(b) == Some(&Category::Gradient) && l.birth[b] != BEFORE_WINDOW;
    // The gradient blocks by birth, and those born in [from, to).
    let mut grads: Vec<(usize, usize)> = (0..l.len())
        .filter(|&b| is_grad(b))
        .map(|b| (l.birth[b] as usize, b))
        .collect();
    grads.sort_unstable();
    let grads_between = |from: usize, to: usize| -> Vec<usize> {
        let a = grads.partition_point(|g| g.0 < from);
        let z = grads.partition_point(|g| g.0 < to);
        grads[a..z.max(a)].iter().map(|g| g.1).collect()
    };
    let run_end = |i: usize| -> usize {
        let r = phases.run.get(i).copied();
        let mut j = i;
        while j + 1 < phases.run.len() && phases.run.get(j + 1).copied() == r {
            j += 1;
        }
        j
    };
    let run_start = |i: usize| -> usize {
        let r = phases.run.get(i).copied();
        let mut j = i;
        while j > 0 && phases.run.get(j - 1).copied() == r {
            j -= 1;
        }
        j
    };
    // A unit's parameter bytes: the gradients born while backward runs
    // through one block (units 1.. of the first pass; unit 0's window runs
    // into the root's).
    let p = &passes[0];
    let unit_bytes: u64 = (1..units)
        .map(|u| {
            grads_between(p.again[u], p.again[u - 1])
                .iter()
                .map(|&b| l.size[b])
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0);
    let backward_end = run_end(p.again[0]);
    let backward_start = run_start(p.again[units - 1]);
    let total: u64 = grads_between(backward_start, backward_end + 1)
        .iter()
        .map(|&b| l.size[b])
        .sum();
    if unit_bytes == 0 || unit_bytes * units as u64 > total {
        return refuse(
            not_offered,
            CHANGE,
            "the gradients born in backward do not show each block's parameters (a block without gradients, or \
             gradients made outside backward)",
        );
    }
    let root_bytes = total - unit_bytes * units as u64;
    let n = ranks as f64;

    // The memory kept 1/N: parameters, optimizer state, the step's
    // temporaries, gradients.
    let sharded: Vec<(usize, ChangeKind)> = (0..l.len())
        .filter(|&b| {
            matches!(
                cats.category.get(b),
                Some(Category::Parameter | Category::OptimizerState | Category::Gradient)
            ) || (cats.category.get(b) == Some(&Category::Temporary)
                && cats.rule.get(b) == Some(&Rule::OptimizerFreed))
        })
        .map(|b| (b, ChangeKind::Scale(1.0 / n)))
        .collect();
    let sharded_bytes: u64 = sharded.iter().map(|&(b, _)| l.size[b]).sum();
    let mut edits = for_blocks(
        snap,
        device,
        l,
        &sharded,
        "parameters, gradients, optimizer state",
    );
    let mut id = 0u32;
    let mut next = || {
        id += 1;
        id
    };
    let mut at = |i: usize, x: Extra| edits.extra_after.entry(i).or_default().push(x);
    let whole = |size: u64| size - (size as f64 / n) as u64;
    for p in &passes {
        let fwd_start = run_start(p.first[0]).saturating_sub(1);
        let fwd_end = run_end(p.last[units - 1]);
        let bwd_end = run_end(p.again[0]);
        // The root, gathered whole until its gradients are reduced.
        let (root, root_flat) = (next(), next());
        at(
            fwd_start,
            Extra::Make {
                id: root_flat,
                size: root_bytes,
            },
        );
        at(
            fwd_start,
            Extra::Make {
                id: root,
                size: root_bytes,
            },
        );
        let mut flat_prev = root_flat;
        for u in 0..units {
            let (flat, params) = (next(), next());
            at(
                p.first[u].saturating_sub(1),
                Extra::Make {
                    id: flat,
                    size: unit_bytes,
                },
            );
            at(p.first[u].saturating_sub(1), Extra::Free(flat_prev));
            at(
                p.first[u].saturating_sub(1),
                Extra::Make {
                    id: params,
                    size: unit_bytes,
                },
            );
            at(p.last[u], Extra::Free(params));
            flat_prev = flat;
        }
        at(fwd_end, Extra::Free(flat_prev));
        // Backward, from the last unit: its parameters whole (the last
        // unit's gathered here, the others prefetched), the next unit's
        // flat buffer prefetched; at the next unit's start, the unit's
        // reduce-scatter.
        let mut prefetched = None;
        let mut rs_prev = None;
        for u in (0..units).rev() {
            let params = next();
            let reach = p.again[u];
            let flat = prefetched.take().unwrap_or_else(|| {
                let f = next();
                at(
                    reach,
                    Extra::Make {
                        id: f,
                        size: unit_bytes,
                    },
                );
                f
            });
            at(
                reach,
                Extra::Make {
                    id: params,
                    size: unit_bytes,
                },
            );
            at(reach, Extra::Free(flat));
            if u > 0 {
                let f = next();
                at(
                    reach,
                    Extra::Make {
                        id: f,
                        size: unit_bytes,
                    },
                );
                prefetched = Some(f);
            }
            let done = if u > 0 { p.again[u - 1] } else { bwd_end };
            at(done, Extra::Free(params));
            if let Some(r) = rs_prev.take() {
                at(done, Extra::Free(r));
            }
            let rs = next();
            at(
                done,
                Extra::Make {
                    id: rs,
                    size: unit_bytes,
                },
            );
            rs_prev = Some(rs);
        }
        // The root's reduce-scatter, at the end of backward.
        at(bwd_end, Extra::Free(root));
        if let Some(r) = rs_prev {
            at(bwd_end, Extra::Free(r));
        }
        let rs = next();
        at(
            bwd_end,
            Extra::Make {
                id: rs,
                size: root_bytes,
            },
        );
        at(bwd_end, Extra::Free(rs));
        // Each gradient whole from its birth to its unit's reduce-scatter
        // (the block itself is kept at 1/N; the rest is made beside it).
        let bwd_start = run_start(p.again[units - 1]);
        for b in grads_between(bwd_start, bwd_end + 1) {
            let birth = l.birth[b] as usize;
            let u = (0..units).find(|&u| birth >= p.again[u] && (u == 0 || birth < p.again[u - 1]));
            let done = match u {
                Some(u) if u > 0 => p.again[u - 1],
                _ => bwd_end,
            };
            let g = next();
            at(
                birth,
                Extra::Make {
                    id: g,
                    size: whole(l.size[b]),
                },
            );
            at(done, Extra::Free(g));
        }
    }
    Some(Candidate {
        class: ChangeClass::Fsdp,
        change: format!(
            "parameters, gradients and optimizer state sharded over {ranks} ranks (FSDP2: each of the {units} \
             blocks a unit, the root the rest)"
        ),
        code: code(&names[0]),
        settings: recorded.clone(),
        edits: Some(edits),
        method: Method::Rule,
        how: format!(
            "replayed with the parameters, gradients, optimizer state and the step's temporaries ({} over the trace) at \
             1/{ranks}, \
             and what FSDP2 gathers made beside them, in its order: each block's parameters ({} a block, read \
             from the gradients born in one block's backward) whole while it runs forward and backward, with \
             their flat all-gather buffer and the next block's prefetched; the root's ({}) whole from the start \
             of forward to the end of backward; each block's gradients whole until its reduce-scatter; \
             communication libraries' own buffers and CUDA's separate collective streams not replayed",
            bytes(sharded_bytes),
            bytes(unit_bytes),
            bytes(root_bytes)
        ),
    })
}

/// The code: each block wrapped, then the root, before the optimizer is
/// made (it must see the sharded parameters).
fn code(first_unit: &str) -> String {
    let c = shown(container(first_unit));
    let head = "from torch.distributed.fsdp import fully_shard\n";
    let tail = "fully_shard(model)\noptimizer = torch.optim.AdamW(model.parameters(), lr=lr)  # after fully_shard";
    if is_site(&c) {
        format!(
            "{head}# each block the forward calls at {c}, once the model is built:\nfor block in blocks:\n    \
             fully_shard(block)\n{tail}"
        )
    } else {
        format!("{head}for block in {c}:\n    fully_shard(block)\n{tail}")
    }
}
