//! Events a whole trace cannot hold: an `alloc` at an address whose block is
//! still allocated (the block's free is missing), and a `free_completed` of
//! another size than the block allocated at its address.
//!
//! PyTorch's allocator writes neither: a block's address is its own until
//! the block is freed, and a free names the block it frees (a ring buffer
//! that dropped its oldest entries only starts the window later; the
//! frees of blocks from before it have no `alloc`, which is not an
//! inconsistency). A trace with them was edited, merged from two runs or
//! damaged, and every figure walked from it (the peak, what is alive, the
//! leaks) counts the blocks involved twice or not at all. The reader keeps
//! the events as they are and says so, with the first of each.

use crate::hash::FxHashMap;
use crate::model::{Action, DeviceTrace};

/// One line for the file's warnings, or `None` for a consistent trace.
pub(crate) fn warning(t: &DeviceTrace) -> Option<String> {
    let mut open: FxHashMap<u64, u64> = FxHashMap::default();
    let (mut again, mut resized) = (Tally::default(), Tally::default());
    for i in 0..t.len() {
        let (addr, size) = (t.addr[i], t.size[i]);
        // Each guard records the event (the block made or freed) as it
        // tests it.
        match t.action[i] {
            Action::Alloc if open.insert(addr, size).is_some() => again.count(i, addr),
            Action::FreeCompleted if open.remove(&addr).is_some_and(|s| s != size) => {
                resized.count(i, addr)
            }
            _ => {}
        }
    }
    let mut parts = Vec::new();
    if let Some((n, i, addr)) = again.first() {
        parts.push(format!(
            "{n} alloc event(s) at an address whose block is still allocated (the first: event {i}, 0x{addr:x}): \
             the trace lacks those blocks' frees"
        ));
    }
    if let Some((n, i, addr)) = resized.first() {
        parts.push(format!(
            "{n} free event(s) of another size than the block allocated at their address (the first: event {i}, \
             0x{addr:x})"
        ));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "device {}: {}; PyTorch writes neither (the trace was edited, merged or damaged), and the figures walked \
             from it count those blocks as the events say",
            t.device,
            parts.join("; ")
        )
    })
}

/// How many events of one kind, and the first.
#[derive(Default)]
struct Tally {
    n: u64,
    first: Option<(usize, u64)>,
}

impl Tally {
    fn count(&mut self, i: usize, addr: u64) {
        self.n += 1;
        self.first.get_or_insert((i, addr));
    }

    fn first(&self) -> Option<(u64, usize, u64)> {
        self.first.map(|(i, a)| (self.n, i, a))
    }
}
