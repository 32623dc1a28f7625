//! Renderings of vramscope analyses: terminal text, JSON, the interactive
//! HTML report, flamegraph SVG and the terminal segment map.
//!
//! ```no_run
//! let snap = vramscope_snapshot::load("snap.pickle".as_ref(), &Default::default())?;
//! let summary = vramscope_analysis::summarize(&snap, &Default::default());
//! print!("{}", vramscope_report::summary_text(&summary, "snap.pickle"));
//! # Ok::<(), vramscope_snapshot::SnapshotError>(())
//! ```

mod advise_text;
mod categories_text;
pub mod diff;
mod flame_svg;
pub mod flamegraph;
pub mod html;
mod leaks_text;
mod ranks_text;
mod segments_text;
mod simulate_text;
mod text;

pub use advise_text::advise_text;
pub use categories_text::{categories_json, categories_text};
pub use leaks_text::{leaks_json, leaks_text};
pub use ranks_text::ranks_text;
pub use segments_text::{segments_json, segments_text, MapOptions};
pub use simulate_text::simulate_text;
pub use text::summary_text;

/// The `--json` form of a summary (pretty-printed, stable field names).
pub fn summary_json(s: &vramscope_analysis::Summary) -> String {
    serde_json::to_string_pretty(s).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
