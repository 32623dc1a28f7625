//! `vramscope summary`: one [`Summary`] per file, one [`DeviceSummary`] per
//! device. The serialized form is the stable `--json` output (see
//! `docs/summary-json.md`); add fields, never rename or remove them.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use vramscope_snapshot::{Action, BlockState, DeviceTrace, Snapshot, NO_TIME};

use crate::categories::phases::Phases;
use crate::categories::{CategoryTotal, Labelled};
use crate::lifetimes::Lifetimes;
use crate::liveness::{allocated_series, reserved_after, Liveness};
use crate::segments::{memory_state, MemoryState};
use crate::sites::{group_by_site, Site};

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

/// [`CounterCheck`] of `device` (the recorded device is device 0 of a
/// dispatch recording).
fn counter_check(
    snap: &Snapshot,
    device: u32,
    liveness: &Liveness,
    t: &DeviceTrace,
) -> Option<CounterCheck> {
    let rec = snap.source.recorder.as_ref()?;
    if device != 0 {
        return None;
    }
    let c = rec.counters.last()?;
    let allocated = allocated_series(liveness, t);
    // The last event at or before the reading (times are in trace order).
    let k = (0..t.len())
        .take_while(|&i| time_at(t, i).is_none_or(|x| x <= c.time_us))
        .last();
    Some(CounterCheck {
        time_us: c.time_us,
        counter_allocated_bytes: c.allocated,
        counter_reserved_bytes: c.reserved,
        recorded_allocated_bytes: k.map_or(liveness.initial_bytes, |i| allocated[i]),
    })
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
    /// unknown), largest first, with where the labels came from.
    pub by_category: Vec<CategoryTotal>,
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

/// Whether the blocks alive at the trace's end are the ones the segments
/// hold at the dump: the same addresses, each segment block at least as
/// large as its trace entry. The trace records the allocator's rounded
/// request, the segment the block it took: a free block less than 1 MiB
/// larger than a large request is not split (3 MiB asked, a 4 MiB block
/// given, seen on an H200), so the totals differ with nothing amiss.
fn dump_matches_trace_end(
    snap: &Snapshot,
    device: u32,
    end_live: &[crate::liveness::LiveBlock],
) -> bool {
    let mut dumped: HashMap<u64, u64> = HashMap::new();
    for s in snap.segments_of(device) {
        for b in snap.blocks_of(s) {
            if b.state == BlockState::ActiveAllocated {
                dumped.insert(b.address, b.size);
            }
        }
    }
    dumped.len() == end_live.len()
        && end_live
            .iter()
            .all(|l| dumped.get(&l.addr).is_some_and(|&size| size >= l.size))
}

fn time_at(t: &DeviceTrace, i: usize) -> Option<i64> {
    t.time_us.get(i).copied().filter(|&x| x != NO_TIME)
}

fn event_stats(t: &DeviceTrace) -> EventStats {
    let mut counts = [0u64; Action::ALL.len()];
    for &a in &t.action {
        counts[a as usize] += 1;
    }
    let by_action = Action::ALL
        .iter()
        .filter(|a| counts[**a as usize] > 0)
        .map(|a| (a.as_str().to_owned(), counts[*a as usize]))
        .collect();
    let times = || t.time_us.iter().copied().filter(|&x| x != NO_TIME);
    let first = times().min();
    let last = times().max();
    EventStats {
        total: t.len() as u64,
        by_action,
        first_time_us: first,
        last_time_us: last,
        span_us: first.zip(last).map(|(a, b)| b - a),
        with_stack: t.stack.iter().filter(|s| !s.is_none()).count() as u64,
    }
}

/// Traces from this many events on are labelled on a second thread while
/// the liveness walk runs (the two are independent; below this, a thread costs
/// more than it saves).
const PARALLEL_EVENTS: usize = 100_000;

/// Summarise one device.
pub fn summarize_device(snap: &Snapshot, device: u32, opts: &SummaryOptions) -> DeviceSummary {
    let large = snap
        .trace(device)
        .is_some_and(|t| t.len() >= PARALLEL_EVENTS);
    if !opts.categories || !large {
        let labelled = opts.categories.then(|| Labelled::new(snap, device));
        return summarize_device_with(snap, device, opts, labelled.as_ref());
    }
    // The labels and the liveness walk are independent, and the labels'
    // two inputs (the block lifetimes and the phases) are too: on two cores,
    // the phases then the walk on one, the lifetimes then the inference
    // (once the phases are there) on the other.
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let other = s.spawn(move || {
            let empty = DeviceTrace::default();
            let _ = tx.send(Phases::new(snap, snap.trace(device).unwrap_or(&empty)));
            Walked::new(snap, device)
        });
        let lifetimes = Lifetimes::new(snap, device);
        let labelled = match rx.recv() {
            Ok(phases) => Labelled::from_parts(snap, device, lifetimes, phases),
            // Only a panic on the other thread stops the send: raise it here.
            Err(_) => std::panic::resume_unwind(
                other
                    .join()
                    .err()
                    .unwrap_or_else(|| Box::new("the phases thread returned without sending")),
            ),
        };
        let walked = other
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        summarize_walked(snap, device, opts, Some(&labelled), walked)
    })
}

