//! Will it fit? The verdict on an estimate's trace for a GPU.
//!
//! An estimate (`vramscope.estimate(device="cuda")`) is the list of requests
//! CUDA would be asked for. Replayed through the model without a limit, it
//! gives the peak *reserved* memory, what runs out. That is held against
//! what PyTorch can have on the GPU: its total memory less what the process
//! holds outside the caching allocator (the CUDA context and the kernels
//! it loads; measured at 627–751 MiB on an H200 and about 737 MiB on an
//! H100 with PyTorch 2.11 and CUDA 13, tests/fixtures/gpu/README.md).
//!
//! Near the limit the verdict is not sure: the estimated peak reserved
//! equals the GPU's to the byte for the GPT of tests/fixtures/gpu (batch 16
//! to 520, fp32 and bf16 autocast), but other architectures run kernels
//! whose scratch the trace may not model, and the memory outside the
//! allocator differs from run to run. Within [`BAND`] of the usable memory
//! the answer is "too close to call", never "fits": the H100 ran batch 520
//! with 57.7 MB to spare under the default outside figure and ran out at 521.

use serde::Serialize;
use vramscope_snapshot::Snapshot;
use vramscope_text::units::bytes;

use crate::replay::{replay, ReplaySetup};
use crate::settings::Settings;
use crate::simulate::modelled;
use crate::SimulateError;

/// Share of the usable memory within which the verdict is "too close to
/// call": the estimate's error on reserved memory, rounded up.
pub const BAND: f64 = 0.01;

/// Memory held outside the caching allocator when none is given: a little
/// above the most measured (751 MiB on an H200).
pub const DEFAULT_OUTSIDE: u64 = 768 << 20;

/// What to hold the estimate against.
#[derive(Clone, Debug, Default)]
pub struct FitOptions {
    pub device: Option<u32>,
    /// The GPU's total memory, bytes (`torch.cuda.get_device_properties(0).total_memory`).
    pub total: u64,
    /// Memory held outside the caching allocator; default [`DEFAULT_OUTSIDE`].
    pub outside: Option<u64>,
    /// Where `outside` comes from, for the sentence (e.g. "as this program
    /// held it when run.pickle was recorded (NVML)"); none: given.
    pub outside_how: Option<String>,
    /// Allocator settings, `PYTORCH_CUDA_ALLOC_CONF` syntax (empty: PyTorch's defaults).
    pub settings: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Fits,
    TooClose,
    DoesNotFit,
}

/// The verdict, its figures and the sentence that says it.
#[derive(Clone, Debug, Serialize)]
pub struct Fit {
    pub verdict: Verdict,
    pub peak_reserved: u64,
    pub peak_allocated: u64,
    pub total: u64,
    pub outside: u64,
    /// `total − outside`: what the caching allocator can reserve.
    pub usable: u64,
    /// `usable − peak_reserved` (negative: short by that much).
    pub margin: i64,
    /// Share of `usable` within which the verdict is "too close to call" ([`BAND`]).
    pub band: f64,
    pub settings: String,
    pub sentence: String,
}

/// Replay the estimate of `snap` without a limit under `opts.settings` and
/// hold its peak reserved against the GPU.
pub fn fit(snap: &Snapshot, opts: &FitOptions) -> Result<Fit, SimulateError> {
    modelled(snap)?;
    let device = snap.pick_device(opts.device)?;
    let mut settings = Settings::default();
    let label = opts.settings.clone().unwrap_or_default();
    if !label.is_empty() {
        settings.apply(&label)?;
    }
    let r = replay(snap, device, settings, &ReplaySetup::default());
    let outside = opts.outside.unwrap_or(DEFAULT_OUTSIDE);
    let usable = opts.total.saturating_sub(outside);
    let margin = usable as i64 - r.simulated_peak_reserved as i64;
    let band = (usable as f64 * BAND) as i64;
    let verdict = if margin > band {
        Verdict::Fits
    } else if margin < -band {
        Verdict::DoesNotFit
    } else {
        Verdict::TooClose
    };
    let under = if label.is_empty() {
        String::new()
    } else {
        format!(" under {label}")
    };
    let of = format!(
        "peak reserved {}{under} against {} usable ({} total less {} outside PyTorch's allocator{})",
        bytes(r.simulated_peak_reserved),
        bytes(usable),
        bytes(opts.total),
        bytes(outside),
        match (&opts.outside, &opts.outside_how) {
            (Some(_), Some(how)) => format!(", {how}"),
            (Some(_), None) => String::new(),
            (None, _) => ", the CUDA context as measured".to_string(),
        }
    );
    let sentence = match verdict {
        Verdict::Fits => format!("fits: {of}, {} to spare", bytes(margin as u64)),
        Verdict::DoesNotFit => {
            format!("does not fit: {of}, {} short", bytes(margin.unsigned_abs()))
        }
        Verdict::TooClose => format!(
            "too close to call: {of}, {} {}, within the estimate's {:.0}% error; \
             run a step on the GPU, or leave more room",
            bytes(margin.unsigned_abs()),
            if margin >= 0 { "to spare" } else { "short" },
            BAND * 100.0
        ),
    };
    Ok(Fit {
        verdict,
        peak_reserved: r.simulated_peak_reserved,
        peak_allocated: r.simulated_peak_allocated,
        total: opts.total,
        outside,
        usable,
        margin,
        band: BAND,
        settings: label,
        sentence,
    })
}
