//! `vramscope segments FILE [--at end|peak|#N] [--width 100] [--json]`.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::anyhow;
use vramscope_analysis::moment::{resolve_in, Moment};
use vramscope_analysis::segments_map::at_moment;
use vramscope_analysis::Liveness;
use vramscope_report::{segments_json, segments_text, MapOptions};

use crate::input::{display_name, load, pick_device};
use crate::{output, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// Snapshot file: pickle (protocol 0-5), JSON, gzip/zstd, torch.save archive.
    pub file: PathBuf,
    /// The moment: end (the dump), peak, an event index (#1234) or a time
    /// after the first event (250ms); before the end, segments are
    /// reconstructed from the trace.
    #[arg(long, default_value = "end", value_parser = Moment::parse)]
    pub at: Moment,
    #[command(flatten)]
    pub common: crate::args::OneDevice,
    /// Cells per segment bar.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub width: u16,
    /// Print the segments and their blocks as JSON.
    #[arg(long)]
    pub json: bool,
    /// No colours, even on a terminal.
    #[arg(long)]
    pub no_color: bool,
    /// One line per segment, even when there are hundreds.
    #[arg(long)]
    pub no_group: bool,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let snap = load(&a.file, a.common.quiet)?;
    let device = pick_device(&snap, &a.file, a.common.device)?;
    let liveness = Liveness::new(&snap, device);
    let moment =
        resolve_in(a.at, &snap, device, &liveness).map_err(|e| CliError::Invalid(anyhow!(e)))?;
    let map = at_moment(&snap, device, &liveness, &moment);
    let text = if a.json {
        segments_json(&map)
    } else {
        let opts = MapOptions {
            width: a.width as usize,
            color: !a.no_color
                && std::env::var_os("NO_COLOR").is_none()
                && std::io::stdout().is_terminal(),
            group_above: if a.no_group { usize::MAX } else { 40 },
        };
        segments_text(&map, &display_name(&a.file), &opts)
    };
    output::print(&text)
}
