//! Connectivity: weakly connected components (union-find), strongly
//! connected components (Tarjan's algorithm with an explicit stack, so a
//! chain of a million objects cannot overflow the thread's stack) and the
//! distance from every node to the nearest tensor.

use crate::graph::{Adjacency, Graph};

/// Nodes grouped by weakly connected component, components numbered in the
/// order of their smallest node id.
pub(crate) struct Components {
    start: Vec<u32>,
    members: Vec<u32>,
}

impl Components {
    pub(crate) fn new(g: &Graph) -> Components {
        let n = g.nodes.len();
        let mut parent: Vec<u32> = (0..n as u32).collect();
        let mut size = vec![1u32; n];
        fn find(parent: &mut [u32], mut x: u32) -> u32 {
            while parent[x as usize] != x {
                let up = parent[parent[x as usize] as usize];
                parent[x as usize] = up;
                x = up;
            }
            x
        }
        for e in g.edges.iter().filter(|e| e.src < n && e.dst < n) {
            let (a, b) = (
                find(&mut parent, e.src as u32),
                find(&mut parent, e.dst as u32),
            );
            if a != b {
                let (big, small) = if size[a as usize] >= size[b as usize] {
                    (a, b)
                } else {
                    (b, a)
                };
                parent[small as usize] = big;
                size[big as usize] += size[small as usize];
            }
        }
        // Number the roots in order of first appearance, then bucket.
        const NONE: u32 = u32::MAX;
        let mut id_of_root = vec![NONE; n];
        let mut comp = vec![0u32; n];
        let mut count = 0u32;
        for (v, c) in comp.iter_mut().enumerate() {
            let r = find(&mut parent, v as u32) as usize;
            if id_of_root[r] == NONE {
                id_of_root[r] = count;
                count += 1;
            }
            *c = id_of_root[r];
        }
        let mut start = vec![0u32; count as usize + 1];
        for &c in &comp {
            start[c as usize + 1] += 1;
        }
        for i in 0..count as usize {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut members = vec![0u32; n];
        for (v, &c) in comp.iter().enumerate() {
            members[fill[c as usize] as usize] = v as u32;
            fill[c as usize] += 1;
        }
        Components { start, members }
    }

    pub(crate) fn len(&self) -> usize {
        self.start.len() - 1
    }

    /// The nodes of component `c`, ascending.
    pub(crate) fn members(&self, c: usize) -> &[u32] {
        &self.members[self.start[c] as usize..self.start[c + 1] as usize]
    }
}

/// The strongly connected component of every visited node.
pub(crate) struct Sccs {
    /// SCC id per node (`u32::MAX` where not visited).
    pub(crate) id: Vec<u32>,
    /// Whether the SCC holds a cycle: two or more nodes, or a self-loop.
    pub(crate) cyclic: Vec<bool>,
}

/// Tarjan's SCC algorithm from each of `roots` (nodes not reachable from a
/// root are not visited).
pub(crate) fn tarjan(g: &Graph, out: &Adjacency, roots: impl Iterator<Item = usize>) -> Sccs {
    const UNSEEN: u32 = u32::MAX;
    let n = g.nodes.len();
    let mut index = vec![UNSEEN; n];
    let mut low = vec![0u32; n];
    let mut on_stack = vec![false; n];
    let mut stack: Vec<u32> = Vec::new();
    // The explicit call stack: (node, position in its edge list).
    let mut calls: Vec<(u32, u32)> = Vec::new();
    let mut id = vec![UNSEEN; n];
    let mut cyclic = Vec::new();
    let mut next = 0u32;
    for root in roots {
        if index[root] != UNSEEN {
            continue;
        }
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root as u32);
        on_stack[root] = true;
        calls.push((root as u32, 0));
        while let Some(&mut (v, ref mut pos)) = calls.last_mut() {
            let v = v as usize;
            let edges = out.at(v);
            if (*pos as usize) < edges.len() {
                let w = g.edges[edges[*pos as usize] as usize].dst;
                *pos += 1;
                if index[w] == UNSEEN {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w as u32);
                    on_stack[w] = true;
                    calls.push((w as u32, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            calls.pop();
            if let Some(&(u, _)) = calls.last() {
                low[u as usize] = low[u as usize].min(low[v]);
            }
            if low[v] == index[v] {
                let scc = cyclic.len() as u32;
                let mut size = 0usize;
                while let Some(w) = stack.pop() {
                    on_stack[w as usize] = false;
                    id[w as usize] = scc;
                    size += 1;
                    if w as usize == v {
                        break;
                    }
                }
                let self_loop = || out.at(v).iter().any(|&e| g.edges[e as usize].dst == v);
                cyclic.push(size > 1 || self_loop());
            }
        }
    }
    Sccs { id, cyclic }
}

/// For every node, the fewest references from it to a tensor (`u32::MAX` when
/// it reaches none): a breadth-first search backwards from all tensors.
pub(crate) fn distances_to_tensors(g: &Graph, into: &Adjacency) -> Vec<u32> {
    const UNREACHED: u32 = u32::MAX;
    let mut dist = vec![UNREACHED; g.nodes.len()];
    let mut queue: Vec<u32> = Vec::new();
    for (v, node) in g.nodes.iter().enumerate() {
        if node.is_tensor() {
            dist[v] = 0;
            queue.push(v as u32);
        }
    }
    let mut head = 0;
    while head < queue.len() {
        let v = queue[head] as usize;
        head += 1;
        for &e in into.at(v) {
            let u = g.edges[e as usize].src;
            if dist[u] == UNREACHED {
                dist[u] = dist[v] + 1;
                queue.push(u as u32);
            }
        }
    }
    dist
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Edge, NodeInfo};

    fn graph(n: usize, edges: &[(usize, usize)]) -> Graph {
        Graph {
            nodes: vec![NodeInfo::default(); n],
            edges: edges
                .iter()
                .map(|&(src, dst)| Edge {
                    src,
                    dst,
                    label: String::new(),
                })
                .collect(),
            site: None,
        }
    }

    #[test]
    fn components_and_sccs() {
        // 0 <-> 1 -> 2 ; 3 -> 3 ; 4 alone ; 5 -> 6
        let g = graph(7, &[(0, 1), (1, 0), (1, 2), (3, 3), (5, 6)]);
        let c = Components::new(&g);
        assert_eq!(c.len(), 4);
        assert_eq!(c.members(0), &[0, 1, 2]);
        assert_eq!(c.members(1), &[3]);
        let out = Adjacency::new(&g, false);
        let s = tarjan(&g, &out, 0..7);
        assert_eq!(s.id[0], s.id[1]);
        assert_ne!(s.id[1], s.id[2]);
        assert!(s.cyclic[s.id[0] as usize]);
        assert!(!s.cyclic[s.id[2] as usize]);
        assert!(s.cyclic[s.id[3] as usize]);
        assert!(!s.cyclic[s.id[4] as usize]);
        assert!(!s.cyclic[s.id[6] as usize]);
    }
}
