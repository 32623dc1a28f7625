//! Evaluation passes inside a training recording: forward runs that no
//! backward uses.
//!
//! A program that trains usually evaluates too (a validation loop every
//! epoch, a test pass at the end, Lightning's sanity check), often with a
//! larger batch than it trains with (pytorch/examples' MNIST: 64 to train,
//! 1,000 to test). Its peak can be in that pass, and then a change to the
//! training step (a smaller micro-batch with accumulation, checkpointing)
//! does not lower it: the answer must know which pass the peak is in.
//!
//! A forward run (the phases' runs; checkpointing's recomputations are
//! backward's) is a training step's when the next run of forward or
//! backward after it is a backward, or when backward frees something it
//! made (what autograd saved for backward; a forward cut in two by a
//! `.item()` or a batch fetched between its halves). Otherwise no backward
//! used it: an evaluation forward, under `torch.no_grad()` or not. The
//! last forward of the trace, with nothing after it, is one only where it
//! continues an evaluation pass (the forward before it was one, with no
//! backward between), where what calls the model called only evaluation
//! passes before (the next validation loop; with autograd on it holds its
//! graphs as a training forward does), or where it let go of what it made
//! (at the end it holds at most half of the most it held): a recording
//! that ends in a training forward (an OOM there, a dump mid-step) has no
//! backward after it either, but holds every activation saved for it.
//! What runs between two evaluation forwards (their batches loading,
//! metrics) is the pass's too.
//!
//! Whether a pass ran with autograd on is the recorder's to say (its
//! `vramscope.forward#MODE` spans of each outermost call): what the graphs
//! of such a pass keep is `evaluation_graphs`'.

use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::{Action, DeviceTrace, FrameId, Snapshot, StackId};

use super::phases::{Phase, Phases};
use super::stack_phase::{is_module_call, DataStacks};
use crate::backward_blocks::marked_spans;
use crate::lifetimes::{Lifetimes, BEFORE_WINDOW, NOT_REQUESTED, STILL_ALIVE};
use crate::sites::{frame_location, python_frames};

/// The evaluation passes of one device's trace, as event spans.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Evaluation {
    /// `[start, end)` event indices, in order, disjoint.
    pub spans: Vec<(u32, u32)>,
    /// Each evaluation forward: `[start, end)` and the index in `chains`
    /// of what calls the model in it, where a stack names it.
    pub forwards: Vec<(u32, u32, Option<u32>)>,
    /// The Python frames that call the model's outermost module call,
    /// innermost first (`main.py:46 in predict`, `main.py:169 in <module>`).
    pub chains: Vec<Vec<FrameId>>,
    /// Per evaluation forward (as `forwards`): whether it ran with autograd
    /// on, from the recorder's `vramscope.forward#MODE` spans; empty where
    /// the recording has none (a snapshot PyTorch wrote: the grad mode is
    /// not in it).
    pub with_grad: Vec<bool>,
    /// The outermost module calls inside the evaluation passes that ran
    /// with autograd on, `[start, end)` event indices, in order.
    pub grad_calls: Vec<(u32, u32)>,
}

/// Prefix of the recorder's spans of outermost forward calls, by grad mode
/// (`vramscope.forward#grad`, `#no_grad`, `#inference`).
pub const FORWARD_ANNOTATION: &str = "vramscope.forward#";

/// One run of equal phases: `[start, end)` and its phase.
struct Run {
    start: usize,
    end: usize,
    phase: Phase,
    recomputed: bool,
    /// The first caller key of a forward run.
    caller: Option<u32>,
}

