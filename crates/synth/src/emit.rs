//! Writing the snapshot as PyTorch's `pickle.dump(torch.cuda.memory._snapshot())`
//! lays it out: keys in the producer's order, interned keys and shared
//! strings written once and referenced after, each frame dict written once,
//! one frames list per allocator call (shared by its entries and by the
//! block it allocated), and one empty list shared by every stack-less
//! segment and block.

use crate::allocator::Allocator;
use crate::stacks::{StackId, Stacks};
use crate::trace::{Action, Event, PeakReplay, Sink};
use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use vramscope_pickle::writer::{MemoId, PickleWriter};

pub(crate) struct Emitter<'a, W: Write> {
    pub w: PickleWriter<W>,
    stacks: &'a Stacks,
    with_time: bool,
    /// Interned keys and shared values ("alloc", "inactive", "", ...).
    shared: HashMap<&'static str, MemoId>,
    frames: Vec<Option<MemoId>>,
    empty_list: Option<MemoId>,
    /// Odd values still to write (see `SynthOptions::odd_values`): frame
    /// lines, and whether a free block's state is still to be spoiled.
    odd_lines: Vec<OddLine>,
    odd_state: bool,
}

/// A frame `line` no well-behaved producer writes.
#[derive(Clone, Copy, Debug)]
enum OddLine {
    Big(i128),
    None,
}

/// The odd frame lines, in the order the first frame dicts receive them.
const ODD_LINES: [OddLine; 4] = [
    OddLine::Big((1 << 64) - 1),
    OddLine::Big(-1),
    OddLine::Big(1 << 70),
    OddLine::None,
];

/// The block state written by `odd_values`.
pub(crate) const ODD_STATE: &str = "pending_unmap";
/// The action of the extra entry written by `odd_values`.
pub(crate) const ODD_ACTION: &str = "segment_defragment";

/// One external annotation: device, iteration, START (true) or END, time.
pub(crate) type Annotation = (u32, u32, bool, u64);

impl<'a, W: Write> Emitter<'a, W> {
    pub(crate) fn new(
        out: W,
        protocol: u8,
        with_time: bool,
        odd_values: bool,
        stacks: &'a Stacks,
    ) -> io::Result<Self> {
        Ok(Emitter {
            w: PickleWriter::new(out, protocol)?,
            stacks,
            with_time,
            shared: HashMap::new(),
            frames: vec![None; stacks.frames.len()],
            empty_list: None,
            odd_lines: if odd_values {
                ODD_LINES.iter().rev().copied().collect()
            } else {
                Vec::new()
            },
            odd_state: odd_values,
        })
    }

    /// A string that the producer shares: written once, then referenced.
    pub(crate) fn shared(&mut self, s: &'static str) {
        match self.shared.get(s) {
            Some(&id) => self.w.get(id),
            None => {
                let id = self.w.str(s);
                self.shared.insert(s, id);
            }
        }
    }

    fn int_item(&mut self, key: &'static str, value: i64) {
        self.shared(key);
        self.w.int(value);
    }

    fn empty_list(&mut self) {
        match self.empty_list {
            Some(id) => self.w.get(id),
            None => {
                let id = self.w.begin_list_len(0);
                self.w.end_list();
                self.empty_list = Some(id);
            }
        }
    }

    /// A new frames list for `stack`; frame dicts already written are
    /// referenced.
    pub(crate) fn stack_list(&mut self, stack: StackId) -> MemoId {
        let frames = self.stacks.frames_of(stack);
        let id = self.w.begin_list_len(frames.len() as u64);
        for &f in frames {
            match self.frames[f as usize] {
                Some(fid) => self.w.get(fid),
                None => {
                    let frame = &self.stacks.frames[f as usize];
                    let fid = self.w.begin_dict_len(3);
                    self.shared("name");
                    self.w.str(&frame.name);
                    self.shared("filename");
                    if frame.filename.is_empty() {
                        self.shared("");
                    } else {
                        self.w.str(&frame.filename);
                    }
                    match self.odd_lines.pop() {
                        Some(OddLine::Big(v)) => {
                            self.shared("line");
                            self.w.int128(v);
                        }
                        Some(OddLine::None) => {
                            self.shared("line");
                            self.w.none();
                        }
                        None => self.int_item("line", frame.line as i64),
                    }
                    self.w.end_dict();
                    self.frames[f as usize] = Some(fid);
                }
            }
        }
        self.w.end_list();
        id
    }

