//! The horizon of a replay. A recording that ends at an out-of-memory
//! error (or any dump) in the middle of an iteration holds nothing of what
//! the program would have done after it: a change that makes the failing
//! request fit says nothing yet about the rest of that iteration, where a
//! larger request may come (on an H200, half the batch of a GPT that ran
//! out in its forward ran out again later in the same step).
//!
//! Where the file holds an earlier complete iteration, the rest of the
//! interrupted one is projected from it: the allocations of the part both
//! recorded are aligned by stack (the same code allocates in the same
//! order every iteration), each stack's size ratio between the two is
//! measured there, and the earlier iteration's remainder, from the aligned
//! failing request to its end, is appended to the trace with its sizes
//! scaled by those ratios ([`Tail`]). The replay runs it like the recorded
//! part, program changes included (they apply by the earlier entries'
//! sites), and its result is marked as a projection.

use vramscope_snapshot::hash::FxHashMap as HashMap;

use serde::Serialize;
use vramscope_analysis::iterations::find_iterations;
use vramscope_gpus::allocator::{block_size, MIN_BLOCK};
use vramscope_snapshot::{Action, DeviceTrace, Snapshot};

/// How far ahead of the last aligned allocation the alignment looks for
/// the next one of the same stack (allocations the two iterations do not
/// share are skipped, not searched for across the whole iteration).
const LOOKAHEAD: usize = 64;
/// Share of the interrupted iteration's allocations that must align with
/// the earlier iteration for a projection to be made at all.
const MIN_ALIGNED: f64 = 0.8;
/// Addresses of projected blocks start here, far above any device's.
const PROJECTED_BASE: u64 = 1 << 62;

/// One projected entry: an allocation or a free copied from entry `from`
/// of the earlier iteration.
#[derive(Clone, Debug, PartialEq)]
pub struct TailEntry {
    pub from: usize,
    pub free: bool,
    /// The recorded address it frees (a block of the recorded part) or
    /// the projected address it allocates or frees.
    pub addr: u64,
    /// Bytes asked for (allocations).
    pub size: u64,
    pub stream: u64,
}

/// What the replay runs after the recorded entries before `cut`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tail {
    pub cut: usize,
    pub entries: Vec<TailEntry>,
}

/// Where the recording stops and, if it could be made, how the rest of the
/// interrupted iteration was projected.
#[derive(Clone, Debug, Serialize)]
pub struct Horizon {
    /// The entry where the recording ends (the failing request).
    pub entry: usize,
    /// The iteration it interrupted (1-based; `None`: before the first
    /// iteration, or no iterations were found).
    pub iteration: Option<u32>,
    /// The complete iteration the rest was projected from.
    pub from_iteration: Option<u32>,
    /// Allocations of the interrupted iteration's recorded part aligned
    /// with the earlier iteration, of how many.
    pub aligned: usize,
    pub allocations: usize,
    /// The median size ratio (interrupted / earlier) of the aligned part.
    pub ratio: f64,
    /// Projected entries, and frees of the earlier iteration left out
    /// because what they free has no counterpart (kept allocated, so the
    /// projection errs towards "does not fit").
    pub projected_entries: usize,
    pub frees_left_out: usize,
    /// Why no projection was made, when none was.
    pub why_not: Option<String>,
    #[serde(skip)]
    pub tail: Option<Tail>,
}

/// The horizon of device `device`'s trace, ending at entry `end` (the
/// recorded OOM).
pub fn horizon(snap: &Snapshot, device: u32, end: usize) -> Horizon {
    let empty = DeviceTrace::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let its = find_iterations(snap, device);
    let k = its.of_event(end);
    let mut h = Horizon {
        entry: end,
        iteration: (k > 0).then_some(k),
        from_iteration: None,
        aligned: 0,
        allocations: 0,
        ratio: 1.0,
        projected_entries: 0,
        frees_left_out: 0,
        why_not: None,
        tail: None,
    };
    let Some(current) = its.list.iter().find(|it| it.number == k) else {
        h.why_not = Some(if its.list.is_empty() {
            "the file holds no iterations to project the rest from".into()
        } else {
            "it ended before the first iteration (in the setup), so no complete iteration comes before it".into()
        });
        return h;
    };
    let is_alloc = |i: usize| t.action[i] == Action::Alloc;
    let mine: Vec<usize> = (current.start..end)
        .filter(|&i| is_alloc(i))
        .chain(std::iter::once(end))
        .collect();
    h.allocations = mine.len();
    // The complete iteration that aligns best; the latest on a tie.
    let mut best: Option<(usize, u32, Pairs)> = None;
    for it in its.complete().filter(|it| it.number < k) {
        let theirs: Vec<usize> = (it.start..it.end).filter(|&i| is_alloc(i)).collect();
        let pairs = align(t, &mine, &theirs, |i| {
            !snap.stacks.get(t.stack[i]).is_empty()
        });
        let ends_aligned = pairs.last().is_some_and(|p| p.0 == end);
        if ends_aligned && best.as_ref().is_none_or(|b| pairs.len() >= b.0) {
            best = Some((pairs.len(), it.number, pairs));
        }
    }
    let Some((n, j, pairs)) = best else {
        h.why_not = Some(if its.complete().any(|it| it.number < k) {
            "the failing request has no counterpart in an earlier iteration (its code did not allocate there)".into()
        } else {
            format!("no complete iteration comes before iteration {k}")
        });
        return h;
    };
    h.aligned = n;
    h.from_iteration = Some(j);
    if (n as f64) < MIN_ALIGNED * mine.len() as f64 {
        h.why_not = Some(format!(
            "only {n} of its {} allocations line up with iteration {j}'s: the two iterations run different code",
            mine.len()
        ));
        return h;
    }
    let Some(earlier) = its.list.iter().find(|it| it.number == j) else {
        return h;
    };
    // Blocks of the interrupted iteration still allocated at the failing
    // request: what the earlier iteration's later frees may free.
    let mut live: HashMap<u64, usize> = HashMap::default();
    for i in current.start..end {
        match t.action[i] {
            Action::Alloc => {
                live.insert(t.addr[i], i);
            }
            Action::FreeCompleted => {
                live.remove(&t.addr[i]);
            }
            _ => {}
        }
    }
    let (tail, ratio, left_out) = project(t, &pairs, earlier.end, &live);
    h.ratio = ratio;
    h.projected_entries = tail.entries.len();
    h.frees_left_out = left_out;
    h.tail = Some(tail);
    h
}

