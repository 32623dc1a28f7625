//! `vramscope flamegraph` and `vramscope segments` end to end: moments,
//! output to a file or a pipe, exit codes, and on every real snapshot
//! figures that agree with `vramscope summary --json`.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// A small synthetic snapshot, written once per test binary run.
fn synth(dir: &Path, extra: &[&str]) -> PathBuf {
    let path = dir.join(format!("synth{}.pickle", extra.join("")));
    let p = path.to_str().expect("utf-8 path");
    let mut args = vec!["synth", "-o", p, "--entries", "20000", "--leak", "16MiB"];
    args.extend_from_slice(extra);
    let o = vramscope(&args);
    assert!(o.status.success(), "synth failed: {}", stderr(&o));
    path
}

/// Parse with CPython's expat; `None` without python3.
fn svg_root(path: &Path) -> Option<String> {
    let o = python(
        "import sys, xml.dom.minidom as m; print(m.parse(sys.argv[1]).documentElement.tagName)",
        &[path.to_str().expect("utf-8 path")],
    )?;
    Some(String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

/// Blocks in the root frame's tooltip: `all — 1.23 GiB (100.0%), 456 blocks`.
fn root_blocks(svg: &str) -> u64 {
    let tip = svg
        .split("<title>all — ")
        .nth(1)
        .and_then(|s| s.split("</title>").next())
        .expect("root tooltip");
    let n = tip
        .rsplit(", ")
        .next()
        .and_then(|s| s.split(' ').next())
        .expect("block count");
    n.replace(',', "").parse().expect("a number")
}

#[test]
fn flamegraph_moments_and_outputs() {
    let dir = temp_dir("flame-cli");
    let snap = synth(&dir, &[]);
    let f = snap.to_str().expect("utf-8 path");
    let out = dir.join("peak.svg");
    let o = vramscope(&["flamegraph", f, "-o", out.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("at peak (event"), "{}", stderr(&o));
    let svg = std::fs::read_to_string(&out).expect("svg written");
    assert!(svg.contains("synth.pickle · device 0 · peak (event"));
    if let Some(root) = svg_root(&out) {
        assert_eq!(root, "svg");
    }
    let summary = summary_json(&snap);
    assert_eq!(
        root_blocks(&svg),
        summary["devices"][0]["peak"]["live_blocks"]
            .as_u64()
            .expect("live blocks")
    );
    // Without -o the SVG goes to a pipe.
    for at in ["end", "#100", "15ms", "peak"] {
        let o = vramscope(&["flamegraph", f, "--at", at, "--inverted", "--width", "800"]);
        assert!(o.status.success(), "--at {at}: {}", stderr(&o));
        let s = stdout(&o);
        assert!(
            s.starts_with("<?xml") && s.ends_with("</svg>\n"),
            "--at {at}"
        );
        assert!(s.contains("width=\"800\""));
    }
    let o = vramscope(&["flamegraph", f, "--title", "<b>\"A&B\"</b>"]);
    assert!(stdout(&o).contains("&lt;b&gt;&quot;A&amp;B&quot;&lt;/b&gt;"));
    assert!(!stdout(&o).contains("<b>"));
}

#[test]
fn flamegraph_and_segments_errors() {
    let dir = temp_dir("flame-cli-errors");
    let snap = synth(&dir, &["--no-time"]);
    let f = snap.to_str().expect("utf-8 path");
    let code = |args: &[&str]| vramscope(args).status.code();
    assert_eq!(code(&["flamegraph", f, "--at", "noon"]), Some(2));
    assert_eq!(code(&["flamegraph", f, "--at", "#99999999"]), Some(2));
    assert_eq!(
        code(&["flamegraph", f, "--at", "1s"]),
        Some(2),
        "no time_us"
    );
    assert_eq!(code(&["flamegraph", f, "--device", "7"]), Some(2));
    assert_eq!(code(&["flamegraph", "/nonexistent/x.pickle"]), Some(1));
    let bad_out = dir.join("missing-dir/out.svg");
    assert_eq!(
        code(&["flamegraph", f, "-o", bad_out.to_str().expect("utf-8")]),
        Some(1)
    );
    assert_eq!(code(&["segments", f, "--at", "#99999999"]), Some(2));
    assert_eq!(code(&["segments", f, "--width", "0"]), Some(2));
    assert_eq!(code(&["segments", "/nonexistent/x.pickle"]), Some(1));
    let junk = dir.join("junk.pickle");
    std::fs::write(&junk, b"not a snapshot").expect("write");
    assert_eq!(code(&["segments", junk.to_str().expect("utf-8")]), Some(2));
}

#[test]
fn segments_reconstructs_earlier_moments() {
    let dir = temp_dir("segments-cli");
    let snap = synth(&dir, &[]);
    let f = snap.to_str().expect("utf-8 path");
    let o = vramscope(&["segments", f, "--at", "peak", "--width", "30"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("· peak (event"), "{text}");
    assert!(text.contains("Reconstructed from the trace"));
    assert!(!text.contains('\x1b'), "no colour into a pipe");
    let o = vramscope(&["segments", f, "--at", "peak", "--json"]);
    let j: Value = serde_json::from_slice(&o.stdout).expect("--json is JSON");
    assert_eq!(j["reconstructed"], true);
    assert_eq!(j["unplaced_blocks"], 0);
    let peak = &summary_json(&snap)["devices"][0]["peak"];
    assert_eq!(j["event_index"], peak["event_index"]);
    let requested: u64 = j["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .flat_map(|s| s["blocks"].as_array().expect("blocks").iter())
        .filter(|b| b["state"] != "inactive")
        .map(|b| b["requested_size"].as_u64().expect("size"))
        .sum();
    assert_eq!(Some(requested), peak["allocated_bytes"].as_u64());
}

#[test]
fn real_snapshots_segments_match_the_summary() {
    let files = vramscope_testdata::real_snapshots();
    assert!(files.len() >= 7, "expected the 7 real snapshots");
    for path in &files {
        let f = path.to_str().expect("utf-8 path");
        let o = vramscope(&["segments", f, "--json"]);
        assert!(o.status.success(), "{f}: {}", stderr(&o));
        let j: Value = serde_json::from_slice(&o.stdout).expect("--json is JSON");
        let s = summary_json(path);
        let end = &s["devices"][0]["end"];
        let t = &j["totals"];
        assert_eq!(t["reserved_bytes"], end["reserved_bytes"], "{f}");
        assert_eq!(t["allocated_bytes"], end["allocated_bytes"], "{f}");
        let fr = &end["fragmentation"];
        assert_eq!(t["cached_free_bytes"], fr["cached_free_bytes"], "{f}");
        assert_eq!(t["largest_free_block"], fr["largest_free_block"], "{f}");
        assert_eq!(t["fragmentation_ratio"], fr["fragmentation_ratio"], "{f}");
        assert_eq!(
            j["segments"].as_array().map(Vec::len),
            end["segments"]["total"].as_u64().map(|n| n as usize),
            "{f}"
        );
        let o = vramscope(&["segments", f, "--no-color"]);
        assert!(o.status.success(), "{f}: {}", stderr(&o));
        assert!(stdout(&o).contains("Largest free block"), "{f}");

        let o = vramscope(&["flamegraph", f, "--at", "peak"]);
        assert!(o.status.success(), "{f}: {}", stderr(&o));
        let peak = &s["devices"][0]["peak"];
        assert_eq!(
            Some(root_blocks(&stdout(&o))),
            peak["live_blocks"].as_u64(),
            "{f}"
        );
    }
}
