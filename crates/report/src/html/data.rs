//! What the report page needs, as columns: every allocation as an interval
//! of events (in stacking order), segments as intervals, event times, and
//! the interned stacks with each frame classified (user, library, native,
//! noise).
//!
//! Stacking order is the order in which allocations were made, with blocks
//! allocated before the trace window at the bottom (those alive at the end
//! lowest): the same picture as PyTorch's viewer, where a band moves down
//! when something below it is freed.

use std::collections::BTreeMap;

use serde_json::json;
use vramscope_analysis::backward_blocks::BackwardBlocks;
use vramscope_analysis::categories::{Categories, Category, Labelled, Phase, CATEGORIES};
use vramscope_analysis::lifetimes::{
    Lifetimes, BEFORE_WINDOW, NOT_REQUESTED, NO_BLOCK, STILL_ALIVE,
};
use vramscope_analysis::sites::{frame_location, is_library, is_native, is_noise, site_frame};
use vramscope_analysis::within::{backward_label, part_label, ModuleIndex};
use vramscope_analysis::DeviceSummary;
use vramscope_snapshot::hash::FxHashMap;
use vramscope_snapshot::{Action, DeviceTrace, Snapshot, StackId, NO_TIME};

use super::blob::Blob;

/// "Alive at the end" / "not freed yet" in interval ends: the event count.
fn open_end(t: &DeviceTrace) -> u32 {
    t.len() as u32
}

/// One allocation's life, in event indices (`t0 = -1`: before the window).
#[derive(Clone, Copy)]
struct Interval {
    t0: i32,
    treq: u32,
    t1: u32,
    size: u64,
    addr: u64,
    stack: StackId,
    /// Event that carries its metadata (the alloc, else the free).
    ev: Option<u32>,
    /// The block in [`Lifetimes`].
    block: usize,
}

/// Every block's life from the analysis' pairing ([`Lifetimes`]: in-place
/// updates joined, blocks from before the window and from the dump), as
/// intervals in stacking order: blocks from before the window first, longest
/// lived lowest, then the others in the order they were allocated.
fn allocations(l: &Lifetimes, t: &DeviceTrace) -> Vec<Interval> {
    let end = open_end(t);
    let interval = |b: usize| {
        let t1 = if l.death[b] == STILL_ALIVE {
            end
        } else {
            l.death[b]
        };
        let (t0, ev) = if l.birth[b] == BEFORE_WINDOW {
            (-1, (l.death[b] != STILL_ALIVE).then_some(l.death[b]))
        } else {
            (l.birth[b] as i32, Some(l.birth[b]))
        };
        Interval {
            t0,
            treq: if l.free_requested[b] == NOT_REQUESTED {
                t1
            } else {
                l.free_requested[b].min(t1)
            },
            t1,
            size: l.size[b],
            addr: l.addr[b],
            stack: l.stack[b],
            ev,
            block: b,
        }
    };
    let (mut before, window): (Vec<Interval>, Vec<Interval>) =
        (0..l.len()).map(interval).partition(|a| a.t0 < 0);
    // Longest-lived at the bottom: bands above them then move least.
    before.sort_by(|a, b| b.t1.cmp(&a.t1).then(a.addr.cmp(&b.addr)));
    before.extend(window);
    before
}

/// A mapped range of device memory over time.
#[derive(Clone, Copy)]
struct SegPiece {
    t0: i32,
    t1: u32,
    addr: u64,
    size: u64,
    kind: u8,
}

const SEG_LARGE: u8 = 0;
const SEG_SMALL: u8 = 1;
const SEG_EXPANDABLE: u8 = 2;

