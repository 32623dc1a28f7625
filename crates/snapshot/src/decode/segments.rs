//! Segments and their blocks (the allocator state at the dump), and the
//! `record_function` annotations.

use vramscope_pickle::{Val, Value};

use super::{Decoder, PathErr, R};
use crate::intern::StackId;
use crate::keys::Key;
use crate::model::*;
use crate::repair::Seg;

impl Decoder<'_> {
    pub(super) fn segments(&mut self, v: Value, segs: &mut Vec<Segment>, blocks: &mut Vec<Block>) {
        let Some(c) = self.list_or_repair(v, "ignored") else {
            return;
        };
        let doc = self.doc;
        let n = doc.items(c).count();
        // (device, address) of the segments kept: two segments cannot start
        // at one address of a device, and counting both would count its
        // memory twice (every total above what the blocks at the peak add up to).
        let mut starts = vramscope_pickle::hash::FxHashSet::default();
        self.path.push(Seg::Idx(0));
        for (i, sv) in doc.items(c).enumerate() {
            self.set_index(i);
            let before = blocks.len();
            if let Some(s) = self.segment(sv, blocks) {
                // A dump cut inside the segments leaves the last one half
                // written: blocks missing, so "nothing allocated" in it would
                // be a claim the file cannot back. Its blocks tile it when whole.
                let covered: u64 = blocks[before..].iter().map(|b| b.size).sum();
                if self.truncated && i + 1 == n && covered != s.total_size {
                    blocks.truncate(before);
                    self.warnings.push(format!(
                        "dropped the last segment (device {}, address 0x{:x}), cut short: its blocks cover {covered} of its {} bytes",
                        s.device, s.address, s.total_size
                    ));
                    continue;
                }
                if !starts.insert((s.device, s.address)) {
                    blocks.truncate(before);
                    let e = PathErr::new(
                        "an address no earlier segment of its device starts at",
                        format!("0x{:x} again (device {})", s.address, s.device),
                    );
                    self.repair(e.key("address"), "segment left out");
                    continue;
                }
                segs.push(s);
            }
        }
        self.path.pop();
    }

    fn segment(&mut self, v: Value, blocks: &mut Vec<Block>) -> Option<Segment> {
        let Val::Dict(c) = self.doc.get(v) else {
            let e = PathErr::new("a segment dict", self.found(v));
            self.repair(e, "segment left out");
            return None;
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
        let doc = self.doc;
        for (k, val) in doc.pairs(c) {
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
                Key::Stream => self.stream(val).map(|x| s.stream = x),
                Key::SegmentType => self.str_id(val).and_then(|x| {
                    s.segment_type = match self.strings.get(x) {
                        "large" => SegmentType::Large,
                        "small" => SegmentType::Small,
                        _ => return Err(PathErr::new("'large' or 'small'", self.found(val))),
                    };
                    Ok(())
                }),
                Key::SegmentPoolId => self.pool_id(val).map(|p| s.pool_id = p),
                Key::IsExpandable => self.int(val).map(|x| s.is_expandable = x != 0),
                Key::Frames => {
                    s.stack = self.within(Seg::Key("frames"), |d| d.stack(val));
                    Ok(())
                }
                Key::Blocks => {
                    block_list = Some(val);
                    Ok(())
                }
                _ => Ok(()),
            };
            if let Err(e) = r {
                let fix = match key {
                    Key::SegmentType => "read as unknown",
                    Key::SegmentPoolId => "read as the default pool (0, 0)",
                    Key::IsExpandable => "read as False",
                    _ => "read as 0",
                };
                self.repair(e.key(key.name()), fix);
            }
        }
        let start = blocks.len() as u32;
        if let Some(bl) = block_list {
            self.within(Seg::Key("blocks"), |d| d.blocks(bl, s.address, blocks));
        }
        s.blocks = start..blocks.len() as u32;
        Some(s)
    }

    pub(super) fn pool_id(&self, v: Value) -> R<(i64, i64)> {
        let c = match self.doc.get(v) {
            Val::List(c) | Val::Tuple(c) => c,
            Val::None => return Ok((0, 0)),
            _ => return Err(PathErr::new("a pair of integers", self.found(v))),
        };
        let mut it = self.doc.items(c);
        let a = it.next().map(|x| self.int(x)).transpose()?.unwrap_or(0);
        let b = it.next().map(|x| self.int(x)).transpose()?.unwrap_or(0);
        Ok((a, b))
    }

    fn blocks(&mut self, v: Value, seg_addr: u64, out: &mut Vec<Block>) {
        let Some(c) = self.list_or_repair(v, "ignored") else {
            return;
        };
        // Legacy (2.0) blocks have no address: they tile the segment in order.
        let mut next_addr = seg_addr;
        let doc = self.doc;
        self.path.push(Seg::Idx(0));
        for (i, bv) in doc.items(c).enumerate() {
            self.set_index(i);
            if let Some(b) = self.block(bv, next_addr) {
                next_addr = b.address.saturating_add(b.size);
                out.push(b);
            }
        }
        self.path.pop();
    }

    fn block(&mut self, v: Value, default_addr: u64) -> Option<Block> {
        let Val::Dict(c) = self.doc.get(v) else {
            let e = PathErr::new("a block dict", self.found(v));
            self.repair(e, "block left out");
            return None;
        };
        let mut b = Block {
            address: default_addr,
            size: 0,
            requested_size: 0,
            state: BlockState::Unknown,
            stack: StackId::NONE,
            category: self.empty,
        };
        let mut requested = None;
        let mut history = None;
        let doc = self.doc;
        for (k, val) in doc.pairs(c) {
            if self.is_opaque(val) {
                continue;
            }
            let key = self.key(k);
            let r = match key {
                Key::Address => self.uint(val).map(|x| b.address = x),
                Key::Size => self.uint(val).map(|x| b.size = x),
                Key::RequestedSize => self.uint(val).map(|x| requested = Some(x)),
                Key::State => self.str_id(val).and_then(|x| {
                    b.state = BlockState::parse(self.strings.get(x));
                    if b.state == BlockState::Unknown {
                        return Err(PathErr::new(
                            "a block state (active_allocated, active_pending_free or inactive)",
                            self.found(val),
                        ));
                    }
                    Ok(())
                }),
                Key::Frames => {
                    b.stack = self.within(Seg::Key("frames"), |d| d.stack(val));
                    Ok(())
                }
                Key::Category => {
                    b.category = self.str_or_empty(val, "category");
                    Ok(())
                }
                Key::History => {
                    history = Some(val);
                    Ok(())
                }
                _ => Ok(()),
            };
            if let Err(e) = r {
                let fix = match key {
                    Key::Address => "read as following the previous block",
                    Key::RequestedSize => "read as the block size",
                    Key::State => "read as unknown: neither allocated nor free",
                    _ => "read as 0",
                };
                self.repair(e.key(key.name()), fix);
            }
        }
        if let Some(h) = history {
            self.legacy_blocks = true;
            self.within(Seg::Key("history"), |d| {
                d.history(h, &mut b, &mut requested)
            });
        }
        b.requested_size = requested.unwrap_or(b.size);
        Some(b)
    }

    /// PyTorch 2.0: the last history record is the allocation that owns the
    /// block now.
    fn history(&mut self, h: Value, b: &mut Block, requested: &mut Option<u64>) {
        let Some(hc) = self.list_or_repair(h, "ignored") else {
            return;
        };
        let doc = self.doc;
        let Some(last) = doc.items(hc).last() else {
            return;
        };
        let Val::Dict(rc) = doc.get(last) else {
            return;
        };
        self.path.push(Seg::Idx(doc.len(hc).saturating_sub(1)));
        for (k, val) in doc.pairs(rc) {
            match self.key(k) {
                Key::Frames if b.stack.is_none() => {
                    b.stack = self.within(Seg::Key("frames"), |d| d.stack(val));
                }
                Key::RealSize if requested.is_none() => match self.uint(val) {
                    Ok(x) => *requested = Some(x),
                    Err(e) => self.repair(e.key("real_size"), "read as the block size"),
                },
                _ => {}
            }
        }
        self.path.pop();
    }

    // ----- annotations -----

    pub(super) fn annotations(&mut self, v: Value) -> Vec<Annotation> {
        let Some(c) = self.list_or_repair(v, "ignored") else {
            return Vec::new();
        };
        let doc = self.doc;
        let mut out = Vec::with_capacity(doc.len(c));
        self.path.push(Seg::Idx(0));
        for (i, av) in doc.items(c).enumerate() {
            self.set_index(i);
            let Val::Dict(ac) = doc.get(av) else {
                let e = PathErr::new("an annotation dict", self.found(av));
                self.repair(e, "annotation left out");
                continue;
            };
            let mut a = Annotation {
                name: self.empty,
                stage: AnnotationStage::Other,
                device: 0,
                time_us: NO_TIME,
            };
            for (k, val) in doc.pairs(ac) {
                let key = self.key(k);
                let r = match key {
                    Key::Name => {
                        a.name = self.str_or_empty(val, "name");
                        Ok(())
                    }
                    Key::Stage => self.str_id(val).and_then(|x| {
                        a.stage = match self.strings.get(x) {
                            "START" => AnnotationStage::Start,
                            "END" => AnnotationStage::End,
                            _ => return Err(PathErr::new("'START' or 'END'", self.found(val))),
                        };
                        Ok(())
                    }),
                    Key::Device => self.int(val).map(|x| a.device = x),
                    Key::TimeUs => self.int(val).map(|x| a.time_us = x),
                    _ => Ok(()),
                };
                if let Err(e) = r {
                    let fix = match key {
                        Key::Stage => "read as neither start nor end",
                        Key::TimeUs => "read as not recorded",
                        _ => "read as 0",
                    };
                    self.repair(e.key(key.name()), fix);
                }
            }
            out.push(a);
        }
        self.path.pop();
        out
    }

    // ----- the recorder's tags -----

    /// `vramscope_tags`: columns `device`, `addr`, `time_us`, `category`
    /// of equal length (a dict of lists keeps large tag sets small).
    pub(super) fn tags(&mut self, v: Value) -> Vec<Tag> {
        let doc = self.doc;
        let Val::Dict(c) = doc.get(v) else {
            let e = PathErr::new("a dict of columns", self.found(v));
            self.repair(e, "ignored");
            return Vec::new();
        };
        let (mut dev, mut addr, mut time, mut cat) = (None, None, None, None);
        for (k, val) in doc.pairs(c) {
            match doc.as_str(k) {
                Some("device") => dev = Some(val),
                Some("addr") => addr = Some(val),
                Some("time_us") => time = Some(val),
                Some("category") => cat = Some(val),
                _ => {}
            }
        }
        let col = |d: &mut Self, v: Option<Value>, key: &'static str| -> Vec<Value> {
            let Some(v) = v else { return Vec::new() };
            match d.within(Seg::Key(key), |d| d.list_or_repair(v, "ignored")) {
                Some(c) => doc.items(c).collect(),
                None => Vec::new(),
            }
        };
        let (dev, addr, time, cat) = (
            col(self, dev, "device"),
            col(self, addr, "addr"),
            col(self, time, "time_us"),
            col(self, cat, "category"),
        );
        let n = addr.len().min(time.len()).min(cat.len());
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let (Ok(a), Ok(t), Ok(c)) =
                (self.uint(addr[i]), self.int(time[i]), self.str_id(cat[i]))
            else {
                let e = PathErr::new("an address, a time and a category name", format!("tag {i}"));
                self.repair(e, "tag left out");
                continue;
            };
            let d = dev.get(i).and_then(|&x| self.uint(x).ok()).unwrap_or(0);
            out.push(Tag {
                device: d.min(u32::MAX as u64) as u32,
                addr: a,
                time_us: t,
                category: c,
            });
        }
        out.sort_by_key(|t| t.time_us);
        out
    }
}
