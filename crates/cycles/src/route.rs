//! Edge routes of a [`crate::layout::Layout`]: straight between adjacent
//! layers unless that crosses a box, curved around the cycle, within a
//! layer, back up and between opposite edges, a loop beside a node for a
//! self-reference, and around the rows for the edge that closes a long
//! cycle; then everything is moved into view.

use std::collections::HashSet;

use crate::example::shorten;
use crate::layout::{text_w, Placed, P};
use crate::report::Example;

const MARGIN: f64 = 16.0;

/// An edge's drawing: an SVG path, the arrowhead's three corners and where
/// its label goes.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    /// Index into [`Example::edges`].
    pub edge: usize,
    pub d: String,
    pub arrow: [(f64, f64); 3],
    pub label_at: (f64, f64),
    pub label: String,
}

pub(crate) enum Shape {
    Line(P, P),
    Quad(P, P, P),
    Cubic(P, P, P, P),
    Poly(Vec<P>),
}

/// What the routes depend on.
pub(crate) struct Scene<'a> {
    pub(crate) ex: &'a Example,
    pub(crate) nodes: &'a [Placed],
    /// The primary cycle's nodes, in order.
    pub(crate) cycle: &'a [usize],
    /// Whether it is drawn on a circle (else on rows).
    pub(crate) circle: bool,
    pub(crate) max_w: f64,
    /// Each node's layer (0: the cycle).
    pub(crate) layer: &'a [usize],
}

impl Scene<'_> {
    /// Each edge's shape and label.
    pub(crate) fn shapes(&self) -> Vec<(usize, Shape, String)> {
        let (ex, nodes, cycle, circle, max_w, layer) = (
            self.ex,
            self.nodes,
            self.cycle,
            self.circle,
            self.max_w,
            self.layer,
        );
        let (n, count) = (cycle.len(), nodes.len());
        let present: HashSet<(usize, usize)> = ex.edges.iter().map(|e| (e.src, e.dst)).collect();
        let on_cycle: HashSet<(usize, usize)> =
            (0..n).map(|k| (cycle[k], cycle[(k + 1) % n])).collect();
        let centre = if n > 0 {
            let (sx, sy) = cycle
                .iter()
                .fold((0.0, 0.0), |(x, y), &i| (x + nodes[i].x, y + nodes[i].y));
            (sx / n as f64, sy / n as f64)
        } else {
            (0.0, 0.0)
        };
        let closing = (n > 0).then(|| (cycle[n - 1], cycle[0]));
        let mut shapes: Vec<(usize, Shape, String)> = Vec::new();
        for (idx, e) in ex.edges.iter().enumerate() {
            if e.src >= count || e.dst >= count {
                continue;
            }
            let (a, b) = (&nodes[e.src], &nodes[e.dst]);
            let (pa, pb) = ((a.x, a.y), (b.x, b.y));
            let label = shorten(&e.label, 24);
            let shape = if e.src == e.dst {
                let (x, y) = (a.x + a.w / 2.0, a.y);
                Shape::Cubic(
                    (x, y - 6.0),
                    (x + 48.0, y - 34.0),
                    (x + 48.0, y + 34.0),
                    (x, y + 6.0),
                )
            } else if !circle && Some((e.src, e.dst)) == closing && n > 1 {
                // Around the rows: up from the last, left past them, down,
                // into the first.
                let above = cycle
                    .iter()
                    .map(|&i| nodes[i].y - nodes[i].h / 2.0)
                    .fold(f64::MAX, f64::min)
                    - 22.0;
                let left = -max_w / 2.0 - 36.0;
                Shape::Poly(vec![
                    (a.x, a.y - a.h / 2.0),
                    (a.x, above),
                    (left, above),
                    (left, b.y),
                    (b.x - b.w / 2.0 - 1.0, b.y),
                ])
            } else {
                let cyc = on_cycle.contains(&(e.src, e.dst));
                let straight = if cyc {
                    !circle
                } else {
                    !present.contains(&(e.dst, e.src)) && layer[e.src].abs_diff(layer[e.dst]) == 1
                };
                let line = Shape::Line(border(a, pb), border(b, pa));
                if straight && !crosses(&line, nodes, e.src, e.dst) {
                    line
                } else if straight {
                    // Bend around the boxes in the way, on the first side free.
                    let (dx, dy) = (pb.0 - pa.0, pb.1 - pa.1);
                    let len = dx.hypot(dy).max(1.0);
                    let mid = ((pa.0 + pb.0) / 2.0, (pa.1 + pb.1) / 2.0);
                    [60.0, -60.0, 120.0, -120.0, 200.0, -200.0]
                        .iter()
                        .map(|bend| {
                            let q = (mid.0 + dy / len * bend, mid.1 - dx / len * bend);
                            Shape::Quad(border(a, q), q, border(b, q))
                        })
                        .find(|s| !crosses(s, nodes, e.src, e.dst))
                        .unwrap_or(line)
                } else {
                    let mid = ((pa.0 + pb.0) / 2.0, (pa.1 + pb.1) / 2.0);
                    let (dx, dy) = (pb.0 - pa.0, pb.1 - pa.1);
                    let len = dx.hypot(dy).max(1.0);
                    let out = (mid.0 - centre.0, mid.1 - centre.1);
                    let (ux, uy, bend) = if cyc && circle && out.0.hypot(out.1) > 1.0 {
                        let l = out.0.hypot(out.1);
                        (out.0 / l, out.1 / l, 0.12 * len)
                    } else if cyc && circle {
                        (dy / len, -dx / len, 0.22 * len)
                    } else {
                        (dy / len, -dx / len, 26.0 + 0.12 * len)
                    };
                    let q = (mid.0 + ux * bend, mid.1 + uy * bend);
                    Shape::Quad(border(a, q), q, border(b, q))
                }
            };
            shapes.push((idx, shape, label));
        }

        shapes
    }
}