/// Segment intervals. Expandable segments map and unmap sub-ranges that
/// need not match earlier maps, so open ranges are split on unmap.
fn segments(snap: &Snapshot, device: u32, t: &DeviceTrace) -> Vec<SegPiece> {
    let end = open_end(t);
    let kind_at_end = |addr: u64| {
        snap.segments_of(device)
            .find(|s| s.address <= addr && addr < s.address + s.total_size)
            .map(|s| {
                if s.is_expandable {
                    SEG_EXPANDABLE
                } else if s.segment_type == vramscope_snapshot::SegmentType::Small {
                    SEG_SMALL
                } else {
                    SEG_LARGE
                }
            })
    };
    let mut open: BTreeMap<u64, SegPiece> = BTreeMap::new();
    let mut out = Vec::new();
    for i in 0..t.len() {
        let (addr, size) = (t.addr[i], t.size[i]);
        match t.action[i] {
            Action::SegmentAlloc | Action::SegmentMap => {
                let expandable = t.action[i] == Action::SegmentMap;
                let kind = if expandable {
                    SEG_EXPANDABLE
                } else {
                    kind_at_end(addr).unwrap_or(
                        if size == vramscope_gpus::allocator::SMALL_BUFFER {
                            SEG_SMALL
                        } else {
                            SEG_LARGE
                        },
                    )
                };
                open.insert(
                    addr,
                    SegPiece {
                        t0: i as i32,
                        t1: end,
                        addr,
                        size,
                        kind,
                    },
                );
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                let (lo, hi) = (addr, addr.saturating_add(size));
                let hits: Vec<u64> = open
                    .range(..hi)
                    .filter(|(_, p)| p.addr + p.size > lo)
                    .map(|(&a, _)| a)
                    .collect();
                if hits.is_empty() {
                    // Mapped before the window.
                    let kind = if t.action[i] == Action::SegmentUnmap {
                        SEG_EXPANDABLE
                    } else {
                        SEG_LARGE
                    };
                    out.push(SegPiece {
                        t0: -1,
                        t1: i as u32,
                        addr,
                        size,
                        kind,
                    });
                }
                for a in hits {
                    let Some(p) = open.remove(&a) else { continue };
                    let (plo, phi) = (p.addr, p.addr + p.size);
                    let (clo, chi) = (plo.max(lo), phi.min(hi));
                    out.push(SegPiece {
                        t1: i as u32,
                        addr: clo,
                        size: chi - clo,
                        ..p
                    });
                    if plo < clo {
                        open.insert(
                            plo,
                            SegPiece {
                                addr: plo,
                                size: clo - plo,
                                ..p
                            },
                        );
                    }
                    if chi < phi {
                        open.insert(
                            chi,
                            SegPiece {
                                addr: chi,
                                size: phi - chi,
                                ..p
                            },
                        );
                    }
                }
            }
            _ => {}
        }
    }
    // Whatever the end state holds that no open range covers was mapped
    // before the window.
    for s in snap.segments_of(device) {
        let (mut lo, hi) = (s.address, s.address + s.total_size);
        let kind = kind_at_end(s.address).unwrap_or(SEG_LARGE);
        for p in open.range(s.address..hi).map(|(_, p)| *p) {
            if p.addr > lo {
                out.push(SegPiece {
                    t0: -1,
                    t1: end,
                    addr: lo,
                    size: p.addr - lo,
                    kind,
                });
            }
            lo = lo.max(p.addr + p.size);
        }
        if lo < hi {
            out.push(SegPiece {
                t0: -1,
                t1: end,
                addr: lo,
                size: hi - lo,
                kind,
            });
        }
    }
    out.extend(open.into_values());
    out.sort_by_key(|p| (p.addr, p.t0));
    out
}

