//! A streaming parser for Kineto's Chrome trace: one pass over the JSON that
//! keeps only what memory analysis needs and builds no tree.
//!
//! Traces run to hundreds of megabytes, most of it kernels, runtime calls
//! and flow arrows. Each event is visited field by field; strings are
//! borrowed from the input where they have no escapes, `args` is skipped
//! unless the event can use it, and only three kinds of event are kept:
//! `[memory]` instants, the `python_function`/`cpu_op` spans that enclose
//! allocations (for stacks), and `user_annotation`/`ProfilerStep#N` spans
//! (iterations).

use std::borrow::Cow;

use serde::de::DeserializeSeed;

use super::stacks::{OpFrames, NO_CALL_STACK};
use super::values::{Cat, Num};
use super::visit::{Event, Top};
use crate::error::SnapshotError;
use crate::intern::{FrameTable, StackId, StackTable, StrId, StringTable};
use crate::options::{LoadOptions, LoadProgress};
use crate::repair::Repair;

/// A `[memory]` event, as recorded.
#[derive(Clone, Copy, Debug)]
pub(super) struct MemEvent {
    /// Nanoseconds (the trace's µs × 1000, before `baseTimeNanoseconds`).
    pub ts_ns: i64,
    pub thread: u32,
    /// `Device Type` (0 CPU, 1 CUDA, ...), -1 when absent.
    pub dev_type: i32,
    /// `Device Id`, -1 for the CPU.
    pub dev_id: i32,
    pub addr: Option<u64>,
    /// Positive: an allocation; negative: a free.
    pub bytes: i64,
    pub total_allocated: Option<i64>,
    pub total_reserved: Option<i64>,
    /// Rebuilt from the enclosing operators (set by `stacks::rebuild`).
    pub stack: StackId,
}

/// A `python_function` or `cpu_op` span of one thread.
#[derive(Clone, Copy, Debug)]
pub(super) struct Op {
    pub thread: u32,
    /// Index into [`OpFrames`]'s frames of this op's name.
    pub frame: u32,
    /// The `Call stack` of old traces, or [`NO_CALL_STACK`].
    pub call_stack: u32,
    pub start_ns: i64,
    pub end_ns: i64,
}

/// A `record_function` span (`user_annotation`, `ProfilerStep#N`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Span {
    pub name: StrId,
    pub start_ns: i64,
    pub end_ns: i64,
}

/// What the parser kept.
pub(super) struct Parsed {
    pub strings: StringTable,
    pub frames: FrameTable,
    pub stacks: StackTable,
    pub op_frames: OpFrames,
    pub mem: Vec<MemEvent>,
    pub ops: Vec<Op>,
    pub spans: Vec<Span>,
    /// `baseTimeNanoseconds`: newer traces write `ts` relative to it.
    pub base_ns: i64,
    pub events: u64,
    pub truncated: Option<String>,
    pub repairs: Vec<Repair>,
}

/// Parse `data` as a trace; `None` when the top level is not a dict with
/// `traceEvents` (the caller tries the snapshot decoder next).
pub(super) fn parse_trace(
    data: &[u8],
    opts: &LoadOptions,
    map: Option<&memmap2::Mmap>,
) -> Result<Option<Parsed>, SnapshotError> {
    let recover = opts.recover_truncated;
    let mut st = State::new(Feedback {
        start: data.as_ptr() as usize,
        len: data.len(),
        opts,
        map,
        dropped_to: 0,
    });
    let mut de = serde_json::Deserializer::from_slice(data);
    let r = Top { st: &mut st }
        .deserialize(&mut de)
        .and_then(|_| de.end());
    match r {
        _ if st.snapshot_key || !st.saw_events => return Ok(None),
        Ok(()) => {}
        Err(e) if recover && e.classify() == serde_json::error::Category::Eof => {
            st.truncated = Some(format!(
                "the JSON ends at line {}, column {}, before it is complete",
                e.line(),
                e.column()
            ));
        }
        Err(e) => {
            return Err(SnapshotError::Json {
                line: e.line(),
                column: e.column(),
                message: format!("in a profiler trace's traceEvents: {e}"),
            })
        }
    }
    Ok(Some(st.finish()))
}

/// `[memory]` events left out for a field that could not be read:
/// counted, with the first.
struct Skipped {
    field: &'static str,
    count: u64,
    example: String,
}

/// Events between progress reports (and releases of the input's pages).
const PROGRESS_EVERY: u64 = 1 << 16;

/// Progress for the caller, and the mapped input's pages released behind
/// the parser (as the pickle path does), so that resident memory stays near
/// what is kept rather than the size of the file.
struct Feedback<'m> {
    start: usize,
    len: usize,
    opts: &'m LoadOptions,
    map: Option<&'m memmap2::Mmap>,
    dropped_to: usize,
}

impl Feedback<'_> {
    fn at(&mut self, pos: usize) {
        if let Some(p) = &self.opts.progress {
            p(LoadProgress {
                stage: "parsing",
                done: pos as u64,
                total: self.len as u64,
            });
        }
        #[cfg(unix)]
        if let Some(m) = self.map {
            let upto = pos.saturating_sub(1 << 20) & !0xffff;
            if upto > self.dropped_to {
                // SAFETY: the map is private and read-only and the parser
                // copies everything it keeps; pages behind the cursor are
                // never read again, and would simply be re-read from the
                // file if they were.
                let _ = unsafe {
                    m.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        self.dropped_to,
                        upto - self.dropped_to,
                    )
                };
                self.dropped_to = upto;
            }
        }
    }
}

