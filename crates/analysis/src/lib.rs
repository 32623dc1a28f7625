//! Analyses of PyTorch memory snapshots.
//!
//! * [`liveness`]: which blocks are alive after any event, the peak, blocks
//!   from before the trace window.
//! * [`sites`]: allocation sites (the first frame in the user's code), and
//!   [`within`] them the model's modules and lines that made the memory.
//! * [`segments`]: reserved/allocated/active memory and fragmentation.
//! * [`summary`]: all of the above per device, the `vramscope summary` model.
//! * [`iterations`], [`lifetimes`], [`leaks`]: training iterations, block
//!   lifetimes, and memory that grows from one iteration to the next.
//! * [`categories`]: what each block is (parameter, gradient, optimizer
//!   state, activation, …), given by the recorder or the profiler, or inferred.
//! * [`diff()`]: what is alive in one snapshot (or moment) and not in another.
//! * [`optimizers`]: which optimizers ran and the state each keeps.
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

pub mod backward_blocks;
pub mod categories;
pub mod compare;
pub mod diff;
pub mod flame;
pub mod iterations;
pub mod leaks;
pub mod ledger;
pub mod lifetimes;
pub mod limits;
pub mod liveness;
pub mod moment;
pub mod oom;
pub mod optimizers;
pub mod reach;
pub mod segments;
pub mod segments_map;
pub mod setup;
pub mod sharded;
pub mod sites;
pub mod summary;
pub mod within;

pub use categories::{Category, CategoryTotal};
pub use diff::{diff, Diff, DiffGroup, DiffOptions, DiffTotals, SiteDelta, SizeCount};
pub use liveness::{LiveBlock, Liveness};
pub use segments::{memory_state, Fragmentation, MemoryState};
pub use sites::Site;
pub use summary::{summarize, DeviceSummary, Oom, Peak, Summary, SummaryOptions};
