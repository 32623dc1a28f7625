//! The decoded document: its arenas, and the reads a consumer makes of it
//! (a value resolved, a container's items, a dict's pairs, a string key
//! looked up). What a value is and how a container is laid out in the
//! arenas are in `value.rs`; `builder.rs` writes them.

use crate::value::*;

/// One construct that was skipped rather than executed.
#[derive(Clone, Debug, PartialEq)]
pub struct Skipped {
    /// Byte offset of the opcode.
    pub offset: u64,
    /// What the pickle asked for, e.g. `call os.system(...)`.
    pub what: String,
}

/// Set when the input ended before the STOP opcode.
#[derive(Clone, Debug, PartialEq)]
pub struct Truncation {
    /// Where the input ended.
    pub offset: u64,
    /// Why parsing stopped there.
    pub reason: String,
}

/// A decoded pickle. Build one with [`crate::parse`] or [`DocumentBuilder`](crate::DocumentBuilder).
#[derive(Default)]
pub struct Document {
    pub(crate) root: Option<Value>,
    pub(crate) wide: Vec<i64>,
    pub(crate) bigs: Vec<Box<[u8]>>,
    pub(crate) floats: Vec<f64>,
    pub(crate) str_data: String,
    pub(crate) str_ends: Vec<u64>,
    pub(crate) bytes_data: Vec<u8>,
    pub(crate) bytes_ends: Vec<u64>,
    pub(crate) containers: Vec<Container>,
    pub(crate) chunks: Vec<Chunk>,
    pub(crate) items: Vec<Value>,
    /// Items of packed lists: dict container ids.
    pub(crate) refs: Vec<u32>,
    /// Key sequences of shaped dicts: `shapes[i]` is a range of `shape_keys`.
    pub(crate) shapes: Vec<(u32, u32)>,
    pub(crate) shape_keys: Vec<Value>,
    pub(crate) opaques: Vec<Opaque>,
    /// Executable constructs that were skipped, in file order (at most
    /// [`MAX_SKIPPED_RECORDS`] kept; `skipped_count` has the total).
    pub skipped: Vec<Skipped>,
    pub skipped_count: u64,
    /// `Some` when the input was cut short and the root was recovered.
    pub truncated: Option<Truncation>,
    /// Protocol from the PROTO opcode (0 if absent).
    pub protocol: u8,
}

/// Cap on the number of skipped-construct records kept in a document.
pub const MAX_SKIPPED_RECORDS: usize = 1000;

/// Error from [`DocumentBuilder`](crate::DocumentBuilder) when the arena would outgrow 32-bit indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacityError(pub &'static str);

impl Document {
    /// The top-level value.
    pub fn root(&self) -> Value {
        self.root.unwrap_or(Value::NONE)
    }

