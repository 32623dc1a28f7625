//! Block lifetimes: when each block was allocated and freed, as columns.
//!
//! The liveness walk answers "what is alive after event i"; leak analysis asks the
//! converse, "from when to when did this block live", for every block at
//! once. One pass over the trace pairs each `alloc` with its
//! `free_completed`; blocks freed without an `alloc` in the window, or alive
//! at the end without one, were allocated before the window.
//!
//! Profiler-built snapshots (`torch.cuda._memory_viz._profile_to_snapshot`,
//! and vramscope's CPU recorder, which uses it) write an in-place update of a
//! tensor (a new *version*: `param.add_(...)`, `grad.zero_()`) as a free and
//! an alloc of the same address and size at the same instant. Those are one
//! tensor, so the pair is joined: otherwise every parameter would look
//! re-allocated at every optimizer step.

use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::{Action, DeviceTrace, Snapshot, StackId, StrId};

/// `birth` of a block allocated before the trace window.
pub const BEFORE_WINDOW: u32 = u32::MAX;
/// `death` of a block still allocated at the end.
pub const STILL_ALIVE: u32 = u32::MAX;
/// [`Lifetimes::event_block`] of an event that neither allocates nor frees.
pub const NO_BLOCK: u32 = u32::MAX;
/// [`Lifetimes::free_requested`] of a block whose free was never requested
/// in the trace (alive at the end, or a trace without `free_requested`).
pub const NOT_REQUESTED: u32 = u32::MAX;

/// Every block of one device's trace, as columns.
#[derive(Debug, Default)]
pub struct Lifetimes {
    /// Index of the `alloc` event, or [`BEFORE_WINDOW`].
    pub birth: Vec<u32>,
    /// Index of the `free_completed` event, or [`STILL_ALIVE`].
    pub death: Vec<u32>,
    /// Index of the `free_requested` event (the program let go of the
    /// block; the allocator frees it once its streams are done), or
    /// [`NOT_REQUESTED`].
    pub free_requested: Vec<u32>,
    pub size: Vec<u64>,
    pub stack: Vec<StackId>,
    /// Memory Profiler category of the first version, if the trace has them.
    pub category: Vec<Option<StrId>>,
    /// Address of the block.
    pub addr: Vec<u64>,
    /// Per trace event: the block an `alloc` made or a `free_completed`
    /// freed ([`NO_BLOCK`] for other events), so that a moment's live
    /// blocks can be looked up by the event that allocated them.
    pub event_block: Vec<u32>,
    /// In-place updates joined to an earlier version of the same block.
    pub versions_joined: u64,
}

impl Lifetimes {
    /// Block `b`'s birth and death as event indices, with 0 for a block
    /// from before the window and `usize::MAX` for one still alive at the
    /// end: for the questions "alive at event i?" and "alive across it?".
    pub fn span(&self, b: usize) -> (usize, usize) {
        let birth = if self.birth[b] == BEFORE_WINDOW {
            0
        } else {
            self.birth[b] as usize
        };
        let death = if self.death[b] == STILL_ALIVE {
            usize::MAX
        } else {
            self.death[b] as usize
        };
        (birth, death)
    }

    /// Pair the events of `device`'s trace into block lifetimes.
    pub fn new(snap: &Snapshot, device: u32) -> Lifetimes {
        let empty = DeviceTrace::default();
        let t = snap.trace(device).unwrap_or(&empty);
        let joins_versions = t.category.is_some();
        // One block per alloc (and a few freed from before the window): the
        // columns are sized once rather than grown and copied as they fill.
        let allocs = t.action.iter().filter(|&&a| a == Action::Alloc).count() + 64;
        let mut l = Lifetimes {
            birth: Vec::with_capacity(allocs),
            death: Vec::with_capacity(allocs),
            free_requested: Vec::with_capacity(allocs),
            size: Vec::with_capacity(allocs),
            stack: Vec::with_capacity(allocs),
            category: Vec::with_capacity(allocs),
            addr: Vec::with_capacity(allocs),
            event_block: vec![NO_BLOCK; t.len()],
            versions_joined: 0,
        };
        let mut open: HashMap<u64, u32> = HashMap::default();
        // Frees requested of blocks from before the window, by address,
        // until their free_completed makes them blocks.
        let mut requested: HashMap<u64, u32> = HashMap::default();
        // The block freed by the last alloc/free event, while nothing but
        // segment and free_requested events follow it: (addr, block, time).
        let mut just_freed: Option<(u64, u32, i64)> = None;
        for i in 0..t.len() {
            match t.action[i] {
                Action::Alloc => {
                    let (addr, size) = (t.addr[i], t.size[i]);
                    let rejoin = just_freed.take().filter(|&(a, b, time)| {
                        joins_versions
                            && a == addr
                            && l.size[b as usize] == size
                            && time == t.time_us[i]
                    });
                    let block = match rejoin {
                        Some((_, b, _)) => {
                            l.death[b as usize] = STILL_ALIVE;
                            l.free_requested[b as usize] = NOT_REQUESTED;
                            l.versions_joined += 1;
                            b
                        }
                        None => {
                            let cat = t.category.as_ref().and_then(|c| c.get(i).copied());
                            l.push(i as u32, addr, size, t.stack[i], cat)
                        }
                    };
                    l.event_block[i] = block;
                    open.insert(addr, block);
                }
                Action::FreeRequested => match open.get(&t.addr[i]) {
                    Some(&b) => l.free_requested[b as usize] = i as u32,
                    None => {
                        requested.insert(t.addr[i], i as u32);
                    }
                },
                Action::FreeCompleted => {
                    let block = match open.remove(&t.addr[i]) {
                        Some(b) => b,
                        None => {
                            let cat = t.category.as_ref().and_then(|c| c.get(i).copied());
                            let b = l.push(BEFORE_WINDOW, t.addr[i], t.size[i], t.stack[i], cat);
                            if let Some(r) = requested.remove(&t.addr[i]) {
                                l.free_requested[b as usize] = r;
                            }
                            b
                        }
                    };
                    l.event_block[i] = block;
                    l.death[block as usize] = i as u32;
                    just_freed = Some((t.addr[i], block, t.time_us[i]));
                }
                _ => {}
            }
        }
        // Alive at the end without an alloc in the window; a producer that
        // labels blocks (the CPU recorder) gives their category here.
        let live = snap
            .segments_of(device)
            .flat_map(|s| snap.blocks_of(s))
            .filter(|b| b.state.is_allocated())
            .filter(|_| crate::liveness::dump_counts_from_start(snap, t));
        for b in live {
            if !open.contains_key(&b.address) {
                let cat = (!snap.str(b.category).is_empty()).then_some(b.category);
                l.push(BEFORE_WINDOW, b.address, b.size, b.stack, cat);
            }
        }
        l
    }

