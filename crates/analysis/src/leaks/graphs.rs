//! Evaluation passes run with autograd on: the graphs they keep for a
//! backward that never comes.
//!
//! A validation loop written without `torch.no_grad()` keeps, for each
//! batch, every tensor its operations saved for backward until the output
//! holding the graph is dropped: with `output = model(data)`, after the
//! next batch's forward (two graphs at once), and the last batch's through
//! whatever runs after the pass (the next training steps, where it is
//! neither growth nor a leak: the `one_time` finding called it expected).
//! The recorder says which calls ran with autograd on; what their graphs
//! keep, and when `torch.no_grad()` would have freed it, is
//! `categories::evaluation_graphs`'. Checked against the programs changed
//! as the fix says (pytorch/examples' MNIST testing on 1,000 without
//! `no_grad`: 329 MiB of its 717 MiB peak; `advise_check.py`'s
//! `evalgrad4x` rows).

use vramscope_snapshot::hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::explain::evidence_list;
use super::findings::{Context, SiteSeries};
use super::source::Sources;
use super::{Finding, FindingKind, Severity};
use crate::categories::evaluation_graphs::kept_by_graphs;
use crate::sites::stack_lines;
use vramscope_snapshot::StackId;
use vramscope_text::units::bytes;

/// What the graphs of evaluation forwards keep at the run's peak.
pub(super) struct GraphsHeld {
    /// The run's peak (highest allocated).
    peak: usize,
    /// Bytes alive there that `torch.no_grad()` would have freed before it.
    bytes: u64,
    /// Site → (bytes, blocks), of those.
    pub by_site: HashMap<u32, (u64, u64)>,
    /// Site → the stack of its largest block counted, the one shown: a
    /// site's own example can be a block of a training step at the same
    /// line (a layer's forward called by both), not of the evaluation.
    stacks: HashMap<u32, (u64, StackId)>,
    /// Evaluation passes with a call run with autograd on.
    passes: usize,
}

/// `None` where no evaluation pass ran with autograd on (or the recorder
/// did not say), or what their graphs keep is under the findings'
/// threshold at the run's peak.
pub(super) fn scan(ctx: &Context) -> Option<GraphsHeld> {
    let l = ctx.lifetimes;
    let kept = kept_by_graphs(
        ctx.snap,
        ctx.trace.device,
        ctx.evaluation,
        l,
        ctx.categories,
    );
    if kept.is_empty() {
        return None;
    }
    let peak = ctx.run_peak?;
    let mut by_site: HashMap<u32, (u64, u64)> = HashMap::default();
    let mut stacks: HashMap<u32, (u64, StackId)> = HashMap::default();
    let mut held = 0u64;
    for &(b, freed_after) in &kept {
        if freed_after < peak && l.alive_after(b, peak as u32) {
            held += l.size[b];
            let site = ctx.sites.of_block[b];
            let e = by_site.entry(site).or_default();
            e.0 += l.size[b];
            e.1 += 1;
            let shown = stacks.entry(site).or_insert((l.size[b], l.stack[b]));
            if l.size[b] > shown.0 {
                *shown = (l.size[b], l.stack[b]);
            }
        }
    }
    let passes = ctx.evaluation.passes_with_grad();
    ctx.significant(held).then_some(GraphsHeld {
        peak,
        bytes: held,
        by_site,
        stacks,
        passes,
    })
}

impl GraphsHeld {
    /// Without the sites another finding claimed, if what is left still
    /// counts.
    pub(super) fn without(mut self, ctx: &Context, claimed: &HashSet<u32>) -> Option<GraphsHeld> {
        self.by_site.retain(|site, _| !claimed.contains(site));
        self.bytes = self.by_site.values().map(|v| v.0).sum();
        ctx.significant(self.bytes).then_some(self)
    }
}

pub(super) fn finding(
    ctx: &Context,
    g: &GraphsHeld,
    series: &SiteSeries,
    src: &mut Sources,
) -> Finding {
    let mut sites: Vec<(u32, f64)> = g
        .by_site
        .iter()
        .map(|(&s, &(b, _))| (s, b as f64))
        .collect();
    sites.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    let count: u64 = g.by_site.values().map(|v| v.1).sum();
    let peak = ctx.allocated.get(g.peak).copied().unwrap_or(0);
    let number = ctx
        .iterations
        .iter()
        .find(|i| i.range.start <= g.peak && g.peak < i.range.end)
        .map_or(0, |i| i.range.number);
    let where_ = if ctx.evaluation.contains(g.peak) {
        "in an evaluation pass"
    } else {
        "after one (the last batch's graph, still bound to the loop's variables)"
    };
    Finding {
        kind: FindingKind::EvaluationWithGrad,
        severity: Severity::Warning,
        title: format!(
            "evaluation run with autograd on: its graphs keep {} at the peak",
            bytes(g.bytes)
        ),
        explanation: format!(
            "{} evaluation pass{} (forwards no backward used) ran with autograd on: every tensor their \
             operations saved for backward stays allocated until the output that holds the graph is dropped (in a \
             loop that binds its output, after the next batch's forward; the last batch's until the variable is \
             bound again). The run peaks ({}) {where_}, where {count} such tensors ({}) are alive that \
             `torch.no_grad()` would have freed.",
            g.passes,
            if g.passes == 1 { "" } else { "es" },
            bytes(peak),
            bytes(g.bytes),
        ),
        fix: "Run the evaluation under `torch.no_grad()` (or `torch.inference_mode()`): `with torch.no_grad():` \
              around the loop, or `@torch.no_grad()` on the function that runs it; `vramscope advise` replays it \
              (`no_grad_evaluation`)."
            .into(),
        bytes_per_iteration: 0.0,
        bytes: g.bytes,
        iterations: (number, number),
        sites: evidence_list(ctx, &sites, (false, false), series, src)
            .into_iter()
            .zip(&sites)
            .map(|(mut e, (site, _))| {
                if let Some(&(_, stack)) = g.stacks.get(site) {
                    e.stack = stack_lines(ctx.snap, stack);
                }
                e
            })
            .collect(),
    }
}
