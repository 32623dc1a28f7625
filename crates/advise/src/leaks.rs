//! A leak's fix, replayed: the blocks of each leak `vramscope leaks` finds
//! that outlived the iteration after the one they were made in, freed at
//! the end of the phase that made them (what `del`, `.item()` or
//! `torch.no_grad()` there gives). Only those blocks: a leak's line is often shared with memory
//! that is freed in time (a model's `forward`, called by training and by an
//! evaluation that keeps its outputs), and freeing all of that line's
//! blocks early would free the training's saved activations too.
//!
//! Gradients kept from one step to the next (a finding of held memory) are
//! not freed that way: the next backward would make them again, so their
//! fix is replayed as `zero_grad(set_to_none=True)` ([`super::set_to_none`]),
//! or left out of the finding's replay where that cannot be predicted.
//! Freed early and never made again, they once predicted the wide MLP of
//! `advise_runs.py` 20% below what the changed program measured.

use std::collections::{HashMap, HashSet};

use vramscope_analysis::categories::Category;
use vramscope_analysis::categories::Labelled;
use vramscope_analysis::iterations::Iterations;
use vramscope_analysis::leaks::{
    find_leaks_with, Finding, FindingKind, HeldFix, LeakOptions, Severity,
};
use vramscope_analysis::lifetimes::{BEFORE_WINDOW, STILL_ALIVE};
use vramscope_analysis::sites::{frame_label, site_frame};
use vramscope_simulate::edits::{for_blocks, ChangeKind, Edits};
use vramscope_snapshot::{Snapshot, StackId};
use vramscope_text::units::bytes;

use super::set_to_none::{KeptGradients, Replayed};
use super::{Candidate, ChangeClass, Method};
use vramscope_simulate::settings::Settings;

