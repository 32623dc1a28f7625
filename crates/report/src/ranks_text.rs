//! `vramscope ranks` as text: the ranks side by side, the worst one
//! against the median, drift, unreadable files and limits.

use std::fmt::Write;

use vramscope_ranks::Ranks;
use vramscope_text::units::bytes;

fn dur(us: Option<i64>) -> String {
    match us {
        Some(u) if u >= 1_000_000 => format!("+{:.1} s", u as f64 / 1e6),
        Some(u) => format!("+{:.1} ms", u as f64 / 1e3),
        None => "-".into(),
    }
}

/// The comparison as a terminal table, most urgent rank first.
pub fn ranks_text(r: &Ranks) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} file(s), {} rank(s) · median peak {} · max {} · imbalance {:.2}x (max / median)",
        r.files,
        r.ranks.len(),
        bytes(r.median_peak),
        bytes(r.max_peak),
        r.imbalance
    );
    if !r.outliers.is_empty() {
        let list: Vec<String> = r.outliers.iter().map(|x| x.to_string()).collect();
        let _ = writeln!(o, "outlier rank(s): {}", list.join(", "));
    }
    let _ = writeln!(
        o,
        "\n{:>5} {:>5} {:>12} {:>12} {:>10} {:>6} {:>5} {:>8}  OOM · top site at the peak",
        "rank", "files", "peak alloc", "peak reserv", "at", "step", "frag", "÷median"
    );
    for row in &r.ranks {
        let oom = row
            .oom
            .as_ref()
            .map(|x| {
                format!(
                    "OOM asking {} at event {}{} · ",
                    bytes(x.requested),
                    x.event,
                    x.step.map(|s| format!(" (step {s})")).unwrap_or_default()
                )
            })
            .unwrap_or_default();
        let site = row
            .top_site
            .as_ref()
            .map(|s| format!("{} ({})", s.site, bytes(s.bytes)))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            o,
            "{:>5} {:>5} {:>12} {:>12} {:>10} {:>6} {:>4.0}% {:>6.2}x{}  {oom}{site}",
            row.rank,
            row.files,
            bytes(row.peak_allocated),
            bytes(row.peak_reserved),
            dur(row.peak_time_us),
            row.step.map_or("-".into(), |s| s.to_string()),
            row.fragmentation * 100.0,
            row.vs_median,
            if row.outlier { "!" } else { " " },
        );
    }
    if let Some(w) = &r.worst {
        let _ = writeln!(
            o,
            "\nrank {} against the median rank {}, at their peaks (what rank {} holds more of):",
            w.rank, w.median_rank, w.rank
        );
        for s in &w.sites {
            let _ = writeln!(
                o,
                "  +{:>10}  {} ({} vs {})",
                bytes(s.extra_bytes),
                s.site,
                bytes(s.worst_bytes),
                bytes(s.median_bytes)
            );
        }
        if w.sites.is_empty() {
            let _ = writeln!(o, "  no site holds more (the difference is spread thin)");
        }
    }
    let drifting: Vec<_> = r.drift.iter().filter(|d| d.drifting).collect();
    if !drifting.is_empty() {
        let _ = writeln!(o, "\nmemory that grows from one dump to the next:");
        for d in drifting {
            let (f, l) = (d.peaks[0], d.peaks[d.peaks.len() - 1]);
            let _ = writeln!(
                o,
                "  rank {}: peak {} at step {} → {} at step {} ({} per step)",
                d.rank,
                bytes(f.1),
                f.0,
                bytes(l.1),
                l.0,
                bytes(d.growth_per_step.max(0.0) as u64)
            );
        }
    }
    if !r.errors.is_empty() {
        let _ = writeln!(o, "\nnot read:");
        for e in &r.errors {
            let _ = writeln!(o, "  {} (rank {}): {}", e.path.display(), e.rank, e.error);
        }
    }
    for g in &r.gates {
        let shown = |v: f64| match g.name {
            "max_imbalance" => format!("{v:.2}x"),
            _ => bytes(v as u64),
        };
        let _ = writeln!(
            o,
            "{} {}: {} (limit {})",
            if g.passed { "PASS" } else { "FAIL" },
            g.name,
            shown(g.value),
            shown(g.limit)
        );
    }
    o
}
