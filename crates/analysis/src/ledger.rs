//! Every byte of the device at the dump, in one ledger: PyTorch's reserved
//! memory by pool, what this process holds outside PyTorch, other
//! processes, and free memory, adding up to the device's total, each
//! figure with where it came from.
//!
//! Why users need it: `nvidia-smi` and PyTorch disagree, and an OOM's
//! "outside memory" is whatever the figures leave over. The parts:
//!
//! * **PyTorch, by pool**: the snapshot's segments (what the caching
//!   allocator reserved with `cudaMalloc`) grouped by `segment_pool_id`.
//!   `(0, 0)` is the default pool. A private pool `(0, n)` was made by a
//!   CUDA graph capture that was given no pool; `(n, 0)` by the user
//!   (`torch.cuda.MemPool()`, `graph_pool_handle()`), possibly shared by
//!   several graphs (PyTorch's `MemPool::uid_` and `uuid_` counters,
//!   `c10/cuda/MemPool.cpp`).
//! * **This process outside PyTorch**: NVML's figure for this process less
//!   PyTorch's reserved memory: the CUDA context, NCCL's buffers, cuDNN and
//!   cuFFT plans made with `cudaMalloc`, other allocators (CuPy,
//!   bitsandbytes' paged memory). Needs `nvidia-ml-py` and a process NVML
//!   lists (a container's PID namespace can hide it).
//! * **Other processes and the driver**: what is used on the device and
//!   not by this process.
//! * **Free**: `cudaMemGetInfo`'s free memory.
//!
//! Without NVML's process figure the two middle parts are one: "outside
//! PyTorch", the device's used memory less PyTorch's reserved.

use serde::Serialize;
use vramscope_snapshot::{DeviceFacts, Snapshot};

/// How a figure of the ledger was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Read from the device when the file was written (`cudaMemGetInfo`, NVML).
    Measured,
    /// PyTorch's own account (the snapshot's segments, its counters).
    ReportedByPytorch,
    /// The difference of figures above (named in `how`).
    Inferred,
}

/// What a part of the ledger is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PartKind {
    /// PyTorch's default pool.
    PytorchDefaultPool,
    /// A pool a CUDA graph capture made for itself.
    PytorchGraphPool,
    /// A pool the program made (`torch.cuda.MemPool`, `graph_pool_handle()`).
    PytorchUserPool,
    /// This process's device memory that PyTorch's allocator did not reserve.
    OutsidePytorchThisProcess,
    /// Other processes' memory, and the driver's.
    OtherProcesses,
    /// Outside PyTorch, this process's and others' together (no NVML figure).
    OutsidePytorch,
    /// Free device memory.
    Free,
}

/// One line of the ledger.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Part {
    pub kind: PartKind,
    /// `PyTorch, default pool`, `PyTorch, pool (0, 1): a CUDA graph's`.
    pub label: String,
    /// The pool's id where the part is a pool.
    pub pool_id: Option<(i64, i64)>,
    pub bytes: u64,
    /// Segments in the pool (pools only).
    pub segments: Option<u64>,
    pub source: Source,
    /// Where the figure comes from, in a few words.
    pub how: String,
}

/// The device's memory at the moment the file was written.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeviceLedger {
    /// The device's memory (`cudaMemGetInfo`'s total).
    pub total_bytes: u64,
    /// In the order of the table: PyTorch's pools, outside PyTorch, free.
    pub parts: Vec<Part>,
    /// The parts' sum equals the total (false only when the figures
    /// contradict each other: then `notes` says how).
    pub adds_up: bool,
    /// Outside PyTorch's allocator, this process's and others' together
    /// (the sum of those parts): what `nvidia-smi` shows beyond PyTorch.
    pub outside_pytorch_bytes: u64,
    /// Pinned host memory PyTorch's host allocator held (host RAM, not the
    /// device's: not a part of the total).
    pub host_pinned_bytes: Option<u64>,
    /// What the ledger could not tell apart and what would tell it; where
    /// the file's own figures disagree.
    pub notes: Vec<String>,
}

