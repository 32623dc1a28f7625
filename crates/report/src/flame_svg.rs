//! The one flamegraph renderer: a tree of frames, each as wide as its
//! bytes, drawn as a static, self-contained SVG (no script, no external
//! font, no network) in the manner of Brendan Gregg's `flamegraph.pl`.
//!
//! It is generic over the node (the memory flamegraph's
//! [`FlameNode`](vramscope_analysis::flame::FlameNode), the differential
//! one's [`DiffNode`](vramscope_analysis::flame::DiffNode)) and over the
//! colour and tooltip of a frame, which the caller gives: layout, labels,
//! the header and the legend are drawn here once (inferno's design).

use std::fmt::Write;

use vramscope_analysis::flame::{DiffNode, FlameNode};
use vramscope_text::escape::markup;

/// A node of a tree to draw.
pub(crate) trait FlameFrame: Sized {
    /// Drawn width, in bytes; a frame contains its callees.
    fn width(&self) -> u64;
    /// Text in the box.
    fn name(&self) -> &str;
    /// Callees, in drawing order.
    fn children(&self) -> &[Self];
}

impl FlameFrame for FlameNode {
    fn width(&self) -> u64 {
        self.bytes
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn children(&self) -> &[Self] {
        &self.children
    }
}

impl FlameFrame for DiffNode {
    fn width(&self) -> u64 {
        self.width
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn children(&self) -> &[Self] {
        &self.children
    }
}

/// What surrounds the frames.
pub(crate) struct Chart<'a> {
    /// Image width in pixels (at least 200 are used).
    pub width: u32,
    /// Frames narrower than this are not drawn.
    pub min_width_px: f64,
    /// Icicle graph: root at the top.
    pub inverted: bool,
    /// Class of the root element; the style rules are then scoped to it, so
    /// the SVG can be inlined in a page beside others.
    pub class: Option<&'static str>,
    pub title: &'a str,
    pub subtitle: &'a str,
    /// Cut the subtitle to one line of the image.
    pub fit_subtitle: bool,
    /// Shown instead of frames when the tree is empty.
    pub empty: &'a str,
    /// Swatches under the frames: (fill, text).
    pub legend: &'a [(String, &'a str)],
}

const XPAD: f64 = 10.0;
const FRAME_H: f64 = 16.0;
const TOP: f64 = 60.0;
const BOTTOM: f64 = 34.0;
const FONT_PX: f64 = 12.0;
/// Average glyph width relative to the font size (`flamegraph.pl`'s figure
/// for Verdana), used to decide how much of a label fits in a box.
const GLYPH: f64 = 0.59;

/// FNV-1a: a colour must not change between runs or Rust versions.
pub(crate) fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `s` cut to what fits in `px` pixels, with an ellipsis when cut.
fn fit(s: &str, px: f64) -> Option<String> {
    let max = ((px - 6.0) / (FONT_PX * GLYPH)).floor();
    if max < 3.0 {
        return None;
    }
    let max = max as usize;
    if s.chars().count() <= max {
        return Some(s.to_owned());
    }
    let mut cut: String = s.chars().take(max - 1).collect();
    cut.push('…');
    Some(cut)
}

/// Levels that hold at least one frame wide enough to draw.
fn drawn_depth<N: FlameFrame>(n: &N, scale: f64, min_px: f64) -> usize {
    n.children()
        .iter()
        .filter(|c| c.width() as f64 * scale >= min_px)
        .map(|c| drawn_depth(c, scale, min_px) + 1)
        .max()
        .unwrap_or(0)
}

struct Canvas<'a, N, F, T> {
    out: String,
    chart: &'a Chart<'a>,
    scale: f64,
    depth: usize,
    fill: F,
    tip: T,
    _node: std::marker::PhantomData<N>,
}