impl Evaluation {
    /// The evaluation passes of `t` (none in a trace without a backward:
    /// an inference run is all forward, and says so elsewhere).
    pub fn new(snap: &Snapshot, t: &DeviceTrace, phases: &Phases, l: &Lifetimes) -> Evaluation {
        let n = phases.phase.len().min(t.len());
        if n == 0 || !phases.phase.contains(&Phase::Backward) {
            return Evaluation::default();
        }
        // Runs of equal phases, a forward run cut where the program's
        // call of the model changes: consecutive forwards from two places
        // (the test loop's `model(data)` right after the training step's,
        // which the phases join into one run) are two passes.
        let mut keys = Callers::default();
        let mut runs: Vec<Run> = Vec::new();
        let mut caller: Option<u32> = None;
        for i in 0..n {
            let recomputed = phases.is_recomputation(i);
            let key =
                if phases.phase[i] == Phase::Forward && !recomputed && t.action[i] == Action::Alloc
                {
                    keys.of(snap, t.stack[i])
                } else {
                    None
                };
            let new_run = i == 0 || phases.run[i] != phases.run[i - 1];
            let new_caller = key.is_some() && caller.is_some() && key != caller;
            if new_run {
                caller = None;
            }
            if key.is_some() {
                caller = key;
            }
            if new_run || new_caller {
                runs.push(Run {
                    start: i,
                    end: i + 1,
                    phase: phases.phase[i],
                    recomputed,
                    caller: key,
                });
            } else if let Some(r) = runs.last_mut() {
                r.end = i + 1;
                r.caller = r.caller.or(key);
            }
        }
        let forward = |r: &Run| r.phase == Phase::Forward && !r.recomputed;
        // Runs whose blocks backward frees: a step's forward.
        let mut run_of = vec![0u32; n];
        for (k, r) in runs.iter().enumerate() {
            run_of[r.start..r.end].fill(k as u32);
        }
        let mut used = vec![false; runs.len()];
        for b in 0..l.len() {
            if l.birth[b] == BEFORE_WINDOW || l.death[b] == STILL_ALIVE {
                continue;
            }
            let freed = if l.free_requested[b] != NOT_REQUESTED {
                l.free_requested[b]
            } else {
                l.death[b]
            } as usize;
            let (born, freed) = (l.birth[b] as usize, freed);
            if born < n && freed < n && phases.phase[freed] == Phase::Backward {
                used[run_of[born] as usize] = true;
            }
        }
        // Per run: evaluation or not, forward runs only. What calls the
        // model in each kind of forward so far: the trace's last forward,
        // called from where only evaluation passes called it before (the
        // next epoch's validation loop), is one, whatever it holds (with
        // autograd on it keeps its graphs, as a training forward does).
        let mut eval = vec![false; runs.len()];
        let mut previous_eval = false;
        let (mut eval_callers, mut step_callers) = (Vec::new(), Vec::new());
        for (k, r) in runs.iter().enumerate() {
            if !forward(r) {
                if r.phase == Phase::Backward {
                    previous_eval = false;
                }
                continue;
            }
            let next = runs[k + 1..]
                .iter()
                .find(|s| forward(s) || s.phase == Phase::Backward);
            let called_for_evaluation = r
                .caller
                .is_some_and(|c| eval_callers.contains(&c) && !step_callers.contains(&c));
            eval[k] = !used[k]
                && match next {
                    Some(s) => s.phase != Phase::Backward,
                    None => previous_eval || called_for_evaluation || lets_go(t, l, r),
                };
            previous_eval = eval[k];
            if let Some(c) = r.caller {
                if eval[k] {
                    eval_callers.push(c);
                } else {
                    step_callers.push(c);
                }
            }
        }
        // Spans: each evaluation forward, joined with the next one when
        // nothing but other work (not a step's forward, backward or
        // optimizer step, nor a model loaded) lies between them. A pass
        // ends where that work does, or where data loading begins after
        // its last forward before a training step (that step's batches):
        // the last batch's loss and metrics are the pass's, computed with
        // its output (and, with autograd on, its graph) alive.
        let mut data = DataStacks::default();
        let mut tail_end = |from: usize, to: usize| -> usize {
            (from..to)
                .find(|&i| t.action[i] == Action::Alloc && data.of(snap, t.stack[i]))
                .unwrap_or(to)
        };
        let mut spans: Vec<(u32, u32)> = Vec::new();
        let mut forwards: Vec<(u32, u32, Option<u32>)> = Vec::new();
        let mut open: Option<(usize, usize)> = None;
        for (k, r) in runs.iter().enumerate() {
            if eval[k] {
                open = Some(match open {
                    Some((s, _)) => (s, r.end),
                    None => (r.start, r.end),
                });
                forwards.push((r.start as u32, r.end as u32, r.caller));
            } else if forward(r)
                || matches!(r.phase, Phase::Backward | Phase::Optimizer | Phase::Setup)
            {
                if let Some((s, e)) = open.take() {
                    spans.push((s as u32, tail_end(e, r.start) as u32));
                }
            }
        }
        // The last pass, with nothing trained after it, to the end (what a
        // loader does as its loop ends is not another batch's).
        if let Some((s, _)) = open {
            spans.push((s as u32, n as u32));
        }
        let (with_grad, grad_calls) = grad_modes(snap, t.device, &forwards);
        Evaluation {
            spans,
            forwards,
            chains: keys.chains,
            with_grad,
            grad_calls,
        }
    }

    /// How many evaluation passes ran a call with autograd on.
    pub fn passes_with_grad(&self) -> usize {
        self.spans
            .iter()
            .filter(|&&(s, e)| self.grad_call_in(s, e))
            .count()
    }

    /// Whether the evaluation pass holding event `i` ran any forward with
    /// autograd on; `None` where the recording does not say.
    pub fn pass_with_grad(&self, i: usize) -> Option<bool> {
        if self.with_grad.is_empty() {
            return None;
        }
        let k = self.spans.partition_point(|&(s, _)| s as usize <= i);
        let &(s, e) = self.spans.get(k.checked_sub(1)?)?;
        if i >= e as usize {
            return None;
        }
        Some(self.grad_call_in(s, e))
    }

