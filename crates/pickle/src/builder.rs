//! Building a [`Document`]: the arena writer behind the pickle VM and the
//! JSON reader. Storage choices that keep a big snapshot small live here:
//! dicts of a shared key sequence store their values only, lists of dicts
//! store bare ids and share the run of a list with the same items, and a
//! container filled in one batch needs no chunk record.

use crate::document::*;
use crate::hash::FxHashMap;
use crate::value::*;

/// Builds a [`Document`]. The pickle VM uses it, and so can other readers
/// (JSON) that want to hand the same model to the snapshot decoder.
#[derive(Default)]
pub struct DocumentBuilder {
    pub(crate) doc: Document,
    shape_index: FxHashMap<Box<[Value]>, u32>,
    short_strs: FxHashMap<u128, u32>,
    scratch: Vec<Value>,
    /// Short packed lists by content: hash to the run of `refs` holding them.
    shared_lists: FxHashMap<u64, (u32, u32)>,
    /// The last chunk of each chunked container, where the next run is
    /// linked: only a container filled by several batches has one, so it
    /// lives here rather than in every container.
    chunk_tails: FxHashMap<u32, u32>,
    /// The shape found last: a snapshot's entries come one after the other
    /// with the same keys, so comparing with it spares the hash lookup.
    last_shape: Option<u32>,
}

fn index_u32(n: usize, what: &'static str) -> Result<u64, CapacityError> {
    if n as u64 >= (1u64 << 32) - 1 {
        Err(CapacityError(what))
    } else {
        Ok(n as u64)
    }
}

