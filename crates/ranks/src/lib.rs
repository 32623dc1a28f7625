//! Many rank files of one job, compared at a glance.
//!
//! Training frameworks dump one snapshot per rank, and none stores the
//! rank inside the file: [`names`] reads rank, step and "dumped at exit"
//! from the path names of torchtitan, torchtune, Megatron-LM and Composer.
//! [`scan()`] reads the files in parallel with a few in memory at a time and
//! reduces each to its figures; [`compare()`] sets the ranks side by side.
//!
//! ```no_run
//! use vramscope_ranks::{ranks, RanksOptions};
//! let r = ranks(&["out/memory_snapshot".into()], &RanksOptions::default())?;
//! let worst = &r.ranks[0];
//! println!("rank {} peaks at {} bytes ({:.2}x the median)", worst.rank, worst.peak_allocated, worst.vs_median);
//! # Ok::<(), vramscope_ranks::RanksError>(())
//! ```

pub mod compare;
pub mod names;
pub mod scan;

use std::path::{Path, PathBuf};

pub use compare::{compare, Drift, Gate, RankOom, RankRow, Ranks, SiteDelta, Worst};
pub use names::{infer, RankFile};
pub use scan::{scan, FileError, FileFigures, SiteBytes};

/// Options of [`ranks`]. `Default`: ranks from the path names, three files
/// read at a time (each decoded on the cores left), no limits.
#[derive(Clone, Debug, Default)]
pub struct RanksOptions {
    /// A pattern whose first group is the rank, matched against each path
    /// (over the built-in names).
    pub rank_from: Option<String>,
    /// Files read at a time (0: [`scan::DEFAULT_JOBS`], at most one per core).
    pub jobs: usize,
    /// Fail when any rank's peak allocated is above this many bytes.
    pub max_peak: Option<u64>,
    /// Fail when the max / median peak is above this.
    pub max_imbalance: Option<f64>,
}

#[derive(Debug, thiserror::Error)]
pub enum RanksError {
    #[error("--rank-from {pattern:?}: {message}")]
    Pattern { pattern: String, message: String },
    #[error("no snapshot files in {0} (looked for .pickle, .pkl, .json and their .gz/.zst)")]
    NoFiles(String),
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
}

/// Whether a file name looks like a snapshot.
fn is_snapshot(p: &Path) -> bool {
    let n = p
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let n = n
        .strip_suffix(".gz")
        .or_else(|| n.strip_suffix(".zst"))
        .unwrap_or(&n);
    n.ends_with(".pickle") || n.ends_with(".pkl") || n.ends_with(".json")
}

/// The snapshot files of `inputs`: files as given, directories walked.
pub fn collect(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, RanksError> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = inputs.to_vec();
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            let rd = std::fs::read_dir(&p).map_err(|e| RanksError::Io {
                path: p.clone(),
                message: e.to_string(),
            })?;
            for e in rd.flatten() {
                let q = e.path();
                if q.is_dir() || is_snapshot(&q) {
                    stack.push(q);
                }
            }
        } else if p.exists() {
            out.push(p);
        } else {
            return Err(RanksError::Io {
                path: p,
                message: "no such file or directory".into(),
            });
        }
    }
    out.sort();
    out.dedup();
    if out.is_empty() {
        let shown: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
        return Err(RanksError::NoFiles(shown.join(", ")));
    }
    Ok(out)
}

/// The snapshot files under `inputs` with their ranks and steps;
/// `rank_from` as [`RanksOptions::rank_from`].
pub fn rank_files(
    inputs: &[PathBuf],
    rank_from: Option<&str>,
) -> Result<Vec<RankFile>, RanksError> {
    let re = match rank_from {
        Some(p) => Some(regex::Regex::new(p).map_err(|e| RanksError::Pattern {
            pattern: p.to_owned(),
            message: e.to_string(),
        })?),
        None => None,
    };
    Ok(infer(&collect(inputs)?, re.as_ref()))
}

/// Read and compare the rank files under `inputs`.
pub fn ranks(inputs: &[PathBuf], opts: &RanksOptions) -> Result<Ranks, RanksError> {
    ranks_with_progress(inputs, opts, None)
}

/// [`ranks`], calling `progress(files read, files)` as files are read.
pub fn ranks_with_progress(
    inputs: &[PathBuf],
    opts: &RanksOptions,
    progress: Option<&(dyn Fn(usize, usize) + Sync)>,
) -> Result<Ranks, RanksError> {
    let files = rank_files(inputs, opts.rank_from.as_deref())?;
    let n = files.len();
    let cb = progress.map(|p| move |k: usize| p(k, n));
    let results = scan(
        &files,
        opts.jobs,
        cb.as_ref().map(|c| c as &(dyn Fn(usize) + Sync)),
    );
    let mut r = compare(results);
    if let Some(limit) = opts.max_peak {
        r.gates.push(Gate {
            name: "max_peak",
            limit: limit as f64,
            value: r.max_peak as f64,
            passed: r.max_peak <= limit,
        });
    }
    if let Some(limit) = opts.max_imbalance {
        r.gates.push(Gate {
            name: "max_imbalance",
            limit,
            value: r.imbalance,
            passed: r.imbalance <= limit,
        });
    }
    r.passed = r.gates.iter().all(|g| g.passed);
    Ok(r)
}
