//! The rules that label a block from evidence in any snapshot. Each rule is
//! a [`Rule`] so that the report can say why; where no rule applies the
//! block stays `unknown`.
//!
//! Blocks allocated inside the trace, by the phase they were allocated in:
//!
//! | allocated in | freed | label |
//! |---|---|---|
//! | forward | before any other allocation site ran, and before anything made at another site was freed (inside its op) | temporary |
//! | forward | later, or never | activation |
//! | a checkpointed block's forward run again in backward | later | activation (recomputed) |
//! | backward | inside its op | temporary |
//! | backward | in the same backward | autograd detail |
//! | backward | after that backward ended, or never | gradient |
//! | optimizer step | in the same step | temporary |
//! | optimizer step | after it, or never | optimizer state |
//! | other (data loading, …) | after exactly one forward began | input |
//! | model setup (`.to()`, `load_state_dict`, …) | after its setup, or never | parameter |
//!
//! Blocks from before the trace window that live throughout are counted per
//! size against the gradients of one backward (each parameter has one
//! gradient of its size): that many are parameters; the rest of a mirrored
//! size are optimizer state when the optimizer ran in the trace without
//! creating any. In a trace with no backward at all they are the weights of
//! an inference run. Blocks from before the window freed by `zero_grad` are
//! gradients; freed in backward, activations. A live block whose own stack
//! (dumps keep one per block) names a phase takes the label of that phase;
//! one made by model construction or loading (`.to()`, `load_state_dict`,
//! `torch.nn.init`) in a trace without backward is a parameter.

use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::{Action, DeviceTrace, FrameId, Snapshot, StackId};

use super::phases::StackPhases;
use super::{Categories, Category, Phase, Phases, Rule, Source};
use crate::lifetimes::{Lifetimes, BEFORE_WINDOW, NO_BLOCK, STILL_ALIVE};
use vramscope_gpus::allocator::MIN_BLOCK;

/// Sizes compared across allocations and blocks: the caching allocator
/// rounds requests up to 512 bytes, and blocks from before the window carry
/// their rounded size while trace entries carry the request.
pub(super) fn rounded(size: u64) -> u64 {
    size.div_ceil(MIN_BLOCK).saturating_mul(MIN_BLOCK)
}

pub(super) fn infer(
    snap: &Snapshot,
    device: u32,
    t: &DeviceTrace,
    l: &Lifetimes,
    ph: &Phases,
    opts: &super::CategoryOptions,
) -> Categories {
    let n = l.len();
    let mut c = Categories {
        category: vec![Category::Unknown; n],
        source: vec![None; n],
        rule: vec![Rule::NoEvidence; n],
        ..Default::default()
    };
    let given = super::given::given_labels(snap, device, t, l, &mut c, opts);
    let next_other_site = next_other_site(t);
    let next_older_freed = next_older_freed(snap, t, l);
    let mut node_cache: HashMap<vramscope_snapshot::StackId, bool> = HashMap::default();
    let mut data = super::stack_phase::DataStacks::default();
    for (b, &is_given) in given.iter().enumerate() {
        if is_given || l.birth[b] == BEFORE_WINDOW {
            continue;
        }
        let i = l.birth[b] as usize;
        let d = l.death[b];
        let freed = (d != STILL_ALIVE).then_some(d as usize);
        let same_run = freed.is_some_and(|j| ph.same_run(i, j));
        // Stacks tell ops apart in forward and the optimizer (the op's own
        // frame is innermost); in backward only C++ stacks do, through the
        // autograd node (`MmBackward0::apply`): Python stacks show the
        // engine (or nothing) for every op.
        let op_known = match ph.phase[i] {
            Phase::Backward => names_node(snap, t.stack[i], &mut node_cache),
            _ => !t.stack[i].is_none(),
        };
        let within_op =
            op_known && freed.is_some_and(|j| j < next_other_site[i] && j < next_older_freed[i]);
        let (cat, rule) = match ph.phase[i] {
            Phase::Forward if within_op => (Category::Temporary, Rule::WithinOp),
            Phase::Forward if ph.is_recomputation(i) => (Category::Activation, Rule::Recomputed),
            Phase::Forward => (Category::Activation, Rule::ForwardKept),
            Phase::Backward if within_op => (Category::Temporary, Rule::WithinOp),
            Phase::Backward if same_run => (Category::AutogradDetail, Rule::BackwardFreed),
            Phase::Backward => (Category::Gradient, Rule::BackwardKept),
            Phase::Optimizer if same_run => (Category::Temporary, Rule::OptimizerFreed),
            Phase::Optimizer => (Category::OptimizerState, Rule::OptimizerKept),
            Phase::ZeroGrad if within_op => (Category::Temporary, Rule::WithinOp),
            Phase::ZeroGrad => continue,
            Phase::Setup if same_run => continue,
            Phase::Setup => (Category::Parameter, Rule::ModelSetup),
            Phase::Other if data.of(snap, t.stack[i]) => (Category::Input, Rule::DataLoader),
            Phase::Other => {
                // A batch lives through one forward (and its backward) and
                // is freed when the next replaces it; state the program
                // keeps across iterations, or that the trace ends with, is
                // not known to be one.
                let Some(j) = freed else { continue };
                if ph.runs_starting_between(i, j, Phase::Forward) == 1 {
                    (Category::Input, Rule::BeforeForward)
                } else {
                    continue;
                }
            }
        };
        set(&mut c, b, cat, rule);
    }
    // Read from the dump once, for both rules on blocks from before the trace.
    let requested = requested_sizes(snap, device);
    pre_window(snap, l, ph, &given, &requested, &mut c);
    super::persistent::label(snap, t, l, ph, &given, &requested, &mut c);
    super::workspace::label(snap, t, l, ph, &given, &mut c);
    // Last: the EMA's own code in a stack outweighs when it was made.
    super::ema::label(snap, l, &given, &mut c);
    c
}

