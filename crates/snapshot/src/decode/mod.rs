//! Schema decoding: a generic pickle [`Document`] becomes a [`Snapshot`].
//!
//! Every layout PyTorch has written goes through here: the 2.1+ dict, the
//! legacy 2.0 blocks with `history`, a bare list of segments, JSON (turned
//! into a `Document` first) and profiler-built snapshots with `category`.
//! Unknown keys are ignored. Dict keys are resolved once per pickled string
//! (keys are memoised, so a million entries share a handful of key strings).
//!
//! Decoding is tolerant below the top level: a value of the wrong type or
//! out of range in one entry, frame, block or segment is stored as a
//! sentinel and counted as a [`Repair`](crate::Repair) with its path; only a
//! top level that is not a snapshot is an error.
//!
//! The work is split by part of the file: `stack` (frames and stacks),
//! `trace` (device traces, on two threads when large) and `segments`
//! (segments, blocks, annotations).

mod segments;
mod stack;
mod trace;

use vramscope_pickle::hash::FxHashMap;
use vramscope_pickle::{ContainerId, Document, Val, Value};

use crate::error::SnapshotError;
use crate::intern::{FrameId, FrameTable, StackId, StackTable, StrId, StringTable};
use crate::keys::Key;
use crate::model::*;
use crate::repair::{describe, Repair, Repairs, Seg};

/// A value that could not be used, on its way to being counted as a repair:
/// the path below the decoder's current position is collected innermost
/// first.
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
    pub tags: Vec<Tag>,
    pub allocator_settings: Option<serde_json::Map<String, serde_json::Value>>,
    pub layout: Layout,
    pub legacy_blocks: bool,
    pub warnings: Vec<String>,
    pub repairs: Vec<Repair>,
    pub recorder: Option<crate::RecorderInfo>,
}

impl Decoded {
    /// The snapshot of these tables with `source` attached: the one place a
    /// decoded model becomes a [`Snapshot`], for snapshot and profiler files
    /// alike. `source` takes the warnings, repairs and recorder first.
    pub(crate) fn into_snapshot(self, source: SourceInfo) -> Snapshot {
        Snapshot {
            strings: self.strings,
            frames: self.frames,
            stacks: self.stacks,
            segments: self.segments,
            blocks: self.blocks,
            traces: self.traces,
            annotations: self.annotations,
            tags: self.tags,
            allocator_settings: self.allocator_settings,
            source,
        }
    }
}

