//! What the memory *is*: every block labelled parameter, gradient,
//! optimizer state, activation, input, temporary, autograd detail or
//! unknown (the Memory Profiler's categories), with where the label came
//! from, best first:
//!
//! 1. **Recorder tags**: `category=…` in an event's `user_metadata`, written
//!    by vramscope's recorder, which knows the parameters, their `.grad` and
//!    the optimizer's state.
//! 2. **Profiler labels**: the `category` of snapshots built from a profiler
//!    run or read from a profiler's memory timeline.
//! 3. **Inference** (`infer`) for any other snapshot, from the phase each
//!    block was allocated and freed in ([`phases`]) and from sizes mirrored
//!    between parameters and gradients; `unknown` where the evidence is not
//!    there.
//!
//! ```no_run
//! use vramscope_analysis::categories::{categorize, Category};
//! use vramscope_analysis::lifetimes::Lifetimes;
//! let snap = vramscope_snapshot::load("snap.pickle".as_ref(), &Default::default())?;
//! let l = Lifetimes::new(&snap, 0);
//! let c = categorize(&snap, 0, &l);
//! let grads: u64 = (0..l.len())
//!     .filter(|&b| c.category[b] == Category::Gradient && l.death[b] == u32::MAX)
//!     .map(|b| l.size[b])
//!     .sum();
//! println!("gradients alive at the end: {grads} bytes");
//! # Ok::<(), vramscope_snapshot::SnapshotError>(())
//! ```

mod agreement;
mod ema;
pub mod evaluation;
pub mod evaluation_graphs;
mod given;
mod infer;
mod persistent;
pub mod phases;
pub mod recompute;
mod stack_phase;
mod view;
mod workspace;

pub use agreement::{agreement, Agreement, ConfusionCell, Shares};
pub use ema::ema_library;
pub use view::{category_view, CategoryView, RuleBytes};

use serde::Serialize;
use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::{DeviceTrace, Snapshot};

use crate::lifetimes::{Lifetimes, BEFORE_WINDOW, NO_BLOCK};
use crate::liveness::LiveBlock;
pub use phases::{Phase, Phases};

/// The Memory Profiler's categories (`torch.profiler._memory_profiler.Category`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum Category {
    Parameter,
    Gradient,
    OptimizerState,
    Activation,
    Input,
    Temporary,
    AutogradDetail,
    /// Library buffers that are not tensors: cuBLAS / cuBLASLt workspaces,
    /// made once per thread and stream and never freed.
    Workspace,
    /// A copy of the weights kept by an exponential moving average
    /// (diffusers' `EMAModel`, timm's `ModelEma`, `AveragedModel`), named
    /// by the EMA class's code in its stack.
    Ema,
    Unknown,
}

/// How many categories there are (the length of per-category arrays).
pub const CATEGORIES: usize = Category::ALL.len();

impl Category {
    pub const ALL: [Category; 10] = [
        Category::Parameter,
        Category::Gradient,
        Category::OptimizerState,
        Category::Activation,
        Category::Input,
        Category::Temporary,
        Category::AutogradDetail,
        Category::Workspace,
        Category::Ema,
        Category::Unknown,
    ];

    /// The Memory Profiler's name (lower case, as profiler-built snapshots
    /// and `export_memory_timeline` write it).
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Parameter => "parameter",
            Category::Gradient => "gradient",
            Category::OptimizerState => "optimizer_state",
            Category::Activation => "activation",
            Category::Input => "input",
            Category::Temporary => "temporary",
            Category::AutogradDetail => "autograd_detail",
            Category::Workspace => "workspace",
            Category::Ema => "ema",
            Category::Unknown => "unknown",
        }
    }

    /// Read a category name (any case); anything else is `None`.
    pub fn parse(s: &str) -> Option<Category> {
        let s = s.trim().to_ascii_lowercase();
        Category::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// Plural label for text output.
    pub fn label(self) -> &'static str {
        match self {
            Category::Parameter => "parameters",
            Category::Gradient => "gradients",
            Category::OptimizerState => "optimizer state",
            Category::Activation => "activations",
            Category::Input => "inputs",
            Category::Temporary => "temporaries",
            Category::AutogradDetail => "autograd detail",
            Category::Workspace => "workspaces",
            Category::Ema => "EMA weights",
            Category::Unknown => "unknown",
        }
    }
}

/// Where a block's label came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// vramscope's recorder tagged the tensor while the program ran.
    Recorder,
    /// The Memory Profiler labelled it.
    Profiler,
    /// Inferred from phases, lifetimes and sizes.
    Inferred,
}

