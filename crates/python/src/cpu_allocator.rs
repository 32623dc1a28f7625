//! The CPU allocator hooks (`vramscope_cpu_allocator`) behind
//! `record(backend="allocator")`.

use pyo3::prelude::*;

/// Hook libc10's CPU allocator (once); the number of GOT slots patched.
#[pyfunction]
pub(crate) fn cpu_allocator_install() -> PyResult<usize> {
    vramscope_cpu_allocator::install()
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))
}

/// Begin recording the CPU allocator's events (the last `max_events`).
#[pyfunction]
pub(crate) fn cpu_allocator_start(max_events: usize) {
    vramscope_cpu_allocator::start(max_events)
}

/// Whether a recording is under way (`record(backend="allocator")`, or a
/// measurement of the estimate's).
#[pyfunction]
pub(crate) fn cpu_allocator_recording() -> bool {
    vramscope_cpu_allocator::recording()
}

#[pyfunction]
pub(crate) fn cpu_allocator_stop() {
    vramscope_cpu_allocator::stop()
}

#[pyfunction]
pub(crate) fn cpu_allocator_mark() -> u64 {
    vramscope_cpu_allocator::mark()
}

#[pyfunction]
pub(crate) fn cpu_allocator_stamp(since: u64, stack: u32) -> usize {
    vramscope_cpu_allocator::stamp(since, stack)
}

#[pyfunction]
pub(crate) fn cpu_allocator_adopt(addr: u64, size: u64) {
    vramscope_cpu_allocator::adopt(addr, size)
}

/// Refuse allocations past `limit` bytes alive (0: no limit), as a device
/// of that size would (`record(cpu_limit=...)`).
#[pyfunction]
pub(crate) fn cpu_allocator_set_limit(limit: u64) {
    vramscope_cpu_allocator::set_limit(limit)
}

/// `(addr, size, stack)` of the blocks alive, by address.
#[pyfunction]
pub(crate) fn cpu_allocator_live() -> Vec<(u64, u64, u32)> {
    vramscope_cpu_allocator::live()
}

/// `(allocated, peak, window peak)` bytes; `reset_window` starts a new window.
#[pyfunction]
#[pyo3(signature = (reset_window=false))]
pub(crate) fn cpu_allocator_totals(reset_window: bool) -> (u64, u64, u64) {
    let t = vramscope_cpu_allocator::totals(reset_window);
    (t.allocated, t.peak, t.window_peak)
}
