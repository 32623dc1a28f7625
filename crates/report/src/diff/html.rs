//! The diff as one self-contained HTML page: no script, no network (a
//! Content-Security-Policy forbids every fetch), every string from the
//! snapshots escaped. Stacks open with `<details>`, so nothing needs script.

use std::fmt::Write;

use vramscope_analysis::{DiffGroup, DiffTotals, SiteDelta};

use super::svg::{diff_svg, DiffSvgOptions};
use super::{sizes_text, DiffReport};
use vramscope_analysis::flame::DiffNode;
use vramscope_text::escape::markup;
use vramscope_text::units::{bytes, count, signed_bytes};

const STYLE: &str = "\
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:24px auto;max-width:1280px;padding:0 16px;color:#1d1d1f;background:#fff}\
h1{font-size:22px;margin:0 0 6px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}\
.sides{margin:0 0 16px;color:#444}.sides b{display:inline-block;width:1.4em}\
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:150px}\
.card .v{font-size:18px;font-weight:600}.card .k{color:#666;font-size:12px}\
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eee;vertical-align:top}\
th{font-weight:600;color:#555;font-size:12px}td.n{width:1%;text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}\
.up{color:#b3261e}.down{color:#1f5fbf}.none{color:#888}\
summary{cursor:pointer}ol.stack{margin:4px 0 4px 0;padding-left:2.2em;font:12px/1.4 ui-monospace,Menlo,Consolas,monospace;color:#333}\
ol.stack li.site{font-weight:700;color:#000}.sizes{color:#666;font-size:12px}\
.flame{overflow-x:auto;border:1px solid #ddd;border-radius:6px}.flame svg{display:block;max-width:100%;height:auto}\
.empty{padding:10px 12px;background:#f3f7f0;border-radius:6px}";

/// Render the page: headline totals, the grown and shrunk stacks, the
/// per-site table, the peak-to-peak comparison when present, and `tree`
/// as an inline differential flamegraph.
pub fn diff_html(r: &DiffReport, tree: &DiffNode) -> String {
    let title = format!("vramscope diff: {} → {}", r.a.file, r.b.file);
    let mut o = String::with_capacity(16 * 1024);
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>Memory diff</h1>\n",
        markup(&title)
    );
    let _ = writeln!(
        o,
        "<p class=\"sides\"><b>A</b>{}<br><b>B</b>{}</p>",
        markup(&r.a.describe()),
        markup(&r.b.describe())
    );
    let d = &r.diff;
    cards(&mut o, &d.totals);
    if d.is_empty() {
        o.push_str("<p class=\"empty\">No difference: every block alive in B has a block of the same size from the same stack in A, and the other way round.</p>\n");
    } else {
        groups(
            &mut o,
            "Alive in B and not in A",
            "up",
            '+',
            &d.grown,
            d.totals.grown_stacks,
        );
        groups(
            &mut o,
            "Alive in A and not in B",
            "down",
            '-',
            &d.shrunk,
            d.totals.shrunk_stacks,
        );
        let _ = writeln!(
            o,
            "<h2>By allocation site{}</h2>",
            shown(d.by_site.len(), d.totals.sites)
        );
        sites(&mut o, &d.by_site);
    }
    if let Some(p) = &r.peak_to_peak {
        let _ = writeln!(
            o,
            "<h2>Peak to peak{}</h2>\n<p>A peak <b>{}</b> at {}<br>B peak <b>{}</b> at {}<br>change <b class=\"{}\">{}</b></p>",
            shown(p.by_site.len(), p.totals.sites),
            bytes(p.totals.a_bytes),
            markup(&p.a.moment),
            bytes(p.totals.b_bytes),
            markup(&p.b.moment),
            class(p.totals.delta),
            signed_bytes(p.totals.delta as f64)
        );
        sites(&mut o, &p.by_site);
    }
    let svg = diff_svg(
        tree,
        &DiffSvgOptions {
            width: 1240,
            ..Default::default()
        },
    );
    // Inline: the XML declaration belongs to standalone files only.
    let body = svg.find("<svg").map_or(svg.as_str(), |i| &svg[i..]);
    let _ = writeln!(
        o,
        "<h2>Differential flamegraph</h2>\n<p class=\"sizes\">Each frame is as wide as the larger of its bytes in A and in B; red: more in B, blue: less in B. Hover a frame for its figures.</p>\n<div class=\"flame\">\n{body}</div>"
    );
    o.push_str("</body>\n</html>\n");
    o
}

