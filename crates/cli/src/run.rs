//! `vramscope run [options] script.py [args]` / `vramscope run -m module
//! [args]`: record a Python program, then summarise it.
//!
//! The recording has to happen inside the program's Python process, so the
//! Python package implements `run` (`python -m vramscope run`, and the
//! `vramscope` console command of the package, which never reaches this
//! code). The standalone binary lists it in `--help` and hands it to
//! Python: `$VRAMSCOPE_PYTHON` (default `python3`) with `-m vramscope run`.

use std::process::Command;

use anyhow::anyhow;

use crate::CliError;

#[derive(clap::Args)]
#[command(
    about = "Run a Python script (or -m module) under the recorder, then print the summary and leaks and write the report",
    long_about = "Run a Python script (or `-m module`, as `python -m` would) under vramscope's recorder: the snapshot is written however the program ends (normally, sys.exit, an exception, an out-of-memory error) while its globals are still alive, then the summary and any leaks are printed and the HTML report is written beside the snapshot. Exit status: the program's.\n\nOptions (before the script): -o/--output PATH, --max-entries N, --stacks {python,all,none}, --every N, --keep K, --no-report, -q/--quiet. This binary runs `$VRAMSCOPE_PYTHON -m vramscope run ...` (default python3), which needs the vramscope Python package installed there."
)]
pub struct Args {
    /// The options, the script (or -m MODULE) and the program's arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<String>,
}

/// Exit status of the program (or 1 when Python could not be started).
pub fn run(a: Args) -> Result<u8, CliError> {
    hand_to_python("run", &a.args)
}

/// `$VRAMSCOPE_PYTHON -m vramscope COMMAND ARGS...` with this process's
/// stdin, stdout and stderr; its exit status (1 when Python could not be
/// started).
pub(crate) fn hand_to_python(command: &str, args: &[String]) -> Result<u8, CliError> {
    let python = std::env::var("VRAMSCOPE_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let status = Command::new(&python)
        .args(["-m", "vramscope", command])
        .args(args)
        .status()
        .map_err(|e| CliError::Io(anyhow!("could not start {python} (set VRAMSCOPE_PYTHON to a Python with vramscope installed): {e}")))?;
    Ok(status
        .code()
        .map_or(1, |c| u8::try_from(c.clamp(0, 255)).unwrap_or(1)))
}
