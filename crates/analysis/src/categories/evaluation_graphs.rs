//! What an evaluation forward run with autograd on keeps for a backward
//! that never comes.
//!
//! With autograd on, every tensor an operation saves for backward (a
//! ReLU's output, a linear layer's input, a softmax's result) stays
//! allocated until the output that holds the graph is dropped. A
//! validation loop that binds its output (`output = model(data)`) drops it
//! when the next batch's output is bound, after that batch's forward: two
//! batches' graphs are alive at once, and the last batch's through
//! whatever follows the pass (the next training steps). Under
//! `torch.no_grad()` each of those tensors is freed as soon as the program
//! lets go of it: the layer after the one that made it has made its own
//! output.
//!
//! The recorder says which outermost module calls ran with autograd on
//! (`Evaluation::grad_calls`). Inside an evaluation pass, each such call,
//! and each stretch between two of them (the loss computed from the
//! output, which saves its own tensors), is a segment. The blocks a
//! segment makes that outlive it, other than inputs and the model's own
//! (parameters, gradients, optimizer state), are what the graph keeps,
//! all but the last one made, which is what the segment returns (the
//! output, the loss) and is kept as the program keeps it, and but those
//! the recorder saw the call return (a model in eval mode: its output's
//! tensors, a key/value cache among them, named `output`). Without the
//! graph, each would be freed once the next of them is made: the next
//! layer's output computed, the program's variable rebound to it. Where a
//! model in training mode returns more than its last tensor (a key/value
//! cache), or keeps tensors of its own beyond the call, that frees them
//! too early: the replay that uses this says so.

use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::{Action, Snapshot};

use super::evaluation::Evaluation;
use super::given::tagged_category_name;
use super::Category;
use crate::lifetimes::{Lifetimes, BEFORE_WINDOW, STILL_ALIVE};

/// The blocks the graphs of evaluation forwards keep: each with the event
/// after which it would be freed without autograd, in block order.
pub fn kept_by_graphs(
    snap: &Snapshot,
    device: u32,
    ev: &Evaluation,
    l: &Lifetimes,
    category: &[Category],
) -> Vec<(usize, usize)> {
    graph_frees(snap, device, ev, l, category).kept
}

/// What the graphs of evaluation forwards keep, from one reading of the
/// passes: each (block, the event after which it would be freed).
#[derive(Debug, Default)]
pub struct GraphFrees {
    /// What the graphs keep beyond the call or loss that made it, freed
    /// once the next of them is made, as without autograd; in block order.
    pub kept: Vec<(usize, usize)>,
    /// What `kept` keeps as recorded, the output of each segment (a call's
    /// result, a loss) that outlives the next segment's, freed once that
    /// next output is made, in block order. That is what `torch.no_grad()`
    /// does where each call's output is the next call's input and the
    /// variable is rebound (`h = layer(h)` over the layers, a `predict`
    /// that runs them itself: pytorch/examples' Forward-Forward MNIST,
    /// where the graph, not the program, kept each layer's output to the
    /// end of the pass); where the program keeps an output itself (an
    /// encoder's output for every decoder call, a list of predictions) it
    /// is freed too early. So it bounds the change from below: the real
    /// peak lies between this and keeping them.
    pub outputs: Vec<(usize, usize)>,
}

/// [`GraphFrees`] of `device`'s evaluation passes (empty where none ran
/// a call with autograd on).
pub fn graph_frees(
    snap: &Snapshot,
    device: u32,
    ev: &Evaluation,
    l: &Lifetimes,
    category: &[Category],
) -> GraphFrees {
    let Some((kept, returned)) = kept_by_segment(snap, device, ev, l, category) else {
        return GraphFrees::default();
    };
    let not_returned = |b: usize| returned.binary_search(&b).is_err();
    // Each segment's last kept block: its output.
    let outputs: Vec<(usize, u32, usize)> = kept
        .iter()
        .enumerate()
        .filter(|&(i, k)| kept.get(i + 1).is_none_or(|n| n.0 != k.0))
        .map(|(_, &k)| k)
        .collect();
    let pass_of = |birth: u32| ev.spans.partition_point(|&(_, e)| e <= birth);
    GraphFrees {
        kept: freed_at_next(&kept, |a, b| a.0 == b.0 && not_returned(a.2)),
        outputs: freed_at_next(&outputs, |a, b| {
            not_returned(a.2) && pass_of(a.1) == pass_of(b.1) && l.alive_after(a.2, b.1)
        }),
    }
}

