//! Comparing two sets of live blocks: what is alive in B and not in A.
//!
//! The two sets may come from two snapshots (two runs, two commits) or from
//! two moments of one snapshot. Addresses differ between runs and stack ids
//! are interned per file, so blocks are matched by what does not change: the
//! text of their allocation stack (file, line and function of every frame)
//! and their size. Matching is a multiset match: three blocks of 4 MiB from
//! one stack in A and five in B leave two in `grown`.
//!
//! ```no_run
//! use vramscope_analysis::{diff, DiffOptions, Liveness};
//! let a = vramscope_snapshot::load("before.pickle".as_ref(), &Default::default())?;
//! let b = vramscope_snapshot::load("after.pickle".as_ref(), &Default::default())?;
//! let live = |s: &vramscope_snapshot::Snapshot| {
//!     let t = s.trace(0).expect("device 0 has a trace");
//!     Liveness::new(s, 0).live_after(t, t.len().checked_sub(1))
//! };
//! let d = diff(&a, &live(&a), &b, &live(&b), &DiffOptions::default());
//! for g in &d.grown {
//!     println!("+{} bytes in {} blocks at {}", g.bytes, g.count, g.site);
//! }
//! # Ok::<(), vramscope_snapshot::SnapshotError>(())
//! ```
//!
//! Cost: one hash lookup per block, and the stack text is resolved once per
//! distinct stack of each snapshot, not per block; sorting the groups is
//! O(g log g).

use serde::Serialize;
use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::{FrameId, Snapshot, StackId};

use crate::liveness::LiveBlock;
use crate::sites::{frame_label, site_frame, stack_lines};

/// Label of blocks whose allocation recorded no stack.
pub const NO_STACK: &str = "<no stack recorded>";

/// Options of [`diff`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffOptions {
    /// Groups kept in `grown` and `shrunk`, and rows kept in `by_site`,
    /// largest first. The totals always count everything. Default 20.
    pub top: usize,
    /// Distinct sizes listed per group, most bytes first. Default 8.
    pub sizes_per_group: usize,
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions {
            top: 20,
            sizes_per_group: 8,
        }
    }
}

/// The comparison of the live blocks of A and B.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Diff {
    pub totals: DiffTotals,
    /// Blocks alive in B with no block of the same stack and size left in
    /// A, grouped by stack, most bytes first (at most `top`).
    pub grown: Vec<DiffGroup>,
    /// The same for A: alive in A and not in B.
    pub shrunk: Vec<DiffGroup>,
    /// Every allocation site's bytes in A and in B (all blocks, matched or
    /// not), largest change first (at most `top`).
    pub by_site: Vec<SiteDelta>,
}

impl Diff {
    /// Whether A and B hold the same blocks (by stack and size).
    pub fn is_empty(&self) -> bool {
        self.grown.is_empty() && self.shrunk.is_empty() && self.totals.delta == 0
    }
}

/// Figures over all blocks, before `top` cuts the lists.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DiffTotals {
    /// Bytes alive in A.
    pub a_bytes: u64,
    /// Bytes alive in B.
    pub b_bytes: u64,
    /// `b_bytes - a_bytes`.
    pub delta: i64,
    /// Blocks alive in A.
    pub a_blocks: u64,
    /// Blocks alive in B.
    pub b_blocks: u64,
    /// Blocks of B matched by a block of A (same stack, same size).
    pub matched_blocks: u64,
    /// Their bytes.
    pub matched_bytes: u64,
    /// Bytes of B's unmatched blocks (`grown`, all groups).
    pub grown_bytes: u64,
    pub grown_blocks: u64,
    /// Distinct stacks among them (the length of `grown` before `top`).
    pub grown_stacks: u64,
    /// Bytes of A's unmatched blocks (`shrunk`, all groups).
    pub shrunk_bytes: u64,
    pub shrunk_blocks: u64,
    pub shrunk_stacks: u64,
    /// Distinct allocation sites in A or B (the length of `by_site` before `top`).
    pub sites: u64,
}

/// Unmatched blocks of one stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DiffGroup {
    /// The allocation site (`file:line in function`), or `<no stack recorded>`.
    pub site: String,
    /// Bytes of the unmatched blocks.
    pub bytes: u64,
    /// Number of unmatched blocks.
    pub count: u64,
    /// Their sizes, most bytes first (at most `sizes_per_group`).
    pub sizes: Vec<SizeCount>,
    /// The stack, innermost frame first, noise removed.
    pub stack: Vec<String>,
}

/// `count` blocks of `size` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SizeCount {
    pub size: u64,
    pub count: u64,
}

