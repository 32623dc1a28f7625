//! The ranks report: one page for a job's ranks (`vramscope ranks --html`),
//! a strip of memory over time per rank on one scale, the table, the worst
//! rank against the median, drift, and each rank's full report embedded
//! (deflated, base64) and opened in the page on a click. A rank's report is
//! inflated only when opened, so the page opens as fast as its table.
//!
//! The embedded reports run in sandboxed `srcdoc` frames, which inherit the
//! page's Content-Security-Policy: the page's policy lists their script
//! nonces beside its own.

use vramscope_ranks::Ranks;
use vramscope_snapshot::{load, LoadOptions, SnapshotError};

use super::{blob, nonce_for, report_html, ReportOptions};
use vramscope_text::escape::markup;

const TEMPLATE: &str = include_str!("../../assets/ranks.html");
const SCRIPT: &str = include_str!("../../assets/ranks.js");

/// JSON made safe inside a `<script>` element.
fn script_json(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v)
        .unwrap_or_else(|_| "null".into())
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// The script nonce of a report page.
fn page_nonce(page: &str) -> Option<&str> {
    let at = page.find("<script nonce=\"")? + "<script nonce=\"".len();
    let end = page[at..].find('"')?;
    Some(&page[at..at + end])
}

/// The page for `r`, with `pages` (rank, report HTML) embedded.
pub fn ranks_html(r: &Ranks, pages: &[(u32, String)], title: &str) -> String {
    let data = script_json(r);
    let mut nonces = vec![nonce_for(data.as_bytes())];
    let mut embedded = String::new();
    for (rank, page) in pages {
        if let Some(n) = page_nonce(page) {
            nonces.push(n.to_owned());
        }
        embedded.push_str(&format!(
            "<script id=\"page-{rank}\" type=\"application/octet-stream\">{}</script>\n",
            blob::pack(page.as_bytes())
        ));
    }
    let policy: Vec<String> = nonces.iter().map(|n| format!("'nonce-{n}'")).collect();
    TEMPLATE
        .replace("'nonce-{{NONCE}}'", &policy.join(" "))
        .replace("{{NONCE}}", &nonces[0])
        .replace("{{TITLE}}", &markup(title))
        .replace("{{SCRIPT}}", SCRIPT)
        .replace("{{PAGES}}", &embedded)
        .replace("{{DATA}}", &data)
}

/// The ranks report: each rank's report from the file with its highest
/// peak, loaded one at a time.
pub fn ranks_report(r: &Ranks, title: &str) -> Result<String, SnapshotError> {
    let mut pages = Vec::new();
    for row in &r.ranks {
        let snap = load(row.path.as_ref(), &LoadOptions::default())?;
        let name = std::path::Path::new(&row.path)
            .file_name()
            .map_or_else(|| row.path.clone(), |n| n.to_string_lossy().into_owned());
        let page = report_html(
            &snap,
            &ReportOptions {
                title: Some(format!("rank {}: {name}", row.rank)),
                ..Default::default()
            },
        );
        pages.push((row.rank, page));
    }
    Ok(ranks_html(r, &pages, title))
}
