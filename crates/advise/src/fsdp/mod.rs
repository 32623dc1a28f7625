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
//! stacks) give each unit's forward and where backward reaches it (for a
//! checkpointed block, which keeps nothing in forward: where its backward
//! span or its recomputation starts, [`recomputed_passes`]). A
//! unit's parameter bytes are the gradients born while backward runs
//! through one block (the same for each copy of a repeated block); the
//! root's are the rest of the iteration's gradients. Without repeated
//! blocks, or where their gradients show no one size for all (a ResNet's
//! stages), the whole model is one unit, the root, gathered from each
//! forward's start to the end of the backward after it (the phases tell
//! where they are).
//!
//! A recording without a GPU is of a job that shards over gloo, which
//! copies each buffer it all-gathers or reduce-scatters: those copies are
//! replayed too (on the CPU, over two and four gloo ranks, the six runs
//! of `advise_check.py`, torchvision's ResNet-18 among them, peak where the
//! replay says within 0.02 MiB; gloo's worker thread frees its copy of a
//! reduce-scatter's input when it is next scheduled, so on a loaded
//! machine a rank can peak one unit's copy higher than replayed). NCCL's
//! own buffers are not, nor the separate streams FSDP2 runs its
//! collectives on under CUDA, whose blocks the caching allocator keeps
//! apart.

mod gathers;
mod passes;

use vramscope_analysis::categories::{Category, Labelled, Phase, Rule};
use vramscope_analysis::lifetimes::BEFORE_WINDOW;
use vramscope_analysis::optimizers::alternatives::{sharded_parameters, Stepped};
use vramscope_simulate::edits::{for_blocks, ChangeKind};
use vramscope_simulate::settings::Settings;
use vramscope_snapshot::Snapshot;
use vramscope_text::units::bytes;

use super::checkpoint::{container, forward_order, is_site, shown, Blocks};
use super::{refuse, Candidate, ChangeClass, Method, NotOffered};
use gathers::{gathered_sizes, Gathered, Gathers};
use passes::{block_passes, phase_passes, recomputed_passes, Pass};

