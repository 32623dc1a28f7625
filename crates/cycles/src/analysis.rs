//! The analysis: in every connected group of garbage that holds a tensor,
//! the minimal reference cycles and the shortest path from them to each
//! tensor; groups of the same shape become one [`Finding`].
//!
//! Everything is linear in the size of the graph: one pass each for the
//! components, the strongly connected components and the distances to the
//! tensors, then per component breadth-first searches bounded by the
//! component. Scratch arrays are shared between components (stamped, not
//! cleared), so ten thousand small components cost no more than one large.

use std::collections::{HashMap, HashSet};

use crate::example::{build_example, CycleEdges};
use crate::explain::{closing_edge, explanation, title};
use crate::graph::{Adjacency, Graph};
use crate::report::{CycleOptions, CycleReport, Finding, MAX_LISTED};
use crate::scc::{distances_to_tensors, tarjan, Components, Sccs};
use crate::signature::component_key;

const NONE: u32 = u32::MAX;

/// Find the reference cycles of `g` that hold tensors, grouped by shape.
///
/// Edges with an end out of range are ignored (use [`Graph::from_json`] or
/// [`Graph::validate`] to reject them instead).
pub fn analyze(g: &Graph, opts: &CycleOptions) -> CycleReport {
    let mut report = CycleReport::empty();
    report.collections = 1;
    report.nodes = g.nodes.len() as u64;
    report.edges = g.edges.len() as u64;
    if g.nodes.len() >= NONE as usize || g.edges.len() >= NONE as usize {
        return report;
    }
    let out = Adjacency::new(g, false);
    let into = Adjacency::new(g, true);
    let comps = Components::new(g);
    let with_tensors: Vec<usize> = (0..comps.len())
        .filter(|&c| {
            comps
                .members(c)
                .iter()
                .any(|&v| g.nodes[v as usize].is_tensor())
        })
        .collect();
    report.components_with_tensors = with_tensors.len() as u64;
    let roots = with_tensors
        .iter()
        .flat_map(|&c| comps.members(c).iter().map(|&v| v as usize));
    let sccs = tarjan(g, &out, roots);
    let mut a = Analyzer {
        g,
        opts,
        out: &out,
        into: &into,
        to_tensor: distances_to_tensors(g, &into),
        scc_best: vec![NONE; sccs.cyclic.len()],
        sccs,
        stamp: vec![0; g.nodes.len()],
        now: 0,
        parent: vec![NONE; g.nodes.len()],
        depth: vec![0; g.nodes.len()],
        queue: Vec::new(),
        storages: HashSet::new(),
        by_signature: HashMap::new(),
    };
    for &c in &with_tensors {
        a.component(comps.members(c), &mut report);
    }
    report.sort_and_cap(opts.max_findings);
    report
}

struct Analyzer<'a> {
    g: &'a Graph,
    opts: &'a CycleOptions,
    out: &'a Adjacency,
    into: &'a Adjacency,
    sccs: Sccs,
    to_tensor: Vec<u32>,
    /// Per SCC, its node nearest to a tensor (`NONE` until its component
    /// is analysed; every SCC lies in one component).
    scc_best: Vec<u32>,
    /// Breadth-first search scratch: a node is visited when its stamp is
    /// `now`; `parent` is the edge it was reached by, `depth` its distance.
    stamp: Vec<u32>,
    now: u32,
    parent: Vec<u32>,
    depth: Vec<u32>,
    queue: Vec<u32>,
    /// Storages already counted (views share one).
    storages: HashSet<u64>,
    by_signature: HashMap<u128, usize>,
}

impl<'a> Analyzer<'a> {
    fn next_stamp(&mut self) -> u32 {
        self.now += 1;
        self.now
    }