/// One allocation site in A and in B.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteDelta {
    pub site: String,
    pub a_bytes: u64,
    pub b_bytes: u64,
    /// `b_bytes - a_bytes`.
    pub delta: i64,
    pub a_blocks: u64,
    pub b_blocks: u64,
}

fn signed(b: u64, a: u64) -> i64 {
    (b as i128 - a as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// Stack texts and site labels shared by both snapshots.
#[derive(Default)]
struct Keys {
    /// (file, line, name) → frame key.
    frames: HashMap<(Box<str>, u32, Box<str>), u32>,
    /// Frame keys of a stack → stack key.
    stacks: HashMap<Box<[u32]>, u32>,
    /// Site label → site key.
    sites: HashMap<String, u32>,
    site_labels: Vec<String>,
}

impl Keys {
    fn site(&mut self, label: String) -> u32 {
        if let Some(&k) = self.sites.get(&label) {
            return k;
        }
        let k = self.site_labels.len() as u32;
        self.sites.insert(label.clone(), k);
        self.site_labels.push(label);
        k
    }
}

/// One snapshot's view: its stack ids resolved to shared keys, lazily.
struct Side<'a> {
    snap: &'a Snapshot,
    frames: HashMap<FrameId, u32>,
    /// StackId → (stack key, site key).
    stacks: HashMap<StackId, (u32, u32)>,
    scratch: Vec<u32>,
}

impl<'a> Side<'a> {
    fn new(snap: &'a Snapshot) -> Self {
        Side {
            snap,
            frames: HashMap::default(),
            stacks: HashMap::default(),
            scratch: Vec::new(),
        }
    }

    fn key(&mut self, keys: &mut Keys, stack: StackId) -> (u32, u32) {
        if let Some(&k) = self.stacks.get(&stack) {
            return k;
        }
        let snap = self.snap;
        self.scratch.clear();
        for &fid in snap.stacks.get(stack) {
            let fk = *self.frames.entry(fid).or_insert_with(|| {
                let f = snap.frames.get(fid);
                let text: (Box<str>, u32, Box<str>) = (
                    snap.str(f.filename).into(),
                    f.line,
                    without_addresses(snap.str(f.name)).into(),
                );
                let next = keys.frames.len() as u32;
                *keys.frames.entry(text).or_insert(next)
            });
            self.scratch.push(fk);
        }
        let next = keys.stacks.len() as u32;
        let sk = match keys.stacks.get(self.scratch.as_slice()) {
            Some(&k) => k,
            None => {
                keys.stacks.insert(self.scratch.as_slice().into(), next);
                next
            }
        };
        let label = site_label(snap, stack);
        let site = keys.site(label);
        self.stacks.insert(stack, (sk, site));
        (sk, site)
    }
}

/// A frame name without the object addresses that differ from one process
/// to the next: the profiler names built-ins as
/// `<built-in method run_backward of torch._C._EngineBase object at 0x7f9c...>`.
fn without_addresses(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.contains(" at 0x") {
        return name.into();
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find(" at 0x") {
        out.push_str(&rest[..i]);
        let hex = &rest[i + 6..];
        let end = hex
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(hex.len());
        rest = &hex[end..];
    }
    out.push_str(rest);
    out.into()
}

/// The site of a stack as one line.
fn site_label(snap: &Snapshot, stack: StackId) -> String {
    match site_frame(snap, stack) {
        Some(fid) => frame_label(snap, fid),
        None => NO_STACK.to_owned(),
    }
}

/// Per (stack key, size): blocks in A and in B.
type Counts = HashMap<(u32, u64), [u64; 2]>;

/// Compare the blocks alive in A (`a_live`, of snapshot `a`) with those
/// alive in B. Identical inputs give an empty diff: no `grown`, no
/// `shrunk`, every `by_site` delta 0.
pub fn diff(
    a: &Snapshot,
    a_live: &[LiveBlock],
    b: &Snapshot,
    b_live: &[LiveBlock],
    opts: &DiffOptions,
) -> Diff {
    let mut keys = Keys::default();
    let mut counts: Counts = HashMap::default();
    // Per stack key: one StackId of it in A and in B, for labels and stacks.
    let mut example: HashMap<u32, [Option<StackId>; 2]> = HashMap::default();
    // Per site key: [A bytes, B bytes, A blocks, B blocks].
    let mut sites: HashMap<u32, [u64; 4]> = HashMap::default();
    let mut totals = DiffTotals::default();
    let mut sides = [Side::new(a), Side::new(b)];
    for (s, live) in [a_live, b_live].into_iter().enumerate() {
        for blk in live {
            let (sk, site) = sides[s].key(&mut keys, blk.stack);
            counts.entry((sk, blk.size)).or_insert([0, 0])[s] += 1;
            example.entry(sk).or_insert([None, None])[s].get_or_insert(blk.stack);
            let e = sites.entry(site).or_insert([0; 4]);
            e[s] += blk.size;
            e[2 + s] += 1;
        }
    }
    totals.a_bytes = a_live.iter().map(|b| b.size).sum();
    totals.b_bytes = b_live.iter().map(|b| b.size).sum();
    totals.a_blocks = a_live.len() as u64;
    totals.b_blocks = b_live.len() as u64;
    totals.delta = signed(totals.b_bytes, totals.a_bytes);

    // Unmatched blocks per stack key: [grown, shrunk] of (bytes, count, sizes).
    type Acc = (u64, u64, Vec<SizeCount>);
    let mut groups: [HashMap<u32, Acc>; 2] = Default::default();
    for (&(sk, size), &[na, nb]) in &counts {
        let matched = na.min(nb);
        totals.matched_blocks += matched;
        totals.matched_bytes += matched * size;
        for (g, extra) in [(0, nb - matched), (1, na - matched)] {
            if extra > 0 {
                let e = groups[g].entry(sk).or_insert((0, 0, Vec::new()));
                e.0 += extra * size;
                e.1 += extra;
                e.2.push(SizeCount { size, count: extra });
            }
        }
    }
    let [grown, shrunk] = groups;
    totals.grown_stacks = grown.len() as u64;
    totals.shrunk_stacks = shrunk.len() as u64;
    (totals.grown_bytes, totals.grown_blocks) = sum_groups(&grown);
    (totals.shrunk_bytes, totals.shrunk_blocks) = sum_groups(&shrunk);

    // Side 1 (B) holds the grown blocks, side 0 (A) the shrunk ones.
    let finish = |map: HashMap<u32, Acc>, side: usize| -> Vec<DiffGroup> {
        let snap = if side == 0 { a } else { b };
        let mut v: Vec<(u32, Acc)> = map.into_iter().collect();
        // Ties are broken by the stack's first appearance: stable for equal input.
        v.sort_unstable_by(|x, y| y.1 .0.cmp(&x.1 .0).then(x.0.cmp(&y.0)));
        v.truncate(opts.top);
        v.into_iter()
            .map(|(sk, (bytes, count, mut sizes))| {
                let stack = example[&sk][side].unwrap_or(StackId::NONE);
                sizes.sort_unstable_by(|x, y| {
                    (y.size * y.count)
                        .cmp(&(x.size * x.count))
                        .then(y.size.cmp(&x.size))
                });
                sizes.truncate(opts.sizes_per_group);
                DiffGroup {
                    site: site_label(snap, stack),
                    bytes,
                    count,
                    sizes,
                    stack: stack_lines(snap, stack),
                }
            })
            .collect()
    };
    let grown = finish(grown, 1);
    let shrunk = finish(shrunk, 0);

    totals.sites = sites.len() as u64;
    let mut by_site: Vec<SiteDelta> = sites
        .into_iter()
        .map(|(k, [ab, bb, an, bn])| SiteDelta {
            site: keys.site_labels[k as usize].clone(),
            a_bytes: ab,
            b_bytes: bb,
            delta: signed(bb, ab),
            a_blocks: an,
            b_blocks: bn,
        })
        .collect();
    by_site.sort_unstable_by(|x, y| {
        y.delta
            .unsigned_abs()
            .cmp(&x.delta.unsigned_abs())
            .then(y.a_bytes.max(y.b_bytes).cmp(&x.a_bytes.max(x.b_bytes)))
            .then_with(|| x.site.cmp(&y.site))
    });
    by_site.truncate(opts.top);
    Diff {
        totals,
        grown,
        shrunk,
        by_site,
    }
}

fn sum_groups(m: &HashMap<u32, (u64, u64, Vec<SizeCount>)>) -> (u64, u64) {
    m.values().fold((0, 0), |(b, n), g| (b + g.0, n + g.1))
}

#[cfg(test)]
mod tests {
    use super::without_addresses;

    #[test]
    fn object_addresses_are_not_part_of_a_frame() {
        assert_eq!(
            without_addresses(
                "<built-in method run_backward of torch._C._EngineBase object at 0x7f9cbb6c71a0>"
            ),
            "<built-in method run_backward of torch._C._EngineBase object>"
        );
        assert_eq!(without_addresses("forward"), "forward");
        assert_eq!(without_addresses("a at 0x1 b at 0xffz"), "a bz");
    }
}
