//! A memory timeline as device 0's trace, with the Memory Profiler's
//! category on every entry.
//!
//! A timeline records bytes per category over time, not allocations: rows
//! carry no address, stack or device. What is exact, and what is a choice:
//!
//! * each `CREATE` is a block of its own at a made-up address; a `DESTROY`
//!   ends a live block of the same category and size (the newest), or, when
//!   there is none, takes its bytes from the category's newest blocks
//!   (splitting one if needed); an `INCREMENT_VERSION` that keeps the
//!   category keeps the block, one that changes it ends the block and
//!   starts one of the new category (so that bytes move between
//!   categories); `PREEXISTING` rows are blocks from before the window.
//!   Bytes per category after every row are therefore exactly the file's;
//!   which allocation a `DESTROY` ended is not recorded, so a block's
//!   lifetime is a guess.
//! * plot points give only the totals: a category's growth between two
//!   points is one block, its shrinking ends that category's newest blocks;
//!   the first point's bytes are alive from the start.
//!
//! Frees are written before allocations at one instant, so the replayed
//! total never passes through a peak the timeline did not have.

use crate::decode::Decoded;
use crate::error::SnapshotError;
use crate::hash::FxHashMap;
use crate::intern::{FrameTable, StackId, StackTable, StrId, StringTable};
use crate::model::{Action, Layout, SourceFormat, NO_TIME};

use super::emit::{by_ordinal, end_segment, Builder, Live};
use super::timeline_json::{parse, Row, RowAction, Timeline, CATEGORIES};

pub(super) fn decode(data: &[u8]) -> Result<(Decoded, SourceFormat), SnapshotError> {
    let mut strings = StringTable::default();
    let empty = strings.intern("");
    let cats = CATEGORIES.map(|c| strings.intern(c));
    let mut w = Writer::new(cats);
    let (format, mut warnings) = match parse(data)? {
        Timeline::Raw(rows) => {
            replay_rows(&rows, &mut w);
            let mut notes = vec![format!(
                "read as a Memory Profiler timeline (export_memory_timeline raw rows): {} rows, \
                 which record no address, stack or device: each CREATE is a block of its own \
                 on device 0 and each DESTROY ends a live block of the same category and size, \
                 so bytes per category are exact after every row but which block a DESTROY \
                 ended is not",
                rows.len()
            )];
            if w.inexact > 0 {
                notes.push(format!(
                    "{} DESTROY rows found no live block of their category and size; their \
                     bytes were taken from the newest blocks of the category",
                    w.inexact
                ));
            }
            (SourceFormat::MemoryTimeline, notes)
        }
        Timeline::Plot(times, sizes) => {
            replay_points(&times, &sizes, &mut w);
            let notes = vec![format!(
                "read as a Memory Profiler timeline plot (export_memory_timeline JSON: times and \
                 bytes per category): bytes per category are exact at each of its {} points; \
                 the allocations between points are not recorded, so each point's growth in a \
                 category is one block on device 0, a decrease ends the category's newest \
                 blocks, and the first point's memory is alive from the start",
                times.len()
            )];
            (SourceFormat::MemoryTimelinePlot, notes)
        }
    };
    if w.overdrawn > 0 {
        warnings.push(format!(
            "the timeline frees {} bytes more of a category than it holds; those bytes are \
             shown as allocated before the window",
            w.overdrawn
        ));
    }
    warnings.push("a memory timeline records no reserved memory: reserved shows as 0".into());
    let live: Vec<Live> = w
        .blocks
        .iter()
        .filter(|b| b.alive)
        .map(|b| Live {
            addr: b.addr,
            size: b.size,
            stack: StackId::NONE,
            category: cats[b.cat as usize],
        })
        .collect();
    let (mut segments, mut blocks) = (Vec::new(), Vec::new());
    end_segment(0, 0, live, empty, &mut segments, &mut blocks);
    let decoded = Decoded {
        strings,
        frames: FrameTable::default(),
        stacks: StackTable::default(),
        segments,
        blocks,
        traces: by_ordinal(vec![w.b.t]),
        annotations: Vec::new(),
        tags: Vec::new(),
        allocator_settings: None,
        layout: Layout::Dict,
        legacy_blocks: false,
        warnings,
        repairs: Vec::new(),
        recorder: None,
    };
    Ok((decoded, format))
}

fn time_us(t_ns: i64) -> i64 {
    if t_ns < 0 {
        NO_TIME
    } else {
        t_ns / 1000
    }
}

