//! The trees behind the memory flamegraphs: the blocks alive at a moment,
//! merged by call stack into a tree whose frames are as wide as the bytes
//! allocated beneath them ([`flame_tree`]), and two such trees merged frame
//! by frame for a comparison ([`diff_tree`]). `vramscope_report` draws them.
//!
//! ```no_run
//! use vramscope_analysis::flame::flame_tree;
//! use vramscope_analysis::Liveness;
//! let snap = vramscope_snapshot::load("snap.pickle".as_ref(), &Default::default())?;
//! let liveness = Liveness::new(&snap, 0);
//! let trace = snap.trace(0).expect("device 0 has a trace");
//! let live = liveness.live_after(trace, liveness.peak_index);
//! let tree = flame_tree(&snap, &live);
//! println!("{} bytes alive at the peak, {} frames deep", tree.bytes, tree.depth());
//! # Ok::<(), vramscope_snapshot::SnapshotError>(())
//! ```

use crate::sites::{frame_location, is_library, is_native, is_noise};
use crate::LiveBlock;
use serde::Serialize;
use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::{FrameId, Snapshot, StackId};

mod diff;

pub use diff::{diff_tree, merge_trees, DiffNode};

/// Frames deeper than this (after noise removal) are cut at the innermost
/// end: real stacks have at most a few hundred frames, and a hostile file
/// must not be able to exhaust the renderer's recursion.
pub const MAX_DEPTH: usize = 1000;

/// Label of the frame that gathers blocks allocated without a stack.
pub const NO_STACK: &str = "<no stack recorded>";

/// What kind of code a frame is; decides its colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameKind {
    /// The tree's root (`all`).
    Root,
    /// Python in the user's own code.
    User,
    /// Python in a library (PyTorch, site-packages, the standard library).
    Library,
    /// C++ or interpreter frames.
    Native,
    /// Blocks whose allocation recorded no stack.
    NoStack,
}

/// One frame of the merged tree.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FlameNode {
    /// Short text for the box: `forward (model.py:39)`.
    pub name: String,
    /// Full text for the tooltip: `/home/u/model.py:39 in forward`.
    pub label: String,
    pub kind: FrameKind,
    /// Bytes of the blocks allocated at or beneath this frame.
    pub bytes: u64,
    /// Number of those blocks.
    pub count: u64,
    /// Callees, widest first.
    pub children: Vec<FlameNode>,
}

impl FlameNode {
    /// Bytes allocated by this frame itself rather than by a callee.
    pub fn self_bytes(&self) -> u64 {
        self.bytes
            .saturating_sub(self.children.iter().map(|c| c.bytes).sum())
    }

    /// Depth of the deepest frame below (0 for a leaf).
    pub fn depth(&self) -> usize {
        self.children
            .iter()
            .map(|c| c.depth() + 1)
            .max()
            .unwrap_or(0)
    }

    /// Visit every node with its depth, parents before children.
    pub fn walk<'a>(&'a self, f: &mut dyn FnMut(&'a FlameNode, usize)) {
        fn go<'a>(n: &'a FlameNode, d: usize, f: &mut dyn FnMut(&'a FlameNode, usize)) {
            f(n, d);
            for c in &n.children {
                go(c, d + 1, f);
            }
        }
        go(self, 0, f);
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Frame(FrameId),
    NoStack,
}

/// A node under construction; children are found through `index`.
struct Building {
    key: Key,
    bytes: u64,
    count: u64,
    children: Vec<usize>,
    index: HashMap<Key, usize>,
}

/// A C++ function name without its parameter list, which is most of its
/// length and rarely what tells frames apart in a narrow box.
fn strip_params(name: &str) -> &str {
    let s = name.trim_end().trim_end_matches(" const");
    if !s.ends_with(')') {
        return name;
    }
    let mut depth = 0i32;
    for (i, c) in s.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    return if i == 0 { name } else { &s[..i] };
                }
            }
            _ => {}
        }
    }
    name
}

