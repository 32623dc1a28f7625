//! The cycle report as one self-contained HTML page: no script, no
//! network (a Content-Security-Policy forbids every fetch and every
//! script), every string from the input escaped. Each finding has its
//! explanation, an SVG drawing laid out by [`crate::layout`] (hover a node
//! or edge for its details: SVG `<title>`s, not script) and a table of the
//! steps.

use std::fmt::Write;

use crate::dot::cycle_edges;
use crate::example::ELIDED_TYPE;
use crate::explain::{bytes, count, plural, reference};
use crate::layout::layout;
use crate::report::{CycleReport, Finding, Step};
use vramscope_text::escape::{markup, markup_lines};

const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'";
/// The fill of tensor nodes.
pub const TENSOR_FILL: &str = "#dc2626";

const STYLE: &str = "\
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#1f2937;background:#f8fafc}\
header{background:#111827;color:#f9fafb;padding:10px 20px;display:flex;gap:16px;align-items:baseline}\
header .brand{font-weight:700;color:#fca5a5}header h1{font-size:17px;margin:0;font-weight:600}\
main{padding:12px 20px 40px;max-width:1200px}\
.summary{font-size:15px}.muted{color:#6b7280}\
nav ol{padding-left:22px}nav a{color:#1d4ed8;text-decoration:none}nav a:hover{text-decoration:underline}\
section.finding{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:12px 18px;margin:18px 0}\
section.finding h2{font-size:16px;margin:4px 0 8px}\
dl.facts{display:flex;flex-wrap:wrap;gap:6px 22px;margin:6px 0}dl.facts div{min-width:90px}\
dl.facts dt{font-size:12px;color:#6b7280}dl.facts dd{margin:0;font-weight:600}\
.explanation{max-width:920px}code{background:#f3f4f6;border-radius:3px;padding:0 3px;font-size:13px}\
.drawing{overflow:auto;border:1px solid #f1f5f9;border-radius:6px;margin:10px 0;background:#fcfcfd}\
svg.graph text{font:11px system-ui,sans-serif;fill:#111827}\
svg.graph .node rect{fill:#fff;stroke:#9ca3af;stroke-width:1}\
svg.graph .node.cycle rect{stroke:#b45309;stroke-width:1.6;fill:#fffbeb}\
svg.graph .node.elided rect{stroke-dasharray:4 3;fill:#f9fafb}\
svg.graph .node.tensor rect{fill:#dc2626;stroke:#7f1d1d}svg.graph .node.tensor text{fill:#fff}\
svg.graph .node text .type{font-weight:700}svg.graph .node:hover rect{stroke:#111827;stroke-width:2}\
svg.graph .edge path{fill:none;stroke:#6b7280;stroke-width:1.2}svg.graph .edge polygon{fill:#6b7280}\
svg.graph .edge.cycle path{stroke:#b45309;stroke-width:1.6}svg.graph .edge.cycle polygon{fill:#b45309}\
svg.graph .edge.closing path{stroke-width:3}\
svg.graph .edge text{font-size:10.5px;fill:#374151;paint-order:stroke;stroke:#fff;stroke-width:3px;text-anchor:middle}\
svg.graph .edge.cycle text{fill:#92400e}svg.graph .edge:hover path{stroke:#111827}\
table.steps{border-collapse:collapse;font-size:13px;margin-top:6px}\
table.steps td,table.steps th{padding:2px 10px;text-align:left;vertical-align:top}\
table.steps tr.group th{background:#f3f4f6;font-weight:600;padding-top:5px}\
table.steps td.n{color:#9ca3af;text-align:right}.repr{color:#6b7280;font-family:ui-monospace,monospace;font-size:12px}\
";

/// Escaped text with `backticked` parts as `<code>`.
fn with_code(s: &str) -> String {
    let parts: Vec<&str> = s.split('`').collect();
    let balanced = parts.len() % 2 == 1;
    let mut o = String::new();
    for (i, p) in parts.iter().enumerate() {
        if i % 2 == 1 && (balanced || i + 1 < parts.len()) {
            let _ = write!(o, "<code>{}</code>", markup(p));
        } else {
            if i % 2 == 1 {
                o.push('`');
            }
            o.push_str(&markup(p));
        }
    }
    o
}

