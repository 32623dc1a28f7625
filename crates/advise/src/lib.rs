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
//! ([`vramscope_simulate::horizon`]). Where neither can tell whether a change fits, the
//! answer says so instead of "fits". A change is offered only where the
//! trace holds what it acts on; the ones not offered are listed with why.
//!
//! This crate chooses how each change is answered (replayed on
//! `vramscope_simulate`'s allocator model, projected, bounded or counted
//! by a rule); the CLI, the Python package and the report's What to do
//! panel only ask it.
//!
//! ```
//! use vramscope_advise::{advise, AdviseOptions};
//! let path = vramscope_testdata::gpu("advise_baseline.pickle");
//! let snap = vramscope_snapshot::load(&path, &Default::default()).unwrap();
//! let opts = AdviseOptions { capacity: Some(3 << 30), ..Default::default() };
//! let advising = advise(&snap, &opts).unwrap();
//! let best = &advising.advice[0];
//! assert!(best.peak_reserved < advising.baseline.peak_reserved);
//! ```

mod batch;
mod block_calls;
mod block_stacks;
mod candidates;
mod checkpoint;
mod checkpoint_switch;
mod counted;
mod ema;
mod foreach;
mod fsdp;
mod lbfgs;
mod leaks;
mod no_grad;
mod page;
mod precision;
mod set_to_none;
mod setup;
mod verdict;

pub use counted::{advise_counted, counted_applies};
pub use page::{page_model, PageAdvice, PageModel, PAGE_ADVICE_MAX_ENTRIES};

use serde::Serialize;
use vramscope_analysis::categories::Labelled;
use vramscope_analysis::iterations::find_iterations;
use vramscope_simulate::edits::Edits;
use vramscope_snapshot::Snapshot;

use candidates::{
    category_candidates, kept_outputs_candidate, must_go_candidate, settings_candidates,
};
use leaks::leak_candidates;
use verdict::{answer, evaluate, rank};

use vramscope_simulate::error::SimulateError;
use vramscope_simulate::settings::Settings;
use vramscope_simulate::simulate::{simulate, SimulateOptions, Simulation};

/// Options of [`advise`]. `Default`: the first device, the capacity from
/// the file (its OOM, else the limit its release-and-retry bursts show,
/// else none: then changes are ranked by peak only).
#[derive(Clone, Debug, Default)]
pub struct AdviseOptions {
    pub device: Option<u32>,
    /// Device memory PyTorch may use, bytes.
    pub capacity: Option<u64>,
    /// The GPU to fit on, by name ([`vramscope_simulate::gpus::gpu_memory`]): its memory
    /// less the CUDA context's, instead of `capacity`.
    pub gpu: Option<String>,
    /// The memory fraction the program set, where the file does not say.
    pub fraction: Option<f64>,
    /// The ranks the sharding rows (ZeRO-1, FSDP) divide over: at least 2;
    /// `None`: [`DEFAULT_RANKS`].
    pub ranks: Option<u32>,
}

/// The ranks the sharding rows divide over unless told.
pub const DEFAULT_RANKS: u32 = 2;