impl DeviceLedger {
    /// This process's memory outside PyTorch and other processes', where
    /// NVML told them apart.
    pub fn outside_split(&self) -> Option<(u64, u64)> {
        let of = |k: PartKind| self.parts.iter().find(|p| p.kind == k).map(|p| p.bytes);
        Some((
            of(PartKind::OutsidePytorchThisProcess)?,
            of(PartKind::OtherProcesses)?,
        ))
    }
}

/// What this process held on `device` outside PyTorch's allocator when the
/// file was written (the CUDA context, NCCL's buffers, other allocators),
/// where NVML measured it; `None` where the recording cannot tell it from
/// other processes' memory. What another run of the same program needs
/// beside PyTorch's pools: `vramscope_simulate`'s `fit` and `advise --gpu`
/// hold a run against a GPU's total less this.
pub fn measured_outside(snap: &Snapshot, device: u32) -> Option<u64> {
    ledger(snap, device)?.outside_split().map(|(mine, _)| mine)
}

/// The ledger of `device` at the dump, where the recorder measured the
/// device (`vramscope.record` on CUDA or XPU); `None` for a file without
/// those figures (PyTorch's own `_dump_snapshot`): its segments are all
/// it knows, which `summary` already shows.
pub fn ledger(snap: &Snapshot, device: u32) -> Option<DeviceLedger> {
    let facts = snap.source.recorder.as_ref()?.device_facts(device)?;
    let total = facts.total_memory?;
    let free = facts.free_at_dump?;
    Some(build(snap, device, facts, total, free))
}

fn build(snap: &Snapshot, device: u32, facts: &DeviceFacts, total: u64, free: u64) -> DeviceLedger {
    let mut notes = Vec::new();
    let mut parts = pools(snap, device);
    let reserved: u64 = parts.iter().map(|p| p.bytes).sum();
    if let Some(counted) = facts.reserved_at_dump.filter(|&r| r != reserved) {
        notes.push(format!(
            "PyTorch's counter said {} reserved when the device was measured, its segments in the file {}: \
             the two were read at different moments (the ledger uses the segments)",
            vramscope_text::units::bytes(counted),
            vramscope_text::units::bytes(reserved)
        ));
    }
    let used = total.saturating_sub(free);
    let outside = used.saturating_sub(reserved);
    if reserved + free > total {
        notes.push(format!(
            "PyTorch's {} reserved and {} free exceed the device's {}: the figures were read at different moments",
            vramscope_text::units::bytes(reserved),
            vramscope_text::units::bytes(free),
            vramscope_text::units::bytes(total)
        ));
    }
    let nvml = facts.nvml.as_ref();
    match nvml.and_then(|n| n.process_used) {
        Some(process) => {
            let mine = process.saturating_sub(reserved);
            if process < reserved {
                notes.push(format!(
                    "NVML's {} for this process is below PyTorch's {} reserved: read at different moments",
                    vramscope_text::units::bytes(process),
                    vramscope_text::units::bytes(reserved)
                ));
            }
            parts.push(Part {
                kind: PartKind::OutsidePytorchThisProcess,
                label: "this process, outside PyTorch".into(),
                pool_id: None,
                bytes: mine.min(outside),
                segments: None,
                source: Source::Inferred,
                how: "NVML's figure for this process less PyTorch's reserved: the CUDA context, NCCL, \
                      library handles and plans, other allocators"
                    .into(),
            });
            parts.push(Part {
                kind: PartKind::OtherProcesses,
                label: "other processes and the driver".into(),
                pool_id: None,
                bytes: outside - mine.min(outside),
                segments: None,
                source: Source::Inferred,
                how: "the device's used memory less this process's (NVML)".into(),
            });
        }
        None => {
            parts.push(Part {
                kind: PartKind::OutsidePytorch,
                label: "outside PyTorch (this process and others)".into(),
                pool_id: None,
                bytes: outside,
                segments: None,
                source: Source::Inferred,
                how: "the device's used memory (mem_get_info) less PyTorch's reserved".into(),
            });
            notes.push(match nvml.and_then(|n| n.missing.as_deref()) {
                Some(why) => format!("this process's share of the memory outside PyTorch is not known: {why}"),
                None => "this process's share of the memory outside PyTorch is not known: the recorder read no NVML figure \
                         (install nvidia-ml-py to tell the CUDA context, NCCL and other allocators from other processes)"
                    .into(),
            });
        }
    }
    parts.push(Part {
        kind: PartKind::Free,
        label: "free".into(),
        pool_id: None,
        bytes: free,
        segments: None,
        source: Source::Measured,
        how: "mem_get_info (the driver) when the file was written".into(),
    });
    if let Some(n) = nvml {
        if let Some(nt) = n.device_total.filter(|&nt| nt != total) {
            notes.push(format!(
                "NVML gives the device {} in all, CUDA {}: CUDA leaves out what the driver keeps for itself",
                vramscope_text::units::bytes(nt),
                vramscope_text::units::bytes(total)
            ));
        }
    }
    DeviceLedger {
        total_bytes: total,
        adds_up: parts.iter().map(|p| p.bytes).sum::<u64>() == total,
        outside_pytorch_bytes: outside,
        parts,
        host_pinned_bytes: facts.host_pinned.map(|h| h.allocated_bytes),
        notes,
    }
}

