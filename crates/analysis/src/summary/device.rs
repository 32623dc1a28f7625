//! One device's summary: the liveness walk (the peak, the OOMs, the blocks
//! alive at the peak and the end) and the labels of what each block is,
//! run side by side on big traces, then the figures drawn from both.

use std::collections::HashMap;

use vramscope_snapshot::{Action, BlockState, DeviceTrace, Snapshot, NO_TIME};

use super::{
    device_limits, device_name, CounterCheck, DeviceSummary, EventStats, Oom, OutsideEvaluation,
    Peak, SummaryOptions, MAX_DETAILED_OOMS,
};
use crate::categories::evaluation::Evaluation;
use crate::categories::phases::Phases;
use crate::categories::Labelled;
use crate::lifetimes::Lifetimes;
use crate::liveness::{allocated_series, reserved_after, Liveness};
use crate::segments::memory_state;
use crate::sites::group_by_site;

/// [`CounterCheck`] of `device` (the recorded device is device 0 of a
/// dispatch recording).
fn counter_check(
    snap: &Snapshot,
    device: u32,
    liveness: &Liveness,
    t: &DeviceTrace,
) -> Option<CounterCheck> {
    let rec = snap.source.recorder.as_ref()?;
    if device != 0 {
        return None;
    }
    let c = rec.counters.last()?;
    let allocated = allocated_series(liveness, t);
    // The last event at or before the reading (times are in trace order).
    let k = (0..t.len())
        .take_while(|&i| time_at(t, i).is_none_or(|x| x <= c.time_us))
        .last();
    Some(CounterCheck {
        time_us: c.time_us,
        counter_allocated_bytes: c.allocated,
        counter_reserved_bytes: c.reserved,
        recorded_allocated_bytes: k.map_or(liveness.initial_bytes, |i| allocated[i]),
    })
}

/// Whether the blocks alive at the trace's end are the ones the segments
/// hold at the dump: the same addresses, each segment block at least as
/// large as its trace entry. The trace records the allocator's rounded
/// request, the segment the block it took: a free block less than 1 MiB
/// larger than a large request is not split (3 MiB asked, a 4 MiB block
/// given, seen on an H200), so the totals differ with nothing amiss.
fn dump_matches_trace_end(
    snap: &Snapshot,
    device: u32,
    end_live: &[crate::liveness::LiveBlock],
) -> bool {
    let mut dumped: HashMap<u64, u64> = HashMap::new();
    for s in snap.segments_of(device) {
        for b in snap.blocks_of(s) {
            if b.state == BlockState::ActiveAllocated {
                dumped.insert(b.address, b.size);
            }
        }
    }
    dumped.len() == end_live.len()
        && end_live
            .iter()
            .all(|l| dumped.get(&l.addr).is_some_and(|&size| size >= l.size))
}

fn time_at(t: &DeviceTrace, i: usize) -> Option<i64> {
    t.time_us.get(i).copied().filter(|&x| x != NO_TIME)
}

pub(super) fn event_stats(t: &DeviceTrace) -> EventStats {
    let mut counts = [0u64; Action::ALL.len()];
    for &a in &t.action {
        counts[a as usize] += 1;
    }
    let by_action = Action::ALL
        .iter()
        .filter(|a| counts[**a as usize] > 0)
        .map(|a| (a.as_str().to_owned(), counts[*a as usize]))
        .collect();
    let times = || t.time_us.iter().copied().filter(|&x| x != NO_TIME);
    let first = times().min();
    let last = times().max();
    EventStats {
        total: t.len() as u64,
        by_action,
        first_time_us: first,
        last_time_us: last,
        span_us: first.zip(last).map(|(a, b)| b - a),
        with_stack: t.stack.iter().filter(|s| !s.is_none()).count() as u64,
    }
}

/// Traces from this many events on are labelled on a second thread while
/// the liveness walk runs (the two are independent; below this, a thread costs
/// more than it saves).
const PARALLEL_EVENTS: usize = 100_000;

/// Summarise one device.
pub fn summarize_device(snap: &Snapshot, device: u32, opts: &SummaryOptions) -> DeviceSummary {
    let large = snap
        .trace(device)
        .is_some_and(|t| t.len() >= PARALLEL_EVENTS);
    if !opts.categories || !large {
        let labelled = opts.categories.then(|| Labelled::new(snap, device));
        return summarize_device_with(snap, device, opts, labelled.as_ref());
    }
    // The labels and the liveness walk are independent, and the labels'
    // two inputs (the block lifetimes and the phases) are too: on two cores,
    // the phases then the walk on one, the lifetimes then the inference
    // (once the phases are there) on the other.
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let other = s.spawn(move || {
            let empty = DeviceTrace::default();
            let _ = tx.send(Phases::new(snap, snap.trace(device).unwrap_or(&empty)));
            Walked::new(snap, device)
        });
        let lifetimes = Lifetimes::new(snap, device);
        let labelled = match rx.recv() {
            Ok(phases) => Labelled::from_parts(snap, device, lifetimes, phases),
            // Only a panic on the other thread stops the send: raise it here.
            Err(_) => std::panic::resume_unwind(
                other
                    .join()
                    .err()
                    .unwrap_or_else(|| Box::new("the phases thread returned without sending")),
            ),
        };
        let walked = other
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        summarize_walked(snap, device, opts, Some(&labelled), walked)
    })
}

