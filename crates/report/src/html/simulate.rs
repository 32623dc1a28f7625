//! The report's "Simulate" tab: the recorded trace replayed through the
//! allocator model under the recorded settings and the sweep
//! ([`vramscope_simulate::SWEEP`]), computed here so the page needs no
//! server. Each run keeps a reserved curve of [`CURVE_POINTS`] points (the
//! largest value of each stretch of entries) to draw over the recorded one.

use serde_json::{json, Value};
use vramscope_analysis::categories::Labelled;
use vramscope_simulate::advise::{advise_with, sweep_options};
use vramscope_simulate::{simulate, AdviseOptions, SimulateOptions, Simulation};
use vramscope_snapshot::{Action, Snapshot};

/// Points per simulated curve: enough for a panel-wide plot.
pub const CURVE_POINTS: usize = 400;

/// Traces from this many entries on get no "What to do" panel data: the
/// advice replays each change from an empty cache (a dozen replays more),
/// which on a 10M-entry file would double the report's time; the panel
/// then says to run `vramscope advise`.
/// (The same length from which the page replays a shorter sweep.)
pub const ADVISE_MAX_ENTRIES: usize = vramscope_simulate::PAGE_SWEEP_FULL_BELOW;

/// Whether the model applies: a CUDA caching-allocator trace
/// ([`vramscope_simulate::modelled`]) with requests in it.
fn applies(snap: &Snapshot, device: u32) -> bool {
    vramscope_simulate::modelled(snap).is_ok()
        && snap
            .trace(device)
            .is_some_and(|t| t.action.contains(&Action::Alloc))
}

/// The Simulate tab's and the What to do panel's data for `device`, each
/// `None` when the model does not apply: one simulation serves both.
pub fn simulation_and_advice(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
) -> (Option<Value>, Option<Value>) {
    if !applies(snap, device) {
        // Without a caching allocator there is nothing to simulate, but the
        // program changes are still counted.
        let counted = vramscope_simulate::advise::counted_applies(snap, device)
            && snap.trace(device).map_or(0, |t| t.len()) < ADVISE_MAX_ENTRIES;
        return match counted {
            true => (
                None,
                serde_json::to_value(vramscope_simulate::advise::advise_counted(
                    snap,
                    device,
                    None,
                    vramscope_simulate::advise::DEFAULT_RANKS,
                    labelled,
                ))
                .ok(),
            ),
            false => (None, None),
        };
    }
    let entries = snap.trace(device).map_or(0, |t| t.len());
    let (sweep_first, sweep_note) = vramscope_simulate::page_sweep(entries);
    let opts = SimulateOptions {
        curve_points: CURVE_POINTS,
        sweep_first,
        ..sweep_options(&AdviseOptions {
            device: Some(device),
            ..Default::default()
        })
    };
    let Ok(sim) = simulate(snap, &opts) else {
        return (None, None);
    };
    let mut tab = simulation(&sim);
    if let (Some(Value::Object(t)), Some(note)) = (tab.as_mut(), sweep_note) {
        t.insert("sweep_note".into(), Value::String(note));
    }
    (tab, advice(snap, device, &sim, labelled))
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

/// The What to do panel's data for `device` ([`vramscope_simulate::advise`]).
fn advice(snap: &Snapshot, device: u32, sim: &Simulation, labelled: &Labelled) -> Option<Value> {
    let entries = snap.trace(device).map_or(0, |t| t.len());
    if entries >= ADVISE_MAX_ENTRIES {
        return Some(json!({
            "skipped": format!(
                "{entries} trace entries: the advice replays each change on its own, too long to make with the page; \
                 `vramscope advise FILE` gives it"
            ),
        }));
    }
    serde_json::to_value(advise_with(
        snap,
        sim,
        labelled,
        vramscope_simulate::advise::DEFAULT_RANKS,
    ))
    .ok()
}