impl<N: FlameFrame, F: Fn(&N) -> String, T: Fn(&N) -> String> Canvas<'_, N, F, T> {
    fn frame(&mut self, n: &N, x: f64, level: usize) {
        let w = n.width() as f64 * self.scale;
        if w < self.chart.min_width_px {
            return;
        }
        let y = if self.chart.inverted {
            TOP + level as f64 * FRAME_H
        } else {
            TOP + (self.depth - level) as f64 * FRAME_H
        };
        let _ = write!(
            self.out,
            "<g><title>{}</title><rect x=\"{x:.2}\" y=\"{y:.1}\" width=\"{w:.2}\" height=\"{:.1}\" fill=\"{}\" rx=\"2\"/>",
            markup(&(self.tip)(n)),
            FRAME_H - 1.0,
            (self.fill)(n)
        );
        if let Some(text) = fit(n.name(), w) {
            let _ = write!(
                self.out,
                "<text x=\"{:.2}\" y=\"{:.1}\">{}</text>",
                x + 3.0,
                y + 11.5,
                markup(&text)
            );
        }
        self.out.push_str("</g>\n");
        if level >= self.depth {
            return;
        }
        let mut offset = 0u64;
        for c in n.children() {
            self.frame(c, x + offset as f64 * self.scale, level + 1);
            offset += c.width();
        }
    }
}

/// Draw `tree` as a standalone SVG document; `fill` and `tip` give each
/// frame's colour and tooltip (the tooltip is escaped here).
pub(crate) fn draw<N: FlameFrame>(
    tree: &N,
    chart: &Chart<'_>,
    fill: impl Fn(&N) -> String,
    tip: impl Fn(&N) -> String,
) -> String {
    let width = chart.width.max(200) as f64;
    let total = tree.width();
    let scale = if total == 0 {
        0.0
    } else {
        (width - 2.0 * XPAD) / total as f64
    };
    let depth = if total == 0 {
        0
    } else {
        drawn_depth(tree, scale, chart.min_width_px)
    };
    let height = TOP + (depth + 1) as f64 * FRAME_H + BOTTOM;
    let mut c = Canvas {
        out: String::with_capacity(4096),
        chart,
        scale,
        depth,
        fill,
        tip,
        _node: std::marker::PhantomData,
    };
    let subtitle = if chart.fit_subtitle {
        fit(chart.subtitle, width - 2.0 * XPAD).unwrap_or_default()
    } else {
        chart.subtitle.to_owned()
    };
    let (class, p) = match chart.class {
        Some(k) => (format!(" class=\"{k}\""), format!("svg.{k} ")),
        None => (String::new(), String::new()),
    };
    let _ = write!(
        c.out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n\
         <svg{class} version=\"1.1\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" xmlns=\"http://www.w3.org/2000/svg\">\n\
         <style>{p}text{{font-family:Verdana,'DejaVu Sans',sans-serif;font-size:{FONT_PX}px;fill:#000}}\
         {p}.title{{font-size:17px;text-anchor:middle}}{p}.sub{{fill:#444;text-anchor:middle}}\
         {p}rect:hover{{stroke:#000;stroke-width:0.5}}</style>\n\
         <rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"#f6f6f0\"/>\n\
         <text class=\"title\" x=\"{:.1}\" y=\"24\">{}</text>\n\
         <text class=\"sub\" x=\"{:.1}\" y=\"44\">{}</text>\n",
        width / 2.0,
        markup(chart.title),
        width / 2.0,
        markup(&subtitle)
    );
    if total == 0 {
        let _ = writeln!(
            c.out,
            "<text x=\"{XPAD}\" y=\"{:.1}\">{}</text>",
            TOP + 12.0,
            markup(chart.empty)
        );
    } else {
        c.frame(tree, XPAD, 0);
    }
    let y = height - BOTTOM + 14.0;
    let mut x = XPAD;
    for (fill, text) in chart.legend {
        let _ = writeln!(
            c.out,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{fill}\"/><text x=\"{:.1}\" y=\"{y:.1}\">{}</text>",
            y - 10.0,
            x + 16.0,
            markup(text)
        );
        x += 24.0 + text.len() as f64 * FONT_PX * GLYPH;
    }
    c.out.push_str("</svg>\n");
    c.out
}
