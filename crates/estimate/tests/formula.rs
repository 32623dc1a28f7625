//! The components, totals and phases of the formula on hand-computed cases.

use vramscope_estimate::activations::{empirical_bytes, empirical_values_per_token};
use vramscope_estimate::{
    estimate, total_at_batch, ActivationModel, Dtype, EstimateError, EstimateOptions, ModelConfig,
    Optimizer, Phase,
};

fn qwen() -> ModelConfig {
    ModelConfig::from_path(format!(
        "{}/tests/data/qwen2.5-1.5b.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

const QWEN_N: u64 = 1_543_714_304;

#[test]
fn empirical_fit_value() {
    // 4.6894e-4 · 1.5e9 + 1.8494e6 = 703,410 + 1,849,400 = 2,552,810 values per token.
    assert_eq!(
        empirical_values_per_token(1_500_000_000).round(),
        2_552_810.0
    );
    assert_eq!(empirical_bytes(1_500_000_000, 1, 1, 1), 2_552_810);
    assert_eq!(empirical_bytes(1_500_000_000, 2, 3, 4), 2_552_810 * 24);
}

#[test]
fn one_billion_fp32_adamw() {
    let o = EstimateOptions {
        params: Some(1_000_000_000),
        ..EstimateOptions::default()
    };
    let e = estimate(&o).unwrap();
    let c = e.components;
    assert_eq!(c.parameters, 4_000_000_000);
    assert_eq!(c.gradients, 4_000_000_000);
    assert_eq!(c.optimizer_state, 8_000_000_000);
    assert_eq!(c.optimizer_intermediates, 4_000_000_000);
    // (4.6894e-4·1e9 + 1.8494e6) = 2,318,340 values/token × 1024 tokens × 4 bytes.
    assert_eq!(c.activations, 2_318_340 * 1024 * 4);
    assert_eq!(e.activation_model, ActivationModel::Empirical);
    assert!(e.activations_structural.is_none());
    assert_eq!(
        e.total,
        4_000_000_000 + 8_000_000_000 + 2_318_340 * 1024 * 4
    );
    assert_eq!(e.peak_phase, Phase::ForwardBackward);

    // One token: the optimizer step holds the peak.
    let e = estimate(&EstimateOptions {
        seq: 1,
        ..o.clone()
    })
    .unwrap();
    assert_eq!(e.components.activations, 2_318_340 * 4);
    assert_eq!(e.total, 20_000_000_000);
    assert_eq!(e.peak_phase, Phase::OptimizerStep);

    // Other optimizers.
    let with = |opt| {
        estimate(&EstimateOptions {
            optimizer: opt,
            seq: 1,
            ..o.clone()
        })
        .unwrap()
        .components
    };
    assert_eq!(with(Optimizer::Adam).optimizer_state, 8_000_000_000);
    assert_eq!(with(Optimizer::Sgd).optimizer_state, 0);
    assert_eq!(with(Optimizer::Sgd).optimizer_intermediates, 0);
    assert_eq!(with(Optimizer::SgdMomentum).optimizer_state, 4_000_000_000);
    // Without a config, Adafactor keeps T/512 values.
    assert_eq!(with(Optimizer::Adafactor).optimizer_state, 1_953_125 * 4);
}

#[test]
fn one_billion_bf16_no_mixed_keeps_states_in_bf16() {
    let e = estimate(&EstimateOptions {
        params: Some(1_000_000_000),
        dtype: Dtype::Bf16,
        seq: 1,
        ..EstimateOptions::default()
    })
    .unwrap();
    let c = e.components;
    assert_eq!(c.parameters, 2_000_000_000);
    assert_eq!(c.gradients, 2_000_000_000);
    assert_eq!(c.optimizer_state, 4_000_000_000);
    assert_eq!(c.optimizer_intermediates, 2_000_000_000);
}

#[test]
fn mixed_precision() {
    let e = estimate(&EstimateOptions {
        params: Some(1_000_000_000),
        dtype: Dtype::Bf16,
        mixed_precision: true,
        seq: 1,
        ..EstimateOptions::default()
    })
    .unwrap();
    let c = e.components;
    // bf16 copy 2N + fp32 master 4N.
    assert_eq!(c.parameters, 6_000_000_000);
    assert_eq!(c.gradients, 2_000_000_000);
    assert_eq!(c.optimizer_state, 8_000_000_000);
    assert_eq!(c.optimizer_intermediates, 4_000_000_000);
    assert_eq!(c.activations, 2_318_340 * 2);
    assert_eq!(e.total, 6_000_000_000 + 8_000_000_000 + 6_000_000_000);
    assert_eq!(e.peak_phase, Phase::OptimizerStep);

    let fp32 = EstimateOptions {
        params: Some(1),
        mixed_precision: true,
        ..EstimateOptions::default()
    };
    assert_eq!(estimate(&fp32), Err(EstimateError::MixedFp32));
}

#[test]
fn lora_trains_only_the_adapters() {
    let e = estimate(&EstimateOptions {
        config: Some(qwen()),
        lora_rank: Some(16),
        seq: 1,
        ..EstimateOptions::default()
    })
    .unwrap();
    // Per layer: q 16·(1536+1536) + k, v 16·(1536+256) each + o 16·(1536+1536).
    let t = 28 * (49_152 + 2 * 28_672 + 49_152);
    assert_eq!(t, 4_358_144);
    assert_eq!(e.trainable_params, t);
    let c = e.components;
    assert_eq!(c.parameters, (QWEN_N + t) * 4);
    assert_eq!(c.gradients, t * 4);
    assert_eq!(c.optimizer_state, t * 8);
    assert_eq!(c.optimizer_intermediates, t * 4);
    // One token, fp32, attention not fused: per layer the two RMSNorms
    // 2·(4h + 2·4h) = 36,864, q/k/v 4·(1536 + 2·256) = 8,192 and the output
    // 4·1536 = 6,144, the softmax 4·12·1 = 48, the gated MLP 4·4·8960 =
    // 143,360: 194,608. The final RMSNorm 18,432; the log-softmax 151936·4.
    assert_eq!(c.activations, 28 * 194_608 + 18_432 + 607_744);
    assert_eq!(e.peak_phase, Phase::OptimizerStep);
    assert_eq!(e.total, 6_262_020_096);

    // Mixed precision: frozen bf16 base, adapters bf16 + fp32 master.
    let e = estimate(&EstimateOptions {
        config: Some(qwen()),
        lora_rank: Some(16),
        dtype: Dtype::Bf16,
        mixed_precision: true,
        ..EstimateOptions::default()
    })
    .unwrap();
    assert_eq!(e.components.parameters, QWEN_N * 2 + t * 6);
    assert_eq!(e.components.gradients, t * 2);
    assert_eq!(e.components.optimizer_state, t * 8);

    let no_config = EstimateOptions {
        params: Some(QWEN_N),
        lora_rank: Some(16),
        ..EstimateOptions::default()
    };
    assert!(matches!(
        estimate(&no_config),
        Err(EstimateError::NeedsConfig(_))
    ));
}

#[test]
fn inference_with_kv_cache() {
    let e = estimate(&EstimateOptions {
        config: Some(qwen()),
        dtype: Dtype::Bf16,
        kv_cache: true,
        ..EstimateOptions::default()
    })
    .unwrap();
    assert!(e.inference && e.optimizer.is_none());
    let c = e.components;
    assert_eq!(c.parameters, QWEN_N * 2);
    assert_eq!(
        (c.gradients, c.optimizer_state, c.optimizer_intermediates),
        (0, 0, 0)
    );
    // 2 · 28 layers · 1 · 1024 tokens · 2 kv heads · 128 · 2 bytes.
    assert_eq!(c.kv_cache, 29_360_128);
    // One layer of 1024 tokens in bf16: norms 2·(4h + 2·2h) = 24,576, q/k/v
    // and the output 2·2048 + 2·1536 = 7,168, the softmax 2·12·1024 =
    // 24,576, the MLP 4·2·8960 = 71,680: 128,000 a token. Hidden state
    // 1024·1536·2, logits 1024·151936·2.
    assert_eq!(c.activations, 1024 * 128_000 + 3_145_728 + 311_164_928);
    assert_eq!(e.total, 3_562_171_392);
    assert_eq!(e.peak_phase, Phase::Forward);
}

#[test]
fn checkpointing_keeps_layer_inputs_and_one_layer() {
    let base = EstimateOptions {
        config: Some(qwen()),
        batch: 2,
        seq: 512,
        ..EstimateOptions::default()
    };
    let full = estimate(&base).unwrap();
    let ckpt = estimate(&EstimateOptions {
        checkpointing: true,
        ..base.clone()
    })
    .unwrap();
    let (s, b, h) = (512u64, 2u64, 1536u64);
    // Per token: 194,560 + the softmax 4·12·s (see lora_trains_only_the_adapters).
    let layer = s * b * (194_560 + 4 * 12 * s);
    let final_norm = s * b * 18_432;
    let logits = b * s * 151_936 * 4;
    assert_eq!(
        full.components.activations,
        28 * layer + final_norm + logits
    );
    assert_eq!(
        ckpt.components.activations,
        28 * s * b * h * 4 + layer + final_norm + logits
    );
    assert!(ckpt.components.activations < full.components.activations);
    let fused = estimate(&EstimateOptions {
        fused_attention: true,
        ..base.clone()
    })
    .unwrap();
    assert_eq!(
        fused.components.activations,
        28 * s * b * 194_560 + final_norm + logits
    );
    // Here the optimizer step holds the peak either way.
    assert!(ckpt.total <= full.total);
}

#[test]
fn max_batch_is_the_largest_that_fits() {
    let gpu = 80_000_000_000;
    let o = EstimateOptions {
        config: Some(qwen()),
        dtype: Dtype::Bf16,
        mixed_precision: true,
        batch: 8,
        seq: 2048,
        gpu_memory: Some(gpu),
        find_max_batch: true,
        ..EstimateOptions::default()
    };
    let e = estimate(&o).unwrap();
    let mb = e.max_batch.unwrap();
    assert!(mb >= 1);
    assert!(total_at_batch(&o, mb).unwrap() <= gpu);
    assert!(total_at_batch(&o, mb + 1).unwrap() > gpu);
    assert_eq!(e.fits, Some(e.total <= gpu));
    assert_eq!(e.headroom, Some(gpu as i64 - e.total as i64));

    // The total never falls as the batch grows.
    let totals: Vec<u64> = (1..=40).map(|b| total_at_batch(&o, b).unwrap()).collect();
    assert!(totals.windows(2).all(|w| w[0] <= w[1]));
    // A larger GPU never allows a smaller batch.
    let mut last = 0;
    for gib in [8u64, 16, 24, 40, 80, 141, 1000] {
        let e = estimate(&EstimateOptions {
            gpu_memory: Some(gib << 30),
            ..o.clone()
        })
        .unwrap();
        let mb = e.max_batch.unwrap();
        assert!(mb >= last);
        last = mb;
    }
    // Too small a GPU: no batch fits. No GPU: no search.
    let tiny = estimate(&EstimateOptions {
        gpu_memory: Some(1 << 30),
        ..o.clone()
    })
    .unwrap();
    assert_eq!((tiny.max_batch, tiny.fits), (Some(0), Some(false)));
    let none = estimate(&EstimateOptions {
        gpu_memory: None,
        ..o
    })
    .unwrap();
    assert_eq!((none.max_batch, none.fits), (None, None));
}

#[test]
fn adafactor_from_shapes() {
    let e = estimate(&EstimateOptions {
        config: Some(qwen()),
        optimizer: Optimizer::Adafactor,
        ..EstimateOptions::default()
    })
    .unwrap();
    // Embedding 151936+1536; per layer q 1536+1536, k, v 1536+256 each,
    // o 1536+1536, biases 1536+2·256, gate/up 1536+8960 each, down 8960+1536;
    // norms (2·28+1)·1536.
    let per_layer = 3072 + 2 * 1792 + 3072 + 2048 + 3 * 10_496;
    let values = 153_472 + 28 * per_layer + 57 * 1536;
    assert_eq!(e.components.optimizer_state, values * 4);
}

#[test]
fn invalid_options() {
    let ok = EstimateOptions {
        params: Some(1_000),
        ..EstimateOptions::default()
    };
    assert_eq!(
        estimate(&EstimateOptions::default()),
        Err(EstimateError::NoModel)
    );
    assert!(estimate(&EstimateOptions {
        batch: 0,
        ..ok.clone()
    })
    .is_err());
    assert!(estimate(&EstimateOptions {
        seq: 0,
        ..ok.clone()
    })
    .is_err());
    assert!(estimate(&EstimateOptions {
        kv_cache: true,
        ..ok.clone()
    })
    .is_err());
    let text = vramscope_estimate::render(&estimate(&ok).unwrap());
    assert!(text.contains("total (peak)") && text.contains("Assumptions"));
    let json = serde_json::to_value(estimate(&ok).unwrap()).unwrap();
    assert_eq!(json["optimizer"], "adamw");
    assert_eq!(json["peak_phase"], "forward_backward");
}

/// An EMA of the weights: one more copy of what is trained, in the weights'
/// dtype (fp32 master weights with mixed precision), held through the peak
/// wherever it is; none for inference.
#[test]
fn an_ema_is_one_more_copy_of_the_trained_weights() {
    let base = EstimateOptions {
        params: Some(1_000_000_000),
        ..EstimateOptions::default()
    };
    let plain = estimate(&base).unwrap();
    let e = estimate(&EstimateOptions {
        ema: true,
        ..base.clone()
    })
    .unwrap();
    assert_eq!(e.components.ema, 4_000_000_000);
    assert_eq!(e.total, plain.total + 4_000_000_000);
    assert_eq!(plain.components.ema, 0);
    let mixed = EstimateOptions {
        dtype: Dtype::Bf16,
        mixed_precision: true,
        ema: true,
        ..base.clone()
    };
    assert_eq!(estimate(&mixed).unwrap().components.ema, 4_000_000_000);
    let bf16 = EstimateOptions {
        dtype: Dtype::Bf16,
        ema: true,
        ..base.clone()
    };
    assert_eq!(estimate(&bf16).unwrap().components.ema, 2_000_000_000);
    assert!(estimate(&EstimateOptions {
        inference: true,
        ema: true,
        ..base
    })
    .is_err());
}
