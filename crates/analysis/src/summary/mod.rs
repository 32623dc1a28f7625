//! `vramscope summary`: one [`Summary`] per file, one [`DeviceSummary`] per
//! device. The serialized form is the stable `--json` output (see
//! `docs/summary-json.md`); add fields, never rename or remove them.

use std::collections::BTreeMap;

use serde::Serialize;
use vramscope_snapshot::Snapshot;

use crate::categories::CategoryTotal;
use crate::segments::MemoryState;
use crate::sites::Site;

mod children;
mod device;

pub use children::unrecorded_children;
use device::event_stats;
pub use device::{summarize_device, summarize_device_with};

/// Options of the summary. `Default` gives the documented defaults.
#[derive(Clone, Debug)]
pub struct SummaryOptions {
    /// Only this device. Default: every device with segments or events.
    pub device: Option<u32>,
    /// Allocation sites listed at the peak, at the end and per OOM. Default 10.
    pub top_sites: usize,
    /// Label what the memory is (parameters, gradients, ...) at the peak,
    /// the end and each OOM. Default true.
    pub categories: bool,
}

impl Default for SummaryOptions {
    fn default() -> Self {
        SummaryOptions {
            device: None,
            top_sites: 10,
            categories: true,
        }
    }
}

/// OOM events whose holders are listed (the rest get totals only).
pub const MAX_DETAILED_OOMS: usize = 20;

