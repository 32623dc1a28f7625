//! `vramscope diff`: renderings of a [`vramscope_analysis::Diff`] between two live sets (two
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

use vramscope_text::units::bytes;

pub use html::diff_html;
pub use svg::{diff_svg, DiffSvgOptions};
pub use text::diff_text;

pub use vramscope_analysis::compare::{DiffReport, PeakToPeak, Side, SCHEMA_VERSION};

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