fn set(c: &mut Categories, b: usize, cat: Category, rule: Rule) {
    c.category[b] = cat;
    c.source[b] = Some(Source::Inferred);
    c.rule[b] = rule;
}

/// Whether a stack names the autograd node that allocated (C++ stacks).
fn names_node(
    snap: &Snapshot,
    s: vramscope_snapshot::StackId,
    cache: &mut HashMap<vramscope_snapshot::StackId, bool>,
) -> bool {
    if s.is_none() {
        return false;
    }
    *cache.entry(s).or_insert_with(|| {
        snap.stacks.get(s).iter().any(|&f| {
            let name = snap.str(snap.frames.get(f).name);
            name.contains("Backward") && name.contains("::apply")
        })
    })
}

/// For each event, the index of the next `alloc` with another stack (or
/// the trace length): a block freed before it was freed inside the op
/// that made it.
fn next_other_site(t: &DeviceTrace) -> Vec<usize> {
    let n = t.len();
    let mut out = vec![n; n];
    let mut next_alloc: Option<usize> = None;
    for i in (0..n).rev() {
        out[i] = match next_alloc {
            None => n,
            Some(k) if t.stack[k] != t.stack[i] => k,
            Some(k) => out[k],
        };
        if t.action[i] == Action::Alloc {
            next_alloc = Some(i);
        }
    }
    out
}

/// For each event, the index of the next `free_completed` of a block made
/// at another site than the run of allocations the event is in (or from
/// before the window), or the trace length. A block alive when such a
/// block is freed has outlived its op: ops free nothing the program made
/// before them, the program does (a model's output let go by `del out`
/// after the layers' outputs, in an inference loop that allocates nothing
/// between). Sites are compared by their Python frames: inside one op,
/// C++ stacks differ from one internal copy to the next (`einsum`'s
/// `_to_copy`s, freed before it returns).
fn next_older_freed(snap: &Snapshot, t: &DeviceTrace, l: &Lifetimes) -> Vec<usize> {
    let mut sites = PythonSites::default();
    let n = t.len();
    let mut out = vec![n; n];
    // The site of the last allocation at or before each event.
    let mut last = u32::MAX;
    let run: Vec<u32> = (0..n)
        .map(|i| {
            if t.action[i] == Action::Alloc {
                last = sites.of(snap, t.stack[i]);
            }
            last
        })
        .collect();
    let mut next = n;
    for k in (0..n).rev() {
        out[k] = next;
        if t.action[k] != Action::FreeCompleted || l.event_block[k] == NO_BLOCK {
            continue;
        }
        let b = l.event_block[k] as usize;
        if l.birth[b] == BEFORE_WINDOW || sites.of(snap, l.stack[b]) != run[k] {
            next = k;
        }
    }
    out
}

