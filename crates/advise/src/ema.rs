//! The EMA's copy of the weights kept off the device: its row.
//!
//! An exponential moving average of the weights (category `ema`, named by
//! the EMA class's code in its stack: `categories/ema.rs`) is a whole copy
//! of the trained weights on the GPU for the whole run, used only after
//! each optimizer step and to evaluate. timm's `ModelEmaV3(device="cpu")`,
//! `AveragedModel(device="cpu")` and ema_pytorch's
//! `EMA(allow_different_devices=True)` keep it and update it on the CPU:
//! the replay drops the copy and its update's temporaries (each model
//! weight is copied to the CPU for the update, which the GPU does not
//! hold). diffusers' `EMAModel` and torch_ema update on the copy's device
//! with the model's weights, so their scripts move it back for the update
//! (`--offload_ema`: `ema.to("cuda")`, `step`, `ema.to("cpu")`): the copy is
//! then on the GPU during its update, which the replay does not make, and
//! the row is a bound (the least the peak can be).
//!
//! Offered only for a GPU's memory: on the CPU there is no other memory to
//! move it to (`counted.rs`).

use vramscope_analysis::categories::{ema_library, Category, Labelled, Rule};
use vramscope_simulate::edits::{for_blocks, ChangeKind};
use vramscope_simulate::settings::Settings;
use vramscope_snapshot::Snapshot;
use vramscope_text::units::bytes;

use super::{Candidate, ChangeClass, Method};

/// The row, where an EMA's copy of the weights is on the device.
pub(super) fn ema_offload_candidate(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    recorded: &Settings,
) -> Option<Candidate> {
    let (l, c) = (&labelled.lifetimes, &labelled.categories);
    let copy: Vec<usize> = (0..l.len())
        .filter(|&b| c.category[b] == Category::Ema)
        .collect();
    if copy.is_empty() {
        return None;
    }
    let update: Vec<usize> = (0..l.len())
        .filter(|&b| c.category[b] == Category::Temporary && c.rule[b] == Rule::EmaUpdate)
        .collect();
    let copy_bytes: u64 = copy.iter().map(|&b| l.size[b]).sum();
    let update_bytes: u64 = update.iter().map(|&b| l.size[b]).sum();
    // The library whose class made the copy (the first block's that says).
    let library = copy.iter().find_map(|&b| ema_library(snap, l.stack[b]));
    let gone: Vec<(usize, ChangeKind)> = copy
        .iter()
        .chain(&update)
        .map(|&b| (b, ChangeKind::Drop))
        .collect();
    // Who keeps the copy, the code that keeps it on the CPU, and whether
    // its update brings it back to the GPU.
    const BACK_FOR_UPDATE: &str = "ema.to(\"cpu\")\nema.pin_memory()  # (diffusers' EMAModel) fast copies back and forth\n\
         # each step, after optimizer.step():\n\
         ema.to(\"cuda\", non_blocking=True)\nema.step(model.parameters())\nema.to(\"cpu\", non_blocking=True)";
    let (who, code, moved_back) = match library {
        Some("timm") => (
            "timm's ModelEmaV3",
            "from timm.utils import ModelEmaV3\n\
             model_ema = ModelEmaV3(model, decay=decay, device=\"cpu\")  # the copy and its update on the CPU",
            false,
        ),
        Some("torch") => (
            "AveragedModel",
            "from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn\n\
             ema_model = AveragedModel(model, device=\"cpu\", multi_avg_fn=get_ema_multi_avg_fn(decay))  \
             # the copy and its update on the CPU",
            false,
        ),
        Some("ema_pytorch") => (
            "ema_pytorch's EMA",
            "from ema_pytorch import EMA\n\
             ema = EMA(model, beta=decay, allow_different_devices=True)\n\
             ema.to(\"cpu\")  # the copy on the CPU; each update copies the weights there",
            false,
        ),
        // diffusers' EMAModel and torch_ema: the update needs the copy
        // beside the model's weights (diffusers' scripts' --offload_ema).
        Some("diffusers") => ("diffusers' EMAModel", BACK_FOR_UPDATE, true),
        Some("torch_ema") => ("torch_ema's ExponentialMovingAverage", BACK_FOR_UPDATE, true),
        _ => ("the EMA", BACK_FOR_UPDATE, true),
    };
    let how = if moved_back {
        format!(
            "replayed without the EMA's copy of the weights ({}) and its update's temporaries ({}): the least the \
             peak can be, since {who} updates the copy beside the model's weights, so it comes back to the GPU for \
             each update (with the update's temporaries), which the replay does not make; where the run peaks \
             outside the update, that is the peak",
            bytes(copy_bytes),
            bytes(update_bytes)
        )
    } else {
        format!(
            "replayed without the EMA's copy of the weights ({}) and its update's temporaries ({}): {who} keeps the \
             copy on the CPU and updates it there, each weight copied from the GPU (slower steps); the copy is \
             made on the GPU once before it moves, while the program sets up",
            bytes(copy_bytes),
            bytes(update_bytes)
        )
    };
    Some(Candidate {
        class: ChangeClass::EmaOffload,
        change: format!(
            "the EMA's copy of the weights kept on the CPU ({who}, {})",
            bytes(copy_bytes)
        ),
        code: code.to_owned(),
        settings: recorded.clone(),
        method: if moved_back {
            Method::Bound
        } else {
            Method::Replayed
        },
        edits: Some(for_blocks(snap, device, l, &gone, "EMA weights")),
        how,
    })
}

#[cfg(test)]
mod tests {
    use vramscope_analysis::categories::Labelled;
    use vramscope_simulate::settings::Settings;
    use vramscope_snapshot::load;

    /// Checked on CPU recordings of `ema_runs.py`, where the row is not
    /// offered (no other memory to move to) but its edits are the same:
    /// the run with timm's EMA without the copy is the run without an EMA,
    /// to the byte (29,594,056 B, `ema_none`).
    #[test]
    fn without_the_copy_the_run_peaks_as_without_an_ema() {
        let peak = |name: &str| {
            let snap =
                load(&vramscope_testdata::recorded(name), &Default::default()).expect("loads");
            let labelled = Labelled::new(&snap, 0);
            let entries = snap.trace(0).map_or(0, |t| t.len());
            let c = super::ema_offload_candidate(&snap, 0, &labelled, &Settings::default());
            let edits = c.as_ref().and_then(|c| c.edits.clone()).unwrap_or_default();
            (
                c,
                vramscope_simulate::edits::peak_allocated(&labelled.lifetimes, entries, &edits),
            )
        };
        let (row, without_copy) = peak("ema_timm.pickle");
        let row = row.expect("an EMA's copy is on the device");
        assert_eq!(row.method, super::Method::Replayed);
        assert!(
            row.code
                .contains("ModelEmaV3(model, decay=decay, device=\"cpu\")"),
            "{}",
            row.code
        );
        assert!(row.change.contains("5.05 MiB"), "{}", row.change);
        let (none, no_ema) = peak("ema_none.pickle");
        assert!(none.is_none());
        assert_eq!(no_ema, 29_594_056);
        assert_eq!(without_copy, no_ema);
        // AveragedModel's: the same program, its copy and 8-byte count gone.
        let (row, without_copy) = peak("ema_swa.pickle");
        assert!(row
            .expect("a row")
            .code
            .contains("AveragedModel(model, device=\"cpu\""));
        assert_eq!(without_copy, no_ema);
    }
}
