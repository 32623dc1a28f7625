//! Half the batch on a recording whose peak is a kernel's own scratch:
//! timm's ConvNeXt-atto trained on the CPU (tests/fixtures/recorded), whose
//! stem convolution's backward books one 16,056,320-byte block from
//! oneDNN, the same at batch 8 and at batch 4. Halved with the rest of
//! backward's blocks, the row read 10% below the real run.

use vramscope_advise::{advise, AdviseOptions, ChangeClass};
use vramscope_snapshot::load;

#[test]
fn a_kernels_scratch_of_no_activations_size_stays_whole_with_half_the_batch() {
    let snap = load(
        &vramscope_testdata::recorded("convnext_timm.pickle.gz"),
        &Default::default(),
    )
    .expect("reads");
    let a = advise(&snap, &AdviseOptions::default()).expect("advice");
    let half = a
        .advice
        .iter()
        .chain(&a.no_gain)
        .find(|r| r.class == ChangeClass::HalfBatch)
        .expect("a half-batch row");
    // `advise_runs.py zoo_convnext half_batch`: two micro-batches of 4,
    // gradients accumulated, made for real.
    let real = 81_040_584f64;
    let err = half.peak_allocated as f64 / real - 1.0;
    assert!(
        err.abs() <= 0.01,
        "predicted {}, real {real} ({:+.2}%)",
        half.peak_allocated,
        100.0 * err
    );
}
