//! Snapshots as a Perfetto trace (protobuf `Trace` of `TracePacket`s with
//! `TrackEvent`s, as Perfetto recommends for app-generated traces), written
//! packet by packet, so memory lies next to profiler traces in
//! ui.perfetto.dev:
//!
//! * one process per rank (`rank K`), with, per file and device, counter
//!   tracks in bytes: `allocated`, `reserved`, and `allocated: <category>`
//!   for each category present;
//! * allocations as slices named after their site, on lanes (child tracks;
//!   a lane is reused once its slice has ended), with the allocation's stack
//!   as an interned callstack; the largest allocations only, so the page
//!   stays readable: those of at least 1/2000 of the peak, on at most
//!   [`MAX_LANES`] lanes;
//! * instant events for OOMs and for `record_function` annotations.
//!
//! The protobuf is encoded by hand (field numbers from
//! `protos/perfetto/trace/…`, checked in the tests against the `perfetto`
//! package's compiled protos); no protobuf crate is needed.

use std::collections::HashMap;
use std::io::Write;

use vramscope_analysis::categories::Labelled;
use vramscope_analysis::liveness::{allocated_series, reserved_after};
use vramscope_analysis::sites::{frame_label, site_frame};
use vramscope_analysis::Liveness;
use vramscope_snapshot::{Action, Snapshot, StackId, NO_TIME};

/// Lanes of allocation slices per file and device.
pub const MAX_LANES: usize = 64;

/// A protobuf message being built.
#[derive(Default)]
struct Msg(Vec<u8>);

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

impl Msg {
    fn uint(&mut self, field: u32, v: u64) -> &mut Self {
        varint(&mut self.0, (field as u64) << 3);
        varint(&mut self.0, v);
        self
    }
    fn int(&mut self, field: u32, v: i64) -> &mut Self {
        self.uint(field, v as u64)
    }
    fn bytes(&mut self, field: u32, b: &[u8]) -> &mut Self {
        varint(&mut self.0, ((field as u64) << 3) | 2);
        varint(&mut self.0, b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }
    fn str(&mut self, field: u32, s: &str) -> &mut Self {
        self.bytes(field, s.as_bytes())
    }
    fn msg(&mut self, field: u32, m: &Msg) -> &mut Self {
        self.bytes(field, &m.0)
    }
}

// TracePacket
const P_TIMESTAMP: u32 = 8;
const P_SEQUENCE_ID: u32 = 10;
const P_TRACK_EVENT: u32 = 11;
const P_INTERNED: u32 = 12;
const P_FLAGS: u32 = 13;
const P_TRACK_DESCRIPTOR: u32 = 60;
const SEQ_CLEARED: u64 = 1;
const SEQ_NEEDS_STATE: u64 = 2;
// TrackDescriptor, ProcessDescriptor, CounterDescriptor
const TD_UUID: u32 = 1;
const TD_NAME: u32 = 2;
const TD_PROCESS: u32 = 3;
const TD_PARENT: u32 = 5;
const TD_COUNTER: u32 = 8;
const PD_PID: u32 = 1;
const PD_NAME: u32 = 6;
const CD_UNIT: u32 = 3;
const UNIT_SIZE_BYTES: u64 = 3;
// TrackEvent
const TE_TYPE: u32 = 9;
const TE_NAME_IID: u32 = 10;
const TE_TRACK: u32 = 11;
const TE_NAME: u32 = 23;
const TE_COUNTER: u32 = 30;
const TE_CALLSTACK_IID: u32 = 56;
const TE_ANNOTATIONS: u32 = 4;
const TYPE_BEGIN: u64 = 1;
const TYPE_END: u64 = 2;
const TYPE_INSTANT: u64 = 3;
const TYPE_COUNTER: u64 = 4;
// DebugAnnotation
const DA_NAME: u32 = 10;
const DA_UINT: u32 = 3;
// InternedData, EventName, InternedString, Frame, Callstack
const ID_EVENT_NAMES: u32 = 2;
const ID_FUNCTION_NAMES: u32 = 5;
const ID_FRAMES: u32 = 6;
const ID_CALLSTACKS: u32 = 7;
const IID: u32 = 1;
const NAME: u32 = 2;
const FRAME_FUNCTION: u32 = 2;
const CALLSTACK_FRAMES: u32 = 2;

/// Writes packets as `Trace.packet` (field 1) entries.
pub struct PerfettoWriter<W: Write> {
    out: W,
    next_uuid: u64,
    sequence: u32,
    pub bytes: u64,
}

/// One snapshot's place in the trace.
pub struct Source<'a> {
    pub snap: &'a Snapshot,
    pub rank: u32,
    pub name: String,
}

