//! How to read a file: the options of [`crate::load`] and the progress it
//! reports. A module of its own, so the readers (pickle, JSON, profiler)
//! depend on it and not on `input`, which depends on them.

use std::sync::Arc;

/// Progress of a long load, for progress bars.
#[derive(Clone, Copy, Debug)]
pub struct LoadProgress {
    pub stage: &'static str,
    pub done: u64,
    pub total: u64,
}

/// Options for [`crate::load`] and [`crate::decode_bytes`]. `Default` gives the documented defaults.
#[derive(Clone)]
pub struct LoadOptions {
    /// Cap on decompressed size. Default `None`: the larger of 1 GiB and
    /// 2000 × the compressed size, so a tiny "zip bomb" cannot allocate gigabytes.
    pub max_decompressed_bytes: Option<u64>,
    /// Keep what was parsed from a file that ends early (a process killed
    /// mid-dump), with a warning. Default true.
    pub recover_truncated: bool,
    /// Called during long loads.
    pub progress: Option<Arc<dyn Fn(LoadProgress) + Send + Sync>>,
    /// Threads for decoding large traces. Default `None`: the
    /// `VRAMSCOPE_THREADS` environment variable, else the number of cores.
    pub threads: Option<usize>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            max_decompressed_bytes: None,
            recover_truncated: true,
            progress: None,
            threads: None,
        }
    }
}
