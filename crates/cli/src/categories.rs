//! `vramscope categories FILE [--device N] [--json]`.

use std::path::PathBuf;

use vramscope_analysis::categories::category_view;

use crate::{input, output, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// Snapshot, profiler trace or memory timeline.
    pub file: PathBuf,
    #[command(flatten)]
    pub common: crate::args::EveryDevice,
    /// Print JSON (schema: docs/categories.md) instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let snap = input::load(&a.file, a.common.quiet)?;
    let devices = match a.common.device {
        Some(d) => vec![input::pick_device(&snap, &a.file, Some(d))?],
        None => snap.devices(),
    };
    let views: Vec<_> = devices.iter().map(|&d| category_view(&snap, d)).collect();
    let text = if a.json {
        let mut j = vramscope_report::categories_json(&views);
        j.push('\n');
        j
    } else {
        vramscope_report::categories_text(&views, &input::display_name(&a.file))
    };
    let r = output::print(&text);
    output::release(views);
    output::release(snap);
    r
}
