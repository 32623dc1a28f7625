//! A profiler trace's kept events as a snapshot: which memory is which
//! device, each device's trace (`curves`), stacks (`stacks`), and the
//! `record_function` spans as annotations.

use crate::decode::Decoded;
use crate::error::SnapshotError;
use crate::hash::FxHashMap;
use crate::model::{Annotation, AnnotationStage, Layout};

use super::curves::{device_trace, Notes};
use super::emit::{by_ordinal, end_segment, Live};
use super::parse::{MemEvent, Parsed};
use super::stacks;

/// `Device Type` of host memory (c10::DeviceType::CPU).
const CPU: i32 = 0;

/// Device ids from here on are not real devices (traces are indexed by
/// ordinal, so one absurd id would allocate that many empty traces).
const MAX_DEVICE: i32 = 4096;

pub(super) fn to_snapshot(mut p: Parsed) -> Result<Decoded, SnapshotError> {
    if p.mem.is_empty() {
        return Err(SnapshotError::NotASnapshot(format!(
            "this PyTorch profiler trace has {} events but no [memory] events; record with \
             torch.profiler.profile(profile_memory=True), or record a memory snapshot with \
             torch.cuda.memory._record_memory_history",
            p.events
        )));
    }
    stacks::rebuild(&mut p);
    let mut warnings = Vec::new();
    let per_device = split_devices(std::mem::take(&mut p.mem), &mut warnings);
    let with_python = p.ops.iter().any(|o| {
        o.call_stack != stacks::NO_CALL_STACK
            || !p
                .strings
                .get(p.frames.get(crate::FrameId(o.frame)).filename)
                .is_empty()
    });
    let total: usize = per_device.iter().map(|(_, v)| v.len()).sum();
    warnings.insert(
        0,
        format!(
            "read as a PyTorch profiler trace: {total} [memory] events; each one's stack is \
             rebuilt from the {} spans enclosing it on its thread",
            if with_python {
                "python_function and cpu_op"
            } else {
                "cpu_op (no python_function: recorded without with_stack=True)"
            }
        ),
    );
    let empty = p.strings.intern("");
    let (mut traces, mut segments, mut blocks) = (Vec::new(), Vec::new(), Vec::new());
    let mut notes = Notes::default();
    for (device, events) in per_device {
        let (b, live, reserved) = device_trace(device, events, p.base_ns, &mut notes);
        let live = live
            .into_iter()
            .map(|(addr, size, stack)| Live {
                addr,
                size,
                stack,
                category: empty,
            })
            .collect();
        end_segment(device, reserved, live, empty, &mut segments, &mut blocks);
        traces.push(b.t);
    }
    warnings.extend(notes.lines());
    Ok(Decoded {
        annotations: annotations(&p),
        strings: p.strings,
        frames: p.frames,
        stacks: p.stacks,
        segments,
        blocks,
        traces: by_ordinal(traces),
        tags: Vec::new(),
        allocator_settings: None,
        layout: Layout::Dict,
        legacy_blocks: false,
        warnings,
        repairs: p.repairs,
        recorder: None,
    })
}

fn type_name(t: i32) -> String {
    match t {
        0 => "CPU".into(),
        1 => "CUDA".into(),
        6 => "HIP".into(),
        12 => "XPU".into(),
        13 => "MPS".into(),
        20 => "PrivateUse1".into(),
        _ => format!("device type {t}"),
    }
}

/// Events per device ordinal. Accelerator memory (`Device Type` other than
/// CPU) is device `Device Id`; host memory is left out when the trace has
/// accelerator memory (it is not device memory, and mixing it in would
/// distort every device figure), and is device 0 when it is all there is.
fn split_devices(mem: Vec<MemEvent>, warnings: &mut Vec<String>) -> Vec<(u32, Vec<MemEvent>)> {
    // A missing `Device Type`: a device when it has an id.
    let kind = |e: &MemEvent| match e.dev_type {
        -1 if e.dev_id >= 0 => 1,
        -1 => CPU,
        t => t,
    };
    let mut counts: FxHashMap<i32, usize> = FxHashMap::default();
    for e in &mem {
        *counts.entry(kind(e)).or_default() += 1;
    }
    let accel = counts
        .iter()
        .filter(|(&t, _)| t != CPU)
        .max_by_key(|(&t, &n)| (n, std::cmp::Reverse(t)))
        .map(|(&t, _)| t);
    let mut left_out: Vec<(i32, usize)> = counts
        .iter()
        .filter(|(&t, _)| Some(t) != accel && (accel.is_some() || t != CPU))
        .map(|(&t, &n)| (t, n))
        .collect();
    left_out.sort_unstable();
    for (t, n) in left_out {
        warnings.push(format!(
            "{n} [memory] events of {} memory were left out (the devices shown are {}{})",
            type_name(t),
            type_name(accel.unwrap_or(CPU)),
            if t == CPU {
                "; host allocations are not device memory"
            } else {
                ""
            }
        ));
    }
    let mut out: Vec<(u32, Vec<MemEvent>)> = Vec::new();
    if accel.is_none() {
        warnings
            .push("the trace has host (CPU) memory events only; they are shown as device 0".into());
    }
    let mut bad_ids = 0u64;
    for e in mem {
        let k = kind(&e);
        let device = match accel {
            Some(a) if k == a && e.dev_id < MAX_DEVICE => e.dev_id.max(0) as u32,
            Some(a) if k == a => {
                bad_ids += 1;
                continue;
            }
            None if k == CPU => 0,
            _ => continue,
        };
        match out.iter_mut().find(|(d, _)| *d == device) {
            Some((_, v)) => v.push(e),
            None => out.push((device, vec![e])),
        }
    }
    if bad_ids > 0 {
        warnings.push(format!(
            "{bad_ids} [memory] events with a Device Id of {MAX_DEVICE} or more were left out"
        ));
    }
    out.sort_unstable_by_key(|(d, _)| *d);
    out
}

/// `user_annotation` and `ProfilerStep#N` spans as `record_function`
/// markers, in time order, nested ones properly paired at shared instants
/// (analyses match each END to the last open START of its name).
fn annotations(p: &Parsed) -> Vec<Annotation> {
    let time = |ns: i64| p.base_ns.saturating_add(ns).div_euclid(1000);
    let mut marks: Vec<(i64, u8, i64, Annotation)> = Vec::with_capacity(p.spans.len() * 2);
    for s in &p.spans {
        let (start, end) = (time(s.start_ns), time(s.end_ns));
        let a = |stage, time_us| Annotation {
            name: s.name,
            stage,
            device: -1,
            time_us,
        };
        // At one instant: ends first (inner before outer), then starts
        // (outer before inner), then the ends of spans of no duration.
        marks.push((start, 1, -(end - start), a(AnnotationStage::Start, start)));
        let end_key = if end == start { 2 } else { 0 };
        marks.push((end, end_key, end - start, a(AnnotationStage::End, end)));
    }
    marks.sort_by_key(|m| (m.0, m.1, m.2));
    marks.into_iter().map(|m| m.3).collect()
}
