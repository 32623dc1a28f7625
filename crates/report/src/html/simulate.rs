//! The report's "Simulate" tab: the recorded trace replayed through the
//! allocator model under the recorded settings and the sweep
//! ([`vramscope_simulate::SWEEP`]), computed here so the page needs no
//! server. Each run keeps a reserved curve of [`CURVE_POINTS`] points (the
//! largest value of each stretch of entries) to draw over the recorded one.

use serde_json::{json, Value};
use vramscope_simulate::{simulate, SimulateOptions};
use vramscope_snapshot::{Action, Snapshot};

/// Points per simulated curve: enough for a panel-wide plot.
pub const CURVE_POINTS: usize = 400;

/// Whether the model applies: a CUDA caching-allocator trace
/// ([`vramscope_simulate::modelled`]) with requests in it.
fn applies(snap: &Snapshot, device: u32) -> bool {
    vramscope_simulate::modelled(snap).is_ok()
        && snap
            .trace(device)
            .is_some_and(|t| t.action.contains(&Action::Alloc))
}

/// The tab's data for `device`, or `None` when the model does not apply.
pub fn simulation(snap: &Snapshot, device: u32) -> Option<Value> {
    if !applies(snap, device) {
        return None;
    }
    let opts = SimulateOptions {
        device: Some(device),
        sweep: true,
        curve_points: CURVE_POINTS,
        ..Default::default()
    };
    let sim = simulate(snap, &opts).ok()?;
    let runs: Vec<Value> = sim
        .runs
        .iter()
        .map(|r| {
            let x = &r.replayed;
            json!({
                "label": r.label,
                "peak_reserved": x.simulated_peak_reserved,
                "peak_allocated": x.simulated_peak_allocated,
                "mallocs": x.cuda_mallocs,
                "frees": x.cuda_frees,
                "oom": x.oom,
                "curve": x.curve,
            })
        })
        .collect();
    let rec = &sim.runs.first()?.replayed;
    Some(json!({
        "answer": sim.answer,
        "capacity": sim.capacity,
        "recorded_oom": sim.recorded_oom.as_ref().map(|o| json!({"entry": o.entry, "request": o.request})),
        "agreement": {
            "recorded_segment_events": rec.recorded_segment_events,
            "matched_segment_events": rec.matched_segment_events,
            "max_reserved_error": rec.max_reserved_error,
            "initial_reserved": rec.initial_reserved,
            "recorded_peak_reserved": rec.recorded_peak_reserved,
        },
        "runs": runs,
    }))
}