/// PyTorch's reserved memory by pool, the default pool first (present even
/// when empty), then private pools by id.
fn pools(snap: &Snapshot, device: u32) -> Vec<Part> {
    let mut by_pool: std::collections::BTreeMap<(i64, i64), (u64, u64)> = Default::default();
    by_pool.insert((0, 0), (0, 0));
    for s in snap.segments_of(device) {
        let e = by_pool.entry(s.pool_id).or_default();
        e.0 += s.total_size;
        e.1 += 1;
    }
    by_pool
        .into_iter()
        .map(|(id, (bytes, segments))| {
            let (kind, label) = match id {
                (0, 0) => (PartKind::PytorchDefaultPool, "PyTorch, default pool".to_owned()),
                (0, n) => (
                    PartKind::PytorchGraphPool,
                    format!("PyTorch, pool (0, {n}): a CUDA graph's own"),
                ),
                (a, b) => (
                    PartKind::PytorchUserPool,
                    format!("PyTorch, pool ({a}, {b}): made by the program (MemPool, graph_pool_handle)"),
                ),
            };
            Part {
                kind,
                label,
                pool_id: Some(id),
                bytes,
                segments: Some(segments),
                source: Source::ReportedByPytorch,
                how: "the snapshot's segments".into(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    /// A dump with segments in the default pool, a graph's pool and a
    /// user's pool, and the recorder's device figures (`device` is the
    /// `vramscope.device` dict).
    fn snapshot(device: &str) -> Snapshot {
        let seg = |addr: u64, size: u64, pool: &str| {
            format!(
                r#"{{"device":0,"address":{addr},"total_size":{size},"allocated_size":0,"active_size":0,
                    "requested_size":0,"stream":0,"segment_type":"large","segment_pool_id":{pool},
                    "blocks":[{{"address":{addr},"size":{size},"requested_size":0,"state":"inactive","frames":[]}}]}}"#
            )
        };
        let json = format!(
            r#"{{"segments":[{},{},{},{}],"device_traces":[[]],
                "vramscope":{{"recorder":"cuda-allocator-history","device":{device}}}}}"#,
            seg(1 << 32, 20 * MIB, "[0,0]"),
            seg(2 << 32, 2 * MIB, "[0,0]"),
            seg(3 << 32, 64 * MIB, "[0,1]"),
            seg(4 << 32, 32 * MIB, "[1,0]"),
        );
        vramscope_snapshot::decode_bytes(json.as_bytes(), &Default::default()).expect("decodes")
    }

    #[test]
    fn with_nvml_every_part_is_told_and_they_add_up() {
        let total = 80 * GIB;
        let free = 70 * GIB;
        let process = 118 * MIB + 600 * MIB; // PyTorch's 118 MiB and a 600 MiB context
        let dev = format!(
            r#"{{"type":"cuda","index":0,"total_memory":{total},"free_at_dump":{free},"reserved_at_dump":{},
                "nvml":{{"device_used":{},"device_total":{},"process_used":{process},"listed_used":{},"processes":2}},
                "host_pinned":{{"allocated_bytes":{},"active_bytes":0}}}}"#,
            118 * MIB,
            total - free,
            total + 512 * MIB,
            total - free,
            4 * MIB
        );
        let l = ledger(&snapshot(&dev), 0).expect("a ledger");
        let kinds: Vec<PartKind> = l.parts.iter().map(|p| p.kind).collect();
        assert_eq!(
            kinds,
            [
                PartKind::PytorchDefaultPool,
                PartKind::PytorchGraphPool,
                PartKind::PytorchUserPool,
                PartKind::OutsidePytorchThisProcess,
                PartKind::OtherProcesses,
                PartKind::Free
            ]
        );
        let bytes: Vec<u64> = l.parts.iter().map(|p| p.bytes).collect();
        let others = total - free - process;
        assert_eq!(
            bytes,
            [22 * MIB, 64 * MIB, 32 * MIB, 600 * MIB, others, free]
        );
        assert_eq!(l.parts[0].segments, Some(2));
        assert!(l.adds_up && bytes.iter().sum::<u64>() == total);
        assert_eq!(l.outside_split(), Some((600 * MIB, others)));
        assert_eq!(l.host_pinned_bytes, Some(4 * MIB));
        // NVML counts the driver's own reservation in its total; CUDA does not.
        assert!(
            l.notes.iter().any(|n| n.contains("NVML gives the device")),
            "{:?}",
            l.notes
        );
    }

    #[test]
    fn without_nvml_outside_is_one_part_and_says_what_would_split_it() {
        let dev = format!(
            r#"{{"type":"cuda","index":0,"total_memory":{},"free_at_dump":{},"reserved_at_dump":{},
                "nvml":{{"missing":"nvidia-ml-py is not installed (pip install nvidia-ml-py)"}}}}"#,
            16 * GIB,
            GIB,
            100 * MIB
        );
        let l = ledger(&snapshot(&dev), 0).expect("a ledger");
        let outside = l
            .parts
            .iter()
            .find(|p| p.kind == PartKind::OutsidePytorch)
            .expect("outside");
        assert_eq!(outside.bytes, 15 * GIB - 118 * MIB);
        assert_eq!(outside.source, Source::Inferred);
        assert!(l.adds_up && l.outside_split().is_none());
        assert!(l
            .notes
            .iter()
            .any(|n| n.contains("nvidia-ml-py is not installed")));
        // PyTorch's counter (100 MiB) and the segments (118 MiB) were read apart.
        assert!(
            l.notes.iter().any(|n| n.contains("different moments")),
            "{:?}",
            l.notes
        );
    }

    #[test]
    fn a_file_without_the_recorders_figures_has_no_ledger() {
        assert!(ledger(&snapshot(r#"{"type":"cuda","index":0}"#), 0).is_none());
        let json = vramscope_testdata::hand_trace(&[("alloc", 4096, 512, "[]")]);
        let snap = vramscope_snapshot::decode_bytes(json.as_bytes(), &Default::default())
            .expect("decodes");
        assert!(ledger(&snap, 0).is_none());
    }
}