impl<W: Write> PerfettoWriter<W> {
    pub fn new(out: W) -> Self {
        PerfettoWriter {
            out,
            next_uuid: 1,
            sequence: 0,
            bytes: 0,
        }
    }

    fn packet(&mut self, p: &Msg) -> std::io::Result<()> {
        let mut head = Vec::with_capacity(6);
        varint(&mut head, (1 << 3) | 2);
        varint(&mut head, p.0.len() as u64);
        self.out.write_all(&head)?;
        self.out.write_all(&p.0)?;
        self.bytes += (head.len() + p.0.len()) as u64;
        Ok(())
    }

    fn uuid(&mut self) -> u64 {
        self.next_uuid += 1;
        self.next_uuid
    }

    fn track(&mut self, name: &str, parent: u64, counter: bool) -> std::io::Result<u64> {
        let uuid = self.uuid();
        let mut td = Msg::default();
        td.uint(TD_UUID, uuid)
            .str(TD_NAME, name)
            .uint(TD_PARENT, parent);
        if counter {
            let mut cd = Msg::default();
            cd.uint(CD_UNIT, UNIT_SIZE_BYTES);
            td.msg(TD_COUNTER, &cd);
        }
        let mut p = Msg::default();
        p.msg(P_TRACK_DESCRIPTOR, &td);
        self.packet(&p)?;
        Ok(uuid)
    }

    /// A process track for `rank` (pid rank + 1).
    pub fn process(&mut self, rank: u32, name: &str) -> std::io::Result<u64> {
        let uuid = self.uuid();
        let mut pd = Msg::default();
        pd.int(PD_PID, rank as i64 + 1).str(PD_NAME, name);
        let mut td = Msg::default();
        td.uint(TD_UUID, uuid).msg(TD_PROCESS, &pd);
        let mut p = Msg::default();
        p.msg(P_TRACK_DESCRIPTOR, &td);
        self.packet(&p)?;
        Ok(uuid)
    }

    /// Every device of `src` under the process `process`.
    pub fn snapshot(&mut self, src: &Source, process: u64) -> std::io::Result<()> {
        for d in src.snap.devices() {
            self.device(src, process, d)?;
        }
        Ok(())
    }

