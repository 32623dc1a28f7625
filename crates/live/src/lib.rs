//! `vramscope live`: the state a traced process publishes while it runs
//! (docs/live-protocol.md), read from its loopback socket or its state
//! file, and drawn as a terminal screen.
//!
//! * [`state`]: the state (version 1) and the growth per iteration;
//! * [`registry`]: the directory where live processes say how to reach them;
//! * [`source`]: which process the user means (a PID, `HOST:PORT`, a state
//!   file, or the only one in the registry directory);
//! * [`reader`]: the states of a [`Source`], one after the other;
//! * [`curve`]: the samples kept over time and their braille curve;
//! * [`view`]: the whole screen as lines of text, a pure function of the
//!   states seen, the terminal size and what the user selected.
//!
//! ```no_run
//! use vramscope_live::{resolve, registry_dir, view, History, Reader, ReaderOptions, UiState};
//!
//! let source = resolve(None, None, &registry_dir())?;
//! let mut reader = Reader::open(&source, &ReaderOptions::default())?;
//! let mut history = History::default();
//! let sample = reader.next_state()?;
//! history.push(&sample.state);
//! let frame = view::render(&sample.state, &history, (100, 40), &UiState::default());
//! for line in &frame.lines {
//!     println!("{}", line.text);
//! }
//! # Ok::<(), vramscope_live::LiveError>(())
//! ```

pub mod curve;
pub mod reader;
pub mod registry;
pub mod source;
pub mod state;
pub mod view;

use std::path::PathBuf;

pub use curve::History;
pub use reader::{Reader, ReaderOptions, Sample};
pub use registry::{registry_dir, RegistryEntry};
pub use source::{resolve, Source};
pub use state::State;
pub use view::UiState;

/// What went wrong, saying what was expected, what was found and where.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("{origin}: expected a vramscope live state (docs/live-protocol.md), found {message}")]
    BadState { origin: String, message: String },
    #[error(
        "no live vramscope process in {dir}: start the program with \
         vramscope.record(live=True) (or VRAMSCOPE_LIVE=1 in its environment), \
         or name a PID, HOST:PORT or state file"
    )]
    NoneRunning { dir: PathBuf },
    #[error("{n} live vramscope processes in {dir}; name one, e.g. `vramscope live {first}`:\n{listing}", n = .pids.len(), first = .pids.first().copied().unwrap_or(0))]
    Several {
        dir: PathBuf,
        pids: Vec<u32>,
        listing: String,
    },
    #[error("no live process {pid}: expected {path}, {found}")]
    NotRunning {
        pid: u32,
        path: PathBuf,
        found: String,
    },
    #[error("expected a PID, HOST:PORT or an existing state file, found {target:?}{why}")]
    BadTarget { target: String, why: String },
    #[error(
        "no token for {addr}: no registry entry in {dir} has that address; \
         pass --token (the token is in the process's registry file)"
    )]
    NoToken { addr: String, dir: PathBuf },
    #[error("registry entry {path}: expected {expected}, found {found}")]
    Registry {
        path: PathBuf,
        expected: String,
        found: String,
    },
    // `cause`, not `source`: the message already quotes it, and a
    // `source` would be printed a second time by error chains.
    #[error("cannot connect to {addr}: {cause} (has the process ended?)")]
    Connect { addr: String, cause: std::io::Error },
    #[error("{addr} did not accept the token: {reason}; expected the token of its registry entry (or --token)")]
    Rejected { addr: String, reason: String },
    #[error("{origin}: expected a state, the publisher answered {message}")]
    Publisher { origin: String, message: String },
    #[error("process {pid} ended ({how})")]
    Ended { pid: u32, how: String },
    #[error("{origin}: the connection was closed{pid_note}")]
    Closed { origin: String, pid_note: String },
    #[error("{origin}: expected a state at least every {secs} s, none came")]
    Timeout { origin: String, secs: u64 },
    #[error("{what} {origin}: {cause}")]
    Io {
        what: &'static str,
        origin: String,
        cause: std::io::Error,
    },
}

impl LiveError {
    /// The user named something that cannot be a live process, or what
    /// came back is not a state: the command line or the input is wrong
    /// (exit 2 in the CLI), rather than a process or file being
    /// unreachable (exit 1).
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            LiveError::BadState { .. }
                | LiveError::Several { .. }
                | LiveError::BadTarget { .. }
                | LiveError::NoToken { .. }
                | LiveError::Registry { .. }
        )
    }

    /// The publisher went away after states were read: the normal end of
    /// a run being watched, not a failure to reach it.
    pub fn is_end(&self) -> bool {
        matches!(self, LiveError::Ended { .. } | LiveError::Closed { .. })
    }
}

/// Whether process `pid` exists on this machine (a zombie counts: it has
/// not been reaped, and its registry file is still meaningful).
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    #[cfg(unix)]
    {
        let Ok(p) = libc::pid_t::try_from(pid) else {
            return false;
        };
        // Signal 0 checks existence and permission without sending
        // anything; EPERM means it exists but belongs to someone else.
        // SAFETY: kill with signal 0 has no effect on the target.
        let r = unsafe { libc::kill(p, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
    #[cfg(not(unix))]
    {
        // No cheap portable check: assume alive, and let the connection
        // tell when it is not.
        true
    }
}
