//! Stacks through code `torch.compile` generated, given the source lines
//! that code computes.
//!
//! A compiled model allocates in modules Inductor writes
//! (`/tmp/torchinductor_<user>/xx/c….py:92 in call`). vramscope's recorder
//! writes which lines of each module's `call` compute which traced source
//! stack (`vramscope.generated`, from Inductor's own line maps). Here every
//! stack with a frame in such a module gets that source stack inserted
//! just inside the generated frame, as if the model's code had run
//! eagerly: every analysis (sites, leaks, the module map, the report)
//! then sees the model's lines. The generated frame stays, outside them.

use crate::hash::FxHashMap as HashMap;
use crate::intern::{Frame, FrameId, StackId, StackTable};
use crate::model::Snapshot;

/// Put the source stacks into every stack through generated code; returns
/// how many generated frames were given one.
pub(crate) fn expand(snap: &mut Snapshot) -> usize {
    let generated = match snap.source.recorder.as_ref() {
        Some(rec) if !rec.generated.is_empty() => rec.generated.clone(),
        _ => return 0,
    };
    let by_file: HashMap<&str, usize> = generated
        .iter()
        .enumerate()
        .map(|(i, g)| (g.file.as_str(), i))
        .collect();
    // Generated frame -> the source frames of its line, innermost first.
    let mut source: HashMap<FrameId, Vec<Frame>> = HashMap::default();
    for i in 0..snap.frames.len() as u32 {
        let f = snap.frames.get(FrameId(i));
        let Some(&g) = by_file.get(snap.strings.get(f.filename)) else {
            continue;
        };
        let code = &generated[g];
        let at = code.lines.partition_point(|&start| start <= f.line);
        let Some(stack) = at.checked_sub(1).map(|k| &code.frames[k]) else {
            continue;
        };
        if stack.is_empty() {
            continue;
        }
        let frames = stack
            .iter()
            .map(|(file, line, name)| Frame {
                filename: snap.strings.intern(file),
                line: *line,
                name: snap.strings.intern(name),
            })
            .collect();
        source.insert(FrameId(i), frames);
    }
    if source.is_empty() {
        return 0;
    }
    let source: HashMap<FrameId, Vec<FrameId>> = source
        .into_iter()
        .map(|(g, fr)| (g, fr.into_iter().map(|f| snap.frames.intern(f)).collect()))
        .collect();
    let mut table = StackTable::default();
    let mut buf = Vec::new();
    let remap: Vec<StackId> = (0..snap.stacks.len() as u32)
        .map(|s| {
            buf.clear();
            for &f in snap.stacks.get(StackId(s)) {
                if let Some(src) = source.get(&f) {
                    buf.extend_from_slice(src);
                }
                buf.push(f);
            }
            table.intern(&buf)
        })
        .collect();
    let map = |s: StackId| {
        if s.is_none() {
            s
        } else {
            remap.get(s.0 as usize).copied().unwrap_or(StackId::NONE)
        }
    };
    snap.stacks = table;
    for t in &mut snap.traces {
        for s in &mut t.stack {
            *s = map(*s);
        }
        for (_, s) in &mut t.forward_stack {
            *s = map(*s);
        }
    }
    for b in &mut snap.blocks {
        b.stack = map(b.stack);
    }
    for seg in &mut snap.segments {
        seg.stack = map(seg.stack);
    }
    source.len()
}
