//! Segments and their blocks at a moment: the model behind `vramscope
//! segments`, its terminal map and its JSON.
//!
//! At the end of a snapshot the segments and blocks are the dump itself. At
//! an earlier moment they are reconstructed: the segment events
//! (`segment_alloc`/`segment_free`, `segment_map`/`segment_unmap`) are
//! undone backwards from the end state, the blocks alive then are placed by
//! address within their segment, and the gaps between them are cached free.
//!
//! This module builds the model; `vramscope_report::segments_text` draws it.
//!
//! ```no_run
//! use vramscope_analysis::segments_map::at_end;
//! let snap = vramscope_snapshot::load("snap.pickle".as_ref(), &Default::default())?;
//! let map = at_end(&snap, 0);
//! println!("{} segments, {} bytes reserved", map.totals.segments, map.totals.reserved_bytes);
//! # Ok::<(), vramscope_snapshot::SnapshotError>(())
//! ```

mod reconstruct;

use serde::Serialize;
use vramscope_snapshot::Snapshot;

pub use reconstruct::reconstruct;

use crate::moment::ResolvedMoment;

/// Version of the `--json` layout; bumped only on incompatible change.
pub const SEGMENTS_SCHEMA_VERSION: u32 = 1;

/// The segments of one device at one moment.
#[derive(Clone, Debug, Serialize)]
pub struct SegmentsMap {
    pub schema_version: u32,
    pub device: u32,
    /// `end (the moment of the dump)`, `peak (event 1,402, +138.1 ms)`, ...
    pub moment: String,
    /// State right after this event; `null` at the end or the trace's start.
    pub event_index: Option<u64>,
    /// Rebuilt from the trace rather than read from the dump.
    pub reconstructed: bool,
    /// Live blocks of a reconstruction that fell in no segment (the trace
    /// and the end state disagree); counted in no total.
    pub unplaced_blocks: u64,
    pub unplaced_bytes: u64,
    pub totals: Totals,
    /// By address.
    pub segments: Vec<SegmentView>,
}

/// Totals over all segments, computed as `crate::memory_state` does.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Totals {
    pub segments: u64,
    pub blocks: u64,
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    pub pending_free_bytes: u64,
    pub cached_free_bytes: u64,
    pub free_blocks: u64,
    pub largest_free_block: u64,
    pub rounding_waste_bytes: u64,
    /// 1 − largest free block / cached free bytes (0 with nothing free).
    pub fragmentation_ratio: f64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SegmentView {
    pub address: u64,
    pub size: u64,
    /// `large`, `small` or `unknown` (the allocator's pool).
    #[serde(rename = "type")]
    pub segment_type: &'static str,
    pub expandable: bool,
    /// `[0, 0]` is the default pool; others are CUDA-graph / MemPool pools.
    pub pool_id: [i64; 2],
    pub stream: u64,
    pub allocated_bytes: u64,
    pub pending_free_bytes: u64,
    pub cached_free_bytes: u64,
    pub largest_free_block: u64,
    pub rounding_waste_bytes: u64,
    /// By address.
    pub blocks: Vec<BlockView>,
}

impl SegmentView {
    /// The type column: pool, expandable, or the allocator's pool size class.
    pub fn kind(&self) -> String {
        if self.pool_id != [0, 0] {
            format!("pool {}:{}", self.pool_id[0], self.pool_id[1])
        } else if self.expandable {
            "expandable".into()
        } else {
            self.segment_type.into()
        }
    }
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct BlockView {
    pub address: u64,
    pub size: u64,
    pub requested_size: u64,
    /// PyTorch's names: `active_allocated`, `active_pending_free`,
    /// `inactive`, or `unknown`.
    pub state: &'static str,
}

impl SegmentView {
    /// A segment with its per-segment figures filled in from `blocks`.
    pub(crate) fn new(
        address: u64,
        size: u64,
        segment_type: &'static str,
        expandable: bool,
        pool_id: [i64; 2],
        stream: u64,
        blocks: Vec<BlockView>,
    ) -> SegmentView {
        let mut s = SegmentView {
            address,
            size,
            segment_type,
            expandable,
            pool_id,
            stream,
            allocated_bytes: 0,
            pending_free_bytes: 0,
            cached_free_bytes: 0,
            largest_free_block: 0,
            rounding_waste_bytes: 0,
            blocks,
        };
        for b in &s.blocks {
            match b.state {
                "active_allocated" => {
                    s.allocated_bytes += b.size;
                    s.rounding_waste_bytes += b.size.saturating_sub(b.requested_size);
                }
                "active_pending_free" => s.pending_free_bytes += b.size,
                "inactive" => {
                    s.cached_free_bytes += b.size;
                    s.largest_free_block = s.largest_free_block.max(b.size);
                }
                _ => {}
            }
        }
        s
    }
}

/// Totals of `segments`.
pub fn totals(segments: &[SegmentView]) -> Totals {
    let mut t = Totals::default();
    for s in segments {
        t.segments += 1;
        t.blocks += s.blocks.len() as u64;
        t.reserved_bytes += s.size;
        t.allocated_bytes += s.allocated_bytes;
        t.pending_free_bytes += s.pending_free_bytes;
        t.cached_free_bytes += s.cached_free_bytes;
        t.free_blocks += s.blocks.iter().filter(|b| b.state == "inactive").count() as u64;
        t.largest_free_block = t.largest_free_block.max(s.largest_free_block);
        t.rounding_waste_bytes += s.rounding_waste_bytes;
    }
    t.fragmentation_ratio = if t.cached_free_bytes == 0 {
        0.0
    } else {
        1.0 - t.largest_free_block as f64 / t.cached_free_bytes as f64
    };
    t
}

/// The segments of `device` as dumped.
pub fn at_end(snap: &Snapshot, device: u32) -> SegmentsMap {
    let mut segments: Vec<SegmentView> = snap
        .segments_of(device)
        .map(|s| {
            let mut blocks: Vec<BlockView> = snap
                .blocks_of(s)
                .iter()
                .map(|b| BlockView {
                    address: b.address,
                    size: b.size,
                    requested_size: b.requested_size,
                    state: b.state.as_str(),
                })
                .collect();
            blocks.sort_by_key(|b| b.address);
            SegmentView::new(
                s.address,
                s.total_size,
                s.segment_type.as_str(),
                s.is_expandable,
                [s.pool_id.0, s.pool_id.1],
                s.stream,
                blocks,
            )
        })
        .collect();
    segments.sort_by_key(|s| s.address);
    SegmentsMap {
        schema_version: SEGMENTS_SCHEMA_VERSION,
        device,
        moment: "end (the moment of the dump)".into(),
        event_index: None,
        reconstructed: false,
        unplaced_blocks: 0,
        unplaced_bytes: 0,
        totals: totals(&segments),
        segments,
    }
}

/// The segments at `m`: the dump at the end, a reconstruction before it.
pub fn at_moment(
    snap: &Snapshot,
    device: u32,
    liveness: &crate::Liveness,
    m: &ResolvedMoment,
) -> SegmentsMap {
    let mut map = if m.is_end {
        at_end(snap, device)
    } else {
        reconstruct(snap, device, liveness, m.point)
    };
    map.moment = m.description.clone();
    map
}
