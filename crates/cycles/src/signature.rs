//! Shape signatures: what makes two garbage components "the same leak".
//!
//! A cycle's shape is its sequence of (class, reference) pairs, rotated to
//! the lexicographically smallest rotation so that it does not matter which
//! object the cycle was entered at. A path's shape is its length and its
//! last [`PATH_TAIL`] pairs. References are normalised first: list indexes
//! become `[i]`, set items `{}` and hex addresses `0x_`, so a list of three
//! tensors and a list of four from the same code have the same shape.

use std::borrow::Cow;

use crate::example::CycleEdges;
use crate::graph::Graph;

/// Steps (from the tensor back) that make a path's shape.
const PATH_TAIL: usize = 8;

/// One step of a shape: module, class, normalised reference.
type Pair<'a> = (&'a str, &'a str, Cow<'a, str>);

/// FNV-1a, 128 bits: stable across runs, platforms and Rust versions.
#[derive(Clone, Copy)]
struct Fnv128(u128);

impl Fnv128 {
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013B;

    pub(crate) fn new() -> Fnv128 {
        Fnv128(0x6c62_272e_07bb_0142_62b8_2175_6295_c58d)
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= x as u128;
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    /// A string and a terminator no UTF-8 text contains.
    pub(crate) fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
        self.bytes(&[0xff]);
    }

    pub(crate) fn u128(&mut self, v: u128) {
        self.bytes(&v.to_le_bytes());
    }

    pub(crate) fn pair(&mut self, p: &Pair) {
        self.str(p.0);
        self.str(p.1);
        self.str(&p.2);
    }

    pub(crate) fn finish(self) -> u128 {
        self.0
    }
}

/// The reference label with the parts that vary between occurrences of
/// the same code (list indexes, set items, addresses) made uniform.
pub(crate) fn normalize_label(label: &str) -> Cow<'_, str> {
    let b = label.as_bytes();
    if b.len() >= 3 && b[0] == b'[' && b[b.len() - 1] == b']' {
        let inner = &b[1..b.len() - 1];
        if inner.iter().all(|c| c.is_ascii_digit() || *c == b'-') {
            return Cow::Borrowed("[i]");
        }
    }
    if b.len() >= 2 && b[0] == b'{' && b[b.len() - 1] == b'}' {
        return Cow::Borrowed("{}");
    }
    if !label.contains("0x") {
        return Cow::Borrowed(label);
    }
    let mut out = String::with_capacity(label.len());
    let mut rest = label;
    while let Some(i) = rest.find("0x") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let hex = after.bytes().take_while(|c| c.is_ascii_hexdigit()).count();
        out.push_str("0x");
        if hex > 0 {
            out.push('_');
        }
        rest = &after[hex..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// The start of the lexicographically smallest rotation of `s` (the
/// two-pointer algorithm, linear time).
pub(crate) fn least_rotation(s: &[u32]) -> usize {
    let n = s.len();
    let (mut i, mut j, mut k) = (0usize, 1usize, 0usize);
    while i < n && j < n && k < n {
        let (a, b) = (s[(i + k) % n], s[(j + k) % n]);
        if a == b {
            k += 1;
            continue;
        }
        if a > b {
            i += k + 1;
        } else {
            j += k + 1;
        }
        if i == j {
            j += 1;
        }
        k = 0;
    }
    i.min(j)
}

/// The hash of a cycle's shape, the same whichever step it starts at.
fn cycle_key(pairs: &[Pair]) -> u128 {
    // Rank the distinct pairs in lexicographic order, so the smallest
    // rotation of the ranks is the smallest rotation of the pairs.
    let mut order: Vec<usize> = (0..pairs.len()).collect();
    order.sort_by(|&a, &b| pairs[a].cmp(&pairs[b]));
    let mut rank = vec![0u32; pairs.len()];
    let mut r = 0u32;
    for (k, &i) in order.iter().enumerate() {
        if k > 0 && pairs[order[k - 1]] != pairs[i] {
            r += 1;
        }
        rank[i] = r;
    }
    let start = least_rotation(&rank);
    let mut h = Fnv128::new();
    h.str("cycle");
    for k in 0..pairs.len() {
        h.pair(&pairs[(start + k) % pairs.len()]);
    }
    h.finish()
}

/// The hash of a path's shape: its length and its last pairs (`tail`,
/// from the tensor back).
fn path_key(len: usize, tail: &[Pair]) -> u128 {
    let mut h = Fnv128::new();
    h.str("path");
    h.bytes(&(len as u64).to_le_bytes());
    for p in tail {
        h.pair(p);
    }
    h.finish()
}

/// One step of a component as a [`Pair`].
fn pair<'a>(g: &'a Graph, node: usize, label: &'a str) -> Pair<'a> {
    let n = &g.nodes[node];
    (&n.module, &n.type_name, normalize_label(label))
}

/// A component's shape: its primary cycle (`cycles[0]`), its other
/// cycles, and the distinct shapes of the paths to its tensors (`held`,
/// with `parent`/`depth` the breadth-first search from the cycles).
pub(crate) fn component_key(
    g: &Graph,
    cycles: &[CycleEdges],
    held: &[u32],
    parent: &[u32],
    depth: &[u32],
) -> u128 {
    let key = |c: &CycleEdges| {
        let pairs: Vec<Pair> = c
            .iter()
            .map(|&e| {
                let e = &g.edges[e as usize];
                pair(g, e.src, &e.label)
            })
            .collect();
        cycle_key(&pairs)
    };
    let mut others: Vec<u128> = cycles[1..].iter().map(key).collect();
    others.sort_unstable();
    let mut paths: Vec<u128> = held
        .iter()
        .map(|&t| {
            let mut tail = vec![pair(g, t as usize, "")];
            let mut at = t as usize;
            while tail.len() < PATH_TAIL && parent[at] != u32::MAX {
                let e = &g.edges[parent[at] as usize];
                tail.push(pair(g, e.src, &e.label));
                at = e.src;
            }
            path_key(depth[t as usize] as usize, &tail)
        })
        .collect();
    paths.sort_unstable();
    paths.dedup();
    let mut h = Fnv128::new();
    h.str("vramscope-cycles/1");
    h.u128(key(&cycles[0]));
    for k in others.iter().chain([&0]).chain(&paths) {
        h.u128(*k);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(normalize_label("[12]"), "[i]");
        assert_eq!(normalize_label("{<Node object at 0x7f00>}"), "{}");
        assert_eq!(
            normalize_label("['<Node object at 0x7f3a9c>']"),
            "['<Node object at 0x_>']"
        );
        assert_eq!(normalize_label(".other"), ".other");
        assert_eq!(normalize_label("0x"), "0x");
    }

    #[test]
    fn rotations() {
        assert_eq!(least_rotation(&[3, 1, 2]), 1);
        assert_eq!(least_rotation(&[1, 1, 1]), 0);
        assert_eq!(least_rotation(&[2, 1, 2, 1, 1]), 3);
        assert_eq!(least_rotation(&[5]), 0);
        let p = |t: &'static str, l: &'static str| ("m", t, Cow::Borrowed(l));
        let a = [p("A", ".x"), p("B", ".y"), p("C", ".z")];
        let b = [p("C", ".z"), p("A", ".x"), p("B", ".y")];
        let c = [p("A", ".x"), p("C", ".z"), p("B", ".y")];
        assert_eq!(cycle_key(&a), cycle_key(&b));
        assert_ne!(cycle_key(&a), cycle_key(&c));
    }
}
