//! The one mapping from Rust errors to Python exceptions.

use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use vramscope_snapshot::SnapshotError as SnapErr;

create_exception!(
    _native,
    SnapshotError,
    PyValueError,
    "The file is not a valid memory snapshot (the message says what was expected, what was found and where)."
);

/// A snapshot error: a file that cannot be read is an `OSError` (with
/// errno and the path), anything else a `SnapshotError` (a `ValueError`).
pub(crate) fn to_py(e: SnapErr) -> PyErr {
    match e {
        SnapErr::Io { path, source } => PyOSError::new_err((
            source.raw_os_error().unwrap_or(0),
            format!("cannot read {}: {source}", path.display()),
            path.display().to_string(),
        )),
        other => SnapshotError::new_err(other.to_string()),
    }
}

/// A ranks error: reading is an `OSError`, the rest a `ValueError`.
pub(crate) fn ranks_to_py(e: vramscope_ranks::RanksError) -> PyErr {
    match e {
        vramscope_ranks::RanksError::Io { .. } => PyOSError::new_err(e.to_string()),
        other => PyValueError::new_err(other.to_string()),
    }
}

/// Anything else that is wrong with what Python passed: a `ValueError`.
pub(crate) fn value_err(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}
