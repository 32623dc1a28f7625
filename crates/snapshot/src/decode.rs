//! Schema decoding: a generic pickle [`Document`] becomes a [`Snapshot`].
//!
//! Every layout PyTorch has written goes through here: the 2.1+ dict, the
//! legacy 2.0 blocks with `history`, a bare list of segments, JSON (turned
//! into a `Document` first) and profiler-built snapshots with `category`.
//! Unknown keys are ignored. Dict keys are resolved once per pickled string
//! (keys are memoised, so a million entries share a handful of key strings).

use vramscope_pickle::{ContainerId, Document, Val, Value};

use crate::error::SnapshotError;
use crate::intern::{Frame, FrameId, FrameTable, StackId, StackTable, StrId, StringTable};
use crate::keys::Key;
use crate::model::*;

/// A schema error on its way up: the path is collected while unwinding.
pub(crate) struct PathErr {
    rev_path: Vec<String>,
    expected: &'static str,
    found: String,
}

impl PathErr {
    fn new(expected: &'static str, found: impl Into<String>) -> Self {
        PathErr {
            rev_path: Vec::new(),
            expected,
            found: found.into(),
        }
    }
    fn at(mut self, seg: impl Into<String>) -> Self {
        self.rev_path.push(seg.into());
        self
    }
    fn key(self, k: &str) -> Self {
        self.at(format!(".{k}"))
    }
    fn idx(self, i: usize) -> Self {
        self.at(format!("[{i}]"))
    }
    pub(crate) fn into_error(self) -> SnapshotError {
        let mut path = String::from("snapshot");
        for s in self.rev_path.iter().rev() {
            path.push_str(s);
        }
        SnapshotError::schema(path, self.expected, self.found)
    }
}

type R<T> = Result<T, PathErr>;

/// Result of decoding, before the source info is attached.
pub(crate) struct Decoded {
    pub strings: StringTable,
    pub frames: FrameTable,
    pub stacks: StackTable,
    pub segments: Vec<Segment>,
    pub blocks: Vec<Block>,
    pub traces: Vec<DeviceTrace>,
    pub annotations: Vec<Annotation>,
    pub allocator_settings: Option<serde_json::Map<String, serde_json::Value>>,
    pub layout: Layout,
    pub legacy_blocks: bool,
    pub warnings: Vec<String>,
}

const UNMAPPED: u32 = u32::MAX;

/// Traces from this many events on are decoded on two threads.
const PARALLEL_MIN_EVENTS: usize = 200_000;