/// The rule that gave an inferred label (the evidence, for the report).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// Labelled by the recorder or the profiler, not inferred.
    Given,
    /// Allocated in the forward pass and kept past the op that made it.
    ForwardKept,
    /// Allocated by a checkpointed block's forward run again inside
    /// backward (`torch.utils.checkpoint`'s recomputation), kept past its op.
    Recomputed,
    /// Allocated and freed with no other allocation site in between (inside one op).
    WithinOp,
    /// Allocated in backward and alive after that backward ended.
    BackwardKept,
    /// Allocated and freed inside the same backward.
    BackwardFreed,
    /// Allocated in the optimizer step and kept after it.
    OptimizerKept,
    /// Allocated and freed inside the same optimizer step.
    OptimizerFreed,
    /// Allocated outside forward, backward and the optimizer, and used by a
    /// later forward or backward (the batch moved to the device).
    BeforeForward,
    /// Made by PyTorch's DataLoader (its stack passes through
    /// `torch/utils/data/`): a batch, however long it lives (a loader that
    /// fetches one ahead keeps two).
    DataLoader,
    /// From before the trace, alive throughout, with the size of a gradient.
    MirrorsGradient,
    /// From before the trace, alive throughout, beyond the parameters of its
    /// size, in a run whose optimizer state was created before the trace.
    MirrorsParameter,
    /// From before the trace, alive throughout, in a trace with no backward
    /// (the weights of an inference run).
    KeptWithoutBackward,
    /// From before the trace, alive throughout, made by model construction
    /// or loading, in a trace without backward.
    ModelSetup,
    /// From before the trace, freed by `zero_grad`.
    FreedByZeroGrad,
    /// From before the trace, freed by the optimizer step (state it replaced).
    ReplacedByOptimizer,
    /// From before the trace, freed in backward (saved by an earlier forward).
    FreedInBackward,
    /// Named by its C++ frames: a cuBLAS / cuBLASLt workspace
    /// (`at::cuda::setWorkspaceForHandle`, `getCUDABlasLtWorkspace`).
    WorkspaceFrames,
    /// Never freed, made in the first forward or backward of its thread
    /// with the size of a cuBLAS (or cuBLASLt) workspace, and alive
    /// through later ones.
    WorkspaceSize,
    /// From before the trace, alive throughout a training trace, and no
    /// rule says what it is (category `unknown`): frozen weights, an EMA's
    /// copy of the weights made before the recording (no stack), buffers,
    /// gradients kept across steps (`zero_grad(set_to_none=False)`, which
    /// allocates none in the trace; DDP's gradient buckets), state the
    /// program keeps.
    AliveThroughout,
    /// From before the trace, alive throughout a training trace that made
    /// no gradient: as many blocks of its size as parameters of that size
    /// (counted by their incoming gradients in one backward) times a
    /// parameter, its gradient kept across steps and the optimizer's state;
    /// which block of the size is which is not known.
    CountedPerParameter,
    /// Made by an EMA class's code (its stack passes through diffusers'
    /// `EMAModel`, timm's `ModelEma`, PyTorch's `AveragedModel`, torch_ema
    /// or ema_pytorch making the copy): a moving average of the weights.
    EmaFrames,
    /// Made and freed by an EMA's update (`EMAModel.step`, timm's `update`,
    /// `AveragedModel.update_parameters`): a temporary.
    EmaUpdate,
    /// No rule applies.
    NoEvidence,
}

