//! The formula: memory components of a training (or inference) run from
//! the parameter count, the precision, the optimizer and the batch shape.
//!
//! Components, for `N` parameters of which `T` are trained (`T = N`
//! without LoRA), `P` bytes per value of `dtype`:
//!
//! | component | full precision (`dtype` everywhere) | mixed precision |
//! |---|---|---|
//! | parameters | `N·P` | 16-bit copy `N·2` + fp32 master `T·4` |
//! | gradients | `T·P` | `T·2` (16-bit) |
//! | optimizer state | states × `T·P` (in the parameter dtype) | states × `T·4` (fp32) |
//! | optimizer intermediates | `T·P` (the update) | `T·4` |
//! | activations | `A = P` bytes per value | `A = 2` |
//! | EMA weights (`ema`) | `T·P` | `T·4` (of the fp32 master weights) |
//!
//! States per trained parameter: AdamW and Adam 2 (first and second
//! moment), SGD 0 (and no intermediates: the update is in place), SGD with
//! momentum 1, Adafactor factored: rows + cols per matrix, the full size
//! per vector, computed from the config's shapes; without a config
//! `T/512` (the 2/h of an h × h matrix at h = 1024).
//!
//! LoRA at rank r: the base weights are frozen (`N·P`, or `N·2` with mixed
//! precision, no gradients, no states); the adapters on q, k, v, o of every
//! layer (`T` = Σ r·(in + out)) are trained as above. Activations are those
//! of full training (an upper bound: frozen layers still pass gradients
//! through).
//!
//! Training total = parameters + EMA weights + optimizer state + max(gradients +
//! optimizer intermediates, activations): activations are freed during
//! backward while gradients appear, so the peak is either at the end of
//! the forward / start of the backward (activations held) or in the
//! optimizer step (gradients and the update's temporaries held).
//!
//! Inference total = parameters + KV cache + activations (one layer's
//! working set); no gradients, no optimizer.
//!
//! Not included: the CUDA context, cuBLAS/cuDNN workspaces, the caching
//! allocator's rounding and fragmentation, and communication buffers.

use crate::activations::{self, Regime, StructuralActivations};
use crate::options::{Dtype, EstimateError, EstimateOptions, Optimizer};
use crate::params;
use crate::result::{ActivationModel, Components, Estimate, Phase};
use crate::text::{bytes, group};

/// The batch-independent part of an estimate.
struct Plan<'a> {
    opts: &'a EstimateOptions,
    n: u64,
    parameters: u64,
    gradients: u64,
    optimizer_state: u64,
    optimizer_intermediates: u64,
    ema: u64,
    act_bytes: u64,
}

