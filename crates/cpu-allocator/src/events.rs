//! What the hooks record: a ring of events and the blocks alive, behind one
//! lock (allocations also come from the allocator's worker threads).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Stack id of an event nobody stamped.
pub const NO_STACK: u32 = 0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Alloc,
    Free,
    /// An allocation refused by the limit ([`set_limit`]): `size` is what
    /// was asked for, and `addr` the bytes the limit left free then.
    Oom,
}

/// One allocation or free of the CPU allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub addr: u64,
    pub size: u64,
    /// Wall clock, µs since the epoch (the clock of PyTorch's `time_us`).
    pub time_us: i64,
    /// The allocation's stack id ([`stamp`]); a free carries its block's.
    pub stack: u32,
}

/// One event as the ring keeps it, with its thread (what [`stamp`]
/// matches): 32 bytes, so a history of millions stays small inside the
/// program recorded.
#[derive(Clone, Copy)]
struct Slot {
    addr: u64,
    /// The size, with [`FREE_BIT`] set for a free.
    size_kind: u64,
    time_us: i64,
    thread: u32,
    stack: u32,
}

const FREE_BIT: u64 = 1 << 63;
const OOM_BIT: u64 = 1 << 62;
const KIND_BITS: u64 = FREE_BIT | OOM_BIT;

impl Slot {
    fn new(e: &Event, thread: u32) -> Slot {
        let kind = match e.kind {
            EventKind::Alloc => 0,
            EventKind::Free => FREE_BIT,
            EventKind::Oom => OOM_BIT,
        };
        Slot {
            addr: e.addr,
            size_kind: (e.size & !KIND_BITS) | kind,
            time_us: e.time_us,
            thread,
            stack: e.stack,
        }
    }

    fn is_alloc(&self) -> bool {
        self.size_kind & KIND_BITS == 0
    }

    fn event(&self) -> Event {
        Event {
            kind: match self.size_kind & KIND_BITS {
                0 => EventKind::Alloc,
                FREE_BIT => EventKind::Free,
                _ => EventKind::Oom,
            },
            addr: self.addr,
            size: self.size_kind & !KIND_BITS,
            time_us: self.time_us,
            stack: self.stack,
        }
    }
}

pub(crate) static RECORDING: AtomicBool = AtomicBool::new(false);

/// The most bytes allocations may hold while recording (0: no limit).
static LIMIT: AtomicU64 = AtomicU64::new(0);

/// Refuse allocations that would take the bytes alive past `limit` (0:
/// none), as a device with that much memory would: the hook returns
/// `ENOMEM`, PyTorch raises its out-of-memory error, and an
/// [`EventKind::Oom`] event records the request. A rehearsal, on the CPU,
/// of a run on a device of that size.
pub fn set_limit(limit: u64) {
    LIMIT.store(limit, Ordering::SeqCst);
}

/// Whether an allocation of `size` must be refused; if so the refusal is
/// recorded.
pub(crate) fn refuse(size: u64) -> bool {
    let limit = LIMIT.load(Ordering::Relaxed);
    if limit == 0 {
        return false;
    }
    with_state(|s| {
        if s.allocated.saturating_add(size) <= limit {
            return false;
        }
        let thread = thread_id();
        let e = Event {
            kind: EventKind::Oom,
            addr: limit.saturating_sub(s.allocated),
            size,
            time_us: now_us(),
            stack: NO_STACK,
        };
        push(s, e, thread);
        true
    })
    .unwrap_or(false)
}

struct State {
    ring: VecDeque<Slot>,
    max: usize,
    /// Events ever pushed: the sequence number of the next one.
    pushed: u64,
    /// Live blocks: address -> (size, stack id).
    live: HashMap<u64, (u64, u32)>,
    /// Bytes in live blocks, and the most there have been: since the
    /// start, and since the last [`totals`] that reset the window (an
    /// iteration's peak, which a poll every few ms would miss).
    allocated: u64,
    peak: u64,
    window_peak: u64,
}

/// Live bytes now, the most since the start and since the window began.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub allocated: u64,
    pub peak: u64,
    pub window_peak: u64,
}

