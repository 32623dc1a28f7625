//! The decoded document: a compact arena of values.
//!
//! Real snapshots hold millions of small dicts, so the representation is
//! chosen for memory first: a [`Value`] is one packed `u64` (4-bit tag,
//! 60-bit payload), container items live in one flat pool, and strings live
//! in one byte arena. Containers are referred to by [`ContainerId`]; a memoised
//! container that the pickle references twice (through BINGET) is *the same*
//! id both times, so the memo identity survives decoding and can be used as
//! an interning key by consumers.

use std::fmt;

pub(crate) const TAG_BITS: u32 = 4;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;

pub(crate) const T_NONE: u64 = 0;
pub(crate) const T_BOOL: u64 = 1;
pub(crate) const T_INT: u64 = 2; // inline, 60-bit signed
pub(crate) const T_WIDE: u64 = 3; // i64 that does not fit 60 bits, index into `wide`
pub(crate) const T_BIG: u64 = 4; // arbitrary precision, index into `bigs`
pub(crate) const T_FLOAT: u64 = 5;
pub(crate) const T_STR: u64 = 6;
pub(crate) const T_BYTES: u64 = 7;
pub(crate) const T_LIST: u64 = 8;
pub(crate) const T_TUPLE: u64 = 9;
pub(crate) const T_DICT: u64 = 10;
pub(crate) const T_SET: u64 = 11;
pub(crate) const T_FROZENSET: u64 = 12;
pub(crate) const T_OPAQUE: u64 = 13;
pub(crate) const T_BYTEARRAY: u64 = 14;

pub(crate) const INLINE_MIN: i64 = -(1 << 59);
pub(crate) const INLINE_MAX: i64 = (1 << 59) - 1;

/// A packed handle to a decoded value. Cheap to copy; resolve it with
/// [`Document::get`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Value(pub(crate) u64);

impl Value {
    pub const NONE: Value = Value(T_NONE);
    /// Internal marker for an unwritten memo slot; never reachable from a document.
    pub(crate) const VACANT: Value = Value(15);

    #[inline]
    pub(crate) fn new(tag: u64, payload: u64) -> Value {
        Value(tag | (payload << TAG_BITS))
    }
    #[inline]
    pub(crate) fn tag(self) -> u64 {
        self.0 & TAG_MASK
    }
    #[inline]
    pub(crate) fn index(self) -> usize {
        (self.0 >> TAG_BITS) as usize
    }
    #[inline]
    pub(crate) fn bool(b: bool) -> Value {
        Value::new(T_BOOL, b as u64)
    }
    /// The container this value refers to, if it is a list, tuple, dict or set.
    #[inline]
    pub fn container(self) -> Option<ContainerId> {
        match self.tag() {
            T_LIST | T_TUPLE | T_DICT | T_SET | T_FROZENSET => {
                Some(ContainerId(self.index() as u32))
            }
            _ => None,
        }
    }
    /// The dict this value refers to, if it is one (a tag test only).
    #[inline(always)]
    pub fn dict(self) -> Option<ContainerId> {
        (self.tag() == T_DICT).then_some(ContainerId(self.index() as u32))
    }

    /// The string-arena index, if this is a string: a cheap interning key.
    /// Equal ids mean equal strings; strings of up to 15 bytes are interned
    /// by content, longer ones keep the pickle's memo identity.
    #[inline]
    pub fn str_id(self) -> Option<u32> {
        (self.tag() == T_STR).then_some(self.index() as u32)
    }
    /// The integer, when it is stored inline (|i| < 2^59, nearly every
    /// integer in a snapshot); a tag test with no document lookup.
    #[inline(always)]
    pub fn as_inline_int(self) -> Option<i64> {
        (self.tag() == T_INT).then_some((self.0 as i64) >> TAG_BITS)
    }

    #[inline]
    pub fn is_none(self) -> bool {
        self.tag() == T_NONE
    }

    /// Whether this is something the pickle asked to construct or call
    /// (an [`Opaque`]): a tag test with no document lookup.
    #[inline(always)]
    pub fn is_opaque(self) -> bool {
        self.tag() == T_OPAQUE
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Value(tag={}, payload={})",
            self.tag(),
            self.0 >> TAG_BITS
        )
    }
}