fn replay_rows(rows: &[Row], w: &mut Writer) {
    let mut i = 0;
    while i < rows.len() {
        let r = rows[i];
        let (t, size) = (time_us(r.t_ns), r.bytes.unsigned_abs());
        i += 1;
        match r.action {
            RowAction::Preexisting if r.bytes > 0 => {
                w.block(r.category, size, true, t);
            }
            RowAction::Create if r.bytes > 0 => {
                w.block(r.category, size, false, t);
            }
            RowAction::Destroy => w.free(r.category, size, t),
            RowAction::IncrementVersion => {
                // The old version's row (-n) then the new one's (+n).
                let next = rows.get(i).filter(|n| {
                    n.action == RowAction::IncrementVersion
                        && n.t_ns == r.t_ns
                        && r.bytes < 0
                        && n.bytes == -r.bytes
                });
                match next {
                    Some(n) => {
                        i += 1;
                        if n.category != r.category {
                            w.free(r.category, size, t);
                            w.block(n.category, size, false, t);
                        }
                    }
                    None if r.bytes < 0 => w.free(r.category, size, t),
                    None if r.bytes > 0 => {
                        w.block(r.category, size, false, t);
                    }
                    None => {}
                }
            }
            _ => {}
        }
    }
}

fn replay_points(times: &[i64], sizes: &[[i64; 8]], w: &mut Writer) {
    let mut prev = [0i64; 8];
    for (k, (&time, now)) in times.iter().zip(sizes).enumerate() {
        let t = if time < 0 { NO_TIME } else { time };
        for c in 0..8 {
            let d = now[c] - prev[c];
            if d < 0 {
                w.free(c as u8, d.unsigned_abs(), t);
            }
        }
        for c in 0..8 {
            let d = now[c] - prev[c];
            if d > 0 {
                w.block(c as u8, d as u64, k == 0, t);
            }
        }
        prev = *now;
    }
}

struct Blk {
    addr: u64,
    size: u64,
    cat: u8,
    alive: bool,
}

/// Blocks by category, newest last, and the entries written for them.
struct Writer {
    b: Builder,
    cats: [StrId; 8],
    blocks: Vec<Blk>,
    /// Live blocks by (category, size) and by category, newest last; dead
    /// ones are dropped when met.
    by_size: FxHashMap<(u8, u64), Vec<u32>>,
    by_cat: [Vec<u32>; 8],
    inexact: u64,
    overdrawn: u64,
}

impl Writer {
    fn new(cats: [StrId; 8]) -> Writer {
        let mut b = Builder::new(0);
        b.t.category = Some(Vec::new());
        Writer {
            b,
            cats,
            blocks: Vec::new(),
            by_size: FxHashMap::default(),
            by_cat: Default::default(),
            inexact: 0,
            overdrawn: 0,
        }
    }

    fn entry(&mut self, action: Action, addr: u64, size: u64, t: i64, cat: u8) {
        self.b.push(action, addr, size, t, StackId::NONE);
        if let Some(c) = self.b.t.category.as_mut() {
            c.push(self.cats[cat as usize]);
        }
    }

    /// A new block; one from before the window has no entry.
    fn block(&mut self, cat: u8, size: u64, before: bool, t: i64) {
        let addr = self.b.synth_addr(size);
        let id = self.blocks.len() as u32;
        self.blocks.push(Blk {
            addr,
            size,
            cat,
            alive: true,
        });
        self.by_size.entry((cat, size)).or_default().push(id);
        self.by_cat[cat as usize].push(id);
        if !before {
            self.entry(Action::Alloc, addr, size, t, cat);
        }
    }

    fn end(&mut self, id: u32, t: i64) {
        let b = &mut self.blocks[id as usize];
        b.alive = false;
        let (addr, size, cat) = (b.addr, b.size, b.cat);
        self.entry(Action::FreeCompleted, addr, size, t, cat);
    }

    /// End `size` bytes of category `cat`.
    fn free(&mut self, cat: u8, size: u64, t: i64) {
        if size == 0 {
            return;
        }
        if let Some(list) = self.by_size.get_mut(&(cat, size)) {
            while let Some(id) = list.pop() {
                if self.blocks[id as usize].alive {
                    return self.end(id, t);
                }
            }
        }
        self.inexact += 1;
        let mut need = size;
        while need > 0 {
            let Some(id) = self.by_cat[cat as usize].pop() else {
                // More freed than the category holds: bytes from before.
                self.overdrawn += need;
                let addr = self.b.synth_addr(need);
                self.entry(Action::FreeCompleted, addr, need, t, cat);
                return;
            };
            if !self.blocks[id as usize].alive {
                continue;
            }
            let s = self.blocks[id as usize].size;
            self.end(id, t);
            if s > need {
                self.block(cat, s - need, false, t);
                need = 0;
            } else {
                need -= s;
            }
        }
    }
}