/// Interns strings for the page and classifies frames.
#[derive(Default)]
pub struct Tables {
    strings: Vec<String>,
    string_ids: FxHashMap<String, u32>,
    /// Per snapshot frame: index in `frames` (u32::MAX not yet added).
    frame_map: Vec<u32>,
    /// `[file, line, name, kind]` per frame; kind 0 user, 1 library, 2 native, 3 noise.
    frames: Vec<[u32; 4]>,
    stack_map: FxHashMap<StackId, u32>,
    stack_off: Vec<u32>,
    stack_frames: Vec<u32>,
    /// Per stack: its allocation site (a `frames` index), as the summary picks it.
    stack_site: Vec<u32>,
    /// Per stack: what beneath the site made it (a `strings` index of the
    /// part's label, `crate::within`), u32::MAX when nothing is named.
    stack_part: Vec<u32>,
}

impl Tables {
    pub fn new(snap: &Snapshot) -> Self {
        Tables {
            frame_map: vec![u32::MAX; snap.frames.len()],
            stack_off: vec![0],
            ..Default::default()
        }
    }

    pub fn string(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as u32;
        self.strings.push(s.to_owned());
        self.string_ids.insert(s.to_owned(), id);
        id
    }

    fn stack(&mut self, snap: &Snapshot, id: StackId) -> u32 {
        if id.is_none() {
            return u32::MAX;
        }
        if let Some(&s) = self.stack_map.get(&id) {
            return s;
        }
        for &fid in snap.stacks.get(id) {
            let f = self.frame(snap, fid);
            self.stack_frames.push(f);
        }
        let site = site_frame(snap, id).map_or(u32::MAX, |fid| self.frame(snap, fid));
        self.stack_site.push(site);
        self.stack_off.push(self.stack_frames.len() as u32);
        let s = self.stack_off.len() as u32 - 2;
        self.stack_map.insert(id, s);
        s
    }

    /// The page's index of a snapshot frame, classified on first use.
    fn frame(&mut self, snap: &Snapshot, fid: vramscope_snapshot::FrameId) -> u32 {
        let slot = self.frame_map[fid.0 as usize];
        if slot != u32::MAX {
            slot
        } else {
            let (file, line, name) = frame_location(snap, snap.frames.get(fid));
            let kind = if is_noise(&file, &name) {
                3
            } else if is_native(&file, &name) {
                2
            } else if is_library(&file) {
                1
            } else {
                0
            };
            let entry = [self.string(&file), line, self.string(&name), kind];
            self.frames.push(entry);
            let k = self.frames.len() as u32 - 1;
            self.frame_map[fid.0 as usize] = k;
            k
        }
    }

    /// Each stack's part beneath its site, once every stack is known.
    pub fn parts(&mut self, snap: &Snapshot) {
        let modules = ModuleIndex::new(snap);
        let mut stacks: Vec<(StackId, u32)> =
            self.stack_map.iter().map(|(&k, &v)| (k, v)).collect();
        stacks.sort_unstable_by_key(|&(_, v)| v);
        self.stack_part = vec![u32::MAX; self.stack_site.len()];
        for (id, s) in stacks {
            let site = site_frame(snap, id);
            if let Some(label) = part_label(snap, &modules, id, site) {
                self.stack_part[s as usize] = self.string(&label);
            }
        }
    }

    /// Write the tables into the blob.
    pub fn finish(self, blob: &mut Blob) {
        blob.header.insert("strings".into(), json!(self.strings));
        let flat: Vec<u32> = self.frames.iter().flatten().copied().collect();
        blob.u32("frames", &flat);
        blob.u32("stack_off", &self.stack_off);
        blob.u32("stack_frames", &self.stack_frames);
        blob.u32("stack_site", &self.stack_site);
        blob.u32("stack_part", &self.stack_part);
    }
}

