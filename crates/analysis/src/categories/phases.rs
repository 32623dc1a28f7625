//! The phase of a training step each event belongs to: forward, backward,
//! optimizer step, `zero_grad`, or anything else (data loading, logging).
//!
//! An allocation's stack says where it happened when it passes through a
//! phase's code: the innermost frame that names a phase wins, so a forward
//! and backward run inside an optimizer's `closure` (LBFGS, the closure
//! style of `step`) still count as forward and backward. PyTorch's own
//! `record_function` scopes (`Optimizer.step#AdamW.step`,
//! `Optimizer.zero_grad#…`) and vramscope's recorder tags in
//! `user_metadata` (`phase=forward`, …) name the phase of allocations whose
//! stack does not. Events between two allocations with a phase take it from
//! their neighbours (the loss, computed outside any module between the
//! forward and the backward, is forward; what runs between an optimizer step
//! and the next forward is "other").

use vramscope_snapshot::{Action, AnnotationStage, DeviceTrace, Snapshot, StackId, NO_TIME};

use super::recompute::Recomputations;
pub(crate) use super::stack_phase::StackPhases;

/// Where in a training step an event happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Phase {
    Forward,
    Backward,
    Optimizer,
    ZeroGrad,
    /// Model construction and loading: `.to()`/`.cuda()` of a module,
    /// `load_state_dict`, `torch.nn.init`, `torch.load`, `from_pretrained`.
    Setup,
    Other,
}

/// A recorder tag in `user_metadata` (`phase=backward`), if any.
fn tagged_phase(meta: &str) -> Option<Phase> {
    let v = meta
        .split([';', ' ', ','])
        .find_map(|kv| kv.strip_prefix("phase="))?;
    Some(match v {
        "forward" => Phase::Forward,
        "backward" => Phase::Backward,
        "optimizer" => Phase::Optimizer,
        "zero_grad" => Phase::ZeroGrad,
        "setup" => Phase::Setup,
        _ => Phase::Other,
    })
}

/// The phase of every event of one device's trace, and the runs they form.
#[derive(Debug, Default)]
pub struct Phases {
    /// Per event.
    pub phase: Vec<Phase>,
    /// Per event: the number of the run of equal phases it is in, so that
    /// "freed in the same backward" is `run[birth] == run[death]`.
    pub run: Vec<u32>,
    /// Whether any allocation named its phase (by stack, scope or tag).
    pub any_marked: bool,
    /// Per event: whether its own stack, scope or tag named its phase
    /// (false: taken from its neighbours).
    pub marked: Vec<bool>,
    /// Whether free events carry the stack of the free rather than of the
    /// allocation: `_record_memory_history(context="all")`, the default,
    /// records where each free happened; profiler-built snapshots repeat
    /// the allocation's stack.
    pub free_time_stacks: bool,
    /// Per event: the runs of forward that start at or before it (after
    /// event 0), recomputations left out. [`Phases::runs_starting_between`]
    /// is a subtraction of two of these; it counted over every event of
    /// each block's life, which on a trace of long-lived blocks was a third
    /// of a summary's time.
    forward_starts: Vec<u32>,
    /// The forward runs that are checkpointed blocks made again inside
    /// backward.
    recomputed: Recomputations,
}

