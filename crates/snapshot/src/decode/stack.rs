//! Frames and stacks: interned by the pickle memo identity, so a frame dict
//! shared by a million entries is decoded (and any repair in it counted)
//! once.

use vramscope_pickle::{Val, Value};

use super::{Decoder, PathErr, R};
use crate::intern::{Frame, FrameId, StackId};
use crate::keys::Key;
use crate::repair::Seg;

/// What a frame's `line` must be: PyTorch writes lines as `int`; a C++
/// writer has been seen writing "no line" as `2**64 - 1`, and `-1` means
/// the same.
const LINE: &str = "a line number (0 to 4294967295)";

impl Decoder<'_> {
    /// A frames list (`None` or empty: no stack). Frames that are not
    /// dicts are left out; a value that is not a list is no stack.
    pub(super) fn stack(&mut self, v: Value) -> StackId {
        let c = match self.doc.get(v) {
            Val::List(c) | Val::Tuple(c) => c,
            Val::None => return StackId::NONE,
            _ => {
                let e = PathErr::new("a list of frames", self.found(v));
                self.repair(e, "read as no stack");
                return StackId::NONE;
            }
        };
        let run = self.doc.run_key(c);
        let cached = match run {
            Some(r) => self.run_map.get(&r).copied(),
            None => self.obj_map.get(&c.0).map(|&s| StackId(s)),
        };
        if let Some(s) = cached {
            return s;
        }
        let doc = self.doc;
        let mut buf = std::mem::take(&mut self.frame_buf);
        buf.clear();
        self.path.push(Seg::Idx(0));
        for (i, f) in doc.items(c).enumerate() {
            // Shared frame dicts are resolved once; later references are a
            // lookup by memo identity.
            if let Some(fc) = f.dict() {
                if let Some(&m) = self.obj_map.get(&fc.0) {
                    buf.push(FrameId(m));
                    continue;
                }
            }
            self.set_index(i);
            if let Some(id) = self.frame(f) {
                buf.push(id);
            }
        }
        self.path.pop();
        let id = if buf.is_empty() {
            StackId::NONE
        } else {
            self.stacks.intern(&buf)
        };
        self.frame_buf = buf;
        match run {
            Some(r) => self.run_map.insert(r, id),
            None => self.obj_map.insert(c.0, id.0).map(StackId),
        };
        id
    }

    /// One frame; `None` (counted) when it is neither a dict nor a string.
    fn frame(&mut self, v: Value) -> Option<FrameId> {
        let c = match self.doc.get(v) {
            Val::Dict(c) => c,
            // `forward_frames` and some producers give plain strings.
            Val::Str(_) => {
                let name = self.str_or_empty(v, "name");
                return Some(self.frames.intern(Frame {
                    filename: self.empty,
                    line: 0,
                    name,
                }));
            }
            _ => {
                let e = PathErr::new("a frame dict", self.found(v));
                self.repair(e, "frame left out");
                return None;
            }
        };
        if let Some(&cached) = self.obj_map.get(&c.0) {
            return Some(FrameId(cached));
        }
        let mut f = Frame {
            filename: self.empty,
            line: 0,
            name: self.empty,
        };
        for (k, val) in self.doc.pairs(c) {
            if self.is_opaque(val) {
                continue;
            }
            match self.key(k) {
                Key::Filename => f.filename = self.str_or_empty(val, "filename"),
                Key::Name => f.name = self.str_or_empty(val, "name"),
                Key::Line => match self.line(val) {
                    Ok(l) => f.line = l,
                    Err(e) => self.repair(e.key("line"), "read as no line"),
                },
                _ => {}
            }
        }
        let id = self.frames.intern(f);
        self.obj_map.insert(c.0, id.0);
        Some(id)
    }

    fn line(&self, v: Value) -> R<u32> {
        let i = self.int(v).map_err(|_| PathErr::new(LINE, self.found(v)))?;
        u32::try_from(i).map_err(|_| PathErr::new(LINE, self.found(v)))
    }
}
