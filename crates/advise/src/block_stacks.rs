//! The calls of a model's repeated blocks, read from the allocations'
//! Python stacks where the recorder did not mark them (PyTorch's own
//! `_record_memory_history` files).
//!
//! A loop over layers (`for block in self.blocks: x = block(x)`, or
//! `nn.Sequential`'s own loop) calls the same `forward` from the same line
//! once per layer, one after the other. Every allocation a layer makes has
//! that line in its stack with the layer's `forward` just inside it, so
//! one forward's allocations under that (line, callee) pair form one
//! unbroken run; no frame tells one layer from the next, but the callee's
//! lines do: each call runs the same lines in the same order, so a call
//! begins wherever the run comes back to its first line. A run is taken
//! only where it splits into two calls or more, each of the same number of
//! allocations (the first may hold more: what a program's first call
//! makes once) over two lines or more (a composite block repeated, as the
//! recorder's `vramscope.block#` annotations mark); of several such pairs
//! (blocks inside blocks), the one whose calls hold the most allocations.
//! Checked on the H200's GPT, recorded with the annotations: the calls
//! read from its stacks give the same checkpointing replay.

use std::collections::HashMap;

use vramscope_analysis::sites::{frame_label, frame_location, is_native, is_noise};
use vramscope_snapshot::{Action, FrameId, Snapshot, StackId, StrId};

/// A (caller line, callee function) pair: the caller's frame and the
/// callee's file and function name.
type Pair = (FrameId, StrId, StrId);

/// A run split into calls, each a list of indices into the allocations.
type Calls = Vec<Vec<usize>>;

/// Each call of the repeated block read from the stacks: (name, first
/// event, last event); the name is the line that calls it and its place in
/// the loop (`common.py:40 in forward #3`).
pub(super) fn calls_from_stacks(snap: &Snapshot, device: u32) -> Vec<(String, usize, usize)> {
    let Some(t) = snap.trace(device) else {
        return Vec::new();
    };
    let allocs: Vec<usize> = (0..t.len())
        .filter(|&i| t.action[i] == Action::Alloc)
        .collect();
    // Per stack: each (caller line, callee forward) pair, with the callee's
    // own frame (the line inside the block).
    let mut pairs_of: HashMap<StackId, Vec<(Pair, FrameId)>> = HashMap::new();
    for &i in &allocs {
        pairs_of
            .entry(t.stack[i])
            .or_insert_with(|| stack_pairs(snap, t.stack[i]));
    }
    // Runs per pair: consecutive allocations (in `allocs`) under the pair.
    let mut runs: HashMap<Pair, Vec<Vec<(usize, FrameId)>>> = HashMap::new();
    let mut last_at: HashMap<Pair, usize> = HashMap::new();
    for (k, &i) in allocs.iter().enumerate() {
        for &(pair, inner) in pairs_of.get(&t.stack[i]).map_or(&[][..], |v| v.as_slice()) {
            let continues = last_at.get(&pair).is_some_and(|&j| j + 1 == k);
            let list = runs.entry(pair).or_default();
            if !continues || list.is_empty() {
                list.push(Vec::new());
            }
            if let Some(run) = list.last_mut() {
                run.push((k, inner));
            }
            last_at.insert(pair, k);
        }
    }
    let mut best: Option<(usize, Pair, Vec<Calls>)> = None;
    for (pair, list) in runs {
        let mut split: Vec<Calls> = Vec::new();
        let mut held = 0usize;
        for run in &list {
            if let Some(calls) = split_run(run) {
                held += calls.iter().map(Vec::len).sum::<usize>();
                split.push(calls);
            }
        }
        if held > 0 && best.as_ref().is_none_or(|b| held > b.0) {
            best = Some((held, pair, split));
        }
    }
    let Some((_, pair, split)) = best else {
        return Vec::new();
    };
    let caller = frame_label(snap, pair.0);
    let mut out = Vec::new();
    for calls in split {
        for (n, call) in calls.iter().enumerate() {
            let (Some(&a), Some(&b)) = (call.first(), call.last()) else {
                continue;
            };
            let first = allocs[a];
            // The call ends just before the next allocation that is not its
            // own: the next call's first, or the first after the run.
            let last = allocs.get(b + 1).map_or(t.len(), |&j| j) - 1;
            out.push((format!("{caller} #{n}"), first, last));
        }
    }
    out.sort_by_key(|c| c.1);
    out
}

/// The (caller line, callee forward) pairs of one stack, outermost first,
/// each with the callee's own frame.
fn stack_pairs(snap: &Snapshot, stack: StackId) -> Vec<(Pair, FrameId)> {
    // Python frames, outermost first, without the module machinery
    // (`_call_impl`, `_wrapped_call_impl`, hooks) between caller and callee.
    let mut py: Vec<(FrameId, bool)> = Vec::new();
    for &fid in snap.stacks.get(stack).iter().rev() {
        let (file, _, name) = frame_location(snap, snap.frames.get(fid));
        if is_native(&file, &name)
            || is_noise(&file, &name)
            || file.ends_with("torch/nn/modules/module.py")
        {
            continue;
        }
        py.push((fid, name == "forward"));
    }
    py.windows(2)
        .filter(|w| w[1].1)
        .map(|w| {
            let callee = snap.frames.get(w[1].0);
            ((w[0].0, callee.filename, callee.name), w[1].0)
        })
        .collect()
}

/// A run's calls (each a list of indices into the allocations), where it
/// is a block repeated: a new call wherever the callee's first line comes
/// back after another line; two calls or more, each of the same length
/// (the first may be longer), over two lines or more.
fn split_run(run: &[(usize, FrameId)]) -> Option<Calls> {
    let &(_, head) = run.first()?;
    let mut calls: Calls = Vec::new();
    let mut prev: Option<FrameId> = None;
    for &(k, inner) in run {
        if inner == head && prev != Some(head) {
            calls.push(Vec::new());
        }
        calls.last_mut()?.push(k);
        prev = Some(inner);
    }
    // The calls after the first all of one length; the first may be
    // longer: a program's first call makes what later ones reuse (on the
    // H200's GPT, two more allocations in the first block of the first
    // forward: cuBLAS's workspace).
    let len = calls.get(1)?.len();
    let lines = run
        .iter()
        .take(calls[0].len())
        .map(|x| x.1)
        .collect::<std::collections::HashSet<_>>()
        .len();
    let alike = calls[0].len() >= len && calls[1..].iter().all(|c| c.len() == len);
    (lines >= 2 && alike).then_some(calls)
}
