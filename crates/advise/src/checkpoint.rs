//! Activation checkpointing of the model's repeated blocks: each block's
//! saved activations freed when its forward ends, and made again when the
//! backward pass reaches it (the recomputation), as
//! `torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)` does.
//!
//! Which allocations belong to which block cannot be read from stacks:
//! every layer of a stack of layers runs the same lines. The calls, what
//! each saves for backward and its output are read in
//! [`super::block_calls`]. The output is kept (the next block's input,
//! which a checkpoint keeps); the saved activations are freed at the end
//! of the call and made again just before the first of them is freed in
//! backward: when backward reaches the block. That recomputation runs the
//! call's allocations again in their order (`Edits::rerun_after`): the
//! saved ones made to stay, the temporaries and the output made and freed
//! again around them. On the H200's GPT it moved the predicted peak
//! allocated from 3 MiB under the checkpointed run's to 1 MiB under. What
//! a call wrote to a Hugging Face KV cache is left out (transformers turns
//! the cache off under checkpointing).

use vramscope_analysis::lifetimes::Lifetimes;
use vramscope_simulate::edits::{Change, ChangeKind, ChangeMatch, Edits};
use vramscope_text::units::bytes;

pub(super) use super::block_calls::{Blocks, SavedCall};
use super::checkpoint_switch::{switch_code, Library};
use super::{refuse, Advice, Candidate, ChangeClass, Method, NotOffered};
use vramscope_analysis::categories::Labelled;
use vramscope_simulate::settings::Settings;

/// The blocks' names in the order the forward first calls them: the order
/// to wrap them in. The first block's saved activations live longest
/// (from the start of the forward to the end of the backward); the last
/// one's are made again as soon as backward starts, where the peak of a
/// step most often is, so checkpointing it alone saves little there.
pub(super) fn forward_order<'a>(calls: impl IntoIterator<Item = &'a SavedCall>) -> Vec<&'a str> {
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
        python_path(container)
    }
}

/// A module's name as the Python that reaches it: `transformer.h` is
/// `model.transformer.h`, a `ModuleDict`'s key that is no identifier
/// `model.heads["a-b"]`. A name with a number in it is
/// `model.get_submodule("backbone.1.block")`: the number is a
/// `Sequential`'s or `ModuleList`'s index (`model.backbone[1]`) or a
/// `ModuleDict`'s key (`model.backbone["1"]`: torchvision's
/// `IntermediateLayerGetter`, which segmentation and detection models use
/// as their backbone, where `model.backbone[1]` raises `KeyError`), and
/// the recording does not say which; `get_submodule` reaches both.
fn python_path(name: &str) -> String {
    if name
        .split('.')
        .any(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        return format!("model.get_submodule({name:?})");
    }
    let mut out = String::from("model");
    for part in name.split('.') {
        if is_identifier(part) {
            out.push('.');
            out.push_str(part);
        } else {
            out.push_str(&format!("[{part:?}]"));
        }
    }
    out
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
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

/// The loop to write: every block wrapped, or the first `k`; for a
/// library's blocks, its own switch where it has one.
fn loop_code(first: &str, k: Option<usize>, library: Option<Library>) -> String {
    if let Some(code) = library.and_then(|lib| switch_code(lib, first, k)) {
        return code;
    }
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

fn edits_for(calls: &[&SavedCall], wrap: Option<&[&str]>, l: &Lifetimes) -> Wrapped {
    let mut edits = Edits::default();
    // The containers in the order the forward first calls them (a string
    // order put `backbone[10]` before `backbone[2]`).
    let mut containers: Vec<String> = Vec::new();
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
        let name = container(&c.name);
        if !containers.iter().any(|n| n == name) {
            containers.push(name.to_owned());
        }
    }
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

/// The calls not inside another: where repeated blocks nest (a
/// Swin's stages and the blocks in each), checkpointing the outer ones is
/// what the row's code writes, and the inner calls' saved activations are
/// the outer call's too: replayed at both levels, each would be freed
/// twice and made again twice (the Swin's row read 22.5% above the real
/// run's).
fn outermost(calls: &[SavedCall]) -> Vec<&SavedCall> {
    calls
        .iter()
        .filter(|c| {
            !calls.iter().any(|d| {
                d.first <= c.first && c.last <= d.last && (d.first, d.last) != (c.first, c.last)
            })
        })
        .collect()
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
fn per_block(calls: &[&SavedCall], l: &Lifetimes) -> String {
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
    let calls = &outermost(&found.calls);
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
        code: loop_code(&first, None, found.library),
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
    let calls = &outermost(&found.calls);
    let order = forward_order(calls.iter().copied());
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
            code: loop_code(&first, Some(k), found.library),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_name_is_written_as_the_python_that_reaches_it() {
        assert_eq!(shown("resnet.4"), "model.get_submodule(\"resnet.4\")");
        assert_eq!(shown("transformer.h"), "model.transformer.h");
        assert_eq!(
            shown("encoder.layers.0.blocks"),
            "model.get_submodule(\"encoder.layers.0.blocks\")"
        );
        assert_eq!(shown("heads.a-b"), "model.heads[\"a-b\"]");
        assert_eq!(shown(""), "the model");
        assert_eq!(shown("common.py:40 in forward"), "common.py:40 in forward");
    }
}