pub(super) struct State<'m> {
    fb: Feedback<'m>,
    pub p: Parsed,
    threads: crate::hash::FxHashMap<(u64, u64), u32>,
    pub saw_events: bool,
    pub snapshot_key: bool,
    truncated: Option<String>,
    skipped: Vec<Skipped>,
}

impl<'m> State<'m> {
    fn new(fb: Feedback<'m>) -> State<'m> {
        let mut strings = StringTable::default();
        // Id 0 is the empty string, as in decoded snapshots.
        strings.intern("");
        State {
            fb,
            p: Parsed {
                strings,
                frames: FrameTable::default(),
                stacks: StackTable::default(),
                op_frames: OpFrames::default(),
                mem: Vec::new(),
                ops: Vec::new(),
                spans: Vec::new(),
                base_ns: 0,
                events: 0,
                truncated: None,
                repairs: Vec::new(),
            },
            threads: Default::default(),
            saw_events: false,
            snapshot_key: false,
            truncated: None,
            skipped: Vec::new(),
        }
    }

    fn finish(mut self) -> Parsed {
        self.p.truncated = self.truncated;
        self.p
            .repairs
            .extend(self.skipped.into_iter().map(|k| Repair {
                field: format!("traceEvents[*].{}", k.field),
                fix: "[memory] event skipped".into(),
                count: k.count,
                example: k.example,
            }));
        self.p
    }

    /// Where the parser is, from a name borrowed from the input (names
    /// without escapes are).
    fn progress(&mut self, ev: &Event) {
        if let Some(Cow::Borrowed(name)) = &ev.name {
            let pos = (name.as_ptr() as usize).wrapping_sub(self.fb.start);
            if pos <= self.fb.len {
                self.fb.at(pos);
            }
        }
    }

    /// Count a `[memory]` event left out because `field` was not a number.
    fn skip(&mut self, field: &'static str, index: u64, found: Option<Num>) {
        let k = match self.skipped.iter().position(|k| k.field == field) {
            Some(k) => k,
            None => {
                let found = found.map_or("nothing".into(), |n| n.describe());
                self.skipped.push(Skipped {
                    field,
                    count: 0,
                    example: format!(
                        "traceEvents[{index}].{field}: expected a number, found {found}"
                    ),
                });
                self.skipped.len() - 1
            }
        };
        self.skipped[k].count += 1;
    }

    fn thread(&mut self, pid: u64, tid: u64) -> u32 {
        let n = self.threads.len() as u32;
        *self.threads.entry((pid, tid)).or_insert(n)
    }

    /// Keep what one event contributes.
    pub fn event(&mut self, ev: &Event) {
        let index = self.p.events;
        self.p.events += 1;
        if index.is_multiple_of(PROGRESS_EVERY) {
            self.progress(ev);
        }
        let Some(name) = ev.name.as_deref() else {
            return;
        };
        let is_memory = matches!(ev.ph, b'i' | b'I') && name == "[memory]";
        let Some(ts_ns) = ev.ts.and_then(Num::to_ns) else {
            if is_memory {
                self.skip("ts", index, ev.ts);
            }
            return;
        };
        match ev.ph {
            _ if is_memory => {
                let a = &ev.args;
                let Some(bytes) = a.bytes.and_then(Num::to_i64) else {
                    self.skip("args.Bytes", index, a.bytes);
                    return;
                };
                let thread = self.thread(ev.pid.0, ev.tid.0);
                let small = |n: Option<Num>, absent: i32| {
                    n.and_then(Num::to_i64)
                        .and_then(|x| i32::try_from(x).ok())
                        .unwrap_or(absent)
                };
                self.p.mem.push(MemEvent {
                    ts_ns,
                    thread,
                    dev_type: small(a.device_type, -1),
                    dev_id: small(a.device_id, -1),
                    addr: a.addr.and_then(Num::to_i64).map(|x| x as u64),
                    bytes,
                    total_allocated: a.total_allocated.and_then(Num::to_i64),
                    total_reserved: a.total_reserved.and_then(Num::to_i64),
                    stack: StackId::NONE,
                });
            }
            b'X' => {
                let dur = ev.dur.and_then(Num::to_ns).unwrap_or(0).max(0);
                let end_ns = ts_ns.saturating_add(dur);
                let is_step = name.starts_with("ProfilerStep#");
                if is_step || ev.cat == Cat::UserAnnotation {
                    let name = self.p.strings.intern(name);
                    self.p.spans.push(Span {
                        name,
                        start_ns: ts_ns,
                        end_ns,
                    });
                } else if matches!(ev.cat, Cat::PythonFunction | Cat::CpuOp) {
                    let thread = self.thread(ev.pid.0, ev.tid.0);
                    let p = &mut self.p;
                    let python = ev.cat == Cat::PythonFunction;
                    let frame = p
                        .op_frames
                        .frame(&mut p.strings, &mut p.frames, name, python);
                    let call_stack = match &ev.args.call_stack {
                        Some(s) if !s.0.is_empty() => {
                            p.op_frames.call_stack(&mut p.strings, &mut p.frames, &s.0)
                        }
                        _ => NO_CALL_STACK,
                    };
                    p.ops.push(Op {
                        thread,
                        frame,
                        call_stack,
                        start_ns: ts_ns,
                        end_ns,
                    });
                }
            }
            _ => {}
        }
    }
}