/// [`summarize_device`] with the device's labelled blocks computed by the
/// caller (who needs them too); `None`: no categories.
pub fn summarize_device_with(
    snap: &Snapshot,
    device: u32,
    opts: &SummaryOptions,
    labelled: Option<&Labelled>,
) -> DeviceSummary {
    summarize_walked(snap, device, opts, labelled, Walked::new(snap, device))
}

/// What the summary takes from the liveness walk: the peak, the OOMs and the
/// blocks alive at the peak, at the end and before each detailed OOM.
struct Walked {
    liveness: Liveness,
    oom_idx: Vec<usize>,
    /// How many OOMs (the first) have their holders in `lives`.
    detailed: usize,
    /// Live blocks at the peak, the end, then before each detailed OOM.
    lives: std::vec::IntoIter<Vec<crate::liveness::LiveBlock>>,
}

impl Walked {
    fn new(snap: &Snapshot, device: u32) -> Walked {
        let empty = DeviceTrace::default();
        let t = snap.trace(device).unwrap_or(&empty);
        let liveness = Liveness::new(snap, device);
        let oom_idx: Vec<usize> = (0..t.len())
            .filter(|&i| t.action[i] == Action::Oom)
            .collect();
        // Holders are listed for the first OOMs only: later ones usually repeat them.
        let detailed = oom_idx.len().min(MAX_DETAILED_OOMS);
        let mut points = vec![liveness.peak_index, t.len().checked_sub(1)];
        points.extend(oom_idx[..detailed].iter().map(|&i| i.checked_sub(1)));
        let lives = liveness.live_at_points(t, &points).into_iter();
        Walked {
            liveness,
            oom_idx,
            detailed,
            lives,
        }
    }
}

/// `peak` with the evaluation pass it is in (`eval`, where it is in one)
/// and the rest of the run's peak, from the allocated series.
fn with_evaluation(mut peak: Peak, eval: Option<&Evaluation>, allocated: &[u64]) -> Peak {
    let Some(eval) = eval else {
        return peak;
    };
    peak.in_evaluation = true;
    peak.evaluation_with_grad = peak
        .event_index
        .and_then(|i| eval.pass_with_grad(i as usize));
    peak.outside_evaluation = (0..allocated.len())
        .filter(|&k| !eval.contains(k))
        .max_by_key(|&k| (allocated[k], std::cmp::Reverse(k)))
        .map(|k| OutsideEvaluation {
            allocated_bytes: allocated[k],
            event_index: k as u64,
        });
    peak
}

