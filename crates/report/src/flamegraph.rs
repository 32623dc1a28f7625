//! The memory flamegraph: a [`FlameNode`] tree (the blocks alive at a
//! moment, by call stack) drawn by the one renderer, coloured by what kind
//! of code each frame is.
//!
//! ```no_run
//! use vramscope_analysis::flame::flame_tree;
//! use vramscope_analysis::Liveness;
//! use vramscope_report::flamegraph::{flamegraph_svg, FlameOptions};
//! let snap = vramscope_snapshot::load("snap.pickle".as_ref(), &Default::default())?;
//! let liveness = Liveness::new(&snap, 0);
//! let trace = snap.trace(0).expect("device 0 has a trace");
//! let live = liveness.live_after(trace, liveness.peak_index);
//! let svg = flamegraph_svg(&flame_tree(&snap, &live), &FlameOptions::default());
//! # Ok::<(), vramscope_snapshot::SnapshotError>(())
//! ```

use vramscope_analysis::flame::{FlameNode, FrameKind};

use crate::flame_svg::{draw, fnv, Chart};
use vramscope_text::units::{bytes, count};

/// How the SVG is drawn.
#[derive(Clone, Debug)]
pub struct FlameOptions {
    /// Image width in pixels.
    pub width: u32,
    /// Headline; default `Memory flamegraph`.
    pub title: Option<String>,
    /// Second line (file, device, moment); default: the total alive.
    pub subtitle: Option<String>,
    /// Icicle graph: root at the top, callees below.
    pub inverted: bool,
    /// Frames narrower than this are not drawn; their bytes stay in their
    /// parent's width, which then shows as the parent's remainder.
    pub min_width_px: f64,
}

impl Default for FlameOptions {
    fn default() -> Self {
        FlameOptions {
            width: 1200,
            title: None,
            subtitle: None,
            inverted: false,
            min_width_px: 0.1,
        }
    }
}

/// Warm for the user's code, cool for libraries, grey for native code;
/// the name varies the shade so neighbours stay distinguishable.
fn colour(kind: FrameKind, name: &str) -> String {
    let h = fnv(name);
    let v = |k: u32| ((h >> (k * 16)) & 0xffff) as f64 / 65535.0;
    let (r, g, b) = match kind {
        FrameKind::User => (205.0 + 50.0 * v(0), 80.0 + 150.0 * v(1), 40.0 * v(2)),
        FrameKind::Library => (60.0 + 60.0 * v(0), 140.0 + 60.0 * v(1), 200.0 + 55.0 * v(2)),
        FrameKind::Native => {
            let g = 175.0 + 45.0 * v(0);
            (g, g, g)
        }
        FrameKind::NoStack => (200.0, 170.0, 225.0),
        FrameKind::Root => (215.0, 215.0, 205.0),
    };
    format!("rgb({},{},{})", r as u8, g as u8, b as u8)
}

/// Draw `tree` as a standalone SVG document (hover a frame for its
/// tooltip: full location, bytes, share and block count).
pub fn flamegraph_svg(tree: &FlameNode, opts: &FlameOptions) -> String {
    let title = opts.title.as_deref().unwrap_or("Memory flamegraph");
    let blocks = |n: u64| if n == 1 { "block" } else { "blocks" };
    let total = format!(
        "{} alive in {} {}",
        bytes(tree.bytes),
        count(tree.count),
        blocks(tree.count)
    );
    let legend: Vec<(String, &str)> = [
        (FrameKind::User, "your code"),
        (FrameKind::Library, "Python libraries"),
        (FrameKind::Native, "native (C++)"),
        (FrameKind::NoStack, "no stack recorded"),
    ]
    .into_iter()
    .map(|(kind, text)| (colour(kind, text), text))
    .collect();
    let chart = Chart {
        width: opts.width,
        min_width_px: opts.min_width_px,
        inverted: opts.inverted,
        class: None,
        title,
        subtitle: opts.subtitle.as_deref().unwrap_or(&total),
        fit_subtitle: false,
        empty: "Nothing is allocated at this moment.",
        legend: &legend,
    };
    let all = tree.bytes.max(1) as f64;
    draw(
        tree,
        &chart,
        |n| colour(n.kind, &n.name),
        |n| {
            let pct = 100.0 * n.bytes as f64 / all;
            format!(
                "{} — {} ({pct:.1}%), {} {}",
                n.label,
                bytes(n.bytes),
                count(n.count),
                blocks(n.count)
            )
        },
    )
}
