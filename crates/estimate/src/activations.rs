//! Activation memory: what the forward pass keeps for the backward pass.
//!
//! Two models, both always reported:
//!
//! * **structural**, from the architecture (needs a config). Per
//!   transformer layer, with standard (non-fused) attention and the
//!   activations in 16-bit, Korthikanti et al. 2022 ("Reducing Activation
//!   Recomputation in Large Transformer Models", eq. 1) count
//!   `s·b·h·(34 + 5·a·s/h)` bytes: attention 11·s·b·h + 5·a·s²·b (Q, K, V,
//!   the scores, the softmax, its dropout mask, the attention output), MLP
//!   19·s·b·h (for a 4h GELU MLP), the two norms' inputs 4·s·b·h. Here it is
//!   scaled by `A/2` for activations of `A` bytes (×2 in fp32). The
//!   constant is used as published for every architecture; gated MLPs with
//!   wider `ff` keep more than the 4h GELU MLP it was derived for, and
//!   models without dropout keep less.
//!
//!   With fused attention (FlashAttention, PyTorch's SDPA kernels) the
//!   `a·s×s` scores and softmax are never stored: the `5·a·s/h` term is
//!   dropped, `s·b·h·34·A/2` per layer (the small per-row log-sum-exp the
//!   kernels keep is ignored).
//!
//!   With full recomputation (activation checkpointing of every layer) each
//!   layer keeps only its input, `s·b·h·A` bytes, and one layer's full set
//!   is rebuilt at a time during backward: `layers·s·b·h·A + s·b·h·(34 +
//!   5·a·s/h)·A/2`.
//!
//!   Both add the embedding output (`s·b·h·A`) and the logits: `b·s·V·A`
//!   plus an fp32 copy `b·s·V·4` for the loss (the log-softmax the
//!   cross-entropy keeps).
//!
//!   Inference keeps nothing for a backward pass: one layer's working set,
//!   the hidden state and the logits (`b·s·V·A`).
//!
//! * **empirical**, from the parameter count alone: a fit of measured
//!   training runs, `4.6894e-4·N + 1.8494e6` activation values per token,
//!   times `B·L·A` bytes. It knows nothing of checkpointing or inference.

use crate::config::ModelConfig;

/// Empirical fit: slope of activation values per token per parameter.
// The exponent is negative (4.6894 × 10⁻⁴); copies of this fit printed with
// 10⁴ are wrong by eight orders of magnitude.
pub const EMPIRICAL_SLOPE: f64 = 4.6894e-4;
/// Empirical fit: activation values per token independent of the size.
pub const EMPIRICAL_INTERCEPT: f64 = 1.8494e6;

/// Activation values per token from the empirical fit for `n` parameters.
pub fn empirical_values_per_token(n: u64) -> f64 {
    EMPIRICAL_SLOPE * n as f64 + EMPIRICAL_INTERCEPT
}

/// Activation bytes from the empirical fit: values per token × batch ×
/// sequence × bytes per activation value.
pub fn empirical_bytes(n: u64, batch: u64, seq: u64, act_bytes: u64) -> u64 {
    (empirical_values_per_token(n) * (batch * seq * act_bytes) as f64).round() as u64
}

/// One transformer layer's activations, in bytes: with standard attention
/// `s·b·h·(34 + 5·a·s/h)·A/2` = `s·b·(34·h + 5·a·s)·A/2`; with fused
/// attention `s·b·34·h·A/2`.
pub fn layer_bytes(c: &ModelConfig, batch: u64, seq: u64, act_bytes: u64, fused: bool) -> u64 {
    let (h, a) = (c.hidden_size, c.num_heads);
    let scores = if fused { 0 } else { 5 * a * seq };
    // Exact in integers: A is 2 or 4, and 34·h + 5·a·s is multiplied before halving.
    seq * batch * (34 * h + scores) * act_bytes / 2
}

/// The parts of the structural activation estimate, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct StructuralActivations {
    /// All transformer layers (full) or their inputs plus one recomputed layer.
    pub layers: u64,
    /// The embedding output (or, for inference, the hidden state).
    pub embedding_output: u64,
    /// Logits, and their fp32 copy for the loss when training.
    pub logits: u64,
    /// Sum of the above.
    pub total: u64,
}

/// What the structural model counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Regime {
    /// Forward + backward, every layer's activations kept.
    Training,
    /// Forward + backward with full recomputation.
    Checkpointed,
    /// Forward only.
    Inference,
}

/// Structural activation bytes for `c` at `batch` × `seq` with activations
/// of `act_bytes` bytes, with standard or `fused` attention.
pub fn structural(
    c: &ModelConfig,
    batch: u64,
    seq: u64,
    act_bytes: u64,
    regime: Regime,
    fused: bool,
) -> StructuralActivations {
    let one_layer = layer_bytes(c, batch, seq, act_bytes, fused);
    let hidden = seq * batch * c.hidden_size * act_bytes;
    let logits_values = batch * seq * c.vocab_size;
    let (layers, logits) = match regime {
        Regime::Training => (
            c.num_layers * one_layer,
            logits_values * act_bytes + logits_values * 4,
        ),
        Regime::Checkpointed => (
            c.num_layers * hidden + one_layer,
            logits_values * act_bytes + logits_values * 4,
        ),
        Regime::Inference => (one_layer, logits_values * act_bytes),
    };
    StructuralActivations {
        layers,
        embedding_output: hidden,
        logits,
        total: layers + hidden + logits,
    }
}

/// The key/value cache of inference: `2·layers·B·L·kv_heads·head_dim·A`.
pub fn kv_cache_bytes(c: &ModelConfig, batch: u64, seq: u64, act_bytes: u64) -> u64 {
    2 * c.num_layers * batch * seq * c.kv_dim() * act_bytes
}
