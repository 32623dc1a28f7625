//! Graphviz DOT of a finding's example (`dot -Tsvg finding.dot`).

use std::collections::HashSet;
use std::fmt::Write;

use crate::example::{shorten, ELIDED_TYPE};
use crate::explain::bytes;
use crate::report::{Finding, Step};

/// Escape text for a double-quoted DOT string. Backslashes and quotes are
/// escaped, line breaks become `\n`, other control characters U+FFFD.
pub fn dot_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            '\r' => {}
            '\t' => o.push(' '),
            c if (c as u32) < 0x20 || c == '\u{7f}' => o.push('\u{FFFD}'),
            c => o.push(c),
        }
    }
    o
}

/// An edge of an example: (src, dst, label).
pub(crate) type EdgeKey<'a> = (usize, usize, &'a str);

/// The edges between consecutive steps of a closed cycle, and separately
/// the closing one (last step back to the first).
pub(crate) fn cycle_edges(cycle: &[Step]) -> (HashSet<EdgeKey<'_>>, Option<EdgeKey<'_>>) {
    let n = cycle.len();
    let set = (0..n)
        .map(|k| {
            let (a, b) = (&cycle[k], &cycle[(k + 1) % n]);
            (a.node, b.node, a.label.as_str())
        })
        .collect();
    let closing = cycle
        .last()
        .zip(cycle.first())
        .map(|(l, f)| (l.node, f.node, l.label.as_str()));
    (set, closing)
}

/// The example subgraph of `f` as a DOT digraph: tensors as red boxes
/// (shape, dtype, device, bytes), other objects as `Type` and a short
/// repr, every reference labelled, the cycle orange and the reference that
/// closes it bold.
pub fn finding_dot(f: &Finding) -> String {
    let ex = &f.example;
    let mut o = String::new();
    let _ = writeln!(o, "digraph cycle {{");
    let _ = writeln!(
        o,
        "  graph [label=\"{}\", labelloc=t, fontname=\"Helvetica\", fontsize=12];",
        dot_escape(&format!("{}×  {}", crate::explain::count(f.count), f.title))
    );
    o.push_str("  node [shape=box, style=\"rounded\", fontname=\"Helvetica\", fontsize=11];\n");
    o.push_str("  edge [fontname=\"Helvetica\", fontsize=10];\n");
    let on_cycle: HashSet<usize> = ex.cycle.iter().map(|s| s.node).collect();
    for (i, n) in ex.nodes.iter().enumerate() {
        if let Some(t) = &n.tensor {
            let mut label = format!("{}\n{}\n{}", n.type_name, t.describe(), bytes(t.bytes));
            if let Some(g) = &t.grad_fn {
                label.push_str(&format!("\ngrad_fn={g}"));
            }
            let _ = writeln!(
                o,
                "  n{i} [label=\"{}\", style=\"filled,rounded\", fillcolor=\"#dc2626\", fontcolor=\"white\", color=\"#7f1d1d\"];",
                dot_escape(&label)
            );
        } else if n.type_name == ELIDED_TYPE {
            let _ = writeln!(
                o,
                "  n{i} [label=\"{}\", style=\"dashed,rounded\"];",
                dot_escape(&n.repr)
            );
        } else {
            let label = format!("{}\n{}", n.type_name, shorten(&n.repr, 40));
            let extra = if on_cycle.contains(&i) {
                ", color=\"#b45309\", penwidth=1.5"
            } else {
                ""
            };
            let _ = writeln!(o, "  n{i} [label=\"{}\"{extra}];", dot_escape(&label));
        }
    }
    let (cycle, closing) = cycle_edges(&ex.cycle);
    for e in &ex.edges {
        let key = (e.src, e.dst, e.label.as_str());
        let style = if Some(key) == closing {
            ", color=\"#b45309\", fontcolor=\"#b45309\", style=bold, penwidth=2.5"
        } else if cycle.contains(&key) {
            ", color=\"#b45309\", fontcolor=\"#b45309\""
        } else {
            ""
        };
        let _ = writeln!(
            o,
            "  n{} -> n{} [label=\"{}\"{style}];",
            e.src,
            e.dst,
            dot_escape(&e.label)
        );
    }
    o.push_str("}\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        assert_eq!(dot_escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(dot_escape("x\ny"), "x\\ny");
    }
}
