//! Activation memory: what the forward pass keeps for the backward pass.
//!
//! Two models, both always reported:
//!
//! * **structural**, from the architecture (needs a config): what autograd
//!   keeps for backward, tensor by tensor, as a trace of Transformers'
//!   implementations shows it (`vramscope.estimate`, python/tests/test_formula_vs_trace.py).
//!   Per token and layer, with activations of `A` bytes:
//!   - each norm keeps its input and its output: `2·A·h`. Transformers'
//!     RMSNorm is Python: it keeps its input cast to fp32 (`4·h`), the
//!     normalized values and the output (`4·h + 2·A·h`);
//!   - attention keeps q, k and v for the kernel (`A·(q + 2·kv)`, grouped
//!     heads counted as they are) and the kernel's output (`A·q`); without a
//!     fused kernel also the softmax of the scores (`A·heads·s`, and with
//!     attention dropout its mask and the dropped weights);
//!   - the MLP: gated (SwiGLU) keeps gate, up, the activation and the
//!     product (`4·A·ff`); a plain MLP the first projection and the
//!     activation (`2·A·ff`), three more `ff`-wide tensors for a GELU
//!     written in Python (`gelu_new`), one for ReLU;
//!   - residual dropout keeps a 1-byte mask per branch (`2·h`);
//!   - GPT-2-style models with `use_cache` copy k and v into the cache
//!     (`2·A·kv`), as Transformers does in training too.
//!
//!   Then the final norm, the embedding dropout's mask, and the logits the
//!   loss keeps: their log-softmax, `A·V` (plus its fp32 copy for the loss
//!   under mixed precision, `4·V`). For GPT-2 small (fp32) and Qwen2.5
//!   (bf16) this equals the trace to within 1%; the published per-layer
//!   constant (Korthikanti et al. 2022, `34·s·b·h` bytes in 16-bit) was 6%
//!   above GPT-2 with the exact GELU and 47% below it with `gelu_new`.
//!
//!   With full recomputation (activation checkpointing of every layer) each
//!   layer keeps only its input, `s·b·h·A` bytes, and one layer's full set
//!   is rebuilt at a time during backward.
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

/// Bytes one token keeps in one layer for backward (the list in the module docs).
pub fn layer_bytes_per_token(c: &ModelConfig, seq: u64, act_bytes: u64, fused: bool) -> u64 {
    let a = act_bytes;
    let (h, kv, ff) = (c.hidden_size, c.kv_dim(), c.intermediate_size);
    let q = c.num_heads * c.head_dim;
    let norms = match c.norm {
        crate::config::NormKind::Layer => 2 * (2 * a * h),
        crate::config::NormKind::Rms => 2 * (4 * h + 2 * a * h),
    };
    let mut attention = a * (q + 2 * kv) + a * q;
    if !fused {
        attention += a * c.num_heads * seq;
        if c.attn_dropout > 0.0 {
            attention += (a + 1) * c.num_heads * seq;
        }
    }
    let mlp = match c.mlp {
        crate::config::MlpKind::Gated => 4 * a * ff,
        crate::config::MlpKind::Standard => {
            let tensors = match c.activation.as_deref() {
                Some("relu") => 1,
                Some("quick_gelu") => 3,
                Some("gelu_new" | "gelu_fast") => 5,
                _ => 2,
            };
            tensors * a * ff
        }
    };
    let masks = if c.resid_dropout > 0.0 { 2 * h } else { 0 };
    let cache = if c.gpt2_style && c.use_cache {
        2 * a * kv
    } else {
        0
    };
    norms + attention + mlp + masks + cache
}

/// One transformer layer's activations, in bytes.
pub fn layer_bytes(c: &ModelConfig, batch: u64, seq: u64, act_bytes: u64, fused: bool) -> u64 {
    batch * seq * layer_bytes_per_token(c, seq, act_bytes, fused)
}

/// The parts of the structural activation estimate, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct StructuralActivations {
    /// All transformer layers (full) or their inputs plus one recomputed layer.
    pub layers: u64,
    /// The final norm and the embedding dropout's mask (for inference, the
    /// hidden state).
    pub embedding_output: u64,
    /// The logits' log-softmax the loss keeps (and its fp32 copy under mixed precision).
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
    mixed_precision: bool,
) -> StructuralActivations {
    let a = act_bytes;
    let one_layer = layer_bytes(c, batch, seq, a, fused);
    let tokens = batch * seq;
    let hidden = tokens * c.hidden_size * a;
    // The final norm and the embedding dropout's mask: what the model keeps
    // outside its layers besides the logits.
    let final_norm = match c.norm {
        crate::config::NormKind::Layer => 2 * a * c.hidden_size,
        crate::config::NormKind::Rms => 4 * c.hidden_size + 2 * a * c.hidden_size,
    };
    let embd_mask = if c.embd_dropout > 0.0 {
        c.hidden_size
    } else {
        0
    };
    let logits_values = tokens * c.vocab_size;
    let kept_logits = logits_values * a
        + if mixed_precision {
            logits_values * 4
        } else {
            0
        };
    let (layers, outside, logits) = match regime {
        Regime::Training => (
            c.num_layers * one_layer,
            tokens * (final_norm + embd_mask),
            kept_logits,
        ),
        Regime::Checkpointed => (
            c.num_layers * hidden + one_layer,
            tokens * (final_norm + embd_mask),
            kept_logits,
        ),
        Regime::Inference => (one_layer, hidden, logits_values * a),
    };
    StructuralActivations {
        layers,
        embedding_output: outside,
        logits,
        total: layers + outside + logits,
    }
}

/// The key/value cache of inference: `2·layers·B·L·kv_heads·head_dim·A`.
pub fn kv_cache_bytes(c: &ModelConfig, batch: u64, seq: u64, act_bytes: u64) -> u64 {
    2 * c.num_layers * batch * seq * c.kv_dim() * act_bytes
}