/// Stacks interned by their Python frames (the whole stack where it has
/// none: the autograd engine's threads).
#[derive(Default)]
struct PythonSites {
    by_stack: HashMap<StackId, u32>,
    by_frames: HashMap<Vec<FrameId>, u32>,
}

impl PythonSites {
    fn of(&mut self, snap: &Snapshot, s: StackId) -> u32 {
        if let Some(&id) = self.by_stack.get(&s) {
            return id;
        }
        let frames = snap.stacks.get(s);
        let mut python = crate::sites::python_frames(snap, frames);
        if python.is_empty() {
            python = frames.to_vec();
        }
        let fresh = self.by_frames.len() as u32;
        let id = *self.by_frames.entry(python).or_insert(fresh);
        self.by_stack.insert(s, id);
        id
    }
}

/// What was asked for, per live block of `device`'s dump (a large block
/// keeps up to 1 MiB of slack the allocator did not split off, so its size
/// need not be its tensor's), and whether the dump wrote requests at all: a
/// dump whose every request equals its block's size, a multiple of 512
/// bytes, wrote none (PyTorch before 2.1). An allocator that rounds
/// nothing (the CPU recorder's) has exact sizes.
fn requested_sizes(snap: &Snapshot, device: u32) -> (HashMap<u64, u64>, bool) {
    let mut written = false;
    let requested = snap
        .segments
        .iter()
        .filter(|s| s.device == device)
        .flat_map(|s| snap.blocks_of(s))
        .filter(|b| b.state.is_allocated())
        .map(|b| {
            written |= b.requested_size != b.size || b.size % MIN_BLOCK != 0;
            (b.address, b.requested_size)
        })
        .collect();
    (requested, written)
}

/// A size, and whether it is exact (what was asked for) or rounded up to
/// the allocator's 512 bytes.
type SizeKey = (u64, bool);