/// Add one device's columns to the blob (array names prefixed `d<N>.`) and
/// return its header entry.
pub fn device(
    snap: &Snapshot,
    device: u32,
    summary: &DeviceSummary,
    labelled: &Labelled,
    tables: &mut Tables,
    blob: &mut Blob,
) -> serde_json::Value {
    let empty = DeviceTrace::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let p = |n: &str| format!("d{device}.{n}");

    // Event times as µs deltas (u32): compact and exact for any realistic gap.
    let has_time = t.has_time();
    let t_first = t.time_us.iter().copied().find(|&x| x != NO_TIME);
    if has_time {
        let mut prev = t_first.unwrap_or(0);
        let dt: Vec<u32> = t
            .time_us
            .iter()
            .map(|&x| {
                let x = if x == NO_TIME { prev } else { x.max(prev) };
                let d = (x - prev).clamp(0, u32::MAX as i64) as u32;
                prev = x;
                d
            })
            .collect();
        blob.u32(&p("ev_dt"), &dt);
    }

    let (lifetimes, cats) = (&labelled.lifetimes, &labelled.categories);
    let allocs = allocations(lifetimes, t);
    let mut streams: Vec<u64> = Vec::new();
    let mut present = [false; CATEGORIES];
    let (mut a_t0, mut a_treq, mut a_t1) = (Vec::new(), Vec::new(), Vec::new());
    let (mut a_size, mut a_addr, mut a_stack) = (Vec::new(), Vec::new(), Vec::new());
    let (mut a_stream, mut a_cat, mut a_meta) = (Vec::new(), Vec::new(), Vec::new());
    let has_meta = t.user_metadata.is_some() || t.compile_context.is_some();
    // The block whose backward made each allocation, where the recorder
    // marked backwards (a stack shows only `loss.backward()` there); the
    // page prefers the stack's own part (a recomputed forward's module).
    let backward = BackwardBlocks::new(snap, device);
    let modules = (!backward.is_empty()).then(|| ModuleIndex::new(snap));
    let mut a_part: Vec<u32> = Vec::new();
    let mut part_ids: FxHashMap<String, u32> = FxHashMap::default();
    for a in &allocs {
        a_t0.push(a.t0);
        a_treq.push(a.treq);
        a_t1.push(a.t1);
        a_size.push(a.size as f64);
        a_addr.push(a.addr as f64);
        a_stack.push(tables.stack(snap, a.stack));
        if let Some(modules) = &modules {
            let ev = (a.t0 >= 0).then_some(a.t0 as u32);
            let block = ev.and_then(|e| backward.at(e));
            // Backward's own allocations before autograd reached the first
            // marked module: for what came after its output (the loss).
            let before = ev
                .filter(|&e| cats.phases.phase.get(e as usize) == Some(&Phase::Backward))
                .and_then(|e| backward.before_the_model(e))
                .filter(|_| block.is_none());
            a_part.push(block.or(before).map_or(u32::MAX, |b| {
                if let Some(&id) = part_ids.get(b) {
                    return id;
                }
                let text = match before {
                    Some(what) => what.to_string(),
                    None => backward_label(modules, b),
                };
                let id = tables.string(&text);
                part_ids.insert(b.to_owned(), id);
                id
            }));
        }
        let ev = a.ev.map(|e| e as usize);
        let stream = ev.map_or(0, |e| t.stream[e]);
        let si = streams
            .iter()
            .position(|&s| s == stream)
            .unwrap_or_else(|| {
                streams.push(stream);
                streams.len() - 1
            });
        a_stream.push(si.min(u16::MAX as usize) as u16);
        let cat = cats
            .category
            .get(a.block)
            .copied()
            .unwrap_or(Category::Unknown);
        present[cat as usize] = true;
        a_cat.push(cat as u16);
        if has_meta {
            // "user_metadata | compile_context", skipping PyTorch's defaults.
            let um = ev
                .and_then(|e| t.user_metadata.as_ref().map(|c| snap.str(c[e])))
                .unwrap_or("");
            let cc = ev
                .and_then(|e| t.compile_context.as_ref().map(|c| snap.str(c[e])))
                .unwrap_or("");
            let cc = if cc == "N/A" { "" } else { cc };
            let m = match (um.is_empty(), cc.is_empty()) {
                (true, true) => u32::MAX,
                (false, true) => tables.string(um),
                (true, false) => tables.string(&format!("compile: {cc}")),
                (false, false) => tables.string(&format!("{um} | compile: {cc}")),
            };
            a_meta.push(m);
        }
    }
    blob.i32(&p("a_t0"), &a_t0);
    blob.u32(&p("a_treq"), &a_treq);
    blob.u32(&p("a_t1"), &a_t1);
    blob.f64(&p("a_size"), &a_size);
    blob.f64(&p("a_addr"), &a_addr);
    blob.u32(&p("a_stack"), &a_stack);
    if modules.is_some() {
        blob.u32(&p("a_part"), &a_part);
    }
    blob.u16(&p("a_stream"), &a_stream);
    blob.u16(&p("a_cat"), &a_cat);
    let series = category_series(t, lifetimes, cats);
    blob.u32(&p("cs_event"), &series.0);
    blob.f64(&p("cs_bytes"), &series.1);
    if has_meta {
        blob.u32(&p("a_meta"), &a_meta);
    }

    let segs = segments(snap, device, t);
    blob.i32(&p("s_t0"), &segs.iter().map(|s| s.t0).collect::<Vec<_>>());
    blob.u32(&p("s_t1"), &segs.iter().map(|s| s.t1).collect::<Vec<_>>());
    blob.f64(
        &p("s_addr"),
        &segs.iter().map(|s| s.addr as f64).collect::<Vec<_>>(),
    );
    blob.f64(
        &p("s_size"),
        &segs.iter().map(|s| s.size as f64).collect::<Vec<_>>(),
    );
    blob.u8(
        &p("s_kind"),
        &segs.iter().map(|s| s.kind).collect::<Vec<_>>(),
    );

    let ooms: Vec<serde_json::Value> = (0..t.len())
        .filter(|&i| t.action[i] == Action::Oom)
        .map(|i| json!({"event": i}))
        .collect();
    let annotations: Vec<serde_json::Value> = snap
        .annotations
        .iter()
        .filter(|a| a.device == device as i64 || a.device < 0)
        .filter(|a| a.time_us != NO_TIME)
        .map(|a| {
            json!({
                "name": snap.str(a.name),
                "stage": format!("{:?}", a.stage),
                "time_us": a.time_us as f64,
            })
        })
        .collect();
    json!({
        "device": device,
        // As PyTorch names it (`cpu`, `cuda:0`): the device selector's text.
        "name": summary.name,
        "events": t.len(),
        "allocs": allocs.len(),
        "segments": segs.len(),
        "has_time": has_time,
        "t_first_us": t_first.map(|x| x as f64),
        "streams": streams.iter().map(|s| format!("0x{s:x}")).collect::<Vec<_>>(),
        // Index = a_cat value; only those present are listed in the legend.
        "categories": Category::ALL.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
        "categories_present": Category::ALL
            .iter()
            .filter(|c| present[**c as usize])
            .map(|c| c.as_str())
            .collect::<Vec<_>>(),
        "category_sources": category_sources(cats),
        "ooms": ooms,
        "annotations": annotations,
        "summary": summary,
    })
}

