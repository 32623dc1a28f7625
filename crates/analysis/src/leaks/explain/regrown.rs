//! A site whose tensors alive at an iteration's end are made again in the
//! next one, larger every time. Three things do that:
//!
//! * a library's state carried from one model call to the next and made
//!   longer at each (Hugging Face's cache of past keys and values, made
//!   by `torch.cat` in `cache_utils.py`): by design, bounded by the
//!   generation (benign);
//! * an input that grows (a curriculum's longer sequences): what the rest
//!   of the iteration allocates grows with it (benign);
//! * a tensor rebuilt from its previous value in the program's own code
//!   while the iteration's work stays the same (`preds = torch.cat([preds,
//!   p])`): it grows without bound (a leak).

use super::growth::host_copy_on_the_cpu;
use super::{evidence_list, short_file, user_files};
use crate::leaks::findings::{Context, SiteRate, SiteSeries};
use crate::leaks::source::Sources;
use crate::leaks::{Finding, FindingKind, Severity, SiteEvidence};
use crate::sites::{frame_location, is_third_party};
use vramscope_text::units::bytes;

/// Whether the iteration's work (`work[k]`: bytes allocated in iteration
/// k by the other sites) grows from iteration 2 to the last, as a longer
/// input makes it: up in most iterations, hardly ever down. Iteration 1
/// is left out: it creates the optimizer's state and warms caches.
pub(in crate::leaks) fn work_grows(work: &[u64]) -> bool {
    let n = work.len().saturating_sub(1);
    if n < 3 {
        return false;
    }
    let steps = (n - 1) as f64;
    let up = (3..=n).filter(|&k| work[k] > work[k - 1]).count() as f64;
    let down = (3..=n).filter(|&k| work[k] < work[k - 1]).count() as f64;
    work[n] > work[2] && up >= 0.6 * steps && down <= 0.2 * steps
}