/// The table key of a string of `len` ≤ [`SHORT_STR`] bytes: its bytes,
/// read little-endian from the first `len` bytes of `window` (what follows
/// them is masked off), and its length in the top byte.
#[inline]
pub(crate) fn short_key(window: u128, len: usize) -> u128 {
    debug_assert!(len <= SHORT_STR);
    let mask = (1u128 << (8 * len)) - 1;
    (window & mask) | ((len as u128) << 120)
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
            let mut window = [0u8; 16];
            window[..s.len()].copy_from_slice(s.as_bytes());
            short_key(u128::from_le_bytes(window), s.len())
        });
        if let Some(v) = short.and_then(|k| self.known_short_str(k)) {
            return Ok(v);
        }
        let id = index_u32(self.doc.str_ends.len(), "strings")?;
        self.doc.str_data.push_str(s);
        self.doc.str_ends.push(self.doc.str_data.len() as u64);
        if let Some(k) = short {
            self.short_strs.insert(k, id as u32);
        }
        Ok(Value::new(T_STR, id))
    }

    /// The string of at most [`SHORT_STR`] bytes whose [`short_key`] is
    /// `key`, if one was stored. Only valid UTF-8 is ever stored, so a hit
    /// also proves the bytes it was built from are valid.
    #[inline]
    pub(crate) fn known_short_str(&self, key: u128) -> Option<Value> {
        self.short_strs
            .get(&key)
            .map(|&id| Value::new(T_STR, id as u64))
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
        self.doc.containers.push(Container::new(kind));
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
        if k.kind() == ContainerKind::List {
            let all_dicts = items.iter().all(|v| v.tag() == T_DICT);
            if k.shape() == PACKED {
                if all_dicts {
                    return self.push_refs(c, items);
                }
                return self.make_plain_and_extend(c, items);
            }
            if k.len == 0 && all_dicts {
                self.doc.containers[c.0 as usize].set_shape(PACKED);
                return self.push_refs(c, items);
            }
        }
        if k.kind() == ContainerKind::Dict {
            if k.shape() != NO_SHAPE {
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
                    k.set_shape(shape);
                    k.len = items.len() as u32;
                    return Ok(());
                }
            }
        }
        self.push_raw(c, items)
    }

    /// The shape id of the keys of `pairs`, registered if new.
    fn shape_for(&mut self, pairs: &[Value]) -> Option<u32> {
        if let Some(id) = self.last_shape {
            let (start, len) = self.doc.shapes[id as usize];
            let keys = &self.doc.shape_keys[start as usize..(start + len) as usize];
            if keys.len() * 2 == pairs.len()
                && keys
                    .iter()
                    .zip(pairs.iter().step_by(2))
                    .all(|(a, b)| a == b)
            {
                return Some(id);
            }
        }
        let id = self.shape_lookup(pairs)?;
        self.last_shape = Some(id);
        Some(id)
    }

    fn shape_lookup(&mut self, pairs: &[Value]) -> Option<u32> {
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
        k.set_shape(NO_SHAPE);
        k.len = 0;
        k.first = NO_CHUNK;
        k.set_chunked(false);
        self.chunk_tails.remove(&c.0);
        self.push_raw(c, &all)
    }

    /// Append dict references to a packed list.
    ///
    /// A short list filled in one batch with the same dicts as an earlier
    /// one shares that list's run of the pool: a snapshot writes one frames
    /// list per allocator call, and a training loop makes the same calls
    /// from the same stacks every step, so most of them repeat. The lists
    /// stay distinct containers (memo identity is kept); only the storage
    /// of their items is shared, which is safe because a run is never
    /// changed once written (appending to it moves or grows the
    /// appending container's own record).
    fn push_refs(&mut self, c: ContainerId, items: &[Value]) -> Result<(), CapacityError> {
        let k = self.doc.containers[c.0 as usize];
        if k.len == 0 && items.len() <= SHARE_MAX {
            let hash = crate::hash::hash_words(items, |v| v.0 >> TAG_BITS);
            if let Some(&(start, len)) = self.shared_lists.get(&hash) {
                let run = &self.doc.refs[start as usize..(start + len) as usize];
                if run.len() == items.len()
                    && run
                        .iter()
                        .zip(items)
                        .all(|(&r, v)| r as u64 == v.0 >> TAG_BITS)
                {
                    let k = &mut self.doc.containers[c.0 as usize];
                    k.first = start;
                    k.len = len;
                    return Ok(());
                }
            } else if self.shared_lists.len() < SHARE_INDEX_MAX {
                let start = self.doc.refs.len() as u32;
                self.shared_lists.insert(hash, (start, items.len() as u32));
            }
        }
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
        if k.first == NO_CHUNK {
            let k = &mut d.containers[c.0 as usize];
            k.first = pool_len as u32;
            k.len += n as u32;
            return Ok(());
        }
        if !k.chunked() {
            if (k.first + k.stored_len()) as usize == pool_len {
                d.containers[c.0 as usize].len += n as u32;
                return Ok(());
            }
            // A second run elsewhere in the pool: from here on, chunks.
            let idx = index_u32(d.chunks.len() + 1, "chunks")? as u32 - 1;
            d.chunks.push(Chunk {
                start: k.first,
                len: k.stored_len(),
                next: idx + 1,
            });
            d.chunks.push(Chunk {
                start: pool_len as u32,
                len: n as u32,
                next: NO_CHUNK,
            });
            let k = &mut d.containers[c.0 as usize];
            k.first = idx;
            k.set_chunked(true);
            k.len += n as u32;
            self.chunk_tails.insert(c.0, idx + 1);
            return Ok(());
        }
        // Grow the last chunk in place when it ends at the pool's end (APPEND
        // after APPEND), otherwise start a new chunk.
        let Some(&tail) = self.chunk_tails.get(&c.0) else {
            unreachable!("a chunked container has its last chunk recorded");
        };
        let last = &mut d.chunks[tail as usize];
        if (last.start + last.len) as usize == pool_len {
            last.len += n as u32;
            d.containers[c.0 as usize].len += n as u32;
            return Ok(());
        }
        let idx = index_u32(d.chunks.len(), "chunks")? as u32;
        d.chunks.push(Chunk {
            start: pool_len as u32,
            len: n as u32,
            next: NO_CHUNK,
        });
        d.chunks[tail as usize].next = idx;
        d.containers[c.0 as usize].len += n as u32;
        self.chunk_tails.insert(c.0, idx);
        Ok(())
    }

    /// The arenas that grow with every event, for the prefault helper.
    /// Chunks and dict references grow little now that containers filled
    /// in one batch need no chunk and frames lists share their runs:
    /// populating 12 MB ahead in them would only add resident memory.
    pub(crate) fn arenas(&self) -> [crate::prefault::Arena; 2] {
        use crate::prefault::Arena;
        [Arena::of(&self.doc.items), Arena::of(&self.doc.containers)]
    }

    /// Tell the prefault helper how far each arena is used.
    pub(crate) fn publish(&self, a: &[crate::prefault::Arena; 2]) {
        a[0].publish(&self.doc.items);
        a[1].publish(&self.doc.containers);
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
