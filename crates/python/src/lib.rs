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
                },
            );
            vramscope_report::summary_text(&s, &name)
        })
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

/// Run the vramscope command line (`args` without the program name) and
/// return its exit code; the same implementation as the `vramscope` binary.
#[pyfunction]
fn cli(py: Python<'_>, args: Vec<String>) -> u8 {
    let argv: Vec<String> = std::iter::once("vramscope".to_owned())
        .chain(args)
        .collect();
    py.detach(|| vramscope_cli::run(argv))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Snapshot>()?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(loads, m)?)?;
    m.add_function(wrap_pyfunction!(cli, m)?)?;
    m.add("SnapshotError", m.py().get_type::<SnapshotError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
