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
    // Per token and layer (fp32, RMSNorm, attention not fused, SwiGLU):
    // norms 2·(4h + 2·4h) = 24,576, q/k/v and the output 4·(3h + h) =
    // 16,384, the softmax 4·16·1024 = 65,536, the MLP 4·4·4096 = 65,536:
    // 172,032. The final norm 12,288 a token; the log-softmax 4·10000.
    let tokens = 4 * 1024u64;
    let activations = 24 * tokens * 172_032 + tokens * 12_288 + tokens * 40_000;
    assert_eq!(e.components.activations, activations);
    assert_eq!(e.activation_model, ActivationModel::Structural);
    assert_eq!(e.peak_phase, Phase::ForwardBackward);
    assert_eq!(e.total, 12 * n + activations);
    assert_eq!(e.total, 22_203_805_696);

    let err = e.total as f64 / REAL_PEAK as f64 - 1.0;
    println!(
        "estimate {} vs measured peak {REAL_PEAK}: {:+.1}%",
        e.total,
        100.0 * err
    );
    // The model's own code keeps more than PyTorch's modules would: its SiLU
    // is `x * sigmoid(x)`, which keeps the sigmoid too (1.44 GiB over the 24
    // layers at the peak, model.py:532 in the snapshot), and its attention
    // keeps more than the softmax. The formula counts what PyTorch's and
    // Transformers' modules keep, and comes out 8% low here.
    assert!((-0.12..-0.04).contains(&err), "relative error {err}");
    // The static part alone (weights, AdamW states) is far below the peak,
    // so the activations matter: the empirical model is reported too.
    assert!(12 * n < REAL_PEAK);
    assert!(e.activations_empirical > 0);
}
