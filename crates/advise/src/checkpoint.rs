//! Activation checkpointing of the model's repeated blocks: each block's
//! saved activations freed when its forward ends, and made again when the
//! backward pass reaches it (the recomputation), as
//! `torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)` does.
//!
//! Which allocations belong to which block cannot be read from stacks:
//! every layer of a stack of layers runs the same lines. vramscope's
//! recorder marks each call of a repeated block (`vramscope.block#NAME`
//! annotations, see `python/vramscope/_annotate/tags.py`); a block's saved
//! activations are the blocks allocated during its call that outlive it.
//! One of them is kept: the first to be freed in backward, the block's
//! output, which the next block saves as its input (a checkpoint keeps its
//! input). The others are freed at the end of the call and made again just
//! before the first of them is freed in backward: when backward reaches the
//! block. That recomputation runs the call's allocations again in their
//! order (`Edits::rerun_after`): the saved ones made to stay, the
//! temporaries and the output made and freed again around them. On the
//! H200's GPT it moved the predicted peak allocated from 3 MiB under the
//! checkpointed run's to 1 MiB under.

use std::collections::BTreeMap;

use vramscope_analysis::lifetimes::{Lifetimes, BEFORE_WINDOW, STILL_ALIVE};
use vramscope_simulate::edits::{Change, ChangeKind, ChangeMatch, Edits, Rerun};
use vramscope_snapshot::{Action, Snapshot};
use vramscope_text::units::bytes;

use super::{refuse, Advice, Candidate, ChangeClass, Method, NotOffered};
use vramscope_analysis::categories::{Labelled, Phase, Phases};
use vramscope_analysis::sites::frame_location;
use vramscope_simulate::settings::Settings;

/// Prefix of the recorder's block annotations.
pub const BLOCK_ANNOTATION: &str = "vramscope.block#";

/// Each call of a repeated block: (name, first event, last event); from
/// the recorder's annotations, else read from the stacks
/// ([`super::block_stacks`]).
fn block_calls(snap: &Snapshot, device: u32) -> Vec<(String, usize, usize)> {
    let marked = marked_calls(snap, device);
    if !marked.is_empty() {
        return marked;
    }
    super::block_stacks::calls_from_stacks(snap, device)
}

/// The calls the recorder marked (`vramscope.block#NAME` annotations).
fn marked_calls(snap: &Snapshot, device: u32) -> Vec<(String, usize, usize)> {
    vramscope_analysis::backward_blocks::marked_spans(snap, device, BLOCK_ANNOTATION, true)
        .into_iter()
        .map(|(name, first, last)| (name.to_owned(), first, last))
        .collect()
}

/// One call of a repeated block that keeps activations for backward.
pub(super) struct SavedCall {
    pub(super) name: String,
    /// Its first event.
    pub(super) first: usize,
    /// Its last event: its saved activations are freed after it.
    pub(super) last: usize,
    /// The entry after which they are made again (backward reaches it).
    pub(super) again: usize,
    /// Their blocks (the output, kept as the next block's input, left out).
    blocks: Vec<usize>,
    /// The block the call was given (its input), which a checkpoint keeps
    /// until backward reaches the call, where the call freed it sooner
    /// (a copy of it saved instead).
    input: Option<usize>,
    /// The recomputation: the call's saved blocks made again and its
    /// temporaries (made and freed within the call) made and freed again,
    /// in the order the recorded call made them.
    rerun: Vec<Rerun>,
    /// What the call wrote to a Hugging Face KV cache (`cache_utils.py`):
    /// kept by the cache, not saved for backward. Under checkpointing
    /// transformers turns the cache off (`use_cache=False`: a checkpointed
    /// layer would write it again when recomputed), so none is made.
    cache: Vec<usize>,
}

/// The repeated blocks' calls, read once for all the rows that use them
/// (checkpointing, its fewest blocks, FSDP's units): from the stacks it is
/// a pass over every allocation.
pub(super) struct Blocks {
    /// Whether any block calls were found (marked or read from the stacks).
    pub(super) found: bool,
    /// Those that keep activations for backward, in trace order.
    pub(super) calls: Vec<SavedCall>,
}

