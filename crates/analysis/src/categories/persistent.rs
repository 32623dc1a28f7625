//! Model state a training trace makes none of: gradients kept across steps.
//!
//! With `zero_grad(set_to_none=False)` (and DDP's `gradient_as_bucket_view`,
//! static gradients for CUDA graphs) no gradient is allocated in the trace:
//! backward adds into the `.grad` tensors made before it, and the optimizer
//! updates its state in place. The parameters then have no gradient of
//! their size to be told by ([`Rule::MirrorsGradient`]), and the
//! parameters, gradients and optimizer state are blocks from before the
//! trace, alive throughout, of the same sizes.
//!
//! They can still be counted. Each backward makes every parameter's
//! incoming gradient and frees it once added into `.grad` (`AccumulateGrad`):
//! in one backward, at least as many blocks of a size are made and freed as
//! there are parameters of that size. The optimizer names itself in the
//! stacks of its step (`torch/optim/adam.py`): Adam-like ones keep two
//! tensors per parameter, SGD with momentum and Adagrad one. Where the
//! blocks of a size divide into groups of (1 + 1 + state), they are the
//! parameters, their gradients and their state; of (1 + state), the
//! gradients live elsewhere (DDP's buckets). Which block of a size is which
//! nothing tells: the bytes per category are right, and the rule says so
//! ([`Rule::CountedPerParameter`]). A size whose count fits neither (a
//! batch norm's running statistics beside its weights) is not counted; and
//! unless the counted sizes hold nine tenths of the bytes in question, none
//! is labelled, since a part would read as the model's whole.

use vramscope_snapshot::hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use vramscope_snapshot::{Action, DeviceTrace, Snapshot};

use super::{Categories, Category, Phase, Phases, Rule, Source};
use crate::lifetimes::{Lifetimes, BEFORE_WINDOW, STILL_ALIVE};
use crate::sites::frame_location;

/// The smallest size counted (see [`label`]).
const MIN_SIZE: u64 = 64;

/// `requested`: what each live block of the dump asked for, and whether
/// the dump wrote requests at all (`infer::requested_sizes`).
pub(super) fn label(
    snap: &Snapshot,
    t: &DeviceTrace,
    l: &Lifetimes,
    ph: &Phases,
    given: &[bool],
    (requested, exact): &(HashMap<u64, u64>, bool),
    c: &mut Categories,
) {
    // Only where no gradient was found: otherwise the mirror rules decided.
    if c.category.contains(&Category::Gradient) {
        return;
    }
    // The first backward whose forward is in the trace: a trace that
    // begins inside a backward has only part of it.
    let first_forward = ph.phase.iter().position(|&p| p == Phase::Forward);
    let Some(first_backward) =
        first_forward.and_then(|f| (f..ph.phase.len()).find(|&i| ph.phase[i] == Phase::Backward))
    else {
        return;
    };
    let Some(state) = state_per_parameter(snap, t, ph) else {
        return;
    };
    if !exact {
        return;
    }
    // Incoming gradients per size, in the first backward.
    let mut incoming: HashMap<u64, u64> = HashMap::default();
    for b in 0..l.len() {
        if l.birth[b] != BEFORE_WINDOW
            && c.rule[b] == Rule::BackwardFreed
            && ph.same_run(first_backward, l.birth[b] as usize)
        {
            *incoming.entry(l.size[b]).or_insert(0) += 1;
        }
    }
    let mut held: HashMap<u64, Vec<usize>> = HashMap::default();
    for (b, &is_given) in given.iter().enumerate() {
        if is_given
            || l.birth[b] != BEFORE_WINDOW
            || l.death[b] != STILL_ALIVE
            || c.category[b] != Category::Unknown
        {
            continue;
        }
        if let Some(&size) = requested.get(&l.addr[b]) {
            held.entry(size).or_default().push(b);
        }
    }
    // Gradients kept with the parameters, or elsewhere: whichever reading
    // accounts for more of these bytes. A size counts where its blocks
    // divide into groups of that many, no more groups than one backward
    // made gradients of its size (a kernel may make more than one: oneDNN's
    // convolutions do). Scalars are left out: Adam's step counters, where
    // they are on the device (fused, capturable), are one per parameter too.
    let total: u64 = held.iter().map(|(size, b)| size * b.len() as u64).sum();
    // The sizes that fit groups of `per`, and the bytes they hold.
    let reading = |per: u64| -> (Vec<(u64, u64)>, u64) {
        let fitted: Vec<(u64, u64)> = held
            .iter()
            .filter_map(|(&size, b)| {
                let n = b.len() as u64;
                let k = n / per;
                let made = *incoming.get(&size)?;
                (size >= MIN_SIZE && n.is_multiple_of(per) && k > 0 && made >= k)
                    .then_some((size, k))
            })
            .collect();
        let bytes = fitted.iter().map(|(size, k)| size * k * per).sum();
        (fitted, bytes)
    };
    let ((with, with_bytes), (without, without_bytes)) = (reading(2 + state), reading(1 + state));
    let (fitted, grads_kept, bytes) = if with_bytes >= without_bytes {
        (with, true, with_bytes)
    } else {
        (without, false, without_bytes)
    };
    // Counted sizes that leave a tenth of these bytes unknown would make a
    // total a reader takes for the model's: all or nothing.
    if total == 0 || bytes * 10 < total * 9 {
        return;
    }
    for (size, k) in fitted {
        let grads = if grads_kept { k } else { 0 };
        let Some(blocks) = held.remove(&size) else {
            continue;
        };
        for (j, b) in blocks.into_iter().enumerate() {
            let j = j as u64;
            c.category[b] = if j < k {
                Category::Parameter
            } else if j < k + grads {
                Category::Gradient
            } else {
                Category::OptimizerState
            };
            c.source[b] = Some(Source::Inferred);
            c.rule[b] = Rule::CountedPerParameter;
        }
    }
}

/// Tensors the optimizer keeps per parameter, from the file its step's
/// stacks name most (`torch/optim/adamw.py`); `None` for an optimizer not
/// known here, or none in the trace.
fn state_per_parameter(snap: &Snapshot, t: &DeviceTrace, ph: &Phases) -> Option<u64> {
    let mut seen: HashSet<vramscope_snapshot::StackId> = HashSet::default();
    let mut files: HashMap<String, usize> = HashMap::default();
    for i in 0..t.len() {
        if ph.phase[i] != Phase::Optimizer || t.action[i] != Action::Alloc {
            continue;
        }
        if !seen.insert(t.stack[i]) {
            continue;
        }
        for &f in snap.stacks.get(t.stack[i]) {
            let (file, _, _) = frame_location(snap, snap.frames.get(f));
            let file = file.replace('\\', "/");
            if let Some(rest) = file.rsplit_once("torch/optim/").map(|(_, r)| r) {
                let name = rest.trim_end_matches(".py");
                if !matches!(name, "optimizer" | "lr_scheduler" | "_functional") {
                    *files.entry(name.to_owned()).or_insert(0) += 1;
                }
            }
        }
    }
    let (name, _) = files
        .into_iter()
        .max_by_key(|(n, count)| (*count, n.clone()))?;
    match name.as_str() {
        "adam" | "adamw" | "nadam" | "radam" | "adamax" => Some(2),
        "sgd" | "adagrad" => Some(1),
        _ => None,
    }
}
