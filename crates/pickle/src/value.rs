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
/// [`Document::get`](crate::Document::get).
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
