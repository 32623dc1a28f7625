//! Advice for a trace recorded without a caching allocator (vramscope's CPU
//! recorders): each tensor is its own allocation, so the memory a run
//! needs is its peak allocated, and a change is replayed by counting the
//! allocated bytes event by event with the change applied
//! ([`vramscope_simulate::edits::peak_allocated`]). Allocator settings and
//! what pins segments mean nothing there; the program changes are the
//! same as on CUDA.

use vramscope_analysis::categories::Labelled;
use vramscope_simulate::edits::{peak_allocated, Extra};
use vramscope_snapshot::Action;
use vramscope_snapshot::Snapshot;

use super::checkpoint::Blocks;
use super::{
    fewest_blocks, program_candidates,
    verdict::{answer, rank},
    Advice, Advising, Candidate, ChangeClass, NotOffered,
};
use vramscope_simulate::settings::Settings;

/// Whether `device`'s trace is one [`advise_counted`] answers for: a
/// memory snapshot recorded without a caching allocator.
pub fn counted_applies(snap: &Snapshot, device: u32) -> bool {
    snap.source.format == vramscope_snapshot::SourceFormat::Snapshot
        && !vramscope_analysis::summary::caching_allocator(snap, device)
        && snap.trace(device).is_some_and(|t| !t.is_empty())
}

/// Rank the changes for `device` of a trace without a caching allocator,
/// from its labelled blocks ([`Labelled::new`]).
pub fn advise_counted(
    snap: &Snapshot,
    device: u32,
    capacity: Option<u64>,
    ranks: u32,
    labelled: &Labelled,
) -> Advising {
    let recorded = Settings::default();
    let mut not_offered = vec![NotOffered {
        change: "allocator settings (PYTORCH_CUDA_ALLOC_CONF)".into(),
        why: "recorded without a caching allocator: each tensor was its own allocation, nothing was cached to tune"
            .into(),
    }];
    let blocks = Blocks::new(snap, device, labelled);
    let mut candidates = program_candidates(
        snap,
        device,
        labelled,
        &blocks,
        &recorded,
        ranks,
        &mut not_offered,
    );
    // Changes that move a GPU's memory to the CPU mean nothing for memory
    // without a GPU: each said why instead.
    let gpu_only = [
        (
            ChangeClass::CpuOffload,
            "the optimizer state and step offloaded to the CPU",
            "offloading moves a GPU's optimizer state and step to the CPU: this recording is of memory without a GPU",
        ),
        (
            ChangeClass::EmaOffload,
            "the EMA's copy of the weights kept on the CPU",
            "the EMA's copy would move from a GPU's memory to the CPU's: this recording is of memory without a GPU",
        ),
        (
            ChangeClass::PagedOptimizerState8bit,
            "paged 8-bit optimizer state (bitsandbytes' paged classes)",
            "paging moves a GPU's optimizer state to the CPU's memory when the GPU runs short: this recording is of \
             memory without a GPU; the 8-bit row is what a smaller state saves here",
        ),
    ];
    for (class, change, why) in gpu_only {
        if let Some(i) = candidates.iter().position(|c| c.class == class) {
            candidates.remove(i);
            not_offered.push(NotOffered {
                change: change.into(),
                why: why.into(),
            });
        }
    }
    let entries = snap.trace(device).map_or(0, |t| t.len());
    let l = &labelled.lifetimes;
    // Requests the run was refused (`record(cpu_limit=...)`): it needed
    // them there, so each change's count holds them for that moment.
    let refused: Vec<(usize, u64)> = snap.trace(device).map_or_else(Vec::new, |t| {
        (0..t.len())
            .filter(|&i| t.action[i] == Action::Oom)
            .map(|i| (i, t.size[i]))
            .collect()
    });
    let evaluate = |c: &Candidate| -> (Advice, u64) {
        let mut edits = c.edits.clone().unwrap_or_default();
        for (k, &(i, size)) in refused.iter().enumerate() {
            let id = u32::MAX - k as u32;
            edits
                .extra_after
                .entry(i)
                .or_default()
                .extend([Extra::Make { id, size }, Extra::Free(id)]);
        }
        let peak = peak_allocated(l, entries, &edits);
        let how = format!(
            "{}; allocated bytes counted event by event, each tensor its own allocation as recorded (no caching \
             allocator)",
            c.how.replacen("replayed", "the recorded trace", 1)
        );
        let advice = c.answer(
            (peak, peak),
            capacity,
            capacity.map(|cap| peak <= cap),
            c.method,
            how,
        );
        (advice, peak)
    };
    let baseline = evaluate(&Candidate::as_recorded(&recorded, "the recorded trace"));
    let mut evaluated: Vec<(Advice, u64)> = candidates.iter().map(evaluate).collect();
    evaluated.extend(fewest_blocks(
        &blocks, labelled, &recorded, &baseline, &evaluated, &evaluate,
    ));
    let (baseline, advice, no_gain) = rank(baseline, evaluated);
    let answer = answer(&baseline, &advice, capacity, "peak allocated");
    // A run that ran out of memory ends inside the iteration it failed in.
    let interrupted = refused.first().and_then(|&(i, _)| {
        let its = vramscope_analysis::iterations::find_iterations(snap, device);
        its.list
            .iter()
            .find(|it| it.start <= i && i < it.end && !it.complete)
            .map(|it| it.number)
    });
    let reach = vramscope_analysis::reach::reach(snap, device, interrupted, None);
    let answer = super::verdict::with_reach(answer, &baseline, &advice, &reach);
    Advising {
        device,
        caching_allocator: false,
        capacity,
        capacity_from: None,
        oom_request: None,
        oom_site: None,
        baseline,
        advice,
        no_gain,
        not_offered,
        answer,
        reach,
    }
}