/// Sharding the parameters, gradients and optimizer state with FSDP2.
pub(super) fn fsdp_candidate(
    snap: &Snapshot,
    device: u32,
    found: &Blocks,
    labelled: &Labelled,
    recorded: &Settings,
    ranks: u32,
    not_offered: &mut Vec<NotOffered>,
) -> Option<Candidate> {
    const CHANGE: &str = "parameters, gradients and optimizer state sharded (FSDP, ZeRO-3)";
    if let Some(Err(why)) = Stepped::of(snap).map(|s| sharded_parameters(&s)) {
        return refuse(not_offered, CHANGE, why);
    }
    if let Some(s) = vramscope_analysis::sharded::already_sharded(snap).filter(|s| s.parameters) {
        return refuse(
            not_offered,
            CHANGE,
            format!(
                "the program shards its parameters already ({}): more ranks shard them further, and smaller units \
                 (fully_shard on each block) gather less at once",
                s.by
            ),
        );
    }
    let l = &labelled.lifetimes;
    let cats = &labelled.categories;
    let phases = &cats.phases;
    let is_grad =
        |b: usize| cats.category.get(b) == Some(&Category::Gradient) && l.birth[b] != BEFORE_WINDOW;
    // The gradient blocks by birth, and those born in [from, to).
    let mut grads: Vec<(usize, usize)> = (0..l.len())
        .filter(|&b| is_grad(b))
        .map(|b| (l.birth[b] as usize, b))
        .collect();
    grads.sort_unstable();
    let grads_between = |from: usize, to: usize| -> &[(usize, usize)] {
        let a = grads.partition_point(|g| g.0 < from);
        let z = grads.partition_point(|g| g.0 < to);
        &grads[a..z.max(a)]
    };
    let bytes_between = |from: usize, to: usize| -> u64 {
        grads_between(from, to).iter().map(|g| l.size[g.1]).sum()
    };
    let calls = &found.calls;
    let mut names: Vec<String> = forward_order(calls).iter().map(|s| s.to_string()).collect();
    // A unit's parameter bytes: the gradients born while backward runs
    // through one block (units 1.. of the first pass; unit 0's window runs
    // into the root's); and the whole model's, the gradients of one backward.
    let unit_sizes = |passes: &[Pass]| -> Option<(u64, u64)> {
        let p = passes.first()?;
        let units = p.units.len() as u64;
        let unit = (1..p.units.len())
            .map(|u| bytes_between(p.units[u].2, p.units[u - 1].2))
            .max()?;
        let total = bytes_between(p.bwd_start, p.bwd_end + 1);
        (unit > 0 && unit * units <= total).then_some((unit, total))
    };
    let mut passes = if names.len() >= 2 {
        block_passes(calls, &names, phases)
    } else {
        Vec::new()
    };
    let mut sizes = unit_sizes(&passes);
    // Checkpointed blocks keep nothing in forward: their units are read
    // from each block's call and where backward reaches it.
    let mut recomputed = false;
    if sizes.is_none() {
        let c = recomputed_passes(&found.all, phases, &|a, z| !grads_between(a, z).is_empty());
        if let Some(s) = unit_sizes(&c.passes) {
            (names, passes, sizes, recomputed) = (c.names, c.passes, Some(s), c.recomputes);
        }
    }
    if sizes.is_none() {
        // No repeated blocks to make units of, or blocks whose gradients
        // do not show one size for all (a ResNet's stages): the whole model
        // is one unit.
        passes = phase_passes(phases, &|a, z| !grads_between(a, z).is_empty());
        sizes = passes
            .first()
            .map(|p| (0, bytes_between(p.bwd_start, p.bwd_end + 1)));
    }
    let Some((unit_bytes, total)) = sizes else {
        return refuse(
            not_offered,
            CHANGE,
            "no backward that makes gradients recorded after a forward (an inference run, or a recording that \
             ends before the first backward): no gradients to shard, nor parameters whose bytes they would give",
        );
    };
    let units = passes.first().map_or(0, |p| p.units.len());
    let root_bytes = total - unit_bytes * units as u64;
    let n = ranks as f64;
    // What is gathered: every parameter, frozen or not. The gradients give
    // the trainable ones only.
    let gathered = gathered_sizes(
        snap,
        labelled,
        names.first().filter(|_| units > 0),
        units,
        &passes,
        (unit_bytes, root_bytes),
    )
    .unwrap_or(Gathered {
        unit: unit_bytes,
        root: root_bytes,
        from: None,
    });

    // The memory kept 1/N: parameters, optimizer state, the step's
    // temporaries, gradients. `fully_shard` shards a model once it is
    // built: what the setup made and dropped before training starts (a
    // torchvision model's classifier the program does not keep) is never
    // sharded, and what it made and kept is whole until then.
    let first = phases
        .phase
        .iter()
        .position(|p| matches!(p, Phase::Forward | Phase::Backward | Phase::Optimizer));
    let sharded: Vec<(usize, ChangeKind)> = (0..l.len())
        .filter(|&b| {
            matches!(
                cats.category.get(b),
                Some(Category::Parameter | Category::OptimizerState | Category::Gradient)
            ) || (cats.category.get(b) == Some(&Category::Temporary)
                && cats.rule.get(b) == Some(&Rule::OptimizerFreed))
        })
        .filter(|&b| first.is_none_or(|f| l.span(b).1 >= f))
        .map(|b| (b, ChangeKind::Scale(1.0 / n)))
        .collect();
    // Those made in the window before training starts, whole until then.
    let built_whole: Vec<usize> = match first {
        Some(f) => sharded
            .iter()
            .map(|&(b, _)| b)
            .filter(|&b| l.birth[b] != BEFORE_WINDOW && (l.birth[b] as usize) < f)
            .collect(),
        None => Vec::new(),
    };
    let sharded_bytes: u64 = sharded.iter().map(|&(b, _)| l.size[b]).sum();
    let mut edits = for_blocks(
        snap,
        device,
        l,
        &sharded,
        "parameters, gradients, optimizer state",
    );
    // A recording without a GPU is of a job that would shard over gloo,
    // whose collectives copy each buffer they move.
    let gloo = vramscope_simulate::simulate::modelled(snap).is_err();
    let mut g = Gathers {
        extra: &mut edits.extra_after,
        id: 0,
        unit: gathered.unit,
        root: gathered.root,
        unit_rs: unit_bytes,
        root_rs: root_bytes,
        ranks: n,
        gloo,
    };
    for &b in &built_whole {
        let size = l.size[b];
        let rest = size - ((size as f64 / n) as u64).max(1);
        let id = g.make(l.birth[b] as usize, rest);
        g.free(first.unwrap_or(0).saturating_sub(1), id);
    }
    let built_bytes: u64 = built_whole.iter().map(|&b| l.size[b]).sum();
    for p in &passes {
        g.pass(p, grads_between(p.bwd_start, p.bwd_end + 1), &l.size);
    }
    let (change, unit_how) = if units > 0 {
        (
            format!(
                "parameters, gradients and optimizer state sharded over {ranks} ranks (FSDP2: each of the {units} \
                 blocks a unit, the root the rest)"
            ),
            format!(
                "each block's parameters ({} a block, {}) whole while it runs forward and {}, with their flat \
                 all-gather buffer and the next block's prefetched; the root's ({}) whole from the start of forward \
                 to the end of backward; each block's gradients whole until its reduce-scatter",
                bytes(gathered.unit),
                gathered
                    .from
                    .as_deref()
                    .unwrap_or("read from the gradients born in one block's backward"),
                if recomputed {
                    "again from its recomputation (checkpointed) through its backward"
                } else {
                    "backward"
                },
                bytes(gathered.root)
            ),
        )
    } else {
        (
            format!(
                "parameters, gradients and optimizer state sharded over {ranks} ranks (FSDP2: the whole model one \
                 unit)"
            ),
            format!(
                "the parameters ({}, {}) whole from the start of forward to the end of backward, with their flat \
                 all-gather buffer during the forward; the gradients whole until the reduce-scatter at the end of \
                 backward; no repeated blocks give units of one size (none found, their gradients differ in size, \
                 or, checkpointed, where backward reaches each was not read), so no smaller units predicted",
                bytes(gathered.root),
                gathered
                    .from
                    .as_deref()
                    .unwrap_or("the gradients born in one backward")
            ),
        )
    };
    Some(Candidate {
        class: ChangeClass::Fsdp,
        change,
        code: code(
            names.first().filter(|_| units > 0).map(String::as_str),
            &super::candidates::optimizer_line(snap, "model.parameters(), lr=lr", "  # after fully_shard"),
            !built_whole.is_empty(),
        ),
        settings: recorded.clone(),
        edits: Some(edits),
        method: Method::Rule,
        how: format!(
            "replayed with the parameters, gradients, optimizer state and the step's temporaries ({} over the \
             trace) at 1/{ranks}{}, and what FSDP2 gathers made beside them, in its order: {unit_how}; {}",
            bytes(sharded_bytes),
            if built_whole.is_empty() {
                String::new()
            } else {
                format!(
                    " ({} of them made while the program sets up, whole until training starts (its first forward, backward or step), event {}: \
                     fully_shard shards a model once it is built; what the setup drops before then is never \
                     sharded)",
                    bytes(built_bytes),
                    vramscope_text::units::count(first.unwrap_or(0) as u64)
                )
            },
            if gloo {
                "gloo's own copy of each buffer it gathers or reduces made beside it (a job without a GPU shards \
                 over gloo)"
            } else {
                "NCCL's own buffers and the separate streams FSDP2 runs its collectives on not replayed (their \
                 blocks, which the caching allocator keeps apart, can hold more reserved memory); not yet checked \
                 on GPUs"
            }
        ),
    })
}

/// The code: each block wrapped (where there are blocks), then the root,
/// before the optimizer is made (it must see the sharded parameters).
fn code(first_unit: Option<&str>, optimizer: &str, built_whole: bool) -> String {
    // Replayed as recorded: the model built whole, then sharded. Built on
    // the meta device it is never whole on a rank (not replayed).
    let head = if built_whole {
        "from torch.distributed.fsdp import fully_shard\n# the model is built whole first, as recorded; one too large for a \
         device: build it under\n# torch.device(\"meta\"), shard it, then model.to_empty(device=\"cuda\") and initialise it\n"
    } else {
        "from torch.distributed.fsdp import fully_shard\n"
    };
    let tail = format!("fully_shard(model)\n{optimizer}");
    let Some(first) = first_unit else {
        return format!(
            "{head}# wrapping large submodules first (fully_shard(layer) for each) gathers less at once\n{tail}"
        );
    };
    let c = shown(container(first));
    if is_site(&c) {
        format!(
            "{head}# each block the forward calls at {c}, once the model is built:\nfor block in blocks:\n    \
             fully_shard(block)\n{tail}"
        )
    } else {
        format!("{head}for block in {c}:\n    fully_shard(block)\n{tail}")
    }
}
