//! `vramscope advise`: what to change so that a run fits, or peaks lower,
//! ranked by the peak reserved memory the allocator model predicts for each
//! change.
//!
//! Every change is a transformation of the recorded trace that the model
//! replays: other allocator settings, or edits of the trace's requests (the
//! blocks of a leak freed where its fix frees them, the memory that grows
//! with the batch at half its size, the optimizer state at a quarter or a
//! half). Each answer says how it was predicted: *replayed* on the recorded
//! trace, or *projected* past its end when the recording stops at an
//! out-of-memory error and an earlier iteration gives the rest
//! ([`crate::horizon`]). Where neither can tell whether a change fits, the
//! answer says so instead of "fits". A change is offered only where the
//! trace holds what it acts on; the ones not offered are listed with why.

use serde::Serialize;
use vramscope_analysis::categories::{Category, Labelled, Rule};
use vramscope_analysis::edits::{for_blocks, resolve, Change, ChangeKind, Edits};
use vramscope_analysis::iterations::find_iterations;
use vramscope_analysis::leaks::{find_leaks_with, LeakOptions, Severity};
use vramscope_snapshot::Snapshot;

use crate::error::SimulateError;
use crate::replay::ReplaySetup;
use crate::settings::Settings;
use crate::simulate::{run_once, simulate, SimulateOptions, Simulation};

/// Options of [`advise`]. `Default`: the first device, the capacity from
/// the file (its OOM, else the limit its release-and-retry bursts show,
/// else none: then changes are ranked by peak only).
#[derive(Clone, Debug, Default)]
pub struct AdviseOptions {
    pub device: Option<u32>,
    /// Device memory PyTorch may use, bytes.
    pub capacity: Option<u64>,
    /// The memory fraction the program set, where the file does not say.
    pub fraction: Option<f64>,
}

/// How a prediction was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// The allocator model on the recorded trace with the change applied.
    Replayed,
    /// Replayed, then carried on through the rest of the iteration the
    /// out-of-memory error interrupted, projected from an earlier one.
    Projected,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Replayed => "replayed",
            Method::Projected => "projected",
        }
    }
}

/// What kind of change an answer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeClass {
    /// `PYTORCH_CUDA_ALLOC_CONF`.
    Settings,
    /// A leak or held memory found by `vramscope leaks`, freed.
    FixLeak,
    /// Half the micro-batch, with gradient accumulation.
    HalfBatch,
    /// 8-bit optimizer state.
    OptimizerState8bit,
    /// The optimizer state sharded over two ranks (ZeRO-1).
    ShardOptimizerState,
    /// `foreach=False`: the optimizer updates one parameter at a time.
    ForeachOff,
    /// The live blocks that pin the segments at the failing request,
    /// freed before it (what the search over the model found must go).
    FreeHolders,
}

/// One ranked answer.
#[derive(Clone, Debug, Serialize)]
pub struct Advice {
    pub class: ChangeClass,
    /// The change in one line.
    pub change: String,
    /// The code to write.
    pub code: String,
    /// The memory the change acts on, as recorded (0 for settings).
    pub acts_on_bytes: u64,
    pub acts_on_blocks: u64,
    pub peak_reserved: u64,
    pub peak_allocated: u64,
    /// Against the program as recorded, replayed the same way (positive:
    /// less memory).
    pub saving: i64,
    /// Whether it fits in the capacity; `None` without a capacity, or where
    /// the recording ends at the OOM and nothing can be projected.
    pub fits: Option<bool>,
    pub method: Method,
    /// How the prediction was made, in a sentence.
    pub how: String,
}

/// A change that was not offered, and why.
#[derive(Clone, Debug, Serialize)]
pub struct NotOffered {
    pub change: String,
    pub why: String,
}

/// What `advise` found.
#[derive(Clone, Debug, Serialize)]
pub struct Advising {
    pub device: u32,
    pub capacity: Option<u64>,
    /// The request the file's OOM failed on, if it has one.
    pub oom_request: Option<u64>,
    /// The program as recorded, replayed: the baseline of every saving.
    pub baseline: Advice,
    /// Best first: those that fit, then those that cannot be told, then the
    /// others, each by predicted peak reserved.
    pub advice: Vec<Advice>,
    pub not_offered: Vec<NotOffered>,
    /// One sentence: which change makes it fit, or lowers the peak most.
    pub answer: String,
}

/// A change to evaluate.
struct Candidate {
    class: ChangeClass,
    change: String,
    code: String,
    settings: Settings,
    edits: Option<Edits>,
    how: String,
}

