//! Errors of the snapshot reader: each says what was expected, what was found
//! and where (file, byte offset or key path).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    // The cause is the error's source (printed after it by `{:#}`), not
    // part of its message, so that it does not show twice.
    #[error("cannot read {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(transparent)]
    Pickle(#[from] vramscope_pickle::PickleError),

    #[error("invalid JSON at line {line}, column {column}: {message}")]
    Json {
        line: usize,
        column: usize,
        message: String,
    },

    #[error("{format} data is corrupt: {message}")]
    Decompress {
        format: &'static str,
        message: String,
    },

    #[error("safety limit exceeded: {what} (limit {limit} bytes; raise it with the max-decompressed option if the file is trusted)")]
    Limit { what: String, limit: u64 },

    #[error("not a memory snapshot: {0}")]
    NotASnapshot(String),

    #[error("torch.save archive: {0}")]
    Archive(String),

    #[error("device {device} has no segments or events in the file; devices present: {present:?}")]
    NoSuchDevice { device: u32, present: Vec<u32> },

    #[error("the file has no segments or events on any device")]
    NoDevice,
}
