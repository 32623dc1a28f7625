//! The verdict for a GPU (`fit`): the trace replayed without a limit gives
//! the peak reserved, held against the GPU's total less the memory outside
//! PyTorch's allocator, with "too close to call" within the estimate's
//! error. On the H200's recording of the GPT at batch 64 (2 AdamW steps),
//! whose peak reserved PyTorch measured at 11,528,044,544 bytes.

use vramscope_simulate::{fit, FitOptions, Verdict};
use vramscope_snapshot::{load, LoadOptions};
use vramscope_testdata::gpu;

const PEAK: u64 = 11_528_044_544;
const OUTSIDE: u64 = 768 << 20;

fn verdict_for(total: u64, settings: Option<&str>) -> vramscope_simulate::Fit {
    let snap = load(
        &gpu("estimate_trace_b64_default.pickle.gz"),
        &LoadOptions::default(),
    )
    .expect("fixture loads");
    fit(
        &snap,
        &FitOptions {
            device: None,
            total,
            outside: None,
            settings: settings.map(str::to_string),
            ..Default::default()
        },
    )
    .expect("a CUDA trace")
}

#[test]
fn the_peak_reserved_is_the_gpus_and_the_verdict_follows_the_margin() {
    // Room to spare: 5% more than the peak and the context.
    let roomy = verdict_for(PEAK + OUTSIDE + PEAK / 20, None);
    assert_eq!(roomy.peak_reserved, PEAK);
    assert_eq!(roomy.outside, OUTSIDE);
    assert_eq!(roomy.usable, roomy.total - OUTSIDE);
    assert_eq!(roomy.margin, (PEAK / 20) as i64);
    assert_eq!(roomy.verdict, Verdict::Fits, "{}", roomy.sentence);
    assert!(
        roomy.sentence.starts_with("fits: peak reserved 10.74 GiB"),
        "{}",
        roomy.sentence
    );

    // Exactly at the limit, and a little over it: within the band.
    for total in [PEAK + OUTSIDE, PEAK + OUTSIDE - PEAK / 200] {
        let close = verdict_for(total, None);
        assert_eq!(close.verdict, Verdict::TooClose, "{}", close.sentence);
        assert!(
            close.sentence.starts_with("too close to call"),
            "{}",
            close.sentence
        );
    }

    // 5% short.
    let short = verdict_for(PEAK + OUTSIDE - PEAK / 20, None);
    assert_eq!(short.verdict, Verdict::DoesNotFit, "{}", short.sentence);
    assert_eq!(short.margin, -((PEAK / 20) as i64));
    assert!(short.sentence.contains("short"), "{}", short.sentence);
}

#[test]
fn settings_apply_to_the_replay_and_are_named() {
    // Expandable segments map what is used, in 20 MiB pages: less reserved
    // than the default's whole segments for this run.
    let v = verdict_for(80 << 30, Some("expandable_segments:True"));
    assert!(v.peak_reserved < PEAK, "{}", v.peak_reserved);
    assert!(
        v.sentence.contains("under expandable_segments:True"),
        "{}",
        v.sentence
    );
    assert_eq!(v.settings, "expandable_segments:True");
}
