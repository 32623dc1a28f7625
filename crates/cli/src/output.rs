//! Writing to stdout so that `vramscope ... | head` ends quietly.

use std::io::Write;

use crate::CliError;

/// Write `text` to stdout; a closed pipe is reported as an I/O error that
/// `main` turns into a clean exit.
pub fn print(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| CliError::Io(anyhow::Error::new(e).context("writing to stdout")))
}

/// Print `value` as pretty JSON with `json`, else as the text `render`
/// makes of it.
pub fn print_json_or<T: serde::Serialize>(
    value: &T,
    json: bool,
    render: impl FnOnce(&T) -> String,
) -> Result<(), CliError> {
    if !json {
        return print(&render(value));
    }
    let mut j = serde_json::to_string_pretty(value).map_err(|e| CliError::Invalid(e.into()))?;
    j.push('\n');
    print(&j)
}

pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Set by the `vramscope` binary: the process ends when the command returns.
static PROCESS_ENDS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Tell the commands that the process ends when they return (the binary,
/// not the Python module, which lives on).
pub fn process_ends_after_run() {
    PROCESS_ENDS.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Drop `v`, or, where the process ends right after, leave its memory to
/// the kernel: freeing a 1M-entry snapshot's columns one vector at a time
/// costs about 10 ms that the kernel does at exit in one go anyway.
pub fn release<T>(v: T) {
    if PROCESS_ENDS.load(std::sync::atomic::Ordering::Relaxed) {
        std::mem::forget(v);
    }
}
