//! The advice on small traces written by hand: the program's own
//! `torch.cuda.empty_cache()` calls.

use vramscope_snapshot::decode_bytes;

const MIB: u64 = 1 << 20;

const EMPTY_CACHE: &str = r#"[{"filename":"/usr/lib/python3/site-packages/torch/cuda/memory.py","line":222,"name":"empty_cache"},{"filename":"train.py","line":9,"name":"main"}]"#;
const TRAIN: &str = r#"[{"filename":"train.py","line":8,"name":"main"}]"#;

fn trace(entries: &[(&str, u64, u64, &str)]) -> vramscope_snapshot::Snapshot {
    let json = vramscope_testdata::hand_trace(entries);
    decode_bytes(json.as_bytes(), &Default::default()).expect("decodes")
}

/// A program that calls torch.cuda.empty_cache() after each step: the
/// advice lists removing the calls among the changes that lower no peak
/// (a kept cache only holds more), with what the calls cost in device
/// calls: one cudaMalloc for the whole run instead of one a step.
#[test]
fn the_programs_empty_cache_calls_are_priced_in_device_calls() {
    let a = 1 << 32;
    let mut entries = Vec::new();
    for _ in 0..3 {
        entries.extend([
            ("segment_alloc", a, 30 * MIB, TRAIN),
            ("alloc", a, 30 * MIB, TRAIN),
            ("free_requested", a, 30 * MIB, TRAIN),
            ("free_completed", a, 30 * MIB, TRAIN),
            ("segment_free", a, 30 * MIB, EMPTY_CACHE),
        ]);
    }
    let snap = trace(&entries);
    let advice = vramscope_advise::advise(&snap, &Default::default()).expect("advice");
    let row = advice
        .no_gain
        .iter()
        .chain(&advice.advice)
        .find(|r| r.change.contains("empty_cache"))
        .expect("an empty_cache row");
    assert!(
        advice.no_gain.iter().any(|r| std::ptr::eq(r, row)),
        "lowers no peak: {row:?}"
    );
    assert_eq!(row.peak_reserved, 30 * MIB);
    assert!(
        row.change
            .contains("3 torch.cuda.empty_cache() calls (train.py:9 in main)"),
        "{}",
        row.change
    );
    assert!(
        row.how
            .contains("1 cudaMalloc and 0 cudaFree calls in the allocator model against 3 and 3"),
        "{}",
        row.how
    );
}