pub(in crate::leaks) fn regrown_finding(
    ctx: &Context,
    sites: &[SiteRate],
    work: &[u64],
    series: &SiteSeries,
    src: &mut Sources,
) -> Finding {
    let n = ctx.complete;
    let per: f64 = sites.iter().map(|s| s.1).sum();
    let mut ev = evidence_list(ctx, sites, (true, true), series, src);
    // The variable that holds the latest, largest tensor keeps the growth.
    for (e, &(site, _)) in ev.iter_mut().zip(sites) {
        if e.held_by.is_none() {
            let st = &ctx.sites.stats[site as usize];
            let lt = ctx.lifetimes;
            e.held_by = ctx.holders.held_by_latest(
                lt,
                ctx.trace,
                (0..lt.len()).filter(|&b| ctx.sites.of_block[b] == site),
                &user_files(ctx.snap, st.shown_stack()),
                src,
            );
        }
    }
    let ev = ev;
    let first = &ev[0];
    let total: u64 = ev
        .iter()
        .map(|e| e.live_bytes.last().copied().unwrap_or(0))
        .sum();
    let at = |k: usize| work.get(k).copied().unwrap_or(0);
    let code = first
        .code
        .as_ref()
        .map(|c| format!(" (`{c}`)"))
        .unwrap_or_default();
    let place = if sites.len() == 1 {
        format!("{}{code}", first.site)
    } else {
        let names: Vec<&str> = ev.iter().map(|e| e.site.as_str()).collect();
        format!("{} sites ({})", sites.len(), names.join(", "))
    };
    // How many of them are alive at the end of the last iteration.
    let bi = ctx.block_iterations;
    let growing: Vec<u32> = sites.iter().map(|s| s.0).collect();
    let alive = (0..ctx.lifetimes.len())
        .filter(|&b| growing.contains(&ctx.sites.of_block[b]) && bi.born[b] <= n && bi.died[b] > n)
        .count();
    let tensors = if alive == 1 {
        "one tensor".to_owned()
    } else {
        format!("{alive} tensors")
    };
    let (kind, severity, title, explanation, fix) = if let Some(library) =
        libraries_state(ctx, sites)
    {
        (
            FindingKind::GrowingCache,
            Severity::Benign,
            format!(
                "{} grows by {} per iteration: state {library} keeps from one call to the next (a cache)",
                first.site,
                bytes(per as u64)
            ),
            format!(
                "At the end of every iteration {tensors} made at {place} (the largest through {library}) are alive, each made again in the next iteration and larger ({} more each iteration, {} at the end of iteration {n}): state the library carries from one model call to the next and makes longer at each, as a cache of past keys and values does while a sequence is generated. It is bounded by the generation's length and freed with the cache.",
                bytes(per as u64),
                bytes(total),
            ),
            "Nothing to fix if this is a generation's cache: it peaks at the longest sequence. To have that memory from the start (and one allocation instead of one per token), give the generation a preallocated cache (Hugging Face: `cache_implementation=\"static\"`).",
        )
    } else if work_grows(work) {
        let peak = |k: usize| {
            ctx.iterations
                .get(k.wrapping_sub(1))
                .map_or(0, |i| i.peak_bytes)
        };
        let (p2, pn) = (peak(2), peak(n as usize));
        let peaks = if pn > p2 {
            format!(
                " The iteration's peak grows with it ({} in iteration 2, {} in iteration {n}).",
                bytes(p2),
                bytes(pn)
            )
        } else {
            String::new()
        };
        (
            FindingKind::GrowingInput,
            Severity::Benign,
            format!(
                "{} grows by {} per iteration with the iteration's input (not kept)",
                first.site,
                bytes(per as u64)
            ),
            format!(
                "At the end of every iteration {tensors} from {place} are alive, larger than the last ({} more each iteration, {} at the end of iteration {n}), each freed when the next iteration makes them again: nothing is kept. What the rest of each iteration allocates grows too ({} in iteration 2, {} in iteration {n}): the input grows (a longer sequence, a larger batch), and these tensors with it.{peaks}",
                bytes(per as u64),
                bytes(total),
                bytes(at(2)),
                bytes(at(n as usize)),
            ),
            "Nothing to fix if the input is meant to grow; the run needs the memory of its largest input: check the peak at that size (`vramscope estimate` with the longest sequence and the largest batch), or cap the growth.",
        )
    } else {
        leak_words(
            ctx,
            first,
            &ev,
            alive,
            (per, total, n),
            &place,
            (at(2), at(n as usize)),
        )
    };
    Finding {
        kind,
        severity,
        title,
        explanation,
        fix: fix.to_owned(),
        bytes_per_iteration: per,
        bytes: total,
        iterations: (1, n),
        sites: ev,
    }
}

