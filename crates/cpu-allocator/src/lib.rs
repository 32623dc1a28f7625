//! Every allocation of PyTorch's CPU allocator, seen where it happens.
//!
//! c10's default CPU allocator gets its memory from `posix_memalign` and
//! returns it with `free`, both called through `libc10.so`'s global offset
//! table. [`install`] points those two slots of that one library at hooks
//! (the technique of memray's symbol patching, applied to one library): the
//! rest of the process is untouched, and while no recording runs a hook costs
//! one atomic load. While one runs ([`start`]) each allocation becomes an
//! [`Event`] with its address, size, wall-clock time and thread; each free of
//! a block it saw (or [`adopt`]ed) becomes one too. Kernels' scratch space
//! (oneDNN's buffers inside a convolution) is included: it comes from the
//! same allocator.
//!
//! Stacks are the caller's business: [`mark`] before a call, [`stamp`] after
//! it gives the allocations the call made on this thread a stack id.
//!
//! ```no_run
//! vramscope_cpu_allocator::install().expect("libc10 is loaded");
//! vramscope_cpu_allocator::start(100_000);
//! let m = vramscope_cpu_allocator::mark();
//! // ... run a PyTorch operator ...
//! vramscope_cpu_allocator::stamp(m, 7);
//! let events = vramscope_cpu_allocator::events();
//! vramscope_cpu_allocator::stop();
//! # let _ = events;
//! ```
//!
//! Linux only (ELF, glibc); elsewhere [`install`] returns
//! [`HookError::Unsupported`].

mod events;
#[cfg(target_os = "linux")]
mod got;
mod trace;

pub use events::{
    adopt, events, live, mark, recording, set_limit, stamp, start, stop, totals, Event, EventKind,
    Totals, NO_STACK,
};
pub use trace::{entries, TraceEntry};

/// Why the hooks could not be installed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum HookError {
    #[error("no loaded library named {0} (import torch first)")]
    LibraryNotLoaded(String),
    #[error("{library} imports neither posix_memalign nor free through its GOT: found {found}")]
    NoSlots { library: String, found: String },
    #[error("could not make the GOT page at {addr:#x} writable: {reason}")]
    Protect { addr: usize, reason: String },
    #[error("{0} is not in this C library")]
    NoSymbol(&'static str),
    #[error("CPU allocator hooks need Linux (ELF); this is {0}")]
    Unsupported(&'static str),
}

/// Point libc10's `posix_memalign` and `free` slots at the hooks (once per
/// process; later calls return the first result). Returns the number of
/// slots patched.
pub fn install() -> Result<usize, HookError> {
    #[cfg(target_os = "linux")]
    {
        got::install_once("libc10.so")
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(HookError::Unsupported(std::env::consts::OS))
    }
}