impl Plan<'_> {
    /// Components, total, phase and both activation figures at `batch`.
    fn at(&self, batch: u64) -> (Components, u64, Phase, Option<StructuralActivations>, u64) {
        let o = self.opts;
        let regime = if o.inference {
            Regime::Inference
        } else if o.checkpointing {
            Regime::Checkpointed
        } else {
            Regime::Training
        };
        let structural = o.config.as_ref().map(|c| {
            activations::structural(
                c,
                batch,
                o.seq,
                self.act_bytes,
                regime,
                o.fused_attention,
                o.mixed_precision,
            )
        });
        let empirical = activations::empirical_bytes(self.n, batch, o.seq, self.act_bytes);
        let kv_cache = match (&o.config, o.kv_cache) {
            (Some(c), true) => activations::kv_cache_bytes(c, batch, o.seq, self.act_bytes),
            _ => 0,
        };
        let c = Components {
            parameters: self.parameters,
            gradients: self.gradients,
            optimizer_state: self.optimizer_state,
            optimizer_intermediates: self.optimizer_intermediates,
            activations: structural.map_or(empirical, |s| s.total),
            kv_cache,
            ema: self.ema,
        };
        let (total, phase) = if o.inference {
            (c.parameters + c.kv_cache + c.activations, Phase::Forward)
        } else {
            let step = c.gradients + c.optimizer_intermediates;
            let phase = if c.activations >= step {
                Phase::ForwardBackward
            } else {
                Phase::OptimizerStep
            };
            (
                c.parameters + c.ema + c.optimizer_state + step.max(c.activations),
                phase,
            )
        };
        (c, total, phase, structural, empirical)
    }

    /// The largest batch whose total is at most `gpu` (0 when none).
    fn max_batch(&self, gpu: u64) -> u64 {
        let fits = |b: u64| self.at(b).1 <= gpu;
        if !fits(1) {
            return 0;
        }
        let mut lo = 1u64; // fits
        let mut hi = 2u64;
        while fits(hi) {
            lo = hi;
            if hi >= 1 << 40 {
                return hi;
            }
            hi *= 2;
        }
        // lo fits, hi does not.
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// Estimate the memory of the run `o` describes.
pub fn estimate(o: &EstimateOptions) -> Result<Estimate, EstimateError> {
    let mut o = o.clone();
    o.inference |= o.kv_cache;
    if o.batch == 0 {
        return Err(EstimateError::Zero("batch"));
    }
    if o.seq == 0 {
        return Err(EstimateError::Zero("sequence length"));
    }
    if o.lora_rank == Some(0) {
        return Err(EstimateError::Zero("LoRA rank"));
    }
    if o.mixed_precision && o.dtype == Dtype::Fp32 {
        return Err(EstimateError::MixedFp32);
    }
    if o.mixed_precision && o.inference {
        return Err(EstimateError::MixedInference);
    }
    if o.lora_rank.is_some() && o.inference {
        return Err(EstimateError::LoraInference);
    }
    if o.ema && o.inference {
        return Err(EstimateError::EmaInference);
    }
    let breakdown = o.config.as_ref().map(params::count_params);
    let n = o
        .params
        .or(breakdown.map(|b| b.total))
        .ok_or(EstimateError::NoModel)?;
    let cfg = o.config.as_ref();
    if o.kv_cache && cfg.is_none() {
        return Err(EstimateError::NeedsConfig("the KV cache"));
    }
    let p = o.dtype.bytes();
    let mut notes = Vec::new();

    match (o.params, &breakdown) {
        (Some(_), Some(b)) => notes.push(format!(
            "parameters: {} as given (the config counts {}); the config gives the shapes",
            group(n),
            group(b.total)
        )),
        (None, Some(_)) => notes.push(format!("parameters: {} counted from the config", group(n))),
        _ => notes.push(format!("parameters: {} as given", group(n))),
    }

    let (t, weights) = if o.inference {
        notes.push(format!(
            "inference: weights in {}, no gradients, no optimizer",
            o.dtype.name()
        ));
        (0, n * p)
    } else if let Some(r) = o.lora_rank {
        let c = cfg.ok_or(EstimateError::NeedsConfig("LoRA"))?;
        let t = params::lora_params(c, r);
        notes.push(format!(
            "LoRA rank {r} on q, k, v, o of {} layers: {} trained parameters, base weights frozen",
            c.num_layers,
            group(t)
        ));
        let w = if o.mixed_precision {
            n * 2 + t * 6
        } else {
            (n + t) * p
        };
        (t, w)
    } else {
        (n, if o.mixed_precision { n * 6 } else { n * p })
    };

    // Bytes per gradient, per optimizer value, per activation value.
    let (g, s, act_bytes) = if o.mixed_precision {
        (2, 4, 2)
    } else {
        (p, p, p)
    };
    if o.mixed_precision {
        notes.push(format!(
            "mixed precision: {} weights, gradients and activations; fp32 master weights, optimizer states and update",
            o.dtype.name()
        ));
    } else if !o.inference {
        notes.push(format!(
            "{} throughout: weights, gradients, optimizer states and activations",
            o.dtype.name()
        ));
    }

    let (state_values, intermediates) = if o.inference {
        (0, 0)
    } else {
        let values = match o.optimizer {
            Optimizer::AdamW | Optimizer::Adam => 2 * t,
            Optimizer::Sgd => 0,
            Optimizer::SgdMomentum => t,
            Optimizer::Adafactor => match cfg {
                Some(c) => {
                    let shapes = match o.lora_rank {
                        Some(r) => params::lora_shapes(c, r),
                        None => params::shapes(c),
                    };
                    let shape_total: u64 = shapes.iter().map(|s| s.params()).sum();
                    let v = params::adafactor_values(&shapes);
                    // Scale when the count was given and differs from the config's.
                    ((v as f64) * t as f64 / shape_total.max(1) as f64).round() as u64
                }
                None => t.div_ceil(512),
            },
        };
        notes.push(match o.optimizer {
            Optimizer::AdamW | Optimizer::Adam => format!(
                "{}: 2 states (moments) per trained parameter",
                if o.optimizer == Optimizer::AdamW {
                    "AdamW"
                } else {
                    "Adam"
                }
            ),
            Optimizer::Sgd => "SGD: no state, update in place".to_string(),
            Optimizer::SgdMomentum => {
                "SGD with momentum: 1 state per trained parameter".to_string()
            }
            Optimizer::Adafactor if cfg.is_some() => format!(
                "Adafactor: factored second moment, rows + cols per matrix ({} values)",
                group(values)
            ),
            Optimizer::Adafactor => {
                "Adafactor: factored states approximated as T/512 values (no config)".to_string()
            }
        });
        let inter = if o.optimizer == Optimizer::Sgd {
            0
        } else {
            t * s
        };
        (values * s, inter)
    };

    // The EMA averages what is trained, in the weights' dtype (of the
    // fp32 master weights with mixed precision): diffusers' EMAModel clones
    // each parameter, timm's ModelEma and AveragedModel deep-copy the model.
    let ema = if o.ema { t * s } else { 0 };
    if o.ema {
        notes.push(format!(
            "EMA: one more copy of the {} trained parameters in {}, on the device throughout",
            group(t),
            if o.mixed_precision {
                "fp32"
            } else {
                o.dtype.name()
            }
        ));
    }

    let plan = Plan {
        opts: &o,
        n,
        parameters: weights,
        gradients: t * g,
        optimizer_state: state_values,
        optimizer_intermediates: intermediates,
        ema,
        act_bytes,
    };
    let (components, total, phase, structural, empirical) = plan.at(o.batch);
    let model = if structural.is_some() {
        ActivationModel::Structural
    } else {
        ActivationModel::Empirical
    };

    let layer = if o.fused_attention {
        "s·b·h·34·A/2 (fused attention: no scores stored)"
    } else {
        "s·b·h·(34 + 5·a·s/h)·A/2 (standard attention)"
    };
    notes.push(match (model, o.inference, o.checkpointing) {
        (ActivationModel::Structural, true, _) => {
            format!("activations: one layer's working set {layer} + hidden state + logits")
        }
        (ActivationModel::Structural, false, false) => format!(
            "activations: {layer} per layer (Korthikanti et al. 2022, A = {act_bytes} bytes) + embeddings + logits and their fp32 copy for the loss"
        ),
        (ActivationModel::Structural, false, true) => format!(
            "activations: full recomputation, each layer's input s·b·h·A + one layer rebuilt, {layer} + embeddings + logits and their fp32 copy for the loss"
        ),
        (ActivationModel::Empirical, _, _) => format!(
            "activations: empirical fit (4.6894e-4·N + 1.8494e6 values per token, A = {act_bytes} bytes){}",
            if o.checkpointing || o.inference || o.fused_attention {
                "; it knows nothing of checkpointing, fused attention or inference: give a config"
            } else {
                ""
            }
        ),
    });
    if let Some(c) = cfg.filter(|_| o.kv_cache) {
        notes.push(format!(
            "KV cache: 2·{} layers·B·L·{} kv heads·{} head dim·A",
            c.num_layers, c.num_kv_heads, c.head_dim
        ));
    }
    if !o.inference {
        notes.push(
            "total = parameters + EMA weights + optimizer state + max(gradients + optimizer intermediates, activations)".to_string(),
        );
    }
    notes.push(
        "not included: CUDA context, library workspaces, allocator caching and fragmentation"
            .to_string(),
    );

    let fits = o.gpu_memory.map(|gpu| total <= gpu);
    let headroom = o.gpu_memory.map(|gpu| gpu as i64 - total as i64);
    let max_batch = match o.gpu_memory {
        Some(gpu) if o.find_max_batch => Some(plan.max_batch(gpu)),
        _ => None,
    };
    if let Some(gpu) = o.gpu_memory {
        notes.push(format!("GPU memory: {} ({} bytes)", bytes(gpu), group(gpu)));
    }

    Ok(Estimate {
        params: n,
        trainable_params: t,
        param_breakdown: breakdown,
        dtype: o.dtype,
        mixed_precision: o.mixed_precision,
        optimizer: (!o.inference).then_some(o.optimizer),
        batch: o.batch,
        seq: o.seq,
        checkpointing: o.checkpointing,
        lora_rank: o.lora_rank,
        inference: o.inference,
        kv_cache: o.kv_cache,
        ema: o.ema,
        components,
        total,
        peak_phase: phase,
        activation_model: model,
        activations_structural: structural,
        activations_empirical: empirical,
        gpu_memory: o.gpu_memory,
        fits,
        headroom,
        max_batch,
        assumptions: notes,
    })
}

/// The total at another batch size, the rest of `o` unchanged.
pub fn total_at_batch(o: &EstimateOptions, batch: u64) -> Result<u64, EstimateError> {
    let mut o = o.clone();
    o.batch = batch;
    o.find_max_batch = false;
    Ok(estimate(&o)?.total)
}
