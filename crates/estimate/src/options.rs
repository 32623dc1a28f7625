//! What to estimate: the precision, the optimizer, the batch shape and the
//! mode (full training, LoRA, checkpointing, inference), with their
//! defaults, and the combinations that cannot be estimated.

use serde::Serialize;

use crate::config::ModelConfig;

/// Storage type of parameters (and, without mixed precision, of everything else).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    #[default]
    Fp32,
    Bf16,
    Fp16,
}

impl Dtype {
    /// Bytes per value.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Fp32 => 4,
            Dtype::Bf16 | Dtype::Fp16 => 2,
        }
    }
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Fp32 => "fp32",
            Dtype::Bf16 => "bf16",
            Dtype::Fp16 => "fp16",
        }
    }
}

impl std::str::FromStr for Dtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "fp32" | "float32" | "float" | "f32" => Ok(Dtype::Fp32),
            "bf16" | "bfloat16" => Ok(Dtype::Bf16),
            "fp16" | "float16" | "half" | "f16" => Ok(Dtype::Fp16),
            _ => Err(format!("unknown dtype {s:?} (use fp32, bf16 or fp16)")),
        }
    }
}

/// The optimizer, for its state and temporaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Optimizer {
    #[default]
    #[serde(rename = "adamw")]
    AdamW,
    Adam,
    Sgd,
    SgdMomentum,
    Adafactor,
}

impl Optimizer {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Optimizer::AdamW => "adamw",
            Optimizer::Adam => "adam",
            Optimizer::Sgd => "sgd",
            Optimizer::SgdMomentum => "sgd-momentum",
            Optimizer::Adafactor => "adafactor",
        }
    }
}

impl std::str::FromStr for Optimizer {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "adamw" => Ok(Optimizer::AdamW),
            "adam" => Ok(Optimizer::Adam),
            "sgd" => Ok(Optimizer::Sgd),
            "sgd-momentum" | "momentum" => Ok(Optimizer::SgdMomentum),
            "adafactor" => Ok(Optimizer::Adafactor),
            _ => Err(format!(
                "unknown optimizer {s:?} (use adamw, adam, sgd, sgd-momentum or adafactor)"
            )),
        }
    }
}

/// What to estimate. `Default` is: no model (give `params` or `config`),
/// fp32, no mixed precision, AdamW, batch 1, sequence 1024, no
/// checkpointing, standard (unfused) attention, no LoRA, training, no EMA,
/// no GPU size.
#[derive(Debug, Clone, PartialEq)]
pub struct EstimateOptions {
    /// Parameter count; overrides the config's count when both are given.
    pub params: Option<u64>,
    /// The architecture; enables the structural activation model, LoRA,
    /// the KV cache and Adafactor's exact shapes.
    pub config: Option<ModelConfig>,
    /// Parameter dtype; with mixed precision the 16-bit compute dtype.
    pub dtype: Dtype,
    /// 16-bit weights, gradients and activations for compute plus fp32
    /// master weights and fp32 optimizer states.
    pub mixed_precision: bool,
    /// Optimizer (training only).
    pub optimizer: Optimizer,
    /// Batch size B.
    pub batch: u64,
    /// Sequence length L (tokens per sample).
    pub seq: u64,
    /// Full activation recomputation (every layer checkpointed).
    pub checkpointing: bool,
    /// Fused attention (FlashAttention / SDPA): the attention scores are
    /// not stored (structural model only).
    pub fused_attention: bool,
    /// LoRA rank r on q, k, v, o; only the adapters are trained.
    pub lora_rank: Option<u64>,
    /// Forward only: no gradients, no optimizer.
    pub inference: bool,
    /// An exponential moving average of the trained weights (diffusers'
    /// `--use_ema`, timm's `ModelEma`, `AveragedModel`): one more copy of
    /// them, kept on the device for the whole run.
    pub ema: bool,
    /// Inference with a key/value cache of `seq` tokens (implies `inference`).
    pub kv_cache: bool,
    /// GPU memory to check the total against.
    pub gpu_memory: Option<u64>,
    /// Search the largest batch that fits in `gpu_memory`.
    pub find_max_batch: bool,
}

impl Default for EstimateOptions {
    fn default() -> Self {
        EstimateOptions {
            params: None,
            config: None,
            dtype: Dtype::Fp32,
            mixed_precision: false,
            optimizer: Optimizer::AdamW,
            batch: 1,
            seq: 1024,
            checkpointing: false,
            fused_attention: false,
            lora_rank: None,
            inference: false,
            ema: false,
            kv_cache: false,
            gpu_memory: None,
            find_max_batch: false,
        }
    }
}

/// Options that cannot be estimated.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EstimateError {
    #[error("no model: give a parameter count or a config")]
    NoModel,
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    #[error("mixed precision needs a 16-bit compute dtype (bf16 or fp16), not fp32")]
    MixedFp32,
    #[error("mixed precision applies to training; for inference give the weights' dtype")]
    MixedInference,
    #[error("LoRA applies to training, not inference")]
    LoraInference,
    #[error("an EMA of the weights applies to training, not inference")]
    EmaInference,
    #[error("{0} needs a config (the model's shapes)")]
    NeedsConfig(&'static str),
}
