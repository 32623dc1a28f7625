//! Reading many rank files: one worker per core, each holding one file at a
//! time, so memory stays a few files' worth however many there are. Each
//! file is reduced to the figures the comparison needs and dropped.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::Serialize;
use vramscope_analysis::{summarize, SummaryOptions};
use vramscope_snapshot::{load, LoadOptions};

use crate::names::RankFile;

/// Bytes at one site.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SiteBytes {
    pub site: String,
    pub bytes: u64,
}

/// What one file says, reduced.
#[derive(Clone, Debug, Serialize)]
pub struct FileFigures {
    pub path: PathBuf,
    pub rank: u32,
    pub step: Option<u64>,
    pub exit: bool,
    /// The device reported (the one with the highest peak).
    pub device: u32,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    /// When the peak was reached: µs since the trace's first event, and
    /// the event index.
    pub peak_time_us: Option<i64>,
    pub peak_event: Option<u64>,
    /// The first OOM: requested bytes and event index.
    pub oom: Option<(u64, u64)>,
    /// 1 − largest free block / cached free bytes, at the dump.
    pub fragmentation: f64,
    pub reserved_at_end: u64,
    pub allocated_at_end: u64,
    /// Allocated bytes after each event, at most 256 points (the largest
    /// of each stretch), for a strip of memory over time.
    pub strip: Vec<u64>,
    /// Events per strip point.
    pub strip_stride: u64,
    /// The first event of each training iteration (empty when none were
    /// found), to align the strips of different ranks on iterations.
    pub iteration_starts: Vec<u64>,
    /// Sites alive at the peak, largest first (up to 50).
    pub peak_sites: Vec<SiteBytes>,
    pub events: u64,
}

/// A file that could not be read, and why.
#[derive(Clone, Debug, Serialize)]
pub struct FileError {
    pub path: PathBuf,
    pub rank: u32,
    pub error: String,
}

/// Sites kept per file for the comparison.
const SITES: usize = 50;
/// Points of each file's strip.
const STRIP: usize = 256;

fn figures(f: &RankFile, threads: usize) -> Result<FileFigures, String> {
    let opts = LoadOptions {
        threads: Some(threads),
        ..LoadOptions::default()
    };
    let snap = load(&f.path, &opts).map_err(|e| e.to_string())?;
    let sopts = SummaryOptions {
        top_sites: SITES,
        ..SummaryOptions::default()
    };
    let s = summarize(&snap, &sopts);
    let d = s
        .devices
        .iter()
        .max_by_key(|d| (d.peak.allocated_bytes, std::cmp::Reverse(d.device)))
        .ok_or_else(|| "no device with segments or events".to_string())?;
    let first_time = snap.trace(d.device).and_then(|t| {
        t.time_us
            .iter()
            .copied()
            .find(|&x| x != vramscope_snapshot::NO_TIME)
    });
    let (strip, strip_stride) = strip(&snap, d.device);
    let iteration_starts = vramscope_analysis::iterations::find_iterations(&snap, d.device)
        .list
        .iter()
        .map(|it| it.start as u64)
        .collect();
    Ok(FileFigures {
        path: f.path.clone(),
        rank: f.rank,
        step: f.step,
        exit: f.exit,
        device: d.device,
        peak_allocated: d.peak.allocated_bytes,
        peak_reserved: d.peak_reserved_bytes,
        peak_time_us: d.peak.time_us.zip(first_time).map(|(t, t0)| t - t0),
        peak_event: d.peak.event_index,
        oom: d.ooms.first().map(|o| (o.requested_bytes, o.event_index)),
        fragmentation: d.end.fragmentation.fragmentation_ratio,
        reserved_at_end: d.end.reserved_bytes,
        allocated_at_end: d.end.allocated_bytes,
        strip,
        strip_stride,
        iteration_starts,
        peak_sites: d
            .peak
            .top_sites
            .iter()
            .map(|x| SiteBytes {
                site: x.site.clone(),
                bytes: x.bytes,
            })
            .collect(),
        events: d.events.total,
    })
}

/// Allocated bytes over the trace in [`STRIP`] stretches (the largest of
/// each), and the events per stretch.
fn strip(snap: &vramscope_snapshot::Snapshot, device: u32) -> (Vec<u64>, u64) {
    let Some(t) = snap.trace(device) else {
        return (Vec::new(), 1);
    };
    let liveness = vramscope_analysis::Liveness::new(snap, device);
    let series = vramscope_analysis::liveness::allocated_series(&liveness, t);
    if series.is_empty() {
        return (Vec::new(), 1);
    }
    let per = series.len().div_ceil(STRIP);
    let points = series
        .chunks(per)
        .map(|c| c.iter().copied().max().unwrap_or(0))
        .collect();
    (points, per as u64)
}

/// Files held in memory at once by default: enough to keep the cores busy
/// (each file's decoding is itself parallel), few enough that memory stays
/// a few files' worth on a machine with many cores.
pub const DEFAULT_JOBS: usize = 3;

/// Read every file with `jobs` workers (0: [`DEFAULT_JOBS`], at most one
/// per core); results in the order of `files`.
pub fn scan(
    files: &[RankFile],
    jobs: usize,
    progress: Option<&(dyn Fn(usize) + Sync)>,
) -> Vec<Result<FileFigures, FileError>> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let jobs = if jobs == 0 {
        DEFAULT_JOBS.min(cores)
    } else {
        jobs
    }
    .clamp(1, files.len().max(1));
    // Cores left over when there are fewer files than cores go to each
    // file's own decoding.
    let threads = (cores / jobs).max(1);
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<Result<FileFigures, FileError>>>> =
        Mutex::new((0..files.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(f) = files.get(i) else { break };
                let r = figures(f, threads).map_err(|error| FileError {
                    path: f.path.clone(),
                    rank: f.rank,
                    error,
                });
                if let Ok(mut o) = out.lock() {
                    o[i] = Some(r);
                }
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if let Some(p) = progress {
                    p(n);
                }
            });
        }
    });
    out.into_inner()
        .unwrap_or_default()
        .into_iter()
        .zip(files)
        .map(|(r, f)| {
            r.unwrap_or_else(|| {
                Err(FileError {
                    path: f.path.clone(),
                    rank: f.rank,
                    error: "not read".into(),
                })
            })
        })
        .collect()
}