/// Identity of a container (list, tuple, dict, set, frozenset).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContainerId(pub u32);

/// Kinds of containers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContainerKind {
    List,
    Tuple,
    /// Items are stored as alternating key, value.
    Dict,
    Set,
    FrozenSet,
}

impl Container {
    /// Items as stored in the pool: values only for a shaped dict.
    #[inline]
    pub(crate) fn stored_len(&self) -> u32 {
        if self.kind() == ContainerKind::Dict && self.shape() != NO_SHAPE {
            self.len / 2
        } else {
            self.len
        }
    }
}

impl ContainerKind {
    pub(crate) fn tag(self) -> u64 {
        match self {
            ContainerKind::List => T_LIST,
            ContainerKind::Tuple => T_TUPLE,
            ContainerKind::Dict => T_DICT,
            ContainerKind::Set => T_SET,
            ContainerKind::FrozenSet => T_FROZENSET,
        }
    }
}

/// Something the pickle asked to *construct or call*. vramscope never does
/// either; the request is kept as an inert description.
#[derive(Clone, Debug, PartialEq)]
pub enum Opaque {
    /// `GLOBAL` / `STACK_GLOBAL`: a reference to `module.name`.
    Global { module: String, name: String },
    /// `REDUCE`: `callable(*args)`, not called.
    Reduce { callable: Value, args: Value },
    /// `NEWOBJ` / `NEWOBJ_EX` / `INST` / `OBJ`: `cls.__new__(cls, *args)`, not run.
    NewObj { class: Value, args: Value },
    /// `BUILD`: `obj.__setstate__(state)`, not run.
    Build { object: Value, state: Value },
    /// `PERSID` / `BINPERSID`: an external object reference.
    PersistentId(Value),
    /// `EXT1/2/4`: an entry of the copyreg extension registry.
    Extension(u32),
    /// `NEXT_BUFFER`: an out-of-band buffer that is not in the file.
    OutOfBandBuffer,
}

