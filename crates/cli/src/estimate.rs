//! `vramscope estimate (--params 1.5e9 | --config config.json) [--dtype bf16]
//! [--mixed-precision] [--optimizer adamw] [--batch 8] [--seq 2048]
//! [--checkpointing] [--flash-attention] [--lora-rank 16] [--inference] [--kv-cache]
//! [--gpu-memory 80GB] [--max-batch] [--json]`: how much memory a training
//! (or inference) run will need, before running it.

use std::path::PathBuf;

use anyhow::anyhow;
use vramscope_estimate::{
    estimate, parse_param_count, ConfigError, Dtype, EstimateOptions, ModelConfig, Optimizer,
};
use vramscope_text::units::parse_bytes;

use crate::{output, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// Parameter count: 1.5e9, 1.5B, 350M, 124439808 (overrides the config's count).
    #[arg(long, value_parser = parse_param_count, required_unless_present = "config")]
    pub params: Option<u64>,
    /// A Hugging Face style config.json: exact parameter count, activations
    /// from the architecture, KV cache and LoRA shapes.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Parameter dtype: fp32, bf16, fp16 (default fp32; bf16 with --mixed-precision).
    #[arg(long)]
    pub dtype: Option<Dtype>,
    /// 16-bit weights, gradients and activations plus fp32 master weights and optimizer states.
    #[arg(long)]
    pub mixed_precision: bool,
    /// Optimizer: adamw, adam, sgd, sgd-momentum, adafactor.
    #[arg(long, default_value = "adamw")]
    pub optimizer: Optimizer,
    /// Batch size.
    #[arg(long, default_value_t = 1)]
    pub batch: u64,
    /// Sequence length in tokens.
    #[arg(long, default_value_t = 1024)]
    pub seq: u64,
    /// Full activation recomputation (every layer checkpointed).
    #[arg(long)]
    pub checkpointing: bool,
    /// Fused attention (FlashAttention, SDPA): attention scores are not stored.
    #[arg(long)]
    pub flash_attention: bool,
    /// LoRA rank on q, k, v, o (only the adapters are trained; needs --config).
    #[arg(long)]
    pub lora_rank: Option<u64>,
    /// Forward only: no gradients, no optimizer.
    #[arg(long)]
    pub inference: bool,
    /// Inference with a key/value cache of --seq tokens (implies --inference; needs --config).
    #[arg(long)]
    pub kv_cache: bool,
    /// An exponential moving average of the trained weights (diffusers' --use_ema, timm's ModelEma): one more copy
    #[arg(long)]
    pub ema: bool,
    /// GPU memory to check against (e.g. 24GiB, 80GB).
    #[arg(long, value_parser = parse_bytes)]
    pub gpu_memory: Option<u64>,
    /// Find the largest batch that fits in --gpu-memory.
    #[arg(long)]
    pub max_batch: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<(), CliError> {
    if a.max_batch && a.gpu_memory.is_none() {
        return Err(CliError::Invalid(anyhow!(
            "--max-batch needs --gpu-memory (the memory the batch must fit in)"
        )));
    }
    let config = match &a.config {
        None => None,
        Some(path) => Some(ModelConfig::from_path(path).map_err(|e| match e {
            ConfigError::Io { .. } => CliError::Io(e.into()),
            other => {
                CliError::Invalid(anyhow::Error::new(other).context(path.display().to_string()))
            }
        })?),
    };
    let dtype = a.dtype.unwrap_or(if a.mixed_precision {
        Dtype::Bf16
    } else {
        Dtype::Fp32
    });
    let opts = EstimateOptions {
        params: a.params,
        config,
        dtype,
        mixed_precision: a.mixed_precision,
        optimizer: a.optimizer,
        batch: a.batch,
        seq: a.seq,
        checkpointing: a.checkpointing,
        fused_attention: a.flash_attention,
        lora_rank: a.lora_rank,
        inference: a.inference,
        kv_cache: a.kv_cache,
        ema: a.ema,
        gpu_memory: a.gpu_memory,
        find_max_batch: a.max_batch,
    };
    let e = estimate(&opts).map_err(|e| CliError::Invalid(e.into()))?;
    let text = if a.json {
        let mut j = serde_json::to_string_pretty(&e).map_err(|e| CliError::Invalid(e.into()))?;
        j.push('\n');
        j
    } else {
        vramscope_estimate::render(&e)
    };
    output::print(&text)
}

#[cfg(test)]
mod tests {
    fn code(args: &[&str]) -> u8 {
        crate::run(std::iter::once("vramscope").chain(args.iter().copied()))
    }

    #[test]
    fn exit_codes() {
        let qwen = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../estimate/tests/data/qwen2.5-1.5b.json"
        );
        assert_eq!(code(&["estimate", "--params", "1.5B", "--json"]), 0);
        assert_eq!(
            code(&[
                "estimate",
                "--config",
                qwen,
                "--mixed-precision",
                "--batch",
                "8",
                "--seq",
                "2048",
                "--gpu-memory",
                "80GB",
                "--max-batch",
                "--json",
            ]),
            0
        );
        // Usage: no model, --max-batch without a GPU, a bad count, fp32 mixed precision.
        assert_eq!(code(&["estimate"]), 2);
        assert_eq!(code(&["estimate", "--params", "1B", "--max-batch"]), 2);
        assert_eq!(code(&["estimate", "--params", "lots"]), 2);
        assert_eq!(
            code(&[
                "estimate",
                "--params",
                "1B",
                "--dtype",
                "fp32",
                "--mixed-precision"
            ]),
            2
        );
        // Unreadable config: exit 1.
        assert_eq!(
            code(&["estimate", "--config", "/nonexistent/config.json"]),
            1
        );
    }
}
