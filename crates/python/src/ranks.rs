//! Many rank files of one job (`vramscope_ranks`).

use std::path::PathBuf;

use pyo3::prelude::*;

use crate::errors::ranks_to_py;

/// A rank file for Python: (path, rank, step, dumped at exit).
type RankFileRow = (String, u32, Option<u64>, bool);

/// The snapshot files under `paths` with rank, step and exit, in the order
/// (and so with the file ids) `vramscope export` uses.
#[pyfunction]
#[pyo3(signature = (paths, rank_from=None))]
pub(crate) fn rank_files(
    paths: Vec<PathBuf>,
    rank_from: Option<String>,
) -> PyResult<Vec<RankFileRow>> {
    let files = vramscope_ranks::rank_files(&paths, rank_from.as_deref()).map_err(ranks_to_py)?;
    Ok(files
        .into_iter()
        .map(|f| (f.path.display().to_string(), f.rank, f.step, f.exit))
        .collect())
}

/// `vramscope ranks` as JSON text.
#[pyfunction]
#[pyo3(signature = (paths, rank_from=None, jobs=0, max_peak=None, max_imbalance=None, text=false))]
pub(crate) fn ranks(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    rank_from: Option<String>,
    jobs: usize,
    max_peak: Option<u64>,
    max_imbalance: Option<f64>,
    text: bool,
) -> PyResult<String> {
    let opts = vramscope_ranks::RanksOptions {
        rank_from,
        jobs,
        max_peak,
        max_imbalance,
    };
    let r = py
        .detach(|| vramscope_ranks::ranks(&paths, &opts))
        .map_err(ranks_to_py)?;
    Ok(if text {
        vramscope_report::ranks_text(&r)
    } else {
        serde_json::to_string_pretty(&r).unwrap_or_default()
    })
}