/// Short name, full label and kind of a frame.
fn describe(snap: &Snapshot, fid: FrameId) -> (String, String, FrameKind, bool) {
    let (file, line, func) = frame_location(snap, snap.frames.get(fid));
    let noise = is_noise(&file, &func);
    if is_native(&file, &func) {
        let label = match (func.is_empty(), file.is_empty() || file == "??") {
            (true, _) => file.clone(),
            (false, true) => func.clone(),
            (false, false) => format!("{func} at {file}:{line}"),
        };
        let name = if func.is_empty() {
            file.clone()
        } else {
            strip_params(&func).to_owned()
        };
        return (name, label, FrameKind::Native, noise);
    }
    let base = file.rsplit(['/', '\\']).next().unwrap_or(&file);
    let name = format!("{func} ({base}:{line})");
    let label = format!("{file}:{line} in {func}");
    let kind = if is_library(&file) {
        FrameKind::Library
    } else {
        FrameKind::User
    };
    (name, label, kind, noise)
}

/// Merge `blocks` by stack, outermost frame at the root, noise frames
/// removed. The root is `all`; its bytes are the blocks' total.
pub fn flame_tree(snap: &Snapshot, blocks: &[LiveBlock]) -> FlameNode {
    // Thousands of blocks share a few hundred stacks: walk each stack once.
    let mut by_stack: HashMap<StackId, (u64, u64)> = HashMap::default();
    for b in blocks {
        let e = by_stack.entry(b.stack).or_insert((0, 0));
        e.0 += b.size;
        e.1 += 1;
    }
    let mut stacks: Vec<(StackId, (u64, u64))> = by_stack.into_iter().collect();
    stacks.sort_unstable_by_key(|s| s.0);
    let mut frames: HashMap<FrameId, (String, String, FrameKind, bool)> = HashMap::default();
    let new = |key| Building {
        key,
        bytes: 0,
        count: 0,
        children: Vec::new(),
        index: HashMap::default(),
    };
    let mut nodes = vec![new(Key::NoStack)];
    let mut path: Vec<Key> = Vec::new();
    for (stack, (b, n)) in stacks {
        path.clear();
        if stack.is_none() {
            path.push(Key::NoStack);
        } else {
            for &fid in snap.stacks.get(stack).iter().rev() {
                let d = frames.entry(fid).or_insert_with(|| describe(snap, fid));
                if !d.3 {
                    path.push(Key::Frame(fid));
                }
            }
            path.truncate(MAX_DEPTH);
        }
        nodes[0].bytes += b;
        nodes[0].count += n;
        let mut cur = 0;
        for &k in &path {
            let next = match nodes[cur].index.get(&k) {
                Some(&i) => i,
                None => {
                    let i = nodes.len();
                    nodes.push(new(k));
                    nodes[cur].index.insert(k, i);
                    nodes[cur].children.push(i);
                    i
                }
            };
            nodes[next].bytes += b;
            nodes[next].count += n;
            cur = next;
        }
    }
    finish(&nodes, 0, &frames)
}

type Described = HashMap<FrameId, (String, String, FrameKind, bool)>;

fn finish(nodes: &[Building], i: usize, frames: &Described) -> FlameNode {
    let n = &nodes[i];
    let (name, label, kind) = match (i, n.key) {
        (0, _) => ("all".to_owned(), "all".to_owned(), FrameKind::Root),
        (_, Key::NoStack) => (NO_STACK.to_owned(), NO_STACK.to_owned(), FrameKind::NoStack),
        (_, Key::Frame(fid)) => match frames.get(&fid) {
            Some(d) => (d.0.clone(), d.1.clone(), d.2),
            None => (String::new(), String::new(), FrameKind::Native),
        },
    };
    let mut children: Vec<FlameNode> = n
        .children
        .iter()
        .map(|&c| finish(nodes, c, frames))
        .collect();
    children.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.label.cmp(&b.label)));
    FlameNode {
        name,
        label,
        kind,
        bytes: n.bytes,
        count: n.count,
        children,
    }
}
