//! Drawing a [`FlameNode`] tree as a static, self-contained SVG.

use std::fmt::Write;

use super::{FlameNode, FrameKind};
use crate::format::{bytes, count};
use vramscope_text::escape::markup;

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

const XPAD: f64 = 10.0;
const FRAME_H: f64 = 16.0;
const TOP: f64 = 60.0;
const BOTTOM: f64 = 34.0;
const FONT_PX: f64 = 12.0;
/// Average glyph width relative to the font size (`flamegraph.pl`'s figure
/// for Verdana), used to decide how much of a label fits in a box.
const GLYPH: f64 = 0.59;

/// FNV-1a: a colour must not change between runs or Rust versions.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
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

struct Canvas<'a> {
    out: String,
    opts: &'a FlameOptions,
    scale: f64,
    total: u64,
    depth: usize,
}

impl Canvas<'_> {
    fn frame(&mut self, n: &FlameNode, x: f64, level: usize) {
        let w = n.bytes as f64 * self.scale;
        if w < self.opts.min_width_px {
            return;
        }
        let y = if self.opts.inverted {
            TOP + level as f64 * FRAME_H
        } else {
            TOP + (self.depth - level) as f64 * FRAME_H
        };
        let pct = 100.0 * n.bytes as f64 / self.total as f64;
        let blocks = if n.count == 1 { "block" } else { "blocks" };
        let tip = format!(
            "{} — {} ({pct:.1}%), {} {blocks}",
            n.label,
            bytes(n.bytes),
            count(n.count)
        );
        let _ = write!(
            self.out,
            "<g><title>{}</title><rect x=\"{x:.2}\" y=\"{y:.1}\" width=\"{w:.2}\" height=\"{:.1}\" fill=\"{}\" rx=\"2\"/>",
            markup(&tip),
            FRAME_H - 1.0,
            colour(n.kind, &n.name)
        );
        if let Some(text) = fit(&n.name, w) {
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
        for c in &n.children {
            self.frame(c, x + offset as f64 * self.scale, level + 1);
            offset += c.bytes;
        }
    }
}

/// Levels that hold at least one frame wide enough to draw.
fn drawn_depth(n: &FlameNode, scale: f64, min_px: f64) -> usize {
    n.children
        .iter()
        .filter(|c| c.bytes as f64 * scale >= min_px)
        .map(|c| drawn_depth(c, scale, min_px) + 1)
        .max()
        .unwrap_or(0)
}

/// Draw `tree` as a standalone SVG document (hover a frame for its
/// tooltip: full location, bytes, share and block count).
pub fn flamegraph_svg(tree: &FlameNode, opts: &FlameOptions) -> String {
    let width = opts.width.max(200) as f64;
    let scale = if tree.bytes == 0 {
        0.0
    } else {
        (width - 2.0 * XPAD) / tree.bytes as f64
    };
    let depth = if tree.bytes == 0 {
        0
    } else {
        drawn_depth(tree, scale, opts.min_width_px)
    };
    let height = TOP + (depth + 1) as f64 * FRAME_H + BOTTOM;
    let mut c = Canvas {
        out: String::with_capacity(4096),
        opts,
        scale,
        total: tree.bytes.max(1),
        depth,
    };
    let title = opts.title.as_deref().unwrap_or("Memory flamegraph");
    let blocks = if tree.count == 1 { "block" } else { "blocks" };
    let total = format!(
        "{} alive in {} {blocks}",
        bytes(tree.bytes),
        count(tree.count)
    );
    let subtitle = opts.subtitle.as_deref().unwrap_or(&total);
    let _ = write!(
        c.out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n\
         <svg version=\"1.1\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" xmlns=\"http://www.w3.org/2000/svg\">\n\
         <style>text{{font-family:Verdana,'DejaVu Sans',sans-serif;font-size:{FONT_PX}px;fill:#000}}\
         .title{{font-size:17px;text-anchor:middle}}.sub{{fill:#444;text-anchor:middle}}\
         rect:hover{{stroke:#000;stroke-width:0.5}}</style>\n\
         <rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"#f6f6f0\"/>\n\
         <text class=\"title\" x=\"{:.1}\" y=\"24\">{}</text>\n\
         <text class=\"sub\" x=\"{:.1}\" y=\"44\">{}</text>\n",
        width / 2.0,
        markup(title),
        width / 2.0,
        markup(subtitle)
    );
    if tree.bytes == 0 {
        let _ = writeln!(
            c.out,
            "<text x=\"{XPAD}\" y=\"{:.1}\">Nothing is allocated at this moment.</text>",
            TOP + 12.0
        );
    } else {
        c.frame(tree, XPAD, 0);
    }
    let y = height - BOTTOM + 14.0;
    let mut x = XPAD;
    for (kind, text) in [
        (FrameKind::User, "your code"),
        (FrameKind::Library, "Python libraries"),
        (FrameKind::Native, "native (C++)"),
        (FrameKind::NoStack, "no stack recorded"),
    ] {
        let _ = writeln!(
            c.out,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{y:.1}\">{text}</text>",
            y - 10.0,
            colour(kind, text),
            x + 16.0
        );
        x += 24.0 + text.len() as f64 * FONT_PX * GLYPH;
    }
    c.out.push_str("</svg>\n");
    c.out
}
