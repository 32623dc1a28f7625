//! The `Snapshot` class: a loaded snapshot and the analyses of it, each
//! through the library's options struct, with the GIL released.

use std::path::PathBuf;

use pyo3::prelude::*;
use vramscope_analysis::leaks::{find_leaks, LeakOptions};
use vramscope_analysis::limits::{check, Limits};
use vramscope_analysis::{summarize, SummaryOptions};
use vramscope_report::html::{report_html, ReportOptions};
use vramscope_snapshot::{LoadOptions, Snapshot as Snap};

use crate::errors::{to_py, value_err};

/// A loaded snapshot.
#[pyclass(module = "vramscope._native", frozen)]
pub(crate) struct Snapshot {
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
            Some(_) => vec![self.pick_device(device)?],
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
            Some(_) => vec![self.pick_device(device)?],
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
        let device = self.pick_device(device)?;
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
        let device = self.pick_device(device)?;
        let opts = leak_options(min_growth, source_roots, read_sources);
        let name = self.display_name();
        Ok(py.detach(|| {
            vramscope_report::leaks_text(&find_leaks(&self.inner, device, &opts), &name, verbose)
        }))
    }

    /// Memory limits (`vramscope check`) as JSON text; limits in bytes.
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
        let device = self.pick_device(device)?;
        let limits = Limits {
            max_peak,
            max_reserved,
            no_leaks,
            max_growth_per_iteration: max_growth,
        };
        let opts = leak_options(None, source_roots, true);
        Ok(py.detach(|| {
            let r = check(&self.inner, device, &limits, &opts);
            serde_json::to_string_pretty(&r).unwrap_or_default()
        }))
    }

    /// What this process held outside PyTorch's allocator on `device` when
    /// the file was written, where NVML measured it
    /// ([`vramscope_analysis::ledger::measured_outside`]).
    #[pyo3(signature = (device=None))]
    fn measured_outside(&self, device: Option<u32>) -> PyResult<Option<u64>> {
        let d = self.pick_device(device)?;
        Ok(vramscope_analysis::ledger::measured_outside(&self.inner, d))
    }

    /// An estimate's verdict for a GPU of `total` bytes as JSON text: its
    /// trace replayed without a limit, the peak reserved held against
    /// `total − outside` ([`vramscope_simulate::fit`]).
    #[pyo3(signature = (total, outside=None, settings=None, device=None, outside_how=None))]
    fn fit(
        &self,
        py: Python<'_>,
        total: u64,
        outside: Option<u64>,
        settings: Option<String>,
        device: Option<u32>,
        outside_how: Option<String>,
    ) -> PyResult<String> {
        let opts = vramscope_simulate::FitOptions {
            device,
            total,
            outside,
            outside_how,
            settings,
        };
        let f = py
            .detach(|| vramscope_simulate::fit(&self.inner, &opts))
            .map_err(value_err)?;
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
        let device = self.pick_device(device)?;
        let opts = vramscope_simulate::SimulateOptions {
            device: Some(device),
            set,
            sweep,
            capacity,
            fraction,
            drop,
            free_early,
            scale,
            curve_points: 0,
            sweep_first: None,
        };
        let name = self.display_name();
        let sim = py
            .detach(|| vramscope_simulate::simulate(&self.inner, &opts))
            .map_err(value_err)?;
        Ok(text_or_json(&sim, text, |s| {
            vramscope_report::simulate_text(s, &name)
        }))
    }

    /// `vramscope advise` as JSON text (or terminal text): the changes that
    /// make the run fit or peak lower, ranked by the replayed peak.
    #[pyo3(signature = (device=None, capacity=None, gpu=None, text=false, fraction=None, ranks=None))]
    #[allow(clippy::too_many_arguments)]
    fn advise(
        &self,
        py: Python<'_>,
        device: Option<u32>,
        capacity: Option<u64>,
        gpu: Option<String>,
        text: bool,
        fraction: Option<f64>,
        ranks: Option<u32>,
    ) -> PyResult<String> {
        let device = self.pick_device(device)?;
        let opts = vramscope_advise::AdviseOptions {
            device: Some(device),
            capacity,
            gpu,
            fraction,
            ranks,
        };
        let name = self.display_name();
        let advising = py
            .detach(|| vramscope_advise::advise(&self.inner, &opts))
            .map_err(value_err)?;
        Ok(text_or_json(&advising, text, |a| {
            vramscope_report::advise_text(a, &name)
        }))
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
            .map_err(value_err)?;
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
    fn pick_device(&self, device: Option<u32>) -> PyResult<u32> {
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

/// Read a snapshot file (pickle protocol 0-5, JSON, gzip/zstd, torch.save).
#[pyfunction]
#[pyo3(signature = (path, threads=None))]
pub(crate) fn load(py: Python<'_>, path: PathBuf, threads: Option<usize>) -> PyResult<Snapshot> {
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
pub(crate) fn loads(py: Python<'_>, data: Vec<u8>) -> PyResult<Snapshot> {
    let inner = py
        .detach(|| vramscope_snapshot::decode_bytes(&data, &LoadOptions::default()))
        .map_err(to_py)?;
    Ok(Snapshot {
        inner,
        path: "<bytes>".into(),
    })
}

/// An answer as the terminal text `render` makes, or as pretty JSON.
fn text_or_json<T: serde::Serialize>(
    value: &T,
    text: bool,
    render: impl FnOnce(&T) -> String,
) -> String {
    if text {
        render(value)
    } else {
        serde_json::to_string_pretty(value).unwrap_or_default()
    }
}
