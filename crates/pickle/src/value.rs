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

use crate::hash::FxHashMap;

const TAG_BITS: u32 = 4;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;

const T_NONE: u64 = 0;
const T_BOOL: u64 = 1;
const T_INT: u64 = 2; // inline, 60-bit signed
const T_WIDE: u64 = 3; // i64 that does not fit 60 bits, index into `wide`
const T_BIG: u64 = 4; // arbitrary precision, index into `bigs`
const T_FLOAT: u64 = 5;
const T_STR: u64 = 6;
const T_BYTES: u64 = 7;
const T_LIST: u64 = 8;
const T_TUPLE: u64 = 9;
const T_DICT: u64 = 10;
const T_SET: u64 = 11;
const T_FROZENSET: u64 = 12;
const T_OPAQUE: u64 = 13;
const T_BYTEARRAY: u64 = 14;

const INLINE_MIN: i64 = -(1 << 59);
const INLINE_MAX: i64 = (1 << 59) - 1;

/// A packed handle to a decoded value. Cheap to copy; resolve it with
/// [`Document::get`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Value(u64);

impl Value {
    pub const NONE: Value = Value(T_NONE);
    /// Internal marker for an unwritten memo slot; never reachable from a document.
    pub(crate) const VACANT: Value = Value(15);

