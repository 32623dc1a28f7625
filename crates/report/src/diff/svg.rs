//! The differential flamegraph: the flamegraphs of A and B merged frame by
//! frame (by the frame's text, since stack ids differ between files), each
//! frame as wide as the larger of its bytes in A and in B, red where B holds
//! more, blue where it holds less, the deeper the colour the larger the
//! change. A static, self-contained SVG in the style of
//! [`flamegraph_svg`](crate::flamegraph::flamegraph_svg).

use std::fmt::Write;

use serde::Serialize;
use vramscope_analysis::LiveBlock;
use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::Snapshot;

use crate::flamegraph::{flame_tree, FlameNode, FrameKind};
use crate::format::signed_bytes;
use crate::format::{bytes, count};
use vramscope_text::escape::markup;

/// One frame of the merged tree.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiffNode {
    /// Short text for the box: `forward (model.py:39)`.
    pub name: String,
    /// Full text for the tooltip: `/home/u/model.py:39 in forward`.
    pub label: String,
    pub kind: FrameKind,
    /// Bytes at or beneath this frame in A.
    pub a_bytes: u64,
    /// Bytes at or beneath this frame in B.
    pub b_bytes: u64,
    pub a_count: u64,
    pub b_count: u64,
    /// Drawn width in bytes: the largest of `a_bytes`, `b_bytes` and the
    /// children's widths together, so that a frame that shrank still shows
    /// and every frame contains its callees.
    pub width: u64,
    /// Callees, widest first.
    pub children: Vec<DiffNode>,
}

impl DiffNode {
    /// `b_bytes - a_bytes`.
    pub fn delta(&self) -> i64 {
        (self.b_bytes as i128 - self.a_bytes as i128).clamp(i64::MIN as i128, i64::MAX as i128)
            as i64
    }

    /// Visit every node with its depth, parents before children.
    pub fn walk<'a>(&'a self, f: &mut dyn FnMut(&'a DiffNode, usize)) {
        fn go<'a>(n: &'a DiffNode, d: usize, f: &mut dyn FnMut(&'a DiffNode, usize)) {
            f(n, d);
            for c in &n.children {
                go(c, d + 1, f);
            }
        }
        go(self, 0, f);
    }
}

/// Merge the flamegraphs of the blocks alive in A and in B.
pub fn diff_tree(
    a: &Snapshot,
    a_live: &[LiveBlock],
    b: &Snapshot,
    b_live: &[LiveBlock],
) -> DiffNode {
    let ta = flame_tree(a, a_live);
    let tb = flame_tree(b, b_live);
    merge(&[&ta], &[&tb])
}

/// Merge the nodes of one frame path: those of A, those of B (usually one
/// each; frames whose texts coincide are summed).
fn merge(a: &[&FlameNode], b: &[&FlameNode]) -> DiffNode {
    let first = a.first().or(b.first()).expect("a node on one side");
    let mut order: Vec<(FrameKind, &str)> = Vec::new();
    type Pair<'n> = (Vec<&'n FlameNode>, Vec<&'n FlameNode>);
    let mut kids: HashMap<(FrameKind, &str), Pair> = HashMap::default();
    for (side, nodes) in [a, b].into_iter().enumerate() {
        for n in nodes {
            for c in &n.children {
                let key = (c.kind, c.label.as_str());
                let e = kids.entry(key).or_insert_with(|| {
                    order.push(key);
                    (Vec::new(), Vec::new())
                });
                if side == 0 { &mut e.0 } else { &mut e.1 }.push(c);
            }
        }
    }
    let mut children: Vec<DiffNode> = order
        .iter()
        .map(|k| {
            let (ca, cb) = &kids[k];
            merge(ca, cb)
        })
        .collect();
    children.sort_by(|x, y| y.width.cmp(&x.width).then_with(|| x.label.cmp(&y.label)));
    let a_bytes = a.iter().map(|n| n.bytes).sum::<u64>();
    let b_bytes = b.iter().map(|n| n.bytes).sum::<u64>();
    let inner: u64 = children.iter().map(|c| c.width).sum();
    DiffNode {
        name: first.name.clone(),
        label: first.label.clone(),
        kind: first.kind,
        a_bytes,
        b_bytes,
        a_count: a.iter().map(|n| n.count).sum(),
        b_count: b.iter().map(|n| n.count).sum(),
        width: a_bytes.max(b_bytes).max(inner),
        children,
    }
}

