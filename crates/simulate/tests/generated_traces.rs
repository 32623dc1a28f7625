//! Replays of traces from the project's generator, whose allocator is a
//! separate implementation of PyTorch's (`crates/synth/src/expandable.rs`
//! keeps an address-ordered list of pieces; the model links blocks by
//! address): with the recorded settings the model must make the same
//! segment events, in the same order, with the same reserved bytes.

use vramscope_simulate::{replay, simulate, Replayed, Settings};
use vramscope_snapshot::{decode_bytes, Action, Snapshot};
use vramscope_synth::{write_snapshot, SynthOptions};

fn generated(opts: SynthOptions) -> Snapshot {
    let mut buf = Vec::new();
    write_snapshot(&opts, &mut buf).expect("synth");
    decode_bytes(&buf, &Default::default()).expect("decode")
}

/// The replay with the recorded settings, on a device of the capacity the
/// file's OOM gives (reserved + free then), if it has one.
fn replayed(snap: &Snapshot) -> Replayed {
    let sim = simulate(snap, &Default::default()).expect("simulates");
    sim.runs[0].replayed.clone()
}

fn assert_reproduced(name: &str, snap: &Snapshot) -> Replayed {
    let r = replayed(snap);
    assert!(r.recorded_segment_events > 0, "{name}: {r:?}");
    assert_eq!(
        r.matched_segment_events, r.recorded_segment_events,
        "{name}: {r:?}"
    );
    assert_eq!(
        r.simulated_segment_events, r.recorded_segment_events,
        "{name}: {r:?}"
    );
    assert_eq!(r.max_reserved_error, 0.0, "{name}: {r:?}");
    assert_eq!(
        r.simulated_peak_reserved, r.recorded_peak_reserved,
        "{name}"
    );
    assert_eq!(r.seed_misses, 0, "{name}");
    r
}

#[test]
fn expandable_segments_map_and_unmap_as_recorded() {
    for seed in [1, 2, 7] {
        let snap = generated(SynthOptions {
            entries: 60_000,
            seed,
            iterations: 12,
            expandable_segments: true,
            oom: seed == 7,
            ..Default::default()
        });
        let t = snap.trace(0).expect("trace");
        // Only maps and unmaps: expandable segments never cudaMalloc.
        assert!(t.action.iter().all(|a| *a != Action::SegmentAlloc));
        assert!(t.action.contains(&Action::SegmentMap));
        let r = assert_reproduced(&format!("seed {seed}"), &snap);
        if seed == 7 {
            // Before failing, the allocator unmapped every free page; the
            // model did the same, then failed at the same entry.
            assert!(t.action.contains(&Action::SegmentUnmap));
            let oom = (0..t.len()).find(|&i| t.action[i] == Action::Oom);
            assert_eq!(r.oom.map(|o| o.0), oom);
        }
    }
}

#[test]
fn a_window_that_starts_late_is_seeded_from_the_mapped_ranges() {
    // The ring buffer kept the last 20,000 of 80,000 entries: the model
    // starts from the mapped ranges with the trace's maps undone.
    let snap = generated(SynthOptions {
        entries: 80_000,
        seed: 3,
        iterations: 16,
        expandable_segments: true,
        max_entries_window: Some(20_000),
        ..Default::default()
    });
    let r = replayed(&snap);
    assert!(r.initial_reserved > 0);
    assert_eq!(r.seed_misses, 0);
    assert_eq!(r.matched_segment_events, r.recorded_segment_events, "{r:?}");
    assert_eq!(r.max_reserved_error, 0.0, "{r:?}");
}

#[test]
fn ordinary_segments_too_and_expandable_ones_reserve_less() {
    let opts = SynthOptions {
        entries: 60_000,
        seed: 2,
        iterations: 12,
        ..Default::default()
    };
    let plain = generated(opts.clone());
    let r = assert_reproduced("cudaMalloc segments", &plain);
    // The same program with expandable segments, as the model predicts it
    // from the plain recording and as the generator records it.
    let mut s = Settings::default();
    s.apply("expandable_segments:True").expect("valid");
    let predicted = replay(&plain, 0, s, &Default::default());
    let recorded = replayed(&generated(SynthOptions {
        expandable_segments: true,
        ..opts
    }));
    // Not equal: the generator draws event times from the random stream
    // its sizes come from, and the runs make different numbers of segment
    // events, so the two programs drift apart a little.
    let drift = predicted.simulated_peak_reserved as f64 / recorded.recorded_peak_reserved as f64;
    assert!((0.98..=1.02).contains(&drift), "{drift}");
    assert!(predicted.simulated_peak_reserved < r.simulated_peak_reserved);
    assert!(predicted.cuda_mallocs > 0 && r.cuda_mallocs > 0);
}

/// A report's page replays the whole sweep below 2M entries and the first
/// three of its settings from there, saying so; the runs it keeps are the
/// whole sweep's first ones, replayed alike.
#[test]
fn a_long_traces_page_replays_the_first_settings_of_the_sweep() {
    use vramscope_simulate::{page_sweep, SimulateOptions, PAGE_SWEEP_LONG, SWEEP};
    assert_eq!(page_sweep(1_999_999), (None, None));
    let (first, note) = page_sweep(10_000_000);
    assert_eq!(first, Some(PAGE_SWEEP_LONG));
    let note = note.expect("a note");
    assert!(
        note.contains("10000000 trace entries") && note.contains("--sweep"),
        "{note}"
    );
    let snap = generated(SynthOptions {
        entries: 20_000,
        seed: 5,
        ..Default::default()
    });
    let all = simulate(
        &snap,
        &SimulateOptions {
            sweep: true,
            ..Default::default()
        },
    )
    .expect("simulates");
    let some = simulate(
        &snap,
        &SimulateOptions {
            sweep: true,
            sweep_first: first,
            ..Default::default()
        },
    )
    .expect("simulates");
    assert_eq!(all.runs.len(), 1 + SWEEP.len());
    assert_eq!(some.runs.len(), 1 + PAGE_SWEEP_LONG);
    for r in &some.runs {
        let same = all
            .runs
            .iter()
            .find(|a| a.label == r.label)
            .expect("in the whole sweep");
        assert_eq!(
            same.replayed.simulated_peak_reserved, r.replayed.simulated_peak_reserved,
            "{}",
            r.label
        );
    }
    let kept: Vec<&str> = some.runs[1..].iter().map(|r| r.label.as_str()).collect();
    for label in &kept {
        assert!(
            SWEEP[..PAGE_SWEEP_LONG].contains(label),
            "{label} not among the first settings"
        );
    }
}
