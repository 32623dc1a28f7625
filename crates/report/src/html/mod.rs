//! `vramscope report`: one self-contained, interactive HTML file.
//!
//! The page needs no network: its script and style are inlined, the data is
//! a deflated binary blob inflated by the browser's `DecompressionStream`,
//! and a Content-Security-Policy forbids every fetch and every script but
//! ours (a nonce), so even an injected handler could not run. Strings from
//! the snapshot never become markup: the page writes them with
//! `textContent`, and the only strings in the HTML itself (the title) are
//! escaped.

mod blob;
mod data;
mod ranks;
pub use ranks::{ranks_html, ranks_report};
mod simulate;

use serde_json::json;
use vramscope_analysis::categories::Labelled;
use vramscope_analysis::leaks::{find_leaks_with, LeakOptions};
use vramscope_analysis::summary::{summarize_device_with, summary_devices, summary_of};
use vramscope_analysis::SummaryOptions;
use vramscope_snapshot::Snapshot;
use vramscope_text::escape::markup;

pub use blob::base64;

const TEMPLATE: &str = include_str!("../../assets/report.html");
/// The page's script: one function (`0_core.js` opens it, `5_navigation.js`
/// closes it) written in parts by concept, so the parts share its closure
/// as one file would. Each part starts with its `// ---------- ... ----------`
/// heading.
const SCRIPT: &str = concat!(
    // formatting, data, state, stacks, axes
    include_str!("../../assets/report/0_core.js"),
    // the timeline: drawing, minimap, hit testing
    include_str!("../../assets/report/1_timeline.js"),
    // one allocation, alive at a time, the allocator's segments
    include_str!("../../assets/report/2_details.js"),
    // Leaks, Diff, OOM, Simulate, What to do
    include_str!("../../assets/report/3_panels.js"),
    // facts, file panel, legend, categories, search
    include_str!("../../assets/report/4_facts.js"),
    // navigation, test and automation hooks, start
    include_str!("../../assets/report/5_navigation.js"),
);
const STYLE: &str = include_str!("../../assets/report.css");

/// Options of `vramscope report`. `Default` gives the documented defaults.
#[derive(Clone, Debug)]
pub struct ReportOptions {
    /// Only this device. Default: every device with segments or events.
    pub device: Option<u32>,
    /// Shown in the page title. Default: "vramscope report".
    pub title: Option<String>,
    /// Allocation sites listed at the peak and per OOM. Default 25.
    pub top_sites: usize,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            device: None,
            title: None,
            top_sites: 25,
        }
    }
}

/// A snapshot to compare against: the report gets a Diff tab with what is
/// alive in this one and not in the baseline (at the end and at the peaks).
pub struct Baseline<'a> {
    pub snap: &'a Snapshot,
    /// Its file name, as shown.
    pub name: String,
}

/// Build the report page for `snap`.
pub fn report_html(snap: &Snapshot, opts: &ReportOptions) -> String {
    report_html_against(snap, opts, None)
}

/// The diff of `snap`'s `device` against the baseline, end to end and peak
/// to peak ([`vramscope_analysis::compare`], as `vramscope diff BASE FILE`),
/// as the Diff tab's JSON.
fn baseline_diff(snap: &Snapshot, device: u32, name: &str, base: &Baseline) -> serde_json::Value {
    use vramscope_analysis::compare::{compare, Input};
    use vramscope_analysis::moment::Moment;
    // The same device when the baseline has it; else the baseline's own
    // device, by the rule every command uses (the one with activity).
    let a_dev = match base.snap.devices().contains(&device) {
        true => Ok(device),
        false => base.snap.pick_device(None),
    };
    let Ok(a_dev) = a_dev else {
        return serde_json::Value::Null;
    };
    let (a, b) = (
        Input::new(base.snap, &base.name, a_dev),
        Input::new(snap, name, device),
    );
    let opts = vramscope_analysis::DiffOptions {
        top: 50,
        ..Default::default()
    };
    compare(&a, Moment::End, Some(&b), Moment::End, &opts)
        .ok()
        .and_then(|c| serde_json::to_value(&c.report).ok())
        .unwrap_or_default()
}

