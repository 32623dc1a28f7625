//! `vramscope simulate`: a recorded trace replayed under the recorded
//! settings and under others, with program changes if asked, ranked; for a
//! file that ends in an out-of-memory error, the answer to "which setting
//! or change makes it fit".

use crate::edits::{resolve, Change, ChangeKind, ChangeMatch, Edits};
use serde::Serialize;
use vramscope_analysis::Site;
use vramscope_snapshot::{Action, Snapshot};

use crate::error::SimulateError;
use crate::replay::{replay, ReplaySetup, Replayed};
use crate::settings::Settings;

/// Options of a simulation. `Default`: the first device, the recorded
/// settings only, the program as recorded, the device's capacity from the
/// file's OOM (else unlimited), no curves.
#[derive(Clone, Debug, Default)]
pub struct SimulateOptions {
    pub device: Option<u32>,
    /// Settings to try, each in `PYTORCH_CUDA_ALLOC_CONF` syntax, applied
    /// over the recorded ones (`per_process_memory_fraction:F` stands for
    /// `torch.cuda.set_per_process_memory_fraction(F)`).
    pub set: Vec<String>,
    /// Device memory PyTorch may use, bytes.
    pub capacity: Option<u64>,
    /// The memory fraction the program set
    /// (`torch.cuda.set_per_process_memory_fraction`), where the file does
    /// not say (`vramscope.record` stores it): part of the recorded
    /// settings, so every run has it; it limits `fraction × capacity`.
    pub fraction: Option<f64>,
    /// Also try the settings users commonly turn to ([`SWEEP`]).
    pub sweep: bool,
    /// Of [`SWEEP`], only its first this many (`None`: all). A page made
    /// with the report takes [`page_sweep`]'s.
    pub sweep_first: Option<usize>,
    /// Program changes: sites whose allocations are never made, are freed
    /// at the end of their phase, or scaled (`SITE=FACTOR`).
    pub drop: Vec<String>,
    pub free_early: Vec<String>,
    pub scale: Vec<String>,
    /// Points of each run's reserved curve to keep (0: none).
    pub curve_points: usize,
}

/// The settings `--sweep` tries, over the recorded ones.
/// `garbage_collection_threshold` acts only with a memory fraction set
/// (CUDACachingAllocator.cpp, `malloc`), hence its companion.
pub const SWEEP: [&str; 8] = [
    "expandable_segments:True",
    "max_split_size_mb:128",
    "max_split_size_mb:512",
    "roundup_power2_divisions:4",
    "garbage_collection_threshold:0.8,per_process_memory_fraction:1.0",
    "max_split_size_mb:128,roundup_power2_divisions:4",
    "max_split_size_mb:512,garbage_collection_threshold:0.8,per_process_memory_fraction:1.0",
    "expandable_segments:True,roundup_power2_divisions:4",
];

/// Trace entries from which a report's page replays only the first
/// [`PAGE_SWEEP_LONG`] settings of [`SWEEP`]: each replay of a 10M-entry
/// trace takes about a second of one core, and the whole sweep doubled the
/// time to make the page on two cores.
pub const PAGE_SWEEP_FULL_BELOW: usize = 2_000_000;
/// How many of [`SWEEP`]'s settings a long trace's page replays: the
/// settings users turn to first (expandable segments, then a split limit).
pub const PAGE_SWEEP_LONG: usize = 3;

/// The sweep a report's page shows for a trace of `entries` entries:
/// `None` (all of [`SWEEP`]) or how many of its first settings, and the
/// sentence the page says about the ones it left out.
pub fn page_sweep(entries: usize) -> (Option<usize>, Option<String>) {
    if entries < PAGE_SWEEP_FULL_BELOW {
        return (None, None);
    }
    let note = format!(
        "{entries} trace entries: the page replays the recorded settings and {PAGE_SWEEP_LONG} of the {} \
         common ones; `vramscope simulate FILE --sweep` replays them all",
        SWEEP.len()
    );
    (Some(PAGE_SWEEP_LONG), Some(note))
}

/// One replay.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// `recorded`, or the settings applied over them, then the changes.
    pub label: String,
    pub settings: Settings,
    /// Whether the program changes apply to this run.
    pub changed: bool,
    #[serde(flatten)]
    pub replayed: Replayed,
    /// Where the recorded part fits but the recording ends at the OOM: the
    /// replay with the rest of the interrupted iteration projected
    /// ([`crate::horizon`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projection: Option<Projected>,
}