    /// Whether a call with autograd on overlaps events `[s, e)`.
    fn grad_call_in(&self, s: u32, e: u32) -> bool {
        self.grad_calls.iter().any(|&(a, b)| a < e && s < b)
    }

    /// Whether event `i` is in an evaluation pass.
    pub fn contains(&self, i: usize) -> bool {
        let k = self.spans.partition_point(|&(s, _)| s as usize <= i);
        k > 0 && (i as u32) < self.spans[k - 1].1
    }

    /// Whether any event of `[from, to)` is in an evaluation pass.
    pub fn spans_any(&self, from: usize, to: usize) -> bool {
        self.spans
            .iter()
            .any(|&(s, e)| (s as usize) < to && from < e as usize)
    }

    /// The end of the last evaluation pass that starts at or after event
    /// `from` and ends at or before event `to`.
    pub fn last_end_within(&self, from: usize, to: usize) -> Option<usize> {
        self.spans
            .iter()
            .rev()
            .find(|&&(s, e)| s as usize >= from && e as usize <= to)
            .map(|&(_, e)| e as usize)
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

/// Per evaluation forward: whether a `grad` span of the recorder is in it
/// (a forward run can hold several calls: a model's and its criterion's),
/// and those spans. Empty when the recording has none.
fn grad_modes(
    snap: &Snapshot,
    device: u32,
    forwards: &[(u32, u32, Option<u32>)],
) -> (Vec<bool>, Vec<(u32, u32)>) {
    let marked = marked_spans(snap, device, FORWARD_ANNOTATION, true);
    if marked.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let grad: Vec<(usize, usize)> = marked
        .iter()
        .filter(|(mode, _, _)| *mode == "grad")
        .map(|&(_, first, last)| (first, last + 1))
        .collect();
    let mut calls = Vec::new();
    let with_grad = forwards
        .iter()
        .map(|&(s, e, _)| {
            let k = grad.partition_point(|&(_, end)| end <= s as usize);
            // A call counts where most of its events are in the run: the
            // run's bounds are where the caller's stacks change, which
            // can leave the next call's first event (a free) in it.
            let (s, e) = (s as usize, e as usize);
            let over: Vec<_> = grad[k..]
                .iter()
                .take_while(|&&(first, _)| first < e)
                .filter(|&&(a, b)| 2 * (e.min(b) - s.max(a)) > b - a)
                .map(|&(a, b)| (a as u32, b as u32))
                .collect();
            calls.extend(&over);
            !over.is_empty()
        })
        .collect();
    calls.dedup();
    (with_grad, calls)
}

/// Whether the trace's last forward run, which nothing follows, let go of
/// what it made: at the end it still holds at most half of the most it
/// held at once (an evaluation batch's output and little else). A
/// training forward the trace ends in (an OOM there, a dump mid-step)
/// still holds every activation it saved for the backward that did not
/// come.
fn lets_go(t: &DeviceTrace, l: &Lifetimes, r: &Run) -> bool {
    let (mut now, mut most) = (0i128, 0i128);
    for i in r.start..r.end {
        match t.action[i] {
            Action::Alloc => now += t.size[i] as i128,
            Action::FreeCompleted => now -= t.size[i] as i128,
            _ => {}
        }
        most = most.max(now);
    }
    let kept: u64 = (0..l.len())
        .filter(|&b| {
            l.death[b] == STILL_ALIVE
                && l.birth[b] != BEFORE_WINDOW
                && (r.start..r.end).contains(&(l.birth[b] as usize))
        })
        .map(|b| l.size[b])
        .sum();
    most > 0 && (kept as i128) * 2 <= most
}

/// The program's call of the model a stack is under: the frames that call
/// its outermost module call (`torch/nn/modules/module.py`'s
/// `_call_impl`), interned; `None` for a stack with no module call (the
/// loss, computed outside the model) or no frames.
#[derive(Default)]
struct Callers {
    by_stack: HashMap<StackId, Option<u32>>,
    ids: HashMap<Vec<FrameId>, u32>,
    /// Per key: its frames.
    chains: Vec<Vec<FrameId>>,
}

impl Callers {
    fn of(&mut self, snap: &Snapshot, s: StackId) -> Option<u32> {
        if let Some(&k) = self.by_stack.get(&s) {
            return k;
        }
        let frames = if s.is_none() {
            &[][..]
        } else {
            snap.stacks.get(s)
        };
        // Innermost first: the outermost module call is the last one.
        let outermost = frames.iter().rposition(|&f| {
            let (file, _, name) = frame_location(snap, snap.frames.get(f));
            is_module_call(&file, &name)
        });
        let key = outermost.map(|k| {
            let above = python_frames(snap, &frames[k + 1..]);
            let fresh = self.ids.len() as u32;
            let id = *self.ids.entry(above.clone()).or_insert(fresh);
            if id == fresh {
                self.chains.push(above);
            }
            id
        });
        self.by_stack.insert(s, key);
        key
    }
}
