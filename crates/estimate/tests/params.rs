//! Parameter counts from configs, checked against the published models,
//! and the config reader's rules and errors.

use vramscope_estimate::{count_params, parse_param_count, MlpKind, ModelConfig, NormKind};

fn fixture(name: &str) -> ModelConfig {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    ModelConfig::from_path(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn qwen2_5_1_5b_count_is_exact() {
    let c = fixture("qwen2.5-1.5b.json");
    assert_eq!(c.mlp, MlpKind::Gated);
    assert_eq!(c.norm, NormKind::Rms);
    assert!(c.qkv_bias && !c.o_bias && !c.mlp_bias);
    assert!(c.tie_word_embeddings && !c.learned_positions);
    assert_eq!((c.num_kv_heads, c.head_dim, c.kv_dim()), (2, 128, 256));
    let b = count_params(&c);
    // Qwen2.5-1.5B as published: 1,543,714,304 parameters.
    assert_eq!(b.total, 1_543_714_304);
    assert_eq!(b.embeddings, 151_936 * 1536);
    assert_eq!(b.lm_head, 0);
    assert_eq!(b.per_layer, 46_797_824);
    assert_eq!(b.norms, (2 * 28 + 1) * 1536);
    assert!((b.total as f64 / 1.54e9 - 1.0).abs() < 0.01);
}

#[test]
fn gpt2_small_count_is_exact() {
    let c = fixture("gpt2.json");
    assert_eq!(c.mlp, MlpKind::Standard);
    assert_eq!(c.norm, NormKind::Layer);
    assert!(c.qkv_bias && c.o_bias && c.mlp_bias && c.learned_positions);
    assert_eq!(c.intermediate_size, 4 * 768);
    let b = count_params(&c);
    assert_eq!(b.total, 124_439_808);
    assert_eq!(b.position_embeddings, 1024 * 768);
    assert_eq!(b.per_layer, 7_087_872);
}

#[test]
fn cs336_medium_count() {
    let c = fixture("cs336_medium.json");
    assert_eq!(c.mlp, MlpKind::Gated);
    assert_eq!(c.norm, NormKind::Rms);
    assert!(!c.tie_word_embeddings && !c.learned_positions && !c.qkv_bias);
    let b = count_params(&c);
    // 2 × 10000·1024 embeddings/output, 24 × (4·1024² + 3·1024·4096 + 2·1024), final norm.
    assert_eq!(
        b.total,
        2 * 10_000 * 1024 + 24 * (4 * 1024 * 1024 + 3 * 1024 * 4096 + 2 * 1024) + 1024
    );
    assert_eq!(b.total, 423_183_360);
}

#[test]
fn missing_and_invalid_keys_are_named() {
    let e = ModelConfig::from_json_str(r#"{"n_layer": 2, "n_head": 2, "vocab_size": 10}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("hidden_size"), "{e}");
    let e = ModelConfig::from_json_str(
        r#"{"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("num_attention_heads"), "{e}");
    let e = ModelConfig::from_json_str(
        r#"{"hidden_size": "64", "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("\"hidden_size\"") && e.contains("positive integer"),
        "{e}"
    );
    let e = ModelConfig::from_json_str(
        r#"{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10, "tie_word_embeddings": "yes"}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("tie_word_embeddings"), "{e}");
    assert!(ModelConfig::from_json_str("[1]").is_err());
    assert!(ModelConfig::from_json_str("{").is_err());
}

#[test]
fn defaults_and_text_config() {
    // Nested language model, no kv heads (= heads), no ff (= 4h), null values ignored.
    let c = ModelConfig::from_json_str(
        r#"{"model_type": "wrapper", "text_config": {"model_type": "llama", "hidden_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": null,
            "vocab_size": 100, "tie_word_embeddings": false}}"#,
    )
    .unwrap();
    assert_eq!(c.num_kv_heads, 4);
    assert_eq!(c.intermediate_size, 256);
    assert_eq!(c.mlp, MlpKind::Gated);
    assert_eq!(c.norm, NormKind::Rms);
    assert!(!c.tie_word_embeddings);
    // attention_bias applies to q, k, v and o.
    let c = ModelConfig::from_json_str(
        r#"{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "vocab_size": 100, "attention_bias": true}"#,
    )
    .unwrap();
    assert!(c.qkv_bias && c.o_bias && !c.mlp_bias);
}

#[test]
fn parameter_counts_people_write() {
    assert_eq!(parse_param_count("1.5e9").unwrap(), 1_500_000_000);
    assert_eq!(parse_param_count("1.5B").unwrap(), 1_500_000_000);
    assert_eq!(parse_param_count("7b").unwrap(), 7_000_000_000);
    assert_eq!(parse_param_count("350M").unwrap(), 350_000_000);
    assert_eq!(parse_param_count("124439808").unwrap(), 124_439_808);
    assert_eq!(parse_param_count("1_000K").unwrap(), 1_000_000);
    assert_eq!(parse_param_count(" 2E6 ").unwrap(), 2_000_000);
    for bad in ["", "abc", "1.5X", "-3", "0", "1e"] {
        assert!(parse_param_count(bad).is_err(), "{bad:?}");
    }
}
