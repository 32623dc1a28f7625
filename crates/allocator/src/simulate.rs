//! `vramscope simulate`: a recorded trace replayed under the recorded
//! settings and under others, ranked, and for a file that ends in an
//! out-of-memory error the answer to "which setting makes it fit".

use serde::Serialize;
use vramscope_snapshot::{Action, Snapshot};

use crate::replay::{replay, Replayed};
use crate::settings::{SettingError, Settings};

/// Options of a simulation. `Default`: the first device, the recorded
/// settings only, the device's capacity from the file's OOM (else unlimited).
#[derive(Clone, Debug, Default)]
pub struct SimulateOptions {
    pub device: Option<u32>,
    /// Settings to try, each in `PYTORCH_CUDA_ALLOC_CONF` syntax, applied
    /// over the recorded ones.
    pub set: Vec<String>,
    /// Device memory PyTorch may use, bytes.
    pub capacity: Option<u64>,
    /// Also try the settings users commonly turn to ([`SWEEP`]).
    pub sweep: bool,
}

/// The settings `--sweep` tries, over the recorded ones. Expandable
/// segments and the garbage collection threshold are not modelled yet.
pub const SWEEP: [&str; 7] = [
    "max_split_size_mb:128",
    "max_split_size_mb:256",
    "max_split_size_mb:512",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:8",
    "max_split_size_mb:128,roundup_power2_divisions:4",
    "max_split_size_mb:512,roundup_power2_divisions:8",
];

/// One replay.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// `recorded`, or the settings applied over them.
    pub label: String,
    pub settings: Settings,
    #[serde(flatten)]
    pub replayed: Replayed,
}

/// The out-of-memory error a file records.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct RecordedOom {
    pub entry: usize,
    /// The request that failed, bytes.
    pub request: u64,
    /// Reserved when it failed, plus the device's free memory then: the
    /// memory PyTorch could have had.
    pub capacity: Option<u64>,
}

/// What `simulate` found.
#[derive(Clone, Debug, Serialize)]
pub struct Simulation {
    pub device: u32,
    pub capacity: Option<u64>,
    pub recorded_oom: Option<RecordedOom>,
    /// Recorded settings first, the others by simulated peak reserved.
    pub runs: Vec<Run>,
    /// One sentence: which settings fit, or what must shrink.
    pub answer: String,
}

/// Replay `snap` under the settings `opts` asks for, in parallel.
pub fn simulate(snap: &Snapshot, opts: &SimulateOptions) -> Result<Simulation, SettingError> {
    let device = opts
        .device
        .or_else(|| snap.devices().first().copied())
        .unwrap_or(0);
    let recorded = snap
        .allocator_settings
        .as_ref()
        .map(Settings::from_recorded)
        .unwrap_or_default();
    let recorded_oom = recorded_oom(snap, device);
    let capacity = opts.capacity.or(recorded_oom.and_then(|o| o.capacity));
    let mut variants = vec![("recorded".to_string(), recorded.clone())];
    let extra: Vec<&str> = opts
        .set
        .iter()
        .map(String::as_str)
        .chain(if opts.sweep {
            SWEEP.to_vec()
        } else {
            Vec::new()
        })
        .collect();
    for conf in extra {
        let mut s = recorded.clone();
        s.apply(conf)?;
        if !variants.iter().any(|(l, _)| l == conf) {
            variants.push((conf.to_string(), s));
        }
    }
    // Each replay is independent: one thread each, all cores busy.
    let mut runs: Vec<Run> = std::thread::scope(|scope| {
        let handles: Vec<_> = variants
            .into_iter()
            .map(|(label, settings)| {
                scope.spawn(move || {
                    let replayed = replay(snap, device, settings.clone(), capacity);
                    Run {
                        label,
                        settings,
                        replayed,
                    }
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    runs[1..].sort_by_key(|r| (r.replayed.oom.is_some(), r.replayed.simulated_peak_reserved));
    let answer = answer(&runs, recorded_oom, capacity);
    Ok(Simulation {
        device,
        capacity,
        recorded_oom,
        runs,
        answer,
    })
}

fn recorded_oom(snap: &Snapshot, device: u32) -> Option<RecordedOom> {
    let t = snap.trace(device)?;
    let i = (0..t.len()).find(|&i| t.action[i] == Action::Oom)?;
    // Reserved at the OOM: the dumped segments with the trace after it undone.
    let reserved = crate::replay::reserved_before(snap, device, i + 1);
    let capacity = t.device_free_at(i).map(|free| reserved + free);
    Some(RecordedOom {
        entry: i,
        request: t.size[i],
        capacity,
    })
}

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

fn answer(runs: &[Run], oom: Option<RecordedOom>, capacity: Option<u64>) -> String {
    let fit: Vec<&Run> = runs.iter().filter(|r| r.replayed.oom.is_none()).collect();
    match (oom, capacity) {
        (Some(o), Some(cap)) => {
            if let Some(best) = fit.iter().find(|r| r.label != "recorded") {
                format!(
                    "the failing request of {} fits on the same {} device with {}: peak reserved {}",
                    gib(o.request),
                    gib(cap),
                    best.label,
                    gib(best.replayed.simulated_peak_reserved)
                )
            } else if o.request > cap {
                format!(
                    "no setting helps: the request alone ({}) is larger than the {} PyTorch can have on this device; \
                     that tensor must shrink (smaller batch, sequence or dtype) or be split",
                    gib(o.request),
                    gib(cap)
                )
            } else {
                let r = &runs[0].replayed;
                let need =
                    (r.allocated_at_oom + r.oom.map_or(o.request, |x| x.1)).saturating_sub(cap);
                format!(
                    "no setting tried makes the request of {} fit on a {} device: {} allocated plus the request \
                     exceed it by {}; that much of what is allocated must go (see the OOM's holders)",
                    gib(o.request),
                    gib(cap),
                    gib(r.allocated_at_oom),
                    gib(need)
                )
            }
        }
        _ => match runs.get(1) {
            Some(best)
                if best.replayed.simulated_peak_reserved
                    < runs[0].replayed.simulated_peak_reserved =>
            {
                format!(
                    "peak reserved {} with the recorded settings; {} with {}",
                    gib(runs[0].replayed.simulated_peak_reserved),
                    gib(best.replayed.simulated_peak_reserved),
                    best.label
                )
            }
            _ => format!(
                "peak reserved {} with the recorded settings; no setting tried lowers it",
                gib(runs
                    .first()
                    .map_or(0, |r| r.replayed.simulated_peak_reserved))
            ),
        },
    }
}
