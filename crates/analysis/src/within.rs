//! What within an allocation site made the memory: the model's module and
//! the line of the model's code.
//!
//! A site is the user's line (`out = model(x)`), which for a library model
//! owns nearly everything. Beneath it, each stack says which part of the
//! model allocated: the innermost frame of the model's own code that is not
//! PyTorch's (`modeling_llama.py:165 in forward`), and the innermost module
//! call a stack can name. Stacks show a module's code only as `forward`;
//! the recorder's module map (`vramscope.modules`: each module's path,
//! class, the lines of its `forward` and the module that calls it) says
//! whose `forward` it is. Repeated blocks run the same lines, so paths are
//! grouped over them (`model.layers[*].mlp`). A module whose code many
//! modules share (every `nn.Linear`) is named only when the module around
//! it tells which one; otherwise the part is named by that module around
//! it: a name is never a guess.

use serde::Serialize;
use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::{FrameId, ModuleCode, Snapshot, StackId};

use crate::backward_blocks::BackwardBlocks;
use crate::categories::phases::StackPhases;
use crate::categories::recompute::recomputes;
use crate::categories::Phase;
use crate::sites::{frame_label, frame_location, is_launcher, is_native, is_noise, is_third_party};

/// One part of a site's memory.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SitePart {
    /// The module's path, repeated blocks grouped (`model.layers[*].mlp`);
    /// the class for the outermost module. `None` where no module is named
    /// (PyTorch's own files have no module map).
    pub module: Option<String>,
    /// The module's class (`LlamaMLP`).
    pub class: Option<String>,
    /// The innermost line of the model's code beneath the site
    /// (`…/modeling_llama.py:165 in forward`), when there is one.
    pub line: Option<String>,
    /// Whether the part is a block's backward (its allocations have only
    /// the user's `backward()` line on their stacks; the recorder's spans
    /// say which block: [`crate::backward_blocks`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub backward: bool,
    /// Whether the part is a checkpointed block's forward made again
    /// inside backward (`torch.utils.checkpoint`'s recomputation on the
    /// stack): its label ends `, recomputed in backward`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub recomputed: bool,
    /// All in one phrase: `model.layers[*].mlp (LlamaMLP) at
    /// transformers/models/llama/modeling_llama.py:164 in forward`, the
    /// line's path from its package on; `model.layers[*]
    /// (LlamaDecoderLayer) in backward`; for what backward made before it
    /// reached the first marked module (`module` none), `after lm_head's
    /// output (the loss), in backward`.
    pub label: String,
    pub bytes: u64,
    pub count: u64,
}

/// The key of a part: the module named (an index into the names one
/// [`parts`] call has met) and the model's line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct PartKey {
    pub module: Option<u32>,
    pub line: Option<FrameId>,
    pub backward: bool,
    /// A checkpointed block's forward made again inside backward.
    pub recomputed: bool,
}

/// A block given to [`parts`]: its stack, bytes and `alloc` event (none
/// for a block from before the window).
pub type PartBlock = (StackId, u64, Option<u32>);

/// Modules of one class whose paths differ in one place, that a stack
/// cannot tell apart, are named together (`mlp.{gate_proj,up_proj,down_proj}`)
/// up to this many; more, and the module around them names the part.
const ALTERNATIVES: usize = 4;

/// The recorder's module map, indexed by file.
pub struct ModuleIndex<'a> {
    rows: &'a [ModuleCode],
    by_file: HashMap<&'a str, Vec<u32>>,
}