    /// The segments of one device; returns the frames list written for
    /// each live block, by allocation call.
    pub(crate) fn segments(&mut self, device: u32, alloc: &Allocator) -> HashMap<u64, MemoId> {
        let mut lists = HashMap::new();
        for (seg, blocks) in alloc.segments() {
            let active = blocks.iter().filter(|b| b.allocated);
            let allocated: u64 = active.clone().map(|b| b.size).sum();
            let requested: u64 = active.map(|b| b.requested).sum();
            self.w.begin_dict_len(12);
            self.int_item("device", device as i64);
            self.int_item("address", seg.addr as i64);
            self.int_item("total_size", seg.size as i64);
            self.int_item("allocated_size", allocated as i64);
            self.int_item("active_size", allocated as i64);
            self.int_item("requested_size", requested as i64);
            self.int_item("stream", 0);
            self.shared("segment_type");
            self.shared(if seg.small { "small" } else { "large" });
            self.shared("segment_pool_id");
            self.w.begin_tuple(2);
            self.w.int(0);
            self.w.int(0);
            self.w.end_tuple();
            self.shared("is_expandable");
            self.w.bool(seg.expandable);
            self.shared("frames");
            self.empty_list();
            self.shared("blocks");
            self.w.begin_list_len(blocks.len() as u64);
            for b in blocks {
                self.w.begin_dict_len(5);
                self.int_item("address", b.addr as i64);
                self.int_item("size", b.size as i64);
                self.int_item("requested_size", b.requested as i64);
                self.shared("state");
                if !b.allocated && self.odd_state {
                    self.odd_state = false;
                    self.w.str(ODD_STATE);
                } else {
                    self.shared(if b.allocated {
                        "active_allocated"
                    } else {
                        "inactive"
                    });
                }
                self.shared("frames");
                if b.allocated {
                    lists.insert(b.ctx, self.stack_list(b.stack));
                } else {
                    self.empty_list();
                }
                self.w.end_dict();
            }
            self.w.end_list();
            self.w.end_dict();
        }
        lists
    }

    /// One trace entry; `frames` is its frames list when already written.
    pub(crate) fn entry(&mut self, ev: &Event, frames: Option<MemoId>) -> MemoId {
        self.w.begin_dict_len(7 + self.with_time as u64);
        self.shared("action");
        self.shared(ev.action.name());
        let addr_key = if ev.action == Action::Oom {
            "device_free"
        } else {
            "addr"
        };
        self.int_item(addr_key, ev.addr as i64);
        self.int_item("size", ev.size as i64);
        self.int_item("stream", 0);
        if self.with_time {
            self.int_item("time_us", ev.time_us as i64);
        }
        self.shared("compile_context");
        self.w.str("N/A");
        self.shared("user_metadata");
        self.shared("");
        self.shared("frames");
        let id = match frames {
            Some(id) => {
                self.w.get(id);
                id
            }
            None => self.stack_list(ev.stack),
        };
        self.w.end_dict();
        id
    }

    /// An entry whose action no PyTorch version writes (`odd_values`).
    pub(crate) fn odd_entry(&mut self, time_us: u64) {
        self.w.begin_dict_len(4 + self.with_time as u64);
        self.shared("action");
        self.w.str(ODD_ACTION);
        self.int_item("addr", 0);
        self.int_item("size", 0);
        self.int_item("stream", 0);
        if self.with_time {
            self.int_item("time_us", time_us as i64);
        }
        self.w.end_dict();
    }

