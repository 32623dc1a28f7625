//! Small traces written by hand for what a generator does not make: the
//! program's own `torch.cuda.empty_cache()` calls.

use vramscope_simulate::{replay, Settings};
use vramscope_snapshot::decode_bytes;

const MIB: u64 = 1 << 20;

const EMPTY_CACHE: &str = r#"[{"filename":"/usr/lib/python3/site-packages/torch/cuda/memory.py","line":222,"name":"empty_cache"},{"filename":"train.py","line":9,"name":"main"}]"#;
const TRAIN: &str = r#"[{"filename":"train.py","line":8,"name":"main"}]"#;

/// Entries (action, address, size, frames).
/// `snap` replayed with `edits` from an empty cache, no capacity.
fn replay_cold(
    snap: &vramscope_snapshot::Snapshot,
    edits: &vramscope_simulate::edits::Edits,
) -> vramscope_simulate::Replayed {
    let setup = vramscope_simulate::ReplaySetup {
        edits: Some(edits),
        cold_start: true,
        ..Default::default()
    };
    replay(snap, 0, Settings::default(), &setup)
}

fn trace(entries: &[(&str, u64, u64, &str)]) -> vramscope_snapshot::Snapshot {
    let json = vramscope_testdata::hand_trace(entries);
    decode_bytes(json.as_bytes(), &Default::default()).expect("decodes")
}

#[test]
fn an_empty_cache_call_is_replayed_where_the_program_made_it() {
    let a = 1 << 32;
    let snap = trace(&[
        ("segment_alloc", a, 30 * MIB, TRAIN),
        ("alloc", a, 30 * MIB, TRAIN),
        ("free_requested", a, 30 * MIB, TRAIN),
        ("free_completed", a, 30 * MIB, TRAIN),
        // torch.cuda.empty_cache(): the cached segment goes back, and the
        // next request needs a new one (the same entries as a release for
        // a request: only the stack tells them apart).
        ("segment_free", a, 30 * MIB, EMPTY_CACHE),
        ("segment_alloc", a, 10 * MIB, TRAIN),
        ("alloc", a, 10 * MIB, TRAIN),
    ]);
    let r = replay(&snap, 0, Settings::default(), &Default::default());
    assert_eq!(r.empty_cache_calls, 1);
    assert_eq!(r.recorded_segment_events, 3);
    assert_eq!(r.matched_segment_events, 3, "{r:?}");
    assert_eq!(r.max_reserved_error, 0.0);
}

#[test]
fn a_release_that_makes_room_for_a_request_is_the_allocators_own() {
    // The cache released inside malloc to fit the next segment: the
    // segment_free is followed by the segment_alloc it made room for.
    let (a, b) = (1u64 << 32, 1u64 << 33);
    let snap = trace(&[
        ("segment_alloc", a, 30 * MIB, TRAIN),
        ("alloc", a, 30 * MIB, TRAIN),
        ("free_requested", a, 30 * MIB, TRAIN),
        ("free_completed", a, 30 * MIB, TRAIN),
        ("segment_free", a, 30 * MIB, TRAIN),
        ("segment_alloc", b, 36 * MIB, TRAIN),
        ("alloc", b, 36 * MIB, TRAIN),
    ]);
    let r = replay(&snap, 0, Settings::default(), &Default::default());
    assert_eq!(r.empty_cache_calls, 0);
    // Without the segment_alloc after it, the same release is a call.
    let alone = trace(&[
        ("segment_alloc", a, 30 * MIB, TRAIN),
        ("alloc", a, 30 * MIB, TRAIN),
        ("free_requested", a, 30 * MIB, TRAIN),
        ("free_completed", a, 30 * MIB, TRAIN),
        ("segment_free", a, 30 * MIB, TRAIN),
        ("alloc", a, 512, TRAIN),
    ]);
    let r = replay(&alone, 0, Settings::default(), &Default::default());
    assert_eq!(r.empty_cache_calls, 1);
    // On a 40 MiB device the model releases the cache by itself.
    let setup = vramscope_simulate::ReplaySetup {
        capacity: Some(40 * MIB),
        ..Default::default()
    };
    let r = replay(&snap, 0, Settings::default(), &setup);
    assert_eq!(r.matched_segment_events, 3, "{r:?}");
    assert!(r.oom.is_none());
}

