//! A finding's example: the first occurrence cut down to a small graph of
//! its cycles, the paths to its tensors and the tensors, re-indexed, at
//! most `max_example_nodes` nodes. A cycle too long to fit keeps its start
//! and its end, the middle replaced by one `…` node; paths that do not fit
//! are counted, not drawn.

use std::collections::{HashMap, HashSet};

use crate::explain::count;
use crate::graph::{Edge, Graph, NodeInfo};
use crate::report::{Example, Step};

/// A cycle as the edges from each of its nodes to the next, the last back
/// to the first node.
pub(crate) type CycleEdges = Vec<u32>;

const NONE: u32 = u32::MAX;
/// Characters of a repr kept in the example.
const MAX_REPR: usize = 200;
/// Frames of a tensor's allocation stack kept in the example.
const MAX_STACK: usize = 40;
/// The class name of the node standing for an elided stretch of a cycle.
pub const ELIDED_TYPE: &str = "…";

struct Builder<'a> {
    g: &'a Graph,
    ex: Example,
    index: HashMap<usize, usize>,
    edges: HashSet<(usize, usize, String)>,
    max: usize,
}

impl Builder<'_> {
    fn node(&mut self, v: usize) -> usize {
        if let Some(&i) = self.index.get(&v) {
            return i;
        }
        let src = &self.g.nodes[v];
        let mut n = NodeInfo {
            type_name: src.type_name.clone(),
            module: src.module.clone(),
            repr: shorten(&src.repr, MAX_REPR),
            tensor: src.tensor.clone(),
        };
        if let Some(t) = &mut n.tensor {
            t.stack.truncate(MAX_STACK);
        }
        self.ex.nodes.push(n);
        self.index.insert(v, self.ex.nodes.len() - 1);
        self.ex.nodes.len() - 1
    }

    fn elided(&mut self, hidden: usize) -> usize {
        self.ex.nodes.push(NodeInfo {
            type_name: ELIDED_TYPE.into(),
            module: String::new(),
            repr: format!("{} more objects on the loop", count(hidden as u64)),
            tensor: None,
        });
        self.ex.nodes.len() - 1
    }

    fn edge(&mut self, src: usize, dst: usize, label: &str) {
        if self.edges.insert((src, dst, label.to_owned())) {
            self.ex.edges.push(Edge {
                src,
                dst,
                label: label.to_owned(),
            });
        }
    }

    fn step(&self, node: usize, label: &str) -> Step {
        Step {
            node,
            type_name: self.ex.nodes[node].type_name.clone(),
            label: label.to_owned(),
        }
    }

    /// Add a cycle (steps closed into a loop); `cap` limits its nodes, the
    /// middle elided beyond it.
    fn cycle(&mut self, c: &CycleEdges, cap: usize) -> Vec<Step> {
        let g = self.g;
        let len = c.len();
        let keep: Vec<usize> = if len <= cap {
            (0..len).collect()
        } else {
            let head = (cap - 1).div_ceil(2).max(1);
            let tail = (cap - 1 - head).max(1);
            (0..head).chain(len - tail..len).collect()
        };
        let mut steps = Vec::with_capacity(keep.len() + 1);
        for (k, &i) in keep.iter().enumerate() {
            let e = &g.edges[c[i] as usize];
            let node = self.node(e.src);
            steps.push(self.step(node, &e.label));
            if let Some(&next) = keep.get(k + 1) {
                if next != i + 1 {
                    let gap = self.elided(next - i - 1);
                    steps.push(self.step(gap, "…"));
                }
            }
        }
        for k in 0..steps.len() {
            let next = steps[(k + 1) % steps.len()].node;
            let (node, label) = (steps[k].node, steps[k].label.clone());
            self.edge(node, next, &label);
        }
        steps
    }

    /// Nodes of `c` not in the example yet.
    fn new_nodes(&self, c: &CycleEdges) -> usize {
        let mut seen = HashSet::new();
        c.iter()
            .map(|&e| self.g.edges[e as usize].src)
            .filter(|v| !self.index.contains_key(v) && seen.insert(*v))
            .count()
    }
}

