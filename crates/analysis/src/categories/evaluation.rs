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
//! backward between), or where it let go of what it made (at the end it
//! holds at most half of the most it held): a recording that ends in a
//! training forward (an OOM there, a dump mid-step) has no backward after
//! it either, but holds every activation saved for it. What runs
//! between two evaluation forwards (their batches loading, metrics) is the
//! pass's too.

use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::{Action, DeviceTrace, FrameId, Snapshot, StackId};

use super::phases::{Phase, Phases};
use super::stack_phase::is_module_call;
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
}

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
        // Per run: evaluation or not, forward runs only.
        let mut eval = vec![false; runs.len()];
        let mut previous_eval = false;
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
            eval[k] = !used[k]
                && match next {
                    Some(s) => s.phase != Phase::Backward,
                    None => previous_eval || lets_go(t, l, r),
                };
            previous_eval = eval[k];
        }
        // Spans: each evaluation forward, joined with the next one when
        // nothing but other work (not a step's forward, backward or
        // optimizer step, nor a model loaded) lies between them.
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
                    spans.push((s as u32, e as u32));
                }
            }
        }
        if let Some((s, e)) = open {
            spans.push((s as u32, e as u32));
        }
        Evaluation {
            spans,
            forwards,
            chains: keys.chains,
        }
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
