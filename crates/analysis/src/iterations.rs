//! Training iterations: where each one starts and ends in a device trace.
//!
//! Leaks only show from one iteration to the next, so the trace is cut into
//! iterations first. In order of trust:
//!
//! 1. `ProfilerStep#N` annotations (`torch.profiler` schedules and
//!    `vramscope.step()` write them).
//! 2. Any other annotation that repeats
//!    (`record_function("train_step")`, PyTorch's own
//!    `Optimizer.zero_grad#AdamW.zero_grad`, the DataLoader's `__next__`).
//! 3. `user_metadata` labels on the events: a cycle of labels
//!    (`forward`, `backward`, `step`) begins an iteration where its first
//!    label recurs; labels that each occur once (`epoch 1 step 3`) are one
//!    iteration each.
//! 4. The optimizer step: runs of events whose stack passes through
//!    `torch/optim/`; an iteration ends where such a run ends.
//! 5. The repeating pattern of the trace: an allocation (same stack, same
//!    size) that occurs exactly once in each of N equal parts of the trace
//!    marks where each part begins.
//!
//! Annotations need event times; traces without `time_us` use 3 to 5.

use serde::Serialize;
use vramscope_snapshot::hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use vramscope_snapshot::{Action, AnnotationStage, DeviceTrace, Snapshot, StackId, StrId, NO_TIME};

use crate::sites::frame_location;

/// How the iterations were found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "name")]
pub enum IterationSource {
    ProfilerStep,
    /// A repeated `record_function` annotation, named.
    Annotation(String),
    /// Per-event `user_metadata` labels (`vramscope.mark`,
    /// `torch.cuda.memory._set_memory_metadata`): the label that begins
    /// each cycle of labels, or the first of labels that each occur once.
    UserMetadata(String),
    OptimizerStep,
    RepeatedPattern,
    /// Nothing repeats: the trace is one stretch.
    None,
}

/// One iteration as a half-open range of event indices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Iteration {
    /// 1-based, in trace order.
    pub number: u32,
    /// First event of the iteration.
    pub start: usize,
    /// One past its last event.
    pub end: usize,
    /// Whether the iteration ended inside the trace (the last one may have
    /// been cut short by the dump).
    pub complete: bool,
}

/// The iterations of a trace. Events before the first are setup (model and
/// data creation); with [`IterationSource::None`] the list is empty.
#[derive(Clone, Debug, Serialize)]
pub struct Iterations {
    pub source: IterationSource,
    pub list: Vec<Iteration>,
    /// Why a repetition that was found was not taken for iterations.
    pub rejected: Option<String>,
}

impl Iterations {
    /// The iteration holding event `i`: 0 before the first, `n + 1` after
    /// the end of the last (complete) one.
    pub fn of_event(&self, i: usize) -> u32 {
        let k = self.list.partition_point(|it| it.start <= i);
        if k == 0 {
            return 0;
        }
        let it = &self.list[k - 1];
        if i >= it.end && k == self.list.len() {
            it.number + 1
        } else {
            // Events between the end of one iteration and the start of the
            // next belong to the one that ended.
            it.number
        }
    }

    pub fn complete(&self) -> impl Iterator<Item = &Iteration> {
        self.list.iter().filter(|i| i.complete)
    }
}

/// Find the iterations of `device`'s trace.
pub fn find_iterations(snap: &Snapshot, device: u32) -> Iterations {
    let empty = DeviceTrace::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let mut rejected = None;
    let found = from_annotations(snap, device, t)
        .or_else(|| from_user_metadata(snap, t))
        .or_else(|| from_optimizer(snap, t))
        .or_else(|| from_pattern(t, &mut rejected));
    match found {
        Some((source, list)) if list.len() >= 2 => Iterations {
            source,
            list,
            rejected: None,
        },
        _ => Iterations {
            source: IterationSource::None,
            list: Vec::new(),
            rejected,
        },
    }
}

/// First event at or after `time` (events are in time order).
pub(crate) fn event_at(t: &DeviceTrace, time: i64) -> usize {
    t.time_us.partition_point(|&x| x == NO_TIME || x < time)
}

/// Cut at `starts` (event indices, ascending); the last iteration is complete
/// if `last_end` says where it ended.
fn cut(starts: &[usize], last_end: Option<usize>, len: usize) -> Vec<Iteration> {
    let mut out: Vec<Iteration> = Vec::new();
    for (k, &s) in starts.iter().enumerate() {
        let (end, complete) = match starts.get(k + 1) {
            Some(&next) => (next, true),
            None => (last_end.unwrap_or(len).min(len).max(s), last_end.is_some()),
        };
        if end > s {
            out.push(Iteration {
                number: out.len() as u32 + 1,
                start: s,
                end,
                complete,
            });
        }
    }
    out
}