    fn component(&mut self, members: &[u32], report: &mut CycleReport) {
        let g = self.g;
        let tensors_here = members
            .iter()
            .filter(|&&v| g.nodes[v as usize].is_tensor())
            .count() as u64;
        // The cyclic SCCs that reach a tensor, each with its nearest node.
        let mut chosen: Vec<u32> = Vec::new();
        for &v in members {
            let s = self.sccs.id[v as usize];
            if s == NONE || !self.sccs.cyclic[s as usize] || self.to_tensor[v as usize] == NONE {
                continue;
            }
            let best = &mut self.scc_best[s as usize];
            if *best == NONE {
                *best = v;
                chosen.push(s);
            } else if self.to_tensor[v as usize] < self.to_tensor[*best as usize] {
                *best = v;
            }
        }
        if chosen.is_empty() {
            report.unreached_tensors += tensors_here;
            return;
        }
        let mut starts: Vec<u32> = chosen.iter().map(|&s| self.scc_best[s as usize]).collect();
        starts.sort_by_key(|&v| (self.to_tensor[v as usize], v));
        let cycles: Vec<CycleEdges> = starts
            .iter()
            .map(|&v| self.shortest_cycle(v))
            .filter(|c| !c.is_empty())
            .collect();
        if cycles.is_empty() {
            report.unreached_tensors += tensors_here;
            return;
        }
        let held = self.paths_from(&cycles);
        report.unreached_tensors += tensors_here - held.len() as u64;

        let mut held_bytes = 0u64;
        for &t in &held {
            let info = g.nodes[t as usize].tensor.as_ref().expect("a tensor node");
            if info.storage.is_none_or(|s| self.storages.insert(s)) {
                held_bytes += info.bytes;
            }
        }
        let signature = component_key(g, &cycles, &held, &self.parent, &self.depth);
        let index = match self.by_signature.get(&signature) {
            Some(&i) => i,
            None => {
                let links = if cycles.len() > 1 {
                    self.links(&cycles, self.opts.max_example_nodes)
                } else {
                    Vec::new()
                };
                let example = build_example(
                    g,
                    &cycles,
                    &links,
                    &held,
                    &self.parent,
                    &self.depth,
                    self.opts.max_example_nodes,
                );
                let cycle_length = cycles[0].len() as u64;
                let mut classes: Vec<String> = Vec::new();
                for &e in &cycles[0] {
                    let node = &g.nodes[g.edges[e as usize].src];
                    let q = node.qualified_type();
                    if !node.is_tensor() && !classes.contains(&q) && classes.len() < 20 {
                        classes.push(q);
                    }
                }
                report.findings.push(Finding {
                    signature: format!("{signature:032x}"),
                    title: title(&example.cycle, cycle_length, held.len() as u64, held_bytes),
                    explanation: explanation(&example, held.len() as u64, held_bytes),
                    closing_edge: closing_edge(&example.cycle),
                    count: 0,
                    tensors: 0,
                    bytes: 0,
                    bytes_per_occurrence: 0,
                    cycle_length,
                    shapes_seen: Vec::new(),
                    classes,
                    sites: Vec::new(),
                    example,
                });
                self.by_signature
                    .insert(signature, report.findings.len() - 1);
                report.findings.len() - 1
            }
        };
        let f = &mut report.findings[index];
        f.count += 1;
        f.tensors += held.len() as u64;
        f.bytes += held_bytes;
        f.bytes_per_occurrence = f.bytes_per_occurrence.max(held_bytes);
        for &t in &held {
            if f.shapes_seen.len() >= MAX_LISTED {
                break;
            }
            if let Some(info) = &g.nodes[t as usize].tensor {
                let d = info.describe();
                if !f.shapes_seen.contains(&d) {
                    f.shapes_seen.push(d);
                }
            }
        }
        if let Some(site) = g.site.as_deref().filter(|s| !s.is_empty()) {
            if f.sites.len() < MAX_LISTED && !f.sites.iter().any(|s| s == site) {
                f.sites.push(site.to_owned());
            }
        }
        report.cyclic_components += 1;
        report.tensors += held.len() as u64;
        report.bytes += held_bytes;
    }