impl Phases {
    pub fn new(snap: &Snapshot, t: &DeviceTrace) -> Phases {
        let n = t.len();
        let mut marks: Vec<Option<Phase>> = vec![None; n];
        let stacked = stackless_is_backward(snap, t);
        let mut stacks = StackPhases::new(snap);
        // The phase each metadata string names, read once per string.
        let mut tag_of: vramscope_snapshot::hash::FxHashMap<
            vramscope_snapshot::StrId,
            Option<Phase>,
        > = Default::default();
        let windows = scope_windows(snap, t);
        let is_free = |a: Action| matches!(a, Action::FreeRequested | Action::FreeCompleted);
        let free_time_stacks = t.category.is_none()
            && (0..n).any(|i| is_free(t.action[i]) && !is_empty(snap, t.stack[i]));
        // A free whose stack is its block's allocation stack says where the
        // block was made, not where it was freed (vramscope's CPU recorder
        // writes frees that way): no evidence of the phase at the free.
        let mut alloc_stack: vramscope_snapshot::hash::FxHashMap<u64, vramscope_snapshot::StackId> =
            Default::default();
        for i in 0..n {
            // Where a free happened is evidence too (`zero_grad` freeing the
            // gradients, an optimizer replacing its state, backward freeing
            // what forward saved), when recorded.
            let counts = match t.action[i] {
                Action::Alloc => {
                    if free_time_stacks {
                        alloc_stack.insert(t.addr[i], t.stack[i]);
                    }
                    true
                }
                a if free_time_stacks && is_free(a) => {
                    let made = if a == Action::FreeCompleted {
                        alloc_stack.remove(&t.addr[i])
                    } else {
                        alloc_stack.get(&t.addr[i]).copied()
                    };
                    made != Some(t.stack[i])
                }
                _ => false,
            };
            if !counts {
                continue;
            }
            let tag = t.user_metadata.as_ref().and_then(|m| {
                *tag_of
                    .entry(m[i])
                    .or_insert_with(|| tagged_phase(snap.str(m[i])))
            });
            marks[i] = tag.or_else(|| {
                let s = t.stack[i];
                if is_empty(snap, s) {
                    return if stacked {
                        Some(Phase::Backward)
                    } else {
                        window_phase(&windows, t.time_us[i])
                    };
                }
                stacks
                    .of(snap, s)
                    .or_else(|| window_phase(&windows, t.time_us[i]))
            });
        }
        let any_marked = marks.iter().any(Option::is_some);
        let marked: Vec<bool> = marks.iter().map(Option::is_some).collect();
        let is_alloc: Vec<bool> = t.action.iter().map(|&a| a == Action::Alloc).collect();
        let phase = fill(&marks, &is_alloc);
        let mut run = Vec::with_capacity(n);
        let mut r = 0u32;
        for i in 0..n {
            if i > 0 && phase[i] != phase[i - 1] {
                r += 1;
            }
            run.push(r);
        }
        let recomputed = Recomputations::new(snap, t, &phase, &run);
        let mut forward_starts = Vec::with_capacity(n);
        let mut c = 0u32;
        for k in 0..n {
            if k > 0
                && run[k] != run[k - 1]
                && phase[k] == Phase::Forward
                && !recomputed.is_recomputation(run[k])
            {
                c += 1;
            }
            forward_starts.push(c);
        }
        Phases {
            phase,
            run,
            any_marked,
            marked,
            free_time_stacks,
            forward_starts,
            recomputed,
        }
    }

    /// Whether event `i` is in a checkpointed block's recomputation (a
    /// forward that backward runs).
    pub fn is_recomputation(&self, i: usize) -> bool {
        self.run
            .get(i)
            .is_some_and(|&r| self.recomputed.is_recomputation(r))
    }

    /// Whether events `i` and `j` are in one run of equal phases, or (for
    /// backward) in one backward, recomputations between them.
    pub fn same_run(&self, i: usize, j: usize) -> bool {
        let (Some(&a), Some(&b)) = (self.run.get(i), self.run.get(j)) else {
            return false;
        };
        a == b
            || (self.recomputed.any()
                && self.phase[i] == Phase::Backward
                && self.recomputed.same_pass(a, b))
    }

    /// How many runs of `phase` start after event `i` and at or before `j`.
    pub fn runs_starting_between(&self, i: usize, j: usize, phase: Phase) -> usize {
        let end = j.min(self.phase.len().saturating_sub(1));
        if end <= i {
            return 0;
        }
        if phase == Phase::Forward && self.forward_starts.len() == self.phase.len() {
            return (self.forward_starts[end] - self.forward_starts[i]) as usize;
        }
        (i + 1..=end)
            .filter(|&k| {
                self.run[k] != self.run[k - 1]
                    && self.phase[k] == phase
                    && !self.recomputed.is_recomputation(self.run[k])
            })
            .count()
    }
}

