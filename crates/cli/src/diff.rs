//! `vramscope diff A [B] [--at-a MOMENT] [--at-b MOMENT]`: what is alive in
//! B and not in A, matched by allocation stack and size.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use vramscope_analysis::compare::{compare, Input};
use vramscope_analysis::flame::diff_tree;
use vramscope_analysis::moment::Moment;
use vramscope_analysis::DiffOptions;
use vramscope_report::diff::{
    diff_html, diff_json, diff_svg, diff_text, DiffReport, DiffSvgOptions,
};
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
    let side = |snap, path: &Path| -> Result<Input, CliError> {
        Ok(Input::new(
            snap,
            &display_name(path),
            pick_device(snap, path, a.device)?,
        ))
    };
    let ia = side(&snap_a, &a.a)?;
    let ib = match (&snap_b, &a.b) {
        (Some(snap_b), Some(path_b)) => Some(side(snap_b, path_b)?),
        _ => None,
    };
    // Two files: each at its end; one file: its peak against its end.
    let (ma, mb) = match ib {
        Some(_) => (a.at_a.unwrap_or(Moment::End), a.at_b.unwrap_or(Moment::End)),
        None => (
            a.at_a.unwrap_or(Moment::Peak),
            a.at_b.unwrap_or(Moment::End),
        ),
    };
    let c = compare(&ia, ma, ib.as_ref(), mb, &opts).map_err(|e| CliError::Invalid(anyhow!(e)))?;
    let b_snap = ib.as_ref().map_or(ia.snap, |b| b.snap);
    let tree = wants_tree(&a).then(|| diff_tree(ia.snap, &c.a_live, b_snap, &c.b_live));
    let report = c.report;
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
