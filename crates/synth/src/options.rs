//! What to generate: [`SynthOptions`] and its defaults.

use crate::SynthError;

/// Which frames the allocation stacks hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StackKind {
    /// Python frames only (`_record_memory_history(stacks="python")`):
    /// about 15 to 30 frames per forward allocation, from the user's
    /// `train.py`/`model.py` through `torch/nn/modules` and other
    /// `site-packages`; backward allocations carry the `loss.backward()`
    /// stack.
    #[default]
    Python,
    /// C++ and Python frames (`stacks="all"`): about 40 to 70 frames, from
    /// `torch::unwind::unwind()` (file `"??"`) through the dispatcher and the
    /// CPython interpreter, with the Python frames interleaved; backward
    /// allocations show the autograd engine thread.
    Cpp,
}

/// Options of [`write_snapshot`](crate::write_snapshot). Every field has a
/// default (see [`SynthOptions::default`]); struct update syntax is the
/// intended way to set a few:
///
/// ```
/// let opts = vramscope_synth::SynthOptions { entries: 5_000, seed: 7, ..Default::default() };
/// assert_eq!(opts.iterations, 10);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SynthOptions {
    /// Trace entries recorded on device 0 (default 100_000). This is the
    /// length of the simulated run; the trace holds exactly this many
    /// entries, or the last `max_entries_window` of them. With `oom` it may
    /// fall a few entries short, as the cache release before the `oom`
    /// entry only frees what is free at that moment.
    pub entries: u64,
    /// Seed of the deterministic generator (default 1): the same options
    /// give the same bytes.
    pub seed: u64,
    /// Frames recorded per stack (default [`StackKind::Python`]).
    pub stacks: StackKind,
    /// Training iterations (optimizer steps) the run is sized for
    /// (default 10). Model depth and gradient-accumulation steps are chosen
    /// so that this many iterations fill `entries`; the snapshot is taken
    /// when the entries are used up, usually during the last iteration.
    pub iterations: u32,
    /// Bytes leaked per iteration (default 0 = no leak): one tensor of this
    /// size is allocated each iteration from `train.py`, function
    /// `accumulate_history`, and never freed.
    pub leak_bytes_per_iter: u64,
    /// Devices (default 1). Devices after 0 get their own, smaller traces
    /// (a quarter of `entries`) and segments.
    pub devices: u32,
    /// Pickle protocol, 2 to 5 (default 4, what `pickle.dump` uses on
    /// Python 3.8 to 3.13).
    pub protocol: u8,
    /// Whether trace entries carry `time_us` (default true).
    pub with_time: bool,
    /// End the trace with an out-of-memory error (default false): cached
    /// segments are released (`segment_free`, or `segment_unmap`), then an
    /// `oom` entry records a request larger than the free device memory.
    pub oom: bool,
    /// Simulate `expandable_segments:True` (default false): one growing
    /// segment per pool, extended with `segment_map` instead of
    /// `segment_alloc`.
    pub expandable_segments: bool,
    /// Write `external_annotations` with `ProfilerStep#N` START/END per
    /// iteration (default true); when false the key is absent.
    pub annotations: bool,
    /// Emulate the recorder's ring buffer (`max_entries`), default `None`:
    /// keep only the last this-many entries, so the trace starts mid-run and
    /// blocks allocated before it are alive without an `alloc` entry.
    pub max_entries_window: Option<u64>,
    /// Write the odd values real producers have been seen to write (default
    /// false): the first four frame dicts carry `line` = `2**64 - 1` (a C++
    /// `-1` written unsigned, as `torch.compile`'s fake-tensor frames do),
    /// `-1`, `2**70` and `None`; the first free block's `state` is a string
    /// no PyTorch version writes; and device 0's trace ends with one more
    /// entry whose `action` is unknown. Everything else is as without it, so
    /// a tolerant reader finds the same counts and peak.
    pub odd_values: bool,
}

impl Default for SynthOptions {
    fn default() -> Self {
        SynthOptions {
            entries: 100_000,
            seed: 1,
            stacks: StackKind::Python,
            iterations: 10,
            leak_bytes_per_iter: 0,
            devices: 1,
            protocol: 4,
            with_time: true,
            oom: false,
            expandable_segments: false,
            annotations: true,
            max_entries_window: None,
            odd_values: false,
        }
    }
}

/// Upper bounds that keep a request within what the simulation models.
const MAX_ENTRIES: u64 = 1 << 40;
const MAX_DEVICES: u32 = 64;
const MAX_LEAK: u64 = 64 << 30;

impl SynthOptions {
    /// Checks every field; the error says what was expected and found.
    pub fn validate(&self) -> Result<(), SynthError> {
        let bad = |what: &str, found: String| {
            Err(SynthError::InvalidOptions(format!("{what}, found {found}")))
        };
        if self.entries == 0 || self.entries > MAX_ENTRIES {
            return bad("entries must be 1 to 2^40", self.entries.to_string());
        }
        if self.iterations == 0 {
            return bad("iterations must be at least 1", "0".into());
        }
        if self.devices == 0 || self.devices > MAX_DEVICES {
            return bad("devices must be 1 to 64", self.devices.to_string());
        }
        if !(2..=5).contains(&self.protocol) {
            return bad("protocol must be 2 to 5", self.protocol.to_string());
        }
        if self.leak_bytes_per_iter > MAX_LEAK {
            return bad(
                "leak_bytes_per_iter must be at most 64 GiB",
                self.leak_bytes_per_iter.to_string(),
            );
        }
        if self.max_entries_window == Some(0) {
            return bad("max_entries_window must be at least 1 when set", "0".into());
        }
        Ok(())
    }

    /// Entries of device `device`'s run: `entries` for device 0, a quarter
    /// of it (at least 100) for the others.
    pub(crate) fn device_entries(&self, device: u32) -> u64 {
        if device == 0 {
            self.entries
        } else {
            (self.entries / 4).max(100).min(self.entries)
        }
    }

    /// Seed of device `device`'s simulation.
    pub(crate) fn device_seed(&self, device: u32) -> u64 {
        self.seed ^ (device as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
}
