//! `vramscope._native`: the Rust core inside Python. It only translates
//! arguments, results and errors; the Python package (`python/vramscope`)
//! wraps it in a friendly API.
//!
//! Parsing and analysis release the GIL, so other Python threads (a
//! training loop) keep running while a snapshot is read.

use std::path::PathBuf;

use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use vramscope_analysis::gates::{check, GateOptions};
use vramscope_analysis::leaks::{find_leaks, LeakOptions};
use vramscope_analysis::{summarize, SummaryOptions};
use vramscope_report::html::{report_html, ReportOptions};
use vramscope_snapshot::{LoadOptions, Snapshot as Snap, SnapshotError as SnapErr};

create_exception!(
    _native,
    SnapshotError,
    PyValueError,
    "The file is not a valid memory snapshot (the message says what was expected, what was found and where)."
);

/// The one mapping from Rust errors to Python exceptions.
fn to_py(e: SnapErr) -> PyErr {
    match e {
        SnapErr::Io { path, source } => PyOSError::new_err((
            source.raw_os_error().unwrap_or(0),
            format!("cannot read {}: {source}", path.display()),
            path.display().to_string(),
        )),
        other => SnapshotError::new_err(other.to_string()),
    }
}

/// A loaded snapshot.
#[pyclass(module = "vramscope._native", frozen)]
struct Snapshot {
    inner: Snap,
    path: String,
}

#[pymethods]
impl Snapshot {
    /// Path the snapshot was read from.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// Devices with segments or events.
    #[getter]
    fn devices(&self) -> Vec<u32> {
        self.inner.devices()
    }

    /// Events on `device` (0 when it has none).
    fn event_count(&self, device: u32) -> usize {
        self.inner.trace(device).map_or(0, |t| t.len())
    }

    /// The summary as JSON text (schema: docs/summary-json.md).
    #[pyo3(signature = (device=None, top=10))]
    fn summary_json(&self, py: Python<'_>, device: Option<u32>, top: usize) -> String {
        py.detach(|| {
            let s = summarize(
                &self.inner,
                &SummaryOptions {
                    device,
                    top_sites: top,
                    ..SummaryOptions::default()
                },
            );
            vramscope_report::summary_json(&s)
        })
    }

    /// The summary as terminal text.
    #[pyo3(signature = (device=None, top=10))]
    fn summary_text(&self, py: Python<'_>, device: Option<u32>, top: usize) -> String {
        let name = std::path::Path::new(&self.path)
            .file_name()
            .map_or_else(|| self.path.clone(), |n| n.to_string_lossy().into_owned());
        py.detach(|| {
            let s = summarize(
                &self.inner,
                &SummaryOptions {
                    device,
                    top_sites: top,
                    ..SummaryOptions::default()
                },
            );
            vramscope_report::summary_text(&s, &name)
        })
    }

    /// What the memory is, per device, as JSON text (docs/categories.md).
    #[pyo3(signature = (device=None))]
    fn categories_json(&self, py: Python<'_>, device: Option<u32>) -> PyResult<String> {
        let devices = match device {
            Some(_) => vec![self.device_or_first(device)?],
            None => self.inner.devices(),
        };
        Ok(py.detach(|| {
            let views: Vec<_> = devices
                .iter()
                .map(|&d| vramscope_analysis::categories::category_view(&self.inner, d))
                .collect();
            vramscope_report::categories_json(&views)
        }))
    }

    /// What the memory is, as terminal text.
    #[pyo3(signature = (device=None))]
    fn categories_text(&self, py: Python<'_>, device: Option<u32>) -> PyResult<String> {
        let devices = match device {
            Some(_) => vec![self.device_or_first(device)?],
            None => self.inner.devices(),
        };
        let name = self.display_name();
        Ok(py.detach(|| {
            let views: Vec<_> = devices
                .iter()
                .map(|&d| vramscope_analysis::categories::category_view(&self.inner, d))
                .collect();
            vramscope_report::categories_text(&views, &name)
        }))
    }

    /// The leak analysis of `device` as JSON text (docs/leaks-json.md).
    #[pyo3(signature = (device=None, min_growth=None, source_roots=Vec::new(), read_sources=true))]
    fn leaks_json(
        &self,
        py: Python<'_>,
        device: Option<u32>,
        min_growth: Option<u64>,
        source_roots: Vec<PathBuf>,
        read_sources: bool,
    ) -> PyResult<String> {
        let device = self.device_or_first(device)?;
        let opts = leak_options(min_growth, source_roots, read_sources);
        Ok(py.detach(|| vramscope_report::leaks_json(&find_leaks(&self.inner, device, &opts))))
    }

