//! `vramscope simulate` as text: the answer first, then one row per
//! setting tried.

use std::fmt::Write;

use vramscope_simulate::Simulation;
use vramscope_text::units::bytes;

/// The simulation of `name` as a terminal table.
pub fn simulate_text(s: &Simulation, name: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{name} · device {} · allocator simulation", s.device);
    match s.capacity {
        Some(c)
            if s.recorded_oom.is_none()
                && s.seen_limit.as_ref().is_some_and(|l| l.capacity() == c) =>
        {
            let l = s.seen_limit.as_ref().expect("checked");
            // Bounds a few KiB apart print alike: then in bytes.
            let (lo, hi) = if bytes(l.at_least) == bytes(l.below) {
                (format!("{} B", l.at_least), format!("{} B", l.below))
            } else {
                (bytes(l.at_least), bytes(l.below))
            };
            let _ = writeln!(
                o,
                "device memory for PyTorch: {} (cudaMalloc failed {} time(s) and PyTorch released its cache to retry: it could reserve at least {} and less than {}{})",
                bytes(c),
                l.retries.len(),
                lo,
                hi,
                if l.consistent { "" } else { "; the bursts disagree, as when memory held outside PyTorch changed: the lower bound is used" }
            );
        }
        Some(c) => {
            let outside = s
                .recorded_oom
                .as_ref()
                .filter(|r| r.capacity == Some(c))
                .and_then(|r| r.device_total.zip(r.outside))
                .map(|(t, x)| {
                    format!(
                        " (of the device's {}: {} was held outside PyTorch when it ran out)",
                        bytes(t),
                        bytes(x)
                    )
                })
                .unwrap_or_default();
            let _ = writeln!(o, "device memory for PyTorch: {}{outside}", bytes(c));
        }
        None => {
            let _ = writeln!(
                o,
                "device memory: unlimited (give --capacity to test a GPU size)"
            );
        }
    }
    if let Some(oom) = &s.recorded_oom {
        let _ = writeln!(
            o,
            "recorded: out of memory at entry {} asking for {}",
            oom.entry,
            bytes(oom.request)
        );
    }
    for m in &s.changes {
        let _ = writeln!(
            o,
            "program change: {} ({} block(s), {} as recorded, at {})",
            m.change.label(),
            m.blocks,
            bytes(m.bytes),
            m.sites.join(", ")
        );
    }
    let _ = writeln!(o, "\n{}\n", s.answer);
    let _ = writeln!(
        o,
        "{:>14} {:>14} {:>8} {:>8}  settings",
        "peak reserved", "peak allocated", "mallocs", "frees"
    );
    for r in &s.runs {
        let x = &r.replayed;
        let mut oom = x
            .oom
            .map(|(i, n)| format!("  OOM at entry {i} ({})", bytes(n)))
            .unwrap_or_default();
        // Past the end of the recording only a projection speaks.
        match (&r.projection, &s.horizon) {
            (Some(p), _) => {
                let _ = match p.oom {
                    Some((_, n)) => write!(
                        oom,
                        "  projected: OOM later in the iteration ({})",
                        bytes(n)
                    ),
                    None => write!(
                        oom,
                        "  projected: the iteration peaks at {}",
                        bytes(p.peak_reserved)
                    ),
                };
            }
            (None, Some(_)) if x.oom.is_none() => {
                oom.push_str("  fits up to where the recording ends")
            }
            _ => {}
        }
        let _ = writeln!(
            o,
            "{:>14} {:>14} {:>8} {:>8}  {}{oom}",
            bytes(x.simulated_peak_reserved),
            bytes(x.simulated_peak_allocated),
            x.cuda_mallocs,
            x.cuda_frees,
            r.label
        );
    }
    if s.runs.iter().any(|r| {
        r.settings.garbage_collection_threshold > 0.0 && r.settings.memory_fraction.is_none()
    }) {
        let _ = writeln!(
            o,
            "\nnote: garbage_collection_threshold does nothing unless torch.cuda.set_per_process_memory_fraction \
             was called (written per_process_memory_fraction:F here)"
        );
    }
    if let Some(rec) = s.runs.first() {
        let x = &rec.replayed;
        if x.initial_reserved > 0 && s.runs.len() > 1 {
            let _ = writeln!(
                o,
                "\nnote: the trace starts with {} already reserved in the segments the program had then; every run \
                 starts from those segments, so a setting changes only what happens after the trace starts",
                bytes(x.initial_reserved)
            );
        }
        if s.from_estimate {
            let _ = writeln!(
                o,
                "\nan estimate's trace: the allocations and frees CUDA would be asked for, turned into segments by the model"
            );
        } else if x.recorded_segment_events > 0 {
            let _ = writeln!(
                o,
                "\nthe model against the file (recorded settings): {} of {} segment events reproduced in order, reserved within {:.2}% after every request",
                x.matched_segment_events,
                x.recorded_segment_events,
                x.max_reserved_error * 100.0
            );
            if x.empty_cache_calls > 0 {
                let _ = writeln!(
                    o,
                    "the program released the cache itself {} time(s) (torch.cuda.empty_cache); every run does the same there",
                    x.empty_cache_calls
                );
            }
            if let Some(p) = &x.private_pools {
                let ids: Vec<String> = p.ids.iter().map(|(a, b)| format!("({a}, {b})")).collect();
                let _ = writeln!(
                    o,
                    "private pools kept apart from the default pool (CUDA graphs, torch.cuda.MemPool): {}; each event's pool from {}",
                    ids.join(", "),
                    if p.told_by == "trace" {
                        "the trace's pool_id"
                    } else {
                        "the segments at the dump (a pool gone by then is not seen)"
                    }
                );
            }
            if x.matched_segment_events < x.recorded_segment_events {
                let _ = writeln!(
                    o,
                    "not reproduced: {} recorded and {} simulated segment events; what the model does not see: the private \
                     pool of a CUDA graph or MemPool in a file that names none (PyTorch before 2.15 writes no pool_id on \
                     trace entries; the dump's segments name only the pools still alive), settings changed while the \
                     program ran, and blocks in use when the trace started that no segment held ({})",
                    x.recorded_segment_events - x.matched_segment_events,
                    x.simulated_segment_events - x.matched_segment_events,
                    x.seed_misses
                );
            }
        } else {
            let _ = writeln!(
                o,
                "\nthe file records no segment events: its window began with {} reserved, and the model starts from those segments \
                 and the blocks in use then; it needed {} cudaMalloc(s) and stayed within {:.2}% of the recorded reserved",
                bytes(x.initial_reserved),
                x.cuda_mallocs,
                x.max_reserved_error * 100.0
            );
        }
    }
    o
}
