//! Activation checkpointing of the model's repeated blocks: each block's
//! saved activations freed when its forward ends, and made again when the
//! backward pass reaches it (the recomputation), as
//! `torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)` does.
//!
//! Which allocations belong to which block cannot be read from stacks:
//! every layer of a stack of layers runs the same lines. vramscope's
//! recorder marks each call of a repeated block (`vramscope.block#NAME`
//! annotations, see `python/vramscope/_tags.py`); a block's saved
//! activations are the blocks allocated during its call that outlive it.
//! One of them is kept: the first to be freed in backward, the block's
//! output, which the next block saves as its input (a checkpoint keeps its
//! input). The others are freed at the end of the call and made again just
//! before the first of them is freed in backward: when backward reaches the
//! block. The recomputation's own temporaries are not counted.

use std::collections::BTreeMap;

use vramscope_analysis::edits::{Change, ChangeKind, ChangeMatch, Edits};
use vramscope_analysis::lifetimes::STILL_ALIVE;
use vramscope_analysis::units::bytes;
use vramscope_snapshot::{Action, AnnotationStage, Snapshot};

use super::{refuse, Candidate, ChangeClass, Method, NotOffered};
use crate::settings::Settings;
use vramscope_analysis::categories::Labelled;

/// Prefix of the recorder's block annotations.
pub const BLOCK_ANNOTATION: &str = "vramscope.block#";

/// Each call of a repeated block: (name, first event, last event).
fn block_calls(snap: &Snapshot, device: u32) -> Vec<(String, usize, usize)> {
    let Some(t) = snap.trace(device).filter(|t| t.has_time()) else {
        return Vec::new();
    };
    let mut open: Vec<(&str, i64)> = Vec::new();
    let mut out = Vec::new();
    for a in &snap.annotations {
        let Some(name) = snap.str(a.name).strip_prefix(BLOCK_ANNOTATION) else {
            continue;
        };
        match a.stage {
            AnnotationStage::Start => open.push((name, a.time_us)),
            AnnotationStage::End => {
                let Some(k) = open.iter().rposition(|(n, _)| *n == name) else {
                    continue;
                };
                let (_, start) = open.remove(k);
                let first = t.time_us.partition_point(|&x| x < start);
                let last = t.time_us.partition_point(|&x| x <= a.time_us);
                if last > first {
                    out.push((name.to_owned(), first, last - 1));
                }
            }
            AnnotationStage::Other => {}
        }
    }
    out.sort_by_key(|c| c.1);
    out
}

/// Checkpointing every repeated block, where the recorder marked them.
pub(super) fn checkpoint_candidate(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    recorded: &Settings,
    not_offered: &mut Vec<NotOffered>,
) -> Option<Candidate> {
    let calls = block_calls(snap, device);
    let refuse = |not_offered: &mut Vec<NotOffered>, why: &str| {
        refuse(not_offered, "activation checkpointing", why)
    };
    if calls.is_empty() {
        return refuse(
            not_offered,
            "no block calls recorded: vramscope.record marks each call of a model's repeated blocks (the layers of \
             a ModuleList or Sequential of one class), which tells one layer's saved activations from the next's",
        );
    }
    let t = snap.trace(device)?;
    let l = &labelled.lifetimes;
    let mut edits = Edits::default();
    let mut names: BTreeMap<String, ()> = BTreeMap::new();
    let (mut blocks, mut freed_bytes, mut checkpointed) = (0u64, 0u64, 0usize);
    for (name, first, last) in &calls {
        // The blocks allocated during the call that outlive it.
        let mut saved: Vec<usize> = (*first..=*last)
            .filter(|&i| t.action[i] == Action::Alloc)
            .filter_map(|i| {
                let b = *l.event_block.get(i)? as usize;
                let ok = l.birth.get(b) == Some(&(i as u32))
                    && l.death[b] != STILL_ALIVE
                    && l.death[b] as usize > *last;
                ok.then_some(b)
            })
            .collect();
        if saved.len() < 2 {
            continue; // a call without a graph (evaluation) or a recomputation
        }
        saved.sort_by_key(|&b| l.death[b]);
        // The first freed is the block's output, the next block's input: kept.
        let rest = &saved[1..];
        let again = l.death[rest[0]] as usize - 1;
        if again <= *last {
            continue;
        }
        for &b in rest {
            let birth = l.birth[b] as usize;
            edits.free_after.entry(*last).or_default().push(birth);
            edits.remake_after.entry(again).or_default().push(birth);
            blocks += 1;
            freed_bytes += l.size[b];
        }
        checkpointed += 1;
        let container = name.rsplit_once('.').map_or("", |(c, _)| c);
        names.insert(container.to_owned(), ());
    }
    if checkpointed == 0 {
        return refuse(
            not_offered,
            "the recorded block calls keep no activations for backward (evaluation, or no gradients)",
        );
    }
    let containers: Vec<String> = names.into_keys().collect();
    let shown = containers
        .iter()
        .map(|c| {
            if c.is_empty() {
                "the model".to_owned()
            } else {
                format!("model.{c}")
            }
        })
        .collect::<Vec<_>>();
    edits.matched.push(ChangeMatch {
        change: Change {
            site: format!("the blocks of {}", shown.join(", ")),
            kind: ChangeKind::FreeEarly,
        },
        sites: containers.clone(),
        blocks,
        bytes: freed_bytes,
    });
    let first = shown
        .first()
        .cloned()
        .unwrap_or_else(|| "model.layers".into());
    Some(Candidate {
        class: ChangeClass::Checkpoint,
        change: format!(
            "activation checkpointing of every block of {} (torch.utils.checkpoint)",
            shown.join(", ")
        ),
        code: format!(
            "from torch.utils.checkpoint import checkpoint\n# in the forward that loops over {first}:\nfor block in \
             {first}:\n    h = checkpoint(block, h, use_reentrant=False)"
        ),
        settings: recorded.clone(),
        edits: Some(edits),
        method: Method::Replayed,
        how: format!(
            "replayed with the saved activations of {checkpointed} block calls ({blocks} blocks, {} over the trace) \
             freed when each call ends and made again when backward reaches the block (just before the first of \
             them is freed), each block's output kept as the next one's input; the recomputation's own \
             temporaries are not counted",
            bytes(freed_bytes)
        ),
    })
}