/// A run carried on past the end of the recording by a projection.
#[derive(Clone, Debug, Serialize)]
pub struct Projected {
    pub peak_reserved: u64,
    pub peak_allocated: u64,
    /// The first projected request that fails: the earlier iteration's
    /// entry it copies, and its size.
    pub oom: Option<(usize, u64)>,
    /// Where that request is made (`file.py:42 in f`).
    pub oom_site: Option<String>,
}

/// The out-of-memory error a file records.
#[derive(Clone, Debug, Serialize)]
pub struct RecordedOom {
    pub entry: usize,
    /// The request that failed, bytes.
    pub request: u64,
    /// Reserved when it failed, plus the device's free memory then: the
    /// memory PyTorch could have had.
    pub capacity: Option<u64>,
    /// The sites holding the most memory when it failed.
    pub holders: Vec<Site>,
    /// The device's total memory and what was held outside PyTorch then
    /// (total − reserved − free), where the recorder stored the total.
    pub device_total: Option<u64>,
    pub outside: Option<u64>,
}

/// What `simulate` found.
#[derive(Clone, Debug, Serialize)]
pub struct Simulation {
    pub device: u32,
    pub capacity: Option<u64>,
    pub recorded_oom: Option<RecordedOom>,
    /// The program changes and what each matched.
    pub changes: Vec<ChangeMatch>,
    /// Recorded settings first (the program as recorded), the others by
    /// whether they run out of memory, then by simulated peak reserved.
    pub runs: Vec<Run>,
    /// Where the recording ends, for a file that ends at an OOM: what a
    /// run that fits there can and cannot be said to fit.
    pub horizon: Option<crate::horizon::Horizon>,
    /// What the trace's release-and-retry bursts say of the device's limit
    /// (the capacity when neither an OOM nor `--capacity` gives one).
    pub seen_limit: Option<crate::limit::SeenLimit>,
    /// When no run serves the failing request: the least of the biggest
    /// holders' memory that must go for it to, found by replay, under the
    /// recorded settings and under the best other run.
    pub must_go: Vec<crate::must_go::MustGo>,
    /// One sentence: which settings fit, or what must shrink.
    pub answer: String,
    /// The trace is an estimate's (`vramscope.estimate(device="cuda")`),
    /// not a recording: nothing to check the model against.
    pub from_estimate: bool,
}

/// The changes `opts` asks for, in order: drops, frees, scales.
fn changes(opts: &SimulateOptions) -> Result<Vec<Change>, SimulateError> {
    let mut v: Vec<Change> = opts
        .drop
        .iter()
        .map(|s| Change {
            site: s.clone(),
            kind: ChangeKind::Drop,
        })
        .chain(opts.free_early.iter().map(|s| Change {
            site: s.clone(),
            kind: ChangeKind::FreeEarly,
        }))
        .collect();
    for s in &opts.scale {
        v.push(Change::parse_scale(s).map_err(SimulateError::Change)?);
    }
    Ok(v)
}

/// Whether the model describes `snap`: a memory snapshot written from
/// PyTorch's CUDA caching allocator (its allocator history), not a CPU
/// recording or a profiler trace, whose "segments" are not the CUDA
/// allocator's. Why not, if it does not.
pub fn modelled(snap: &Snapshot) -> Result<(), SimulateError> {
    use vramscope_snapshot::SourceFormat;
    if snap.source.format != SourceFormat::Snapshot {
        return Err(SimulateError::NotCudaTrace(format!(
            "this is a {} file: the allocator model replays memory snapshots of PyTorch's CUDA caching allocator \
             (torch.cuda.memory._record_memory_history, or vramscope.record on CUDA)",
            snap.source.format.as_str()
        )));
    }
    match &snap.source.recorder {
        // PyTorch's CUDA history replays, and so does an estimate traced
        // for CUDA (`vramscope.estimate(device="cuda")`): its allocations
        // and frees are what CUDA would be asked for, and the model turns
        // them into reserved memory.
        Some(r) if !r.replays() => Err(SimulateError::NotCudaTrace(format!(
            "this snapshot was recorded by vramscope's {} backend, not by the CUDA caching allocator: the model \
             replays CUDA allocator traces only",
            r.name
        ))),
        _ => Ok(()),
    }
}