fn class(delta: i64) -> &'static str {
    match delta {
        0 => "none",
        d if d > 0 => "up",
        _ => "down",
    }
}

fn shown(listed: usize, total: u64) -> String {
    if (listed as u64) < total {
        format!(
            " <span class=\"sizes\">(top {listed} of {})</span>",
            count(total)
        )
    } else {
        String::new()
    }
}

fn cards(o: &mut String, t: &DiffTotals) {
    let blocks = |n: u64| format!("{} {}", count(n), if n == 1 { "block" } else { "blocks" });
    let cards = [
        ("A allocated", bytes(t.a_bytes), blocks(t.a_blocks), ""),
        ("B allocated", bytes(t.b_bytes), blocks(t.b_blocks), ""),
        (
            "change",
            signed_bytes(t.delta as f64),
            String::new(),
            class(t.delta),
        ),
        (
            "only in B",
            format!("+{}", bytes(t.grown_bytes)),
            format!(
                "{} from {} stacks",
                blocks(t.grown_blocks),
                count(t.grown_stacks)
            ),
            "up",
        ),
        (
            "only in A",
            format!("-{}", bytes(t.shrunk_bytes)),
            format!(
                "{} from {} stacks",
                blocks(t.shrunk_blocks),
                count(t.shrunk_stacks)
            ),
            "down",
        ),
        (
            "matched",
            bytes(t.matched_bytes),
            blocks(t.matched_blocks),
            "",
        ),
    ];
    o.push_str("<div class=\"cards\">\n");
    for (k, v, sub, cls) in cards {
        let _ = writeln!(
            o,
            "<div class=\"card\"><div class=\"k\">{k}</div><div class=\"v {cls}\">{}</div><div class=\"k\">{}</div></div>",
            markup(&v),
            markup(&sub)
        );
    }
    o.push_str("</div>\n");
}

fn groups(o: &mut String, title: &str, cls: &str, sign: char, v: &[DiffGroup], total: u64) {
    let _ = writeln!(o, "<h2>{title}{}</h2>", shown(v.len(), total));
    if v.is_empty() {
        if total == 0 {
            o.push_str("<p class=\"none\">None.</p>\n");
        }
        return;
    }
    o.push_str("<table>\n<tr><th>bytes</th><th>blocks</th><th>site and stack</th></tr>\n");
    for g in v {
        let _ = write!(
            o,
            "<tr><td class=\"n {cls}\">{sign}{}</td><td class=\"n\">{}</td><td><details><summary>{}</summary><div class=\"sizes\">{}</div>",
            bytes(g.bytes),
            count(g.count),
            markup(&g.site),
            markup(&sizes_text(g))
        );
        if g.stack.is_empty() {
            o.push_str("<div class=\"none\">no stack recorded</div>");
        } else {
            o.push_str("<ol class=\"stack\">");
            for line in &g.stack {
                let site = if *line == g.site {
                    " class=\"site\""
                } else {
                    ""
                };
                let _ = write!(o, "<li{site}>{}</li>", markup(line));
            }
            o.push_str("</ol>");
        }
        o.push_str("</details></td></tr>\n");
    }
    o.push_str("</table>\n");
}

fn sites(o: &mut String, v: &[SiteDelta]) {
    o.push_str(
        "<table>\n<tr><th>A</th><th>B</th><th>change</th><th>blocks A → B</th><th>site</th></tr>\n",
    );
    for s in v {
        let _ = writeln!(
            o,
            "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n {}\">{}</td><td class=\"n\">{} → {}</td><td>{}</td></tr>",
            bytes(s.a_bytes),
            bytes(s.b_bytes),
            class(s.delta),
            signed_bytes(s.delta as f64),
            count(s.a_blocks),
            count(s.b_blocks),
            markup(&s.site)
        );
    }
    o.push_str("</table>\n");
}
