//! The one-sentence answer at the top of `vramscope simulate`: which
//! setting or change makes the failing request fit and by how much, or
//! that none does and what must shrink.

use crate::horizon::Horizon;
use crate::must_go::MustGo;
use crate::simulate::{RecordedOom, Run};
use vramscope_analysis::reach::Reach;

/// Bytes as the rest of vramscope prints them (`762.00 MiB`, `1.00 GiB`):
/// never a "0.00 GiB" for an amount that is not zero.
fn gib(b: u64) -> String {
    vramscope_text::units::bytes(b)
}

/// What the search over the model found must go, as a sentence's end.
fn gone(m: Option<&MustGo>) -> String {
    let Some(m) = m else {
        return ". Even with every block alive then gone, the replay does not serve the request"
            .into();
    };
    let list: Vec<String> = m
        .sites
        .iter()
        .map(|s| {
            format!(
                "{} at {} ({} block{})",
                gib(s.bytes),
                s.site,
                s.blocks,
                if s.blocks == 1 { "" } else { "s" }
            )
        })
        .collect();
    format!(
        ". Replayed {}, the request is served once these {} of the biggest holders' memory are gone: {}{}",
        if m.label == "recorded" { "with the recorded settings".to_string() } else { format!("with {}", m.label) },
        gib(m.bytes),
        list.join(", "),
        if m.least {
            "; with its last block kept, it still fails"
        } else {
            " (the least the search found; fewer blocks were not all tried)"
        }
    )
}

/// "fits on a 79.06 GiB device (3.10 GiB to spare)" or "runs out of memory
/// at entry N".
fn verdict(r: &Run, capacity: Option<u64>) -> String {
    match (r.replayed.oom, capacity) {
        (Some((i, size)), Some(c)) => format!(
            "does not fit on a {} device: a request of {} fails at entry {i}",
            gib(c),
            gib(size)
        ),
        (None, Some(c)) => format!(
            "fits on a {} device ({} to spare at the peak)",
            gib(c),
            gib(c.saturating_sub(r.replayed.simulated_peak_reserved))
        ),
        _ => String::new(),
    }
}

/// A verdict that says "fits" says how far it holds, as every command does.
fn held(v: String, reach: &Reach) -> String {
    match v.starts_with("fits") {
        true => format!("{v}, {}", reach.sentence()),
        false => v,
    }
}

/// Where the recording ends, said plainly after a request that fits
/// there: the projected rest of the iteration's verdict, or what was not
/// replayed and what would tell.
fn beyond(best: &Run, h: &Horizon, cap: u64, reach: &Reach) -> String {
    let which = match h.iteration {
        Some(k) => format!("in iteration {k}"),
        None => "before the first iteration".to_string(),
    };
    match (&best.projection, h.from_iteration) {
        (Some(p), Some(j)) => {
            let how = format!(
                "projected from iteration {j} (its entries from the one matching the failing request to its end, \
                 sizes scaled per site as the {} aligned allocations of both measured, ×{:.2} at the median{})",
                h.aligned,
                h.ratio,
                if h.frees_left_out > 0 {
                    format!("; {} of its frees free blocks from before it and are left out, so the projection errs high", h.frees_left_out)
                } else {
                    String::new()
                }
            );
            match p.oom {
                None => format!(
                    ". The recording ends there, {which}; the rest of that iteration, {how}, peaks at {} reserved: \
                     the whole iteration fits, {} to spare (a projection, not a replay), {}",
                    gib(p.peak_reserved),
                    gib(cap.saturating_sub(p.peak_reserved)),
                    reach.sentence()
                ),
                Some((_, size)) => format!(
                    ", but the recording ends there, {which}, and the rest of that iteration, {how}, runs out of memory: \
                     a request of {}{} fails. It does not fit (a projection, not a replay)",
                    gib(size),
                    p.oom_site
                        .as_ref()
                        .map(|s| format!(" at {s}"))
                        .unwrap_or_default()
                ),
            }
        }
        _ => format!(
            ". That is all that can be said: the recording ends there, {which}, so nothing after the failing request \
             was replayed and the rest of the step may ask for more ({}). To know, record a whole iteration with the \
             change (vramscope.record(..., dump_at=...) writes a snapshot before memory runs out) or run \
             `vramscope estimate` on the model at the new size",
            h.why_not.as_deref().unwrap_or("no projection could be made")
        ),
    }
}

