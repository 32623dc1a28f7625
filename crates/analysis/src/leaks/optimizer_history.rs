//! L-BFGS's history, which grows for its first `history_size` evaluations
//! and then stays: not a leak.
//!
//! Recorded for a few iterations, `torch.optim.LBFGS` adds two vectors the
//! size of all parameters per evaluation of the closure to its state
//! (`optimizer.state[...]["old_dirs"]`, `["old_stps"]`), and a growth
//! series read alone calls that a leak held by the optimizer, with the fix
//! "do not keep tensors in `optimizer.state`". The history is found by
//! `optimizers::lbfgs`; the sites whose growth it explains (what is left
//! once its blocks are taken out does not grow steadily) are this
//! finding's, benign, with what the history holds when full and how to
//! make it smaller. Checked on pytorch/examples' `time_sequence_prediction`
//! (LBFGS, history_size 100): 5 steps grow 9.85 MiB each, 10 stay at
//! 49.76 MiB from the fifth on.

use vramscope_snapshot::hash::FxHashMap as HashMap;
use vramscope_snapshot::hash::FxHashSet as HashSet;

use super::explain::evidence_list;
use super::findings::{Context, SiteSeries};
use super::series::{shape, Shape};
use super::source::Sources;
use super::{Finding, FindingKind, Severity};
use crate::optimizers::lbfgs::LbfgsHistory;
use vramscope_text::units::bytes;

/// The history and the sites it explains.
pub(super) struct HistoryHeld {
    history: LbfgsHistory,
    /// Site → bytes of the history alive at the end of the last complete
    /// iteration.
    pub by_site: HashMap<u32, u64>,
    /// Pairs alive at the end of the last complete iteration, and most
    /// alive at once.
    pairs_at_end: u64,
    most: usize,
}

/// `None` where no L-BFGS history is in the trace, or it explains no
/// site's growth.
pub(super) fn scan(ctx: &Context, series: &SiteSeries) -> Option<HistoryHeld> {
    let l = ctx.lifetimes;
    let history = LbfgsHistory::find(ctx.snap, l)?;
    let n = ctx.complete as usize;
    let bi = ctx.block_iterations;
    // The history's bytes per site at iteration ends, as `site_series`
    // counts them (born by the end of k, not dead by it).
    let mut per_site: HashMap<u32, Vec<i64>> = HashMap::default();
    for b in history.blocks().chain(history.scalars.iter().copied()) {
        let (born, died) = (bi.born[b] as usize, bi.died[b] as usize);
        let s = per_site
            .entry(ctx.sites.of_block[b])
            .or_insert_with(|| vec![0; n + 1]);
        for x in s.iter_mut().take(died.min(n + 1)).skip(born) {
            *x += l.size[b] as i64;
        }
    }
    let mut by_site = HashMap::default();
    for (site, h) in per_site {
        let s = series.get(site);
        if s.len() != h.len() {
            continue;
        }
        let rest: Vec<i64> = s.iter().zip(&h).map(|(a, b)| a - b).collect();
        if !matches!(
            shape(&rest, ctx.opts.min_growth_per_iteration),
            Shape::Steady { .. }
        ) {
            by_site.insert(site, h.last().copied().unwrap_or(0).max(0) as u64);
        }
    }
    if by_site.is_empty() {
        return None;
    }
    let end = ctx
        .iterations
        .iter()
        .rfind(|i| i.range.complete)
        .map(|i| i.range.end.saturating_sub(1) as u32);
    let pairs_at_end = end.map_or(0, |e| {
        history
            .pairs
            .iter()
            .filter(|p| p.first().is_some_and(|&b| l.alive_after(b, e)))
            .count() as u64
    });
    let most = history.most_alive(l);
    Some(HistoryHeld {
        history,
        by_site,
        pairs_at_end,
        most,
    })
}

impl HistoryHeld {
    pub(super) fn sites(&self) -> HashSet<u32> {
        self.by_site.keys().copied().collect()
    }
}

/// The history's finding: how much it holds, whether it is full, and
/// `history_size`.
pub(super) fn finding(
    ctx: &Context,
    h: &HistoryHeld,
    series: &SiteSeries,
    src: &mut Sources,
) -> Finding {
    let hist = &h.history;
    let mut sites: Vec<(u32, f64)> = h.by_site.iter().map(|(&s, &b)| (s, b as f64)).collect();
    sites.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    let size = hist.history_size;
    let vector = hist.pair_bytes / hist.lines.len().max(1) as u64;
    let held = h.pairs_at_end * hist.pair_bytes;
    let full = h.most as u64 >= size;
    let size_said = if hist.recorded_size {
        format!("history_size={size}")
    } else {
        format!("history_size={size}, PyTorch's default (the recording does not say)")
    };
    let state = if full {
        format!(
            "it reached {size} pairs in this recording and stayed there: {} at the end of the last iteration",
            bytes(held)
        )
    } else {
        format!(
            "{} pairs ({}) at the end of the last iteration; it stops growing at {size} pairs ({})",
            h.pairs_at_end,
            bytes(held),
            bytes(hist.full_bytes())
        )
    };
    let smaller = 10.min(size.saturating_sub(1)).max(1);
    let number = ctx
        .iterations
        .iter()
        .rfind(|i| i.range.complete)
        .map_or(0, |i| i.range.number);
    Finding {
        kind: FindingKind::OptimizerHistory,
        severity: Severity::Benign,
        title: format!(
            "L-BFGS's history: {} pairs of vectors the size of all parameters, bounded by history_size={size}",
            h.pairs_at_end
        ),
        explanation: format!(
            "torch.optim.LBFGS ({size_said}) stores two vectors the size of all parameters ({} each, the \
             directions `old_dirs` and steps `old_stps` in `optimizer.state`) at each evaluation of the closure, \
             across step() calls, and drops the oldest pair once it holds {size}: it grows for its first {size} \
             evaluations and then stays. {}.",
            bytes(vector),
            capitalized(&state)
        ),
        fix: format!(
            "Nothing to fix: it is bounded. To keep less, `torch.optim.LBFGS(params, history_size={smaller})` \
             holds {} (fewer pairs approximate the curvature less well: more evaluations to converge); `vramscope \
             advise` replays it.",
            bytes(smaller * hist.pair_bytes)
        ),
        bytes_per_iteration: 0.0,
        bytes: held,
        iterations: (1, number),
        sites: evidence_list(ctx, &sites, (false, false), series, src),
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}
