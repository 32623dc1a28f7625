//! `vramscope diff` end to end: a snapshot against itself is empty (synthetic
//! and real), a planted leak is the first thing it finds, the SVG and HTML
//! stay well-formed and inert with hostile frame names, the JSON has the
//! documented fields, and errors map to exit codes.

mod common;

use std::io::BufWriter;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::{json, Value};
use vramscope_synth::{write_snapshot, SynthOptions, SynthTruth};

fn synth(dir: &Path, name: &str, opts: &SynthOptions) -> (PathBuf, SynthTruth) {
    let path = dir.join(name);
    let f = std::fs::File::create(&path).expect("create");
    let truth = write_snapshot(opts, BufWriter::new(f)).expect("synth");
    (path, truth)
}

fn diff_json(args: &[&str]) -> Value {
    let mut all = vec!["diff", "--json", "-q"];
    all.extend_from_slice(args);
    let o = vramscope(&all);
    assert!(o.status.success(), "diff {args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("diff --json is JSON")
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn assert_empty(j: &Value, what: &str) {
    assert_eq!(j["grown"], json!([]), "{what}");
    assert_eq!(j["shrunk"], json!([]), "{what}");
    assert_eq!(j["totals"]["delta"], 0, "{what}");
    assert_eq!(j["totals"]["grown_bytes"], 0, "{what}");
    assert_eq!(j["totals"]["shrunk_bytes"], 0, "{what}");
    assert_eq!(
        j["totals"]["matched_blocks"], j["totals"]["b_blocks"],
        "{what}"
    );
    let sites = j["by_site"].as_array().expect("by_site");
    assert!(sites.iter().all(|s| s["delta"] == 0), "{what}");
    if let Some(pp) = j["peak_to_peak"].as_object() {
        assert_eq!(pp["totals"]["delta"], 0, "{what}: peaks");
        let sites = pp["by_site"].as_array().expect("by_site");
        assert!(sites.iter().all(|s| s["delta"] == 0), "{what}: peaks");
    }
}

#[test]
fn synth_snapshot_against_itself_is_empty() {
    let dir = temp_dir("diff-self");
    let opts = SynthOptions {
        entries: 20_000,
        leak_bytes_per_iter: 8 << 20,
        ..Default::default()
    };
    let (f, _) = synth(&dir, "a.pickle", &opts);
    let (g, _) = synth(&dir, "b.pickle", &opts);
    for moments in [
        &[][..],
        &["--at-a", "peak", "--at-b", "peak"],
        &["--at-a", "#5000", "--at-b", "#5000"],
    ] {
        let mut args = vec![p(&f), p(&g)];
        args.extend_from_slice(moments);
        let j = diff_json(&args);
        assert_empty(&j, &format!("{moments:?}"));
        assert!(j["totals"]["a_bytes"].as_u64().unwrap_or(0) > 0);
    }
    // One file, the same moment twice.
    let j = diff_json(&[p(&f), "--at-a", "end", "--at-b", "end"]);
    assert_empty(&j, "one file");
    assert!(j["peak_to_peak"].is_null());
    let o = vramscope(&["diff", p(&f), p(&g)]);
    assert!(stdout(&o).contains("No difference"), "{}", stdout(&o));
}

#[test]
fn real_snapshots_against_themselves_are_empty() {
    let files = vramscope_testdata::real_snapshots();
    assert!(!files.is_empty(), "no .pickle fixtures");
    for path in &files {
        let f = p(path);
        let j = diff_json(&[f, f]);
        assert_empty(&j, f);
        // One file, peak against end: A is the peak the summary reports.
        let j = diff_json(&[f]);
        let peak = &summary_json(path)["devices"][0]["peak"];
        assert_eq!(j["totals"]["a_bytes"], peak["allocated_bytes"], "{f}");
        assert_eq!(j["a"]["event_index"], peak["event_index"], "{f}");
        let t = &j["totals"];
        let n = |k: &str| t[k].as_u64().expect(k);
        assert_eq!(n("matched_bytes") + n("grown_bytes"), n("b_bytes"), "{f}");
        assert_eq!(n("matched_bytes") + n("shrunk_bytes"), n("a_bytes"), "{f}");
    }
}

#[test]
fn a_planted_leak_comes_first() {
    let dir = temp_dir("diff-leak");
    let base = SynthOptions {
        entries: 20_000,
        seed: 7,
        ..Default::default()
    };
    let (clean, _) = synth(&dir, "clean.pickle", &base);
    let leaky = SynthOptions {
        leak_bytes_per_iter: 64 << 20,
        ..base.clone()
    };
    let (leak, truth) = synth(&dir, "leak.pickle", &leaky);
    assert!(truth.leaked_bytes >= 64 << 20, "{truth:?}");

    let j = diff_json(&[p(&clean), p(&leak)]);
    let top = &j["grown"][0];
    let site = top["site"].as_str().expect("site");
    assert!(
        site.ends_with("train.py:74 in accumulate_history"),
        "{site}"
    );
    // Each leaked tensor is one block; the allocator rounds each up by
    // less than 512 bytes (64 MiB is already a multiple).
    let bytes = top["bytes"].as_u64().expect("bytes");
    let n = top["count"].as_u64().expect("count");
    assert_eq!(n, truth.leaked_bytes / leaky.leak_bytes_per_iter);
    assert!(
        bytes >= truth.leaked_bytes && bytes < truth.leaked_bytes + 512 * n,
        "{bytes} vs {}",
        truth.leaked_bytes
    );
    assert_eq!(top["sizes"][0]["size"], leaky.leak_bytes_per_iter);
    assert!(top["stack"][0]
        .as_str()
        .expect("frame")
        .contains("accumulate_history"));
    // Nothing on A's side comes from that site.
    let shrunk = j["shrunk"].as_array().expect("shrunk");
    assert!(shrunk.iter().all(|g| g["site"] != top["site"]));
    // Per site, the leak's site changed most, at the end and at the peaks.
    assert_eq!(j["by_site"][0]["site"], top["site"]);
    assert_eq!(j["by_site"][0]["a_bytes"], 0);
    assert_eq!(j["by_site"][0]["delta"], bytes);
    let pp = &j["peak_to_peak"];
    assert_eq!(pp["by_site"][0]["site"], top["site"]);
    assert_eq!(pp["by_site"][0]["a_bytes"], 0);
    assert!(pp["by_site"][0]["b_bytes"].as_u64().expect("bytes") <= bytes);
    assert_eq!(
        pp["b"]["moment"].as_str().map(|s| s.starts_with("peak")),
        Some(true)
    );

    let o = vramscope(&["diff", p(&clean), p(&leak), "--top", "3"]);
    let text = stdout(&o);
    let first = text
        .lines()
        .skip_while(|l| !l.starts_with("Alive in B and not in A"))
        .nth(2)
        .unwrap_or("");
    assert!(
        first.contains("+640.00 MiB") && first.contains("accumulate_history"),
        "{text}"
    );
    assert!(text.contains("Peak to peak"), "{text}");

    // One file: from the start of the leaking run to its end, the leak grew.
    let j = diff_json(&[p(&leak), "--at-a", "#0"]);
    assert!(j["grown"][0]["site"]
        .as_str()
        .is_some_and(|s| s.ends_with("accumulate_history")));
}

/// A two-block snapshot whose frame names and files are hostile markup.
fn hostile(dir: &Path, name: &str, extra: u64) -> PathBuf {
    let evil = [
        json!({"filename": "/home/u/<img src=x onerror=alert(1)>.py", "line": 3, "name": "<script>alert(\"x\")</script>"}),
        json!({"filename": "/home/u/train.py", "line": 9, "name": "main & 'co' ]]> \u{1}"}),
    ];
    let other = [json!({"filename": "/home/u/train.py", "line": 12, "name": "plain"})];
    let base = 1u64 << 40;
    let sizes = [4u64 << 20, (2u64 << 20) + extra];
    let doc = json!({
        "segments": [{"device": 0, "address": base, "total_size": 8 << 20, "allocated_size": sizes[0] + sizes[1],
            "active_size": sizes[0] + sizes[1], "requested_size": sizes[0] + sizes[1], "stream": 0, "segment_type": "large",
            "blocks": [
                {"address": base, "size": sizes[0], "requested_size": sizes[0], "state": "active_allocated", "frames": evil},
                {"address": base + sizes[0], "size": sizes[1], "requested_size": sizes[1], "state": "active_allocated", "frames": other}
            ]}],
        "device_traces": [[
            {"action": "alloc", "addr": base + sizes[0], "size": sizes[1], "stream": 0, "time_us": 10, "frames": other}
        ]]
    });
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec(&doc).expect("json")).expect("write");
    path
}

/// Tags balanced, attribute values quoted, every `&` an entity: enough of
/// XML to catch unescaped text.
fn check_xml(s: &str) {
    let body = s
        .strip_prefix("<?xml")
        .and_then(|r| r.split_once("?>"))
        .map_or(s, |r| r.1);
    let mut stack: Vec<String> = Vec::new();
    let mut rest = body;
    while let Some(i) = rest.find(['<', '&']) {
        assert!(!rest[..i].contains('>'), "raw > in text: {}", &rest[..i]);
        rest = &rest[i..];
        if rest.starts_with('&') {
            let end = rest.find(';').expect("entity ends");
            let ent = &rest[1..end];
            let numeric = ent
                .strip_prefix('#')
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
            assert!(
                numeric || ["amp", "lt", "gt", "quot", "apos"].contains(&ent),
                "entity {ent}"
            );
            rest = &rest[end + 1..];
            continue;
        }
        let end = rest.find('>').expect("tag ends");
        let tag = &rest[1..end];
        assert!(!tag.contains('<'), "< inside a tag: {tag}");
        assert_eq!(tag.matches('"').count() % 2, 0, "quotes in {tag}");
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        if tag.starts_with('/') {
            assert_eq!(stack.pop().as_deref(), Some(name.as_str()), "closing {tag}");
        } else if !tag.ends_with('/') {
            stack.push(name);
        }
        rest = &rest[end + 1..];
    }
    assert!(stack.is_empty(), "unclosed {stack:?}");
}

#[test]
fn svg_and_html_escape_hostile_frames() {
    let dir = temp_dir("diff-hostile");
    let a = hostile(&dir, "a.json", 0);
    let b = hostile(&dir, "b.json", 512);
    let svg = dir.join("d.svg");
    let html = dir.join("d.html");
    // B against A: the hostile frames are on one side only.
    let o = vramscope(&["diff", p(&b), p(&a), "--svg", p(&svg), "--html", p(&html)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("wrote"), "{}", stderr(&o));
    let s = std::fs::read_to_string(&svg).expect("svg");
    check_xml(&s);
    if let Some(o) = python(
        "import sys, xml.dom.minidom as m; print(m.parse(sys.argv[1]).documentElement.tagName)",
        &[p(&svg)],
    ) {
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "svg");
    }
    assert!(
        s.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"),
        "{s}"
    );
    assert!(!s.contains("<script") && !s.contains("<img"));
    assert!(s.contains("change"), "tooltips give the change");

    let h = std::fs::read_to_string(&html).expect("html");
    assert!(!h.to_ascii_lowercase().contains("<script"), "no script");
    assert!(!h.contains("<img") && h.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(h.contains("&lt;script&gt;"), "the name is shown as text");
    assert!(h.contains("Content-Security-Policy") && h.contains("default-src 'none'"));
    assert!(!h.contains("https://") && !h.contains("src=\"http"));
    assert!(h.contains("<details>") && h.contains("<svg class=\"vramscope-diff\""));
    assert!(!h.contains("<?xml"));
    let o = vramscope(&["diff", p(&a), p(&b)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("<script>alert"),
        "terminal text is verbatim"
    );
}

#[test]
fn json_has_the_documented_fields() {
    let dir = temp_dir("diff-json");
    let a = hostile(&dir, "a.json", 0);
    let b = hostile(&dir, "b.json", 512);
    let j = diff_json(&[p(&a), p(&b), "--top", "1"]);
    let keys = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(&j),
        [
            "a",
            "b",
            "by_site",
            "grown",
            "peak_to_peak",
            "schema_version",
            "shrunk",
            "totals"
        ]
    );
    assert_eq!(j["schema_version"], 1);
    assert_eq!(keys(&j["a"]), ["device", "event_index", "file", "moment"]);
    assert_eq!(j["a"]["file"], "a.json");
    assert_eq!(j["b"]["moment"], "end (the moment of the dump)");
    assert_eq!(
        keys(&j["totals"]),
        [
            "a_blocks",
            "a_bytes",
            "b_blocks",
            "b_bytes",
            "delta",
            "grown_blocks",
            "grown_bytes",
            "grown_stacks",
            "matched_blocks",
            "matched_bytes",
            "shrunk_blocks",
            "shrunk_bytes",
            "shrunk_stacks",
            "sites"
        ]
    );
    assert_eq!(j["totals"]["delta"], 512);
    assert_eq!(
        keys(&j["grown"][0]),
        ["bytes", "count", "site", "sizes", "stack"]
    );
    assert_eq!(keys(&j["grown"][0]["sizes"][0]), ["count", "size"]);
    assert_eq!(j["grown"][0]["bytes"], (2 << 20) + 512);
    assert_eq!(j["shrunk"][0]["bytes"], 2 << 20);
    assert_eq!(
        keys(&j["by_site"][0]),
        ["a_blocks", "a_bytes", "b_blocks", "b_bytes", "delta", "site"]
    );
    assert_eq!(j["by_site"].as_array().map(Vec::len), Some(1), "--top 1");
    assert_eq!(j["totals"]["sites"], 2);
    assert_eq!(keys(&j["peak_to_peak"]), ["a", "b", "by_site", "totals"]);
}

#[test]
fn errors_map_to_exit_codes() {
    let dir = temp_dir("diff-errors");
    let a = hostile(&dir, "a.json", 0);
    let f = p(&a);
    let code = |args: &[&str]| {
        let mut all = vec!["diff"];
        all.extend_from_slice(args);
        let o = vramscope(&all);
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
        o.status.code()
    };
    assert_eq!(code(&["/nonexistent/a.pickle", f]), Some(1));
    assert_eq!(code(&[f, "/nonexistent/b.pickle"]), Some(1));
    assert_eq!(code(&["/nonexistent/a.pickle"]), Some(1));
    assert_eq!(code(&[f, "--at-a", "noon"]), Some(2));
    assert_eq!(code(&[f, f, "--at-b", "3h"]), Some(2));
    assert_eq!(code(&[f, "--at-b", "#99999"]), Some(2));
    assert_eq!(code(&[f, f, "--device", "7"]), Some(2));
    let junk = dir.join("junk.pickle");
    std::fs::write(&junk, b"not a snapshot").expect("write");
    assert_eq!(code(&[f, p(&junk)]), Some(2));
    let bad = dir.join("missing-dir/out.svg");
    assert_eq!(code(&[f, f, "--svg", p(&bad)]), Some(1));
    assert_eq!(code(&[f, f]), Some(0));
    let o = vramscope(&["diff", f, "--at-b", "#99999"]);
    assert!(stderr(&o).contains("--at-b"), "{}", stderr(&o));
}
