//! A model of PyTorch's CUDA caching allocator, to replay a recorded trace
//! under other settings ("would it fit with `expandable_segments`?").
//!
//! ```
//! use vramscope_simulate::{Allocator, Settings};
//! let mut a = Allocator::new(Settings::default(), None);
//! let p = a.malloc(1000, 0).unwrap();
//! a.free(p);
//! assert_eq!(a.reserved, 2 << 20); // one small segment, cached
//! ```
//!
//! [`fn@replay`] runs a snapshot's trace through the model and compares the
//! segment events and the reserved curve with the recorded ones.

mod answer;
pub mod edits;
pub mod error;
mod expandable;
pub mod fit;
pub mod gpus;
pub mod horizon;
pub mod limit;
mod model;
pub mod must_go;
pub mod pools;
mod release;
pub mod replay;
mod seed;
pub mod settings;
pub mod simulate;
mod start;

pub use error::SimulateError;
pub use fit::{fit, Fit, FitOptions, Verdict};
pub use model::{Allocator, OutOfMemory, SegmentEvent};
pub use must_go::{GoneSite, MustGo};
pub use replay::{replay, ReplaySetup, Replayed};
pub use settings::{SettingError, Settings};
pub use simulate::{
    modelled, page_sweep, simulate, Projected, RecordedOom, Run, SimulateOptions, Simulation,
    PAGE_SWEEP_FULL_BELOW, PAGE_SWEEP_LONG, SWEEP,
};