/// The report page. `title` is shown in the tab and the header.
pub fn report_html(r: &CycleReport, title: &str) -> String {
    let mut o = String::with_capacity(16 * 1024);
    let t = markup(title);
    let _ = write!(
        o,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{t}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <header><div class=\"brand\">vramscope</div><h1>{t}</h1></header>\n<main>\n"
    );
    let collections = plural(r.collections, "collection", "collections");
    if r.findings.is_empty() && r.findings_omitted == 0 {
        let _ = writeln!(
            o,
            "<p class=\"summary\">No reference cycle holds a tensor ({collections}, {} with \
             tensors).</p>",
            plural(r.components_with_tensors, "garbage group", "garbage groups")
        );
    } else {
        let shapes = r.findings.len() as u64 + r.findings_omitted;
        let _ = writeln!(
            o,
            "<p class=\"summary\">Reference cycles hold <b>{}</b> (<b>{}</b>): {} in {} \
             ({collections}, {} garbage objects). Each of these tensors is freed only when \
             Python's cycle collector runs, not when your code drops it.</p>",
            plural(r.tensors, "tensor", "tensors"),
            bytes(r.bytes),
            plural(shapes, "shape", "shapes"),
            plural(r.cyclic_components, "garbage group", "garbage groups"),
            count(r.nodes),
        );
        o.push_str("<nav><ol>\n");
        for (i, f) in r.findings.iter().enumerate() {
            let _ = writeln!(
                o,
                "<li><a href=\"#f{}\">{}× {}</a> <span class=\"muted\">{}</span></li>",
                i + 1,
                count(f.count),
                markup(&f.title),
                bytes(f.bytes)
            );
        }
        o.push_str("</ol></nav>\n");
        if r.findings_omitted > 0 {
            let _ = writeln!(
                o,
                "<p class=\"muted\">{} more not shown (in the totals above).</p>",
                plural(r.findings_omitted, "shape", "shapes")
            );
        }
    }
    if r.unreached_tensors > 0 {
        let _ = writeln!(
            o,
            "<p class=\"muted\">{} of the garbage no cycle reaches (a reference was not \
             reported).</p>",
            plural(r.unreached_tensors, "tensor", "tensors")
        );
    }
    for (i, f) in r.findings.iter().enumerate() {
        finding(&mut o, i + 1, f);
    }
    o.push_str("</main>\n</body>\n</html>\n");
    o
}

fn finding(o: &mut String, n: usize, f: &Finding) {
    let _ = writeln!(
        o,
        "<section class=\"finding\" id=\"f{n}\">\n<h2>{n}. {}</h2>",
        markup(&f.title)
    );
    let mut facts: Vec<(&str, String)> = vec![
        ("occurrences", count(f.count)),
        ("tensors", count(f.tensors)),
        ("bytes", bytes(f.bytes)),
        ("largest occurrence", bytes(f.bytes_per_occurrence)),
        ("objects on the cycle", count(f.cycle_length)),
        ("closes with", f.closing_edge.clone()),
    ];
    for (name, list) in [
        ("shapes seen", &f.shapes_seen),
        ("classes", &f.classes),
        ("where", &f.sites),
    ] {
        if !list.is_empty() {
            facts.push((name, list.join("; ")));
        }
    }
    o.push_str("<dl class=\"facts\">");
    for (k, v) in facts {
        let _ = write!(o, "<div><dt>{k}</dt><dd>{}</dd></div>", markup(&v));
    }
    o.push_str("</dl>\n");
    let _ = writeln!(
        o,
        "<p class=\"explanation\">{}</p>",
        with_code(&f.explanation)
    );
    drawing(o, f);
    steps_table(o, f);
    o.push_str("</section>\n");
}

fn node_tip(f: &Finding, i: usize) -> String {
    let n = &f.example.nodes[i];
    let ty = if n.module.is_empty() || n.module == "builtins" {
        n.type_name.clone()
    } else {
        format!("{}.{}", n.module, n.type_name)
    };
    let Some(t) = &n.tensor else {
        return format!("{ty}\n{}", n.repr);
    };
    let mut s = format!(
        "{ty}\nshape {}\ndtype {}\ndevice {}\n{} ({} bytes)",
        t.shape_text(),
        t.dtype,
        t.device,
        bytes(t.bytes),
        count(t.bytes)
    );
    if t.requires_grad || t.grad_fn.is_some() {
        let rg = if t.requires_grad { "True" } else { "False" };
        let _ = write!(s, "\nrequires_grad={rg}");
        if let Some(g) = &t.grad_fn {
            let _ = write!(s, ", grad_fn={g}");
        }
    }
    if t.stack.is_empty() {
        s.push_str("\nallocation stack: not recorded");
    } else {
        s.push_str("\nallocated at:");
        for l in &t.stack {
            let _ = write!(s, "\n  {l}");
        }
    }
    s
}

