//! The estimate as a terminal table, and the number formatting it uses.

use std::fmt::Write;

use crate::result::{ActivationModel, Estimate, Phase};

/// `1543714304` → `1,543,714,304`.
pub use vramscope_text::units::{bytes, count as group};

/// `1.54e9` parameters → `1.54B`.
fn short_count(n: u64) -> String {
    let f = n as f64;
    if f >= 1e9 {
        format!("{:.2}B", f / 1e9)
    } else if f >= 1e6 {
        format!("{:.1}M", f / 1e6)
    } else if f >= 1e3 {
        format!("{:.1}K", f / 1e3)
    } else {
        n.to_string()
    }
}

/// A GPU size as given: `80 GB (74.51 GiB)` for a decimal size, `24.00 GiB` otherwise.
fn gpu_size(n: u64) -> String {
    if n >= 1_000_000_000 && n.is_multiple_of(1_000_000_000) && !n.is_multiple_of(1 << 30) {
        format!("{} GB ({})", n / 1_000_000_000, bytes(n))
    } else {
        bytes(n)
    }
}

fn share(part: u64, total: u64) -> String {
    if total == 0 {
        return "-".to_string();
    }
    format!("{:.1}%", 100.0 * part as f64 / total as f64)
}

/// The estimate as text: a header, the components with their share of the
/// total, the peak phase, both activation models, the GPU verdict and the
/// assumptions.
pub fn render(e: &Estimate) -> String {
    let mut o = String::new();
    let precision = if e.mixed_precision {
        format!("{} mixed precision", e.dtype.name())
    } else {
        e.dtype.name().to_string()
    };
    let mode = match e.optimizer {
        Some(opt) => format!("training, {}", opt.name()),
        None if e.kv_cache => "inference with KV cache".to_string(),
        None => "inference".to_string(),
    };
    let _ = writeln!(
        o,
        "Memory estimate · {} parameters ({}) · {precision} · {mode} · batch {} × seq {}",
        short_count(e.params),
        group(e.params),
        e.batch,
        e.seq
    );
    if e.trainable_params != e.params && !e.inference {
        let _ = writeln!(o, "  trained parameters: {}", group(e.trainable_params));
    }
    o.push('\n');

    let c = &e.components;
    let step_in_peak = e.peak_phase == Phase::OptimizerStep;
    let act_in_peak = e.peak_phase != Phase::OptimizerStep;
    let act_label = match e.activation_model {
        ActivationModel::Structural => "activations (structural)",
        ActivationModel::Empirical => "activations (empirical)",
    };
    let mut rows: Vec<(&str, u64, bool)> = vec![("parameters", c.parameters, true)];
    if !e.inference {
        rows.push(("gradients", c.gradients, step_in_peak));
        rows.push(("optimizer state", c.optimizer_state, true));
        rows.push((
            "optimizer intermediates",
            c.optimizer_intermediates,
            step_in_peak,
        ));
    }
    rows.push((act_label, c.activations, act_in_peak));
    if e.kv_cache {
        rows.push(("KV cache", c.kv_cache, true));
    }
    if e.ema {
        rows.push(("EMA weights", c.ema, true));
    }
    let _ = writeln!(
        o,
        "  {:<26} {:>12} {:>19} {:>7}",
        "component", "size", "bytes", "share"
    );
    for (name, b, in_peak) in &rows {
        let sh = if *in_peak {
            share(*b, e.total)
        } else {
            "-".to_string()
        };
        let _ = writeln!(
            o,
            "  {name:<26} {:>12} {:>19} {sh:>7}{}",
            bytes(*b),
            group(*b),
            if *in_peak { "" } else { "  (not at the peak)" }
        );
    }
    let _ = writeln!(
        o,
        "  {:<26} {:>12} {:>19} {:>7}",
        "total (peak)",
        bytes(e.total),
        group(e.total),
        "100%"
    );
    o.push('\n');
    let _ = writeln!(o, "  peak: {}", e.peak_phase.describe());
    let _ = write!(
        o,
        "  activations: empirical {}",
        bytes(e.activations_empirical)
    );
    if let Some(s) = &e.activations_structural {
        let _ = write!(
            o,
            " · structural {} (layers {}, embeddings {}, logits {})",
            bytes(s.total),
            bytes(s.layers),
            bytes(s.embedding_output),
            bytes(s.logits)
        );
    }
    o.push('\n');
    if let (Some(gpu), Some(fits), Some(head)) = (e.gpu_memory, e.fits, e.headroom) {
        let gpu_name = gpu_size(gpu);
        if fits {
            let _ = writeln!(
                o,
                "  GPU {gpu_name}: fits, {} headroom ({} of the GPU used)",
                bytes(head as u64),
                share(e.total, gpu)
            );
        } else {
            let _ = writeln!(
                o,
                "  GPU {gpu_name}: DOES NOT FIT, {} short ({} of the GPU)",
                bytes(head.unsigned_abs()),
                share(e.total, gpu)
            );
        }
    }
    if let Some(mb) = e.max_batch {
        if mb == 0 {
            let _ = writeln!(o, "  max batch: none fits (batch 1 does not)");
        } else {
            let _ = writeln!(o, "  max batch: {mb} (at seq {})", e.seq);
        }
    }
    o.push_str("\nAssumptions:\n");
    for a in &e.assumptions {
        let _ = writeln!(o, "  - {a}");
    }
    o
}
