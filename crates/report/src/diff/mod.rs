//! `vramscope diff`: renderings of a [`Diff`] between two live sets (two
//! snapshots, or two moments of one) as terminal text, JSON, a differential
//! flamegraph SVG and a self-contained HTML page.
//!
//! ```no_run
//! use vramscope_analysis::flame::diff_tree;
//! use vramscope_analysis::{diff, Liveness};
//! use vramscope_report::diff::{diff_text, diff_svg, DiffReport, DiffSvgOptions, Side};
//! let snap = vramscope_snapshot::load("snap.pickle".as_ref(), &Default::default())?;
//! let liveness = Liveness::new(&snap, 0);
//! let trace = snap.trace(0).expect("device 0 has a trace");
//! let peak = liveness.live_after(trace, liveness.peak_index);
//! let end = liveness.live_after(trace, trace.len().checked_sub(1));
//! let report = DiffReport::new(
//!     Side::new("snap.pickle", 0, "peak", liveness.peak_index),
//!     Side::new("snap.pickle", 0, "end", trace.len().checked_sub(1)),
//!     diff(&snap, &peak, &snap, &end, &Default::default()),
//! );
//! print!("{}", diff_text(&report));
//! let svg = diff_svg(&diff_tree(&snap, &peak, &snap, &end), &DiffSvgOptions::default());
//! # Ok::<(), vramscope_snapshot::SnapshotError>(())
//! ```

mod html;
mod svg;
mod text;

use serde::Serialize;
use vramscope_analysis::{Diff, DiffTotals, SiteDelta};

use vramscope_text::units::bytes;

pub use html::diff_html;
pub use svg::{diff_svg, DiffSvgOptions};
pub use text::diff_text;

/// Version of the `vramscope diff --json` layout (docs/diff.md).
pub const SCHEMA_VERSION: u32 = 1;

/// One side of a comparison: which file, device and moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Side {
    /// The file's name as shown to people.
    pub file: String,
    pub device: u32,
    /// The moment in words: `peak (event 1,402, +138.1 ms)`.
    pub moment: String,
    /// The live set is the state right after this event; `null` is the
    /// start of the trace window.
    pub event_index: Option<usize>,
}

impl Side {
    pub fn new(file: &str, device: u32, moment: &str, event_index: Option<usize>) -> Side {
        Side {
            file: file.to_owned(),
            device,
            moment: moment.to_owned(),
            event_index,
        }
    }

    /// `file · device N · moment`.
    pub fn describe(&self) -> String {
        format!("{} · device {} · {}", self.file, self.device, self.moment)
    }
}

/// The per-site comparison of each side's peak.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeakToPeak {
    pub a: Side,
    pub b: Side,
    pub totals: DiffTotals,
    pub by_site: Vec<SiteDelta>,
}

impl PeakToPeak {
    /// Keep the totals and per-site figures of a diff of the two peaks.
    pub fn new(a: Side, b: Side, d: Diff) -> PeakToPeak {
        PeakToPeak {
            a,
            b,
            totals: d.totals,
            by_site: d.by_site,
        }
    }
}

/// Everything `vramscope diff` shows: the two sides, the diff, and for two
/// files the peak-to-peak comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiffReport {
    pub schema_version: u32,
    pub a: Side,
    pub b: Side,
    #[serde(flatten)]
    pub diff: Diff,
    pub peak_to_peak: Option<PeakToPeak>,
}

impl DiffReport {
    pub fn new(a: Side, b: Side, diff: Diff) -> DiffReport {
        DiffReport {
            schema_version: SCHEMA_VERSION,
            a,
            b,
            diff,
            peak_to_peak: None,
        }
    }
}

/// The `--json` form of a diff (pretty-printed, stable field names).
pub fn diff_json(r: &DiffReport) -> String {
    serde_json::to_string_pretty(r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// `3 × 64.00 MiB, 1 × 2.00 MiB`, with `…` when more sizes were cut.
pub(crate) fn sizes_text(g: &vramscope_analysis::DiffGroup) -> String {
    let mut parts: Vec<String> = g
        .sizes
        .iter()
        .map(|s| {
            format!(
                "{} × {}",
                vramscope_text::units::count(s.count),
                bytes(s.size)
            )
        })
        .collect();
    let listed: u64 = g.sizes.iter().map(|s| s.count).sum();
    if listed < g.count {
        parts.push("…".to_owned());
    }
    parts.join(", ")
}
