//! Reading a Hugging Face style `config.json` into the architecture the
//! estimates need.
//!
//! The reader is tolerant: it accepts the key spellings of the common
//! families (`hidden_size` / `n_embd` / `d_model`, `num_hidden_layers` /
//! `n_layer`, ...), fills the optional keys with the defaults Transformers
//! itself uses, and looks inside `text_config` when the top level is a
//! multimodal wrapper. Only what changes the parameter count or the memory
//! is read; everything else is ignored.
//!
//! Family rules (each overridden by an explicit key when the config has one):
//!
//! * gated MLP (3 matrices: gate, up, down) for the llama family
//!   (`llama`, `mistral`, `mixtral`, `qwen2`, `qwen3`, `gemma*`, `phi3`,
//!   `olmo*`, ...) or an activation `silu` / `swiglu` / `swish`; otherwise a
//!   standard MLP (2 matrices, up and down);
//! * gpt2-style families (`gpt2`, `gpt_neo`, `gpt_bigcode`, `bert`,
//!   `roberta`, `opt`, ...) have biases on every linear layer, LayerNorm and
//!   learned position embeddings (`max_position_embeddings` × hidden);
//! * `qwen2` has q/k/v biases (not on o); `attention_bias` sets q/k/v/o
//!   biases and `mlp_bias` the MLP biases explicitly;
//! * RMSNorm (1 vector) when `rms_norm_eps` is present or the family uses
//!   it, LayerNorm (2 vectors: weight and bias) otherwise;
//! * `tie_word_embeddings` defaults to true, as in Transformers.

use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

/// A `config.json` that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("config is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("config must be a JSON object")]
    NotObject,
    #[error("config has no {0}")]
    Missing(&'static str),
    #[error("config key {key:?} must be a positive integer, found {value}")]
    NotCount { key: String, value: String },
    #[error("config key {key:?} must be true or false, found {value}")]
    NotBool { key: String, value: String },
    #[error("config is inconsistent: {0}")]
    Inconsistent(String),
}

/// The MLP of each transformer layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MlpKind {
    /// gate, up and down projections (SwiGLU / GeGLU): 3·h·ff weights.
    Gated,
    /// up and down projections: 2·h·ff weights.
    Standard,
}

/// The normalisation layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    /// RMSNorm: one vector of `hidden` weights.
    Rms,
    /// LayerNorm: weight and bias, two vectors of `hidden`.
    Layer,
}

impl NormKind {
    /// Vectors of `hidden` parameters per norm.
    pub fn vectors(self) -> u64 {
        match self {
            NormKind::Rms => 1,
            NormKind::Layer => 2,
        }
    }
}

/// The architecture of a decoder (or encoder) transformer, as far as memory
/// is concerned.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelConfig {
    /// `model_type`, when the config names one.
    pub model_type: Option<String>,
    /// h: the width of the residual stream.
    pub hidden_size: u64,
    /// Transformer layers.
    pub num_layers: u64,
    /// Attention (query) heads.
    pub num_heads: u64,
    /// Key/value heads (grouped-query attention); equals `num_heads` without GQA.
    pub num_kv_heads: u64,
    /// Width of one head (`head_dim`, default `hidden_size / num_heads`).
    pub head_dim: u64,
    /// ff: the MLP's inner width.
    pub intermediate_size: u64,
    /// Vocabulary size.
    pub vocab_size: u64,
    /// Context length the model was configured for, when given.
    pub max_positions: Option<u64>,
    /// The output projection shares the input embedding's weights.
    pub tie_word_embeddings: bool,
    /// Gated (3 matrices) or standard (2 matrices) MLP.
    pub mlp: MlpKind,
    /// RMSNorm or LayerNorm.
    pub norm: NormKind,
    /// Biases on the q, k and v projections.
    pub qkv_bias: bool,
    /// Bias on the attention output projection.
    pub o_bias: bool,
    /// Biases on the MLP projections.
    pub mlp_bias: bool,
    /// Learned absolute position embeddings (`max_positions` × hidden).
    pub learned_positions: bool,
    /// The MLP's activation as the config names it (`gelu_new`, `silu`, ...).
    pub activation: Option<String>,
    /// Dropout on the residual branches (`resid_pdrop`, `hidden_dropout_prob`,
    /// `hidden_dropout`, `dropout`), and on the embeddings (`embd_pdrop`).
    pub resid_dropout: f64,
    pub embd_dropout: f64,
    /// Dropout on the attention weights (`attn_pdrop`, `attention_dropout`,
    /// `attention_probs_dropout_prob`).
    pub attn_dropout: f64,
    /// `use_cache` (default true, as in Transformers).
    pub use_cache: bool,
    /// A GPT-2-style family (fused q/k/v, LayerNorm, learned positions).
    pub gpt2_style: bool,
}