/// How a prediction was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// The allocator model on the recorded trace with the change applied.
    Replayed,
    /// Replayed, then carried on through the rest of the iteration the
    /// out-of-memory error interrupted, projected from an earlier one.
    Projected,
    /// Replayed with what the change allocates given by a documented
    /// formula, where the recorded trace cannot show it (the one-at-a-time
    /// optimizer step's temporaries).
    Rule,
    /// The least the peak can be with the change: replayed with everything
    /// the change could shrink at its smallest, where the trace cannot say
    /// how much of it shrinks (mixed precision: which ops run in 16-bit).
    /// Never a fit; "does not fit" where even its peak allocated is over
    /// the capacity by more than 5% (`verdict::BOUND_MARGIN`).
    Bound,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Replayed => "replayed",
            Method::Projected => "projected",
            Method::Rule => "rule",
            Method::Bound => "bound",
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
    /// Half the batch of the evaluation passes (forwards no backward used)
    /// of a recording that trains.
    HalfEvalBatch,
    /// The evaluation passes under `torch.no_grad()`, where the recorder
    /// saw them run with autograd on.
    NoGradEvaluation,
    /// 8-bit optimizer state.
    OptimizerState8bit,
    /// 8-bit optimizer state in CUDA unified memory (paged).
    PagedOptimizerState8bit,
    /// The optimizer state and step offloaded to the CPU.
    CpuOffload,
    /// The optimizer state sharded over two ranks (ZeRO-1).
    ShardOptimizerState,
    /// Parameters, gradients and optimizer state sharded over two ranks
    /// (FSDP2, ZeRO-3), each repeated block a unit.
    Fsdp,
    /// `foreach=False`: the optimizer updates one parameter at a time.
    ForeachOff,
    /// Activation checkpointing of the model's repeated blocks.
    Checkpoint,
    /// The model, gradients and optimizer state in bf16.
    Bf16Weights,
    /// The forward and loss under `torch.autocast` (bf16 or fp16), fp32
    /// weights kept: a bound.
    MixedPrecision,
    /// `del outputs, loss` at the end of each step: what an iteration
    /// leaves bound to its variables, not kept into the next.
    DeleteOutputs,
    /// The live blocks that pin the segments at the failing request,
    /// freed before it (what the search over the model found must go).
    FreeHolders,
    /// The program's own `torch.cuda.empty_cache()` calls removed.
    KeepCache,
    /// `zero_grad(set_to_none=True)` where the gradients were kept from one
    /// step to the next.
    SetToNone,
    /// `torch.optim.LBFGS(history_size=10)`: fewer pairs of vectors kept.
    ShorterHistory,
    /// `zero_grad()` moved before the forward, where the gradients of the
    /// last step were held through it (`leaks`' `held_gradients`).
    ZeroGradFirst,
    /// The EMA's copy of the weights kept (and updated) on the CPU.
    EmaOffload,
    /// Where the run peaks while it sets up: only what the program keeps
    /// made (a part of a model built whole, a checkpoint loaded to the
    /// CPU), `analysis::setup`.
    SetupTransients,
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
    /// Whether the trace went through a caching allocator (CUDA): each
    /// change is then replayed by the allocator model. False for a
    /// recording without one (the CPU): each peak is the allocated memory
    /// counted with the change applied, and reserved is the same.
    pub caching_allocator: bool,
    pub capacity: Option<u64>,
    /// Where `capacity` comes from when a GPU was named (`--gpu`): its
    /// total less what the program holds outside PyTorch, measured (NVML,
    /// in the recording's device ledger) or the CUDA context as measured
    /// on H100/H200. `None` for a capacity given or read from the file.
    pub capacity_from: Option<String>,
    /// The request the file's OOM failed on, if it has one.
    pub oom_request: Option<u64>,
    /// Where that request was made (`file.py:42 in f`).
    pub oom_site: Option<String>,
    /// The program as recorded, replayed: the baseline of every saving.
    pub baseline: Advice,
    /// Best first: those that fit, then those that cannot be told, then the
    /// others, each by predicted peak reserved.
    pub advice: Vec<Advice>,
    /// Changes tried that lower no peak here (the peak is elsewhere, or
    /// the change costs more than it saves), by predicted peak.
    pub no_gain: Vec<Advice>,
    pub not_offered: Vec<NotOffered>,
    /// One sentence: which change makes it fit, or lowers the peak most.
    pub answer: String,
    /// How far a "fits" holds: the recorded iterations, whether they grew
    /// and that later ones were not recorded (`analysis::reach`; its
    /// sentence ends the answer where something fits).
    pub reach: vramscope_analysis::reach::Reach,
}

/// A change to evaluate.
pub(crate) struct Candidate {
    pub(crate) class: ChangeClass,
    pub(crate) change: String,
    pub(crate) code: String,
    pub(crate) settings: Settings,
    pub(crate) edits: Option<Edits>,
    pub(crate) method: Method,
    pub(crate) how: String,
}

impl Candidate {
    /// The program unchanged: the baseline every saving is measured on.
    fn as_recorded(settings: &Settings, how: &str) -> Candidate {
        Candidate {
            class: ChangeClass::Settings,
            change: "the program as recorded".into(),
            code: String::new(),
            settings: settings.clone(),
            edits: None,
            method: Method::Replayed,
            how: how.into(),
        }
    }
}

