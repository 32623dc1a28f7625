//! `vramscope summary FILE [--device N] [--json]`.

use std::path::PathBuf;

use vramscope_analysis::{summarize, SummaryOptions};

use crate::{input, output, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// Snapshot file: pickle (protocol 0-5), JSON, gzip/zstd, torch.save archive.
    pub file: PathBuf,
    #[command(flatten)]
    pub common: crate::args::EveryDevice,
    /// Print JSON (schema: docs/summary-json.md) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Allocation sites to list at the peak, the end and each OOM.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Skip labelling what the memory is (parameters, gradients, ...).
    #[arg(long)]
    pub no_categories: bool,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let timing = std::env::var_os("VRAMSCOPE_TIMING").is_some();
    let t0 = std::time::Instant::now();
    let snap = input::load(&a.file, a.common.quiet)?;
    let t_load = t0.elapsed();
    let hwm_load = if timing { peak_rss_kib() } else { 0 };
    input::check_device(&snap, &a.file, a.common.device)?;
    let opts = SummaryOptions {
        device: a.common.device,
        top_sites: a.top,
        categories: !a.no_categories,
    };
    let t1 = std::time::Instant::now();
    let s = summarize(&snap, &opts);
    if timing {
        // Parsing the pickle, then decoding its values into columns.
        let split = crate::progress::DECODING_SINCE
            .lock()
            .ok()
            .and_then(|at| *at)
            .map(|at| {
                let parse = at.saturating_duration_since(t0);
                format!(
                    ", parse {parse:?}, decode {:?}",
                    t_load.saturating_sub(parse)
                )
            })
            .unwrap_or_default();
        eprintln!(
            "timing: load {t_load:?} (peak RSS {} MiB{split}), summary {:?} (peak RSS {} MiB)",
            hwm_load / 1024,
            t1.elapsed(),
            peak_rss_kib() / 1024
        );
    }
    let text = if a.json {
        let mut j = vramscope_report::summary_json(&s);
        j.push('\n');
        j
    } else {
        vramscope_report::summary_text(&s, &input::display_name(&a.file))
    };
    let r = output::print(&text);
    if timing {
        eprintln!(
            "timing: after output peak RSS {} MiB at {:?}",
            peak_rss_kib() / 1024,
            t0.elapsed()
        );
    }
    output::release(s);
    output::release(snap);
    r
}

/// Peak resident memory so far (Linux `VmHWM`), 0 where unavailable.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}