const GATED_FAMILIES: &[&str] = &[
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "phi3",
    "olmo",
    "olmo2",
    "internlm2",
    "cohere",
    "granite",
    "smollm3",
    "deepseek_v2",
    "deepseek_v3",
    "yi",
    "baichuan",
    "exaone",
    "stablelm",
];
const GPT2_FAMILIES: &[&str] = &[
    "gpt2",
    "gpt_neo",
    "gpt_bigcode",
    "bert",
    "roberta",
    "distilbert",
    "opt",
    "xlm-roberta",
    "electra",
    "biogpt",
];
const GATED_ACTIVATIONS: &[&str] = &["silu", "swiglu", "swish", "geglu"];

impl ModelConfig {
    /// Read a `config.json` file.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json_str(&text)
    }

    /// Parse the text of a `config.json`.
    pub fn from_json_str(text: &str) -> Result<Self, ConfigError> {
        let v: Value = serde_json::from_str(text)?;
        Self::from_value(&v)
    }

    /// Read the architecture from a parsed `config.json`.
    pub fn from_value(v: &Value) -> Result<Self, ConfigError> {
        let top = v.as_object().ok_or(ConfigError::NotObject)?;
        // Multimodal wrappers keep the language model in `text_config`.
        let m = match top.get("text_config").and_then(Value::as_object) {
            Some(t) if !has_any(top, &["hidden_size", "n_embd", "d_model"]) => t,
            _ => top,
        };
        let model_type = m
            .get("model_type")
            .or_else(|| top.get("model_type"))
            .and_then(Value::as_str)
            .map(|s| s.to_ascii_lowercase());
        let family = model_type.as_deref().unwrap_or("");
        let gpt2_style = GPT2_FAMILIES.contains(&family)
            || (model_type.is_none() && has_any(m, &["n_embd", "n_layer"]));

        let hidden_size = count(m, &["hidden_size", "n_embd", "d_model"])?
            .ok_or(ConfigError::Missing("hidden_size (or n_embd, d_model)"))?;
        let num_layers = count(m, &["num_hidden_layers", "n_layer", "num_layers"])?.ok_or(
            ConfigError::Missing("num_hidden_layers (or n_layer, num_layers)"),
        )?;
        let num_heads = count(m, &["num_attention_heads", "n_head", "num_heads"])?.ok_or(
            ConfigError::Missing("num_attention_heads (or n_head, num_heads)"),
        )?;
        let num_kv_heads =
            count(m, &["num_key_value_heads", "n_head_kv", "num_kv_heads"])?.unwrap_or(num_heads);
        let vocab_size =
            count(m, &["vocab_size", "n_vocab"])?.ok_or(ConfigError::Missing("vocab_size"))?;
        let head_dim = match count(m, &["head_dim"])? {
            Some(d) => d,
            None => {
                if !hidden_size.is_multiple_of(num_heads) {
                    return Err(ConfigError::Inconsistent(format!(
                        "hidden size {hidden_size} is not a multiple of {num_heads} heads (give head_dim)"
                    )));
                }
                hidden_size / num_heads
            }
        };
        if !num_heads.is_multiple_of(num_kv_heads) {
            return Err(ConfigError::Inconsistent(format!(
                "{num_heads} attention heads are not a multiple of {num_kv_heads} key/value heads"
            )));
        }
        let intermediate_size = count(m, &["intermediate_size", "n_inner", "d_ff", "ffn_dim"])?
            .unwrap_or(4 * hidden_size);
        let max_positions = count(
            m,
            &[
                "max_position_embeddings",
                "n_positions",
                "n_ctx",
                "context_length",
            ],
        )?;

        let activation = ["hidden_act", "hidden_activation", "activation_function"]
            .iter()
            .find_map(|k| m.get(*k).and_then(Value::as_str))
            .map(|s| s.to_ascii_lowercase());
        let gated = GATED_FAMILIES.contains(&family)
            || activation
                .as_deref()
                .is_some_and(|a| GATED_ACTIVATIONS.contains(&a));
        let mlp = if gated {
            MlpKind::Gated
        } else {
            MlpKind::Standard
        };

        let norm = if m.contains_key("rms_norm_eps") {
            NormKind::Rms
        } else if has_any(
            m,
            &["layer_norm_epsilon", "layer_norm_eps", "layernorm_epsilon"],
        ) {
            NormKind::Layer
        } else if gated {
            NormKind::Rms
        } else {
            NormKind::Layer
        };

        let attention_bias = boolean(m, "attention_bias")?;
        let qkv_bias = attention_bias.unwrap_or(gpt2_style || family == "qwen2");
        let o_bias = attention_bias.unwrap_or(gpt2_style);
        let mlp_bias = boolean(m, "mlp_bias")?.unwrap_or(gpt2_style);
        let tie_word_embeddings = boolean(m, "tie_word_embeddings")?
            .or(boolean(top, "tie_word_embeddings")?)
            .unwrap_or(true);
        let learned_positions = gpt2_style
            && !m.contains_key("rope_theta")
            && m.get("position_embedding_type")
                .and_then(Value::as_str)
                .is_none_or(|t| t == "absolute");
        if learned_positions && max_positions.is_none() {
            return Err(ConfigError::Missing(
                "max_position_embeddings (or n_positions), needed for learned position embeddings",
            ));
        }
        let prob = |keys: &[&str]| {
            keys.iter()
                .find_map(|k| m.get(*k).and_then(Value::as_f64))
                .unwrap_or(0.0)
        };
        let resid_dropout = prob(&[
            "resid_pdrop",
            "hidden_dropout_prob",
            "hidden_dropout",
            "dropout",
        ]);
        let embd_dropout = prob(&["embd_pdrop", "embed_dropout"]);
        let attn_dropout = prob(&[
            "attn_pdrop",
            "attention_dropout",
            "attention_probs_dropout_prob",
        ]);
        let use_cache = boolean(m, "use_cache")?.unwrap_or(true);
        Ok(ModelConfig {
            activation: activation.clone(),
            resid_dropout,
            embd_dropout,
            attn_dropout,
            use_cache,
            gpt2_style,
            model_type,
            hidden_size,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            intermediate_size,
            vocab_size,
            max_positions,
            tie_word_embeddings,
            mlp,
            norm,
            qkv_bias,
            o_bias,
            mlp_bias,
            learned_positions,
        })
    }

    /// Width of the key (or value) projection output: kv_heads · head_dim.
    pub fn kv_dim(&self) -> u64 {
        self.num_kv_heads * self.head_dim
    }

    /// Width of the query projection output: heads · head_dim.
    pub fn q_dim(&self) -> u64 {
        self.num_heads * self.head_dim
    }
}

fn has_any(m: &Map<String, Value>, keys: &[&str]) -> bool {
    keys.iter().any(|k| m.get(*k).is_some_and(|v| !v.is_null()))
}

/// The first of `keys` present and not null, as a positive integer.
fn count(m: &Map<String, Value>, keys: &[&str]) -> Result<Option<u64>, ConfigError> {
    for k in keys {
        let Some(v) = m.get(*k) else { continue };
        if v.is_null() {
            continue;
        }
        let n = v.as_u64().or_else(|| {
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                .map(|f| f as u64)
        });
        return match n {
            Some(n) if n > 0 => Ok(Some(n)),
            _ => Err(ConfigError::NotCount {
                key: (*k).to_string(),
                value: v.to_string(),
            }),
        };
    }
    Ok(None)
}

fn boolean(m: &Map<String, Value>, key: &str) -> Result<Option<bool>, ConfigError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(ConfigError::NotBool {
            key: key.to_string(),
            value: v.to_string(),
        }),
    }
}
