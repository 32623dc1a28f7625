//! Where to draw an example's nodes and edges, computed offline so that
//! the page needs no script.
//!
//! The primary cycle goes on a circle (its first object, the one nearest
//! to the tensors, at the bottom), or on rows that snake back and forth
//! when it is longer than [`CIRCLE_MAX`]. Every other node goes in a layer
//! below by its distance from the cycle, ordered under its neighbours;
//! nodes of a layer are spread so that they never overlap. Edges between
//! adjacent layers are straight, the others (cycle edges, edges within a
//! layer or back up, pairs of opposite edges) curve; every edge ends in an
//! arrowhead and carries its label at its middle.

use std::collections::{HashMap, VecDeque};

use crate::example::{shorten, ELIDED_TYPE};
use crate::explain::bytes;
use crate::report::Example;
use crate::route::{fit, Scene};

pub use crate::route::Route;

/// Longest cycle drawn on a circle.
pub const CIRCLE_MAX: usize = 10;
const PER_ROW: usize = 6;
const GAP: f64 = 28.0;
const LAYER_GAP: f64 = 72.0;
const LINE_H: f64 = 14.0;
/// Average glyph width at the page's 11-12 px font.
const GLYPH: f64 = 6.6;

pub(crate) type P = (f64, f64);

/// A node's box: centre, size and the lines written in it.
#[derive(Clone, Debug, PartialEq)]
pub struct Placed {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
    pub lines: Vec<String>,
}

/// The drawing of one example.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub width: f64,
    pub height: f64,
    /// Same order as [`Example::nodes`].
    pub nodes: Vec<Placed>,
    pub edges: Vec<Route>,
}

pub(crate) fn text_w(s: &str) -> f64 {
    s.chars().count() as f64 * GLYPH
}

fn lines_of(ex: &Example, i: usize) -> Vec<String> {
    let n = &ex.nodes[i];
    if let Some(t) = &n.tensor {
        let dtype = t.dtype.strip_prefix("torch.").unwrap_or(&t.dtype);
        let l2 = shorten(&format!("{} {dtype}", t.shape_text()), 28);
        let l3 = [t.device.as_str(), &bytes(t.bytes)]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" · ");
        vec![shorten(&n.type_name, 28), l2, l3]
    } else if n.type_name == ELIDED_TYPE {
        vec!["…".into(), shorten(&n.repr, 28)]
    } else {
        vec![shorten(&n.type_name, 28), shorten(&n.repr, 28)]
    }
}

