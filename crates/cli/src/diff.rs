//! `vramscope diff A [B] [--at-a MOMENT] [--at-b MOMENT]`: what is alive in
//! B and not in A, matched by allocation stack and size.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use vramscope_analysis::flame::diff_tree;
use vramscope_analysis::moment::{resolve_in, Moment, ResolvedMoment};
use vramscope_analysis::{diff, DiffOptions, LiveBlock, Liveness};
use vramscope_report::diff::{
    diff_html, diff_json, diff_svg, diff_text, DiffReport, DiffSvgOptions, PeakToPeak, Side,
};
use vramscope_snapshot::{DeviceTrace, Snapshot};
use vramscope_text::units::signed_bytes;

use crate::input::{display_name, load, pick_device};
use crate::{output, CliError};

const AFTER_HELP: &str = "\
Blocks are matched by the text of their allocation stack (file, line and
function of every frame) and their size, so two runs compare even though
addresses and stack ids differ.

Which moments are compared:
  two files  A at --at-a (default: end) against B at --at-b (default: end);
             the output then also compares the two peaks, site by site
             (unless both moments are the peak already).
  one file   two moments of it: A at --at-a (default: peak) against B at
             --at-b (default: end), i.e. what is still alive at the end that
             was not at the peak, and what was freed since.
A moment is peak, end, an event index (#1234), a time after the first
event (250ms, 1.5s), or a training iteration: iter:3 (its end) or
iter:3:peak (iterations as `vramscope leaks` finds them).

Exit codes: 0 success, 1 file not readable/writable, 2 invalid snapshot or usage";

#[derive(clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The first snapshot (A): pickle, JSON, gzip/zstd, torch.save archive.
    pub a: PathBuf,
    /// The second snapshot (B). Without it, A and B are two moments of A's file.
    pub b: Option<PathBuf>,
    /// Moment of A (default: end with two files, peak with one).
    #[arg(long, value_parser = Moment::parse, value_name = "MOMENT")]
    pub at_a: Option<Moment>,
    /// Moment of B (default: end).
    #[arg(long, value_parser = Moment::parse, value_name = "MOMENT")]
    pub at_b: Option<Moment>,
    /// Device of both files (default: each file's first with segments or events).
    #[arg(long)]
    pub device: Option<u32>,
    /// Print JSON (schema: docs/diff.md) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also write the differential flamegraph to this SVG file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Also write a self-contained HTML page of the diff to this file.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Stacks and sites listed in each table.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// No progress bar, and no "wrote FILE" line.
    #[arg(long, short)]
    pub quiet: bool,
}

/// One loaded side: its snapshot, device, trace and liveness.
struct Input<'s> {
    snap: &'s Snapshot,
    file: String,
    device: u32,
    trace: &'s DeviceTrace,
    liveness: Liveness,
}

impl<'s> Input<'s> {
    fn new(
        snap: &'s Snapshot,
        path: &Path,
        device: Option<u32>,
        empty: &'s DeviceTrace,
    ) -> Result<Self, CliError> {
        let device = pick_device(snap, path, device)?;
        Ok(Input {
            snap,
            file: display_name(path),
            device,
            trace: snap.trace(device).unwrap_or(empty),
            liveness: Liveness::new(snap, device),
        })
    }

    fn resolve(&self, m: Moment, flag: &str) -> Result<ResolvedMoment, CliError> {
        resolve_in(m, self.snap, self.device, &self.liveness)
            .map_err(|e| CliError::Invalid(anyhow!("{flag} for {}: {e}", self.file)))
    }

    fn side(&self, m: &ResolvedMoment) -> Side {
        Side::new(&self.file, self.device, &m.description, m.point)
    }

    /// Live blocks at each point, in one pass over the trace.
    fn live(&self, points: &[Option<usize>]) -> Vec<Vec<LiveBlock>> {
        self.liveness.live_at_points(self.trace, points)
    }
}