impl Blocks {
    pub(super) fn new(snap: &Snapshot, device: u32, labelled: &Labelled) -> Blocks {
        let found = block_calls(snap, device);
        Blocks {
            found: !found.is_empty(),
            calls: saved_calls(snap, device, labelled, found),
        }
    }
}

/// A call as first read: what backward frees of what it made (by death),
/// its KV cache, its input; `done` for a call the trace cut.
struct Read {
    name: String,
    first: usize,
    last: usize,
    saved: Vec<usize>,
    cache: Vec<usize>,
    input: Option<usize>,
    done: Option<SavedCall>,
}

impl Read {
    fn done(c: SavedCall) -> Read {
        Read {
            name: String::new(),
            first: c.first,
            last: c.last,
            saved: Vec::new(),
            cache: Vec::new(),
            input: None,
            done: Some(c),
        }
    }
}

/// The calls of repeated blocks with saved activations, in trace order.
fn saved_calls(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    calls: Vec<(String, usize, usize)>,
) -> Vec<SavedCall> {
    let Some(t) = snap.trace(device) else {
        return Vec::new();
    };
    let l = &labelled.lifetimes;
    let phases = &labelled.categories.phases;
    let freed_in_backward =
        |b: usize| phases.phase.get(l.death[b] as usize) == Some(&Phase::Backward);
    let after_backward = backward_ends(phases);
    // A run cut by running out of memory: the calls of its last forward
    // never reached backward, and what they saved is alive at the end.
    let cut = t.action.iter().rposition(|&a| a == Action::Oom);
    // First each call's blocks and input; its output is the next call's
    // input where that was made in it, which takes the next call.
    let mut read: Vec<Read> = Vec::new();
    for (name, first, last) in calls {
        let previous = read.last().map(|r| r.first);
        if cut.is_some_and(|o| o > last) {
            if let Some(c) = cut_call(t, l, &name, first, last, previous) {
                read.push(Read::done(c));
                continue;
            }
        }
        // The blocks allocated during the call that outlive it.
        let outlive: Vec<usize> = (first..=last)
            .filter(|&i| t.action[i] == Action::Alloc)
            .filter_map(|i| {
                let b = *l.event_block.get(i)? as usize;
                let ok = l.birth.get(b) == Some(&(i as u32))
                    && (l.death[b] == STILL_ALIVE || l.death[b] as usize > last);
                ok.then_some(b)
            })
            .collect();
        // Of those, what the backward after the call frees was saved for
        // it (without phases: whatever is freed). What outlives that
        // backward is held by something else (a KV cache, a list the
        // program keeps): checkpointing leaves it as it was, or turns it
        // off (the cache). What the forward frees after the call is the
        // block's output where the next block takes it and does not save
        // it; the rest of it (autocast's weight casts, kept until autocast
        // exits) stays as recorded.
        let backward_end = after_backward.get(last + 1).copied().unwrap_or(u32::MAX);
        let (mut saved, mut early, mut held) = (Vec::new(), Vec::new(), Vec::new());
        for b in outlive {
            let death = l.death[b];
            if death == STILL_ALIVE || (phases.any_marked && death > backward_end) {
                held.push(b);
            } else if !phases.any_marked || freed_in_backward(b) {
                saved.push(b);
            } else {
                early.push(b);
            }
        }
        saved.sort_by_key(|&b| l.death[b]);
        early.sort_by_key(|&b| l.death[b]);
        let cache: Vec<usize> = held
            .into_iter()
            .filter(|&b| in_kv_cache(snap, t, l.birth[b] as usize))
            .collect();
        // A block of layers keeps its input's shape: the input is looked
        // for by the size of what the call hands on.
        let size = saved.first().or(early.first()).map(|&b| l.size[b]);
        let floor = previous.unwrap_or(first.saturating_sub(INPUT_LOOKBACK));
        let input = size.and_then(|s| input_of(t, l, floor, first, s));
        read.push(Read {
            name,
            first,
            last,
            saved,
            cache,
            input,
            done: None,
        });
    }
    let mut out: Vec<SavedCall> = Vec::new();
    for k in 0..read.len() {
        if let Some(c) = read[k].done.take() {
            out.push(c);
            continue;
        }
        let (first, last) = (read[k].first, read[k].last);
        let handed_on = read
            .get(k + 1)
            .and_then(|next| next.input)
            .filter(|&b| (first..=last).contains(&(l.birth[b] as usize)));
        let r = &mut read[k];
        let mut saved = std::mem::take(&mut r.saved);
        // The block's output is kept (the next one's input, which a
        // checkpoint keeps); otherwise the first freed in backward is.
        match handed_on.and_then(|o| saved.iter().position(|&b| b == o)) {
            Some(i) => {
                saved.remove(i);
            }
            None if handed_on.is_some() => {}
            None if !saved.is_empty() => {
                saved.remove(0);
            }
            None => {}
        }
        let Some(&first_freed) = saved.first() else {
            continue; // a call without a graph (evaluation) or a recomputation
        };
        let again = l.death[first_freed] as usize - 1;
        if again <= last {
            continue;
        }
        let input = r
            .input
            .filter(|&b| l.death[b] != STILL_ALIVE && (l.death[b] as usize) < again);
        let (name, cache) = (std::mem::take(&mut r.name), std::mem::take(&mut r.cache));
        let remade: std::collections::HashSet<usize> = saved.iter().copied().collect();
        let mut rerun = Vec::new();
        for i in first..=last {
            let Some(&b) = l.event_block.get(i) else {
                continue;
            };
            let b = b as usize;
            let made_here = l
                .birth
                .get(b)
                .is_some_and(|&x| x != BEFORE_WINDOW && x as usize >= first);
            match t.action[i] {
                Action::Alloc if remade.contains(&b) => rerun.push(Rerun::Make(i)),
                // A temporary of the call: made and freed within it.
                Action::Alloc
                    if made_here && l.death[b] != STILL_ALIVE && l.death[b] as usize <= last =>
                {
                    rerun.push(Rerun::Pulse(i))
                }
                // The call's output, computed again and dropped when the
                // recomputation returns (the kept one stays).
                Action::Alloc if made_here && l.birth[b] as usize == i => {
                    rerun.push(Rerun::Pulse(i))
                }
                Action::FreeCompleted if made_here => {
                    rerun.push(Rerun::Unpulse(l.birth[b] as usize))
                }
                _ => {}
            }
        }
        out.push(SavedCall {
            name,
            first,
            last,
            again,
            blocks: saved,
            input,
            rerun,
            cache,
        });
    }
    out
}

