//! Traces written in events, given back the entries PyTorch would write.
//!
//! vramscope's CPU allocator recorder writes one entry per allocation
//! (`alloc`) and one per free (`free_completed`): the CPU allocator caches
//! nothing, so each block is its own segment, and PyTorch's form
//! (`segment_alloc` + `alloc`; `free_requested` + `free_completed` +
//! `segment_free`) would make the file two and a half times longer for
//! nothing it does not already say. Files that say so
//! (`vramscope.trace_form == "events"`) get those entries back here, so
//! every analysis reads one form: reserved is allocated, segment by segment.

use crate::model::{Action, DeviceTrace, Snapshot};

/// Expand every trace of a file written in events; returns the entries
/// added.
pub(crate) fn expand(snap: &mut Snapshot) -> usize {
    let events = snap
        .source
        .recorder
        .as_ref()
        .and_then(|r| r.trace_form.as_deref())
        == Some("events");
    if !events {
        return 0;
    }
    snap.traces.iter_mut().map(expand_trace).sum()
}

/// The entries event `a` stands for, in PyTorch's order.
fn around(a: Action) -> &'static [Action] {
    match a {
        Action::Alloc => &[Action::SegmentAlloc, Action::Alloc],
        Action::FreeCompleted => &[
            Action::FreeRequested,
            Action::FreeCompleted,
            Action::SegmentFree,
        ],
        _ => &[],
    }
}

fn expand_trace(t: &mut DeviceTrace) -> usize {
    let n = t.len();
    let total: usize = t.action.iter().map(|&a| around(a).len().max(1)).sum();
    if total == n {
        return 0;
    }
    // Index of each old entry's own action in the new trace.
    let mut at = Vec::with_capacity(n);
    let mut out = DeviceTrace {
        device: t.device,
        action: Vec::with_capacity(total),
        addr: Vec::with_capacity(total),
        size: Vec::with_capacity(total),
        stream: Vec::with_capacity(total),
        time_us: Vec::with_capacity(total),
        stack: Vec::with_capacity(total),
        compile_context: t
            .compile_context
            .as_ref()
            .map(|_| Vec::with_capacity(total)),
        user_metadata: t.user_metadata.as_ref().map(|_| Vec::with_capacity(total)),
        category: t.category.as_ref().map(|_| Vec::with_capacity(total)),
        device_free: Vec::new(),
        forward_stack: Vec::new(),
        pools: Vec::new(),
    };
    for i in 0..n {
        let own = t.action[i];
        let group = around(own);
        let group: &[Action] = if group.is_empty() { &[own] } else { group };
        for &a in group {
            if a == own {
                at.push(out.action.len() as u32);
            }
            out.action.push(a);
            out.addr.push(t.addr[i]);
            out.size.push(t.size[i]);
            out.stream.push(t.stream[i]);
            out.time_us.push(t.time_us[i]);
            out.stack.push(t.stack[i]);
            for (col, new) in [
                (&t.compile_context, &mut out.compile_context),
                (&t.user_metadata, &mut out.user_metadata),
                (&t.category, &mut out.category),
            ] {
                if let (Some(old), Some(new)) = (col, new.as_mut()) {
                    new.push(old[i]);
                }
            }
        }
    }
    let moved = |j: u32| at.get(j as usize).copied().unwrap_or(j);
    out.device_free = t.device_free.iter().map(|&(j, b)| (moved(j), b)).collect();
    out.forward_stack = t
        .forward_stack
        .iter()
        .map(|&(j, s)| (moved(j), s))
        .collect();
    out.pools = t.pools.iter().map(|&(j, p)| (moved(j), p)).collect();
    let added = total - n;
    *t = out;
    added
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intern::StackId;

    #[test]
    fn each_event_becomes_pytorchs_entries_with_its_columns() {
        let mut t = DeviceTrace {
            action: vec![Action::Alloc, Action::Oom, Action::FreeCompleted],
            addr: vec![16, 0, 16],
            size: vec![64, 128, 64],
            stream: vec![0; 3],
            time_us: vec![1, 2, 3],
            stack: vec![StackId(4), StackId::NONE, StackId(4)],
            device_free: vec![(1, 99)],
            ..DeviceTrace::default()
        };
        assert_eq!(expand_trace(&mut t), 3);
        assert_eq!(
            t.action,
            [
                Action::SegmentAlloc,
                Action::Alloc,
                Action::Oom,
                Action::FreeRequested,
                Action::FreeCompleted,
                Action::SegmentFree
            ]
        );
        assert_eq!(t.size, [64, 64, 128, 64, 64, 64]);
        assert_eq!(t.time_us, [1, 1, 2, 3, 3, 3]);
        assert_eq!(t.stack[5], StackId(4));
        assert_eq!(t.device_free, [(2, 99)], "the OOM's index moves with it");
    }
}