/// The program changes, for a replay and a count alike: the leaks fixed,
/// memory of a kind changed, the one-at-a-time optimizer step, the outputs
/// deleted, the blocks checkpointed; those not offered say why.
fn program_candidates(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    blocks: &checkpoint::Blocks,
    recorded: &Settings,
    ranks: u32,
    not_offered: &mut Vec<NotOffered>,
) -> Vec<Candidate> {
    let its = find_iterations(snap, device);
    let gradients = set_to_none::kept_gradients(snap, device, labelled, &its);
    let (mut out, covered) =
        leak_candidates(snap, device, labelled, &its, recorded, gradients.as_ref());
    // A peak while the program sets up: no change to the training reaches it.
    out.extend(setup::setup_candidate(snap, device, labelled, recorded));
    // What evaluation passes run with autograd on keep: their own row, and
    // the half evaluation batch's (which then says to add `no_grad`).
    // (First: of rows that give the same peak, the fix is listed first.)
    let graphs = no_grad::Graphs::new(snap, device, labelled);
    out.extend(no_grad::no_grad_candidate(
        snap,
        device,
        labelled,
        graphs.as_ref(),
        recorded,
    ));
    out.extend(batch::half_batch_candidates(
        snap,
        device,
        labelled,
        &its,
        recorded,
        graphs.as_ref(),
        not_offered,
    ));
    out.extend(category_candidates(
        snap,
        device,
        labelled,
        recorded,
        ranks,
        not_offered,
    ));
    out.extend(lbfgs::shorter_history_candidate(
        snap,
        device,
        labelled,
        recorded,
        not_offered,
    ));
    out.extend(foreach::foreach_candidate(
        snap,
        device,
        labelled,
        &its,
        recorded,
        not_offered,
    ));
    out.extend(kept_outputs_candidate(
        snap,
        device,
        labelled,
        &its,
        recorded,
        not_offered,
    ));
    out.extend(ema::ema_offload_candidate(snap, device, labelled, recorded));
    if let Some(g) = &gradients {
        out.extend(set_to_none::set_to_none_candidate(
            g,
            covered,
            recorded,
            not_offered,
        ));
    }
    out.extend(checkpoint::checkpoint_candidate(
        blocks,
        labelled,
        recorded,
        not_offered,
    ));
    out.extend(fsdp::fsdp_candidate(
        snap,
        device,
        blocks,
        labelled,
        recorded,
        ranks,
        not_offered,
    ));
    out.extend(precision::precision_candidates(
        snap,
        device,
        labelled,
        recorded,
        not_offered,
    ));
    out
}

/// A change not offered, and why: nothing to evaluate.
fn refuse(
    not_offered: &mut Vec<NotOffered>,
    change: &str,
    why: impl Into<String>,
) -> Option<Candidate> {
    not_offered.push(NotOffered {
        change: change.into(),
        why: why.into(),
    });
    None
}

/// Rank the changes that make `snap`'s run fit, or peak lower.
pub fn advise(snap: &Snapshot, opts: &AdviseOptions) -> Result<Advising, SimulateError> {
    let mut opts = opts.clone();
    let ranks = opts.ranks.unwrap_or(DEFAULT_RANKS);
    if ranks < 2 {
        return Err(SimulateError::Ranks(ranks));
    }
    let mut capacity_from = None;
    if let Some(name) = &opts.gpu {
        let (capacity, from) = gpu_capacity(snap, opts.device, name)?;
        opts.capacity = Some(capacity);
        capacity_from = Some(from);
    }
    let mut advising = advise_for(snap, &opts, ranks)?;
    advising.capacity_from = capacity_from;
    Ok(advising)
}

/// What PyTorch can have on the GPU `name` for this program: the GPU's
/// total less the memory this program held outside PyTorch's allocator
/// when it was recorded (the CUDA context, NCCL, other allocators: the
/// device ledger's part for this process, which NVML measured), or less
/// the CUDA context as measured on the H100 and H200 where the recording
/// does not say. Other processes on the recording's GPU do not follow the
/// program to another: they are never subtracted.
fn gpu_capacity(
    snap: &Snapshot,
    device: Option<u32>,
    name: &str,
) -> Result<(u64, String), SimulateError> {
    use vramscope_text::units::bytes;
    let gpu = vramscope_simulate::gpus::gpu_memory(name).map_err(SimulateError::Gpu)?;
    let measured = snap
        .pick_device(device)
        .ok()
        .and_then(|d| vramscope_analysis::ledger::measured_outside(snap, d));
    Ok(match measured {
        Some(mine) => (
            gpu.total.saturating_sub(mine),
            format!(
                "{name}: {} less the {} this program held outside PyTorch when recorded (NVML)",
                bytes(gpu.total),
                bytes(mine)
            ),
        ),
        None => (
            gpu.capacity,
            format!(
                "{name}: {} less {} for the CUDA context as measured on the H100 and H200; \
                 a recording with nvidia-ml-py installed measures this program's own",
                bytes(gpu.total),
                bytes(vramscope_simulate::fit::DEFAULT_OUTSIDE)
            ),
        ),
    })
}