/// Replay `snap` under the settings and changes `opts` asks for, in parallel.
pub fn simulate(snap: &Snapshot, opts: &SimulateOptions) -> Result<Simulation, SimulateError> {
    modelled(snap)?;
    let device = snap.pick_device(opts.device)?;
    let mut recorded = snap
        .allocator_settings
        .as_ref()
        .map(Settings::from_recorded)
        .unwrap_or_default();
    let facts = snap
        .source
        .recorder
        .as_ref()
        .and_then(|r| r.device_facts(device));
    // A fraction of 1.0 is PyTorch's "none set": only a smaller one limits.
    recorded.memory_fraction = opts
        .fraction
        .or(facts.and_then(|d| d.memory_fraction).filter(|f| *f < 1.0))
        .or(recorded.memory_fraction);
    let recorded_oom = recorded_oom(snap, device);
    // Release-and-retry bursts: the device was full (not under garbage
    // collection, which releases before any cudaMalloc fails).
    // An estimate's segment events are its blocks': no bursts to read.
    let estimate = snap.is_estimate();
    let seen_limit = snap
        .trace(device)
        .filter(|_| {
            let collecting =
                recorded.garbage_collection_threshold > 0.0 && recorded.memory_fraction.is_some();
            !(estimate || collecting)
        })
        .and_then(|t| {
            crate::limit::seen_limit(snap, device, &crate::replay::empty_cache_calls(snap, t))
        });
    let capacity = opts
        .capacity
        .or(recorded_oom.as_ref().and_then(|o| o.capacity))
        .or(facts
            .and_then(|d| d.total_memory)
            .filter(|_| recorded.memory_fraction.is_some()))
        .or(seen_limit.as_ref().map(|l| l.capacity()));
    if recorded.memory_fraction.is_some() && capacity.is_none() {
        return Err(SimulateError::Change(
            "a memory fraction limits a share of the device's memory, which this file does not record: \
             give it with --capacity (the device's total memory, e.g. 80GiB)"
                .into(),
        ));
    }
    let edits: Edits = resolve(snap, device, &changes(opts)?)?;
    let changed = !edits.matched.is_empty();
    let change_label = edits
        .matched
        .iter()
        .map(|m| m.change.label())
        .collect::<Vec<_>>()
        .join(", ");
    let mut variants = vec![("recorded".to_string(), recorded.clone(), false)];
    if changed {
        variants.push((change_label.clone(), recorded.clone(), true));
    }
    let extra: Vec<&str> = opts
        .set
        .iter()
        .map(String::as_str)
        .chain(if opts.sweep {
            SWEEP[..opts.sweep_first.unwrap_or(SWEEP.len()).min(SWEEP.len())].to_vec()
        } else {
            Vec::new()
        })
        .collect();
    for conf in extra {
        let mut s = recorded.clone();
        s.apply(conf)?;
        let label = if changed {
            format!("{conf}; {change_label}")
        } else {
            conf.to_string()
        };
        if !variants.iter().any(|(l, ..)| *l == label) {
            variants.push((label, s, changed));
        }
    }
    let horizon = recorded_oom
        .as_ref()
        .map(|o| crate::horizon::horizon(snap, device, o.entry));
    let tail = horizon.as_ref().and_then(|h| h.tail.as_ref());
    // Each replay is independent: one thread each, all cores busy.
    let edits = &edits;
    let mut runs: Vec<Run> = std::thread::scope(|scope| {
        let handles: Vec<_> = variants
            .into_iter()
            .map(|(label, settings, changed)| {
                scope.spawn(move || {
                    let setup = ReplaySetup {
                        capacity,
                        edits: changed.then_some(edits),
                        curve_points: opts.curve_points,
                        ..Default::default()
                    };
                    let (replayed, projection) = run_once(snap, device, &settings, setup, tail);
                    Run {
                        label,
                        settings,
                        changed,
                        replayed,
                        projection,
                    }
                })
            })
            .collect();
        // A run that panicked is a bug of the model: raised here, not
        // dropped from the comparison without a word.
        handles.into_iter().map(joined).collect()
    });
    runs[1..].sort_by_key(|r| (r.replayed.oom.is_some(), r.replayed.simulated_peak_reserved));
    let mut must_go = Vec::new();
    if let (Some(o), Some(cap)) = (&recorded_oom, capacity) {
        if runs.iter().all(|r| r.replayed.oom.is_some()) {
            // The recorded settings (with the changes, if any) and the best
            // other run, each searched on its own thread.
            let picks: Vec<&Run> = runs
                .iter()
                .filter(|r| r.changed == changed)
                .take(2)
                .collect();
            must_go = std::thread::scope(|scope| {
                let handles: Vec<_> = picks
                    .into_iter()
                    .map(|r| {
                        scope.spawn(move || {
                            crate::must_go::Search {
                                snap,
                                device,
                                settings: &r.settings,
                                edits: r.changed.then_some(edits),
                                capacity: cap,
                                oom: o.entry,
                                label: &r.label,
                            }
                            .run()
                        })
                    })
                    .collect();
                handles.into_iter().filter_map(joined).collect()
            });
        }
    }
    let reach = reach_of(snap, device, horizon.as_ref(), &runs);
    let answer = crate::answer::answer(
        &runs,
        recorded_oom.as_ref(),
        horizon.as_ref(),
        must_go.first(),
        capacity,
        changed,
        &reach,
    );
    Ok(Simulation {
        device,
        capacity,
        recorded_oom,
        changes: edits.matched.clone(),
        runs,
        horizon,
        seen_limit,
        must_go,
        answer,
        from_estimate: snap.is_estimate(),
    })
}