    /// The leak analysis as terminal text.
    #[pyo3(signature = (device=None, min_growth=None, source_roots=Vec::new(), read_sources=true, verbose=false))]
    fn leaks_text(
        &self,
        py: Python<'_>,
        device: Option<u32>,
        min_growth: Option<u64>,
        source_roots: Vec<PathBuf>,
        read_sources: bool,
        verbose: bool,
    ) -> PyResult<String> {
        let device = self.device_or_first(device)?;
        let opts = leak_options(min_growth, source_roots, read_sources);
        let name = self.display_name();
        Ok(py.detach(|| {
            vramscope_report::leaks_text(&find_leaks(&self.inner, device, &opts), &name, verbose)
        }))
    }

    /// Memory gates (`vramscope check`) as JSON text; limits in bytes.
    #[pyo3(signature = (device=None, max_peak=None, max_reserved=None, no_leaks=false, max_growth=None, source_roots=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn check_json(
        &self,
        py: Python<'_>,
        device: Option<u32>,
        max_peak: Option<u64>,
        max_reserved: Option<u64>,
        no_leaks: bool,
        max_growth: Option<u64>,
        source_roots: Vec<PathBuf>,
    ) -> PyResult<String> {
        let device = self.device_or_first(device)?;
        let gates = GateOptions {
            max_peak,
            max_reserved,
            no_leaks,
            max_growth_per_iteration: max_growth,
        };
        let opts = leak_options(None, source_roots, true);
        Ok(py.detach(|| {
            let r = check(&self.inner, device, &gates, &opts);
            serde_json::to_string_pretty(&r).unwrap_or_default()
        }))
    }

    /// An estimate's verdict for a GPU of `total` bytes as JSON text: its
    /// trace replayed without a limit, the peak reserved held against
    /// `total − outside` ([`vramscope_allocator::fit`]).
    #[pyo3(signature = (total, outside=None, settings=None, device=None))]
    fn fit(
        &self,
        py: Python<'_>,
        total: u64,
        outside: Option<u64>,
        settings: Option<String>,
        device: Option<u32>,
    ) -> PyResult<String> {
        let opts = vramscope_allocator::FitOptions {
            device,
            total,
            outside,
            settings,
        };
        let f = py
            .detach(|| vramscope_allocator::fit(&self.inner, &opts))
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        Ok(serde_json::to_string_pretty(&f).unwrap_or_default())
    }

    /// `vramscope simulate` as JSON text (or terminal text): the trace
    /// replayed through the allocator model under other settings and
    /// program changes.
    #[pyo3(signature = (device=None, set=Vec::new(), sweep=false, capacity=None, drop=Vec::new(), free_early=Vec::new(), scale=Vec::new(), text=false, fraction=None))]
    #[allow(clippy::too_many_arguments)]
    fn simulate(
        &self,
        py: Python<'_>,
        device: Option<u32>,
        set: Vec<String>,
        sweep: bool,
        capacity: Option<u64>,
        drop: Vec<String>,
        free_early: Vec<String>,
        scale: Vec<String>,
        text: bool,
        fraction: Option<f64>,
    ) -> PyResult<String> {
        let device = self.device_or_first(device)?;
        let opts = vramscope_allocator::SimulateOptions {
            device: Some(device),
            set,
            sweep,
            capacity,
            fraction,
            drop,
            free_early,
            scale,
            curve_points: 0,
        };
        let name = self.display_name();
        let sim = py
            .detach(|| vramscope_allocator::simulate(&self.inner, &opts))
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        Ok(if text {
            vramscope_report::simulate_text(&sim, &name)
        } else {
            serde_json::to_string_pretty(&sim).unwrap_or_default()
        })
    }

    /// One table (`events`, `blocks`, `segments`, `stacks`) as Parquet
    /// bytes, the schema of docs/parquet-schema.md.
    fn parquet<'py>(
        &self,
        py: Python<'py>,
        table: &str,
    ) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let t = vramscope_export::Table::parse(table).ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err(format!(
                "table {table:?}: expected events, blocks, segments or stacks"
            ))
        })?;
        let bytes = py
            .detach(|| vramscope_export::table_bytes(&self.inner, t))
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        Ok(pyo3::types::PyBytes::new(py, &bytes))
    }

    /// The interactive HTML report as a string.
    #[pyo3(signature = (device=None, title=None))]
    fn report_html(&self, py: Python<'_>, device: Option<u32>, title: Option<String>) -> String {
        py.detach(|| {
            report_html(
                &self.inner,
                &ReportOptions {
                    device,
                    title,
                    ..Default::default()
                },
            )
        })
    }
}

impl Snapshot {
    /// `device`, checked, or the first device with segments or events
    /// (the library's rule, shared with the CLI).
    fn device_or_first(&self, device: Option<u32>) -> PyResult<u32> {
        self.inner.pick_device(device).map_err(to_py)
    }

