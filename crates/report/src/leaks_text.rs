//! `vramscope leaks` for people (text) and scripts (JSON).

use std::fmt::Write;

use vramscope_analysis::iterations::IterationSource;
use vramscope_analysis::leaks::{Finding, LeakReport, Severity};

use vramscope_text::units::{bytes, count};

/// Iterations listed one per line before the table is elided.
const ITERATION_ROWS: usize = 12;
/// Stack frames printed per site.
const STACK_LINES: usize = 8;

/// The `--json` form (pretty-printed, stable field names).
pub fn leaks_json(r: &LeakReport) -> String {
    serde_json::to_string_pretty(r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

fn source_text(s: &IterationSource) -> String {
    match s {
        IterationSource::ProfilerStep => "ProfilerStep annotations".into(),
        IterationSource::Annotation(n) => format!("repeated annotation \"{n}\""),
        IterationSource::UserMetadata(n) => format!("user_metadata labels, starting at \"{n}\""),
        IterationSource::OptimizerStep => "optimizer steps in the stacks".into(),
        IterationSource::RepeatedPattern => "the repeating allocation pattern".into(),
        IterationSource::None => "none found".into(),
    }
}

fn signed(n: i64) -> String {
    if n < 0 {
        format!("-{}", bytes(n.unsigned_abs()))
    } else {
        format!("+{}", bytes(n as u64))
    }
}

/// The terminal report; `verbose` prints the `[ok]` findings in full too.
pub fn leaks_text(r: &LeakReport, name: &str, verbose: bool) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{name} · device {} · leak analysis", r.device);
    let _ = writeln!(
        o,
        "iterations: {} ({})",
        r.iterations.len(),
        source_text(&r.iteration_source)
    );
    if !r.iterations.is_empty() {
        let _ = writeln!(
            o,
            "  {:>5}  {:>12}  {:>12}  {:>12}  {:>12}",
            "iter", "start", "peak", "end", "growth"
        );
        let n = r.iterations.len();
        for (i, it) in r.iterations.iter().enumerate() {
            if n > ITERATION_ROWS && i >= ITERATION_ROWS / 2 && i < n - ITERATION_ROWS / 2 {
                if i == ITERATION_ROWS / 2 {
                    let _ = writeln!(o, "  {:>5}", "…");
                }
                continue;
            }
            let _ = writeln!(
                o,
                "  {:>5}  {:>12}  {:>12}  {:>12}  {:>12}{}",
                it.range.number,
                bytes(it.start_bytes),
                bytes(it.peak_bytes),
                bytes(it.end_bytes),
                signed(it.growth),
                if it.range.complete {
                    ""
                } else {
                    "  (cut short)"
                }
            );
        }
        let _ = writeln!(
            o,
            "  allocated at the end of an iteration changes by {} per iteration",
            signed(r.growth_per_iteration.round() as i64)
        );
    }
    for note in &r.notes {
        let _ = writeln!(o, "note: {note}");
    }
    let _ = writeln!(o, "\n{}", r.verdict);
    for (i, f) in r.findings.iter().enumerate() {
        if f.severity == Severity::Benign && !verbose {
            // Expected memory, one line each: the leaks come first.
            let _ = writeln!(o, "{}. [ok] {}", i + 1, f.title);
        } else {
            finding(&mut o, i + 1, f);
        }
    }
    if !verbose && r.findings.iter().any(|f| f.severity == Severity::Benign) {
        let _ = writeln!(o, "\n([ok] findings in full with --verbose)");
    }
    o
}

fn finding(o: &mut String, k: usize, f: &Finding) {
    let tag = match f.severity {
        Severity::Leak => "LEAK",
        Severity::Warning => "WARNING",
        Severity::Benign => "ok",
    };
    let _ = writeln!(o, "\n{k}. [{tag}] {}", f.title);
    let _ = writeln!(o, "   {}", f.explanation);
    let _ = writeln!(o, "   fix: {}", f.fix);
    for s in &f.sites {
        let _ = writeln!(
            o,
            "   · {}{}{}",
            s.site,
            s.category
                .map(|c| format!("  [{}]", c.label()))
                .unwrap_or_default(),
            if s.bytes_per_iteration > 0.0 {
                format!(
                    "  {} per iteration",
                    signed(s.bytes_per_iteration.round() as i64)
                )
            } else {
                format!("  {}", bytes(s.bytes))
            }
        );
        if let Some(c) = &s.code {
            let _ = writeln!(o, "       {}: {c}", s.line);
        }
        for part in &s.within {
            let _ = writeln!(o, "       └ {}  {}", bytes(part.bytes), part.label);
        }
        if let Some(h) = &s.held_by {
            let _ = writeln!(o, "       {}", h.text);
        } else if let Some((line, c)) = &s.kept_by {
            if *line != s.line {
                let _ = writeln!(o, "       {line}: {c}   ← keeps it");
            }
        }
        if s.live_bytes.len() > 1 {
            let shown: Vec<String> = s
                .live_bytes
                .iter()
                .rev()
                .take(8)
                .rev()
                .map(|&b| bytes(b))
                .collect();
            let more = if s.live_bytes.len() > 8 { "…, " } else { "" };
            let _ = writeln!(
                o,
                "       alive at iteration ends: {more}{}",
                shown.join(", ")
            );
        }
        if s.gc_freed_blocks > 0 {
            let _ = writeln!(
                o,
                "       freed by the cycle collector: {} tensors, {}",
                count(s.gc_freed_blocks),
                bytes(s.gc_freed_bytes)
            );
        }
        for line in s.stack.iter().take(STACK_LINES) {
            let _ = writeln!(o, "         {line}");
        }
        if s.stack.len() > STACK_LINES {
            let _ = writeln!(o, "         … {} more frames", s.stack.len() - STACK_LINES);
        }
    }
}
