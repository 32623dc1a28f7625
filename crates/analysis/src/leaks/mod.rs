//! Leaks: memory that grows from one training iteration to the next, and
//! why.
//!
//! The trace is cut into iterations ([`crate::iterations`]), every block's
//! lifetime is known ([`crate::lifetimes`]), and for each allocation site the
//! bytes still alive at the end of each iteration form a series. Its shape
//! says what happened:
//!
//! * steady growth: a reference keeps one iteration's tensors alive (a list
//!   that is appended to, a loss accumulated with its graph);
//! * growth that drops all at once when Python's cycle collector runs (the
//!   recorder marks collections; without marks the saw-tooth is the clue);
//! * growth in the first iteration only: optimizer state, caches (benign);
//!
//! and, apart from the series, gradients of one iteration still allocated at
//! the next iteration's peak (`zero_grad` in the wrong place or with
//! `set_to_none=False`), and tensors that outlive the iteration after theirs.
//!
//! ```no_run
//! use vramscope_analysis::leaks::{find_leaks, LeakOptions};
//! let snap = vramscope_snapshot::load("run.pickle".as_ref(), &Default::default())?;
//! let report = find_leaks(&snap, 0, &LeakOptions::default());
//! for f in &report.findings {
//!     println!("{}: {}\n  fix: {}", f.title, f.explanation, f.fix);
//! }
//! # Ok::<(), vramscope_snapshot::SnapshotError>(())
//! ```

mod explain;
mod findings;
mod graphs;
mod held;
pub mod holders;
mod optimizer_history;
pub mod series;
pub mod source;

use std::path::PathBuf;

use serde::Serialize;
use vramscope_snapshot::{AnnotationStage, DeviceTrace, Snapshot};

use crate::categories::Labelled;
use crate::iterations::{find_iterations, Iteration, IterationSource, Iterations};
use crate::liveness::{allocated_series, Liveness};
use series::{BlockIterations, SiteTable};
use source::Sources;

/// Version of the `vramscope leaks --json` schema.
pub const LEAKS_SCHEMA_VERSION: u32 = 1;

/// Options of the leak analysis (shared by the CLI and Python).
#[derive(Clone, Debug)]
pub struct LeakOptions {
    /// Growth per iteration below this many bytes is not a leak. Default 1:
    /// a 512-byte loss tensor kept per step is a leak worth knowing about.
    pub min_growth_per_iteration: u64,
    /// One-time growth and held gradients are reported from this fraction
    /// of the peak up. Default 0.01.
    pub min_fraction_of_peak: f64,
    /// Sites listed per finding. Default 5.
    pub max_sites: usize,
    /// Read the user's source files (when they exist on this machine) to
    /// quote the code of a site and the line that keeps its tensor.
    /// Default true.
    pub read_sources: bool,
    /// Directories that relative file names in the stacks are looked up in,
    /// after the current directory. Default: none.
    pub source_roots: Vec<PathBuf>,
}

impl Default for LeakOptions {
    fn default() -> Self {
        LeakOptions {
            min_growth_per_iteration: 1,
            min_fraction_of_peak: 0.01,
            max_sites: 5,
            read_sources: true,
            source_roots: Vec::new(),
        }
    }
}

/// One iteration's memory.
#[derive(Clone, Debug, Serialize)]
pub struct IterationStats {
    #[serde(flatten)]
    pub range: Iteration,
    /// Allocated when it began and when it ended (bytes).
    pub start_bytes: u64,
    pub end_bytes: u64,
    pub growth: i64,
    pub peak_bytes: u64,
    /// Event index of the peak.
    pub peak_event: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Memory grows without bound.
    Leak,
    /// Memory is wasted, but bounded.
    Warning,
    /// Expected growth, shown so it is not mistaken for a leak.
    Benign,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// One site's tensors are kept, iteration after iteration.
    Growth,
    /// Several sites grow together: an autograd graph per iteration is kept.
    RetainedGraph,
    /// Freed only by Python's cycle collector.
    ReferenceCycle,
    /// Gradients alive during the next iteration's peak.
    HeldGradients,
    /// The last training step's gradients alive at the run's peak, which is
    /// in an evaluation pass (forwards no backward used).
    GradientsInEvaluation,
    /// Evaluation forwards run with autograd on, whose graphs keep tensors
    /// at the run's peak that `torch.no_grad()` would have freed.
    EvaluationWithGrad,
    /// Tensors that outlive the iteration after theirs, without growth.
    LongLived,
    /// Growth in the first iteration(s), flat afterwards.
    OneTime,
    /// One tensor at a time, larger at every iteration's end, while the
    /// rest of the iteration allocates the same: rebuilt from itself.
    GrowingTensor,
    /// One tensor at a time, larger at every iteration's end, with all the
    /// iteration allocates: the input grows (benign).
    GrowingInput,
    /// A library's state made larger at each model call (a generation's
    /// cache of past keys and values; benign).
    GrowingCache,
    /// An optimizer's bounded history (L-BFGS's `history_size` pairs of
    /// vectors), growing until it is full (benign).
    OptimizerHistory,
}

