//! Leak analysis on synthetic runs with a known planted leak, and on every
//! real snapshot in ../shared/fixtures/real (no crash; the iterations and
//! findings that make sense for each are pinned).

use std::path::PathBuf;

use vramscope_analysis::iterations::IterationSource;
use vramscope_analysis::leaks::{find_leaks, FindingKind, LeakOptions, Severity};
use vramscope_snapshot::{decode_bytes, load, Snapshot};
use vramscope_synth::{write_snapshot, SynthOptions};

fn synth(leak: u64, seed: u64) -> (Snapshot, vramscope_synth::SynthTruth) {
    let mut buf = Vec::new();
    let opts = SynthOptions {
        entries: 60_000,
        iterations: 12,
        seed,
        leak_bytes_per_iter: leak,
        ..Default::default()
    };
    let truth = write_snapshot(&opts, &mut buf).expect("synth");
    (
        decode_bytes(&buf, &Default::default()).expect("decode"),
        truth,
    )
}

fn opts() -> LeakOptions {
    LeakOptions {
        read_sources: false,
        ..LeakOptions::default()
    }
}

#[test]
fn planted_leak_is_found_with_its_site_and_rate() {
    const LEAK: u64 = 8 << 20;
    let (snap, truth) = synth(LEAK, 7);
    let r = find_leaks(&snap, 0, &opts());
    assert_eq!(r.iteration_source, IterationSource::ProfilerStep);
    assert!(
        r.iterations.len() >= 10,
        "{} iterations",
        r.iterations.len()
    );
    let leaks: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Leak)
        .collect();
    assert_eq!(leaks.len(), 1, "{:#?}", r.findings);
    let f = leaks[0];
    assert_eq!(f.kind, FindingKind::Growth);
    assert!(
        f.sites[0]
            .site
            .ends_with("train.py:74 in accumulate_history"),
        "{}",
        f.sites[0].site
    );
    // The allocator rounds each leaked tensor up to 512 bytes.
    let per = f.bytes_per_iteration;
    assert!(per >= LEAK as f64 && per < LEAK as f64 + 512.0, "{per}");
    // Everything leaked in the window is still alive at the end.
    assert!(f.sites[0].live_bytes.last().copied().unwrap_or(0) <= truth.leaked_bytes + 512 * 64);
    assert!(f.sites[0].outliving_blocks >= 8);
    assert!(r.leaks_found);
    assert!(
        (r.growth_per_iteration - per).abs() < 1.0,
        "{} vs {per}",
        r.growth_per_iteration
    );
}

#[test]
fn clean_run_has_no_leak() {
    let (snap, _) = synth(0, 7);
    let r = find_leaks(&snap, 0, &opts());
    assert!(!r.leaks_found, "{:#?}", r.findings);
    assert!(
        r.findings.iter().all(|f| f.severity == Severity::Benign),
        "{:#?}",
        r.findings
    );
    // The synthetic model's optimizer state appears in the first step.
    assert!(r
        .findings
        .iter()
        .any(|f| f.kind == FindingKind::OneTime && f.title.starts_with("optimizer state")));
}

fn real(name: &str) -> Option<Snapshot> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/real");
    let p = dir.join(name);
    if !p.exists() {
        eprintln!("skipped: {} is absent", p.display());
        return None;
    }
    Some(load(&p, &Default::default()).expect("real fixture loads"))
}

#[test]
fn real_fixtures_iterations_and_findings() {
    // (file, iteration source, iterations found)
    let expect: &[(&str, Option<IterationSource>, usize)] = &[
        (
            "decomfl_opt_zo_fl_memory.pickle",
            Some(IterationSource::Annotation(
                "Optimizer.zero_grad#SGD.zero_grad".into(),
            )),
            2,
        ),
        (
            "nothanmin_cs336_999segments.pickle",
            Some(IterationSource::OptimizerStep),
            2,
        ),
        // One training step: its 24 layers repeat, but memory does not come
        // back down between them, so they are not taken for iterations.
        (
            "wedsonlin_medium_1024_training_memory_snapshot.pickle",
            None,
            0,
        ),
        ("magma27_cs336_windows.pickle", None, 0),
        // Inference: each of the 24 layers frees its temporaries; the
        // repetition is found, and nothing grows.
        (
            "wedsonlin_medium_512_inference_memory_snapshot.pickle",
            Some(IterationSource::RepeatedPattern),
            24,
        ),
        ("yiyi_flexgen_opt1.3b_legacy_pt20.pickle", None, 0),
        ("yiyi_flexgen_opt1.3b_oom_legacy_pt20.pickle", None, 0),
    ];
    for (name, source, n) in expect {
        let Some(snap) = real(name) else { continue };
        for d in snap.devices() {
            let r = find_leaks(&snap, d, &opts());
            serde_json::to_string(&r).expect("serialises");
            if d != 0 {
                continue;
            }
            let source = source.clone().unwrap_or(IterationSource::None);
            assert_eq!(r.iteration_source, source, "{name}");
            assert_eq!(r.iterations.len(), *n, "{name}");
            // None of these runs leaks; with fewer than 3 complete
            // iterations the analysis says it cannot tell.
            assert!(!r.leaks_found, "{name}: {:#?}", r.findings);
            if r.iterations.iter().filter(|i| i.range.complete).count() < 3 {
                assert!(!r.notes.is_empty(), "{name}: a note explains the limit");
            }
        }
    }
}
