//! Every real snapshot in `../shared/fixtures/real` is summarised, and the
//! figures for device 0 match the reference counts of its SOURCES.md
//! (computed there with CPython's pickle): reserved and allocated at the end
//! exactly, peak allocated within 1%.

mod common;

use common::*;

struct Reference {
    file: String,
    segments: u64,
    reserved: u64,
    allocated: u64,
    entries: u64,
    peak: u64,
}

/// Rows of the "Reference counts per snapshot" table.
fn references(sources: &str) -> Vec<Reference> {
    let table = sources
        .split("## Reference counts per snapshot")
        .nth(1)
        .expect("SOURCES.md has a reference table");
    table
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains(".pickle"))
        .map(|l| {
            let c: Vec<&str> = l.split('|').map(str::trim).collect();
            let n = |i: usize| {
                c[i].parse::<u64>()
                    .unwrap_or_else(|_| panic!("number in column {i} of {l}"))
            };
            Reference {
                file: c[1].to_owned(),
                segments: n(2),
                reserved: n(3),
                allocated: n(4),
                entries: n(5),
                peak: n(6),
            }
        })
        .collect()
}

#[test]
fn summary_matches_reference_counts() {
    let Some(dir) = real_fixtures() else { return };
    let refs =
        references(&std::fs::read_to_string(dir.join("SOURCES.md")).expect("read SOURCES.md"));
    assert!(
        refs.len() >= 7,
        "expected the 7 reference rows, found {}",
        refs.len()
    );
    for r in &refs {
        let j = summary_json(&dir.join(&r.file));
        let d = &j["devices"][0];
        assert_eq!(d["device"], 0, "{}", r.file);
        assert_eq!(
            d["end"]["reserved_bytes"].as_u64(),
            Some(r.reserved),
            "{}: reserved",
            r.file
        );
        assert_eq!(
            d["end"]["allocated_bytes"].as_u64(),
            Some(r.allocated),
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
            Some(r.entries),
            "{}: entries",
            r.file
        );
        let peak = d["peak"]["allocated_bytes"].as_u64().expect("peak");
        let err = (peak as f64 - r.peak as f64).abs() / r.peak as f64;
        assert!(
            err <= 0.01,
            "{}: peak {peak} vs reference {} ({:.3}% off)",
            r.file,
            r.peak,
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
            sites <= peak.max(r.allocated) + (1 << 30),
            "{}: sites sum {sites} exceeds peak",
            r.file
        );
    }
}

#[test]
fn text_summary_of_every_real_snapshot() {
    let Some(dir) = real_fixtures() else { return };
    for entry in std::fs::read_dir(&dir).expect("list fixtures") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "pickle") {
            let o = vramscope(&["summary", path.to_str().expect("utf-8")]);
            assert!(o.status.success(), "{}: {}", path.display(), stderr(&o));
            let out = stdout(&o);
            assert!(out.contains("Device 0"), "{}: {out}", path.display());
            assert!(out.contains("Peak allocated"), "{}: {out}", path.display());
        }
    }
}

#[test]
fn legacy_and_user_sites_are_named() {
    let Some(dir) = real_fixtures() else { return };
    // PyTorch 2.0 layout: blocks carry `history`; the allocation site comes from it.
    let j = summary_json(&dir.join("yiyi_flexgen_opt1.3b_oom_legacy_pt20.pickle"));
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
    let j = summary_json(&dir.join("magma27_cs336_windows.pickle"));
    let site = j["devices"][0]["peak"]["top_sites"][0]["file"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        site.contains("cs336_basics") && !site.contains("site-packages"),
        "{site}"
    );
}