/// The words of a program's own tensor made again larger every iteration
/// while the rest of the iteration allocates the same (`work`: the bytes
/// of iterations 2 and n): a leak, but on a CPU recording of host copies.
fn leak_words(
    ctx: &Context,
    first: &SiteEvidence,
    ev: &[SiteEvidence],
    alive: usize,
    (per, total, n): (f64, u64, u32),
    place: &str,
    work: (u64, u64),
) -> (FindingKind, Severity, String, String, &'static str) {
    let held = ev.iter().find_map(|e| e.held_by.as_ref());
    let held_title = held
        .map(|h| format!(", held by `{}`", h.name))
        .unwrap_or_default();
    let held_text = held
        .map(|h| format!(" It is {}.", h.text))
        .unwrap_or_default();
    let keeper = first
        .kept_by
        .as_ref()
        .filter(|_| held.is_none_or(|h| h.stored_at.is_none()))
        .map(|(line, code)| {
            format!(
                " Line {line} of {} stores it: `{code}`.",
                short_file(&first.file)
            )
        })
        .unwrap_or_default();
    // On the CPU `.cpu()` is the tensor itself: an accumulator of host
    // copies grows the recording, not a GPU.
    let host = host_copy_on_the_cpu(ctx, held, first.kept_by.as_ref());
    let on_host = host
        .as_ref()
        .map(|code| format!(" The parts are host copies (`{code}`): this recording is of the CPU, where `.cpu()` returns the tensor itself, so they are counted as the device's memory; on a GPU the accumulator is in the host's memory and the device does not grow."))
        .unwrap_or_default();
    (
        FindingKind::GrowingTensor,
        if host.is_some() { Severity::Benign } else { Severity::Leak },
        format!(
            "{} grows by {} per iteration, a tensor made again larger each time{held_title}",
            first.site,
            bytes(per as u64)
        ),
        format!(
            "The {} made at {place} {} made again in every iteration, larger: those of one iteration are freed when the next replaces them, but {} {} larger at the end of each iteration, {} by the end of iteration {n}, while the rest of each iteration allocates the same ({} in iteration 2, {} in iteration {n}). A tensor rebuilt from its previous value and a new part grows without bound: `x = torch.cat([x, part])` onto an accumulator, a buffer re-made one step longer.{keeper}{held_text}{on_host}",
            if alive == 1 { "tensor" } else { "tensors" },
            if alive == 1 { "is" } else { "are" },
            if alive == 1 { "it is" } else { "they are" },
            bytes(per as u64),
            bytes(total),
            bytes(work.0),
            bytes(work.1),
        ),
        "Do not grow a tensor on the device every iteration: append each iteration's part to a list (`part.detach().cpu()`, or a number) and concatenate once when it is used, or keep running statistics (a sum and a count) instead of every value. If the loop is meant to grow it, allocate it at its largest once, so that the peak is there from the start.",
    )
}

/// The library whose code made a site's growing tensors inside a model's
/// call (`transformers/cache_utils.py`, under `torch/nn/modules/module.py`):
/// its state, not the program's, when the innermost frame outside PyTorch
/// is a third-party package's.
pub(in crate::leaks) fn library_state(ctx: &Context, site: u32) -> Option<String> {
    let snap = ctx.snap;
    let stack = ctx.sites.stats[site as usize].shown_stack();
    let files: Vec<String> = snap
        .stacks
        .get(stack)
        .iter()
        .map(|&f| {
            frame_location(snap, snap.frames.get(f))
                .0
                .replace('\\', "/")
        })
        .collect();
    let in_module_call = files
        .iter()
        .any(|f| f.ends_with("torch/nn/modules/module.py"));
    let innermost = files
        .iter()
        .find(|f| f.ends_with(".py") && !f.contains("/torch/") && !f.starts_with("torch/"))?;
    (in_module_call && is_third_party(innermost)).then(|| package_file(innermost))
}

/// Of `sites` (all a library's state, or none), the first library named.
fn libraries_state(ctx: &Context, sites: &[SiteRate]) -> Option<String> {
    let named: Vec<String> = sites
        .iter()
        .filter_map(|&(site, _)| library_state(ctx, site))
        .collect();
    (named.len() == sites.len())
        .then(|| named.into_iter().next())
        .flatten()
}

/// `…/site-packages/transformers/cache_utils.py` -> `transformers/cache_utils.py`.
fn package_file(f: &str) -> String {
    let tail = f
        .rsplit_once("site-packages/")
        .or_else(|| f.rsplit_once("dist-packages/"))
        .map_or(f, |(_, t)| t);
    format!("`{tail}`")
}

#[cfg(test)]
mod tests {
    use super::work_grows;

    #[test]
    fn work_that_grows_with_the_input() {
        // A curriculum: every iteration allocates more.
        assert!(work_grows(&[0, 90, 100, 120, 140, 160]));
        // An accumulator only: the rest of the iteration is the same.
        assert!(!work_grows(&[0, 90, 100, 100, 100, 100]));
        // Random batch sizes: up and down.
        assert!(!work_grows(&[0, 90, 100, 140, 110, 160, 120]));
        // Too short to tell.
        assert!(!work_grows(&[0, 90, 100]));
    }
}