    fn display_name(&self) -> String {
        std::path::Path::new(&self.path)
            .file_name()
            .map_or_else(|| self.path.clone(), |n| n.to_string_lossy().into_owned())
    }
}

fn leak_options(
    min_growth: Option<u64>,
    source_roots: Vec<PathBuf>,
    read_sources: bool,
) -> LeakOptions {
    let d = LeakOptions::default();
    LeakOptions {
        min_growth_per_iteration: min_growth.unwrap_or(d.min_growth_per_iteration),
        read_sources,
        source_roots,
        ..d
    }
}

/// Bytes from a size for people: `12GiB`, `1.5GB`, `1MiB/iter`.
/// Bytes as vramscope writes them everywhere ("1.50 GiB").
#[pyfunction]
fn format_bytes(n: u64) -> String {
    vramscope_analysis::units::bytes(n)
}

#[pyfunction]
fn parse_bytes(s: &str) -> PyResult<u64> {
    vramscope_analysis::units::parse_bytes(s).map_err(PyValueError::new_err)
}

/// Read a snapshot file (pickle protocol 0-5, JSON, gzip/zstd, torch.save).
#[pyfunction]
#[pyo3(signature = (path, threads=None))]
fn load(py: Python<'_>, path: PathBuf, threads: Option<usize>) -> PyResult<Snapshot> {
    let opts = LoadOptions {
        threads,
        ..Default::default()
    };
    let inner = py
        .detach(|| vramscope_snapshot::load(&path, &opts))
        .map_err(to_py)?;
    Ok(Snapshot {
        inner,
        path: path.display().to_string(),
    })
}

/// Read a snapshot held in memory (bytes).
#[pyfunction]
fn loads(py: Python<'_>, data: Vec<u8>) -> PyResult<Snapshot> {
    let inner = py
        .detach(|| vramscope_snapshot::decode_bytes(&data, &LoadOptions::default()))
        .map_err(to_py)?;
    Ok(Snapshot {
        inner,
        path: "<bytes>".into(),
    })
}

/// Reference cycles holding tensors: analyse the garbage graph of one
/// collection (JSON, see the `vramscope_cycles` crate) into a report (JSON).
#[pyfunction]
fn cycles_analyze(py: Python<'_>, graph_json: &str) -> PyResult<String> {
    py.detach(|| vramscope_cycles::analyze_json(graph_json).map(|r| r.to_json()))
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

fn cycle_report(json: &str) -> PyResult<vramscope_cycles::CycleReport> {
    vramscope_cycles::CycleReport::from_json(json).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Two cycle reports added together (`a_json` may be empty: nothing yet).
#[pyfunction]
fn cycles_merge(py: Python<'_>, a_json: &str, b_json: &str) -> PyResult<String> {
    py.detach(|| {
        let mut a = cycle_report(a_json)?;
        vramscope_cycles::merge(&mut a, cycle_report(b_json)?);
        Ok(a.to_json())
    })
}

/// A cycle report as a self-contained HTML page.
#[pyfunction]
fn cycles_html(py: Python<'_>, report_json: &str, title: &str) -> PyResult<String> {
    py.detach(|| {
        Ok(vramscope_cycles::report_html(
            &cycle_report(report_json)?,
            title,
        ))
    })
}

/// Graphviz DOT of finding `index` of a cycle report.
#[pyfunction]
fn cycles_dot(py: Python<'_>, report_json: &str, index: usize) -> PyResult<String> {
    py.detach(|| {
        let r = cycle_report(report_json)?;
        let f = r
            .finding(index)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(vramscope_cycles::finding_dot(f))
    })
}

/// A cycle report as terminal text.
#[pyfunction]
fn cycles_text(py: Python<'_>, report_json: &str) -> PyResult<String> {
    py.detach(|| Ok(vramscope_cycles::report_text(&cycle_report(report_json)?)))
}

/// Run the vramscope command line (`args` without the program name) and
/// return its exit code; the same implementation as the `vramscope` binary.
#[pyfunction]
fn cli(py: Python<'_>, args: Vec<String>) -> u8 {
    let argv: Vec<String> = std::iter::once("vramscope".to_owned())
        .chain(args)
        .collect();
    py.detach(|| vramscope_cli::run(argv))
}

// ----- the CPU allocator hooks (vramscope_cpuhook) -----

/// Hook libc10's CPU allocator (once); the number of GOT slots patched.
#[pyfunction]
fn cpuhook_install() -> PyResult<usize> {
    vramscope_cpuhook::install().map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))
}

/// Begin recording the CPU allocator's events (the last `max_events`).
#[pyfunction]
fn cpuhook_start(max_events: usize) {
    vramscope_cpuhook::start(max_events)
}

