//! `vramscope export PATH… --format parquet|perfetto -o OUT [--rank-from REGEX]`:
//! snapshots as Parquet tables, hive-partitioned by rank, or as one
//! Perfetto trace.

use std::path::PathBuf;

use vramscope_export::{export_parquet, ExportError, ExportOptions};

use crate::{output, CliError};

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Format {
    /// Parquet tables: files, events, blocks, segments, stacks (docs/parquet-schema.md).
    Parquet,
    /// One Perfetto trace (protobuf TrackEvents): a process per rank, byte
    /// counters, allocations as slices, OOMs and annotations as instants.
    Perfetto,
}

#[derive(clap::Args)]
pub struct Args {
    /// Snapshot files or directories of them.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "parquet")]
    pub format: Format,
    /// Output directory (parquet) or file (perfetto, e.g. memory.pftrace).
    #[arg(long, short)]
    pub out: PathBuf,
    /// A regular expression whose first group is the rank (default: from
    /// the names frameworks give, as `vramscope ranks`).
    #[arg(long, value_name = "REGEX")]
    pub rank_from: Option<String>,
    /// Print what was written as JSON.
    #[arg(long)]
    pub json: bool,
    /// No progress bar, and no "wrote FILE" line.
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let opts = ExportOptions {
        rank_from: a.rank_from,
    };
    let r = match a.format {
        Format::Parquet => export_parquet(&a.paths, &a.out, &opts),
        Format::Perfetto => vramscope_export::export_perfetto(&a.paths, &a.out, &opts),
    };
    let r = r.map_err(|e| match e {
        ExportError::Write { .. } => CliError::Io(e.into()),
        ExportError::Input(vramscope_ranks::RanksError::Io { .. }) => CliError::Io(e.into()),
        other => CliError::Invalid(other.into()),
    })?;
    let text = if a.json {
        let mut j = serde_json::to_string_pretty(&r).map_err(|e| CliError::Invalid(e.into()))?;
        j.push('\n');
        j
    } else {
        format!(
            "wrote {} ({} file(s), {} events, schema version {})\n",
            r.dir.display(),
            r.files,
            r.events,
            r.schema_version
        )
    };
    output::print(&text)
}
