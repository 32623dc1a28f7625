//! `vramscope advise FILE [--capacity SIZE | --gpu NAME] [--json]`.

use std::path::PathBuf;

use vramscope_advise::{advise, AdviseOptions};

use crate::{input, output, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// Snapshot recorded on CUDA.
    pub file: PathBuf,
    /// Device memory PyTorch may use (e.g. 80GiB). Default: from the file's
    /// OOM (reserved + free on the device), else the limit its
    /// release-and-retry bursts show, else none (changes ranked by peak only).
    #[arg(long, value_parser = vramscope_text::units::parse_bytes, conflicts_with = "gpu")]
    pub capacity: Option<u64>,
    /// The GPU to fit on, by the name torch.cuda.get_device_name() gives
    /// ("NVIDIA H100 80GB HBM3") or a short one (H100-80GB, H200,
    /// A100-40GB): its total memory less what the CUDA context holds
    /// outside PyTorch's allocator. An unknown name lists the known ones.
    #[arg(long, value_name = "NAME")]
    pub gpu: Option<String>,
    /// The memory fraction the program set with
    /// torch.cuda.set_per_process_memory_fraction(F), for files that do not
    /// record it.
    #[arg(long, value_name = "F")]
    pub fraction: Option<f64>,
    /// The ranks the sharding rows (ZeRO-1, FSDP) divide the optimizer
    /// state, gradients and parameters over [default: 2].
    #[arg(long, value_name = "N")]
    pub ranks: Option<u32>,
    #[command(flatten)]
    pub common: crate::args::OneDevice,
    /// Print JSON (schema: docs/advise.md) instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let snap = input::load(&a.file, a.common.quiet)?;
    let device = input::chosen_device(&snap, &a.file, a.common.device)?;
    let opts = AdviseOptions {
        device,
        capacity: a.capacity,
        gpu: a.gpu,
        fraction: a.fraction,
        ranks: a.ranks,
    };
    let advising = advise(&snap, &opts).map_err(|e| CliError::Invalid(e.into()))?;
    let name = input::display_name(&a.file);
    output::print_json_or(&advising, a.json, |x| {
        vramscope_report::advise_text(x, &name)
    })
}