/// Of (segment, birth, block) in order, each block `keep` pairs with the
/// one after it, freed once that one is made: (block, its birth), sorted.
fn freed_at_next(
    items: &[(usize, u32, usize)],
    keep: impl Fn(&(usize, u32, usize), &(usize, u32, usize)) -> bool,
) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = items
        .windows(2)
        .filter(|w| keep(&w[0], &w[1]))
        .map(|w| (w[0].2, w[1].1 as usize))
        .collect();
    out.sort_unstable();
    out
}

/// (segment, birth, block) of every block a segment keeps, in order, and
/// the blocks the recorder named returned (sorted); `None` where no
/// evaluation pass ran a call with autograd on.
#[allow(clippy::type_complexity)]
fn kept_by_segment(
    snap: &Snapshot,
    device: u32,
    ev: &Evaluation,
    l: &Lifetimes,
    category: &[Category],
) -> Option<(Vec<(usize, u32, usize)>, Vec<usize>)> {
    let segments = segments(ev);
    if segments.is_empty() {
        return None;
    }
    let returned = returned(snap, device, l);
    // (segment, birth, block) of every block a segment keeps.
    let mut kept: Vec<(usize, u32, usize)> = Vec::new();
    for b in 0..l.len() {
        let birth = l.birth[b];
        if birth == BEFORE_WINDOW {
            continue;
        }
        let k = segments.partition_point(|&(s, _)| s <= birth);
        let Some(&(_, end)) = k.checked_sub(1).and_then(|k| segments.get(k)) else {
            continue;
        };
        if birth >= end {
            continue;
        }
        let own = matches!(
            category.get(b),
            Some(
                Category::Input
                    | Category::Parameter
                    | Category::Gradient
                    | Category::OptimizerState
            )
        );
        if !own && (l.death[b] == STILL_ALIVE || l.death[b] >= end) {
            kept.push((k - 1, birth, b));
        }
    }
    kept.sort_unstable();
    Some((kept, returned))
}

/// The blocks the recorder named as returned by a call of a model in eval
/// mode with autograd on (`category=output`: the logits, a key/value
/// cache), resolved to the block alive at the address then; sorted.
fn returned(snap: &Snapshot, device: u32, l: &Lifetimes) -> Vec<usize> {
    let Some(t) = snap.trace(device) else {
        return Vec::new();
    };
    // (event the block must be alive at, address): vramscope_tags rows by
    // their time, `annotate` entries (CUDA) by their place in the trace.
    let mut named: Vec<(usize, u64)> = snap
        .tags
        .iter()
        .filter(|g| g.device == device && snap.str(g.category) == OUTPUT)
        .map(|g| (t.time_us.partition_point(|&x| x < g.time_us), g.addr))
        .collect();
    if let Some(meta) = &t.user_metadata {
        for (i, &m) in meta.iter().enumerate() {
            if t.action[i] == Action::Annotate && tagged_category_name(snap.str(m)) == Some(OUTPUT)
            {
                named.push((i, t.addr[i]));
            }
        }
    }
    if named.is_empty() {
        return Vec::new();
    }
    let mut by_addr: HashMap<u64, Vec<usize>> = HashMap::default();
    for b in 0..l.len() {
        by_addr.entry(l.addr[b]).or_default().push(b);
    }
    let mut out: Vec<usize> = named
        .iter()
        .filter_map(|&(i, addr)| {
            by_addr.get(&addr)?.iter().copied().find(|&b| {
                let (birth, death) = l.span(b);
                (l.birth[b] == BEFORE_WINDOW || birth < i) && i <= death
            })
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The recorder's tag for what a call returned.
const OUTPUT: &str = "output";

/// The segments of the evaluation passes with autograd on: each call with
/// autograd on, each stretch from the end of one to the start of the next
/// in the same pass, and from the last one's end to the pass's; `[start,
/// end)`, in order.
fn segments(ev: &Evaluation) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for &(s, e) in &ev.spans {
        let k = ev.grad_calls.partition_point(|&(_, end)| end <= s);
        let calls: Vec<(u32, u32)> = ev.grad_calls[k..]
            .iter()
            .take_while(|&&(start, _)| start < e)
            .map(|&(a, b)| (a.max(s), b.min(e)))
            .collect();
        for (j, &(a, b)) in calls.iter().enumerate() {
            if out.last().is_some_and(|&(_, end)| a < end) {
                continue;
            }
            out.push((a, b));
            let next = calls.get(j + 1).map_or(e, |&(n, _)| n);
            if b < next {
                out.push((b, next));
            }
        }
    }
    out
}