    /// `allocator_settings` as PyTorch 2.9+ reports them.
    pub(crate) fn settings(&mut self, expandable: bool) {
        self.w.begin_dict_len(9);
        self.shared("PYTORCH_CUDA_ALLOC_CONF");
        if expandable {
            self.w.str("expandable_segments:True");
        } else {
            self.shared("");
        }
        self.int_item("max_split_size", -1);
        self.shared("garbage_collection_threshold");
        self.w.float(0.0);
        self.shared("expandable_segments");
        self.w.bool(expandable);
        self.int_item("pinned_num_register_threads", 1);
        for key in [
            "release_lock_on_cudamalloc",
            "pinned_use_cuda_host_register",
            "graph_capture_record_stream_reuse",
        ] {
            self.shared(key);
            self.w.bool(false);
        }
        self.shared("roundup_power2_divisions");
        self.w.begin_dict_len(16);
        for i in 0..16 {
            self.w.str(&(1u32 << i).to_string());
            self.w.int(0);
        }
        self.w.end_dict();
        self.w.end_dict();
    }

    /// `external_annotations`: `{name, stage, device, time_us}` records.
    pub(crate) fn annotations(&mut self, all: &[Annotation]) {
        self.w.begin_list_len(all.len() as u64);
        for &(device, iteration, start, time) in all {
            self.w.begin_dict_len(4);
            self.shared("name");
            self.w.str(&format!("ProfilerStep#{iteration}"));
            self.shared("stage");
            self.w.str(if start { "START" } else { "END" });
            self.int_item("device", device as i64);
            self.int_item("time_us", time as i64);
            self.w.end_dict();
        }
        self.w.end_list();
    }
}

/// Counts the bytes that reach the output.
pub(crate) struct Counting<W> {
    pub inner: W,
    pub bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The second pass's sink: writes the entries inside the window, measures
/// the peak over them, and keeps the annotations that fall inside.
pub(crate) struct TraceSink<'e, 'a, W: Write> {
    em: &'e mut Emitter<'a, W>,
    device: u32,
    start: u64,
    prewritten: HashMap<u64, MemoId>,
    last: Option<(u64, MemoId)>,
    emitted: u64,
    pub replay: PeakReplay,
    pub annotations: Vec<Annotation>,
    /// Addresses allocated inside the window and not freed yet.
    pub window_allocs: HashSet<u64>,
    /// Bytes of `free_completed` entries whose `alloc` precedes the window.
    pub freed_unseen: u64,
    /// `time_us` of the last entry written.
    pub last_time_us: u64,
    pub error: Option<io::Error>,
}

impl<'e, 'a, W: Write> TraceSink<'e, 'a, W> {
    /// `prewritten`: frames lists already written in `segments`, by
    /// allocation call.
    pub(crate) fn new(
        em: &'e mut Emitter<'a, W>,
        device: u32,
        start: u64,
        prewritten: HashMap<u64, MemoId>,
    ) -> Self {
        TraceSink {
            em,
            device,
            start,
            prewritten,
            last: None,
            emitted: 0,
            replay: PeakReplay::default(),
            annotations: Vec::new(),
            window_allocs: HashSet::new(),
            freed_unseen: 0,
            last_time_us: 0,
            error: None,
        }
    }
}

impl<W: Write> Sink for TraceSink<'_, '_, W> {
    fn event(&mut self, index: u64, ev: &Event) {
        if index < self.start || self.error.is_some() {
            return;
        }
        self.replay.step(index - self.start, ev);
        match ev.action {
            Action::Alloc => {
                self.window_allocs.insert(ev.addr);
            }
            Action::FreeCompleted if !self.window_allocs.remove(&ev.addr) => {
                self.freed_unseen += ev.size
            }
            _ => {}
        }
        let frames = match self.last {
            Some((ctx, id)) if ctx == ev.ctx => Some(id),
            _ => self.prewritten.remove(&ev.ctx),
        };
        let id = self.em.entry(ev, frames);
        self.last = Some((ev.ctx, id));
        self.last_time_us = ev.time_us;
        self.emitted += 1;
        if self.emitted & 4095 == 0 {
            self.error = self.em.w.check().err();
        }
    }

    fn annotation(&mut self, iteration: u32, start: bool, time_us: u64) {
        if self.emitted > 0 {
            self.annotations
                .push((self.device, iteration, start, time_us));
        }
    }

    fn stopped(&self) -> bool {
        self.error.is_some()
    }
}
