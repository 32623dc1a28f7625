//! The formula against a measured run: the CS336 "medium" Transformer LM of
//! `shared/fixtures/real/wedsonlin_medium_1024_training_memory_snapshot.pickle`
//! (d_model 1024, 24 layers, 16 heads, SwiGLU d_ff 4096, vocab 10000, RMSNorm,
//! RoPE, untied embeddings; context 1024, batch 4, fp32, one forward +
//! backward + AdamW step). Its peak allocated memory, from the fixture's
//! SOURCES.md, is 24,209,133,576 bytes.

use vramscope_estimate::{estimate, ActivationModel, EstimateOptions, ModelConfig, Phase};

const REAL_PEAK: u64 = 24_209_133_576;

#[test]
fn cs336_medium_training_estimate() {
    let config = ModelConfig::from_path(format!(
        "{}/tests/data/cs336_medium.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let e = estimate(&EstimateOptions {
        config: Some(config),
        batch: 4,
        seq: 1024,
        ..EstimateOptions::default()
    })
    .unwrap();
    let n = 423_183_360u64;
    assert_eq!(e.params, n);
    assert_eq!(e.components.parameters, 4 * n);
    assert_eq!(e.components.optimizer_state, 8 * n);
    // 24 layers × 1024·4·(34·1024 + 5·16·1024)·4/2 + embedding 1024·4·1024·4
    // + logits 4·1024·10000·(4 + 4).
    let layers = 24 * 1024 * 4 * (34 * 1024 + 5 * 16 * 1024) * 2;
    let activations = layers + 1024 * 4 * 1024 * 4 + 4 * 1024 * 10_000 * 8;
    assert_eq!(e.components.activations, activations);
    assert_eq!(e.activation_model, ActivationModel::Structural);
    assert_eq!(e.peak_phase, Phase::ForwardBackward);
    assert_eq!(e.total, 12 * n + activations);
    assert_eq!(e.total, 28_373_889_024);

    let err = e.total as f64 / REAL_PEAK as f64 - 1.0;
    println!(
        "estimate {} vs measured peak {REAL_PEAK}: {:+.1}%",
        e.total,
        100.0 * err
    );
    // The published per-layer constant counts dropout masks and a 4h GELU
    // MLP; this model has neither, and the estimate comes out high.
    assert!((0.10..0.25).contains(&err), "relative error {err}");
    // The static part alone (weights, AdamW states) is far below the peak,
    // so the activations matter: the empirical model is reported too.
    assert!(12 * n < REAL_PEAK);
    assert!(e.activations_empirical > 0);
}