    fn device(&mut self, src: &Source, process: u64, device: u32) -> std::io::Result<()> {
        let snap = src.snap;
        let Some(t) = snap.trace(device) else {
            return Ok(());
        };
        self.sequence += 1;
        let seq = self.sequence;
        // CUDA unless vramscope's recorder says it followed another device.
        let kind = snap
            .source
            .recorder
            .as_ref()
            .map_or("cuda", |r| r.device_kind());
        let prefix = format!("{} {kind}:{device}", src.name);
        let allocated_track = self.track(&format!("{prefix} allocated"), process, true)?;
        let reserved_track = self.track(&format!("{prefix} reserved"), process, true)?;
        let events_track = self.track(&format!("{prefix} events"), process, false)?;
        let liveness = Liveness::new(snap, device);
        let series = allocated_series(&liveness, t);
        let reserved = reserved_after(snap, device);
        let labelled = Labelled::new(snap, device);
        let l = &labelled.lifetimes;
        let cats = &labelled.categories.category;
        let peak = series.iter().copied().max().unwrap_or(0);
        let big = (peak / 2000).max(1);
        // Time in ns: recorded µs, else the entry index in µs.
        let base = t.time_us.iter().copied().find(|&x| x != NO_TIME);
        let ts = |i: usize| -> u64 {
            match (t.time_us.get(i).copied().filter(|&x| x != NO_TIME), base) {
                (Some(x), Some(b)) => ((x - b).max(0) as u64) * 1000 + 1_000_000,
                _ => i as u64 * 1000 + 1_000_000,
            }
        };
        // The sequence starts with cleared incremental state.
        let mut p = Msg::default();
        p.uint(P_SEQUENCE_ID, seq as u64)
            .uint(P_FLAGS, SEQ_CLEARED)
            .uint(P_TIMESTAMP, ts(0));
        self.packet(&p)?;
        let counter = |w: &mut Self, track: u64, time: u64, v: u64| -> std::io::Result<()> {
            let mut te = Msg::default();
            te.uint(TE_TYPE, TYPE_COUNTER)
                .uint(TE_TRACK, track)
                .int(TE_COUNTER, v as i64);
            let mut p = Msg::default();
            p.uint(P_TIMESTAMP, time)
                .uint(P_SEQUENCE_ID, seq as u64)
                .msg(P_TRACK_EVENT, &te);
            w.packet(&p)
        };
        counter(self, allocated_track, ts(0), liveness.initial_bytes)?;
        let mut cat_tracks: HashMap<&'static str, (u64, u64)> = HashMap::new();
        let mut lanes: Vec<(u64, Option<usize>)> = Vec::new(); // (track, block on it)
        let mut lane_of: HashMap<usize, usize> = HashMap::new();
        let mut names: HashMap<StackId, u64> = HashMap::new();
        let mut last_reserved = u64::MAX;
        let mut prev = liveness.initial_bytes;
        for i in 0..t.len() {
            let time = ts(i);
            if series[i] != prev {
                counter(self, allocated_track, time, series[i])?;
            }
            if reserved[i] != last_reserved {
                counter(self, reserved_track, time, reserved[i])?;
                last_reserved = reserved[i];
            }
            let b = l.event_block.get(i).copied().unwrap_or(u32::MAX);
            if b != u32::MAX && series[i] != prev {
                let cat = cats.get(b as usize).map_or("unknown", |c| c.as_str());
                let up = series[i] > prev;
                let d = series[i].abs_diff(prev);
                let entry = match cat_tracks.get(cat) {
                    Some(&e) => e,
                    None => {
                        let tr =
                            self.track(&format!("{prefix} allocated: {cat}"), process, true)?;
                        cat_tracks.insert(cat, (tr, 0));
                        (tr, 0)
                    }
                };
                let v = if up {
                    entry.1 + d
                } else {
                    entry.1.saturating_sub(d)
                };
                cat_tracks.insert(cat, (entry.0, v));
                counter(self, entry.0, time, v)?;
                let block = b as usize;
                if up && l.size[block] >= big {
                    self.begin_slice(
                        src,
                        t.stack[i],
                        l.size[block],
                        block,
                        time,
                        seq,
                        &prefix,
                        process,
                        &mut lanes,
                        &mut lane_of,
                        &mut names,
                    )?;
                } else if !up {
                    if let Some(k) = lane_of.remove(&block) {
                        let mut te = Msg::default();
                        te.uint(TE_TYPE, TYPE_END).uint(TE_TRACK, lanes[k].0);
                        let mut p = Msg::default();
                        p.uint(P_TIMESTAMP, time)
                            .uint(P_SEQUENCE_ID, seq as u64)
                            .msg(P_TRACK_EVENT, &te);
                        self.packet(&p)?;
                        lanes[k].1 = None;
                    }
                }
            }
            prev = series[i];
            if t.action[i] == Action::Oom {
                self.instant(
                    events_track,
                    time,
                    seq,
                    &format!("OOM: asked for {} bytes", t.size[i]),
                )?;
            }
        }
        for a in snap
            .annotations
            .iter()
            .filter(|a| a.device == device as i64 || a.device < 0)
        {
            if let Some(b) = base.filter(|_| a.time_us != NO_TIME) {
                let time = ((a.time_us - b).max(0) as u64) * 1000 + 1_000_000;
                let stage = match a.stage {
                    vramscope_snapshot::AnnotationStage::Start => " (start)",
                    vramscope_snapshot::AnnotationStage::End => " (end)",
                    vramscope_snapshot::AnnotationStage::Other => "",
                };
                self.instant(
                    events_track,
                    time,
                    seq,
                    &format!("{}{stage}", snap.str(a.name)),
                )?;
            }
        }
        Ok(())
    }

