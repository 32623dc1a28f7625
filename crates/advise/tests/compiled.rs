//! Advice on a compiled model's training, read as PyTorch's own recorder
//! writes it (no tags): the zoo's GPT-2 under `torch.compile`, AdamW, 3 steps
//! (`tests/fixtures/recorded/zoo_gpt2_compiled.pickle.gz`, its tags left
//! out here). A compiled backward's kernels carry the forward's source
//! lines; read as a forward, its 16.30 MiB of gradients were activations,
//! and half the batch halved them: the row read 6.4% below the real run.

use vramscope_advise::{advise, AdviseOptions, ChangeClass};
use vramscope_snapshot::load;

#[test]
fn half_the_batch_of_a_compiled_model_keeps_its_gradients_whole() {
    let mut snap = load(
        &vramscope_testdata::recorded("zoo_gpt2_compiled.pickle.gz"),
        &Default::default(),
    )
    .expect("reads");
    snap.tags.clear();
    let a = advise(&snap, &AdviseOptions::default()).expect("advice");
    let half = a
        .advice
        .iter()
        .chain(&a.no_gain)
        .find(|r| r.class == ChangeClass::HalfBatch)
        .expect("a half-batch row");
    // `category_runs.py --only zoo_gpt2_compiled --backend allocator
    // --micro 2`: two micro-batches of 2, gradients accumulated, made for
    // real.
    let real = 103_615_800f64;
    let err = half.peak_allocated as f64 / real - 1.0;
    assert!(
        err.abs() <= 0.01,
        "predicted {}, real {real} ({:+.2}%)",
        half.peak_allocated,
        100.0 * err
    );
}