/// [`summarize_device`] with the device's labelled blocks computed by the
/// caller (who needs them too); `None`: no categories.
pub fn summarize_device_with(
    snap: &Snapshot,
    device: u32,
    opts: &SummaryOptions,
    labelled: Option<&Labelled>,
) -> DeviceSummary {
    summarize_walked(snap, device, opts, labelled, Walked::new(snap, device))
}

/// What the summary takes from the liveness walk: the peak, the OOMs and the
/// blocks alive at the peak, at the end and before each detailed OOM.
struct Walked {
    liveness: Liveness,
    oom_idx: Vec<usize>,
    /// How many OOMs (the first) have their holders in `lives`.
    detailed: usize,
    /// Live blocks at the peak, the end, then before each detailed OOM.
    lives: std::vec::IntoIter<Vec<crate::liveness::LiveBlock>>,
}

impl Walked {
    fn new(snap: &Snapshot, device: u32) -> Walked {
        let empty = DeviceTrace::default();
        let t = snap.trace(device).unwrap_or(&empty);
        let liveness = Liveness::new(snap, device);
        let oom_idx: Vec<usize> = (0..t.len())
            .filter(|&i| t.action[i] == Action::Oom)
            .collect();
        // Holders are listed for the first OOMs only: later ones usually repeat them.
        let detailed = oom_idx.len().min(MAX_DETAILED_OOMS);
        let mut points = vec![liveness.peak_index, t.len().checked_sub(1)];
        points.extend(oom_idx[..detailed].iter().map(|&i| i.checked_sub(1)));
        let lives = liveness.live_at_points(t, &points).into_iter();
        Walked {
            liveness,
            oom_idx,
            detailed,
            lives,
        }
    }
}

