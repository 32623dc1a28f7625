//! Analyses of PyTorch memory snapshots.
//!
//! * [`replay`]: which blocks are alive after any event, the peak, blocks
//!   from before the trace window.
//! * [`sites`]: allocation sites (the first frame in the user's code).
//! * [`segments`]: reserved/allocated/active memory and fragmentation.
//! * [`summary`]: all of the above per device, the `vramscope summary` model.
//!
//! ```no_run
//! use vramscope_analysis::{summarize, SummaryOptions};
//! let snap = vramscope_snapshot::load("snap.pickle".as_ref(), &Default::default())?;
//! let s = summarize(&snap, &SummaryOptions::default());
//! for d in &s.devices {
//!     println!("device {}: peak {} bytes", d.device, d.peak.allocated_bytes);
//! }
//! # Ok::<(), vramscope_snapshot::SnapshotError>(())
//! ```

pub mod replay;
pub mod segments;
pub mod sites;
pub mod summary;

pub use replay::{LiveBlock, Replay};
pub use segments::{memory_state, Fragmentation, MemoryState};
pub use sites::Site;
pub use summary::{summarize, CategoryBytes, DeviceSummary, Oom, Peak, Summary, SummaryOptions};
