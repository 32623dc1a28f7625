//! `vramscope leaks FILE [--device N] [--json]`.

use std::path::PathBuf;

use vramscope_analysis::leaks::{find_leaks, LeakOptions};

use crate::{input, output, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// Snapshot file recorded over several training iterations.
    pub file: PathBuf,
    #[command(flatten)]
    pub common: crate::args::OneDevice,
    /// Print JSON (schema: docs/leaks-json.md) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Growth per iteration, in bytes, from which a site counts as leaking.
    #[arg(long, default_value_t = LeakOptions::default().min_growth_per_iteration)]
    pub min_growth: u64,
    /// Sites listed per finding.
    #[arg(long, default_value_t = LeakOptions::default().max_sites)]
    pub top: usize,
    /// Where to look for source files named by relative paths in the stacks
    /// (repeatable; the current directory is always searched).
    #[arg(long = "source-dir")]
    pub source_dirs: Vec<PathBuf>,
    /// Do not read source files to quote the code of a site.
    #[arg(long)]
    pub no_source: bool,
    /// Print the `[ok]` findings (expected memory) in full, not one line each.
    #[arg(long, short)]
    pub verbose: bool,
}

impl Args {
    pub fn options(&self) -> LeakOptions {
        LeakOptions {
            min_growth_per_iteration: self.min_growth,
            max_sites: self.top,
            read_sources: !self.no_source,
            source_roots: self.source_dirs.clone(),
            ..LeakOptions::default()
        }
    }
}

pub fn run(a: Args) -> Result<(), CliError> {
    let snap = input::load(&a.file, a.common.quiet)?;
    let device = input::pick_device(&snap, &a.file, a.common.device)?;
    let report = find_leaks(&snap, device, &a.options());
    let text = if a.json {
        let mut j = vramscope_report::leaks_json(&report);
        j.push('\n');
        j
    } else {
        vramscope_report::leaks_text(&report, &input::display_name(&a.file), a.verbose)
    };
    let r = output::print(&text);
    output::release(report);
    output::release(snap);
    r
}