/// Default threads for decoding: `VRAMSCOPE_THREADS` if set (1 turns
/// parallel decoding off, e.g. to compare or measure), else the machine's.
pub(crate) fn default_threads() -> usize {
    std::env::var("VRAMSCOPE_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

pub(crate) struct Decoder<'d> {
    doc: &'d Document,
    strings: StringTable,
    frames: FrameTable,
    stacks: StackTable,
    /// Pickle string id → interned id.
    str_map: Vec<u32>,
    /// Pickle string id → key (as u8; `Key::UNRESOLVED` until first seen).
    key_map: Vec<u8>,
    /// Pickle container id → frame or stack id: the memo identity is the
    /// interning key, so a shared frame dict is decoded once.
    obj_map: Vec<u32>,
    /// Interned string id → action (as u8; 255 until first seen).
    action_map: Vec<u8>,
    frame_buf: Vec<FrameId>,
    empty: StrId,
    legacy_blocks: bool,
    truncated: bool,
    /// Threads for large traces (1: sequential).
    threads: usize,
    warnings: Vec<String>,
}

impl<'d> Decoder<'d> {
    pub(crate) fn new(doc: &'d Document, threads: usize) -> Self {
        let mut strings = StringTable::default();
        let empty = strings.intern("");
        Decoder {
            doc,
            strings,
            frames: FrameTable::default(),
            stacks: StackTable::default(),
            str_map: vec![UNMAPPED; doc.string_count()],
            key_map: vec![Key::UNRESOLVED; doc.string_count()],
            obj_map: vec![UNMAPPED; doc.container_count()],
            action_map: Vec::new(),
            frame_buf: Vec::new(),
            empty,
            legacy_blocks: false,
            truncated: doc.truncated.is_some(),
            threads,
            warnings: Vec::new(),
        }
    }

    pub(crate) fn decode(mut self) -> Result<Decoded, SnapshotError> {
        let root = self.doc.root();
        let mut segments = Vec::new();
        let mut blocks = Vec::new();
        let mut traces = Vec::new();
        let mut annotations = Vec::new();
        let mut settings = None;
        let layout = match self.doc.get(root) {
            Val::Dict(c) => {
                let mut seen_any = false;
                for (k, v) in self.doc.pairs(c) {
                    match self.key(k) {
                        Key::Segments => {
                            seen_any = true;
                            self.segments(v, &mut segments, &mut blocks)
                                .map_err(|e| e.key("segments").into_error())?;
                        }
                        Key::DeviceTraces => {
                            seen_any = true;
                            traces = self
                                .traces(v)
                                .map_err(|e| e.key("device_traces").into_error())?;
                        }
                        Key::AllocatorSettings => settings = self.settings(v),
                        Key::ExternalAnnotations => {
                            annotations = self
                                .annotations(v)
                                .map_err(|e| e.key("external_annotations").into_error())?;
                        }
                        _ => {}
                    }
                }
                if !seen_any {
                    return Err(self.not_a_snapshot_dict(c));
                }
                Layout::Dict
            }
            Val::List(_) => {
                self.segments(root, &mut segments, &mut blocks)
                    .map_err(|e| e.into_error())?;
                Layout::SegmentList
            }
            Val::Opaque(_) => {
                let what = self
                    .doc
                    .skipped
                    .last()
                    .map(|s| format!("{} (byte {})", s.what, s.offset))
                    .unwrap_or_else(|| "an object".into());
                return Err(SnapshotError::NotASnapshot(format!(
                    "the top-level object is a request to {what}, which was not executed"
                )));
            }
            other => {
                return Err(SnapshotError::NotASnapshot(format!(
                    "expected a dict with 'segments' and 'device_traces' or a list of segments at the top level, found {}",
                    other.type_name()
                )))
            }
        };
        Ok(Decoded {
            strings: self.strings,
            frames: self.frames,
            stacks: self.stacks,
            segments,
            blocks,
            traces,
            annotations,
            allocator_settings: settings,
            layout,
            legacy_blocks: self.legacy_blocks,
            warnings: self.warnings,
        })
    }

    fn not_a_snapshot_dict(&self, c: ContainerId) -> SnapshotError {
        let keys: Vec<&str> = self
            .doc
            .pairs(c)
            .filter_map(|(k, _)| self.doc.as_str(k))
            .take(8)
            .collect();
        let hint = if keys.contains(&"traceEvents") {
            " (this is a PyTorch profiler trace; record a memory snapshot with torch.cuda.memory._record_memory_history)"
        } else {
            ""
        };
        SnapshotError::NotASnapshot(format!(
            "expected a dict with 'segments' or 'device_traces', found a dict with keys {keys:?}{hint}"
        ))
    }

    // ----- scalars -----

    #[inline]
    fn key(&mut self, k: Value) -> Key {
        match k.str_id() {
            Some(id) => {
                let slot = &mut self.key_map[id as usize];
                if *slot == Key::UNRESOLVED {
                    *slot = Key::from_str(self.doc.str_by_id(id).unwrap_or("")) as u8;
                }
                Key::from_u8(*slot)
            }
            None => Key::Other,
        }
    }

    /// Something that was not constructed (listed in the skipped constructs);
    /// a field holding one is treated as absent.
    #[inline]
    fn is_opaque(&self, v: Value) -> bool {
        matches!(self.doc.get(v), Val::Opaque(_))
    }

    fn found(&self, v: Value) -> String {
        match self.doc.get(v) {
            Val::Str(s) => format!("str {:?}", s.chars().take(40).collect::<String>()),
            Val::Int(i) => format!("int {i}"),
            other => other.type_name().to_string(),
        }
    }

    #[inline]
    fn int(&self, v: Value) -> R<i64> {
        if let Some(i) = v.as_inline_int() {
            return Ok(i);
        }
        match self.doc.get(v) {
            Val::Int(i) => Ok(i),
            Val::Bool(b) => Ok(b as i64),
            Val::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e18 => Ok(f as i64),
            _ => Err(PathErr::new("an integer", self.found(v))),
        }
    }

    /// Sizes and addresses: non-negative, may exceed `i64` (stream pointers).
    #[inline]
    fn uint(&self, v: Value) -> R<u64> {
        if let Some(i) = v.as_inline_int().filter(|&i| i >= 0) {
            return Ok(i as u64);
        }
        match self.doc.get(v) {
            Val::Int(i) if i >= 0 => Ok(i as u64),
            Val::BigInt(b) if b.len() == 9 && b[8] == 0 => {
                let mut a = [0u8; 8];
                a.copy_from_slice(&b[..8]);
                Ok(u64::from_le_bytes(a))
            }
            _ => self
                .int(v)
                .ok()
                .filter(|i| *i >= 0)
                .map(|i| i as u64)
                .ok_or_else(|| PathErr::new("a non-negative integer", self.found(v))),
        }
    }

    fn str_id(&mut self, v: Value) -> R<StrId> {
        match v.str_id() {
            Some(id) => {
                let slot = self.str_map[id as usize];
                if slot != UNMAPPED {
                    return Ok(StrId(slot));
                }
                let s = self.strings.intern(self.doc.str_by_id(id).unwrap_or(""));
                self.str_map[id as usize] = s.0;
                Ok(s)
            }
            None if v.is_none() => Ok(self.empty),
            None => Err(PathErr::new("a string", self.found(v))),
        }
    }

    fn action(&mut self, v: Value) -> R<Action> {
        let id = self.str_id(v)?;
        let i = id.0 as usize;
        if i >= self.action_map.len() {
            self.action_map.resize(i + 1, u8::MAX);
        }
        if self.action_map[i] == u8::MAX {
            self.action_map[i] = Action::parse(self.strings.get(id)) as u8;
        }
        Ok(Action::ALL[self.action_map[i] as usize])
    }

    // ----- frames and stacks -----

    /// A frames list (`None` or empty: no stack).
    fn stack(&mut self, v: Value) -> R<StackId> {
        let c = match self.doc.get(v) {
            Val::List(c) | Val::Tuple(c) => c,
            Val::None => return Ok(StackId::NONE),
            _ => return Err(PathErr::new("a list of frames", self.found(v))),
        };
        let cached = self.obj_map[c.0 as usize];
        if cached != UNMAPPED {
            return Ok(StackId(cached));
        }
        let mut buf = std::mem::take(&mut self.frame_buf);
        buf.clear();
        for (i, f) in self.doc.items(c).enumerate() {
            // Shared frame dicts are resolved once; later references are a
            // lookup by memo identity.
            if let Some(fc) = f.dict() {
                let m = self.obj_map[fc.0 as usize];
                if m != UNMAPPED {
                    buf.push(FrameId(m));
                    continue;
                }
            }
            match self.frame(f) {
                Ok(id) => buf.push(id),
                Err(e) => {
                    self.frame_buf = buf;
                    return Err(e.idx(i));
                }
            }
        }
        let id = if buf.is_empty() {
            StackId::NONE
        } else {
            self.stacks.intern(&buf)
        };
        self.frame_buf = buf;
        self.obj_map[c.0 as usize] = id.0;
        Ok(id)
    }

    fn frame(&mut self, v: Value) -> R<FrameId> {
        let c = match self.doc.get(v) {
            Val::Dict(c) => c,
            // `forward_frames` and some producers give plain strings.
            Val::Str(_) => {
                let name = self.str_id(v)?;
                return Ok(self.frames.intern(Frame {
                    filename: self.empty,
                    line: 0,
                    name,
                }));
            }
            _ => return Err(PathErr::new("a frame dict", self.found(v))),
        };
        let cached = self.obj_map[c.0 as usize];
        if cached != UNMAPPED {
            return Ok(FrameId(cached));
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
                Key::Filename => f.filename = self.str_id(val).map_err(|e| e.key("filename"))?,
                Key::Name => f.name = self.str_id(val).map_err(|e| e.key("name"))?,
                Key::Line => {
                    f.line = self
                        .int(val)
                        .map_err(|e| e.key("line"))?
                        .clamp(0, u32::MAX as i64) as u32
                }
                _ => {}
            }
        }
        let id = self.frames.intern(f);
        self.obj_map[c.0 as usize] = id.0;
        Ok(id)
    }

    // ----- device traces -----

    fn traces(&mut self, v: Value) -> R<Vec<DeviceTrace>> {
        let Some(c) = self.list(v)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::with_capacity(self.doc.len(c));
        for (d, dv) in self.doc.items(c).enumerate() {
            let mut t = DeviceTrace {
                device: d as u32,
                ..Default::default()
            };
            self.trace(dv, &mut t).map_err(|e| e.idx(d))?;
            out.push(t);
        }
        Ok(out)
    }

    fn list(&self, v: Value) -> R<Option<ContainerId>> {
        match self.doc.get(v) {
            Val::List(c) | Val::Tuple(c) => Ok(Some(c)),
            Val::None => Ok(None),
            _ => Err(PathErr::new("a list", self.found(v))),
        }
    }

    fn trace(&mut self, v: Value, t: &mut DeviceTrace) -> R<()> {
        let Some(c) = self.list(v)? else {
            return Ok(());
        };
        let n = self.doc.len(c);
        t.action.reserve_exact(n);
        t.addr.reserve_exact(n);
        t.size.reserve_exact(n);
        t.stream.reserve_exact(n);
        t.time_us.reserve_exact(n);
        t.stack.reserve_exact(n);
        if n < PARALLEL_MIN_EVENTS || self.threads < 2 {
            return self.entries(c, 0..n, n, t);
        }
        // Two halves on two cores, each with its own intern tables; the
        // second half's ids are then mapped into this decoder's tables.
        let mid = n / 2;
        let mut other = Decoder::new(self.doc, 1);
        other.truncated = self.truncated;
        let mut tb = DeviceTrace {
            device: t.device,
            ..Default::default()
        };
        let (ra, rb) = std::thread::scope(|s| {
            let h = s.spawn(|| {
                let r = other.entries(c, mid..n, n, &mut tb);
                (r, other, tb)
            });
            let ra = self.entries(c, 0..mid, n, t);
            (ra, h.join())
        });
        ra?;
        let (rb, other, tb) = match rb {
            Ok(x) => x,
            Err(p) => std::panic::resume_unwind(p),
        };
        rb?;
        self.absorb(other, tb, t);
        Ok(())
    }

    /// Decode entries `range` of the trace list `c` (of `n` entries) into `t`.
    fn entries(
        &mut self,
        c: ContainerId,
        range: std::ops::Range<usize>,
        n: usize,
        t: &mut DeviceTrace,
    ) -> R<()> {
        let mut dropped = 0usize;
        let items = self.doc.items(c).skip(range.start).take(range.len());
        for (k, ev) in items.enumerate() {
            let i = range.start + k;
            if let Err(e) = self.entry(ev, t) {
                // A dump cut short leaves a half-written last entry: drop it.
                if self.truncated && i + 1 == n {
                    dropped += 1;
                    continue;
                }
                return Err(e.idx(i));
            }
        }
        if dropped > 0 {
            self.warnings.push(format!(
                "device {}: dropped {dropped} incomplete trailing event(s) of the truncated file",
                t.device
            ));
        }
        Ok(())
    }

    /// Append `tb` (decoded by `other`) to `t`, mapping its ids into ours.
    fn absorb(&mut self, other: Decoder<'_>, tb: DeviceTrace, t: &mut DeviceTrace) {
        let smap: Vec<StrId> = (0..other.strings.len() as u32)
            .map(|i| self.strings.intern(other.strings.get(StrId(i))))
            .collect();
        let fmap: Vec<FrameId> = (0..other.frames.len() as u32)
            .map(|i| {
                let f = other.frames.get(FrameId(i));
                self.frames.intern(Frame {
                    filename: smap[f.filename.0 as usize],
                    line: f.line,
                    name: smap[f.name.0 as usize],
                })
            })
            .collect();
        let mut buf = Vec::new();
        let kmap: Vec<StackId> = (0..other.stacks.len() as u32)
            .map(|i| {
                buf.clear();
                buf.extend(
                    other
                        .stacks
                        .get(StackId(i))
                        .iter()
                        .map(|f| fmap[f.0 as usize]),
                );
                self.stacks.intern(&buf)
            })
            .collect();
        let stack = |s: StackId| if s.is_none() { s } else { kmap[s.0 as usize] };
        let base = t.len();
        let nb = tb.len();
        t.action.extend_from_slice(&tb.action);
        t.addr.extend_from_slice(&tb.addr);
        t.size.extend_from_slice(&tb.size);
        t.stream.extend_from_slice(&tb.stream);
        t.time_us.extend_from_slice(&tb.time_us);
        t.stack.extend(tb.stack.iter().map(|&s| stack(s)));
        let empty = self.empty;
        for (col, other_col) in [
            (&mut t.compile_context, &tb.compile_context),
            (&mut t.user_metadata, &tb.user_metadata),
            (&mut t.category, &tb.category),
        ] {
            match (col.as_mut(), other_col) {
                (Some(c), Some(o)) => c.extend(o.iter().map(|s| smap[s.0 as usize])),
                (Some(c), None) => c.resize(base + nb, empty),
                (None, Some(o)) => {
                    let mut c = vec![empty; base];
                    c.extend(o.iter().map(|s| smap[s.0 as usize]));
                    *col = Some(c);
                }
                (None, None) => {}
            }
        }
        t.device_free
            .extend(tb.device_free.iter().map(|&(i, b)| (i + base as u32, b)));
        t.forward_stack.extend(
            tb.forward_stack
                .iter()
                .map(|&(i, s)| (i + base as u32, stack(s))),
        );
        self.warnings.extend(other.warnings);
    }

    fn entry(&mut self, v: Value, t: &mut DeviceTrace) -> R<()> {
        let Val::Dict(c) = self.doc.get(v) else {
            return Err(PathErr::new("a trace entry dict", self.found(v)));
        };
        let mut action = None;
        let (mut addr, mut size, mut stream, mut time) = (0u64, None, 0u64, NO_TIME);
        let mut stack = StackId::NONE;
        let (mut cc, mut um, mut cat) = (None, None, None);
        let (mut dfree, mut fwd) = (None, None);
        for (k, val) in self.doc.pairs(c) {
            if self.is_opaque(val) {
                continue;
            }
            let key = self.key(k);
            let r = match key {
                Key::Action => self.action(val).map(|a| action = Some(a)),
                Key::Addr => self.uint(val).map(|x| addr = x),
                Key::Size => self.uint(val).map(|x| size = Some(x)),
                Key::Stream => self
                    .int(val)
                    .map(|x| stream = x as u64)
                    .or_else(|_| self.uint(val).map(|x| stream = x)),
                Key::TimeUs => self.int(val).map(|x| time = x),
                Key::Frames => self.stack(val).map(|s| stack = s),
                Key::CompileContext => self.str_id(val).map(|s| cc = Some(s)),
                Key::UserMetadata => self.str_id(val).map(|s| um = Some(s)),
                Key::Category => self.str_id(val).map(|s| cat = Some(s)),
                Key::DeviceFree => self.uint(val).map(|x| dfree = Some(x)),
                Key::ForwardFrames => self.stack(val).map(|s| fwd = Some(s)),
                _ => Ok(()),
            };
            r.map_err(|e| e.key(key.name()))?;
        }
        let action = action.ok_or_else(|| PathErr::new("key 'action'", "a dict without it"))?;
        let size = size.ok_or_else(|| PathErr::new("key 'size'", "a dict without it"))?;
        let i = t.action.len();
        t.action.push(action);
        t.addr.push(addr);
        t.size.push(size);
        t.stream.push(stream);
        t.time_us.push(time);
        t.stack.push(stack);
        push_opt(&mut t.compile_context, i, cc, self.empty);
        push_opt(&mut t.user_metadata, i, um, self.empty);
        push_opt(&mut t.category, i, cat, self.empty);
        if let Some(f) = dfree {
            t.device_free.push((i as u32, f));
        }
        if let Some(s) = fwd.filter(|s| !s.is_none()) {
            t.forward_stack.push((i as u32, s));
        }
        Ok(())
    }

    // ----- segments and blocks -----

    fn segments(&mut self, v: Value, segs: &mut Vec<Segment>, blocks: &mut Vec<Block>) -> R<()> {
        let Some(c) = self.list(v)? else {
            return Ok(());
        };
        for (i, sv) in self.doc.items(c).enumerate() {
            let s = self.segment(sv, blocks).map_err(|e| e.idx(i))?;
            segs.push(s);
        }
        Ok(())
    }

    fn segment(&mut self, v: Value, blocks: &mut Vec<Block>) -> R<Segment> {
        let Val::Dict(c) = self.doc.get(v) else {
            return Err(PathErr::new("a segment dict", self.found(v)));
        };
        let mut s = Segment {
            device: 0,
            address: 0,
            total_size: 0,
            allocated_size: 0,
            active_size: 0,
            requested_size: 0,
            stream: 0,
            segment_type: SegmentType::Unknown,
            pool_id: (0, 0),
            is_expandable: false,
            stack: StackId::NONE,
            blocks: 0..0,
        };
        let mut block_list = None;
        for (k, val) in self.doc.pairs(c) {
            if self.is_opaque(val) {
                continue;
            }
            let key = self.key(k);
            let r = match key {
                Key::Device => self
                    .uint(val)
                    .map(|x| s.device = x.min(u32::MAX as u64) as u32),
                Key::Address => self.uint(val).map(|x| s.address = x),
                Key::TotalSize => self.uint(val).map(|x| s.total_size = x),
                Key::AllocatedSize => self.uint(val).map(|x| s.allocated_size = x),
                Key::ActiveSize => self.uint(val).map(|x| s.active_size = x),
                Key::RequestedSize => self.uint(val).map(|x| s.requested_size = x),
                Key::Stream => self
                    .int(val)
                    .map(|x| s.stream = x as u64)
                    .or_else(|_| self.uint(val).map(|x| s.stream = x)),
                Key::SegmentType => self.str_id(val).map(|x| {
                    s.segment_type = match self.strings.get(x) {
                        "large" => SegmentType::Large,
                        "small" => SegmentType::Small,
                        _ => SegmentType::Unknown,
                    }
                }),
                Key::SegmentPoolId => self.pool_id(val).map(|p| s.pool_id = p),
                Key::IsExpandable => self.int(val).map(|x| s.is_expandable = x != 0),
                Key::Frames => self.stack(val).map(|x| s.stack = x),
                Key::Blocks => {
                    block_list = Some(val);
                    Ok(())
                }
                _ => Ok(()),
            };
            r.map_err(|e| e.key(key.name()))?;
        }
        let start = blocks.len() as u32;
        if let Some(bl) = block_list {
            self.blocks(bl, s.address, blocks)
                .map_err(|e| e.key("blocks"))?;
        }
        s.blocks = start..blocks.len() as u32;
        Ok(s)
    }

    fn pool_id(&self, v: Value) -> R<(i64, i64)> {
        let Some(c) = self.list(v)? else {
            return Ok((0, 0));
        };
        let mut it = self.doc.items(c);
        let a = it.next().map(|x| self.int(x)).transpose()?.unwrap_or(0);
        let b = it.next().map(|x| self.int(x)).transpose()?.unwrap_or(0);
        Ok((a, b))
    }

    fn blocks(&mut self, v: Value, seg_addr: u64, out: &mut Vec<Block>) -> R<()> {
        let Some(c) = self.list(v)? else {
            return Ok(());
        };
        // Legacy (2.0) blocks have no address: they tile the segment in order.
        let mut next_addr = seg_addr;
        for (i, bv) in self.doc.items(c).enumerate() {
            let b = self.block(bv, next_addr).map_err(|e| e.idx(i))?;
            next_addr = b.address.saturating_add(b.size);
            out.push(b);
        }
        Ok(())
    }

    fn block(&mut self, v: Value, default_addr: u64) -> R<Block> {
        let Val::Dict(c) = self.doc.get(v) else {
            return Err(PathErr::new("a block dict", self.found(v)));
        };
        let mut b = Block {
            address: default_addr,
            size: 0,
            requested_size: 0,
            state: BlockState::Unknown,
            stack: StackId::NONE,
        };
        let mut requested = None;
        let mut history = None;
        for (k, val) in self.doc.pairs(c) {
            if self.is_opaque(val) {
                continue;
            }
            let key = self.key(k);
            let r = match key {
                Key::Address => self.uint(val).map(|x| b.address = x),
                Key::Size => self.uint(val).map(|x| b.size = x),
                Key::RequestedSize => self.uint(val).map(|x| requested = Some(x)),
                Key::State => self
                    .str_id(val)
                    .map(|x| b.state = BlockState::parse(self.strings.get(x))),
                Key::Frames => self.stack(val).map(|x| b.stack = x),
                Key::History => {
                    history = Some(val);
                    Ok(())
                }
                _ => Ok(()),
            };
            r.map_err(|e| e.key(key.name()))?;
        }
        if let Some(h) = history {
            self.legacy_blocks = true;
            // The last history record is the allocation that owns the block now.
            if let Some(hc) = self.list(h).map_err(|e| e.key("history"))? {
                if let Some(last) = self.doc.items(hc).last() {
                    if let Val::Dict(rc) = self.doc.get(last) {
                        for (k, val) in self.doc.pairs(rc) {
                            match self.key(k) {
                                Key::Frames if b.stack.is_none() => {
                                    b.stack = self
                                        .stack(val)
                                        .map_err(|e| e.key("frames").key("history[-1]"))?
                                }
                                Key::RealSize if requested.is_none() => {
                                    requested = self.uint(val).ok()
                                }
                                _ => {}
                            }
                        }
                    }
                }
            }
        }
        b.requested_size = requested.unwrap_or(b.size);
        Ok(b)
    }

    // ----- annotations and settings -----

    fn annotations(&mut self, v: Value) -> R<Vec<Annotation>> {
        let Some(c) = self.list(v)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::with_capacity(self.doc.len(c));
        for (i, av) in self.doc.items(c).enumerate() {
            let Val::Dict(ac) = self.doc.get(av) else {
                return Err(PathErr::new("an annotation dict", self.found(av)).idx(i));
            };
            let mut a = Annotation {
                name: self.empty,
                stage: AnnotationStage::Other,
                device: 0,
                time_us: NO_TIME,
            };
            for (k, val) in self.doc.pairs(ac) {
                let key = self.key(k);
                let r = match key {
                    Key::Name => self.str_id(val).map(|x| a.name = x),
                    Key::Stage => self.str_id(val).map(|x| {
                        a.stage = match self.strings.get(x) {
                            "START" => AnnotationStage::Start,
                            "END" => AnnotationStage::End,
                            _ => AnnotationStage::Other,
                        }
                    }),
                    Key::Device => self.int(val).map(|x| a.device = x),
                    Key::TimeUs => self.int(val).map(|x| a.time_us = x),
                    _ => Ok(()),
                };
                r.map_err(|e| e.key(key.name()).idx(i))?;
            }
            out.push(a);
        }
        Ok(out)
    }

    fn settings(&self, v: Value) -> Option<serde_json::Map<String, serde_json::Value>> {
        match crate::json::to_json(self.doc, v, 16) {
            serde_json::Value::Object(m) => Some(m),
            _ => None,
        }
    }
}

/// Push to an optional column, creating it (back-filled with `empty`) on first use.
#[inline]
fn push_opt(col: &mut Option<Vec<StrId>>, i: usize, v: Option<StrId>, empty: StrId) {
    match (col.as_mut(), v) {
        (Some(c), v) => c.push(v.unwrap_or(empty)),
        (None, Some(v)) => {
            let mut c = vec![empty; i];
            c.push(v);
            *col = Some(c);
        }
        (None, None) => {}
    }
}