/// Pairs (interrupted entry, earlier entry) of allocations made by the same
/// stack, in order, each searched for a little ahead of the last. The
/// failing request (`mine`'s last) is PyTorch's `oom` entry, which carries
/// no stack: it pairs with the earlier iteration's allocation right after
/// the last one aligned, the one the same code made next.
/// Aligned (interrupted entry, earlier entry) index pairs.
type Pairs = Vec<(usize, usize)>;

fn align(
    t: &DeviceTrace,
    mine: &[usize],
    theirs: &[usize],
    stacked: impl Fn(usize) -> bool,
) -> Pairs {
    let mut pairs = Vec::new();
    let mut at = 0;
    let Some((&failing, before)) = mine.split_last() else {
        return pairs;
    };
    for &m in before {
        // The first pair is searched for across the whole earlier
        // iteration: it may open with work the interrupted one does not
        // repeat (building the model inside the first step).
        let reach = if pairs.is_empty() {
            theirs.len()
        } else {
            LOOKAHEAD
        };
        let window = &theirs[at.min(theirs.len())..(at + reach).min(theirs.len())];
        if let Some(q) = window.iter().position(|&e| t.stack[e] == t.stack[m]) {
            pairs.push((m, window[q]));
            at += q + 1;
        }
    }
    let window = &theirs[at.min(theirs.len())..(at + LOOKAHEAD).min(theirs.len())];
    let next = if stacked(failing) {
        window
            .iter()
            .find(|&&e| t.stack[e] == t.stack[failing])
            .copied()
    } else {
        window.first().copied()
    };
    if let Some(e) = next {
        pairs.push((failing, e));
    }
    pairs
}

/// The earlier iteration's entries from the one aligned with the failing
/// request to `end`, sizes scaled per stack; the median ratio; the frees
/// left out.
fn project(
    t: &DeviceTrace,
    pairs: &[(usize, usize)],
    end: usize,
    live: &HashMap<u64, usize>,
) -> (Tail, f64, usize) {
    let Some(&(cut, first)) = pairs.last() else {
        return (Tail::default(), 1.0, 0);
    };
    let mut by_stack: HashMap<_, Vec<f64>> = HashMap::default();
    let mut all = Vec::new();
    for &(m, e) in &pairs[..pairs.len() - 1] {
        if t.size[e] > 0 {
            let r = t.size[m] as f64 / t.size[e] as f64;
            by_stack.entry(t.stack[e]).or_default().push(r);
            all.push(r);
        }
    }
    let overall = median(&mut all).unwrap_or(1.0);
    let ratio: HashMap<_, f64> = by_stack
        .into_iter()
        .filter_map(|(s, mut v)| Some((s, median(&mut v)?)))
        .collect();
    // Blocks of the earlier iteration that have a counterpart: the aligned
    // ones (recorded addresses of the interrupted iteration; `None` where
    // that block was already freed before the failing request), then the
    // projected ones.
    let mut counterpart: HashMap<u64, Option<u64>> = pairs[..pairs.len() - 1]
        .iter()
        .map(|&(m, e)| {
            let alive = live.get(&t.addr[m]) == Some(&m);
            (t.addr[e], alive.then_some(t.addr[m]))
        })
        .collect();
    let mut tail = Tail {
        cut,
        entries: Vec::new(),
    };
    let mut next = PROJECTED_BASE;
    let mut left_out = 0;
    for e in first..end {
        match t.action[e] {
            Action::Alloc => {
                let size = if e == first {
                    t.size[cut]
                } else {
                    let r = ratio.get(&t.stack[e]).copied().unwrap_or(overall);
                    ((t.size[e] as f64 * r).round() as u64).max(1)
                };
                counterpart.insert(t.addr[e], Some(next));
                tail.entries.push(TailEntry {
                    from: e,
                    free: false,
                    addr: next,
                    size,
                    stream: t.stream[e],
                });
                next += block_size(size) + MIN_BLOCK;
            }
            Action::FreeCompleted => match counterpart.remove(&t.addr[e]) {
                Some(None) => {}
                Some(Some(addr)) => tail.entries.push(TailEntry {
                    from: e,
                    free: true,
                    addr,
                    size: 0,
                    stream: t.stream[e],
                }),
                None => left_out += 1,
            },
            _ => {}
        }
    }
    (tail, overall, left_out)
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}
