//! The result of an estimate: the bytes of each component, the total and
//! the phase that holds it, both activation figures, and the verdict
//! against a GPU's memory. Serialised as the `--json` output.

use serde::Serialize;

use crate::activations::StructuralActivations;
use crate::options::{Dtype, Optimizer};
use crate::params::ParamBreakdown;

/// Memory of each component, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct Components {
    pub parameters: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    pub optimizer_intermediates: u64,
    pub activations: u64,
    pub kv_cache: u64,
    /// The EMA's copy of the trained weights (0 without `ema`).
    pub ema: u64,
}

/// When the peak happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// End of forward / start of backward: activations held.
    ForwardBackward,
    /// Optimizer step: gradients and the update's temporaries held.
    OptimizerStep,
    /// Inference forward pass.
    Forward,
}

impl Phase {
    pub fn describe(self) -> &'static str {
        match self {
            Phase::ForwardBackward => "end of forward / start of backward (activations held)",
            Phase::OptimizerStep => "optimizer step (gradients and update temporaries held)",
            Phase::Forward => "forward pass (inference)",
        }
    }
}

/// Which activation model the total uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivationModel {
    /// From the architecture (a config was given).
    Structural,
    /// From the parameter count (no config).
    Empirical,
}

/// The estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// Parameters of the model, N.
    pub params: u64,
    /// Parameters trained, T (N without LoRA, the adapters with it, 0 for inference).
    pub trainable_params: u64,
    /// Where the parameters are, when a config was given.
    pub param_breakdown: Option<ParamBreakdown>,
    pub dtype: Dtype,
    pub mixed_precision: bool,
    /// None for inference.
    pub optimizer: Option<Optimizer>,
    pub batch: u64,
    pub seq: u64,
    pub checkpointing: bool,
    pub lora_rank: Option<u64>,
    pub inference: bool,
    pub kv_cache: bool,
    pub ema: bool,
    /// Bytes per component.
    pub components: Components,
    /// Estimated peak, bytes.
    pub total: u64,
    pub peak_phase: Phase,
    /// The activation model in `components.activations` and `total`.
    pub activation_model: ActivationModel,
    /// Structural activations (with a config).
    pub activations_structural: Option<StructuralActivations>,
    /// Empirical activations (always).
    pub activations_empirical: u64,
    pub gpu_memory: Option<u64>,
    /// `total <= gpu_memory`.
    pub fits: Option<bool>,
    /// `gpu_memory - total` (negative when it does not fit).
    pub headroom: Option<i64>,
    /// The largest batch whose total fits (0 when none does); only when
    /// asked for and a GPU size is given.
    pub max_batch: Option<u64>,
    /// What the numbers assume, one line each.
    pub assumptions: Vec<String>,
}