/// How the differential SVG is drawn.
#[derive(Clone, Debug)]
pub struct DiffSvgOptions {
    /// Image width in pixels. Default 1200.
    pub width: u32,
    /// Headline. Default `Differential memory flamegraph`.
    pub title: Option<String>,
    /// Second line. Default: the totals of A and B and the change.
    pub subtitle: Option<String>,
    /// Frames narrower than this are not drawn. Default 0.1.
    pub min_width_px: f64,
}

impl Default for DiffSvgOptions {
    fn default() -> Self {
        DiffSvgOptions {
            width: 1200,
            title: None,
            subtitle: None,
            min_width_px: 0.1,
        }
    }
}

const XPAD: f64 = 10.0;
const FRAME_H: f64 = 16.0;
const TOP: f64 = 60.0;
const BOTTOM: f64 = 34.0;
const FONT_PX: f64 = 12.0;
/// Average glyph width relative to the font size, as in the flamegraph.
const GLYPH: f64 = 0.59;

/// Red for growth, blue for shrinkage, grey when unchanged; `t` in 0..=1
/// is the size of the change relative to the largest one.
fn colour(delta: i64, t: f64) -> String {
    if delta == 0 {
        return "rgb(221,221,214)".into();
    }
    let fade = (232.0 - 172.0 * t.clamp(0.0, 1.0)) as u8;
    if delta > 0 {
        format!("rgb(250,{fade},{fade})")
    } else {
        format!("rgb({fade},{fade},250)")
    }
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
    opts: &'a DiffSvgOptions,
    scale: f64,
    depth: usize,
    max_change: f64,
}

impl Canvas<'_> {
    fn frame(&mut self, n: &DiffNode, x: f64, level: usize) {
        let w = n.width as f64 * self.scale;
        if w < self.opts.min_width_px {
            return;
        }
        let y = TOP + (self.depth - level) as f64 * FRAME_H;
        let d = n.delta();
        let tip = format!(
            "{} — A {} in {}, B {} in {}, change {}",
            n.label,
            bytes(n.a_bytes),
            blocks(n.a_count),
            bytes(n.b_bytes),
            blocks(n.b_count),
            signed_bytes(d as f64)
        );
        let t = if self.max_change > 0.0 {
            (d.unsigned_abs() as f64 / self.max_change).sqrt()
        } else {
            0.0
        };
        let _ = write!(
            self.out,
            "<g><title>{}</title><rect x=\"{x:.2}\" y=\"{y:.1}\" width=\"{w:.2}\" height=\"{:.1}\" fill=\"{}\" rx=\"2\"/>",
            markup(&tip),
            FRAME_H - 1.0,
            colour(d, t)
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
            offset += c.width;
        }
    }
}

fn blocks(n: u64) -> String {
    format!("{} {}", count(n), if n == 1 { "block" } else { "blocks" })
}

/// Levels that hold at least one frame wide enough to draw.
fn drawn_depth(n: &DiffNode, scale: f64, min_px: f64) -> usize {
    n.children
        .iter()
        .filter(|c| c.width as f64 * scale >= min_px)
        .map(|c| drawn_depth(c, scale, min_px) + 1)
        .max()
        .unwrap_or(0)
}