fn summarize_walked(
    snap: &Snapshot,
    device: u32,
    opts: &SummaryOptions,
    labelled: Option<&Labelled>,
    walked: Walked,
) -> DeviceSummary {
    let empty = DeviceTrace::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let Walked {
        liveness,
        oom_idx,
        detailed,
        mut lives,
    } = walked;
    let peak_live = lives.next().unwrap_or_default();
    let end_live = lives.next().unwrap_or_default();
    let by_category =
        |live: &[crate::liveness::LiveBlock]| labelled.map_or_else(Vec::new, |l| l.totals(live));
    let peak = Peak {
        allocated_bytes: liveness.peak_bytes,
        event_index: liveness.peak_index.map(|i| i as u64),
        time_us: liveness.peak_index.and_then(|i| time_at(t, i)),
        before_window_bytes: liveness.initial_bytes,
        top_sites: group_by_site(snap, &peak_live, opts.top_sites),
        live_blocks: peak_live.len() as u64,
        by_category: by_category(&peak_live),
    };
    let reserved = reserved_after(snap, device);
    let end_reserved: u64 = snap.segments_of(device).map(|s| s.total_size).sum();
    let peak_reserved_bytes = reserved
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(end_reserved);
    let allocated = if oom_idx.is_empty() {
        Vec::new()
    } else {
        allocated_series(&liveness, t)
    };
    let end = memory_state(snap, device);
    let ooms = oom_idx
        .iter()
        .enumerate()
        .map(|(k, &i)| {
            let holders = if k < detailed {
                lives.next().unwrap_or_default()
            } else {
                Vec::new()
            };
            Oom {
                event_index: i as u64,
                time_us: time_at(t, i),
                requested_bytes: t.size[i],
                device_free_bytes: t.device_free_at(i),
                allocated_bytes: i
                    .checked_sub(1)
                    .map_or(liveness.initial_bytes, |j| allocated[j]),
                reserved_bytes: reserved.get(i).copied().unwrap_or(end_reserved),
                top_holders: group_by_site(snap, &holders, opts.top_sites),
                by_category: by_category(&holders),
                diagnosis: {
                    let allocated = i
                        .checked_sub(1)
                        .map_or(liveness.initial_bytes, |j| allocated[j]);
                    let reserved = reserved.get(i).copied().unwrap_or(end_reserved);
                    // The dump's free blocks are the OOM's when nothing
                    // but OOMs follows it in the trace.
                    let last =
                        (i..t.len()).all(|j| matches!(t.action[j], Action::Oom | Action::Snapshot));
                    let largest = last.then_some(end.fragmentation.largest_free_block);
                    let pinned = last.then(|| crate::oom::pinned(snap, device, t.size[i]));
                    let (total, limit) = device_limits(snap, device);
                    crate::oom::diagnose(
                        &crate::oom::OomFigures {
                            request: t.size[i],
                            allocated,
                            reserved,
                            free: t.device_free_at(i),
                            total,
                            limit,
                            largest_free: largest,
                        },
                        pinned.as_ref(),
                    )
                },
                cause: String::new(),
            }
        })
        .map(|mut o: Oom| {
            o.cause = o.diagnosis.sentence.clone();
            o
        })
        .collect();
    let (name, caching_allocator) = device_name(snap, device);
    let trace_end: u64 = end_live.iter().map(|b| b.size).sum();
    let mut inconsistencies = Vec::new();
    if peak_reserved_bytes < liveness.peak_bytes && caching_allocator {
        inconsistencies.push(format!(
            "reserved peaked at {}, below allocated's peak of {}: the trace misses segment events (its buffer wrapped, or the file is cut), so reserved is known only where segments were seen",
            crate::units::bytes(peak_reserved_bytes),
            crate::units::bytes(liveness.peak_bytes)
        ));
    }
    if end.reserved_bytes < end.allocated_bytes {
        inconsistencies.push(format!(
            "at the end reserved ({}) is below allocated ({}): the segments are damaged",
            crate::units::bytes(end.reserved_bytes),
            crate::units::bytes(end.allocated_bytes)
        ));
    }
    let disagree = !t.is_empty() && !dump_matches_trace_end(snap, device, &end_live);
    if disagree && snap.source.truncated {
        inconsistencies.push(format!(
            "the file is cut inside the trace: its last recovered event leaves {} allocated, the segments written at the dump hold {}; \"alive at the end\" lists the former, events after the cut are lost",
            crate::units::bytes(trace_end),
            crate::units::bytes(end.allocated_bytes)
        ));
    } else if disagree && snap.source.recorder.is_some() {
        inconsistencies.push(format!(
            "the trace leaves {} allocated at its end, the segments at the dump hold {}: the dump was taken at another moment than the trace's last event",
            crate::units::bytes(trace_end),
            crate::units::bytes(end.allocated_bytes)
        ));
    }
    DeviceSummary {
        device,
        name,
        caching_allocator,
        inconsistencies,
        device_counter: counter_check(snap, device, &liveness, t),
        end,
        events: event_stats(t),
        peak,
        peak_reserved_bytes,
        end_trace_bytes: trace_end,
        end_top_sites: group_by_site(snap, &end_live, opts.top_sites),
        end_by_category: by_category(&end_live),
        ooms,
    }
}

/// The device's name and whether a caching allocator served it, from what
/// recorded the file.
/// Whether `device`'s memory went through a caching allocator (CUDA, XPU),
/// or each tensor was its own allocation (vramscope's CPU recorders).
pub fn caching_allocator(snap: &Snapshot, device: u32) -> bool {
    device_name(snap, device).1
}

fn device_name(snap: &Snapshot, device: u32) -> (String, bool) {
    let Some(rec) = snap.source.recorder.as_ref() else {
        return (format!("device {device}"), true);
    };
    match rec.name.as_str() {
        "cpu-allocator" | "cpu-profiler" => ("cpu".to_owned(), false),
        "dispatch" => match rec.device_type.as_deref() {
            None | Some("cpu") => ("cpu".to_owned(), false),
            Some(kind) => (format!("{kind}:{device}"), false),
        },
        "xpu-allocator-history" => (format!("xpu:{device}"), true),
        _ => (format!("cuda:{device}"), true),
    }
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
        },
        devices,
        allocator_settings: snap.allocator_settings.clone(),
        annotations,
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
                crate::units::count(events as u64),
                crate::units::duration_us(us)
            ),
            None => format!("{} events recovered", crate::units::count(events as u64)),
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
            crate::units::count(n),
            fields.join(", "),
            if src.repairs.len() > 3 { ", ..." } else { "" }
        ));
    }
    None
}