/// `s` cut to `max` characters, with an ellipsis when cut.
pub(crate) fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut cut: String = s.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// The example of one component: `cycles[0]` is the primary cycle,
/// `links[i]` the edges that connect `cycles[i + 1]` to it (or nothing);
/// `parent`/`depth` are the breadth-first search from the cycles that
/// found `held` (the tensors).
pub(crate) fn build_example(
    g: &Graph,
    cycles: &[CycleEdges],
    links: &[Vec<u32>],
    held: &[u32],
    parent: &[u32],
    depth: &[u32],
    max_nodes: usize,
) -> Example {
    let max = max_nodes.max(4);
    let mut b = Builder {
        g,
        ex: Example::default(),
        index: HashMap::new(),
        edges: HashSet::new(),
        max,
    };
    // The primary cycle whole if it fits, else two thirds of the budget.
    let cap = if cycles[0].len() <= max {
        max
    } else {
        (max * 2 / 3).max(3)
    };
    b.ex.cycle = b.cycle(&cycles[0], cap);
    // Other cycles while they leave half of the rest for the paths.
    for (i, c) in cycles[1..].iter().enumerate() {
        let room = (b.max - b.ex.nodes.len()) / 2;
        let link = links.get(i).map_or(&[][..], |l| &l[..]);
        let mut fresh: HashSet<usize> = HashSet::new();
        for &e in link {
            let e = &g.edges[e as usize];
            fresh.extend(
                [e.src, e.dst]
                    .into_iter()
                    .filter(|v| !b.index.contains_key(v)),
            );
        }
        if b.new_nodes(c) + fresh.len() <= room && !c.is_empty() {
            for &e in link {
                let e = &g.edges[e as usize];
                let (src, dst) = (b.node(e.src), b.node(e.dst));
                b.edge(src, dst, &e.label);
            }
            let steps = b.cycle(c, usize::MAX);
            b.ex.other_cycles.push(steps);
        } else {
            b.ex.omitted_cycles += 1;
        }
    }
    // Paths, largest tensor first.
    let mut order: Vec<u32> = held.to_vec();
    let bytes = |t: u32| g.nodes[t as usize].tensor.as_ref().map_or(0, |i| i.bytes);
    order.sort_by_key(|&t| std::cmp::Reverse(bytes(t)));
    for t in order {
        let d = depth[t as usize] as usize;
        if b.ex.nodes.len() >= b.max || d + 1 > b.max {
            b.ex.omitted_paths += 1;
            continue;
        }
        // Walk back to the cycle: (node, its edge to the next node).
        let mut back: Vec<(usize, u32)> = vec![(t as usize, NONE)];
        let mut at = t as usize;
        while parent[at] != NONE {
            let e = parent[at];
            at = g.edges[e as usize].src;
            back.push((at, e));
        }
        let fresh = back
            .iter()
            .filter(|(v, _)| !b.index.contains_key(v))
            .count();
        // The path must start at a drawn cycle node and fit.
        if !b.index.contains_key(&at) || b.ex.nodes.len() + fresh > b.max {
            b.ex.omitted_paths += 1;
            continue;
        }
        back.reverse();
        let mut steps = Vec::with_capacity(back.len());
        for &(v, e) in &back {
            let node = b.node(v);
            let label = if e == NONE {
                ""
            } else {
                g.edges[e as usize].label.as_str()
            };
            steps.push(b.step(node, label));
        }
        for k in 1..steps.len() {
            let (src, dst) = (steps[k - 1].node, steps[k].node);
            let label = steps[k - 1].label.clone();
            b.edge(src, dst, &label);
        }
        b.ex.paths.push(steps);
    }
    b.ex
}