/// Lay out `ex`.
pub fn layout(ex: &Example) -> Layout {
    let count = ex.nodes.len();
    let mut nodes: Vec<Placed> = (0..count)
        .map(|i| {
            let lines = lines_of(ex, i);
            let w = lines.iter().map(|l| text_w(l)).fold(0.0, f64::max) + 18.0;
            Placed {
                x: 0.0,
                y: 0.0,
                w: w.clamp(64.0, 200.0),
                h: lines.len() as f64 * LINE_H + 12.0,
                lines,
            }
        })
        .collect();
    let cycle: Vec<usize> = ex
        .cycle
        .iter()
        .map(|s| s.node)
        .filter(|&i| i < count)
        .collect();
    let n = cycle.len();
    let max_w = cycle.iter().map(|&i| nodes[i].w).fold(64.0, f64::max);
    let max_h = cycle.iter().map(|&i| nodes[i].h).fold(30.0, f64::max);
    // Room for the widest label between two neighbours of the cycle.
    let label_w = ex
        .cycle
        .iter()
        .map(|st| text_w(&shorten(&st.label, 24)))
        .fold(0.0, f64::max);
    let circle = n <= CIRCLE_MAX;
    let mut radius = 0.0;
    if circle && n >= 2 {
        let chord = if n == 2 {
            max_w + (label_w + 40.0).max(90.0)
        } else {
            (max_w.hypot(max_h) + 36.0).max(max_w + label_w + 30.0)
        };
        radius = (chord / (2.0 * (std::f64::consts::PI / n as f64).sin())).max(60.0);
    }
    for (k, &i) in cycle.iter().enumerate() {
        let (x, y) = if n == 1 {
            (0.0, 0.0)
        } else if circle {
            // First object at the bottom, then clockwise; two side by side.
            let a = if n == 2 {
                std::f64::consts::PI * (1.0 + k as f64)
            } else {
                std::f64::consts::FRAC_PI_2 + std::f64::consts::TAU * k as f64 / n as f64
            };
            (radius * a.cos(), radius * a.sin())
        } else {
            let (row, col) = (k / PER_ROW, k % PER_ROW);
            let col = if row % 2 == 1 { PER_ROW - 1 - col } else { col };
            let step = max_w + (label_w + 24.0).max(56.0);
            // Rows stack upwards: the first object, bottom left, sits
            // right above the paths to the tensors.
            (col as f64 * step, -(row as f64) * (max_h + 64.0))
        };
        nodes[i].x = x;
        nodes[i].y = y;
    }

    // Layers below the cycle, by undirected distance from it.
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); count];
    // The widest label between two nodes (either direction).
    let mut between: HashMap<(usize, usize), f64> = HashMap::new();
    for e in ex.edges.iter().filter(|e| e.src < count && e.dst < count) {
        adj[e.src].push(e.dst);
        adj[e.dst].push(e.src);
        let w = between
            .entry((e.src.min(e.dst), e.src.max(e.dst)))
            .or_default();
        *w = w.max(text_w(&shorten(&e.label, 24)));
    }
    const FAR: usize = usize::MAX;
    let mut layer = vec![FAR; count];
    let mut queue: VecDeque<usize> = cycle.iter().copied().collect();
    cycle.iter().for_each(|&i| layer[i] = 0);
    while let Some(u) = queue.pop_front() {
        for &w in &adj[u] {
            if layer[w] == FAR {
                layer[w] = layer[u] + 1;
                queue.push_back(w);
            }
        }
    }
    let deepest = layer
        .iter()
        .filter(|&&l| l != FAR)
        .max()
        .copied()
        .unwrap_or(0);
    for l in layer.iter_mut().filter(|l| **l == FAR) {
        *l = deepest + 1;
    }
    let mut y = cycle
        .iter()
        .map(|&i| nodes[i].y + nodes[i].h / 2.0)
        .fold(0.0, f64::max)
        + LAYER_GAP;
    for l in 1..=deepest + 1 {
        let mut row: Vec<(f64, usize)> = (0..count)
            .filter(|&i| layer[i] == l)
            .map(|i| {
                let above: Vec<f64> = adj[i]
                    .iter()
                    .filter(|&&j| layer[j] + 1 == l)
                    .map(|&j| nodes[j].x)
                    .collect();
                let want = if above.is_empty() {
                    f64::MAX
                } else {
                    above.iter().sum::<f64>() / above.len() as f64
                };
                (want, i)
            })
            .collect();
        if row.is_empty() {
            continue;
        }
        row.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let h = row.iter().map(|&(_, i)| nodes[i].h).fold(0.0, f64::max);
        let mut right = f64::MIN;
        let mut moved = 0.0;
        let mut wanted = 0usize;
        let mut prev = usize::MAX;
        for &(want, i) in &row {
            let half = nodes[i].w / 2.0;
            // Neighbours joined by an edge keep room for its label.
            let gap = between
                .get(&(prev.min(i), prev.max(i)))
                .map_or(GAP, |w| (w + 24.0).max(GAP));
            prev = i;
            let min_x = if right == f64::MIN {
                f64::MIN
            } else {
                right + gap + half
            };
            let x = if want == f64::MAX {
                if right == f64::MIN {
                    0.0
                } else {
                    min_x
                }
            } else {
                wanted += 1;
                moved += want.max(min_x) - want;
                want.max(min_x)
            };
            nodes[i].x = x;
            nodes[i].y = y + h / 2.0;
            right = x + half;
        }
        // Centre the row on where its nodes wanted to be.
        if wanted > 0 {
            let shift = moved / wanted as f64;
            row.iter().for_each(|&(_, i)| nodes[i].x -= shift);
        }
        y += h + LAYER_GAP;
    }

    let scene = Scene {
        ex,
        nodes: &nodes,
        cycle: &cycle,
        circle,
        max_w,
        layer: &layer,
    };
    let shapes = scene.shapes();
    let (width, height, edges) = fit(&mut nodes, shapes);
    Layout {
        width,
        height,
        nodes,
        edges,
    }
}
