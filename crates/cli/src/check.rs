//! `vramscope check FILE --max-peak 12GiB --no-leaks --max-growth 1MiB/iter`:
//! memory limits for CI. Exit code 0 when every limit holds, 3 when one does
//! not (1 and 2 keep their meaning: unreadable file, invalid input/usage).

use std::fmt::Write;
use std::path::PathBuf;

use anyhow::anyhow;
use vramscope_analysis::leaks::LeakOptions;
use vramscope_analysis::limits::{check, Limits};
use vramscope_text::units::parse_bytes;

use crate::{input, output, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// Snapshot file to check.
    pub file: PathBuf,
    /// Fail if the peak allocated memory exceeds this (e.g. 12GiB, 1.5GB).
    #[arg(long, value_parser = parse_bytes)]
    pub max_peak: Option<u64>,
    /// Fail if the memory reserved by the allocator at the end exceeds this.
    #[arg(long, value_parser = parse_bytes)]
    pub max_reserved: Option<u64>,
    /// Fail if `vramscope leaks` finds a leak.
    #[arg(long)]
    pub no_leaks: bool,
    /// Fail if allocated memory at iteration ends grows faster than this
    /// (e.g. 1MiB/iter).
    #[arg(long, value_parser = parse_bytes)]
    pub max_growth: Option<u64>,
    #[command(flatten)]
    pub common: crate::args::OneDevice,
    /// Print JSON (schema: docs/leaks-json.md) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Where to look for source files named by relative paths in the stacks.
    #[arg(long = "source-dir")]
    pub source_dirs: Vec<PathBuf>,
}

/// The check failed: exit code 3.
pub const FAILED: u8 = 3;

pub fn run(a: Args) -> Result<u8, CliError> {
    let limits = Limits {
        max_peak: a.max_peak,
        max_reserved: a.max_reserved,
        no_leaks: a.no_leaks,
        max_growth_per_iteration: a.max_growth,
    };
    if limits.max_peak.is_none()
        && limits.max_reserved.is_none()
        && !limits.no_leaks
        && limits.max_growth_per_iteration.is_none()
    {
        return Err(CliError::Invalid(anyhow!(
            "nothing to check: give at least one of --max-peak, --max-reserved, --no-leaks, --max-growth"
        )));
    }
    let snap = input::load(&a.file, a.common.quiet)?;
    let device = input::pick_device(&snap, &a.file, a.common.device)?;
    let leak_opts = LeakOptions {
        source_roots: a.source_dirs.clone(),
        ..LeakOptions::default()
    };
    let r = check(&snap, device, &limits, &leak_opts);
    let name = input::display_name(&a.file);
    let text = if a.json {
        let mut j = serde_json::to_string_pretty(&r).map_err(|e| CliError::Invalid(e.into()))?;
        j.push('\n');
        j
    } else {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "{name} · device {device} · {}",
            if r.passed {
                "all checks passed"
            } else {
                "CHECK FAILED"
            }
        );
        for c in &r.checks {
            let _ = writeln!(
                o,
                "  {} {:<13} {}",
                if c.passed { "ok  " } else { "FAIL" },
                c.name,
                c.message
            );
        }
        let failed_leaks = r
            .checks
            .iter()
            .any(|c| !c.passed && c.name != "max_peak" && c.name != "max_reserved");
        if let (true, Some(l)) = (failed_leaks, &r.leaks) {
            o.push('\n');
            o.push_str(&vramscope_report::leaks_text(l, &name, false));
        }
        o
    };
    output::print(&text)?;
    Ok(if r.passed { 0 } else { FAILED })
}
