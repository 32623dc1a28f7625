//! The CPU allocator hooks (`vramscope_cpuhook`) behind
//! `record(backend="allocator")`.

use pyo3::prelude::*;

/// Hook libc10's CPU allocator (once); the number of GOT slots patched.
#[pyfunction]
pub(crate) fn cpuhook_install() -> PyResult<usize> {
    vramscope_cpuhook::install().map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))
}

/// Begin recording the CPU allocator's events (the last `max_events`).
#[pyfunction]
pub(crate) fn cpuhook_start(max_events: usize) {
    vramscope_cpuhook::start(max_events)
}

#[pyfunction]
pub(crate) fn cpuhook_stop() {
    vramscope_cpuhook::stop()
}

#[pyfunction]
pub(crate) fn cpuhook_mark() -> u64 {
    vramscope_cpuhook::mark()
}

#[pyfunction]
pub(crate) fn cpuhook_stamp(since: u64, stack: u32) -> usize {
    vramscope_cpuhook::stamp(since, stack)
}

#[pyfunction]
pub(crate) fn cpuhook_adopt(addr: u64, size: u64) {
    vramscope_cpuhook::adopt(addr, size)
}

/// `(kind, addr, size, time_us, stack)` per event, kind 0 alloc, 1 free.
#[pyfunction]
pub(crate) fn cpuhook_events(py: Python<'_>) -> Vec<(u8, u64, u64, i64, u32)> {
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
pub(crate) fn cpuhook_live() -> Vec<(u64, u64, u32)> {
    vramscope_cpuhook::live()
}

/// `(allocated, peak, window peak)` bytes; `reset_window` starts a new window.
#[pyfunction]
#[pyo3(signature = (reset_window=false))]
pub(crate) fn cpuhook_totals(reset_window: bool) -> (u64, u64, u64) {
    let t = vramscope_cpuhook::totals(reset_window);
    (t.allocated, t.peak, t.window_peak)
}
