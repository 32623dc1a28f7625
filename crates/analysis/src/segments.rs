//! Allocator state at the end: reserved, allocated, active, and how the
//! cached-but-free memory is fragmented.

use serde::Serialize;
use vramscope_snapshot::{BlockState, SegmentType, Snapshot};

/// Memory totals of one device from its segments and blocks.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct MemoryState {
    /// Sum of segment sizes (memory obtained from the driver).
    pub reserved_bytes: u64,
    /// Blocks in state `active_allocated`.
    pub allocated_bytes: u64,
    /// Allocated plus `active_pending_free` (freed, still used by a stream).
    pub active_bytes: u64,
    /// What the user asked for in allocated blocks (before rounding).
    pub requested_bytes: u64,
    pub segments: SegmentCounts,
    pub fragmentation: Fragmentation,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SegmentCounts {
    pub total: u64,
    pub large: u64,
    pub small: u64,
    pub expandable: u64,
    /// Segments in private pools (CUDA graphs, MemPool).
    pub private_pool: u64,
    pub blocks: u64,
}

/// Cached-but-free memory and how usable it is.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Fragmentation {
    /// Bytes in `inactive` blocks: reserved, free, cached by the allocator.
    pub cached_free_bytes: u64,
    pub free_blocks: u64,
    /// The largest single free block: the biggest request the cache can
    /// serve without asking the driver for more.
    pub largest_free_block: u64,
    /// Bytes freed by the user but still in use by another stream.
    pub pending_free_bytes: u64,
    /// `size - requested_size` over allocated blocks.
    pub rounding_waste_bytes: u64,
    /// 1 − largest free block / cached free bytes: 0 when all free memory is
    /// one block, near 1 when it is scattered in small pieces.
    pub fragmentation_ratio: f64,
    /// Segments that hold no allocated block at all (released by `empty_cache`).
    pub empty_segments: u64,
}

/// Totals of `device` at the moment of the dump.
pub fn memory_state(snap: &Snapshot, device: u32) -> MemoryState {
    let mut m = MemoryState::default();
    let f = &mut m.fragmentation;
    for s in snap.segments_of(device) {
        m.reserved_bytes += s.total_size;
        m.segments.total += 1;
        match s.segment_type {
            SegmentType::Large => m.segments.large += 1,
            SegmentType::Small => m.segments.small += 1,
            SegmentType::Unknown => {}
        }
        m.segments.expandable += s.is_expandable as u64;
        m.segments.private_pool += (s.pool_id != (0, 0)) as u64;
        let blocks = snap.blocks_of(s);
        m.segments.blocks += blocks.len() as u64;
        let mut any_allocated = false;
        for b in blocks {
            match b.state {
                BlockState::ActiveAllocated => {
                    any_allocated = true;
                    m.allocated_bytes += b.size;
                    m.active_bytes += b.size;
                    m.requested_bytes += b.requested_size;
                    f.rounding_waste_bytes += b.size.saturating_sub(b.requested_size);
                }
                BlockState::ActivePendingFree => {
                    any_allocated = true;
                    m.active_bytes += b.size;
                    f.pending_free_bytes += b.size;
                }
                BlockState::Inactive => {
                    f.cached_free_bytes += b.size;
                    f.free_blocks += 1;
                    f.largest_free_block = f.largest_free_block.max(b.size);
                }
                BlockState::Unknown => {}
            }
        }
        if !any_allocated {
            f.empty_segments += 1;
        }
    }
    f.fragmentation_ratio = if f.cached_free_bytes == 0 {
        0.0
    } else {
        1.0 - f.largest_free_block as f64 / f.cached_free_bytes as f64
    };
    m
}