/// [`advise`] once the capacity is known.
fn advise_for(
    snap: &Snapshot,
    opts: &AdviseOptions,
    ranks: u32,
) -> Result<Advising, SimulateError> {
    if let Err(e) = vramscope_simulate::simulate::modelled(snap) {
        // Recorded without a caching allocator (the CPU): the peak is
        // allocated memory, counted with each change applied.
        let device = snap.pick_device(opts.device)?;
        // A CPU run under a limit (`record(cpu_limit=...)`) that ran out
        // says how much it had: the allocation refused and what was free.
        let capacity = opts
            .capacity
            .or_else(|| vramscope_simulate::simulate::oom_capacity(snap, device));
        return match counted_applies(snap, device) {
            true => Ok(advise_counted(
                snap,
                device,
                capacity,
                ranks,
                &Labelled::new(snap, device),
            )),
            false => Err(e),
        };
    }
    let sim = simulate(snap, &sweep_options(opts))?;
    let labelled = Labelled::new(snap, sim.device);
    Ok(advise_with(snap, &sim, &labelled, ranks))
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

/// [`advise`] from a simulation made with [`sweep_options`] and the
/// device's labelled blocks (the report has both already), sharding rows
/// over `ranks`.
pub fn advise_with(snap: &Snapshot, sim: &Simulation, labelled: &Labelled, ranks: u32) -> Advising {
    let device = sim.device;
    let recorded = sim.runs[0].settings.clone();
    let mut not_offered = Vec::new();
    let mut candidates = settings_candidates(sim);
    candidates.extend(must_go_candidate(sim));
    candidates.extend(candidates::keep_cache_candidate(snap, sim, &recorded));
    let blocks = checkpoint::Blocks::new(snap, device, labelled);
    candidates.extend(program_candidates(
        snap,
        device,
        labelled,
        &blocks,
        &recorded,
        ranks,
        &mut not_offered,
    ));
    let baseline_candidate = Candidate::as_recorded(
        &recorded,
        "the recorded trace replayed under the recorded settings",
    );
    let evaluated = std::thread::scope(|scope| {
        let handles: Vec<_> = candidates
            .iter()
            .map(|c| scope.spawn(|| evaluate(snap, sim, c)))
            .collect();
        let baseline = evaluate(snap, sim, &baseline_candidate);
        let rest: Vec<(Advice, u64)> = handles
            .into_iter()
            .map(vramscope_simulate::simulate::joined)
            .collect();
        (baseline, rest)
    });
    let (baseline, mut evaluated) = evaluated;
    evaluated.extend(fewest_blocks(
        &blocks,
        labelled,
        &recorded,
        &baseline,
        &evaluated,
        &|c| evaluate(snap, sim, c),
    ));
    let (baseline, advice, no_gain) = rank(baseline, evaluated);
    let oom_site = sim.recorded_oom.as_ref().and_then(|o| {
        let t = snap.trace(device)?;
        let f = vramscope_analysis::sites::site_frame(snap, *t.stack.get(o.entry)?)?;
        Some(vramscope_analysis::sites::frame_label(snap, f))
    });
    let too_large = sim
        .recorded_oom
        .as_ref()
        .zip(sim.capacity)
        .filter(|(o, c)| o.request > *c)
        .map(|(o, c)| (o.request, c));
    let answer = match too_large {
        // No change to the rest of the run can help: say so first.
        Some((request, c)) => {
            use vramscope_text::units::bytes;
            format!(
                "The failing request alone ({}) is larger than the {} PyTorch can have: no change to the rest of the run \
                 makes it fit; that tensor{} must shrink by at least {} (a smaller batch, sequence or dtype) or be split.",
                bytes(request),
                bytes(c),
                oom_site.as_ref().map(|s| format!(", made at {s},")).unwrap_or_default(),
                bytes(request - c)
            )
        }
        None => answer(&baseline, &advice, sim.capacity, "peak reserved"),
    };
    let reach = sim.reach(snap);
    let answer = verdict::with_reach(answer, &baseline, &advice, &reach);
    Advising {
        device,
        caching_allocator: true,
        capacity: sim.capacity,
        capacity_from: None,
        oom_request: sim.recorded_oom.as_ref().map(|o| o.request),
        oom_site,
        baseline,
        advice,
        no_gain,
        not_offered,
        answer,
        reach,
    }
}

/// The fewest repeated blocks to checkpoint, where every block wrapped
/// fits and the run as recorded does not (`checkpoint::fewest_that_fit`).
fn fewest_blocks(
    blocks: &checkpoint::Blocks,
    labelled: &Labelled,
    recorded: &Settings,
    baseline: &(Advice, u64),
    evaluated: &[(Advice, u64)],
    eval: &dyn Fn(&Candidate) -> (Advice, u64),
) -> Option<(Advice, u64)> {
    let every_fits = evaluated
        .iter()
        .any(|(a, _)| a.class == ChangeClass::Checkpoint && a.fits == Some(true));
    if !every_fits || baseline.0.fits == Some(true) {
        return None;
    }
    checkpoint::fewest_that_fit(blocks, labelled, recorded, eval)
}
