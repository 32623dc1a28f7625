//! The repeated blocks' calls, and what each keeps for backward: read once
//! for the rows that use them (checkpointing and its fewest blocks,
//! FSDP's units).
//!
//! A call is marked by the recorder (`vramscope.block#NAME` annotations,
//! see `python/vramscope/_annotate/tags.py`) or read from the stacks
//! ([`super::block_stacks`]). What it saves for backward is what it
//! allocated that the backward after it frees; its output is what the next
//! call takes as its input (else the first freed in backward); what the
//! forward frees after the call (autocast's weight casts) and what outlives
//! the backward (a list the program keeps, a KV cache) are not saved
//! activations. What it wrote to a Hugging Face KV cache is kept apart:
//! transformers turns the cache off under checkpointing.

use vramscope_analysis::categories::{Labelled, Phase, Phases};
use vramscope_analysis::lifetimes::{Lifetimes, BEFORE_WINDOW, STILL_ALIVE};
use vramscope_analysis::sites::frame_location;
use vramscope_simulate::edits::Rerun;
use vramscope_snapshot::{Action, Snapshot};

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
    pub(super) blocks: Vec<usize>,
    /// The block the call was given (its input), which a checkpoint keeps
    /// until backward reaches the call, where the call freed it sooner
    /// (a copy of it saved instead).
    pub(super) input: Option<usize>,
    /// The recomputation: the call's saved blocks made again and its
    /// temporaries (made and freed within the call) made and freed again,
    /// in the order the recorded call made them.
    pub(super) rerun: Vec<Rerun>,
    /// What the call wrote to a Hugging Face KV cache (`cache_utils.py`):
    /// kept by the cache, not saved for backward. Under checkpointing
    /// transformers turns the cache off (`use_cache=False`: a checkpointed
    /// layer would write it again when recomputed), so none is made.
    pub(super) cache: Vec<usize>,
}

/// The repeated blocks' calls, read once for all the rows that use them
/// (checkpointing, its fewest blocks, FSDP's units): from the stacks it is
/// a pass over every allocation.
pub(super) struct Blocks {
    /// Whether any block calls were found (marked or read from the stacks).
    pub(super) found: bool,
    /// Those that keep activations for backward, in trace order.
    pub(super) calls: Vec<SavedCall>,
    /// Every call found, as (name, first event, last event) in trace
    /// order, those that keep nothing too: a checkpointed block's forward,
    /// and its recomputation in backward.
    pub(super) all: Vec<(String, usize, usize)>,
    /// The library that defines the blocks, where it has its own
    /// checkpointing switch (a Hugging Face model's layers).
    pub(super) library: Option<super::checkpoint_switch::Library>,
}

impl Blocks {
    pub(super) fn new(snap: &Snapshot, device: u32, labelled: &Labelled) -> Blocks {
        let all = block_calls(snap, device);
        let library = all
            .first()
            .and_then(|(name, _, _)| super::checkpoint_switch::library_of(snap, name));
        Blocks {
            found: !all.is_empty(),
            calls: saved_calls(snap, device, labelled, all.clone()),
            all,
            library,
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
