//! The `vramscope` command line, as a library: the `vramscope` binary and
//! the Python package's console command both call [`run`], so there is one
//! implementation. It only translates arguments and errors; all logic lives
//! in the library crates.
//!
//! Exit codes: 0 success; 1 a file could not be read or written (for
//! `vramscope live`: no live process, or it could not be reached); 2 the
//! input is not a valid snapshot (or live state), or the command line is
//! wrong; 3 a limit given to `vramscope check` or `vramscope ranks` was
//! exceeded.

mod advise;
mod args;
mod categories;
mod check;
mod cycles;
mod demo;
mod diff;
mod estimate;
mod export;
mod flamegraph;
mod input;
pub use input::keep_loaded;
mod leaks;
mod live;
mod mcp;
mod output;
mod progress;
mod ranks;
mod report;
mod run;
mod segments;
mod simulate;
mod summary;
mod synth;

use clap::{Parser, Subcommand};

/// Find where PyTorch GPU memory went, and why.
#[derive(Parser)]
#[command(name = "vramscope", version, about, long_about = None)]
#[command(
    after_help = "Exit codes: 0 success, 1 file not readable/writable (live: process not reachable), 2 invalid snapshot or usage, 3 `check` or `ranks` found a limit exceeded"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a Python script (or -m module) under the recorder, then summarise it and write the report.
    Run(run::Args),
    /// Memory at the end, the peak and what held it, fragmentation and OOMs.
    Summary(summary::Args),
    /// Interactive, self-contained HTML report (timeline, stacks, peak, segments, OOMs).
    Report(report::Args),
    /// Run on a built-in example snapshot (no arguments needed).
    Demo(demo::Args),
    /// Memory flamegraph (SVG) of what is alive at the peak, the end or a time.
    Flamegraph(flamegraph::Args),
    /// A terminal map of segments and their blocks.
    Segments(segments::Args),
    /// What is alive in B and not in A: two snapshots, or two moments of one.
    Diff(diff::Args),
    /// What the memory is: parameters, gradients, optimizer state, activations, ...
    Categories(categories::Args),
    /// Memory that grows from one iteration to the next, explained, with fixes.
    Leaks(leaks::Args),
    /// Reference cycles that held tensors: a cycle watcher's report (or an object graph) as text, JSON, HTML or DOT.
    Cycles(cycles::Args),
    /// Memory limits for CI: peak, reserved, leaks, growth per iteration (exit 3 on failure).
    Check(check::Args),
    /// Serve vramscope to a coding agent over the Model Context Protocol (stdio).
    Mcp(mcp::Args),
    /// Write a realistic synthetic snapshot (for tests and benchmarks).
    Synth(synth::Args),
    /// How much memory training (or inference) will need, before running it.
    Estimate(estimate::Args),
    /// Replay a recorded run through a model of the CUDA caching allocator under other settings.
    Simulate(simulate::Args),
    /// What to change so it fits, or peaks lower: ranked by the peak the allocator model predicts, each with its code.
    Advise(advise::Args),
    /// Snapshots as Parquet tables (hive-partitioned by rank) for DuckDB, pandas, Spark, Ray.
    Export(export::Args),
    /// The rank files of one job side by side: imbalance, outliers, the worst rank against the median.
    Ranks(ranks::Args),
    /// Watch a running process's memory (recorded with record(live=True) or VRAMSCOPE_LIVE=1).
    Live(live::Args),
}

/// Errors the CLI maps to exit codes.
#[derive(Debug)]
pub enum CliError {
    /// A file could not be read or written (exit 1).
    Io(anyhow::Error),
    /// Invalid input or usage (exit 2).
    Invalid(anyhow::Error),
}

impl From<vramscope_snapshot::SnapshotError> for CliError {
    fn from(e: vramscope_snapshot::SnapshotError) -> Self {
        match e {
            vramscope_snapshot::SnapshotError::Io { .. } => CliError::Io(e.into()),
            other => CliError::Invalid(other.into()),
        }
    }
}

/// [`run`] in the `vramscope` binary, whose process ends when it returns:
/// the commands may leave their largest models to the kernel's exit.
pub fn run_and_end<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    output::process_ends_after_run();
    run(args)
}

/// What one command printed, kept ([`run_captured`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Captured {
    /// The exit code (the binary's documented codes).
    pub code: u8,
    /// What it printed to stdout: the `--json` answer.
    pub stdout: String,
    /// Its error, warning and note lines.
    pub stderr: String,
}

/// [`run`] with what the command prints kept instead of written, for a
/// server whose stdout carries its protocol (`vramscope mcp`). Files stay
/// loaded between calls once [`input::keep_loaded`] is on.
pub fn run_captured<I, T>(args: I) -> Captured
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let (code, stdout, stderr) = output::captured(|| run(args));
    Captured {
        code,
        stdout,
        stderr,
    }
}

/// Run the command line with `args` (the first is the program name) and
/// return the exit code. Never exits the process, so it is safe inside a
/// Python interpreter; `--help`/`--version` print and return 0.
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            // clap formats help, version and usage errors itself.
            let text = e.render().to_string();
            if e.use_stderr() {
                output::say(text.trim_end());
                return 2;
            }
            let _ = output::print(&text);
            return 0;
        }
    };
    let result = match cli.command {
        Command::Summary(a) => summary::run(a),
        Command::Report(a) => report::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Flamegraph(a) => flamegraph::run(a),
        Command::Segments(a) => segments::run(a),
        Command::Diff(a) => diff::run(a),
        Command::Synth(a) => synth::run(a),
        Command::Leaks(a) => leaks::run(a),
        Command::Categories(a) => categories::run(a),
        Command::Cycles(a) => cycles::run(a),
        Command::Simulate(a) => simulate::run(a),
        Command::Advise(a) => advise::run(a),
        Command::Estimate(a) => estimate::run(a),
        Command::Export(a) => export::run(a),
        Command::Live(a) => live::run(a),
        Command::Run(a) => match run::run(a) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Mcp(a) => match mcp::run(a) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Check(a) => match check::run(a) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        Command::Ranks(a) => match ranks::run(a) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => 0,
        Err(CliError::Io(e)) if output::is_broken_pipe(&e) => 0,
        Err(CliError::Io(e)) => {
            output::say(&format!("vramscope: error: {e:#}"));
            1
        }
        Err(CliError::Invalid(e)) => {
            output::say(&format!("vramscope: error: {e:#}"));
            2
        }
    }
}
