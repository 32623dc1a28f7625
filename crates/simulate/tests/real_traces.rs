//! Replays of the real snapshots in tests/fixtures/real with the settings
//! they were recorded with, against what the allocator did.

use vramscope_simulate::{replay, Settings};
use vramscope_snapshot::{load, LoadOptions};
use vramscope_testdata::real;

fn replayed(name: &str) -> vramscope_simulate::Replayed {
    let snap = load(&real(name), &LoadOptions::default()).expect("fixture loads");
    let settings = snap
        .allocator_settings
        .as_ref()
        .map(Settings::from_recorded)
        .unwrap_or_default();
    let device = snap.devices().first().copied().unwrap_or(0);
    let r = replay(&snap, device, settings, &Default::default());
    eprintln!("{name}: {r:?}");
    r
}

#[test]
fn segment_events_of_a_real_training_run_are_reproduced() {
    // 61 cudaMallocs recorded from the start of the program.
    let r = replayed("decomfl_opt_zo_fl_memory.pickle.gz");
    assert_eq!(r.recorded_segment_events, 61);
    assert_eq!(r.initial_reserved, 0);
    let agreement = r.matched_segment_events as f64 / r.recorded_segment_events as f64;
    assert!(agreement >= 0.99, "{agreement}");
    assert!(r.max_reserved_error <= 0.01, "{}", r.max_reserved_error);
    assert_eq!(r.simulated_peak_reserved, r.recorded_peak_reserved);
}

#[test]
fn traces_that_start_late_are_served_from_the_seeded_cache() {
    // Their window starts with every segment already reserved and the
    // allocator made none during it. Seeded with the segments and the
    // blocks in use at the start, the model serves every request from that
    // cache too: no cudaMalloc, reserved equal throughout, and the peak
    // allocated of the rounded requests within 0.5% of the file's.
    for (name, peak_allocated) in [
        (
            "wedsonlin_medium_1024_training_memory_snapshot.pickle.gz",
            24_209_133_576u64,
        ),
        (
            "wedsonlin_medium_512_inference_memory_snapshot.pickle.gz",
            1_951_309_824,
        ),
        ("nothanmin_cs336_999segments.pickle.gz", 23_165_566_980),
        ("magma27_cs336_windows.pickle.gz", 13_927_831_556),
    ] {
        let r = replayed(name);
        assert_eq!(r.recorded_segment_events, 0, "{name}");
        assert!(r.initial_reserved > 0, "{name}");
        assert_eq!(r.seed_misses, 0, "{name}");
        assert_eq!(r.simulated_segment_events, 0, "{name}: {r:?}");
        assert_eq!(
            r.simulated_peak_reserved, r.recorded_peak_reserved,
            "{name}"
        );
        assert!(r.max_reserved_error == 0.0, "{name}");
        let err = (r.simulated_peak_allocated as f64 - peak_allocated as f64).abs()
            / peak_allocated as f64;
        assert!(
            err <= 0.005,
            "{name}: {} vs {peak_allocated}",
            r.simulated_peak_allocated
        );
    }
}
