//! `vramscope simulate FILE [--set CONF]... [--sweep] [--capacity SIZE]
//! [--drop SITE]... [--free-early SITE]... [--scale SITE=F]... [--json]`.

use std::path::PathBuf;

use vramscope_simulate::{simulate, SimulateOptions};

use crate::{input, output, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// Snapshot recorded on CUDA.
    pub file: PathBuf,
    /// Settings to try over the recorded ones, in PYTORCH_CUDA_ALLOC_CONF
    /// syntax (e.g. max_split_size_mb:128,roundup_power2_divisions:4); repeatable.
    #[arg(long = "set", value_name = "CONF")]
    pub set: Vec<String>,
    /// Also try the settings users commonly turn to, ranked.
    #[arg(long)]
    pub sweep: bool,
    /// Program change: the allocations of SITE (`file.py:42 in f`, or part
    /// of it) are never made; repeatable.
    #[arg(long, value_name = "SITE")]
    pub drop: Vec<String>,
    /// Program change: the allocations of SITE are freed at the end of the
    /// phase they were made in (forward, backward, optimizer step; else
    /// their iteration); repeatable.
    #[arg(long = "free-early", value_name = "SITE")]
    pub free_early: Vec<String>,
    /// Program change: the allocations of SITE ask for FACTOR times their
    /// size (0.5: half the batch); repeatable.
    #[arg(long, value_name = "SITE=FACTOR")]
    pub scale: Vec<String>,
    /// Device memory PyTorch may use (e.g. 80GiB). Default: from the file's
    /// OOM (reserved + free on the device), else unlimited.
    #[arg(long, value_parser = vramscope_text::units::parse_bytes)]
    pub capacity: Option<u64>,
    /// The memory fraction the program set with
    /// torch.cuda.set_per_process_memory_fraction(F), for files that do not
    /// record it (vramscope.record does); needs the device's memory, from
    /// --capacity or the file.
    #[arg(long, value_name = "F")]
    pub fraction: Option<f64>,
    #[command(flatten)]
    pub common: crate::args::OneDevice,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let snap = input::load(&a.file, a.common.quiet)?;
    let device = input::chosen_device(&snap, &a.file, a.common.device)?;
    let opts = SimulateOptions {
        device,
        set: a.set,
        capacity: a.capacity,
        fraction: a.fraction,
        sweep: a.sweep,
        drop: a.drop,
        free_early: a.free_early,
        scale: a.scale,
        curve_points: 0,
        sweep_first: None,
    };
    let sim = simulate(&snap, &opts).map_err(|e| CliError::Invalid(e.into()))?;
    let name = input::display_name(&a.file);
    output::print_json_or(&sim, a.json, |x| vramscope_report::simulate_text(x, &name))
}
