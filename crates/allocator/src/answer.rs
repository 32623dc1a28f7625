//! The one-sentence answer at the top of `vramscope simulate`: which
//! setting or change makes the failing request fit and by how much, or
//! that none does and what must shrink.

use crate::simulate::{RecordedOom, Run};

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
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

fn holders(o: &RecordedOom) -> String {
    if o.holders.is_empty() {
        return String::new();
    }
    let list: Vec<String> = o
        .holders
        .iter()
        .map(|s| format!("{} ({})", s.site, gib(s.bytes)))
        .collect();
    format!("; the biggest holders: {}", list.join(", "))
}

pub(crate) fn answer(
    runs: &[Run],
    oom: Option<&RecordedOom>,
    capacity: Option<u64>,
    changed: bool,
) -> String {
    let Some(base) = runs.first() else {
        return String::new();
    };
    let fit = runs[1..].iter().find(|r| r.replayed.oom.is_none());
    match (oom, capacity) {
        (Some(o), Some(cap)) => {
            if let Some(best) = fit {
                format!(
                    "the failing request of {} fits on the same {} device with {}: peak reserved {}, {} to spare",
                    gib(o.request),
                    gib(cap),
                    best.label,
                    gib(best.replayed.simulated_peak_reserved),
                    gib(cap.saturating_sub(best.replayed.simulated_peak_reserved))
                )
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
                        holders(o)
                    );
                }
                format!(
                    "no {} tried makes the request of {} fit on a {} device: {} allocated plus the request \
                     exceed it by {}; that much of what is allocated must go{}",
                    if changed { "setting or change" } else { "setting" },
                    gib(o.request),
                    gib(cap),
                    gib(r.allocated_at_oom),
                    gib(need),
                    holders(o)
                )
            }
        }
        _ if changed => {
            let c = runs.iter().find(|r| r.changed).unwrap_or(base);
            let v = verdict(c, capacity);
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
            let v = verdict(base, capacity);
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
