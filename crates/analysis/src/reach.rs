//! How far an answer reaches: the one sentence every "fits" carries.
//!
//! A replay, a projection or a gate speaks for the iterations the file
//! recorded and no further. Where those iterations grew (a sequence length
//! that rises every step, a cache that fills), a later, larger one may need
//! more than any the file holds, and a "fits" that does not say so is
//! read as a promise for the whole run (advise ranked half the batch
//! "fits; projected" for a GPT whose iterations grew ×1.33, and on the GPU
//! it ran out at step 8). Every command that says "fits" (advise, simulate,
//! the report's panels, the limits of `check` and `vramscope.limits`) takes
//! its sentence from [`Reach::sentence`].

use serde::Serialize;
use vramscope_snapshot::{DeviceTrace, Snapshot};

use crate::iterations::find_iterations;
use crate::liveness::{allocated_series, Liveness};
use vramscope_text::units::bytes;

/// Growth below this share between the first and the last recorded
/// iteration's peak is taken for noise, not a trend.
const GROWTH: f64 = 0.05;

/// What the recording covers, for an answer to say how far it holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Reach {
    /// Iterations found (complete or not); 0 when none were.
    pub iterations: u32,
    /// The last iteration the answer covers (the interrupted one where the
    /// recording ends inside it).
    pub last: Option<u32>,
    /// The iteration the recording ends inside, when it does (an OOM, a
    /// dump mid-step).
    pub interrupted: Option<u32>,
    /// The earlier iteration the rest of the interrupted one was projected
    /// from, when it was.
    pub projected_from: Option<u32>,
    /// The first and the last complete iteration's peak allocated bytes,
    /// where the last is more than 5% above the first: (iteration, peak)
    /// each. With three complete iterations or more, the first is the
    /// second (the first is a warm-up: the optimizer's state made by its
    /// step).
    pub grew: Option<((u32, u64), (u32, u64))>,
    /// Where the iterations did not grow but differ (a sequence length that
    /// cycles): the smallest and the largest complete iteration's peak,
    /// more than 5% apart.
    pub varied: Option<((u32, u64), (u32, u64))>,
}

impl Reach {
    /// The clause after "fits": "over the 8 recorded iterations", or up to
    /// which iteration and why a later one may need more.
    pub fn sentence(&self) -> String {
        let Some(last) = self.last else {
            return "for the recorded trace (no iterations were found to say more of the run)"
                .into();
        };
        let upto = match (self.interrupted, self.projected_from) {
            (Some(k), Some(j)) => format!("up to the end of iteration {k}, its rest projected from iteration {j}"),
            (Some(k), None) => format!("up to where the recording ends, inside iteration {k}; the rest of it was not recorded"),
            (None, _) if self.grew.is_none() => {
                let n = format!("over the {} recorded iteration{}", self.iterations, if self.iterations == 1 { "" } else { "s" });
                return match self.varied {
                    Some(((i, a), (k, b))) => format!(
                        "{n}, whose peaks ranged from {} (iteration {i}) to {} (iteration {k}): a later one larger than those may need more",
                        bytes(a),
                        bytes(b)
                    ),
                    None => format!("{n}; later ones doing the same work need the same"),
                };
            }
            (None, _) => format!("up to iteration {last}, the last recorded"),
        };
        match self.grew {
            Some(((i, a), (k, b))) => format!(
                "{upto}; the recorded iterations grew (peak {} in iteration {i}, {} in iteration {k}, ×{:.2}) and later ones were not recorded: a larger one may need more",
                bytes(a),
                bytes(b),
                b as f64 / a.max(1) as f64
            ),
            None => format!("{upto}; later iterations were not recorded"),
        }
    }
}

/// The reach of an answer about `device`'s recording. `interrupted` and
/// `projected_from`: the iteration the recording ends inside and the one
/// its rest was projected from, as the replay's horizon found them.
pub fn reach(
    snap: &Snapshot,
    device: u32,
    interrupted: Option<u32>,
    projected_from: Option<u32>,
) -> Reach {
    let its = find_iterations(snap, device);
    if its.list.is_empty() {
        return Reach::default();
    }
    let empty = DeviceTrace::default();
    let t = snap.trace(device).unwrap_or(&empty);
    let series = allocated_series(&Liveness::new(snap, device), t);
    let peak = |start: usize, end: usize| {
        series
            .get(start..end.min(series.len()))
            .and_then(|s| s.iter().max().copied())
    };
    let complete: Vec<(u32, u64)> = its
        .complete()
        .filter_map(|it| peak(it.start, it.end).map(|p| (it.number, p)))
        .collect();
    // The first iteration is a warm-up where later ones follow it: the
    // optimizer's state made by its step, caches filled once. Its lower
    // peak is no trend (a ResNet's first step under Adadelta read "grew
    // ×1.12" beside 61 iterations of one peak): with three complete
    // iterations or more, the trend is read from the second on.
    let complete = if complete.len() >= 3 {
        &complete[1..]
    } else {
        &complete[..]
    };
    let apart = |a: (u32, u64), b: (u32, u64)| b.1 as f64 > a.1 as f64 * (1.0 + GROWTH);
    let grew = match (complete.first(), complete.last()) {
        (Some(&a), Some(&b)) if b.0 > a.0 && apart(a, b) => Some((a, b)),
        _ => None,
    };
    let least = complete.iter().copied().min_by_key(|c| (c.1, c.0));
    let most = complete
        .iter()
        .copied()
        .max_by_key(|c| (c.1, std::cmp::Reverse(c.0)));
    let varied = match (least, most) {
        (Some(a), Some(b)) if grew.is_none() && apart(a, b) => Some((a, b)),
        _ => None,
    };
    let n = its.list.len() as u32;
    Reach {
        iterations: n,
        last: Some(interrupted.unwrap_or_else(|| its.list.last().map_or(n, |it| it.number))),
        interrupted,
        projected_from,
        grew,
        varied,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sentence_says_how_far_and_why_later_may_need_more() {
        let steady = Reach {
            iterations: 8,
            last: Some(8),
            ..Default::default()
        };
        assert_eq!(
            steady.sentence(),
            "over the 8 recorded iterations; later ones doing the same work need the same"
        );
        let grown = Reach {
            iterations: 4,
            last: Some(4),
            interrupted: Some(4),
            projected_from: Some(3),
            grew: Some(((1, 3 << 30), (3, 4 << 30))),
            varied: None,
        };
        assert_eq!(
            grown.sentence(),
            "up to the end of iteration 4, its rest projected from iteration 3; the recorded iterations grew (peak 3.00 GiB in iteration 1, 4.00 GiB in iteration 3, ×1.33) and later ones were not recorded: a larger one may need more"
        );
        let cut = Reach {
            iterations: 2,
            last: Some(2),
            interrupted: Some(2),
            ..Default::default()
        };
        assert!(cut
            .sentence()
            .starts_with("up to where the recording ends, inside iteration 2"));
        assert!(Reach::default()
            .sentence()
            .contains("no iterations were found"));
        let cycling = Reach {
            iterations: 8,
            last: Some(8),
            varied: Some(((8, 1 << 30), (4, 3 << 30))),
            ..Default::default()
        };
        assert_eq!(
            cycling.sentence(),
            "over the 8 recorded iterations, whose peaks ranged from 1.00 GiB (iteration 8) to 3.00 GiB (iteration 4): a later one larger than those may need more"
        );
    }
}
