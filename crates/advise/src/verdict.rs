//! Judging a change: its replay's verdict (fits, runs out, cannot tell),
//! the ranking of the answers against the run as recorded, and the one
//! sentence that sums them up.

use vramscope_snapshot::Snapshot;

use super::{Advice, Candidate, ChangeClass, Method};
use vramscope_simulate::replay::ReplaySetup;
use vramscope_simulate::simulate::{run_once, Simulation};

/// How far over the capacity a bound's peak allocated must be to say "does
/// not fit": in bf16 PyTorch's attention runs FlashAttention, which keeps
/// less than half of what the fp32 kernel kept (9% less than half on the
/// H200's GPT, 31 MiB of its 2.1 GiB bound), which the bound does not model.
pub(super) const BOUND_MARGIN: f64 = 0.05;

impl Candidate {
    /// Whether its replay frees what the graphs of evaluation passes keep
    /// (`no_grad::Graphs`).
    fn frees_graphs(&self) -> bool {
        self.edits.as_ref().is_some_and(|e| {
            e.matched
                .iter()
                .any(|m| m.change.site == super::no_grad::GRAPHS)
        })
    }

    /// Its answer with the figures its evaluation found (saving: 0 until
    /// ranked); a rule's answer stays a rule's, projected or not, and a
    /// bound's: the least the peak can be fitting says nothing of the rest,
    /// and it allocating no more than [`BOUND_MARGIN`] over the capacity is
    /// within what a kernel keeping less in 16-bit can take off.
    pub(super) fn answer(
        &self,
        peaks: (u64, u64),
        capacity: Option<u64>,
        fits: Option<bool>,
        method: Method,
        mut how: String,
    ) -> Advice {
        let fits = match (self.method, fits) {
            (Method::Bound, Some(true)) => {
                how.push_str(
                    "; the least it can need fits, which does not say that the change does",
                );
                None
            }
            // Judged by allocated bytes: a replay that runs out reserves
            // what its caching happened to, not the least it needs.
            (Method::Bound, Some(false))
                if capacity
                    .is_some_and(|c| (peaks.1 as f64) <= c as f64 * (1.0 + BOUND_MARGIN)) =>
            {
                how.push_str(
                    "; the least it can need runs out, but its allocated bytes are within 5% of the capacity, which \
                     a kernel keeping less than half in 16-bit, or smaller blocks packed closer, can take off: cannot \
                     tell",
                );
                None
            }
            // Freeing what evaluation graphs keep, the replay frees a
            // tensor a forward binds to a local of its own (kept until it
            // returns) once the next is made: up to 2.3% under the real
            // peak where it is in the pass (the word language model's
            // LSTM, evaluating on 80): so close to the capacity, a fit is
            // not told.
            (_, Some(true))
                if self.frees_graphs()
                    && capacity
                        .is_some_and(|c| (peaks.0 as f64) > c as f64 * (1.0 - BOUND_MARGIN)) =>
            {
                how.push_str(
                    "; it fits by less than 5%, and where the peak is in an evaluation pass the tensors a forward \
                     keeps in its own variables until it returns can take that (the replay frees each once the next \
                     is made): cannot tell",
                );
                None
            }
            // The other way: the replay keeps what each kernel saved for
            // backward, which some do not make at all under no_grad
            // (pytorch/examples' MNIST RNN testing on 1,000: the CPU
            // LSTM's 107 MiB workspace; 111.81 MiB replayed, 43.99
            // measured). Running out here says nothing.
            (_, Some(false)) if self.frees_graphs() => {
                how.push_str(
                    "; it runs out as replayed, but the replay keeps what each kernel saved for backward, which \
                     some kernels do not make at all without autograd (an LSTM's workspace), so it can need less: \
                     cannot tell",
                );
                None
            }
            _ => fits,
        };
        let (acts_on_blocks, acts_on_bytes) = self.edits.as_ref().map_or((0, 0), |e| {
            e.matched
                .iter()
                .fold((0, 0), |(n, b), m| (n + m.blocks, b + m.bytes))
        });
        Advice {
            class: self.class,
            change: self.change.clone(),
            code: self.code.clone(),
            acts_on_bytes,
            acts_on_blocks,
            peak_reserved: peaks.0,
            peak_allocated: peaks.1,
            saving: 0,
            fits,
            method: match self.method {
                Method::Rule | Method::Bound => self.method,
                _ => method,
            },
            how,
        }
    }
}

/// Each answer's saving against the baseline; those that matter, best
/// first: those that fit, then those that cannot be told, then the
/// others, each by predicted peak, a bound after the predictions beside it
/// (the least a change can need is not what it needs).
pub(super) fn rank(
    baseline: (Advice, u64),
    evaluated: Vec<(Advice, u64)>,
) -> (Advice, Vec<Advice>, Vec<Advice>) {
    let (mut baseline, base_peak) = baseline;
    baseline.saving = 0;
    // A change that saves nothing and changes no verdict is not advice;
    // but a leak is kept whatever the recording shows it saving: it grows
    // with every iteration past the end of the recording. Nothing is a
    // saving up to a thousandth of the peak: FSDP on pytorch/examples'
    // MNIST, whose peak is its test loop's, saved 16 bytes of 112 MiB and
    // was listed fourth, as if sharding the model over two ranks lowered it.
    let negligible = base_peak / 1000;
    let (mut advice, mut no_gain): (Vec<Advice>, Vec<Advice>) = evaluated
        .into_iter()
        .map(|(mut a, peak)| {
            a.saving = base_peak as i64 - peak as i64;
            a
        })
        .partition(|a| {
            a.saving > negligible as i64
                || a.class == ChangeClass::FixLeak
                || (a.fits == Some(true) && baseline.fits != Some(true))
        });
    advice.sort_by_key(|a| {
        let rank = match a.fits {
            Some(true) => 0,
            None => 1,
            Some(false) => 2,
        };
        (rank, a.method == Method::Bound, a.peak_reserved)
    });
    no_gain.sort_by_key(|a| a.peak_reserved);
    (baseline, advice, no_gain)
}