/// A checkpointed layer's activation: freed after its forward, made again
/// when backward reaches it. The replay and the count without a caching
/// allocator both see it gone in between and back until its recorded free.
#[test]
fn a_block_freed_early_and_made_again_is_absent_only_in_between() {
    use vramscope_analysis::lifetimes::Lifetimes;
    use vramscope_simulate::edits::{peak_allocated, Edits, Rerun};
    let (a, b, c) = (1u64 << 32, 2u64 << 32, 3u64 << 32);
    let snap = trace(&[
        ("alloc", a, 40 * MIB, TRAIN), // 0: the layer's saved activation
        ("alloc", b, 30 * MIB, TRAIN), // 1: the next layer's, while a lives
        ("free_completed", b, 30 * MIB, TRAIN), // 2
        ("alloc", c, 20 * MIB, TRAIN), // 3: backward's gradient
        ("free_completed", a, 40 * MIB, TRAIN), // 4: backward frees a
        ("free_completed", c, 20 * MIB, TRAIN), // 5
    ]);
    let l = Lifetimes::new(&snap, 0);
    assert_eq!(peak_allocated(&l, 6, &Edits::default()), 70 * MIB);
    let mut edits = Edits::default();
    edits.free_after.entry(0).or_default().push(0);
    edits.rerun_after.entry(3).or_default().push(Rerun::Make(0));
    // Gone while b lives (30 MiB), back with c (40 + 20).
    assert_eq!(peak_allocated(&l, 6, &edits), 60 * MIB);
    let r = replay_cold(&snap, &edits);
    assert_eq!(r.simulated_peak_allocated, 60 * MIB);
    assert!(r.oom.is_none());
    // Not made again: gone from the end of its forward on.
    edits.rerun_after.clear();
    assert_eq!(peak_allocated(&l, 6, &edits), 30 * MIB);
}

/// A gradient made ahead of its recorded alloc (the first micro-batch's,
/// alive while the second runs): counted from the earlier entry in the
/// replay and the count alike, and freed by its own recorded free even
/// where another block held its address in between.
#[test]
fn a_block_made_early_is_there_from_then_and_its_address_stays_apart() {
    use vramscope_analysis::lifetimes::Lifetimes;
    use vramscope_simulate::edits::{peak_allocated, Edits};
    let (a, g) = (1u64 << 32, 2u64 << 32);
    let snap = trace(&[
        ("alloc", a, 40 * MIB, TRAIN), // 0: an activation, at address a
        ("free_completed", a, 40 * MIB, TRAIN), // 1
        ("alloc", a, 10 * MIB, TRAIN), // 2: the gradient, at the same address
        ("alloc", g, 5 * MIB, TRAIN),  // 3
        ("free_completed", a, 10 * MIB, TRAIN), // 4: the gradient's free
        ("free_completed", g, 5 * MIB, TRAIN), // 5
    ]);
    let l = Lifetimes::new(&snap, 0);
    assert_eq!(peak_allocated(&l, 6, &Edits::default()), 40 * MIB);
    let mut edits = Edits::default();
    edits.born_after.entry(0).or_default().push(2);
    // Beside the activation from entry 0 on: 40 + 10.
    assert_eq!(peak_allocated(&l, 6, &edits), 50 * MIB);
    let r = replay_cold(&snap, &edits);
    assert_eq!(r.simulated_peak_allocated, 50 * MIB);
    assert!(r.oom.is_none());
    // The activation's free (entry 1, address a) must leave the early
    // gradient alone and the gradient's own free (entry 3) free it: were
    // the activation kept instead, the last request would find 90 MiB.
    let snap2 = trace(&[
        ("alloc", a, 40 * MIB, TRAIN),
        ("free_completed", a, 40 * MIB, TRAIN),
        ("alloc", a, 10 * MIB, TRAIN),
        ("free_completed", a, 10 * MIB, TRAIN),
        ("alloc", g, 50 * MIB, TRAIN),
    ]);
    let mut edits2 = Edits::default();
    edits2.born_after.entry(0).or_default().push(2);
    let r = replay_cold(&snap2, &edits2);
    assert_eq!(r.simulated_peak_allocated, 50 * MIB, "{r:?}");
}

/// A block kept past its recorded free (the gradient a backward made and
/// added in place to a kept one, kept as the gradient under
/// `set_to_none=True`): alive until the entry it is freed after, in the
/// replay and the count alike, while another block takes its recorded
/// address in between.
#[test]
fn a_block_freed_late_outlives_its_recorded_free_and_its_address_stays_apart() {
    use vramscope_analysis::lifetimes::Lifetimes;
    use vramscope_simulate::edits::{peak_allocated, Edits};
    let (a, g, h) = (1u64 << 32, 2u64 << 32, 3u64 << 32);
    let snap = trace(&[
        ("alloc", a, 10 * MIB, TRAIN),          // 0: the new gradient
        ("free_completed", a, 10 * MIB, TRAIN), // 1: added in place, freed
        ("alloc", a, 30 * MIB, TRAIN),          // 2: another block at address a
        ("free_completed", a, 30 * MIB, TRAIN), // 3
        ("alloc", g, 5 * MIB, TRAIN),           // 4: zero_grad comes after this
        ("free_completed", g, 5 * MIB, TRAIN),  // 5
        ("alloc", h, 35 * MIB, TRAIN),          // 6
    ]);
    let l = Lifetimes::new(&snap, 0);
    assert_eq!(peak_allocated(&l, 7, &Edits::default()), 35 * MIB);
    let mut edits = Edits::default();
    edits.free_late.entry(4).or_default().push(0);
    // 10 + 30 at entry 2; freed before h: 35 there, not 45.
    assert_eq!(peak_allocated(&l, 7, &edits), 40 * MIB);
    let r = replay_cold(&snap, &edits);
    // Freed at its recorded free the peak would be 35; lost under the
    // address the 30 MiB block took, 45.
    assert_eq!(r.simulated_peak_allocated, 40 * MIB, "{r:?}");
    assert!(r.oom.is_none());
}