pub fn run(a: Args) -> Result<(), CliError> {
    let opts = DiffOptions {
        top: a.top,
        ..Default::default()
    };
    // Two files load side by side (the reader uses one core); only A's
    // load shows a progress bar.
    let (snap_a, snap_b) = std::thread::scope(|s| {
        let b = a.b.as_deref().map(|p| s.spawn(move || load(p, true)));
        let snap_a = load(&a.a, a.quiet);
        let snap_b = b.map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
        (snap_a, snap_b)
    });
    let snap_a = snap_a?;
    let snap_b = snap_b.transpose()?;
    let empty = DeviceTrace::default();
    let ia = Input::new(&snap_a, &a.a, a.device, &empty)?;
    let (report, tree) = match (&snap_b, &a.b) {
        (Some(snap_b), Some(path_b)) => {
            let ib = Input::new(snap_b, path_b, a.device, &empty)?;
            let (ma, mb) = (a.at_a.unwrap_or(Moment::End), a.at_b.unwrap_or(Moment::End));
            let ra = ia.resolve(ma, "--at-a")?;
            let rb = ib.resolve(mb, "--at-b")?;
            let pa = ia.resolve(Moment::Peak, "peak")?;
            let pb = ib.resolve(Moment::Peak, "peak")?;
            let la = ia.live(&[ra.point, pa.point]);
            let lb = ib.live(&[rb.point, pb.point]);
            let d = diff(ia.snap, &la[0], ib.snap, &lb[0], &opts);
            let mut report = DiffReport::new(ia.side(&ra), ib.side(&rb), d);
            if !(ma == Moment::Peak && mb == Moment::Peak) {
                let peaks = diff(ia.snap, &la[1], ib.snap, &lb[1], &opts);
                report.peak_to_peak = Some(PeakToPeak::new(ia.side(&pa), ib.side(&pb), peaks));
            }
            let tree = wants_tree(&a).then(|| diff_tree(ia.snap, &la[0], ib.snap, &lb[0]));
            (report, tree)
        }
        _ => {
            let (ma, mb) = (
                a.at_a.unwrap_or(Moment::Peak),
                a.at_b.unwrap_or(Moment::End),
            );
            let ra = ia.resolve(ma, "--at-a")?;
            let rb = ia.resolve(mb, "--at-b")?;
            let live = ia.live(&[ra.point, rb.point]);
            let d = diff(ia.snap, &live[0], ia.snap, &live[1], &opts);
            let report = DiffReport::new(ia.side(&ra), ia.side(&rb), d);
            let tree = wants_tree(&a).then(|| diff_tree(ia.snap, &live[0], ia.snap, &live[1]));
            (report, tree)
        }
    };
    if let Some(tree) = &tree {
        if let Some(path) = &a.svg {
            let svg = diff_svg(
                tree,
                &DiffSvgOptions {
                    subtitle: Some(subtitle(&report)),
                    ..Default::default()
                },
            );
            write(path, &svg, a.quiet)?;
        }
        if let Some(path) = &a.html {
            write(path, &diff_html(&report, tree), a.quiet)?;
        }
    }
    let text = if a.json {
        let mut j = diff_json(&report);
        j.push('\n');
        j
    } else {
        diff_text(&report)
    };
    output::print(&text)
}

/// The SVG's second line: which file(s) and moments, and the change.
fn subtitle(r: &DiffReport) -> String {
    // `end (the moment of the dump)` says nothing more than `end` here.
    let short = |m: &str| {
        if m.starts_with("end (") {
            "end".to_owned()
        } else {
            m.to_owned()
        }
    };
    let (a, b) = (&r.a, &r.b);
    let change = signed_bytes(r.diff.totals.delta as f64);
    if a.file == b.file && a.device == b.device {
        format!(
            "{} · device {} · A {} → B {} · change {change}",
            a.file,
            a.device,
            short(&a.moment),
            short(&b.moment)
        )
    } else {
        format!(
            "A {} at {} → B {} at {} · change {change}",
            a.file,
            short(&a.moment),
            b.file,
            short(&b.moment)
        )
    }
}

fn wants_tree(a: &Args) -> bool {
    a.svg.is_some() || a.html.is_some()
}

fn write(path: &Path, text: &str, quiet: bool) -> Result<(), CliError> {
    std::fs::write(path, text)
        .with_context(|| format!("cannot write {}", path.display()))
        .map_err(CliError::Io)?;
    if !quiet {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
