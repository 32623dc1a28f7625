//! The recorded events as the trace entries of a PyTorch snapshot.
//!
//! The file keeps PyTorch's shape (`device_traces`, read by its own viewer as
//! well as ours), one entry per event: an allocation is an `alloc`, a free a
//! `free_completed`. The CPU allocator caches nothing, so the segment
//! entries PyTorch would write around each (`segment_alloc`;
//! `free_requested`, `segment_free`) say nothing more; the file says
//! `vramscope.trace_form = "events"` and the reader puts them back. These
//! entries are produced one at a time for a writer that streams them to the
//! file, so a history of millions of events never becomes millions of
//! Python objects.

use std::collections::HashMap;

use crate::events::{Event, EventKind, NO_STACK};

/// One trace entry; `mark` indexes the caller's marks (its `user_metadata`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    pub action: &'static str,
    pub addr: u64,
    pub size: u64,
    pub time_us: i64,
    pub stack: u32,
    pub mark: Option<u32>,
    /// An `oom`'s bytes free under the limit (PyTorch's `device_free`).
    pub device_free: Option<u64>,
}

/// The entries of `events` (oldest first), one per event. `marks` are `(start_us, end_us)`
/// ranges in time order that never overlap: an entry inside one carries its
/// index.
pub fn entries<'a>(
    events: &'a [Event],
    marks: &'a [(i64, i64)],
) -> impl Iterator<Item = TraceEntry> + 'a {
    // A temporary freed inside the torch call that made it was freed before
    // the call's stack was known (the stamp comes after the call): its free
    // takes the stack its allocation got.
    let mut stack_of: HashMap<u64, u32> = HashMap::new();
    let mut k = 0usize;
    events.iter().map(move |e| {
        let stack = match e.kind {
            EventKind::Alloc => {
                stack_of.insert(e.addr, e.stack);
                e.stack
            }
            EventKind::Oom => e.stack,
            EventKind::Free => {
                let held = stack_of.remove(&e.addr).unwrap_or(NO_STACK);
                if e.stack != NO_STACK {
                    e.stack
                } else {
                    held
                }
            }
        };
        // One merge pass, as the marks and the events are both in time order.
        while k < marks.len() && marks[k].1 <= e.time_us {
            k += 1;
        }
        let mark = (k < marks.len() && marks[k].0 <= e.time_us).then_some(k as u32);
        TraceEntry {
            action: match e.kind {
                EventKind::Alloc => "alloc",
                EventKind::Free => "free_completed",
                EventKind::Oom => "oom",
            },
            addr: if e.kind == EventKind::Oom { 0 } else { e.addr },
            size: e.size,
            time_us: e.time_us,
            stack,
            mark,
            device_free: (e.kind == EventKind::Oom).then_some(e.addr),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: EventKind, addr: u64, t: i64, stack: u32) -> Event {
        Event {
            kind,
            addr,
            size: 16,
            time_us: t,
            stack,
        }
    }

    #[test]
    fn frees_take_their_allocations_stack_and_marks_label_by_time() {
        let events = [
            ev(EventKind::Alloc, 0x10, 1, 4),
            ev(EventKind::Free, 0x10, 5, NO_STACK), // freed before the stamp
            ev(EventKind::Alloc, 0x20, 6, 7),
            ev(EventKind::Free, 0x30, 9, NO_STACK), // allocated before the window
            ev(EventKind::Free, 0x20, 12, 7),
        ];
        let marks = [(4, 7), (11, 20)];
        let got: Vec<TraceEntry> = entries(&events, &marks).collect();
        let actions: Vec<&str> = got.iter().map(|e| e.action).collect();
        assert_eq!(
            actions,
            [
                "alloc",
                "free_completed",
                "alloc",
                "free_completed",
                "free_completed"
            ]
        );
        let stacks: Vec<u32> = got.iter().map(|e| e.stack).collect();
        assert_eq!(
            stacks,
            [4, 4, 7, NO_STACK, 7],
            "a free takes its allocation's stack"
        );
        let marks: Vec<Option<u32>> = got.iter().map(|e| e.mark).collect();
        assert_eq!(marks, [None, Some(0), Some(0), None, Some(1)]);
    }
}