/// Whether an allocation without frames in `t` is backward's.
///
/// Backward runs on the autograd engine's threads; with Python-only stacks
/// their allocations have no frames. A trace whose other allocations have
/// stacks records backward that way (profiler-built traces, with
/// categories, run backward on the calling thread and do have frames).
/// Not on the CPU: there the engine runs CPU work on the thread that called
/// backward (with its Python frames), and an allocation without frames is
/// no evidence of backward: `torch.get_rng_state()`'s 5,056-byte state,
/// which a reentrant checkpoint saves as its block's forward starts, and
/// the storages `torch.load` unpickles (a model loaded after training)
/// come without frames. Taken for backward, the first ended a forward
/// there, the second made a loaded model's parameters "gradients".
pub fn stackless_is_backward(snap: &Snapshot, t: &DeviceTrace) -> bool {
    let on_cpu = snap
        .source
        .recorder
        .as_ref()
        .is_some_and(|r| r.device_kind() == "cpu");
    t.category.is_none()
        && !on_cpu
        && (0..t.len()).any(|i| t.action[i] == Action::Alloc && !is_empty(snap, t.stack[i]))
}

fn is_empty(snap: &Snapshot, s: StackId) -> bool {
    s.is_none() || snap.stacks.get(s).is_empty()
}

/// `record_function` scopes that name a phase: (start µs, end µs, phase).
fn scope_windows(snap: &Snapshot, t: &DeviceTrace) -> Vec<(i64, i64, Phase)> {
    if !t.has_time() {
        return Vec::new();
    }
    let mut open: Vec<(&str, i64)> = Vec::new();
    let mut out = Vec::new();
    for a in &snap.annotations {
        let name = snap.str(a.name);
        let phase = if name.starts_with("Optimizer.step#") {
            Phase::Optimizer
        } else if name.starts_with("Optimizer.zero_grad#") {
            Phase::ZeroGrad
        } else {
            continue;
        };
        match a.stage {
            AnnotationStage::Start => open.push((name, a.time_us)),
            AnnotationStage::End => {
                if let Some(k) = open.iter().rposition(|(n, _)| *n == name) {
                    let (_, start) = open.remove(k);
                    out.push((start, a.time_us, phase));
                }
            }
            AnnotationStage::Other => {}
        }
    }
    out
}

fn window_phase(windows: &[(i64, i64, Phase)], time: i64) -> Option<Phase> {
    if time == NO_TIME {
        return None;
    }
    windows
        .iter()
        .find(|(s, e, _)| *s <= time && time <= *e)
        .map(|w| w.2)
}

