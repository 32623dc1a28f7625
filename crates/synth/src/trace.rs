//! Trace entries as the simulation produces them, and the replay that
//! measures peak allocated memory over a trace.

use crate::stacks::StackId;

/// The `action` of a trace entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Oom,
}

impl Action {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Oom => "oom",
        }
    }
}

/// One trace entry. Entries with the same `ctx` come from one allocator
/// call and share one frames list, as in PyTorch's output (a
/// `segment_alloc` and its `alloc`; a `free_requested` and its
/// `free_completed`; the cache release and the `oom`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Event {
    pub action: Action,
    /// Block, segment or mapped-range address; for `oom`, the free device
    /// memory (`device_free`).
    pub addr: u64,
    pub size: u64,
    pub time_us: u64,
    pub stack: StackId,
    pub ctx: u64,
}

/// Receives the events of a simulated run, numbered from 0.
pub(crate) trait Sink {
    fn event(&mut self, index: u64, ev: &Event);

    /// The `annotation` of iteration `iteration` (`ProfilerStep#N`) at `time_us`.
    fn annotation(&mut self, _iteration: u32, _start: bool, _time_us: u64) {}

    /// True once the sink cannot take more (a write failed): the run stops.
    fn stopped(&self) -> bool {
        false
    }
}

/// Counts events: the first pass, which sizes the window.
#[derive(Default)]
pub(crate) struct Counter {
    pub events: u64,
}

impl Sink for Counter {
    fn event(&mut self, index: u64, _ev: &Event) {
        self.events = index + 1;
    }
}

/// Peak of allocated bytes over a trace: `alloc` adds its size,
/// `free_completed` subtracts it, starting from the bytes live before the
/// trace. The peak is the largest running total, or the starting value
/// when nothing exceeds it; its index is the first entry reaching it (0 when
/// the start is the peak).
#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct PeakReplay {
    /// Running total relative to the start.
    cur: i128,
    /// Largest running total so far (relative, at least 0).
    best: i128,
    best_index: u64,
}

impl PeakReplay {
    pub(crate) fn step(&mut self, index: u64, ev: &Event) {
        match ev.action {
            Action::Alloc => self.cur += ev.size as i128,
            Action::FreeCompleted => self.cur -= ev.size as i128,
            _ => return,
        }
        if self.cur > self.best {
            self.best = self.cur;
            self.best_index = index;
        }
    }

    /// `(peak, index)` given the bytes live when the trace starts.
    pub(crate) fn result(&self, start: u64) -> (u64, u64) {
        ((start as i128 + self.best) as u64, self.best_index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(action: Action, size: u64) -> Event {
        Event {
            action,
            addr: 0,
            size,
            time_us: 0,
            stack: StackId(0),
            ctx: 0,
        }
    }

    #[test]
    fn peak_counts_allocs_and_completed_frees_only() {
        let mut r = PeakReplay::default();
        let trace = [
            ev(Action::SegmentAlloc, 1 << 30),
            ev(Action::Alloc, 100),
            ev(Action::Alloc, 50),
            ev(Action::FreeRequested, 100),
            ev(Action::FreeCompleted, 100),
            ev(Action::Alloc, 60),
        ];
        for (i, e) in trace.iter().enumerate() {
            r.step(i as u64, e);
        }
        assert_eq!(r.result(0), (150, 2));
        assert_eq!(r.result(1000), (1150, 2));
        let mut down = PeakReplay::default();
        down.step(0, &ev(Action::FreeCompleted, 10));
        assert_eq!(down.result(500), (500, 0));
    }
}