    fn instant(&mut self, track: u64, time: u64, seq: u32, name: &str) -> std::io::Result<()> {
        let mut te = Msg::default();
        te.uint(TE_TYPE, TYPE_INSTANT)
            .uint(TE_TRACK, track)
            .str(TE_NAME, name);
        let mut p = Msg::default();
        p.uint(P_TIMESTAMP, time)
            .uint(P_SEQUENCE_ID, seq as u64)
            .msg(P_TRACK_EVENT, &te);
        self.packet(&p)
    }

    /// A slice for `block` on the first free lane, named after its site,
    /// with its stack interned on first use.
    #[allow(clippy::too_many_arguments)]
    fn begin_slice(
        &mut self,
        src: &Source,
        stack: StackId,
        size: u64,
        block: usize,
        time: u64,
        seq: u32,
        prefix: &str,
        process: u64,
        lanes: &mut Vec<(u64, Option<usize>)>,
        lane_of: &mut HashMap<usize, usize>,
        names: &mut HashMap<StackId, u64>,
    ) -> std::io::Result<()> {
        let k = match lanes.iter().position(|l| l.1.is_none()) {
            Some(k) => k,
            None if lanes.len() < MAX_LANES => {
                let tr = self.track(&format!("{prefix} lane {}", lanes.len()), process, false)?;
                lanes.push((tr, None));
                lanes.len() - 1
            }
            None => return Ok(()),
        };
        lanes[k].1 = Some(block);
        lane_of.insert(block, k);
        let snap = src.snap;
        let mut interned = None;
        let iid = match names.get(&stack) {
            Some(&iid) => iid,
            None => {
                let iid = names.len() as u64 + 1;
                names.insert(stack, iid);
                interned = Some(intern(snap, stack, iid));
                iid
            }
        };
        let mut ann = Msg::default();
        ann.str(DA_NAME, "bytes").uint(DA_UINT, size);
        let mut te = Msg::default();
        te.uint(TE_TYPE, TYPE_BEGIN)
            .uint(TE_TRACK, lanes[k].0)
            .uint(TE_NAME_IID, iid)
            .uint(TE_CALLSTACK_IID, iid)
            .msg(TE_ANNOTATIONS, &ann);
        let mut p = Msg::default();
        p.uint(P_TIMESTAMP, time)
            .uint(P_SEQUENCE_ID, seq as u64)
            .uint(P_FLAGS, SEQ_NEEDS_STATE);
        if let Some(i) = &interned {
            p.msg(P_INTERNED, i);
        }
        p.msg(P_TRACK_EVENT, &te);
        self.packet(&p)
    }

    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Interned data for one stack: its site as the event name, its frames as
/// function names, frames and a callstack, all with the same iid scheme
/// (frame iids: the stack's iid × 1000 + position).
fn intern(snap: &Snapshot, stack: StackId, iid: u64) -> Msg {
    let name = site_frame(snap, stack).map_or_else(
        || "<no stack recorded>".to_owned(),
        |f| frame_label(snap, f),
    );
    let mut m = Msg::default();
    let mut en = Msg::default();
    en.uint(IID, iid).str(NAME, &name);
    m.msg(ID_EVENT_NAMES, &en);
    let frames = if stack == StackId::NONE {
        &[][..]
    } else {
        snap.stacks.get(stack)
    };
    let mut cs = Msg::default();
    cs.uint(IID, iid);
    // Callstacks list frames outermost first.
    for (k, &f) in frames.iter().rev().take(64).enumerate() {
        let fid = iid * 1000 + k as u64;
        let mut s = Msg::default();
        s.uint(IID, fid).str(NAME, &frame_label(snap, f));
        m.msg(ID_FUNCTION_NAMES, &s);
        let mut fr = Msg::default();
        fr.uint(IID, fid).uint(FRAME_FUNCTION, fid);
        m.msg(ID_FRAMES, &fr);
        cs.uint(CALLSTACK_FRAMES, fid);
    }
    m.msg(ID_CALLSTACKS, &cs);
    m
}
