//! Interned tables: strings, frames and stacks become `u32` ids.
//!
//! A snapshot with a million events references a few hundred distinct frames;
//! storing each stack once and giving every event a [`StackId`] is what keeps
//! the model small and lets analyses group by identity instead of comparing
//! strings.

use crate::hash::FxHashMap as HashMap;

/// Id of an interned string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StrId(pub u32);

/// Id of an interned frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameId(pub u32);

/// Id of an interned stack (innermost frame first). [`StackId::NONE`] means
/// no stack was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackId(pub u32);

impl StackId {
    pub const NONE: StackId = StackId(u32::MAX);
    pub fn is_none(self) -> bool {
        self == StackId::NONE
    }
}

/// Unique strings.
#[derive(Default, Debug)]
pub struct StringTable {
    strings: Vec<Box<str>>,
    index: HashMap<Box<str>, StrId>,
}

impl StringTable {
    pub fn intern(&mut self, s: &str) -> StrId {
        if let Some(&id) = self.index.get(s) {
            return id;
        }
        let id = StrId(self.strings.len() as u32);
        self.strings.push(s.into());
        self.index.insert(s.into(), id);
        id
    }

    /// The id of `s` if it was interned.
    pub fn lookup(&self, s: &str) -> Option<StrId> {
        self.index.get(s).copied()
    }

    pub fn get(&self, id: StrId) -> &str {
        self.strings.get(id.0 as usize).map_or("", |s| s)
    }

    pub fn len(&self) -> usize {
        self.strings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }
}

/// One stack frame. Fields are ids into the snapshot's [`StringTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    pub filename: StrId,
    pub line: u32,
    pub name: StrId,
}

/// Unique frames.
#[derive(Default, Debug)]
pub struct FrameTable {
    frames: Vec<Frame>,
    index: HashMap<Frame, FrameId>,
}

impl FrameTable {
    pub fn intern(&mut self, f: Frame) -> FrameId {
        *self.index.entry(f).or_insert_with(|| {
            self.frames.push(f);
            FrameId(self.frames.len() as u32 - 1)
        })
    }

    pub fn get(&self, id: FrameId) -> Frame {
        self.frames[id.0 as usize]
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
}

/// Unique stacks, stored as one flat array of frame ids with offsets.
#[derive(Debug)]
pub struct StackTable {
    offsets: Vec<u32>,
    frames: Vec<FrameId>,
    index: HashMap<Box<[FrameId]>, StackId>,
}

impl Default for StackTable {
    fn default() -> Self {
        StackTable {
            offsets: vec![0],
            frames: Vec::new(),
            index: HashMap::default(),
        }
    }
}

impl StackTable {
    pub fn intern(&mut self, frames: &[FrameId]) -> StackId {
        if let Some(&id) = self.index.get(frames) {
            return id;
        }
        let id = StackId(self.offsets.len() as u32 - 1);
        self.frames.extend_from_slice(frames);
        self.offsets.push(self.frames.len() as u32);
        self.index.insert(frames.into(), id);
        id
    }

    /// Frames of a stack, innermost first; empty for [`StackId::NONE`].
    pub fn get(&self, id: StackId) -> &[FrameId] {
        let i = id.0 as usize;
        if i + 1 >= self.offsets.len() {
            return &[];
        }
        &self.frames[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