/// Build the report page for `snap`, with a Diff tab against `baseline`.
pub fn report_html_against(
    snap: &Snapshot,
    opts: &ReportOptions,
    baseline: Option<&Baseline>,
) -> String {
    let sopts = SummaryOptions {
        device: opts.device,
        top_sites: opts.top_sites,
        ..SummaryOptions::default()
    };
    // Each device's blocks are labelled once, for the summary, the page
    // data and the leak analysis alike.
    let device_ids = summary_devices(snap, &sopts);
    let labelled: Vec<Labelled> = device_ids.iter().map(|&d| Labelled::new(snap, d)).collect();
    let summary = summary_of(
        snap,
        device_ids
            .iter()
            .zip(&labelled)
            .map(|(&d, l)| summarize_device_with(snap, d, &sopts, Some(l)))
            .collect(),
    );
    let mut b = blob::Blob::new();
    let mut tables = data::Tables::new(snap);
    // The leak analysis (the Leaks tab) runs beside the page data.
    let leak_opts = LeakOptions::default();
    let (devices, leaks, simulations) = std::thread::scope(|scope| {
        // The allocator simulation replays in parallel threads of its own.
        let simulations = scope.spawn(|| {
            device_ids
                .iter()
                .zip(&labelled)
                .map(|(&d, l)| simulate::simulation_and_advice(snap, d, l))
                .collect::<Vec<_>>()
        });
        let leaks = scope.spawn(|| {
            device_ids
                .iter()
                .zip(&labelled)
                .map(|(&d, l)| {
                    serde_json::to_value(find_leaks_with(snap, d, &leak_opts, l))
                        .unwrap_or_default()
                })
                .collect::<Vec<_>>()
        });
        let devices: Vec<serde_json::Value> = summary
            .devices
            .iter()
            .zip(&labelled)
            .map(|(d, l)| data::device(snap, d.device, d, l, &mut tables, &mut b))
            .collect();
        (
            devices,
            leaks.join().unwrap_or_default(),
            simulations.join().unwrap_or_default(),
        )
    });
    let name = opts.title.clone().unwrap_or_default();
    let devices: Vec<serde_json::Value> = devices
        .into_iter()
        .zip(leaks.into_iter().map(Some).chain(std::iter::repeat(None)))
        .zip(&device_ids)
        .zip(
            simulations
                .into_iter()
                .chain(std::iter::repeat((None, None))),
        )
        .map(|(((mut v, l), &d), (w, advice))| {
            if let Some(o) = v.as_object_mut() {
                if let Some(w) = w {
                    o.insert("simulate".into(), w);
                }
                if let Some(a) = advice {
                    o.insert("advise".into(), a);
                }
                if let Some(l) = l {
                    o.insert("leaks".into(), l);
                }
                if let Some(base) = baseline {
                    o.insert("diff".into(), baseline_diff(snap, d, &name, base));
                }
            }
            v
        })
        .collect();
    tables.parts(snap);
    tables.finish(&mut b);
    let title = opts
        .title
        .clone()
        .unwrap_or_else(|| "vramscope report".into());
    b.header.insert("title".into(), json!(title));
    b.header
        .insert("version".into(), json!(env!("CARGO_PKG_VERSION")));
    b.header.insert("devices".into(), json!(devices));
    b.header.insert("source".into(), json!(summary.source));
    b.header.insert(
        "allocator_settings".into(),
        json!(summary.allocator_settings),
    );
    let bytes = b.to_bytes();
    let nonce = nonce_for(&bytes);
    let packed = blob::pack(&bytes);
    TEMPLATE
        .replace("{{TITLE}}", &markup(&title))
        .replace("{{NONCE}}", &nonce)
        .replace("{{STYLE}}", STYLE)
        .replace("{{SCRIPT}}", SCRIPT)
        .replace("{{DATA}}", &packed)
}

/// A per-report nonce for the CSP, derived from the data (reports are
/// reproducible); it only has to be something injected markup cannot know
/// in advance, and nothing from the snapshot is ever parsed as markup.
pub(crate) fn nonce_for(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in bytes.iter().step_by(7) {
        h = (h ^ x as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h ^= bytes.len() as u64;
    format!("{h:016x}")
}