/// How far the replay's answers hold: the interrupted iteration and the
/// one its rest was projected from, where a run's projection was made.
fn reach_of(
    snap: &Snapshot,
    device: u32,
    horizon: Option<&crate::horizon::Horizon>,
    runs: &[Run],
) -> vramscope_analysis::reach::Reach {
    let projected = runs.iter().any(|r| r.projection.is_some());
    vramscope_analysis::reach::reach(
        snap,
        device,
        horizon.and_then(|h| h.iteration),
        horizon.and_then(|h| h.from_iteration).filter(|_| projected),
    )
}

impl Simulation {
    /// How far its answers hold ([`vramscope_analysis::reach`]).
    pub fn reach(&self, snap: &Snapshot) -> vramscope_analysis::reach::Reach {
        reach_of(snap, self.device, self.horizon.as_ref(), &self.runs)
    }
}

/// One replay under `settings` as `setup` says (its `tail` is set here),
/// and where it fits at the end
/// of a recording cut by an OOM, its carrying on through the projected
/// rest of the iteration (`tail`).
pub fn run_once<'a>(
    snap: &Snapshot,
    device: u32,
    settings: &Settings,
    mut setup: ReplaySetup<'a>,
    tail: Option<&'a crate::horizon::Tail>,
) -> (Replayed, Option<Projected>) {
    setup.tail = None;
    let replayed = replay(snap, device, settings.clone(), &setup);
    let projection = match (&replayed.oom, tail) {
        (None, Some(tail)) => {
            setup.tail = Some(tail);
            setup.curve_points = 0;
            let p = replay(snap, device, settings.clone(), &setup);
            let oom = p.projected_oom.or(p.oom);
            let t = snap.trace(device);
            let oom_site = oom
                .and_then(|(e, _)| t.and_then(|t| t.stack.get(e).copied()))
                .and_then(|s| vramscope_analysis::sites::site_frame(snap, s))
                .map(|f| vramscope_analysis::sites::frame_label(snap, f));
            Some(Projected {
                peak_reserved: p.simulated_peak_reserved,
                peak_allocated: p.simulated_peak_allocated,
                oom,
                oom_site,
            })
        }
        _ => None,
    };
    (replayed, projection)
}

fn recorded_oom(snap: &Snapshot, device: u32) -> Option<RecordedOom> {
    let t = snap.trace(device)?;
    let i = first_oom(t)?;
    let capacity = capacity_at(snap, device, i);
    let live = vramscope_analysis::Liveness::new(snap, device).live_after(t, i.checked_sub(1));
    let (device_total, _) = vramscope_analysis::summary::device_limits(snap, device);
    Some(RecordedOom {
        entry: i,
        request: t.size[i],
        capacity,
        holders: vramscope_analysis::sites::group_by_site(snap, device, &live, 3),
        device_total,
        outside: device_total.zip(capacity).map(|(t, c)| t.saturating_sub(c)),
    })
}

fn first_oom(t: &vramscope_snapshot::DeviceTrace) -> Option<usize> {
    t.action.iter().position(|&a| a == Action::Oom)
}

/// What PyTorch could have had at the OOM entry `i`: reserved then (the
/// dumped segments with the trace after it undone) plus the free memory it
/// recorded; `None` where the entry has no `device_free`.
fn capacity_at(snap: &Snapshot, device: u32, i: usize) -> Option<u64> {
    let free = snap.trace(device)?.device_free_at(i)?;
    Some(crate::start::reserved_before(snap, device, i + 1) + free)
}

/// The capacity the first OOM of `device`'s trace says the run had
/// (a CPU run under `record(cpu_limit=...)` records one too).
pub fn oom_capacity(snap: &Snapshot, device: u32) -> Option<u64> {
    capacity_at(snap, device, first_oom(snap.trace(device)?)?)
}

/// A thread's result, or its panic raised again on the caller's thread.
pub fn joined<T>(h: std::thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
}