/// What one allocation site did.
#[derive(Clone, Debug, Serialize)]
pub struct SiteEvidence {
    /// `file:line in function` (the summary's site rule).
    pub site: String,
    pub file: String,
    pub line: u32,
    /// The source line, when the file is readable here.
    pub code: Option<String>,
    /// A later line that stores the tensor (`self.features.append(h)`).
    pub kept_by: Option<(u32, String)>,
    /// Where `kept_by` is when it is not in the site's function: the
    /// caller's frame (`train.py:40 in step`) that assigned what the site's
    /// function returned and keeps it.
    pub kept_in: Option<String>,
    /// What holds most of the site's tensors alive at the end, by name,
    /// when the recorder looked (vramscope's recorder does at the end).
    pub held_by: Option<holders::HeldBy>,
    /// Bytes alive at the end of each iteration, from the end of setup
    /// (index 0) to the last complete iteration.
    pub live_bytes: Vec<u64>,
    /// Growth per iteration (leaks; 0 for other findings).
    pub bytes_per_iteration: f64,
    /// Bytes of this site in the finding: alive at the end of the last
    /// complete iteration (leaks), held, or allocated once.
    pub bytes: u64,
    /// Blocks allocated in iteration k and still alive after k + 1 ended.
    pub outliving_blocks: u64,
    pub outliving_bytes: u64,
    /// Blocks freed while the cycle collector ran.
    pub gc_freed_blocks: u64,
    pub gc_freed_bytes: u64,
    /// Stack of the largest block that leaked (of the largest block when
    /// none outlived its iteration), innermost first.
    pub stack: Vec<String>,
    /// Where the leaking allocations' path parts from that of the freed
    /// ones of the same line: (the leaking frame, the freeing one), e.g.
    /// (`train.py:28 in validate`, `train.py:20 in train_step`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leaking_path: Option<(String, String)>,
    /// What within the site made the memory still alive at the end: the
    /// model's modules and lines beneath the user's line (the summary's
    /// `within`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub within: Vec<crate::within::SitePart>,
    /// What the site's memory is (the category of most of its bytes that
    /// outlived their iteration), `null` when unknown.
    pub category: Option<crate::categories::Category>,
}

/// One explained problem (or benign growth).
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub kind: FindingKind,
    pub severity: Severity,
    pub title: String,
    /// What happened, in plain language, with the figures.
    pub explanation: String,
    /// What to change.
    pub fix: String,
    /// Growth per iteration (leaks), or bytes held (others).
    pub bytes_per_iteration: f64,
    pub bytes: u64,
    /// Iterations the evidence covers (1-based).
    pub iterations: (u32, u32),
    pub sites: Vec<SiteEvidence>,
}

/// The leak analysis of one device.
#[derive(Clone, Debug, Serialize)]
pub struct LeakReport {
    pub schema_version: u32,
    pub device: u32,
    pub iteration_source: IterationSource,
    pub iterations: Vec<IterationStats>,
    /// Allocated-at-end growth per complete iteration after the first.
    pub growth_per_iteration: f64,
    /// Whether any finding has severity `leak`.
    pub leaks_found: bool,
    pub findings: Vec<Finding>,
    /// What limited the analysis (too few iterations, no times, ...).
    pub notes: Vec<String>,
    /// The one-line answer: how many leaks, or why none could be judged
    /// ("no iterations found: ...", "the file is cut short: ...").
    pub verdict: String,
    /// The `held_gradients` warning's fix, for `advise`'s replay.
    #[serde(skip)]
    pub held_fix: HeldFix,
}

/// The `held_gradients` warning's fix, for `advise`'s replay: gradient
/// blocks each freed right after the event given instead of where the
/// program freed them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum HeldFix {
    /// No warning, or nothing to move.
    #[default]
    None,
    /// `zero_grad()` before the forward: each gradient block held into a
    /// forward and freed before its backward, freed just before that
    /// forward's first allocation.
    BeforeForward(Vec<(usize, usize)>),
    /// Several optimizers (a GAN's): each `opt.zero_grad(set_to_none=True)`
    /// right after its own `opt.step()`, every gradient freed as the step
    /// that used it ends.
    AfterOwnStep(Vec<(usize, usize)>),
}

