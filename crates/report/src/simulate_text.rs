//! `vramscope simulate` as text: the answer first, then one row per
//! setting tried.

use std::fmt::Write;

use vramscope_allocator::Simulation;
use vramscope_analysis::units::bytes;

/// The simulation of `name` as a terminal table.
pub fn simulate_text(s: &Simulation, name: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{name} · device {} · allocator what-if", s.device);
    match s.capacity {
        Some(c) => {
            let _ = writeln!(o, "device memory for PyTorch: {}", bytes(c));
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
    let _ = writeln!(o, "\n{}\n", s.answer);
    let _ = writeln!(
        o,
        "{:>14} {:>14} {:>8} {:>8}  settings",
        "peak reserved", "peak allocated", "mallocs", "frees"
    );
    for r in &s.runs {
        let x = &r.replayed;
        let oom = x
            .oom
            .map(|(i, n)| format!("  OOM at entry {i} ({})", bytes(n)))
            .unwrap_or_default();
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
    if let Some(rec) = s.runs.first() {
        let x = &rec.replayed;
        if x.recorded_segment_events > 0 {
            let _ = writeln!(
                o,
                "\nthe model against the file (recorded settings): {} of {} segment events reproduced in order, reserved within {:.2}% after every request",
                x.matched_segment_events,
                x.recorded_segment_events,
                x.max_reserved_error * 100.0
            );
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