/// A checkpointed layer's recomputation: its saved block made again to
/// stay, and its temporary made and freed again around it, beside what
/// backward holds then; counted and replayed alike.
#[test]
fn a_rerun_makes_its_temporaries_again_beside_what_is_alive() {
    use vramscope_analysis::lifetimes::Lifetimes;
    use vramscope_simulate::edits::{peak_allocated, Edits, Rerun};
    let (a, b, d) = (1u64 << 32, 2u64 << 32, 3u64 << 32);
    let snap = trace(&[
        ("alloc", a, 10 * MIB, TRAIN),          // 0: the layer's saved block
        ("alloc", b, 20 * MIB, TRAIN),          // 1: its temporary
        ("free_completed", b, 20 * MIB, TRAIN), // 2: the layer's call ends
        ("alloc", d, 15 * MIB, TRAIN),          // 3: backward reaches the layer
        ("free_completed", a, 10 * MIB, TRAIN), // 4
        ("free_completed", d, 15 * MIB, TRAIN), // 5
    ]);
    let l = Lifetimes::new(&snap, 0);
    let mut edits = Edits::default();
    edits.free_after.entry(2).or_default().push(0);
    edits.rerun_after.entry(3).or_default().extend([
        Rerun::Make(0),
        Rerun::Pulse(1),
        Rerun::Unpulse(1),
    ]);
    // 15 (d) + 10 (remade) + 20 (the temporary again): above the 30 of the
    // forward; without the temporary, 25 there and 30 at the peak.
    assert_eq!(peak_allocated(&l, 6, &edits), 45 * MIB);
    let r = replay_cold(&snap, &edits);
    assert_eq!(r.simulated_peak_allocated, 45 * MIB, "{r:?}");
    let mut made_only = edits.clone();
    made_only.rerun_after.insert(3, vec![Rerun::Make(0)]);
    assert_eq!(peak_allocated(&l, 6, &made_only), 30 * MIB);
}

/// Blocks a change makes that the recorded run never made (what FSDP
/// gathers): each step counted in order, so a buffer made before another
/// is freed peaks with it; counted and replayed alike.
#[test]
fn blocks_the_recorded_run_never_made_are_counted_step_by_step() {
    use vramscope_analysis::lifetimes::Lifetimes;
    use vramscope_simulate::edits::{peak_allocated, Edits, Extra};
    let (a, b) = (1u64 << 32, 2u64 << 32);
    // Sizes above 10 MiB in 2 MiB steps: each its own segment, unrounded.
    let snap = trace(&[
        ("alloc", a, 20 * MIB, TRAIN),          // 0
        ("alloc", b, 12 * MIB, TRAIN),          // 1
        ("free_completed", b, 12 * MIB, TRAIN), // 2
        ("free_completed", a, 20 * MIB, TRAIN), // 3
    ]);
    let l = Lifetimes::new(&snap, 0);
    let mut edits = Edits::default();
    // After entry 0: a flat buffer of 24 made, the one before it (12)
    // freed, the parameters (24) copied out of it; all freed after entry 2.
    edits.extra_after.entry(0).or_default().extend([
        Extra::Make {
            id: 1,
            size: 12 * MIB,
        },
        Extra::Make {
            id: 2,
            size: 24 * MIB,
        },
        Extra::Free(1),
        Extra::Make {
            id: 3,
            size: 24 * MIB,
        },
    ]);
    edits
        .extra_after
        .entry(2)
        .or_default()
        .extend([Extra::Free(2), Extra::Free(3)]);
    // 20 + 12 + 24 = 56 before the 12 is freed; 20 + 24 + 24 + 12 = 80 at
    // entry 1; 20 once entry 2's frees are done.
    assert_eq!(peak_allocated(&l, 4, &edits), 80 * MIB);
    let r = replay_cold(&snap, &edits);
    assert_eq!(r.simulated_peak_allocated, 80 * MIB, "{r:?}");
    // Made in order: without the free of the 12 between, 92.
    let mut kept = edits.clone();
    kept.extra_after.insert(
        0,
        vec![
            Extra::Make {
                id: 1,
                size: 12 * MIB,
            },
            Extra::Make {
                id: 2,
                size: 24 * MIB,
            },
            Extra::Make {
                id: 3,
                size: 24 * MIB,
            },
        ],
    );
    assert_eq!(peak_allocated(&l, 4, &kept), 92 * MIB);
    assert_eq!(replay_cold(&snap, &kept).simulated_peak_allocated, 92 * MIB);
    // A free of an id never made frees nothing.
    edits.extra_after.entry(3).or_default().push(Extra::Free(9));
    assert_eq!(peak_allocated(&l, 4, &edits), 80 * MIB);
}