/// Each leak or held memory found, fixed; and all of them at once where
/// there are several (one fix often ends them all: the list that keeps
/// the outputs keeps every layer's). With whether a finding's fix carries
/// the kept gradients' `set_to_none` replay.
pub(super) fn leak_candidates(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    its: &Iterations,
    recorded: &Settings,
    gradients: Option<&KeptGradients>,
) -> (Vec<Candidate>, bool) {
    let opts = LeakOptions {
        read_sources: false,
        ..LeakOptions::default()
    };
    let report = find_leaks_with(snap, device, &opts, labelled);
    let l = &labelled.lifetimes;
    // Whether block b was still alive when the iteration after the one that
    // made it ended: what a leak keeps. A block alive only into the next
    // iteration is most often an output its variable holds until the next
    // assignment (`out = model(x)`), needed until then; one made in the
    // last iteration cannot be told from those, and is left.
    let outlived = |b: usize| -> bool {
        if l.birth[b] == BEFORE_WINDOW {
            return false;
        }
        let k = its.of_event(l.birth[b] as usize) as usize;
        match (k >= 1).then(|| its.list.get(k)).flatten() {
            Some(next) => l.death[b] == STILL_ALIVE || l.death[b] as usize >= next.end,
            None => false,
        }
    };
    let mut label_of: HashMap<StackId, String> = HashMap::new();
    let mut label = |s: StackId| -> String {
        label_of
            .entry(s)
            .or_insert_with(|| {
                site_frame(snap, s).map_or_else(String::new, |f| frame_label(snap, f))
            })
            .clone()
    };
    let findings: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.severity != Severity::Benign && !f.sites.is_empty())
        .collect();
    let mut out = Vec::new();
    let mut every: Vec<usize> = Vec::new();
    let is_kept_gradient = |b: usize| gradients.is_some_and(|g| g.blocks.contains(&b));
    let set_to_none = gradients.and_then(|g| g.replay.as_ref().ok());
    let mut covered = false;
    for f in &findings {
        if f.kind == FindingKind::GradientsInEvaluation {
            out.extend(free_before_evaluation(snap, device, labelled, f, recorded));
            continue;
        }
        if f.kind == FindingKind::HeldGradients && !report.held_fix.moves().is_empty() {
            out.extend(zero_grad_first(
                snap,
                device,
                labelled,
                f,
                &report.held_fix,
                recorded,
            ));
            continue;
        }
        // A site may name the callee its blocks came through
        // (`train.py:92 in main → module.py:1787 in _wrapped_call_impl`):
        // the blocks are the line's.
        // The sites in the finding's order, each once: the text must not
        // depend on a hash set's order.
        let mut sites: Vec<&str> = Vec::new();
        for s in &f.sites {
            let line = s.site.split(" → ").next().unwrap_or(&s.site);
            if !sites.contains(&line) {
                sites.push(line);
            }
        }
        let lines: HashSet<&str> = sites.iter().copied().collect();
        let (grads, mut blocks): (Vec<usize>, Vec<usize>) = (0..l.len())
            .filter(|&b| outlived(b) && lines.contains(label(l.stack[b]).as_str()))
            .partition(|&b| is_kept_gradient(b));
        // The last iteration's blocks have no next iteration to outlive.
        // Those made just as the leaked ones were (the same stack and size)
        // and still alive at the end are the same leak: left in, they put
        // one more iteration's leak at the fixed run's peak (the zoo's
        // Llama keeping its evaluation outputs: +58% against the run made
        // with the fix). An output held only until the next assignment
        // never outlived an iteration, so it has no such twin.
        let alike: HashSet<(StackId, u64)> =
            blocks.iter().map(|&b| (l.stack[b], l.size[b])).collect();
        let last = (0..l.len())
            .filter(|&b| {
                l.death[b] == STILL_ALIVE
                    && l.birth[b] != BEFORE_WINDOW
                    && !outlived(b)
                    && !is_kept_gradient(b)
                    && alike.contains(&(l.stack[b], l.size[b]))
            })
            .collect::<Vec<_>>();
        let last_count = last.len();
        blocks.extend(last);
        let with_grads = set_to_none.filter(|_| !grads.is_empty());
        if blocks.is_empty() && with_grads.is_none() {
            continue;
        }
        covered |= with_grads.is_some();
        every.extend(&blocks);
        let growth = if f.severity == Severity::Leak && f.bytes_per_iteration > 0.0 {
            format!(
                "; it grows by {} per iteration, so what it costs grows with the run's length beyond the recorded \
                 iterations",
                bytes(f.bytes_per_iteration as u64)
            )
        } else {
            String::new()
        };
        // A finding of kept gradients alone is no leak: it grows with
        // nothing, and its fix is the set_to_none change.
        let class = if blocks.is_empty() {
            ChangeClass::SetToNone
        } else {
            ChangeClass::FixLeak
        };
        out.push(Candidate {
            class,
            change: f.title.clone(),
            code: f.fix.clone(),
            settings: recorded.clone(),
            method: Method::Replayed,
            edits: Some(with_set_to_none(
                free_early(snap, device, labelled, &blocks, &sites.join(", ")),
                with_grads,
            )),
            how: format!(
                "replayed with {}{growth}",
                join_how(
                    (!blocks.is_empty()).then(|| format!(
                        "the {} blocks of {} that outlived the iteration after theirs{} freed at the end of the phase \
                         that made them",
                        blocks.len() - last_count,
                        sites.join(", "),
                        if last_count > 0 {
                            format!(
                                ", and the {last_count} of the last iteration made alike (the same stack and size) \
                                 and alive at the end,"
                            )
                        } else {
                            String::new()
                        }
                    )),
                    with_grads
                )
            ),
        });
    }
    if out.len() > 1 && !every.is_empty() {
        every.sort_unstable();
        every.dedup();
        let n = out.len();
        out.push(Candidate {
            class: ChangeClass::FixLeak,
            change: format!("every leak found fixed ({n} findings)"),
            code: out
                .iter()
                .map(|c| c.code.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            settings: recorded.clone(),
            method: Method::Replayed,
            edits: Some(with_set_to_none(
                free_early(snap, device, labelled, &every, "every leak found"),
                set_to_none.filter(|_| covered),
            )),
            how: format!(
                "replayed with {}",
                join_how(
                    Some(format!(
                        "the {} blocks of the {n} leaks found that outlived the iteration after theirs freed at the \
                         end of the phase that made them (one fix often ends several: what keeps a model's outputs \
                         keeps every layer's)",
                        every.len()
                    )),
                    set_to_none.filter(|_| covered)
                )
            ),
        });
    }
    (out, covered)
}

/// `edits` with the gradients set to None where the finding holds them.
fn with_set_to_none(mut edits: Edits, gradients: Option<&Replayed>) -> Edits {
    if let Some(r) = gradients {
        edits.merge(r.edits.clone());
    }
    edits
}

/// How a finding's fix was replayed: its blocks freed early, its kept
/// gradients set to None, or both.
fn join_how(freed: Option<String>, gradients: Option<&Replayed>) -> String {
    let set = gradients.map(|r| format!("zero_grad(set_to_none=True): {}", r.how));
    match (freed, set) {
        (Some(f), Some(g)) => format!("{f}, and {g}"),
        (Some(f), None) => f,
        (None, Some(g)) => g,
        (None, None) => String::new(),
    }
}

fn free_early(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    blocks: &[usize],
    label: &str,
) -> Edits {
    let v: Vec<(usize, ChangeKind)> = blocks.iter().map(|&b| (b, ChangeKind::FreeEarly)).collect();
    for_blocks(snap, device, &labelled.lifetimes, &v, label)
}