/// Buckets of the category series: enough for a smooth area at any width a
/// screen has, small enough to embed at any trace length.
const SERIES_BUCKETS: usize = 4096;

/// Bytes per category over the trace, for the Categories view: the events
/// split into buckets, and for each the event where the total is highest
/// (so no spike is lost) with the bytes of every category there. Returns
/// (event per bucket, 8 × buckets bytes, category-major).
fn category_series(t: &DeviceTrace, l: &Lifetimes, c: &Categories) -> (Vec<u32>, Vec<f64>) {
    let n = t.len();
    let buckets = n.min(SERIES_BUCKETS);
    let mut cur = [0u64; CATEGORIES];
    for b in 0..l.len() {
        if l.birth[b] == BEFORE_WINDOW {
            cur[c.category[b] as usize] += l.size[b];
        }
    }
    let mut events = Vec::with_capacity(buckets);
    let mut bytes = vec![0f64; CATEGORIES * buckets];
    let mut best: Option<(u64, usize, [u64; CATEGORIES])> = None;
    let mut bucket = 0usize;
    for i in 0..n {
        let b = l.event_block[i];
        if b != NO_BLOCK {
            let (b, k) = (b as usize, c.category[b as usize] as usize);
            match t.action[i] {
                Action::Alloc if l.birth[b] == i as u32 => cur[k] += l.size[b],
                Action::FreeCompleted if l.death[b] == i as u32 => {
                    cur[k] = cur[k].saturating_sub(l.size[b])
                }
                _ => {}
            }
        }
        let total: u64 = cur.iter().sum();
        if best.is_none_or(|(bt, _, _)| total > bt) {
            best = Some((total, i, cur));
        }
        // Bucket `bucket` covers events [bucket·n/buckets, (bucket+1)·n/buckets).
        if (i + 1) * buckets >= (bucket + 1) * n {
            if let Some((_, e, v)) = best.take() {
                events.push(e as u32);
                for (k, x) in v.iter().enumerate() {
                    bytes[k * buckets + bucket] = *x as f64;
                }
            }
            bucket += 1;
        }
    }
    (events, bytes)
}