impl<'a> ModuleIndex<'a> {
    pub fn new(snap: &'a Snapshot) -> ModuleIndex<'a> {
        let rows = snap
            .source
            .recorder
            .as_ref()
            .map_or(&[][..], |r| r.modules.as_slice());
        ModuleIndex::from_rows(rows)
    }

    /// The index of a module map's rows.
    pub fn from_rows(rows: &'a [ModuleCode]) -> ModuleIndex<'a> {
        let mut by_file: HashMap<&str, Vec<u32>> = HashMap::default();
        for (i, r) in rows.iter().enumerate() {
            by_file.entry(r.file.as_str()).or_default().push(i as u32);
        }
        ModuleIndex { rows, by_file }
    }

    /// Rows whose `forward` holds this line.
    fn at(&self, file: &str, line: u32) -> Vec<u32> {
        self.by_file.get(file).map_or_else(Vec::new, |rows| {
            rows.iter()
                .copied()
                .filter(|&i| {
                    let r = &self.rows[i as usize];
                    r.first_line <= line && line <= r.last_line
                })
                .collect()
        })
    }

    pub fn row(&self, i: u32) -> &ModuleCode {
        &self.rows[i as usize]
    }

    /// The class of the module at `path` (grouped), if the map has it.
    fn class_of(&self, path: &str) -> Option<&str> {
        self.rows
            .iter()
            .find(|r| r.path == path)
            .map(|r| r.class.as_str())
    }
}

/// The part of a stack beneath its site frame (`site`; `None`: the stack
/// has none, and every frame is beneath).
pub fn part_of(
    snap: &Snapshot,
    modules: &ModuleIndex,
    stack: StackId,
    site: Option<FrameId>,
) -> (Option<(String, String)>, Option<FrameId>) {
    let frames = snap.stacks.get(stack);
    let end = site
        .and_then(|s| frames.iter().position(|&f| f == s))
        .unwrap_or(frames.len());
    let mut line = None;
    let mut chain: Vec<Vec<u32>> = Vec::new();
    // Every frame, the site's callers too: the modules around a module
    // tell which one it is.
    for (i, &fid) in frames.iter().enumerate() {
        let (file, lineno, name) = frame_location(snap, snap.frames.get(fid));
        if is_noise(&file, &name) || is_native(&file, &name) {
            continue;
        }
        if i < end && line.is_none() && is_third_party(&file) && !is_launcher(&file) {
            line = Some(fid);
        }
        let rows = modules.at(&file, lineno);
        if !rows.is_empty() {
            chain.push(rows);
        }
    }
    // The outermost module alone, with no line of the model's beneath the
    // site, says nothing the site does not.
    let module = resolve(modules, &chain).filter(|m| line.is_some() || !m.2);
    (module.map(|m| (m.0, m.1)), line)
}

/// The innermost module call the chain (innermost link first) names
/// without doubt, with its class. Links are read from the outermost in:
/// each link's rows are narrowed to those the modules named by the link
/// outside it call; a link left with one path names it, a link left with a
/// few of one class whose paths differ in one place names them together,
/// and any other link names nothing (the answer stays the module around it).
/// The third value says whether it is the outermost module.
fn resolve(modules: &ModuleIndex, chain: &[Vec<u32>]) -> Option<(String, String, bool)> {
    let mut outer: Vec<&str> = Vec::new();
    let mut answer = None;
    for link in chain.iter().rev() {
        let mut cands: Vec<&ModuleCode> = link.iter().map(|&r| modules.row(r)).collect();
        if !outer.is_empty() {
            let called: Vec<&ModuleCode> = cands
                .iter()
                .copied()
                .filter(|c| c.caller.as_deref().is_some_and(|p| outer.contains(&p)))
                .collect();
            if !called.is_empty() {
                cands = called;
            }
        }
        let mut paths: Vec<&str> = cands.iter().map(|c| c.path.as_str()).collect();
        paths.sort_unstable();
        paths.dedup();
        let Some(first) = cands.first().copied() else {
            continue;
        };
        if paths.len() == 1 {
            answer = Some((display(first), first.class.clone(), first.path.is_empty()));
        } else if cands.iter().all(|c| c.class == first.class) && paths.len() <= ALTERNATIVES {
            // In the order the model declares them, not sorted.
            let mut declared: Vec<&str> = cands.iter().map(|c| c.path.as_str()).collect();
            declared.dedup();
            if let Some(name) = together(&declared) {
                answer = Some((name, first.class.clone(), false));
            }
        }
        outer = paths;
    }
    answer
}

/// A module's name: its path, or its class for the outermost module.
fn display(m: &ModuleCode) -> String {
    if m.path.is_empty() {
        m.class.clone()
    } else {
        m.path.clone()
    }
}

/// Paths that differ in one place as one name:
/// `model.layers[*].mlp.{gate_proj,up_proj}`, `{encoder,decoder}.block[*]`.
fn together(paths: &[&str]) -> Option<String> {
    let split: Vec<Vec<&str>> = paths.iter().map(|p| p.split('.').collect()).collect();
    let n = split[0].len();
    if split.iter().any(|s| s.len() != n) {
        return None;
    }
    let differ: Vec<usize> = (0..n)
        .filter(|&i| split.iter().any(|s| s[i] != split[0][i]))
        .collect();
    let [at] = differ[..] else { return None };
    let mut names: Vec<&str> = split.iter().map(|s| s[at]).collect();
    names.dedup();
    let mut parts: Vec<String> = split[0].iter().map(|s| (*s).to_owned()).collect();
    parts[at] = format!("{{{}}}", names.join(","));
    Some(parts.join("."))
}

/// The parts of one site's blocks (`(stack, bytes, alloc event)`),
/// largest first, at most `top`; empty when no block has a part to name.
/// A block whose stack names no part but that a block's backward made
/// (`backward`) is that block's backward.
pub fn parts(
    snap: &Snapshot,
    modules: &ModuleIndex,
    backward: &BackwardBlocks,
    site: Option<FrameId>,
    blocks: impl Iterator<Item = PartBlock>,
    top: usize,
) -> Vec<SitePart> {
    // Module names (and classes) met so far; a key holds an index.
    let mut names: Vec<(String, String)> = Vec::new();
    let mut index = |m: (String, String)| match names.iter().position(|n| *n == m) {
        Some(i) => i as u32,
        None => {
            names.push(m);
            (names.len() - 1) as u32
        }
    };
    let mut of_stack: HashMap<StackId, PartKey> = HashMap::default();
    // Made when a block falls before the model's backward (most sites
    // have none): it holds a slot per frame and per stack.
    let mut phases: Option<StackPhases> = None;
    // The parts named for what came after the first marked module.
    let mut loss_parts: Vec<u32> = Vec::new();
    let mut of_block: HashMap<&str, u32> = HashMap::default();
    let mut groups: HashMap<PartKey, (u64, u64)> = HashMap::default();
    for (stack, bytes, event) in blocks {
        let mut key = *of_stack.entry(stack).or_insert_with(|| {
            let (module, line) = part_of(snap, modules, stack, site);
            PartKey {
                recomputed: (module.is_some() || line.is_some()) && recomputes(snap, stack),
                module: module.map(&mut index),
                line,
                backward: false,
            }
        });
        let before = event.and_then(|i| backward.before_the_model(i));
        if let Some(what) = before.filter(|_| {
            key.module.is_none()
                && phases
                    .get_or_insert_with(|| StackPhases::new(snap))
                    .of(snap, stack)
                    == Some(Phase::Backward)
        }) {
            // Made by autograd before it reached the first marked module:
            // for what the program computed from its output (the loss).
            let m = *of_block
                .entry(what)
                .or_insert_with(|| index((what.to_owned(), String::new())));
            key = PartKey {
                module: Some(m),
                line: None,
                backward: true,
                recomputed: false,
            };
            if !loss_parts.contains(&m) {
                loss_parts.push(m);
            }
        } else if key.module.is_none() {
            if let Some(block) = event.and_then(|i| backward.at(i)) {
                let m = *of_block.entry(block).or_insert_with(|| {
                    let class = modules.class_of(block).unwrap_or_default().to_owned();
                    index((block.to_owned(), class))
                });
                key = PartKey {
                    module: Some(m),
                    line: None,
                    backward: true,
                    recomputed: false,
                };
            }
        }
        if key == PartKey::default() {
            continue;
        }
        let g = groups.entry(key).or_insert((0, 0));
        g.0 += bytes;
        g.1 += 1;
    }
    let mut v: Vec<SitePart> = groups
        .into_iter()
        .map(|(key, (bytes, count))| {
            let named = key.module.map(|m| &names[m as usize]);
            let line = key.line.map(|f| frame_label(snap, f));
            let loss = key.module.is_some_and(|m| loss_parts.contains(&m));
            let text = match named {
                Some(n) if loss => n.0.clone(),
                Some(n) if key.backward => backward_label(modules, &n.0),
                _ => with_recomputed(
                    label(named.map(|n| (n.0.as_str(), n.1.as_str())), line.as_deref()),
                    key.recomputed,
                ),
            };
            SitePart {
                label: text,
                // What came after a module's output is no module of its own.
                module: named.filter(|_| !loss).map(|n| n.0.clone()),
                class: named.map(|n| n.1.clone()).filter(|c| !c.is_empty()),
                line,
                backward: key.backward,
                recomputed: key.recomputed,
                bytes,
                count,
            }
        })
        .collect();
    v.sort_unstable_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then_with(|| (&a.module, &a.line, a.backward).cmp(&(&b.module, &b.line, b.backward)))
    });
    v.truncate(top);
    v
}