/// Give every event a phase: marked allocations keep theirs. In a stretch
/// between two marks, the frees that come first (before any allocation) end
/// the phase before them (backward freeing its last intermediates); the rest
/// takes the phase both sides agree on, forward when it lies between a
/// forward and a backward (the loss) or ends an inference trace, else
/// "other" (data loading, gradient clipping, logging).
fn fill(marks: &[Option<Phase>], is_alloc: &[bool]) -> Vec<Phase> {
    let n = marks.len();
    // Traces whose stacks name backward but never forward (operator-only
    // profiler traces): what leads up to a backward is its forward.
    let forward_unnamed =
        !marks.contains(&Some(Phase::Forward)) && marks.contains(&Some(Phase::Backward));
    let mut out = vec![Phase::Other; n];
    let mut prev: Option<Phase> = None;
    let mut i = 0;
    while i < n {
        if let Some(p) = marks[i] {
            out[i] = p;
            prev = Some(p);
            i += 1;
            continue;
        }
        let start = i;
        while i < n && marks[i].is_none() {
            i += 1;
        }
        let next = marks.get(i).copied().flatten();
        let p = match (prev, next) {
            (Some(a), Some(b)) if a == b => a,
            (Some(Phase::Forward), Some(Phase::Backward)) => Phase::Forward,
            // The end of an inference trace is still its forward.
            (Some(Phase::Forward), None) => Phase::Forward,
            (_, Some(Phase::Backward)) if forward_unnamed => Phase::Forward,
            _ => Phase::Other,
        };
        let mut k = start;
        if let Some(a) = prev {
            while k < i && !is_alloc[k] {
                out[k] = a;
                k += 1;
            }
        }
        out[k..i].fill(p);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::stack_phase::frame_phase;
    use super::*;

    #[test]
    fn frames_name_their_phase() {
        let cases = [
            (
                "/x/torch/optim/adamw.py",
                "_init_group",
                Some(Phase::Optimizer),
            ),
            (
                "/x/torch/optim/optimizer.py",
                "zero_grad",
                Some(Phase::ZeroGrad),
            ),
            (
                "??",
                "torch::autograd::AccumulateGrad::apply(...)",
                Some(Phase::Backward),
            ),
            (
                "??",
                "torch::autograd::generated::MmBackward0::apply(...)",
                Some(Phase::Backward),
            ),
            (
                "/x/torch/autograd/graph.py",
                "_engine_run_backward",
                Some(Phase::Backward),
            ),
            (
                "/x/torch/nn/modules/module.py",
                "_call_impl",
                Some(Phase::Forward),
            ),
            ("/w/model.py", "forward", Some(Phase::Forward)),
            ("", "nn.Module: Linear_0", Some(Phase::Forward)),
            ("/x/torch/nn/functional.py", "linear", None),
            ("??", "forward", None),
            (
                "",
                "autograd::engine::evaluate_function: MmBackward0",
                Some(Phase::Backward),
            ),
            ("", "CompiledFunctionBackward", Some(Phase::Backward)),
            ("", "CompiledFunction", Some(Phase::Forward)),
            ("/w/model.py", "BackwardCompatible", None),
            (
                "/x/torch/nn/modules/module.py",
                "_apply",
                Some(Phase::Setup),
            ),
            (
                "/x/transformers/modeling_utils.py",
                "to",
                Some(Phase::Setup),
            ),
            (
                "C:\\env\\Lib\\site-packages\\torch\\optim\\adam.py",
                "step",
                Some(Phase::Optimizer),
            ),
        ];
        for (file, name, want) in cases {
            assert_eq!(frame_phase(file, name), want, "{file} {name}");
        }
        assert_eq!(tagged_phase("phase=backward"), Some(Phase::Backward));
        assert_eq!(
            tagged_phase("iter=3;phase=optimizer"),
            Some(Phase::Optimizer)
        );
        assert_eq!(tagged_phase("forward"), None);
    }

    #[test]
    fn gaps_take_the_phase_of_their_neighbours() {
        use Phase::*;
        // All allocations, except the frees named below.
        let m = |v: &[Option<Phase>]| fill(v, &vec![true; v.len()]);
        // data, forward, loss, backward, step, data
        let marks = [
            None,
            Some(Forward),
            None,
            Some(Backward),
            None,
            Some(Optimizer),
            None,
        ];
        assert_eq!(
            m(&marks),
            vec![Other, Forward, Forward, Backward, Other, Optimizer, Other]
        );
        assert_eq!(m(&[Some(Forward), None]), vec![Forward, Forward]);
        assert_eq!(
            m(&[Some(Backward), None, Some(Backward)]),
            vec![Backward; 3]
        );
    }
}

#[cfg(test)]
mod run_counts {
    use super::*;

    /// The prefix count gives what counting event by event gives, for every
    /// pair of events and every phase.
    #[test]
    fn runs_starting_between_is_the_count_over_the_events() {
        use Phase::*;
        let phase = vec![
            Setup, Forward, Forward, Backward, Optimizer, Forward, Backward, Backward, Forward,
            Other,
        ];
        let mut run = Vec::new();
        let mut r = 0;
        for i in 0..phase.len() {
            if i > 0 && phase[i] != phase[i - 1] {
                r += 1;
            }
            run.push(r);
        }
        let mut starts = Vec::new();
        let mut c = 0;
        for k in 0..phase.len() {
            if k > 0 && run[k] != run[k - 1] && phase[k] == Forward {
                c += 1;
            }
            starts.push(c);
        }
        let p = Phases {
            phase: phase.clone(),
            run: run.clone(),
            forward_starts: starts,
            ..Default::default()
        };
        let slow = Phases {
            phase,
            run,
            ..Default::default()
        };
        for i in 0..10 {
            for j in 0..12 {
                for ph in [Forward, Backward, Optimizer] {
                    assert_eq!(
                        p.runs_starting_between(i, j, ph),
                        slow.runs_starting_between(i, j, ph),
                        "{i} {j} {ph:?}"
                    );
                }
            }
        }
        assert_eq!(p.runs_starting_between(0, 9, Forward), 3);
    }
}