impl Rule {
    /// What the rule means, in a few words (the report's and the text's
    /// evidence column).
    pub fn describe(self) -> &'static str {
        match self {
            Rule::Given => "labelled in the file",
            Rule::ForwardKept => "allocated in the forward pass, kept past its op",
            Rule::Recomputed => "recomputed in backward for a checkpointed block",
            Rule::WithinOp => "allocated and freed inside one op",
            Rule::BackwardKept => "allocated in backward, alive after it",
            Rule::BackwardFreed => "allocated and freed in the same backward",
            Rule::OptimizerKept => "allocated by the optimizer step, kept after it",
            Rule::OptimizerFreed => "allocated and freed inside one optimizer step",
            Rule::BeforeForward => "made before a forward that used it, freed after",
            Rule::DataLoader => "made by PyTorch's DataLoader: a batch",
            Rule::MirrorsGradient => "from before the trace, the size of a gradient",
            Rule::MirrorsParameter => "from before the trace, beside parameters of its size",
            Rule::KeptWithoutBackward => {
                "from before the trace, alive throughout an inference run (weights, or a reused batch)"
            }
            Rule::ModelSetup => "made by model construction or loading",
            Rule::FreedByZeroGrad => "from before the trace, freed by zero_grad",
            Rule::ReplacedByOptimizer => "from before the trace, replaced by the optimizer step",
            Rule::FreedInBackward => "from before the trace, freed in backward",
            Rule::WorkspaceFrames => "a cuBLAS workspace, named by its C++ frames",
            Rule::WorkspaceSize => {
                "never freed, the size of a cuBLAS workspace, made by the first matmul of its thread"
            }
            Rule::AliveThroughout => {
                "from before the trace, alive throughout, nothing in it says what: frozen weights, an EMA of the weights made before the recording, buffers, gradients kept across steps (set_to_none=False, DDP's buckets), state the program keeps"
            }
            Rule::CountedPerParameter => {
                "from before the trace, counted by size: a parameter, its gradient kept across steps, its optimizer state (which block is which, the trace cannot tell)"
            }
            Rule::EmaFrames => {
                "made by an EMA's code (diffusers' EMAModel, timm's ModelEma, AveragedModel, torch_ema, ema_pytorch): a moving average of the weights"
            }
            Rule::EmaUpdate => "made and freed by an EMA's update (EMAModel.step, update_parameters)",
            Rule::NoEvidence => "no rule applies",
        }
    }
}

impl Source {
    /// Where a label came from, in a word or two; `-` for none.
    pub fn describe(s: Option<Source>) -> &'static str {
        match s {
            Some(Source::Recorder) => "recorder tag",
            Some(Source::Profiler) => "Memory Profiler",
            Some(Source::Inferred) => "inferred",
            None => "-",
        }
    }
}

/// The label of every block of a [`Lifetimes`], as columns.
#[derive(Debug, Default)]
pub struct Categories {
    pub category: Vec<Category>,
    /// `None` for `unknown` without evidence.
    pub source: Vec<Option<Source>>,
    pub rule: Vec<Rule>,
    /// Phases of the trace's events (empty without a trace).
    pub phases: Phases,
    /// The evaluation passes of a recording that trains.
    pub evaluation: evaluation::Evaluation,
    /// Blocks from before the trace window, by address.
    pre_window: HashMap<u64, u32>,
}

/// The gradients an optimizer steps on, where vramscope's recorder named
/// them: per block, whether it is one (`None`: the recording names none,
/// and a gradient is what its category says). The recorder names each
/// parameter's gradient at every optimizer step; a block the backward made
/// and kept that it never named is no parameter's: the gradient of an input
/// made with `requires_grad_()` (a WGAN-GP's interpolated points, kept by
/// a list of critic costs), which no `zero_grad()` frees and no
/// `set_to_none` changes.
pub fn named_gradients(category: &[Category], source: &[Option<Source>]) -> Option<Vec<bool>> {
    let named: Vec<bool> = category
        .iter()
        .zip(source)
        .map(|(c, s)| *c == Category::Gradient && *s == Some(Source::Recorder))
        .collect();
    named.contains(&true).then_some(named)
}

/// Options of [`categorize_with`]. `Default` gives the documented defaults.
#[derive(Clone, Debug)]
pub struct CategoryOptions {
    /// Use the Memory Profiler's labels where the file has them. Default
    /// true; false infers those blocks too (to measure inference against
    /// the profiler).
    pub use_profiler_labels: bool,
    /// Use vramscope's recorder tags where the file has them. Default true.
    pub use_recorder_tags: bool,
}

impl Default for CategoryOptions {
    fn default() -> Self {
        CategoryOptions {
            use_profiler_labels: true,
            use_recorder_tags: true,
        }
    }
}

impl CategoryOptions {
    /// Inference alone: no label from the file.
    pub fn inference_only() -> Self {
        CategoryOptions {
            use_profiler_labels: false,
            use_recorder_tags: false,
        }
    }
}

/// Label every block of `device`'s trace.
pub fn categorize(snap: &Snapshot, device: u32, l: &Lifetimes) -> Categories {
    categorize_with(snap, device, l, &CategoryOptions::default())
}

/// [`categorize`] with options.
pub fn categorize_with(
    snap: &Snapshot,
    device: u32,
    l: &Lifetimes,
    opts: &CategoryOptions,
) -> Categories {
    let empty = DeviceTrace::default();
    let t = snap.trace(device).unwrap_or(&empty);
    categorize_phased(snap, device, l, Phases::new(snap, t), opts)
}