    /// Resolve a handle.
    #[inline(always)]
    pub fn get(&self, v: Value) -> Val<'_> {
        let i = v.index();
        match v.tag() {
            T_NONE => Val::None,
            T_BOOL => Val::Bool(i != 0),
            T_INT => Val::Int((v.0 as i64) >> TAG_BITS),
            T_WIDE => Val::Int(self.wide[i]),
            T_BIG => Val::BigInt(&self.bigs[i]),
            T_FLOAT => Val::Float(self.floats[i]),
            T_STR => Val::Str(self.str_at(i)),
            T_BYTES => Val::Bytes(self.bytes_at(i)),
            T_BYTEARRAY => Val::ByteArray(self.bytes_at(i)),
            T_LIST => Val::List(ContainerId(i as u32)),
            T_TUPLE => Val::Tuple(ContainerId(i as u32)),
            T_DICT => Val::Dict(ContainerId(i as u32)),
            T_SET => Val::Set(ContainerId(i as u32)),
            T_FROZENSET => Val::FrozenSet(ContainerId(i as u32)),
            _ => Val::Opaque(&self.opaques[i]),
        }
    }

    #[inline]
    fn str_at(&self, i: usize) -> &str {
        let start = if i == 0 {
            0
        } else {
            self.str_ends[i - 1] as usize
        };
        &self.str_data[start..self.str_ends[i] as usize]
    }

    #[inline]
    fn bytes_at(&self, i: usize) -> &[u8] {
        let start = if i == 0 {
            0
        } else {
            self.bytes_ends[i - 1] as usize
        };
        &self.bytes_data[start..self.bytes_ends[i] as usize]
    }

    /// The string behind `v`, if it is one.
    #[inline]
    pub fn as_str(&self, v: Value) -> Option<&str> {
        v.str_id().map(|i| self.str_at(i as usize))
    }

    /// The string with arena index `id` (see [`Value::str_id`]).
    pub fn str_by_id(&self, id: u32) -> Option<&str> {
        ((id as usize) < self.str_ends.len()).then(|| self.str_at(id as usize))
    }

    /// The integer behind `v` if it fits `i64` (bools count as 0/1, as in Python).
    #[inline]
    pub fn as_int(&self, v: Value) -> Option<i64> {
        match self.get(v) {
            Val::Int(i) => Some(i),
            Val::Bool(b) => Some(b as i64),
            _ => None,
        }
    }

    /// Number of items in a container (pairs for dicts).
    pub fn len(&self, c: ContainerId) -> usize {
        let k = &self.containers[c.0 as usize];
        match k.kind() {
            ContainerKind::Dict => k.len as usize / 2,
            _ => k.len as usize,
        }
    }

    pub fn is_empty(&self, c: ContainerId) -> bool {
        self.containers[c.0 as usize].len == 0
    }

    pub fn kind(&self, c: ContainerId) -> ContainerKind {
        self.containers[c.0 as usize].kind()
    }

    /// Number of containers in the document (ids are `0..container_count`).
    pub fn container_count(&self) -> usize {
        self.containers.len()
    }

    /// Number of strings in the arena (ids from [`Value::str_id`] are below it).
    pub fn string_count(&self) -> usize {
        self.str_ends.len()
    }

    /// Items of a list, tuple or set in order. For dicts this yields keys and
    /// values alternately; prefer [`Document::pairs`].
    pub fn items(&self, c: ContainerId) -> Items<'_> {
        let k = &self.containers[c.0 as usize];
        let mut it = self.raw_items(k);
        it.keys = self.shape_of(k);
        it
    }

    fn shape_of(&self, k: &Container) -> &[Value] {
        if k.shape() == NO_SHAPE || k.shape() == PACKED {
            return &[];
        }
        let (start, len) = self.shapes[k.shape() as usize];
        &self.shape_keys[start as usize..(start + len) as usize]
    }

    /// The stored items as they are in the pool (values only for a shaped dict).
    fn raw_items(&self, k: &Container) -> Items<'_> {
        let packed = k.shape() == PACKED;
        let mut it = Items {
            doc: self,
            cur: &[],
            refs: &[],
            packed,
            next_chunk: k.first,
            keys: &[],
            pending: None,
        };
        if k.chunked() {
            return it;
        }
        it.next_chunk = NO_CHUNK;
        if k.first != NO_CHUNK {
            let run = k.first as usize..(k.first + k.stored_len()) as usize;
            if packed {
                it.refs = &self.refs[run];
            } else {
                it.cur = &self.items[run];
            }
        }
        it
    }

    /// Key/value pairs of a dict, in insertion order (duplicates kept; the
    /// last one wins in Python, see [`Document::dict_get`]).
    pub fn pairs(&self, c: ContainerId) -> Pairs<'_> {
        let k = &self.containers[c.0 as usize];
        let keys = self.shape_of(k);
        Pairs {
            shaped: !keys.is_empty(),
            keys: keys.iter(),
            inner: self.raw_items(k),
        }
    }

    /// A dict stored with a shared key sequence: its shape id and its
    /// values, in the order of [`Document::shape_keys`]. Entries of a list
    /// of same-keyed dicts (a snapshot's trace) share one shape, so a reader
    /// can resolve the keys once per shape rather than once per dict. `None`
    /// for any other container.
    #[inline]
    pub fn shaped_dict(&self, c: ContainerId) -> Option<(u32, &[Value])> {
        let k = &self.containers[c.0 as usize];
        // A shaped dict is filled in one batch (a second one makes it
        // plain), so its values are one run of the pool.
        (k.kind() == ContainerKind::Dict
            && k.shape() != NO_SHAPE
            && k.shape() != PACKED
            && k.inline_run())
        .then(|| {
            let start = k.first as usize;
            (
                k.shape(),
                &self.items[start..start + k.stored_len() as usize],
            )
        })
    }

    /// The keys of shape `shape` (from [`Document::shaped_dict`]), in order.
    pub fn shape_keys(&self, shape: u32) -> &[Value] {
        self.shapes
            .get(shape as usize)
            .map_or(&[], |&(start, len)| {
                &self.shape_keys[start as usize..(start + len) as usize]
            })
    }

    /// Look a string key up in a dict (last occurrence wins, as in Python).
    pub fn dict_get(&self, c: ContainerId, key: &str) -> Option<Value> {
        let mut found = None;
        for (k, v) in self.pairs(c) {
            if self.as_str(k) == Some(key) {
                found = Some(v);
            }
        }
        found
    }

    /// A key for the storage of a list of dicts held in one run of the pool:
    /// lists with equal keys have the same items (the builder shares the run
    /// of lists filled with the same dicts), so a consumer can decode such a
    /// list once for all of them, where the container id would make it
    /// decode each list. `None` for any other container.
    #[inline]
    pub fn run_key(&self, c: ContainerId) -> Option<u64> {
        let k = &self.containers[c.0 as usize];
        (k.shape() == PACKED && k.inline_run())
            .then(|| ((k.first as u64) << 32) | k.stored_len() as u64)
    }

    /// Rough heap size in bytes, for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.items.capacity() * 8
            + self.chunks.capacity() * std::mem::size_of::<Chunk>()
            + self.containers.capacity() * std::mem::size_of::<Container>()
            + self.str_data.capacity()
            + self.str_ends.capacity() * 8
            + self.bytes_data.capacity()
            + self.bytes_ends.capacity() * 8
            + self.shape_keys.capacity() * 8
            + self.refs.capacity() * 4
            + self.shapes.capacity() * 8
    }
}