/// Per event: the last event of the first run of backward at or after it
/// (`u32::MAX` where none follows); empty without phases.
fn backward_ends(phases: &Phases) -> Vec<u32> {
    if !phases.any_marked {
        return Vec::new();
    }
    let ph = &phases.phase;
    let mut ends = vec![u32::MAX; ph.len() + 1];
    let mut end = u32::MAX;
    for i in (0..ph.len()).rev() {
        let backward = ph[i] == Phase::Backward;
        if backward && ph.get(i + 1) != Some(&Phase::Backward) {
            end = i as u32; // the last event of a run of backward
        }
        ends[i] = end;
    }
    ends
}

/// Whether the allocation at event `i` was made by a Hugging Face cache's
/// `update` (`transformers/cache_utils.py`: the keys and values a layer
/// appends).
fn in_kv_cache(snap: &Snapshot, t: &vramscope_snapshot::DeviceTrace, i: usize) -> bool {
    snap.stacks.get(t.stack[i]).iter().any(|&fid| {
        let (file, _, _) = frame_location(snap, snap.frames.get(fid));
        file.replace('\\', "/")
            .ends_with("transformers/cache_utils.py")
    })
}

/// A call whose backward the recording never reached (the run ran out of
/// memory first): checkpointed, what it saved is freed when it ends and
/// never made again within the trace; its input is kept to the end. The
/// output is the last block the call made (what it returns). `None` where
/// the call keeps nothing alive to the end, or has backward in the trace.
fn cut_call(
    t: &vramscope_snapshot::DeviceTrace,
    l: &Lifetimes,
    name: &str,
    first: usize,
    last: usize,
    previous: Option<usize>,
) -> Option<SavedCall> {
    let made: Vec<usize> = (first..=last)
        .filter(|&i| t.action[i] == Action::Alloc)
        .filter_map(|i| {
            let b = *l.event_block.get(i)? as usize;
            (l.birth.get(b) == Some(&(i as u32))).then_some(b)
        })
        .collect();
    // Freed after the call: backward reached it (the usual rule applies).
    if made
        .iter()
        .any(|&b| l.death[b] != STILL_ALIVE && l.death[b] as usize > last)
    {
        return None;
    }
    let mut saved: Vec<usize> = made
        .into_iter()
        .filter(|&b| l.death[b] == STILL_ALIVE)
        .collect();
    let output = saved.pop()?;
    if saved.is_empty() {
        return None;
    }
    let end = t.len() - 1;
    let floor = previous.unwrap_or(first.saturating_sub(INPUT_LOOKBACK));
    let input = input_of(t, l, floor, first, l.size[output])
        .filter(|&b| l.death[b] != STILL_ALIVE && (l.death[b] as usize) < end);
    Some(SavedCall {
        name: name.to_owned(),
        first,
        last,
        again: end,
        blocks: saved,
        input,
        rerun: Vec::new(),
        cache: Vec::new(),
    })
}