/// [`categorize_with`] with the trace's phases found by the caller (on
/// another thread: they need the trace alone, not the lifetimes).
pub fn categorize_phased(
    snap: &Snapshot,
    device: u32,
    l: &Lifetimes,
    phases: Phases,
    opts: &CategoryOptions,
) -> Categories {
    let empty = DeviceTrace::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let mut c = infer::infer(snap, device, t, l, &phases, opts);
    c.pre_window = (0..l.len())
        .filter(|&b| l.birth[b] == BEFORE_WINDOW)
        .map(|b| (l.addr[b], b as u32))
        .collect();
    c.evaluation = evaluation::Evaluation::new(snap, t, &phases, l);
    c.phases = phases;
    c
}

/// One device's block lifetimes with their labels: what the summary, the
/// leak analysis and the report all need, computed once and shared.
pub struct Labelled {
    pub lifetimes: Lifetimes,
    pub categories: Categories,
}

impl Labelled {
    pub fn new(snap: &Snapshot, device: u32) -> Labelled {
        let lifetimes = Lifetimes::new(snap, device);
        let categories = categorize(snap, device, &lifetimes);
        Labelled {
            lifetimes,
            categories,
        }
    }

    /// [`Labelled::new`] from lifetimes and phases made by the caller (the
    /// two need only the trace: they can be found at once).
    pub fn from_parts(
        snap: &Snapshot,
        device: u32,
        lifetimes: Lifetimes,
        phases: Phases,
    ) -> Labelled {
        let categories = categorize_phased(
            snap,
            device,
            &lifetimes,
            phases,
            &CategoryOptions::default(),
        );
        Labelled {
            lifetimes,
            categories,
        }
    }

    /// Bytes per category of `live` (see [`Categories::totals`]).
    pub fn totals(&self, live: &[LiveBlock]) -> Vec<CategoryTotal> {
        self.categories.totals(&self.lifetimes, live)
    }
}

/// Bytes of one category at a moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CategoryTotal {
    pub category: Category,
    pub bytes: u64,
    pub blocks: u64,
    /// Where most of these bytes' labels came from (`null`: unknown, no evidence).
    pub source: Option<Source>,
}

impl Categories {
    /// [`named_gradients`] of these blocks.
    pub fn named_gradients(&self) -> Option<Vec<bool>> {
        named_gradients(&self.category, &self.source)
    }

    /// The block a live block of the liveness walk is (by its `alloc` event, or by
    /// address for blocks from before the window).
    pub fn block_of(&self, l: &Lifetimes, b: &LiveBlock) -> Option<usize> {
        match b.alloc_index {
            Some(i) => l
                .event_block
                .get(i as usize)
                .filter(|&&k| k != NO_BLOCK)
                .map(|&k| k as usize),
            None => self.pre_window.get(&b.addr).map(|&k| k as usize),
        }
    }

    /// Bytes per category of `live`, largest first.
    pub fn totals(&self, l: &Lifetimes, live: &[LiveBlock]) -> Vec<CategoryTotal> {
        let mut bytes = [0u64; CATEGORIES];
        let mut blocks = [0u64; CATEGORIES];
        // Bytes per (category, source): the source shown is the one that
        // labelled most of a category's bytes.
        let mut by_source = [[0u64; 4]; CATEGORIES];
        for b in live {
            let (cat, src) = match self.block_of(l, b) {
                Some(k) => (self.category[k], self.source[k]),
                None => (Category::Unknown, None),
            };
            bytes[cat as usize] += b.size;
            blocks[cat as usize] += 1;
            by_source[cat as usize][src.map_or(3, |s| s as usize)] += b.size;
        }
        let sources = [
            Some(Source::Recorder),
            Some(Source::Profiler),
            Some(Source::Inferred),
            None,
        ];
        let mut v: Vec<CategoryTotal> = Category::ALL
            .into_iter()
            .filter(|c| blocks[*c as usize] > 0)
            .map(|c| {
                let s = &by_source[c as usize];
                let best = (0..4).max_by_key(|&k| (s[k], 3 - k)).unwrap_or(3);
                CategoryTotal {
                    category: c,
                    bytes: bytes[c as usize],
                    blocks: blocks[c as usize],
                    source: sources[best],
                }
            })
            .collect();
        v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.category.cmp(&b.category)));
        v
    }
}