/// Iterator over a container's items.
pub struct Items<'d> {
    doc: &'d Document,
    /// Rest of the current chunk.
    cur: &'d [Value],
    /// Rest of the current chunk of a packed list.
    refs: &'d [u32],
    packed: bool,
    next_chunk: u32,
    /// Keys still to interleave, for a shaped dict.
    keys: &'d [Value],
    pending: Option<Value>,
}

impl Iterator for Items<'_> {
    type Item = Value;
    #[inline]
    fn next(&mut self) -> Option<Value> {
        if let Some(v) = self.pending.take() {
            return Some(v);
        }
        if self.packed {
            loop {
                if let Some((&id, rest)) = self.refs.split_first() {
                    self.refs = rest;
                    return Some(Value::new(T_DICT, id as u64));
                }
                if self.next_chunk == NO_CHUNK {
                    return None;
                }
                let ch = &self.doc.chunks[self.next_chunk as usize];
                self.refs = &self.doc.refs[ch.start as usize..(ch.start + ch.len) as usize];
                self.next_chunk = ch.next;
            }
        }
        loop {
            if let Some((&v, rest)) = self.cur.split_first() {
                self.cur = rest;
                if let Some((&k, keys)) = self.keys.split_first() {
                    self.keys = keys;
                    self.pending = Some(v);
                    return Some(k);
                }
                return Some(v);
            }
            if self.next_chunk == NO_CHUNK {
                return None;
            }
            let ch = &self.doc.chunks[self.next_chunk as usize];
            self.cur = &self.doc.items[ch.start as usize..(ch.start + ch.len) as usize];
            self.next_chunk = ch.next;
        }
    }
}

/// Iterator over a dict's pairs.
pub struct Pairs<'d> {
    shaped: bool,
    keys: std::slice::Iter<'d, Value>,
    inner: Items<'d>,
}

impl Iterator for Pairs<'_> {
    type Item = (Value, Value);
    #[inline]
    fn next(&mut self) -> Option<(Value, Value)> {
        if self.shaped {
            let k = *self.keys.next()?;
            let v = self.inner.next()?;
            return Some((k, v));
        }
        let k = self.inner.next()?;
        let v = self.inner.next()?;
        Some((k, v))
    }
}