/// The fix of the last step's gradients held through an evaluation pass:
/// each gradient alive when an evaluation pass begins freed as it begins
/// (`zero_grad(set_to_none=True)` before the loop). Nothing else moves:
/// the next step's `zero_grad` freed them in the recording, and its
/// backward makes them again either way. Checked on pytorch/examples'
/// MNIST (tests at batch 256 after each epoch): 107.65 MiB predicted,
/// 107.65 MiB measured with the line added.
fn free_before_evaluation(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    f: &Finding,
    recorded: &Settings,
) -> Option<Candidate> {
    let l = &labelled.lifetimes;
    let cats = &labelled.categories;
    // Each gradient, freed as the first evaluation pass it is alive into
    // begins.
    let spans = &cats.evaluation.spans;
    let v: Vec<(usize, ChangeKind)> = (0..l.len())
        .filter(|&b| {
            l.birth[b] != BEFORE_WINDOW && cats.category.get(b) == Some(&Category::Gradient)
        })
        .filter_map(|b| {
            let k = spans.partition_point(|&(s, _)| s <= l.birth[b]);
            let start = spans.get(k)?.0 as usize;
            let alive = l.death[b] == STILL_ALIVE || l.death[b] as usize > start;
            alive.then_some((b, ChangeKind::FreeAfter(start - 1)))
        })
        .collect();
    if v.is_empty() {
        return None;
    }
    let total: u64 = v.iter().map(|&(b, _)| l.size[b]).sum();
    Some(Candidate {
        class: ChangeClass::SetToNone,
        change: f.title.clone(),
        code: f.fix.clone(),
        settings: recorded.clone(),
        method: Method::Replayed,
        edits: Some(for_blocks(snap, device, l, &v, "the gradients alive when an evaluation pass begins")),
        how: format!(
            "replayed with the {} gradient blocks ({}) alive when an evaluation pass begins freed as it begins; the \
             next step's backward makes them again, as recorded",
            v.len(),
            bytes(total)
        ),
    })
}

/// The fix of gradients held through the next forward (`zero_grad()`
/// called between the forward and `backward()`, as pytorch/examples'
/// ImageNet script does): each gradient the finding holds into a forward
/// freed just before that forward's first allocation, as
/// `optimizer.zero_grad(set_to_none=True)` at the top of the loop frees
/// it. Where several optimizers step (a GAN's), each gradient freed as the
/// step that used it ends, as each `opt.zero_grad(set_to_none=True)` right
/// after its own `opt.step()` frees it. The next backward makes them again,
/// as recorded.
fn zero_grad_first(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    f: &Finding,
    fix: &HeldFix,
    recorded: &Settings,
) -> Option<Candidate> {
    let l = &labelled.lifetimes;
    let moved = fix.moves();
    let v: Vec<(usize, ChangeKind)> = moved
        .iter()
        .map(|&(b, at)| (b, ChangeKind::FreeAfter(at)))
        .collect();
    let total: u64 = moved.iter().map(|&(b, _)| l.size[b]).sum();
    // (the change, its code, what the edits free, how they were made)
    let (change, code, what, how) = if let HeldFix::AfterOwnStep(_) = fix {
        (
            "each optimizer's gradients freed right after its own step".to_owned(),
            "opt_d.step()\nopt_d.zero_grad(set_to_none=True)  # each optimizer's, right after its own step\n\
             ...\nopt_g.step()\nopt_g.zero_grad(set_to_none=True)",
            "the gradients kept past their optimizer's step",
            "that outlived the optimizer step that used them each freed as that step ends, where \
             `opt.zero_grad(set_to_none=True)` after each `opt.step()` frees them; each backward makes them again",
        )
    } else if f.fix.contains("optimizer_zero_grad") {
        // Lightning zeroes inside its optimizer closure, after
        // training_step: its hooks move it (the finding's fix says which).
        (
            f.title.clone(),
            "class Model(L.LightningModule):\n    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):\n        \
             pass  # zeroed before training_step instead\n\n    def on_train_batch_start(self, batch, batch_idx):\n        \
             self.optimizers().zero_grad(set_to_none=True)",
            "the gradients held into the next forward",
            BEFORE_FORWARD,
        )
    } else {
        (
            f.title.clone(),
            "for data, target in loader:\n    optimizer.zero_grad(set_to_none=True)  # first: the last step's \
             gradients go before the forward\n    loss = loss_fn(model(data), target)\n    loss.backward()\n    \
             optimizer.step()",
            "the gradients held into the next forward",
            BEFORE_FORWARD,
        )
    };
    Some(Candidate {
        class: ChangeClass::ZeroGradFirst,
        change,
        code: code.into(),
        settings: recorded.clone(),
        method: Method::Replayed,
        edits: Some(for_blocks(snap, device, l, &v, what)),
        how: format!(
            "replayed with the {} gradient blocks ({} over the trace) {how}, as recorded",
            v.len(),
            bytes(total)
        ),
    })
}

/// How `zero_grad()` moved before the forward is replayed (the middle of
/// [`zero_grad_first`]'s sentence).
const BEFORE_FORWARD: &str =
    "each step's forward began with freed just before it, where `zero_grad()` at the top \
                              of the loop frees them; the next backward makes them again";
