//! `vramscope._native`: the Rust core inside Python. It only translates
//! arguments, results and errors; the Python package (`python/vramscope`)
//! wraps it in a friendly API.
//!
//! Parsing and analysis release the GIL, so other Python threads (a
//! training loop) keep running while a snapshot is read.
//!
//! One module per crate it wraps: `snapshot` (the `Snapshot` class and
//! loading), `cycles`, `cpu_allocator`, `ranks`; `errors` holds the one mapping
//! from Rust errors to Python exceptions.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

mod cpu_allocator;
mod cycles;
mod errors;
mod pickle_out;
mod ranks;
mod snapshot;

use cpu_allocator::*;
use cycles::*;
use errors::SnapshotError;
use snapshot::{load, loads, Snapshot};

/// Bytes as vramscope writes them everywhere ("1.50 GiB").
#[pyfunction]
fn format_bytes(n: u64) -> String {
    vramscope_text::units::bytes(n)
}

/// Bytes from a size for people: `12GiB`, `1.5GB`, `1MiB/iter`.
#[pyfunction]
fn parse_bytes(s: &str) -> PyResult<u64> {
    vramscope_text::units::parse_bytes(s).map_err(PyValueError::new_err)
}

/// A GPU by the name `torch.cuda.get_device_name()` gives (or a short
/// name): `{"name", "total", "total_from", "source", "sms", "capability"}`
/// from the one table of GPUs (`vramscope_gpus`); `total` is `None` for a
/// family name ("A100"). An unknown name is a `ValueError` listing the
/// known ones.
#[pyfunction]
fn gpu<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let g = vramscope_gpus::find(name).map_err(errors::value_err)?;
    let d = pyo3::types::PyDict::new(py);
    d.set_item("name", g.name)?;
    d.set_item("total", g.total)?;
    d.set_item("total_from", g.total_from())?;
    d.set_item("source", g.source.as_str())?;
    d.set_item("no_memory", g.memory().err().map(|e| e.to_string()))?;
    d.set_item("sms", g.sms)?;
    d.set_item("capability", (g.capability.0, g.capability.1))?;
    Ok(d)
}

/// The CUDA caching allocator's sizes (`vramscope_gpus::allocator`), for
/// the Python estimate and recorders: `{"min_block", "small_size",
/// "small_buffer", "large_buffer", "min_large_alloc", "round_large"}`.
#[pyfunction]
fn allocator_facts(py: Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyDict>> {
    use vramscope_gpus::allocator as a;
    let d = pyo3::types::PyDict::new(py);
    d.set_item("min_block", a::MIN_BLOCK)?;
    d.set_item("small_size", a::SMALL_SIZE)?;
    d.set_item("small_buffer", a::SMALL_BUFFER)?;
    d.set_item("large_buffer", a::LARGE_BUFFER)?;
    d.set_item("min_large_alloc", a::MIN_LARGE_ALLOC)?;
    d.set_item("round_large", a::ROUND_LARGE)?;
    Ok(d)
}

/// `(cuBLAS, cuBLASLt)` workspace bytes for a compute capability and the
/// values of `CUBLAS_WORKSPACE_CONFIG` and `CUBLASLT_WORKSPACE_SIZE` (or
/// `None`), as `CublasHandlePool.cpp` sizes them (`vramscope_gpus::workspace`).
#[pyfunction]
#[pyo3(signature = (capability, cublas_config=None, lt_config=None))]
fn workspace_sizes(
    capability: (u32, u32),
    cublas_config: Option<&str>,
    lt_config: Option<&str>,
) -> (u64, u64) {
    use vramscope_gpus::workspace as w;
    let cublas = w::cublas_sizes(Some(capability), cublas_config);
    (cublas[0], w::cublaslt_size(lt_config))
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

/// The command line with what it prints kept: (exit code, stdout, the
/// error/warning/note lines), for a server whose stdout is its protocol
/// (`vramscope mcp`).
#[pyfunction]
fn cli_captured(py: Python<'_>, args: Vec<String>) -> (u8, String, String) {
    let argv: Vec<String> = std::iter::once("vramscope".to_owned())
        .chain(args)
        .collect();
    let c = py.detach(|| vramscope_cli::run_captured(argv));
    (c.code, c.stdout, c.stderr)
}

/// Keep each file the commands read, for the next command about it, until
/// it changes on disk (`vramscope mcp`), or stop keeping them.
#[pyfunction]
fn cli_keep_loaded(on: bool) {
    vramscope_cli::keep_loaded(on);
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for f in [
        wrap_pyfunction!(cpu_allocator_install, m)?,
        wrap_pyfunction!(cpu_allocator_totals, m)?,
        wrap_pyfunction!(cpu_allocator_start, m)?,
        wrap_pyfunction!(cpu_allocator_stop, m)?,
        wrap_pyfunction!(cpu_allocator_recording, m)?,
        wrap_pyfunction!(cpu_allocator_mark, m)?,
        wrap_pyfunction!(cpu_allocator_stamp, m)?,
        wrap_pyfunction!(cpu_allocator_adopt, m)?,
        wrap_pyfunction!(cpu_allocator_set_limit, m)?,
        wrap_pyfunction!(cpu_allocator_live, m)?,
        wrap_pyfunction!(pickle_out::write_pickle, m)?,
    ] {
        m.add_function(f)?;
    }
    m.add_class::<Snapshot>()?;
    m.add_class::<pickle_out::CpuTrace>()?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(ranks::ranks, m)?)?;
    m.add_function(wrap_pyfunction!(ranks::rank_files, m)?)?;
    m.add_function(wrap_pyfunction!(loads, m)?)?;
    m.add_function(wrap_pyfunction!(cli, m)?)?;
    m.add_function(wrap_pyfunction!(cli_captured, m)?)?;
    m.add_function(wrap_pyfunction!(cli_keep_loaded, m)?)?;
    m.add_function(wrap_pyfunction!(parse_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(format_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(gpu, m)?)?;
    m.add_function(wrap_pyfunction!(allocator_facts, m)?)?;
    m.add_function(wrap_pyfunction!(workspace_sizes, m)?)?;
    m.add_function(wrap_pyfunction!(cycles_analyze, m)?)?;
    m.add_function(wrap_pyfunction!(cycles_merge, m)?)?;
    m.add_function(wrap_pyfunction!(cycles_html, m)?)?;
    m.add_function(wrap_pyfunction!(cycles_dot, m)?)?;
    m.add_function(wrap_pyfunction!(cycles_text, m)?)?;
    m.add("SnapshotError", m.py().get_type::<SnapshotError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