/// Replay one candidate; its answer and the peak its saving is measured on.
pub(super) fn evaluate(snap: &Snapshot, sim: &Simulation, c: &Candidate) -> (Advice, u64) {
    let tail = sim.horizon.as_ref().and_then(|h| h.tail.as_ref());
    let cut_by_oom = sim.recorded_oom.is_some();
    let setup = |capacity| ReplaySetup {
        capacity,
        edits: c.edits.as_ref(),
        cold_start: true,
        ..Default::default()
    };
    let (replayed, projection) = run_once(snap, sim.device, &c.settings, setup(sim.capacity), tail);
    let mut how = c.how.clone();
    let (peak_reserved, peak_allocated, fits, method) = match (&replayed.oom, &projection) {
        (None, Some(p)) => {
            how.push_str(
                ", then through the rest of the interrupted iteration as an earlier one ran",
            );
            // Blocks the change makes beside the recorded ones (FSDP's
            // gathers) are placed on recorded entries, not carried into the
            // projection: the rest could need more than it shows.
            let adds = c.edits.as_ref().is_some_and(|e| !e.extra_after.is_empty());
            let fits = match adds {
                true if p.oom.is_none() => {
                    how.push_str(
                        "; what the change makes beside the recorded blocks is not projected, so whether the rest \
                         fits cannot be told",
                    );
                    None
                }
                _ => Some(p.oom.is_none()),
            };
            (p.peak_reserved, p.peak_allocated, fits, Method::Projected)
        }
        (None, None) => {
            let fits = match (sim.capacity, cut_by_oom) {
                (None, _) => None,
                // Served where the recording stopped, and nothing to say
                // how the rest of the iteration would have gone.
                (Some(_), true) => {
                    how.push_str(
                        "; the recording ends at the out-of-memory error and no earlier iteration shows the rest, \
                         so whether the rest fits cannot be told",
                    );
                    None
                }
                (Some(_), false) => Some(true),
            };
            (
                replayed.simulated_peak_reserved,
                replayed.simulated_peak_allocated,
                fits,
                Method::Replayed,
            )
        }
        (Some(_), _) => {
            // It runs out: its peak without a limit, to rank it.
            let (free, _) = run_once(snap, sim.device, &c.settings, setup(None), None);
            (
                free.simulated_peak_reserved,
                free.simulated_peak_allocated,
                Some(false),
                Method::Replayed,
            )
        }
    };
    let advice = c.answer(
        (peak_reserved, peak_allocated),
        sim.capacity,
        fits,
        method,
        how,
    );
    (advice, peak_reserved)
}

/// The one sentence at the top.
pub(super) fn answer(
    baseline: &Advice,
    advice: &[Advice],
    capacity: Option<u64>,
    peak: &str,
) -> String {
    use vramscope_text::units::bytes;
    // The best prediction; a bound only where nothing else lowers the peak.
    let Some(best) = advice
        .iter()
        .find(|a| a.method != Method::Bound)
        .or(advice.first())
    else {
        return "No change tried lowers the peak of this run.".into();
    };
    let fitting = advice.iter().filter(|a| a.fits == Some(true)).count();
    match (capacity, baseline.fits) {
        (Some(c), Some(true)) => format!(
            "It fits in {} as recorded; the change that lowers the peak most is {}: {} {peak} ({} less, {}).",
            bytes(c),
            best.change,
            bytes(best.peak_reserved),
            bytes(best.saving.max(0) as u64),
            best.method.as_str()
        ),
        (Some(c), _) if fitting > 0 => format!(
            "{fitting} of {} changes make it fit in {}; the best is {}: {} {peak} ({}).",
            advice.len(),
            bytes(c),
            best.change,
            bytes(best.peak_reserved),
            best.method.as_str()
        ),
        (Some(c), _) if best.fits.is_none() => format!(
            "No change tried is shown to fit in {}: {} serve{} the failing request, but the recording ends there and \
             whether the rest of the run fits cannot be told; the lowest peak is with {}: {} ({}).",
            bytes(c),
            advice.iter().filter(|a| a.fits.is_none()).count(),
            if advice.iter().filter(|a| a.fits.is_none()).count() == 1 { "s" } else { "" },
            best.change,
            bytes(best.peak_reserved),
            best.method.as_str()
        ),
        (Some(c), _) => format!(
            "None of the {} changes tried fits in {}; the lowest need is with {}: {} {peak} without a limit ({}).",
            advice.len(),
            bytes(c),
            best.change,
            bytes(best.peak_reserved),
            best.method.as_str()
        ),
        (None, _) => format!(
            "The change that lowers the peak most is {}: {} {peak} ({} less, {}); give --capacity to know \
             what fits.",
            best.change,
            bytes(best.peak_reserved),
            bytes(best.saving.max(0) as u64),
            best.method.as_str()
        ),
    }
}

/// The answer with how far a "fits" in it holds, where one does (the run
/// as recorded, or a change): the same sentence simulate, the limits and
/// the report say ([`vramscope_analysis::reach`]).
pub(super) fn with_reach(
    answer: String,
    baseline: &Advice,
    advice: &[Advice],
    reach: &vramscope_analysis::reach::Reach,
) -> String {
    let fits = baseline.fits == Some(true) || advice.iter().any(|a| a.fits == Some(true));
    if !fits {
        return answer;
    }
    format!("{answer} Each \"fits\" holds {}.", reach.sentence())
}