/// How far before a call its input is looked for, where no call precedes it.
const INPUT_LOOKBACK: usize = 100_000;

/// The call's input: the last block made in `floor..first` of the size of
/// its output (a block of layers keeps its input's shape), still alive when
/// the call starts.
fn input_of(
    t: &vramscope_snapshot::DeviceTrace,
    l: &Lifetimes,
    floor: usize,
    first: usize,
    size: u64,
) -> Option<usize> {
    (floor..first).rev().find_map(|i| {
        if t.action[i] != Action::Alloc || t.size[i] != size {
            return None;
        }
        let b = *l.event_block.get(i)? as usize;
        let alive = l.birth.get(b) == Some(&(i as u32))
            && (l.death[b] == STILL_ALIVE || l.death[b] as usize >= first);
        alive.then_some(b)
    })
}

/// The blocks' names in the order the forward first calls them: the order
/// to wrap them in. The first block's saved activations live longest
/// (from the start of the forward to the end of the backward); the last
/// one's are made again as soon as backward starts, where the peak of a
/// step most often is, so checkpointing it alone saves little there.
pub(super) fn forward_order(calls: &[SavedCall]) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for c in calls {
        if !names.contains(&c.name.as_str()) {
            names.push(&c.name);
        }
    }
    names
}

/// The layers a block belongs to: `blocks` of `blocks.3`; for a call read
/// from the stacks (`common.py:40 in forward #3`), the line that calls it.
pub(super) fn container(name: &str) -> &str {
    match name.rsplit_once(" #") {
        Some((site, _)) => site,
        None => name.rsplit_once('.').map_or("", |(c, _)| c),
    }
}

/// Whether `container` is a line that calls the blocks (read from the
/// stacks) rather than a module's name.
pub(super) fn is_site(container: &str) -> bool {
    container.contains(".py:")
}

pub(super) fn shown(container: &str) -> String {
    if container.is_empty() {
        "the model".to_owned()
    } else if is_site(container) {
        container.to_owned()
    } else {
        format!("model.{container}")
    }
}

/// "every block of model.blocks", or "every block called at
/// common.py:40 in forward" for blocks read from the stacks.
fn every_block(shown: &[String]) -> String {
    if shown.iter().any(|c| is_site(c)) {
        format!(
            "every block called at {}, the calls read from the stacks",
            shown.join(", ")
        )
    } else {
        format!("every block of {}", shown.join(", "))
    }
}

/// The loop to write: every block wrapped, or the first `k`.
fn loop_code(first: &str, k: Option<usize>) -> String {
    let head = "from torch.utils.checkpoint import checkpoint\n";
    match (is_site(first), k) {
        (true, None) => format!("{head}# at {first}, where the forward calls each block:\nh = checkpoint(block, h, use_reentrant=False)"),
        (true, Some(k)) => format!(
            "{head}# at {first}, where the forward calls each block (i: the block's place in the loop):\nh = \
             checkpoint(block, h, use_reentrant=False) if i < {k} else block(h)"
        ),
        (false, None) => format!(
            "{head}# in the forward that loops over {first}:\nfor block in {first}:\n    h = checkpoint(block, h, \
             use_reentrant=False)"
        ),
        (false, Some(k)) => format!(
            "{head}# in the forward that loops over {first}:\nfor i, block in enumerate({first}):\n    h = \
             checkpoint(block, h, use_reentrant=False) if i < {k} else block(h)"
        ),
    }
}