fn drawing(o: &mut String, f: &Finding) {
    let ex = &f.example;
    let lay = layout(ex);
    let _ = writeln!(
        o,
        "<div class=\"drawing\"><svg class=\"graph\" xmlns=\"http://www.w3.org/2000/svg\" \
         width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"{}\">",
        markup(&f.title),
        w = lay.width,
        h = lay.height
    );
    let (on_cycle, closing) = cycle_edges(&ex.cycle);
    for r in &lay.edges {
        let e = &ex.edges[r.edge];
        let key = (e.src, e.dst, e.label.as_str());
        let mut class = String::from("edge");
        let mut tip = format!(
            "{} → {}",
            reference(&ex.nodes[e.src].type_name, &e.label),
            ex.nodes[e.dst].type_name
        );
        if on_cycle.contains(&key) {
            class.push_str(" cycle");
        }
        if Some(key) == closing {
            class.push_str(" closing");
            tip.push_str(" (closes the loop)");
        }
        let pts: Vec<String> = r
            .arrow
            .iter()
            .map(|p| format!("{:.1},{:.1}", p.0, p.1))
            .collect();
        let _ = writeln!(
            o,
            "<g class=\"{class}\"><title>{}</title><path d=\"{}\"/><polygon points=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text></g>",
            markup_lines(&tip),
            r.d,
            pts.join(" "),
            r.label_at.0,
            r.label_at.1 + 3.5,
            markup(&r.label)
        );
    }
    let cycle_nodes: std::collections::HashSet<usize> = ex.cycle.iter().map(|s| s.node).collect();
    for (i, p) in lay.nodes.iter().enumerate() {
        let n = &ex.nodes[i];
        let mut class = String::from("node");
        let mut fill = "#ffffff";
        if n.is_tensor() {
            class.push_str(" tensor");
            fill = TENSOR_FILL;
        } else if n.type_name == ELIDED_TYPE {
            class.push_str(" elided");
        }
        if cycle_nodes.contains(&i) {
            class.push_str(" cycle");
        }
        let (x, y) = (p.x - p.w / 2.0, p.y - p.h / 2.0);
        let _ = write!(
            o,
            "<g class=\"{class}\"><title>{}</title><rect x=\"{x:.1}\" y=\"{y:.1}\" \
             width=\"{:.1}\" height=\"{:.1}\" rx=\"6\" fill=\"{fill}\"/><text>",
            markup_lines(&node_tip(f, i)),
            p.w,
            p.h
        );
        for (k, line) in p.lines.iter().enumerate() {
            let cls = if k == 0 { " class=\"type\"" } else { "" };
            let _ = write!(
                o,
                "<tspan{cls} x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</tspan>",
                p.x,
                y + 17.0 + 14.0 * k as f64,
                markup(line)
            );
        }
        o.push_str("</text></g>\n");
    }
    o.push_str("</svg></div>\n");
}

fn step_rows(o: &mut String, f: &Finding, steps: &[Step]) {
    for (k, s) in steps.iter().enumerate() {
        let repr = f.example.nodes.get(s.node).map_or("", |n| n.repr.as_str());
        let label = if s.label.is_empty() {
            String::new()
        } else {
            format!("<code>{}</code>", markup(&s.label))
        };
        let _ = writeln!(
            o,
            "<tr><td class=\"n\">{}</td><td><b>{}</b> <span class=\"repr\">{}</span></td><td>{label}</td></tr>",
            k + 1,
            markup(&s.type_name),
            markup(repr)
        );
    }
}

fn steps_table(o: &mut String, f: &Finding) {
    let ex = &f.example;
    o.push_str(
        "<table class=\"steps\"><thead><tr><th>#</th><th>object</th><th>refers to the next \
         through</th></tr></thead><tbody>\n",
    );
    let mut cycles = vec![("Cycle", &ex.cycle)];
    cycles.extend(ex.other_cycles.iter().map(|c| ("Another cycle", c)));
    for (name, c) in cycles {
        let _ = writeln!(
            o,
            "<tr class=\"group\"><th colspan=\"3\">{name} ({}; the last refers back to the \
             first)</th></tr>",
            plural(c.len() as u64, "step", "steps")
        );
        step_rows(o, f, c);
    }
    for p in &ex.paths {
        let what = p
            .last()
            .and_then(|s| ex.nodes.get(s.node))
            .and_then(|n| n.tensor.as_ref())
            .map(|t| format!("{} ({})", t.describe(), bytes(t.bytes)))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "<tr class=\"group\"><th colspan=\"3\">Path to the tensor {}</th></tr>",
            markup(&what)
        );
        step_rows(o, f, p);
    }
    if ex.omitted_paths + ex.omitted_cycles > 0 {
        let _ = writeln!(
            o,
            "<tr><td></td><td colspan=\"2\" class=\"muted\">{} and {} not drawn</td></tr>",
            plural(ex.omitted_paths, "path", "paths"),
            plural(ex.omitted_cycles, "cycle", "cycles")
        );
    }
    o.push_str("</tbody></table>\n");
}