fn from_annotations(
    snap: &Snapshot,
    device: u32,
    t: &DeviceTrace,
) -> Option<(IterationSource, Vec<Iteration>)> {
    if t.is_empty() || !t.has_time() {
        return None;
    }
    let ours = snap.annotations.iter().any(|a| a.device == device as i64);
    // name → (START times, END times)
    let mut by_name: HashMap<&str, (Vec<i64>, Vec<i64>)> = HashMap::default();
    for a in &snap.annotations {
        if ours && a.device != device as i64 {
            continue;
        }
        let name = snap.str(a.name);
        let key = if name.starts_with("ProfilerStep#") {
            "ProfilerStep#"
        } else if name.starts_with("gc.collect") {
            continue;
        } else {
            name
        };
        let e = by_name.entry(key).or_default();
        match a.stage {
            AnnotationStage::Start => e.0.push(a.time_us),
            AnnotationStage::End => e.1.push(a.time_us),
            AnnotationStage::Other => {}
        }
    }
    let first_time = t.time_us.iter().copied().find(|&x| x != NO_TIME)?;
    let last_time = t.time_us.iter().rev().copied().find(|&x| x != NO_TIME)?;
    // `steps`: each range is a whole iteration (ProfilerStep), so the last
    // one's END is where it ended; other annotations only mark where one begins.
    let build = |starts: &mut Vec<i64>, ends: &mut Vec<i64>, steps: bool| -> Vec<Iteration> {
        starts.sort_unstable();
        ends.sort_unstable();
        // Iterations that began before the first event start at event 0; of
        // several such, only the last can be placed.
        let before = starts.partition_point(|&s| s < first_time);
        if before > 1 {
            starts.drain(..before - 1);
        }
        starts.retain(|&s| s <= last_time);
        let idx: Vec<usize> = starts.iter().map(|&s| event_at(t, s)).collect();
        let last_end = starts
            .last()
            .and_then(|&s| ends.iter().copied().find(|&e| e >= s))
            .filter(|_| steps)
            .map(|e| event_at(t, e.saturating_add(1)));
        let mut idx = idx;
        idx.dedup();
        cut(&idx, last_end, t.len())
    };
    if let Some((mut s, mut e)) = by_name.remove("ProfilerStep#") {
        let list = build(&mut s, &mut e, true);
        if list.len() >= 2 {
            return Some((IterationSource::ProfilerStep, list));
        }
    }
    // The most frequent repeated annotation; ties go to the one that starts first.
    let mut best: Option<(&str, usize, i64)> = None;
    for (name, (s, _)) in &by_name {
        let first = s.iter().copied().min().unwrap_or(i64::MAX);
        if s.len() >= 2
            && best.is_none_or(|(bn, n, f)| {
                (s.len(), std::cmp::Reverse(first), *name) > (n, std::cmp::Reverse(f), bn)
            })
        {
            best = Some((name, s.len(), first));
        }
    }
    let (name, _, _) = best?;
    let name = name.to_owned();
    let (mut s, mut e) = by_name.remove(name.as_str())?;
    let list = build(&mut s, &mut e, false);
    (list.len() >= 2).then_some((IterationSource::Annotation(name), list))
}

fn from_user_metadata(
    snap: &Snapshot,
    t: &DeviceTrace,
) -> Option<(IterationSource, Vec<Iteration>)> {
    let meta = t.user_metadata.as_ref()?;
    // Runs of one label over the allocations; unlabelled ones are skipped.
    let mut runs: Vec<(StrId, usize)> = Vec::new();
    for (i, (&m, &action)) in meta.iter().zip(&t.action).enumerate() {
        if action != Action::Alloc || snap.str(m).is_empty() {
            continue;
        }
        if runs.last().is_none_or(|r| r.0 != m) {
            runs.push((m, i));
        }
    }
    let distinct: HashSet<StrId> = runs.iter().map(|r| r.0).collect();
    let starts: Vec<usize> = if distinct.len() == runs.len() {
        if runs.len() < 3 {
            return None;
        }
        runs.iter().map(|r| r.1).collect()
    } else {
        let first = runs.first()?.0;
        runs.iter().filter(|r| r.0 == first).map(|r| r.1).collect()
    };
    let name = snap.str(runs.first()?.0).to_owned();
    let list = cut(&starts, None, t.len());
    (list.len() >= 2).then_some((IterationSource::UserMetadata(name), list))
}

/// Whether a stack passes through the optimizer (`torch/optim/...`).
fn is_optimizer_stack(snap: &Snapshot, stack: StackId) -> bool {
    snap.stacks.get(stack).iter().any(|&fid| {
        let (file, _, _) = frame_location(snap, snap.frames.get(fid));
        let f = file.replace('\\', "/");
        f.contains("torch/optim/")
    })
}