fn grow(s: &mut State, size: u64) {
    s.allocated += size;
    s.peak = s.peak.max(s.allocated);
    s.window_peak = s.window_peak.max(s.allocated);
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> Option<R> {
    // A panic while holding the lock must not turn every later allocation
    // of the process into a panic: take the data as it is.
    let mut guard = STATE.lock().unwrap_or_else(|e| e.into_inner());
    guard.as_mut().map(f)
}

fn push(s: &mut State, e: Event, thread: u32) {
    if s.ring.len() == s.max {
        s.ring.pop_front();
    }
    s.ring.push_back(Slot::new(&e, thread));
    s.pushed += 1;
}

/// Begin recording, keeping the last `max_events` events. Forgets any
/// earlier recording.
pub fn start(max_events: usize) {
    let max = max_events.max(1);
    *STATE.lock().unwrap_or_else(|e| e.into_inner()) = Some(State {
        ring: VecDeque::with_capacity(max.min(1 << 20)),
        max,
        pushed: 0,
        live: HashMap::new(),
        allocated: 0,
        peak: 0,
        window_peak: 0,
    });
    RECORDING.store(true, Ordering::SeqCst);
}

/// Whether a recording is under way (one process has one at a time).
pub fn recording() -> bool {
    RECORDING.load(Ordering::SeqCst)
}

/// Stop recording and drop what was recorded.
pub fn stop() {
    RECORDING.store(false, Ordering::SeqCst);
    *STATE.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// A block allocated before the recording: its free will be recorded.
pub fn adopt(addr: u64, size: u64) {
    with_state(|s| {
        if let std::collections::hash_map::Entry::Vacant(v) = s.live.entry(addr) {
            v.insert((size, NO_STACK));
            grow(s, size);
        }
    });
}

/// The running totals; `reset_window` starts a new window after reading.
pub fn totals(reset_window: bool) -> Totals {
    with_state(|s| {
        let t = Totals {
            allocated: s.allocated,
            peak: s.peak,
            window_peak: s.window_peak,
        };
        if reset_window {
            s.window_peak = s.allocated;
        }
        t
    })
    .unwrap_or_default()
}

/// Sequence number of the next event (for [`stamp`]).
pub fn mark() -> u64 {
    with_state(|s| s.pushed).unwrap_or(0)
}

/// Give the allocations this thread made since `since` (a [`mark`]) and
/// that have no stack yet the stack `stack`. Returns how many.
pub fn stamp(since: u64, stack: u32) -> usize {
    let me = crate::events::thread_id();
    with_state(|s| {
        let newer = s.pushed.saturating_sub(since) as usize;
        let n = s.ring.len();
        let mut stamped = 0;
        for i in n.saturating_sub(newer)..n {
            let e = &mut s.ring[i];
            if e.is_alloc() && e.stack == NO_STACK && e.thread == me {
                e.stack = stack;
                if let Some(b) = s.live.get_mut(&e.addr) {
                    if b.1 == NO_STACK {
                        b.1 = stack;
                    }
                }
                stamped += 1;
            }
        }
        stamped
    })
    .unwrap_or(0)
}

/// The events kept, oldest first.
pub fn events() -> Vec<Event> {
    with_state(|s| s.ring.iter().map(Slot::event).collect()).unwrap_or_default()
}

/// `(address, size, stack)` of every block alive now, by address.
pub fn live() -> Vec<(u64, u64, u32)> {
    let mut v: Vec<(u64, u64, u32)> =
        with_state(|s| s.live.iter().map(|(&a, &(n, st))| (a, n, st)).collect())
            .unwrap_or_default();
    v.sort_unstable();
    v
}

pub(crate) fn on_alloc(addr: u64, size: u64) {
    let e = Event {
        kind: EventKind::Alloc,
        addr,
        size,
        time_us: now_us(),
        stack: NO_STACK,
    };
    let thread = thread_id();
    with_state(|s| {
        if let Some((old, _)) = s.live.insert(addr, (size, NO_STACK)) {
            // An address the allocator gave out twice without a free we saw.
            s.allocated = s.allocated.saturating_sub(old);
        }
        grow(s, size);
        push(s, e, thread);
    });
}

pub(crate) fn on_free(addr: u64) {
    let (time_us, thread) = (now_us(), thread_id());
    with_state(|s| {
        if let Some((size, stack)) = s.live.remove(&addr) {
            s.allocated = s.allocated.saturating_sub(size);
            push(
                s,
                Event {
                    kind: EventKind::Free,
                    addr,
                    size,
                    time_us,
                    stack,
                },
                thread,
            );
        }
    });
}

/// This thread's number: given at its first allocation, from 1 up. (A
/// `const` thread-local with no destructor: safe to read inside a hook of
/// the allocator, even while the thread exits.)
pub(crate) fn thread_id() -> u32 {
    use std::cell::Cell;
    use std::sync::atomic::AtomicU32;
    static NEXT: AtomicU32 = AtomicU32::new(1);
    thread_local! {
        static ME: Cell<u32> = const { Cell::new(0) };
    }
    ME.with(|me| {
        if me.get() == 0 {
            me.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        me.get()
    })
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the state is process-wide.
    #[test]
    fn ring_stamps_frees_and_adoption() {
        start(4);
        adopt(0x100, 64);
        let m = mark();
        on_alloc(0x200, 10);
        on_alloc(0x300, 20);
        assert_eq!(stamp(m, 5), 2);
        assert_eq!(stamp(m, 6), 0, "stamped once");
        on_free(0x200);
        on_free(0x999); // never seen: not an event
        on_free(0x100); // adopted: its free is
        let ev = events();
        assert_eq!(ev.len(), 4, "{ev:?}");
        assert_eq!(ev[2].kind, EventKind::Free);
        assert_eq!((ev[2].addr, ev[2].size, ev[2].stack), (0x200, 10, 5));
        assert_eq!((ev[3].addr, ev[3].size, ev[3].stack), (0x100, 64, NO_STACK));
        assert_eq!(live(), vec![(0x300, 20, 5)]);
        // 64 adopted + 10 + 20 at most; 20 left.
        let t = totals(true);
        assert_eq!((t.allocated, t.peak, t.window_peak), (20, 94, 94));
        on_alloc(0x500, 30);
        on_free(0x500);
        let t = totals(false);
        assert_eq!((t.allocated, t.peak, t.window_peak), (20, 94, 50));
        on_alloc(0x400, 1); // the ring keeps 4: the oldest goes
        assert_eq!(events()[0].addr, 0x100, "the ring keeps the last 4");
        assert_eq!(mark(), 7);
        stop();
        assert!(events().is_empty());
    }
}

#[cfg(test)]
mod slot_tests {
    use super::*;

    #[test]
    fn a_slot_is_32_bytes_and_gives_its_event_back() {
        assert_eq!(std::mem::size_of::<Slot>(), 32);
        assert_eq!(std::mem::size_of::<Event>(), 32);
        for kind in [EventKind::Alloc, EventKind::Free, EventKind::Oom] {
            let e = Event {
                kind,
                addr: 0x7f00_1234_5678,
                size: (1 << 40) + 3,
                time_us: 1_795_000_000_000_000,
                stack: 9,
            };
            assert_eq!(Slot::new(&e, 7).event(), e);
        }
    }
}
