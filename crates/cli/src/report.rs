//! `vramscope report FILE [-o report.html] [--device N]`: the interactive
//! HTML report (one self-contained file).

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use vramscope_report::html::{report_html, ReportOptions};

use crate::{progress, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// Snapshot file (any format `summary` reads).
    pub file: PathBuf,
    /// Output file. Default: the snapshot's name with `.html`, beside it.
    #[arg(short, long)]
    pub out: Option<PathBuf>,
    /// Only this device (default: every device, with a selector).
    #[arg(long)]
    pub device: Option<u32>,
    /// Page title (default: the snapshot's file name).
    #[arg(long)]
    pub title: Option<String>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
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
    let len = std::fs::metadata(&a.file).map(|m| m.len()).unwrap_or(0);
    let (lopts, bar) = progress::load_options(len, a.quiet);
    let snap = vramscope_snapshot::load(&a.file, &lopts);
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let snap = snap.map_err(|e| match CliError::from(e) {
        CliError::Io(e) => CliError::Io(e),
        CliError::Invalid(e) => {
            CliError::Invalid(e.context(format!("{} is not a readable snapshot", a.file.display())))
        }
    })?;
    if let Some(d) = a.device {
        let present = snap.devices();
        if !present.contains(&d) {
            return Err(CliError::Invalid(anyhow!(
                "device {d} has no segments or events in {}; devices present: {present:?}",
                a.file.display()
            )));
        }
    }
    let title = a
        .title
        .clone()
        .or_else(|| a.file.file_name().map(|n| n.to_string_lossy().into_owned()));
    let opts = ReportOptions {
        device: a.device,
        title,
        ..Default::default()
    };
    let out = a.out.clone().unwrap_or_else(|| default_output(&a.file));
    write_report(&snap, &opts, &out)?;
    eprintln!("wrote {}", out.display());
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