/// Rank the changes that make `snap`'s run fit, or peak lower.
pub fn advise(snap: &Snapshot, opts: &AdviseOptions) -> Result<Advising, SimulateError> {
    let sim = simulate(snap, &sweep_options(opts))?;
    Ok(advise_with(snap, &sim))
}

/// The simulation [`advise`] starts from: the recorded settings and the
/// sweep, on the capacity `opts` gives or the file's.
pub fn sweep_options(opts: &AdviseOptions) -> SimulateOptions {
    SimulateOptions {
        device: opts.device,
        capacity: opts.capacity,
        fraction: opts.fraction,
        sweep: true,
        ..Default::default()
    }
}

/// [`advise`] from a simulation made with [`sweep_options`] (the report
/// has one for its Simulate tab already).
pub fn advise_with(snap: &Snapshot, sim: &Simulation) -> Advising {
    let device = sim.device;
    let recorded = sim.runs[0].settings.clone();
    let labelled = Labelled::new(snap, device);
    let mut not_offered = Vec::new();
    let mut candidates = settings_candidates(sim);
    candidates.extend(must_go_candidate(sim));
    candidates.extend(leak_candidates(snap, device, &labelled, &recorded));
    candidates.extend(category_candidates(
        snap,
        device,
        &labelled,
        &recorded,
        &mut not_offered,
    ));
    not_offered.push(NotOffered {
        change: "activation checkpointing".into(),
        why: "not yet predicted: it needs the module each activation belongs to and when backward remakes it"
            .into(),
    });
    not_offered.push(NotOffered {
        change: "bf16 / fp16 mixed precision".into(),
        why: "a snapshot records sizes, not dtypes: whether the activations are already 16-bit cannot be told"
            .into(),
    });
    let baseline_candidate = Candidate {
        class: ChangeClass::Settings,
        change: "the program as recorded".into(),
        code: String::new(),
        settings: recorded.clone(),
        edits: None,
        how: "the recorded trace replayed under the recorded settings".into(),
    };
    let mut evaluated = std::thread::scope(|scope| {
        let handles: Vec<_> = candidates
            .iter()
            .map(|c| scope.spawn(|| evaluate(snap, sim, c)))
            .collect();
        let baseline = evaluate(snap, sim, &baseline_candidate);
        let rest: Vec<(Advice, u64)> = handles.into_iter().filter_map(|h| h.join().ok()).collect();
        (baseline, rest)
    });
    let (mut baseline, base_peak) = evaluated.0;
    baseline.saving = 0;
    let evaluated = std::mem::take(&mut evaluated.1).into_iter();
    let mut advice: Vec<Advice> = evaluated
        .map(|(mut a, peak)| {
            a.saving = base_peak as i64 - peak as i64;
            a
        })
        // A change that saves nothing and changes no verdict is noise.
        .filter(|a| a.saving > 0 || (a.fits == Some(true) && baseline.fits != Some(true)))
        .collect();
    advice.sort_by_key(|a| {
        let rank = match a.fits {
            Some(true) => 0,
            None => 1,
            Some(false) => 2,
        };
        (rank, a.peak_reserved)
    });
    let answer = answer(&baseline, &advice, sim.capacity);
    Advising {
        device,
        capacity: sim.capacity,
        oom_request: sim.recorded_oom.as_ref().map(|o| o.request),
        baseline,
        advice,
        not_offered,
        answer,
    }
}

