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

impl Default for StackId {
    /// No stack.
    fn default() -> Self {
        StackId::NONE
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
///
/// The index maps a hash of the frame ids to the first stack with that hash;
/// `same_hash` chains later ones. Comparing against the flat array itself
/// avoids keeping a second copy of every stack as a map key.
#[derive(Debug)]
pub struct StackTable {
    offsets: Vec<u32>,
    frames: Vec<FrameId>,
    index: HashMap<u64, u32>,
    same_hash: Vec<u32>,
}

const NO_NEXT: u32 = u32::MAX;

impl Default for StackTable {
    fn default() -> Self {
        StackTable {
            offsets: vec![0],
            frames: Vec::new(),
            index: HashMap::default(),
            same_hash: Vec::new(),
        }
    }
}

/// Two frame ids per multiply; stacks are long (20-100 frames) and hashed
/// once per distinct frames list in the file.
fn hash_frames(frames: &[FrameId]) -> u64 {
    let mut h = frames.len() as u64;
    let mut pairs = frames.chunks_exact(2);
    for p in &mut pairs {
        let w = (p[0].0 as u64) | ((p[1].0 as u64) << 32);
        let m = ((h ^ w) as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h = (m as u64) ^ ((m >> 64) as u64);
    }
    if let [last] = pairs.remainder() {
        let m = ((h ^ last.0 as u64) as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h = (m as u64) ^ ((m >> 64) as u64);
    }
    h
}

impl StackTable {
    pub fn intern(&mut self, frames: &[FrameId]) -> StackId {
        let h = hash_frames(frames);
        let mut cand = self.index.get(&h).copied().unwrap_or(NO_NEXT);
        let mut last = NO_NEXT;
        while cand != NO_NEXT {
            if self.get(StackId(cand)) == frames {
                return StackId(cand);
            }
            last = cand;
            cand = self.same_hash[cand as usize];
        }
        let id = self.offsets.len() as u32 - 1;
        self.frames.extend_from_slice(frames);
        self.offsets.push(self.frames.len() as u32);
        self.same_hash.push(NO_NEXT);
        if last == NO_NEXT {
            self.index.insert(h, id);
        } else {
            self.same_hash[last as usize] = id;
        }
        StackId(id)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_are_interned_by_content() {
        let mut t = StackTable::default();
        let a = t.intern(&[FrameId(1), FrameId(2), FrameId(3)]);
        let b = t.intern(&[FrameId(1), FrameId(2)]);
        let c = t.intern(&[FrameId(1), FrameId(2), FrameId(3)]);
        assert_eq!(a, c);
        assert_ne!(a, b);
        assert_eq!(t.get(b), &[FrameId(1), FrameId(2)]);
        assert_eq!(t.len(), 2);
        assert!(t.get(StackId::NONE).is_empty());
    }
}
