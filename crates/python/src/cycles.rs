//! Reference cycles (`vramscope_cycles`): reports travel as JSON text.

use pyo3::prelude::*;

use crate::errors::value_err;

/// Reference cycles holding tensors: analyse the garbage graph of one
/// collection (JSON, see the `vramscope_cycles` crate) into a report (JSON).
#[pyfunction]
pub(crate) fn cycles_analyze(py: Python<'_>, graph_json: &str) -> PyResult<String> {
    py.detach(|| vramscope_cycles::analyze_json(graph_json).map(|r| r.to_json()))
        .map_err(value_err)
}

fn cycle_report(json: &str) -> PyResult<vramscope_cycles::CycleReport> {
    vramscope_cycles::CycleReport::from_json(json).map_err(value_err)
}

/// Two cycle reports added together (`a_json` may be empty: nothing yet).
#[pyfunction]
pub(crate) fn cycles_merge(py: Python<'_>, a_json: &str, b_json: &str) -> PyResult<String> {
    py.detach(|| {
        let mut a = cycle_report(a_json)?;
        vramscope_cycles::merge(&mut a, cycle_report(b_json)?);
        Ok(a.to_json())
    })
}

/// A cycle report as a self-contained HTML page.
#[pyfunction]
pub(crate) fn cycles_html(py: Python<'_>, report_json: &str, title: &str) -> PyResult<String> {
    py.detach(|| {
        Ok(vramscope_cycles::report_html(
            &cycle_report(report_json)?,
            title,
        ))
    })
}

/// Graphviz DOT of finding `index` of a cycle report.
#[pyfunction]
pub(crate) fn cycles_dot(py: Python<'_>, report_json: &str, index: usize) -> PyResult<String> {
    py.detach(|| {
        let r = cycle_report(report_json)?;
        let f = r.finding(index).map_err(value_err)?;
        Ok(vramscope_cycles::finding_dot(f))
    })
}

/// A cycle report as terminal text.
#[pyfunction]
pub(crate) fn cycles_text(py: Python<'_>, report_json: &str) -> PyResult<String> {
    py.detach(|| Ok(vramscope_cycles::report_text(&cycle_report(report_json)?)))
}
