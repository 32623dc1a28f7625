//! The differential tree: the flamegraphs of A and B merged frame by frame
//! (by the frame's text, since stack ids differ between files), each frame
//! as wide as the larger of its bytes in A and in B, so a frame that shrank
//! still shows and every frame contains its callees.

use serde::Serialize;
use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::Snapshot;

use super::{flame_tree, FlameNode, FrameKind};
use crate::LiveBlock;

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
    merge_trees(&flame_tree(a, a_live), &flame_tree(b, b_live))
}

/// Merge two trees: the same frames (by kind and text) become one node
/// with both sides' bytes.
pub fn merge_trees(a: &FlameNode, b: &FlameNode) -> DiffNode {
    merge(&[a], &[b])
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
        let t = merge_trees(&a, &b);
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
    }
}