impl HeldFix {
    /// (block, the event after which it is freed) of either fix.
    pub fn moves(&self) -> &[(usize, usize)] {
        match self {
            HeldFix::None => &[],
            HeldFix::BeforeForward(m) | HeldFix::AfterOwnStep(m) => m,
        }
    }
}

/// Allocated bytes at iteration ends, per iteration: the least-squares
/// slope over complete iterations 2 to n (three or more), the difference
/// between the ends of iterations 1 and 2 with two. Iteration 1 is
/// warm-up, and what it alone leaves (a generation's prompt, freed by the
/// first token's call) would otherwise tilt every rate measured from its
/// end; a slope over the rest is the rate of a steady leak exactly, and
/// of noisy batch sizes the trend rather than the last batch's size.
fn growth_rate(iterations: &[IterationStats]) -> f64 {
    let ends: Vec<(f64, f64)> = iterations
        .iter()
        .filter(|i| i.range.complete)
        .map(|i| (f64::from(i.range.number), i.end_bytes as f64))
        .collect();
    match ends.len() {
        0 | 1 => 0.0,
        2 => (ends[1].1 - ends[0].1) / (ends[1].0 - ends[0].0),
        _ => {
            let pts = &ends[1..];
            let n = pts.len() as f64;
            let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
            let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
            let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
            let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
            if sxx > 0.0 {
                sxy / sxx
            } else {
                0.0
            }
        }
    }
}

/// When each iteration began (µs), for the recorder's holders, and when
/// the last one ended if it did: the recorder's look at the end, after the
/// loop, finds no iteration under way, so what it holds of the last
/// iteration counts (an accumulator made again in the last iteration).
fn holder_iterations(t: &DeviceTrace, iterations: &[IterationStats]) -> Vec<i64> {
    let mut starts: Vec<i64> = iterations
        .iter()
        .filter_map(|i| t.time_us.get(i.range.start).copied())
        .collect();
    if let Some(last) = iterations.last().filter(|i| i.range.complete) {
        if let Some(&end) = t.time_us.get(last.range.end.saturating_sub(1)) {
            starts.push(end + 1);
        }
    }
    starts
}

/// Find leaks in `device`'s trace.
pub fn find_leaks(snap: &Snapshot, device: u32, opts: &LeakOptions) -> LeakReport {
    find_leaks_with(snap, device, opts, &Labelled::new(snap, device))
}