/// Move the nodes and shapes into view: the drawing's width, height and
/// routes.
pub(crate) fn fit(
    nodes: &mut [Placed],
    shapes: Vec<(usize, Shape, String)>,
) -> (f64, f64, Vec<Route>) {
    let count = nodes.len();
    let (mut x0, mut y0, mut x1, mut y1) = (f64::MAX, f64::MAX, f64::MIN, f64::MIN);
    let mut grow = |(x, y): P, hw: f64, hh: f64| {
        x0 = x0.min(x - hw);
        x1 = x1.max(x + hw);
        y0 = y0.min(y - hh);
        y1 = y1.max(y + hh);
    };
    nodes
        .iter()
        .for_each(|p| grow((p.x, p.y), p.w / 2.0, p.h / 2.0));
    for (_, s, label) in &shapes {
        points(s).iter().for_each(|&p| grow(p, 2.0, 2.0));
        grow(label_point(s, label), text_w(label) / 2.0 + 4.0, 9.0);
    }
    if count == 0 {
        (x0, y0, x1, y1) = (0.0, 0.0, 100.0, 40.0);
    }
    let (ox, oy) = (MARGIN - x0, MARGIN - y0);
    let mv = |(x, y): P| (x + ox, y + oy);
    for p in nodes.iter_mut() {
        p.x += ox;
        p.y += oy;
    }
    let edges = shapes
        .into_iter()
        .map(|(edge, s, label)| {
            let label_at = mv(label_point(&s, &label));
            let pts: Vec<P> = points(&s).into_iter().map(mv).collect();
            let f = |p: P| format!("{:.1},{:.1}", p.0, p.1);
            let d = match s {
                Shape::Line(..) => format!("M{} L{}", f(pts[0]), f(pts[1])),
                Shape::Quad(..) => format!("M{} Q{} {}", f(pts[0]), f(pts[1]), f(pts[2])),
                Shape::Cubic(..) => {
                    format!("M{} C{} {} {}", f(pts[0]), f(pts[1]), f(pts[2]), f(pts[3]))
                }
                Shape::Poly(_) => {
                    let rest: Vec<String> = pts[1..].iter().map(|&p| f(p)).collect();
                    format!("M{} L{}", f(pts[0]), rest.join(" L"))
                }
            };
            let (end, from) = (pts[pts.len() - 1], pts[pts.len() - 2]);
            Route {
                edge,
                d,
                arrow: arrowhead(from, end),
                label_at,
                label,
            }
        })
        .collect();
    (
        (x1 - x0 + 2.0 * MARGIN).ceil(),
        (y1 - y0 + 2.0 * MARGIN).ceil(),
        edges,
    )
}