/// Non-optimizer events allowed inside one optimizer run (frees of blocks
/// recorded with the caller's stack, stream events).
const OPTIMIZER_GAP: usize = 8;

fn from_optimizer(snap: &Snapshot, t: &DeviceTrace) -> Option<(IterationSource, Vec<Iteration>)> {
    let mut cache: HashMap<StackId, bool> = HashMap::default();
    let mut run_ends = Vec::new();
    let mut last: Option<usize> = None;
    for i in 0..t.len() {
        if !matches!(t.action[i], Action::Alloc | Action::FreeCompleted) {
            continue;
        }
        let s = t.stack[i];
        let opt = *cache
            .entry(s)
            .or_insert_with(|| is_optimizer_stack(snap, s));
        if !opt {
            continue;
        }
        if let Some(l) = last {
            if i - l > OPTIMIZER_GAP {
                run_ends.push(l);
            }
        }
        last = Some(i);
    }
    run_ends.push(last?);
    if run_ends.len() < 2 {
        return None;
    }
    // Iteration k runs from the end of step k-1 to the end of step k; the
    // first from the start of the trace, the rest after the last step is
    // an incomplete iteration.
    let mut starts = vec![0usize];
    starts.extend(run_ends.iter().map(|&e| e + 1));
    let last_end = starts.pop();
    let list = cut(&starts, last_end, t.len());
    Some((IterationSource::OptimizerStep, list))
}

/// Whether memory comes back down within the parts that start at `starts`,
/// as it does in training or inference iterations (activations are freed by
/// the end) and does not in the layers of one forward pass, which repeat
/// just as regularly but keep their activations.
fn returns_to_baseline(t: &DeviceTrace, starts: &[usize]) -> bool {
    let mut cur = 0i128;
    let mut level = Vec::with_capacity(t.len() + 1);
    level.push(0i128);
    for i in 0..t.len() {
        match t.action[i] {
            Action::Alloc => cur += t.size[i] as i128,
            Action::FreeCompleted => cur -= t.size[i] as i128,
            _ => {}
        }
        level.push(cur);
    }
    // level[i] is the total before event i.
    let (mut kept, mut swing) = (Vec::new(), Vec::new());
    for w in starts.windows(2) {
        let (a, b) = (w[0], w[1]);
        let peak = level[a..=b].iter().copied().max().unwrap_or(level[a]);
        kept.push(level[b] - level[a]);
        swing.push(peak - level[a]);
    }
    let median = |v: &mut Vec<i128>| {
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    let (kept, swing) = (median(&mut kept), median(&mut swing));
    swing > 0 && kept * 2 <= swing
}

fn from_pattern(
    t: &DeviceTrace,
    rejected: &mut Option<String>,
) -> Option<(IterationSource, Vec<Iteration>)> {
    // Occurrences of each (stack, size) allocation.
    let mut occ: HashMap<(StackId, u64), Vec<u32>> = HashMap::default();
    for i in 0..t.len() {
        if t.action[i] == Action::Alloc && !t.stack[i].is_none() {
            occ.entry((t.stack[i], t.size[i]))
                .or_default()
                .push(i as u32);
        }
    }
    // The number of iterations: the most common count among repeated keys.
    let mut counts: HashMap<usize, usize> = HashMap::default();
    for v in occ.values().filter(|v| v.len() >= 3) {
        *counts.entry(v.len()).or_default() += 1;
    }
    let (&n, _) = counts.iter().max_by_key(|&(&c, &k)| (k, c))?;
    let mut keys: Vec<&Vec<u32>> = occ.values().filter(|v| v.len() == n).collect();
    keys.sort_unstable_by_key(|v| v[0]);
    let marker = keys.first()?;
    let starts: Vec<usize> = marker.iter().map(|&i| i as usize).collect();
    // Check: most keys with the same count fall once into each part.
    let part = |i: u32| starts.partition_point(|&s| s <= i as usize);
    let mut consistent = 0usize;
    for v in &keys {
        let parts: HashSet<usize> = v.iter().map(|&i| part(i)).collect();
        if parts.len() == n && !parts.contains(&0) {
            consistent += 1;
        }
    }
    if consistent * 2 < keys.len() || keys.len() < 2 {
        return None;
    }
    if !returns_to_baseline(t, &starts) {
        *rejected = Some(format!(
            "the allocations repeat {n} times, but memory does not come back down between repeats: \
             they look like the layers of one pass, not iterations"
        ));
        return None;
    }
    let mut list = cut(&starts, None, t.len());
    // The last part runs to the end of the trace: complete only if it holds
    // as many events as the others, on average.
    if let Some(last) = list.last_mut() {
        let others = (starts[starts.len() - 1] - starts[0]) / (n - 1).max(1);
        last.complete = last.end - last.start >= others;
    }
    Some((IterationSource::RepeatedPattern, list))
}
