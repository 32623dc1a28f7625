//! The ranks side by side: one row per rank (its highest peak over its
//! files), the imbalance (max / median peak), the ranks far from the
//! median, what the worst rank holds at its peak that the median rank does
//! not, and memory that drifts from one dump to the next.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::scan::{FileError, FileFigures, SiteBytes};

/// One rank.
#[derive(Clone, Debug, Serialize)]
pub struct RankRow {
    pub rank: u32,
    pub files: usize,
    /// The file with the highest peak, and what it says.
    pub path: String,
    pub step: Option<u64>,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    pub peak_time_us: Option<i64>,
    pub peak_event: Option<u64>,
    /// The first OOM in any of the rank's files: (requested bytes, event
    /// index, file).
    pub oom: Option<RankOom>,
    pub fragmentation: f64,
    pub top_site: Option<SiteBytes>,
    /// Peak over the median rank's peak.
    pub vs_median: f64,
    pub outlier: bool,
    /// Allocated over time in the file with the highest peak (≤ 256 points,
    /// `strip_stride` events each), and where its iterations start.
    pub strip: Vec<u64>,
    pub strip_stride: u64,
    pub iteration_starts: Vec<u64>,
    /// Events in that file's trace.
    pub events: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RankOom {
    pub requested: u64,
    pub event: u64,
    pub step: Option<u64>,
    pub path: String,
}

/// A site the worst rank holds more of than the median rank, at their peaks.
#[derive(Clone, Debug, Serialize)]
pub struct SiteDelta {
    pub site: String,
    pub worst_bytes: u64,
    pub median_bytes: u64,
    pub extra_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Worst {
    pub rank: u32,
    pub median_rank: u32,
    /// Largest extra first.
    pub sites: Vec<SiteDelta>,
}

/// A rank's peak from one dump (step) to the next.
#[derive(Clone, Debug, Serialize)]
pub struct Drift {
    pub rank: u32,
    /// (step, peak allocated), in step order.
    pub peaks: Vec<(u64, u64)>,
    /// Bytes per step from the first dump to the last.
    pub growth_per_step: f64,
    /// The last peak is more than 1% above the first.
    pub drifting: bool,
}

/// A limit and whether the job kept it.
#[derive(Clone, Debug, Serialize)]
pub struct Gate {
    pub name: &'static str,
    pub limit: f64,
    pub value: f64,
    pub passed: bool,
}

/// The comparison of all ranks.
#[derive(Clone, Debug, Serialize)]
pub struct Ranks {
    pub files: usize,
    /// Ranks that ran out of memory first (by OOM), then by peak, largest first.
    pub ranks: Vec<RankRow>,
    pub median_peak: u64,
    pub max_peak: u64,
    /// Max / median peak.
    pub imbalance: f64,
    pub outliers: Vec<u32>,
    pub worst: Option<Worst>,
    pub drift: Vec<Drift>,
    pub errors: Vec<FileError>,
    pub gates: Vec<Gate>,
    pub passed: bool,
}

fn median(v: &mut [u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[(v.len() - 1) / 2]
}

/// Compare the files' figures, rank by rank.
pub fn compare(results: Vec<Result<FileFigures, FileError>>) -> Ranks {
    let files = results.len();
    let mut errors = Vec::new();
    let mut by_rank: BTreeMap<u32, Vec<FileFigures>> = BTreeMap::new();
    for r in results {
        match r {
            Ok(f) => by_rank.entry(f.rank).or_default().push(f),
            Err(e) => errors.push(e),
        }
    }
    let mut rows: Vec<RankRow> = by_rank
        .iter()
        .filter_map(|(&rank, fs)| {
            let best = fs.iter().max_by_key(|f| f.peak_allocated)?;
            let oom = fs
                .iter()
                .filter_map(|f| f.oom.map(|o| (f, o)))
                .min_by_key(|(f, _)| f.step.unwrap_or(u64::MAX))
                .map(|(f, (requested, event))| RankOom {
                    requested,
                    event,
                    step: f.step,
                    path: f.path.display().to_string(),
                });
            Some(RankRow {
                rank,
                files: fs.len(),
                path: best.path.display().to_string(),
                step: best.step,
                peak_allocated: best.peak_allocated,
                peak_reserved: fs.iter().map(|f| f.peak_reserved).max().unwrap_or(0),
                peak_time_us: best.peak_time_us,
                peak_event: best.peak_event,
                oom,
                fragmentation: best.fragmentation,
                top_site: best.peak_sites.first().cloned(),
                vs_median: 0.0,
                outlier: false,
                strip: best.strip.clone(),
                strip_stride: best.strip_stride,
                iteration_starts: best.iteration_starts.clone(),
                events: best.events,
            })
        })
        .collect();
    let mut peaks: Vec<u64> = rows.iter().map(|r| r.peak_allocated).collect();
    let median_peak = median(&mut peaks);
    let max_peak = peaks.iter().copied().max().unwrap_or(0);
    // Outliers: further from the median than 3 median absolute deviations
    // and than 5% of the median (identical ranks have no deviation at all).
    let mut dev: Vec<u64> = rows
        .iter()
        .map(|r| r.peak_allocated.abs_diff(median_peak))
        .collect();
    let mad = median(&mut dev);
    let band = (3 * mad).max(median_peak / 20);
    for r in &mut rows {
        r.vs_median = if median_peak > 0 {
            r.peak_allocated as f64 / median_peak as f64
        } else {
            0.0
        };
        r.outlier = r.peak_allocated.abs_diff(median_peak) > band;
    }
    let median_rank = rows
        .iter()
        .filter(|r| r.peak_allocated == median_peak)
        .map(|r| r.rank)
        .min();
    rows.sort_by(|a, b| {
        b.oom
            .is_some()
            .cmp(&a.oom.is_some())
            .then(b.peak_allocated.cmp(&a.peak_allocated))
            .then(a.rank.cmp(&b.rank))
    });
    let worst = match (rows.first(), median_rank) {
        (Some(w), Some(m)) if w.rank != m => Some(worst_vs_median(&by_rank, w.rank, m)),
        _ => None,
    };
    let outliers = rows.iter().filter(|r| r.outlier).map(|r| r.rank).collect();
    let drift = by_rank
        .iter()
        .filter_map(|(&rank, fs)| drift(rank, fs))
        .collect();
    Ranks {
        files,
        imbalance: if median_peak > 0 {
            max_peak as f64 / median_peak as f64
        } else {
            0.0
        },
        ranks: rows,
        median_peak,
        max_peak,
        outliers,
        worst,
        drift,
        errors,
        gates: Vec::new(),
        passed: true,
    }
}

/// Sites of the worst rank's peak with more bytes than at the median
/// rank's peak.
fn worst_vs_median(by_rank: &BTreeMap<u32, Vec<FileFigures>>, worst: u32, median: u32) -> Worst {
    let peak_sites = |rank: u32| -> Vec<SiteBytes> {
        by_rank
            .get(&rank)
            .and_then(|fs| fs.iter().max_by_key(|f| f.peak_allocated))
            .map(|f| f.peak_sites.clone())
            .unwrap_or_default()
    };
    let (w, m) = (peak_sites(worst), peak_sites(median));
    let mut sites: Vec<SiteDelta> = w
        .iter()
        .filter_map(|s| {
            let median_bytes = m.iter().find(|x| x.site == s.site).map_or(0, |x| x.bytes);
            (s.bytes > median_bytes).then(|| SiteDelta {
                site: s.site.clone(),
                worst_bytes: s.bytes,
                median_bytes,
                extra_bytes: s.bytes - median_bytes,
            })
        })
        .collect();
    sites.sort_by(|a, b| b.extra_bytes.cmp(&a.extra_bytes).then(a.site.cmp(&b.site)));
    sites.truncate(10);
    Worst {
        rank: worst,
        median_rank: median,
        sites,
    }
}

/// The peaks of a rank's regular dumps (not the exit dump), by step.
fn drift(rank: u32, fs: &[FileFigures]) -> Option<Drift> {
    let mut peaks: Vec<(u64, u64)> = fs
        .iter()
        .filter(|f| !f.exit)
        .filter_map(|f| Some((f.step?, f.peak_allocated)))
        .collect();
    peaks.sort_unstable();
    peaks.dedup_by_key(|p| p.0);
    if peaks.len() < 2 {
        return None;
    }
    let (first, last) = (peaks[0], peaks[peaks.len() - 1]);
    let steps = (last.0 - first.0).max(1) as f64;
    Some(Drift {
        rank,
        growth_per_step: (last.1 as f64 - first.1 as f64) / steps,
        drifting: last.1 as f64 > first.1 as f64 * 1.01,
        peaks,
    })
}
