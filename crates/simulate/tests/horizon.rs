//! The horizon of a replay, on recordings from an H200: a projection of the
//! rest of an iteration from an earlier one against what the GPU really
//! did, and answers that never call a run "fits" past the end of its
//! recording.

use vramscope_analysis::iterations::find_iterations;
use vramscope_simulate::horizon::horizon;
use vramscope_simulate::{replay, simulate, ReplaySetup, Settings, SimulateOptions};
use vramscope_snapshot::{load, Action, Snapshot};

fn gpu(name: &str) -> Snapshot {
    load(&vramscope_testdata::gpu(name), &Default::default()).expect("reads")
}

/// Recorded peak reserved from the start of the trace to entry `end`.
fn recorded_peak(snap: &Snapshot, end: usize) -> u64 {
    let t = snap.trace(0).expect("trace");
    let start = replay(snap, 0, Settings::default(), &Default::default()).initial_reserved;
    let (mut now, mut peak) = (start, start);
    for i in 0..end {
        match t.action[i] {
            Action::SegmentAlloc => now += t.size[i],
            Action::SegmentFree => now -= t.size[i],
            _ => {}
        }
        peak = peak.max(now);
    }
    peak
}

/// Batch 16 with sequence lengths 128/384/256/512/...: iteration 4 (512
/// tokens) makes the run's peak. Cut at its largest request and projected
/// from iteration 3 (256 tokens, sizes ×2 as measured on the part both
/// recorded), the replay reaches the GPU's real peak reserved, which
/// nothing before iteration 4 came near.
#[test]
fn projecting_an_iteration_from_the_one_before_gives_the_real_peak() {
    let snap = gpu("facts_cycle_b16.pickle");
    let t = snap.trace(0).expect("trace");
    let its = find_iterations(&snap, 0);
    let it4 = its
        .list
        .iter()
        .find(|i| i.number == 4)
        .expect("iteration 4");
    let cut = (it4.start..it4.end)
        .filter(|&i| t.action[i] == Action::Alloc)
        .max_by_key(|&i| t.size[i])
        .expect("an allocation");
    let h = horizon(&snap, 0, cut);
    assert_eq!(h.iteration, Some(4));
    assert_eq!(h.from_iteration, Some(3));
    assert_eq!((h.aligned, h.allocations), (124, 124));
    assert!((h.ratio - 2.0).abs() < 1e-9, "ratio {}", h.ratio);
    let real = recorded_peak(&snap, it4.end);
    assert_eq!(
        real, 3_328_180_224,
        "the GPU's peak reserved (memory_stats)"
    );
    assert!(
        recorded_peak(&snap, it4.start) < real * 3 / 4,
        "the peak is made inside iteration 4"
    );
    let setup = ReplaySetup {
        tail: h.tail.as_ref(),
        ..Default::default()
    };
    let projected = replay(&snap, 0, Settings::default(), &setup);
    assert_eq!(projected.simulated_peak_reserved, real);
    assert_eq!(projected.projected_oom, None);
}

fn halved(name: &str) -> vramscope_simulate::Simulation {
    let opts = SimulateOptions {
        scale: vec!["common.py:25=0.5".into(), "common.py:24=0.5".into()],
        ..Default::default()
    };
    simulate(&gpu(name), &opts).expect("simulates")
}

/// The GPT at batch 48 ran out in its first forward, before any iteration
/// completed: half the activations make the failing request fit, and the
/// answer says that is all it can say (on the GPU, half the batch ran out
/// later in the same step).
#[test]
fn no_bare_fits_when_the_recording_ends_before_a_whole_iteration() {
    let sim = halved("oom_gpt_default.pickle");
    let a = &sim.answer;
    assert!(a.contains("fits on the same"), "{a}");
    assert!(a.contains("That is all that can be said"), "{a}");
    assert!(a.contains("before the first iteration"), "{a}");
    assert!(a.contains("dump_at"), "{a}");
    let h = sim.horizon.as_ref().expect("a horizon");
    assert_eq!(h.entry, sim.recorded_oom.as_ref().expect("oom").entry);
    assert!(h.tail.is_none());
    assert!(sim.runs.iter().all(|r| r.projection.is_none()));
}

/// Batch 24 ran steps 0-2 and ran out in step 3 (512 tokens): the rest of
/// that step is projected from step 2 and the verdict is the projection's,
/// said to be one.
#[test]
fn an_oom_after_complete_iterations_is_judged_on_the_projected_rest() {
    let sim = halved("facts_cycle_b24.pickle");
    let h = sim.horizon.as_ref().expect("a horizon");
    assert_eq!((h.iteration, h.from_iteration), (Some(4), Some(3)));
    assert!((h.ratio - 2.0).abs() < 1e-9);
    let changed = sim.runs.iter().find(|r| r.changed).expect("changed run");
    let p = changed.projection.as_ref().expect("projected");
    assert!(p.peak_reserved >= changed.replayed.allocated_before_recorded_oom.unwrap_or(0));
    let cap = sim.capacity.expect("capacity");
    let a = &sim.answer;
    assert!(a.contains("in iteration 4"), "{a}");
    assert!(a.contains("projected from iteration 3"), "{a}");
    assert!(a.contains("a projection, not a replay"), "{a}");
    assert_eq!(
        p.oom.is_none(),
        a.contains("the whole iteration fits"),
        "{a}"
    );
    assert_eq!(p.oom.is_none(), p.peak_reserved <= cap);
}
