//! Writing to stdout so that `vramscope ... | head` ends quietly.

use std::io::Write;

use crate::CliError;

thread_local! {
    /// While [`captured`] runs on this thread: what the command printed to
    /// stdout, and its errors and warnings.
    static CAPTURE: std::cell::RefCell<Option<(String, String)>> =
        const { std::cell::RefCell::new(None) };
}

/// Run `f` with what the commands print kept (stdout, and the lines that
/// would go to stderr: errors, warnings, notes) instead of written: for a
/// server whose stdout is its protocol (`vramscope mcp`).
pub fn captured<R>(f: impl FnOnce() -> R) -> (R, String, String) {
    CAPTURE.with(|c| *c.borrow_mut() = Some((String::new(), String::new())));
    let r = f();
    let (out, err) = CAPTURE.with(|c| c.borrow_mut().take()).unwrap_or_default();
    (r, out, err)
}

/// A line for stderr (an error, a warning, a note), or for the capture.
pub fn say(line: &str) {
    let kept = CAPTURE.with(|c| match c.borrow_mut().as_mut() {
        Some((_, err)) => {
            err.push_str(line);
            err.push('\n');
            true
        }
        None => false,
    });
    if !kept {
        eprintln!("{line}");
    }
}

/// Write `text` to stdout; a closed pipe is reported as an I/O error that
/// `main` turns into a clean exit.
pub fn print(text: &str) -> Result<(), CliError> {
    let kept = CAPTURE.with(|c| match c.borrow_mut().as_mut() {
        Some((out, _)) => {
            out.push_str(text);
            true
        }
        None => false,
    });
    if kept {
        return Ok(());
    }
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