fn summarize_walked(
    snap: &Snapshot,
    device: u32,
    opts: &SummaryOptions,
    labelled: Option<&Labelled>,
    walked: Walked,
) -> DeviceSummary {
    let empty = DeviceTrace::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let Walked {
        liveness,
        oom_idx,
        detailed,
        mut lives,
    } = walked;
    let peak_live = lives.next().unwrap_or_default();
    let end_live = lives.next().unwrap_or_default();
    let by_category =
        |live: &[crate::liveness::LiveBlock]| labelled.map_or_else(Vec::new, |l| l.totals(live));
    let peak = Peak {
        allocated_bytes: liveness.peak_bytes,
        event_index: liveness.peak_index.map(|i| i as u64),
        time_us: liveness.peak_index.and_then(|i| time_at(t, i)),
        before_window_bytes: liveness.initial_bytes,
        top_sites: group_by_site(snap, device, &peak_live, opts.top_sites),
        live_blocks: peak_live.len() as u64,
        by_category: by_category(&peak_live),
        in_evaluation: false,
        evaluation_with_grad: None,
        outside_evaluation: None,
        setup: None,
    };
    let reserved = reserved_after(snap, device);
    let end_reserved: u64 = snap.segments_of(device).map(|s| s.total_size).sum();
    let peak_reserved_bytes = reserved
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(end_reserved);
    // The evaluation pass the peak is in, if any (`categories::evaluation`).
    let peak_eval = labelled.map(|l| &l.categories.evaluation).filter(|e| {
        liveness
            .peak_index
            .is_some_and(|i| i < t.len() && e.contains(i))
    });
    // Whether the peak is before the first forward (the setup's).
    let before_forward = labelled
        .zip(liveness.peak_index)
        .is_some_and(|(l, i)| crate::setup::first_forward(l).is_some_and(|first| i < first));
    let allocated = if oom_idx.is_empty() && peak_eval.is_none() && !before_forward {
        Vec::new()
    } else {
        allocated_series(&liveness, t)
    };
    let mut peak = with_evaluation(peak, peak_eval, &allocated);
    if before_forward {
        peak.setup = labelled
            .zip(liveness.peak_index)
            .and_then(|(l, i)| crate::setup::setup_peak(snap, device, l, i, &allocated));
    }
    let end = memory_state(snap, device);
    let ledger = crate::ledger::ledger(snap, device);
    let ooms = oom_idx
        .iter()
        .enumerate()
        .map(|(k, &i)| {
            let holders = if k < detailed {
                lives.next().unwrap_or_default()
            } else {
                Vec::new()
            };
            Oom {
                event_index: i as u64,
                time_us: time_at(t, i),
                requested_bytes: t.size[i],
                device_free_bytes: t.device_free_at(i),
                allocated_bytes: i
                    .checked_sub(1)
                    .map_or(liveness.initial_bytes, |j| allocated[j]),
                reserved_bytes: reserved.get(i).copied().unwrap_or(end_reserved),
                top_holders: group_by_site(snap, device, &holders, opts.top_sites),
                by_category: by_category(&holders),
                diagnosis: {
                    let allocated = i
                        .checked_sub(1)
                        .map_or(liveness.initial_bytes, |j| allocated[j]);
                    let reserved = reserved.get(i).copied().unwrap_or(end_reserved);
                    // The dump's free blocks are the OOM's when nothing
                    // but OOMs follows it in the trace.
                    let last =
                        (i..t.len()).all(|j| matches!(t.action[j], Action::Oom | Action::Snapshot));
                    let largest = last.then_some(end.fragmentation.largest_free_block);
                    let pinned = last.then(|| crate::oom::pinned(snap, device, t.size[i]));
                    let (total, limit) = device_limits(snap, device);
                    // NVML's split of the outside memory, measured at the
                    // dump: the OOM's when the dump is at it.
                    let outside_split = ledger
                        .as_ref()
                        .filter(|_| last)
                        .and_then(crate::ledger::DeviceLedger::outside_split);
                    crate::oom::diagnose(
                        &crate::oom::OomFigures {
                            request: t.size[i],
                            allocated,
                            reserved,
                            free: t.device_free_at(i),
                            total,
                            limit,
                            largest_free: largest,
                            outside_split,
                        },
                        pinned.as_ref(),
                    )
                },
                cause: String::new(),
            }
        })
        .map(|mut o: Oom| {
            o.cause = o.diagnosis.sentence.clone();
            o
        })
        .collect();
    let (name, caching_allocator) = device_name(snap, device);
    let trace_end: u64 = end_live.iter().map(|b| b.size).sum();
    let mut inconsistencies = Vec::new();
    if peak_reserved_bytes < liveness.peak_bytes && caching_allocator {
        inconsistencies.push(format!(
            "reserved peaked at {}, below allocated's peak of {}: the trace misses segment events (its buffer wrapped, or the file is cut), so reserved is known only where segments were seen",
            vramscope_text::units::bytes(peak_reserved_bytes),
            vramscope_text::units::bytes(liveness.peak_bytes)
        ));
    }
    if end.reserved_bytes < end.allocated_bytes {
        inconsistencies.push(format!(
            "at the end reserved ({}) is below allocated ({}): the segments are damaged",
            vramscope_text::units::bytes(end.reserved_bytes),
            vramscope_text::units::bytes(end.allocated_bytes)
        ));
    }
    let disagree = !t.is_empty() && !dump_matches_trace_end(snap, device, &end_live);
    if disagree && snap.source.truncated {
        inconsistencies.push(format!(
            "the file is cut inside the trace: its last recovered event leaves {} allocated, the segments written at the dump hold {}; \"alive at the end\" lists the former, events after the cut are lost",
            vramscope_text::units::bytes(trace_end),
            vramscope_text::units::bytes(end.allocated_bytes)
        ));
    } else if disagree && snap.source.recorder.is_some() {
        inconsistencies.push(format!(
            "the trace leaves {} allocated at its end, the segments at the dump hold {}: the dump was taken at another moment than the trace's last event",
            vramscope_text::units::bytes(trace_end),
            vramscope_text::units::bytes(end.allocated_bytes)
        ));
    }
    DeviceSummary {
        device,
        name,
        caching_allocator,
        inconsistencies,
        device_counter: counter_check(snap, device, &liveness, t),
        ledger,
        end,
        events: event_stats(t),
        peak,
        peak_reserved_bytes,
        end_trace_bytes: trace_end,
        end_top_sites: group_by_site(snap, device, &end_live, opts.top_sites),
        end_by_category: by_category(&end_live),
        ooms,
    }
}
