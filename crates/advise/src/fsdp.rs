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

use std::collections::BTreeMap;

use vramscope_analysis::categories::{Category, Labelled, Phase, Phases, Rule};
use vramscope_analysis::lifetimes::BEFORE_WINDOW;
use vramscope_analysis::optimizers::alternatives::{sharded_parameters, Stepped};
use vramscope_simulate::edits::{for_blocks, ChangeKind, Extra};
use vramscope_snapshot::Snapshot;
use vramscope_text::units::bytes;

use super::checkpoint::{container, forward_order, is_site, shown, Blocks, SavedCall};
use super::{refuse, Candidate, ChangeClass, Method, NotOffered};
use vramscope_simulate::settings::Settings;

/// One forward and backward pass.
struct Pass {
    /// The entry after which the forward starts: the root is gathered.
    start: usize,
    /// The forward's last event: the last flat buffer is freed after it.
    fwd_end: usize,
    /// Backward's first and last events.
    bwd_start: usize,
    bwd_end: usize,
    /// Per unit, in forward order: its call's first and last events and
    /// the entry after which backward reaches it. Empty: the whole model
    /// is one unit, the root.
    units: Vec<(usize, usize, usize)>,
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
fn block_passes(calls: &[SavedCall], names: &[String], phases: &Phases) -> Vec<Pass> {
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
fn recomputed_passes(
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
struct Checkpointed {
    /// The blocks' names in forward order.
    names: Vec<String>,
    passes: Vec<Pass>,
    /// Whether backward recomputes the blocks (checkpointed), rather than
    /// only reaching them at the spans the recorder marks.
    recomputes: bool,
}

/// The passes read from the phases alone, for the whole model as one
/// unit: from each forward's first event to the end of the backward after
/// it, where that backward makes gradients. A forward that backward runs
/// (a checkpointed block made again) is part of backward, not the next
/// pass's forward.
fn phase_passes(phases: &Phases, makes_grads: &dyn Fn(usize, usize) -> bool) -> Vec<Pass> {
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

/// What FSDP2 allocates beside the program's own memory, as blocks the
/// recorded run never made.
struct Gathers<'e> {
    extra: &'e mut BTreeMap<usize, Vec<Extra>>,
    id: u32,
    /// A unit's parameter bytes, and the root's.
    unit: u64,
    root: u64,
    ranks: f64,
    /// gloo's own copy of each buffer it gathers or reduces.
    gloo: bool,
}

impl Gathers<'_> {
    /// A block of `size` made after entry `i` (nothing for 0 bytes).
    fn make(&mut self, i: usize, size: u64) -> u32 {
        self.id += 1;
        if size > 0 {
            let id = self.id;
            self.extra
                .entry(i)
                .or_default()
                .push(Extra::Make { id, size });
        }
        self.id
    }

    fn free(&mut self, i: usize, id: u32) {
        self.extra.entry(i).or_default().push(Extra::Free(id));
    }

    /// An all-gather's flat buffer made after entry `i` (with gloo, its
    /// copy made and freed beside it).
    fn gather(&mut self, i: usize, size: u64) -> u32 {
        let flat = self.make(i, size);
        if self.gloo {
            let copy = self.make(i, size);
            self.free(i, copy);
        }
        flat
    }

    /// One forward and backward: the root gathered for the whole pass,
    /// each unit's parameters while it runs, each gradient whole until its
    /// unit's reduce-scatter.
    fn pass(&mut self, p: &Pass, grads: &[(usize, usize)], size: &[u64]) {
        let (unit, root, k) = (self.unit, self.root, p.units.len());
        let root_flat = self.gather(p.start, root);
        let root_params = self.make(p.start, root);
        let mut flat_prev = root_flat;
        for &(first, last, _) in &p.units {
            let before = first.saturating_sub(1);
            let flat = self.gather(before, unit);
            // FSDP2 frees the previous all-gather's buffer only now: the
            // next copy-in must not overwrite it.
            self.free(before, flat_prev);
            let params = self.make(before, unit);
            self.free(last, params);
            flat_prev = flat;
        }
        self.free(p.fwd_end, flat_prev);
        let reached = |u: usize| p.units[u].2;
        let done = |u: usize| if u > 0 { reached(u - 1) } else { p.bwd_end };
        // Each gradient whole from its birth (the block itself is kept at
        // 1/N; the rest is made beside it), by unit (k: the root).
        let mut owned: Vec<Vec<u32>> = vec![Vec::new(); k + 1];
        for &(birth, b) in grads {
            let u = (0..k).find(|&u| birth >= reached(u) && (u == 0 || birth < reached(u - 1)));
            let whole = size[b] - (size[b] as f64 / self.ranks) as u64;
            let id = self.make(birth, whole);
            owned[u.unwrap_or(k)].push(id);
        }
        // Backward, from the last unit: its parameters whole (the last
        // unit's gathered here, the others prefetched), the next unit's
        // buffer prefetched; when the next unit's backward starts, the
        // unit's parameters freed and its gradients reduce-scattered.
        let (mut prefetched, mut rs_prev, mut copy_prev) = (None, None, None);
        for u in (0..k).rev() {
            let flat = match prefetched.take() {
                Some(f) => f,
                None => self.gather(reached(u), unit),
            };
            let params = self.make(reached(u), unit);
            self.free(reached(u), flat);
            // gloo's copy of the last reduce-scatter outlives this copy-out.
            if let Some(c) = copy_prev.take() {
                self.free(reached(u), c);
            }
            if u > 0 {
                prefetched = Some(self.gather(reached(u), unit));
            }
            self.free(done(u), params);
            if let Some(r) = rs_prev.take() {
                self.free(done(u), r);
            }
            rs_prev = Some(self.make(done(u), unit));
            for &id in &owned[u] {
                self.free(done(u), id);
            }
            if self.gloo {
                copy_prev = Some(self.make(done(u), unit));
            }
        }
        // The root's reduce-scatter, at the end of backward.
        let end = p.bwd_end;
        for id in [copy_prev, Some(root_params), rs_prev]
            .into_iter()
            .flatten()
        {
            self.free(end, id);
        }
        let rs = self.make(end, root);
        for &id in &owned[k] {
            self.free(end, id);
        }
        if self.gloo {
            let copy = self.make(end, root);
            self.free(end, copy);
        }
        self.free(end, rs);
    }
}

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
    // A recording without a GPU is of a job that would shard over gloo,
    // whose collectives copy each buffer they move.
    let gloo = vramscope_simulate::simulate::modelled(snap).is_err();
    let mut g = Gathers {
        extra: &mut edits.extra_after,
        id: 0,
        unit: unit_bytes,
        root: root_bytes,
        ranks: n,
        gloo,
    };
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
                "each block's parameters ({} a block, read from the gradients born in one block's backward) whole \
                 while it runs forward and {}, with their flat all-gather buffer and the next block's \
                 prefetched; the root's ({}) whole from the start of forward to the end of backward; each block's \
                 gradients whole until its reduce-scatter",
                bytes(unit_bytes),
                if recomputed {
                    "again from its recomputation (checkpointed) through its backward"
                } else {
                    "backward"
                },
                bytes(root_bytes)
            ),
        )
    } else {
        (
            format!(
                "parameters, gradients and optimizer state sharded over {ranks} ranks (FSDP2: the whole model one \
                 unit)"
            ),
            format!(
                "the parameters ({}, the gradients born in one backward) whole from the start of forward to the end \
                 of backward, with their flat all-gather buffer during the forward; the gradients whole until the \
                 reduce-scatter at the end of backward; no repeated blocks give units of one size (none found, \
                 their gradients differ in size, or, checkpointed, where backward reaches each was not read), so no smaller \
                 units predicted",
                bytes(root_bytes)
            ),
        )
    };
    Some(Candidate {
        class: ChangeClass::Fsdp,
        change,
        code: code(
            names.first().filter(|_| units > 0).map(String::as_str),
            &super::candidates::optimizer_line(snap, "model.parameters(), lr=lr", "  # after fully_shard"),
        ),
        settings: recorded.clone(),
        edits: Some(edits),
        method: Method::Rule,
        how: format!(
            "replayed with the parameters, gradients, optimizer state and the step's temporaries ({} over the \
             trace) at 1/{ranks}, and what FSDP2 gathers made beside them, in its order: {unit_how}; {}",
            bytes(sharded_bytes),
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
fn code(first_unit: Option<&str>, optimizer: &str) -> String {
    let head = "from torch.distributed.fsdp import fully_shard\n";
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
