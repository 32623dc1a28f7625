//! The snapshot model: segments and blocks (the allocator state at dump
//! time), per-device event traces as columns, annotations and settings.

use std::ops::Range;

use crate::intern::{FrameTable, StackId, StackTable, StrId, StringTable};
use crate::recorder::RecorderInfo;

/// What a trace entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Snapshot,
    Oom,
    Annotate,
    /// An action this version does not know (kept, counted, ignored by replay).
    Unknown,
}

impl Action {
    pub const ALL: [Action; 11] = [
        Action::Alloc,
        Action::FreeRequested,
        Action::FreeCompleted,
        Action::SegmentAlloc,
        Action::SegmentFree,
        Action::SegmentMap,
        Action::SegmentUnmap,
        Action::Snapshot,
        Action::Oom,
        Action::Annotate,
        Action::Unknown,
    ];

    pub fn parse(s: &str) -> Action {
        match s {
            "alloc" => Action::Alloc,
            "free_requested" => Action::FreeRequested,
            "free_completed" => Action::FreeCompleted,
            "segment_alloc" => Action::SegmentAlloc,
            "segment_free" => Action::SegmentFree,
            "segment_map" => Action::SegmentMap,
            "segment_unmap" => Action::SegmentUnmap,
            "snapshot" => Action::Snapshot,
            "oom" => Action::Oom,
            "annotate" => Action::Annotate,
            _ => Action::Unknown,
        }
    }

    /// The name PyTorch uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Snapshot => "snapshot",
            Action::Oom => "oom",
            Action::Annotate => "annotate",
            Action::Unknown => "unknown",
        }
    }
}

/// Marker for an absent `time_us`.
pub const NO_TIME: i64 = i64::MIN;

/// All events of one device, oldest first, as columns (struct of arrays).
#[derive(Debug, Default)]
pub struct DeviceTrace {
    pub device: u32,
    pub action: Vec<Action>,
    pub addr: Vec<u64>,
    pub size: Vec<u64>,
    pub stream: Vec<u64>,
    /// µs since the Unix epoch, or [`NO_TIME`].
    pub time_us: Vec<i64>,
    pub stack: Vec<StackId>,
    /// `compile_context` per event, when any event has one.
    pub compile_context: Option<Vec<StrId>>,
    /// `user_metadata` per event, when any event has one.
    pub user_metadata: Option<Vec<StrId>>,
    /// Memory Profiler category per event (profiler-built snapshots).
    pub category: Option<Vec<StrId>>,
    /// `device_free` of `oom` events: (event index, bytes).
    pub device_free: Vec<(u32, u64)>,
    /// `forward_frames` of backward-pass allocations: (event index, stack).
    pub forward_stack: Vec<(u32, StackId)>,
    /// `pool_id` of events in a private pool (a CUDA graph's, a
    /// `torch.cuda.MemPool`): (event index, pool id), ascending; events of
    /// the default pool `(0, 0)` and of PyTorch versions that do not write
    /// the key are absent.
    pub pools: Vec<(u32, (i64, i64))>,
}

impl DeviceTrace {
    pub fn len(&self) -> usize {
        self.action.len()
    }

    pub fn is_empty(&self) -> bool {
        self.action.is_empty()
    }

    /// Whether events carry wall-clock time.
    pub fn has_time(&self) -> bool {
        self.time_us.iter().any(|&t| t != NO_TIME)
    }