/// [`find_leaks`] with the device's labelled blocks computed by the caller.
pub fn find_leaks_with(
    snap: &Snapshot,
    device: u32,
    opts: &LeakOptions,
    labelled: &Labelled,
) -> LeakReport {
    let empty = DeviceTrace::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let its = find_iterations(snap, device);
    let liveness = Liveness::new(snap, device);
    let series = allocated_series(&liveness, t);
    let iterations = iteration_stats(&its, &series, liveness.initial_bytes);
    let complete = its.complete().count() as u32;
    let mut notes = Vec::new();
    if t.is_empty() {
        notes.push("the snapshot has no trace of events: leaks need allocations over time".into());
    } else if its.list.is_empty() {
        let pattern = its
            .rejected
            .clone()
            .unwrap_or_else(|| "no repeating pattern".into());
        notes.push(format!(
            "no iterations found (no ProfilerStep or repeated annotation, no user_metadata labels, no optimizer step; \
             {pattern}); call vramscope.step() once per iteration when recording"
        ));
    } else if complete < 3 {
        notes.push(format!(
            "{complete} complete iteration(s) in the trace: growth from one iteration to the next needs at least 3"
        ));
    }
    if snap.source.truncated {
        notes.push(format!(
            "the file is cut short (truncated or damaged: {}): iterations after the cut were not seen, and tensors of the seen ones may have been freed after it",
            snap.source.warnings.first().map_or("see `vramscope summary`", String::as_str)
        ));
    }
    let l = &labelled.lifetimes;
    let bi = BlockIterations::new(l, &its);
    let gc = gc_spans(snap, device, t);
    let in_gc = |ev: u32| {
        let k = gc.partition_point(|&(s, _)| s <= ev as usize);
        k > 0 && (ev as usize) < gc[k - 1].1
    };
    let sites = SiteTable::new(snap, l, &bi, complete, &in_gc, &labelled.categories);
    let mut sources = Sources::new(if opts.read_sources {
        let mut roots = vec![std::env::current_dir().unwrap_or_default()];
        roots.extend(opts.source_roots.iter().cloned());
        roots
    } else {
        Vec::new()
    });
    let backward = crate::backward_blocks::BackwardBlocks::new(snap, device);
    let ctx = findings::Context {
        snap,
        trace: t,
        backward: &backward,
        allocated: &series,
        run_peak: (0..series.len()).max_by_key(|&i| (series[i], std::cmp::Reverse(i))),
        opts,
        iterations: &iterations,
        complete,
        lifetimes: l,
        block_iterations: &bi,
        sites: &sites,
        gc_runs: gc.len(),
        gc_probes: snap
            .annotations
            .iter()
            .filter(|a| {
                a.stage == AnnotationStage::Start && snap.str(a.name) == "gc.collect#vramscope"
            })
            .count(),
        function_lines: t.category.is_some(),
        phases: &labelled.categories.phases,
        evaluation: &labelled.categories.evaluation,
        categories: &labelled.categories.category,
        named_gradients: labelled.categories.named_gradients(),
        holders: &holders::HolderIndex::new(snap, holder_iterations(t, &iterations)),
        has_gc_marks: snap
            .annotations
            .iter()
            .any(|a| snap.str(a.name).starts_with("gc.collect")),
    };
    let (mut found, held_fix) = findings::analyze(&ctx, &mut sources);
    found.sort_by(|a, b| {
        a.severity
            .cmp(&b.severity)
            .then(b.bytes.cmp(&a.bytes))
            .then(a.title.cmp(&b.title))
    });
    let growth_per_iteration = growth_rate(&iterations);
    let leaks = found
        .iter()
        .filter(|f| f.severity == Severity::Leak)
        .count();
    let others = found.len() - leaks;
    let verdict = if leaks > 0 {
        format!("{leaks} leak(s) found, {} finding(s) in all", found.len())
    } else if t.is_empty() || its.list.is_empty() {
        "no leak can be judged: no iterations were found (see the note)".to_owned()
    } else if complete < 3 {
        format!(
            "no leak can be judged from {complete} complete iteration(s): growth needs at least 3"
        )
    } else if snap.source.truncated {
        format!("no leak found in the {complete} complete iteration(s) before the cut; the rest of the run is not in the file")
    } else if others > 0 {
        format!("no leak found; {others} other finding(s)")
    } else {
        "no leak found".to_owned()
    };
    LeakReport {
        verdict,
        schema_version: LEAKS_SCHEMA_VERSION,
        device,
        iteration_source: its.source.clone(),
        iterations,
        growth_per_iteration,
        leaks_found: found.iter().any(|f| f.severity == Severity::Leak),
        findings: found,
        notes,
        held_fix,
    }
}

fn iteration_stats(its: &Iterations, series: &[u64], initial: u64) -> Vec<IterationStats> {
    its.list
        .iter()
        .map(|it| {
            let before = if it.start == 0 {
                initial
            } else {
                series[it.start - 1]
            };
            let end = series[it.end - 1];
            let (peak_event, peak_bytes) =
                (it.start..it.end)
                    .map(|i| (i, series[i]))
                    .fold(
                        (it.start, before),
                        |best, x| if x.1 > best.1 { x } else { best },
                    );
            IterationStats {
                range: it.clone(),
                start_bytes: before,
                end_bytes: end,
                growth: end as i64 - before as i64,
                peak_bytes,
                peak_event,
            }
        })
        .collect()
}

/// Event ranges `[start, end)` during which the cycle collector ran, from the
/// recorder's `gc.collect` annotations.
fn gc_spans(snap: &Snapshot, device: u32, t: &DeviceTrace) -> Vec<(usize, usize)> {
    if !t.has_time() {
        return Vec::new();
    }
    let at = |time: i64| crate::iterations::event_at(t, time);
    let mut starts: Vec<i64> = Vec::new();
    let mut ends: Vec<i64> = Vec::new();
    for a in &snap.annotations {
        if a.device >= 0 && a.device != device as i64 || !snap.str(a.name).starts_with("gc.collect")
        {
            continue;
        }
        match a.stage {
            AnnotationStage::Start => starts.push(a.time_us),
            AnnotationStage::End => ends.push(a.time_us),
            AnnotationStage::Other => {}
        }
    }
    starts.sort_unstable();
    ends.sort_unstable();
    let mut out: Vec<(usize, usize)> = starts
        .iter()
        .filter_map(|&s| {
            let e = ends[ends.partition_point(|&e| e < s)..].first().copied()?;
            Some((at(s), at(e + 1)))
        })
        .filter(|(s, e)| e > s)
        .collect();
    out.sort_unstable();
    out
}