/// Where each category's labels came from (most of its blocks), by name.
fn category_sources(c: &Categories) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for cat in Category::ALL {
        let mut counts = [0u64; 4];
        for b in 0..c.category.len() {
            if c.category[b] == cat {
                counts[c.source[b].map_or(3, |s| s as usize)] += 1;
            }
        }
        let best = (0..4).max_by_key(|&k| (counts[k], 3 - k)).unwrap_or(3);
        if counts[best] > 0 {
            let name = ["recorder", "profiler", "inferred", "none"][best];
            m.insert(cat.as_str().into(), json!(name));
        }
    }
    serde_json::Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_analysis::Liveness;

    /// A CPU recording writes each in-place update (`param.add_`) as a free
    /// and an alloc at one instant: the page draws such a block as one band
    /// across the optimizer steps, as the analysis counts it, and the bands
    /// alive at the end are the memory the liveness walk finds there.
    #[test]
    fn in_place_updates_are_one_band() {
        let bytes = vramscope_testdata::recorded_bytes("mlp_adam_cpu.pickle.gz");
        let snap = vramscope_snapshot::decode_bytes(&bytes, &Default::default()).expect("decodes");
        let t = snap.trace(0).expect("trace");
        let l = Lifetimes::new(&snap, 0);
        assert!(l.versions_joined >= 100, "{} joined", l.versions_joined);
        let bands = allocations(&l, t);
        assert_eq!(bands.len(), l.len());
        let allocs = t.action.iter().filter(|&&a| a == Action::Alloc).count();
        assert_eq!(
            bands.len() as u64,
            allocs as u64 - l.versions_joined + {
                (0..l.len())
                    .filter(|&b| l.birth[b] == BEFORE_WINDOW)
                    .count() as u64
            }
        );
        // Blocks from before the window first, longest lived lowest.
        let first_window = bands.iter().position(|a| a.t0 >= 0).unwrap_or(bands.len());
        assert!(bands[..first_window].iter().all(|a| a.t0 < 0));
        assert!(bands[..first_window].windows(2).all(|w| w[0].t1 >= w[1].t1));
        assert!(bands[first_window..].windows(2).all(|w| w[0].t0 < w[1].t0));
        let end = open_end(t);
        let alive_at_end: u64 = bands.iter().filter(|a| a.t1 == end).map(|a| a.size).sum();
        assert_eq!(alive_at_end, Liveness::new(&snap, 0).final_bytes);
        assert!(bands.iter().all(|a| a.treq <= a.t1));
    }
}