/// Summary JSON schema version; bumped only on incompatible change.
pub const SUMMARY_SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub schema_version: u32,
    pub source: SourceSummary,
    pub devices: Vec<DeviceSummary>,
    /// `allocator_settings` as recorded (`PYTORCH_CUDA_ALLOC_CONF`, ...).
    pub allocator_settings: Option<serde_json::Map<String, serde_json::Value>>,
    /// Names of annotations (`record_function` scopes) with their counts.
    pub annotations: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SourceSummary {
    pub file_bytes: u64,
    pub decoded_bytes: u64,
    /// `pickle`, `json` or `torch.save`.
    pub encoding: String,
    pub pickle_protocol: Option<u8>,
    /// `none`, `gzip` or `zstd`.
    pub compression: String,
    /// `dict` or `segment_list`.
    pub layout: String,
    pub legacy_blocks: bool,
    pub truncated: bool,
    pub warnings: Vec<String>,
    /// What recorded the file, when vramscope did: `cpu-allocator`, `dispatch`,
    /// `cuda-allocator-history`, `xpu-allocator-history`, `cpu-profiler`.
    pub recorder: Option<String>,
    /// Values out of range or of the wrong type, per field: what was stored
    /// instead, how many, the first one (each also has a line in `warnings`).
    pub repairs: Vec<vramscope_snapshot::Repair>,
    /// Constructs that would have executed code under `pickle.load`.
    pub skipped: Vec<String>,
    /// What a damaged file lost, in one sentence every output shows
    /// (terminal, page banner); `None` for a whole, undamaged file.
    pub damage: Option<String>,
    /// That the recording's history wrapped (its oldest events are not in
    /// the file) and how to keep more; `None` when it holds the whole run
    /// or the file does not say.
    pub history: Option<String>,
    /// The recorded process's children that trained or used a GPU without
    /// being recorded (`mp.spawn`'s ranks), and how to record them; `None`
    /// where the recorder noted none.
    pub children: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct DeviceSummary {
    pub device: u32,
    /// What the device is, as PyTorch names it where the file says (`cpu`,
    /// `mps:0`, `cuda:0`, `xpu:0`); `device N` when it does not.
    pub name: String,
    /// Whether memory went through a caching allocator (CUDA, XPU), so that
    /// segments, cached free memory and fragmentation mean something. False
    /// for vramscope's CPU recorders: each tensor is its own allocation.
    pub caching_allocator: bool,
    /// Figures of the file that contradict each other (reserved below
    /// allocated, the trace's end against the segments at the dump), one
    /// sentence each; empty when they agree.
    pub inconsistencies: Vec<String>,
    /// State at the end (the moment of the dump).
    pub end: MemoryState,
    pub events: EventStats,
    pub peak: Peak,
    /// Reserved memory's highest point over the trace.
    pub peak_reserved_bytes: u64,
    /// Allocated after the trace's last event: the total that
    /// [`end_top_sites`](Self::end_top_sites) and
    /// [`end_by_category`](Self::end_by_category) share (it differs from
    /// [`end`](Self::end) where the trace stops before the dump: a cut file).
    pub end_trace_bytes: u64,
    /// Alive at the end, by allocation site.
    pub end_top_sites: Vec<Site>,
    /// Alive at the end, per category.
    pub end_by_category: Vec<CategoryTotal>,
    pub ooms: Vec<Oom>,
    /// The device allocator's own counters against the recording, where
    /// the recorder read them (dispatch recordings on MPS, ...).
    pub device_counter: Option<CounterCheck>,
    /// Every byte of the device at the dump: PyTorch by pool, outside it,
    /// free; where the recorder measured the device (`None` otherwise).
    pub ledger: Option<crate::ledger::DeviceLedger>,
}

/// The last reading of the device allocator's counters and what the
/// recording holds at that moment: the difference is memory the recorder
/// did not see (allocated without a tensor, on another thread).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct CounterCheck {
    pub time_us: i64,
    pub counter_allocated_bytes: u64,
    pub counter_reserved_bytes: u64,
    pub recorded_allocated_bytes: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct EventStats {
    pub total: u64,
    /// Count per action name (`alloc`, `free_requested`, ...).
    pub by_action: BTreeMap<String, u64>,
    pub first_time_us: Option<i64>,
    pub last_time_us: Option<i64>,
    pub span_us: Option<i64>,
    /// Events that carry a stack.
    pub with_stack: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Peak {
    /// Highest allocated total over the trace, blocks from before the window included.
    pub allocated_bytes: u64,
    /// First event after which the peak holds (`null`: at the start of the trace).
    pub event_index: Option<u64>,
    pub time_us: Option<i64>,
    /// Bytes alive from before the trace window (counted from its start).
    pub before_window_bytes: u64,
    pub top_sites: Vec<Site>,
    pub live_blocks: u64,
    /// Bytes alive at the peak per category (parameter, gradient,
    /// optimizer_state, activation, input, temporary, autograd_detail,
    /// workspace, ema, unknown), largest first, with where the labels came from.
    pub by_category: Vec<CategoryTotal>,
    /// Whether the peak is in an evaluation pass of a recording that
    /// trains: forwards that no backward used (`categories::evaluation`).
    pub in_evaluation: bool,
    /// Where the peak is in an evaluation pass: whether a forward of that
    /// pass ran with autograd on (no `torch.no_grad()`), from vramscope's
    /// recorder; absent where it did not say (PyTorch's own files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evaluation_with_grad: Option<bool>,
    /// Where the peak is in an evaluation pass: the highest allocated
    /// outside the evaluation passes (the training steps and the rest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outside_evaluation: Option<OutsideEvaluation>,
    /// Where the peak is before the first forward, above everything after
    /// it: what the setup made and dropped (`setup::setup_peak`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup: Option<crate::setup::SetupPeak>,
}

impl Peak {
    /// Where the peak is in an evaluation pass, the sentence that says so
    /// and what the rest of the run peaked at.
    pub fn evaluation_sentence(&self) -> Option<String> {
        if !self.in_evaluation {
            return None;
        }
        let rest = self
            .outside_evaluation
            .as_ref()
            .map_or_else(String::new, |o| {
                format!(
                    "; outside evaluation the peak is {} (event {})",
                    vramscope_text::units::bytes(o.allocated_bytes),
                    vramscope_text::units::count(o.event_index)
                )
            });
        let grad = if self.evaluation_with_grad == Some(true) {
            ", run with autograd on (no `torch.no_grad()`): each batch's graph is kept until its output is dropped"
        } else {
            ""
        };
        Some(format!(
            "in an evaluation pass (forwards no backward used: a validation or test loop, its batch its own){grad}{rest}"
        ))
    }
}

/// The peak of a recording's events outside its evaluation passes.
#[derive(Clone, Debug, Serialize)]
pub struct OutsideEvaluation {
    pub allocated_bytes: u64,
    /// First event after which it holds.
    pub event_index: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Oom {
    pub event_index: u64,
    pub time_us: Option<i64>,
    pub requested_bytes: u64,
    /// Free memory on the device when the allocation failed.
    pub device_free_bytes: Option<u64>,
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    pub top_holders: Vec<Site>,
    /// What held the memory when the allocation failed, per category.
    pub by_category: Vec<CategoryTotal>,
    /// Why it failed, in one sentence from the figures above (and the
    /// largest free block when the trace ends at this OOM).
    pub cause: String,
    /// Each cause that holds, the dominant first, with its bytes.
    pub diagnosis: crate::oom::OomDiagnosis,
}

/// The device's total memory and the memory fraction's limit, where the
/// recorder stored them (PyTorch's files hold neither).
pub fn device_limits(snap: &Snapshot, device: u32) -> (Option<u64>, Option<u64>) {
    let Some(d) = snap
        .source
        .recorder
        .as_ref()
        .and_then(|r| r.device_facts(device))
    else {
        return (None, None);
    };
    let limit = match (d.total_memory, d.memory_fraction) {
        (Some(t), Some(f)) if f < 1.0 => Some((t as f64 * f) as u64),
        _ => None,
    };
    (d.total_memory, limit)
}

/// Whether `device`'s memory went through a caching allocator (CUDA, XPU),
/// or each tensor was its own allocation (vramscope's CPU recorders).
pub fn caching_allocator(snap: &Snapshot, device: u32) -> bool {
    device_name(snap, device).1
}

/// The device's name and whether a caching allocator served it, from what
/// recorded the file.
fn device_name(snap: &Snapshot, device: u32) -> (String, bool) {
    let Some(rec) = snap.source.recorder.as_ref() else {
        return (format!("device {device}"), true);
    };
    // The CPU has one memory: no index.
    let name = match rec.device_kind() {
        "cpu" => "cpu".to_owned(),
        kind => format!("{kind}:{device}"),
    };
    (name, rec.caching_allocator())
}

/// Summarise a snapshot.
pub fn summarize(snap: &Snapshot, opts: &SummaryOptions) -> Summary {
    let devices = summary_devices(snap, opts)
        .into_iter()
        .map(|d| summarize_device(snap, d, opts))
        .collect();
    summary_of(snap, devices)
}

/// The devices a summary with `opts` covers.
pub fn summary_devices(snap: &Snapshot, opts: &SummaryOptions) -> Vec<u32> {
    match opts.device {
        Some(d) => vec![d],
        None => snap.devices(),
    }
}

/// The whole-file summary around device summaries made by the caller.
pub fn summary_of(snap: &Snapshot, devices: Vec<DeviceSummary>) -> Summary {
    let src = &snap.source;
    let protocol = match src.encoding {
        vramscope_snapshot::Encoding::Pickle { protocol }
        | vramscope_snapshot::Encoding::TorchSave { protocol } => Some(protocol),
        vramscope_snapshot::Encoding::Json => None,
    };
    let mut annotations = BTreeMap::new();
    for a in &snap.annotations {
        if a.stage != vramscope_snapshot::AnnotationStage::End {
            *annotations.entry(snap.str(a.name).to_owned()).or_insert(0) += 1;
        }
    }
    Summary {
        schema_version: SUMMARY_SCHEMA_VERSION,
        source: SourceSummary {
            file_bytes: src.file_bytes,
            decoded_bytes: src.decoded_bytes,
            encoding: src.encoding_name().into(),
            pickle_protocol: protocol,
            compression: match src.compression {
                vramscope_snapshot::Compression::None => "none",
                vramscope_snapshot::Compression::Gzip => "gzip",
                vramscope_snapshot::Compression::Zstd => "zstd",
            }
            .into(),
            layout: match src.layout {
                vramscope_snapshot::Layout::Dict => "dict",
                vramscope_snapshot::Layout::SegmentList => "segment_list",
            }
            .into(),
            legacy_blocks: src.legacy_blocks,
            truncated: src.truncated,
            warnings: src.warnings.clone(),
            recorder: src.recorder.as_ref().map(|r| r.name.clone()),
            repairs: src.repairs.clone(),
            skipped: src.skipped.clone(),
            damage: damage(snap),
            history: history(snap),
            children: unrecorded_children(snap),
        },
        devices,
        allocator_settings: snap.allocator_settings.clone(),
        annotations,
    }
}

/// That the recording's history wrapped, for every command to say: the
/// oldest allocations and frees were dropped, so memory allocated before
/// the trace's window is counted from its start and earlier iterations are
/// gone; and how to keep more. `None` when the file holds the whole run or
/// does not say (PyTorch's own files: no recorder's `history`).
pub fn history(snap: &Snapshot) -> Option<String> {
    let h = snap.source.recorder.as_ref()?.history.as_ref()?;
    let raise = "keep more with vramscope.record(max_entries=N), vramscope run --max-entries N or VRAMSCOPE_MAX_ENTRIES=N";
    match h.unit.as_str() {
        "events" => {
            let seen = h.seen?;
            let kept = h.kept.unwrap_or(h.max);
            (seen > kept).then(|| {
                format!(
                    "the recording kept its last {} allocations and frees of {} ({} older ones dropped): memory allocated before its window is counted from the window's start, and the iterations before it are not in the file; {raise}",
                    vramscope_text::units::count(kept),
                    vramscope_text::units::count(seen),
                    vramscope_text::units::count(seen - kept)
                )
            })
        }
        _ => {
            // PyTorch's history says nothing of what it dropped: a trace as
            // long as the limit has filled it.
            let longest = snap
                .traces
                .iter()
                .map(|t| t.len() as u64)
                .max()
                .unwrap_or(0);
            (h.max > 0 && longest >= h.max).then(|| {
                format!(
                    "the allocator history is full ({} entries, its limit): older events were dropped, memory allocated before its window is counted from the window's start, and earlier iterations are not in the file; {raise}",
                    vramscope_text::units::count(h.max)
                )
            })
        }
    }
}

/// What a damaged file lost, for every command to say: a cut file keeps
/// only the events before the cut (how many, up to when); a repaired one
/// has values the reader replaced. `None` when the file is whole.
pub fn damage(snap: &Snapshot) -> Option<String> {
    let src = &snap.source;
    if src.truncated {
        // The reader's sentence, without the words this one repeats.
        let first = src.warnings.first().map_or("", String::as_str);
        let reason = first
            .strip_prefix("the file is truncated (")
            .and_then(|r| r.strip_suffix("); showing what was recovered"))
            .unwrap_or(first);
        let events: usize = snap.traces.iter().map(|t| t.len()).sum();
        let span = snap
            .traces
            .iter()
            .map(event_stats)
            .filter_map(|e| e.span_us)
            .max();
        let kept = match span {
            Some(us) => format!(
                "{} events recovered, covering {} of the recording",
                vramscope_text::units::count(events as u64),
                vramscope_text::units::duration_us(us)
            ),
            None => format!(
                "{} events recovered",
                vramscope_text::units::count(events as u64)
            ),
        };
        return Some(format!(
            "the file is cut short ({reason}); everything shown covers only the part before the cut ({kept}): the events after it, the iterations they held and the tensors they freed are lost"
        ));
    }
    if !src.repairs.is_empty() {
        let n: u64 = src.repairs.iter().map(|r| r.count).sum();
        let fields: Vec<&str> = src
            .repairs
            .iter()
            .map(|r| r.field.as_str())
            .take(3)
            .collect();
        return Some(format!(
            "the file has {} damaged value(s), repaired ({}{}): figures built from them may be off; `vramscope summary` lists each",
            vramscope_text::units::count(n),
            fields.join(", "),
            if src.repairs.len() > 3 { ", ..." } else { "" }
        ));
    }
    None
}