    fn push(
        &mut self,
        birth: u32,
        addr: u64,
        size: u64,
        stack: StackId,
        cat: Option<StrId>,
    ) -> u32 {
        self.birth.push(birth);
        self.addr.push(addr);
        self.death.push(STILL_ALIVE);
        self.free_requested.push(NOT_REQUESTED);
        self.size.push(size);
        self.stack.push(stack);
        self.category.push(cat);
        (self.birth.len() - 1) as u32
    }

    pub fn len(&self) -> usize {
        self.birth.len()
    }

    pub fn is_empty(&self) -> bool {
        self.birth.is_empty()
    }

    /// Whether block `b` is allocated right after event `i`.
    pub fn alive_after(&self, b: usize, i: u32) -> bool {
        let born = self.birth[b] == BEFORE_WINDOW || self.birth[b] <= i;
        born && (self.death[b] == STILL_ALIVE || self.death[b] > i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Liveness;

    /// Every block counted once: the bytes alive after the last event equal
    /// the liveness walk's final total.
    #[test]
    fn lifetimes_agree_with_the_liveness_walk_on_a_synthetic_trace() {
        let mut buf = Vec::new();
        let opts = vramscope_synth::SynthOptions {
            entries: 20_000,
            ..Default::default()
        };
        vramscope_synth::write_snapshot(&opts, &mut buf).expect("synth");
        let snap = vramscope_snapshot::decode_bytes(&buf, &Default::default()).expect("decode");
        let l = Lifetimes::new(&snap, 0);
        let t = snap.trace(0).expect("trace");
        let last = (t.len() - 1) as u32;
        let alive: u64 = (0..l.len())
            .filter(|&b| l.alive_after(b, last))
            .map(|b| l.size[b])
            .sum();
        let r = Liveness::new(&snap, 0);
        assert_eq!(alive, r.final_bytes);
        let mid = (t.len() / 2) as u32;
        let alive_mid: u64 = (0..l.len())
            .filter(|&b| l.alive_after(b, mid))
            .map(|b| l.size[b])
            .sum();
        let live = r.live_after(t, Some(mid as usize));
        assert_eq!(alive_mid, live.iter().map(|b| b.size).sum::<u64>());
        assert_eq!(l.versions_joined, 0, "no category column, nothing joined");
    }

    /// When the program let go of a block and when the allocator freed it:
    /// a block freed on another stream is requested first and completed
    /// later; a block from before the window keeps its request too; one
    /// never requested has none.
    #[test]
    fn frees_requested_are_kept_beside_the_completion() {
        let f = r#"[{"filename":"t.py","line":1,"name":"f"}]"#;
        let json = vramscope_testdata::hand_trace(&[
            ("alloc", 4096, 512, f),           // 0: block A
            ("alloc", 8192, 1024, f),          // 1: block B
            ("free_requested", 4096, 512, f),  // 2: A let go
            ("free_requested", 16384, 256, f), // 3: C, from before the window
            ("free_completed", 16384, 256, f), // 4
            ("free_completed", 4096, 512, f),  // 5: A freed
        ]);
        let snap = vramscope_snapshot::decode_bytes(json.as_bytes(), &Default::default())
            .expect("decodes");
        let l = Lifetimes::new(&snap, 0);
        assert_eq!(l.len(), 3);
        let by_addr = |a: u64| (0..l.len()).find(|&b| l.addr[b] == a).expect("block");
        let (a, b, c) = (by_addr(4096), by_addr(8192), by_addr(16384));
        assert_eq!((l.birth[a], l.free_requested[a], l.death[a]), (0, 2, 5));
        assert_eq!(
            (l.birth[b], l.free_requested[b], l.death[b]),
            (1, NOT_REQUESTED, STILL_ALIVE)
        );
        assert_eq!(
            (l.birth[c], l.free_requested[c], l.death[c]),
            (BEFORE_WINDOW, 3, 4)
        );
    }
}
