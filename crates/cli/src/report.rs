//! `vramscope report FILE [-o report.html] [--device N]`: the interactive
//! HTML report (one self-contained file).

use std::path::{Path, PathBuf};

use anyhow::Context;
use vramscope_report::html::{report_html, report_html_against, Baseline, ReportOptions};

use crate::{input, output, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// Snapshot file (any format `summary` reads).
    pub file: PathBuf,
    /// Output file. Default: the snapshot's name with `.html`, beside it.
    #[arg(short, long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub common: crate::args::EveryDevice,
    /// Page title (default: the snapshot's file name).
    #[arg(long)]
    pub title: Option<String>,
    /// A snapshot to compare against (an earlier or a clean run): adds a
    /// Diff tab with what is alive in FILE and not in it, at the end and at
    /// the peaks, matched by stack and size.
    #[arg(long, value_name = "SNAPSHOT")]
    pub baseline: Option<PathBuf>,
}

/// `dir/snap.pickle` → `dir/snap.html` (`snap.pickle.gz` → `snap.html`).
pub fn default_output(file: &Path) -> PathBuf {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "snapshot".into());
    let stem = name
        .trim_end_matches(".gz")
        .trim_end_matches(".zst")
        .trim_end_matches(".pickle")
        .trim_end_matches(".pkl")
        .trim_end_matches(".json")
        .trim_end_matches(".pt");
    let stem = if stem.is_empty() { "snapshot" } else { stem };
    file.with_file_name(format!("{stem}.html"))
}

/// Write the report of an already loaded snapshot.
pub fn write_report(
    snap: &vramscope_snapshot::Snapshot,
    opts: &ReportOptions,
    out: &Path,
) -> Result<(), CliError> {
    let html = report_html(snap, opts);
    std::fs::write(out, html)
        .with_context(|| format!("cannot write {}", out.display()))
        .map_err(CliError::Io)
}

pub fn run(a: Args) -> Result<(), CliError> {
    let snap = input::load(&a.file, a.common.quiet)?;
    input::check_device(&snap, &a.file, a.common.device)?;
    let title = Some(
        a.title
            .clone()
            .unwrap_or_else(|| input::display_name(&a.file)),
    );
    let opts = ReportOptions {
        device: a.common.device,
        title,
        ..Default::default()
    };
    let out = a.out.clone().unwrap_or_else(|| default_output(&a.file));
    if let Some(path) = &a.baseline {
        let base = input::load(path, a.common.quiet)?;
        let base = Baseline {
            snap: &base,
            name: input::display_name(path),
        };
        let html = report_html_against(&snap, &opts, Some(&base));
        std::fs::write(&out, html)
            .with_context(|| format!("cannot write {}", out.display()))
            .map_err(CliError::Io)?;
    } else {
        write_report(&snap, &opts, &out)?;
    }
    if !a.common.quiet {
        eprintln!("wrote {}", out.display());
    }
    output::release(snap);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::default_output;
    use std::path::Path;

    #[test]
    fn output_beside_input() {
        assert_eq!(
            default_output(Path::new("/x/snap.pickle")),
            Path::new("/x/snap.html")
        );
        assert_eq!(
            default_output(Path::new("run.pickle.gz")),
            Path::new("run.html")
        );
        assert_eq!(default_output(Path::new("a.b.json")), Path::new("a.b.html"));
    }
}