    /// The shortest cycle through `start` inside its SCC, as the edges from
    /// each node to the next (the last one back to `start`).
    fn shortest_cycle(&mut self, start: u32) -> CycleEdges {
        let g = self.g;
        let scc = self.sccs.id[start as usize];
        let stamp = self.next_stamp();
        self.queue.clear();
        self.queue.push(start);
        self.stamp[start as usize] = stamp;
        self.parent[start as usize] = NONE;
        let mut head = 0;
        let mut closing = NONE;
        'search: while head < self.queue.len() {
            let u = self.queue[head] as usize;
            head += 1;
            for &e in self.out.at(u) {
                let w = g.edges[e as usize].dst;
                if w == start as usize {
                    closing = e;
                    break 'search;
                }
                if self.sccs.id[w] == scc && self.stamp[w] != stamp {
                    self.stamp[w] = stamp;
                    self.parent[w] = e;
                    self.queue.push(w as u32);
                }
            }
        }
        // `start` is in a cyclic SCC, so the search always closes a loop;
        // should it not, the component is reported as unreached.
        if closing == NONE {
            return Vec::new();
        }
        let mut edges = vec![closing];
        let mut at = g.edges[closing as usize].src;
        while at != start as usize {
            let e = self.parent[at];
            edges.push(e);
            at = g.edges[e as usize].src;
        }
        edges.reverse();
        // Start at the object rather than at its `__dict__`: the loop reads
        // `Node —__dict__→ dict —['other']→ …`, closing with an attribute.
        if edges.len() > 1 && g.edges[closing as usize].label == "__dict__" {
            edges.rotate_right(1);
        }
        edges
    }

    /// A breadth-first search from every node of `cycles`: afterwards
    /// `parent` and `depth` give the shortest path to each node reached.
    /// Returns the tensors reached, in the order found.
    fn paths_from(&mut self, cycles: &[CycleEdges]) -> Vec<u32> {
        let g = self.g;
        let stamp = self.next_stamp();
        self.queue.clear();
        for &e in cycles.iter().flatten() {
            let v = g.edges[e as usize].src;
            if self.stamp[v] != stamp {
                self.stamp[v] = stamp;
                self.parent[v] = NONE;
                self.depth[v] = 0;
                self.queue.push(v as u32);
            }
        }
        let mut held = Vec::new();
        let mut head = 0;
        while head < self.queue.len() {
            let u = self.queue[head] as usize;
            head += 1;
            if g.nodes[u].is_tensor() {
                held.push(u as u32);
            }
            for &e in self.out.at(u) {
                let w = g.edges[e as usize].dst;
                if self.stamp[w] != stamp {
                    self.stamp[w] = stamp;
                    self.parent[w] = e;
                    self.depth[w] = self.depth[u] + 1;
                    self.queue.push(w as u32);
                }
            }
        }
        held
    }

    /// For each of `cycles[1..]`, the edges of a shortest path, in either
    /// direction, that links it to `cycles[0]` (empty when longer than
    /// `limit`), so that the drawing shows how the cycles hang together.
    fn links(&self, cycles: &[CycleEdges], limit: usize) -> Vec<Vec<u32>> {
        let g = self.g;
        let mut target: HashMap<usize, usize> = HashMap::new();
        for (i, c) in cycles[1..].iter().enumerate() {
            for &e in c {
                target.insert(g.edges[e as usize].src, i);
            }
        }
        let mut found: Vec<Option<usize>> = vec![None; cycles.len() - 1];
        let mut missing = found.len();
        // Node → (edge it was reached by, distance).
        let mut via: HashMap<usize, (u32, usize)> = HashMap::new();
        let mut queue = std::collections::VecDeque::new();
        for &e in &cycles[0] {
            let v = g.edges[e as usize].src;
            via.insert(v, (NONE, 0));
            queue.push_back(v);
        }
        while let Some(u) = queue.pop_front() {
            let d = via[&u].1;
            if missing == 0 || d >= limit {
                break;
            }
            let out = self.out.at(u).iter().map(|&e| (e, g.edges[e as usize].dst));
            let into = self
                .into
                .at(u)
                .iter()
                .map(|&e| (e, g.edges[e as usize].src));
            for (e, w) in out.chain(into) {
                if via.contains_key(&w) {
                    continue;
                }
                via.insert(w, (e, d + 1));
                queue.push_back(w);
                if let Some(&i) = target.get(&w) {
                    if found[i].is_none() {
                        found[i] = Some(w);
                        missing -= 1;
                    }
                }
            }
        }
        found
            .into_iter()
            .map(|end| {
                let mut path = Vec::new();
                let mut at = match end {
                    Some(v) => v,
                    None => return path,
                };
                while let Some(&(e, _)) = via.get(&at).filter(|(e, _)| *e != NONE) {
                    path.push(e);
                    let edge = &g.edges[e as usize];
                    at = if edge.dst == at { edge.src } else { edge.dst };
                }
                path.reverse();
                path
            })
            .collect()
    }
}
