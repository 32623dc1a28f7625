//! `vramscope demo`: the main job on a built-in example. It generates a
//! small training run with a leak and an out-of-memory error (the synthetic
//! generator, so nothing is downloaded), writes it and its HTML report next
//! to you and summarises it.

use std::path::PathBuf;

use anyhow::Context;
use vramscope_analysis::{summarize, SummaryOptions};
use vramscope_synth::{write_snapshot, SynthOptions};

use crate::{output, CliError};

#[derive(clap::Args)]
pub struct Args {
    /// Directory for the example's files.
    #[arg(short, long, default_value = "vramscope-demo")]
    pub out_dir: PathBuf,
}

/// The example: 8 training iterations, 64 MiB leaked per iteration, an OOM at the end.
pub fn example_options() -> SynthOptions {
    SynthOptions {
        entries: 30_000,
        seed: 7,
        iterations: 8,
        leak_bytes_per_iter: 64 << 20,
        oom: true,
        ..SynthOptions::default()
    }
}

pub fn run(a: Args) -> Result<(), CliError> {
    let io = CliError::Io;
    std::fs::create_dir_all(&a.out_dir)
        .with_context(|| format!("cannot create {}", a.out_dir.display()))
        .map_err(io)?;
    let path = a.out_dir.join("demo_snapshot.pickle");
    let file = std::fs::File::create(&path)
        .with_context(|| format!("cannot create {}", path.display()))
        .map_err(io)?;
    write_snapshot(&example_options(), std::io::BufWriter::new(file))
        .with_context(|| format!("writing {}", path.display()))
        .map_err(io)?;
    let snap = vramscope_snapshot::load(&path, &Default::default())?;
    let report = a.out_dir.join("demo_report.html");
    crate::report::write_report(
        &snap,
        &vramscope_report::html::ReportOptions {
            title: Some("vramscope demo: a training run with a leak and an OOM".into()),
            ..Default::default()
        },
        &report,
    )?;
    let s = summarize(&snap, &SummaryOptions::default());
    let mut text = format!(
        "Built-in example: a synthetic training run written to {}\n\n",
        path.display()
    );
    text.push_str(&vramscope_report::summary_text(&s, "demo_snapshot.pickle"));
    // What grows from one iteration to the next, in a few lines (the full
    // analysis is `vramscope leaks`).
    let leaks = vramscope_analysis::leaks::find_leaks(&snap, 0, &Default::default());
    for f in leaks
        .findings
        .iter()
        .filter(|f| f.severity == vramscope_analysis::leaks::Severity::Leak)
    {
        text.push_str(&format!("\nLEAK  {}\n      fix: {}\n", f.title, f.fix));
    }
    text.push_str(&format!(
        "\nInteractive report: {} (open it in a browser; it needs no network)\nNext: vramscope leaks {} · vramscope summary {} --json\n",
        report.display(),
        path.display(),
        path.display()
    ));
    output::print(&text)
}