/// Replay one candidate; its answer and the peak its saving is measured on.
fn evaluate(snap: &Snapshot, sim: &Simulation, c: &Candidate) -> (Advice, u64) {
    let tail = sim.horizon.as_ref().and_then(|h| h.tail.as_ref());
    let cut_by_oom = sim.recorded_oom.is_some();
    let setup = |capacity| ReplaySetup {
        capacity,
        edits: c.edits.as_ref(),
        cold_start: true,
        ..Default::default()
    };
    let (replayed, projection) = run_once(snap, sim.device, &c.settings, setup(sim.capacity), tail);
    let mut how = c.how.clone();
    let (peak_reserved, peak_allocated, fits, method) = match (&replayed.oom, &projection) {
        (None, Some(p)) => {
            how.push_str(
                ", then through the rest of the interrupted iteration as an earlier one ran",
            );
            (
                p.peak_reserved,
                p.peak_allocated,
                Some(p.oom.is_none()),
                Method::Projected,
            )
        }
        (None, None) => {
            let fits = match (sim.capacity, cut_by_oom) {
                (None, _) => None,
                // Served where the recording stopped, and nothing to say
                // how the rest of the iteration would have gone.
                (Some(_), true) => {
                    how.push_str(
                        "; the recording ends at the out-of-memory error and no earlier iteration shows the rest, \
                         so whether the rest fits cannot be told",
                    );
                    None
                }
                (Some(_), false) => Some(true),
            };
            (
                replayed.simulated_peak_reserved,
                replayed.simulated_peak_allocated,
                fits,
                Method::Replayed,
            )
        }
        (Some(_), _) => {
            // It runs out: its peak without a limit, to rank it.
            let (free, _) = run_once(snap, sim.device, &c.settings, setup(None), None);
            (
                free.simulated_peak_reserved,
                free.simulated_peak_allocated,
                Some(false),
                Method::Replayed,
            )
        }
    };
    let (acts_on_blocks, acts_on_bytes) = c.edits.as_ref().map_or((0, 0), |e| {
        e.matched
            .iter()
            .fold((0, 0), |(n, b), m| (n + m.blocks, b + m.bytes))
    });
    let advice = Advice {
        class: c.class,
        change: c.change.clone(),
        code: c.code.clone(),
        acts_on_bytes,
        acts_on_blocks,
        peak_reserved,
        peak_allocated,
        saving: 0,
        fits,
        method,
        how,
    };
    (advice, peak_reserved)
}

/// The sweep's settings, each as an environment variable to set: those
/// whose replay from the file's segments differs from the recorded
/// settings' (peak reserved or where it runs out). A setting that changes
/// nothing there is not replayed again: it is left out, not claimed.
fn settings_candidates(sim: &Simulation) -> Vec<Candidate> {
    let Some(rec) = sim.runs.first() else {
        return Vec::new();
    };
    let same = |r: &crate::simulate::Run| {
        r.replayed.simulated_peak_reserved == rec.replayed.simulated_peak_reserved
            && r.replayed.oom == rec.replayed.oom
            && r.projection.as_ref().map(|p| (p.peak_reserved, p.oom))
                == rec.projection.as_ref().map(|p| (p.peak_reserved, p.oom))
    };
    sim.runs
        .iter()
        .skip(1)
        .filter(|r| !r.changed && !same(r))
        .map(|r| Candidate {
            class: ChangeClass::Settings,
            change: format!("allocator settings {}", r.label),
            code: format!("PYTORCH_CUDA_ALLOC_CONF={} python train.py", r.label),
            settings: r.settings.clone(),
            edits: None,
            how: format!("the recorded trace replayed under {}", r.label),
        })
        .collect()
}

/// Where no setting serves the failing request: the least of the biggest
/// holders' memory whose absence lets the replay serve it, freed.
fn must_go_candidate(sim: &Simulation) -> Option<Candidate> {
    use vramscope_analysis::units::bytes;
    let m = sim.must_go.iter().find(|m| m.label == "recorded")?;
    let mut edits = Edits::default();
    for b in &m.gone {
        match b.alloc_index {
            Some(i) => {
                edits.drop_alloc.insert(i as usize);
            }
            None => {
                edits.drop_seed.insert(b.addr);
            }
        }
    }
    edits.matched.push(vramscope_analysis::edits::ChangeMatch {
        change: Change {
            site: "the holders at the failing request".into(),
            kind: ChangeKind::Drop,
        },
        sites: m.sites.iter().map(|s| s.site.clone()).collect(),
        blocks: m.blocks as u64,
        bytes: m.bytes,
    });
    let sites: Vec<String> = m
        .sites
        .iter()
        .map(|s| {
            format!(
                "{} at {} ({} block{})",
                bytes(s.bytes),
                s.site,
                s.blocks,
                if s.blocks == 1 { "" } else { "s" }
            )
        })
        .collect();
    let code: Vec<String> = m
        .sites
        .iter()
        .map(|s| format!("del ...  # the tensors made at {} ({}), before the allocation that failed", s.site, bytes(s.bytes)))
        .chain(std::iter::once(
            "# or make the large tensor first, before these: their segments then pin nothing it needs".into(),
        ))
        .collect();
    let recorded = sim.runs.first()?.settings.clone();
    Some(Candidate {
        class: ChangeClass::FreeHolders,
        change: format!("free what pins the segments before the failing request: {}", sites.join(", ")),
        code: code.join("\n"),
        settings: recorded,
        edits: Some(edits),
        how: format!(
            "replayed with these {} block{} gone at the failing request: the least of the biggest holders' memory \
             the search over the model found{}",
            m.blocks,
            if m.blocks == 1 { "" } else { "s" },
            if m.least { " (with one block fewer, it still fails)" } else { "" }
        ),
    })
}

