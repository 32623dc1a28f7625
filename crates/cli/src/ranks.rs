//! `vramscope ranks PATH… [--rank-from REGEX] [--max-peak SIZE]
//! [--max-imbalance X] [--json]`: the rank files of one job side by side.
//! Exit code 3 when a limit is exceeded, as `check`.

use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};
use vramscope_ranks::{ranks_with_progress, RanksError, RanksOptions};
use vramscope_text::units::parse_bytes;

use crate::{output, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// Snapshot files or directories (walked for .pickle, .pkl, .json and
    /// their .gz/.zst).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// A regular expression whose first group is the rank, matched
    /// against each path (default: the names torchtitan, torchtune,
    /// Megatron-LM and Composer give, else the file order).
    #[arg(long, value_name = "REGEX")]
    pub rank_from: Option<String>,
    /// Fail (exit 3) if any rank's peak allocated exceeds this (e.g. 70GiB).
    #[arg(long, value_parser = parse_bytes)]
    pub max_peak: Option<u64>,
    /// Fail (exit 3) if the max / median peak exceeds this (e.g. 1.2).
    #[arg(long)]
    pub max_imbalance: Option<f64>,
    /// Files read at once (default 3, at most one per core; each file's
    /// decoding uses the cores left). Memory grows with it.
    #[arg(long, short, default_value_t = 0)]
    pub jobs: usize,
    /// Also write the ranks report: one HTML page with a strip per rank
    /// and each rank's full report, opened in the page on a click.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// No progress bar, and no "wrote FILE" line.
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn run(a: Args) -> Result<u8, CliError> {
    let opts = RanksOptions {
        rank_from: a.rank_from,
        jobs: a.jobs,
        max_peak: a.max_peak,
        max_imbalance: a.max_imbalance,
    };
    let bar = (!a.quiet).then(|| {
        let b = ProgressBar::new(0);
        b.set_style(
            ProgressStyle::with_template("reading [{bar:30}] {pos}/{len} files ({eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        b
    });
    let progress = |done: usize, total: usize| {
        if let Some(b) = &bar {
            b.set_length(total as u64);
            b.set_position(done as u64);
        }
    };
    let r = ranks_with_progress(&a.paths, &opts, Some(&progress)).map_err(|e| match e {
        RanksError::Io { .. } => CliError::Io(e.into()),
        other => CliError::Invalid(other.into()),
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Some(out) = &a.html {
        let title = format!("vramscope ranks: {} rank(s)", r.ranks.len());
        let page = vramscope_report::html::ranks_report(&r, &title)?;
        std::fs::write(out, page).map_err(|e| {
            CliError::Io(anyhow::Error::new(e).context(format!("writing {}", out.display())))
        })?;
        if !a.quiet {
            eprintln!("wrote {}", out.display());
        }
    }
    let text = if a.json {
        let mut j = serde_json::to_string_pretty(&r).map_err(|e| CliError::Invalid(e.into()))?;
        j.push('\n');
        j
    } else {
        vramscope_report::ranks_text(&r)
    };
    output::print(&text)?;
    Ok(if r.passed { 0 } else { crate::check::FAILED })
}