/// Whether `s` passes through a box other than those of `a` and `b`.
fn crosses(s: &Shape, nodes: &[Placed], a: usize, b: usize) -> bool {
    let at = |t: f64| -> P {
        match s {
            Shape::Line(p, q) => (p.0 + (q.0 - p.0) * t, p.1 + (q.1 - p.1) * t),
            Shape::Quad(p, c, q) => {
                let u = 1.0 - t;
                (
                    u * u * p.0 + 2.0 * u * t * c.0 + t * t * q.0,
                    u * u * p.1 + 2.0 * u * t * c.1 + t * t * q.1,
                )
            }
            _ => (f64::MAX, f64::MAX),
        }
    };
    (1..24).map(|k| at(k as f64 / 24.0)).any(|(x, y)| {
        nodes.iter().enumerate().any(|(i, n)| {
            i != a
                && i != b
                && (x - n.x).abs() < n.w / 2.0 + 3.0
                && (y - n.y).abs() < n.h / 2.0 + 3.0
        })
    })
}

/// Where the ray from `p`'s centre towards `to` leaves its box.
fn border(p: &Placed, to: P) -> P {
    let (dx, dy) = (to.0 - p.x, to.1 - p.y);
    if dx == 0.0 && dy == 0.0 {
        return (p.x, p.y);
    }
    let tx = if dx == 0.0 {
        f64::MAX
    } else {
        (p.w / 2.0 + 2.0) / dx.abs()
    };
    let ty = if dy == 0.0 {
        f64::MAX
    } else {
        (p.h / 2.0 + 2.0) / dy.abs()
    };
    let t = tx.min(ty);
    (p.x + dx * t, p.y + dy * t)
}

fn points(s: &Shape) -> Vec<P> {
    match s {
        Shape::Line(a, b) => vec![*a, *b],
        Shape::Quad(a, q, b) => vec![*a, *q, *b],
        Shape::Cubic(a, c, d, b) => vec![*a, *c, *d, *b],
        Shape::Poly(v) => v.clone(),
    }
}

fn label_point(s: &Shape, label: &str) -> P {
    match s {
        Shape::Line(a, b) => ((a.0 + b.0) / 2.0, (a.1 + b.1) / 2.0 - 3.0),
        Shape::Quad(a, q, b) => (
            0.25 * a.0 + 0.5 * q.0 + 0.25 * b.0,
            0.25 * a.1 + 0.5 * q.1 + 0.25 * b.1,
        ),
        Shape::Cubic(a, c, _, _) => (c.0 - 6.0 + text_w(label) / 2.0, a.1 + 10.0),
        Shape::Poly(v) => ((v[1].0 + v[2].0) / 2.0, v[1].1 - 4.0),
    }
}

/// A triangle with its tip at `tip`, pointing away from `from`.
fn arrowhead(from: P, tip: P) -> [P; 3] {
    let (dx, dy) = (tip.0 - from.0, tip.1 - from.1);
    let l = dx.hypot(dy).max(1e-9);
    let (ux, uy) = (dx / l, dy / l);
    let base = (tip.0 - ux * 9.0, tip.1 - uy * 9.0);
    [
        tip,
        (base.0 - uy * 4.5, base.1 + ux * 4.5),
        (base.0 + uy * 4.5, base.1 - ux * 4.5),
    ]
}
