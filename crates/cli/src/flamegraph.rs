//! `vramscope flamegraph FILE [--at peak|end|#N|1.5s] [-o out.svg]`.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{anyhow, Context};
use vramscope_analysis::flame::flame_tree;
use vramscope_analysis::moment::{resolve_in, Moment};
use vramscope_analysis::Liveness;
use vramscope_report::flamegraph::{flamegraph_svg, FlameOptions};
use vramscope_snapshot::DeviceTrace;
use vramscope_text::units::{bytes, count};

use crate::input::{display_name, load, pick_device};
use crate::{output, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// Snapshot file: pickle (protocol 0-5), JSON, gzip/zstd, torch.save archive.
    pub file: PathBuf,
    /// The moment: peak, end, an event index (#1234), a time after the
    /// first event (250ms, 1.5s), or an iteration (iter:3, iter:3:peak).
    #[arg(long, default_value = "peak", value_parser = Moment::parse)]
    pub at: Moment,
    /// Write the SVG here (default: standard output).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub common: crate::args::OneDevice,
    /// Image width in pixels.
    #[arg(long, default_value_t = 1200)]
    pub width: u32,
    /// Headline of the image.
    #[arg(long)]
    pub title: Option<String>,
    /// Icicle graph: outermost frame at the top.
    #[arg(long)]
    pub inverted: bool,
    /// Frames narrower than this many pixels are left out.
    #[arg(long, default_value_t = 0.1)]
    pub min_width: f64,
}

pub fn run(a: Args) -> Result<(), CliError> {
    if a.output.is_none() && std::io::stdout().is_terminal() {
        return Err(CliError::Invalid(anyhow!(
            "an SVG image on a terminal is unreadable; use -o FILE.svg or redirect the output"
        )));
    }
    if !(a.min_width >= 0.0 && a.min_width.is_finite()) {
        return Err(CliError::Invalid(anyhow!(
            "--min-width must be a number ≥ 0"
        )));
    }
    let snap = load(&a.file, a.common.quiet)?;
    let device = pick_device(&snap, &a.file, a.common.device)?;
    let empty = DeviceTrace::default();
    let trace = snap.trace(device).unwrap_or(&empty);
    let liveness = Liveness::new(&snap, device);
    let moment =
        resolve_in(a.at, &snap, device, &liveness).map_err(|e| CliError::Invalid(anyhow!(e)))?;
    let live = liveness.live_after(trace, moment.point);
    let tree = flame_tree(&snap, &live);
    let blocks = if tree.count == 1 { "block" } else { "blocks" };
    let subtitle = format!(
        "{} · device {device} · {} · {} alive in {} {blocks}",
        display_name(&a.file),
        moment.description,
        bytes(tree.bytes),
        count(tree.count)
    );
    let opts = FlameOptions {
        width: a.width,
        title: Some(a.title.unwrap_or_else(|| "Memory flamegraph".into())),
        subtitle: Some(subtitle),
        inverted: a.inverted,
        min_width_px: a.min_width,
    };
    let svg = flamegraph_svg(&tree, &opts);
    match &a.output {
        None => output::print(&svg),
        Some(path) => {
            std::fs::write(path, &svg)
                .with_context(|| format!("cannot write {}", path.display()))
                .map_err(CliError::Io)?;
            if !a.common.quiet {
                eprintln!(
                    "wrote {}: {} in {} {blocks} at {}",
                    path.display(),
                    bytes(tree.bytes),
                    count(tree.count),
                    moment.description
                );
            }
            Ok(())
        }
    }
}