/// The part of one stack as one phrase ([`SitePart::label`]), `None`
/// when the stack names none: for views that group by stack.
pub fn part_label(
    snap: &Snapshot,
    modules: &ModuleIndex,
    stack: StackId,
    site: Option<FrameId>,
) -> Option<String> {
    let (module, line) = part_of(snap, modules, stack, site);
    if module.is_none() && line.is_none() {
        return None;
    }
    let line = line.map(|f| frame_label(snap, f));
    Some(with_recomputed(
        label(
            module.as_ref().map(|m| (m.0.as_str(), m.1.as_str())),
            line.as_deref(),
        ),
        recomputes(snap, stack),
    ))
}

/// A part's phrase, `, recomputed in backward` added for a checkpointed
/// block's forward made again inside backward.
fn with_recomputed(text: String, recomputed: bool) -> String {
    if recomputed {
        format!("{text}, recomputed in backward")
    } else {
        text
    }
}

/// A block's backward as one phrase: `model.layers[*]
/// (LlamaDecoderLayer) in backward` (see [`crate::backward_blocks`]).
pub fn backward_label(modules: &ModuleIndex, block: &str) -> String {
    let class = modules.class_of(block).unwrap_or_default();
    format!("{} in backward", label(Some((block, class)), None))
}

/// A part as one phrase (see [`SitePart::label`]).
fn label(module: Option<(&str, &str)>, line: Option<&str>) -> String {
    let line = line.map(|l| {
        ["site-packages/", "dist-packages/"]
            .iter()
            .find_map(|k| l.rsplit_once(k).map(|(_, rest)| rest))
            .unwrap_or(l)
    });
    let module = module.map(|(m, c)| {
        if m == c || c.is_empty() {
            m.to_owned()
        } else {
            format!("{m} ({c})")
        }
    });
    match (module, line) {
        (Some(m), Some(l)) => format!("{m} at {l}"),
        (Some(m), None) => m,
        (None, Some(l)) => l.to_owned(),
        (None, None) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
        path: &str,
        class: &str,
        caller: Option<&str>,
        file: &str,
        lines: (u32, u32),
    ) -> ModuleCode {
        ModuleCode {
            path: path.into(),
            class: class.into(),
            caller: caller.map(str::to_owned),
            file: file.into(),
            first_line: lines.0,
            last_line: lines.1,
        }
    }

    /// An encoder and a decoder built of one block class, each block with
    /// two linears; a frame names its module only where the modules around
    /// it tell which.
    fn model() -> Vec<ModuleCode> {
        const LIN: &str = "torch/nn/modules/linear.py";
        vec![
            row("", "Seq2Seq", None, "m.py", (50, 60)),
            row("enc", "Encoder", Some(""), "m.py", (30, 40)),
            row("dec", "Decoder", Some(""), "m.py", (41, 49)),
            row("enc.blocks[*]", "Block", Some("enc"), "m.py", (10, 20)),
            row("dec.blocks[*]", "Block", Some("dec"), "m.py", (10, 20)),
            row(
                "enc.blocks[*].fc1",
                "Linear",
                Some("enc.blocks[*]"),
                LIN,
                (130, 134),
            ),
            row(
                "enc.blocks[*].fc2",
                "Linear",
                Some("enc.blocks[*]"),
                LIN,
                (130, 134),
            ),
            row(
                "dec.blocks[*].fc1",
                "Linear",
                Some("dec.blocks[*]"),
                LIN,
                (130, 134),
            ),
            row(
                "dec.blocks[*].fc2",
                "Linear",
                Some("dec.blocks[*]"),
                LIN,
                (130, 134),
            ),
            row("head", "Linear", Some(""), LIN, (130, 134)),
        ]
    }

    fn chain(idx: &ModuleIndex, frames: &[(&str, u32)]) -> Vec<Vec<u32>> {
        frames
            .iter()
            .map(|&(f, l)| idx.at(f, l))
            .filter(|r| !r.is_empty())
            .collect()
    }

    #[test]
    fn the_modules_around_a_frame_tell_whose_code_it_is() {
        let rows = model();
        let idx = ModuleIndex::from_rows(&rows);
        let lin = ("torch/nn/modules/linear.py", 134);
        // A linear inside a decoder block: one of two, named together.
        let c = chain(&idx, &[lin, ("m.py", 15), ("m.py", 45), ("m.py", 55)]);
        assert_eq!(
            resolve(&idx, &c),
            Some(("dec.blocks[*].{fc1,fc2}".into(), "Linear".into(), false))
        );
        // The block's own line, called by the encoder: the encoder's blocks.
        let c = chain(&idx, &[("m.py", 15), ("m.py", 35), ("m.py", 55)]);
        assert_eq!(
            resolve(&idx, &c),
            Some(("enc.blocks[*]".into(), "Block".into(), false))
        );
        // The head, called from the model's own forward: named alone.
        let c = chain(&idx, &[lin, ("m.py", 58)]);
        assert_eq!(
            resolve(&idx, &c),
            Some(("head".into(), "Linear".into(), false))
        );
        // The outermost module is named by its class.
        let c = chain(&idx, &[("m.py", 58)]);
        assert_eq!(
            resolve(&idx, &c),
            Some(("Seq2Seq".into(), "Seq2Seq".into(), true))
        );
        // A block's line with nothing around it: encoder or decoder, both
        // named (one would be a guess).
        let c = chain(&idx, &[("m.py", 15)]);
        assert_eq!(
            resolve(&idx, &c),
            Some(("{enc,dec}.blocks[*]".into(), "Block".into(), false))
        );
        // Five linears of three places: nothing names them together; the
        // answer is the module around them.
        let c = chain(&idx, &[lin, ("m.py", 15)]);
        assert_eq!(
            resolve(&idx, &c),
            Some(("{enc,dec}.blocks[*]".into(), "Block".into(), false))
        );
        // No module map (PyTorch's own files): nothing.
        let none = ModuleIndex::from_rows(&[]);
        assert_eq!(resolve(&none, &chain(&none, &[lin, ("m.py", 15)])), None);
    }

    #[test]
    fn paths_differing_in_one_place_are_named_together() {
        assert_eq!(
            together(&["a.mlp.up", "a.mlp.down"]).as_deref(),
            Some("a.mlp.{up,down}")
        );
        assert_eq!(
            together(&["enc.fc", "dec.fc"]).as_deref(),
            Some("{enc,dec}.fc")
        );
        assert_eq!(together(&["fc1", "fc2"]).as_deref(), Some("{fc1,fc2}"));
        assert_eq!(together(&["enc.fc1", "dec.fc2"]), None);
        assert_eq!(together(&["a.b", "a.b.c"]), None);
    }

    #[test]
    fn a_label_shows_the_line_from_its_package_on() {
        assert_eq!(
            label(
                Some(("model.layers[*].mlp", "LlamaMLP")),
                Some("/v/lib/python3.11/site-packages/transformers/models/llama/modeling_llama.py:164 in forward")
            ),
            "model.layers[*].mlp (LlamaMLP) at transformers/models/llama/modeling_llama.py:164 in forward"
        );
        assert_eq!(label(Some(("Net", "Net")), None), "Net");
        assert_eq!(
            label(None, Some("/home/u/m.py:3 in f")),
            "/home/u/m.py:3 in f"
        );
    }
}