    #[inline]
    fn new(tag: u64, payload: u64) -> Value {
        Value(tag | (payload << TAG_BITS))
    }
    #[inline]
    fn tag(self) -> u64 {
        self.0 & TAG_MASK
    }
    #[inline]
    fn index(self) -> usize {
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

impl ContainerKind {
    fn tag(self) -> u64 {
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
struct Container {
    kind: ContainerKind,
    /// Number of items (for dicts: 2 × number of pairs).
    len: u32,
    /// First and last chunk, or `NO_CHUNK`.
    first: u32,
    last: u32,
    /// For a dict filled by one batch: its key sequence, shared with every
    /// dict of the same keys (its chunk then holds the values only).
    /// Snapshot entries are a million dicts with the same memoised keys, so
    /// this halves their storage. `NO_SHAPE` otherwise.
    shape: u32,
}

const NO_SHAPE: u32 = u32::MAX;
/// In a list's `shape` field: the items are all dicts, stored as bare
/// container ids in `refs`. Frame lists (20-100 references to shared frame
/// dicts per event) and the trace list itself take half the memory so.
const PACKED: u32 = u32::MAX - 1;
/// Distinct shapes kept at most; dicts beyond it are stored plainly.
const MAX_SHAPES: usize = 1 << 16;
/// Strings up to this many bytes are interned by content: snapshots repeat
/// `"N/A"` and `""` once per event as distinct objects, and identity of
/// immutable strings carries no meaning.
const SHORT_STR: usize = 15;

/// A run of a container's items in the flat pool. Most containers are filled
/// by one SETITEMS/APPENDS and have exactly one chunk.
#[derive(Clone, Copy)]
struct Chunk {
    start: u32,
    len: u32,
    next: u32,
}

const NO_CHUNK: u32 = u32::MAX;

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
    wide: Vec<i64>,
    bigs: Vec<Box<[u8]>>,
    floats: Vec<f64>,
    str_data: String,
    str_ends: Vec<u64>,
    bytes_data: Vec<u8>,
    bytes_ends: Vec<u64>,
    containers: Vec<Container>,
    chunks: Vec<Chunk>,
    items: Vec<Value>,
    /// Items of packed lists: dict container ids.
    refs: Vec<u32>,
    /// Key sequences of shaped dicts: `shapes[i]` is a range of `shape_keys`.
    shapes: Vec<(u32, u32)>,
    shape_keys: Vec<Value>,
    opaques: Vec<Opaque>,
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
        match k.kind {
            ContainerKind::Dict => k.len as usize / 2,
            _ => k.len as usize,
        }
    }

    pub fn is_empty(&self, c: ContainerId) -> bool {
        self.containers[c.0 as usize].len == 0
    }

    pub fn kind(&self, c: ContainerId) -> ContainerKind {
        self.containers[c.0 as usize].kind
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
        Items {
            doc: self,
            cur: &[],
            refs: &[],
            packed: k.shape == PACKED,
            next_chunk: k.first,
            keys: self.shape_of(k),
            pending: None,
        }
    }

    fn shape_of(&self, k: &Container) -> &[Value] {
        if k.shape == NO_SHAPE || k.shape == PACKED {
            return &[];
        }
        let (start, len) = self.shapes[k.shape as usize];
        &self.shape_keys[start as usize..(start + len) as usize]
    }

    /// The stored items as they are in the pool (values only for a shaped dict).
    fn raw_items(&self, k: &Container) -> Items<'_> {
        Items {
            doc: self,
            cur: &[],
            refs: &[],
            packed: k.shape == PACKED,
            next_chunk: k.first,
            keys: &[],
            pending: None,
        }
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

/// Builds a [`Document`]. The pickle VM uses it, and so can other readers
/// (JSON) that want to hand the same model to the snapshot decoder.
#[derive(Default)]
pub struct DocumentBuilder {
    pub(crate) doc: Document,
    shape_index: FxHashMap<Box<[Value]>, u32>,
    short_strs: FxHashMap<u128, u32>,
    scratch: Vec<Value>,
}

fn index_u32(n: usize, what: &'static str) -> Result<u64, CapacityError> {
    if n as u64 >= (1u64 << 32) - 1 {
        Err(CapacityError(what))
    } else {
        Ok(n as u64)
    }
}

impl DocumentBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder with room reserved for a pickle of `input_len` bytes.
    /// Reserving avoids repeated reallocation of the big arenas; pages that
    /// are never written are never made resident, so over-estimating costs
    /// address space only.
    pub fn for_input(input_len: usize) -> Self {
        const MAX_ITEMS: usize = 1 << 28;
        let mut b = Self::default();
        b.doc.items.reserve(MAX_ITEMS.min(input_len / 2));
        b.doc.containers.reserve(MAX_ITEMS.min(input_len / 24));
        b.doc.chunks.reserve(MAX_ITEMS.min(input_len / 24));
        b.doc.refs.reserve(MAX_ITEMS.min(input_len / 4));
        b
    }

    pub fn int(&mut self, i: i64) -> Value {
        if (INLINE_MIN..=INLINE_MAX).contains(&i) {
            Value((i << TAG_BITS) as u64 | T_INT)
        } else {
            self.doc.wide.push(i);
            Value::new(T_WIDE, (self.doc.wide.len() - 1) as u64)
        }
    }

    /// An integer from little-endian two's complement bytes of any length.
    #[inline]
    pub fn int_from_le_bytes(&mut self, bytes: &[u8]) -> Value {
        if bytes.is_empty() {
            return self.int(0);
        }
        if bytes.len() <= 8 {
            let neg = bytes[bytes.len() - 1] & 0x80 != 0;
            let mut buf = if neg { [0xffu8; 8] } else { [0u8; 8] };
            buf[..bytes.len()].copy_from_slice(bytes);
            return self.int(i64::from_le_bytes(buf));
        }
        // Trim redundant sign-extension bytes, then see whether it fits i64.
        let neg = bytes[bytes.len() - 1] & 0x80 != 0;
        let pad = if neg { 0xff } else { 0 };
        let mut n = bytes.len();
        while n > 1 && bytes[n - 1] == pad && (bytes[n - 2] & 0x80 != 0) == neg {
            n -= 1;
        }
        if n <= 8 {
            return self.int_from_le_bytes(&bytes[..n]);
        }
        self.doc.bigs.push(bytes[..n].into());
        Value::new(T_BIG, (self.doc.bigs.len() - 1) as u64)
    }

    pub fn float(&mut self, f: f64) -> Value {
        self.doc.floats.push(f);
        Value::new(T_FLOAT, (self.doc.floats.len() - 1) as u64)
    }

    pub fn bool(&mut self, b: bool) -> Value {
        Value::bool(b)
    }

    pub fn str(&mut self, s: &str) -> Result<Value, CapacityError> {
        let short = (s.len() <= SHORT_STR).then(|| {
            let mut key = [0u8; 16];
            key[..s.len()].copy_from_slice(s.as_bytes());
            key[15] = s.len() as u8;
            u128::from_le_bytes(key)
        });
        if let Some(&id) = short.and_then(|k| self.short_strs.get(&k)) {
            return Ok(Value::new(T_STR, id as u64));
        }
        let id = index_u32(self.doc.str_ends.len(), "strings")?;
        self.doc.str_data.push_str(s);
        self.doc.str_ends.push(self.doc.str_data.len() as u64);
        if let Some(k) = short {
            self.short_strs.insert(k, id as u32);
        }
        Ok(Value::new(T_STR, id))
    }

    pub fn bytes(&mut self, b: &[u8], bytearray: bool) -> Result<Value, CapacityError> {
        let id = index_u32(self.doc.bytes_ends.len(), "byte strings")?;
        self.doc.bytes_data.extend_from_slice(b);
        self.doc.bytes_ends.push(self.doc.bytes_data.len() as u64);
        Ok(Value::new(
            if bytearray { T_BYTEARRAY } else { T_BYTES },
            id,
        ))
    }

    pub fn opaque(&mut self, o: Opaque) -> Value {
        self.doc.opaques.push(o);
        Value::new(T_OPAQUE, (self.doc.opaques.len() - 1) as u64)
    }

    /// A new empty container.
    pub fn container(&mut self, kind: ContainerKind) -> Result<Value, CapacityError> {
        let id = index_u32(self.doc.containers.len(), "containers")?;
        self.doc.containers.push(Container {
            kind,
            len: 0,
            first: NO_CHUNK,
            last: NO_CHUNK,
            shape: NO_SHAPE,
        });
        Ok(Value::new(kind.tag(), id))
    }

    /// A new container holding `items`.
    pub fn container_with(
        &mut self,
        kind: ContainerKind,
        items: &[Value],
    ) -> Result<Value, CapacityError> {
        let v = self.container(kind)?;
        if let Some(c) = v.container() {
            self.extend(c, items)?;
        }
        Ok(v)
    }

    /// Append items (for dicts: alternating keys and values).
    pub fn extend(&mut self, c: ContainerId, items: &[Value]) -> Result<(), CapacityError> {
        if items.is_empty() {
            return Ok(());
        }
        let k = self.doc.containers[c.0 as usize];
        if k.kind == ContainerKind::List {
            let all_dicts = items.iter().all(|v| v.tag() == T_DICT);
            if k.shape == PACKED {
                if all_dicts {
                    return self.push_refs(c, items);
                }
                return self.make_plain_and_extend(c, items);
            }
            if k.len == 0 && all_dicts {
                self.doc.containers[c.0 as usize].shape = PACKED;
                return self.push_refs(c, items);
            }
        }
        if k.kind == ContainerKind::Dict {
            if k.shape != NO_SHAPE {
                return self.make_plain_and_extend(c, items);
            }
            if k.len == 0 && items.len() >= 4 && items.len().is_multiple_of(2) {
                if let Some(shape) = self.shape_for(items) {
                    self.scratch.clear();
                    self.scratch.extend(items.iter().skip(1).step_by(2));
                    let values = std::mem::take(&mut self.scratch);
                    let r = self.push_raw(c, &values);
                    self.scratch = values;
                    r?;
                    let k = &mut self.doc.containers[c.0 as usize];
                    k.shape = shape;
                    k.len = items.len() as u32;
                    return Ok(());
                }
            }
        }
        self.push_raw(c, items)
    }

    /// The shape id of the keys of `pairs`, registered if new.
    fn shape_for(&mut self, pairs: &[Value]) -> Option<u32> {
        self.scratch.clear();
        self.scratch.extend(pairs.iter().step_by(2));
        if let Some(&id) = self.shape_index.get(self.scratch.as_slice()) {
            return Some(id);
        }
        if self.doc.shapes.len() >= MAX_SHAPES
            || self.doc.shape_keys.len() + self.scratch.len() >= u32::MAX as usize
        {
            return None;
        }
        let id = self.doc.shapes.len() as u32;
        let start = self.doc.shape_keys.len() as u32;
        self.doc.shape_keys.extend_from_slice(&self.scratch);
        self.doc.shapes.push((start, self.scratch.len() as u32));
        self.shape_index.insert(self.scratch.as_slice().into(), id);
        Some(id)
    }

    /// A shaped dict that receives more items (a second SETITEMS) or a
    /// packed list that receives a non-dict item goes back to plain storage;
    /// rare in practice.
    fn make_plain_and_extend(
        &mut self,
        c: ContainerId,
        items: &[Value],
    ) -> Result<(), CapacityError> {
        let mut all: Vec<Value> = self.doc.items(c).collect();
        all.extend_from_slice(items);
        let k = &mut self.doc.containers[c.0 as usize];
        k.shape = NO_SHAPE;
        k.len = 0;
        k.first = NO_CHUNK;
        k.last = NO_CHUNK;
        self.push_raw(c, &all)
    }

    /// Append dict references to a packed list.
    fn push_refs(&mut self, c: ContainerId, items: &[Value]) -> Result<(), CapacityError> {
        let pool_len = self.doc.refs.len();
        self.check_room(c, pool_len, items.len())?;
        self.doc
            .refs
            .extend(items.iter().map(|v| (v.0 >> TAG_BITS) as u32));
        self.link_chunk(c, pool_len, items.len())
    }

    /// Append to the container's chunks as stored.
    fn push_raw(&mut self, c: ContainerId, items: &[Value]) -> Result<(), CapacityError> {
        let pool_len = self.doc.items.len();
        self.check_room(c, pool_len, items.len())?;
        self.doc.items.extend_from_slice(items);
        self.link_chunk(c, pool_len, items.len())
    }

    fn check_room(&self, c: ContainerId, pool_len: usize, n: usize) -> Result<(), CapacityError> {
        if pool_len as u64 + n as u64 >= u32::MAX as u64 {
            return Err(CapacityError("container items"));
        }
        if self.doc.containers[c.0 as usize].len as u64 + n as u64 >= u32::MAX as u64 {
            return Err(CapacityError("items in one container"));
        }
        Ok(())
    }

    /// Record that `n` items were appended to `c` at `pool_len` of its pool.
    fn link_chunk(
        &mut self,
        c: ContainerId,
        pool_len: usize,
        n: usize,
    ) -> Result<(), CapacityError> {
        let d = &mut self.doc;
        let k = d.containers[c.0 as usize];
        // Grow the last chunk in place when it ends at the pool's end (APPEND
        // after APPEND), otherwise start a new chunk.
        if k.last != NO_CHUNK {
            let last = &mut d.chunks[k.last as usize];
            if (last.start + last.len) as usize == pool_len {
                last.len += n as u32;
                d.containers[c.0 as usize].len += n as u32;
                return Ok(());
            }
        }
        let idx = index_u32(d.chunks.len(), "chunks")? as u32;
        d.chunks.push(Chunk {
            start: pool_len as u32,
            len: n as u32,
            next: NO_CHUNK,
        });
        let k = &mut d.containers[c.0 as usize];
        if k.last == NO_CHUNK {
            k.first = idx;
        } else {
            d.chunks[k.last as usize].next = idx;
        }
        k.last = idx;
        k.len += n as u32;
        Ok(())
    }

    /// The big arenas, for the prefault helper.
    pub(crate) fn arenas(&self) -> [crate::prefault::Arena; 4] {
        use crate::prefault::Arena;
        [
            Arena::of(&self.doc.items),
            Arena::of(&self.doc.containers),
            Arena::of(&self.doc.chunks),
            Arena::of(&self.doc.refs),
        ]
    }

    /// Tell the prefault helper how far each arena is used.
    pub(crate) fn publish(&self, a: &[crate::prefault::Arena; 4]) {
        a[0].publish(&self.doc.items);
        a[1].publish(&self.doc.containers);
        a[2].publish(&self.doc.chunks);
        a[3].publish(&self.doc.refs);
    }

    /// Read access while building (the VM inspects what it built).
    pub fn doc(&self) -> &Document {
        &self.doc
    }

    pub(crate) fn record_skipped(&mut self, offset: u64, what: String) {
        self.doc.skipped_count += 1;
        if self.doc.skipped.len() < MAX_SKIPPED_RECORDS {
            self.doc.skipped.push(Skipped { offset, what });
        }
    }

    /// Finish with `root` as the top-level value.
    pub fn finish(mut self, root: Value) -> Document {
        // Give back the reserved (and partly pre-faulted) tails of the
        // arenas; for large buffers this is an mremap, not a copy.
        self.doc.items.shrink_to_fit();
        self.doc.containers.shrink_to_fit();
        self.doc.chunks.shrink_to_fit();
        self.doc.refs.shrink_to_fit();
        self.doc.root = Some(root);
        self.doc
    }
}