#[pyfunction]
fn cpuhook_stop() {
    vramscope_cpuhook::stop()
}

#[pyfunction]
fn cpuhook_mark() -> u64 {
    vramscope_cpuhook::mark()
}

#[pyfunction]
fn cpuhook_stamp(since: u64, stack: u32) -> usize {
    vramscope_cpuhook::stamp(since, stack)
}

#[pyfunction]
fn cpuhook_adopt(addr: u64, size: u64) {
    vramscope_cpuhook::adopt(addr, size)
}

/// `(kind, addr, size, time_us, stack)` per event, kind 0 alloc, 1 free.
#[pyfunction]
fn cpuhook_events(py: Python<'_>) -> Vec<(u8, u64, u64, i64, u32)> {
    let ev = py.detach(vramscope_cpuhook::events);
    ev.into_iter()
        .map(|e| {
            let kind = match e.kind {
                vramscope_cpuhook::EventKind::Alloc => 0,
                vramscope_cpuhook::EventKind::Free => 1,
            };
            (kind, e.addr, e.size, e.time_us, e.stack)
        })
        .collect()
}

/// `(addr, size, stack)` of the blocks alive, by address.
#[pyfunction]
fn cpuhook_live() -> Vec<(u64, u64, u32)> {
    vramscope_cpuhook::live()
}

/// `(allocated, peak, window peak)` bytes; `reset_window` starts a new window.
#[pyfunction]
#[pyo3(signature = (reset_window=false))]
fn cpuhook_totals(reset_window: bool) -> (u64, u64, u64) {
    let t = vramscope_cpuhook::totals(reset_window);
    (t.allocated, t.peak, t.window_peak)
}

/// A rank file for Python: (path, rank, step, dumped at exit).
type RankFileRow = (String, u32, Option<u64>, bool);

/// The snapshot files under `paths` with rank, step and exit, in the order
/// (and so with the file ids) `vramscope export` uses.
#[pyfunction]
#[pyo3(signature = (paths, rank_from=None))]
fn rank_files(paths: Vec<PathBuf>, rank_from: Option<String>) -> PyResult<Vec<RankFileRow>> {
    let files = vramscope_ranks::rank_files(&paths, rank_from.as_deref()).map_err(|e| match e {
        vramscope_ranks::RanksError::Io { .. } => {
            pyo3::exceptions::PyOSError::new_err(e.to_string())
        }
        other => pyo3::exceptions::PyValueError::new_err(other.to_string()),
    })?;
    Ok(files
        .into_iter()
        .map(|f| (f.path.display().to_string(), f.rank, f.step, f.exit))
        .collect())
}

/// `vramscope ranks` as JSON text.
#[pyfunction]
#[pyo3(signature = (paths, rank_from=None, jobs=0, max_peak=None, max_imbalance=None, text=false))]
fn ranks(
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
        .map_err(|e| match e {
            vramscope_ranks::RanksError::Io { .. } => {
                pyo3::exceptions::PyOSError::new_err(e.to_string())
            }
            other => pyo3::exceptions::PyValueError::new_err(other.to_string()),
        })?;
    Ok(if text {
        vramscope_report::ranks_text(&r)
    } else {
        serde_json::to_string_pretty(&r).unwrap_or_default()
    })
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for f in [
        wrap_pyfunction!(cpuhook_install, m)?,
        wrap_pyfunction!(cpuhook_totals, m)?,
        wrap_pyfunction!(cpuhook_start, m)?,
        wrap_pyfunction!(cpuhook_stop, m)?,
        wrap_pyfunction!(cpuhook_mark, m)?,
        wrap_pyfunction!(cpuhook_stamp, m)?,
        wrap_pyfunction!(cpuhook_adopt, m)?,
        wrap_pyfunction!(cpuhook_events, m)?,
        wrap_pyfunction!(cpuhook_live, m)?,
    ] {
        m.add_function(f)?;
    }
    m.add_class::<Snapshot>()?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(ranks, m)?)?;
    m.add_function(wrap_pyfunction!(rank_files, m)?)?;
    m.add_function(wrap_pyfunction!(loads, m)?)?;
    m.add_function(wrap_pyfunction!(cli, m)?)?;
    m.add_function(wrap_pyfunction!(parse_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(format_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(cycles_analyze, m)?)?;
    m.add_function(wrap_pyfunction!(cycles_merge, m)?)?;
    m.add_function(wrap_pyfunction!(cycles_html, m)?)?;
    m.add_function(wrap_pyfunction!(cycles_dot, m)?)?;
    m.add_function(wrap_pyfunction!(cycles_text, m)?)?;
    m.add("SnapshotError", m.py().get_type::<SnapshotError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
