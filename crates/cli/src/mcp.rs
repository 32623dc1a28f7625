//! `vramscope mcp [--root DIR]...`: vramscope as a Model Context Protocol
//! server over stdio, for coding agents.
//!
//! The server is the Python package's (`python/vramscope/mcp.py`, on the
//! official MCP SDK); its tools run this command line in its process with
//! [`crate::run_captured`]. The standalone binary hands the command to
//! Python, as it does `run`.

use crate::CliError;

#[derive(clap::Args)]
#[command(
    // `vramscope mcp --help` is the server's own (Python's); `vramscope
    // help mcp` shows this.
    disable_help_flag = true,
    about = "Serve vramscope to a coding agent over the Model Context Protocol (stdio)",
    long_about = "Serve vramscope to a coding agent over the Model Context Protocol, on stdin and stdout. The tools (summary, oom, leaks, categories, advise, simulate, diff, segments, check, report) answer with the JSON of the matching `vramscope ... --json` command; files are read only under the --root directories (default: the working directory), and a file stays loaded while it is asked about.\n\nOptions: --root DIR (repeatable), --page-chars N. Needs the vramscope Python package with the MCP SDK (pip install 'vramscope[mcp]'); this binary runs `$VRAMSCOPE_PYTHON -m vramscope mcp ...` (default python3)."
)]
pub struct Args {
    /// The server's options.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<String>,
}

/// The server's exit status.
pub fn run(a: Args) -> Result<u8, CliError> {
    crate::run::hand_to_python("mcp", &a.args)
}
