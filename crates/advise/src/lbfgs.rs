//! L-BFGS with a shorter history: `history_size=10` where the program's
//! `torch.optim.LBFGS` keeps more pairs (100 by default).
//!
//! The history's pairs are `optimizers::lbfgs`'s; with a history of `h`
//! pairs, each pair is dropped as the pair `h` after it is stored
//! (`lbfgs.py`: `old_dirs.pop(0)` once `len(old_dirs) == history_size`),
//! so the replay frees each recorded pair right after the one `h` later is
//! made. The 0-d tensors kept beside them (`ro`, `al`: one each per pair)
//! stay as recorded: at most `2 × (history_size - h)` blocks of 512 bytes
//! on CUDA too many. Ten is SciPy's L-BFGS-B default (`maxcor`); fewer
//! pairs approximate the curvature less well, so the row says what it
//! costs. Checked against the program run with `history_size=10`
//! (`python/tests/test_lbfgs.py`).

use vramscope_analysis::categories::Labelled;
use vramscope_analysis::optimizers::lbfgs::LbfgsHistory;
use vramscope_simulate::edits::{for_blocks, ChangeKind};
use vramscope_simulate::settings::Settings;
use vramscope_snapshot::Snapshot;
use vramscope_text::units::bytes;

use super::{refuse, Candidate, ChangeClass, Method, NotOffered};

/// The shorter history the row replays.
pub(super) const SHORTER: u64 = 10;

pub(super) fn shorter_history_candidate(
    snap: &Snapshot,
    device: u32,
    labelled: &Labelled,
    recorded: &Settings,
    not_offered: &mut Vec<NotOffered>,
) -> Option<Candidate> {
    let l = &labelled.lifetimes;
    let h = LbfgsHistory::find(snap, l)?;
    let size = h.history_size;
    if size <= SHORTER {
        return refuse(
            not_offered,
            "L-BFGS with a shorter history",
            format!("its history_size is {size} already"),
        );
    }
    let freed = h.shortened(l, SHORTER as usize);
    let edits: Vec<(usize, ChangeKind)> = freed
        .iter()
        .map(|&(b, at)| (b, ChangeKind::FreeAfter(at)))
        .collect();
    let size_said = if h.recorded_size {
        format!("{size}")
    } else {
        format!("{size}, PyTorch's default")
    };
    Some(Candidate {
        class: ChangeClass::ShorterHistory,
        change: format!("L-BFGS with a shorter history (history_size={SHORTER}, from {size_said})"),
        code: format!(
            "optimizer = torch.optim.LBFGS(model.parameters(), lr=lr, history_size={SHORTER})  # the other \
             settings as now; fewer pairs approximate the curvature less well: more evaluations to converge"
        ),
        settings: recorded.clone(),
        method: Method::Replayed,
        edits: Some(for_blocks(snap, device, l, &edits, "L-BFGS history")),
        how: format!(
            "replayed with L-BFGS keeping {SHORTER} pairs of vectors ({} each pair) instead of {size}: of the {} \
             pairs the recording stored, each freed right after the pair {SHORTER} later was made, as \
             `old_dirs.pop(0)` does ({} blocks); its 0-d tensors (`ro`, `al`) as recorded",
            bytes(h.pair_bytes),
            h.pairs.len(),
            freed.len()
        ),
    })
}
