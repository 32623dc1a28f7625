//! An EMA of the weights, end to end: the real CPU trainings of
//! `python/tests/scripts/ema_runs.py` (tests/fixtures/recorded/README.md),
//! the same MLP (1,323,018 fp32 parameters, AdamW) with timm's `ModelEmaV3`
//! and without an EMA.

mod common;
use common::{stdout, summary_json, vramscope};

fn peak(name: &str) -> u64 {
    let s = summary_json(&vramscope_testdata::recorded(name));
    s["devices"][0]["peak"]["allocated_bytes"]
        .as_u64()
        .expect("peak allocated")
}

/// The EMA adds exactly its copy to the real run's peak, and that is what
/// `estimate --ema` adds.
#[test]
fn the_estimates_ema_is_what_the_real_ema_added() {
    let added = peak("ema_timm.pickle") - peak("ema_none.pickle");
    assert_eq!(added, 5_292_072);
    let o = vramscope(&["estimate", "--params", "1323018", "--ema", "--json"]);
    assert!(o.status.success());
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(e["components"]["ema"].as_u64(), Some(added));
    let o = vramscope(&["estimate", "--params", "1323018", "--ema"]);
    assert!(stdout(&o).contains("EMA weights"), "{}", stdout(&o));
    // Inference has no EMA to keep: said, exit 2.
    let o = vramscope(&["estimate", "--params", "1323018", "--ema", "--inference"]);
    assert_eq!(o.status.code(), Some(2));
}

/// The summary and `categories` name the copy where the run ends.
#[test]
fn the_summary_names_the_emas_weights() {
    let path = vramscope_testdata::recorded("ema_timm.pickle");
    let o = vramscope(&["summary", path.to_str().expect("utf-8")]);
    let text = stdout(&o);
    assert!(text.contains("EMA weights 5.05 MiB"), "{text}");
    let o = vramscope(&["categories", path.to_str().expect("utf-8")]);
    let text = stdout(&o);
    assert!(text.contains("made by an EMA's code"), "{text}");
}