pub(crate) fn answer(
    runs: &[Run],
    oom: Option<&RecordedOom>,
    horizon: Option<&Horizon>,
    must_go: Option<&MustGo>,
    capacity: Option<u64>,
    changed: bool,
    reach: &Reach,
) -> String {
    let Some(base) = runs.first() else {
        return String::new();
    };
    let fit = runs[1..].iter().find(|r| r.replayed.oom.is_none());
    match (oom, capacity) {
        (Some(o), Some(cap)) => {
            if let Some(best) = fit {
                // A projected OOM outranks a fit that only reaches the end
                // of the recording: prefer a run whose projection fits.
                let best = runs[1..]
                    .iter()
                    .filter(|r| r.replayed.oom.is_none())
                    .find(|r| r.projection.as_ref().is_some_and(|p| p.oom.is_none()))
                    .unwrap_or(best);
                let head = format!(
                    "the failing request of {} at entry {} fits on the same {} device with {} (peak reserved {} in the recorded part)",
                    gib(o.request),
                    o.entry,
                    gib(cap),
                    best.label,
                    gib(best.replayed.simulated_peak_reserved),
                );
                match horizon {
                    Some(h) => format!("{head}{}", beyond(best, h, cap, reach)),
                    None => format!("{head}, {}", reach.sentence()),
                }
            } else if o.request > cap {
                format!(
                    "no setting helps: the request alone ({}) is larger than the {} PyTorch can have on this device; \
                     that tensor must shrink by at least {} (smaller batch, sequence or dtype) or be split",
                    gib(o.request),
                    gib(cap),
                    gib(o.request - cap)
                )
            } else {
                let r = &base.replayed;
                let request = r.oom.map_or(o.request, |x| x.1);
                let need = (r.allocated_at_oom + request).saturating_sub(cap);
                if need == 0 {
                    // Allocated plus the request fit: what does not fit is
                    // the segments live blocks pin (fragmentation), and no
                    // amount of "allocated that must go" follows from sums.
                    return format!(
                        "no {} tried makes the request of {} fit on a {} device, though allocated plus the request ({} + {}) would: \
                         fragmentation. After releasing every cached segment it could, the allocator still held {} in segments that live blocks pin \
                         ({} of it free but in pieces too small for the request), and a new segment of {} needs {} more than the device has. \
                         Freeing the live blocks that pin those segments before the request (or allocating the large tensor first) is what helps{}",
                        if changed { "setting or change" } else { "setting" },
                        gib(o.request),
                        gib(cap),
                        gib(r.allocated_at_oom),
                        gib(request),
                        gib(r.reserved_at_oom),
                        gib(r.reserved_at_oom.saturating_sub(r.allocated_at_oom)),
                        gib(request),
                        gib((r.reserved_at_oom + request).saturating_sub(cap)),
                        gone(must_go)
                    );
                }
                format!(
                    "no {} tried makes the request of {} fit on a {} device: {} allocated plus the request \
                     exceed it by {}{}",
                    if changed { "setting or change" } else { "setting" },
                    gib(o.request),
                    gib(cap),
                    gib(r.allocated_at_oom),
                    gib(need),
                    gone(must_go)
                )
            }
        }
        _ if changed => {
            let c = runs.iter().find(|r| r.changed).unwrap_or(base);
            let v = held(verdict(c, capacity), reach);
            format!(
                "peak reserved {} → {} with {}{}{}",
                gib(base.replayed.simulated_peak_reserved),
                gib(c.replayed.simulated_peak_reserved),
                c.label,
                if v.is_empty() { "" } else { "; " },
                v
            )
        }
        _ => {
            let v = held(verdict(base, capacity), reach);
            let tail = if v.is_empty() {
                String::new()
            } else {
                format!(" ({v})")
            };
            match runs.get(1) {
                Some(best)
                    if best.replayed.simulated_peak_reserved
                        < base.replayed.simulated_peak_reserved
                        && best.replayed.oom.is_none() =>
                {
                    format!(
                        "peak reserved {} with the recorded settings{tail}; {} with {}",
                        gib(base.replayed.simulated_peak_reserved),
                        gib(best.replayed.simulated_peak_reserved),
                        best.label
                    )
                }
                _ => format!(
                    "peak reserved {} with the recorded settings{tail}; no setting tried lowers it",
                    gib(base.replayed.simulated_peak_reserved)
                ),
            }
        }
    }
}
