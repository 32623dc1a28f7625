//! The terminal summary of a [`CycleReport`].

use std::fmt::Write;

use crate::explain::{bytes, count, plural};
use crate::report::CycleReport;

/// A short summary: the totals, then per finding its count, bytes, the
/// cycle in one line and the reference that closes it.
pub fn report_text(r: &CycleReport) -> String {
    let mut o = String::new();
    let collections = plural(r.collections, "collection", "collections");
    if r.findings.is_empty() && r.findings_omitted == 0 {
        let _ = writeln!(
            o,
            "No reference cycle holds a tensor ({collections}, {} with tensors).",
            plural(r.components_with_tensors, "garbage group", "garbage groups")
        );
        note_unreached(&mut o, r);
        return o;
    }
    let shapes = r.findings.len() as u64 + r.findings_omitted;
    let _ = writeln!(
        o,
        "Reference cycles hold {} ({}): {} in {} ({collections}).",
        plural(r.tensors, "tensor", "tensors"),
        bytes(r.bytes),
        plural(shapes, "shape", "shapes"),
        plural(r.cyclic_components, "garbage group", "garbage groups"),
    );
    let width = r.findings.len().to_string().len();
    for (i, f) in r.findings.iter().enumerate() {
        let _ = writeln!(
            o,
            "\n{:>width$}. {}× {}  {}",
            i + 1,
            count(f.count),
            bytes(f.bytes),
            f.title
        );
        let pad = " ".repeat(width + 2);
        let mut facts = vec![plural(f.tensors, "tensor", "tensors")];
        if f.count > 1 {
            facts.push(format!("up to {} each", bytes(f.bytes_per_occurrence)));
        }
        if !f.shapes_seen.is_empty() {
            facts.push(f.shapes_seen.join(", "));
        }
        let _ = writeln!(o, "{pad}{}", facts.join("; "));
        let _ = writeln!(o, "{pad}closes with {}", f.closing_edge);
        for s in &f.sites {
            let _ = writeln!(o, "{pad}at {s}");
        }
    }
    if r.findings_omitted > 0 {
        let _ = writeln!(
            o,
            "\n… and {} more (in the totals above).",
            plural(r.findings_omitted, "shape", "shapes")
        );
    }
    note_unreached(&mut o, r);
    o
}

fn note_unreached(o: &mut String, r: &CycleReport) {
    if r.unreached_tensors > 0 {
        let _ = writeln!(
            o,
            "{} of the garbage no cycle reaches (a reference was not reported).",
            plural(r.unreached_tensors, "tensor", "tensors")
        );
    }
}
