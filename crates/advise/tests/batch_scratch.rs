//! Half the batch, against runs made for real on the CPU
//! (tests/fixtures/recorded): two recordings whose row was once wrong.
//!
//! * timm's ConvNeXt-atto, whose stem convolution's backward books one
//!   16,056,320-byte block from oneDNN, the same at batch 8 and at batch 4.
//!   Halved with the rest of backward's blocks, the row read 10% below the
//!   real run.
//! * The zoo's GPT-2 under `torch.compile`, read as PyTorch's own recorder
//!   writes it (its tags left out). A compiled backward's kernels carry the
//!   forward's source lines; read as a forward, its 16.30 MiB of gradients
//!   were activations, and half the batch halved them: 6.4% below.

use vramscope_advise::{advise, AdviseOptions, ChangeClass};
use vramscope_snapshot::{load, Snapshot};

/// The half-batch row's peak against `real`, as a fraction off.
fn half_batch_error(snap: &Snapshot, real: u64) -> f64 {
    let a = advise(snap, &AdviseOptions::default()).expect("advice");
    let half = a
        .advice
        .iter()
        .chain(&a.no_gain)
        .find(|r| r.class == ChangeClass::HalfBatch)
        .expect("a half-batch row");
    half.peak_allocated as f64 / real as f64 - 1.0
}

fn recorded(name: &str) -> Snapshot {
    load(&vramscope_testdata::recorded(name), &Default::default()).expect("reads")
}

#[test]
fn a_kernels_scratch_of_no_activations_size_stays_whole_with_half_the_batch() {
    // `advise_runs.py zoo_convnext half_batch`: two micro-batches of 4,
    // gradients accumulated, made for real.
    let err = half_batch_error(&recorded("convnext_timm.pickle.gz"), 81_040_584);
    assert!(err.abs() <= 0.01, "{:+.2}% off the real run", 100.0 * err);
}

#[test]
fn half_the_batch_of_a_compiled_model_keeps_its_gradients_whole() {
    let mut snap = recorded("zoo_gpt2_compiled.pickle.gz");
    snap.tags.clear();
    // `category_runs.py --only zoo_gpt2_compiled --backend allocator
    // --micro 2`: two micro-batches of 2, gradients accumulated, made for
    // real.
    let err = half_batch_error(&snap, 103_615_800);
    assert!(err.abs() <= 0.01, "{:+.2}% off the real run", 100.0 * err);
}
