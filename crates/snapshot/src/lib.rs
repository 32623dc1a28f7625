//! PyTorch memory snapshots, decoded into interned, columnar tables.
//!
//! [`load`] reads any snapshot PyTorch has written — the dict layout of 2.1
//! to today, the legacy 2.0 layout, a bare list of segments, JSON, gzip or
//! zstd, `torch.save` archives — without executing anything in the file.
//! PyTorch profiler traces with `[memory]` events and the Memory Profiler's
//! `export_memory_timeline` output are read into the same model.
//! Strings, frames and stacks are interned to `u32` ids ([`StrId`],
//! [`FrameId`], [`StackId`]); each device's events are columns
//! ([`DeviceTrace`]).
//!
//! ```no_run
//! use vramscope_snapshot::{load, LoadOptions};
//! let snap = load("snapshot.pickle".as_ref(), &LoadOptions::default())?;
//! for d in snap.devices() {
//!     let n = snap.trace(d).map_or(0, |t| t.len());
//!     println!("device {d}: {n} events, {} segments", snap.segments_of(d).count());
//! }
//! # Ok::<(), vramscope_snapshot::SnapshotError>(())
//! ```

mod children;
mod consistency;
mod decode;
mod error;
mod generated;
pub use vramscope_pickle::hash;
mod input;
mod intern;
mod json;
mod keys;
mod model;
mod options;
mod profiler;
mod recorder;
mod repair;
mod uncached;
mod zip;

pub use children::ChildProcess;
pub use error::SnapshotError;
pub use input::{decode_bytes, load};
pub use intern::{Frame, FrameId, FrameTable, StackId, StackTable, StrId, StringTable};
pub use model::*;
pub use options::{LoadOptions, LoadProgress};
pub use recorder::{
    DeviceCounter, DeviceFacts, GeneratedCode, Holder, HolderScan, HostPinned, ModuleCode,
    NvmlUsage, OomSeen, OptimizerInfo, ParameterGroup, RecorderInfo, RecorderKind, Upcast,
};
pub use repair::Repair;