/// Checkpointing the blocks named `wrap` (every block where `None`).
struct Wrapped {
    edits: Edits,
    /// The blocks' containers, as shown.
    shown: Vec<String>,
    /// Calls checkpointed, their saved blocks and those blocks' bytes.
    checkpointed: usize,
    blocks: u64,
    freed_bytes: u64,
    /// What the wrapped calls wrote to a Hugging Face KV cache, left out.
    cache_bytes: u64,
}

fn edits_for(calls: &[SavedCall], wrap: Option<&[&str]>, l: &Lifetimes) -> Wrapped {
    let mut edits = Edits::default();
    let mut names: BTreeMap<String, ()> = BTreeMap::new();
    let (mut blocks, mut freed_bytes, mut checkpointed, mut cache_bytes) =
        (0u64, 0u64, 0usize, 0u64);
    for c in calls {
        if wrap.is_some_and(|w| !w.contains(&c.name.as_str())) {
            continue;
        }
        for &b in &c.blocks {
            let birth = l.birth[b] as usize;
            edits.free_after.entry(c.last).or_default().push(birth);
            blocks += 1;
            freed_bytes += l.size[b];
        }
        for &b in &c.cache {
            edits.drop_alloc.insert(l.birth[b] as usize);
            cache_bytes += l.size[b];
        }
        edits
            .rerun_after
            .entry(c.again)
            .or_default()
            .extend(c.rerun.iter().copied());
        // The checkpoint keeps the call's input until backward reaches it.
        if let Some(b) = c.input {
            edits
                .free_late
                .entry(c.again)
                .or_default()
                .push(l.birth[b] as usize);
        }
        checkpointed += 1;
        names.insert(container(&c.name).to_owned(), ());
    }
    let containers: Vec<String> = names.into_keys().collect();
    let shown: Vec<String> = containers.iter().map(|c| shown(c)).collect();
    edits.matched.push(ChangeMatch {
        change: Change {
            site: format!("the blocks of {}", shown.join(", ")),
            kind: ChangeKind::FreeEarly,
        },
        sites: containers,
        blocks,
        bytes: freed_bytes,
    });
    Wrapped {
        edits,
        shown,
        checkpointed,
        blocks,
        freed_bytes,
        cache_bytes,
    }
}

/// The clause on a KV cache the blocks wrote, for the row's `how`.
fn cache_clause(w: &Wrapped) -> String {
    if w.cache_bytes == 0 {
        return String::new();
    }
    format!(
        "; the {} the blocks wrote to Hugging Face's KV cache over the trace (cache_utils.py) left out: transformers turns the \
         cache off under checkpointing (use_cache=False), as a checkpointed layer would write it again when \
         recomputed",
        bytes(w.cache_bytes)
    )
}

/// What each block saves for backward, largest first (its first call),
/// for the row's `how`: which blocks matter.
fn per_block(calls: &[SavedCall], l: &Lifetimes) -> String {
    let mut seen: Vec<(&str, u64)> = Vec::new();
    for c in calls {
        if !seen.iter().any(|(n, _)| *n == c.name) {
            seen.push((&c.name, c.blocks.iter().map(|&b| l.size[b]).sum()));
        }
    }
    let n = seen.len();
    seen.sort_by_key(|s| std::cmp::Reverse(s.1));
    let listed: Vec<String> = seen
        .iter()
        .take(4)
        .map(|(name, b)| format!("{name} {}", bytes(*b)))
        .collect();
    format!(
        "; saved per call, largest first: {}{}",
        listed.join(", "),
        if n > 4 {
            format!(" and {} more", n - 4)
        } else {
            String::new()
        }
    )
}