/// A borrowed view of a value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Val<'d> {
    None,
    Bool(bool),
    Int(i64),
    /// An integer that does not fit `i64`: little-endian two's complement.
    BigInt(&'d [u8]),
    Float(f64),
    Str(&'d str),
    Bytes(&'d [u8]),
    ByteArray(&'d [u8]),
    List(ContainerId),
    Tuple(ContainerId),
    Dict(ContainerId),
    Set(ContainerId),
    FrozenSet(ContainerId),
    Opaque(&'d Opaque),
}

impl Val<'_> {
    /// Python-ish type name, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Val::None => "None",
            Val::Bool(_) => "bool",
            Val::Int(_) | Val::BigInt(_) => "int",
            Val::Float(_) => "float",
            Val::Str(_) => "str",
            Val::Bytes(_) => "bytes",
            Val::ByteArray(_) => "bytearray",
            Val::List(_) => "list",
            Val::Tuple(_) => "tuple",
            Val::Dict(_) => "dict",
            Val::Set(_) => "set",
            Val::FrozenSet(_) => "frozenset",
            Val::Opaque(_) => "object (not constructed)",
        }
    }
}

#[derive(Clone, Copy)]
pub(crate) struct Container {
    /// Number of items (for dicts: 2 × number of pairs).
    pub(crate) len: u32,
    /// Where the items are: `NO_CHUNK` while empty; the start of their one
    /// run of the pool; or, once [`Container::chunked`], the
    /// first [`Chunk`]. The builder keeps the last chunk of the few chunked
    /// containers aside, so a container needs no field for it.
    pub(crate) first: u32,
    /// The kind (low 3 bits), whether the items are chunked (bit 3) and the
    /// shape (the rest): 12 bytes a container rather than 20, 134 MB less
    /// on a 10M-event snapshot.
    ///
    /// The shape: for a dict filled by one batch, its key sequence, shared
    /// with every dict of the same keys (its chunk then holds the values
    /// only). Snapshot entries are a million dicts with the same memoised
    /// keys, so this halves their storage. `NO_SHAPE` otherwise.
    kind_shape: u32,
}

const KIND_BITS: u32 = 3;
const CHUNKED: u32 = 1 << KIND_BITS;
const SHAPE_SHIFT: u32 = KIND_BITS + 1;
const _: () = assert!(std::mem::size_of::<Container>() == 12);

impl Container {
    pub(crate) fn new(kind: ContainerKind) -> Container {
        let k = match kind {
            ContainerKind::List => 0,
            ContainerKind::Tuple => 1,
            ContainerKind::Dict => 2,
            ContainerKind::Set => 3,
            ContainerKind::FrozenSet => 4,
        };
        Container {
            len: 0,
            first: NO_CHUNK,
            kind_shape: k | (NO_SHAPE << SHAPE_SHIFT),
        }
    }
    #[inline]
    pub(crate) fn kind(&self) -> ContainerKind {
        match self.kind_shape & ((1 << KIND_BITS) - 1) {
            0 => ContainerKind::List,
            1 => ContainerKind::Tuple,
            2 => ContainerKind::Dict,
            3 => ContainerKind::Set,
            _ => ContainerKind::FrozenSet,
        }
    }
    #[inline]
    pub(crate) fn shape(&self) -> u32 {
        self.kind_shape >> SHAPE_SHIFT
    }
    #[inline]
    pub(crate) fn set_shape(&mut self, shape: u32) {
        self.kind_shape = (self.kind_shape & ((1 << SHAPE_SHIFT) - 1)) | (shape << SHAPE_SHIFT);
    }
    /// Whether `first` names a chunk rather than the start of one run.
    #[inline]
    pub(crate) fn chunked(&self) -> bool {
        self.kind_shape & CHUNKED != 0
    }
    #[inline]
    pub(crate) fn set_chunked(&mut self, chunked: bool) {
        if chunked {
            self.kind_shape |= CHUNKED;
        } else {
            self.kind_shape &= !CHUNKED;
        }
    }
    /// Whether the items are one run of the pool starting at `first`.
    #[inline]
    pub(crate) fn inline_run(&self) -> bool {
        !self.chunked() && self.first != NO_CHUNK
    }
}

/// Shape values fit the 28 bits beside the kind and the chunked flag.
pub(crate) const NO_SHAPE: u32 = (1 << (32 - SHAPE_SHIFT)) - 1;
/// In a list's shape: the items are all dicts, stored as bare
/// container ids in `refs`. Frame lists (20-100 references to shared frame
/// dicts per event) and the trace list itself take half the memory so.
pub(crate) const PACKED: u32 = NO_SHAPE - 1;
/// Distinct shapes kept at most; dicts beyond it are stored plainly.
pub(crate) const MAX_SHAPES: usize = 1 << 16;
/// Strings up to this many bytes are interned by content: snapshots repeat
/// `"N/A"` and `""` once per event as distinct objects, and identity of
/// immutable strings carries no meaning.
pub(crate) const SHORT_STR: usize = 15;

/// A run of a container's items in the flat pool. Most containers are filled
/// by one SETITEMS/APPENDS and have exactly one chunk.
#[derive(Clone, Copy)]
pub(crate) struct Chunk {
    pub(crate) start: u32,
    pub(crate) len: u32,
    pub(crate) next: u32,
}

pub(crate) const NO_CHUNK: u32 = u32::MAX;
// A container that is not chunked holds its items in one run of the pool
// that starts at `first`, with no [`Chunk`] record. Nearly every container is
// filled by one SETITEMS/APPENDS, so this saves a 12-byte chunk per
// container: a tenth of a big snapshot's document.
/// Packed lists of at most this many items are shared by content (see
/// the builder's `push_refs`); longer ones are traces, not stacks.
pub(crate) const SHARE_MAX: usize = 512;
/// Distinct packed lists remembered for sharing at most, so a file of
/// all-different stacks does not grow the index without bound.
pub(crate) const SHARE_INDEX_MAX: usize = 1 << 20;

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

/// A decoded pickle. Build one with [`crate::parse`] or [`DocumentBuilder`].
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

/// Error from [`DocumentBuilder`] when the arena would outgrow 32-bit indices.
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
