//! Realistic synthetic PyTorch CUDA memory snapshots, of any size, for
//! tests and benchmarks.
//!
//! [`write_snapshot`] simulates a training run (a GPT-style model trained
//! with AdamW, with gradient accumulation) on top of a simulation of
//! PyTorch's caching allocator, and streams what
//! `torch.cuda.memory._dump_snapshot()` would have written for it, byte for
//! byte what CPython's `pickle.dump` writes for such an object: the real
//! producer's key order and object sharing (interned keys and each frame
//! dict written once; one frames list per allocator call, shared by a
//! `segment_alloc` and its `alloc`, by a `free_requested` and its
//! `free_completed`, and by a block in `segments` and the `alloc` that made
//! it). Memory use does not grow with the number of entries, only with the
//! number of live blocks.
//!
//! Alongside the file it returns [`SynthTruth`]: figures the generator knows
//! from its own simulation, for checking a reader against.
//!
//! ```
//! use vramscope_synth::{write_snapshot, StackKind, SynthOptions};
//!
//! let opts = SynthOptions { entries: 3_000, stacks: StackKind::Python, ..Default::default() };
//! let mut bytes = Vec::new();
//! let truth = write_snapshot(&opts, &mut bytes).unwrap();
//! assert_eq!(truth.entries, 3_000);
//! assert_eq!(truth.bytes_written, bytes.len() as u64);
//! assert!(truth.peak_allocated >= truth.allocated_at_end);
//! assert!(truth.reserved_at_end >= truth.allocated_at_end);
//!
//! // The same options always give the same bytes.
//! let mut again = Vec::new();
//! write_snapshot(&opts, &mut again).unwrap();
//! assert_eq!(bytes, again);
//! ```
//!
//! The run is simulated twice: a first pass finds its length and final
//! state (the `segments` come first in the file), the second writes the
//! trace as it goes.

mod allocator;
mod cpp_frames;
mod emit;
mod expandable;
mod model;
mod options;
mod sites;
mod stacks;
mod trace;
mod workload;

pub use options::{StackKind, SynthOptions};

use emit::{Counting, Emitter, TraceSink};
use stacks::Stacks;
use std::collections::HashSet;
use std::io::Write;
use trace::Counter;
use workload::{Run, WindowProbe};

/// Why no snapshot was written.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("writing the snapshot failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("invalid synthetic snapshot options: {0}")]
    InvalidOptions(String),
}

/// What the generator knows about the snapshot it wrote, from its own
/// simulation. Figures are for device 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SynthTruth {
    /// Entries in `device_traces[0]`.
    pub entries: u64,
    /// Size of the pickle, all devices.
    pub bytes_written: u64,
    /// Peak allocated bytes over the trace: replaying `alloc` (+size) and
    /// `free_completed` (-size) from the bytes live when the trace starts
    /// (blocks allocated before the window count from its start: those
    /// still live at the end with their block `size`, those freed in the
    /// trace with the size of their `free_completed`).
    pub peak_allocated: u64,
    /// Index in the trace of the first entry that reaches the peak (0 when
    /// the start is the peak).
    pub peak_event_index: u64,
    /// Sum of `size` of blocks with state `active_allocated`.
    pub allocated_at_end: u64,
    /// Sum of `total_size` of the segments.
    pub reserved_at_end: u64,
    /// Number of segments.
    pub segments: u64,
    /// Requested bytes of the leaked tensors, all still allocated at the end.
    pub leaked_bytes: u64,
}

/// Writes a synthetic snapshot to `out` (a pickle, as
/// `torch.cuda.memory._dump_snapshot` writes) and returns what it holds.
/// Wrap files in a `BufWriter`: the pickle goes out in frames of 64 KiB.
pub fn write_snapshot<W: Write>(opts: &SynthOptions, out: W) -> Result<SynthTruth, SynthError> {
    opts.validate()?;
    let stacks = Stacks::new(opts.stacks, opts.seed);

    // First pass: length and final state of every device's run.
    let mut plans = Vec::new();
    for device in 0..opts.devices {
        let mut counter = Counter::default();
        let mut run = Run::new(opts, device, &stacks, &mut counter, None);
        let total = run.execute();
        let live_at_end: HashSet<u64> = run.alloc.live_blocks().map(|b| b.ctx).collect();
        plans.push((total, run.alloc, live_at_end, run.leaked));
    }

    let mut em = Emitter::new(
        Counting {
            inner: out,
            bytes: 0,
        },
        opts.protocol,
        opts.with_time,
        opts.odd_values,
        &stacks,
    )?;
    let mut truth = SynthTruth::default();
    em.w.begin_dict_len(3 + opts.annotations as u64);
    em.shared("segments");
    let segment_count: usize = plans.iter().map(|p| p.1.segments().len()).sum();
    em.w.begin_list_len(segment_count as u64);
    let mut prewritten = Vec::new();
    for (device, (_, alloc, ..)) in plans.iter().enumerate() {
        prewritten.push(em.segments(device as u32, alloc));
    }
    em.w.end_list();
    let end_state: Vec<(u64, u64)> = plans[0].1.live_blocks().map(|b| (b.addr, b.size)).collect();
    let segs = plans[0].1.segments();
    truth.segments = segs.len() as u64;
    truth.reserved_at_end = segs.iter().map(|(s, _)| s.size).sum();
    truth.allocated_at_end = end_state.iter().map(|b| b.1).sum();
    truth.leaked_bytes = plans[0].3;
    drop(segs);

    // Second pass: the same runs again, written as they go.
    em.shared("device_traces");
    em.w.begin_list_len(opts.devices as u64);
    let mut annotations = Vec::new();
    for (device, ((total, alloc, live_at_end, _), lists)) in
        plans.into_iter().zip(prewritten).enumerate()
    {
        drop(alloc);
        let window = opts.max_entries_window.map_or(total, |w| w.min(total));
        let start = total - window;
        let odd_entry = opts.odd_values && device == 0;
        em.w.begin_list_len(window + odd_entry as u64);
        let mut sink = TraceSink::new(&mut em, device as u32, start, lists);
        let probe = WindowProbe {
            start,
            live_at_end: &live_at_end,
        };
        let mut run = Run::new(opts, device as u32, &stacks, &mut sink, Some(probe));
        let produced = run.execute();
        let start_live = run.start_live;
        drop(run);
        if let Some(e) = sink.error.take() {
            return Err(e.into());
        }
        debug_assert_eq!(produced, total, "the second pass replays the first");
        if device == 0 {
            // What a reader computes from the file must match the simulation.
            let unseen_live: u64 = end_state
                .iter()
                .filter(|b| !sink.window_allocs.contains(&b.0))
                .map(|b| b.1)
                .sum();
            debug_assert_eq!(
                sink.freed_unseen + unseen_live,
                start_live,
                "bytes live at the window start"
            );
            (truth.peak_allocated, truth.peak_event_index) = sink.replay.result(start_live);
            truth.entries = window + odd_entry as u64;
        }
        annotations.append(&mut sink.annotations);
        if odd_entry {
            let t = sink.last_time_us;
            drop(sink);
            em.odd_entry(t);
        }
        em.w.end_list();
    }
    em.w.end_list();
    em.shared("allocator_settings");
    em.settings(opts.expandable_segments);
    if opts.annotations {
        em.shared("external_annotations");
        em.annotations(&annotations);
    }
    em.w.end_dict();
    truth.bytes_written = em.w.finish()?.bytes;
    Ok(truth)
}
