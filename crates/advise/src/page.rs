//! What the report's page shows of the allocator model for one device: the
//! Simulate tab (the trace replayed under the recorded settings and the
//! sweep) and the What to do panel (the advice), chosen here so that the
//! report only draws them. One simulation serves both.
//!
//! The choices: the model applies to a CUDA caching-allocator trace with
//! requests in it ([`vramscope_simulate::modelled`]); without a caching
//! allocator there is nothing to simulate, but the program changes are
//! still counted ([`crate::advise_counted`]); from
//! [`PAGE_ADVICE_MAX_ENTRIES`] entries on the advice is left to
//! `vramscope advise` and the page says so.

use serde::Serialize;
use vramscope_analysis::categories::Labelled;
use vramscope_simulate::{simulate, SimulateOptions, Simulation};
use vramscope_snapshot::{Action, Snapshot};

use crate::{advise_counted, advise_with, counted_applies, sweep_options};
use crate::{AdviseOptions, Advising, DEFAULT_RANKS};

/// Traces from this many entries on get no advice on the page: the advice
/// replays each change from an empty cache (a dozen replays more), which
/// on a 10M-entry file would double the report's time. (The same length
/// from which the page replays a shorter sweep.)
pub const PAGE_ADVICE_MAX_ENTRIES: usize = vramscope_simulate::PAGE_SWEEP_FULL_BELOW;

/// The What to do panel's content.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum PageAdvice {
    Advising(Box<Advising>),
    /// Too long a trace to advise on while making the page: the sentence
    /// that says so and what gives the advice.
    Skipped {
        skipped: String,
    },
}

/// The page's model data for one device.
#[derive(Debug, Default)]
pub struct PageModel {
    /// The replay under the recorded settings and the sweep (`None`: the
    /// model does not apply), and the sentence about the settings a long
    /// trace's sweep left out.
    pub simulation: Option<(Simulation, Option<String>)>,
    pub advice: Option<PageAdvice>,
}

/// Whether the allocator model applies to `device`: a CUDA
/// caching-allocator trace with requests in it.
fn modelled_here(snap: &Snapshot, device: u32) -> bool {
    vramscope_simulate::modelled(snap).is_ok()
        && snap
            .trace(device)
            .is_some_and(|t| t.action.contains(&Action::Alloc))
}

/// The Simulate tab's and the What to do panel's data for `device`, the
/// replays keeping reserved curves of `curve_points` points.
pub fn page_model(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    curve_points: usize,
) -> PageModel {
    let entries = snap.trace(device).map_or(0, |t| t.len());
    if !modelled_here(snap, device) {
        let counted = counted_applies(snap, device) && entries < PAGE_ADVICE_MAX_ENTRIES;
        return PageModel {
            simulation: None,
            advice: counted.then(|| {
                // The capacity `vramscope advise` reads too: a CPU run under
                // a limit that ran out says how much it had.
                let capacity = vramscope_simulate::simulate::oom_capacity(snap, device);
                let a = advise_counted(snap, device, capacity, DEFAULT_RANKS, labelled);
                PageAdvice::Advising(Box::new(a))
            }),
        };
    }
    let (sweep_first, sweep_note) = vramscope_simulate::page_sweep(entries);
    let opts = SimulateOptions {
        curve_points,
        sweep_first,
        ..sweep_options(&AdviseOptions {
            device: Some(device),
            ..Default::default()
        })
    };
    let Ok(sim) = simulate(snap, &opts) else {
        return PageModel::default();
    };
    let advice = match entries >= PAGE_ADVICE_MAX_ENTRIES {
        true => PageAdvice::Skipped {
            skipped: format!(
                "{entries} trace entries: the advice replays each change on its own, too long to make with the page; \
                 `vramscope advise FILE` gives it"
            ),
        },
        false => PageAdvice::Advising(Box::new(advise_with(snap, &sim, labelled, DEFAULT_RANKS))),
    };
    PageModel {
        simulation: Some((sim, sweep_note)),
        advice: Some(advice),
    }
}
