//! The report's "Simulate" tab: the recorded trace replayed through the
//! allocator model under the recorded settings and the sweep
//! ([`vramscope_simulate::SWEEP`]), made by [`vramscope_advise::page_model`]
//! when the page is written, so the page needs no server. Each run keeps a reserved curve of [`CURVE_POINTS`] points (the
//! largest value of each stretch of entries) to draw over the recorded one.

use serde_json::{json, Value};
use vramscope_advise::page_model;
use vramscope_analysis::categories::Labelled;
use vramscope_simulate::Simulation;
use vramscope_snapshot::Snapshot;

/// Points per simulated curve: enough for a panel-wide plot.
pub const CURVE_POINTS: usize = 400;

/// The Simulate tab's and the What to do panel's data for `device`, each
/// `None` where [`vramscope_advise::page_model`] has none.
pub fn simulation_and_advice(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
) -> (Option<Value>, Option<Value>) {
    let m = page_model(snap, device, labelled, CURVE_POINTS);
    let tab = m.simulation.and_then(|(sim, note)| {
        let mut tab = simulation(&sim);
        if let (Some(Value::Object(t)), Some(note)) = (tab.as_mut(), note) {
            t.insert("sweep_note".into(), Value::String(note));
        }
        tab
    });
    (tab, m.advice.and_then(|a| serde_json::to_value(a).ok()))
}

/// The Simulate tab's data.
fn simulation(sim: &Simulation) -> Option<Value> {
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