const UNMAPPED: u32 = u32::MAX;

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
    /// interning key, so a shared frame dict is decoded once. A map, not a
    /// vector over every container: at 10M events that vector took 67 MB
    /// per decoding thread, for the few thousand frames a file holds.
    obj_map: FxHashMap<u32, u32>,
    /// Stored run of a frames list ([`Document::run_key`]) → stack id: the
    /// lists of a training loop repeat, and share their storage, so each
    /// distinct list is decoded once however many allocator calls made it.
    run_map: FxHashMap<u64, StackId>,
    /// Interned string id → action (as u8; 255 until first seen).
    action_map: Vec<u8>,
    /// The keys of the dict shape `plan_shape`, resolved: the trace's
    /// entries share one shape, so their keys are looked up once.
    shape_plan: Vec<Key>,
    plan_shape: Option<u32>,
    frame_buf: Vec<FrameId>,
    empty: StrId,
    legacy_blocks: bool,
    truncated: bool,
    /// Threads for large traces (1: sequential).
    threads: usize,
    warnings: Vec<String>,
    /// Where the decoder is (for the paths of repairs): containers push a
    /// step, loops overwrite their index in place.
    path: Vec<Seg>,
    repairs: Repairs,
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
            obj_map: FxHashMap::default(),
            run_map: FxHashMap::default(),
            action_map: Vec::new(),
            shape_plan: Vec::new(),
            plan_shape: None,
            frame_buf: Vec::new(),
            empty,
            legacy_blocks: false,
            truncated: doc.truncated.is_some(),
            threads,
            warnings: Vec::new(),
            path: Vec::new(),
            repairs: Repairs::default(),
        }
    }

    pub(crate) fn decode(mut self) -> Result<Decoded, SnapshotError> {
        let doc = self.doc;
        let root = doc.root();
        let mut segments = Vec::new();
        let mut blocks = Vec::new();
        let mut traces = Vec::new();
        let mut annotations = Vec::new();
        let mut tags = Vec::new();
        let mut settings = None;
        let mut recorder = None;
        let layout = match doc.get(root) {
            Val::Dict(c) => {
                let mut seen_any = false;
                for (k, v) in doc.pairs(c) {
                    match self.key(k) {
                        Key::Segments => {
                            seen_any = true;
                            self.within(Seg::Key("segments"), |d| {
                                d.segments(v, &mut segments, &mut blocks)
                            });
                        }
                        Key::DeviceTraces => {
                            seen_any = true;
                            traces = self.within(Seg::Key("device_traces"), |d| d.traces(v));
                        }
                        Key::AllocatorSettings => settings = self.settings(v),
                        Key::ExternalAnnotations => {
                            annotations =
                                self.within(Seg::Key("external_annotations"), |d| d.annotations(v));
                        }
                        Key::VramscopeTags => {
                            tags = self.within(Seg::Key("vramscope_tags"), |d| d.tags(v));
                        }
                        Key::Vramscope => {
                            let json = self.json_of("vramscope", v, 10);
                            recorder = crate::RecorderInfo::from_json(&json);
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
                self.segments(root, &mut segments, &mut blocks);
                Layout::SegmentList
            }
            Val::Opaque(_) => {
                let what = doc
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
                    describe(&other)
                )))
            }
        };
        let repairs = self.repairs.into_rows();
        Ok(Decoded {
            strings: self.strings,
            frames: self.frames,
            stacks: self.stacks,
            segments,
            blocks,
            traces,
            annotations,
            tags,
            allocator_settings: settings,
            layout,
            legacy_blocks: self.legacy_blocks,
            warnings: self.warnings,
            repairs,
            recorder,
        })
    }

    fn not_a_snapshot_dict(&self, c: ContainerId) -> SnapshotError {
        let keys: Vec<&str> = self
            .doc
            .pairs(c)
            .filter_map(|(k, _)| self.doc.as_str(k))
            .take(8)
            .collect();
        SnapshotError::NotASnapshot(format!(
            "expected a dict with 'segments' or 'device_traces', found a dict with keys {keys:?}"
        ))
    }

    // ----- where we are, and what was repaired -----

    /// Run `f` one step deeper in the snapshot.
    fn within<T>(&mut self, step: Seg, f: impl FnOnce(&mut Self) -> T) -> T {
        self.path.push(step);
        let r = f(self);
        self.path.pop();
        r
    }

    /// Set the index of the innermost loop (pushed by the caller).
    #[inline]
    fn set_index(&mut self, i: usize) {
        if let Some(s) = self.path.last_mut() {
            *s = Seg::Idx(i);
        }
    }

    /// Count `e` as repaired by `fix` at the current position.
    fn repair(&mut self, e: PathErr, fix: &'static str) {
        self.repairs
            .add(&self.path, &e.rev_path, fix, e.expected, &e.found);
    }

    /// The list or tuple in `v`; `None` when absent, and when it is not a
    /// list (counted as `fix`).
    fn list_or_repair(&mut self, v: Value, fix: &'static str) -> Option<ContainerId> {
        match self.doc.get(v) {
            Val::List(c) | Val::Tuple(c) => Some(c),
            Val::None => None,
            _ => {
                let e = PathErr::new("a list", self.found(v));
                self.repair(e, fix);
                None
            }
        }
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
        v.is_opaque()
    }

    fn found(&self, v: Value) -> String {
        describe(&self.doc.get(v))
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
            _ => Err(PathErr::new("an integer within 64 bits", self.found(v))),
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
                .ok_or_else(|| {
                    PathErr::new("a non-negative integer within 64 bits", self.found(v))
                }),
        }
    }

    /// A stream: CUDA stream handles are pointers, written signed or unsigned.
    fn stream(&self, v: Value) -> R<u64> {
        self.int(v)
            .map(|x| x as u64)
            .or_else(|_| self.uint(v))
            .map_err(|_| PathErr::new("a stream (an integer within 64 bits)", self.found(v)))
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

    /// A `str` field; anything else is repaired to the empty string.
    fn str_or_empty(&mut self, v: Value, key: &str) -> StrId {
        match self.str_id(v) {
            Ok(s) => s,
            Err(e) => {
                self.repair(e.key(key), "read as empty");
                self.empty
            }
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

    fn settings(&mut self, v: Value) -> Option<serde_json::Map<String, serde_json::Value>> {
        match self.json_of("allocator_settings", v, 16) {
            serde_json::Value::Object(m) => Some(m),
            _ => None,
        }
    }

    /// The field `key` as JSON ([`crate::json::to_json`]), with a warning
    /// where the cap on its size cut it.
    fn json_of(&mut self, key: &str, v: Value, depth: usize) -> serde_json::Value {
        let (json, cut) = crate::json::to_json(self.doc, v, depth);
        if cut {
            self.warnings.push(format!(
                "`{key}` refers to more values than the whole file holds (a damaged file whose \
                 references repeat one another); read up to that size, the rest left out"
            ));
        }
        json
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
