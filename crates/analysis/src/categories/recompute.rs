//! Checkpointed blocks made again inside backward.
//!
//! `torch.utils.checkpoint` runs a block's forward a second time when
//! backward reaches it (non-reentrant: from the saved tensors' `unpack_hook`
//! through `recompute_fn`; reentrant: from `CheckpointFunction.backward`).
//! Its allocations are a forward's by their stacks (the module's call is the
//! innermost frame that names a phase), so the phases of a checkpointed
//! step read forward, backward, forward, backward, ... within one
//! `loss.backward()`. Two questions must see through that:
//!
//! * "freed in the same backward": a block backward makes before a
//!   recomputation and frees after it (the gradient flowing between two
//!   checkpointed blocks) is backward's own working memory, not a gradient
//!   kept after backward;
//! * "a forward starts": a recomputation is not the next iteration's
//!   forward (a batch lives through one forward and its backward).
//!
//! A recomputation is a forward run that comes after a backward run and
//! holds an allocation whose stack has `torch/utils/checkpoint.py`'s
//! recomputation on it.

use vramscope_snapshot::{Action, DeviceTrace, Snapshot, StackId};

use super::Phase;
use crate::sites::frame_location;

/// Which runs of a device's phases are recomputations, and which runs
/// belong to one backward.
#[derive(Debug, Default)]
pub(super) struct Recomputations {
    /// The recomputations' run numbers, ascending.
    runs: Vec<u32>,
    /// Per run: how many runs up to it end a backward (neither backward
    /// nor a recomputation). Two backward events are in the same backward
    /// where their runs have the same count.
    pass: Vec<u32>,
}

impl Recomputations {
    /// `phase` and `run` per event, as [`super::Phases`] has them.
    pub(super) fn new(snap: &Snapshot, t: &DeviceTrace, phase: &[Phase], run: &[u32]) -> Self {
        let n = phase.len();
        let runs_total = run.last().map_or(0, |&r| r as usize + 1);
        let mut first_of_run = Vec::with_capacity(runs_total);
        for i in 0..n {
            if i == 0 || run[i] != run[i - 1] {
                first_of_run.push(i);
            }
        }
        // A slot per stack, made at the first forward run after a backward.
        let mut cache: Vec<u8> = Vec::new();
        let mut runs = Vec::new();
        for (r, &a) in first_of_run.iter().enumerate() {
            if phase[a] != Phase::Forward || r == 0 || phase[first_of_run[r - 1]] != Phase::Backward
            {
                continue;
            }
            let z = first_of_run.get(r + 1).copied().unwrap_or(n);
            if cache.is_empty() {
                cache = vec![UNSEEN; snap.stacks.len()];
            }
            let recomputed = (a..z)
                .any(|i| t.action[i] == Action::Alloc && recomputing(snap, t.stack[i], &mut cache));
            if recomputed {
                runs.push(r as u32);
            }
        }
        let mut pass = Vec::with_capacity(first_of_run.len());
        let mut count = 0u32;
        for (r, &a) in first_of_run.iter().enumerate() {
            if phase[a] != Phase::Backward && runs.binary_search(&(r as u32)).is_err() {
                count += 1;
            }
            pass.push(count);
        }
        Recomputations { runs, pass }
    }

    /// Whether run `r` is a recomputation.
    pub(super) fn is_recomputation(&self, r: u32) -> bool {
        self.runs.binary_search(&r).is_ok()
    }

    /// Whether runs `a` and `b` lie in one backward, with nothing between
    /// them but backward and recomputations.
    pub(super) fn same_pass(&self, a: u32, b: u32) -> bool {
        self.pass.get(a as usize).is_some()
            && self.pass.get(a as usize) == self.pass.get(b as usize)
    }

    /// Whether there are any.
    pub(super) fn any(&self) -> bool {
        !self.runs.is_empty()
    }
}

const UNSEEN: u8 = u8::MAX;

/// Whether stack `s` runs in `torch.utils.checkpoint`'s recomputation,
/// cached per stack.
fn recomputing(snap: &Snapshot, s: StackId, cache: &mut [u8]) -> bool {
    let Some(slot) = cache.get_mut(s.0 as usize).filter(|_| !s.is_none()) else {
        return false;
    };
    if *slot == UNSEEN {
        *slot = recomputes(snap, s) as u8;
    }
    *slot == 1
}

/// Whether stack `s` runs in `torch.utils.checkpoint`'s recomputation of a
/// block's forward (`unpack_hook`, `recompute_fn`; reentrant:
/// `CheckpointFunction.backward`), which backward makes.
pub fn recomputes(snap: &Snapshot, s: StackId) -> bool {
    !s.is_none()
        && snap.stacks.get(s).iter().any(|&f| {
            let (file, _, name) = frame_location(snap, snap.frames.get(f));
            matches!(name.as_str(), "unpack_hook" | "recompute_fn" | "backward")
                && file
                    .replace('\\', "/")
                    .ends_with("torch/utils/checkpoint.py")
        })
}