/// Draw `tree` as a standalone SVG document (hover a frame for A, B and
/// the change). The root element has class `vramscope-diff`, and its style
/// rules are scoped to it, so the SVG can also be inlined in a page.
pub fn diff_svg(tree: &DiffNode, opts: &DiffSvgOptions) -> String {
    let width = opts.width.max(200) as f64;
    let scale = if tree.width == 0 {
        0.0
    } else {
        (width - 2.0 * XPAD) / tree.width as f64
    };
    let depth = if tree.width == 0 {
        0
    } else {
        drawn_depth(tree, scale, opts.min_width_px)
    };
    let mut max_change = 0u64;
    tree.walk(&mut |n, _| max_change = max_change.max(n.delta().unsigned_abs()));
    let height = TOP + (depth + 1) as f64 * FRAME_H + BOTTOM;
    let mut c = Canvas {
        out: String::with_capacity(4096),
        opts,
        scale,
        depth,
        max_change: max_change as f64,
    };
    let title = opts
        .title
        .as_deref()
        .unwrap_or("Differential memory flamegraph");
    let totals = format!(
        "A {} → B {} (change {}); width: the larger of A and B",
        bytes(tree.a_bytes),
        bytes(tree.b_bytes),
        signed_bytes(tree.delta() as f64)
    );
    let subtitle = opts.subtitle.as_deref().unwrap_or(&totals);
    let subtitle = fit(subtitle, width - 2.0 * XPAD).unwrap_or_default();
    let _ = write!(
        c.out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n\
         <svg class=\"vramscope-diff\" version=\"1.1\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" xmlns=\"http://www.w3.org/2000/svg\">\n\
         <style>svg.vramscope-diff text{{font-family:Verdana,'DejaVu Sans',sans-serif;font-size:{FONT_PX}px;fill:#000}}\
         svg.vramscope-diff .title{{font-size:17px;text-anchor:middle}}svg.vramscope-diff .sub{{fill:#444;text-anchor:middle}}\
         svg.vramscope-diff rect:hover{{stroke:#000;stroke-width:0.5}}</style>\n\
         <rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"#f6f6f0\"/>\n\
         <text class=\"title\" x=\"{:.1}\" y=\"24\">{}</text>\n\
         <text class=\"sub\" x=\"{:.1}\" y=\"44\">{}</text>\n",
        width / 2.0,
        markup(title),
        width / 2.0,
        markup(&subtitle)
    );
    if tree.width == 0 {
        let _ = writeln!(
            c.out,
            "<text x=\"{XPAD}\" y=\"{:.1}\">Nothing is allocated in A or in B.</text>",
            TOP + 12.0
        );
    } else {
        c.frame(tree, XPAD, 0);
    }
    let y = height - BOTTOM + 14.0;
    let mut x = XPAD;
    for (delta, text) in [(1, "more in B"), (-1, "less in B"), (0, "unchanged")] {
        let _ = writeln!(
            c.out,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{y:.1}\">{text}</text>",
            y - 10.0,
            colour(delta, 0.6),
            x + 16.0
        );
        x += 24.0 + text.len() as f64 * FONT_PX * GLYPH;
    }
    c.out.push_str("</svg>\n");
    c.out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(label: &str, bytes: u64, children: Vec<FlameNode>) -> FlameNode {
        FlameNode {
            name: label.to_owned(),
            label: label.to_owned(),
            kind: FrameKind::User,
            bytes,
            count: 1,
            children,
        }
    }

    #[test]
    fn frames_are_as_wide_as_either_side_and_hold_their_callees() {
        // A: all → f (10) → g (10); B: all → f (10) → h (10).
        let a = node("all", 10, vec![node("f", 10, vec![node("g", 10, vec![])])]);
        let b = node("all", 10, vec![node("f", 10, vec![node("h", 10, vec![])])]);
        let t = merge(&[&a], &[&b]);
        assert_eq!((t.a_bytes, t.b_bytes, t.delta()), (10, 10, 0));
        let f = &t.children[0];
        assert_eq!(f.children.len(), 2);
        assert_eq!(f.width, 20, "g (A only) and h (B only) side by side");
        assert_eq!(t.width, 20);
        let g = f.children.iter().find(|c| c.label == "g").expect("g");
        assert_eq!((g.a_bytes, g.b_bytes, g.delta()), (10, 0, -10));
        t.walk(&mut |n, _| {
            assert!(n.width >= n.children.iter().map(|c| c.width).sum::<u64>());
        });
        let svg = diff_svg(&t, &DiffSvgOptions::default());
        assert!(svg.contains(&colour(-10, 1.0)) && svg.contains(&colour(10, 1.0)));
        // The same tree on both sides: nothing red or blue.
        let same = diff_svg(&merge(&[&a], &[&a]), &DiffSvgOptions::default());
        let grey = format!("fill=\"{}\"", colour(0, 0.0));
        let frames: Vec<&str> = same.split("<g><title>").skip(1).collect();
        assert_eq!(frames.len(), 3);
        assert!(frames.iter().all(|g| g.contains(&grey)), "{same}");
        assert!(same.contains("change 0 B"));
    }
}