/// Each leak or held memory `vramscope leaks` finds, freed at the end of
/// the phase it was made in (what its fix does).
fn leak_candidates(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    recorded: &Settings,
) -> Vec<Candidate> {
    let opts = LeakOptions {
        read_sources: false,
        ..LeakOptions::default()
    };
    let report = find_leaks_with(snap, device, &opts, labelled);
    report
        .findings
        .iter()
        .filter(|f| f.severity != Severity::Benign && !f.sites.is_empty())
        .filter_map(|f| {
            let changes: Vec<Change> = f
                .sites
                .iter()
                .map(|s| Change {
                    site: s.site.clone(),
                    kind: ChangeKind::FreeEarly,
                })
                .collect();
            let edits = resolve(snap, device, &changes).ok()?;
            (!edits.is_empty()).then(|| Candidate {
                class: ChangeClass::FixLeak,
                change: f.title.clone(),
                code: f.fix.clone(),
                settings: recorded.clone(),
                edits: Some(edits),
                how: format!(
                    "replayed with the blocks of {} freed at the end of the phase that made them",
                    f.sites
                        .iter()
                        .map(|s| s.site.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
        })
        .collect()
}

/// Changes to memory of a kind: the batch, the optimizer state, the
/// optimizer step's temporaries.
fn category_candidates(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    recorded: &Settings,
    not_offered: &mut Vec<NotOffered>,
) -> Vec<Candidate> {
    let l = &labelled.lifetimes;
    let cats = &labelled.categories;
    let blocks_of = |keep: &dyn Fn(usize) -> bool| -> Vec<usize> {
        (0..l.len()).filter(|&b| keep(b)).collect()
    };
    let bytes_of = |v: &[usize]| -> u64 { v.iter().map(|&b| l.size[b]).sum() };
    let mut out = Vec::new();
    let with = |blocks: &[usize], kind: ChangeKind, label: &str| {
        let v: Vec<(usize, ChangeKind)> = blocks.iter().map(|&b| (b, kind.clone())).collect();
        for_blocks(snap, device, l, &v, label)
    };

    let batch = blocks_of(&|b| {
        matches!(
            cats.category.get(b),
            Some(
                Category::Activation
                    | Category::Input
                    | Category::Temporary
                    | Category::AutogradDetail
            )
        )
    });
    let activations = batch
        .iter()
        .filter(|&&b| cats.category.get(b) == Some(&Category::Activation))
        .count();
    if activations == 0 {
        not_offered.push(NotOffered {
            change: "a smaller micro-batch".into(),
            why: "no memory in this trace is labelled activations: nothing shows what grows with the batch".into(),
        });
    } else {
        out.push(Candidate {
            class: ChangeClass::HalfBatch,
            change: "half the micro-batch, with gradient accumulation over 2 steps (the same effective batch)".into(),
            code: "for chunk in batch.chunk(2):\n    loss = loss_fn(model(chunk)) / 2\n    loss.backward()\n\
                   optimizer.step()\noptimizer.zero_grad(set_to_none=True)"
                .into(),
            settings: recorded.clone(),
            edits: Some(with(&batch, ChangeKind::Scale(0.5), "activations, inputs, temporaries, autograd detail")),
            how: format!(
                "replayed with each of the {} activation, input, temporary and autograd-detail blocks ({}) at half \
                 its size: the memory that grows with the batch; parameters, gradients and optimizer state as \
                 recorded",
                batch.len(),
                vramscope_analysis::units::bytes(bytes_of(&batch))
            ),
        });
    }

    let state = blocks_of(&|b| cats.category.get(b) == Some(&Category::OptimizerState));
    if state.is_empty() {
        not_offered.push(NotOffered {
            change: "8-bit or sharded optimizer state".into(),
            why: "no memory in this trace is labelled optimizer state".into(),
        });
    } else {
        let total = vramscope_analysis::units::bytes(bytes_of(&state));
        out.push(Candidate {
            class: ChangeClass::OptimizerState8bit,
            change: "8-bit optimizer state (bitsandbytes)".into(),
            code: "import bitsandbytes as bnb\noptimizer = bnb.optim.AdamW8bit(model.parameters(), lr=lr)".into(),
            settings: recorded.clone(),
            edits: Some(with(&state, ChangeKind::Scale(0.25), "optimizer state")),
            how: format!(
                "replayed with the optimizer state ({total}) at a quarter of its size: 8-bit moments instead of \
                 32-bit ones"
            ),
        });
        out.push(Candidate {
            class: ChangeClass::ShardOptimizerState,
            change: "the optimizer state sharded over 2 ranks (ZeRO-1)".into(),
            code: "from torch.distributed.optim import ZeroRedundancyOptimizer\n\
                   optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=lr)"
                .into(),
            settings: recorded.clone(),
            edits: Some(with(&state, ChangeKind::Scale(0.5), "optimizer state")),
            how: format!(
                "replayed with the optimizer state ({total}) at half its size on each rank (each of 2 ranks keeps \
                 half; 1/N over N)"
            ),
        });
    }

    // The optimizer step's temporaries: with `foreach` (PyTorch's default
    // on CUDA) one per parameter at once; without, one parameter's at a
    // time. Kept: the largest of each iteration's step.
    let step_temps = blocks_of(&|b| cats.rule.get(b) == Some(&Rule::OptimizerFreed));
    let its = find_iterations(snap, device);
    let mut largest: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    for &b in &step_temps {
        let k = its.of_event(l.birth[b] as usize);
        let e = largest.entry(k).or_insert(b);
        if l.size[b] > l.size[*e] {
            *e = b;
        }
    }
    let dropped: Vec<usize> = step_temps
        .iter()
        .copied()
        .filter(|b| !largest.values().any(|k| k == b))
        .collect();
    if dropped.is_empty() {
        not_offered.push(NotOffered {
            change: "foreach=False in the optimizer".into(),
            why: "no optimizer step in this trace allocates more than one temporary".into(),
        });
    } else {
        out.push(Candidate {
            class: ChangeClass::ForeachOff,
            change: "the optimizer without foreach (one parameter at a time)".into(),
            code: "optimizer = torch.optim.AdamW(model.parameters(), lr=lr, foreach=False)".into(),
            settings: recorded.clone(),
            edits: Some(with(&dropped, ChangeKind::Drop, "optimizer step temporaries")),
            how: format!(
                "replayed with the optimizer step's temporaries gone but the largest of each step ({} blocks, {}): \
                 one parameter's at a time; slower steps",
                dropped.len(),
                vramscope_analysis::units::bytes(bytes_of(&dropped))
            ),
        });
    }
    out
}

/// The one sentence at the top.
fn answer(baseline: &Advice, advice: &[Advice], capacity: Option<u64>) -> String {
    use vramscope_analysis::units::bytes;
    let Some(best) = advice.first() else {
        return "No change tried lowers the peak of this run.".into();
    };
    let fitting = advice.iter().filter(|a| a.fits == Some(true)).count();
    match (capacity, baseline.fits) {
        (Some(c), Some(true)) => format!(
            "It fits in {} as recorded; the change that lowers the peak most is {}: {} peak reserved ({} less, {}).",
            bytes(c),
            best.change,
            bytes(best.peak_reserved),
            bytes(best.saving.max(0) as u64),
            best.method.as_str()
        ),
        (Some(c), _) if fitting > 0 => format!(
            "{fitting} of {} changes make it fit in {}; the best is {}: {} peak reserved ({}).",
            advice.len(),
            bytes(c),
            best.change,
            bytes(best.peak_reserved),
            best.method.as_str()
        ),
        (Some(c), _) if best.fits.is_none() => format!(
            "No change tried is shown to fit in {}: {} serve{} the failing request, but the recording ends there and \
             whether the rest of the run fits cannot be told; the lowest peak is with {}: {} ({}).",
            bytes(c),
            advice.iter().filter(|a| a.fits.is_none()).count(),
            if advice.iter().filter(|a| a.fits.is_none()).count() == 1 { "s" } else { "" },
            best.change,
            bytes(best.peak_reserved),
            best.method.as_str()
        ),
        (Some(c), _) => format!(
            "None of the {} changes tried fits in {}; the lowest need is with {}: {} reserved without a limit ({}).",
            advice.len(),
            bytes(c),
            best.change,
            bytes(best.peak_reserved),
            best.method.as_str()
        ),
        (None, _) => format!(
            "The change that lowers the peak most is {}: {} peak reserved ({} less, {}); give --capacity to know \
             what fits.",
            best.change,
            bytes(best.peak_reserved),
            bytes(best.saving.max(0) as u64),
            best.method.as_str()
        ),
    }
}
