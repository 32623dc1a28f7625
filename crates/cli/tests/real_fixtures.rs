//! Every real snapshot in `tests/fixtures/real` is summarised, and the
//! figures for device 0 match the reference counts of its SOURCES.md
//! (computed there with CPython's pickle): reserved and allocated at the end
//! exactly, peak allocated within 1%.

mod common;

use common::*;
use vramscope_testdata::{real, real_snapshots, reference_counts};

#[test]
fn summary_matches_reference_counts() {
    let refs = reference_counts();
    assert!(
        refs.len() >= 7,
        "expected the 7 reference rows, found {}",
        refs.len()
    );
    for r in &refs {
        let j = summary_json(&real(&r.file));
        let d = &j["devices"][0];
        assert_eq!(d["device"], 0, "{}", r.file);
        assert_eq!(
            d["end"]["reserved_bytes"].as_u64(),
            Some(r.reserved_end),
            "{}: reserved",
            r.file
        );
        assert_eq!(
            d["end"]["allocated_bytes"].as_u64(),
            Some(r.allocated_end),
            "{}: allocated",
            r.file
        );
        assert_eq!(
            d["end"]["segments"]["total"].as_u64(),
            Some(r.segments),
            "{}: segments",
            r.file
        );
        assert_eq!(
            d["events"]["total"].as_u64(),
            Some(r.trace_entries),
            "{}: entries",
            r.file
        );
        let peak = d["peak"]["allocated_bytes"].as_u64().expect("peak");
        let err = (peak as f64 - r.peak_allocated as f64).abs() / r.peak_allocated as f64;
        assert!(
            err <= 0.01,
            "{}: peak {peak} vs reference {} ({:.3}% off)",
            r.file,
            r.peak_allocated,
            err * 100.0
        );
        // The peak's sites account for what was alive there.
        let sites: u64 = d["peak"]["top_sites"]
            .as_array()
            .expect("sites")
            .iter()
            .map(|s| s["bytes"].as_u64().unwrap_or(0))
            .sum();
        assert!(
            sites <= peak.max(r.allocated_end) + (1 << 30),
            "{}: sites sum {sites} exceeds peak",
            r.file
        );
    }
}

#[test]
fn text_summary_of_every_real_snapshot() {
    for path in real_snapshots() {
        let o = vramscope(&["summary", path.to_str().expect("utf-8")]);
        assert!(o.status.success(), "{}: {}", path.display(), stderr(&o));
        let out = stdout(&o);
        assert!(out.contains("Device 0"), "{}: {out}", path.display());
        assert!(out.contains("Peak allocated"), "{}: {out}", path.display());
    }
}

#[test]
fn legacy_and_user_sites_are_named() {
    // PyTorch 2.0 layout: blocks carry `history`; the allocation site comes from it.
    let j = summary_json(&real("yiyi_flexgen_opt1.3b_oom_legacy_pt20.pickle"));
    assert_eq!(j["source"]["legacy_blocks"], true);
    let top = &j["devices"][0]["peak"]["top_sites"][0];
    assert!(
        top["file"]
            .as_str()
            .unwrap_or("")
            .ends_with("flexgen/pytorch_backend.py"),
        "{top}"
    );
    // Windows paths: user frames are found past site-packages.
    let j = summary_json(&real("magma27_cs336_windows.pickle"));
    let site = j["devices"][0]["peak"]["top_sites"][0]["file"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        site.contains("cs336_basics") && !site.contains("site-packages"),
        "{site}"
    );
}