    /// `device_free` recorded for event `i`.
    pub fn device_free_at(&self, i: usize) -> Option<u64> {
        self.device_free
            .binary_search_by_key(&(i as u32), |&(j, _)| j)
            .ok()
            .map(|k| self.device_free[k].1)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentType {
    Large,
    Small,
    Unknown,
}

impl SegmentType {
    /// PyTorch's name: `large`, `small` (`unknown` when the file has none).
    pub fn as_str(self) -> &'static str {
        match self {
            SegmentType::Large => "large",
            SegmentType::Small => "small",
            SegmentType::Unknown => "unknown",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    ActiveAllocated,
    /// Freed by the user but still in use by another stream.
    ActivePendingFree,
    /// Cached, free.
    Inactive,
    Unknown,
}

impl BlockState {
    /// PyTorch's name: `active_allocated`, `active_pending_free`,
    /// `inactive` (and `unknown` for a state no version writes).
    pub fn as_str(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
            BlockState::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> BlockState {
        match s {
            "active_allocated" => BlockState::ActiveAllocated,
            "active_pending_free" => BlockState::ActivePendingFree,
            "inactive" => BlockState::Inactive,
            _ => BlockState::Unknown,
        }
    }

    /// Allocated from the user's point of view (counts towards `allocated`).
    pub fn is_allocated(self) -> bool {
        self == BlockState::ActiveAllocated
    }

    /// Not reusable yet (counts towards `active`).
    pub fn is_active(self) -> bool {
        matches!(
            self,
            BlockState::ActiveAllocated | BlockState::ActivePendingFree
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub address: u64,
    /// Rounded size.
    pub size: u64,
    /// What the user asked for; `size - requested_size` is rounding waste.
    pub requested_size: u64,
    pub state: BlockState,
    pub stack: StackId,
    /// Memory Profiler category of a live block, when the producer wrote one
    /// (vramscope's CPU recorder does; empty otherwise).
    pub category: StrId,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    pub device: u32,
    pub address: u64,
    pub total_size: u64,
    pub allocated_size: u64,
    pub active_size: u64,
    pub requested_size: u64,
    pub stream: u64,
    pub segment_type: SegmentType,
    /// `(0, 0)` is the default pool; others are CUDA-graph / MemPool pools.
    pub pool_id: (i64, i64),
    pub is_expandable: bool,
    pub stack: StackId,
    /// Range into [`Snapshot::blocks`].
    pub blocks: Range<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnnotationStage {
    Start,
    End,
    Other,
}

/// A `record_function` marker from `external_annotations`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Annotation {
    pub name: StrId,
    pub stage: AnnotationStage,
    pub device: i64,
    pub time_us: i64,
}

/// What vramscope's recorder knew about a tensor while the program ran
/// (top-level key `vramscope_tags`, which other readers ignore): the
/// allocation at `addr` on `device`, live at `time_us`, is `category`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    pub device: u32,
    pub addr: u64,
    pub time_us: i64,
    pub category: StrId,
}

/// Which top-level layout the file had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `{"segments", "device_traces", ...}` (2.1 and later).
    Dict,
    /// A bare list of segments (`torch.cuda.memory_snapshot()`).
    SegmentList,
}

/// How the bytes were encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Pickle {
        protocol: u8,
    },
    Json,
    /// A `torch.save` zip archive around a pickle.
    TorchSave {
        protocol: u8,
    },
}

/// What kind of file it was: a memory snapshot, or a profiler output read
/// into the same model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceFormat {
    /// A memory snapshot (`torch.cuda.memory._dump_snapshot` and the like).
    Snapshot,
    /// A profiler trace (Kineto's Chrome trace) with `[memory]` events.
    KinetoTrace,
    /// `export_memory_timeline` raw rows: `[t_ns, action, bytes, category]`.
    MemoryTimeline,
    /// `export_memory_timeline` plot points: `[times, sizes per category]`.
    MemoryTimelinePlot,
}

impl SourceFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceFormat::Snapshot => "snapshot",
            SourceFormat::KinetoTrace => "kineto_trace",
            SourceFormat::MemoryTimeline => "memory_timeline",
            SourceFormat::MemoryTimelinePlot => "memory_timeline_plot",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

/// Where the snapshot came from and what was unusual about it.
#[derive(Clone, Debug)]
pub struct SourceInfo {
    pub file_bytes: u64,
    pub decoded_bytes: u64,
    /// How the bytes were encoded (profiler outputs are JSON).
    pub encoding: Encoding,
    /// Snapshot, profiler trace or memory timeline.
    pub format: SourceFormat,
    pub compression: Compression,
    /// Profiler outputs report [`Layout::Dict`].
    pub layout: Layout,
    /// Blocks carried a legacy `history` instead of `address`/`frames` (PyTorch 2.0).
    pub legacy_blocks: bool,
    /// Constructs that a pickle asked to execute and that were skipped.
    pub skipped: Vec<String>,
    pub skipped_count: u64,
    /// Things the reader tolerated (truncation, repaired values, ...), one
    /// line each; every [`Repair`](crate::Repair) has one.
    pub warnings: Vec<String>,
    /// Values that were out of range or of the wrong type, per field, and
    /// what the reader stored instead.
    pub repairs: Vec<crate::Repair>,
    pub truncated: bool,
    /// Written by vramscope's recorder: which backend, the device's counters.
    pub recorder: Option<RecorderInfo>,
}

impl SourceInfo {
    /// The name of the input's encoding for output: `pickle`, `json` or
    /// `torch.save` for snapshots; `kineto_trace`, `memory_timeline` or
    /// `memory_timeline_plot` for profiler outputs (all JSON).
    pub fn encoding_name(&self) -> &'static str {
        match (self.format, self.encoding) {
            (SourceFormat::Snapshot, Encoding::Pickle { .. }) => "pickle",
            (SourceFormat::Snapshot, Encoding::TorchSave { .. }) => "torch.save",
            (SourceFormat::Snapshot, Encoding::Json) => "json",
            (f, _) => f.as_str(),
        }
    }
}