/// Checkpointing every repeated block, where the recorder marked them.
pub(super) fn checkpoint_candidate(
    found: &Blocks,
    labelled: &Labelled,
    recorded: &Settings,
    not_offered: &mut Vec<NotOffered>,
) -> Option<Candidate> {
    let refuse = |not_offered: &mut Vec<NotOffered>, why: &str| {
        refuse(not_offered, "activation checkpointing", why)
    };
    if !found.found {
        return refuse(
            not_offered,
            "no block calls recorded, and no loop over layers found in the stacks: vramscope.record marks each call \
             of a model's repeated blocks (the layers of a ModuleList or Sequential of one class), which tells one \
             layer's saved activations from the next's",
        );
    }
    let calls = &found.calls;
    if calls.is_empty() {
        return refuse(
            not_offered,
            "the recorded block calls keep no activations for backward (evaluation, or no gradients)",
        );
    }
    let l = &labelled.lifetimes;
    let w = edits_for(calls, None, l);
    let (shown, checkpointed, blocks, freed_bytes) =
        (&w.shown, w.checkpointed, w.blocks, w.freed_bytes);
    let first = shown
        .first()
        .cloned()
        .unwrap_or_else(|| "model.layers".into());
    Some(Candidate {
        class: ChangeClass::Checkpoint,
        change: format!(
            "activation checkpointing of {} (torch.utils.checkpoint)",
            every_block(shown)
        ),
        code: loop_code(&first, None),
        settings: recorded.clone(),
        edits: Some(w.edits.clone()),
        method: Method::Replayed,
        how: format!(
            "replayed with the saved activations of {checkpointed} block calls ({blocks} blocks, {} over the trace) \
             freed when each call ends and made again when backward reaches the block (just before the first of \
             them is freed), each block's output kept as the next one's input; the recomputation's own \
             temporaries and output made and freed again around them, in the order the call made them{}{}",
            bytes(freed_bytes),
            cache_clause(&w),
            per_block(calls, l)
        ),
    })
}

/// Where checkpointing every block fits and the run as recorded does not:
/// the fewest blocks, wrapped in forward order, that still fit (each
/// wrapped block's forward runs twice: fewer blocks, less recomputation),
/// found by replaying the first k blocks wrapped with `eval` (the answer
/// of the path that advises: the allocator model or the count).
pub(super) fn fewest_that_fit(
    found: &Blocks,
    labelled: &Labelled,
    recorded: &Settings,
    eval: &dyn Fn(&Candidate) -> (Advice, u64),
) -> Option<(Advice, u64)> {
    let calls = &found.calls;
    let order = forward_order(calls);
    let n = order.len();
    let l = &labelled.lifetimes;
    let try_k = |k: usize| -> (Advice, u64) {
        let wrap = &order[..k];
        let w = edits_for(calls, Some(wrap), l);
        let (shown, checkpointed, blocks, freed_bytes) =
            (&w.shown, w.checkpointed, w.blocks, w.freed_bytes);
        let first = shown
            .first()
            .cloned()
            .unwrap_or_else(|| "model.layers".into());
        // Calls read from the stacks are named by their place in the loop.
        let short = |n: &str| -> String {
            match n.rsplit_once(" #") {
                Some((_, i)) => format!("#{i}"),
                None => n.to_owned(),
            }
        };
        let mut names = if k <= 4 {
            wrap.iter().map(|n| short(n)).collect::<Vec<_>>().join(", ")
        } else {
            format!("{} … {}", short(wrap[0]), short(wrap[k - 1]))
        };
        if is_site(&first) {
            names = format!("{names} at {first}");
        }
        eval(&Candidate {
            class: ChangeClass::Checkpoint,
            change: format!(
                "activation checkpointing of the first {k} of the {n} blocks ({names}): the fewest that fit"
            ),
            code: loop_code(&first, Some(k)),
            settings: recorded.clone(),
            edits: Some(w.edits.clone()),
            method: Method::Replayed,
            how: format!(
                "replayed with the saved activations of the {checkpointed} calls of the first {k} {} in forward \
                 order ({blocks} blocks, {} over the trace) freed when each call ends and made again when backward \
                 reaches the block, the others as recorded; the fewest found by halving the range of k, each k \
                 tried replayed; the recomputation's own temporaries made and freed again around them{}",
                if k == 1 { "block" } else { "blocks" },
                bytes(freed_bytes),
                cache_clause(&w)
            ),
        })
    };
    // The search assumes more blocks wrapped never peak higher: each
    // wrapped block frees its activations for longer than it remakes them.
    let (mut lo, mut hi) = (1usize, n);
    let mut best = None;
    while lo < hi {
        let mid = (lo + hi) / 2;
        let r = try_k(mid);
        if r.0.fits == Some(true) {
            best = Some(r);
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    best
}
