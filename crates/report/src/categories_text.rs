//! `vramscope categories` for people (text) and scripts (JSON).

use std::fmt::Write;

use vramscope_analysis::categories::{CategoryView, Rule, Shares, Source};
use vramscope_analysis::{Category, CategoryTotal};

use vramscope_text::units::{bytes, count};

/// The `--json` form (pretty-printed, stable field names).
pub fn categories_json(views: &[CategoryView]) -> String {
    serde_json::to_string_pretty(views).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

fn find(v: &[CategoryTotal], c: Category) -> u64 {
    v.iter().find(|x| x.category == c).map_or(0, |x| x.bytes)
}

/// One agreement table.
fn shares(o: &mut String, title: &str, s: &Shares) {
    let _ = writeln!(
        o,
        "\n  {title}: {:.1}% of bytes over time, {:.1}% at the peak",
        s.over_time * 100.0,
        s.at_peak * 100.0
    );
    let total: f64 = s.confusion.iter().map(|c| c.byte_time).sum();
    let _ = writeln!(
        o,
        "  {:<18} {:<18} {:>9} {:>12}",
        "labelled", "given", "time", "at the peak"
    );
    for c in &s.confusion {
        let share = if total > 0.0 {
            c.byte_time * 100.0 / total
        } else {
            0.0
        };
        let _ = writeln!(
            o,
            "  {:<18} {:<18} {:>8.1}% {:>12}",
            c.reference.as_str(),
            c.inferred.as_str(),
            share,
            bytes(c.peak_bytes)
        );
    }
}

/// The terminal report.
pub fn categories_text(views: &[CategoryView], name: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{name}: what the memory is");
    for v in views {
        let _ = writeln!(o, "\nDevice {} {}", v.device, "─".repeat(60));
        let _ = writeln!(
            o,
            "  {:<18} {:>12} {:>12} {:>12}  labels from",
            "category", "at the peak", "at the end", "highest"
        );
        let mut cats: Vec<Category> = Category::ALL
            .into_iter()
            .filter(|c| {
                find(&v.at_peak, *c) > 0
                    || find(&v.at_end, *c) > 0
                    || v.max.iter().any(|m| m.category == *c)
            })
            .collect();
        cats.sort_by_key(|c| std::cmp::Reverse(find(&v.at_peak, *c)));
        for c in cats {
            let max = v
                .max
                .iter()
                .find(|m| m.category == c)
                .map_or(0, |m| m.bytes);
            let src = v
                .at_peak
                .iter()
                .chain(&v.at_end)
                .find(|x| x.category == c)
                .and_then(|x| x.source);
            let _ = writeln!(
                o,
                "  {:<18} {:>12} {:>12} {:>12}  {}",
                c.label(),
                bytes(find(&v.at_peak, c)),
                bytes(find(&v.at_end, c)),
                bytes(max),
                Source::describe(src)
            );
        }
        let _ = writeln!(o, "  {:<18} {:>12}", "peak allocated", bytes(v.peak_bytes));
        if !v.rules_at_peak.is_empty() {
            let _ = writeln!(o, "\n  Why, at the peak");
            for r in &v.rules_at_peak {
                let _ = writeln!(
                    o,
                    "  {:>12} {:>8} blocks  {:<16} {}",
                    bytes(r.bytes),
                    count(r.blocks),
                    r.category.label(),
                    if r.rule == Rule::Given {
                        Source::describe(r.source)
                    } else {
                        r.rule.describe()
                    }
                );
            }
        }
        if let Some(a) = &v.agreement {
            let against = format!(
                "the {} ({} blocks)",
                Source::describe(Some(a.reference)),
                count(a.blocks)
            );
            shares(
                &mut o,
                &format!("Inference alone against {against}"),
                &a.inference,
            );
            if let Some(w) = &a.with_tags {
                shares(
                    &mut o,
                    &format!("Recorder tags and inference against {against}"),
                    w,
                );
            }
        }
    }
    o
}