/// Blocks from before the trace window.
fn pre_window(
    snap: &Snapshot,
    l: &Lifetimes,
    ph: &Phases,
    given: &[bool],
    (requested, requests_written): &(HashMap<u64, u64>, bool),
    c: &mut Categories,
) {
    // Gradients of each size alive at once at most (one per parameter
    // while a step's gradients coexist), and whether the optimizer made any
    // state in the trace.
    // Sizes are compared exactly where the dump says what a block from
    // before the window asked for (a trace's `alloc` carries the request,
    // as the dump's `requested_size` does): a 4-byte step counter and a
    // 256-byte layer norm's state are both 512-byte blocks. Else rounded.
    let mut edges: Vec<(u32, bool, SizeKey)> = Vec::new();
    let mut state_made = false;
    for b in 0..l.len() {
        if l.birth[b] == BEFORE_WINDOW {
            continue;
        }
        match c.category[b] {
            Category::Gradient => {
                for size in [(l.size[b], true), (rounded(l.size[b]), false)] {
                    edges.push((l.birth[b], true, size));
                    if l.death[b] != STILL_ALIVE {
                        edges.push((l.death[b], false, size));
                    }
                }
            }
            Category::OptimizerState => state_made = true,
            _ => {}
        }
    }
    // Deaths before births at the same event: a block freed and one
    // allocated by one event never coexist.
    edges.sort_unstable_by_key(|&(i, born, _)| (i, born));
    let mut alive: HashMap<SizeKey, u64> = HashMap::default();
    let mut grads: HashMap<SizeKey, u64> = HashMap::default();
    for (_, born, size) in edges {
        let a = alive.entry(size).or_insert(0);
        if born {
            *a += 1;
            let g = grads.entry(size).or_insert(0);
            *g = (*g).max(*a);
        } else {
            *a = a.saturating_sub(1);
        }
    }
    let optimizer_ran = ph.phase.contains(&Phase::Optimizer);
    let backward_ran = ph.phase.contains(&Phase::Backward);
    let forward_ran = ph.phase.contains(&Phase::Forward);
    let mut stacks = StackPhases::new(snap);
    // Parameters of each size assigned so far, and the state beside them.
    let size_of = |b: usize| -> SizeKey {
        match requested.get(&l.addr[b]) {
            Some(&r) if *requests_written => (r, true),
            _ => (rounded(l.size[b]), false),
        }
    };
    let mut params: HashMap<SizeKey, u64> = HashMap::default();
    let mut extra: HashMap<SizeKey, u64> = HashMap::default();
    // What the file names already fills the counts: where the recorder
    // tagged the weights, a batch norm's running statistics, as large as
    // its weight and bias, are not taken for parameters.
    for (b, &is_given) in given.iter().enumerate() {
        if is_given && l.birth[b] == BEFORE_WINDOW && l.death[b] == STILL_ALIVE {
            match c.category[b] {
                Category::Parameter => *params.entry(size_of(b)).or_insert(0) += 1,
                Category::OptimizerState => *extra.entry(size_of(b)).or_insert(0) += 1,
                _ => {}
            }
        }
    }
    for (b, &is_given) in given.iter().enumerate() {
        if is_given || l.birth[b] != BEFORE_WINDOW {
            continue;
        }
        // The block's own stack says where it was made: a dump keeps the
        // stack of each live block, and a free repeats its allocation's
        // unless it records where the free happened.
        let freed = l.death[b] != STILL_ALIVE;
        let made_in = if freed && ph.free_time_stacks {
            None
        } else {
            stacks.of(snap, l.stack[b])
        };
        if freed {
            let j = l.death[b] as usize;
            match (made_in, ph.phase.get(j)) {
                (Some(Phase::Optimizer), _) => {
                    set(c, b, Category::OptimizerState, Rule::OptimizerKept)
                }
                (Some(Phase::Backward), Some(Phase::Backward)) => {
                    set(c, b, Category::AutogradDetail, Rule::BackwardFreed)
                }
                (Some(Phase::Backward), _) => set(c, b, Category::Gradient, Rule::BackwardKept),
                (Some(Phase::Forward), _) => set(c, b, Category::Activation, Rule::ForwardKept),
                (_, Some(Phase::ZeroGrad)) => set(c, b, Category::Gradient, Rule::FreedByZeroGrad),
                (None, Some(Phase::Optimizer)) => {
                    set(c, b, Category::OptimizerState, Rule::ReplacedByOptimizer)
                }
                (None, Some(Phase::Backward)) => {
                    set(c, b, Category::Activation, Rule::FreedInBackward)
                }
                _ => {}
            }
            continue;
        }
        // Alive throughout.
        match made_in {
            Some(Phase::Optimizer) => {
                set(c, b, Category::OptimizerState, Rule::OptimizerKept);
                continue;
            }
            Some(Phase::Backward) => {
                set(c, b, Category::Gradient, Rule::BackwardKept);
                continue;
            }
            Some(Phase::Forward) => {
                set(c, b, Category::Activation, Rule::ForwardKept);
                continue;
            }
            Some(Phase::Setup) if !backward_ran => {
                set(c, b, Category::Parameter, Rule::ModelSetup);
                continue;
            }
            _ => {}
        }
        let size = size_of(b);
        let g = grads.get(&size).copied().unwrap_or(0);
        if g > 0 {
            let p = params.entry(size).or_insert(0);
            if *p < g {
                *p += 1;
                set(c, b, Category::Parameter, Rule::MirrorsGradient);
            } else if optimizer_ran && !state_made {
                // Adam keeps two tensors per parameter, momentum SGD one.
                let e = extra.entry(size).or_insert(0);
                if *e < 2 * g {
                    *e += 1;
                    set(c, b, Category::OptimizerState, Rule::MirrorsParameter);
                }
            }
        } else if !backward_ran && forward_ran {
            set(c, b, Category::Parameter, Rule::KeptWithoutBackward);
        }
        if backward_ran && c.category[b] == Category::Unknown {
            // Still unknown, but what is known is said (the category stays
            // `unknown`: no source).
            c.rule[b] = Rule::AliveThroughout;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(rounded(1), 512);
        assert_eq!(rounded(4000), 4096);
        assert_eq!(rounded(4096), 4096);
    }
}
