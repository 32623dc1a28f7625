//! Allocation stacks rebuilt from the spans around each `[memory]` event.
//!
//! A trace stores no stack with an allocation, but it stores the span of
//! every operator (`cpu_op`) and, when recorded `with_stack=True`, of every
//! Python call (`python_function`) on each thread. The spans of the
//! allocating thread that contain the allocation's time (`ts <= t < ts +
//! dur`) are its call chain; innermost first, they are its stack, so that
//! allocation sites are named by the same rules as a snapshot's. Older
//! traces give an operator its Python stack as a `Call stack` argument
//! instead: the chain stops at the innermost operator that has one, and
//! continues with that stack.

use crate::hash::FxHashMap;
use crate::intern::{Frame, FrameId, FrameTable, StackId, StringTable};

use super::parse::Parsed;

/// [`super::parse::Op::call_stack`] of an operator without one.
pub(super) const NO_CALL_STACK: u32 = u32::MAX;

/// Frames of operators and Python calls, each name parsed and interned once.
#[derive(Default)]
pub(super) struct OpFrames {
    python: FxHashMap<Box<str>, FrameId>,
    ops: FxHashMap<Box<str>, FrameId>,
    call_stacks: FxHashMap<Box<str>, u32>,
    /// Frames of every `Call stack`, innermost first, one after the other;
    /// stack `i` is `call_frames[call_offsets[i]..call_offsets[i + 1]]`.
    call_frames: Vec<FrameId>,
    call_offsets: Vec<u32>,
}

impl OpFrames {
    /// The frame of a span named `name` (as a `FrameId`'s number).
    pub(super) fn frame(
        &mut self,
        strings: &mut StringTable,
        frames: &mut FrameTable,
        name: &str,
        python: bool,
    ) -> u32 {
        let map = if python {
            &mut self.python
        } else {
            &mut self.ops
        };
        if let Some(&f) = map.get(name) {
            return f.0;
        }
        let f = if python {
            python_frame(strings, name)
        } else {
            // An operator (`aten::addmm`) is a name without a file.
            Frame {
                filename: strings.intern(""),
                line: 0,
                name: strings.intern(name),
            }
        };
        let id = frames.intern(f);
        map.insert(name.into(), id);
        id.0
    }

    /// The index of a `Call stack` (`file.py(12): f;file.py(40): g`,
    /// innermost first).
    pub(super) fn call_stack(
        &mut self,
        strings: &mut StringTable,
        frames: &mut FrameTable,
        text: &str,
    ) -> u32 {
        if let Some(&i) = self.call_stacks.get(text) {
            return i;
        }
        if self.call_offsets.is_empty() {
            self.call_offsets.push(0);
        }
        for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let f = python_frame(strings, part);
            self.call_frames.push(frames.intern(f));
        }
        self.call_offsets.push(self.call_frames.len() as u32);
        let i = (self.call_offsets.len() - 2) as u32;
        self.call_stacks.insert(text.into(), i);
        i
    }

    fn call_frames(&self, i: u32) -> &[FrameId] {
        let i = i as usize;
        match (self.call_offsets.get(i), self.call_offsets.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.call_frames[a as usize..b as usize],
            _ => &[],
        }
    }
}

/// `path/to/file.py(123): func` as file, line and function; other names
/// (`nn.Module: Linear_0`, `<built-in method addmm ...>`) are name-only.
pub(super) fn python_frame(strings: &mut StringTable, name: &str) -> Frame {
    let located = name.split_once("): ").and_then(|(loc, func)| {
        let (path, line) = loc.rsplit_once('(')?;
        Some((path, line.parse::<u32>().ok()?, func))
    });
    match located {
        Some((path, line, func)) => Frame {
            filename: strings.intern(path),
            line,
            name: strings.intern(func),
        },
        None => Frame {
            filename: strings.intern(""),
            line: 0,
            name: strings.intern(name),
        },
    }
}

/// Give every `[memory]` event the stack of the spans enclosing it on its
/// thread.
///
/// One sweep per thread over its spans (by start, outer first) and its
/// events (by time), keeping the chain of open spans; consecutive events
/// under the same chain share one interned stack.
pub(super) fn rebuild(p: &mut Parsed) {
    if p.ops.is_empty() || p.mem.is_empty() {
        return;
    }
    p.ops
        .sort_unstable_by_key(|o| (o.thread, o.start_ns, std::cmp::Reverse(o.end_ns)));
    let mut order: Vec<u32> = (0..p.mem.len() as u32).collect();
    order.sort_unstable_by_key(|&i| {
        let m = &p.mem[i as usize];
        (m.thread, m.ts_ns, i)
    });
    let ops = &p.ops;
    let mut chain: Vec<usize> = Vec::new();
    let mut buf: Vec<FrameId> = Vec::new();
    let mut start = 0;
    while start < order.len() {
        let thread = p.mem[order[start] as usize].thread;
        let end = start + order[start..].partition_point(|&i| p.mem[i as usize].thread == thread);
        let mut j = ops.partition_point(|o| o.thread < thread);
        let op_end = ops.partition_point(|o| o.thread <= thread);
        chain.clear();
        // The chain changes with every push and pop; a stack stays valid
        // while the chain is unchanged and no span of it has ended.
        let (mut version, mut built_at, mut valid_until) = (0u64, u64::MAX, i64::MIN);
        let mut stack = StackId::NONE;
        for &m in &order[start..end] {
            let t = p.mem[m as usize].ts_ns;
            while j < op_end && ops[j].start_ns <= t {
                while chain
                    .last()
                    .is_some_and(|&k| ops[k].end_ns <= ops[j].start_ns)
                {
                    chain.pop();
                    version += 1;
                }
                chain.push(j);
                version += 1;
                j += 1;
            }
            while chain.last().is_some_and(|&k| ops[k].end_ns <= t) {
                chain.pop();
                version += 1;
            }
            if version != built_at || t >= valid_until {
                buf.clear();
                valid_until = i64::MAX;
                // Innermost first. A span that ended under one still open
                // (spans that overlap without nesting) is left out.
                for &k in chain.iter().rev() {
                    let o = &ops[k];
                    if o.end_ns <= t {
                        continue;
                    }
                    valid_until = valid_until.min(o.end_ns);
                    buf.push(FrameId(o.frame));
                    if o.call_stack != NO_CALL_STACK {
                        buf.extend_from_slice(p.op_frames.call_frames(o.call_stack));
                        break;
                    }
                }
                stack = if buf.is_empty() {
                    StackId::NONE
                } else {
                    p.stacks.intern(&buf)
                };
                built_at = version;
            }
            p.mem[m as usize].stack = stack;
        }
        start = end;
    }
}
