//! The errors of a simulation: a setting or a program change that cannot
//! be applied.

use crate::settings::SettingError;

#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error(transparent)]
    Setting(#[from] SettingError),
    /// A `--drop`/`--free-early`/`--scale` site that matches nothing.
    #[error(transparent)]
    Site(#[from] crate::edits::UnknownSite),
    /// A file the model does not describe (a CPU recording, a profiler trace).
    #[error("{0}")]
    NotCudaTrace(String),
    /// A GPU named by something that gives no memory size.
    #[error("--gpu: {0}")]
    Gpu(String),
    /// A change written wrongly (`--scale SITE` without `=FACTOR`).
    #[error("program change: {0}")]
    Change(String),
    /// A device the file does not have, or a file with none
    /// ([`vramscope_snapshot::Snapshot::pick_device`]).
    #[error(transparent)]
    Device(#[from] vramscope_snapshot::SnapshotError),
    /// `--ranks` below 2: nothing to shard over.
    #[error("--ranks: expected 2 ranks or more to shard over, found {0}")]
    Ranks(u32),
}
