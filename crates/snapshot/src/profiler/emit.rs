//! Device traces and end states for inputs that record totals rather than
//! the allocator's segments and blocks.
//!
//! Analyses derive everything from a trace's events plus the state at the
//! end: the allocated total is replayed forwards from the blocks alive
//! before the window, reserved memory backwards from the end's segments.
//! Profiler outputs have neither segments nor (sometimes) addresses, so
//! what they lack is made up in a way that keeps those derivations equal to
//! what the file recorded:
//!
//! * made-up addresses come from a region no real pointer reaches
//!   ([`SYNTH_BLOCKS`]), so they never meet a recorded one;
//! * reserved memory is one contiguous made-up range per device
//!   ([`Reserved`]): growing it is a `segment_alloc` of the added bytes at
//!   its top, shrinking it `segment_free`s of the top bytes, and what is
//!   left at the end is the device's one segment ([`end_segment`]).

use crate::intern::{StackId, StrId};
use crate::model::{Action, Block, BlockState, DeviceTrace, Segment, SegmentType};

/// Start of made-up block addresses: user-space pointers on every platform
/// PyTorch runs on stay below 2^57.
pub(super) const SYNTH_BLOCKS: u64 = 0xF000_0000_0000_0000;
/// Start of the made-up reserved range.
pub(super) const SYNTH_SEGMENTS: u64 = 0xE000_0000_0000_0000;

/// Alignment of made-up blocks, as the CUDA caching allocator rounds.
use vramscope_gpus::allocator::MIN_BLOCK as ALIGN;

/// One device's trace being written.
pub(super) struct Builder {
    pub t: DeviceTrace,
    next_addr: u64,
}

impl Builder {
    pub fn new(device: u32) -> Builder {
        Builder {
            t: DeviceTrace {
                device,
                ..Default::default()
            },
            next_addr: SYNTH_BLOCKS,
        }
    }

    pub fn push(&mut self, action: Action, addr: u64, size: u64, time_us: i64, stack: StackId) {
        let t = &mut self.t;
        t.action.push(action);
        t.addr.push(addr);
        t.size.push(size);
        t.stream.push(0);
        t.time_us.push(time_us);
        t.stack.push(stack);
    }

    /// A fresh address for a made-up block of `size` bytes; blocks do not
    /// overlap, so views that lay blocks out by address stay sane.
    pub fn synth_addr(&mut self, size: u64) -> u64 {
        let a = self.next_addr;
        let step = size.max(1).div_ceil(ALIGN).saturating_mul(ALIGN);
        self.next_addr = self.next_addr.saturating_add(step);
        a
    }
}

/// Reserved memory of one device as a made-up contiguous range
/// `[SYNTH_SEGMENTS, SYNTH_SEGMENTS + total)`, kept as the pieces its growth
/// added (the first piece is what was reserved before the trace).
pub(super) struct Reserved {
    pieces: Vec<(u64, u64)>,
    total: u64,
}

impl Reserved {
    pub fn new(initial: u64) -> Reserved {
        Reserved {
            pieces: if initial > 0 {
                vec![(SYNTH_SEGMENTS, initial)]
            } else {
                Vec::new()
            },
            total: initial,
        }
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// Move to `total`, writing the segment events that do it. Shrinking
    /// frees whole pieces from the top (splitting the last), one event per
    /// piece, so every `segment_free` matches memory a `segment_alloc` (or
    /// the state before the trace) provided.
    pub fn set(&mut self, total: u64, b: &mut Builder, time_us: i64, stack: StackId) {
        if total > self.total {
            let (addr, size) = (SYNTH_SEGMENTS + self.total, total - self.total);
            b.push(Action::SegmentAlloc, addr, size, time_us, stack);
            self.pieces.push((addr, size));
        }
        let mut need = self.total.saturating_sub(total);
        while need > 0 {
            let Some(top) = self.pieces.last_mut() else {
                break;
            };
            let take = need.min(top.1);
            top.1 -= take;
            b.push(Action::SegmentFree, top.0 + top.1, take, time_us, stack);
            if top.1 == 0 {
                self.pieces.pop();
            }
            need -= take;
        }
        self.total = total;
    }
}

/// A block alive at the end.
pub(super) struct Live {
    pub addr: u64,
    pub size: u64,
    pub stack: StackId,
    pub category: StrId,
}

/// The device's one segment at the end: `reserved` bytes of the made-up
/// range, holding the blocks alive at the end (`active_allocated`) and, for
/// the rest of the reserved bytes, one cached free block.
pub(super) fn end_segment(
    device: u32,
    reserved: u64,
    mut live: Vec<Live>,
    empty: StrId,
    segments: &mut Vec<Segment>,
    blocks: &mut Vec<Block>,
) {
    if reserved == 0 && live.is_empty() {
        return;
    }
    live.sort_unstable_by_key(|b| b.addr);
    let first = blocks.len() as u32;
    let allocated: u64 = live.iter().map(|b| b.size).sum();
    if reserved > allocated {
        blocks.push(Block {
            address: SYNTH_SEGMENTS,
            size: reserved - allocated,
            requested_size: 0,
            state: BlockState::Inactive,
            stack: StackId::NONE,
            category: empty,
        });
    }
    blocks.extend(live.iter().map(|b| Block {
        address: b.addr,
        size: b.size,
        requested_size: b.size,
        state: BlockState::ActiveAllocated,
        stack: b.stack,
        category: b.category,
    }));
    segments.push(Segment {
        device,
        address: SYNTH_SEGMENTS,
        total_size: reserved,
        allocated_size: allocated,
        active_size: allocated,
        requested_size: allocated,
        stream: 0,
        segment_type: SegmentType::Unknown,
        pool_id: (0, 0),
        is_expandable: false,
        stack: StackId::NONE,
        blocks: first..blocks.len() as u32,
    });
}

/// Traces indexed by device ordinal, empty where a device has no events.
pub(super) fn by_ordinal(traces: Vec<DeviceTrace>) -> Vec<DeviceTrace> {
    let n = traces
        .iter()
        .map(|t| t.device as usize + 1)
        .max()
        .unwrap_or(0);
    let mut out: Vec<DeviceTrace> = (0..n as u32)
        .map(|device| DeviceTrace {
            device,
            ..Default::default()
        })
        .collect();
    for t in traces {
        let d = t.device as usize;
        out[d] = t;
    }
    out
}
