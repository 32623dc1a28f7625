//! `vramscope cycles PATH [--json] [--html OUT] [--dot N]`: a cycle report
//! read back, for the terminal, a script or an agent.
//!
//! The watcher (`vramscope.cycles.watch()`) keeps its running report in
//! `<out_dir>/cycles.json` beside the page it writes per finding; `PATH` is
//! that file, the directory that holds it, or an object graph as the Python
//! side extracts it (`{"nodes": [...], "edges": [...]}`), which is analysed
//! first. Nothing is executed: both are plain JSON.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use vramscope_cycles::{finding_dot, report_html, report_text, CycleOptions, CycleReport, Graph};

use crate::{output, CliError};

/// The file a watcher writes its running report to, in its output directory.
pub const REPORT_FILE: &str = "cycles.json";

#[derive(clap::Args)]
pub struct Args {
    /// A cycle report (`vramscope-cycles/cycles.json`), the directory that holds it, or an object graph's JSON.
    pub path: PathBuf,
    /// Print the report as JSON (the schema of `CycleReport`: docs/cycles-json.md).
    #[arg(long)]
    pub json: bool,
    /// Also write the report as a self-contained HTML page to this path.
    #[arg(long, value_name = "OUT")]
    pub html: Option<PathBuf>,
    /// Print the Graphviz DOT of finding N (0 is the largest) instead of the text.
    #[arg(long, value_name = "N", conflicts_with = "json")]
    pub dot: Option<usize>,
    /// No note on stderr for the page written.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Where the report of `path` lies: the path itself, or the report file of
/// a watcher's directory.
fn report_path(path: &Path) -> Result<PathBuf, CliError> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    let inner = path.join(REPORT_FILE);
    if inner.is_file() {
        return Ok(inner);
    }
    Err(CliError::Io(anyhow!(
        "{} is a directory without {REPORT_FILE}: expected a cycle watcher's output directory \
         (vramscope.cycles.watch(out_dir=...)) or a cycle report file",
        path.display()
    )))
}

/// Read a cycle report, or analyse an object graph, from `path`.
pub fn load(path: &Path) -> Result<CycleReport, CliError> {
    let file = report_path(path)?;
    let bytes = std::fs::read(&file)
        .with_context(|| format!("cannot read {}", file.display()))
        .map_err(CliError::Io)?;
    // Reports and graphs are JSON text; a snapshot (a pickle) is not.
    let text = String::from_utf8(bytes).map_err(|_| {
        CliError::Invalid(anyhow!(
            "{} is not text: expected a cycle report or an object graph (JSON); \
             a snapshot is read by `vramscope summary`",
            file.display()
        ))
    })?;
    let invalid =
        |e: vramscope_cycles::CycleError| CliError::Invalid(anyhow!("{}: {e}", file.display()));
    if text.trim().is_empty() {
        return Err(CliError::Invalid(anyhow!(
            "{} is empty: expected a cycle report or an object graph (JSON)",
            file.display()
        )));
    }
    // A graph has "nodes" at the top; a report has "findings". Looking
    // first tells which message to give for a damaged file.
    let top: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        CliError::Invalid(anyhow!(
            "{} is not JSON ({e}): expected a cycle report or an object graph",
            file.display()
        ))
    })?;
    if top.get("nodes").is_some() && top.get("findings").is_none() {
        let graph = Graph::from_json(&text).map_err(invalid)?;
        return Ok(vramscope_cycles::analyze(&graph, &CycleOptions::default()));
    }
    if top.get("findings").is_none() {
        return Err(CliError::Invalid(anyhow!(
            "{} has neither \"findings\" (a cycle report) nor \"nodes\" (an object graph)",
            file.display()
        )));
    }
    CycleReport::from_json(&text).map_err(invalid)
}

pub fn run(a: Args) -> Result<(), CliError> {
    let report = load(&a.path)?;
    if let Some(out) = &a.html {
        let html = report_html(&report, "vramscope: reference cycles holding tensors");
        std::fs::write(out, html)
            .with_context(|| format!("cannot write {}", out.display()))
            .map_err(CliError::Io)?;
        if !a.quiet {
            output::say(&format!("wrote {}", out.display()));
        }
    }
    if let Some(i) = a.dot {
        let f = report
            .finding(i)
            .map_err(|e| CliError::Invalid(anyhow!("--dot {i}: {e}")))?;
        return output::print(&finding_dot(f));
    }
    if a.json {
        return output::print_json_or(&report, true, |_| String::new());
    }
    output::print(&report_text(&report))
}