/// A decoded memory snapshot.
#[derive(Debug)]
pub struct Snapshot {
    pub strings: StringTable,
    pub frames: FrameTable,
    pub stacks: StackTable,
    pub segments: Vec<Segment>,
    pub blocks: Vec<Block>,
    /// Index = device ordinal (devices without events have empty traces).
    pub traces: Vec<DeviceTrace>,
    pub annotations: Vec<Annotation>,
    /// The recorder's tags, in time order.
    pub tags: Vec<Tag>,
    /// `allocator_settings`, as found.
    pub allocator_settings: Option<serde_json::Map<String, serde_json::Value>>,
    pub source: SourceInfo,
}

impl Snapshot {
    /// Devices that have segments or events, ascending.
    pub fn devices(&self) -> Vec<u32> {
        let mut d: Vec<u32> = self.segments.iter().map(|s| s.device).collect();
        d.extend(
            self.traces
                .iter()
                .filter(|t| !t.is_empty())
                .map(|t| t.device),
        );
        d.sort_unstable();
        d.dedup();
        d
    }

    /// The device an analysis of one device reads: `device` when the file
    /// has segments or events on it; without one, the first device with
    /// activity (an allocation in its trace, or a block in use in its
    /// segments), else the first device the file has. The one rule for
    /// every command and the Python module: a device the file does not
    /// have is an error, never a silent switch to another.
    pub fn pick_device(&self, device: Option<u32>) -> Result<u32, crate::SnapshotError> {
        let present = self.devices();
        match device {
            Some(d) if present.contains(&d) => Ok(d),
            Some(d) => Err(crate::SnapshotError::NoSuchDevice { device: d, present }),
            None => present
                .iter()
                .copied()
                .find(|&d| self.has_activity(d))
                .or_else(|| present.first().copied())
                .ok_or(crate::SnapshotError::NoDevice),
        }
    }

    /// Whether `device` ever held memory for the program: an allocation
    /// in its trace, or a block in use in its segments (a device with
    /// segments of cached memory only, or no events, has none).
    pub fn has_activity(&self, device: u32) -> bool {
        let traced = self
            .trace(device)
            .is_some_and(|t| t.action.contains(&Action::Alloc));
        traced
            || self.segments_of(device).any(|s| {
                self.blocks_of(s)
                    .iter()
                    .any(|b| b.state != BlockState::Inactive && b.size > 0)
            })
    }

    /// Trace of `device` (empty if it has none).
    pub fn trace(&self, device: u32) -> Option<&DeviceTrace> {
        self.traces.get(device as usize)
    }

    pub fn segments_of(&self, device: u32) -> impl Iterator<Item = &Segment> {
        self.segments.iter().filter(move |s| s.device == device)
    }

    pub fn blocks_of<'a>(&'a self, seg: &Segment) -> &'a [Block] {
        &self.blocks[seg.blocks.start as usize..seg.blocks.end as usize]
    }

    /// Resolve a string id.
    pub fn str(&self, id: StrId) -> &str {
        self.strings.get(id)
    }

    /// Whether this is an estimate's trace (`vramscope.estimate`): the
    /// requests a run would make, each block its own segment, no
    /// allocator's segments.
    pub fn is_estimate(&self) -> bool {
        self.source
            .recorder
            .as_ref()
            .is_some_and(|r| r.is_estimate())
    }
}
